/* What machine a run is on: the CPU's model and vector ISA, and which BLAS
 * library, version and kernel (OpenBLAS's "corename") its GEMMs run. A
 * BLAS that does not know the CPU falls back to generic SSE kernels and
 * runs every GEMM ~3x slower (Debian's OpenBLAS 0.3.21 on a 16-core Xeon:
 * Prescott kernels, 1,944 tok/s against 6,878 with SkylakeX forced), so
 * the run names the kernel and warns about a fallback. */
#ifndef SHARDLAB_MACHINE_H
#define SHARDLAB_MACHINE_H

#include <stdbool.h>
#include <stddef.h>

/* Vector instruction sets, ordered: each level includes the ones below. */
enum isa_level {
    ISA_SSE,    /* x86-64 baseline, or unknown / not x86 */
    ISA_AVX,    /* 256-bit, no FMA (Sandy Bridge, Bulldozer-family kernels) */
    ISA_AVX2,   /* 256-bit + FMA (Haswell, Zen) */
    ISA_AVX512, /* 512-bit F + BW + DQ + VL (Skylake-X and later, Zen 4) */
};

struct blas_info {
    char library[32];   /* "OpenBLAS" */
    char version[32];   /* "0.3.21" */
    char corename[64];  /* openblas_get_corename(): the kernel set in use, e.g. "SkylakeX" */
    char threading[16]; /* "OpenMP", "pthreads" or "sequential" */
};

/* "model name" from /proc/cpuinfo, or "unknown CPU". */
void machine_cpu_model(char *out, size_t n);
/* The widest level this CPU and OS run. */
enum isa_level machine_cpu_isa(void);
void machine_blas_info(struct blas_info *b);
/* The first "flags" line of /proc/cpuinfo (the CPU's features, space-
 * separated: avx512_bf16, amx_bf16, ...), or "" where there is none. */
enum { CPU_FLAGS_LEN = 4096 };
void machine_cpu_flags(char *out, size_t n);

const char *isa_name(enum isa_level isa); /* "sse", "avx", "avx2", "avx512" */
/* The widest ISA an OpenBLAS kernel set uses (case-insensitive, so the
 * DYNAMIC_ARCH names "Haswell" and the fixed-target "HASWELL" both match);
 * ISA_SSE for the generic and SSE-era kernels and for names it does not know. */
enum isa_level blas_kernel_isa(const char *corename);
/* The OPENBLAS_CORETYPE value to suggest when `corename` is a fallback
 * without FMA (below ISA_AVX2) on a CPU that has AVX2 ("Haswell") or
 * AVX-512 ("SkylakeX"); NULL when the kernel is fine for the CPU. */
const char *blas_suggested_coretype(const char *corename, enum isa_level cpu);

/* CPU time since boot, in seconds: every core's busy time, all of it
 * (busy and idle), and this process's own (all its threads); ok false
 * where /proc cannot say (train/measure/measure_cores.c). */
struct cpu_times {
    double busy, total, self;
    int cores; /* online */
    bool ok;
};
struct cpu_times machine_cpu_times(void);
/* The cores other processes kept busy between samples a and b (taken at
 * least ~0.1 s apart: the counters tick at 100 Hz), in [0, cores]; -1 where
 * it cannot be said. */
double machine_cores_used_by_others(const struct cpu_times *a, const struct cpu_times *b);

/* The threads, of `requested`, that fit the cores other processes left
 * free (busy of `cores`): a thread per core of which others leave at
 * least half, so the free cores are rounded to the nearest whole core; at
 * least 1, at most requested; requested where busy < 0 (not measured).
 * One rule for the start-up warning and the team that follows the load. */
int machine_threads_that_fit(int requested, int cores, double busy);

/* The cores others keep busy, watched over windows between steps (the run
 * loop's team follows it: docs/THREADS.md). busy is the last whole
 * window's figure, -1 before the first. */
struct core_watch {
    struct cpu_times start; /* the current window's first sample */
    double window;          /* seconds a window lasts at least */
    double busy, seconds;   /* over the last whole window, and its length */
    double due;             /* monotonic_seconds() when the window may end */
};
void core_watch_start(struct core_watch *w, double window, const struct cpu_times *now);
/* Ends the window at `now` if it has lasted `window` seconds: sets busy,
 * starts the next one and returns true; false while it runs (or where
 * /proc cannot say). */
bool core_watch_sample(struct core_watch *w, const struct cpu_times *now);
/* Whether the window may have ended: a clock read, so a caller between
 * steps reads /proc (tens of microseconds) once a window, not every step. */
bool core_watch_due(const struct core_watch *w);

/* This process's peak resident set so far (getrusage), bytes. */
double peak_rss_bytes(void);

#endif
