/* tool_args.c - the tools' options from one table (tool_args.h): getopt_long's arrays built
 * from the table, each value read by its kind, --help printed from the same entries. */
#include "tool_args.h"

#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_tool = "fg";
static int g_quiet;

void ta_init(const char *tool, int quiet)
{
    g_tool = tool;
    g_quiet = quiet;
}

void ta_die(const char *fmt, ...)
{
    if (g_quiet)
        exit(2);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_tool);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* Decimal digits and '.' only (and 'e' after them, which strtod reads), an optional '-' where
 * sign_ok: no leading space or '+', no hex, no "nan"/"inf". */
static int plain_number(const char *s, int sign_ok)
{
    if (sign_ok && *s == '-')
        s++;
    if (!(*s >= '0' && *s <= '9') && !(*s == '.' && s[1] >= '0' && s[1] <= '9'))
        return 0;
    return !strpbrk(s, "xX");
}

uint64_t ta_uint(const char *flag, const char *s, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!(*s >= '0' && *s <= '9') || errno || *end || v < lo || v > hi) /* no " 5", "+5", "-1" */
        ta_die("%s %s: expected an integer in [%" PRIu64 ", %" PRIu64 "]", flag, s, lo, hi);
    return v;
}

double ta_float(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = plain_number(s, 1) ? strtod(s, &end) : NAN;
    if (!plain_number(s, 1) || errno || *end || !isfinite(v))
        ta_die("%s %s: expected a number", flag, s);
    return v;
}

float ta_f32(const char *flag, const char *s)
{
    double v = ta_float(flag, s);
    if (fabs(v) > FLT_MAX)
        ta_die("%s %s: out of range", flag, s);
    return (float)v;
}

uint64_t ta_size(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    if (!plain_number(s, 0))
        ta_die("%s %s: expected a whole number of bytes from 1M to 4E, such as 512M or 4G", flag, s);
    double v = strtod(s, &end), mult = 1;
    /* K, M, G, T in either case, then "i", "B", "iB" (either case) or nothing: all binary */
    const char *units = "kmgt", *u = *end ? strchr(units, *end | 0x20) : NULL;
    if (u) {
        mult = ldexp(1.0, 10 * (int)(u - units + 1));
        end++;
        end += (*end | 0x20) == 'i';
    }
    end += (*end | 0x20) == 'b' && end > s && end[-1] != '.';
    double bytes = v * mult;
    if (errno || end == s || *end || !isfinite(v) || bytes != floor(bytes) ||
        bytes < 1024.0 * 1024 || bytes > 4611686018427387904.0)
        ta_die("%s %s: expected a whole number of bytes from 1M to 4E, such as 512M or 4G", flag, s);
    return (uint64_t)bytes;
}

const char *ta_once(const char *flag, const char *prev, const char *v, int empty_ok)
{
    if (prev && strcmp(prev, v))
        ta_die("%s given twice ('%s' and '%s')", flag, prev, v);
    if (!*v && !empty_ok)
        ta_die("%s: an empty value", flag);
    return v;
}

const char *ta_bad_opt(char **argv)
{
    static char buf[3];
    const char *t = argv[optind - 1];
    if ((t[0] == '-' && t[1] == '-') || optopt <= 0 || optopt >= 256 ||
        (t[0] == '-' && strchr(t + 1, optopt)))
        return t;
    snprintf(buf, sizeof buf, "-%c", optopt);
    return buf;
}

/* ---- the table ---- */

#define MAX_OPTS 96
#define HELP_COL 28   /* where an option's help starts in --help */
#define HELP_WIDTH 96 /* and where its lines end */

/* How messages name an option: "-x" when it has a short name, else "--name". */
static const char *flag_name(const ta_opt *o, char *buf, size_t cap)
{
    if (o->short_name)
        snprintf(buf, cap, "-%c", o->short_name);
    else
        snprintf(buf, cap, "--%s", o->name);
    return buf;
}

static int is_option(const ta_opt *o)
{
    return o->kind != TA_SECTION && o->kind != TA_NOTE;
}

static int has_arg(const ta_opt *o)
{
    switch (o->kind) {
    case TA_FLAG: case TA_OR: case TA_ANDNOT: case TA_HELP: return no_argument;
    case TA_BOOL: return optional_argument;
    case TA_FN: return o->takes_value ? required_argument : no_argument;
    default: return required_argument;
    }
}

