/* fg-tokenize - encode text to token ids or decode ids to text with a checkpoint's tokenizer
 * (tokenizer.json, or vocab.json + merges.txt, [+ tokenizer_config.json,
 * special_tokens_map.json] in one directory). A thin main over text/tokenizer.h.
 * Encoding defaults to what transformers' tokenizer(text) gives: special tokens in the text are
 * matched and the post-processor's BOS/EOS are added (FG_TOK_SPECIAL | FG_TOK_ADD_BOS);
 * --raw is tokenizers' encode(text, add_special_tokens=False) with special tokens split as text.
 * Decoding: an id past the vocabulary decodes as nothing (as transformers does); a negative or
 * non-numeric id is an error naming its index. Exit 0 ok, 1 bad input, 2 bad usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_version.h"
#include "tokenizer.h"
#include "tool_args.h"

#ifndef FG_GPT2_DIR
#define FG_GPT2_DIR "data/gpt2-tokenizer"
#endif

/* Read all of f; the buffer is NUL-terminated (not counted in *len). NULL with errno set on a
 * read error (a directory given to -f reads as EISDIR, not as no text) or no memory. */
static char *slurp(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - 1 - n, f);
        if (ferror(f)) {
            int e = errno;
            free(b);
            errno = e ? e : EIO;
            return NULL;
        }
        if (n < cap - 1)
            break;
        char *nb = realloc(b, cap *= 2);
        if (!nb)
            free(b);
        b = nb;
    }
    if (b)
        b[n] = '\0';
    *len = n;
    return b;
}

static int push_id(fg_tok_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 256;
        int32_t *ni = realloc(v->ids, cap * sizeof *v->ids);
        if (!ni)
            return -1;
        v->ids = ni;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

#define ID_SEP " \n\t,\r"

/* Parse the id word s (wl bytes, at index v->n) and append it; 0, or the exit code after one
 * line naming the index: 2 for a word that is not a number, 1 for a number that is no id. */
static int parse_id(const char *s, int wl, fg_tok_ids *v)
{
    char *end;
    int show = wl < 40 ? wl : 40;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || end != s + wl) {
        fprintf(stderr, "fg-tokenize: --decode: ids[%zu] = \"%.*s\": not an id\n", v->n, show, s);
        return 2;
    }
    if (x < 0 || errno || x > INT32_MAX) {
        fprintf(stderr, "fg-tokenize: --decode: ids[%zu] = %.*s is not a token id (%s)\n", v->n,
                show, s, x < 0 ? "ids are 0 or more" : "ids are at most 2147483647");
        return 1;
    }
    if (push_id(v, (int32_t)x)) {
        fprintf(stderr, "fg-tokenize: out of memory\n");
        return 1;
    }
    return 0;
}

static int read_ids(int argc, char **argv, fg_tok_ids *v)
{
    size_t len = 0;
    char *in = argc ? NULL : slurp(stdin, &len);
    if (!argc && !in) {
        fprintf(stderr, "fg-tokenize: stdin: %s\n", strerror(errno));
        return 1;
    }
    int rc = 0;
    for (int i = 0; !rc; i++) {
        const char *s = argc ? (i < argc ? argv[i] : NULL) : (i == 0 ? in : NULL);
        if (!s)
            break;
        while (*s && !rc) {
            if (strchr(ID_SEP, *s)) {
                s++;
                continue;
            }
            int wl = (int)strcspn(s, ID_SEP);  /* the word at fault, on one line */
            rc = parse_id(s, wl, v);
            s += wl;
        }
    }
    free(in);
    return rc;
}

static int do_decode(fg_tok *tok, int argc, char **argv, unsigned flags)
{
    fg_tok_ids ids = {0};
    fg_tok_bytes out = {0};
    fg_err err;
    int rc = read_ids(argc, argv, &ids);
    if (!rc && fg_tok_decode(tok, ids.ids, ids.n, flags, &out, &err)) {
        fprintf(stderr, "fg-tokenize: %s\n", err.msg);
        rc = 1;
    }
    if (!rc)
        fwrite(out.data, 1, out.len, stdout);
    fg_tok_ids_free(&ids);
    fg_tok_bytes_free(&out);
    return rc;
}

