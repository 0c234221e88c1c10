/* The C side of python/bench/loader_shapes.py: the same loader shapes driven
 * through libhipfile's C API by a C program, so that the Python package is
 * compared with C code rather than with C calls made through ctypes (whose
 * per-call cost in the interpreter is part of what it would measure).
 *
 * loader_shapes.py starts it once, keeps it running, and sends one command
 * per pass on stdin; the script itself warms or drops the page cache around
 * each pass exactly as for its other sides. Commands (one line each):
 *
 *   files DIR SIZE COUNT BATCH   read DIR/f00000.bin .. f{COUNT-1}.bin, SIZE
 *                                bytes each, in batches of BATCH files: per
 *                                batch, open + hipFileHandleRegister every
 *                                file, one hipFileBatchIOSubmit of all reads
 *                                into one device buffer, hipFileBatchIOGetStatus
 *                                until all are done, deregister + close
 *   seq PATH SIZE REQUEST        hipFileRead the first SIZE bytes of PATH in
 *                                sequential REQUEST-byte requests
 *
 * and answers "ok SECONDS" (the pass's wall time, from the first open to the
 * last byte on the device) or "error MESSAGE". The destination is one
 * cudaMalloc buffer (not registered, as the Python side's), grown outside
 * the timed part when a pass needs more.
 *
 * Built on the GPU machine by scripts/gpu-run.sh compare-peers:
 *   nvcc -O2 -I include python/bench/loader_shapes_c.c -o loader_shapes_c \
 *        -L .carry -lhipfile -Xlinker -rpath=.carry
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hipfile.h"

static void *dev;
static size_t dev_bytes;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A device buffer of at least n bytes (allocated before a pass is timed). */
static int ensure_dev(size_t n, char *err, size_t errlen) {
    if (n <= dev_bytes) return 0;
    if (dev) cudaFree(dev);
    dev = NULL;
    dev_bytes = 0;
    cudaError_t e = cudaMalloc(&dev, n);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaMalloc(%zu): %s", n, cudaGetErrorString(e));
        return -1;
    }
    dev_bytes = n;
    return 0;
}

static int reg(int fd, hipFileHandle_t *fh, char *err, size_t errlen) {
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeOpaqueFD;
    d.handle.fd = fd;
    hipFileError_t e = hipFileHandleRegister(fh, &d);
    if (e.err != 0) {
        snprintf(err, errlen, "hipFileHandleRegister: %d", (int)e.err);
        return -1;
    }
    return 0;
}

