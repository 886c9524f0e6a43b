/* Bit-exact resume of the trainer on configs/tiny.conf (tests/train_fixture.h):
 * a stopped and resumed run equals a straight one bit for bit in params,
 * master weights and optimizer states, in bf16 and fp32, shuffled and
 * sequential, with stochastic rounding and gradient accumulation, with
 * 8-bit AdamW (and its requantization for a new layout), and after a
 * SIGTERM, which saves a resumable state at the next step boundary. Every
 * file lives in one mkdtemp directory. One thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../train/ckpt/ckpt.h"
#include "../train/run/run_outputs.h"
#include "../train/run/run_stop_signal.h"
#include "../train/run/run.h"
#include "json_log.h"
#include "train_fixture.h"

/* ---- bit-exact resume --------------------------------------------------- */

/* Run A: 10 steps straight. Run B: the same config stopped after 5 steps
 * (stop_after; the LR schedule still spans 10), its resume state reloaded
 * by a fresh trainer that runs steps 6..10. */
static void check_resume(const char *dtype, const char *shuffle, const char *rounding, const char *grad_accum) {
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "10");
    set(&c, "warmup_steps", "2");
    set(&c, "weight_decay", "0.1"); /* exercise the decay path too */
    set(&c, "param_dtype", dtype);
    set(&c, "grad_dtype", dtype);
    set(&c, "act_dtype", dtype);
    set(&c, "shuffle", shuffle);
    set(&c, "rounding", rounding);
    set(&c, "grad_accum", grad_accum);
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);

    struct snapshot straight, half, resumed;
    open_ok(tr, &c);
    run_ok(tr);
    assert_int_equal(tr->step, 10);
    snap(&straight, tr);
    trainer_close(tr);

    struct config c1 = c;
    path_in(c1.save_state, sizeof c1.save_state, "half.state");
    unlink(c1.save_state);
    open_ok(tr, &c1);
    tr->stop_after = 5;
    run_ok(tr);
    assert_int_equal(tr->step, 5);
    snap(&half, tr);
    trainer_close(tr);
    assert_int_equal(access(c1.save_state, F_OK), 0);

    struct config c2 = c;
    snprintf(c2.resume, sizeof c2.resume, "%s", c1.save_state);
    open_ok(tr, &c2);
    assert_int_equal(tr->step, 5);
    run_ok(tr);
    assert_int_equal(tr->step, 10);
    snap(&resumed, tr);
    trainer_close(tr);

    /* the halfway states really are different from the end (the check is
     * not vacuous), and the resumed end equals the straight end, bit for bit */
    assert_true(memcmp(half.params, straight.params, half.param_bytes) != 0);
    assert_true(memcmp(half.adam_v, straight.adam_v, half.psi * sizeof(float)) != 0);
    assert_same_states(&straight, &resumed);
    snap_free(&straight), snap_free(&half), snap_free(&resumed);
    free(tr);
}

static void test_resume_bf16_shuffled(void **state) {
    (void)state;
    check_resume("bf16", "1", "nearest", "1");
}

static void test_resume_bf16_stochastic_accum(void **state) {
    (void)state;
    check_resume("bf16", "1", "stochastic", "2");
}

static void test_resume_fp32_sequential(void **state) {
    (void)state;
    check_resume("fp32", "0", "nearest", "1");
}

/* ---- bit-exact resume of the 8-bit rules and Lion ------------------------ */

/* Everything an update rule keeps: params, master, and of each of its
 * states the codes, block absmax and the fp32 states of small tensors (an
 * 8-bit rule) or the fp32 state (a 32-bit one), as bytes. */
struct snapshot8 {
    unsigned char *bytes;
    size_t n;
};

static void snap8(struct snapshot8 *s, const struct trainer *tr) {
    const struct zero *z = &tr->engine.z;
    const struct optim_rule *r = optim_rule(tr->cfg->optimizer);
    size_t psi = tr->engine.lay.total, two = r->states == 2;
    size_t f32 = r->quantized ? z->segs.n_f32 : z->sh.total_padded; /* (ZeRO-0 here: full states) */
    const struct {
        const void *p;
        size_t n;
    } parts[] = {{z->st.params, psi * dtype_size(tr->cfg->param_dtype)},
                 {z->st.master, z->st.master ? psi * 4 : 0},
                 {z->st.q1, z->segs.n_q},
                 {z->st.q2, two * z->segs.n_q},
                 {z->st.absmax1, z->segs.n_blocks * 4},
                 {z->st.absmax2, two * z->segs.n_blocks * 4},
                 {z->st.s1, f32 * 4},
                 {z->st.s2, two * f32 * 4}};
    s->n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) s->n += parts[i].n;
    s->bytes = malloc(s->n);
    assert_non_null(s->bytes);
    size_t at = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (parts[i].n) memcpy(s->bytes + at, parts[i].p, parts[i].n);
        at += parts[i].n;
    }
}

