#include "util/text_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

osdp_status osdp_read_text_file(const char *path, size_t max_bytes, const char *what, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return osdp_error_set(OSDP_ERR_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    char *text = malloc(max_bytes + 1);
    if (!text) {
        fclose(f);
        return osdp_error_set(OSDP_ERR_OOM, "out of host memory reading %s", path);
    }
    size_t n = fread(text, 1, max_bytes, f);
    int too_long = n == max_bytes && fgetc(f) != EOF;
    fclose(f);
    text[n] = '\0';
    osdp_status s = OSDP_OK;
    if (too_long) s = osdp_error_set(OSDP_ERR_INPUT, "%s: %s longer than %zu bytes", path, what, max_bytes);
    else if (strlen(text) != n) s = osdp_error_set(OSDP_ERR_INPUT, "%s: %s contains a NUL byte", path, what);
    if (s != OSDP_OK) { free(text); return s; }
    *out = text;
    return OSDP_OK;
}