static int files_pass(const char *dir, size_t size, unsigned count, unsigned batch, double *secs,
                      char *err, size_t errlen) {
    if (batch == 0 || count == 0) {
        snprintf(err, errlen, "count and batch must be positive");
        return -1;
    }
    if (ensure_dev((size_t)batch * size, err, errlen)) return -1;
    hipFileBatchHandle_t bh;
    hipFileError_t e = hipFileBatchIOSetUp(&bh, batch);
    if (e.err != 0) {
        snprintf(err, errlen, "hipFileBatchIOSetUp: %d", (int)e.err);
        return -1;
    }
    hipFileIOParams_t *params = calloc(batch, sizeof *params);
    hipFileIOEvents_t *events = calloc(batch, sizeof *events);
    hipFileHandle_t *fhs = calloc(batch, sizeof *fhs);
    int *fds = calloc(batch, sizeof *fds);
    char path[4096];
    int rc = 0;
    double t0 = now();
    for (unsigned b = 0; b < count && rc == 0; b += batch) {
        unsigned n = count - b < batch ? count - b : batch;
        unsigned opened = 0;
        for (; opened < n; opened++) {
            snprintf(path, sizeof path, "%s/f%05u.bin", dir, b + opened);
            fds[opened] = open(path, O_RDONLY);
            if (fds[opened] < 0) {
                snprintf(err, errlen, "open %s: %s", path, strerror(errno));
                rc = -1;
                break;
            }
            if (reg(fds[opened], &fhs[opened], err, errlen)) {
                close(fds[opened]);
                rc = -1;
                break;
            }
            params[opened].mode = hipFileBatch;
            params[opened].u.batch.devPtr_base = dev;
            params[opened].u.batch.file_offset = 0;
            params[opened].u.batch.devPtr_offset = (int64_t)opened * (int64_t)size;
            params[opened].u.batch.size = size;
            params[opened].fh = fhs[opened];
            params[opened].opcode = hipFileBatchRead;
            params[opened].cookie = (void *)(uintptr_t)opened;
        }
        if (rc == 0) {
            e = hipFileBatchIOSubmit(bh, n, params, 0);
            if (e.err != 0) {
                snprintf(err, errlen, "hipFileBatchIOSubmit: %d", (int)e.err);
                rc = -1;
            }
        }
        for (unsigned done = 0; rc == 0 && done < n;) {
            unsigned nr = n - done;
            e = hipFileBatchIOGetStatus(bh, nr, &nr, events, NULL);
            if (e.err != 0) {
                snprintf(err, errlen, "hipFileBatchIOGetStatus: %d", (int)e.err);
                rc = -1;
                break;
            }
            for (unsigned k = 0; k < nr; k++) {
                if (events[k].status != hipFileComplete || events[k].ret != size) {
                    snprintf(err, errlen, "entry %u: status %d, ret %zd (wanted %zu)",
                             (unsigned)(uintptr_t)events[k].cookie, (int)events[k].status,
                             (ssize_t)events[k].ret, size);
                    rc = -1;
                }
            }
            done += nr;
        }
        for (unsigned k = 0; k < opened; k++) {
            (void)hipFileHandleDeregister(fhs[k]);
            close(fds[k]);
        }
    }
    cudaDeviceSynchronize();
    *secs = now() - t0;
    hipFileBatchIODestroy(bh);
    free(params);
    free(events);
    free(fhs);
    free(fds);
    return rc;
}

static int seq_pass(const char *path, size_t size, size_t request, double *secs, char *err,
                    size_t errlen) {
    if (request == 0) {
        snprintf(err, errlen, "request must be positive");
        return -1;
    }
    if (ensure_dev(request, err, errlen)) return -1;
    double t0 = now();
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, errlen, "open %s: %s", path, strerror(errno));
        return -1;
    }
    hipFileHandle_t fh;
    if (reg(fd, &fh, err, errlen)) {
        close(fd);
        return -1;
    }
    int rc = 0;
    for (size_t off = 0; off < size; off += request) {
        size_t n = size - off < request ? size - off : request;
        ssize_t got = hipFileRead(fh, dev, n, (hoff_t)off, 0);
        if (got != (ssize_t)n) {
            snprintf(err, errlen, "hipFileRead at %zu: %zd (wanted %zu)", off, got, n);
            rc = -1;
            break;
        }
    }
    (void)hipFileHandleDeregister(fh);
    close(fd);
    cudaDeviceSynchronize();
    *secs = now() - t0;
    return rc;
}

int main(void) {
    hipFileError_t e = hipFileDriverOpen();
    if (e.err != 0) {
        printf("error hipFileDriverOpen: %d\n", (int)e.err);
        return 1;
    }
    char line[8192], err[512], a[4096];
    while (fgets(line, sizeof line, stdin)) {
        double secs = 0;
        unsigned long long s1, s2, s3;
        int rc;
        err[0] = 0;
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, "files %4095s %llu %llu %llu", a, &s1, &s2, &s3) == 4)
            rc = files_pass(a, (size_t)s1, (unsigned)s2, (unsigned)s3, &secs, err, sizeof err);
        else if (sscanf(line, "seq %4095s %llu %llu", a, &s1, &s2) == 3)
            rc = seq_pass(a, (size_t)s1, (size_t)s2, &secs, err, sizeof err);
        else {
            snprintf(err, sizeof err, "unknown command: %s", line);
            rc = -1;
        }
        if (rc == 0)
            printf("ok %.9f\n", secs);
        else
            printf("error %s\n", err);
        fflush(stdout);
    }
    (void)hipFileDriverClose();
    return 0;
}
