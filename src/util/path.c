#include "util/path.h"

#include <stdio.h>
#include <string.h>

void osdp_parent_dir(const char *path, char *dir, size_t n)
{
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
}
