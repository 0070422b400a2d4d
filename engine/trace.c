/* trace.c - Chrome trace events (the JSON array format that Perfetto and chrome://tracing
 * open): one complete event ("ph": "X") per load and compute span, on two tracks, with the
 * unit, batch and step as arguments, so the overlap of weight I/O and compute is visible. */
#include <errno.h>
#include <stdio.h>

#include "engine_int.h"

/* "embed", "attn 3", "mlp 3", "head" */
static void unit_label(const fg_engine *e, int32_t u, char *b, size_t n)
{
    if (u < 0 || (uint32_t)u >= e->n_units) {
        snprintf(b, n, "?");
        return;
    }
    const unit *un = &e->units[u];
    static const char *kinds[] = {"embed", "attn", "mlp", "head"};
    if (un->kind == FG_UNIT_ATTN || un->kind == FG_UNIT_MLP)
        snprintf(b, n, "%s %u", kinds[un->kind], un->layer);
    else
        snprintf(b, n, "%s", kinds[un->kind]);
}

int fg_trace_write(const fg_engine *e, const char *path, fg_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fg_err_sys(err, FG_ERR_IO, errno, "--trace %s: cannot write", path);
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, "
               "\"args\": {\"name\": \"weights (load + convert)\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 2, "
               "\"args\": {\"name\": \"compute\"}}");
    for (size_t i = 0; i < e->n_spans; i++) {
        const span *s = &e->spans[i];
        int load = s->name[0] == 'l';
        char label[48], batch[24] = "";
        unit_label(e, s->unit, label, sizeof label);
        if (!load && s->batch >= 0)
            snprintf(batch, sizeof batch, " b%d", s->batch);
        fprintf(f, ",\n{\"name\": \"%s %s%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, "
                   "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"unit\": %d, \"batch\": %d, "
                   "\"step\": %d}}",
                s->name, label, batch, load ? 1 : 2, (s->t0 - e->t_open) * 1e6,
                (s->t1 - s->t0) * 1e6, s->unit, s->batch, s->step);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f))
        return fg_err_sys(err, FG_ERR_IO, errno, "--trace %s: write failed", path);
    return FG_OK;
}
