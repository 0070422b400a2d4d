/* ckpt.c - a checkpoint directory as one uniform table of contiguous tensors (see ckpt.h).
 *
 * Design:
 * - Detection looks for fixed file names in a fixed order (sharded index, then single file, for
 *   safetensors and then torch), and otherwise scans the directory for files that start with the
 *   .npy magic (FlexGen writes them without a suffix). Exactly one format is used; we never mix.
 * - Every source file is parsed by its format's parser through a pread-backed ck_src while it is
 *   open; the descriptor is closed again right after, so a FlexGen directory of thousands of
 *   .npy files never holds thousands of descriptors. fg_ckpt_read opens the file, checks with
 *   fstat that its size is still the size it had at open (a replaced or truncated file is an
 *   error, not garbage), preads, and closes.
 * - A sharded checkpoint's index (weight_map: tensor -> shard file) must agree exactly with the
 *   shards: every tensor found in shard S is mapped to S, every mapped tensor is found, no tensor
 *   is in two shards, every shard named exists. Shard names are plain file names (no '/').
 * - Names are unique across the whole checkpoint; fg_ckpt_find bisects a sorted index.
 * Memory is O(tensors + header bytes of the largest file); no tensor data is ever held.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fg_json.h"
#include "fg_file.h"
#include "ckpt_int.h"
#include "gguf.h"

typedef struct ckfile {
    char *path;
    char *base; /* points into path: the file name */
    uint64_t size;
} ckfile;

struct fg_ckpt {
    fg_ckpt_kind kind;
    char *dir;
    ckfile *files;
    uint32_t n_files;
    ck_list list;
    uint32_t *sorted; /* tensor indices by name */
    ck_gguf *gguf;    /* FG_CKPT_GGUF: the parsed header (metadata for the import glue) */
};

typedef int (*parse_fn)(const ck_src *src, ck_list *out, fg_err *err);

static int st_parse(const ck_src *s, ck_list *o, fg_err *e) { return ck_st_parse(s, o, e); }
static int torch_parse(const ck_src *s, ck_list *o, fg_err *e) { return ck_torch_parse(s, o, e); }

