/* bloomery CPU library: error reporting shared by every native source file. */
#ifndef BL_COMMON_H
#define BL_COMMON_H
#include "../bloomery.h"

/* Record a failure message for bl_last_error() on this thread and return status. */
int64_t bl_fail(int64_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
