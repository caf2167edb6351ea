/*
 * fatbin.c (fake libcuda): what a module image names. The fake cannot run device code, but it knows
 * which kernels and globals an image holds, so an unknown name gets CUDA_ERROR_NOT_FOUND as on a GPU and a
 * global gets storage of its real size (cuda-runtime-facts.md §4, §5, §8 "Fatbin globals").
 *
 * Images (facts §4): a __fatBinC_Wrapper_t {u32 magic 0x466243B1, u32 version, const void *fatbin, ...}; a
 * fatbin {u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries}, entries {u16 kind
 * (1 PTX, 2 ELF), u16, u32 header size, u64 payload size, u32 compressed size at 16, u32 sm at 28, u64 flags
 * at 40 (0x2000 LZ4, 0x8000 zstd), u64 uncompressed size at 56}, payload after the entry header; a plain ELF
 * cubin (STT_FUNC symbols are kernels, STT_OBJECT symbols globals with their st_size; the SM in e_flags'
 * low byte for CUDA 12 cubins, in bits 8-15 for CUDA 13 ones, whose EI_ABIVERSION is 8); PTX text (`.entry`
 * names, `.global` variables). From a fatbin the fake reads the ELF for the device's architecture (the
 * newest sm not above it), else the PTX. Compressed entries are decoded with the system's liblz4.so.1 /
 * libzstd.so.1 (dlopen: no build dependency); without the decoder the image's names are unknown, the module
 * accepts any name, and CARVE_FAKE_CUDA_LOG says so.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define WRAPPER_MAGIC 0x466243B1u
#define FATBIN_MAGIC 0xBA55ED50u
#define FLAG_LZ4 0x2000ull
#define FLAG_ZSTD 0x8000ull
#define MAX_IMAGE (1ull << 32) /* sanity bound on sizes read from an image */

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static int add_symbol(fc_image_t *img, const char *name, size_t len, uint64_t size, int is_global)
{
    if (!len)
        return 0;
    if (img->n == img->cap) {
        size_t cap = img->cap ? img->cap * 2 : 64;
        fc_symbol_info_t *s = realloc(img->syms, cap * sizeof *s);
        if (!s)
            return -1;
        img->syms = s;
        img->cap = cap;
    }
    char *copy = strndup(name, len);
    if (!copy)
        return -1;
    img->syms[img->n++] = (fc_symbol_info_t){.name = copy, .size = size, .is_global = is_global};
    return 0;
}

void fc_image_free(fc_image_t *img)
{
    for (size_t i = 0; i < img->n; i++)
        free(img->syms[i].name);
    free(img->syms);
    memset(img, 0, sizeof *img);
}

/* ELF64 cubin: STT_FUNC -> kernel, STT_OBJECT -> global (bounds-checked: the image is untrusted). */
static int parse_elf(const uint8_t *p, uint64_t len, fc_image_t *img)
{
    if (len < sizeof(Elf64_Ehdr) || p[EI_CLASS] != ELFCLASS64)
        return -1;
    Elf64_Ehdr eh;
    memcpy(&eh, p, sizeof eh);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > len ||
        (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > len - eh.e_shoff)
        return -1;
    /* The architecture: e_flags' low byte in CUDA 12 cubins (EI_ABIVERSION 7: 0x500550 is sm_80), bits 8-15
     * in CUDA 13 ones (EI_ABIVERSION 8, EI_OSABI 0x41: 0x6005004 is sm_80). */
    img->sm = (int)(p[EI_ABIVERSION] >= 8 ? (eh.e_flags >> 8) & 0xff : eh.e_flags & 0xff);
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        memcpy(&sh, p + eh.e_shoff + (uint64_t)i * sizeof sh, sizeof sh);
        if (sh.sh_type != SHT_SYMTAB || sh.sh_offset > len || sh.sh_size > len - sh.sh_offset ||
            sh.sh_link >= eh.e_shnum)
            continue;
        Elf64_Shdr strh;
        memcpy(&strh, p + eh.e_shoff + (uint64_t)sh.sh_link * sizeof strh, sizeof strh);
        if (strh.sh_offset > len || strh.sh_size > len - strh.sh_offset)
            continue;
        const char *strtab = (const char *)p + strh.sh_offset;
        for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
            Elf64_Sym sym;
            memcpy(&sym, p + sh.sh_offset + off, sizeof sym);
            int type = ELF64_ST_TYPE(sym.st_info);
            if ((type != STT_FUNC && type != STT_OBJECT) || sym.st_name >= strh.sh_size)
                continue;
            const char *name = strtab + sym.st_name;
            size_t n = strnlen(name, strh.sh_size - sym.st_name);
            if (add_symbol(img, name, n, sym.st_size, type == STT_OBJECT) != 0)
                return -1;
        }
    }
    img->known = 1;
    return 0;
}

