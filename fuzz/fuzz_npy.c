/* fuzz_npy.c - libFuzzer target for the .npy header parser: the input is a whole .npy file. */
#include <stdint.h>
#include <stdlib.h>

#include "ckpt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_src src = {.mem = data, .fd = -1, .size = size, .label = "fuzz.npy"};
    ck_list l = {0};
    fg_err err;
    if (ck_npy_parse(&src, "t", &l, &err) == FG_OK)
        if (l.n != 1 || l.t[0].offset + l.t[0].length != size)
            abort(); /* accepted data must end exactly at the end of the file */
    ck_list_free(&l);
    return 0;
}
