/* fg_bytes.h - little-endian encode/decode and overflow-checked size arithmetic.
 *
 * Everything fg writes to disk is little-endian and read with these helpers through memcpy,
 * so no on-disk field needs natural alignment and the code is correct on any host.
 * The checked helpers return 0 on success and -1 when the result would not fit in 64 bits.
 */
#ifndef FG_BYTES_H
#define FG_BYTES_H

#include <stdint.h>
#include <string.h>

static inline uint16_t fg_le16(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | (b[1] << 8));
}

static inline uint32_t fg_le32(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static inline uint64_t fg_le64(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
    return (uint64_t)fg_le32(b) | ((uint64_t)fg_le32(b + 4) << 32);
}

static inline void fg_put16(void *p, uint16_t v)
{
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}

static inline void fg_put32(void *p, uint32_t v)
{
    uint8_t *b = (uint8_t *)p;
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline void fg_put64(void *p, uint64_t v)
{
    fg_put32(p, (uint32_t)v);
    fg_put32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

static inline int fg_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

static inline int fg_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/* Round v up to a multiple of align (a power of two); -1 on overflow. */
static inline int fg_align_up_u64(uint64_t v, uint64_t align, uint64_t *out)
{
    uint64_t t;
    if (fg_add_u64(v, align - 1, &t))
        return -1;
    *out = t & ~(align - 1);
    return 0;
}

/* Bytes in a MiB, as a double: for sizes in messages ("%.1f MiB", bytes / FG_MIB). */
#define FG_MIB (1024.0 * 1024.0)

/* x rounded up to a 4 KiB page (the pager's and the .fgt format's alignment); x < 2^64 - 4095. */
static inline uint64_t fg_page_up(uint64_t x) { return (x + 4095) & ~4095ull; }

#endif
