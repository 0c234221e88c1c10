/* A stand-in for NVIDIA's libcufile, for the GDS probe's tests
 * (gds/tests/probe_child.rs). Built once per behaviour with -DFAKE_<MODE>:
 *
 *   FAKE_WORKS     driver opens (only with compatibility mode turned off), nvidia-fs 2.17,
 *                  registration succeeds
 *   FAKE_P2P       as WORKS, but no nvidia-fs: PCI P2PDMA support instead
 *   FAKE_OPEN_5001 cuFileDriverOpen fails with 5001 (nvidia-fs not loaded)
 *   FAKE_COMPAT    driver opens, no nvidia-fs, no P2PDMA
 *   FAKE_REG_5027  cuFileHandleRegister fails with 5027, as libcufile 1.15 does without udev
 *   FAKE_HANG      cuFileDriverOpen never returns
 *   FAKE_CRASH     cuFileDriverOpen dies of SIGSEGV
 *   FAKE_FRONT     exports hipfile-rs's cuFile front marker
 *   FAKE_ANSWERS   answers every call with a value of its own, so that a test of
 *                  libhipfile's passthrough can tell that (and how) a call arrived
 *
 * Only the prototypes the loader resolves are defined; their layouts are cufile.h's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct { int err; int cu_err; } E;
typedef struct {
    unsigned major, minor;
    size_t poll, maxdio;
    unsigned dstatus, dcontrol, fflags, cache, per_buffer, pinned, batch, timeout;
} Props;

static const E ok = {0, 0};
static bool compat_allowed = true;

#ifdef FAKE_FRONT
const char hipfile_cufile_front[] = "fake";
#endif

E cuFileSetParameterBool(int param, bool value) {
    if (param == 1) compat_allowed = value;
    return ok;
}

E cuFileDriverOpen(void) {
#if defined(FAKE_ANSWERS)
    return ok;
#elif defined(FAKE_HANG)
    for (;;) pause();
#elif defined(FAKE_CRASH)
    *(volatile int *)0 = 1; /* a real fault: a raised signal would meet Rust's handler */
#elif defined(FAKE_OPEN_5001)
    E e = {5001, 0};
    return e;
#endif
    if (compat_allowed) { /* the probe must ask for GDS only */
        E e = {5030, 0};
        return e;
    }
    return ok;
}

E cuFileDriverGetProperties(Props *p) {
    memset(p, 0, sizeof *p);
#if defined(FAKE_ANSWERS)
    Props a = {2, 17, 11, 22, 0x30, 0x3, 0xe, 33, 44, 4000000000u, 66, 77};
    *p = a;
#elif defined(FAKE_WORKS) || defined(FAKE_REG_5027)
    p->major = 2;
    p->minor = 17;
    p->dstatus = 1u << 4; /* NVMe */
#elif defined(FAKE_P2P)
    p->dstatus = 1u << 11; /* NVMe through PCI P2PDMA */
#endif
    return ok;
}

typedef struct { int type; union { int fd; void *handle; } handle; const void *fs_ops; } Descr;

E cuFileHandleRegister(void **fh, Descr *d) {
#ifdef FAKE_REG_5027
    (void)fh; (void)d;
    E e = {5027, 0};
    return e;
#else
#ifndef FAKE_ANSWERS
    /* What the probe must hand over: an open O_DIRECT descriptor of type OPAQUE_FD. */
    int fl = fcntl(d->handle.fd, F_GETFL);
    if (d->type != 1 || fl < 0 || !(fl & O_DIRECT)) {
        E e = {5019, 0};
        return e;
    }
#endif
    *fh = d;
    return ok;
#endif
}

void cuFileHandleDeregister(void *fh) { (void)fh; }
E cuFileDriverClose_v2(void) { return ok; }
E cuFileBufRegister(const void *p, size_t n, int f) { (void)p; (void)n; (void)f; return ok; }
E cuFileBufDeregister(const void *p) { (void)p; return ok; }
#ifdef FAKE_ANSWERS
/* n + offsets, so the test sees every argument arrive. */
ssize_t cuFileRead(void *fh, void *b, size_t n, off_t o, off_t bo) { (void)fh; (void)b; return (ssize_t)n + o + bo; }
long cuFileUseCount(void) { return 4242; }
E cuFileBatchIOSetUp(void **b, unsigned n) { *b = (void *)(size_t)(0x1000 + n); return ok; }
#else
ssize_t cuFileRead(void *fh, void *b, size_t n, off_t o, off_t bo) { (void)fh; (void)b; (void)n; (void)o; (void)bo; return -1; }
long cuFileUseCount(void) { return 0; }
E cuFileBatchIOSetUp(void **b, unsigned n) { (void)b; (void)n; return ok; }
#endif
ssize_t cuFileWrite(void *fh, const void *b, size_t n, off_t o, off_t bo) { (void)fh; (void)b; (void)n; (void)o; (void)bo; return -1; }
E cuFileDriverSetPollMode(bool p, size_t n) { (void)p; (void)n; return ok; }
E cuFileDriverSetMaxDirectIOSize(size_t n) { (void)n; return ok; }
E cuFileDriverSetMaxCacheSize(size_t n) { (void)n; return ok; }
E cuFileDriverSetMaxPinnedMemSize(size_t n) { (void)n; return ok; }
E cuFileBatchIOSubmit(void *b, unsigned n, void *p, unsigned f) { (void)b; (void)n; (void)p; (void)f; return ok; }
E cuFileBatchIOGetStatus(void *b, unsigned m, unsigned *n, void *e, void *t) { (void)b; (void)m; (void)n; (void)e; (void)t; return ok; }
E cuFileBatchIOCancel(void *b) { (void)b; return ok; }
void cuFileBatchIODestroy(void *b) { (void)b; }
E cuFileReadAsync(void *fh, void *b, size_t *s, off_t *o, off_t *bo, ssize_t *r, void *st) { (void)fh; (void)b; (void)s; (void)o; (void)bo; (void)r; (void)st; return ok; }
E cuFileWriteAsync(void *fh, void *b, size_t *s, off_t *o, off_t *bo, ssize_t *r, void *st) { (void)fh; (void)b; (void)s; (void)o; (void)bo; (void)r; (void)st; return ok; }
E cuFileStreamRegister(void *s, unsigned f) { (void)s; (void)f; return ok; }
E cuFileStreamDeregister(void *s) { (void)s; return ok; }
