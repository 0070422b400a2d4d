/* tool_args.h - flag values for the tools (fg-convert, fg-infer, fg-tokenize), parsed one way:
 * every refusal is one line "TOOL: FLAG VALUE: what was expected" on stderr and exit status 2
 * (bad usage). Not a library API: linked into the tools only (tools/tool_args.c).
 *
 * Numbers are plain decimal: no sign where none belongs, no hex, no " 5" or "+5", nothing half
 * read ("12abc", "nan", "inf" refused). Sizes are binary however written: 512M = 512MB = 512MiB
 * = 512 x 2^20 bytes (K, M, G, T in either case). */
#ifndef FG_TOOL_ARGS_H
#define FG_TOOL_ARGS_H

#include <stdint.h>

/* The tool's name for messages; quiet != 0 makes refusals exit without a message (an MPI rank
 * other than 0, whose rank 0 says the same). Call first. */
void ta_init(const char *tool, int quiet);
/* "TOOL: <message>" and exit(2). */
void ta_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* An integer in [lo, hi]. */
uint64_t ta_uint(const char *flag, const char *s, uint64_t lo, uint64_t hi);
/* A finite number (a leading '-' allowed). */
double ta_float(const char *flag, const char *s);
/* The same within a float's range. */
float ta_f32(const char *flag, const char *s);
/* A whole number of bytes from 1 MiB to 4 EiB with an optional binary unit. */
uint64_t ta_size(const char *flag, const char *s);
/* A flag naming one thing (a path, the prompt) given twice with different values is refused,
 * not "the last one wins"; so is an empty value unless empty_ok. Returns v. */
const char *ta_once(const char *flag, const char *prev, const char *v, int empty_ok);
/* The option getopt refused, as typed: argv[optind - 1], or "-z" for a short option inside a
 * cluster (the first z of -zz), where optind has not moved past the cluster yet. Static
 * storage: valid until the next call. */
const char *ta_bad_opt(char **argv);

#endif
