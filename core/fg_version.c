/* fg_version.c - the --version text every tool prints (fg_version.h). FG_VERSION and
 * FG_GIT_DESCRIBE come from the generated fg_version_gen.h (cmake/version.cmake, refreshed at
 * each build); FG_BUILD_CUDA / FG_BUILD_MPI come from fg_build.h, which CMake writes at configure time. */
#include "fg_version.h"

#include <string.h>

#include "fg_cpu.h"
#include "fg_build.h"
#include "fg_version_gen.h"

const char *fg_version_string(void) { return FG_VERSION " (git " FG_GIT_DESCRIBE ")"; }

void fg_version_print(FILE *f, const char *tool)
{
    unsigned c = fg_cpu_features();
    fprintf(f, "%s %s\n", tool, fg_version_string());
    fprintf(f, "features: CUDA %s, MPI %s, CPU kernels %s (this CPU:%s%s%s%s%s)\n", FG_BUILD_CUDA,
            FG_BUILD_MPI, fg_cpu_isa_name(fg_cpu_isa_cap(NULL)), c & FG_CPU_AVX2 ? " avx2" : "",
            c & FG_CPU_F16C ? " f16c" : "", c & FG_CPU_AVX512 ? " avx512" : "",
            c & FG_CPU_AVX512VNNI ? " avx512-vnni" : "", c & FG_CPU_AVXVNNI ? " avx-vnni" : "");
}

int fg_version_flag(int argc, char *const *argv, const char *tool)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--version") == 0) {
            fg_version_print(stdout, tool);
            return 1;
        }
    }
    return 0;
}
