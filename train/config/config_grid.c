/* What the trainer can run on a grid: the architecture, the tensor-parallel
 * split, the pipeline's stage split and schedule, and the combinations it
 * refuses (each with a message naming the keys and numbers), checked on
 * every rank before anything is allocated. */
#include "config.h"
#include "grid.h"

#include "pipe_messages.h"
#include "layout.h"

/* The split into model chunks (stages, or pp x virtual_stages under the
 * interleaved schedule): pp_layers, or an even one. counts gets that many
 * entries. */
static int stage_counts(const struct config *cfg, int pp, int *counts, char err[CONFIG_ERR_LEN]) {
    int n = pp * config_chunks(cfg);
    if (cfg->pp_layers[0]) return pipeline_parse_layers(cfg->pp_layers, n, cfg->n_layer, counts, err, CONFIG_ERR_LEN);
    for (int s = 0; s < n; s++) {
        int l0, l1;
        pipeline_stage_layers(cfg->n_layer, n, s, NULL, &l0, &l1);
        counts[s] = l1 - l0;
    }
    return 0;
}

/* The interleaved schedule's shape (include/schedule.h): Megatron-LM's
 * order needs m a multiple of p, and every chunk a layer. */
static int check_interleaved(const struct config *cfg, const struct grid *g, const int *counts,
                             char err[CONFIG_ERR_LEN]) {
    int v = cfg->virtual_stages, p = g->pp, m = cfg->grad_accum;
    if (cfg->schedule != SCHEDULE_INTERLEAVED) {
        if (v == 1) return 0;
        snprintf(err, CONFIG_ERR_LEN, "virtual_stages = %d needs --schedule interleaved (schedule %s holds one "
                 "chunk per stage)", v, schedule_name(cfg->schedule));
        return -1;
    }
    if (p < 2 || v < 2) {
        snprintf(err, CONFIG_ERR_LEN, "schedule interleaved needs pp >= 2 and virtual_stages >= 2 (pp = %d, "
                 "virtual_stages = %d; with one chunk per stage use --schedule 1f1b)", p, v);
        return -1;
    }
    if (m % p != 0) {
        snprintf(err, CONFIG_ERR_LEN, "schedule interleaved runs micro-batches in groups of pp: grad_accum "
                 "(m = %d) must be a multiple of pp (p = %d) (gpipe and 1f1b run any m)", m, p);
        return -1;
    }
    for (int j = 0; j < p * v; j++)
        if (counts[j] < 1) {
            snprintf(err, CONFIG_ERR_LEN, "schedule interleaved: model chunk %d of pp x virtual_stages = %d has no "
                     "layer (n_layer = %d; each chunk needs one)", j, p * v, cfg->n_layer);
            return -1;
        }
    int slots = 0;
    for (int c = 0; c < v; c++) slots += schedule_chunk_slots(SCHEDULE_INTERLEAVED, p, 0, m, v, c);
    if (slots > GPT_MAX_SLOTS) {
        snprintf(err, CONFIG_ERR_LEN, "schedule interleaved: stage 0 would hold %d micro-batch chunks, more than "
                 "the %d activation slots (fewer pp or virtual_stages)", slots, GPT_MAX_SLOTS);
        return -1;
    }
    return 0;
}

/* Context parallelism (include/context_parallel.h): the load-balanced
 * split's 2 cp chunks, ring attention's log-sum-exp form, and sequence
 * parallelism's slices of a rank's T/cp positions. */
static int check_context_parallel(const struct config *cfg, const struct grid *g, char err[CONFIG_ERR_LEN]) {
    int cp = g->cp, T = cfg->seq_len;
    if (cp == 1) return 0;
    if (T % (2 * cp) != 0) {
        snprintf(err, CONFIG_ERR_LEN, "cp = %d: seq_len (%d) must be a multiple of 2 cp = %d (each sequence is cut "
                 "into 2 cp chunks, cp rank r holding chunks r and 2 cp - 1 - r)", cp, T, 2 * cp);
        return -1;
    }
    if (cfg->attention != ATTENTION_FLASH) {
        snprintf(err, CONFIG_ERR_LEN, "cp = %d with --attention plain: ring attention merges partial outputs by "
                 "their log-sum-exp, which only the flash kernels keep; use --attention flash", cp);
        return -1;
    }
    if (cfg->sequence_parallel && g->tp > 1 && (T / cp) % g->tp != 0) {
        snprintf(err, CONFIG_ERR_LEN, "sequence_parallel with cp = %d: tp = %d must divide each cp rank's "
                 "seq_len/cp = %d positions", cp, g->tp, T / cp);
        return -1;
    }
    if (cfg->sample_tokens > 0) {
        snprintf(err, CONFIG_ERR_LEN, "sample_tokens = %d with cp = %d: sampling runs whole sequences on one rank "
                 "(sample after training with cp = 1 from the saved model)", cfg->sample_tokens, cp);
        return -1;
    }
    return 0;
}

