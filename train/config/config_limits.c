/* Size limits: every element and byte count the trainer derives from the
 * shape keys is computed in 64-bit integers (size_t, int64_t), so a shape
 * is accepted only if each of those counts, in bytes, stays at most
 * CONFIG_MAX_BYTES (2^62). The products are formed here in uint64_t with
 * overflow detection, so the check itself cannot wrap. The counts are
 * upper bounds of what the trainer allocates (fp32, llm.c's padded
 * vocabulary, the larger of the two archs' layer shapes), not its exact
 * buffers: their job is to keep the integer arithmetic safe. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>

enum { MAX_FACTORS = 4 };

/* One count: a product of n factors, times bytes per element. */
struct size_check {
    const char *what;
    const char *formula; /* the product in key names */
    int n;
    uint64_t factors[MAX_FACTORS];
    uint64_t bytes_per_element;
};

/* a x b, or UINT64_MAX when it does not fit (which fails every limit). */
static uint64_t mul_sat(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t add_sat(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t check_bytes(const struct size_check *k) {
    uint64_t n = k->bytes_per_element;
    for (int i = 0; i < k->n; i++) n = mul_sat(n, k->factors[i]);
    return n;
}

static void size_error(const struct size_check *k, uint64_t bytes, char err[CONFIG_ERR_LEN]) {
    char factors[160] = "", total[48];
    size_t used = 0;
    for (int i = 0; i < k->n && used < sizeof factors; i++)
        used += (size_t)snprintf(factors + used, sizeof factors - used, "%s%llu", i ? " x " : "",
                                 (unsigned long long)k->factors[i]);
    if (bytes == UINT64_MAX) snprintf(total, sizeof total, "2^64 or more");
    else snprintf(total, sizeof total, "%llu", (unsigned long long)bytes);
    snprintf(err, CONFIG_ERR_LEN,
             "shape too large: %s, %s = %s elements x %llu B = %s bytes, above the limit of 2^62 bytes "
             "(%llu) on any count (sizes are 64-bit integers); lower one of these keys",
             k->what, k->formula, factors, (unsigned long long)k->bytes_per_element, total,
             (unsigned long long)CONFIG_MAX_BYTES);
}

int config_check_sizes(const struct config *c, char err[CONFIG_ERR_LEN]) {
    const uint64_t L = (uint64_t)c->n_layer, C = (uint64_t)c->d_model, NH = (uint64_t)c->n_head;
    const uint64_t T = (uint64_t)c->seq_len, B = (uint64_t)c->micro_batch;
    const uint64_t maxT = c->max_seq_len > c->seq_len ? (uint64_t)c->max_seq_len : T; /* position rows */
    const uint64_t F = (uint64_t)config_mlp_width(c);
    const uint64_t Vp = ((uint64_t)c->vocab_size + VOCAB_PAD - 1) / VOCAB_PAD * VOCAB_PAD;
    /* per token of one layer: input, norm 1, q k v (3C at most), attention
     * out, residual, norm 2 (8C); MLP up/gate, activation, product (3F at
     * most); the probability row (NH T) */
    const uint64_t per_token = add_sat(add_sat(8 * C, 3 * F), mul_sat(NH, T));
    /* parameters, either arch: untied embeddings 2 Vp C, positions max(T, max_seq_len) C,
     * per layer attention 4 C^2 (GQA only shrinks it), MLP 3 C F, norms and
     * biases 9 C + F, final norm 2 C */
    const uint64_t per_layer = add_sat(add_sat(mul_sat(4 * C, C), mul_sat(3 * C, F)), 9 * C + F);
    const uint64_t psi = add_sat(add_sat(mul_sat(2 * Vp, C), mul_sat(maxT, C)), add_sat(mul_sat(L, per_layer), 2 * C));
    /* activations in fp32 (4 B); parameters at 16 B each: weights, fp32
     * master, grads, Adam m and v. The specific counts come first, so the
     * error names the fewest keys. */
    const struct size_check checks[] = {
        {"one layer's MLP activation", "micro_batch x seq_len x ffn_dim (4 d_model when 0)", 3, {B, T, F}, 4},
        {"one layer's attention probabilities", "micro_batch x n_head x seq_len x seq_len", 4, {B, NH, T, T}, 4},
        {"the activations saved by all layers",
         "n_layer x micro_batch x seq_len x (8 d_model + 3 ffn_dim + n_head x seq_len), ffn_dim 4 d_model when 0",
         4, {L, B, T, per_token}, 4},
        {"the logits", "micro_batch x seq_len x vocab_size (padded to 128)", 3, {B, T, Vp}, 4},
        {"the token embedding", "vocab_size (padded to 128) x d_model", 2, {Vp, C}, 16},
        {"the model states",
         "parameters at most 2 Vp d_model + max(seq_len, max_seq_len) d_model + n_layer (4 d_model^2 + 3 d_model ffn_dim + "
         "9 d_model + ffn_dim) + 2 d_model",
         1, {psi}, 16},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        uint64_t bytes = check_bytes(&checks[i]);
        if (bytes > CONFIG_MAX_BYTES) {
            size_error(&checks[i], bytes, err);
            return -1;
        }
    }
    return 0;
}
