/* Shared helpers for the GPU-machine C tests (compiled there with nvcc). */
#ifndef HIPFILE_GPU_COMMON_H
#define HIPFILE_GPU_COMMON_H
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "hipfile.h"

#include "../c/check.h"

#define CU(x)                                                                   \
    do {                                                                        \
        cudaError_t e_ = (x);                                                   \
        if (e_ != cudaSuccess) {                                                \
            printf("CUDA error %d (%s) at %s:%d\n", e_, cudaGetErrorString(e_), \
                   __FILE__, __LINE__);                                         \
            exit(2);                                                            \
        }                                                                       \
    } while (0)

static uint64_t rng_state = 0x5eed1234;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

static void seed_from_env(void) {
    const char *s = getenv("HIPFILE_TEST_SEED");
    if (s) rng_state = strtoull(s, NULL, 0);
    printf("HIPFILE_TEST_SEED=%llu\n", (unsigned long long)rng_state);
}

static void fill(unsigned char *p, size_t n, unsigned salt) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u >> 8) ^ salt);
}

static void drop_caches(int fd) {
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    int d = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (d >= 0) {
        sync();
        if (write(d, "3\n", 2) != 2) perror("drop_caches");
        close(d);
    }
}

static hipFileHandle_t reg_fd(int fd) {
    hipFileHandle_t h = NULL;
    hipFileError_t e = check_register_fd(fd, &h);
    if (e.err != hipFileSuccess) {
        printf("hipFileHandleRegister failed: %d\n", e.err);
        exit(2);
    }
    return h;
}
#endif
