/* Data integrity under concurrency, host memory: four threads, each owning
 * an 8 MiB region of one 32 MiB file, write, read and batch-read random
 * ranges of their region for a bounded time, through two handles of the
 * same file (one registered from a buffered descriptor, one from an O_DIRECT
 * descriptor), into unaligned, page-aligned and registered buffers, while a
 * fifth thread drops random ranges of the file from the page cache, so that
 * requests meet every mix of cached and uncached pages. Every read is
 * checked against an in-memory model of the file (and the bytes after it in
 * the buffer must stay untouched); afterwards the file itself must equal
 * the model. The single-threaded round trip is roundtrip.c.
 *
 *   concurrent [DIR]   the file goes to DIR, else $TMPDIR, else /tmp
 *   HIPFILE_TEST_SECONDS  how long the threads run (default 5)
 *   HIPFILE_TEST_SEED     the random seed (printed first)
 */
#define _GNU_SOURCE
#include <hipfile.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define THREADS 4
#define REGION (8u << 20)
#define MAX_IO (3u << 20)
#define BATCH 8
#define BATCH_IO (1u << 20)
#define REG_BYTES (4u << 20)
#define GUARD 16

static hipFileHandle_t g_buffered, g_direct;
static unsigned char *g_model;
static double g_seconds = 5;
static uint64_t g_seed;
static atomic_int g_stop;
static atomic_long g_ops;
static pthread_mutex_t g_check_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_fd;

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Sizes around every path's edges: tiny, page multiples, up to the inline
 * limits, 64 KiB multiples, whole MiB and odd sizes above a chunk piece. */
static size_t pick_size(uint64_t *s) {
    switch (next(s) % 6) {
    case 0:
        return 1 + next(s) % 512;
    case 1:
        return 4096 * (1 + next(s) % 4);
    case 2:
        return 1 + next(s) % (256u << 10);
    case 3:
        return (1 + next(s) % 16) * 65536;
    case 4:
        return 1 + next(s) % MAX_IO;
    default:
        return (size_t)(1 + next(s) % 3) << 20;
    }
}

/* CHECK from several threads: its counters are not atomic. */
#define TCHECK(c, ...)                                 \
    do {                                               \
        pthread_mutex_lock(&g_check_lock);             \
        CHECK(c, __VA_ARGS__);                         \
        pthread_mutex_unlock(&g_check_lock);           \
    } while (0)

