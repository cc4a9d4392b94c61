/* Training data: llm.c token shards (mmap), directories of shards, raw bytes.
 * See include/osdp/data.h. */
#define _POSIX_C_SOURCE 200809L

#include "osdp/data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static int32_t read_le32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t s;
    memcpy(&s, &v, sizeof s);
    return s;
}

static int ends_with(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* llm.c's names: NAME_val_000000.bin holds validation tokens, NAME_tokenizer.bin a token table */
static int is_val_shard(const char *name) { return strstr(name, "_val_") != NULL; }
static int is_token_table(const char *name) { return ends_with(name, "_tokenizer.bin"); }

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= FNV_PRIME;
    }
    return h;
}

/* ------------------------------------------------------------------------ */
/* validation + hashing, one pass                                            */

typedef struct scan_state {
    uint64_t lane[4];  /* FNV-1a lanes; token at global index g goes to lane g % 4 */
} scan_state;

static void hash_tokens(scan_state *st, const uint16_t *t, size_t n, size_t base)
{
    size_t i = 0;
    for (; i < n && ((base + i) & 3u) != 0; i++) {
        uint64_t *h = &st->lane[(base + i) & 3u];
        *h = (*h ^ t[i]) * FNV_PRIME;
    }
    uint64_t h0 = st->lane[0], h1 = st->lane[1], h2 = st->lane[2], h3 = st->lane[3];
    for (; i + 4 <= n; i += 4) {
        h0 = (h0 ^ t[i]) * FNV_PRIME;
        h1 = (h1 ^ t[i + 1]) * FNV_PRIME;
        h2 = (h2 ^ t[i + 2]) * FNV_PRIME;
        h3 = (h3 ^ t[i + 3]) * FNV_PRIME;
    }
    st->lane[0] = h0;
    st->lane[1] = h1;
    st->lane[2] = h2;
    st->lane[3] = h3;
    for (; i < n; i++) {
        uint64_t *h = &st->lane[(base + i) & 3u];
        *h = (*h ^ t[i]) * FNV_PRIME;
    }
}

/* Check every token < vocab and fold the tokens into the hash.
 * `base` is the global index of t[0]. */
static osdp_status scan_tokens(scan_state *st, const char *file, const uint16_t *t, size_t n, size_t base,
                               int vocab)
{
    const size_t chunk = 8192;
    for (size_t c = 0; c < n; c += chunk) {
        size_t m = n - c < chunk ? n - c : chunk;
        const uint16_t *p = t + c;
        unsigned mx = 0;
        for (size_t i = 0; i < m; i++)
            mx = p[i] > mx ? p[i] : mx;
        if (mx >= (unsigned)vocab) {
            for (size_t i = 0; i < m; i++)
                if ((unsigned)p[i] >= (unsigned)vocab)
                    return osdp_error_set(OSDP_ERR_INPUT,
                                          "%s: token id %u at position %zu (0-based, in this file) is >= vocab %d",
                                          file, (unsigned)p[i], c + i, vocab);
        }
        hash_tokens(st, p, m, base + c);
    }
    return OSDP_OK;
}

/* ------------------------------------------------------------------------ */
/* building the segment list                                                 */

static osdp_status push_segment(osdp_dataset *ds, const osdp_data_segment *s, const char *file)
{
    osdp_data_segment *grown = realloc(ds->seg, (size_t)(ds->n_seg + 1) * sizeof *grown);
    if (!grown)
        return osdp_error_set(OSDP_ERR_OOM, "%s: out of memory growing the segment list", file);
    ds->seg = grown;
    ds->seg[ds->n_seg++] = *s;
    return OSDP_OK;
}

static void release_segment(osdp_data_segment *s)
{
    if (s->map)
        munmap(s->map, s->map_len);
    free(s->owned);
    memset(s, 0, sizeof *s);
}

/* Open `file` for reading and check that it is a regular file ("data shard"
 * or "data file": `what` names it in the messages); on success *fd is open
 * and *sb its status, else *fd is closed. */
