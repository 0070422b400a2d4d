/* gemm_prefill.c - the prefill's GEMMs at batch-32 prefill sizes (M = 32 prompts x 128 tokens =
 * 4096 rows) on the Linear shapes of opt-1.3b and TinyLlama-1.1B: fg's kernels for each ISA it
 * has against OpenBLAS sgemm and, when the build found it, oneDNN (the issue-43 ceiling) on the
 * same shapes, in interleaved rounds (each round runs every path once on every shape, so a slow
 * minute of this shared machine hits them all).
 *
 * usage: bench_gemm_prefill [--m M] [--rounds R] [--model opt|llama|both] [--paths a,b,...]
 * Paths (all one thread; weights and x random, the same numbers for every path):
 *   sgemm      OpenBLAS sgemm on the weights decoded to f32 (prepacked nothing: what the engine
 *              did before the panel GEMMs)
 *   w16-avx2   fg_w16_gemm, F16 weights, the AVX2 kernel (x packing included)
 *   w16-avx512 fg_w16_gemm, F16 weights, the AVX-512 kernel (x packing included)
 *   w16-bf16   fg_w16_gemm_bf16 (fg-infer --compute bf16; AVX512-BF16 CPUs): x and F16 weights
 *              rounded to bfloat16 (x packed as pairs once, included), VDPBF16PS
 *   q4-avx2    fg_quant_gemm_panel, Q4 weights (groups of 64 along k, F16 scales), the AVX2
 *              VPMADDUBSW panel kernel (activation quantization included)
 *   q4-vnni512 the same with the AVX512-VNNI panel kernel (on a CPU with AMX-INT8: the AMX tile
 *              kernel, quant/gemm_amx.c, unless FG_QUANT_AMX=0; the first line says which)
 *   q8-avx512  fg_quant_gemm_panel, Q8 weights (groups of 64, F16 scales) at ISA avx512: the AMX
 *              tile kernel where it runs, else fg_quant_gemm's VNNI row kernels on the rows
 *   dnnl-f32   oneDNN dnnl_sgemm on f32 weights
 *   dnnl-bf16  oneDNN matmul, bf16 x and weights (weights reordered to oneDNN's blocked format
 *              once, outside the timing), f32 out: the fastest 16-bit path oneDNN has here
 *              (left out where oneDNN refuses it: no bf16 matmul on an AVX2-only CPU)
 *   dnnl-u8s8  oneDNN dnnl_gemm_u8s8s32 (int8 x int8 -> int32; the int8 GEMM ceiling: no
 *              scales, no groups)
 * (FG_PREFILL_AVX512=0 or FG_QUANT_VNNI=0 in the environment make the "avx512"/"vnni512" paths
 * run the AVX2 kernels, as in fg-infer.) Paths the CPU or the build lacks are left out.
 * Figures are GFLOP/s (2 M N K a call) timed with the thread's CPU time (a call that lost its
 * core to another process is not charged for the wait), one call per path, shape and round; the
 * summary is each path's median over the rounds and FLOP-weighted mix over the model's shapes,
 * and its ratio to sgemm. oneDNN runs on one OpenMP thread (omp_set_num_threads(1)).
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef FG_BENCH_DNNL
#include <dnnl.h>
void omp_set_num_threads(int n); /* libgomp, which Debian's libdnnl runs on */
#endif

#include "fg_cpu.h"
#include "quant.h"

enum { P_SGEMM, P_W16_AVX2, P_W16_AVX512, P_W16_BF16, P_Q4_AVX2, P_Q4_VNNI512, P_Q8_AVX512,
       P_DNNL_F32, P_DNNL_BF16, P_DNNL_U8S8, P_N };
static const char *const path_name[P_N] = {"sgemm", "w16-avx2", "w16-avx512", "w16-bf16",
                                           "q4-avx2", "q4-vnni512", "q8-avx512", "dnnl-f32",
                                           "dnnl-bf16", "dnnl-u8s8"};

typedef struct shape { const char *name; uint64_t n, k; unsigned per_layer; } shape;
static const shape opt_shapes[] = {{"opt q/k/v/o", 2048, 2048, 4}, {"opt fc1", 8192, 2048, 1},
                                   {"opt fc2", 2048, 8192, 1}};
