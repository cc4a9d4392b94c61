/* File-name helpers shared by the checkpoint writer and the train command. */
#ifndef OSDP_PATH_H
#define OSDP_PATH_H

#include <stddef.h>

/* The directory part of `path` into dir (n bytes): "a/b.h5" -> "a",
 * "b.h5" -> ".", "/b.h5" -> "/" (truncated to n - 1 bytes if longer). */
void osdp_parent_dir(const char *path, char *dir, size_t n);

#endif
