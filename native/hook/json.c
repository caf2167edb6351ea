/*
 * json.c: just enough JSON to read two strings, the OCI state's "bundle" and config.json's "root"."path".
 * A strict recursive-descent walk over the whole value (nesting bounded), so a malformed or hostile
 * document is refused rather than half-read.
 */
#include <stdlib.h>
#include <string.h>

#include "hook.h"

#define MAX_DEPTH 64

struct cursor {
    const char *p;
    const char *end;
};

static void skip_ws(struct cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Parses a string at c->p ('"' expected). With `out`, the unescaped bytes are stored there (the caller
 * gives a buffer as long as the raw string, which always suffices). Returns the unescaped length or -1. */
static long parse_string(struct cursor *c, char *out)
{
    long n = 0;
    if (c->p >= c->end || *c->p != '"')
        return -1;
    c->p++;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p++;
        if (ch == '"')
            return n;
        if (ch < 0x20)
            return -1;
        if (ch == '\\') {
            if (c->p >= c->end)
                return -1;
            char e = *c->p++;
            switch (e) {
            case '"': case '\\': case '/': break;
            case 'b': e = '\b'; break;
            case 'f': e = '\f'; break;
            case 'n': e = '\n'; break;
            case 'r': e = '\r'; break;
            case 't': e = '\t'; break;
            case 'u': {
                int v = 0;
                for (int i = 0; i < 4; i++) {
                    int h = c->p < c->end ? hexval(*c->p++) : -1;
                    if (h < 0)
                        return -1;
                    v = v * 16 + h;
                }
                if (v == 0 || v > 0x7f)
                    return -1; /* paths carve reads are ASCII; anything else is refused, not guessed */
                e = (char)v;
                break;
            }
            default:
                return -1;
            }
            ch = (unsigned char)e;
        }
        if (out)
            out[n] = (char)ch;
        n++;
    }
    return -1;
}

static int skip_value(struct cursor *c, int depth);

static int skip_container(struct cursor *c, int depth, char close, int is_object)
{
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        skip_ws(c);
        if (is_object) {
            if (parse_string(c, NULL) < 0)
                return -1;
            skip_ws(c);
            if (c->p >= c->end || *c->p++ != ':')
                return -1;
        }
        if (skip_value(c, depth + 1) < 0)
            return -1;
        skip_ws(c);
        if (c->p >= c->end)
            return -1;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == close) {
            c->p++;
            return 0;
        }
        return -1;
    }
}

static int skip_literal(struct cursor *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return -1;
    c->p += n;
    return 0;
}

static int skip_value(struct cursor *c, int depth)
{
    if (depth > MAX_DEPTH)
        return -1;
    skip_ws(c);
    if (c->p >= c->end)
        return -1;
    switch (*c->p) {
    case '{': return skip_container(c, depth, '}', 1);
    case '[': return skip_container(c, depth, ']', 0);
    case '"': return parse_string(c, NULL) < 0 ? -1 : 0;
    case 't': return skip_literal(c, "true");
    case 'f': return skip_literal(c, "false");
    case 'n': return skip_literal(c, "null");
    default: {
        const char *start = c->p;
        while (c->p < c->end && strchr("+-0123456789.eE", *c->p))
            c->p++;
        return c->p > start ? 0 : -1;
    }
    }
}

/* Finds `key` among the members of the object at c->p and leaves c->p at its value: 0 found, -1 not.
 * Called only on a document already checked whole by skip_value, so it need not re-validate. */
static int find_member(struct cursor *c, const char *key)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p != '{')
        return -1;
    c->p++;
    size_t keylen = strlen(key);
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end || *c->p == '}')
            return -1;
        struct cursor probe = *c;
        long n = parse_string(&probe, NULL);
        if (n < 0)
            return -1;
        char *name = malloc((size_t)n + 1);
        if (!name)
            return -1;
        parse_string(c, name);
        int match = (size_t)n == keylen && memcmp(name, key, keylen) == 0;
        free(name);
        skip_ws(c);
        if (c->p >= c->end || *c->p++ != ':')
            return -1;
        skip_ws(c);
        if (match)
            return 0;
        if (skip_value(c, 1) < 0)
            return -1;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',')
            c->p++;
    }
}

char *json_string_at(const char *doc, size_t len, const char *const *keys)
{
    struct cursor whole = {doc, doc + len};
    if (skip_value(&whole, 0) < 0)
        return NULL;
    skip_ws(&whole);
    if (whole.p != whole.end)
        return NULL; /* trailing garbage */
    struct cursor c = {doc, doc + len};
    for (; *keys; keys++)
        if (find_member(&c, *keys) < 0)
            return NULL;
    skip_ws(&c);
    struct cursor probe = c;
    long n = parse_string(&probe, NULL);
    if (n < 0)
        return NULL;
    char *out = malloc((size_t)n + 1);
    if (!out)
        return NULL;
    parse_string(&c, out);
    if (memchr(out, '\0', (size_t)n)) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    return out;
}

int json_uint_at(const char *doc, size_t len, const char *const *keys, unsigned long long max,
                 unsigned long long *out)
{
    struct cursor whole = {doc, doc + len};
    if (skip_value(&whole, 0) < 0)
        return -1;
    skip_ws(&whole);
    if (whole.p != whole.end)
        return -1;
    struct cursor c = {doc, doc + len};
    for (; *keys; keys++)
        if (find_member(&c, *keys) < 0)
            return -1;
    skip_ws(&c);
    /* A plain non-negative integer: no sign, fraction or exponent (what a uid or a pid is). */
    unsigned long long v = 0;
    const char *start = c.p;
    while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
        unsigned d = (unsigned)(*c.p++ - '0');
        if (v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (c.p == start || (c.p < c.end && strchr(".eE", *c.p)))
        return -1;
    *out = v;
    return 0;
}
