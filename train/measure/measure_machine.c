/* The machine a run is on: CPU model and ISA, the BLAS kernel (machine.h). */
#include "machine.h"

#include <cblas.h>
#include <sys/resource.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

void machine_cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        size_t len = strcspn(colon, "\n");
        if (len > 0) snprintf(out, n, "%.*s", (int)len, colon);
        break;
    }
    fclose(f);
}

void machine_cpu_flags(char *out, size_t n) {
    if (n) out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[CPU_FLAGS_LEN];
    while (fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, "flags", 5) != 0 || !colon) continue;
        snprintf(out, n, "%.*s", (int)strcspn(colon + 1, "\n"), colon + 1);
        break;
    }
    fclose(f);
}

enum isa_level machine_cpu_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* __builtin_cpu_supports also checks that the OS saves the vector state */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ISA_AVX2;
    if (__builtin_cpu_supports("avx")) return ISA_AVX;
#endif
    return ISA_SSE;
}

void machine_blas_info(struct blas_info *b) {
    /* openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." */
    const char *config = openblas_get_config();
    if (!config || sscanf(config, "%31s %31s", b->library, b->version) != 2) {
        snprintf(b->library, sizeof b->library, "unknown BLAS");
        snprintf(b->version, sizeof b->version, "?");
    }
    const char *core = openblas_get_corename();
    snprintf(b->corename, sizeof b->corename, "%s", core ? core : "unknown");
    int parallel = openblas_get_parallel(); /* 0 sequential, 1 pthreads, 2 OpenMP */
    snprintf(b->threading, sizeof b->threading, "%s",
             parallel == 2 ? "OpenMP" : parallel == 1 ? "pthreads" : "sequential");
}

const char *isa_name(enum isa_level isa) {
    switch (isa) {
    case ISA_AVX512: return "avx512";
    case ISA_AVX2: return "avx2";
    case ISA_AVX: return "avx";
    case ISA_SSE: break;
    }
    return "sse";
}

/* OpenBLAS's x86-64 kernel sets that use AVX or wider; every other name
 * (Prescott, Core2, Nehalem, Barcelona, ..., "generic", "unknown") runs SSE. */
static const struct {
    const char *corename;
    enum isa_level isa;
} KERNELS[] = {
    {"SapphireRapids", ISA_AVX512}, {"Cooperlake", ISA_AVX512}, {"SkylakeX", ISA_AVX512},
    {"Zen", ISA_AVX2},              {"Haswell", ISA_AVX2},      {"Excavator", ISA_AVX},
    {"Steamroller", ISA_AVX},       {"Piledriver", ISA_AVX},    {"Bulldozer", ISA_AVX},
    {"Sandybridge", ISA_AVX},
};

enum isa_level blas_kernel_isa(const char *corename) {
    for (size_t i = 0; corename && i < sizeof KERNELS / sizeof *KERNELS; i++)
        if (strcasecmp(corename, KERNELS[i].corename) == 0) return KERNELS[i].isa;
    return ISA_SSE;
}

const char *blas_suggested_coretype(const char *corename, enum isa_level cpu) {
    if (cpu < ISA_AVX2 || blas_kernel_isa(corename) >= ISA_AVX2) return NULL;
    return cpu >= ISA_AVX512 ? "SkylakeX" : "Haswell";
}

double peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0.0;
}
