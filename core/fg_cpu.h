/* fg_cpu.h - the one CPU feature detector of the process.
 *
 * Every SIMD path in fg (quant/ codecs, compute/ kernels) asks here which instruction sets the
 * CPU and the OS support, so a process never holds two answers. The features are read once
 * (pthread_once: safe when the first calls race) with CPUID through the compiler's builtins,
 * which also check that the OS saves the vector state.
 *
 * Tests and benchmarks cap the level with an environment variable (fg_cpu_isa_cap): FG_ISA for
 * everything, or a module's own name (FG_QUANT_ISA, FG_COMPUTE_ISA) that wins for that module.
 * A cap never raises the level above what the CPU has.
 */
#ifndef FG_CPU_H
#define FG_CPU_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_cpu_feature {
    FG_CPU_AVX2 = 1u << 0,      /* with FMA */
    FG_CPU_F16C = 1u << 1,
    FG_CPU_AVX512 = 1u << 2,    /* F, BW and VL */
    FG_CPU_AVX512VNNI = 1u << 3,
    FG_CPU_AVXVNNI = 1u << 4,
    FG_CPU_AVX512BF16 = 1u << 5, /* with AVX-512 F, BW and VL */
    /* AMX (CPUID leaf 7: EDX bits 24, 25, 22), only where the OS saves the tile state (XCR0 bits
     * 17, 18) and, on Linux, granted this process the tile data (arch_prctl
     * ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA: asked here, once, before any tile instruction;
     * kernels before 5.16 refuse, and then no AMX bit is set). Elsewhere never set. */
    FG_CPU_AMX_TILE = 1u << 6,
    FG_CPU_AMX_INT8 = 1u << 7,   /* with AMX_TILE */
    FG_CPU_AMX_BF16 = 1u << 8,   /* with AMX_TILE */
} fg_cpu_feature;

/* Bit set of fg_cpu_feature the CPU and OS support (0 on non-x86). */
unsigned fg_cpu_features(void);

/* ISA levels, ordered. */
typedef enum fg_isa { FG_ISA_REF = 0, FG_ISA_AVX2 = 1, FG_ISA_AVX512 = 2 } fg_isa;

/* The best level the CPU runs (AVX2 needs AVX2 + FMA + F16C), capped by $env (when env is
 * non-NULL and set) or else by $FG_ISA: "ref", "avx2" or "avx512"; other values are ignored. */
fg_isa fg_cpu_isa_cap(const char *env);
/* The same read once per process into *slot (a module's static, initialized to -1; racing first
 * calls store the same value): for callers that ask on every op (two getenv scans a call were
 * 0.4% of a batch-1 decode). */
#ifndef __cplusplus
fg_isa fg_cpu_isa_cap_once(const char *env, _Atomic int *slot);
#endif
/* "ref", "avx2", "avx512". */
const char *fg_cpu_isa_name(fg_isa isa);

#ifdef __cplusplus
}
#endif
#endif
