/* The tagged allocator: every long-lived buffer is allocated under a category
 * and a name, so the memory table can print measured bytes beside theory
 * bytes, line by line. One tracker per rank lives in the run context. */
#ifndef SHARDLAB_MEM_H
#define SHARDLAB_MEM_H

#include <stddef.h>

enum mem_category {
    MEM_PARAMS,       /* working weights in param_dtype */
    MEM_MASTER,       /* fp32 master weights (bf16 params only) */
    MEM_GRADS,        /* gradients in grad_dtype */
    MEM_OPTIMIZER,    /* optimizer states (Adam m and v, ...) */
    MEM_ACTIVATIONS,  /* tensors saved by forward for backward */
    MEM_SCRATCH,      /* fp32 working space: widened weights, logits, d-activations */
    MEM_COMM,         /* collective buffers */
    MEM_NUM_CATEGORIES
};

enum { MEM_MAX_RECORDS = 96, MEM_NAME_LEN = 48 };

struct mem_record {
    char name[MEM_NAME_LEN];
    enum mem_category category;
    size_t bytes;
    void *ptr;
};

struct mem_tracker {
    size_t live[MEM_NUM_CATEGORIES];
    size_t peak[MEM_NUM_CATEGORIES];
    size_t live_total, peak_total;
    int n_records;
    struct mem_record records[MEM_MAX_RECORDS];
};

const char *mem_category_name(enum mem_category c);

/* 64-byte aligned, zero-filled. Exits with a message if memory runs out or
 * the record table is full: a trainer cannot go on without its buffers. */
void *mem_alloc(struct mem_tracker *t, enum mem_category c, const char *name, size_t bytes);
void mem_free(struct mem_tracker *t, void *ptr);
/* Frees every buffer still recorded (end of run). */
void mem_free_all(struct mem_tracker *t);

#endif
