/* tool_engine_args.h - the pieces of the engine's flags that fg-infer and fg-serve share (both
 * open an engine with FlexGen's placement and policy flags): --percent's parser and the value
 * lists behind the engine's word choices. The option rows stay in each tool's table (their
 * help text says what the flag means for that tool). */
#ifndef FG_TOOL_ENGINE_ARGS_H
#define FG_TOOL_ENGINE_ARGS_H

#include "engine.h"

/* FlexGen's --percent WG WC CG CC HG HC into the fg_policy at dst (a TA_FN option): six
 * percentages in [0, 100], each pair at most 100, what GPU and CPU leave on disk. The first is
 * the option's value (--percent WG or --percent=WG), the other five the arguments after it. */
void ta_percent_fn(void *dst, const char *v, int argc, char **argv);

/* The values of the CHOICE options, in their words' order. */
extern const int ta_k_policy[2];   /* auto|fixed -> policy_auto 1, 0 */
extern const int ta_k_sched[2];    /* zigzag|row */
extern const int ta_k_experts[2];  /* routed|all */
extern const int ta_k_compute[4];  /* f32|int8|f16|bf16 */
extern const int ta_k_backend[3];  /* cpu|sim|cuda */

/* Flag combinations the engine's options refuse, as a usage error (exit 2): --compute bf16
 * (the CPU's 16-bit path) with --backend cuda (whose 16-bit path is f16). */
void ta_engine_check(const fg_engine_opts *eo);

#endif