static const shape llama_shapes[] = {{"llama q/o", 2048, 2048, 2}, {"llama k/v", 256, 2048, 2},
                                     {"llama gate/up", 5632, 2048, 2},
                                     {"llama down", 2048, 5632, 1}};

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_gemm_prefill: %s: %s\n", what, msg);
    exit(1);
}

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p)
        die("alloc", "out of memory");
    memset(p, 0, (n + 63) / 64 * 64);
    return p;
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t g_s = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    g_s ^= g_s << 13, g_s ^= g_s >> 7, g_s ^= g_s << 17;
    return (float)((double)(g_s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* One shape's operands in every form the paths take. */
typedef struct opnd {
    uint64_t m, n, k;
    float *x, *wf, *y, *xp, *panel;
    uint16_t *w16;
    fg_codec c;
    fg_qview v;
    uint8_t *q4;
    size_t q4len;
    void *actbuf;
    fg_quant_act act;
    fg_codec c8;               /* Q8 (q8-avx512 only) */
    fg_qview v8;
    uint8_t *q8;
    size_t q8len;
    void *act8buf;
    fg_quant_act act8;
    uint8_t *xu8;
    int8_t *ws8;
    int32_t *yi;
#ifdef FG_BENCH_DNNL
    dnnl_primitive_t mm;
    dnnl_memory_t mx, mw, my;
    dnnl_stream_t st;
#endif
} opnd;

#define PANEL_BYTES (8u << 20)

#ifdef FG_BENCH_DNNL
static dnnl_engine_t g_eng;
#define DN(call) do { dnnl_status_t s_ = (call); if (s_ != dnnl_success) die(#call, "failed"); } while (0)

/* A bf16 matmul y[m, n] = x[m, k] W[n, k]^T with W reordered to the format oneDNN picks. */
static void dnnl_bf16_init(opnd *o)
{
    dnnl_memory_desc_t xd, wd, wany, yd, wplain;
    dnnl_dims_t dx = {(dnnl_dim_t)o->m, (dnnl_dim_t)o->k}, dw = {(dnnl_dim_t)o->k, (dnnl_dim_t)o->n};
    dnnl_dims_t dy = {(dnnl_dim_t)o->m, (dnnl_dim_t)o->n};
    DN(dnnl_memory_desc_init_by_tag(&xd, 2, dx, dnnl_bf16, dnnl_ab));
    DN(dnnl_memory_desc_init_by_tag(&wany, 2, dw, dnnl_bf16, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&wplain, 2, dw, dnnl_f32, dnnl_ba));
    DN(dnnl_memory_desc_init_by_tag(&yd, 2, dy, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    DN(dnnl_matmul_desc_init(&md, &xd, &wany, NULL, &yd));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &md, NULL, g_eng, NULL));
    wd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    DN(dnnl_primitive_create(&o->mm, pd));
    DN(dnnl_stream_create(&o->st, g_eng, dnnl_stream_default_flags));
    DN(dnnl_memory_create(&o->mx, &xd, g_eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&o->mw, &wd, g_eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&o->my, &yd, g_eng, o->y));
    dnnl_memory_t src; /* W [n, k] f32 row-major is W^T [k, n] in "ba" */
    DN(dnnl_memory_create(&src, &wplain, g_eng, o->wf));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    DN(dnnl_reorder_primitive_desc_create(&rpd, &wplain, g_eng, &wd, g_eng, NULL));
    DN(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, o->mw}};
    DN(dnnl_primitive_execute(r, o->st, 2, ra));
    DN(dnnl_stream_wait(o->st));
    dnnl_primitive_destroy(r), dnnl_primitive_desc_destroy(rpd), dnnl_memory_destroy(src);
    dnnl_primitive_desc_destroy(pd);
}

/* Whether this CPU's oneDNN has a bf16 matmul at all (2.6 has none for AVX2-only CPUs: the
 * primitive descriptor is refused), tried on a small shape. */
static int dnnl_bf16_supported(void)
{
    dnnl_memory_desc_t xd, wd, yd;
    dnnl_dims_t d = {64, 64};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if (dnnl_memory_desc_init_by_tag(&xd, 2, d, dnnl_bf16, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&wd, 2, d, dnnl_bf16, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&yd, 2, d, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &xd, &wd, NULL, &yd) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, g_eng, NULL) != dnnl_success)
        return 0;
    dnnl_primitive_desc_destroy(pd);
    return 1;
}

