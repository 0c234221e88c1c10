/* Small synchronous reads through the C API against pread, as a C program
 * calls them: one thread, one registered file, one buffer, random
 * block-aligned offsets of a page-cache-hot file.
 *
 * Each round times N reads with pread(2) and then the same N offsets with
 * hipFileRead into the same buffer; the ratio pread time / hipFileRead time
 * of every round is kept, and the median, minimum and maximum are printed
 * (1.0: as fast as pread; rounds next to each other in time cancel the
 * machine's drifts, which a ratio of two medians would not).
 *
 *   cc -O2 -Iinclude bench/c/small_reads.c -Ltarget/release -l:libhipfile.so -o small-reads
 *   ./small-reads FILE [BLOCK_BYTES=4096] [ROUNDS=20] [READS=200000] [ALIGN=4096] [REGISTER=0]
 *
 * The buffer starts ALIGN % 4096 bytes past a 4 KiB boundary (16: as a
 * buffer from malloc may; 4096: page-aligned); REGISTER=1 registers the buffer with
 * hipFileBufRegister first. The file is read through once before the
 * first round so that every read is a page-cache hit. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hipfile.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [BLOCK_BYTES] [ROUNDS] [READS] [ALIGN] [REGISTER]\n", argv[0]);
        return 2;
    }
    size_t bs = argc > 2 ? strtoul(argv[2], NULL, 0) : 4096;
    int rounds = argc > 3 ? atoi(argv[3]) : 20;
    long n = argc > 4 ? atol(argv[4]) : 200000;
    size_t align = argc > 5 ? strtoul(argv[5], NULL, 0) : 4096;
    int reg = argc > 6 ? atoi(argv[6]) : 0;
    if (bs == 0 || rounds < 1 || rounds > 1000 || n < 1 || align == 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    off_t fsize = lseek(fd, 0, SEEK_END);
    if (fsize < (off_t)bs) {
        fprintf(stderr, "%s is smaller than one block\n", argv[1]);
        return 1;
    }
    /* The buffer starts ALIGN % 4096 bytes past a 4 KiB boundary. */
    char *mem;
    if (posix_memalign((void **)&mem, 4096, bs + 4096) != 0) {
        fprintf(stderr, "no memory\n");
        return 1;
    }
    char *buf = mem + align % 4096;
    memset(mem, 0, bs + 4096);

    hipFileError_t e = hipFileDriverOpen();
    if (e.err != 0) {
        fprintf(stderr, "hipFileDriverOpen: %d\n", e.err);
        return 1;
    }
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeOpaqueFD;
    d.handle.fd = fd;
    hipFileHandle_t fh;
    e = hipFileHandleRegister(&fh, &d);
    if (e.err != 0) {
        fprintf(stderr, "hipFileHandleRegister: %d\n", e.err);
        return 1;
    }
    if (reg && (e = hipFileBufRegister(buf, bs, 0)).err != 0) {
        fprintf(stderr, "hipFileBufRegister: %d\n", e.err);
        return 1;
    }

    uint64_t blocks = (uint64_t)fsize / bs;
    off_t *offs = malloc(n * sizeof *offs);
    uint64_t x = 88172645463325252ull;
    for (long i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        offs[i] = (off_t)(x % blocks) * (off_t)bs;
    }
    for (off_t o = 0; o + (off_t)bs <= fsize; o += bs)
        if (pread(fd, buf, bs, o) != (ssize_t)bs) {
            perror("pread");
            return 1;
        }

    double *ratio = malloc(rounds * sizeof *ratio), tp_sum = 0, th_sum = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (long i = 0; i < n; i++)
            if (pread(fd, buf, bs, offs[i]) != (ssize_t)bs) {
                perror("pread");
                return 1;
            }
        double tp = now() - t0;
        t0 = now();
        for (long i = 0; i < n; i++) {
            ssize_t got = hipFileRead(fh, buf, bs, offs[i], 0);
            if (got != (ssize_t)bs) {
                fprintf(stderr, "hipFileRead at %lld: %zd\n", (long long)offs[i], got);
                return 1;
            }
        }
        double th = now() - t0;
        ratio[r] = tp / th;
        tp_sum += tp;
        th_sum += th;
    }
    qsort(ratio, rounds, sizeof *ratio, by_value);
    printf("block %zu align %zu registered %d: pread %.3f us, hipFileRead %.3f us; "
           "pread/hipFileRead median %.3f (min %.3f, max %.3f) over %d rounds of %ld\n",
           bs, align, reg, tp_sum / rounds / n * 1e6, th_sum / rounds / n * 1e6,
           ratio[rounds / 2], ratio[0], ratio[rounds - 1], rounds, n);
    if (reg)
        hipFileBufDeregister(buf);
    hipFileHandleDeregister(fh);
    hipFileDriverClose();
    return 0;
}
