/* The device's table of the update rules and the 8-bit codec
 * (optim/optim_ops.h), the CUDA build only: the X_cuda forms of
 * optim_device.c and adafactor.cu. Where an X_cuda form's arguments differ
 * from the op's, a form here adapts it:
 *   the 8-bit rules  the CUDA quantizer searches no index (the maps travel
 *                    to the kernels by value), so the indexes are dropped;
 *   the codec        its fp32 side is in the states' space (device memory
 *                    here; the CUDA codec would also take host memory: no
 *                    caller has it there). */
#include "../optim_ops.h"

static void sgd8bit_update_device(const struct sgd_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                                  const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                                  enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    (void)ix_signed;
    sgd8bit_update_cuda(h, n, w, q, absmax, map_signed, grad, grad_dtype, out, fc);
}

static void lion8bit_update_device(const struct lion_hparams *h, size_t n, float *w, uint8_t *q, float *absmax,
                                   const float *map_signed, const struct qmap_index *ix_signed, const void *grad,
                                   enum dtype grad_dtype, const struct param_writeback *out, struct exec_ctx *fc) {
    (void)ix_signed;
    lion8bit_update_cuda(h, n, w, q, absmax, map_signed, grad, grad_dtype, out, fc);
}

static void adamw8bit_update_device(const struct adamw_hparams *h, size_t n, float *w, uint8_t *q1, uint8_t *q2,
                                    float *absmax1, float *absmax2, const float *map_signed,
                                    const float *map_unsigned, const struct qmap_index *ix_signed,
                                    const struct qmap_index *ix_unsigned, const void *grad, enum dtype grad_dtype,
                                    const struct param_writeback *out, struct exec_ctx *fc) {
    (void)ix_signed, (void)ix_unsigned;
    adamw8bit_update_cuda(h, n, w, q1, q2, absmax1, absmax2, map_signed, map_unsigned, grad, grad_dtype, out, fc);
}

static void adamw8bit_dequantize_device(const float map[QMAP_SIZE], const uint8_t *q, const float *absmax, size_t n,
                                        float *out) {
    adamw8bit_dequantize_cuda(map, q, absmax, n, out, true);
}

static void adamw8bit_quantize_device(const float map[QMAP_SIZE], const struct qmap_index *ix, const float *x,
                                      size_t n, uint8_t *q, float *absmax) {
    (void)ix;
    adamw8bit_quantize_cuda(map, x, true, n, q, absmax);
}

const struct optim_ops optim_ops_cuda = {
    .adamw_update = adamw_update_cuda,
    .sgd_update = sgd_update_cuda,
    .sgd8bit_update = sgd8bit_update_device,
    .lion_update = lion_update_cuda,
    .lion8bit_update = lion8bit_update_device,
    .adamw8bit_update = adamw8bit_update_device,
    .adafactor_apply = adafactor_apply_cuda,
    .adafactor_square_sums = adafactor_square_sums_cuda,
    .adafactor_ema = adafactor_ema_cuda,
    .adafactor_vector_ema = adafactor_vector_ema_cuda,
    .adafactor_total = adafactor_total_cuda,
    .adafactor_moment_values = adafactor_moment_values_cuda,
    .adafactor_update_squares = adafactor_update_squares_cuda,
    .adamw8bit_dequantize = adamw8bit_dequantize_device,
    .adamw8bit_quantize = adamw8bit_quantize_device,
};
