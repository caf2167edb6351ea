/*
 * fakecuda.h: internals shared by the sources of the fake libcuda.so.1 (not a contract).
 *
 * The fake driver emulates the GPUs of fakes/common (CARVE_FAKE_GPUS) well enough for the real CUDA
 * runtimes, CuPy and PyTorch (/work/shared/reference/cuda-runtime-facts.md, corrections in
 * native/fakes/README.md). Every entry point cuda.h names resolves (symbols_gen.h, stubs.c); device memory
 * is charged to the shared accounting (fake_mem_reserve) and backed by lazily committed host memory
 * (objects.c); kernels occupy the fake GPU through fake_kernel_submit (stream.c); every entry point
 * records its own name per thread so tests can see which variant (legacy or per-thread stream) was reached.
 *
 * Knobs (environment): CUDA_VISIBLE_DEVICES (indices or UUIDs), CARVE_FAKE_NS_PER_WAVE (kernel wave time,
 * default 100000), CARVE_FAKE_QUEUE_NS (launch queue depth in time before a launch blocks, default
 * 5000000, like a real driver's bounded push buffer), CARVE_FAKE_PITCH_ALIGN (default 512),
 * CUDA_MODULE_LOADING (EAGER: cuModuleGetLoadingMode answers eager), CARVE_FAKE_CUDA_LOG=1 (stderr lines:
 * resolutions, export tables, unemulated calls, modules).
 */
#ifndef CARVE_FAKECUDA_H
#define CARVE_FAKECUDA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

/* The fake implements deprecated entry points too: a driver still exports them. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include "common/fakegpu.h"

/* Records the entry point reached on this thread (read back with carveFakeCudaLastCall). */
extern __thread const char *fc_last_call;
#define FC_CALLED(name) (fc_last_call = (name))

