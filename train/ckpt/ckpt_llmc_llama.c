/* LLaMA 3 model files' header: llm.c's train_llama3.py write_model.
 *
 * 256 int32 slots, little-endian:
 *   [0] 20240803  [1] version (3: fp32, 5: bf16)  [2] block_size
 *   [3] vocab_size  [4] n_layer  [5] n_head  [6] n_kv_head  [7] n_embd
 *   [8] ffn_dim_multiplier  [9] multiple_of  [10] norm_eps  [11] rope_theta
 *   [12] use_scaled_rope  [13] max_gen_batch_size  [14] [15] the model's
 *   major and minor version (3, 1); the rest zero.
 *
 * write_model stores the float fields in int32 slots, truncated: norm_eps
 * 1e-5 becomes 0 and ffn_dim_multiplier 1.3 becomes 1. So:
 *  - norm_eps is not read from the file. Slot 10 must be 0 (what any eps
 *    below 1 becomes; the config's norm_eps is below 1 too); the run's eps
 *    is the config key norm_eps (default 1e-5), and the trainer says so
 *    when it loads a LLaMA file.
 *  - the MLP width F is not computed from slots 8 and 9 (the multiplier
 *    lost its fraction) but recovered exactly from the file's size: the
 *    element count is linear in F (3 n_layer n_embd elements per unit of
 *    F: c_fc, c_fc2, c_proj), so F = (elements - the rest) / (3 L C), which
 *    must be a whole positive number and a multiple of multiple_of
 *    (slot 9), as the reference's rounding makes it. A file whose size
 *    gives no such F is refused.
 *  - rope_theta (an integer in every LLaMA 3: 500000) and use_scaled_rope
 *    are exact, and are the file's: the trainer refuses a config that says
 *    otherwise (trainer_adopt_model_file).
 * When writing, slot 8 is 1 and slot 9 is F itself, so that the
 * reference's formula (int(8 C / 3) rounded up to multiple_of) gives F
 * back whenever int(8 C / 3) <= F; norm_eps is written as write_model
 * would (0), and a rope_theta that is not an integer is refused, since the
 * file could not hold it. The vocabulary is not padded (Vp = V). */
#include "ckpt_llmc_llama.h"

#include <math.h>
#include <stdio.h>

enum {
    L_MAGIC, L_VERSION, L_BLOCK, L_VOCAB, L_LAYERS, L_HEADS, L_KV_HEADS, L_EMBD, L_FFN_MULT, L_MULTIPLE_OF,
    L_NORM_EPS, L_ROPE_THETA, L_SCALED_ROPE, L_MAX_GEN_BATCH, L_MAJOR, L_MINOR
};
/* The widest MLP a file may give: F sizes int rows in the layout (the
 * config's ffn_dim goes to 2^20). */
enum { LLAMA_MAX_FFN = 1 << 26 };

static uint64_t mul_sat(uint64_t a, uint64_t b) { return a && b > UINT64_MAX / a ? UINT64_MAX : a * b; }
static uint64_t add_sat(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

/* The positive shape slots, and the flags' and eps's values. */
static int check_slots(const int32_t h[LLMC_HEADER_INTS], const char *path, char err[CKPT_ERR_LEN]) {
    static const struct { int slot; const char *name; } positive[] = {
        {L_BLOCK, "block_size"}, {L_VOCAB, "vocab_size"},   {L_LAYERS, "n_layer"},          {L_HEADS, "n_head"},
        {L_KV_HEADS, "n_kv_head"}, {L_EMBD, "n_embd"},      {L_MULTIPLE_OF, "multiple_of"}, {L_ROPE_THETA, "rope_theta"},
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) {
        if (h[positive[i].slot] <= 0) {
            snprintf(err, CKPT_ERR_LEN, "%.300s: %s is %d in the LLaMA header", path, positive[i].name,
                     (int)h[positive[i].slot]);
            return -1;
        }
    }
    if (h[L_VOCAB] > LLMC_MAX_VOCAB || h[L_EMBD] > LLMC_MAX_EMBD) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: vocab_size %d or n_embd %d in the LLaMA header is beyond the largest "
                 "accepted (%d, %d)", path, (int)h[L_VOCAB], (int)h[L_EMBD], LLMC_MAX_VOCAB, LLMC_MAX_EMBD);
        return -1;
    }
    if (h[L_HEADS] % h[L_KV_HEADS] != 0) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: n_kv_head %d does not divide n_head %d in the LLaMA header", path,
                 (int)h[L_KV_HEADS], (int)h[L_HEADS]);
        return -1;
    }
    if (h[L_EMBD] % h[L_HEADS] != 0) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: n_head %d does not divide n_embd %d in the LLaMA header", path,
                 (int)h[L_HEADS], (int)h[L_EMBD]);
        return -1;
    }
    if (h[L_SCALED_ROPE] != 0 && h[L_SCALED_ROPE] != 1) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: use_scaled_rope is %d in the LLaMA header (0 or 1)", path,
                 (int)h[L_SCALED_ROPE]);
        return -1;
    }
    if (h[L_NORM_EPS] != 0) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: norm_eps is %d in the LLaMA header: write_model truncates eps to an "
                 "int32, so only 0 (an eps below 1, given by the config key norm_eps) can be used", path,
                 (int)h[L_NORM_EPS]);
        return -1;
    }
    return 0;
}

/* F from the file's size (the header comment); -1 with a message when no
 * whole positive multiple of multiple_of fits. */
