/*
 * fuzz_driver.c: runs LLVMFuzzerTestOneInput without libFuzzer (gcc has none): every corpus file, then
 * `iterations` inputs made by mutating corpus entries (byte flips, inserts, deletes, JSON tokens,
 * splices), from a fixed seed so a failure reproduces. On a failure (a sanitizer report, or the
 * target's abort()) the input is written to $FUZZ_CRASH_DIR/crash-input (default: the current
 * directory) so it can be replayed: json_fuzz 0 1 crash-input.
 *
 *   json_fuzz <iterations> <seed> <corpus file>...
 */
#include <sanitizer/common_interface_defs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT 8192
#define MAX_CORPUS 256

static uint64_t rng;
static const char *prog = "fuzz";

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *const TOKENS[] = {
    "{", "}", "[", "]", "\"", "\\", "\\u", "\\u0000", "\\u0041", "\\ud800", ":", ",", " ", "\n", "null",
    "true", "false", "-1e9", "\"root\"", "\"path\"", "\"bundle\"", "{\"path\":", "\"/x\"", "[[[[[[[[",
    "]]]]]]]]", "{\"a\":{\"b\":{\"c\":{\"d\":", "\x01", "\xff",
};

struct input {
    uint8_t *data;
    size_t len;
};

static size_t mutate(uint8_t *buf, size_t len, const struct input *corpus, size_t ncorpus)
{
    int rounds = 1 + (int)(next() % 8);
    for (int r = 0; r < rounds; r++) {
        size_t pos = len ? next() % (len + 1) : 0;
        switch (next() % 6) {
        case 0: /* flip a bit */
            if (len)
                buf[next() % len] ^= (uint8_t)(1u << (next() % 8));
            break;
        case 1: /* a random byte */
            if (len < MAX_INPUT) {
                memmove(buf + pos + 1, buf + pos, len - pos);
                buf[pos] = (uint8_t)next();
                len++;
            }
            break;
        case 2: { /* delete a run */
            if (!len)
                break;
            size_t at = next() % len, n = 1 + next() % (len - at);
            memmove(buf + at, buf + at + n, len - at - n);
            len -= n;
            break;
        }
        case 3:
        case 4: { /* a JSON token */
            const char *t = TOKENS[next() % (sizeof TOKENS / sizeof *TOKENS)];
            size_t n = strlen(t);
            if (len + n <= MAX_INPUT) {
                memmove(buf + pos + n, buf + pos, len - pos);
                memcpy(buf + pos, t, n);
                len += n;
            }
            break;
        }
        default: { /* splice part of another corpus entry */
            const struct input *o = &corpus[next() % ncorpus];
            if (!o->len)
                break;
            size_t at = next() % o->len, n = 1 + next() % (o->len - at);
            if (len + n <= MAX_INPUT) {
                memmove(buf + pos + n, buf + pos, len - pos);
                memcpy(buf + pos, o->data + at, n);
                len += n;
            }
            break;
        }
        }
    }
    return len;
}

static const uint8_t *current;
static size_t current_len;

static void save_current(void)
{
    const char *dir = getenv("FUZZ_CRASH_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/crash-input", dir ? dir : ".");
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(current, 1, current_len, f);
        fclose(f);
    }
    fprintf(stderr, "%s: failing input (%zu bytes) saved to %s\n", prog, current_len, path);
    fflush(stderr); /* a target may buffer stderr */
}

static void on_abort(int sig)
{
    save_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_one(const uint8_t *data, size_t len)
{
    current = data;
    current_len = len;
    LLVMFuzzerTestOneInput(data, len);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s <iterations> <seed> <corpus file>...\n", argv[0]);
        return 2;
    }
    prog = argv[0];
    __sanitizer_set_death_callback(save_current);
    signal(SIGABRT, on_abort);
    long iterations = atol(argv[1]);
    rng = strtoull(argv[2], NULL, 0) | 1;
    static struct input corpus[MAX_CORPUS];
    size_t ncorpus = 0;
    for (int i = 3; i < argc && ncorpus < MAX_CORPUS; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 2;
        }
        uint8_t *data = malloc(MAX_INPUT);
        size_t n = fread(data, 1, MAX_INPUT, f);
        fclose(f);
        corpus[ncorpus++] = (struct input){data, n};
    }
    /* All read before the first run: a target may leave the file system behind (contain_fuzz chroots). */
    for (size_t i = 0; i < ncorpus; i++)
        run_one(corpus[i].data, corpus[i].len);
    /* $FUZZ_SECONDS: a time budget besides the count (make test runs each target on one) */
    const char *budget = getenv("FUZZ_SECONDS");
    time_t stop_at = budget && atol(budget) > 0 ? time(NULL) + atol(budget) : 0;
    static uint8_t buf[2 * MAX_INPUT];
    long it = 0;
    for (; it < iterations; it++) {
        if (stop_at && (it & 63) == 0 && time(NULL) >= stop_at)
            break;
        const struct input *base = &corpus[next() % ncorpus];
        memcpy(buf, base->data, base->len);
        size_t len = mutate(buf, base->len, corpus, ncorpus);
        run_one(buf, len);
    }
    const char *self = strrchr(argv[0], '/');
    printf("%s: %zu corpus inputs, %ld mutations, no failure\n", self ? self + 1 : argv[0], ncorpus, it);
    for (size_t i = 0; i < ncorpus; i++)
        free(corpus[i].data);
    return 0;
}
