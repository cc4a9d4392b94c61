/* Training data: llm.c token shards, directories of shards, or raw bytes.
 *
 *   path ends in ".bin"  one llm.c shard: a header of 256 little-endian int32
 *                        (magic 20240520, version 1, token count) followed by
 *                        `count` little-endian uint16 tokens.  Mapped
 *                        read-only, so large data does not need RAM.
 *   path is a directory  every regular file in it whose name ends in ".bin",
 *                        sorted by name (strcmp) and treated as one stream
 *                        (each shard stays a separate mapping; a sequence
 *                        may straddle two shards).  Other files are ignored,
 *                        and so are, by llm.c's names, validation shards
 *                        (`*_val_*.bin`: counted in n_val_shards, never
 *                        trained on) and token tables (`*_tokenizer.bin`).
 *   anything else        read as bytes, byte b -> token b (vocab >= 256).
 *
 * Batches are sampled, not streamed: the start of global sequence j at step
 * s is a pure function of (seed, s, j, n_tokens, seq_len), so any rank can
 * fill any slice of the global batch without coordination, and the global
 * batch does not depend on how many ranks share it. */
#ifndef OSDP_DATA_H
#define OSDP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "osdp/error.h"

#define OSDP_DATA_PATH_MAX 4096

#define OSDP_SHARD_MAGIC 20240520
#define OSDP_SHARD_VERSION 1
#define OSDP_SHARD_HEADER_BYTES 1024 /* 256 int32 */

/* A contiguous run of tokens: one shard (or the whole text file). */
typedef struct osdp_data_segment {
    const uint16_t *tokens;  /* points into `map` or at `owned` */
    size_t n_tokens;
    size_t offset;           /* global index of tokens[0] */
    void *map;               /* mmap of the whole file, or NULL */
    size_t map_len;
    uint16_t *owned;         /* malloc'd tokens (text data, big-endian hosts), or NULL */
} osdp_data_segment;

typedef struct osdp_dataset {
    osdp_data_segment *seg;  /* n_seg segments, non-empty, in stream order */
    int n_seg;
    size_t n_tokens;         /* total over all segments */
    int vocab;               /* the model vocab the data was validated against */
    int seq_len;             /* the sequence length validated at open */
    unsigned long long hash; /* osdp_data_hash(), computed while validating */
    int n_val_shards;        /* directory: `*_val_*.bin` shards left out of the stream */
    char path[OSDP_DATA_PATH_MAX];
} osdp_dataset;

/* Open and fully validate `path` (see above) for a model with `vocab` tokens
 * and sequences of `seq_len` tokens (so n_tokens >= seq_len + 1 is needed).
 * Every token is checked to be < vocab.  On error returns OSDP_ERR_INPUT or
 * OSDP_ERR_IO with a message naming the file and the problem; *ds is then
 * left zeroed (closing it is harmless). */
osdp_status osdp_data_open(osdp_dataset *ds, const char *path, int vocab, int seq_len);
/* The validation shards (`*_val_*.bin`) of data directory `dir` alone, as
 * one stream; OSDP_ERR_INPUT when it has none. */
osdp_status osdp_data_open_val(osdp_dataset *ds, const char *dir, int vocab, int seq_len);
/* Release maps and buffers; leaves *ds zeroed.  Safe on a zeroed dataset. */
void osdp_data_close(osdp_dataset *ds);

/* Fill sequences [first_seq, first_seq + n_seq) of the GLOBAL batch of `step`:
 * inputs and targets are (n_seq, seq_len) row-major int arrays, and
 * targets[i][t] = token after inputs[i][t].  Global sequence j starts at
 *   osdp_data_seq_start(seed, step, j, ds->n_tokens, seq_len).
 * Requires 1 <= seq_len < ds->n_tokens (true for seq_len <= the seq_len given
 * to open); if violated, the rows are filled with token 0 (never reads past
 * the data). */
void osdp_data_batch(const osdp_dataset *ds, unsigned long long seed, long step, long first_seq, int n_seq,
                     int seq_len, int *inputs, int *targets);

/* The sequence that starts at token `start` of the stream: inputs are tokens
 * [start, start + seq_len), targets the tokens after them.  Requires
 * start + seq_len < ds->n_tokens. */
void osdp_data_window(const osdp_dataset *ds, size_t start, int seq_len, int *inputs, int *targets);

/* How many validation shards (`*_val_*.bin`, not token tables) directory
 * `dir` holds; 0 when it holds none or is not a directory. */
int osdp_data_val_shards(const char *dir);

/* The start token index of global sequence `j` at `step`:
 * splitmix64(splitmix64(splitmix64(seed) ^ step) ^ j) mod (n_tokens - seq_len).
 * Returns 0 when n_tokens <= seq_len. */
size_t osdp_data_seq_start(unsigned long long seed, long step, long j, size_t n_tokens, int seq_len);

/* 64-bit hash of the token stream (FNV-1a over 16-bit tokens in four
 * interleaved lanes, folded with the token count).  Depends only on the
 * token values in order, not on how they are split into files, so all ranks
 * can compare it to check that they read the same data. */
unsigned long long osdp_data_hash(const osdp_dataset *ds);

#endif
