/* Token ids to text and back (see tokenizer.h; the file format:
 * doc/tokenizer-format.md). */
#include "config.h"
#include "tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the table being sorted (qsort takes no context; sorting happens once, on one thread) */
static const osdp_tokenizer *g_sorting;

/* bytes a[0..na) against b[0..nb): memcmp order, a prefix first */
static int compare_bytes(const unsigned char *a, size_t na, const unsigned char *b, size_t nb)
{
    int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : na < nb ? -1 : na > nb ? 1 : 0;
}

static size_t token_len(const osdp_tokenizer *t, int id) { return t->start[id + 1] - t->start[id]; }

static int compare_tokens(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    const osdp_tokenizer *t = g_sorting;
    int c = compare_bytes(t->bytes + t->start[a], token_len(t, a), t->bytes + t->start[b], token_len(t, b));
    return c ? c : (a > b) - (a < b);
}

/* the encoding index (by_bytes, longest) of a table whose bytes and starts are read */
static osdp_status index_table(osdp_tokenizer *t)
{
    t->by_bytes = malloc((size_t)t->vocab * sizeof *t->by_bytes);
    if (!t->by_bytes) return osdp_error_set(OSDP_ERR_OOM, "--tokenizer: out of host memory");
    t->longest = 0;
    for (int i = 0; i < t->vocab; i++) {
        t->by_bytes[i] = i;
        if ((int)token_len(t, i) > t->longest) t->longest = (int)token_len(t, i);
    }
    g_sorting = t;
    qsort(t->by_bytes, (size_t)t->vocab, sizeof *t->by_bytes, compare_tokens);
    g_sorting = NULL;
    return OSDP_OK;
}

void osdp_tokenizer_bytes(osdp_tokenizer *t)
{
    static unsigned char bytes[256];
    static size_t start[257];
    static int by_bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (unsigned char)i;
        start[i] = (size_t)i;
        by_bytes[i] = i;   /* single bytes sort by their value */
    }
    start[256] = 256;
    *t = (osdp_tokenizer){.vocab = 256, .eot = -1, .is_table = 0, .bytes = bytes, .start = start,
                          .by_bytes = by_bytes, .longest = 1};
}

static osdp_status load_table(osdp_tokenizer *t, const char *path, FILE *f)
{
    uint32_t header[OSDP_TOKENIZER_HEADER_WORDS];
    unsigned char raw[sizeof header];
    if (fread(raw, 1, sizeof raw, f) != sizeof raw)
        return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: shorter than the %zu-byte header of llm.c's tokenizer format",
                              path, sizeof raw);
    for (int i = 0; i < OSDP_TOKENIZER_HEADER_WORDS; i++)   /* little-endian on any host */
        header[i] = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16
                  | (uint32_t)raw[4 * i + 3] << 24;
    if (header[0] != OSDP_TOKENIZER_MAGIC)
        return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: magic %u, expected %d: not a tokenizer file in llm.c's format "
                              "(doc/tokenizer-format.md)", path, header[0], OSDP_TOKENIZER_MAGIC);
    if (header[1] != OSDP_TOKENIZER_VERSION)
        return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: version %u, this osdp_gpt reads version %d (which names the "
                              "end-of-text token)", path, header[1], OSDP_TOKENIZER_VERSION);
    if (header[2] < 1 || header[2] > (1u << 24))
        return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: vocabulary size %u, expected 1 to %u", path, header[2], 1u << 24);
    if (header[3] >= header[2])
        return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: end-of-text token %u is outside the vocabulary of %u", path,
                              header[3], header[2]);
    t->vocab = (int)header[2];
    t->eot = (int)header[3];
    t->is_table = 1;
    t->start = malloc(((size_t)t->vocab + 1) * sizeof *t->start);
    t->bytes = malloc((size_t)t->vocab * 255);
    if (!t->start || !t->bytes) return osdp_error_set(OSDP_ERR_OOM, "--tokenizer %s: out of host memory", path);
    size_t at = 0;
    for (int i = 0; i < t->vocab; i++) {
        int len = fgetc(f);
        if (len == EOF)
            return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: truncated: the table ends at token %d of %d", path, i,
                                  t->vocab);
        if (len == 0) return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: token %d has length 0 (1 to 255 expected)", path, i);
        t->start[i] = at;
        if (fread(t->bytes + at, 1, (size_t)len, f) != (size_t)len)
            return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: truncated inside token %d of %d", path, i, t->vocab);
        at += (size_t)len;
    }
    t->start[t->vocab] = at;
    if (fgetc(f) != EOF)
        return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: bytes after the last of its %d tokens (not a tokenizer file?)",
                              path, t->vocab);
    return index_table(t);
}

osdp_status osdp_tokenizer_load(osdp_tokenizer *t, const char *path)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return osdp_error_set(OSDP_ERR_IO, "--tokenizer %s: cannot open: %s", path, strerror(errno));
    osdp_status s = load_table(t, path, f);
    fclose(f);
    if (s != OSDP_OK) osdp_tokenizer_free(t);
    return s;
}

void osdp_tokenizer_free(osdp_tokenizer *t)
{
    if (t->is_table) {
        free(t->bytes);
        free(t->start);
        free(t->by_bytes);
    }
    memset(t, 0, sizeof *t);
}

/* the lowest id whose bytes are exactly s[0..n), -1 when none */
static int find_token(const osdp_tokenizer *t, const unsigned char *s, size_t n)
{
    int lo = 0, hi = t->vocab;   /* the first token not below s */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, id = t->by_bytes[mid];
        if (compare_bytes(t->bytes + t->start[id], token_len(t, id), s, n) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo == t->vocab) return -1;
    int id = t->by_bytes[lo];
    return compare_bytes(t->bytes + t->start[id], token_len(t, id), s, n) == 0 ? id : -1;
}

osdp_status osdp_tokenizer_encode(const osdp_tokenizer *t, const char *text, const char *option, int **ids, int *n)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t len = strlen(text);
    *n = 0;
    *ids = malloc((len ? len : 1) * sizeof **ids);   /* at most one token per byte */
    if (!*ids) return osdp_error_set(OSDP_ERR_OOM, "%s: out of host memory", option);
    for (size_t at = 0; at < len;) {
        int id = -1;
        size_t take = len - at < (size_t)t->longest ? len - at : (size_t)t->longest;
        for (; take > 0 && id < 0; take--) id = find_token(t, s + at, take);
        if (id < 0) {
            free(*ids);
            *ids = NULL;
            return osdp_error_set(OSDP_ERR_INPUT, "%s: byte 0x%02x at offset %zu starts no token of the vocabulary",
                                  option, s[at], at);
        }
        (*ids)[(*n)++] = id;
        at += token_len(t, id);
    }
    return OSDP_OK;
}

void osdp_tokenizer_write(const osdp_tokenizer *t, const int *ids, int n, FILE *out)
{
    for (int i = 0; i < n; i++) fwrite(t->bytes + t->start[ids[i]], 1, token_len(t, ids[i]), out);
}
