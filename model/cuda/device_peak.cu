// A GPU's measured peak FLOP/s (include/device.h: device_measure_peak; the
// data sheet's, which MFU divides by, is train/theory/theory_devices.c's): cuBLAS
// GEMMs timed now with CUDA events: bf16 operands with fp32 accumulation (what the tensor cores
// give a transformer) and fp32 operands without TF32 (the math this
// build's layer GEMMs use today: matmul.cu). Square n x n x n, a warm-up
// then the best of several timed calls.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <string.h>


namespace {

constexpr int kN = 8192, kTrials = 5;

bool ok(cudaError_t e, const char *what, char *err, size_t len) {
    if (e == cudaSuccess) return true;
    snprintf(err, len, "measuring the GEMM peak: %s: %s", what, cudaGetErrorString(e));
    return false;
}

// Best FLOP/s of kTrials GEMMs of one kind after a warm-up; 0 on failure.
double best_gemm(cublasHandle_t h, cudaDataType t, cublasComputeType_t compute, void *a, void *b, float *c) {
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double best = 0.0;
    for (int i = 0; i <= kTrials; i++) {
        cudaEventRecord(e0);
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, a, t, kN, b, t, kN, &zero, c,
                                         CUDA_R_32F, kN, compute, CUBLAS_GEMM_DEFAULT);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        if (st != CUBLAS_STATUS_SUCCESS) best = 0.0, i = kTrials;
        else if (i > 0 && ms > 0.0f) { // call 0 warms up
            double f = 2.0 * kN * (double)kN * kN / (ms * 1e-3);
            best = f > best ? f : best;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

} // namespace

extern "C" int cuda_gemm_peak(double *bf16, double *fp32, char *err, size_t err_len) {
    *bf16 = *fp32 = 0.0;
    size_t n = (size_t)kN * kN;
    void *a = nullptr, *b = nullptr;
    float *c = nullptr;
    bool fine = ok(cudaMalloc(&a, n * 4), "cudaMalloc", err, err_len) &&
                ok(cudaMalloc(&b, n * 4), "cudaMalloc", err, err_len) &&
                ok(cudaMalloc((void **)&c, n * 4), "cudaMalloc", err, err_len) &&
                ok(cudaMemset(a, 0, n * 4), "cudaMemset", err, err_len) &&
                ok(cudaMemset(b, 0, n * 4), "cudaMemset", err, err_len);
    cublasHandle_t h = nullptr;
    if (fine && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "measuring the GEMM peak: cublasCreate failed");
        fine = false;
    }
    if (fine) {
        // zeros as operands: the timing does not depend on the values
        *bf16 = best_gemm(h, CUDA_R_16BF, CUBLAS_COMPUTE_32F, a, b, c);
        *fp32 = best_gemm(h, CUDA_R_32F, CUBLAS_COMPUTE_32F, a, b, c);
        if (!(*bf16 > 0 && *fp32 > 0)) {
            snprintf(err, err_len, "measuring the GEMM peak: a cuBLAS GEMM failed");
            fine = false;
        }
    }
    if (h) cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return fine ? 0 : -1;
}
