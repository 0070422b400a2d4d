/* test_format_crafted.c - one hand-built file per validation rule of SPEC.md section 7, each
 * asserting the exact error code. The files are built byte by byte here from the spec, not
 * with format/'s writer, so the test also checks that the spec and the reader agree.
 *
 * The base file (alignment 4096): one metadata entry "k" (U64) and one tensor "w" (F32 [4, 16],
 * two chunks of 2 rows = 128 bytes at 8192 and 12288), index at 65536, superblock in slot 1
 * (generation 1), slot 0 all zero. Each case mutates a field of the description (or the
 * finished bytes) and expects one error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fg_bytes.h"
#include "fgt.h"
#include "testutil.h"

#define INDEX_OFF 65536u

typedef struct rchunk {
    uint64_t off, len, first_row, n_rows;
} rchunk;

typedef struct rtensor {
    char name[600];
    int name_len; /* -1: strlen */
    uint8_t codec[12];
    uint8_t n_dims;
    uint64_t dims[10];
    const char *source;
    uint32_t n_chunks;
    rchunk ch[4];
} rtensor;

typedef struct craft {
    /* superblock */
    char magic[9];
    uint32_t endian, sb_size, align_log2;
    uint16_t vmajor;
    uint64_t generation, flags, index_off, data_end_add;
    int64_t index_len_add; /* added to the real index length in the superblock */
    int reserved_byte;     /* offset in [72,120) to set non-zero, or 0 */
    int bad_sb_sum, bad_index_sum, slot;
    /* index header */
    char imagic[5];
    uint32_t ireserved;
    int64_t n_meta_add, n_tensors_add, n_chunks_add;
    uint64_t n_tensors_set; /* when non-zero, replaces the count */
    /* entries */
    uint8_t meta[256];
    size_t meta_len;
    uint32_t n_meta;
    uint32_t n_tensors;
    rtensor t[2];
    size_t trailing;
    int64_t file_len_add; /* grows or truncates the finished file */
} craft;

typedef struct out {
    uint8_t *p;
    size_t len;
} out;

static void put(out *o, const void *p, size_t n)
{
    memcpy(o->p + o->len, p, n);
    o->len += n;
}
static void p8(out *o, uint8_t v) { put(o, &v, 1); }
static void p16(out *o, uint16_t v) { uint8_t b[2]; fg_put16(b, v); put(o, b, 2); }
static void p32(out *o, uint32_t v) { uint8_t b[4]; fg_put32(b, v); put(o, b, 4); }
static void p64(out *o, uint64_t v) { uint8_t b[8]; fg_put64(b, v); put(o, b, 8); }

static void base(craft *c)
{
    memset(c, 0, sizeof *c);
    memcpy(c->magic, "\x89" "FGT\r\n\x1a\n", 8);
    c->endian = 0x0A0B0C0D;
    c->sb_size = 128;
    c->align_log2 = 12;
    c->vmajor = 1;
    c->generation = 1;
    c->index_off = INDEX_OFF;
    c->slot = 1;
    memcpy(c->imagic, "FGIX", 4);
    /* meta "k" = U64 7 */
    out m = {c->meta, 0};
    p16(&m, 1);
    put(&m, "k", 1);
    p8(&m, 1);
    p64(&m, 7);
    c->meta_len = m.len;
    c->n_meta = 1;
    c->n_tensors = 1;
    rtensor *t = &c->t[0];
    strcpy(t->name, "w");
    t->name_len = -1;
    t->codec[0] = FG_CODEC_F32;
    t->n_dims = 2;
    t->dims[0] = 4;
    t->dims[1] = 16;
    t->source = "model.w";
    t->n_chunks = 2;
    t->ch[0] = (rchunk){8192, 128, 0, 2};
    t->ch[1] = (rchunk){12288, 128, 2, 2};
}

static uint8_t pattern(uint64_t i) { return (uint8_t)((i * 2654435761u) >> 13); }

static uint64_t chunk_sum(const uint8_t *file, size_t file_len, const rchunk *ch)
{
    if (ch->off > file_len || ch->len > file_len - ch->off)
        return 0;
    return XXH3_64bits(file + ch->off, (size_t)ch->len);
}

