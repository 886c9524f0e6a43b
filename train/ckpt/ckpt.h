/* The run's files (train/ckpt/): llm.c model files and resume states,
 * read and written one unit at a time on any grid. The formats themselves
 * are train/ckpt/checkpoint.h's. */
#ifndef SHARDLAB_CKPT_H
#define SHARDLAB_CKPT_H

#include "../measure/trainer.h"

/* Before trainer_open, with c->init_from set: the file's header against
 * the config. n_layer, d_model, n_head and vocab_size must equal the
 * file's (the message names the key and both values); max_seq_len, when
 * 0, becomes the file's, and must equal it otherwise; seq_len may be any
 * length up to it (GPT-2's files hold 1024 positions; a run at T = 64
 * uses the first 64 rows, and --save writes all of them back). */
int trainer_adopt_model_file(struct config *c, char err[TRAINER_ERR_LEN]);
/* llm.c model files, one unit at a time (train/ckpt/ckpt_model_file.c). Collective. */
int trainer_load_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);
int trainer_save_model(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);

/* Resume states (train/ckpt/ckpt_state.c). */
int trainer_save_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);
/* The bytes trainer_save_state writes. */
uint64_t trainer_state_bytes(const struct trainer *tr);
int trainer_load_state(struct trainer *tr, const char *path, char err[TRAINER_ERR_LEN]);

#endif
