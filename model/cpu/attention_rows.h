/* The flash attention's rows on the CPU (model/cpu/attention_lse.c), for
 * the kernels that run them over other blocks of keys: the ring attention
 * of context parallelism (model/context_parallel/ring.c), whose keys come
 * from another rank. Private to model/. Host memory, fp32; q, k, v and
 * their gradients are hs values of one head, keys kv_stride values apart.
 * The causal mask is the caller's: it passes the n keys a row sees. */
#ifndef SHARDLAB_MODEL_CPU_ATTENTION_ROWS_H
#define SHARDLAB_MODEL_CPU_ATTENTION_ROWS_H

#include <stdint.h>

/* One query row over keys 0..n-1 (n >= 1), an online softmax in tiles of
 * ATTENTION_LSE_TILE: o (hs) = sum_j P_j v_j with P_j = exp(s_j - lse),
 * s_j = q.k_j scale, and lse = log sum_j exp(s_j). */
void attention_lse_forward_row(float *o, float *lse, const float *q, const float *k, const float *v, int64_t n,
                               int64_t hs, int64_t kv_stride, float scale);
/* The backward of one query row over keys 0..n-1, from its final lse and
 * D = dy . out: for each j, P = exp(q.k_j scale - lse), dv_j += P dy,
 * dS = P (dy.v_j - D), dq += dS k_j, dk_j += dS q. dq and dk are left
 * unscaled (the caller multiplies them by scale once they are whole). */
void attention_lse_backward_row(float *dq, float *dk, float *dv, const float *q, const float *dy, const float *k,
                                const float *v, float lse, float D, int64_t n, int64_t hs, int64_t kv_stride,
                                float scale);
float attention_dot(const float *a, const float *b, int64_t n);
/* The bf16 forms' threads, one (sequence, head) each: min(the OpenMP
 * threads, B NH), the count attention_lse_bf16_scratch is sized for; and
 * the calling thread's six tiles in that scratch, after D (B NH T): q, k,
 * v, out, dk, dv, T x hs each (a thread of a num_threads(
 * attention_lse_threads(B, NH)) region). */
int attention_lse_threads(int64_t B, int64_t NH);
float *attention_lse_tiles(float *scratch, int64_t B, int64_t T, int64_t NH, int64_t hs);
void attention_scale_row(float *y, float a, int64_t n);

#endif
