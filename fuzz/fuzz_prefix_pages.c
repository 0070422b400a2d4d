/* fuzz_prefix_pages.c - libFuzzer target for the prefix cache's page payloads (prefix/prefix.c):
 * the identity page and a meta page, both read back from a cache directory another process may
 * have written. The first input byte picks the decoder; an accepted value must re-encode to
 * the same bytes (identity) or keep its fields inside the documented ranges (meta). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prefix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ident(const uint8_t *b, size_t n)
{
    fg_prefix_ident id;
    fg_err err;
    if (fg_prefix_ident_decode(b, n, &id, &err) != FG_OK)
        return;
    uint8_t again[FG_PREFIX_IDENT_SIZE];
    fg_prefix_ident_encode(&id, again);
    if (memcmp(again, b, FG_PREFIX_IDENT_SIZE))
        abort();
}

static void meta(const uint8_t *b, size_t n)
{
    fg_prefix_meta m;
    fg_err err;
    if (fg_prefix_meta_decode(b, n, &m, &err) != FG_OK)
        return;
    if (!m.n_tokens || m.n_tokens > FG_PREFIX_MAX_PAGE_TOKENS ||
        n != FG_PREFIX_META_HEAD + 4 * (size_t)m.n_tokens || m.tokens != b + FG_PREFIX_META_HEAD)
        abort();
    volatile uint32_t sum = 0; /* every token id readable */
    for (uint32_t i = 0; i < m.n_tokens; i++)
        sum += m.tokens[4 * i] + m.tokens[4 * i + 3];
    (void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t *copy = malloc(size - 1 + 1); /* exact-size heap copy: ASan sees overreads */
    if (!copy)
        return 0;
    memcpy(copy, data + 1, size - 1);
    if (data[0] & 1)
        meta(copy, size - 1);
    else
        ident(copy, size - 1);
    free(copy);
    return 0;
}