static uint64_t ptx_type_size(const char *t)
{
    if (!strncmp(t, ".b8", 3) || !strncmp(t, ".u8", 3) || !strncmp(t, ".s8", 3))
        return 1;
    if (!strncmp(t, ".b16", 4) || !strncmp(t, ".u16", 4) || !strncmp(t, ".s16", 4) || !strncmp(t, ".f16", 4))
        return 2;
    if (!strncmp(t, ".b64", 4) || !strncmp(t, ".u64", 4) || !strncmp(t, ".s64", 4) || !strncmp(t, ".f64", 4))
        return 8;
    return 4;
}

/* PTX text: `.entry <name>(` kernels and `.global [.align N] .type <name>[count]` variables. */
static int parse_ptx(const char *p, uint64_t len, fc_image_t *img)
{
    const char *end = p + strnlen(p, len);
    for (const char *q = p; q < end; q++) {
        int entry = !strncmp(q, ".entry", 6) && q + 6 < end && isspace((unsigned char)q[6]);
        int global = !strncmp(q, ".global", 7) && q + 7 < end && isspace((unsigned char)q[7]);
        if (!entry && !global)
            continue;
        const char *r = q + (entry ? 6 : 7);
        uint64_t elem = 4;
        for (;;) { /* skip qualifiers: .align N, .type */
            while (r < end && isspace((unsigned char)*r))
                r++;
            if (r < end && *r == '.') {
                if (!strncmp(r, ".align", 6)) {
                    r += 6;
                    while (r < end && isspace((unsigned char)*r))
                        r++;
                    while (r < end && isdigit((unsigned char)*r))
                        r++;
                } else {
                    elem = ptx_type_size(r);
                    while (r < end && !isspace((unsigned char)*r))
                        r++;
                }
                continue;
            }
            break;
        }
        const char *name = r;
        while (r < end && (isalnum((unsigned char)*r) || *r == '_' || *r == '$'))
            r++;
        uint64_t count = 1;
        if (global && r < end && *r == '[')
            count = strtoull(r + 1, NULL, 10);
        if (add_symbol(img, name, (size_t)(r - name), elem * (count ? count : 1), global) != 0)
            return -1;
        q = r;
    }
    img->known = 1;
    return 0;
}

typedef int (*lz4_fn)(const char *src, char *dst, int src_size, int dst_cap);
typedef size_t (*zstd_fn)(void *dst, size_t cap, const void *src, size_t size);
typedef unsigned (*zstd_err_fn)(size_t code);

/* The decoded payload (malloc'ed) or NULL when no decoder is available or it fails. */
static uint8_t *decompress(const uint8_t *src, uint64_t csize, uint64_t usize, uint64_t flags)
{
    if (!usize || usize > MAX_IMAGE)
        return NULL;
    uint8_t *out = malloc(usize);
    if (!out)
        return NULL;
    if (flags & FLAG_LZ4) {
        static lz4_fn lz4;
        if (!lz4) {
            void *h = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
            lz4 = h ? (lz4_fn)dlsym(h, "LZ4_decompress_safe") : NULL;
        }
        if (lz4 && csize <= 0x7fffffff && usize <= 0x7fffffff &&
            lz4((const char *)src, (char *)out, (int)csize, (int)usize) == (int)usize)
            return out;
        if (fc_trace())
            fc_log("fatbin: LZ4 entry not decoded (%s)", lz4 ? "bad data" : "no liblz4.so.1");
    } else if (flags & FLAG_ZSTD) {
        static zstd_fn zstd;
        static zstd_err_fn is_error;
        if (!zstd) {
            void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
            is_error = h ? (zstd_err_fn)dlsym(h, "ZSTD_isError") : NULL;
            zstd = h && is_error ? (zstd_fn)dlsym(h, "ZSTD_decompress") : NULL;
        }
        if (zstd) {
            size_t got = zstd(out, usize, src, csize);
            if (!is_error(got) && got == usize)
                return out;
        }
        if (fc_trace())
            fc_log("fatbin: zstd entry not decoded (%s)", zstd ? "bad data" : "no libzstd.so.1");
    }
    free(out);
    return NULL;
}