static char *join(const char *dir, const char *name)
{
    char *p;
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int add_file(fg_ckpt *ck, const char *dir, const char *name, fg_err *err)
{
    if (ck->n_files >= FG_CKPT_MAX_FILES)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %u source files", dir, FG_CKPT_MAX_FILES);
    if (ck->n_files % 64 == 0) {
        ckfile *nf = realloc(ck->files, (ck->n_files + 64) * sizeof *nf);
        if (!nf)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        ck->files = nf;
    }
    ckfile *f = &ck->files[ck->n_files];
    if (!(f->path = join(dir, name)))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    f->base = f->path + strlen(dir) + 1;
    f->size = 0;
    ck->n_files++;
    return FG_OK;
}

/* Open file i, check it is a regular file, record its size, run `parse` over it. */
static int parse_file(fg_ckpt *ck, uint32_t i, parse_fn parse, const char *npy_name, fg_err *err)
{
    ckfile *f = &ck->files[i];
    int fd, rc = fg_open_regular(f->path, O_RDONLY, &fd, err); /* a FIFO is not waited on */
    if (rc)
        return rc;
    struct stat st;
    if (fstat(fd, &st) != 0)
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: stat", f->path);
    if (rc == FG_OK) {
        f->size = (uint64_t)st.st_size;
        ck_src src = {.fd = fd, .size = f->size, .label = f->path};
        ck->list.file = i;
        rc = npy_name ? ck_npy_parse(&src, npy_name, &ck->list, err) : parse(&src, &ck->list, err);
    }
    close(fd);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int ck_shard_name_ok(const char *s)
{
    return s[0] && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 &&
           strlen(s) < 256;
}

void ck_index_free(ck_index *ix)
{
    free(ix->files);
    json_decref(ix->root);
    memset(ix, 0, sizeof *ix);
}

int ck_index_parse(const char *json, size_t len, const char *label, ck_index *ix, fg_err *err)
{
    memset(ix, 0, sizeof *ix);
    json_error_t je;
    json_t *root = fg_json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: invalid JSON: %s (line %d)", label, je.text,
                          je.line);
    ix->root = root;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        const char *why = json_is_object(root) ? "no weight_map object" : "not a JSON object";
        ck_index_free(ix);
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: %s", label, why);
    }
    ix->weight_map = wm;
    size_t cnt = json_object_size(wm);
    const char **v = malloc((cnt ? cnt : 1) * sizeof *v);
    if (!v) {
        ck_index_free(ix);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    const char *k;
    json_t *sv;
    size_t m = 0;
    json_object_foreach(wm, k, sv) {
        if (!json_is_string(sv) || !ck_shard_name_ok(json_string_value(sv))) {
            /* the message first: k lives in root */
            int rc = fg_err_set(err, FG_ERR_BAD_NAME, "%s: weight_map entry %.200s does not name "
                                "a shard file in this directory", label, k);
            free(v);
            ck_index_free(ix);
            return rc;
        }
        v[m++] = json_string_value(sv);
    }
    qsort(v, m, sizeof *v, cmp_str);
    uint32_t u = 0;
    for (size_t i = 0; i < m; i++)
        if (u == 0 || strcmp(v[u - 1], v[i]) != 0)
            v[u++] = v[i];
    ix->files = v;
    ix->n_files = u;
    return FG_OK;
}

const char *ck_index_shard_of(const ck_index *ix, const char *tensor)
{
    json_t *s = json_object_get(ix->weight_map, tensor);
    return s ? json_string_value(s) : NULL;
}

/* Every tensor found must be mapped to the shard it was found in, and every mapped tensor found. */
static int check_index(fg_ckpt *ck, const char *ipath, const ck_index *ix, fg_err *err)
{
    for (uint32_t i = 0; i < ck->list.n; i++) {
        const fg_ckpt_tensor *t = &ck->list.t[i];
        const char *s = ck_index_shard_of(ix, t->name);
        const char *base = ck->files[t->file].base;
        if (!s)
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s (in %s) is not listed in the "
                              "index", ipath, t->name, base);
        if (strcmp(s, base) != 0)
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s is in %s but the index maps it "
                              "to %s", ipath, t->name, base, s);
    }
    json_t *wm = ix->weight_map;
    if (json_object_size(wm) == ck->list.n)
        return FG_OK;
    const char *k;
    json_t *s;
    json_object_foreach(wm, k, s) {
        uint32_t idx;
        if (fg_ckpt_find(ck, k, &idx) != FG_OK)
            return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: tensor %.200s is mapped to %s, which "
                              "does not hold it", ipath, k, json_string_value(s));
    }
    return FG_OK;
}

static int cmp_idx_name(const void *a, const void *b, void *ctx)
{
    const fg_ckpt_tensor *t = ctx;
    return strcmp(t[*(const uint32_t *)a].name, t[*(const uint32_t *)b].name);
}

/* Build the sorted name index; a duplicate name (e.g. one tensor in two shards) is an error. */
static int build_index(fg_ckpt *ck, const char *dir, fg_err *err)
{
    uint32_t n = ck->list.n;
    ck->sorted = malloc((n ? n : 1) * sizeof *ck->sorted);
    if (!ck->sorted)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++)
        ck->sorted[i] = i;
    qsort_r(ck->sorted, n, sizeof *ck->sorted, cmp_idx_name, ck->list.t);
    for (uint32_t i = 1; i < n; i++) {
        const fg_ckpt_tensor *a = &ck->list.t[ck->sorted[i - 1]], *b = &ck->list.t[ck->sorted[i]];
        if (strcmp(a->name, b->name) == 0)
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s appears twice (in %s and %s)",
                              dir, a->name, ck->files[a->file].base, ck->files[b->file].base);
    }
    return FG_OK;
}

