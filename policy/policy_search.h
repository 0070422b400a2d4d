/* policy_search.h - FlexGen's policy search for this engine: a calibration of the machine
 * measured through fg's own code paths, the cost model of the paper's Appendix A.3 adapted to
 * the engine's schedule (engine/schedule.c), and the search: for each enumerated block
 * (gbs x ngb) and placement of the KV cache and activations, a linear program over the
 * placement fractions solved with GLPK, every answer checked against the memory plan
 * (engine/plan.h) that the engine allocates by.
 *
 * Lifecycle: fg_calib_load (or fg_calib_measure + fg_calib_save) once; fg_policy_model_build
 * from a store; fg_policy_search / fg_policy_predict any number of times; fg_policy_model_free.
 * Everything here but fg_calib_measure and the file functions is pure (no I/O, no clock).
 */
#ifndef FG_POLICY_SEARCH_H
#define FG_POLICY_SEARCH_H

#include <stdint.h>
#include <stdio.h>

#include "fg_error.h"
#include "backend.h"
#include "plan.h"
#include "model_open.h"
#include "plan_model.h"
#include "policy.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- calibration ---- */

#define FG_CALIB_VERSION 7
#define FG_CALIB_NM 9 /* row counts M the GEMM rate is measured at: 1, 2, 4, ..., 256 */

typedef struct fg_calib {
    int version;               /* FG_CALIB_VERSION */
    char machine[192];         /* "model name x cores" of /proc/cpuinfo (fg_calib_machine) */
    int threads;               /* compute threads it was measured with */
    int quick;                 /* measured in quick mode (fewer, shorter samples) */
    double disk_read, disk_write; /* bytes/s through the pager (4 MiB chunks, O_DIRECT) */
    double mem_read;           /* bytes/s of a plain read loop from RAM (fg_membw.h, the median
                                  pass, `threads` threads): the roofline of a decode step that
                                  streams the weights; 0 in a file written before it was kept */
    double dec_f16, dec_q4;    /* f32 values/s the f16 and q4 -> f32 decoders produce */
    uint32_t m[FG_CALIB_NM];   /* row counts */
    double gflops[FG_CALIB_NM];/* the backend's linear at m[i] rows (f16 weights 2048 x 2048 in
                                  4 MiB pieces, read from RAM, decoding included) */
    double gflops_i8[FG_CALIB_NM]; /* the same on Q4 weights (groups of 64 along the input axis,
                                  F16 min/scale: fg-convert --compress-weight --group-axis 1)
                                  under --compute int8: activations quantized, integer kernels */
    double gflops_bf16[FG_CALIB_NM]; /* the f16 weights' again under --compute bf16 (the
                                  bfloat16 GEMM past 48 rows on a CPU with AVX512-BF16; gflops
                                  copied on a CPU without it, where bf16 computes as f32) */
    double attn_s, attn_q4_s;  /* seconds per query x key x KV width: f32 and 4-bit cache */
    double overlap;            /* share of the shorter of reading / computing hidden when both
                                  run at once: 1 perfect, 0 none */
    double seconds;            /* how long the measurement took */
} fg_calib;

/* This machine's identity, as written in calibration files. */
void fg_calib_machine(char *buf, size_t cap);

/* Measure this machine (threads: 0 = every CPU) through the pager, the quantizers and the CPU
 * backend. The disk test writes and reads a temporary file in dir (removed before return).
 * quick: a few seconds instead of up to a minute (tests). Progress on log when it is a
 * terminal (NULL: none). */
int fg_calib_measure(const char *dir, int threads, int quick, FILE *log, fg_calib *out,
                     fg_err *err);

/* The default file: $XDG_CACHE_HOME/fg/calibration.json, else $HOME/.cache/fg/... */
int fg_calib_default_path(char *buf, size_t cap, fg_err *err);
/* Write c as JSON (the directory is created; the file replaced atomically). */
int fg_calib_save(const char *path, const fg_calib *c, fg_err *err);
/* Read a file: FG_ERR_NOT_FOUND when absent, FG_ERR_CORRUPT when not a calibration,
 * FG_ERR_STATE when of another version or another machine (the message says which). */