/* x to bf16 (part of the timed call, as fg's paths convert or quantize x in theirs), then the
 * matmul. */
static void dnnl_bf16_run(opnd *o)
{
    uint16_t *xb;
    DN(dnnl_memory_get_data_handle(o->mx, (void **)&xb));
    for (uint64_t i = 0; i < o->m * o->k; i++) { /* round to nearest even */
        uint32_t u;
        memcpy(&u, &o->x[i], 4);
        xb[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
    }
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, o->mx}, {DNNL_ARG_WEIGHTS, o->mw},
                            {DNNL_ARG_DST, o->my}};
    DN(dnnl_primitive_execute(o->mm, o->st, 3, a));
    DN(dnnl_stream_wait(o->st));
}
#endif

static void opnd_init(opnd *o, uint64_t m, const shape *s, const int *on)
{
    fg_err err;
    o->m = m, o->n = s->n, o->k = s->k;
    uint64_t n = s->n, k = s->k;
    o->x = xalloc(m * k * 4), o->wf = xalloc(n * k * 4), o->y = xalloc(m * n * 4);
    o->w16 = xalloc(n * k * 2);
    o->xp = xalloc(fg_xpack_floats(m, k) * 4), o->panel = xalloc(PANEL_BYTES);
    for (uint64_t i = 0; i < m * k; i++)
        o->x[i] = frand();
    for (uint64_t i = 0; i < n * k; i++)
        o->wf[i] = 0.05f * frand();
    fg_f32_to_f16(o->wf, o->w16, n * k, FG_QUANT_ISA_AUTO);
    fg_f16_to_f32(o->w16, o->wf, n * k, FG_QUANT_ISA_AUTO); /* every path on the same numbers */
    o->c = fg_codec_quant(4, 64, 1);
    uint64_t dims[2] = {n, k};
    size_t ab;
    if (fg_codec_qview(&o->c, 2, dims, n, &o->v, &err) ||
        fg_quant_chunk_bytes(&o->v, &o->q4len, &err))
        die("q4 view", err.msg);
    o->q4 = xalloc(o->q4len);
    if (fg_quant_encode(&o->c, &o->v, o->wf, FG_CODEC_F32, 0, o->q4, o->q4len, FG_QUANT_ISA_AUTO,
                        &err) ||
        fg_quant_act_size(&o->c, m, k, 64, &ab, &err))
        die("q4 encode", err.msg);
    o->actbuf = xalloc(ab);
    if (fg_quant_act_init(&o->act, &o->c, m, k, 64, o->actbuf, ab, &err))
        die("act", err.msg);
    if (on[P_Q8_AVX512]) {
        o->c8 = fg_codec_quant(8, 64, 1);
        if (fg_codec_qview(&o->c8, 2, dims, n, &o->v8, &err) ||
            fg_quant_chunk_bytes(&o->v8, &o->q8len, &err))
            die("q8 view", err.msg);
        o->q8 = xalloc(o->q8len);
        if (fg_quant_encode(&o->c8, &o->v8, o->wf, FG_CODEC_F32, 0, o->q8, o->q8len,
                            FG_QUANT_ISA_AUTO, &err) ||
            fg_quant_act_size(&o->c8, m, k, 64, &ab, &err))
            die("q8 encode", err.msg);
        o->act8buf = xalloc(ab);
        if (fg_quant_act_init(&o->act8, &o->c8, m, k, 64, o->act8buf, ab, &err))
            die("act q8", err.msg);
    }
    if (on[P_DNNL_U8S8]) {
        o->xu8 = xalloc(m * k), o->ws8 = xalloc(n * k), o->yi = xalloc(m * n * 4);
        for (uint64_t i = 0; i < m * k; i++)
            o->xu8[i] = (uint8_t)(128 + 127 * o->x[i]);
        for (uint64_t i = 0; i < n * k; i++)
            o->ws8[i] = (int8_t)(o->wf[i] * 2000);
    }
#ifdef FG_BENCH_DNNL
    if (on[P_DNNL_BF16])
        dnnl_bf16_init(o);
#endif
}

