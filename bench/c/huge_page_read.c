/*
 * O_DIRECT reads of a whole file into transparent huge pages, with or
 * without a copy of each block into a buffer of 4 KiB pages: what a cold
 * read into a caller's buffer costs when it goes through a huge-page bounce
 * (the engine's host_bounce.rs), against the disk read alone.
 *
 *   cc -O2 -o huge_page_read bench/c/huge_page_read.c
 *   sync; echo 3 > /proc/sys/vm/drop_caches
 *   ./huge_page_read FILE BLOCK_MIB BOUNCE_MIB COPY
 *
 * Each block of BLOCK_MIB is read with preads of up to BOUNCE_MIB into a
 * BOUNCE_MIB huge-page buffer (2 MiB aligned, MADV_HUGEPAGE); COPY=1 copies
 * each read into a posix_memalign'd, memset buffer of BLOCK_MIB. Prints
 * GB/s over the file. bench/RESULTS.md, "The 2-core VM", quotes it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s FILE BLOCK_MIB BOUNCE_MIB COPY(0|1)\n", argv[0]);
        return 2;
    }
    const size_t mib = 1 << 20, huge = 2 * mib;
    size_t block = strtoul(argv[2], NULL, 10) * mib;
    size_t bounce_len = strtoul(argv[3], NULL, 10) * mib;
    int copy = atoi(argv[4]);
    if (block == 0 || bounce_len == 0 || bounce_len % huge != 0) {
        fprintf(stderr, "BLOCK_MIB > 0 and BOUNCE_MIB a multiple of 2\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY | O_DIRECT);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 1;
    }
    /* Map one huge page more than asked, then start at a 2 MiB boundary. */
    char *map = mmap(NULL, bounce_len + huge, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    char *bounce = (char *)(((size_t)map + huge - 1) & ~(huge - 1));
    madvise(bounce, bounce_len, MADV_HUGEPAGE);
    memset(bounce, 0, bounce_len);
    char *dst = NULL;
    if (posix_memalign((void **)&dst, 4096, block) != 0) {
        fprintf(stderr, "posix_memalign failed\n");
        return 1;
    }
    memset(dst, 1, block);
    off_t end = st.st_size - st.st_size % (off_t)block;
    double t0 = now();
    for (off_t off = 0; off < end; off += (off_t)block) {
        size_t done = 0;
        while (done < block) {
            size_t n = block - done < bounce_len ? block - done : bounce_len;
            ssize_t r = pread(fd, bounce, n, off + (off_t)done);
            if (r <= 0) {
                perror("pread");
                return 1;
            }
            if (copy)
                memcpy(dst + done, bounce, (size_t)r);
            done += (size_t)r;
        }
    }
    double t = now() - t0;
    printf("block %zu MiB, bounce %zu MiB, copy %d: %.2f GB/s\n", block / mib,
           bounce_len / mib, copy, (double)end / t / 1e9);
    free(dst);
    munmap(map, bounce_len + huge);
    close(fd);
    return 0;
}
