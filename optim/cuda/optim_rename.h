/* Forced into the CUDA build's compile of optim/{adamw,sgd,adamw8bit,
 * adamw8bit_state}.c (-include, the Makefile), so their functions,
 * prototypes included, take the names cpu_*: the host path of the device
 * build's update rules (optim_dispatch.c) and the reference of
 * tests/cuda/test_optim_cuda.c. The CPU build never sees this header. */
#define adamw_update cpu_adamw_update
#define sgd_update cpu_sgd_update
#define adamw8bit_update cpu_adamw8bit_update
#define adamw8bit_dequantize cpu_adamw8bit_dequantize
#define adamw8bit_quantize cpu_adamw8bit_quantize