static void emit_tensor(out *o, const rtensor *t, const uint8_t *file, size_t file_len)
{
    uint16_t nl = (uint16_t)(t->name_len < 0 ? strlen(t->name) : (size_t)t->name_len);
    p16(o, nl);
    put(o, t->name, nl < sizeof t->name ? nl : strlen(t->name)); /* a lie in nl stays a lie */
    put(o, t->codec, 12);
    p8(o, t->n_dims);
    for (int d = 0; d < t->n_dims && d < 10; d++)
        p64(o, t->dims[d]);
    p16(o, (uint16_t)strlen(t->source));
    put(o, t->source, strlen(t->source));
    p64(o, 0);
    p32(o, t->n_chunks);
    for (uint32_t i = 0; i < t->n_chunks && i < 4; i++) {
        p64(o, t->ch[i].off);
        p64(o, t->ch[i].len);
        p64(o, t->ch[i].first_row);
        p64(o, t->ch[i].n_rows);
        p64(o, chunk_sum(file, file_len, &t->ch[i]));
    }
}

/* Build the file; returns a malloc'd buffer (caller frees) and its length. */
static uint8_t *build(const craft *c, size_t *len_out)
{
    size_t cap = INDEX_OFF + 65536;
    uint8_t *f = calloc(1, cap);
    for (size_t i = 8192; i < INDEX_OFF; i++)
        f[i] = pattern(i);
    out o = {f + INDEX_OFF, 0};
    uint64_t n_chunks = 0;
    for (uint32_t i = 0; i < c->n_tensors; i++)
        n_chunks += c->t[i].n_chunks;
    put(&o, c->imagic, 4);
    p32(&o, c->ireserved);
    p32(&o, (uint32_t)(c->n_meta + c->n_meta_add));
    p32(&o, c->n_tensors_set ? (uint32_t)c->n_tensors_set : (uint32_t)(c->n_tensors + c->n_tensors_add));
    p64(&o, n_chunks + (uint64_t)c->n_chunks_add);
    p64(&o, 0);
    put(&o, c->meta, c->meta_len);
    for (uint32_t i = 0; i < c->n_tensors; i++)
        emit_tensor(&o, &c->t[i], f, INDEX_OFF);
    o.len += c->trailing; /* zero bytes */
    size_t index_len = o.len;
    uint64_t index_sum = XXH3_64bits(f + INDEX_OFF, index_len) ^ (uint64_t)c->bad_index_sum;
    uint8_t *sb = f + (size_t)c->slot * 4096;
    memcpy(sb, c->magic, 8);
    fg_put32(sb + 8, c->endian);
    fg_put16(sb + 12, c->vmajor);
    fg_put16(sb + 14, 0);
    fg_put32(sb + 16, c->sb_size);
    fg_put32(sb + 20, c->align_log2);
    fg_put64(sb + 24, c->generation);
    fg_put64(sb + 32, c->index_off);
    fg_put64(sb + 40, (uint64_t)((int64_t)index_len + c->index_len_add));
    fg_put64(sb + 48, index_sum);
    fg_put64(sb + 56, INDEX_OFF + index_len + c->data_end_add);
    fg_put64(sb + 64, c->flags);
    if (c->reserved_byte)
        sb[c->reserved_byte] = 1;
    fg_put64(sb + 120, XXH3_64bits(sb, 120) ^ (uint64_t)c->bad_sb_sum);
    *len_out = (size_t)((int64_t)(INDEX_OFF + index_len) + c->file_len_add);
    return f;
}

static int open_crafted(const craft *c, fg_err *err)
{
    size_t len;
    uint8_t *f = build(c, &len);
    fg_fgt_reader *r = NULL;
    int rc = fg_fgt_open_mem(f, len, "crafted", 0, &r, err);
    if (rc == FG_OK)
        rc = fg_fgt_verify(r, NULL, NULL, err);
    fg_fgt_close(r);
    free(f);
    return rc;
}

#define EXPECT(c, code)                                                                          \
    do {                                                                                         \
        fg_err e_;                                                                               \
        fg_err_clear(&e_);                                                                       \
        int rc_ = open_crafted(c, &e_);                                                          \
        ck_assert_msg(rc_ == (code), "expected %d (%s), got %d: %s", (code), fg_strerror(code),  \
                      rc_, e_.msg);                                                              \
        if ((code) != FG_OK)                                                                     \
            ck_assert_msg(strlen(e_.msg) > 0 && !strchr(e_.msg, '\n'), "message: '%s'", e_.msg); \
    } while (0)

