/* One record of the --log file, written key by key, in either of its two
 * formats: key=value lines (the default; tests and benchmarks grep them) or
 * JSON Lines (a FILE ending in .jsonl), with the same keys in the same order.
 *
 *     key=value:  config model=t_small ranks=2 ...      (the kind as first word)
 *                 step=1 loss=5.54 loss_hex=0x1.6p+2 ... (step records are bare)
 *     JSON Lines: {"record": "step", "step": 1, "loss": 5.54, "loss_hex": "0x1.6p+2", ...}
 *
 * Writers add fields generically, so a new key (val_loss) is one call. */
#ifndef OSDP_CLI_LOG_RECORD_H
#define OSDP_CLI_LOG_RECORD_H

#include <stdio.h>

typedef enum osdp_log_format { OSDP_LOG_KEY_VALUE, OSDP_LOG_JSON_LINES } osdp_log_format;

typedef struct osdp_log_record {
    FILE *out;
    osdp_log_format format;
    int n_fields;               /* written so far: where separators go */
} osdp_log_record;

/* JSON Lines for a name ending in ".jsonl", key=value otherwise */
osdp_log_format osdp_log_format_of(const char *path);

/* Starts a record of kind "config", "step" or "summary". */
void osdp_log_begin(osdp_log_record *rec, FILE *out, osdp_log_format format, const char *kind);
/* A number printed with `format` ("%.9g"); non-finite values become null in JSON. */
void osdp_log_number(osdp_log_record *rec, const char *key, const char *format, double value);
void osdp_log_count(osdp_log_record *rec, const char *key, unsigned long long value);
/* Text: bare in key=value (no spaces expected), a JSON string otherwise. */
void osdp_log_text(osdp_log_record *rec, const char *key, const char *value);
/* A value that is not known: key=n/a, or null in JSON. */
void osdp_log_missing(osdp_log_record *rec, const char *key);
/* Ends the line and flushes, so that a run killed midway leaves whole records.
 * -1 when the record or any before it could not be written (errno: why, when
 * the flush failed; a full disk), 0 otherwise. */
int osdp_log_end(osdp_log_record *rec);

#endif
