/*
 * topology.c: which fake GPUs this process sees, from CARVE_FAKE_GPUS, and their identities.
 *
 * Identities (UUID, PCI bus id) are a pure function of the seed (CARVE_FAKE_SEED, else $NODE_NAME, else
 * the host name) and the GPU index, so every process on a node and every restart agrees on them, and two
 * nodes of a kind cluster get different ones.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakegpu.h"

static fake_gpu_t g_gpus[FAKE_MAX_GPUS];
static unsigned g_count;
static const char *g_err; /* NULL when the topology parsed */
static char g_err_buf[768];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* FNV-1a then splitmix64: cheap, stable across builds and platforms. */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void seed_string(char *out, size_t len)
{
    const char *s = getenv("CARVE_FAKE_SEED");
    if (!s || !*s)
        s = getenv("NODE_NAME");
    if (s && *s) {
        snprintf(out, len, "%s", s);
        return;
    }
    if (gethostname(out, len) != 0 || !out[0])
        snprintf(out, len, "carve-fake");
    out[len - 1] = '\0';
}

static void known_models(char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (unsigned i = 0; fake_model_at(i) && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", i ? ", " : "", fake_model_at(i)->key);
}

static int set_error(const char *spec, const char *token, const char *why)
{
    char known[256];
    known_models(known, sizeof known);
    snprintf(g_err_buf, sizeof g_err_buf,
             "carve fake GPUs: CARVE_FAKE_GPUS=\"%s\": %s '%s'; expected <count>x<model>[,...] with models: %s",
             spec, why, token, known);
    g_err = g_err_buf;
    return -1;
}

/* One "<n>x<model>" or "<model>" token; trims blanks. */
static int parse_token(const char *spec, char *tok)
{
    while (isspace((unsigned char)*tok))
        tok++;
    size_t n = strlen(tok);
    while (n && isspace((unsigned char)tok[n - 1]))
        tok[--n] = '\0';
    if (!n)
        return 0; /* "2xT4," and ",,": tolerate empty items */
    unsigned long count = 1;
    const char *model_key = tok;
    char *x = strchr(tok, 'x');
    if (x && x != tok) {
        char *end;
        count = strtoul(tok, &end, 10);
        if (end == x)
            model_key = x + 1;
        else
            count = 1; /* no leading number: the 'x' belongs to the model name */
    }
    const fake_model_t *m = fake_model_find(model_key);
    if (!m)
        return set_error(spec, model_key, "unknown GPU model");
    if (g_count + count > FAKE_MAX_GPUS)
        return set_error(spec, tok, "more than 16 GPUs at");
    for (unsigned long i = 0; i < count; i++)
        g_gpus[g_count++].model = m;
    return 0;
}

static void identities(void)
{
    char seed[256];
    seed_string(seed, sizeof seed);
    uint64_t base = hash_str(seed);
    unsigned bus0 = 0x10 + (unsigned)(mix(base) % 0x70); /* + 8 per GPU stays below 0x100 */
    for (unsigned i = 0; i < g_count; i++) {
        fake_gpu_t *g = &g_gpus[i];
        uint64_t a = mix(base ^ (0x1000ull + i)), b = mix(a ^ 0x5a5a5a5aull);
        g->index = i;
        g->minor = i;
        snprintf(g->uuid, sizeof g->uuid, "GPU-%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32),
                 (unsigned)(a >> 16) & 0xffff, (unsigned)a & 0xffff, (unsigned)(b >> 48),
                 (unsigned long long)(b & 0xffffffffffffull));
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02X:00.0", bus0 + 8 * i);
    }
}

static void parse_once(void)
{
    const char *env = getenv("CARVE_FAKE_GPUS");
    if (!env || !*env)
        env = "1xA100-80GB";
    char spec[512];
    if (strlen(env) >= sizeof spec) {
        set_error("...", "(too long)", "value");
        return;
    }
    snprintf(spec, sizeof spec, "%s", env);
    if (strcasecmp(spec, "none") != 0) {
        char *save = NULL;
        for (char *tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            if (parse_token(env, tok) != 0) {
                g_count = 0;
                return;
            }
    }
    identities();
}

FAKE_EXPORT int fake_topology(const fake_gpu_t **gpus, unsigned *count, const char **err)
{
    pthread_once(&g_once, parse_once);
    if (g_err) {
        if (err)
            *err = g_err;
        return -1;
    }
    if (gpus)
        *gpus = g_gpus;
    if (count)
        *count = g_count;
    return 0;
}
