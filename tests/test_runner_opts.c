/* test_runner_opts.c - the rules between a run's options belong to the libraries that own them
 * (issue 39, "thin tools"): fg_run_opts_check (runner/runner_opts.c) refuses what fg-infer
 * refuses, in the same words, for a library caller that sets fg_run_opts directly, and fg_run
 * refuses before it opens anything; fg_convert_opts_check (convert/convert_opts.c) the same
 * for fg-convert's group flags. One table row per rule, with the message it must give. */
#include <string.h>

#include "convert_opts.h"
#include "runner.h"
#include "stage.h"
#include "testutil.h"

/* A row: what differs from a plain -p run (mode PROMPT, prompt "hi", model "m"). */
typedef struct row {
    fg_run_mode mode;
    const char *prompt, *input, *output, *text, *prefix;
    uint32_t window, prompt_len, num_prompts;
    int no_prompt, resume, quick, policy, placement, ranks, plan_only, row_sched;
    fg_backend_kind backend;
    uint64_t gpu_budget;
    double sim_link;
    float top_p;
    const char *want;     /* a part of the refusal; NULL: accepted */
} row;

static const row k_rows[] = {
    {.want = NULL},
    {.policy = 1, .placement = 1, .want = "--policy auto chooses the placement: drop --percent"},
    {.gpu_budget = 1 << 30, .want = "--gpu-budget needs a device: --backend cuda or sim"},
    {.backend = FG_BACKEND_SIM, .gpu_budget = 1 << 30, .want = NULL},
    {.sim_link = 4, .want = "--sim-link belongs to --backend sim"},
    {.backend = FG_BACKEND_SIM, .sim_link = 4, .want = NULL},
    {.num_prompts = 3, .want = "--num-prompts belongs to --prompt-len/--gen-len runs"},
    {.mode = FG_RUN_SYNTHETIC, .no_prompt = 1, .prompt_len = 8, .num_prompts = 3, .want = NULL},
    {.quick = 1, .want = "--quick belongs to fg-infer calibrate"},
    {.mode = FG_RUN_CALIBRATE, .quick = 1, .want = NULL},
    {.window = 8, .want = "--window belongs to fg-infer ppl"},
    {.text = "t.txt", .want = "--text belongs to fg-infer ppl"},
    {.mode = FG_RUN_PPL, .no_prompt = 1, .text = "t.txt", .window = 8, .want = NULL},
    {.resume = 1, .want = "--resume continues an --input/--output job"},
    {.mode = FG_RUN_JOBS, .no_prompt = 1, .input = "in.jsonl",
     .want = "--input in.jsonl needs --output FILE"},
    {.mode = FG_RUN_JOBS, .no_prompt = 1, .input = "in.jsonl", .plan_only = 1, .want = NULL},
    {.output = "o.jsonl", .want = "--output o.jsonl needs --input FILE"},
    {.mode = FG_RUN_PPL, .no_prompt = 1, .want = "choose one of -p PROMPT"},
    {.no_prompt = 1, .want = "choose one of -p PROMPT"},
    {.top_p = 2, .want = "--top-p 2: must be in (0, 1]"},
    {.ranks = 2, .mode = FG_RUN_PPL, .no_prompt = 1, .text = "t",
     .want = "ppl runs in one process, not under mpirun with 2 ranks"},
    {.ranks = 3, .row_sched = 1, .want = "--schedule row: a pipeline of 3 ranks"},
    {.ranks = 2, .policy = 1, .want = "--policy auto plans one process"},
    {.ranks = 2, .prefix = "cache", .want = "--prefix-cache runs in one process"},
    {.ranks = 2, .want = NULL},
};

