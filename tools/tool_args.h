/* tool_args.h - the tools' options, parsed one way from one table (fg-convert, fg-infer,
 * fg-inspect, fg-sample, fg-tokenize). Not a library API: linked into the tools only
 * (tools/tool_args.c).
 *
 * A tool describes its options once, as an array of ta_opt: the long and short name, what kind
 * of value it takes and where the value goes, and its line of --help. ta_parse reads argv with
 * getopt_long (GNU rules: options and operands in any order, unambiguous abbreviations of long
 * names, "--" ends the options) built from that table, stores each value, and prints --help from
 * the same table, so no option can be parsed without being documented or the other way round.
 * What a value may be is checked as it is read; the rules between options belong to the
 * libraries that own them (fg_run_opts_check, fg_convert_opts_check) or to the tool's main.
 *
 * Every refusal is one line "TOOL: FLAG VALUE: what was expected" on stderr and exit status 2
 * (bad usage). Numbers are plain decimal: no sign where none belongs, no hex, no " 5" or "+5",
 * nothing half read ("12abc", "nan", "inf" refused). Sizes are binary however written:
 * 512M = 512MB = 512MiB = 512 x 2^20 bytes (K, M, G, T in either case). */
#ifndef FG_TOOL_ARGS_H
#define FG_TOOL_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum ta_kind {
    TA_END = 0, /* ends the table (a zeroed entry) */
    TA_FLAG,    /* no value: *(int *)dst = val */
    TA_OR,      /* no value: *(unsigned *)dst |= val */
    TA_ANDNOT,  /* no value: *(unsigned *)dst &= ~val */
    TA_STR,     /* *(const char **)dst = the value (the last one given wins) */
    TA_ONCE,    /* *(const char **)dst: given twice with different values, or empty (unless
                   empty_ok), is refused (ta_once) */
    TA_UINT,    /* an integer in [lo, hi] into a uint32_t or int (size 4) or uint64_t (8) */
    TA_FLOAT,   /* a finite number into a float (size 4) or double (8); with range set, it must
                   lie in (min, max]: "FLAG VALUE: <range>" otherwise */
    TA_SIZE,    /* bytes with an optional unit (ta_size) into a uint64_t */
    TA_CHOICE,  /* one of words ("a|b|c") into an int: vals[i], or i when vals is NULL;
                   "FLAG VALUE: expected a, b or c" otherwise */
    TA_BOOL,    /* an optional =true|false into an int: 1 without a value */
    TA_FN,      /* fn(dst, value, argc, argv): the tool's own reading (value NULL for a flag
                   without one; fn may take more of argv by moving optind) */
    TA_HELP,    /* print --help on stdout and exit 0 */
    TA_SECTION, /* not an option: --help's heading name, then the paragraph help (or none) */
    TA_NOTE,    /* not an option: a line of --help set as an option is (one read before the
                   table, such as --version) */
} ta_kind;

typedef void ta_fn(void *dst, const char *value, int argc, char **argv);

typedef struct ta_opt {
    ta_kind kind;
    const char *name;     /* the long name without "--" (NULL: short only); TA_SECTION: heading */
    char short_name;      /* -x, or 0 */
    void *dst;            /* where the value goes (kind says its type) */
    int size;             /* TA_UINT, TA_FLOAT: sizeof *dst */
    uint64_t lo, hi;      /* TA_UINT: the range */
    double min, max;      /* TA_FLOAT with range: the value lies in (min, max] */
    const char *range;    /* TA_FLOAT: the refusal when outside (NULL: any finite number) */
    const char *words;    /* TA_CHOICE: "a|b|c" */
    const int *vals;      /* TA_CHOICE: each word's value (NULL: its index) */
    int val;              /* TA_FLAG: the value stored; TA_OR, TA_ANDNOT: the bits */
    int empty_ok;         /* TA_ONCE: an empty value is a value */
    ta_fn *fn;            /* TA_FN */
    int takes_value;      /* TA_FN: 1 a value, 0 none */
    const char **given;   /* when the option is given and *given is NULL: its long name (the
                             first of several options sharing a pointer); may be NULL */
    const char *arg;      /* the value's name in --help (N, FILE; TA_CHOICE: its words) */
    const char *help;     /* the line in --help (wrapped; TA_SECTION: a paragraph) */
} ta_opt;

typedef struct ta_cmd {
    const char *tool;     /* "fg-infer": messages, "see TOOL --help" */
    const char *usage;    /* the synopsis, printed first by --help (and on stderr, with
                             bad == NULL, by a refusal) */
    ta_opt *opts;         /* ends with a TA_END entry */
    const char *bad;      /* an unknown option or a missing value: "TOOL: <bad> OPTION (see
                             TOOL --help)"; NULL: the whole --help text on stderr */
    int short_alone;      /* an unknown short option in a cluster is named alone (-z of
                             -jz), not as the cluster (ta_bad_opt) */
    void (*on_bad)(int optopt, const char *option); /* may refuse first in its own words */
    void (*epilog)(FILE *f); /* printed last by --help (NULL: nothing) */
} ta_cmd;

/* The tool's name for messages; quiet != 0 makes refusals exit without a message (an MPI rank
 * other than 0, whose rank 0 says the same). Call first. */
void ta_init(const char *tool, int quiet);
/* "TOOL: <message>" and exit(2). */
void ta_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Read argv's options into c->opts' destinations (refusing, exit 2, what cannot be right;
 * --help exits 0); returns the index of the first operand (optind), operands after options. */
int ta_parse(const ta_cmd *c, int argc, char **argv);
/* The --help text: c->usage, then each section and option of the table, then c->epilog. */
void ta_help(const ta_cmd *c, FILE *f);

/* The readers behind the kinds, for a tool's own TA_FN. */
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
