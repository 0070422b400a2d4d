/* fgt_int.h - private to format/: on-disk field offsets and helpers shared by the writer
 * and the reader. SPEC.md sections 3-6 describe the same numbers in prose. */
#ifndef FG_FGT_INT_H
#define FG_FGT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "fgt.h"

/* Superblock field offsets (SPEC 3). */
enum {
    SB_MAGIC = 0,
    SB_ENDIAN = 8,
    SB_VMAJOR = 12,
    SB_VMINOR = 14,
    SB_SIZE = 16,
    SB_ALIGN_LOG2 = 20,
    SB_GENERATION = 24,
    SB_INDEX_OFF = 32,
    SB_INDEX_LEN = 40,
    SB_INDEX_XXH3 = 48,
    SB_DATA_END = 56,
    SB_FLAGS = 64,
    SB_RESERVED = 72, /* 48 bytes of zero */
    SB_XXH3 = 120,
};

#define FGT_MAGIC "\x89" "FGT\r\n\x1a\n"
#define FGT_ENDIAN_MARKER 0x0A0B0C0Du
#define FGT_INDEX_MAGIC "FGIX"
#define FGT_INDEX_HEADER_SIZE 32u
#define FGT_CODEC_SIZE 12u
#define FGT_CHUNK_ENTRY_SIZE 40u

/* Validate a name/key of len bytes: 1..FG_FGT_MAX_NAME (0 allowed when allow_empty), valid
 * UTF-8, no control characters. Returns FG_OK or FG_ERR_BAD_NAME / FG_ERR_LIMIT. */
int fgt_check_name(const uint8_t *s, size_t len, int allow_empty);
/* 1 when s[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
int fgt_utf8_valid(const uint8_t *s, size_t len);

void fgt_codec_encode(const fg_codec *c, uint8_t out[FGT_CODEC_SIZE]);
void fgt_codec_decode(const uint8_t in[FGT_CODEC_SIZE], fg_codec *c, uint16_t *reserved);

/* Data region start for an alignment: align_up(FG_FGT_HEADER_SIZE, alignment). */
static inline uint64_t fgt_data_start(uint64_t alignment)
{
    return alignment > FG_FGT_HEADER_SIZE ? alignment : FG_FGT_HEADER_SIZE;
}

#endif