/* "expected a, b or c" from "a|b|c". */
static __attribute__((noreturn)) void choice_die(const char *flag, const char *v,
                                                 const char *words)
{
    char list[256];
    size_t k = 0, n = strlen(words);
    for (size_t i = 0; i < n && k + 8 < sizeof list; i++) {
        if (words[i] != '|') {
            list[k++] = words[i];
            continue;
        }
        const char *sep = strchr(words + i + 1, '|') ? ", " : " or ";
        k += (size_t)snprintf(list + k, sizeof list - k, "%s", sep);
    }
    list[k] = '\0';
    ta_die("%s %s: expected %s", flag, v, list);
}

static int choice(const char *flag, const char *v, const char *words)
{
    size_t len = strlen(v);
    int i = 0;
    for (const char *w = words; *w; i++) {
        size_t wl = strcspn(w, "|");
        if (wl == len && !strncmp(w, v, len))
            return i;
        w += wl + (w[wl] == '|');
    }
    choice_die(flag, v, words);
}

static void read_float(const ta_opt *o, const char *flag, const char *v)
{
    double x = o->size == 4 ? ta_f32(flag, v) : ta_float(flag, v);
    if (o->range && !(x > o->min && x <= o->max))
        ta_die("%s %s: %s", flag, v, o->range);
    if (o->size == 4)
        *(float *)o->dst = (float)x;
    else
        *(double *)o->dst = x;
}

/* --help: the text on stdout, and exit 0; text nobody received (stdout full or closed) is a
 * failure, exit 1. */
static __attribute__((noreturn)) void help_exit(const ta_cmd *c)
{
    ta_help(c, stdout);
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "%s: stdout: write error: %s\n", c->tool,
                errno ? strerror(errno) : "output lost");
        exit(1);
    }
    exit(0);
}

/* One option given with value v (NULL: none). */
static void store(const ta_cmd *c, const ta_opt *o, const char *v, int argc, char **argv)
{
    char flag[64];
    flag_name(o, flag, sizeof flag);
    if (o->given && !*o->given)
        *o->given = o->name;
    switch (o->kind) {
    case TA_FLAG: *(int *)o->dst = o->val; break;
    case TA_OR: *(unsigned *)o->dst |= (unsigned)o->val; break;
    case TA_ANDNOT: *(unsigned *)o->dst &= ~(unsigned)o->val; break;
    case TA_STR: *(const char **)o->dst = v; break;
    case TA_ONCE:
        *(const char **)o->dst = ta_once(flag, *(const char **)o->dst, v, o->empty_ok);
        break;
    case TA_UINT:
        if (o->size == 8)
            *(uint64_t *)o->dst = ta_uint(flag, v, o->lo, o->hi);
        else
            *(uint32_t *)o->dst = (uint32_t)ta_uint(flag, v, o->lo, o->hi);
        break;
    case TA_FLOAT: read_float(o, flag, v); break;
    case TA_SIZE: *(uint64_t *)o->dst = ta_size(flag, v); break;
    case TA_CHOICE: {
        int i = choice(flag, v, o->words);
        *(int *)o->dst = o->vals ? o->vals[i] : i;
        break;
    }
    case TA_BOOL: *(int *)o->dst = !v || choice(flag, v, "true|false") == 0; break;
    case TA_FN: o->fn(o->dst, v, argc, argv); break;
    case TA_HELP: help_exit(c); break;
    default: break;
    }
}

/* A table that cannot be right is the tool's bug, found on every run (not only when the
 * option is given): the destination's size must be what the kind writes. */
static void check_entry(const ta_opt *o)
{
    int ints = o->kind == TA_FLAG || o->kind == TA_CHOICE || o->kind == TA_BOOL ||
               o->kind == TA_OR || o->kind == TA_ANDNOT;
    int nums = o->kind == TA_UINT || o->kind == TA_FLOAT;
    if ((!o->name && !o->short_name) || (ints && o->size != (int)sizeof(int)) ||
        (nums && o->size != 4 && o->size != 8) || (o->kind == TA_CHOICE && !o->words) ||
        (o->kind == TA_FN && !o->fn) || (o->kind != TA_HELP && !o->dst)) {
        fprintf(stderr, "tool_args: option %s: a bad table entry (tool_args.h)\n",
                o->name ? o->name : "?");
        abort();
    }
}

