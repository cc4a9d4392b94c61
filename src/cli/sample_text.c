/* The vocabulary, prompt and printing of samples (see sample_text.h). */
#include "config.h"
#include "sample_text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

osdp_status osdp_sample_text_open(osdp_sample_text *st, const osdp_job *job, int vocab)
{
    memset(st, 0, sizeof *st);
    st->vocab = vocab;
    if (job->tokenizer) {
        osdp_status s = osdp_tokenizer_load(&st->tok, job->tokenizer);
        if (s != OSDP_OK) return s;
        st->decodes = 1;
        if (st->tok.vocab != vocab)
            return osdp_error_set(OSDP_ERR_INPUT, "--tokenizer %s: a vocabulary of %d tokens, the model's is %d: the table "
                                  "of another model", job->tokenizer, st->tok.vocab, vocab);
    } else if (vocab == 256) {
        osdp_tokenizer_bytes(&st->tok);
        st->decodes = 1;
    }
    return OSDP_OK;
}

void osdp_sample_text_close(osdp_sample_text *st)
{
    osdp_tokenizer_free(&st->tok);
    memset(st, 0, sizeof *st);
}

/* "1,2,3" into ids (malloc'd), each in [0, vocab) */
static osdp_status parse_prompt_ids(const char *text, int vocab, int **ids, int *n)
{
    *n = 0;
    *ids = malloc((strlen(text) / 2 + 1) * sizeof **ids);   /* a digit and a comma per id at least */
    if (!*ids) return osdp_error_set(OSDP_ERR_OOM, "--prompt-ids: out of host memory");
    for (const char *p = text;;) {
        char *end = NULL;
        errno = 0;
        long v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
        if (v < 0 || errno == ERANGE || (*end && *end != ','))
            return osdp_error_set(OSDP_ERR_INPUT, "--prompt-ids '%s': expected token ids separated by commas (1,2,3)", text);
        if (v >= vocab)
            return osdp_error_set(OSDP_ERR_INPUT, "--prompt-ids: token %ld is outside the model's vocabulary of %d", v, vocab);
        (*ids)[(*n)++] = (int)v;
        if (!*end) return OSDP_OK;
        p = end + 1;
    }
}

osdp_status osdp_sample_text_prompt(const osdp_sample_text *st, const osdp_job *job, int **ids, int *n)
{
    *ids = NULL;
    *n = 0;
    if (job->prompt && job->prompt_ids) return osdp_error_set(OSDP_ERR_INPUT, "--prompt and --prompt-ids exclude each other");
    if (job->prompt_ids) return parse_prompt_ids(job->prompt_ids, st->vocab, ids, n);
    if (job->prompt) {
        if (!st->decodes)
            return osdp_error_set(OSDP_ERR_INPUT, "--prompt: the model's vocabulary of %d tokens is not bytes: give --tokenizer "
                                  "FILE to encode the text, or --prompt-ids", st->vocab);
        return osdp_tokenizer_encode(&st->tok, job->prompt, "--prompt", ids, n);
    }
    *ids = malloc(sizeof **ids);
    if (!*ids) return osdp_error_set(OSDP_ERR_OOM, "sample: out of host memory");
    /* a byte model starts from a newline even with a table (prepare_data.py's
     * byte table names token 0 its end-of-text: text files have none);
     * without a table the end-of-text token is unknown: the last id is
     * GPT-2's (50256 of 50257) */
    **ids = st->vocab == 256 ? '\n' : st->decodes ? st->tok.eot : st->vocab - 1;
    *n = 1;
    return OSDP_OK;
}

void osdp_sample_text_write(const osdp_sample_text *st, const int *ids, int n, FILE *out)
{
    if (st->decodes) osdp_tokenizer_write(&st->tok, ids, n, out);
    else
        for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? " " : "", ids[i]);
}
