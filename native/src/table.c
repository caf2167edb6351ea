/*
 * table.c: what each live allocation charged, so its free releases exactly that.
 *
 * A fixed open-addressing table, lock-free: a slot is claimed with a compare-and-swap on its key word
 * (EMPTY/TOMB -> BUSY), filled, then published with the real key; removal claims it back with a CAS and
 * leaves a tombstone. The table lives in .bss, so untouched pages cost nothing in processes that never
 * allocate. When probing runs too long (more than ~50k live objects) entries spill into a mutex-protected
 * overflow list: the slow path.
 */
#include <pthread.h>
#include <stdlib.h>

#include "limiter.h"

#define TABLE_BITS 16
#define TABLE_SIZE (1u << TABLE_BITS)
#define MAX_PROBE 512
#define K_EMPTY 0ull
#define K_TOMB 1ull
#define K_BUSY 2ull
#define K_OFFSET 3ull /* stored key = key + 3, so no real key collides with the markers */
/* A slot's state is its key word alone: two markers alike would let a second thread take a slot the first is
 * still filling (BUSY read as TOMB), and a race is what no test can be relied on to make. */
_Static_assert(K_EMPTY != K_TOMB && K_TOMB != K_BUSY && K_BUSY != K_EMPTY, "the slot markers must differ");
_Static_assert(K_OFFSET > K_EMPTY && K_OFFSET > K_TOMB && K_OFFSET > K_BUSY, "a stored key must be no marker");

typedef struct obj {
    uint64_t key;
    uint64_t bytes;
    int32_t dev;
    uint32_t kind;
} obj_t;

static obj_t g_table[TABLE_SIZE];

static pthread_mutex_t g_spill_lock = PTHREAD_MUTEX_INITIALIZER;
static obj_t *g_spill;
static size_t g_spill_len, g_spill_cap;
static size_t g_spill_count; /* read without the lock: zero means nothing to look for */

static inline uint32_t slot_of(uint64_t key, int kind)
{
    uint64_t h = (key ^ ((uint64_t)kind << 59)) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> (64 - TABLE_BITS));
}

static void spill_put(obj_t o)
{
    pthread_mutex_lock(&g_spill_lock);
    if (g_spill_len == g_spill_cap) {
        size_t cap = g_spill_cap ? g_spill_cap * 2 : 1024;
        obj_t *n = realloc(g_spill, cap * sizeof *n);
        if (n) {
            g_spill = n;
            g_spill_cap = cap;
        }
    }
    if (g_spill_len < g_spill_cap) {
        g_spill[g_spill_len++] = o;
        __atomic_store_n(&g_spill_count, g_spill_len, __ATOMIC_RELEASE);
    } else {
        CARVE_LOG(CARVE_LOG_WARN, "allocation table full: an allocation stays charged until the process exits");
    }
    pthread_mutex_unlock(&g_spill_lock);
}

static int spill_find(uint64_t key, int kind, int remove, int *dev, uint64_t *bytes)
{
    int rc = -1;
    pthread_mutex_lock(&g_spill_lock);
    for (size_t i = 0; i < g_spill_len; i++) {
        if (g_spill[i].key != key || (int)g_spill[i].kind != kind)
            continue;
        if (dev)
            *dev = g_spill[i].dev;
        *bytes = g_spill[i].bytes;
        if (remove) {
            g_spill[i] = g_spill[--g_spill_len];
            __atomic_store_n(&g_spill_count, g_spill_len, __ATOMIC_RELEASE);
        }
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&g_spill_lock);
    return rc;
}

static int g_tracked; /* anything was ever tracked (carve_forget_charges has nothing to do otherwise) */

void carve_track(uint64_t key, int kind, int dev, uint64_t bytes)
{
    __atomic_store_n(&g_tracked, 1, __ATOMIC_RELAXED);
    uint64_t stored = key + K_OFFSET;
    uint32_t i = slot_of(key, kind);
    for (int probe = 0; probe < MAX_PROBE; probe++, i = (i + 1) & (TABLE_SIZE - 1)) {
        obj_t *o = &g_table[i];
        uint64_t k = __atomic_load_n(&o->key, __ATOMIC_RELAXED);
        if (k != K_EMPTY && k != K_TOMB)
            continue;
        if (!__atomic_compare_exchange_n(&o->key, &k, K_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            continue;
        o->bytes = bytes;
        o->dev = dev;
        o->kind = (uint32_t)kind;
        __atomic_store_n(&o->key, stored, __ATOMIC_RELEASE);
        return;
    }
    spill_put((obj_t){.key = key, .bytes = bytes, .dev = dev, .kind = (uint32_t)kind});
}

static int find(uint64_t key, int kind, int remove, int *dev, uint64_t *bytes)
{
    uint64_t stored = key + K_OFFSET;
    uint32_t i = slot_of(key, kind);
    for (int n = 0; n < MAX_PROBE; n++, i = (i + 1) & (TABLE_SIZE - 1)) {
        obj_t *o = &g_table[i];
        uint64_t k = __atomic_load_n(&o->key, __ATOMIC_ACQUIRE);
        if (k == K_EMPTY)
            break;
        if (k != stored || o->kind != (uint32_t)kind)
            continue;
        if (!remove) {
            *bytes = o->bytes;
            return 0;
        }
        if (!__atomic_compare_exchange_n(&o->key, &k, K_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            continue;
        if (dev)
            *dev = o->dev;
        *bytes = o->bytes;
        __atomic_store_n(&o->key, K_TOMB, __ATOMIC_RELEASE);
        return 0;
    }
    if (__atomic_load_n(&g_spill_count, __ATOMIC_ACQUIRE) == 0)
        return -1;
    return spill_find(key, kind, remove, dev, bytes);
}

int carve_untrack(uint64_t key, int kind, int *dev, uint64_t *bytes)
{
    return find(key, kind, 1, dev, bytes);
}

int carve_lookup(uint64_t key, int kind, uint64_t *bytes)
{
    return find(key, kind, 0, NULL, bytes);
}

/* At exit, before the regions take back what this process's slots hold: every charge still tracked on a device
 * in `gone` goes back with the slot, so a free made after that (by a later exit handler: a C++ static
 * destructor, a library's atexit) must not release it a second time. Graph records count blocks: kept. */
void carve_forget_charges(const unsigned char gone[CARVE_MAX_DEVICES])
{
    if (!__atomic_load_n(&g_tracked, __ATOMIC_RELAXED))
        return;
    for (uint32_t i = 0; i < TABLE_SIZE; i++) {
        obj_t *o = &g_table[i];
        uint64_t k = __atomic_load_n(&o->key, __ATOMIC_ACQUIRE);
        if (k != K_EMPTY && k != K_TOMB && k != K_BUSY && o->kind != CARVE_KIND_GRAPH &&
            (unsigned)o->dev < CARVE_MAX_DEVICES && gone[o->dev])
            __atomic_store_n(&o->bytes, 0, __ATOMIC_RELAXED);
    }
    pthread_mutex_lock(&g_spill_lock);
    for (size_t i = 0; i < g_spill_len; i++)
        if (g_spill[i].kind != CARVE_KIND_GRAPH && (unsigned)g_spill[i].dev < CARVE_MAX_DEVICES && gone[g_spill[i].dev])
            g_spill[i].bytes = 0;
    pthread_mutex_unlock(&g_spill_lock);
}
