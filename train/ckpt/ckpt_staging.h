/* The one-unit staging of a checkpoint, for a model in either memory
 * space. Collectives and point-to-point routes (NCCL on GPUs, which moves
 * device memory only) touch `work`, which lives where the model does;
 * files are read into and written from `host`. On the CPU they are one
 * buffer (host == work) and the copies between them do nothing, so the
 * CPU's checkpoints make no extra copy; on a GPU `host` is a host mirror
 * of the same size, tracked as its own buffer, and the caller copies
 * between the two around the file I/O. */
#ifndef SHARDLAB_CKPT_STAGING_H
#define SHARDLAB_CKPT_STAGING_H

#include <stdbool.h>
#include <stddef.h>

#include "mem.h"

struct ckpt_staging {
    void *work;   /* in the model's space: gathers, scatters, routes */
    void *host;   /* host memory: file reads and writes; == work on the CPU */
    size_t bytes;
    bool own_host; /* host was allocated here (not ckpt_staging_over's) */
};

/* `bytes` of staging for a model in `space`, named `name` on the CPU and
 * "<name> [device]" / "<name> [host mirror]" on a GPU. 0, or -1 with both
 * pointers NULL (the tracker holds the message). */
int ckpt_staging_alloc(struct ckpt_staging *s, struct mem_tracker *mem, enum mem_space space, const char *name,
                       size_t bytes);
/* The same over host memory the caller owns (`host`, `bytes` long): on a
 * GPU only the device side is allocated. */
int ckpt_staging_over(struct ckpt_staging *s, struct mem_tracker *mem, enum mem_space space, const char *name,
                      void *host, size_t bytes);
void ckpt_staging_free(struct ckpt_staging *s, struct mem_tracker *mem);

/* The first `bytes` from work to host (after a gather or a route), and
 * from host to work (after a file read, before a scatter or a route), by
 * the buffer operations of `space`, the model's (bufops.h: buf_copy).
 * Nothing on the CPU. */
void ckpt_staging_to_host(const struct ckpt_staging *s, enum mem_space space, size_t bytes);
void ckpt_staging_to_work(const struct ckpt_staging *s, enum mem_space space, size_t bytes);

#endif