START_TEST(base_file_is_valid)
{
    craft c;
    base(&c);
    EXPECT(&c, FG_OK);
    c.slot = 0; /* either slot works */
    EXPECT(&c, FG_OK);
}
END_TEST

/* ---- superblock rules (S*) ---- */
START_TEST(sb_rules)
{
    craft c;
    base(&c); c.magic[1] = 'X';            EXPECT(&c, FG_ERR_BAD_MAGIC);
    base(&c); c.endian = 0x0D0C0B0A;       EXPECT(&c, FG_ERR_BAD_ENDIAN);
    base(&c); c.bad_sb_sum = 1;            EXPECT(&c, FG_ERR_CHECKSUM);
    base(&c); c.vmajor = 2;                EXPECT(&c, FG_ERR_VERSION);
    base(&c); c.sb_size = 256;             EXPECT(&c, FG_ERR_SIZE_MISMATCH);
    base(&c); c.flags = 4;                 EXPECT(&c, FG_ERR_BAD_ENUM);
    base(&c); c.reserved_byte = 100;       EXPECT(&c, FG_ERR_RESERVED);
    base(&c); c.align_log2 = 11;           EXPECT(&c, FG_ERR_BAD_ALIGN);
    base(&c); c.align_log2 = 25;           EXPECT(&c, FG_ERR_BAD_ALIGN);
    base(&c); c.generation = 0;            EXPECT(&c, FG_ERR_CORRUPT);
    base(&c); c.index_off = INDEX_OFF + 8; EXPECT(&c, FG_ERR_BAD_ALIGN);
    base(&c); c.index_off = 4096;          EXPECT(&c, FG_ERR_OUT_OF_BOUNDS);
    base(&c); c.index_len_add = -16;       EXPECT(&c, FG_ERR_CHECKSUM); /* sum over fewer bytes */
    base(&c); c.index_len_add = (int64_t)(1ull << 31); EXPECT(&c, FG_ERR_LIMIT);
    base(&c); c.index_off = ~0ull - 4095; c.index_len_add = 8192; EXPECT(&c, FG_ERR_OVERFLOW);
    base(&c); c.data_end_add = 4096;       EXPECT(&c, FG_ERR_TRUNCATED); /* file cut short */
    base(&c); c.index_len_add = 8;         EXPECT(&c, FG_ERR_OUT_OF_BOUNDS); /* past data end */
}
END_TEST

START_TEST(file_shorter_than_header)
{
    uint8_t small[100] = {0};
    fg_fgt_reader *r;
    fg_err err;
    ck_assert_int_eq(fg_fgt_open_mem(small, sizeof small, "small", 0, &r, &err), FG_ERR_TRUNCATED);
    ck_assert_int_eq(fg_fgt_open_mem(small, 0, "empty", 0, &r, &err), FG_ERR_TRUNCATED);
}
END_TEST

/* ---- index header rules (I*) ---- */
START_TEST(index_rules)
{
    craft c;
    base(&c); c.bad_index_sum = 1;         EXPECT(&c, FG_ERR_CHECKSUM);
    base(&c); c.imagic[0] = 'X';           EXPECT(&c, FG_ERR_BAD_MAGIC);
    base(&c); c.ireserved = 1;             EXPECT(&c, FG_ERR_RESERVED);
    base(&c); c.n_tensors_set = 1u << 21;  EXPECT(&c, FG_ERR_LIMIT);
    /* count x size: a count within the limit that the index bytes cannot hold */
    base(&c); c.n_tensors_set = 1u << 20;  EXPECT(&c, FG_ERR_TRUNCATED);
    base(&c); c.n_meta_add = 60000;        EXPECT(&c, FG_ERR_TRUNCATED);
    base(&c); c.n_chunks_add = 1; c.trailing = 64; EXPECT(&c, FG_ERR_SIZE_MISMATCH);
    base(&c); c.n_chunks_add = 1 << 25;    EXPECT(&c, FG_ERR_LIMIT);
    base(&c); c.trailing = 3;              EXPECT(&c, FG_ERR_SIZE_MISMATCH);
    base(&c); c.n_tensors_add = 1;         EXPECT(&c, FG_ERR_TRUNCATED);
}
END_TEST