static int recover_ffn(const int32_t h[LLMC_HEADER_INTS], const char *path, int64_t file_bytes, int esz, int *F,
                       char err[CKPT_ERR_LEN]) {
    int64_t data = file_bytes - LLMC_HEADER_BYTES;
    if (data < 0 || data % esz != 0) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: %lld bytes are not the header and whole %d-byte elements", path,
                 (long long)file_bytes, esz);
        return -1;
    }
    uint64_t n = (uint64_t)data / (uint64_t)esz, V = (uint64_t)h[L_VOCAB], L = (uint64_t)h[L_LAYERS],
             C = (uint64_t)h[L_EMBD], NH = (uint64_t)h[L_HEADS], KV = (uint64_t)h[L_KV_HEADS];
    uint64_t qkv = (NH + 2 * KV) * (C / NH); /* rows of c_attn: at most 3 C */
    /* wte, lm_head, ln_f; per layer ln_1, ln_2, c_attn, attention's c_proj */
    uint64_t rest = add_sat(add_sat(mul_sat(2 * V, C), C), mul_sat(L, add_sat(2 * C + qkv * C, C * C)));
    uint64_t per_f = mul_sat(3 * C, L);
    if (n <= rest) {
        snprintf(err, CKPT_ERR_LEN, "%.300s is truncated: %llu elements, not more than the %llu of this header's "
                 "shape without its MLP", path, (unsigned long long)n, (unsigned long long)rest);
        return -1;
    }
    if ((n - rest) % per_f != 0 || (n - rest) / per_f > LLAMA_MAX_FFN) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: the MLP width cannot be recovered from the file's size: its %llu "
                 "elements beyond the rest of the shape are not a multiple of 3 n_layer n_embd (%llu) up to %d of them",
                 path, (unsigned long long)(n - rest), (unsigned long long)per_f, LLAMA_MAX_FFN);
        return -1;
    }
    *F = (int)((n - rest) / per_f);
    if (*F % h[L_MULTIPLE_OF] != 0) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: the MLP width the file's size gives, %d, is not a multiple of the "
                 "header's multiple_of (%d)", path, *F, (int)h[L_MULTIPLE_OF]);
        return -1;
    }
    return 0;
}

int llama_check_header(const int32_t h[LLMC_HEADER_INTS], const char *path, char err[CKPT_ERR_LEN]) {
    if (h[L_VERSION] != LLMC_VERSION_FP32 && h[L_VERSION] != LLMC_VERSION_BF16) {
        snprintf(err, CKPT_ERR_LEN, "%.300s: unsupported llm.c LLaMA model version %d (3 = fp32 and 5 = bf16 are)",
                 path, (int)h[L_VERSION]);
        return -1;
    }
    return check_slots(h, path, err);
}

int llama_parse_header(const int32_t h[LLMC_HEADER_INTS], const char *path, int64_t file_bytes,
                       struct model_shape *shape, int *version, char err[CKPT_ERR_LEN]) {
    int F;
    if (llama_check_header(h, path, err) != 0 ||
        recover_ffn(h, path, file_bytes, h[L_VERSION] == LLMC_VERSION_BF16 ? 2 : 4, &F, err) != 0)
        return -1;
    *shape = (struct model_shape){.L = h[L_LAYERS], .C = h[L_EMBD], .NH = h[L_HEADS], .T = h[L_BLOCK],
                                  .maxT = h[L_BLOCK], .V = h[L_VOCAB], .Vp = h[L_VOCAB], .arch = ARCH_LLAMA,
                                  .KV = h[L_KV_HEADS], .F = F, .rope_theta = (float)h[L_ROPE_THETA],
                                  .rope_scaled = h[L_SCALED_ROPE] != 0};
    *version = h[L_VERSION];
    return 0;
}

int llama_fill_header(int32_t h[LLMC_HEADER_INTS], const struct model_shape *s, enum dtype file_dt, const char *path,
                      char err[CKPT_ERR_LEN]) {
    /* the int32 range, exactly representable as floats */
    if (!(s->rope_theta >= 1.0f && s->rope_theta < 2147483648.0f) || s->rope_theta != floorf(s->rope_theta)) {
        snprintf(err, CKPT_ERR_LEN, "%.300s not saved: rope_theta %g is not a positive integer, and a LLaMA model "
                 "file keeps it in an int32", path, (double)s->rope_theta);
        return -1;
    }
    for (int i = 0; i < LLMC_HEADER_INTS; i++) h[i] = 0;
    h[L_MAGIC] = LLMC_LLAMA_MAGIC;
    h[L_VERSION] = file_dt == DTYPE_BF16 ? LLMC_VERSION_BF16 : LLMC_VERSION_FP32;
    h[L_BLOCK] = shape_pos_rows(s), h[L_VOCAB] = s->V, h[L_LAYERS] = s->L, h[L_HEADS] = s->NH;
    h[L_KV_HEADS] = kv_heads(s), h[L_EMBD] = s->C;
    h[L_FFN_MULT] = 1, h[L_MULTIPLE_OF] = mlp_width(s); /* the header comment */
    h[L_NORM_EPS] = 0; /* int(norm_eps), as write_model stores it */
    h[L_ROPE_THETA] = (int32_t)s->rope_theta, h[L_SCALED_ROPE] = s->rope_scaled;
    h[L_MAX_GEN_BATCH] = 4; /* the reference's default; nothing here reads it */
    h[L_MAJOR] = 3, h[L_MINOR] = 1;
    return 0;
}
