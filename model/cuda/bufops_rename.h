/* Forced into the CUDA build's compile of model/cpu/bufops.c (-include,
 * the Makefile), so that file's functions, prototypes included, take the
 * names cpu_buf_*: the host path of the device build's buf_*
 * (bufops_dispatch.c) and the reference of tests/cuda/. The CPU build
 * never sees this header. */
#define buf_zero cpu_buf_zero
#define buf_copy cpu_buf_copy
#define buf_widen cpu_buf_widen
#define buf_narrow cpu_buf_narrow
#define buf_round_bf16 cpu_buf_round_bf16
#define buf_round_narrow cpu_buf_round_narrow
#define buf_from_fp32 cpu_buf_from_fp32
#define buf_to_fp32 cpu_buf_to_fp32
#define buf_accumulate cpu_buf_accumulate
#define buf_add cpu_buf_add
#define buf_sum_squares cpu_buf_sum_squares