/* ---- names (N*) ---- */
START_TEST(name_rules)
{
    craft c;
    base(&c); c.t[0].name[0] = '\0';       EXPECT(&c, FG_ERR_BAD_NAME);
    base(&c); strcpy(c.t[0].name, "a\tb"); EXPECT(&c, FG_ERR_BAD_NAME);
    base(&c); strcpy(c.t[0].name, "a\x7f"); EXPECT(&c, FG_ERR_BAD_NAME);
    base(&c); strcpy(c.t[0].name, "\xc0\xaf"); EXPECT(&c, FG_ERR_BAD_NAME); /* overlong */
    base(&c); strcpy(c.t[0].name, "\xed\xa0\x80"); EXPECT(&c, FG_ERR_BAD_NAME); /* surrogate */
    base(&c); strcpy(c.t[0].name, "\xe2\x82"); EXPECT(&c, FG_ERR_BAD_NAME); /* cut sequence */
    base(&c); memset(c.t[0].name, 'a', 513); c.t[0].name[513] = 0; EXPECT(&c, FG_ERR_LIMIT);
    base(&c); memset(c.t[0].name, 'a', 512); c.t[0].name[512] = 0; EXPECT(&c, FG_OK);
    base(&c); strcpy(c.t[0].name, "caf\xc3\xa9.\xf0\x9f\x98\x80"); EXPECT(&c, FG_OK);
    base(&c); c.t[0].name_len = 60000;     EXPECT(&c, FG_ERR_TRUNCATED); /* past index end */
    base(&c); c.t[0].source = "\x01";      EXPECT(&c, FG_ERR_BAD_NAME);
    /* two tensors with one name */
    base(&c);
    c.t[1] = c.t[0];
    c.t[1].ch[0].off = 20480;
    c.t[1].ch[1].off = 24576;
    c.n_tensors = 2;
    EXPECT(&c, FG_ERR_DUPLICATE);
    strcpy(c.t[1].name, "w2");
    EXPECT(&c, FG_OK);
}
END_TEST

/* ---- metadata (M*) ---- */
static void meta_set(craft *c, const void *bytes, size_t n, uint32_t count)
{
    memcpy(c->meta, bytes, n);
    c->meta_len = n;
    c->n_meta = count;
}

START_TEST(meta_rules)
{
    craft c;
    base(&c); meta_set(&c, "\1\0k\7\0\0\0\0\0\0\0\0", 12, 1); EXPECT(&c, FG_ERR_BAD_ENUM);
    base(&c); meta_set(&c, "\1\0k\0\0\0\0\0\0\0\0\0", 12, 1); EXPECT(&c, FG_ERR_BAD_ENUM);
    /* string of 2^24+1 bytes: over the limit */
    base(&c); meta_set(&c, "\1\0s\4\1\0\0\1", 8, 1); EXPECT(&c, FG_ERR_LIMIT);
    /* string longer than the index */
    base(&c); meta_set(&c, "\1\0s\4\0\0\1\0", 8, 1); EXPECT(&c, FG_ERR_TRUNCATED);
    base(&c); meta_set(&c, "\1\0s\4\2\0\0\0\xc3\x28", 10, 1); EXPECT(&c, FG_ERR_BAD_NAME);
    base(&c); meta_set(&c, "\1\0s\4\2\0\0\0\xc3\xa9", 10, 1); EXPECT(&c, FG_OK);
    base(&c); meta_set(&c, "\1\0b\5\2\0\0\0\xff\x00", 10, 1); EXPECT(&c, FG_OK); /* bytes: any */
    /* arrays: element type, count limit, count x size, bad string element */
    base(&c); meta_set(&c, "\1\0a\6\6\0\0\0\0", 9, 1); EXPECT(&c, FG_ERR_BAD_ENUM);
    base(&c); meta_set(&c, "\1\0a\6\1\1\0\0\1", 9, 1); EXPECT(&c, FG_ERR_LIMIT);
    base(&c); meta_set(&c, "\1\0a\6\1\0\0\0\1", 9, 1); EXPECT(&c, FG_ERR_TRUNCATED);
    base(&c); meta_set(&c, "\1\0a\6\4\1\0\0\0\1\0\0\0\xff", 14, 1); EXPECT(&c, FG_ERR_BAD_NAME);
    base(&c); meta_set(&c, "\1\0a\6\4\1\0\0\0\1\0\0\0z", 14, 1); EXPECT(&c, FG_OK);
    /* empty key; duplicate keys */
    base(&c); meta_set(&c, "\0\0\1\0\0\0\0\0\0\0\0\0", 11, 1); EXPECT(&c, FG_ERR_BAD_NAME);
    base(&c);
    meta_set(&c, "\1\0k\1\0\0\0\0\0\0\0\0\1\0k\1\0\0\0\0\0\0\0\0", 24, 2);
    EXPECT(&c, FG_ERR_DUPLICATE);
}
END_TEST