/* Visible devices after CUDA_VISIBLE_DEVICES: CUDA ordinal -> fake GPU index. */
int fc_initialized(void);
int fc_device_count(void);
const fake_gpu_t *fc_gpu(int ordinal); /* NULL when out of range */
/* Contexts (context.c; what a context answers: context_info.c; its local storage: context_storage.c). */
#define FC_CTX_MAGIC 0x43545846u
typedef void (*fc_cls_dtor_t)(CUcontext ctx, void *key, void *value);
typedef struct fc_cls {
    void *key, *value;
    fc_cls_dtor_t dtor;
    struct fc_cls *next;
} fc_cls_t;
typedef struct fc_ctx {
    uint32_t magic;
    int ordinal;
    int primary;
    int refs;
    int active;
    unsigned flags;
    pthread_mutex_t lock;
    fc_cls_t *cls; /* context local storage (dark API) */
} fc_ctx_t;
void fc_ctx_init_primary(int count);
fc_ctx_t *fc_primary(int ordinal);
fc_ctx_t *fc_current_ctx(void);
fc_ctx_t *fc_ctx_from(CUcontext ctx); /* NULL ctx = current; NULL when not a context */
CUresult fc_cls_put(CUcontext ctx, void *key, void *value, fc_cls_dtor_t dtor);
CUresult fc_cls_get(void **value, CUcontext ctx, void *key);
CUresult fc_cls_delete(CUcontext ctx, void *key);
/* Runs and drops every entry's destructor (primary context reset, context destroyed). */
void fc_cls_clear(fc_ctx_t *c);
/* Frees what a primary context reset destroys on device `ordinal` (streams, events, modules). */
void fc_ctx_reset_resources(int ordinal);
/* Identity of device `ordinal` as cuDeviceGetUuid and the PCI attributes answer it (device.c). */
void fc_device_uuid(int ordinal, uint8_t uuid[16]);
void fc_device_pci(int ordinal, int32_t *domain, int32_t *bus, int32_t *device);
void fc_hmac_md2(const uint8_t key[16], const void *data, size_t len, uint8_t out[16]);
/* cuDeviceGetAttribute's answer for a model (attributes.c). */
int fc_attribute(const fake_gpu_t *g, int ordinal, CUdevice_attribute attrib);
/* Memory pools (pool.c). */
CUresult fc_pool_default(CUmemoryPool *pool, CUdevice dev);
CUresult fc_pool_current(CUmemoryPool *pool, CUdevice dev);
CUresult fc_pool_set_current(CUdevice dev, CUmemoryPool pool);
/* What an image names (fatbin.c). known 0: a compressed image the fake could not decode (any name). */
typedef struct fc_symbol_info {
    char *name;
    uint64_t size;   /* globals: bytes */
    int is_global;
} fc_symbol_info_t;
typedef struct fc_image {
    fc_symbol_info_t *syms;
    size_t n, cap;
    int known;
    int sm;          /* the ELF's architecture (e_flags), 0 for PTX */
} fc_image_t;
CUresult fc_image_parse(const void *image, uint64_t len, int sm, fc_image_t *img);
void fc_image_free(fc_image_t *img);
/* A module from an image: fatbin wrapper, fatbin, ELF cubin or PTX (module.c). */
CUresult fc_module_load_image(CUmodule *out, const void *image);
/* Ordinal of the calling thread's current context, or -1 when there is none. */
int fc_current_ordinal(void);
CUresult fc_check_ctx(int *ordinal);   /* NOT_INITIALIZED / INVALID_CONTEXT, else the ordinal */
uint64_t fc_env_u64(const char *name, uint64_t dflt);
/* CARVE_FAKE_CUDA_LOG=1: one stderr line per resolution, export table and notable event. */
int fc_trace(void);
void fc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Object table (objects.c): device pointers, arrays, VMM handles and ranges, pools -> what they hold. */
enum fc_kind {
    FC_MEM = 1,  /* cuMemAlloc: host-backed, charged */
    FC_ARRAY,
    FC_MIPMAP,
    FC_VMM,      /* cuMemCreate handle: charged */
    FC_HOST,     /* page-locked host memory (allocated or registered): not charged */
    FC_RESERVE,  /* cuMemAddressReserve range */
    FC_POOLMEM,  /* a block of a memory pool: the pool is charged */
    FC_GLOBAL,   /* a module global's storage */
    FC_MAPPED,   /* a cuMemMap'ed range of a reservation (aux: the handle) */
};
typedef struct fc_obj {
    uint64_t key;      /* handle or base address; 0 = empty, 1 = deleted */
    int kind, ordinal; /* ordinal -1: no device */
    uint64_t bytes;    /* device memory charged */
    uint64_t span;     /* address range length (range kinds) */
    void *aux;         /* kind-specific */
} fc_obj_t;
int fc_obj_add(const fc_obj_t *o);
int fc_obj_put(uint64_t key, int kind, int ordinal, uint64_t bytes);
int fc_obj_take(uint64_t key, int kind, int *ordinal, uint64_t *bytes); /* 0 found and removed */
int fc_obj_remove(uint64_t key, int kind, fc_obj_t *out);
int fc_obj_get(uint64_t key, int kind, fc_obj_t *out);
int fc_obj_find(uint64_t addr, fc_obj_t *out); /* the allocation holding addr: 0, or -1 */
uint64_t fc_new_handle(void);
enum fc_handle_kind { FC_H_STREAM = 100, FC_H_EVENT, FC_H_POOL, FC_H_GRAPH, FC_H_EXEC, FC_H_NODE, FC_H_CTX,
                      FC_H_MODULE, FC_H_FUNC, FC_H_LIBRARY };
int fc_handle_add(const void *p, int kind); /* 0, or -1 out of memory */
void fc_handle_del(const void *p, int kind);
int fc_handle_ok(const void *p, int kind);
uint64_t fc_page_round(uint64_t bytes);
uint64_t fc_map(uint64_t bytes, uint64_t align, int prot); /* 0 on failure */
void fc_unmap(uint64_t base, uint64_t bytes);
/* Device memory accounting (memory.c): charge/uncharge device `ordinal` (MPS limit, GPU, partition). */
CUresult fc_charge(int ordinal, uint64_t bytes);
void fc_uncharge(int ordinal, uint64_t bytes);