static int open_sharded(fg_ckpt *ck, const char *dir, const char *index, parse_fn parse,
                        fg_err *err)
{
    char *ipath = join(dir, index), *text = NULL;
    size_t len = 0;
    ck_index ix = {0};
    int rc = ipath ? fg_read_regular(ipath, CK_INDEX_MAX_BYTES, &text, &len, err)
                   : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK)
        rc = ck_index_parse(text, len, ipath, &ix, err);
    free(text);
    for (uint32_t i = 0; i < ix.n_files && rc == FG_OK; i++) {
        if ((rc = add_file(ck, dir, ix.files[i], err)) == FG_OK)
            rc = parse_file(ck, i, parse, NULL, err);
    }
    if (rc == FG_OK)
        rc = build_index(ck, dir, err);
    if (rc == FG_OK)
        rc = check_index(ck, ipath, &ix, err);
    ck_index_free(&ix);
    free(ipath);
    return rc;
}

static int open_single(fg_ckpt *ck, const char *dir, const char *name, parse_fn parse, fg_err *err)
{
    int rc = add_file(ck, dir, name, err);
    if (rc == FG_OK)
        rc = parse_file(ck, 0, parse, NULL, err);
    return rc ? rc : build_index(ck, dir, err);
}

static int has_npy_magic(const char *path)
{
    char m[6];
    int fd;
    if (fg_open_regular(path, O_RDONLY, &fd, NULL))
        return 0;
    ssize_t r = pread(fd, m, 6, 0);
    close(fd);
    return r == 6 && memcmp(m, "\x93NUMPY", 6) == 0;
}

/* Names of regular, non-hidden files in dir that start with the .npy magic, sorted. */
static int scan_npy(const char *dir, char ***out, uint32_t *n, fg_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return fg_err_sys(err, FG_ERR_NOT_FOUND, errno, "%s: cannot list", dir);
    char **v = NULL;
    uint32_t m = 0;
    int rc = FG_OK;
    struct dirent *de;
    while (rc == FG_OK && (de = readdir(d))) {
        char *p = de->d_name[0] == '.' ? NULL : join(dir, de->d_name);
        if (p && is_file(p) && has_npy_magic(p)) {
            char **nv = m >= FG_CKPT_MAX_FILES ? NULL : realloc(v, (m + 1) * sizeof *v);
            if (!nv)
                rc = fg_err_set(err, FG_ERR_LIMIT, "%s: more than %u .npy files", dir,
                                FG_CKPT_MAX_FILES);
            else if (!((v = nv)[m] = strdup(de->d_name)))
                rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
            else
                m++;
        }
        free(p);
    }
    closedir(d);
    if (m)
        qsort(v, m, sizeof *v, cmp_str);
    *out = v;
    *n = m;
    return rc;
}

static int open_numpy(fg_ckpt *ck, const char *dir, char **names, uint32_t n, fg_err *err)
{
    int rc = FG_OK;
    for (uint32_t i = 0; i < n && rc == FG_OK; i++) {
        char name[FG_CKPT_MAX_NAME + 8];
        size_t l = strlen(names[i]);
        if (l > 4 && strcmp(names[i] + l - 4, ".npy") == 0)
            l -= 4;
        snprintf(name, sizeof name, "%.*s", (int)l, names[i]);
        if ((rc = add_file(ck, dir, names[i], err)) == FG_OK)
            rc = parse_file(ck, i, NULL, name, err);
    }
    return rc ? rc : build_index(ck, dir, err);
}