static fg_run_opts opts_of(const row *w, fg_link *link)
{
    fg_run_opts o;
    memset(&o, 0, sizeof o);
    o.mode = w->mode;
    o.model = "m";
    o.prompt = w->no_prompt ? NULL : w->prompt ? w->prompt : "hi";
    o.input = w->input, o.output = w->output, o.text = w->text, o.prefix_cache = w->prefix;
    o.window = w->window, o.prompt_len = w->prompt_len, o.num_prompts = w->num_prompts;
    o.resume = w->resume, o.calibrate_quick = w->quick;
    o.policy_auto = w->policy ? w->policy : -1, o.placement_fixed = w->placement;
    o.max_new = 4;
    o.sample.top_p = w->top_p ? w->top_p : 1.0f;
    o.eo.policy = fg_policy_default();
    o.eo.policy.schedule = w->row_sched ? FG_SCHEDULE_ROW : FG_SCHEDULE_ZIGZAG;
    o.eo.backend = w->backend, o.eo.gpu_budget = w->gpu_budget, o.eo.sim_link_gbps = w->sim_link;
    o.eo.plan_only = w->plan_only;
    memset(link, 0, sizeof *link);
    link->size = w->ranks;
    o.eo.link = w->ranks ? link : NULL;
    return o;
}

START_TEST(run_rules_table)
{
    const row *w = &k_rows[_i];
    fg_link link;
    fg_run_opts o = opts_of(w, &link);
    fg_err err = {0};
    int rc = fg_run_opts_check(&o, &err);
    if (!w->want) {
        ck_assert_msg(rc == FG_OK, "row %d refused: %s", _i, err.msg);
        ck_assert_int_eq(o.policy_auto, w->policy ? w->policy : w->ranks < 2); /* -1 settled */
    } else {
        ck_assert_msg(rc == FG_ERR_INVALID_ARG, "row %d: rc %d, want a refusal", _i, rc);
        ck_assert_msg(strstr(err.msg, w->want), "row %d: '%s' does not say '%s'", _i, err.msg,
                      w->want);
    }
}
END_TEST

/* fg_run refuses before it opens anything: the store "m" does not exist, so any other error
 * than the rule's would mean it went on. */
START_TEST(fg_run_refuses_first)
{
    const row *w = &k_rows[_i];
    if (!w->want)
        return;
    fg_link link;
    fg_run_opts o = opts_of(w, &link);
    fg_err err = {0};
    ck_assert_int_eq(fg_run(&o, NULL, &err), FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, w->want), "row %d: '%s' does not say '%s'", _i, err.msg,
                  w->want);
}
END_TEST

START_TEST(policy_default_settles)
{
    fg_link link;
    row w = {.placement = 1};
    fg_run_opts o = opts_of(&w, &link);
    fg_err err;
    ck_assert_int_eq(fg_run_opts_check(&o, &err), FG_OK);
    ck_assert_int_eq(o.policy_auto, 0); /* a placement given: the fixed policy */
    w.placement = 0;
    o = opts_of(&w, &link);
    ck_assert_int_eq(fg_run_opts_check(&o, &err), FG_OK);
    ck_assert_int_eq(o.policy_auto, 1); /* nothing given: auto */
}
END_TEST

START_TEST(convert_group_flags)
{
    fg_convert_opts o = {0, 0, -1, NULL, 0, NULL, NULL};
    fg_err err;
    ck_assert_int_eq(fg_convert_opts_check(&o, &err), FG_OK);
    o.group_size = 32;
    ck_assert_int_eq(fg_convert_opts_check(&o, &err), FG_ERR_INVALID_ARG);
    ck_assert_str_eq(err.msg, "--group-size needs --compress-weight or --weight-bits");
    o.group_size = 0;
    o.group_axis = 1;
    ck_assert_int_eq(fg_convert_opts_check(&o, &err), FG_ERR_INVALID_ARG);
    ck_assert_str_eq(err.msg, "--group-axis needs --compress-weight or --weight-bits");
    o.compress_weight = 8;
    o.group_size = 32;
    ck_assert_int_eq(fg_convert_opts_check(&o, &err), FG_OK);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("runner_opts");
    TCase *tc = tcase_create("rules");
    int n = (int)(sizeof k_rows / sizeof k_rows[0]);
    tcase_add_loop_test(tc, run_rules_table, 0, n);
    tcase_add_loop_test(tc, fg_run_refuses_first, 0, n);
    tcase_add_test(tc, policy_default_settles);
    tcase_add_test(tc, convert_group_flags);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