static int do_encode(fg_tok *tok, const char *text, size_t len, unsigned flags)
{
    fg_tok_ids ids = {0};
    fg_err err;
    if (fg_tok_encode(tok, text, len, flags, &ids, &err)) {
        fprintf(stderr, "fg-tokenize: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < ids.n; i++)
        printf(i ? " %d" : "%d", ids.ids[i]);
    printf("\n");
    fg_tok_ids_free(&ids);
    return 0;
}

/* ---- the flags: one table (tool_args.h) ---- */

static struct {
    const char *dir, *file;
    unsigned eflags, dflags;
    int decode;
} g_a = {FG_GPT2_DIR, NULL, FG_TOK_SPECIAL | FG_TOK_ADD_BOS, 0, 0};

#define BITS(k, n, f, v, h) {.kind = k, .name = n, .dst = &(f), .size = sizeof(f), .val = v, \
                             .help = h}

static ta_opt k_opts[] = {
    {.kind = TA_STR, .name = "dir", .dst = &g_a.dir, .arg = "DIR",
     .help = "tokenizer files (default " FG_GPT2_DIR ")"},
    BITS(TA_ANDNOT, "no-special", g_a.eflags, FG_TOK_SPECIAL, "split special tokens such as "
         "<|eot_id|> in the text as text"),
    BITS(TA_ANDNOT, "no-bos", g_a.eflags, FG_TOK_ADD_BOS, "add no BOS/EOS (the tokenizer's "
         "post-processor or add_bos_token)"),
    BITS(TA_FLAG, "raw", g_a.eflags, 0, "both: the ids of the text alone (the default before "
         "issue 38) (by default the ids are transformers' tokenizer(text)[\"input_ids\"]; "
         "--special and --bos are accepted and are the default)"),
    BITS(TA_OR, "special", g_a.eflags, FG_TOK_SPECIAL, "match special tokens in the text (the "
         "default)"),
    BITS(TA_OR, "bos", g_a.eflags, FG_TOK_ADD_BOS, "add the post-processor's BOS/EOS (the "
         "default)"),
    {.kind = TA_STR, .short_name = 'f', .dst = &g_a.file, .arg = "FILE",
     .help = "encode the bytes of FILE ('-' = stdin; default when no TEXT)"},
    BITS(TA_FLAG, "decode", g_a.decode, 1, "read ids (arguments or stdin) and write their bytes; "
         "an id past the vocabulary decodes as nothing"),
    BITS(TA_OR, "skip-special", g_a.dflags, FG_TOK_SKIP_SPECIAL, "with --decode, leave special "
         "tokens out"),
    {.kind = TA_NOTE, .name = "version", .help = "the commit it was built from, the build's "
     "features"},
    {.kind = TA_HELP, .name = "help", .short_name = 'h', .help = "this text"},
    {0},
};

/* "-5" among the ids: a negative number, said as such rather than as an unknown option. */
static void negative_id(int optopt_, const char *option)
{
    (void)option;
    if (optopt_ >= '0' && optopt_ <= '9')
        ta_die("--decode: -%c...: a negative number is not a token id (ids are 0 or more; ids "
               "after -- are read as ids)", optopt_);
}

static const ta_cmd k_cmd = {
    "fg-tokenize",
    "usage: fg-tokenize [--dir DIR] [--raw | --no-special | --no-bos] [TEXT... | -f FILE]\n"
    "       fg-tokenize [--dir DIR] --decode [--skip-special] [ID...]\n",
    k_opts, "bad option or missing value:", 1, negative_id, NULL,
};

/* Encode TEXT arguments (each its own line), or -f FILE / stdin as one text. */
static int encode_input(fg_tok *tok, int n, char **texts)
{
    int rc = 0;
    if (n && !g_a.file) {
        for (int i = 0; i < n && !rc; i++)
            rc = do_encode(tok, texts[i], strlen(texts[i]), g_a.eflags);
        return rc;
    }
    const char *file = g_a.file;
    FILE *f = !file || strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    size_t len = 0;
    char *text = f ? slurp(f, &len) : NULL;
    if (!text)
        fprintf(stderr, "fg-tokenize: %s: %s\n", file && f != stdin ? file : "stdin",
                strerror(errno));
    rc = text ? do_encode(tok, text, len, g_a.eflags) : 1;
    if (f && f != stdin)
        fclose(f);
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    if (fg_version_flag(argc, argv, "fg-tokenize"))
        return 0;
    ta_init("fg-tokenize", 0);
    int first = ta_parse(&k_cmd, argc, argv);
    if (g_a.file && (g_a.decode || first < argc)) /* not one of them silently dropped */
        ta_die("-f %s: %s", g_a.file, g_a.decode ? "--decode reads ids from arguments or stdin, "
               "not -f" : "give TEXT arguments or -f FILE, not both");
    fg_tok *tok;
    fg_err err;
    if (fg_tok_load_dir(g_a.dir, &tok, &err)) {
        fprintf(stderr, "fg-tokenize: %s\n", err.msg);
        return 1;
    }
    int rc = g_a.decode ? do_decode(tok, argc - first, argv + first, g_a.dflags)
                        : encode_input(tok, argc - first, argv + first);
    fg_tok_free(tok);
    if (fflush(stdout) || ferror(stdout)) { /* ids nobody received are a failure */
        fprintf(stderr, "fg-tokenize: stdout: write error: %s\n",
                errno ? strerror(errno) : "output lost");
        return 1;
    }
    return rc;
}