static void opnd_free(opnd *o)
{
    free(o->x), free(o->wf), free(o->y), free(o->w16), free(o->xp), free(o->panel);
    free(o->q4), free(o->actbuf), free(o->xu8), free(o->ws8), free(o->yi);
    free(o->q8), free(o->act8buf);
#ifdef FG_BENCH_DNNL
    if (o->mm) {
        dnnl_primitive_destroy(o->mm), dnnl_stream_destroy(o->st);
        dnnl_memory_destroy(o->mx), dnnl_memory_destroy(o->mw), dnnl_memory_destroy(o->my);
    }
#endif
}

/* One call of path p on o; returns its CPU seconds. */
static double run_path(int p, opnd *o)
{
    fg_err err;
    int rc = 0;
    fg_quant_isa isa = p == P_W16_AVX512 || p == P_Q4_VNNI512 || p == P_Q8_AVX512
                           ? FG_QUANT_ISA_AVX512
                           : FG_QUANT_ISA_AVX2;
    double t = cpu_now();
    int m = (int)o->m, n = (int)o->n, k = (int)o->k;
    switch (p) {
    case P_SGEMM:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, o->x, k, o->wf, k,
                    0.0f, o->y, n);
        break;
    case P_W16_AVX2:
    case P_W16_AVX512:
        fg_xpack(o->x, o->m, o->k, o->k, o->xp, 0, UINT64_MAX);
        rc = fg_w16_gemm(FG_CODEC_F16, o->w16, o->n, o->k, o->xp, o->m, o->k, 0, o->m, NULL,
                         o->y, o->n, o->panel, PANEL_BYTES / 4, isa, &err);
        break;
    case P_W16_BF16: /* x rounded and packed as pairs (half fg_xpack's bytes: o->xp holds it) */
        fg_xpack_bf16(o->x, o->m, o->k, o->k, (uint32_t *)o->xp, 0, UINT64_MAX);
        rc = fg_w16_gemm_bf16(FG_CODEC_F16, o->w16, o->n, o->k, (const uint32_t *)o->xp, o->m,
                              o->k, 0, o->m, NULL, o->y, o->n, o->panel, PANEL_BYTES / 4,
                              FG_QUANT_ISA_AVX512, &err);
        break;
    case P_Q4_AVX2:
    case P_Q4_VNNI512:
        rc = fg_quant_act_q8(&o->act, o->x, 0, isa, &err);
        if (!rc)
            rc = fg_quant_gemm_panel(&o->c, &o->v, o->q4, o->q4len, 0, o->n, &o->act, 0, o->m,
                                     NULL, o->y, o->n, o->panel, PANEL_BYTES, isa, &err);
        break;
    case P_Q8_AVX512:
        rc = fg_quant_act_q8(&o->act8, o->x, 0, isa, &err);
        if (!rc)
            rc = fg_quant_gemm_panel(&o->c8, &o->v8, o->q8, o->q8len, 0, o->n, &o->act8, 0,
                                     o->m, NULL, o->y, o->n, o->panel, PANEL_BYTES, isa, &err);
        break;
#ifdef FG_BENCH_DNNL
    case P_DNNL_F32:
        DN(dnnl_sgemm('N', 'T', m, n, k, 1.0f, o->x, k, o->wf, k, 0.0f, o->y, n));
        break;
    case P_DNNL_BF16:
        dnnl_bf16_run(o);
        break;
    case P_DNNL_U8S8: {
        int32_t co = 0;
        DN(dnnl_gemm_u8s8s32('N', 'T', 'F', m, n, k, 1.0f, o->xu8, k, 0, o->ws8, k, 0, 0.0f,
                             o->yi, n, &co));
        break;
    }
#endif
    default:
        break;
    }
    if (rc)
        die(path_name[p], err.msg);
    return cpu_now() - t;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Paths this build and CPU run, filtered by the --paths list (NULL: all). */
static void pick_paths(const char *list, int *on)
{
    for (int p = 0; p < P_N; p++) {
        on[p] = !list || strstr(list, path_name[p]) != NULL;
#ifndef FG_BENCH_DNNL
        if (p >= P_DNNL_F32)
            on[p] = 0;
#endif
        if ((p == P_W16_AVX512 || p == P_Q4_VNNI512 || p == P_Q8_AVX512) &&
            !fg_quant_isa_supported(FG_QUANT_ISA_AVX512))
            on[p] = 0;
        if (p == P_Q4_VNNI512 && !(fg_cpu_features() & FG_CPU_AVX512VNNI))
            on[p] = 0;
        if (p == P_W16_BF16 && !fg_w16_gemm_bf16_fast())
            on[p] = 0;
    }
}