static __attribute__((noreturn)) void bad_option(const ta_cmd *c, char **argv)
{
    char alone[3];
    const char *opt = ta_bad_opt(argv);
    if (c->short_alone && optopt > 0 && optopt < 256 && argv[optind - 1][1] != '-') {
        snprintf(alone, sizeof alone, "-%c", optopt);
        opt = alone;
    }
    if (c->on_bad)
        c->on_bad(optopt, opt);
    if (c->bad)
        ta_die("%s %s (see %s --help)", c->bad, opt, c->tool);
    ta_help(c, stderr);
    exit(2);
}

/* getopt_long's value for option o: its short name, else 256 + its index in the table. */
static int opt_val(const ta_cmd *c, const ta_opt *o)
{
    return o->short_name ? o->short_name : 256 + (int)(o - c->opts);
}

int ta_parse(const ta_cmd *c, int argc, char **argv)
{
    struct option lo[MAX_OPTS + 1];
    char shorts[3 * MAX_OPTS + 1];
    int n = 0, k = 0, ch;
    for (const ta_opt *o = c->opts; o->kind != TA_END; o++) {
        if (!is_option(o))
            continue;
        check_entry(o);
        if (n == MAX_OPTS) {
            fprintf(stderr, "tool_args: more than %d options (MAX_OPTS)\n", MAX_OPTS);
            abort();
        }
        if (o->short_name) { /* "x", "x:" (a value) or "x::" (an optional one) */
            shorts[k++] = o->short_name;
            if (has_arg(o) != no_argument)
                shorts[k++] = ':';
            if (has_arg(o) == optional_argument)
                shorts[k++] = ':';
        }
        if (o->name)
            lo[n++] = (struct option){o->name, has_arg(o), NULL, opt_val(c, o)};
    }
    shorts[k] = '\0';
    lo[n] = (struct option){NULL, 0, NULL, 0};
    opterr = 0; /* one line of our own, not getopt's and the usage */
    while ((ch = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        const ta_opt *hit = NULL;
        for (const ta_opt *o = c->opts; ch != '?' && o->kind != TA_END && !hit; o++)
            hit = is_option(o) && ch == opt_val(c, o) ? o : NULL;
        if (!hit)
            bad_option(c, argv);
        store(c, hit, optarg, argc, argv);
    }
    return optind;
}

/* ---- --help ---- */

/* text from column col to HELP_WIDTH, continued at column indent; '\n' breaks a line. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
    const char *p = text;
    while (*p) {
        int wl = (int)strcspn(p, " \n");
        if (col > indent && col + 1 + wl > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, (size_t)wl, f);
        col += wl;
        p += wl;
        if (*p == '\n' && p[1]) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        }
        p += strspn(p, " \n");
    }
    fputc('\n', f);
}

static void help_option(FILE *f, const ta_opt *o)
{
    char head[160];
    int k = snprintf(head, sizeof head, "  ");
    if (o->short_name)
        k += snprintf(head + k, sizeof head - (size_t)k, "-%c%s", o->short_name,
                      o->name ? ", " : "");
    if (o->name)
        k += snprintf(head + k, sizeof head - (size_t)k, "--%s", o->name);
    const char *arg = o->arg ? o->arg : o->kind == TA_CHOICE ? o->words : NULL;
    if (o->kind == TA_BOOL)
        k += snprintf(head + k, sizeof head - (size_t)k, "[=true|false]");
    else if (arg)
        k += snprintf(head + k, sizeof head - (size_t)k, " %s", arg);
    fputs(head, f);
    if (!o->help || !*o->help) {
        fputc('\n', f);
        return;
    }
    if (k > HELP_COL - 2) {
        fprintf(f, "\n%*s", HELP_COL, "");
        k = HELP_COL;
    } else {
        fprintf(f, "%*s", HELP_COL - k, "");
        k = HELP_COL;
    }
    wrap(f, o->help, k, HELP_COL);
}

void ta_help(const ta_cmd *c, FILE *f)
{
    fputs(c->usage, f);
    for (const ta_opt *o = c->opts; o->kind != TA_END; o++) {
        if (o->kind == TA_SECTION) {
            fprintf(f, "%s:\n", o->name);
            if (o->help) {
                fputs("  ", f);
                wrap(f, o->help, 2, 2);
            }
        } else {
            help_option(f, o);
        }
    }
    if (c->epilog)
        c->epilog(f);
}