static osdp_status open_regular(const char *file, const char *what, int *fd, struct stat *sb)
{
    *fd = open(file, O_RDONLY);
    if (*fd < 0)
        return osdp_error_set(OSDP_ERR_IO, "cannot open %s %s: %s", what, file, strerror(errno));
    if (fstat(*fd, sb) != 0) {
        int e = errno;
        close(*fd);
        return osdp_error_set(OSDP_ERR_IO, "cannot stat %s %s: %s", what, file, strerror(e));
    }
    if (!S_ISREG(sb->st_mode)) {
        close(*fd);
        return osdp_error_set(OSDP_ERR_INPUT, "%s %s is not a regular file", what, file);
    }
    return OSDP_OK;
}

/* Map one llm.c shard, validate it and append it to ds (if non-empty). */
static osdp_status add_shard(osdp_dataset *ds, scan_state *st, const char *file)
{
    int fd;
    struct stat sb;
    osdp_status opened = open_regular(file, "data shard", &fd, &sb);
    if (opened != OSDP_OK) return opened;
    long long fsize = (long long)sb.st_size;
    if (fsize < OSDP_SHARD_HEADER_BYTES) {
        close(fd);
        return osdp_error_set(OSDP_ERR_INPUT,
                              "%s: file is %lld bytes, shorter than the %d-byte llm.c shard header",
                              file, fsize, OSDP_SHARD_HEADER_BYTES);
    }
    if ((unsigned long long)fsize > (unsigned long long)SIZE_MAX) {
        close(fd);
        return osdp_error_set(OSDP_ERR_INPUT, "%s: file of %lld bytes is too large to map", file, fsize);
    }

    osdp_data_segment seg;
    memset(&seg, 0, sizeof seg);
    seg.map_len = (size_t)fsize;
    seg.map = mmap(NULL, seg.map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (seg.map == MAP_FAILED) {
        seg.map = NULL;
        return osdp_error_set(OSDP_ERR_IO, "cannot mmap data shard %s: %s", file, strerror(map_errno));
    }

    const unsigned char *bytes = seg.map;
    int32_t magic = read_le32(bytes);
    int32_t version = read_le32(bytes + 4);
    int32_t count = read_le32(bytes + 8);
    osdp_status rc = OSDP_OK;
    long long expect = OSDP_SHARD_HEADER_BYTES + 2LL * count;
    if (magic != OSDP_SHARD_MAGIC) {
        rc = osdp_error_set(OSDP_ERR_INPUT, "%s: bad magic %ld in llm.c shard header (expected %d)", file,
                            (long)magic, OSDP_SHARD_MAGIC);
    } else if (version != OSDP_SHARD_VERSION) {
        rc = osdp_error_set(OSDP_ERR_INPUT,
                            "%s: unsupported llm.c shard version %ld (expected %d: uint16 GPT-2 tokens)", file,
                            (long)version, OSDP_SHARD_VERSION);
    } else if (count < 0) {
        rc = osdp_error_set(OSDP_ERR_INPUT, "%s: negative token count %ld in llm.c shard header", file,
                            (long)count);
    } else if (fsize != expect) {
        rc = osdp_error_set(OSDP_ERR_INPUT,
                            "%s: file size is %lld bytes but the header's token count %ld needs %lld "
                            "(%d + 2 * %ld)",
                            file, fsize, (long)count, expect, OSDP_SHARD_HEADER_BYTES, (long)count);
    }
    if (rc != OSDP_OK) {
        release_segment(&seg);
        return rc;
    }

    seg.n_tokens = (size_t)count;
    seg.offset = ds->n_tokens;
    if (host_is_little_endian()) {
        seg.tokens = (const uint16_t *)(const void *)(bytes + OSDP_SHARD_HEADER_BYTES);
    } else if (seg.n_tokens > 0) {
        seg.owned = malloc(seg.n_tokens * sizeof *seg.owned);
        if (!seg.owned) {
            release_segment(&seg);
            return osdp_error_set(OSDP_ERR_OOM, "%s: out of memory byte-swapping %zu tokens", file,
                                  seg.n_tokens);
        }
        const unsigned char *p = bytes + OSDP_SHARD_HEADER_BYTES;
        for (size_t i = 0; i < seg.n_tokens; i++)
            seg.owned[i] = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        seg.tokens = seg.owned;
    }

    if (seg.n_tokens == 0) { /* nothing to sample from; keep no mapping */
        release_segment(&seg);
        return OSDP_OK;
    }
    posix_madvise(seg.map, seg.map_len, POSIX_MADV_SEQUENTIAL);
    rc = scan_tokens(st, file, seg.tokens, seg.n_tokens, seg.offset, ds->vocab);
    posix_madvise(seg.map, seg.map_len, POSIX_MADV_RANDOM); /* batches read short random windows */
    if (rc == OSDP_OK)
        rc = push_segment(ds, &seg, file);
    if (rc != OSDP_OK) {
        release_segment(&seg);
        return rc;
    }
    ds->n_tokens += seg.n_tokens;
    return OSDP_OK;
}

/* Read any file as bytes, widened to uint16 tokens. */
static osdp_status add_text(osdp_dataset *ds, scan_state *st, const char *file)
{
    if (ds->vocab < 256)
        return osdp_error_set(OSDP_ERR_INPUT,
                              "%s: raw byte (text) data needs vocab >= 256, but the model vocab is %d "
                              "(use an llm.c .bin shard for smaller vocabularies)",
                              file, ds->vocab);
    int fd;
    struct stat sb;
    osdp_status opened = open_regular(file, "data file", &fd, &sb);
    if (opened != OSDP_OK) return opened;
    if ((unsigned long long)sb.st_size > (unsigned long long)(SIZE_MAX / sizeof(uint16_t))) {
        close(fd);
        return osdp_error_set(OSDP_ERR_INPUT, "%s: file of %lld bytes is too large", file,
                              (long long)sb.st_size);
    }
    size_t n = (size_t)sb.st_size;
    if (n == 0) {
        close(fd);
        return OSDP_OK; /* caught by the "shorter than one sequence" check */
    }

    osdp_data_segment seg;
    memset(&seg, 0, sizeof seg);
    seg.owned = malloc(n * sizeof *seg.owned);
    if (!seg.owned) {
        close(fd);
        return osdp_error_set(OSDP_ERR_OOM, "%s: out of memory for %zu byte tokens", file, n);
    }
    unsigned char buf[16384];
    size_t got = 0;
    while (got < n) {
        size_t want = n - got < sizeof buf ? n - got : sizeof buf;
        ssize_t r = read(fd, buf, want);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            close(fd);
            release_segment(&seg);
            if (r == 0)
                return osdp_error_set(OSDP_ERR_IO, "%s: file ended after %zu of %zu bytes (changed while reading?)",
                                      file, got, n);
            return osdp_error_set(OSDP_ERR_IO, "cannot read data file %s: %s", file, strerror(e));
        }
        for (ssize_t i = 0; i < r; i++)
            seg.owned[got + (size_t)i] = buf[i];
        got += (size_t)r;
    }
    close(fd);

    seg.tokens = seg.owned;
    seg.n_tokens = n;
    seg.offset = ds->n_tokens;
    osdp_status rc = scan_tokens(st, file, seg.tokens, seg.n_tokens, seg.offset, ds->vocab);
    if (rc == OSDP_OK)
        rc = push_segment(ds, &seg, file);
    if (rc != OSDP_OK) {
        release_segment(&seg);
        return rc;
    }
    ds->n_tokens += n;
    return OSDP_OK;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* All regular *.bin files in `dir` but validation shards and token tables, in
 * name order; val_only: the validation shards alone. */
static osdp_status add_directory(osdp_dataset *ds, scan_state *st, const char *dir, int val_only)
{
    DIR *d = opendir(dir);
    if (!d)
        return osdp_error_set(OSDP_ERR_IO, "cannot open data directory %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n_names = 0, cap = 0, n_entries = 0;
    char full[OSDP_DATA_PATH_MAX];
    osdp_status rc = OSDP_OK;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno != 0)
                rc = osdp_error_set(OSDP_ERR_IO, "cannot list data directory %s: %s", dir, strerror(errno));
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        n_entries++;
        if (!ends_with(e->d_name, ".bin") || is_token_table(e->d_name))
            continue;
        if (is_val_shard(e->d_name)) ds->n_val_shards++;
        if (is_val_shard(e->d_name) != val_only)
            continue;
        int len = snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (len < 0 || (size_t)len >= sizeof full) {
            rc = osdp_error_set(OSDP_ERR_INPUT, "data path %s/%s is too long", dir, e->d_name);
            break;
        }
        struct stat sb;
        if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue; /* subdirectories, dangling links: not shards */
        if (n_names == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            char **grown = realloc(names, ncap * sizeof *grown);
            if (!grown) {
                rc = osdp_error_set(OSDP_ERR_OOM, "%s: out of memory listing shards", dir);
                break;
            }
            names = grown;
            cap = ncap;
        }
        size_t nl = strlen(e->d_name) + 1;
        names[n_names] = malloc(nl);
        if (!names[n_names]) {
            rc = osdp_error_set(OSDP_ERR_OOM, "%s: out of memory listing shards", dir);
            break;
        }
        memcpy(names[n_names++], e->d_name, nl);
    }
    closedir(d);
    if (rc == OSDP_OK && n_names == 0) {
        if (val_only)
            rc = osdp_error_set(OSDP_ERR_INPUT, "data directory %s holds no validation shards (*_val_*.bin)", dir);
        else if (n_entries == 0)
            rc = osdp_error_set(OSDP_ERR_INPUT, "data directory %s is empty (no .bin shard files)", dir);
        else if (ds->n_val_shards > 0)
            rc = osdp_error_set(OSDP_ERR_INPUT, "data directory %s holds only validation shards (*_val_*.bin, %d of "
                                "them): training needs the others (e.g. *_train_*.bin)", dir, ds->n_val_shards);
        else
            rc = osdp_error_set(OSDP_ERR_INPUT, "data directory %s contains no .bin shard files (%zu other entries)",
                                dir, n_entries);
    }
    if (rc == OSDP_OK)
        qsort(names, n_names, sizeof *names, cmp_names);
    for (size_t i = 0; rc == OSDP_OK && i < n_names; i++) {
        snprintf(full, sizeof full, "%s/%s", dir, names[i]); /* length checked above */
        rc = add_shard(ds, st, full);
    }
    free_names(names, n_names);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* public API                                                                */

static osdp_status data_open(osdp_dataset *ds, const char *path, int vocab, int seq_len, int val_only)
{
    memset(ds, 0, sizeof *ds);
    if (!path || !*path)
        return osdp_error_set(OSDP_ERR_INPUT, "no data path given");
    if (strlen(path) >= sizeof ds->path)
        return osdp_error_set(OSDP_ERR_INPUT, "data path is too long (%zu chars, max %zu): %.64s...",
                              strlen(path), sizeof ds->path - 1, path);
    if (vocab < 1)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: model vocab must be >= 1 (got %d)", path, vocab);
    if (seq_len < 1)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: sequence length must be >= 1 (got %d)", path, seq_len);

    memcpy(ds->path, path, strlen(path) + 1);
    ds->vocab = vocab;
    ds->seq_len = seq_len;

    struct stat sb;
    if (stat(path, &sb) != 0)
        return osdp_error_set(OSDP_ERR_IO, "cannot open data %s: %s", path, strerror(errno));

    scan_state st;
    for (int i = 0; i < 4; i++)
        st.lane[i] = FNV_OFFSET;
    osdp_status rc;
    if (S_ISDIR(sb.st_mode))
        rc = add_directory(ds, &st, path, val_only);
    else if (val_only)
        rc = osdp_error_set(OSDP_ERR_INPUT, "%s is not a directory (validation shards are looked for in one)", path);
    else if (ends_with(path, ".bin"))
        rc = add_shard(ds, &st, path);
    else
        rc = add_text(ds, &st, path);

    if (rc == OSDP_OK && ds->n_tokens < (size_t)seq_len + 1)
        rc = osdp_error_set(OSDP_ERR_INPUT,
                            "%s: %zu tokens is shorter than one sequence (seq_len + 1 = %lld tokens needed)", path,
                            ds->n_tokens, (long long)seq_len + 1);
    if (rc != OSDP_OK) {
        osdp_data_close(ds);
        return rc;
    }

    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < 4; i++)
        h = fnv_u64(h, st.lane[i]);
    ds->hash = fnv_u64(h, (uint64_t)ds->n_tokens);
    return OSDP_OK;
}

