/* fg_json.c - Python's JSON dialect onto jansson's: see fg_json.h.
 *
 * One scan over the text outside strings finds the literals jansson refuses (integers past
 * int64, NaN / Infinity / -Infinity). When there are none (nearly always) the caller's bytes go
 * to jansson untouched; otherwise a copy is rewritten: big integers at their own length, the
 * non-finite words as strings (two bytes longer each).
 */
#include "fg_json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t at, len;  /* the literal's bytes in the input */
    int kind;        /* 0: big integer, 1: a non-finite word */
} fix;

/* The length of the word at p (NaN, Infinity, -Infinity) standing alone, or 0. */
static size_t nonfinite(const char *p, size_t left)
{
    static const char *const words[] = {"NaN", "Infinity", "-Infinity"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if (left >= n && memcmp(p, words[i], n) == 0 &&
            (left == n || !((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
                            (p[n] >= '0' && p[n] <= '9') || p[n] == '_')))
            return n;
    }
    return 0;
}

/* Digits d[0..n) past int64's range (with neg: past its negative end)? */
static bool too_big(const char *d, size_t n, bool neg)
{
    while (n > 1 && d[0] == '0') { /* not valid JSON, but jansson is the one to say so */
        d++;
        n--;
    }
    if (n != 19)
        return n > 19;
    return memcmp(d, neg ? "9223372036854775808" : "9223372036854775807", 19) > 0;
}

/* Rewrites the integer literal d[0..n) (digits only, n >= 19) as a real of the same length. */
static void as_real(char *d, size_t n)
{
    char e[8], mant[32];
    int elen = snprintf(e, sizeof e, "%zu", n - 1);
    size_t k = n - 3 - (size_t)elen;          /* fraction digits kept: 14 or more */
    memcpy(mant, d, n < sizeof mant ? n : sizeof mant);
    d[0] = mant[0];
    d[1] = '.';
    for (size_t i = 0; i < k; i++)
        d[2 + i] = i + 1 < sizeof mant ? mant[i + 1] : '0';
    d[2 + k] = 'e';
    memcpy(d + 3 + k, e, (size_t)elen);
}

/* Finds the literals to rewrite; returns their count (up to cap stored in f[]). */
static size_t scan(const char *s, size_t len, fix *f, size_t cap)
{
    size_t count = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"') {
            in_str = true;
            continue;
        }
        size_t w = (c == 'N' || c == 'I' || c == '-') ? nonfinite(s + i, len - i) : 0;
        if (w) {
            if (count < cap)
                f[count] = (fix){i, w, 1};
            count++;
            i += w - 1;
            continue;
        }
        if (c != '-' && (c < '0' || c > '9'))
            continue;
        size_t j = i + (c == '-'), d0 = j;
        while (j < len && s[j] >= '0' && s[j] <= '9')
            j++;
        bool real = j < len && (s[j] == '.' || s[j] == 'e' || s[j] == 'E');
        if (!real && j - d0 >= 19 && too_big(s + d0, j - d0, c == '-')) {
            /* past a double's range too: kept as a string of its digits, sign included */
            if (count < cap)
                f[count] = j - d0 > 300 ? (fix){i, j - i, 1} : (fix){d0, j - d0, 0};
            count++;
        }
        while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '.' || s[j] == 'e' ||
                           s[j] == 'E' || s[j] == '+' || s[j] == '-'))
            j++;
        i = j - 1;
    }
    return count;
}

json_t *fg_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *je)
{
    size_t n = scan(buf, len, NULL, 0);
    if (n == 0)
        return json_loadb(buf, len, flags, je);
    fix *f = malloc(n * sizeof *f);
    char *out = f ? malloc(len + 2 * n + 1) : NULL;
    if (!out) {
        free(f);
        memset(je, 0, sizeof *je);
        snprintf(je->text, sizeof je->text, "out of memory");
        return NULL;
    }
    scan(buf, len, f, n);
    size_t o = 0, from = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + o, buf + from, f[i].at - from);
        o += f[i].at - from;
        if (f[i].kind == 0) {
            memcpy(out + o, buf + f[i].at, f[i].len);
            as_real(out + o, f[i].len);
            o += f[i].len;
        } else {
            out[o++] = '"';
            memcpy(out + o, buf + f[i].at, f[i].len);
            o += f[i].len;
            out[o++] = '"';
        }
        from = f[i].at + f[i].len;
    }
    memcpy(out + o, buf + from, len - from);
    o += len - from;
    json_t *root = json_loadb(out, o, flags, je);
    free(out);
    free(f);
    return root;
}
