/*
 * objects.c (fake libcuda): what every fake handle and device address stands for. One table, keyed by the
 * handle or the base address, remembers each allocation's kind, device, charged bytes and address span, so
 * a free releases exactly what was taken and an interior pointer finds its allocation (cuMemGetAddressRange,
 * cuPointerGetAttribute, copies). Device memory is host memory: an anonymous mapping per allocation with
 * MAP_NORESERVE, committed page by page as it is written, so copies and memsets round-trip while untouched
 * gigabytes cost nothing (cuda-runtime-facts.md §4 "Data", §8 KV cache).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fakecuda.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Address ranges sorted by base, for finding the allocation that holds an address in O(log n): one index
 * for reservations (cuMemAddressReserve), which contain mapped ranges, one for everything else, whose
 * ranges never overlap. Entries are copies of the table's objects, kept in step under g_lock. */
typedef struct range_index {
    fc_obj_t *v;
    size_t n, cap;
} range_index_t;
static range_index_t g_ranges, g_reserves;

static int is_range_kind(int kind)
{
    return kind == FC_MEM || kind == FC_HOST || kind == FC_RESERVE || kind == FC_POOLMEM || kind == FC_GLOBAL ||
           kind == FC_MAPPED;
}

static range_index_t *index_of(int kind)
{
    return kind == FC_RESERVE ? &g_reserves : &g_ranges;
}

