/*
 * hipfile-read-file: read a whole file into GPU memory with hipFileRead, then check
 * every byte against pread(2).
 *
 *   hipfile-read-file [--mem=auto|device|host] FILE
 *
 * --mem=auto (the default) uses device memory on GPU 0 when a CUDA driver with a GPU is
 * present and host memory otherwise; device requires a GPU; host never uses one. The
 * file is read through one registered buffer of up to 64 MiB, chunk after chunk. Exit
 * status 0 only when every byte matched.
 */
/* pread, clock_gettime: POSIX.1-2008 (the examples build with -std=c11). */
#define _POSIX_C_SOURCE 200809L

#include <hipfile.h>

#include "gpu_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_BUFFER (64u << 20)

static int check(hipFileError_t e, const char *what)
{
    if (e.err == hipFileSuccess)
        return 0;
    if (IS_HIP_DRV_ERR(e))
        fprintf(stderr, "%s: GPU runtime error %d\n", what, (int)HIP_DRV_ERR(e));
    else
        fprintf(stderr, "%s: %s (%d)\n", what, hipFileGetOpErrorString(e.err), (int)e.err);
    return -1;
}

/* Reads exactly `len` bytes at `off` with pread, for the comparison. */
static int pread_full(int fd, unsigned char *p, size_t len, off_t off)
{
    while (len > 0) {
        ssize_t n = pread(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *mem = "auto", *path = NULL;
    int usage = argc < 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: %s [--mem=auto|device|host] FILE\n"
                   "Reads FILE into GPU memory (host memory without a GPU) with hipFileRead\n"
                   "and checks every byte against pread.\n",
                   argv[0]);
            return 0;
        }
        if (strncmp(argv[i], "--mem=", 6) == 0)
            mem = argv[i] + 6;
        else if (path == NULL)
            path = argv[i];
        else
            usage = 1;
    }
    if (usage || path == NULL || (strcmp(mem, "auto") && strcmp(mem, "device") && strcmp(mem, "host"))) {
        fprintf(stderr, "usage: %s [--mem=auto|device|host] FILE\n", argv[0]);
        return 2;
    }

    struct gpu_mem gpu;
    char why[256] = "";
    int on_gpu = strcmp(mem, "host") != 0 && gpu_mem_open(&gpu, why, sizeof why) == 0;
    if (!on_gpu && strcmp(mem, "device") == 0) {
        fprintf(stderr, "--mem=device: %s\n", why);
        return 1;
    }

    int fd = open(path, O_RDONLY);
    int check_fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || check_fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t size = (size_t)st.st_size;
    size_t buf_len = size < MAX_BUFFER ? (size > 0 ? size : 1) : MAX_BUFFER;

    /* The first call opens the driver implicitly; opening it explicitly says when. */
    if (check(hipFileDriverOpen(), "hipFileDriverOpen"))
        return 1;
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = fd;
    hipFileHandle_t fh;
    if (check(hipFileHandleRegister(&fh, &descr), "hipFileHandleRegister"))
        return 1;

    void *buf = on_gpu ? gpu_mem_alloc(&gpu, buf_len) : malloc(buf_len);
    unsigned char *got = malloc(buf_len), *want = malloc(buf_len);
    if (buf == NULL || got == NULL || want == NULL) {
        fprintf(stderr, "cannot allocate %zu bytes of %s memory\n", buf_len, on_gpu ? "device" : "host");
        return 1;
    }
    /* Registration is optional; it moves the buffer's checks out of every read. */
    if (check(hipFileBufRegister(buf, buf_len, 0), "hipFileBufRegister"))
        return 1;

    struct timespec t0, t1;
    double busy = 0;
    size_t done = 0;
    int status = 0;
    while (done < size && status == 0) {
        size_t want_len = size - done < buf_len ? size - done : buf_len;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ssize_t n = hipFileRead(fh, buf, want_len, (hoff_t)done, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        busy += (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (n < 0) {
            /* -1 is a system error (errno); below -5000 a hipFile code; else a GPU error. */
            if (n == -1)
                fprintf(stderr, "hipFileRead at %zu: %s\n", done, strerror(errno));
            else if (IS_HIPFILE_ERR(n))
                fprintf(stderr, "hipFileRead at %zu: %s (%zd)\n", done, HIPFILE_ERRSTR(n), n);
            else
                fprintf(stderr, "hipFileRead at %zu: GPU runtime error %zd\n", done, -n);
            status = 1;
            break;
        }
        if ((size_t)n != want_len) {
            fprintf(stderr, "hipFileRead at %zu: %zd bytes, expected %zu\n", done, n, want_len);
            status = 1;
            break;
        }
        if (on_gpu ? gpu_mem_to_host(&gpu, got, buf, want_len) : (memcpy(got, buf, want_len), 0)) {
            fprintf(stderr, "copying the data back from the GPU failed\n");
            status = 1;
            break;
        }
        if (pread_full(check_fd, want, want_len, (off_t)done) != 0 || memcmp(got, want, want_len) != 0) {
            fprintf(stderr, "data at %zu..%zu differ from pread\n", done, done + want_len);
            status = 1;
            break;
        }
        done += want_len;
    }

    if (status == 0)
        printf("read %zu bytes into %s memory%s in %.3f s (%.2f GB/s); every byte matches pread\n", done,
               on_gpu ? "device" : "host", on_gpu ? " (GPU 0)" : "", busy,
               busy > 0 ? (double)done / busy / 1e9 : 0.0);
    if (!on_gpu && strcmp(mem, "auto") == 0)
        printf("(host memory: %s)\n", why);

    check(hipFileBufDeregister(buf), "hipFileBufDeregister");
    hipFileHandleDeregister(fh);
    check(hipFileDriverClose(), "hipFileDriverClose");
    if (on_gpu) {
        gpu_mem_free(&gpu, buf);
        gpu_mem_close(&gpu);
    } else {
        free(buf);
    }
    free(got);
    free(want);
    close(fd);
    close(check_fd);
    return status;
}
