/* Token ids to text and back for osdp_gpt sample and train --sample-every.
 *
 * Two vocabularies (doc/tokenizer-format.md):
 *   - a token table read from a file in llm.c's tokenizer format, version 2
 *     (scripts/prepare_data.py writes one beside its shards): token i
 *     decodes to its bytes;
 *   - without a table, a model of vocabulary 256 is a byte model: token b is
 *     the byte b.  Any other vocabulary without a table cannot be decoded:
 *     its tokens are printed as ids.
 * Encoding a prompt with a table is a greedy longest match over the table's
 * tokens: it round-trips the text (every byte sequence the table covers),
 * but it is not GPT-2's BPE merge order, so a prompt may be cut into other
 * tokens than tiktoken would cut it (give --prompt-ids for exact ids). */
#ifndef OSDP_CLI_TOKENIZER_H
#define OSDP_CLI_TOKENIZER_H

#include <stdio.h>
#include "osdp/error.h"

#define OSDP_TOKENIZER_MAGIC 20240328
#define OSDP_TOKENIZER_VERSION 2
#define OSDP_TOKENIZER_HEADER_WORDS 256

typedef struct osdp_tokenizer {
    int vocab;                  /* tokens in the table (or 256: bytes) */
    int eot;                    /* the end-of-text token; -1: none (bytes) */
    int is_table;               /* 1: read from a file; 0: the byte vocabulary */
    unsigned char *bytes;       /* every token's bytes, one after the other */
    size_t *start;              /* (vocab + 1): token i is bytes[start[i] .. start[i+1]) */
    int *by_bytes;              /* token ids sorted by their bytes (prompt encoding); ties by id */
    int longest;                /* the longest token, bytes */
} osdp_tokenizer;

/* The byte vocabulary: token b is byte b. */
void osdp_tokenizer_bytes(osdp_tokenizer *t);
/* Read a token table (llm.c tokenizer format version 2).  OSDP_ERR_IO when
 * it cannot be read, OSDP_ERR_INPUT (naming --tokenizer and what is wrong)
 * for a bad magic, version, vocabulary size, end-of-text token or a
 * truncated table. */
osdp_status osdp_tokenizer_load(osdp_tokenizer *t, const char *path);
void osdp_tokenizer_free(osdp_tokenizer *t);

/* Text to token ids, greedy longest match (see above); *ids is malloc'd.
 * OSDP_ERR_INPUT naming `option` when a byte starts no token. */
osdp_status osdp_tokenizer_encode(const osdp_tokenizer *t, const char *text, const char *option, int **ids, int *n);
/* Writes the bytes of tokens ids[0 .. n) (each < t->vocab). */
void osdp_tokenizer_write(const osdp_tokenizer *t, const int *ids, int n, FILE *out);

#endif
