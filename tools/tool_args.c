/* tool_args.c - the tools' flag values (tool_args.h). */
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