/* First entry whose base is above addr. */
static size_t upper(const range_index_t *ix, uint64_t addr)
{
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->v[mid].key <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int index_add(const fc_obj_t *o)
{
    range_index_t *ix = index_of(o->kind);
    if (ix->n == ix->cap) {
        size_t cap = ix->cap ? ix->cap * 2 : 256;
        fc_obj_t *v = realloc(ix->v, cap * sizeof *v);
        if (!v)
            return -1;
        ix->v = v;
        ix->cap = cap;
    }
    size_t i = upper(ix, o->key);
    memmove(&ix->v[i + 1], &ix->v[i], (ix->n - i) * sizeof *ix->v);
    ix->v[i] = *o;
    ix->n++;
    return 0;
}

static void index_remove(uint64_t key, int kind)
{
    range_index_t *ix = index_of(kind);
    for (size_t i = upper(ix, key); i-- > 0 && ix->v[i].key == key;)
        if (ix->v[i].kind == kind) {
            memmove(&ix->v[i], &ix->v[i + 1], (ix->n - i - 1) * sizeof *ix->v);
            ix->n--;
            return;
        }
}

static int index_find(const range_index_t *ix, uint64_t addr, fc_obj_t *out)
{
    size_t i = upper(ix, addr);
    if (i == 0)
        return -1;
    const fc_obj_t *o = &ix->v[i - 1];
    if (addr - o->key >= (o->span ? o->span : 1))
        return -1;
    *out = *o;
    return 0;
}

static fc_obj_t *g_objs;
static uint64_t g_cap, g_used; /* slots, slots not empty (live + deleted) */
static uint64_t g_next_handle = 0x10000000001ull;

static uint64_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

static int grow(void)
{
    uint64_t cap = g_cap ? g_cap * 2 : 1024;
    fc_obj_t *n = calloc(cap, sizeof *n);
    if (!n)
        return -1;
    for (uint64_t i = 0; i < g_cap; i++) {
        if (g_objs[i].key <= 1)
            continue;
        uint64_t j = hash(g_objs[i].key) & (cap - 1);
        while (n[j].key)
            j = (j + 1) & (cap - 1);
        n[j] = g_objs[i];
    }
    free(g_objs);
    g_objs = n;
    g_cap = cap;
    g_used = 0;
    for (uint64_t i = 0; i < cap; i++)
        g_used += n[i].key != 0;
    return 0;
}

int fc_obj_add(const fc_obj_t *o)
{
    pthread_mutex_lock(&g_lock);
    int rc = 0;
    if ((g_used + 1) * 2 > g_cap && grow() != 0) {
        rc = -1;
    } else if (is_range_kind(o->kind) && index_add(o) != 0) {
        rc = -1;
    } else {
        uint64_t j = hash(o->key) & (g_cap - 1);
        while (g_objs[j].key > 1)
            j = (j + 1) & (g_cap - 1);
        g_used += g_objs[j].key == 0;
        g_objs[j] = *o;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int fc_obj_put(uint64_t key, int kind, int ordinal, uint64_t bytes)
{
    fc_obj_t o = {.key = key, .kind = kind, .ordinal = ordinal, .bytes = bytes};
    return fc_obj_add(&o);
}

int fc_obj_remove(uint64_t key, int kind, fc_obj_t *out)
{
    int rc = -1;
    pthread_mutex_lock(&g_lock);
    if (g_cap) {
        for (uint64_t j = hash(key) & (g_cap - 1); g_objs[j].key; j = (j + 1) & (g_cap - 1)) {
            if (g_objs[j].key == key && g_objs[j].kind == kind) {
                if (out)
                    *out = g_objs[j];
                if (is_range_kind(kind))
                    index_remove(key, kind);
                g_objs[j].key = 1;
                rc = 0;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int fc_obj_take(uint64_t key, int kind, int *ordinal, uint64_t *bytes)
{
    fc_obj_t o;
    if (fc_obj_remove(key, kind, &o) != 0)
        return -1;
    *ordinal = o.ordinal;
    *bytes = o.bytes;
    return 0;
}

int fc_obj_get(uint64_t key, int kind, fc_obj_t *out)
{
    int rc = -1;
    pthread_mutex_lock(&g_lock);
    if (g_cap) {
        for (uint64_t j = hash(key) & (g_cap - 1); g_objs[j].key; j = (j + 1) & (g_cap - 1)) {
            if (g_objs[j].key == key && g_objs[j].kind == kind) {
                *out = g_objs[j];
                rc = 0;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The allocation holding `addr`: a device, pool, global, host or mapped range, else the reservation. */
int fc_obj_find(uint64_t addr, fc_obj_t *out)
{
    pthread_mutex_lock(&g_lock);
    int rc = index_find(&g_ranges, addr, out);
    if (rc != 0)
        rc = index_find(&g_reserves, addr, out);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

uint64_t fc_new_handle(void)
{
    return __atomic_fetch_add(&g_next_handle, 2, __ATOMIC_RELAXED); /* odd: never a mapped address */
}

uint64_t fc_page_round(uint64_t bytes)
{
    return ((bytes ? bytes : 1) + 0xfffull) & ~0xfffull;
}

/* `bytes` of zeroed, lazily committed memory aligned to `align` (a power of two, at least a page); 0 on
 * failure. prot PROT_NONE reserves address space only (cuMemAddressReserve). */
uint64_t fc_map(uint64_t bytes, uint64_t align, int prot)
{
    uint64_t span = fc_page_round(bytes);
    if (align < 4096)
        align = 4096;
    uint64_t len = span + align - 4096;
    void *p = mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    uint64_t base = ((uint64_t)(uintptr_t)p + align - 1) & ~(align - 1);
    if (base > (uint64_t)(uintptr_t)p)
        munmap(p, base - (uint64_t)(uintptr_t)p);
    uint64_t end = (uint64_t)(uintptr_t)p + len;
    if (end > base + span)
        munmap((void *)(uintptr_t)(base + span), end - base - span);
    return base;
}

void fc_unmap(uint64_t base, uint64_t bytes)
{
    if (base)
        munmap((void *)(uintptr_t)base, fc_page_round(bytes));
}

/* Handles the fake gives out (streams, events, pools, graphs, ...) are registered, so a stale or foreign
 * handle is answered with an error instead of being dereferenced. */
int fc_handle_add(const void *p, int kind)
{
    return fc_obj_put((uint64_t)(uintptr_t)p, kind, -1, 0);
}

void fc_handle_del(const void *p, int kind)
{
    fc_obj_remove((uint64_t)(uintptr_t)p, kind, NULL);
}

int fc_handle_ok(const void *p, int kind)
{
    fc_obj_t o;
    return p && fc_obj_get((uint64_t)(uintptr_t)p, kind, &o) == 0;
}
