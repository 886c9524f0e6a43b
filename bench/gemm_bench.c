/* One layer GEMM, out (M,N) = inp (M,K) . W^T (W: N,K), on one core:
 * OpenBLAS's fp32 sgemm (matmul_forward_cpu) against oneDNN's bf16 matmul
 * (matmul_forward_bf16 with a run's context: the input already bf16, as
 * the model's saved copy; the weight rounded to bf16 each call, as the
 * trainer does). Best of `reps` calls after one warm-up, in GFLOP/s (2MNK).
 * Usage: build/bench_gemm [reps]. Prints the CPU and the kernels used. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "layers.h"
#include "../model/cpu/layers_cpu.h"
#include "../train/measure/machine.h"
#include "onednn_gemms.h"

static double best_seconds(int reps, struct exec_ctx *fc, float *out, const float *x, const bf16 *xb,
                           const float *w, int64_t M, int64_t K, int64_t N) {
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { /* r == 0: warm-up (and the primitive's creation) */
        double t0 = monotonic_seconds();
        if (xb) matmul_forward_bf16(out, xb, w, NULL, M, K, N, fc);
        else matmul_forward_cpu(out, x, w, NULL, M, K, N, fc);
        double t = monotonic_seconds() - t0;
        if (r > 0 && t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    char cpu[128], flags[CPU_FLAGS_LEN], err[256], version[32];
    struct blas_info blas;
    machine_cpu_model(cpu, sizeof cpu);
    machine_cpu_flags(flags, sizeof flags);
    machine_blas_info(&blas);
    onednn_version_string(version, sizeof version);
    struct onednn_gemms *g = onednn_gemms_open(flags, err, sizeof err);
    if (!g) {
        fprintf(stderr, "bench_gemm: no bf16 GEMMs here: %s\n", err);
        return 1;
    }
    printf("CPU %s, 1 thread; OpenBLAS %s sgemm kernel %s vs oneDNN %s bf16 kernel %s; best of %d\n", cpu,
           blas.version, blas.corename, version, onednn_gemms_kernel(g), reps);
    static const int64_t shapes[][3] = {{256, 256, 768}, {1024, 1024, 1024}, {4096, 768, 3072}}; /* M, N, K */
    printf("%6s %6s %6s  %12s  %12s  %7s  kernel\n", "M", "N", "K", "sgemm GF/s", "bf16 GF/s", "speedup");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = malloc((size_t)(M * K) * sizeof *x), *w = malloc((size_t)(N * K) * sizeof *w);
        float *out = malloc((size_t)(M * N) * sizeof *out);
        bf16 *xb = malloc((size_t)(M * K) * sizeof *xb);
        if (!x || !w || !out || !xb) return 1;
        for (int64_t i = 0; i < M * K; i++) xb[i] = f32_to_bf16(x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f);
        for (int64_t i = 0; i < N * K; i++) w[i] = (float)((i * 104729) % 2001 - 1000) / 1000.0f;
        struct exec_ctx fp = {0}, bf = {.onednn = g};
        double flops = 2.0 * (double)M * (double)N * (double)K;
        double ts = best_seconds(reps, &fp, out, x, NULL, w, M, K, N);
        double tb = best_seconds(reps, &bf, out, NULL, xb, w, M, K, N);
        printf("%6lld %6lld %6lld  %12.1f  %12.1f  %6.2fx  %s\n", (long long)M, (long long)N, (long long)K,
               flops / ts / 1e9, flops / tb / 1e9, ts / tb, onednn_gemms_kernel(g));
        free(x), free(w), free(out), free(xb);
    }
    onednn_gemms_close(g);
    return 0;
}
