/*
 * md2.c (fake libcuda): MD2 (RFC 1319) and HMAC-MD2 (RFC 2104 with MD2's 16-byte block), for the
 * integrity-check export table (darkapi.c; cuda-runtime-facts.md §2). Written from the RFC's description.
 *
 * The substitution table is RFC 1319's permutation of 0..255 "constructed from the digits of pi": it was
 * derived here by the published construction (Fisher-Yates swaps S[j] <-> S[i-1], i = 2..256, j drawn from
 * pi's decimal digits by rejection sampling), and the result checks out against the RFC's test vectors
 * (tests/integration/fakes/test_cuda_darkapi.py: MD2("") = 8350e5a3..., MD2("abc") = da853b0d...).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fakecuda.h"

static const uint8_t S[256] = {
     41,  46,  67, 201, 162, 216, 124,   1,  61,  54,  84, 161, 236, 240,   6,  19,
     98, 167,   5, 243, 192, 199, 115, 140, 152, 147,  43, 217, 188,  76, 130, 202,
     30, 155,  87,  60, 253, 212, 224,  22, 103,  66, 111,  24, 138,  23, 229,  18,
    190,  78, 196, 214, 218, 158, 222,  73, 160, 251, 245, 142, 187,  47, 238, 122,
    169, 104, 121, 145,  21, 178,   7,  63, 148, 194,  16, 137,  11,  34,  95,  33,
    128, 127,  93, 154,  90, 144,  50,  39,  53,  62, 204, 231, 191, 247, 151,   3,
    255,  25,  48, 179,  72, 165, 181, 209, 215,  94, 146,  42, 172,  86, 170, 198,
     79, 184,  56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116,   4, 241,
     69, 157, 112,  89, 100, 113, 135,  32, 134,  91, 207, 101, 230,  45, 168,   2,
     27,  96,  37, 173, 174, 176, 185, 246,  28,  70,  97, 105,  52,  64, 126,  15,
     85,  71, 163,  35, 221,  81, 175,  58, 195,  92, 249, 206, 186, 197, 234,  38,
     44,  83,  13, 110, 133,  40, 132,   9, 211, 223, 205, 244,  65, 129,  77,  82,
    106, 220,  55, 200, 108, 193, 171, 250,  36, 225, 123,   8,  12, 189, 177,  74,
    120, 136, 149, 139, 227,  99, 232, 109, 233, 203, 213, 254,  59,   0,  29,  57,
    242, 239, 183,  14, 102,  88, 208, 228, 166, 119, 114, 248, 235, 117,  75,  10,
     49,  68,  80, 180, 143, 237,  31,  26, 219, 153, 141,  51, 159,  17, 131,  20
};

typedef struct md2 {
    uint8_t x[48];      /* the state: 16 bytes of digest, 16 of block, 16 of their xor */
    uint8_t c[16];      /* the checksum */
    uint8_t buf[16];
    size_t n;           /* bytes in buf */
} md2_t;

static void md2_init(md2_t *m)
{
    memset(m, 0, sizeof *m);
}

static void md2_block(md2_t *m, const uint8_t *b)
{
    uint8_t l = m->c[15];
    for (int j = 0; j < 16; j++) {
        m->c[j] ^= S[b[j] ^ l];
        l = m->c[j];
    }
    for (int j = 0; j < 16; j++) {
        m->x[16 + j] = b[j];
        m->x[32 + j] = (uint8_t)(m->x[16 + j] ^ m->x[j]);
    }
    uint8_t t = 0;
    for (int r = 0; r < 18; r++) {
        for (int k = 0; k < 48; k++) {
            m->x[k] ^= S[t];
            t = m->x[k];
        }
        t = (uint8_t)(t + r);
    }
}

/* The checksum's running byte L starts at 0 and carries over blocks: it is c[15] of the previous block
 * (RFC 1319 3.2 keeps L across blocks; c[15] is the last byte it stored). */
static void md2_update(md2_t *m, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        size_t k = 16 - m->n < len ? 16 - m->n : len;
        memcpy(m->buf + m->n, p, k);
        m->n += k;
        p += k;
        len -= k;
        if (m->n == 16) {
            md2_block(m, m->buf);
            m->n = 0;
        }
    }
}

static void md2_final(md2_t *m, uint8_t out[16])
{
    uint8_t pad = (uint8_t)(16 - m->n);
    uint8_t padding[16];
    memset(padding, pad, sizeof padding);
    md2_update(m, padding, pad);
    uint8_t c[16];
    memcpy(c, m->c, 16);
    md2_block(m, c);
    memcpy(out, m->x, 16);
}

FAKE_EXPORT void carveFakeMd2(const void *data, size_t len, uint8_t out[16])
{
    md2_t m;
    md2_init(&m);
    md2_update(&m, data, len);
    md2_final(&m, out);
}

void fc_hmac_md2(const uint8_t key[16], const void *data, size_t len, uint8_t out[16])
{
    uint8_t ipad[16], opad[16], inner[16];
    for (int i = 0; i < 16; i++) {
        ipad[i] = key[i] ^ 0x36;
        opad[i] = key[i] ^ 0x5c;
    }
    md2_t m;
    md2_init(&m);
    md2_update(&m, ipad, 16);
    md2_update(&m, data, len);
    md2_final(&m, inner);
    md2_init(&m);
    md2_update(&m, opad, 16);
    md2_update(&m, inner, 16);
    md2_final(&m, out);
}
