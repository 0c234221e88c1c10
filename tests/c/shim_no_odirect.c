/* LD_PRELOAD shim for tests: a filesystem without O_DIRECT. Every open with
 * O_DIRECT fails with EINVAL, as on filesystems that do not support it, so the
 * library's page-cache-only path runs (no unbuffered descriptor, alignments 0). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

typedef int (*open_fn)(const char *, int, ...);

static int shim(const char *name, const char *path, int flags, va_list ap) {
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
    if (flags & O_DIRECT) {
        errno = EINVAL;
        return -1;
    }
    open_fn real = (open_fn)dlsym(RTLD_NEXT, name);
    return real(path, flags, mode);
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int r = shim("open", path, flags, ap);
    va_end(ap);
    return r;
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int r = shim("open64", path, flags, ap);
    va_end(ap);
    return r;
}
