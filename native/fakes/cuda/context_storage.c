/*
 * context_storage.c (fake libcuda): context local storage, where the runtime keeps its per-context state
 * (dark API c693336e-..., darkapi.c; cuda-runtime-facts.md §7): entries per context, keyed by the
 * runtime's key pointer, each with its destructor, which runs when the primary context is reset or a
 * created context destroyed (context.c). A missing key is CUDA_ERROR_INVALID_HANDLE: the runtime then
 * builds its state.
 */
#include <pthread.h>
#include <stdlib.h>

#include "fakecuda.h"

CUresult fc_cls_put(CUcontext ctx, void *key, void *value, fc_cls_dtor_t dtor)
{
    fc_ctx_t *c = fc_ctx_from(ctx);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->lock);
    fc_cls_t *e = c->cls;
    while (e && e->key != key)
        e = e->next;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&c->lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        e->key = key;
        e->next = c->cls;
        c->cls = e;
    }
    e->value = value;
    e->dtor = dtor;
    pthread_mutex_unlock(&c->lock);
    return CUDA_SUCCESS;
}

CUresult fc_cls_get(void **value, CUcontext ctx, void *key)
{
    fc_ctx_t *c = fc_ctx_from(ctx);
    if (!c || !value)
        return c ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->lock);
    fc_cls_t *e = c->cls;
    while (e && e->key != key)
        e = e->next;
    if (e)
        *value = e->value;
    pthread_mutex_unlock(&c->lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; /* missing: the runtime builds its state */
}

CUresult fc_cls_delete(CUcontext ctx, void *key)
{
    fc_ctx_t *c = fc_ctx_from(ctx);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->lock);
    fc_cls_t **pp = &c->cls;
    while (*pp && (*pp)->key != key)
        pp = &(*pp)->next;
    fc_cls_t *e = *pp;
    if (e)
        *pp = e->next;
    pthread_mutex_unlock(&c->lock);
    free(e);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Runs and drops every entry's destructor (primary context reset, context destroyed). */
void fc_cls_clear(fc_ctx_t *c)
{
    pthread_mutex_lock(&c->lock);
    fc_cls_t *e = c->cls;
    c->cls = NULL;
    pthread_mutex_unlock(&c->lock);
    while (e) {
        fc_cls_t *next = e->next;
        if (e->dtor)
            e->dtor((CUcontext)c, e->key, e->value);
        free(e);
        e = next;
    }
}
