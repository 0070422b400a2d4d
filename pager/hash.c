/* hash.c - XXH3-64 of loaded chunks: the only pass over every byte the pager makes itself.
 *
 * libxxhash as Debian builds it runs XXH3 with SSE2. The same function compiled for AVX2
 * (xxhash's own AVX2 accumulate loop, inlined from xxhash.h with XXH_VECTOR = XXH_AVX2 in
 * hash_avx2.c, the only file built with -mavx2) is used when the CPU has AVX2; XXH3 is defined
 * independently of the vector width, so both give the same value for every input (test_pager's
 * t_hash compares them). fg_pager_xxh3_ref is the library's, the reference twin.
 */
#include <xxhash.h>

#include "pager_int.h"

uint64_t fg_pager_xxh3_ref(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

uint64_t fg_pager_xxh3(const void *p, size_t n)
{
#if defined(__x86_64__) && defined(FG_PAGER_HAVE_AVX2_HASH)
    if (__builtin_cpu_supports("avx2"))
        return fg_pager_xxh3_avx2(p, n);
#endif
    return XXH3_64bits(p, n);
}
