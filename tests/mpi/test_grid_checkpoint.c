/* Checkpoints on every grid dp x tp x pp that N ranks form (mpirun -np N,
 * N = 2, 3, 4), for a 3-layer model (so pp 2 splits it 2 + 1 and pp 4
 * leaves the last stage only the head). No training step runs on the grid
 * (steps at pp, tp > 1 belong to the schedules): one process trains a few
 * steps and writes a resume state and an llm.c model file, then on each grid
 * and ZeRO stage 0 and 3:
 *  - the state resumed and saved again equals the original byte for byte
 *    (adamw: the whole file, header included: it holds no layout field);
 *  - the model file loaded (--init_from) and saved again is byte-equal, and
 *    a fresh init saved is byte-equal to the one process's;
 *  - the head's copy of wte (pp > 1) holds wte's params and optimizer
 *    states after both loads;
 *  - adamw8bit: a grid layout other than the writer's requantizes and says
 *    which keys changed (pp, tp); the state it saves, resumed in its own
 *    layout, loads the codes as saved and saves an identical file;
 *  - the path of a model in GPU memory (train/ckpt/ckpt_staging.h: staging in
 *    the model's space, files through a host mirror), taken here with
 *    "device" memory that is host memory poisoned with 0xA5: on every grid
 *    and on dp alone (ZeRO-3, d_model 36: the 8-bit slots compacted through
 *    the mirror), a state and a model file saved so equal the host path's
 *    byte for byte, and a state loaded so (codes as saved) saves the same
 *    file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../train/ckpt/ckpt.h"
#include "../file_fixture.h"
#include "../../train/ckpt/checkpoint.h"
#include "../grid_single.h"
#include "mpi_fixture.h"
#include "../../train/run/run.h"

enum { STEPS = 3, MICRO_BATCH = 2, GLOBAL_SEQS = 8, N_LAYER = 3 };

static struct grid SINGLE;
static char DIR_[96], SHARD[160];

static void path_of(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", DIR_, name); }

/* accum chosen so the global batch is GLOBAL_SEQS on dp ranks */
static void config_for(struct config *c, enum optimizer_kind opt, int zero, int dp) {
    config_defaults(c);
    c->n_layer = N_LAYER, c->d_model = 32, c->n_head = 4, c->seq_len = 16, c->vocab_size = 256;
    c->micro_batch = MICRO_BATCH;
    c->grad_accum = GLOBAL_SEQS / (MICRO_BATCH * dp);
    c->steps = STEPS;
    c->lr = 3e-3f;
    c->val_every = 0;
    c->threads = 1;
    c->zero = zero;
    c->optimizer = opt;
    c->min_8bit_size = 1024;
    c->param_dtype = c->grad_dtype = c->act_dtype = DTYPE_FP32;
    snprintf(c->train_data, sizeof c->train_data, "%s", SHARD);
    c->val_data[0] = '\0';
}

static bool same_files(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return same;
}

/* On the last stage with a copy of wte: that copy of state `which`
 * equals wte of the reference `ref_values` (the whole model, fp32, by
 * reference index). Collective over the dp group (the gather). */
static bool copy_is_wte(struct trainer *tr, enum zero_state which, const float *ref_values) {
    struct engine *e = &tr->engine;
    if (!e->lay.head_wte_copy) return true;
    int u = layout_head_unit(&e->lay);
    float *work = malloc(engine_unit_staging_bytes(e));
    zero_gather_unit(&e->z, which, u, work);
    bool ok = true;
    if (e->z.sh.rank == 0) {
        struct tensor_info t = layout_head_tensor(&e->lay, HEAD_WTE);
        size_t base = layout_unit_offset(&e->lay, u), checked = 0;
        for (size_t i = 0; i < t.numel; i++) {
            size_t ref = layout_ref_index(&e->lay, &t, i);
            float v = work[t.offset - base + i];
            if (ref >= e->lay.ref_total) ok = ok && v == 0.0f;
            else ok = ok && v == ref_values[ref], checked++;
        }
        ok = ok && checked > 0;
    }
    free(work);
    return ok;
}

