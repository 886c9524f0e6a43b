/* libFuzzer harness: build/plan's flags (plan_parse_args, over the config
 * table's keys too), theory_plan and both reports, on arbitrary words. The
 * input is text, one argument a word (split on blanks and newlines, at
 * most MAX_WORDS); --config words are dropped (no file is read: the model
 * keys come as flags, as the seed corpus gives them). Properties checked
 * beyond "no crash, no undefined behaviour (float-to-int overflow
 * included), no leak":
 *  - a refusal leaves a message that starts "plan: ";
 *  - an accepted plan is finite: every layout's m is a whole number, its
 *    bytes, times and days finite and not negative, and a searched
 *    layout's t cp p d is the device count;
 *  - the table's order is a permutation with the n_fit that fit first, the
 *    fastest its first (or -1 when none fits);
 *  - the JSON holds no nan or inf, and starts and ends as one object. */
#include "../../train/config/config.h"
#include "fuzz_input.h"
#include "../../train/theory/plan.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_WORDS = 256, MAX_INPUT_BYTES = 4096 };

/* The words of text (cut in place); --config and its value left out. */
static int split_words(char *text, char *argv[MAX_WORDS + 1]) {
    int argc = 0;
    argv[argc++] = "plan";
    char *save = NULL;
    bool skip_next = false;
    for (char *w = strtok_r(text, " \t\r\n", &save); w && argc < MAX_WORDS; w = strtok_r(NULL, " \t\r\n", &save)) {
        bool config = strncmp(w, "--config", strlen("--config")) == 0;
        if (skip_next || config) {
            skip_next = config && strcmp(w, "--config") == 0;
            continue;
        }
        argv[argc++] = w;
    }
    argv[argc] = NULL;
    return argc;
}

static void check_eval(const struct theory_layout_eval *e, double memory) {
    FUZZ_CHECK(e->micro_batches >= 0 && e->micro_batches == floor(e->micro_batches));
    FUZZ_CHECK(isfinite(e->memory) && e->memory >= 0);
    FUZZ_CHECK(isfinite(e->step_tokens) && e->step_tokens > 0);
    FUZZ_CHECK(isfinite(e->step_s) && e->step_s >= 0);
    FUZZ_CHECK(isfinite(e->days) && e->days >= 0);
    FUZZ_CHECK(e->fits == (e->batch_ok && e->memory <= memory));
}

static void check_plan(const struct theory_plan *pl, const struct theory_plan_input *in) {
    int seen[THEORY_PLAN_MAX_LAYOUTS] = {0};
    FUZZ_CHECK(pl->n_layouts >= 0 && pl->n_layouts <= THEORY_PLAN_MAX_LAYOUTS);
    for (int k = 0; k < pl->n_layouts; k++) {
        const int i = pl->order[k];
        FUZZ_CHECK(i >= 0 && i < pl->n_layouts && seen[i]++ == 0);
        FUZZ_CHECK(pl->evals[i].fits == (k < pl->n_fit));
        const struct theory_layout *l = &pl->layouts[i];
        FUZZ_CHECK((double)l->tp * l->cp * l->pp * l->dp == in->devices);
        check_eval(&pl->evals[i], in->memory);
    }
    FUZZ_CHECK(pl->fastest == (pl->n_fit > 0 ? pl->order[0] : -1));
    FUZZ_CHECK(pl->n_table >= 0 && pl->n_table <= THEORY_PLAN_TABLE_ROWS && pl->n_table <= pl->n_layouts);
    for (int i = 0; i < pl->n_requested; i++) check_eval(&pl->requested_evals[i], in->memory);
    FUZZ_CHECK(isfinite(pl->ckpt_min_devices) && pl->ckpt_min_devices >= 0);
    FUZZ_CHECK(isfinite(pl->seconds_model) && pl->seconds_model >= 0);
}

/* Both reports, the JSON checked for nan and inf. */
static void check_reports(const struct theory_plan *pl, const struct plan_opts *o, const struct config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FUZZ_CHECK(f != NULL);
    plan_print_text(f, pl, o, c);
    FUZZ_CHECK(fclose(f) == 0);
    free(text);
    f = open_memstream(&text, &len);
    FUZZ_CHECK(f != NULL);
    plan_print_json(f, pl, o);
    FUZZ_CHECK(fclose(f) == 0);
    FUZZ_CHECK(len > 2 && text[0] == '{' && text[len - 2] == '}' && text[len - 1] == '\n');
    FUZZ_CHECK(!strstr(text, "nan") && !strstr(text, "inf"));
    free(text);
}

/* plan_parse_args; a refusal's message is checked. */
static int parse(int argc, char **argv, struct plan_opts *o, struct config *c) {
    char *msg = NULL;
    size_t len = 0;
    FILE *err = open_memstream(&msg, &len);
    FUZZ_CHECK(err != NULL);
    int rc = plan_parse_args(argc, argv, o, c, err);
    FUZZ_CHECK(fclose(err) == 0);
    if (rc < 0) FUZZ_CHECK(len > 0 && strncmp(msg, "plan: ", strlen("plan: ")) == 0);
    free(msg);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > MAX_INPUT_BYTES) return 0;
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[MAX_WORDS + 1];
    int argc = split_words(text, argv);
    struct plan_opts o;
    struct config c;
    if (parse(argc, argv, &o, &c) == 0) {
        struct theory_plan *pl = malloc(sizeof *pl);
        FUZZ_CHECK(pl != NULL);
        theory_plan(pl, &c, &o.in);
        check_plan(pl, &o.in);
        check_reports(pl, &o, &c);
        free(pl);
    }
    free(text);
    return 0;
}