/* Streams (stream.c): the modelled completion time of the work queued on each; capture into graphs. */
typedef struct fc_graph fc_graph_t;
#define FC_STREAM_MAGIC 0x4d525453u
typedef struct fc_stream {
    uint32_t magic;
    int ordinal;
    unsigned flags;
    int priority;
    int is_default;             /* the legacy / per-thread default stream of its device */
    uint64_t end_ns;            /* when the last work queued on it completes (fake_now_ns clock) */
    fc_graph_t *capture;        /* capturing into this graph, or NULL */
    int capture_mode;
    unsigned long long capture_id;
    unsigned long long id;
} fc_stream_t;
/* The stream a handle names (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: the current device's default
 * stream); NULL when the handle is not a stream or there is no current context. */
fc_stream_t *fc_stream_get(CUstream s);
uint64_t fc_stream_end(const fc_stream_t *st); /* completion time of its work (the device's, for a default) */
void fc_sleep_until(uint64_t t_ns);
/* Kernel time: occupy the GPU of the stream's device with `blocks` blocks of kernel `f`. */
void fc_stream_submit(fc_stream_t *st, CUfunction f, uint64_t blocks);
uint64_t fc_kernel_wave_ns(CUfunction f);
/* Capture (capture.c): 1 when the stream is capturing and the work became a node of its graph. */
int fc_capture_copy(CUstream s, void *dst, const void *src, size_t n);
int fc_capture_memset(CUstream s, uint64_t dst, size_t pitch, uint32_t value, unsigned elem, size_t width,
                      size_t height);
int fc_capture_kernel(fc_stream_t *st, CUfunction f, const unsigned grid[3], const unsigned block[3],
                      unsigned shmem, void **params);
/* Copies and memsets done now (copy.c); a host-backed allocation (memory.c). */
CUresult fc_memset_now(uint64_t dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height);
CUresult fc_copy(CUstream s, void *dst, const void *src, size_t n);
CUresult fc_alloc_backed(int ordinal, uint64_t bytes, uint64_t charge, int kind, void *aux, CUdeviceptr *dptr);
/* Modules (module.c, module.h, function.c, occupancy.c). */

/* MPS client (mps.c): connect at cuInit; kernel blocks under the active thread percentage; the pinned
 * memory limit per ordinal (charge: -1 past it). */
CUresult fc_mps_connect(void);
uint64_t fc_mps_blocks(uint64_t blocks);
int fc_mps_charge(int ordinal, uint64_t bytes);
void fc_mps_uncharge(int ordinal, uint64_t bytes);

CUresult cuMemGetInfo_v99(size_t *free_bytes, size_t *total); /* a future variant (tests) */

/* CUDA 11's graph instantiate; cuda.h of CUDA 12+ no longer declares it. */
CUresult cuGraphInstantiate_v2(CUgraphExec *phExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                               size_t bufferSize);

#include "symbols.h"
#include "symbols_gen.h" /* also undoes cuda.h's renaming macros */

/* A hidden alias of an exported entry point: references to it bind inside this library, so the table that
 * cuGetProcAddress answers from holds the fake's own functions even when a preloaded library interposes the
 * exported names (as the real driver's internal table does). */
#define FC_ALIAS(name) extern __typeof__(name) fc_impl_##name __attribute__((alias(#name), visibility("hidden")));

/* The fake's own entry points, for calls from one group to another: never the exported names, which a
 * preloaded interposer (the limiter) may replace. */
extern __typeof__(cuDriverGetVersion) fc_impl_cuDriverGetVersion __attribute__((visibility("hidden")));
extern __typeof__(cuMemcpy3D_v2) fc_impl_cuMemcpy3D_v2 __attribute__((visibility("hidden")));
extern __typeof__(cuMemFree_v2) fc_impl_cuMemFree_v2 __attribute__((visibility("hidden")));
extern __typeof__(cuGraphGetNodes) fc_impl_cuGraphGetNodes __attribute__((visibility("hidden")));
extern __typeof__(cuModuleGetFunctionCount) fc_impl_cuModuleGetFunctionCount __attribute__((visibility("hidden")));


#endif
