/* fg-inspect - show what a .fgt file holds: header, metadata, tensors, chunks; --verify checks
 * every checksum; --json prints the same for scripts. Given a store directory, shows the store
 * instead (inspect_store.c), or a prefix KV cache's entries, bytes and hits (inspect_prefix.c);
 * --reindex rebuilds its catalog from its files first. Exit 0 ok,
 * 1 bad file or store, or output that could not be written (stdout full or closed), 2 bad
 * usage. */
#include <errno.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgt.h"
#include "fg_version.h"
#include "inspect_prefix.h"
#include "inspect_store.h"
#include "inspect_util.h"
#include "store.h"
#include "tool_args.h"

static void json_str(const char *s) { iu_json_str(s); }

static void shape_str(const fg_fgt_tensor_info *t, char *buf, size_t n)
{
    iu_shape(t->n_dims, t->dims, buf, n);
}

static void codec_str(const fg_codec *c, char *buf, size_t n) { iu_codec(c, 1, buf, n); }

static void meta_value(const fg_meta_info *m, int json)
{
    switch (m->type) {
    case FG_META_U64: printf("%" PRIu64, m->u64); break;
    case FG_META_I64: printf("%" PRId64, m->i64); break;
    case FG_META_F64: printf("%.17g", m->f64); break;
    case FG_META_STRING:
        if (json)
            json_str(m->data);
        else
            printf("\"%.*s%s\"", 60, (const char *)m->data, m->len > 60 ? "..." : "");
        break;
    case FG_META_BYTES: printf(json ? "{\"bytes\": %" PRIu64 "}" : "<%" PRIu64 " bytes>", m->len); break;
    default:
        printf(json ? "{\"array\": %" PRIu64 "}" : "<array of %" PRIu64 ">", m->len);
        break;
    }
}

static void print_text(const fg_fgt_reader *r, int chunks)
{
    fg_fgt_file_info fi;
    fg_fgt_file(r, &fi);
    printf("format %u.%u  alignment %u  generation %" PRIu64 " (slot %d)  file %" PRIu64
           " bytes\nindex at %" PRIu64 " (%" PRIu64 " bytes)  %u tensors  %" PRIu64
           " chunks  %u metadata\n",
           fi.version_major, fi.version_minor, fi.alignment, fi.generation, fi.slot, fi.file_size,
           fi.index_offset, fi.index_length, fi.n_tensors, fi.n_chunks, fi.n_meta);
    for (uint32_t i = 0; i < fg_fgt_meta_count(r); i++) {
        fg_meta_info m;
        fg_fgt_meta(r, i, &m);
        printf("  meta %-32s ", m.key);
        meta_value(&m, 0);
        putchar('\n');
    }
    printf("\n%-48s %-16s %-24s %6s %14s\n", "tensor", "codec", "shape", "chunks", "bytes");
    for (uint32_t i = 0; i < fg_fgt_tensor_count(r); i++) {
        fg_fgt_tensor_info t;
        char shape[160], codec[48];
        fg_fgt_tensor(r, i, &t);
        shape_str(&t, shape, sizeof shape);
        codec_str(&t.codec, codec, sizeof codec);
        printf("%-48s %-16s %-24s %6u %14" PRIu64 "\n", t.name, codec, shape, t.n_chunks,
               t.payload_bytes);
    }
    if (!chunks)
        return;
    printf("\n%-48s %5s %14s %12s %10s %12s %5s %-16s\n", "tensor", "chunk", "offset", "length",
           "first_row", "rows", "align", "xxh3");
    for (uint32_t i = 0; i < fg_fgt_tensor_count(r); i++) {
        fg_fgt_tensor_info t;
        fg_fgt_tensor(r, i, &t);
        for (uint32_t c = 0; c < t.n_chunks; c++) {
            fg_fgt_chunk_info ci;
            fg_fgt_chunk(r, i, c, &ci);
            printf("%-48s %5u %14" PRIu64 " %12" PRIu64 " %10" PRIu64 " %12" PRIu64 " %5s %016" PRIx64
                   "\n", t.name, c, ci.offset, ci.length, ci.first_row, ci.n_rows,
                   ci.offset % fi.alignment ? "NO" : "ok", ci.xxh3);
        }
    }
}

static void print_json(const fg_fgt_reader *r, int chunks)
{
    fg_fgt_file_info fi;
    fg_fgt_file(r, &fi);
    printf("{\"version\": \"%u.%u\", \"alignment\": %u, \"generation\": %" PRIu64
           ", \"slot\": %d, \"file_size\": %" PRIu64 ", \"index_offset\": %" PRIu64
           ", \"index_length\": %" PRIu64 ",\n \"metadata\": {",
           fi.version_major, fi.version_minor, fi.alignment, fi.generation, fi.slot, fi.file_size,
           fi.index_offset, fi.index_length);
    for (uint32_t i = 0; i < fg_fgt_meta_count(r); i++) {
        fg_meta_info m;
        fg_fgt_meta(r, i, &m);
        printf(i ? ", " : "");
        json_str(m.key);
        printf(": ");
        meta_value(&m, 1);
    }
    printf("},\n \"tensors\": [");
    for (uint32_t i = 0; i < fg_fgt_tensor_count(r); i++) {
        fg_fgt_tensor_info t;
        char shape[160];
        fg_fgt_tensor(r, i, &t);
        shape_str(&t, shape, sizeof shape);
        printf(i ? ",\n  {\"name\": " : "\n  {\"name\": ");
        json_str(t.name);
        printf(", \"codec\": \"%s\", \"bits\": %u, \"group_size\": %u, \"group_axis\": %u, "
               "\"shape\": %s, \"bytes\": %" PRIu64 ", \"source\": ",
               fg_codec_name(t.codec.id), t.codec.bits, t.codec.group_size, t.codec.group_axis,
               shape, t.payload_bytes);
        json_str(t.source_name);
        printf(", \"source_hash\": \"%016" PRIx64 "\"", t.source_hash);
        if (chunks) {
            printf(", \"chunks\": [");
            for (uint32_t c = 0; c < t.n_chunks; c++) {
                fg_fgt_chunk_info ci;
                fg_fgt_chunk(r, i, c, &ci);
                printf("%s{\"offset\": %" PRIu64 ", \"length\": %" PRIu64 ", \"first_row\": %" PRIu64
                       ", \"rows\": %" PRIu64 ", \"xxh3\": \"%016" PRIx64 "\"}",
                       c ? ", " : "", ci.offset, ci.length, ci.first_row, ci.n_rows, ci.xxh3);
            }
            printf("]");
        }
        printf("}");
    }
    printf("\n ]}\n");
}