static int detect_and_open(fg_ckpt *ck, const char *dir, fg_err *err)
{
    static const struct { const char *file; fg_ckpt_kind kind; int sharded; parse_fn parse; } tab[] = {
        {"model.safetensors.index.json", FG_CKPT_SAFETENSORS_SHARDED, 1, st_parse},
        {"model.safetensors", FG_CKPT_SAFETENSORS, 0, st_parse},
        {"pytorch_model.bin.index.json", FG_CKPT_TORCH_SHARDED, 1, torch_parse},
        {"pytorch_model.bin", FG_CKPT_TORCH, 0, torch_parse},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        char *p = join(dir, tab[i].file);
        struct stat st; /* present under the name, of any kind: a FIFO or a directory is then
                           refused by name when opened, not passed over */
        int found = p && stat(p, &st) == 0;
        free(p);
        if (!found)
            continue;
        ck->kind = tab[i].kind;
        return tab[i].sharded ? open_sharded(ck, dir, tab[i].file, tab[i].parse, err)
                              : open_single(ck, dir, tab[i].file, tab[i].parse, err);
    }
    char **names = NULL;
    uint32_t n = 0;
    int rc = scan_npy(dir, &names, &n, err);
    if (rc == FG_OK && n == 0)
        rc = fg_err_set(err, FG_ERR_NOT_FOUND, "%s: no checkpoint found (looked for "
                        "model.safetensors[.index.json], pytorch_model.bin[.index.json] and .npy "
                        "files)", dir);
    ck->kind = FG_CKPT_NUMPY;
    if (rc == FG_OK)
        rc = open_numpy(ck, dir, names, n, err);
    for (uint32_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* A file where a checkpoint directory was expected: a GGUF file (llama.cpp's, by its magic or
 * its name) is said to be one, since users reach for it first; anything else is "not a
 * directory" with what is wanted instead. */
int fg_ckpt_is_gguf(const char *path)
{
    size_t n = strlen(path);
    if (n > 5 && !strcasecmp(path + n - 5, ".gguf"))
        return 1;
    struct stat st;
    char magic[4] = {0};
    FILE *f = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? fopen(path, "rb") : NULL;
    size_t got = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f)
        fclose(f);
    return got == 4 && !memcmp(magic, "GGUF", 4);
}

/* Part i of a GGUF checkpoint: parsed into *g, its split keys checked, its tensors listed. */
static int gguf_part(fg_ckpt *ck, uint32_t i, ck_gguf *g, fg_err *err)
{
    ckfile *f = &ck->files[i];
    int fd, rc = fg_open_regular(f->path, O_RDONLY, &fd, err);
    if (rc)
        return rc;
    struct stat st;
    if (fstat(fd, &st) != 0)
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: stat", f->path);
    if (rc == FG_OK) {
        f->size = (uint64_t)st.st_size;
        ck_src src = {.fd = fd, .size = f->size, .label = f->path};
        rc = ck_gguf_parse(&src, g, err);
    }
    close(fd);
    if (rc == FG_OK)
        rc = ck_gguf_split_check(g, f->path, i, ck->n_files, err);
    ck->list.file = i;
    return rc ? rc : ck_gguf_list(g, f->path, &ck->list, err);
}

/* A GGUF file (gguf.h), or every part of a split one named by its first part
 * (<prefix>-00001-of-0000N.gguf): parsed and validated, tensors under Hugging Face names. */
static int open_gguf(fg_ckpt *ck, const char *path, fg_err *err)
{
    ck->kind = FG_CKPT_GGUF;
    uint32_t part = 1, count = 1;
    int split = ck_gguf_split_name(path, &part, &count);
    if (split && (part != 1 || count > FG_CKPT_MAX_FILES))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: part %u of %u of a split GGUF file: name "
                          "its first part (-00001-of-%05u.gguf)%s", path, part, count, count,
                          count > FG_CKPT_MAX_FILES ? ", of at most 4096 parts" : "");
    if (!(ck->files = calloc(count, sizeof *ck->files)) ||
        !(ck->gguf = calloc(1, sizeof *ck->gguf)))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    int rc = FG_OK;
    for (uint32_t i = 0; i < count && rc == FG_OK; i++, ck->n_files++) {
        ckfile *f = &ck->files[i];
        if (!(f->path = split ? ck_gguf_split_path(path, i + 1) : strdup(path)))
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        const char *slash = strrchr(f->path, '/');
        f->base = slash ? (char *)slash + 1 : f->path;
    }
    for (uint32_t i = 0; i < count && rc == FG_OK; i++) {
        ck_gguf other = {0};
        rc = gguf_part(ck, i, i ? &other : ck->gguf, err);
        ck_gguf_free(&other);
    }
    if (rc == FG_OK && split)
        rc = ck_gguf_split_total(ck->gguf, path, ck->list.n, err);
    if (rc == FG_OK)
        rc = ck_gguf_join(ck->gguf, &ck->list, path, err);
    return rc ? rc : build_index(ck, path, err);
}

