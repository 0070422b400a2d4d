/* fg_version.h - what a tool's --version prints: the release, the commit it was built from
 * (git describe at build time, "-dirty" for uncommitted changes) and the build's features
 * (CUDA compiled in or not, MPI, the CPU instruction sets this machine runs). */
#ifndef FG_VERSION_H
#define FG_VERSION_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0 (git c108f10-dirty)": a static string. */
const char *fg_version_string(void);
/* Writes "TOOL 0.1.0 (git ...)" and a features line to f. */
void fg_version_print(FILE *f, const char *tool);
/* For a tool's main, before its option parsing: when any argument is exactly --version, prints
 * the version to stdout and returns 1 (the tool exits 0); else 0. */
int fg_version_flag(int argc, char *const *argv, const char *tool);

#ifdef __cplusplus
}
#endif
#endif
