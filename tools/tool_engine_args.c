/* tool_engine_args.c - see tool_engine_args.h. */
#include <getopt.h>

#include "tool_args.h"
#include "tool_engine_args.h"

void ta_percent_fn(void *dst, const char *v, int argc, char **argv)
{
    fg_policy *p = dst;
    double x[6];
    int i0 = optind - 1, eq = argv[i0] != v; /* --percent=WG WC ...: WG is in argv[i0] */
    for (int i = 0; i < 6; i++) {
        if (i0 + i >= argc)
            ta_die("--percent needs 6 numbers (WG WC CG CC HG HC)");
        const char *s = i == 0 && eq ? v : argv[i0 + i];
        x[i] = ta_float("--percent", s);
        if (x[i] < 0 || x[i] > 100)
            ta_die("--percent %s: each number is a percentage in [0, 100]", s);
    }
    optind = i0 + 6;
    double *to[3] = {p->frac.w, p->frac.c, p->frac.h};
    const char *what[3] = {"weights", "KV cache", "activations"};
    for (int k = 0; k < 3; k++) {
        if (x[2 * k] + x[2 * k + 1] > 100)
            ta_die("--percent: the %s percentages %g + %g exceed 100", what[k], x[2 * k],
                x[2 * k + 1]);
        to[k][0] = x[2 * k] / 100;
        to[k][1] = x[2 * k + 1] / 100;
        to[k][2] = 1 - to[k][0] - to[k][1];
    }
    p->have_fractions = 1;
}

const int ta_k_policy[2] = {1, 0};
const int ta_k_sched[2] = {FG_SCHEDULE_ZIGZAG, FG_SCHEDULE_ROW};
const int ta_k_experts[2] = {FG_EXPERTS_ROUTED, FG_EXPERTS_ALL};
const int ta_k_compute[4] = {FG_COMPUTE_F32, FG_COMPUTE_INT8, FG_COMPUTE_F16, FG_COMPUTE_BF16};
const int ta_k_backend[3] = {FG_BACKEND_CPU, FG_BACKEND_SIM, FG_BACKEND_CUDA};

void ta_engine_check(const fg_engine_opts *eo)
{
    if (eo->backend == FG_BACKEND_CUDA && eo->compute == FG_COMPUTE_BF16)
        ta_die("--compute bf16 is the CPU's 16-bit path; with --backend cuda use --compute f16");
}
