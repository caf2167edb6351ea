/*
 * module.h (fake libcuda): the module and function objects shared by module.c (modules and libraries: loading,
 * names, globals), function.c (what a function or kernel is asked and told) and occupancy.c.
 * A module and a library are the same object; so are a CUfunction and a CUkernel (cuda-runtime-facts.md §4).
 */
#ifndef CARVE_FAKE_CUDA_MODULE_H
#define CARVE_FAKE_CUDA_MODULE_H

#include "fakecuda.h"

#define FC_MODULE_MAGIC 0x55444f4du
#define FC_FUNC_MAGIC 0x434e5546u

typedef struct fc_func {
    uint32_t magic;
    struct fc_module *mod;
    char *name;
    int max_dyn_smem, carveout;
} fc_func_t;

typedef struct fc_module {
    uint32_t magic;
    int ordinal;
    fc_image_t img;
    pthread_mutex_t lock;
    fc_func_t **funcs;
    size_t nfuncs, capfuncs;
    uint64_t *global_addr; /* per symbol: storage of a global once asked, 0 before */
} fc_module_t;

/* The module or library a handle names, NULL when it names neither. */
static inline fc_module_t *module_get(const void *h)
{
    fc_module_t *m = (fc_module_t *)h;
    return (fc_handle_ok(m, FC_H_MODULE) || fc_handle_ok(m, FC_H_LIBRARY)) && m->magic == FC_MODULE_MAGIC ? m
                                                                                                         : NULL;
}

/* The function or kernel a handle names, NULL when it names neither. */
static inline fc_func_t *func_get(const void *h)
{
    fc_func_t *f = (fc_func_t *)h;
    return fc_handle_ok(f, FC_H_FUNC) && f->magic == FC_FUNC_MAGIC ? f : NULL;
}

/* Compute capability of device `ordinal` as one number (80 for 8.0); 80 when there is no such device. */
static inline int device_sm(int ordinal)
{
    const fake_gpu_t *g = fc_gpu(ordinal);
    return g ? g->model->cc_major * 10 + g->model->cc_minor : 80;
}

#endif