/* A section of a state as fp32, whole (reference order); NULL if missing. */
static float *section_values(const char *path, const char *name, size_t numel) {
    struct resume_reader r;
    struct resume_meta m;
    char err[CKPT_ERR_LEN];
    if (resume_open(&r, path, &m, err) != 0) return NULL;
    float *v = malloc(numel * sizeof *v);
    int at = resume_find(&r, name, DTYPE_FP32, numel, err);
    if (at < 0 || resume_read_at(&r, at, 0, numel, v, err) != 0) free(v), v = NULL;
    resume_close(&r);
    return v;
}

struct files {
    char state[160], model[160], init_model[160];
};

/* One process: STEPS steps from the seed, then the state and the model
 * file; and a fresh init's model file. */
static void write_reference(enum optimizer_kind opt, struct files *f) {
    path_of(f->state, sizeof f->state, opt == OPTIM_ADAMW8BIT ? "ref8.state" : "ref.state");
    path_of(f->model, sizeof f->model, "ref.bin");
    path_of(f->init_model, sizeof f->init_model, "init.bin");
    int ok = 1, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    {
        if (rank == 0) {
            struct config c;
            config_for(&c, opt, 0, 1);
            snprintf(c.save_state, sizeof c.save_state, "%s", f->state);
            snprintf(c.save, sizeof c.save, "%s", f->model);
            struct trainer tr;
            char err[TRAINER_ERR_LEN];
            ok = trainer_open(&tr, &c, &SINGLE, NULL, err) == 0 && trainer_run(&tr, err) == 0;
            if (tr.cfg) trainer_close(&tr);
            c.steps = 0, c.save_state[0] = '\0';
            snprintf(c.save, sizeof c.save, "%s", f->init_model);
            ok = ok && trainer_open(&tr, &c, &SINGLE, NULL, err) == 0 && trainer_run(&tr, err) == 0;
            if (tr.cfg) trainer_close(&tr);
            if (!ok) fprintf(stderr, "reference run: %s\n", err);
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    assert_true(ok);
}

/* The grids N ranks form with tp in {1, 2} (n_head 4), dp dividing the
 * global batch, and tp x pp > 1 (one rank per grid point is test_reshard's). */
static int grids(int N, int tp[8], int pp[8]) {
    int n = 0;
    for (int t = 1; t <= 2; t++)
        for (int p = 1; p <= N; p++) {
            if (N % (t * p) || t * p == 1) continue;
            int dp = N / (t * p);
            if (GLOBAL_SEQS % (MICRO_BATCH * dp)) continue;
            tp[n] = t, pp[n] = p, n++;
        }
    return n;
}

/* Opens a trainer on grid g; on failure every rank fails the test. */
static bool open_on(struct trainer *tr, struct config *c, struct grid *g) {
    char err[TRAINER_ERR_LEN];
    int rc = trainer_open(tr, c, g, NULL, err);
    if (rc != 0) fprintf(stderr, "rank %d: trainer_open: %s\n", g->world_rank, err);
    return rc == 0;
}

static void test_adamw_any_grid(void **s) {
    (void)s;
    struct files f;
    write_reference(OPTIM_ADAMW, &f);
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int tp[8], pp[8], n = grids(world, tp, pp);
    struct model_layout whole;
    struct config c0;
    config_for(&c0, OPTIM_ADAMW, 0, 1);
    layout_init_whole(&whole, trainer_model_shape(&c0));
    float *ref_params = section_values(f.state, "params", whole.ref_total);
    float *ref_m = section_values(f.state, "optim_state1", whole.ref_total);
    float *ref_v = section_values(f.state, "optim_state2", whole.ref_total);
    assert_true(all_ok(ref_params && ref_m && ref_v));
    for (int k = 0; k < n; k++)
        for (int zero = 0; zero <= 3; zero += 3) {
            struct grid g;
            char gerr[GRID_ERR_LEN];
            assert_int_equal(grid_init(&g, tp[k], 1, pp[k], gerr), 0);
            char again[160], model[160], init[160];
            path_of(again, sizeof again, "again.state");
            path_of(model, sizeof model, "again.bin");
            path_of(init, sizeof init, "init_again.bin");
            /* the state resumed, then saved */
            struct config c;
            config_for(&c, OPTIM_ADAMW, zero, g.dp);
            snprintf(c.resume, sizeof c.resume, "%s", f.state);
            struct trainer tr;
            bool ok = open_on(&tr, &c, &g);
            char err[TRAINER_ERR_LEN];
            if (all_ok(ok)) {
                ok = tr.step == STEPS && copy_is_wte(&tr, STATE_PARAMS, ref_params) &&
                     copy_is_wte(&tr, STATE_OPT1, ref_m) && copy_is_wte(&tr, STATE_OPT2, ref_v);
                ok = trainer_save_state(&tr, again, err) == 0 && ok;
                ok = trainer_save_model(&tr, model, err) == 0 && ok;
                trainer_close(&tr);
            }
            bool state_same = g.world_rank != 0 || same_files(f.state, again);
            bool model_same = g.world_rank != 0 || same_files(f.model, model);
            /* the model file loaded, then saved; a fresh init saved */
            config_for(&c, OPTIM_ADAMW, zero, g.dp);
            c.steps = 0;
            snprintf(c.init_from, sizeof c.init_from, "%s", f.model);
            bool loaded = open_on(&tr, &c, &g);
            if (all_ok(loaded)) {
                loaded = copy_is_wte(&tr, STATE_PARAMS, ref_params) && trainer_save_model(&tr, model, err) == 0;
                trainer_close(&tr);
            }
            bool reload_same = g.world_rank != 0 || same_files(f.model, model);
            c.init_from[0] = '\0';
            snprintf(c.save, sizeof c.save, "%s", init);
            bool inited = open_on(&tr, &c, &g);
            if (all_ok(inited)) {
                inited = trainer_run(&tr, err) == 0;
                trainer_close(&tr);
            }
            bool init_same = g.world_rank != 0 || same_files(f.init_model, init);
            if (g.world_rank == 0)
                printf("  N=%d dp %d x tp %d x pp %d, ZeRO-%d: state resumed+saved %s, model loaded+saved %s / %s, "
                       "init saved %s\n",
                       world, g.dp, g.tp, g.pp, zero, state_same ? "byte-equal" : "DIFFERENT",
                       model_same ? "byte-equal" : "DIFFERENT", reload_same ? "byte-equal" : "DIFFERENT",
                       init_same ? "byte-equal" : "DIFFERENT");
            ok = ok && loaded && inited && state_same && model_same && reload_same && init_same;
            grid_free(&g);
            assert_true(all_ok(ok));
        }
    free(ref_params), free(ref_m), free(ref_v);
}

/* adamw8bit: from one process to each grid (requantized, said so), then
 * that grid's own state resumed in its own layout (codes as saved). */
static void test_adamw8bit_any_grid(void **s) {
    (void)s;
    struct files f;
    write_reference(OPTIM_ADAMW8BIT, &f);
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int tp[8], pp[8], n = grids(world, tp, pp);
    for (int k = 0; k < n; k++) {
        int dp = world / (tp[k] * pp[k]);
        /* the trainer refuses adamw8bit with pp over dp at ZeRO >= 1 (the tied
         * wte's copies would be quantized in different blocks): ZeRO-0 there */
        int zero = pp[k] > 1 && dp > 1 ? 0 : pp[k] == 2 ? 3 : 1;
        struct grid g;
        char gerr[GRID_ERR_LEN], err[TRAINER_ERR_LEN];
        assert_int_equal(grid_init(&g, tp[k], 1, pp[k], gerr), 0);
        char first[160], second[160];
        path_of(first, sizeof first, "grid8.state");
        path_of(second, sizeof second, "grid8_again.state");
        struct config c;
        config_for(&c, OPTIM_ADAMW8BIT, zero, g.dp);
        snprintf(c.resume, sizeof c.resume, "%s", f.state);
        struct trainer tr;
        char note1[160] = "", note2[160] = "", want[160];
        int w = snprintf(want, sizeof want, "8-bit states: requantized from fp32 for a new layout (dp 1 -> %d, ZeRO 0 -> %d",
                         g.dp, zero);
        if (g.tp != 1) w += snprintf(want + w, sizeof want - (size_t)w, ", tp 1 -> %d", g.tp);
        if (g.pp != 1) w += snprintf(want + w, sizeof want - (size_t)w, ", pp 1 -> %d", g.pp);
        snprintf(want + w, sizeof want - (size_t)w, ")");
        bool ok = open_on(&tr, &c, &g);
        if (all_ok(ok)) {
            snprintf(note1, sizeof note1, "%s", tr.opt8_resume);
            ok = trainer_save_state(&tr, first, err) == 0;
            trainer_close(&tr);
        }
        snprintf(c.resume, sizeof c.resume, "%s", first);
        bool ok2 = all_ok(ok) && open_on(&tr, &c, &g);
        if (all_ok(ok2)) {
            snprintf(note2, sizeof note2, "%s", tr.opt8_resume);
            ok2 = trainer_save_state(&tr, second, err) == 0;
            trainer_close(&tr);
        }
        bool same = g.world_rank != 0 || (same_files(first, second));
        ok = ok && ok2 && same && strcmp(note1, want) == 0 &&
             strcmp(note2, "8-bit states: loaded as saved (bit-exact)") == 0;
        if (g.world_rank == 0)
            printf("  N=%d dp %d x tp %d x pp %d, ZeRO-%d adamw8bit: '%s'; own state again: '%s', saved %s\n", world,
                   g.dp, g.tp, g.pp, zero, note1, note2, same ? "byte-equal" : "DIFFERENT");
        if (strcmp(note1, want) != 0) fprintf(stderr, "rank %d: want '%s'\n", g.world_rank, want);
        grid_free(&g);
        assert_true(all_ok(ok));
    }
}

/* "Device" memory for the mirror test: host memory, 64-byte aligned,
 * poisoned, so a byte of staging that reached a file without being
 * written would show. */
static void *poisoned_alloc(size_t bytes) {
    size_t n = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p) memset(p, 0xA5, n ? n : 64);
    return p;
}

/* Checkpoints from here on take the GPU's path: staging in "device"
 * memory, a host mirror for the files. The engine stays on the host. */
static void checkpoints_as_on_gpu(struct trainer *tr, bool on) {
    tr->mem.device = (struct mem_space_ops){poisoned_alloc, free};
    tr->space = on ? MEM_DEVICE : MEM_HOST;
}

/* One grid: the trainer opened from c (a resume, or trained here when
 * train), its state and model saved by the host path and through the
 * mirror, then its own state loaded through the mirror and saved again. */
static bool mirror_case(struct grid *g, struct config *c, bool train, const char *label) {
    char host[160], mirror[160], again[160], host_bin[160], mirror_bin[160], err[TRAINER_ERR_LEN] = "", note[160] = "";
    path_of(host, sizeof host, "host.state");
    path_of(mirror, sizeof mirror, "mirror.state");
    path_of(again, sizeof again, "mirror_loaded.state");
    path_of(host_bin, sizeof host_bin, "host.bin");
    path_of(mirror_bin, sizeof mirror_bin, "mirror.bin");
    struct trainer tr;
    bool ok = open_on(&tr, c, g), device_used = false;
    if (all_ok(ok)) {
        ok = !train || trainer_run(&tr, err) == 0;
        ok = ok && trainer_save_state(&tr, host, err) == 0 && trainer_save_model(&tr, host_bin, err) == 0;
        checkpoints_as_on_gpu(&tr, true);
        ok = ok && trainer_save_state(&tr, mirror, err) == 0 && trainer_save_model(&tr, mirror_bin, err) == 0;
        /* this grid's own state, loaded through the mirror: the codes as saved */
        ok = ok && trainer_load_state(&tr, host, err) == 0;
        snprintf(note, sizeof note, "%s", tr.opt8_resume);
        device_used = tr.mem.peak_space[MEM_DEVICE] > 0 && tr.mem.live_space[MEM_DEVICE] == 0;
        checkpoints_as_on_gpu(&tr, false);
        ok = ok && trainer_save_state(&tr, again, err) == 0;
        if (!ok) fprintf(stderr, "rank %d: %s\n", g->world_rank, err);
        trainer_close(&tr);
    }
    bool same = g->world_rank != 0 ||
                (same_files(host, mirror) && same_files(host_bin, mirror_bin) && same_files(host, again));
    bool as_saved = strcmp(note, "8-bit states: loaded as saved (bit-exact)") == 0;
    if (g->world_rank == 0)
        printf("  %s, dp %d x tp %d x pp %d, ZeRO-%d adamw8bit through a host mirror: state and model saved %s, "
               "state loaded '%s' and saved again %s\n",
               label, g->dp, g->tp, g->pp, c->zero, same ? "byte-equal to the host path's" : "DIFFERENT", note,
               same ? "byte-equal" : "DIFFERENT");
    return ok && device_used && same && as_saved;
}

static void test_host_mirror_path(void **s) {
    (void)s;
    struct files f;
    write_reference(OPTIM_ADAMW8BIT, &f);
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int tp[9], pp[9], n = grids(world, tp, pp);
    for (int k = 0; k < n; k++) {
        int dp = world / (tp[k] * pp[k]);
        int zero = pp[k] > 1 && dp > 1 ? 0 : 3; /* as test_adamw8bit_any_grid: pp over dp only at ZeRO-0 */
        struct grid g;
        char gerr[GRID_ERR_LEN];
        assert_int_equal(grid_init(&g, tp[k], 1, pp[k], gerr), 0);
        struct config c;
        config_for(&c, OPTIM_ADAMW8BIT, zero, g.dp);
        snprintf(c.resume, sizeof c.resume, "%s", f.state);
        bool ok = mirror_case(&g, &c, false, "resumed");
        grid_free(&g);
        assert_true(all_ok(ok));
    }
    /* dp alone, ZeRO-3, trained here: d_model 36 makes a layer's chunk of
     * 8-bit codes (12 C^2 + 13 C = 16020 bytes over dp 2 or 4) no whole
     * number of fp32 words, so the gathered slots really are compacted */
    if (GLOBAL_SEQS % (MICRO_BATCH * world) != 0) return;
    struct grid g;
    char gerr[GRID_ERR_LEN];
    assert_int_equal(grid_init(&g, 1, 1, 1, gerr), 0);
    struct config c;
    config_for(&c, OPTIM_ADAMW8BIT, 3, g.dp);
    c.d_model = 36;
    bool ok = mirror_case(&g, &c, true, "d_model 36, trained");
    grid_free(&g);
    assert_true(all_ok(ok));
}

static int setup(void **state) {
    (void)state;
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    grid_init_single(&SINGLE);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        snprintf(DIR_, sizeof DIR_, "/tmp/shardlab_gridckpt_XXXXXX");
        if (!mkdtemp(DIR_)) DIR_[0] = '\0';
    }
    MPI_Bcast(DIR_, sizeof DIR_, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!DIR_[0]) return -1;
    path_of(SHARD, sizeof SHARD, "train.bin");
    int rc = rank == 0 ? write_corpus_shard(SHARD, 64 * 1024) : 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}

static int teardown(void **state) {
    (void)state;
    MPI_Barrier(MPI_COMM_WORLD);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank == 0 ? scratch_close(DIR_) : 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_any_grid),
        cmocka_unit_test(test_adamw8bit_any_grid),
        cmocka_unit_test(test_host_mirror_path),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return failed;
}
