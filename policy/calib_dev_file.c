/* calib_dev_file.c - a device's calibration as a file: a device profile (policy_search.h
 * fg_calib_dev_save / _parse / _load).
 *
 * A run on a device measures it at start and keeps nothing (calib_dev.c: a GPU is shared, the
 * simulated device's link is a flag). A profile is for pricing a device the run does not
 * measure: `fg-infer calibrate --backend cuda --device-profile FILE` writes the lent GPU's, and
 * `--device-profile FILE` prices a plan with it instead of a measurement, so that
 * `--backend sim --dry-run` plans for a GPU this machine lacks (an H100 box's placements and
 * predicted times, from another machine's profile or from published figures).
 *
 * The file is JSON: kind "fg-device-profile", version 1, the device's name, the weights'
 * codec its GEMM rates were measured on ("f16" or "q4": a Q4 Linear dequantizes on the device
 * first), the link's rates each way (bytes/s), FG_CALIB_NM row counts increasing from 1 with
 * their GFLOP/s, the attention figures (seconds per query x key x query width; the prefill's
 * optional), the share of uploads hidden in [0, 1]. Every number is checked finite and
 * positive; a profile is untrusted input (fuzz/fuzz_calib.c parses it too).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib_int.h"
#include "fg_file.h"
#include "policy_search.h"

#define KIND "fg-device-profile"
#define VERSION 1

int fg_calib_dev_save(const char *path, const fg_calib_dev *d, fg_err *err)
{
    json_t *ms = json_array(), *gf = json_array();
    for (uint32_t i = 0; i < FG_CALIB_NM; i++) {
        json_array_append_new(ms, json_integer(d->m[i]));
        json_array_append_new(gf, json_real(d->gflops[i]));
    }
    json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:f, s:f, s:o, s:o, s:f, s:f, s:f, s:f, s:f, "
                          "s:f}", "kind", KIND, "version", VERSION, "name", d->name, "weights",
                          d->q4 ? "q4" : "f16", "link_up_bps", d->up, "link_down_bps", d->down,
                          "gemm_rows", ms, "gemm_gflops", gf, "attn_s", d->attn_s, "attn_q4_s",
                          d->attn_q4_s, "attn_pre_s", d->attn_pre_s, "attn_pre_q4_s",
                          d->attn_pre_q4_s, "overlap", d->overlap, "seconds", d->seconds);
    return fg_calib_write_json(path, o, "device profile", err);
}

/* o[key] as a finite number > 0 (>= 0 when zero_ok); absent: *out = 0 and absent_ok decides */
static int pos(json_t *o, const char *key, int absent_ok, double *out)
{
    json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v)
        return absent_ok ? 0 : -1;
    if (!json_is_number(v))
        return -1;
    *out = json_number_value(v);
    return isfinite(*out) && *out > 0 ? 0 : -1;
}

static int rows(const char *path, json_t *o, fg_calib_dev *d, fg_err *err)
{
    json_t *ms = json_object_get(o, "gemm_rows"), *gf = json_object_get(o, "gemm_gflops");
    if (!json_is_array(ms) || !json_is_array(gf) || json_array_size(ms) != FG_CALIB_NM ||
        json_array_size(gf) != FG_CALIB_NM)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: gemm_rows and gemm_gflops must be arrays of "
                          "%d", path, FG_CALIB_NM);
    for (uint32_t i = 0; i < FG_CALIB_NM; i++) {
        json_t *mi = json_array_get(ms, i), *gi = json_array_get(gf, i);
        double g = json_is_number(gi) ? json_number_value(gi) : -1;
        json_int_t m = json_is_integer(mi) ? json_integer_value(mi) : -1;
        if (m < 1 || m > 65536 || (i == 0 && m != 1) || (i && m <= (json_int_t)d->m[i - 1]) ||
            !(g > 0 && isfinite(g)))
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: gemm_rows must increase from 1 (at most "
                              "65536) and gemm_gflops be positive (entry %u)", path, i);
        d->m[i] = (uint32_t)m;
        d->gflops[i] = g;
    }
    return FG_OK;
}

static int fields(const char *path, json_t *o, fg_calib_dev *d, fg_err *err)
{
    json_t *kind = json_object_get(o, "kind"), *ver = json_object_get(o, "version");
    json_t *name = json_object_get(o, "name"), *w = json_object_get(o, "weights");
    if (!json_is_string(kind) || strcmp(json_string_value(kind), KIND))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: not a device profile (kind is not \""
                          KIND "\")", path);
    if (!json_is_integer(ver) || json_integer_value(ver) != VERSION)
        return fg_err_set(err, FG_ERR_STATE, "%s: device profile version %lld, this fg reads %d",
                          path, json_is_integer(ver) ? (long long)json_integer_value(ver) : -1LL,
                          VERSION);
    if (!json_is_string(name) || !json_is_string(w) ||
        (strcmp(json_string_value(w), "f16") && strcmp(json_string_value(w), "q4")))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: a device profile needs a name and weights "
                          "\"f16\" or \"q4\"", path);
    snprintf(d->name, sizeof d->name, "%s", json_string_value(name));
    d->q4 = !strcmp(json_string_value(w), "q4");
    if (pos(o, "link_up_bps", 0, &d->up) || pos(o, "link_down_bps", 0, &d->down) ||
        pos(o, "attn_s", 0, &d->attn_s) || pos(o, "attn_q4_s", 0, &d->attn_q4_s) ||
        pos(o, "attn_pre_s", 1, &d->attn_pre_s) || pos(o, "attn_pre_q4_s", 1, &d->attn_pre_q4_s))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: link_up_bps, link_down_bps, attn_s and "
                          "attn_q4_s must be positive numbers (attn_pre_s, attn_pre_q4_s too when "
                          "given)", path);
    json_t *ov = json_object_get(o, "overlap");
    d->overlap = json_is_number(ov) ? json_number_value(ov) : -1;
    if (!(d->overlap >= 0 && d->overlap <= 1))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: overlap must be a number in [0, 1]", path);
    pos(o, "seconds", 1, &d->seconds);
    return rows(path, o, d, err);
}

int fg_calib_dev_parse(const char *data, size_t len, const char *path, fg_calib_dev *d,
                       fg_err *err)
{
    memset(d, 0, sizeof *d);
    json_error_t je;
    json_t *o = json_loadb(data, len, 0, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: not a device profile (%s, line %d)", path,
                          o ? "not a JSON object" : je.text, o ? 1 : je.line);
    }
    int rc = fields(path, o, d, err);
    json_decref(o);
    if (rc)
        memset(d, 0, sizeof *d);
    return rc;
}

int fg_calib_dev_load(const char *path, fg_calib_dev *d, fg_err *err)
{
    memset(d, 0, sizeof *d);
    char *buf;
    size_t n;
    fg_err e;
    int rc = fg_read_regular(path, 1 << 16, &buf, &n, &e); /* a directory, a FIFO: named */
    if (rc)
        return fg_err_set(err, rc, "device profile %s", e.msg);
    rc = fg_calib_dev_parse(buf, n, path, d, err);
    free(buf);
    return rc;
}