int fg_calib_load(const char *path, fg_calib *out, fg_err *err);
/* The same from bytes (path names them in messages). */
int fg_calib_parse(const char *data, size_t len, const char *path, fg_calib *out, fg_err *err);

/* GEMM rate (FLOP/s) at m rows, interpolated (log-linear) from the table: f16 weights
 * (gflops), Q4 weights under --compute int8 (path FG_CALIB_INT8: gflops_i8), or f16 weights
 * under --compute bf16 (FG_CALIB_BF16: gflops_bf16). */
enum { FG_CALIB_F32 = 0, FG_CALIB_INT8 = 1, FG_CALIB_BF16 = 2 };
double fg_calib_flops(const fg_calib *c, double m);
double fg_calib_flops_at(const fg_calib *c, int path, double m);
/* GFLOP/s table g at row counts ms[FG_CALIB_NM] -> FLOP/s at m rows. */
double fg_calib_interp(const uint32_t *ms, const double *g, double m);

/* ---- a device's calibration (--backend cuda|sim) ----
 * Measured through the backend a run computes on, at the start of a --policy auto run (quick:
 * well under a second on a GPU, a few on the simulated one), never cached: the link of the
 * simulated device is a flag, and a GPU is shared. */

typedef struct fg_calib_dev {
    char name[96];             /* the backend's name ("cuda", "sim") */
    double up, down;           /* bytes/s host (pinned when the device has it) -> device, back */
    uint32_t m[FG_CALIB_NM];
    double gflops[FG_CALIB_NM];/* the backend's linear at m[i] rows on weights of the run's
                                  codec (F16, or Q4 when q4) resident on the device, operands
                                  on the device: what a Linear homed on the GPU runs at */
    double attn_s, attn_q4_s;  /* attention over an f32 / 4-bit cache on the device: seconds
                                  per query x key x query width, one query a sequence (decode) */
    double attn_pre_s, attn_pre_q4_s; /* the same in a prefill (256 queries over their causal
                                  prefix); 0: unmeasured, the decode's figure stands in */
    double overlap;            /* share of the shorter of uploading a Linear's pieces and
                                  multiplying them hidden when the pieces are in host memory */
    double seconds;
    int q4;                    /* gflops measured on Q4 weights (else F16) */
} fg_calib_dev;

/* Measure be's device (be a device backend: be->dev has DEVICE memory). q4: weights Q4 (groups
 * of 64 along the input axis) instead of F16. */
int fg_calib_measure_device(fg_backend *be, int q4, int quick, fg_calib_dev *out, fg_err *err);
/* A device's calibration as a file, a device profile (calib_dev_file.c: JSON, kind
 * "fg-device-profile"): written by `fg-infer calibrate --backend cuda|sim --device-profile
 * FILE`, read by --device-profile FILE to price a plan for that device without measuring one.
 * _load: FG_ERR_CORRUPT naming the file and the field at fault, FG_ERR_STATE for another
 * version; a directory or a FIFO is refused by name. */
int fg_calib_dev_save(const char *path, const fg_calib_dev *d, fg_err *err);
int fg_calib_dev_parse(const char *data, size_t len, const char *path, fg_calib_dev *d,
                       fg_err *err);
int fg_calib_dev_load(const char *path, fg_calib_dev *d, fg_err *err);
/* The device's GEMM rate (FLOP/s) at m rows, log-linear between the measured ones. */
double fg_calib_dev_flops(const fg_calib_dev *d, double m);

/* ---- the linear programs (a GLPK wrapper) ---- */

/* minimize c.x subject to rlo[i] <= A[i].x <= rhi[i] (A row-major [m][n]; use -HUGE_VAL /
 * HUGE_VAL for a free side) and lo[j] <= x[j] <= hi[j]. FG_ERR_NO_SPACE when infeasible,
 * FG_ERR_INVALID_ARG when unbounded or malformed. x[n] and *obj receive the optimum. */
int fg_lp_solve(uint32_t n, uint32_t m, const double *c, const double *A, const double *rlo,
                const double *rhi, const double *lo, const double *hi, double *x, double *obj,
                fg_err *err);

/* ---- the model as the search sees it ---- */