static void run_model(const char *model, const shape *sh, int ns, uint64_t m, int rounds,
                      const int *on)
{
    double *g = calloc((size_t)ns * P_N * rounds, sizeof *g);
    if (!g)
        die("alloc", "out of memory");
    printf("%s, M = %llu, one thread, GFLOP/s (CPU time), rounds interleaved\n", model,
           (unsigned long long)m);
    for (int r = 0; r < rounds; r++)
        for (int s = 0; s < ns; s++) {
            opnd o = {0};
            opnd_init(&o, m, &sh[s], on);
            double f = 2.0 * m * sh[s].n * sh[s].k / 1e9;
            printf("  round %d %-14s", r + 1, sh[s].name);
            for (int p = 0; p < P_N; p++)
                if (on[p]) {
                    double v = f / run_path(p, &o);
                    g[((size_t)s * P_N + p) * rounds + r] = v;
                    printf(" %s %6.1f", path_name[p], v);
                }
            printf("\n");
            fflush(stdout);
            opnd_free(&o);
        }
    double base = 0;
    printf("  median of %d rounds, FLOP-weighted layer mix:\n", rounds);
    for (int p = 0; p < P_N; p++) {
        if (!on[p])
            continue;
        double flop = 0, secs = 0;
        printf("    %-11s", path_name[p]);
        for (int s = 0; s < ns; s++) {
            double *v = g + ((size_t)s * P_N + p) * rounds, f = 2.0 * sh[s].n * sh[s].k *
                                                                 sh[s].per_layer;
            qsort(v, (size_t)rounds, sizeof *v, cmp_d);
            double med = rounds % 2 ? v[rounds / 2] : (v[rounds / 2 - 1] + v[rounds / 2]) / 2;
            printf(" %s %6.1f,", sh[s].name, med);
            flop += f, secs += f / med;
        }
        double mix = flop / secs;
        if (p == P_SGEMM)
            base = mix;
        printf(" mix %6.1f", mix);
        if (base > 0)
            printf(" (%.2fx sgemm)", mix / base);
        printf("\n");
    }
    free(g);
}

int main(int argc, char **argv)
{
    uint64_t m = 4096;
    int rounds = 3;
    const char *model = "both", *paths = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--m") && i + 1 < argc)
            m = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--paths") && i + 1 < argc)
            paths = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gemm_prefill [--m M] [--rounds R] "
                            "[--model opt|llama|both] [--paths a,b,...]\n");
            return 2;
        }
    }
    if (!m || m > 65536 || rounds < 1 || rounds > 100) {
        fprintf(stderr, "bench_gemm_prefill: --m 1..65536, --rounds 1..100\n");
        return 2;
    }
    int on[P_N];
    pick_paths(paths, on);
    /* Q8 takes the panel path only through the AMX kernel (fg_quant_gemm_panel_fast; this asks
     * for it, which runs its first-use self-check) */
    fg_codec q8 = fg_codec_quant(8, 64, 1);
    int amx = fg_quant_isa_default() == FG_QUANT_ISA_AVX512 && fg_quant_gemm_panel_fast(&q8);
    printf("int8 panel kernel at ISA avx512: %s\n",
           amx ? "AMX-INT8 tiles (q4-vnni512 and q8-avx512; FG_QUANT_AMX=0 for the others)"
               : fg_cpu_features() & FG_CPU_AMX_INT8 ? "not AMX (FG_QUANT_AMX=0 or its self-check failed)"
                                                     : "no AMX-INT8 on this CPU");
    openblas_set_num_threads(1);
#ifdef FG_BENCH_DNNL
    omp_set_num_threads(1);
    DN(dnnl_engine_create(&g_eng, dnnl_cpu, 0));
    if (on[P_DNNL_BF16] && !dnnl_bf16_supported()) {
        printf("(dnnl-bf16 left out: oneDNN has no bf16 matmul on this CPU)\n");
        on[P_DNNL_BF16] = 0;
    }
#endif
    if (!strcmp(model, "opt") || !strcmp(model, "both"))
        run_model("opt-1.3b", opt_shapes, 3, m, rounds, on);
    if (!strcmp(model, "llama") || !strcmp(model, "both"))
        run_model("TinyLlama-1.1B", llama_shapes, 4, m, rounds, on);
    return 0;
}