/* ---- the flags: one table (tool_args.h) ---- */

static struct {
    int json, verify, chunks, reindex;
} g_a = {0, 0, 1, 0};

static ta_opt k_opts[] = {
    {.kind = TA_FLAG, .name = "json", .short_name = 'j', .dst = &g_a.json, .size = sizeof(int),
     .val = 1, .help = "machine-readable output"},
    {.kind = TA_FLAG, .name = "verify", .short_name = 'v', .dst = &g_a.verify,
     .size = sizeof(int), .val = 1, .help = "check every chunk checksum; exit 1 naming the first "
     "bad chunk"},
    {.kind = TA_FLAG, .name = "no-chunks", .short_name = 'n', .dst = &g_a.chunks,
     .size = sizeof(int), .val = 0, .help = "list tensors only"},
    {.kind = TA_FLAG, .name = "reindex", .dst = &g_a.reindex, .size = sizeof(int), .val = 1,
     .help = "rebuild the store's catalog from its files (a damaged or lost catalog), then show "
     "the store; needs write access"},
    {.kind = TA_NOTE, .name = "version", .help = "the version and the build's features"},
    {.kind = TA_HELP, .name = "help", .short_name = 'h', .help = "this text"},
    {0},
};

static const ta_cmd k_cmd = {
    "fg-inspect",
    "usage: fg-inspect [--json] [--verify] [--no-chunks] FILE.fgt|STORE_DIR|CACHE_DIR\n"
    "       fg-inspect --reindex [--json] [--verify] [--no-chunks] STORE_DIR\n",
    k_opts, "unknown option", 1, NULL, NULL,
};

/* One .fgt file: its header, metadata, tensors (and chunks), after --verify's check. */
static int inspect_file(const char *path)
{
    fg_fgt_reader *r;
    fg_err err;
    if (fg_fgt_open(path, 0, &r, &err)) {
        fprintf(stderr, "fg-inspect: %s\n", err.msg);
        return 1;
    }
    if (g_a.verify && fg_fgt_verify(r, NULL, NULL, &err)) {
        fprintf(stderr, "fg-inspect: verify failed: %s\n", err.msg);
        fg_fgt_close(r);
        return 1;
    }
    if (g_a.json)
        print_json(r, g_a.chunks);
    else
        print_text(r, g_a.chunks);
    if (g_a.verify && !g_a.json) {
        fg_fgt_file_info fi;
        fg_fgt_file(r, &fi);
        printf("\nverify: all %" PRIu64 " chunk checksums match\n", fi.n_chunks);
    }
    fg_fgt_close(r);
    return 0;
}

static int inspect(int argc, char **argv)
{
    int first = ta_parse(&k_cmd, argc, argv);
    if (first != argc - 1)
        ta_die("%s (see fg-inspect --help)", first == argc
               ? "give one FILE.fgt or store directory"
               : "give one FILE.fgt or store directory, not several");
    const char *path = argv[first];
    struct stat sb;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (g_a.reindex && !is_dir)
        ta_die("--reindex %s: not a store directory", path);
    if (!is_dir && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* a FIFO's open would */
        fprintf(stderr, "fg-inspect: %s: not a .fgt file or a store directory\n", path);
        return 1;                                                  /* block */
    }
    if (g_a.reindex) {
        fg_err err;
        if (fg_store_reindex(path, NULL, &err)) {
            fprintf(stderr, "fg-inspect: reindex failed: %s\n", err.msg);
            return 1;
        }
        fprintf(stderr, "fg-inspect: %s: catalog rebuilt from the store's files\n", path);
    }
    fg_prefix_info pinfo;
    if (is_dir && is_prefix_cache(path, &pinfo)) /* fg-infer --prefix-cache DIR */
        return inspect_prefix(path, &pinfo, g_a.json, g_a.verify);
    if (is_dir)
        return inspect_store(path, g_a.json, g_a.verify, g_a.chunks);
    return inspect_file(path);
}

int main(int argc, char **argv)
{
    if (fg_version_flag(argc, argv, "fg-inspect"))
        return 0;
    ta_init("fg-inspect", 0);
    int rc = inspect(argc, argv);
    if (fflush(stdout) || ferror(stdout)) { /* text nobody received is a failure */
        fprintf(stderr, "fg-inspect: stdout: write error: %s\n",
                errno ? strerror(errno) : "output lost");
        return 1;
    }
    return rc;
}
