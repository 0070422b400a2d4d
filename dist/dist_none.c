/* dist_none.c - fg_dist in a build without MPI: one process. Started by mpirun as one of
 * several ranks, it refuses (every rank running the whole model alone would be wrong). */
#include <stdlib.h>

#include "dist.h"

struct fg_dist {
    int unused;
};

int fg_dist_init(int *argc, char ***argv, fg_dist **out, fg_err *err)
{
    (void)argc, (void)argv;
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n)
        n = getenv("PMI_SIZE");
    *out = NULL;
    if (n && atoi(n) > 1)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "started as one of %s ranks, but this "
                          "fg-infer was built without MPI (install libopenmpi-dev: "
                          "scripts/setup.sh, then rebuild)", n);
    *out = calloc(1, sizeof **out);
    return *out ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
}

int fg_dist_rank(const fg_dist *d) { (void)d; return 0; }
int fg_dist_size(const fg_dist *d) { (void)d; return 1; }
const fg_link *fg_dist_link(fg_dist *d) { (void)d; return NULL; }
void fg_dist_set_timeout(fg_dist *d, double seconds) { (void)d, (void)seconds; }
void fg_dist_stats_get(const fg_dist *d, fg_dist_stats *out)
{
    (void)d;
    *out = (fg_dist_stats){0};
}

void fg_dist_abort(fg_dist *d, int code)
{
    (void)d;
    exit(code);
}

int fg_dist_finish(fg_dist *d, fg_err *err)
{
    (void)err;
    free(d);
    return FG_OK;
}
