/* infer_common.h - what the test_infer_*.c suites share: a fixture's transformers reference
 * (tests/fixtures/<opt|llama>/<name>.ref), converting a fixture checkpoint into a store in the
 * test's temp dir, an engine over it, and the logits / greedy checks against the reference.
 *
 * The suites are tables: one row per family x case (infer_case), iterated by one Check loop
 * test per case kind (layouts, placements, KV on disk, device placements, 4-bit weights). A row
 * names its case: infer_row() prints it as the iteration starts and the checks below put it at
 * the head of their failure messages (Check itself gives the loop index).
 *
 * A TCase's cases share their converted stores (convert, convert_as): one conversion of a layout
 * per test program, however many cases and tables use it.
 *
 * FG_FIXTURE_DIR: the assembled fixture tree (tests/fixtures_assemble.sh, in the build dir). */
#ifndef FG_TEST_INFER_COMMON_H
#define FG_TEST_INFER_COMMON_H

#include <stdint.h>

#include "convert.h"
#include "engine.h"
#include "quant.h"
#include "testutil.h"

/* One row of a case table. bound/agree: the case kind's bound where it has one (the 4-bit
 * cache's nmse for placements and KV on disk, the 4-bit weights' nmse and argmax agreement). */
typedef struct infer_case {
    const char *name;   /* the case (the test's name before the tables): what a failure names */
    const char *layout; /* the checkpoint directory: fixtures/<opt|llama>/<layout> */
    const char *ref;    /* its transformers reference: <ref>.ref */
    double bound, agree;
} infer_case;

#define INFER_ROWS(t) ((int)(sizeof(t) / sizeof((t)[0])))
/* For a table whose test reads its rows through infer_row only: the rows to run, all of them or,
 * with $FG_INFER_ONLY set, those whose layout contains one of its comma-separated words (the
 * MLA-only reruns: FG_INFER_ONLY=deepseek,kimi); infer_row then maps the loop's index onto them. */
#define INFER_ROWS_ONLY(t) infer_rows_only((t), INFER_ROWS(t))
int infer_rows_only(const infer_case *rows, int n);

/* rows[i], its name made the current case (infer_now) and printed */
const infer_case *infer_row(const infer_case *rows, int i);
extern const char *infer_now; /* the current case's name ("" outside a table) */

/* A TCase with the temp-dir fixture (tu_tmpdir_create/remove) and a timeout in seconds. */
TCase *infer_tcase(const char *name, int timeout);

/* A fixture's reference: the 3 x 12 left-padded batch, transformers' logits for it (owned: free
 * logits), the prompt text and greedy continuation (Llama fixtures). */
typedef struct ref {
    const char *dir;
    uint32_t batch, seq, vocab;
    char prompt_text[1024];
    int32_t ids[3][12];
    int mask[3][12];
    float *logits;
    int32_t prompt[64], greedy[64];
    uint32_t n_prompt, n_greedy;
} ref;

typedef struct result {
    double max_diff;
    double agree; /* fraction of positions whose argmax matches */
    double nmse;  /* sum (mine - ref)^2 / sum ref^2 over the compared logits */
} result;

/* An engine with the store and model it borrows. */
typedef struct eng {
    fg_store *s;
    fg_model *m;
    fg_engine *e;
} eng;

const char *family_dir(const char *name); /* FG_FIXTURE_DIR/opt or /llama */
void load_ref(const char *name, ref *r);
/* The layout converted into a store (q4: 1 4-bit axis 0, 2 axis 1), once per TCase made by
 * infer_tcase: the cases share it (read-only). gpt2_tok: GPT-2's tokenizer whatever the family
 * (OPT's always). The path stays valid for the case (4 calls' paths at once). */
const char *convert_as(const char *layout, int q4, int gpt2_tok);
/* Any checkpoint src converted with o, shared the same way under the name key (one key, one
 * src and o). */
const char *convert_shared(const char *src, const char *key, const fg_convert_opts *o);
const char *convert(const char *layout, int q4); /* convert_as(layout, q4, 0) */
uint32_t argmax(const float *x, uint32_t n);
int eng_open(const char *dir, const fg_engine_opts *o, eng *x, fg_err *err);
void eng_close(eng *x);
/* The fixture batch's logits through an engine opened with o (left padding dropped: row b's
 * t-th token at + (b * 12 + t) * vocab; the caller frees them) */
float *fixture_logits(const char *store, const ref *r, fg_engine_opts o, fg_engine_stats *st);
result compare_logits(const float *logits, const ref *r); /* fixture_logits' against r */
result check_logits_st(const char *store, const ref *r, fg_engine_opts o, fg_engine_stats *st);
result check_logits(const char *store, const ref *r, fg_engine_opts o);
void check_greedy(const char *store, const ref *r, fg_engine_opts o);
fg_engine_opts defaults(void);
void check_prompt_ids(const char *store, const ref *r);

#endif
