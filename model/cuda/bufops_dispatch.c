/* include/bufops.h in the CUDA build: each call runs where its buffers
 * live (pointer_space.h), so --device cpu keeps working in this build and
 * --device cuda runs on the GPU; host memory takes the CPU's path
 * (cpu_buf_*). buf_copy takes any pair; the other operations need all
 * their buffers in one space, and a mix is a caller bug reported by name
 * (exit non-zero, as a failed kernel in bufops_device.c). */
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "bufops.h"
#include "bufops_cuda.h"
#include "pointer_space.h"

/* Both buffers' space: true on the device; a mix exits with op's name. */
static bool both_on_device(const void *dst, const void *src, const char *op) {
    bool d = cuda_on_device(dst), s = cuda_on_device(src);
    if (d == s) return d;
    fprintf(stderr, "error: %s: the destination is in %s memory and the source in %s memory (one space per call)\n",
            op, d ? "device" : "host", s ? "device" : "host");
    exit(EXIT_FAILURE);
}

void buf_zero(void *dst, size_t bytes) {
    if (bytes && cuda_on_device(dst)) cuda_buf_zero(dst, bytes);
    else cpu_buf_zero(dst, bytes);
}

void buf_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && (cuda_on_device(dst) || cuda_on_device(src))) cuda_buf_copy(dst, src, bytes);
    else cpu_buf_copy(dst, src, bytes);
}

void buf_widen(float *dst, const bf16 *src, size_t n) {
    if (n && both_on_device(dst, src, "buf_widen")) cuda_buf_widen(dst, src, n);
    else cpu_buf_widen(dst, src, n);
}

void buf_narrow(bf16 *dst, const float *src, size_t n) {
    if (n && both_on_device(dst, src, "buf_narrow")) cuda_buf_narrow(dst, src, n);
    else cpu_buf_narrow(dst, src, n);
}

void buf_round_bf16(float *x, size_t n) {
    if (n && cuda_on_device(x)) cuda_buf_round_bf16(x, n);
    else cpu_buf_round_bf16(x, n);
}

void buf_round_narrow(bf16 *dst, float *x, size_t n) {
    if (n && both_on_device(dst, x, "buf_round_narrow")) cuda_buf_round_narrow(dst, x, n);
    else cpu_buf_round_narrow(dst, x, n);
}

void buf_from_fp32(void *dst, enum dtype dt, const float *src, size_t n) {
    if (n && both_on_device(dst, src, "buf_from_fp32")) cuda_buf_from_fp32(dst, dt, src, n);
    else cpu_buf_from_fp32(dst, dt, src, n);
}

void buf_to_fp32(float *dst, const void *src, enum dtype dt, size_t n) {
    if (n && both_on_device(dst, src, "buf_to_fp32")) cuda_buf_to_fp32(dst, src, dt, n);
    else cpu_buf_to_fp32(dst, src, dt, n);
}

void buf_accumulate(void *dst, enum dtype dt, const float *src, size_t n) {
    if (n && both_on_device(dst, src, "buf_accumulate")) cuda_buf_accumulate(dst, dt, src, n);
    else cpu_buf_accumulate(dst, dt, src, n);
}

void buf_add(void *dst, const void *src, enum dtype dt, size_t n) {
    if (n && both_on_device(dst, src, "buf_add")) cuda_buf_add(dst, src, dt, n);
    else cpu_buf_add(dst, src, dt, n);
}

double buf_sum_squares(const void *src, enum dtype dt, size_t n) {
    return n && cuda_on_device(src) ? cuda_buf_sum_squares(src, dt, n) : cpu_buf_sum_squares(src, dt, n);
}