/* What each architecture's blocks run. GPT-2's: n_kv_head = n_head and
 * F = 4 d_model. LLaMA's (model/llama.c): sequence parallelism on its fp32
 * path, flash attention only as cp's ring (fp32 or on the bf16 stores),
 * recompute full or selective; each other choice is refused by name. */
static int check_arch(const struct config *cfg, const struct grid *g, char err[CONFIG_ERR_LEN]) {
    if (cfg->arch == ARCH_GPT2) {
        if (cfg->n_kv_head == 0 && cfg->ffn_dim == 0) return 0;
        snprintf(err, CONFIG_ERR_LEN, "arch = gpt2 has n_kv_head = n_head and ffn_dim = 4 d_model (leave both 0); "
                 "GQA and another MLP width are arch = llama's");
        return -1;
    }
    const char *what = NULL;
    if (cfg->sequence_parallel && g->tp > 1 && cfg->act_dtype == DTYPE_BF16) {
        what = "sequence_parallel with bf16 activations (its sequence parallelism runs the fp32 path; use --act_dtype "
               "fp32)";
    } else if (cfg->attention != ATTENTION_PLAIN && g->cp == 1) {
        what = "attention flash at cp = 1 (its flash form is the ring's, cp > 1; use --attention plain)";
    } else if (cfg->device == DEVICE_CUDA) {
        what = "device cuda (LLaMA's kernels run on the host only; use --device cpu)";
    }
    if (!what) return 0;
    snprintf(err, CONFIG_ERR_LEN, "arch = llama: the trainer does not run %s yet", what);
    return -1;
}

int config_check_grid(const struct config *cfg, const struct grid *g, char err[CONFIG_ERR_LEN]) {
    if (check_arch(cfg, g, err) != 0) return -1;
    /* tensor parallelism splits heads, the FC features and the vocabulary */
    struct model_shape shape = trainer_model_shape(cfg);
    if (!tp_divides(&shape, g->tp, err, CONFIG_ERR_LEN)) return -1;
    if (cfg->sequence_parallel && cfg->seq_len % g->tp != 0) {
        snprintf(err, CONFIG_ERR_LEN,
                 "sequence_parallel: tp = %d must divide seq_len (%d), each tp rank holding seq_len/tp positions of "
                 "every sequence", g->tp, cfg->seq_len);
        return -1;
    }
    if (check_context_parallel(cfg, g, err) != 0) return -1;
    if (g->tp > 1 && cfg->sample_tokens > 0) {
        snprintf(err, CONFIG_ERR_LEN,
                 "sample_tokens = %d with tp = %d: sampling reads whole rows of logits, which a tensor-parallel "
                 "rank does not hold (run the sample with tp = 1 from a saved model)",
                 cfg->sample_tokens, g->tp);
        return -1;
    }
    if (!cfg->pp_layers[0] && g->pp == 1 && cfg->virtual_stages == 1 && cfg->schedule != SCHEDULE_INTERLEAVED)
        return 0;
    int counts[PIPELINE_MAX_STAGES * RANK_MAX_CHUNKS];
    if (stage_counts(cfg, g->pp, counts, err) != 0) return -1;
    if (check_interleaved(cfg, g, counts, err) != 0) return -1;
    /* over NCCL the k-th send of a link meets its k-th receive, whatever
     * the tags: every link's two ends must post in one order (checked on
     * the CPU too, so that both builds run the same schedules) */
    if (g->pp > 1 && pipe_check_order(cfg->schedule, g->pp, cfg->grad_accum, config_chunks(cfg), err,
                                      CONFIG_ERR_LEN) != 0)
        return -1;
    if (cfg->schedule == SCHEDULE_GPIPE && cfg->grad_accum > GPT_MAX_SLOTS) {
        snprintf(err, CONFIG_ERR_LEN,
                 "schedule gpipe holds every micro-batch of a step: grad_accum = %d is more than the %d activation "
                 "slots (use --schedule 1f1b, which holds at most pp)", cfg->grad_accum, GPT_MAX_SLOTS);
        return -1;
    }
    if (g->pp > 1 && cfg->sample_tokens > 0) {
        snprintf(err, CONFIG_ERR_LEN,
                 "sample_tokens with pp = %d: sampling runs on one rank holding the whole model (sample after "
                 "training with pp = 1 from the saved model, --init_from FILE --steps 0)", g->pp);
        return -1;
    }
    /* the tied wte's two copies must get the same update: the 8-bit
     * blocks start at shard boundaries, which differ between the
     * embedding unit and the head unit once both are sharded over dp */
    const struct optim_rule *rule = optim_rule(cfg->optimizer);
    if (g->pp > 1 && rule->quantized && cfg->zero >= 1 && g->dp > 1) {
        snprintf(err, CONFIG_ERR_LEN,
                 "%s with pp = %d, ZeRO-%d over dp = %d: the tied wte's copies on the first and last stage "
                 "would be quantized in different blocks and drift apart (use --zero 0, dp = 1, or %s)",
                 rule->name, g->pp, cfg->zero, g->dp, optim_rule(rule->twin)->name);
        return -1;
    }
    return 0;
}

