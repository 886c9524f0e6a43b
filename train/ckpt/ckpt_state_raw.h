/* 8-bit optimizer states as they are (adamw8bit), in resume states
 * (train/ckpt/ckpt_state_raw.c; the rest of a state is train/ckpt/ckpt_state.c). */
#ifndef SHARDLAB_STATE_RAW_H
#define SHARDLAB_STATE_RAW_H

#include "checkpoint.h"
#include "ckpt_staging.h"
#include "../measure/trainer.h"

enum { RAW_SECTIONS = 5, RAW_KEYS = 6 };

struct raw_plan {
    bool on, failed;        /* failed: an allocation failed on this rank */
    int32_t key[RAW_KEYS];  /* the grid layout that writes or reads the codes */
    size_t *first;          /* this rank's block table (zero_raw_block_table), n_units x R + 1 */
    size_t *base;           /* pp x tp + 1: where each holder's blocks start; base[pp x tp] = all blocks */
    uint64_t span_host[2];  /* a unit's blocks [a, b) of its holder's, as routed to world rank 0 */
    struct ckpt_staging span; /* over span_host: a device copy on GPUs, for the route */
};

/* Collective over the grid (every rank calls it, whatever failed before):
 * the plan of this run's raw sections; off unless adamw8bit. -1 on any
 * rank's failed allocation (p->failed there, and the tracker holds the
 * message). */
int raw_plan(struct trainer *tr, struct raw_plan *p);
void raw_free(struct trainer *tr, struct raw_plan *p);
/* The raw sections' declarations. */
void raw_decls(const struct trainer *tr, const struct raw_plan *p, struct state_decl d[RAW_SECTIONS]);
/* Collective: the raw sections, from index `first_section` of w (world
 * rank 0 writes; rc is its state so far, returned updated), through the
 * one-unit staging st. */
int raw_save(struct trainer *tr, const struct raw_plan *p, struct resume_writer *w, int first_section, int rc,
             const struct ckpt_staging *st, char e2[CKPT_ERR_LEN]);
/* After the fp32 sections (which requantized the 8-bit states): the raw
 * ones instead, when this grid layout wrote them. Says which happened in
 * tr->opt8_resume. Not collective. */
int raw_load(struct trainer *tr, struct resume_reader *r, const struct raw_plan *p, const struct ckpt_staging *st,
             char err[TRAINER_ERR_LEN]);

#endif