/* ---- tensor shape and codec (T*, C*) ---- */
START_TEST(tensor_rules)
{
    craft c;
    base(&c); c.t[0].n_dims = 9;           EXPECT(&c, FG_ERR_LIMIT);
    base(&c); c.t[0].dims[1] = (1ull << 40) + 1; EXPECT(&c, FG_ERR_LIMIT);
    /* element count overflow: 4 * 2^40 * 2^40 wraps 64 bits */
    base(&c); c.t[0].n_dims = 3; c.t[0].dims[1] = 1ull << 40; c.t[0].dims[2] = 1ull << 40;
    EXPECT(&c, FG_ERR_OVERFLOW);
    /* element count past 2^48 without overflow */
    base(&c); c.t[0].dims[1] = 1ull << 47;  EXPECT(&c, FG_ERR_LIMIT);
    base(&c); c.t[0].codec[0] = 9;          EXPECT(&c, FG_ERR_BAD_ENUM);
    base(&c); c.t[0].codec[0] = 0;          EXPECT(&c, FG_ERR_BAD_ENUM);
    base(&c); c.t[0].codec[6] = 1;          EXPECT(&c, FG_ERR_RESERVED);
    base(&c); c.t[0].codec[8] = 64;         EXPECT(&c, FG_ERR_RESERVED); /* f32 with a group */
}
END_TEST

/* A valid Q4 tensor [130, 64], groups of 64 along axis 0, F16 scales: each full row-group is
 * 64 columns x 36 bytes = 2304 bytes. */
static void q4_base(craft *c)
{
    base(c);
    rtensor *t = &c->t[0];
    uint8_t q[12] = {FG_CODEC_Q4, 4, 0, FG_SCALE_F16, 0, 1, 0, 0, 64, 0, 0, 0};
    memcpy(t->codec, q, 12);
    t->dims[0] = 130;
    t->dims[1] = 64;
    t->n_chunks = 3;
    t->ch[0] = (rchunk){8192, 2304, 0, 64};
    t->ch[1] = (rchunk){12288, 2304, 64, 64};
    t->ch[2] = (rchunk){16384, 2304, 128, 2};
}

START_TEST(quant_codec_rules)
{
    craft c;
    q4_base(&c);                            EXPECT(&c, FG_OK);
    q4_base(&c); c.t[0].codec[1] = 8;       EXPECT(&c, FG_ERR_BAD_ENUM);   /* bits */
    q4_base(&c); c.t[0].codec[2] = 2;       EXPECT(&c, FG_ERR_BAD_ENUM);   /* axis */
    q4_base(&c); c.t[0].codec[3] = 3;       EXPECT(&c, FG_ERR_BAD_ENUM);   /* scale dtype */
    q4_base(&c); c.t[0].codec[4] = 2;       EXPECT(&c, FG_ERR_BAD_ENUM);   /* nibble order */
    q4_base(&c); c.t[0].codec[5] = 2;       EXPECT(&c, FG_ERR_VERSION);    /* layout version */
    q4_base(&c); c.t[0].codec[8] = 48;      EXPECT(&c, FG_ERR_LIMIT);      /* not 2^k */
    q4_base(&c); c.t[0].codec[8] = 4;       EXPECT(&c, FG_ERR_LIMIT);      /* < 8 */
    q4_base(&c); c.t[0].codec[9] = 0x20;    EXPECT(&c, FG_ERR_LIMIT);      /* 8192 > 4096 */
    q4_base(&c); c.t[0].n_dims = 0;         EXPECT(&c, FG_ERR_UNSUPPORTED); /* 0-d quantized */
    /* chunk boundary inside a row-group */
    q4_base(&c);
    c.t[0].ch[0] = (rchunk){8192, 2304, 0, 32};
    c.t[0].ch[1] = (rchunk){12288, 2304, 32, 96};
    c.t[0].ch[2] = (rchunk){20480, 2304, 128, 2};
    EXPECT(&c, FG_ERR_BAD_ALIGN);
}
END_TEST