const ck_gguf *ck_gguf_of(const fg_ckpt *ck) { return ck->gguf; }

static int not_a_dir(const char *path, fg_err *err)
{
    return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: not a directory (a checkpoint is a directory "
                      "with config.json and its *.safetensors, pytorch_model*.bin or *.npy)",
                      path);
}

int fg_ckpt_open(const char *dir, fg_ckpt **out, fg_err *err)
{
    *out = NULL;
    struct stat st;
    if (!dir || stat(dir, &st) != 0) {
        int e = dir ? errno : ENOENT;
        return e == ENOENT ? fg_err_set(err, FG_ERR_NOT_FOUND, "%s does not exist",
                                        dir ? dir : "(null)")
                           : fg_err_sys(err, FG_ERR_NOT_FOUND, e, "%s", dir);
    }
    int gguf = S_ISREG(st.st_mode) && fg_ckpt_is_gguf(dir);
    if (!S_ISDIR(st.st_mode) && !gguf)
        return not_a_dir(dir, err);
    fg_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = strdup(dir))) {
        free(ck);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    int rc = gguf ? open_gguf(ck, dir, err) : detect_and_open(ck, dir, err);
    if (rc) {
        fg_ckpt_close(ck);
        return rc;
    }
    for (uint32_t i = 0; i < ck->list.n; i++)
        ck->list.t[i].path = ck->files[ck->list.t[i].file].path;
    if (!gguf && (rc = ck_fp8_pair(ck, &ck->list, dir, err)) != FG_OK) {
        fg_ckpt_close(ck);
        return rc;
    }
    *out = ck;
    return FG_OK;
}

void fg_ckpt_close(fg_ckpt *ck)
{
    if (!ck)
        return;
    for (uint32_t i = 0; i < ck->n_files; i++)
        free(ck->files[i].path);
    free(ck->files);
    ck_list_free(&ck->list);
    free(ck->sorted);
    free(ck->dir);
    ck_gguf_free(ck->gguf);
    free(ck->gguf);
    free(ck);
}

fg_ckpt_kind fg_ckpt_kind_of(const fg_ckpt *ck) { return ck->kind; }
const char *fg_ckpt_dir(const fg_ckpt *ck) { return ck->dir; }

const char *fg_ckpt_kind_name(fg_ckpt_kind kind)
{
    switch (kind) {
    case FG_CKPT_SAFETENSORS: return "safetensors";
    case FG_CKPT_SAFETENSORS_SHARDED: return "safetensors-sharded";
    case FG_CKPT_TORCH: return "torch";
    case FG_CKPT_TORCH_SHARDED: return "torch-sharded";
    case FG_CKPT_NUMPY: return "numpy";
    case FG_CKPT_GGUF: return "gguf";
    default: return "?";
    }
}

uint32_t fg_ckpt_count(const fg_ckpt *ck) { return ck->list.n; }

const fg_ckpt_tensor *fg_ckpt_tensor_at(const fg_ckpt *ck, uint32_t i)
{
    return i < ck->list.n ? &ck->list.t[i] : NULL;
}

int fg_ckpt_find(const fg_ckpt *ck, const char *name, uint32_t *index)
{
    uint32_t lo = 0, hi = ck->list.n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->list.t[ck->sorted[mid]].name, name);
        if (c == 0) {
            *index = ck->sorted[mid];
            return FG_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return FG_ERR_NOT_FOUND;
}

uint32_t fg_ckpt_file_count(const fg_ckpt *ck) { return ck->n_files; }

const char *fg_ckpt_file_path(const fg_ckpt *ck, uint32_t file)
{
    return file < ck->n_files ? ck->files[file].path : NULL;
}

