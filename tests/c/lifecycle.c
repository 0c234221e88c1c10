/* Lifecycle and concurrency from C: many threads registering and deregistering
 * files and buffers, doing I/O and opening/closing the driver at random for a
 * bounded time; deregistering while I/O is in flight; fork() after
 * initialisation (the child starts from a closed driver, never a deadlock;
 * fork.c covers fork in depth); exit with work in flight.
 * Usage: lifecycle DIR [seconds] */
#define _GNU_SOURCE
#include "hipfile.h"
#include "check.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FILE_BYTES (8u << 20)
static char path[512];
static unsigned char *data;
static atomic_int stop;
static atomic_long ops, bad_data, crashes_avoided;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static uint64_t xs(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *worker(void *arg) {
    uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
    unsigned char *buf = malloc(1 << 20);
    while (!atomic_load(&stop)) {
        int fd = open(path, O_RDONLY | ((xs(&seed) & 1) ? O_DIRECT : 0));
        if (fd < 0) continue;
        hipFileHandle_t h;
        hipFileError_t e = check_register_fd(fd, &h);
        int regbuf = xs(&seed) & 1;
        if (regbuf) hipFileBufRegister(buf, 1 << 20, 0);
        for (int i = 0; i < 4 && e.err == 0; i++) {
            size_t off = xs(&seed) % FILE_BYTES, size = 1 + xs(&seed) % (1 << 20);
            ssize_t r = hipFileRead(h, buf, size, (hoff_t)off, 0);
            atomic_fetch_add(&ops, 1);
            if (r > 0) {
                size_t want = FILE_BYTES - off < size ? FILE_BYTES - off : size;
                if ((size_t)r != want || memcmp(buf, data + off, want) != 0) atomic_fetch_add(&bad_data, 1);
            }
            /* Errors are allowed (another thread may have closed the driver);
             * wrong data never is. */
        }
        if (regbuf) hipFileBufDeregister(buf);
        if (e.err == 0) hipFileHandleDeregister(h);
        close(fd);
        unsigned r = xs(&seed) % 8;
        if (r == 0) (void)hipFileDriverOpen();
        if (r == 1) (void)hipFileDriverClose();
    }
    free(buf);
    return NULL;
}

static void *reader_long(void *arg) {
    hipFileHandle_t h = arg;
    unsigned char *buf = malloc(FILE_BYTES);
    ssize_t r = hipFileRead(h, buf, FILE_BYTES, 0, 0);
    /* Either the read won the race (whole and right), or the deregistration did
     * and the read finds no handle; never anything in between. */
    CHECK((r == (ssize_t)FILE_BYTES && memcmp(buf, data, FILE_BYTES) == 0) || r == -hipFileHandleNotRegistered,
          "long read %zd", r);
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    double secs = argc > 2 ? atof(argv[2]) : 3.0;
    snprintf(path, sizeof path, "%s/hipfile-lifecycle-%d", dir, getpid());
    data = malloc(FILE_BYTES);
    for (size_t i = 0; i < FILE_BYTES; i++) data[i] = (unsigned char)(i * 131 + (i >> 12));
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (write(fd, data, FILE_BYTES) != (ssize_t)FILE_BYTES) return 2;
    fsync(fd);

    /* 1. stress: 8 threads for `secs` seconds */
    pthread_t t[8];
    double t0 = now();
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    while (now() - t0 < secs) usleep(10000);
    atomic_store(&stop, 1);
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    printf("stress: %ld I/O operations in %.1f s by 8 threads with random open/close\n", atomic_load(&ops), now() - t0);
    CHECK(atomic_load(&bad_data) == 0, "%ld reads returned wrong data", atomic_load(&bad_data));
    while (hipFileUseCount() > 0) hipFileDriverClose();

    /* 2. deregister while I/O is in flight: the handle stays usable for the read */
    CHECK(hipFileDriverOpen().err == 0, "open");
    hipFileHandle_t h;
    CHECK(check_register_fd(fd, &h).err == 0, "register");
    for (int k = 0; k < 20; k++) {
        pthread_t r;
        pthread_create(&r, NULL, reader_long, h);
        hipFileHandleDeregister(h); /* either refused (in flight) or done after */
        pthread_join(r, NULL);
        hipFileError_t e = check_register_fd(fd, &h);
        CHECK(e.err == 0 || e.err == hipFileHandleAlreadyRegistered, "re-register %d", e.err);
    }
    hipFileHandleDeregister(h);

    /* 3. fork after initialisation: the child starts from a closed driver
     * (the parent's handle is unknown there), not a deadlock */
    CHECK(check_register_fd(fd, &h).err == 0, "register for fork");
    pid_t pid = fork();
    if (pid == 0) {
        unsigned char b[4096];
        ssize_t r = hipFileRead(h, b, sizeof b, 0, 0);
        hipFileError_t e = hipFileDriverOpen();
        int64_t n = hipFileUseCount();
        if (!(r == -1 && e.err == 0 && n == 1)) {
            fprintf(stderr, "child: read %zd, open %d, count %lld\n", r, e.err, (long long)n);
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    pid_t w = -1;
    for (int i = 0; i < 500 && w <= 0; i++) {
        w = waitpid(pid, &status, WNOHANG);
        if (w == 0) usleep(10000);
    }
    if (w <= 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK(w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child: w=%d status=%d", w, status);
    /* the parent keeps working */
    unsigned char b[4096];
    CHECK(hipFileRead(h, b, sizeof b, 4096, 0) == 4096 && memcmp(b, data + 4096, 4096) == 0, "parent after fork");

    /* 4. exit with work in flight happens below: a thread is mid-read at return */
    pthread_t last;
    pthread_create(&last, NULL, reader_long, h);
    unlink(path);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    fflush(stdout);
    if (g_fail) return 1;
    exit(0); /* exit() with the read still running must not crash or hang */
    (void)crashes_avoided;
}
