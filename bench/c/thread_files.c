/*
 * Many small files read whole by plain threads through the C API, as a
 * loader's worker threads read their samples: each of THREADS threads takes
 * every THREADS-th file of DIR/0 .. DIR/(FILES-1), and for each one opens
 * it, registers it (hipFileHandleRegister), reads SIZE bytes with one
 * hipFileRead into its own part of a host buffer, deregisters and closes
 * it. The C side of python/bench/thread_files.py (which makes the files).
 * With a sixth argument `device` the buffer is device memory of GPU 0
 * (examples/gpu_mem.h: the CUDA driver opened at run time, so the program
 * builds without CUDA).
 *
 *   cc -O2 -Iinclude -Iexamples bench/c/thread_files.c -Ltarget/release -l:libhipfile.so -lpthread -ldl -o thread-files
 *   ./thread-files DIR FILES SIZE THREADS ROUNDS [device]
 *
 * Prints GB/s for each round after an untimed first one.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_mem.h"
#include "hipfile.h"

static const char *dir;
static int files, threads;
static size_t size;
static char *buf;

static void *reader(void *arg)
{
    long t = (long)arg;
    char path[4096];
    for (int i = (int)t; i < files; i += threads) {
        snprintf(path, sizeof path, "%s/%d", dir, i);
        int fd = open(path, O_RDONLY);
        if (fd < 0) {
            perror(path);
            exit(1);
        }
        hipFileDescr_t d = {0};
        d.type = hipFileHandleTypeOpaqueFD;
        d.handle.fd = fd;
        hipFileHandle_t fh;
        hipFileError_t e = hipFileHandleRegister(&fh, &d);
        if (e.err != hipFileSuccess) {
            fprintf(stderr, "%s: hipFileHandleRegister: %d\n", path, (int)e.err);
            exit(1);
        }
        ssize_t n = hipFileRead(fh, buf + t * size, size, 0, 0);
        if (n != (ssize_t)size) {
            fprintf(stderr, "%s: hipFileRead returned %zd, not %zu\n", path, n, size);
            exit(1);
        }
        hipFileHandleDeregister(fh);
        close(fd);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6 && !(argc == 7 && !strcmp(argv[6], "device"))) {
        fprintf(stderr, "usage: %s DIR FILES SIZE THREADS ROUNDS [device]\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    files = atoi(argv[2]);
    size = strtoul(argv[3], NULL, 0);
    threads = atoi(argv[4]);
    int rounds = atoi(argv[5]);
    if (files <= 0 || size == 0 || threads <= 0 || threads > 256 || rounds <= 0) {
        fprintf(stderr, "FILES, SIZE, ROUNDS > 0 and 0 < THREADS <= 256\n");
        return 2;
    }
    hipFileError_t e = hipFileDriverOpen();
    if (e.err != hipFileSuccess) {
        fprintf(stderr, "hipFileDriverOpen: %d\n", (int)e.err);
        return 1;
    }
    int device = argc == 7;
    struct gpu_mem gpu;
    if (device) {
        char why[256];
        if (gpu_mem_open(&gpu, why, sizeof why) != 0) {
            fprintf(stderr, "device: %s\n", why);
            return 1;
        }
        if (!(buf = gpu_mem_alloc(&gpu, (size_t)threads * size))) {
            fprintf(stderr, "device: cannot allocate %zu bytes on GPU 0\n", (size_t)threads * size);
            return 1;
        }
    } else {
        if (posix_memalign((void **)&buf, 4096, (size_t)threads * size) != 0) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < (size_t)threads * size; i += 4096)
            buf[i] = 0;
    }
    pthread_t th[256];
    for (int r = 0; r <= rounds; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long t = 0; t < threads; t++)
            pthread_create(&th[t], NULL, reader, (void *)t);
        for (int t = 0; t < threads; t++)
            pthread_join(th[t], NULL);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
        if (r > 0)
            printf("c %d x %zu, %d threads, %s: %.2f GB/s\n", files, size, threads, device ? "device" : "host", files * (double)size / s / 1e9);
    }
    hipFileDriverClose();
    if (device) {
        gpu_mem_free(&gpu, buf);
        gpu_mem_close(&gpu);
    }
    return 0;
}
