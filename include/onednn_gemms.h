/* The CPU's bf16 GEMMs (--gemm_dtype bf16 on the CPU): the layer GEMMs
 * through oneDNN's matmul primitive with bf16 operands, fp32 accumulation
 * and fp32 output, the same values as the CPU reference forms
 * matmul_forward_bf16_cpu / matmul_backward_bf16_cpu (layers.h) up to the
 * order of the fp32 sums. Implemented in model/cpu/matmul_onednn.c.
 *
 * A run opens one context (the trainer: trainer_open_kernels) and hangs it
 * on its flop counter (counters.h: fc->onednn); the dispatch
 * (model/dispatch.c) then sends the host's matmul_forward/backward
 * (and their _bf16 and _sliced forms) to its GEMMs, the host table's
 * matmul_forward_onednn / matmul_backward_onednn (model/cpu/layers_cpu.h).
 * The context owns oneDNN's engine, one primitive per GEMM block shape
 * (made for one thread at its first use, kept until close), a stream,
 * memory objects and a scratchpad per thread of the team, and the bf16
 * scratch the fp32 operands are rounded into (nearest even, once per
 * operand per call). With
 * fc->gemm_blocks (a run of more than one thread) the run's OpenMP team
 * takes a GEMM's fixed blocks (gemm_split.h) one at a time, so the bits
 * are the same on any team size and the team may follow the free cores
 * (docs/THREADS.md); without, one primitive per call. Not thread-safe: one
 * caller at a time, outside any parallel region, as the layers call it. */
#ifndef SHARDLAB_ONEDNN_GEMMS_H
#define SHARDLAB_ONEDNN_GEMMS_H

#include <stddef.h>
#include <stdint.h>

#include "counters.h"
#include "dtype.h"

struct onednn_gemms;

/* What this CPU lacks for bf16 GEMMs, in words, or NULL when it has them:
 * `cpu_flags` is the flags line of /proc/cpuinfo (space-separated; it must
 * name avx512_bf16 or amx_bf16), and oneDNN's own ISA (capped by the
 * environment's DNNL_MAX_CPU_ISA) must reach avx512_core_bf16. The flags
 * are an argument so a test can give any CPU's. */
const char *onednn_bf16_missing(const char *cpu_flags);

/* A run's context, or NULL with the reason in err (onednn_bf16_missing's,
 * or oneDNN's failure). Close with onednn_gemms_close (NULL: nothing). */
struct onednn_gemms *onednn_gemms_open(const char *cpu_flags, char *err, size_t err_len);
void onednn_gemms_close(struct onednn_gemms *g);

/* oneDNN's version ("2.6.3") and the kernel (implementation string) it
 * chose for the run's GEMMs: the last primitive made, or at open a probe
 * of 64 x 64 x 64 ("brg:avx512_core_bf16"). */
void onednn_version_string(char *out, size_t n);
const char *onednn_gemms_kernel(const struct onednn_gemms *g);
/* Primitives made so far (one per block shape and kind of GEMM: the tests
 * check the cache holds them). */
int onednn_gemms_cached(const struct onednn_gemms *g);

#endif
