/* Reading a small text input (model description, plan, device file) whole. */
#ifndef OSDP_TEXT_FILE_H
#define OSDP_TEXT_FILE_H

#include <stddef.h>
#include "osdp/error.h"

/* *out = malloc'd NUL-terminated contents (caller frees).  `what` names the
 * kind of file in messages ("model description").  Refuses files longer
 * than max_bytes and files containing a NUL byte. */
osdp_status osdp_read_text_file(const char *path, size_t max_bytes, const char *what, char **out);

#endif
