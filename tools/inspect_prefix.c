/* inspect_prefix.c - fg-inspect's view of a prefix KV cache (a store whose KV pages hold
 * fg-infer --prefix-cache entries, prefix/prefix.h): its identity, entries, bytes and hits,
 * as a table or JSON; --verify checks every page of the store first. */
#include <inttypes.h>
#include <stdio.h>

#include "inspect_prefix.h"
#include "inspect_util.h"
#include "prefix.h"
#include "store.h"

int is_prefix_cache(const char *dir, fg_prefix_info *info)
{
    fg_err err;
    return fg_prefix_info_get(dir, info, &err) == FG_OK && info->has_ident;
}

static int verify_store(const char *dir)
{
    fg_store *s;
    fg_err err;
    fg_store_verify_report rep;
    int rc = fg_store_open(dir, FG_STORE_RDONLY, NULL, &s, &err);
    if (rc == FG_OK)
        rc = fg_store_verify(s, &rep, &err);
    fg_store_close(s);
    if (rc) {
        fprintf(stderr, "fg-inspect: verify failed: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "fg-inspect: %s: verify ok, %" PRIu64 " KV pages checked\n", dir,
            rep.kv_pages);
    return 0;
}

int inspect_prefix(const char *dir, const fg_prefix_info *in, int json, int verify)
{
    if (verify && verify_store(dir))
        return 1;
    const fg_prefix_ident *id = &in->ident;
    uint64_t tokens = in->entries * id->page_tokens;
    if (json) {
        printf("{\"prefix_cache\": ");
        iu_json_str(dir);
        printf(", \"model\": ");
        iu_json_str(id->label);
        printf(", \"model_hash\": \"%016" PRIx64 "\", \"backend\": ", id->model);
        iu_json_str(id->backend);
        printf(", \"layers\": %u, \"row_bytes\": %u, \"kv_codec\": %u, \"kv_bits\": %u, "
               "\"compute\": %u, \"page_tokens\": %u, \"entries\": %" PRIu64 ", \"tokens\": %"
               PRIu64 ", \"kv_pages\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"file_bytes\": %"
               PRIu64 ", \"hits\": %" PRIu64 ", \"deepest_page\": %u, \"bad\": %" PRIu64 "}\n",
               id->n_layers, id->row_bytes, id->codec_id, id->codec_bits, id->compute,
               id->page_tokens, in->entries, tokens, in->kv_pages, in->bytes, in->file_bytes,
               in->hits, in->deepest, in->bad);
    } else {
        printf("prefix cache %s\n  made for %s (content hash %016" PRIx64 "), backend %s, "
               "compute %s\n  %u layers, KV rows of %u bytes (%s), %u tokens a page\n"
               "  %" PRIu64 " entries (%" PRIu64 " prompt tokens, prefixes up to %u pages), %"
               PRIu64 " layer pages\n  %" PRIu64 " bytes in use, %" PRIu64 " bytes of page "
               "files; %" PRIu64 " hits%s\n",
               dir, id->label, id->model, id->backend, id->compute ? "int8" : "f32",
               id->n_layers, id->row_bytes, id->codec_bits ? "4-bit" : "f32", id->page_tokens,
               in->entries, tokens, in->deepest, in->kv_pages, in->bytes, in->file_bytes,
               in->hits, in->bad ? "; some meta pages unreadable" : "");
    }
    return fflush(stdout) ? 1 : 0;
}
