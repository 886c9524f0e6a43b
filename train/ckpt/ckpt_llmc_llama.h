/* LLaMA 3 model files' header (train_llama3.py's write_model), for
 * ckpt_llmc.c: parsed against the file's size, and filled from a shape. */
#ifndef SHARDLAB_CKPT_LLMC_LLAMA_H
#define SHARDLAB_CKPT_LLMC_LLAMA_H

#include <stdint.h>

#include "checkpoint.h"

enum { LLMC_HEADER_INTS = 256, LLMC_HEADER_BYTES = LLMC_HEADER_INTS * 4 };
/* The largest vocabulary a header may give. */
enum { LLMC_MAX_VOCAB = 1 << 24 };
/* The widest n_embd a header may give: the layout sizes tensors of 4 C
 * features in int, so a fuzzed C near INT_MAX would overflow there before
 * the file's size could be compared. Far above the config's d_model bound
 * (65536). */
enum { LLMC_MAX_EMBD = 1 << 24 };

/* The checks of llama_parse_header that need no file size: version and
 * every slot but F's. */
int llama_check_header(const int32_t h[LLMC_HEADER_INTS], const char *path, char err[CKPT_ERR_LEN]);
/* Checks a LLaMA header (h[0] is LLMC_LLAMA_MAGIC) and fills *shape and
 * *version; file_bytes is the whole file's size, which gives F. */
int llama_parse_header(const int32_t h[LLMC_HEADER_INTS], const char *path, int64_t file_bytes,
                       struct model_shape *shape, int *version, char err[CKPT_ERR_LEN]);
/* The header of shape s (arch llama) in file_dt; what it cannot store
 * (a rope_theta that is not an integer) is refused. */
int llama_fill_header(int32_t h[LLMC_HEADER_INTS], const struct model_shape *s, enum dtype file_dt, const char *path,
                      char err[CKPT_ERR_LEN]);

#endif