/* Weight bytes as a device backend uploads them from host memory (unpadded chunk payloads). */
typedef struct fg_sweep_bytes {
    double lin;                /* LINEAR tensors of the layers: staged at each Linear call */
    double head;               /* ... of the head unit (the LM head: a tied one streams the
                                  embedding table again) */
    double small;              /* SMALL tensors decoded at each unit load */
    double kept;               /* SMALL tensors of the embedding unit: decoded once, kept */
    double gather;             /* GATHER tables (token embeddings): a gather stages each chunk
                                  holding one of its rows */
    uint32_t gather_chunks;    /* chunks of the GATHER tables, wherever homed */
    double experts;            /* of lin, a mixture's stacked experts (a Linear call stages
                                  only the chosen experts' pieces) */
} fg_sweep_bytes;

typedef struct fg_policy_model {
    fg_hparams hp;
    fg_plan_model pm;          /* pm.hp points at hp: do not copy the struct */
    fg_plan_weights w;         /* built from a store: the engine's own table (plan_model.h);
                                  pm.units points into it. Empty for a model given by hand */
    uint64_t linear_floats;    /* values of LINEAR/STREAM weights decoded per sweep */
    uint64_t experts;          /* stored bytes of a mixture's stacked experts (FG_ROLE_EXP_*):
                                  a step reads and stages only the chosen ones (engine.c) */
    uint64_t expert_floats;    /* of linear_floats, the experts' (decoded only where chosen) */
    fg_sweep_bytes sweep;      /* all of them as a device backend uploads them (wg 0) */
    int codec;                 /* FG_CODEC_F32 / F16 / Q4 ... of the weight matrices (the most) */
    int all_q4;                /* every matrix is Q4: --compress-weight holds */
    int q4_int8;               /* the matrices (the most bytes) are Q4 grouped along the input
                                  axis: --compute int8 runs them on the integer kernels */
} fg_policy_model;

/* Build from a model (model_open.h; borrowed) with the engine's own builder
 * (fg_plan_weights_build). */
int fg_policy_model_build(const fg_model *model, fg_policy_model *out, fg_err *err);
void fg_policy_model_free(fg_policy_model *m);

/* ---- the cost model and the search ---- */

typedef struct fg_policy_job {
    uint32_t prompt_len, gen_len;  /* padded prompt and new tokens per sequence */
    uint32_t max_seqs;             /* sequences there are (0: a block's worth, any size); the
                                      search's blocks hold at most this many, a prediction
                                      counts only these */
    uint64_t ram_budget;           /* 0: none */
    int cache_choice;              /* -1: search the 4-bit cache; 0: never; 1: always */
    int int8;                      /* --compute int8: a q4_int8 model's Linear layers are priced
                                      at gflops_i8 (no decode to f32) */
    const fg_calib_dev *dev;       /* a device backend (NULL: the CPU): every op computes on the
                                      device at its rates, what is not homed on the GPU crosses
                                      the link per op; the search places on the GPU too, within
                                      the policy's gpu_budget */
    uint64_t disk_free;            /* bytes the offload file may take (0: no limit): a KV cache or
                                      activations homed on disk must fit there */
    const char *disk_dir;          /* the offload dir, named when nothing fits it */
    uint32_t max_ctx;              /* positions the engine sizes its KV cache and activations
                                      for (--max-context; 0: prompt_len + gen_len) */
    int ram_measured;              /* ram_budget is the RAM the machine has available, not a
                                      --ram-budget the user gave (errors say which) */
    int attn_search;               /* a device: search where attention runs too (cpu_attention
                                      0 and 1: on the device, or on the CPU where the KV cache
                                      is in RAM, --cpu-cache-compute); 0: the base policy's */
    int bf16;                      /* --compute bf16: a model whose matrices are F16/BF16 is
                                      priced at gflops_bf16 */
} fg_policy_job;

typedef struct fg_prediction {
    double prefill_s, decode_s;    /* the whole block */
    double tok_s;                  /* new tokens / (prefill + decode) */
    double io_decode_s, compute_decode_s; /* one decode step */
    uint64_t tokens;
    uint64_t read_bytes, write_bytes; /* the block's disk traffic (the pager's counters) */
    uint64_t up_bytes, down_bytes; /* a device backend: the block's link traffic (the backend's
                                      link_bytes) */
} fg_prediction;