osdp_status osdp_data_open(osdp_dataset *ds, const char *path, int vocab, int seq_len)
{
    return data_open(ds, path, vocab, seq_len, 0);
}

osdp_status osdp_data_open_val(osdp_dataset *ds, const char *dir, int vocab, int seq_len)
{
    return data_open(ds, dir, vocab, seq_len, 1);
}

void osdp_data_close(osdp_dataset *ds)
{
    if (!ds)
        return;
    for (int i = 0; i < ds->n_seg; i++)
        release_segment(&ds->seg[i]);
    free(ds->seg);
    memset(ds, 0, sizeof *ds);
}

size_t osdp_data_seq_start(unsigned long long seed, long step, long j, size_t n_tokens, int seq_len)
{
    if (seq_len < 0 || n_tokens <= (size_t)seq_len)
        return 0;
    uint64_t x = splitmix64((uint64_t)seed);
    x = splitmix64(x ^ (uint64_t)step);
    x = splitmix64(x ^ (uint64_t)j);
    return (size_t)(x % (uint64_t)(n_tokens - (size_t)seq_len));
}

/* Index of the segment holding global token `pos` (pos < n_tokens). */
static int find_segment(const osdp_dataset *ds, size_t pos)
{
    int lo = 0, hi = ds->n_seg - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (ds->seg[mid].offset <= pos)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void osdp_data_window(const osdp_dataset *ds, size_t start, int seq_len, int *inputs, int *targets)
{
    const size_t T = (size_t)seq_len;
    /* start + T <= n_tokens - 1, so tokens [start, start + T] all exist */
    int k = ds->n_seg == 1 ? 0 : find_segment(ds, start);
    const osdp_data_segment *s = &ds->seg[k];
    size_t local = start - s->offset;
    if (local + T < s->n_tokens) { /* fast path: the window lies in one segment */
        const uint16_t *p = s->tokens + local;
        for (size_t t = 0; t < T; t++) {
            inputs[t] = p[t];
            targets[t] = p[t + 1];
        }
        return;
    }
    for (size_t t = 0; t <= T; t++) { /* window straddles shards */
        while (local >= s->n_tokens) {
            s++;
            local = 0;
        }
        int v = s->tokens[local++];
        if (t < T)
            inputs[t] = v;
        if (t > 0)
            targets[t - 1] = v;
    }
}

void osdp_data_batch(const osdp_dataset *ds, unsigned long long seed, long step, long first_seq, int n_seq,
                     int seq_len, int *inputs, int *targets)
{
    if (n_seq <= 0 || seq_len <= 0)
        return;
    const size_t T = (size_t)seq_len;
    if (ds->n_seg < 1 || ds->n_tokens < T + 1) { /* precondition violated: defined output, no reads */
        memset(inputs, 0, (size_t)n_seq * T * sizeof *inputs);
        memset(targets, 0, (size_t)n_seq * T * sizeof *targets);
        return;
    }
    for (int i = 0; i < n_seq; i++)
        osdp_data_window(ds, osdp_data_seq_start(seed, step, first_seq + i, ds->n_tokens, seq_len), seq_len,
                         inputs + (size_t)i * T, targets + (size_t)i * T);
}

int osdp_data_val_shards(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (ends_with(e->d_name, ".bin") && !is_token_table(e->d_name) && is_val_shard(e->d_name))
            n++;
    if (d)
        closedir(d);
    return n;
}

unsigned long long osdp_data_hash(const osdp_dataset *ds) { return ds->hash; }
