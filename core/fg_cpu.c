/* fg_cpu.c - CPU feature detection, once per process (see fg_cpu.h). */
#define _GNU_SOURCE /* syscall */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define FG_X86 1
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define FG_ARCH_REQ_XCOMP_PERM 0x1023 /* <asm/prctl.h> */
#define FG_XFEATURE_XTILEDATA 18
#endif

#include "fg_cpu.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static unsigned features;

#ifdef FG_X86
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

static int has_avxvnni(void)
{
    unsigned a, b, c, d;
    /* CPUID.(EAX=7, ECX=1):EAX bit 4 */
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

/* AMX bits (fg_cpu.h): CPUID, then XCR0's tile state, then Linux's permission for this process. */
static unsigned amx_features(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)))
        return 0;
    f = FG_CPU_AMX_TILE | (d & (1u << 25) ? FG_CPU_AMX_INT8 : 0) |
        (d & (1u << 22) ? FG_CPU_AMX_BF16 : 0);
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return 0;
#if defined(FG_ARCH_REQ_XCOMP_PERM)
    return syscall(SYS_arch_prctl, FG_ARCH_REQ_XCOMP_PERM, FG_XFEATURE_XTILEDATA) == 0 ? f : 0;
#else
    return 0;
#endif
}
#endif

static void detect(void)
{
    unsigned f = 0;
#ifdef FG_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        f |= FG_CPU_AVX2;
    if (f & FG_CPU_AVX2 && has_f16c())
        f |= FG_CPU_F16C;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        f |= FG_CPU_AVX512;
    if (f & FG_CPU_AVX512 && __builtin_cpu_supports("avx512vnni"))
        f |= FG_CPU_AVX512VNNI;
    if (f & FG_CPU_AVX512 && __builtin_cpu_supports("avx512bf16"))
        f |= FG_CPU_AVX512BF16;
    if (f & FG_CPU_AVX2 && has_avxvnni())
        f |= FG_CPU_AVXVNNI;
    f |= amx_features();
#endif
    features = f;
}

unsigned fg_cpu_features(void)
{
    pthread_once(&once, detect);
    return features;
}

fg_isa fg_cpu_isa_cap_once(const char *env, _Atomic int *slot)
{
    int v = atomic_load_explicit(slot, memory_order_relaxed);
    if (v < 0) {
        v = (int)fg_cpu_isa_cap(env);
        atomic_store_explicit(slot, v, memory_order_relaxed);
    }
    return (fg_isa)v;
}

const char *fg_cpu_isa_name(fg_isa isa)
{
    return isa == FG_ISA_AVX512 ? "avx512" : isa == FG_ISA_AVX2 ? "avx2" : "ref";
}

static int parse(const char *s, fg_isa *out)
{
    for (int i = FG_ISA_REF; i <= FG_ISA_AVX512; i++)
        if (s && !strcmp(s, fg_cpu_isa_name((fg_isa)i))) {
            *out = (fg_isa)i;
            return 1;
        }
    return 0;
}

fg_isa fg_cpu_isa_cap(const char *env)
{
    unsigned f = fg_cpu_features();
    fg_isa best = FG_ISA_REF, cap;
    if ((f & FG_CPU_AVX2) && (f & FG_CPU_F16C))
        best = FG_ISA_AVX2;
    if (best == FG_ISA_AVX2 && (f & FG_CPU_AVX512))
        best = FG_ISA_AVX512;
    if ((env && parse(getenv(env), &cap)) || parse(getenv("FG_ISA"), &cap))
        best = cap < best ? cap : best;
    return best;
}