/* Predicted time of one block under p (placement from pl, the plan fg_plan_make gave). */
void fg_policy_predict(const fg_calib *c, const fg_policy_model *m, const fg_plan *pl,
                       const fg_policy *p, const fg_policy_job *job, fg_prediction *out);

/* The bound of one block under p (FlexGen's "compute-and-link bound"): the least time any
 * schedule of it could take on this machine, given the placement's bytes and the measured
 * rates. Per phase (the prefill; all G - 1 decode steps), the greatest of
 *  - compute: the Linear layers' and the LM head's FLOPs at the measured GEMM rate for the
 *    phase's row count (the device's table on a device; attention, decoding and everything
 *    else left out);
 *  - link (a device): host -> device the weights not homed on the GPU once a sweep (the
 *    prefill's batches could share one upload), the GPU-homed ones once, and the cache's and
 *    activations' rows the placement moves; device -> host its rows; at the measured rates,
 *    both ways at once;
 *  - disk: the bytes the placement reads and writes (fg_policy_predict's), at the measured
 *    rates, one after the other.
 * The prediction is never below it (tests/test_policy.c); measured / bound says how near the
 * engine runs to what the hardware allows. */
typedef struct fg_bound_phase {
    double flops, compute_s, rate;   /* rate: flops / compute_s, FLOP/s */
    double link_up, link_down, link_s; /* bytes, seconds */
    double disk_read, disk_write, disk_s;
    double s;                        /* the greatest of the three */
} fg_bound_phase;
typedef struct fg_bound {
    fg_bound_phase ph[2];            /* [0] the prefill, [1] the decode steps */
    double s, tok_s;                 /* the block: ph[0].s + ph[1].s; tokens / s */
    uint64_t tokens;
    double link_rate[2];             /* bytes/s up, down (0: no device) */
    double disk_rate[2];             /* bytes/s read, write */
} fg_bound;
void fg_policy_bound(const fg_calib *c, const fg_policy_model *m, const fg_plan *pl,
                     const fg_policy *p, const fg_policy_job *job, fg_bound *out);
/* One line: "12.3 tok/s at most, 2.60 s: prefill 2.10 s: compute ... ; decode ...", its
 * times and bytes times `blocks` (the blocks a run computes). */
void fg_bound_describe(const fg_bound *b, double blocks, char *buf, size_t cap);

/* Of a sweep's weight bytes, those the pager homes off the GPU when the weights' GPU fraction is
 * wg (its rule, rank by rank and chunk by chunk: pager/place.c): what a device backend uploads;
 * with wg the GPU + RAM fraction, what is homed on disk. A model without a
 * tensor table (given by sizes) counts every byte off the GPU as a layer's Linear. */
void fg_policy_sweep_bytes(const fg_policy_model *m, double wg, fg_sweep_bytes *out);

/* Weight bytes the pager really homes in RAM under fraction w_ram (fg_plan_homed_weights:
 * its per-unit midpoint rule, pager/place.c). */
uint64_t fg_policy_weights_homed(const fg_policy_model *m, double w_ram);

typedef struct fg_search_stats {
    uint32_t candidates, lps, feasible;
    uint64_t min_budget;           /* no feasible policy: the smallest budget any block needs */
    uint64_t min_gpu;              /* ... and of the device, when its budget held no block */
    uint64_t min_disk;             /* ... and of the offload dir, when blocks fitting the budgets
                                      were refused for it */
} fg_search_stats;

/* The best policy for job: base's flags (schedule, sep_layer, overlap, sparsity) kept; gbs,
 * ngb, fractions and compress_cache chosen; compress_weight = the store's own codec (no
 * quantizing at load). out->have_fractions is set. FG_ERR_NO_SPACE naming the smallest budget
 * that would fit when none does. */
int fg_policy_search(const fg_calib *c, const fg_policy_model *m, const fg_policy *base,
                     const fg_policy_job *job, fg_policy *out, fg_prediction *pred,
                     fg_search_stats *st, fg_err *err);

/* One line: "gbs 8 x ngb 4, weights RAM 50% disk 50%, cache RAM, act RAM, cache 4-bit". */
void fg_policy_describe(const fg_policy *p, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
