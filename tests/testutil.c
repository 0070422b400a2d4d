/* testutil.c - see testutil.h. */
#define _GNU_SOURCE
#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[4096];

const char *tu_tmpdir_create(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/fgtest-XXXXXX", base && *base ? base : "/tmp");
    ck_assert_msg(mkdtemp(g_dir) != NULL, "mkdtemp %s failed", g_dir);
    return g_dir;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void tu_rmtree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void tu_tmpdir_remove(void)
{
    if (g_dir[0])
        tu_rmtree(g_dir);
    g_dir[0] = '\0';
}

const char *tu_path(const char *name)
{
    static char bufs[4][8192 + 64];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, sizeof bufs[0], "%s/%.*s", g_dir, 4000, name);
    return b;
}

uint64_t tu_xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void tu_fill(void *p, size_t n, uint64_t seed)
{
    uint8_t *b = p;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)tu_xorshift(&s);
}

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    if (!getenv("CK_FORK")) /* CK_FORK=no (a tool that must see the test's own process) wins */
        srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

int tu_probe(int (*probe)(char *msg, size_t cap), char *msg, size_t cap)
{
    int fd[2];
    if (cap)
        msg[0] = 0;
    if (pipe(fd) != 0) {
        snprintf(msg, cap, "tu_probe: pipe failed");
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        snprintf(msg, cap, "tu_probe: fork failed");
        return 1;
    }
    if (pid == 0) {
        close(fd[0]);
        char m[512] = "";
        int rc = probe(m, sizeof m);
        ssize_t w = write(fd[1], m, strlen(m));
        (void)w;
        _exit(rc & 0xff);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (cap && got + 1 < cap && (r = read(fd[0], msg + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    if (cap)
        msg[got] = 0;
    close(fd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    if (!WIFEXITED(st)) {
        snprintf(msg, cap, "tu_probe: the probe died (signal %d)", WTERMSIG(st));
        return 1;
    }
    return WEXITSTATUS(st);
}

void tu_randf(float *x, size_t n, uint64_t seed, float scale)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = scale * ((float)(s >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
    }
}

double tu_nmse(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

char *tu_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 65536 + 1 > cap) {
            cap = cap * 2 + 65536 + 1;
            buf = realloc(buf, cap);
            ck_assert_msg(buf != NULL, "%s: out of memory", path);
        }
        r = fread(buf + n, 1, 65536, f);
        n += r;
    } while (r);
    ck_assert_msg(!ferror(f), "%s: read error", path);
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}
