/* The --log record writer (see log_record.h). */
#include "config.h"
#include "log_record.h"

#include <math.h>
#include <string.h>

osdp_log_format osdp_log_format_of(const char *path)
{
    size_t n = strlen(path);
    return n >= 6 && strcmp(path + n - 6, ".jsonl") == 0 ? OSDP_LOG_JSON_LINES : OSDP_LOG_KEY_VALUE;
}

/* the separator and the key of the next field */
static void field_start(osdp_log_record *rec, const char *key)
{
    if (rec->format == OSDP_LOG_JSON_LINES)
        fprintf(rec->out, ", \"%s\": ", key);
    else
        fprintf(rec->out, "%s%s=", rec->n_fields > 0 ? " " : "", key);
    rec->n_fields++;
}

void osdp_log_begin(osdp_log_record *rec, FILE *out, osdp_log_format format, const char *kind)
{
    rec->out = out;
    rec->format = format;
    rec->n_fields = 0;
    if (format == OSDP_LOG_JSON_LINES)
        fprintf(out, "{\"record\": \"%s\"", kind);
    else if (strcmp(kind, "step") != 0) {
        /* step records are bare key=value lines, first key step: what the tests grep */
        fprintf(out, "%s", kind);
        rec->n_fields = 1;
    }
}

void osdp_log_number(osdp_log_record *rec, const char *key, const char *format, double value)
{
    if (rec->format == OSDP_LOG_JSON_LINES && !isfinite(value)) {
        osdp_log_missing(rec, key);
        return;
    }
    field_start(rec, key);
    fprintf(rec->out, format, value);
}

void osdp_log_count(osdp_log_record *rec, const char *key, unsigned long long value)
{
    field_start(rec, key);
    fprintf(rec->out, "%llu", value);
}

void osdp_log_text(osdp_log_record *rec, const char *key, const char *value)
{
    field_start(rec, key);
    if (rec->format == OSDP_LOG_KEY_VALUE) {
        fputs(value, rec->out);
        return;
    }
    fputc('"', rec->out);
    for (const unsigned char *c = (const unsigned char *)value; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(rec->out, "\\%c", *c);
        else if (*c < 0x20) fprintf(rec->out, "\\u%04x", *c);
        else fputc(*c, rec->out);
    }
    fputc('"', rec->out);
}

void osdp_log_missing(osdp_log_record *rec, const char *key)
{
    field_start(rec, key);
    fputs(rec->format == OSDP_LOG_JSON_LINES ? "null" : "n/a", rec->out);
}

int osdp_log_end(osdp_log_record *rec)
{
    fputs(rec->format == OSDP_LOG_JSON_LINES ? "}\n" : "\n", rec->out);
    const int flushed = fflush(rec->out) == 0;   /* errno set when not */
    return flushed && !ferror(rec->out) ? 0 : -1;
}