static size_t first_difference(const unsigned char *a, const unsigned char *b, size_t n) {
    size_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

struct worker {
    int id;
    uint64_t seed;
};

static void batch_reads(int t, uint64_t *s, size_t base, hipFileBatchHandle_t batch, unsigned char *buf) {
    unsigned k = 1 + (unsigned)(next(s) % BATCH);
    hipFileIOParams_t p[BATCH];
    size_t lens[BATCH], offs[BATCH];
    memset(buf, 0x5a, (size_t)BATCH * BATCH_IO);
    for (unsigned i = 0; i < k; i++) {
        lens[i] = 1 + next(s) % BATCH_IO;
        offs[i] = base + next(s) % (REGION - lens[i] + 1);
        memset(&p[i], 0, sizeof p[i]);
        p[i].mode = hipFileBatch;
        p[i].u.batch.devPtr_base = buf;
        p[i].u.batch.file_offset = (int64_t)offs[i];
        p[i].u.batch.devPtr_offset = (int64_t)i * BATCH_IO;
        p[i].u.batch.size = lens[i];
        p[i].fh = (next(s) & 1) ? g_buffered : g_direct;
        p[i].opcode = hipFileBatchRead;
        p[i].cookie = (void *)(uintptr_t)i;
    }
    hipFileError_t e = hipFileBatchIOSubmit(batch, k, p, 0);
    TCHECK(e.err == hipFileSuccess, "thread %d: batch submit of %u: %d", t, k, e.err);
    if (e.err != hipFileSuccess) return;
    unsigned got = 0;
    while (got < k) {
        hipFileIOEvents_t ev[BATCH];
        unsigned nr = BATCH;
        struct timespec timeout = {30, 0};
        e = hipFileBatchIOGetStatus(batch, 1, &nr, ev, &timeout);
        TCHECK(e.err == hipFileSuccess && nr > 0, "thread %d: batch status: %d, %u events after %u of %u",
               t, e.err, nr, got, k);
        if (e.err != hipFileSuccess || nr == 0) return;
        for (unsigned j = 0; j < nr; j++) {
            unsigned i = (unsigned)(uintptr_t)ev[j].cookie;
            TCHECK(i < k && ev[j].status == hipFileComplete && ev[j].ret == lens[i],
                   "thread %d: batch read %u of %zu at %zu: status %d, ret %zd", t, i, lens[i % BATCH],
                   offs[i % BATCH], ev[j].status, (ssize_t)ev[j].ret);
            if (i < k && ev[j].ret == lens[i]) {
                const unsigned char *b = buf + (size_t)i * BATCH_IO;
                TCHECK(memcmp(b, g_model + offs[i], lens[i]) == 0,
                       "thread %d: batch read of %zu at %zu differs at byte %zu", t, lens[i], offs[i],
                       first_difference(b, g_model + offs[i], lens[i]));
            }
        }
        got += nr;
    }
}

static void *work(void *arg) {
    struct worker *w = arg;
    int t = w->id;
    uint64_t s = w->seed;
    size_t base = (size_t)t * REGION;
    unsigned char *raw = malloc(MAX_IO + 2 * 4096 + GUARD);
    unsigned char *reg = aligned_alloc(4096, REG_BYTES);
    unsigned char *batch_buf = malloc((size_t)BATCH * BATCH_IO);
    if (!raw || !reg || !batch_buf) {
        TCHECK(0, "thread %d: out of memory", t);
        return NULL;
    }
    hipFileError_t e = hipFileBufRegister(reg, REG_BYTES, 0);
    TCHECK(e.err == hipFileSuccess, "thread %d: hipFileBufRegister: %d", t, e.err);
    hipFileBatchHandle_t batch = NULL;
    e = hipFileBatchIOSetUp(&batch, BATCH);
    TCHECK(e.err == hipFileSuccess, "thread %d: hipFileBatchIOSetUp: %d", t, e.err);
    while (!atomic_load(&g_stop)) {
        unsigned op = (unsigned)(next(&s) % 10);
        size_t len = pick_size(&s);
        size_t off = base + next(&s) % (REGION - len + 1);
        if (next(&s) % 3 == 0) off &= ~(size_t)4095;
        hipFileHandle_t h = (next(&s) & 1) ? g_buffered : g_direct;
        const char *hname = h == g_buffered ? "buffered" : "O_DIRECT";
        size_t skew = (next(&s) & 1) ? 0 : next(&s) % 4096;
        unsigned char *buf = (unsigned char *)(((uintptr_t)raw + 4095) & ~(uintptr_t)4095) + skew;
        atomic_fetch_add(&g_ops, 1);
        if (op < 3) {
            for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)next(&s);
            ssize_t n = hipFileWrite(h, buf, len, (hoff_t)off, 0);
            TCHECK(n == (ssize_t)len, "thread %d: %s write of %zu at %zu (buffer +%zu): %zd (errno %d)", t,
                   hname, len, off, skew, n, errno);
            if (n == (ssize_t)len) memcpy(g_model + off, buf, len);
        } else if (op < 7) {
            memset(buf, 0xa5, len + GUARD);
            ssize_t n = hipFileRead(h, buf, len, (hoff_t)off, 0);
            TCHECK(n == (ssize_t)len, "thread %d: %s read of %zu at %zu (buffer +%zu): %zd (errno %d)", t,
                   hname, len, off, skew, n, errno);
            if (n != (ssize_t)len) continue;
            TCHECK(memcmp(buf, g_model + off, len) == 0, "thread %d: %s read of %zu at %zu differs at byte %zu",
                   t, hname, len, off, first_difference(buf, g_model + off, len));
            int clean = 1;
            for (int i = 0; i < GUARD; i++) clean &= buf[len + i] == 0xa5;
            TCHECK(clean, "thread %d: %s read of %zu at %zu wrote past its end", t, hname, len, off);
        } else if (op < 8) {
            size_t l = len > (2u << 20) ? (2u << 20) : len;
            size_t boff = next(&s) % (REG_BYTES - l + 1);
            ssize_t n = hipFileRead(h, reg, l, (hoff_t)off, (hoff_t)boff);
            TCHECK(n == (ssize_t)l, "thread %d: %s read of %zu at %zu into the registered buffer +%zu: %zd", t,
                   hname, l, off, boff, n);
            if (n == (ssize_t)l)
                TCHECK(memcmp(reg + boff, g_model + off, l) == 0,
                       "thread %d: %s read of %zu at %zu into the registered buffer differs at byte %zu", t,
                       hname, l, off, first_difference(reg + boff, g_model + off, l));
        } else if (batch) {
            batch_reads(t, &s, base, batch, batch_buf);
        }
    }
    if (batch) hipFileBatchIODestroy(batch);
    e = hipFileBufDeregister(reg);
    TCHECK(e.err == hipFileSuccess, "thread %d: hipFileBufDeregister: %d", t, e.err);
    free(batch_buf);
    free(reg);
    free(raw);
    return NULL;
}

