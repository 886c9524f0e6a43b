/* The update rules' table (include/optim.h: struct optim_rule): what each
 * keeps per parameter and which configuration keys are its own. The
 * memory theory, the checkpoints, the config check and the memory check's
 * levers all read it, so a rule is described once. The bytes per
 * parameter are the seeds' table (THEORY.md 2): AdamW 4 + 4, 8-bit AdamW
 * 1 + 1, SGD and Lion 4, their 8-bit forms 1 (each 8-bit state adds an
 * fp32 maximum per 256-element block); Adafactor 4 (n + m) per n x m
 * matrix, 4 per element of a vector (+ 4 per element with a first moment). */
#include "optim.h"

#define KEY(k) (1u << (k))

/* Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms",
 * Program 1's default beta2 */
#define LION_BETA2 0.99f

static const struct optim_rule RULES[OPTIM_NUM_KINDS] = {
    [OPTIM_ADAMW] = {"adamw", 2, false, OPTIM_ADAMW8BIT, KEY(OKEY_BETA1) | KEY(OKEY_BETA2) | KEY(OKEY_EPS),
                     {"adam m", "adam v"}},
    [OPTIM_ADAMW8BIT] = {"adamw8bit", 2, true, OPTIM_ADAMW,
                         KEY(OKEY_BETA1) | KEY(OKEY_BETA2) | KEY(OKEY_EPS) | KEY(OKEY_MIN_8BIT_SIZE),
                         {"adam m", "adam v"}},
    [OPTIM_SGD] = {"sgd", 1, false, OPTIM_SGD8BIT, KEY(OKEY_MOMENTUM) | KEY(OKEY_NESTEROV), {"sgd momentum", NULL}},
    [OPTIM_SGD8BIT] = {"sgd8bit", 1, true, OPTIM_SGD,
                       KEY(OKEY_MOMENTUM) | KEY(OKEY_NESTEROV) | KEY(OKEY_MIN_8BIT_SIZE), {"sgd momentum", NULL}},
    /* Lion's beta2 is its momentum's decay: the paper's default 0.99, not AdamW's 0.95 */
    [OPTIM_LION] = {"lion", 1, false, OPTIM_LION8BIT, KEY(OKEY_BETA1) | KEY(OKEY_BETA2), {"lion m", NULL},
                    LION_BETA2},
    [OPTIM_LION8BIT] = {"lion8bit", 1, true, OPTIM_LION,
                        KEY(OKEY_BETA1) | KEY(OKEY_BETA2) | KEY(OKEY_MIN_8BIT_SIZE), {"lion m", NULL}, LION_BETA2},
    /* no per-element state of its own kind: its statistics (parallel/zero/factored.c) */
    [OPTIM_ADAFACTOR] = {"adafactor", 0, false, OPTIM_ADAFACTOR,
                         KEY(OKEY_ADAFACTOR_BETA1) | KEY(OKEY_ADAFACTOR_DECAY) | KEY(OKEY_ADAFACTOR_EPS) |
                             KEY(OKEY_ADAFACTOR_CLIP),
                         {"adafactor", NULL}},
};

static const char *const KEY_NAMES[OKEY_NUM] = {
    [OKEY_BETA1] = "beta1", [OKEY_BETA2] = "beta2", [OKEY_EPS] = "eps",
    [OKEY_MOMENTUM] = "momentum", [OKEY_NESTEROV] = "nesterov", [OKEY_MIN_8BIT_SIZE] = "min_8bit_size",
    [OKEY_ADAFACTOR_BETA1] = "adafactor_beta1", [OKEY_ADAFACTOR_DECAY] = "adafactor_decay",
    [OKEY_ADAFACTOR_EPS] = "adafactor_eps", [OKEY_ADAFACTOR_CLIP] = "adafactor_clip"};

const struct optim_rule *optim_rule(enum optimizer_kind k) { return &RULES[k]; }

const char *optim_key_name(enum optim_key k) { return KEY_NAMES[k]; }

/* An 8-bit state: a code byte per element and an fp32 absmax per block. */
enum { CODE_BYTES = 1, ABSMAX_BYTES = 4, FP32_BYTES = 4 };

double optim_state_bytes(const struct optim_rule *r, size_t n_q, size_t n_blocks, size_t n_f32) {
    return r->states * ((double)CODE_BYTES * (double)n_q + (double)ABSMAX_BYTES * (double)n_blocks +
                        (double)FP32_BYTES * (double)n_f32);
}

double optim_bytes_per_param(const struct optim_rule *r, float adafactor_beta1) {
    if (r->states == 0) return adafactor_beta1 > 0.0f ? FP32_BYTES : 0.0;
    return r->quantized ? optim_state_bytes(r, 1, 0, 0) + optim_state_bytes(r, 0, 1, 0) / ADAMW8BIT_BLOCK
                        : optim_state_bytes(r, 0, 0, 1);
}
