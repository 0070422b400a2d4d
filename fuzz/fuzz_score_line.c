/* fuzz_score_line.c - libFuzzer target for fg-infer score's input lines (runner_score.c,
 * fgr_score_line): any bytes as one line, as a pair and as a rolling text. Checks, besides
 * memory safety: a line is blank, scorable, or refused with a message (never both), and a
 * scorable pair has its context and continuation (the parser's abort otherwise). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runner_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1), why[256];
    if (!t)
        return 0;
    memcpy(t, data, size);
    t[size] = '\0';
    for (int rolling = 0; rolling < 2; rolling++)
        if (fgr_score_line(t, rolling, why, sizeof why) == 1 && why[0])
            abort();
    free(t);
    return 0;
}
