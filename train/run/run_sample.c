/* Text generation from the trained model: byte tokens, temperature
 * sampling. Each new token costs one forward pass over a (B, T) window with
 * the context in row 0; the causal mask makes the other rows irrelevant. */
#include <math.h>
#include <string.h>

#include "rng.h"
#include "bufops.h"
#include "run.h"

static int sample_token(const float *logits, int V, float temperature, float coin) {
    float maxv = logits[0];
    for (int v = 1; v < V; v++) maxv = logits[v] > maxv ? logits[v] : maxv;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((logits[v] - maxv) / temperature);
    double target = coin * sum, acc = 0.0;
    for (int v = 0; v < V; v++) {
        acc += exp((logits[v] - maxv) / temperature);
        if (acc >= target) return v;
    }
    return V - 1;
}

void trainer_sample(struct trainer *tr, FILE *out) {
    const struct config *c = tr->cfg;
    struct exec_ctx training = tr->flops; /* sampling is not part of the training counts */
    struct coll_uncounted comm = coll_uncounted_begin(&tr->grid->dp_comm);
    int T = c->seq_len, n_ctx = 0;
    size_t bt = (size_t)c->micro_batch * T;
    int32_t *ctx = tr->inputs;
    memset(ctx, 0, bt * sizeof *ctx);
    memset(tr->targets, 0, bt * sizeof *tr->targets);
    uint16_t tok;
    for (const char *p = c->sample_prompt; *p && n_ctx < T; p++) {
        tokenize_bytes((const unsigned char *)p, 1, &tok);
        ctx[n_ctx++] = tok < c->vocab_size ? tok : 0;
        if (out) fputc(*p, out);
    }
    if (n_ctx == 0) ctx[n_ctx++] = '\n';
    /* the last position's logits, copied out of the model's space (a GPU's memory) */
    float *row = mem_alloc(&tr->mem, MEM_HOST, MEM_SCRATCH, "sampling logits row", (size_t)c->vocab_size * sizeof *row);
    char err[TRAINER_ERR_LEN];
    if (trainer_agree(tr, row ? 0 : -1, err) != 0) { /* every rank runs the forwards, so all skip or none */
        if (out) fprintf(out, "\n(sampling skipped: %zu bytes for a logits row could not be allocated on some rank)\n",
                         (size_t)c->vocab_size * sizeof *row);
        mem_free(&tr->mem, row);
        return;
    }
    for (int i = 0; i < c->sample_tokens; i++) {
        if (n_ctx == T) { /* slide the window: keep the last T-1 tokens */
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof *ctx);
            n_ctx--;
        }
        struct mb_input in = {.inputs = ctx, .targets = tr->targets};
        engine_forward(&tr->engine, 0, &in, NULL, 0.0f);
        gpt_logits_row(&tr->engine.model, 0, 0, n_ctx - 1, row, c->vocab_size);
        float coin = rng_uniform((uint64_t)c->seed, RNG_STREAM_SAMPLE, (uint64_t)i);
        int next = sample_token(row, c->vocab_size, c->sample_temperature, coin);
        ctx[n_ctx++] = next;
        if (out) fputc(detokenize_byte(next), out);
    }
    if (out) fputc('\n', out);
    mem_free(&tr->mem, row);
    tr->flops = training;
    coll_uncounted_end(comm);
}