/* ---- chunks (K*) ---- */
START_TEST(chunk_rules)
{
    craft c;
    base(&c); c.t[0].ch[1].off = 12288 + 512; EXPECT(&c, FG_ERR_BAD_ALIGN);
    base(&c); c.t[0].ch[0].off = 4096;     EXPECT(&c, FG_ERR_OUT_OF_BOUNDS); /* header area */
    base(&c); c.t[0].ch[1].off = 1ull << 40; EXPECT(&c, FG_ERR_OUT_OF_BOUNDS);
    base(&c); c.t[0].ch[1].off = ~0ull - 4095; c.t[0].ch[1].len = 8192;
    EXPECT(&c, FG_ERR_OVERFLOW);
    base(&c); c.t[0].ch[1].len = 0;        EXPECT(&c, FG_ERR_SIZE_MISMATCH);
    base(&c); c.t[0].ch[1].len = 127;      EXPECT(&c, FG_ERR_SIZE_MISMATCH);
    base(&c); c.t[0].ch[1].len = (1ull << 30) + 1; EXPECT(&c, FG_ERR_LIMIT);
    base(&c); c.t[0].ch[1].first_row = 3;  EXPECT(&c, FG_ERR_CORRUPT);
    base(&c); c.t[0].ch[1].n_rows = 3;     EXPECT(&c, FG_ERR_OUT_OF_BOUNDS);
    base(&c); c.t[0].ch[1].n_rows = 0;     EXPECT(&c, FG_ERR_OUT_OF_BOUNDS);
    base(&c); c.t[0].n_chunks = 1;         EXPECT(&c, FG_ERR_CORRUPT); /* rows not covered */
    base(&c); c.t[0].ch[1].off = 8192;     EXPECT(&c, FG_ERR_OVERLAP); /* same range twice */
    base(&c); c.t[0].ch[1].off = INDEX_OFF; EXPECT(&c, FG_ERR_OVERLAP); /* over the index */
    /* chunk count x size: a tensor claiming more chunks than the header total */
    base(&c); c.n_chunks_add = 0; c.t[0].n_chunks = 2; c.t[0].ch[1].off = 12288;
    c.n_tensors = 1; EXPECT(&c, FG_OK);
    /* an empty tensor must have no chunks */
    base(&c); c.t[0].dims[1] = 0;          EXPECT(&c, FG_ERR_OUT_OF_BOUNDS);
    base(&c); c.t[0].dims[1] = 0; c.t[0].n_chunks = 0; EXPECT(&c, FG_OK);
}
END_TEST

START_TEST(chunk_claims_more_than_header)
{
    craft c;
    base(&c);
    c.n_chunks_add = -1; /* header says 1 chunk, the tensor says 2 */
    EXPECT(&c, FG_ERR_SIZE_MISMATCH);
}
END_TEST

START_TEST(generations_pick_newest_valid)
{
    /* slot 1 holds generation 1 of the base file; write a generation-2 superblock into slot 0
     * that points at the same index: it wins; torn, generation 1 wins. */
    craft c;
    base(&c);
    size_t len;
    uint8_t *f = build(&c, &len);
    memcpy(f, f + 4096, 128);
    fg_put64(f + 24, 2);
    fg_put64(f + 120, XXH3_64bits(f, 120));
    fg_fgt_reader *r;
    fg_err err;
    fg_fgt_file_info fi;
    ck_assert_int_eq(fg_fgt_open_mem(f, len, "gen", 0, &r, &err), 0);
    fg_fgt_file(r, &fi);
    ck_assert_uint_eq(fi.generation, 2);
    ck_assert_int_eq(fi.slot, 0);
    fg_fgt_close(r);
    f[30] ^= 1; /* torn: checksum no longer matches */
    ck_assert_int_eq(fg_fgt_open_mem(f, len, "gen", 0, &r, &err), 0);
    fg_fgt_file(r, &fi);
    ck_assert_uint_eq(fi.generation, 1);
    ck_assert_int_eq(fi.slot, 1);
    fg_fgt_close(r);
    free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("format_crafted");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, base_file_is_valid);
    tcase_add_test(tc, sb_rules);
    tcase_add_test(tc, file_shorter_than_header);
    tcase_add_test(tc, index_rules);
    tcase_add_test(tc, name_rules);
    tcase_add_test(tc, meta_rules);
    tcase_add_test(tc, tensor_rules);
    tcase_add_test(tc, quant_codec_rules);
    tcase_add_test(tc, chunk_rules);
    tcase_add_test(tc, chunk_claims_more_than_header);
    tcase_add_test(tc, generations_pick_newest_valid);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