/* One fatbin: picks the entry for `sm` and reads its names. */
static int parse_fatbin(const uint8_t *p, uint64_t len, int sm, fc_image_t *img)
{
    if (len < 16 || rd32(p) != FATBIN_MAGIC)
        return -1;
    uint16_t hsize;
    memcpy(&hsize, p + 6, 2);
    uint64_t total = rd64(p + 8);
    if (hsize < 16 || total > len - hsize)
        total = len - hsize;
    const uint8_t *best = NULL, *ptx = NULL;
    int best_sm = -1;
    for (uint64_t off = hsize; off + 64 <= hsize + total;) {
        const uint8_t *e = p + off;
        uint16_t kind;
        memcpy(&kind, e, 2);
        uint32_t ehsize = rd32(e + 4);
        uint64_t psize = rd64(e + 8);
        if (ehsize < 64 || psize > total || off + ehsize + psize > hsize + total)
            break;
        int esm = (int)rd32(e + 28);
        if (kind == 2 && esm <= sm && esm > best_sm) {
            best = e;
            best_sm = esm;
        } else if (kind == 1 && !ptx) {
            ptx = e;
        }
        off += ehsize + psize;
    }
    const uint8_t *e = best ? best : ptx;
    if (!e)
        return -1;
    uint32_t ehsize = rd32(e + 4);
    uint64_t psize = rd64(e + 8), flags = rd64(e + 40);
    const uint8_t *payload = e + ehsize;
    uint8_t *decoded = NULL;
    if (flags & (FLAG_LZ4 | FLAG_ZSTD)) {
        uint64_t csize = rd32(e + 16) ? rd32(e + 16) : psize;
        decoded = decompress(payload, csize < psize ? csize : psize, rd64(e + 56), flags);
        if (!decoded) {
            img->known = 0; /* names unknown: the module accepts any */
            return 0;
        }
        payload = decoded;
        psize = rd64(e + 56);
    }
    uint16_t kind;
    memcpy(&kind, e, 2);
    int rc = kind == 2 ? parse_elf(payload, psize, img) : parse_ptx((const char *)payload, psize, img);
    free(decoded);
    return rc;
}

/* Reads an image's names; 0, or CUDA_ERROR_INVALID_IMAGE when it is none of the known formats. `len` is
 * the image's length when the caller knows it (0: unknown, bounded by the headers). */
CUresult fc_image_parse(const void *image, uint64_t len, int sm, fc_image_t *img)
{
    memset(img, 0, sizeof *img);
    const uint8_t *p = image;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (rd32(p) == WRAPPER_MAGIC) {
        const uint8_t *fatbin;
        memcpy(&fatbin, p + 8, sizeof fatbin);
        if (!fatbin)
            return CUDA_ERROR_INVALID_IMAGE;
        p = fatbin;
        len = 0;
    }
    if (rd32(p) == FATBIN_MAGIC) {
        if (!len)
            len = 16 + rd64(p + 8);
        return parse_fatbin(p, len, sm, img) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
    }
    if (!memcmp(p, ELFMAG, SELFMAG)) {
        if (!len) {
            /* the ELF's extent: the furthest of its section header table and its sections */
            Elf64_Ehdr eh;
            memcpy(&eh, p, sizeof eh);
            if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > MAX_IMAGE)
                return CUDA_ERROR_INVALID_IMAGE;
            len = eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr);
            for (unsigned i = 0; i < eh.e_shnum; i++) {
                Elf64_Shdr sh;
                memcpy(&sh, p + eh.e_shoff + (uint64_t)i * sizeof sh, sizeof sh);
                if (sh.sh_type != SHT_NOBITS && sh.sh_offset <= MAX_IMAGE && sh.sh_size <= MAX_IMAGE &&
                    sh.sh_offset + sh.sh_size > len)
                    len = sh.sh_offset + sh.sh_size;
            }
        }
        return parse_elf(p, len, img) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
    }
    /* PTX: text mentioning .version and .target */
    size_t n = strnlen((const char *)p, 1 << 26);
    if (memmem(p, n, ".version", 8) && memmem(p, n, ".target", 7))
        return parse_ptx((const char *)p, n, img) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
    return CUDA_ERROR_INVALID_IMAGE;
}
