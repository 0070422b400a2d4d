/* lp.c - the linear programs of the policy search, solved by GLPK's simplex (glp_simplex with
 * the presolver, messages off). A thin wrapper: dense rows in, the optimum out, GLPK's statuses
 * mapped to fg_err (infeasible -> FG_ERR_NO_SPACE, unbounded or failed -> FG_ERR_INVALID_ARG).
 */
#include <glpk.h>
#include <math.h>
#include <stdlib.h>

#include "policy_search.h"

/* GLPK's bound type for lo <= v <= hi (HUGE_VAL sides are free). */
static int bound_type(double lo, double hi)
{
    int has_lo = isfinite(lo), has_hi = isfinite(hi);
    if (has_lo && has_hi)
        return lo == hi ? GLP_FX : GLP_DB;
    return has_lo ? GLP_LO : has_hi ? GLP_UP : GLP_FR;
}

static int check_args(uint32_t n, uint32_t m, const double *lo, const double *hi,
                      const double *rlo, const double *rhi, fg_err *err)
{
    if (n == 0 || n > 10000 || m > 10000)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "lp: %u variables and %u rows (1..10000)", n,
                          m);
    for (uint32_t j = 0; j < n; j++)
        if (isnan(lo[j]) || isnan(hi[j]) || lo[j] > hi[j])
            return fg_err_set(err, FG_ERR_INVALID_ARG, "lp: variable %u has bounds [%g, %g]", j,
                              lo[j], hi[j]);
    for (uint32_t i = 0; i < m; i++)
        if (isnan(rlo[i]) || isnan(rhi[i]) || rlo[i] > rhi[i])
            return fg_err_set(err, FG_ERR_NO_SPACE, "lp: row %u has bounds [%g, %g]", i, rlo[i],
                              rhi[i]);
    return FG_OK;
}

int fg_lp_solve(uint32_t n, uint32_t m, const double *c, const double *A, const double *rlo,
                const double *rhi, const double *lo, const double *hi, double *x, double *obj,
                fg_err *err)
{
    int rc = check_args(n, m, lo, hi, rlo, rhi, err);
    if (rc)
        return rc;
    size_t nz = (size_t)n * m;
    int *ia = malloc((nz + 1) * sizeof *ia), *ja = malloc((nz + 1) * sizeof *ja);
    double *ar = malloc((nz + 1) * sizeof *ar);
    if (!ia || !ja || !ar) {
        free(ia), free(ja), free(ar);
        return fg_err_set(err, FG_ERR_NOMEM, "lp: out of memory");
    }
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, (int)n);
    for (uint32_t j = 0; j < n; j++) {
        glp_set_col_bnds(lp, (int)j + 1, bound_type(lo[j], hi[j]), lo[j], hi[j]);
        glp_set_obj_coef(lp, (int)j + 1, c[j]);
    }
    size_t k = 0;
    if (m) {
        glp_add_rows(lp, (int)m);
        for (uint32_t i = 0; i < m; i++) {
            glp_set_row_bnds(lp, (int)i + 1, bound_type(rlo[i], rhi[i]), rlo[i], rhi[i]);
            for (uint32_t j = 0; j < n; j++)
                if (A[(size_t)i * n + j] != 0) {
                    k++;
                    ia[k] = (int)i + 1, ja[k] = (int)j + 1, ar[k] = A[(size_t)i * n + j];
                }
        }
        glp_load_matrix(lp, (int)k, ia, ja, ar);
    }
    glp_smcp parm;
    glp_init_smcp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_ON;
    int ret = glp_simplex(lp, &parm), st = ret == 0 ? glp_get_status(lp) : GLP_UNDEF;
    if (st == GLP_OPT) {
        for (uint32_t j = 0; j < n; j++)
            x[j] = glp_get_col_prim(lp, (int)j + 1);
        *obj = glp_get_obj_val(lp);
    } else if (ret == GLP_ENOPFS || st == GLP_NOFEAS || st == GLP_INFEAS) {
        rc = fg_err_set(err, FG_ERR_NO_SPACE, "lp: no feasible point");
    } else if (ret == GLP_ENODFS || st == GLP_UNBND) {
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "lp: the objective is unbounded");
    } else {
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "lp: glp_simplex failed (code %d, status %d)",
                        ret, st);
    }
    glp_delete_prob(lp);
    free(ia), free(ja), free(ar);
    return rc;
}