/* An 8-bit rule, bf16 params: 10 steps straight == 5, save, resume, 5
 * more, in params, master, codes, absmax and fp32 states, bit for bit, and
 * in the losses of steps 6..10 as logged. The resume says it loaded the
 * 8-bit states as saved. A resume with another min_8bit_size requantizes,
 * says so, and still runs. A 32-bit rule (lion): the same, without the
 * 8-bit parts. */
static void check_resume_rule(const char *optimizer) {
    const bool q8 = strstr(optimizer, "8bit") != NULL;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "10");
    set(&c, "warmup_steps", "2");
    set(&c, "weight_decay", "0.1");
    set(&c, "optimizer", optimizer);
    if (q8) set(&c, "min_8bit_size", "1024"); /* the matrices quantized, norms and biases fp32 */
    set(&c, "param_dtype", "bf16");
    set(&c, "grad_dtype", "bf16");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    struct snapshot8 straight, half, resumed;
    double loss_a[16], loss_b[16];

    struct config ca = c;
    char name[64];
    snprintf(name, sizeof name, "straight_%s.json", optimizer);
    path_in(ca.log_json, sizeof ca.log_json, name);
    open_ok(tr, &ca);
    assert_true((tr->engine.z.segs.n_q > 0) == q8 && tr->engine.z.segs.n_f32 > 0); /* both kinds of state */
    run_ok(tr);
    snap8(&straight, tr);
    trainer_close(tr);

    struct config c1 = c;
    path_in(c1.save_state, sizeof c1.save_state, "half8.state");
    unlink(c1.save_state);
    open_ok(tr, &c1);
    tr->stop_after = 5;
    run_ok(tr);
    snap8(&half, tr);
    trainer_close(tr);

    struct config c2 = c;
    snprintf(c2.resume, sizeof c2.resume, "%s", c1.save_state);
    snprintf(name, sizeof name, "resumed_%s.json", optimizer);
    path_in(c2.log_json, sizeof c2.log_json, name);
    open_ok(tr, &c2);
    assert_string_equal(tr->opt8_resume, q8 ? "8-bit states: loaded as saved (bit-exact)" : "");
    run_ok(tr);
    snap8(&resumed, tr);
    trainer_close(tr);

    assert_int_equal(straight.n, resumed.n);
    assert_true(memcmp(half.bytes, straight.bytes, half.n) != 0);
    assert_true(memcmp(straight.bytes, resumed.bytes, straight.n) == 0);
    assert_int_equal(json_log_losses(ca.log_json, loss_a, 16), 10);
    assert_int_equal(json_log_losses(c2.log_json, loss_b, 16), 5);
    for (int i = 0; i < 5; i++) assert_true(loss_a[5 + i] == loss_b[i]);

    if (!q8) {
        free(straight.bytes), free(half.bytes), free(resumed.bytes);
        free(tr);
        return;
    }
    /* another layout key: requantized from the fp32 states, and it says so */
    struct config c3 = c2;
    set(&c3, "min_8bit_size", "512");
    c3.log_json[0] = '\0';
    open_ok(tr, &c3);
    assert_string_equal(tr->opt8_resume,
                        "8-bit states: requantized from fp32 for a new layout (dp 1 -> 1, ZeRO 0 -> 0, "
                        "min_8bit_size 1024 -> 512)");
    run_ok(tr);
    assert_int_equal(tr->step, 10);
    trainer_close(tr);
    free(straight.bytes), free(half.bytes), free(resumed.bytes);
    free(tr);
}

static void test_resume_adamw8bit(void **state) {
    (void)state;
    check_resume_rule("adamw8bit");
}

static void test_resume_sgd8bit(void **state) {
    (void)state;
    check_resume_rule("sgd8bit");
}

static void test_resume_lion(void **state) {
    (void)state;
    check_resume_rule("lion");
}

static void test_resume_lion8bit(void **state) {
    (void)state;
    check_resume_rule("lion8bit");
}

/* Adafactor, fp32, with a first moment: 10 steps straight against 5, save,
 * resume, 5 more. The state keeps R, C and v as they are (and the second
 * moment per element, V = R C / sum C, for a resume at another tp, which
 * re-derives R and C as V's row and column sums: tests/mpi/test_reshard.c),
 * so the resumed run's weights and statistics equal the straight run's bit
 * for bit, and the resume says what it did. */