/* Drops random ranges of the file from the page cache while the workers run. */
static void *evict(void *arg) {
    uint64_t s = *(uint64_t *)arg;
    size_t size = (size_t)THREADS * REGION;
    while (!atomic_load(&g_stop)) {
        size_t len = (size_t)(1 + next(&s) % 64) << 16;
        size_t off = (next(&s) % (size / 65536)) << 16;
        (void)posix_fadvise(g_fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    const char *sec = getenv("HIPFILE_TEST_SECONDS");
    if (sec && *sec) g_seconds = atof(sec);
    const char *seed = getenv("HIPFILE_TEST_SEED");
    g_seed = seed && *seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
    if (!g_seed) g_seed = 1;
    printf("seed 0x%llx, %.1f s\n", (unsigned long long)g_seed, g_seconds);
    size_t size = (size_t)THREADS * REGION;
    g_model = malloc(size);
    unsigned char *back = malloc(size);
    if (!g_model || !back) return 2;
    uint64_t s = g_seed;
    for (size_t i = 0; i < size; i++) g_model[i] = (unsigned char)next(&s);
    char path[4096];
    snprintf(path, sizeof path, "%s/hipfile-concurrent-%d.dat", dir, (int)getpid());
    g_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (g_fd < 0) {
        printf("cannot create %s: %s\n", path, strerror(errno));
        return 2;
    }
    CHECK(pwrite(g_fd, g_model, size, 0) == (ssize_t)size, "writing the initial file");
    CHECK(fsync(g_fd) == 0, "fsync");
    int dfd = open(path, O_RDWR | O_DIRECT);
    if (dfd < 0) {
        /* No O_DIRECT here (tmpfs before Linux 6.6): both handles buffered. */
        printf("SKIP O_DIRECT handle: %s; both handles are buffered\n", strerror(errno));
        dfd = open(path, O_RDWR);
    }
    hipFileError_t e = hipFileDriverOpen();
    CHECK(e.err == hipFileSuccess, "hipFileDriverOpen: %d", e.err);
    e = check_register_fd(g_fd, &g_buffered);
    CHECK(e.err == hipFileSuccess, "register the buffered descriptor: %d", e.err);
    e = check_register_fd(dfd, &g_direct);
    CHECK(e.err == hipFileSuccess, "register the O_DIRECT descriptor: %d", e.err);
    if (g_fail) return check_summary();

    pthread_t th[THREADS], evictor;
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i].id = i;
        w[i].seed = g_seed * (uint64_t)(2 * i + 3) | 1;
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    uint64_t evict_seed = g_seed ^ 0x5bd1e995u;
    pthread_create(&evictor, NULL, evict, &evict_seed);
    double end = now() + g_seconds;
    while (now() < end) {
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    atomic_store(&g_stop, 1);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    pthread_join(evictor, NULL);

    hipFileHandleDeregister(g_buffered);
    hipFileHandleDeregister(g_direct);
    e = hipFileDriverClose();
    CHECK(e.err == hipFileSuccess, "hipFileDriverClose: %d", e.err);
    int rfd = open(path, O_RDONLY);
    CHECK(rfd >= 0 && pread(rfd, back, size, 0) == (ssize_t)size, "reading the file back");
    CHECK(memcmp(back, g_model, size) == 0, "the file differs from the model at byte %zu",
          first_difference(back, g_model, size));
    printf("%ld operations\n", (long)atomic_load(&g_ops));
    close(rfd);
    close(dfd);
    close(g_fd);
    unlink(path);
    free(back);
    free(g_model);
    return check_summary();
}
