/* hash_avx2.c - XXH3-64 with xxhash's AVX2 kernel (see hash.c); built with -mavx2 and called
 * only when the CPU has AVX2. */
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include "pager_int.h"

uint64_t fg_pager_xxh3_avx2(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}
