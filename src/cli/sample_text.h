/* What osdp_gpt sample and train --sample-every share around the sampler:
 * the job's vocabulary (--tokenizer, or bytes), the prompt's token ids, and
 * the printing of a sample (src/cli/tokenizer.h says how text and ids map). */
#ifndef OSDP_CLI_SAMPLE_TEXT_H
#define OSDP_CLI_SAMPLE_TEXT_H

#include <stdio.h>
#include "options.h"
#include "tokenizer.h"

typedef struct osdp_sample_text {
    osdp_tokenizer tok;
    int decodes;            /* 1: tok maps ids to text; 0: ids are printed as numbers */
    int vocab;              /* the model's */
} osdp_sample_text;

/* --tokenizer (its vocabulary must be the model's), else the byte
 * vocabulary when the model's is 256, else none (decodes = 0).  Not
 * collective: every rank reads the same file to the same answer. */
osdp_status osdp_sample_text_open(osdp_sample_text *st, const osdp_job *job, int vocab);
void osdp_sample_text_close(osdp_sample_text *st);

/* The prompt's token ids (*ids malloc'd, *n >= 1): --prompt-ids, --prompt
 * through the vocabulary, or, with neither, the start of a document: a
 * newline for a byte model (vocabulary 256, with or without a table), the
 * table's end-of-text token for another, the last id of a vocabulary
 * without a table (GPT-2's end-of-text is 50256 of 50257).  OSDP_ERR_INPUT naming the
 * option for ids outside the vocabulary, text the vocabulary cannot encode
 * or a prompt that needs a --tokenizer. */
osdp_status osdp_sample_text_prompt(const osdp_sample_text *st, const osdp_job *job, int **ids, int *n);

/* ids[0 .. n) to out: their text, or the ids separated by spaces when the
 * vocabulary does not decode */
void osdp_sample_text_write(const osdp_sample_text *st, const int *ids, int n, FILE *out);

#endif