uint64_t fg_ckpt_file_size(const fg_ckpt *ck, uint32_t file)
{
    return file < ck->n_files ? ck->files[file].size : 0;
}

uint32_t fg_ckpt_meta_count(const fg_ckpt *ck) { return ck->list.n_meta / 2; }

int fg_ckpt_meta(const fg_ckpt *ck, uint32_t i, const char **key, const char **value)
{
    if (i >= ck->list.n_meta / 2)
        return FG_ERR_NOT_FOUND;
    *key = ck->list.meta[2 * i];
    *value = ck->list.meta[2 * i + 1];
    return FG_OK;
}

/* Open `path` and check it still has `size` bytes. */
static int reopen(const char *path, uint64_t size, int *fd, fg_err *err)
{
    struct stat st;
    int rc = fg_open_regular(path, O_RDONLY, fd, err);
    if (rc)
        return rc;
    if (fstat(*fd, &st) != 0 || (uint64_t)st.st_size != size) {
        close(*fd);
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: file changed size since the checkpoint was "
                          "opened", path);
    }
    return FG_OK;
}

int fg_ckpt_read(const fg_ckpt *ck, uint32_t i, uint64_t first_elem, uint64_t n_elems, void *dst,
                 fg_err *err)
{
    if (i >= ck->list.n)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "tensor index %u out of range", i);
    const fg_ckpt_tensor *t = &ck->list.t[i];
    if (first_elem > t->n_elements || n_elems > t->n_elements - first_elem)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: tensor %s: elements [%llu, +%llu) out of "
                          "range", t->path, t->name, (unsigned long long)first_elem,
                          (unsigned long long)n_elems);
    uint32_t be, bb; /* a block of be elements in bb bytes (1 and the element size, but GGUF's) */
    ck_dtype_block(t->dtype, &be, &bb);
    if (be == 0 || first_elem % be || n_elems % be)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: tensor %s: elements [%llu, +%llu) are not "
                          "whole blocks of %u", t->path, t->name, (unsigned long long)first_elem,
                          (unsigned long long)n_elems, be);
    int fd, rc = reopen(t->path, ck->files[t->file].size, &fd, err);
    if (rc)
        return rc;
    ck_src src = {.fd = fd, .size = ck->files[t->file].size, .label = t->path};
    uint64_t run = t->run ? t->run : t->n_elements, stride = t->run ? t->stride : 0;
    for (uint8_t *d = dst; rc == FG_OK && n_elems;) { /* run by run (one, but for a view) */
        uint64_t r = first_elem / run, at = first_elem % run;
        uint64_t k = run - at < n_elems ? run - at : n_elems;
        rc = ck_src_read(&src, t->offset + (r * stride + at) / be * bb, d, (size_t)(k / be * bb),
                         t->name, err);
        d += k / be * bb;
        first_elem += k;
        n_elems -= k;
    }
    close(fd);
    return rc;
}

int fg_ckpt_hash_path(const char *path, uint64_t *out, fg_err *err)
{
    int fd, rc = fg_open_regular(path, O_RDONLY, &fd, err);
    if (rc)
        return rc;
    enum { BUF = 1 << 20 };
    uint8_t *buf = malloc(BUF);
    XXH3_state_t *st = XXH3_createState();
    rc = buf && st ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK)
        XXH3_64bits_reset(st);
    for (;;) {
        if (rc)
            break;
        ssize_t r = read(fd, buf, BUF);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: read", path);
        else if (r == 0)
            break;
        else
            XXH3_64bits_update(st, buf, (size_t)r);
    }
    if (rc == FG_OK)
        *out = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    free(buf);
    close(fd);
    return rc;
}

int fg_ckpt_file_xxh3(const fg_ckpt *ck, uint32_t file, uint64_t *out, fg_err *err)
{
    if (file >= ck->n_files)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "file index %u out of range", file);
    return fg_ckpt_hash_path(ck->files[file].path, out, err);
}