static void test_resume_adafactor(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "10");
    set(&c, "warmup_steps", "2");
    set(&c, "optimizer", "adafactor");
    set(&c, "adafactor_beta1", "0.9");
    set(&c, "param_dtype", "fp32");
    set(&c, "grad_dtype", "fp32");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    open_ok(tr, &c);
    run_ok(tr);
    const size_t psi = tr->engine.lay.total;
    float *straight = malloc(psi * sizeof *straight), *resumed = malloc(psi * sizeof *resumed);
    assert_true(straight && resumed);
    memcpy(straight, tr->engine.z.st.params, psi * sizeof *straight);
    float *stats = malloc(tr->engine.z.fac.stat_floats * sizeof *stats); /* R, C, v */
    assert_non_null(stats);
    memcpy(stats, tr->engine.z.st.s1, tr->engine.z.fac.stat_floats * sizeof *stats);
    trainer_close(tr);

    struct config c1 = c;
    path_in(c1.save_state, sizeof c1.save_state, "adafactor.state");
    unlink(c1.save_state);
    open_ok(tr, &c1);
    tr->stop_after = 5;
    run_ok(tr);
    trainer_close(tr);

    struct config c2 = c;
    snprintf(c2.resume, sizeof c2.resume, "%s", c1.save_state);
    open_ok(tr, &c2);
    assert_string_equal(tr->opt8_resume, "adafactor: R, C and v loaded as saved at tp = 1 (bit-exact)");
    run_ok(tr);
    memcpy(resumed, tr->engine.z.st.params, psi * sizeof *resumed);
    const bool stats_same = memcmp(stats, tr->engine.z.st.s1, tr->engine.z.fac.stat_floats * sizeof *stats) == 0;
    trainer_close(tr);
    double worst = 0;
    for (size_t i = 0; i < psi; i++) worst = fmax(worst, fabs((double)straight[i] - resumed[i]));
    printf("  adafactor resume: max |param diff| vs the straight run %.2e, statistics %s\n", worst,
           stats_same ? "bit-identical" : "DIFFERENT");
    assert_true(memcmp(straight, resumed, psi * sizeof *straight) == 0 && stats_same);
    free(straight), free(resumed), free(stats), free(tr);
}

/* ---- stopping by signal ------------------------------------------------ */

/* A SIGTERM that arrives during step 4 (raised here between steps 3 and 4
 * of a run without save_state) ends the run at the next step boundary with
 * the signal's number; the resume state goes to <save>.state, no model file
 * is written, and resuming from the state gives the straight run's end,
 * bit for bit. */
static void test_stop_signal_saves_a_resumable_state(void **state) {
    (void)state;
    struct config c;
    tiny_config(&c);
    set(&c, "steps", "10");
    set(&c, "warmup_steps", "2");
    set(&c, "param_dtype", "bf16");
    struct trainer *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    struct snapshot straight, resumed;
    open_ok(tr, &c);
    run_ok(tr);
    snap(&straight, tr);
    trainer_close(tr);

    struct config c1 = c;
    path_in(c1.save, sizeof c1.save, "stopped.bin");
    char stop_path[FILEIO_PATH_LEN];
    trainer_stop_state_path(&c1, stop_path);
    assert_string_equal(stop_path + strlen(stop_path) - strlen("stopped.bin.state"), "stopped.bin.state");
    unlink(stop_path);
    stop_signal_install();
    open_ok(tr, &c1);
    tr->stop_after = 3;
    run_ok(tr);
    assert_int_equal(access(stop_path, F_OK), -1); /* nothing yet: no save_state */
    raise(SIGTERM);                                /* the handler only records it */
    assert_int_equal(stop_signal_pending(), SIGTERM);
    tr->stop_after = 0;
    char err[TRAINER_ERR_LEN] = "";
    assert_int_equal(trainer_run(tr, err), SIGTERM);
    stop_signal_clear();
    assert_int_equal(tr->step, 3);
    trainer_close(tr);
    struct stat st;
    assert_int_equal(stat(stop_path, &st), 0);
    assert_int_equal(access(c1.save, F_OK), -1); /* stopped early: no model file */

    struct config c2 = c;
    assert_true(strlen(stop_path) < sizeof c2.resume);
    memcpy(c2.resume, stop_path, strlen(stop_path) + 1);
    open_ok(tr, &c2);
    assert_int_equal(tr->step, 3);
    assert_int_equal((uint64_t)st.st_size, trainer_state_bytes(tr)); /* the size the free-space check uses */
    run_ok(tr);
    snap(&resumed, tr);
    trainer_close(tr);
    assert_same_states(&straight, &resumed);
    snap_free(&straight), snap_free(&resumed);
    free(tr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_bf16_shuffled),
        cmocka_unit_test(test_resume_bf16_stochastic_accum),
        cmocka_unit_test(test_resume_fp32_sequential),
        cmocka_unit_test(test_resume_adamw8bit),
        cmocka_unit_test(test_resume_sgd8bit),
        cmocka_unit_test(test_resume_lion),
        cmocka_unit_test(test_resume_lion8bit),
        cmocka_unit_test(test_resume_adafactor),
        cmocka_unit_test(test_stop_signal_saves_a_resumable_state),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
