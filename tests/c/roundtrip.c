/*
 * roundtrip.c: data integrity of hipFileRead/hipFileWrite with host memory
 * (spec/hipfile-abi.md 5.5; checklist IO-02, IO-03, IO-11, IO-12, IO-14,
 * IO-15, IO-16; project decision "host memory accepted everywhere").
 *
 * A temporary file of 48 MiB of random bytes is written and read through
 * hipFile at random file offsets, with random sizes (1 byte to 20 MiB,
 * including sizes that are not multiples of 4096 and sizes above the 16 MiB
 * bounce-chunk size), random buffer offsets and three kinds of buffers:
 * malloc, posix_memalign(4096) and deliberately misaligned (+1..+511 bytes
 * from a 4096-aligned allocation), each registered with hipFileBufRegister or
 * not. Every byte written is checked with pread on an independent descriptor,
 * every byte read is compared with pread of the same range, bytes of the
 * buffer outside the requested range must be left untouched, and an
 * in-memory model of the whole file is compared with the file at the end of
 * each pass (so a write that lands in the wrong place is caught too).
 *
 * Two passes: the handle is registered from a buffered descriptor, then from
 * an O_DIRECT descriptor. Where open(O_DIRECT) fails with EINVAL (tmpfs before
 * Linux 6.6, some FUSE filesystems) the O_DIRECT pass is skipped with a
 * visible SKIP line. Each pass also checks EOF behaviour (short count at EOF,
 * 0 past EOF, 0 for size 0, an empty file), rejection of negative offsets
 * (-5022, the value the spec gives for develop, IO-02), appends and writes
 * past EOF.
 *
 * Usage: roundtrip [DIR]   (DIR, else $TMPDIR, else /tmp)
 * Environment: HIPFILE_TEST_SEED (default 0x68697066696c65; decimal or 0x hex),
 *              HIPFILE_TEST_ITERS (random operations per pass, default 60).
 * Prints the seed, one line per failed check, and "N passed, M failed".
 */

#define _GNU_SOURCE

#include "hipfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

#define FILE_BYTES  (48 * MiB)
#define SHADOW_CAP  (FILE_BYTES + 2 * MiB) /* room for the append and past-EOF writes */
#define MAX_OP_SIZE (20 * MiB) /* largest random operation */
#define TMP_BYTES   (40 * MiB) /* pread scratch: larger than any operation (the largest fixed one is 33 MiB) */

/* ---- checks ---------------------------------------------------------------- */

static int  g_passed, g_failed;
static char g_ctx[256] = "setup";

#define MAX_PRINTED_FAILURES 200

static void check_impl(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
{
    if (ok) {
        g_passed++;
        return;
    }
    g_failed++;
    if (g_failed > MAX_PRINTED_FAILURES) {
        if (g_failed == MAX_PRINTED_FAILURES + 1)
            printf("(more failures not printed)\n");
        return;
    }
    printf("%s:%d: [%s] FAIL: %s: ", file, line, g_ctx, expr);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

#define CHECK(cond, ...) check_impl((cond) ? 1 : 0, __FILE__, __LINE__, #cond, __VA_ARGS__)

#define CHECK_ERR(expr, code)                                                                          \
    do {                                                                                               \
        hipFileError_t e_ = (expr);                                                                    \
        check_impl(e_.err == (code) && e_.hip_drv_err == hipSuccess, __FILE__, __LINE__, #expr,        \
                   "got {%d, %d}, expected {%d, 0}", (int)e_.err, (int)e_.hip_drv_err, (int)(code));  \
    } while (0)

#define CHECK_SSIZE(expr, want)                                                                             \
    do {                                                                                                    \
        errno          = 0;                                                                                 \
        ssize_t got_   = (expr);                                                                            \
        int     errno_ = errno;                                                                             \
        ssize_t want_  = (want);                                                                            \
        check_impl(got_ == want_, __FILE__, __LINE__, #expr, "got %zd (errno %d: %s), expected %zd", got_,  \
                   errno_, strerror(errno_), want_);                                                        \
    } while (0)

static void set_ctx(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_ctx, sizeof g_ctx, fmt, ap);
    va_end(ap);
}

/* ---- deterministic random numbers (splitmix64) ---------------------------------- */

static uint64_t g_rng;

static uint64_t rng_next(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static uint64_t rng_range(uint64_t lo, uint64_t hi)
{
    return lo + rng_next() % (hi - lo + 1);
}

static void fill_random(unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = rng_next();
        memcpy(p + i, &v, 8);
    }
    if (i < n) {
        uint64_t v = rng_next();
        memcpy(p + i, &v, n - i);
    }
}

/* ---- the model of the file ------------------------------------------------------ */

static unsigned char *g_shadow;   /* expected file content */
static size_t         g_file_len; /* expected file length */
static int            g_verify_fd = -1; /* independent buffered descriptor */
static unsigned char *g_tmp;      /* pread scratch, TMP_BYTES */

/* Index of the first differing byte of a and b over n bytes, or -1. */
static long long first_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
    if (memcmp(a, b, n) == 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long long)i;
    return -1;
}

static size_t count_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += a[i] != b[i];
    return c;
}

static ssize_t pread_full(int fd, unsigned char *dst, size_t n, off_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, dst + done, n - done, off + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* Compare the file range [off, off + n) with the model. */
static void verify_range_against_shadow(off_t off, size_t n, const char *what)
{
    if ((size_t)off >= g_file_len)
        return;
    if ((size_t)off + n > g_file_len)
        n = g_file_len - (size_t)off;
    while (n > 0) {
        size_t  chunk = n < TMP_BYTES ? n : TMP_BYTES;
        ssize_t r     = pread_full(g_verify_fd, g_tmp, chunk, off);
        CHECK(r == (ssize_t)chunk, "%s: pread of [%lld, +%zu) returned %zd", what, (long long)off, chunk, r);
        if (r != (ssize_t)chunk)
            return;
        long long d = first_diff(g_tmp, g_shadow + off, chunk);
        CHECK(d < 0, "%s: file differs from the model at file offset %lld (%zu bytes differ in [%lld, +%zu)): "
                     "file %#x, expected %#x",
              what, (long long)off + d, count_diff(g_tmp, g_shadow + off, chunk), (long long)off, chunk,
              d < 0 ? 0 : g_tmp[d], d < 0 ? 0 : g_shadow[off + d]);
        off += (off_t)chunk;
        n -= chunk;
    }
}

static void verify_whole_file(const char *what)
{
    struct stat st = {0};
    CHECK(fstat(g_verify_fd, &st) == 0 && (size_t)st.st_size == g_file_len, "%s: file size %lld, expected %zu",
          what, (long long)st.st_size, g_file_len);
    verify_range_against_shadow(0, g_file_len, what);
}

/* ---- test buffers ------------------------------------------------------------------ */

enum buf_kind { BUF_MALLOC, BUF_ALIGNED, BUF_MISALIGNED, BUF_KINDS };
static const char *const k_kind_name[BUF_KINDS] = {"malloc", "aligned4096", "misaligned"};

struct tbuf {
    void          *alloc;
    unsigned char *base; /* what is passed to hipFile */
    size_t         len;
    int            registered;
    size_t         misalign;
};

static void tbuf_make(struct tbuf *b, enum buf_kind kind, size_t len, int reg)
{
    memset(b, 0, sizeof *b);
    b->len = len;
    switch (kind) {
    case BUF_MALLOC:
        b->alloc = malloc(len);
        b->base  = b->alloc;
        break;
    case BUF_ALIGNED:
        if (posix_memalign(&b->alloc, 4096, len) != 0)
            b->alloc = NULL;
        b->base = b->alloc;
        break;
    default:
        b->misalign = (size_t)rng_range(1, 511);
        if (posix_memalign(&b->alloc, 4096, len + b->misalign) != 0)
            b->alloc = NULL;
        b->base = b->alloc ? (unsigned char *)b->alloc + b->misalign : NULL;
        break;
    }
    if (b->alloc == NULL) {
        fprintf(stderr, "out of memory allocating %zu bytes\n", len);
        exit(2);
    }
    if (reg) {
        hipFileError_t e = hipFileBufRegister(b->base, len, 0);
        CHECK(e.err == hipFileSuccess && e.hip_drv_err == hipSuccess,
              "hipFileBufRegister(%s host buffer, %zu bytes): {%d, %d}", k_kind_name[kind], len, (int)e.err,
              (int)e.hip_drv_err);
        b->registered = e.err == hipFileSuccess;
    }
}

static void tbuf_free(struct tbuf *b)
{
    if (b->registered)
        CHECK_ERR(hipFileBufDeregister(b->base), hipFileSuccess);
    free(b->alloc);
    b->alloc = NULL;
}

/* Byte i of the canary pattern that fills buffer space hipFile must not touch. */
static unsigned char canary(size_t i)
{
    return (unsigned char)(0xa5u ^ (i * 29u) ^ (i >> 11));
}

static void fill_canary(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = canary(i);
}

/* First byte in [from, to) of p that is not the canary, or -1. */
static long long canary_broken(const unsigned char *p, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (p[i] != canary(i))
            return (long long)i;
    return -1;
}

/* ---- operations -------------------------------------------------------------------- */

static const char *g_pass_name;

/* hipFileWrite of `size` random bytes from buffer offset boff to file offset foff. */
static void op_write(hipFileHandle_t fh, enum buf_kind kind, int reg, size_t size, off_t foff, size_t boff)
{
    set_ctx("%s write size=%zu foff=%lld boff=%zu buf=%s%s", g_pass_name, size, (long long)foff, boff,
            k_kind_name[kind], reg ? "+registered" : "");
    size_t      guard = (size_t)rng_range(0, 4096);
    struct tbuf b;
    tbuf_make(&b, kind, boff + size + guard, reg);
    fill_random(b.base, b.len);
    unsigned char *before = malloc(b.len);
    memcpy(before, b.base, b.len);

    errno     = 0;
    ssize_t n = hipFileWrite(fh, b.base, size, foff, (hoff_t)boff);
    int     e = errno;
    CHECK(n == (ssize_t)size, "hipFileWrite returned %zd (errno %d: %s)", n, e, strerror(e));
    CHECK(memcmp(before, b.base, b.len) == 0, "hipFileWrite modified its source buffer");
    if (n > 0) {
        size_t done = (size_t)n;
        if ((size_t)foff > g_file_len) /* a hole reads as zeros */
            memset(g_shadow + g_file_len, 0, (size_t)foff - g_file_len);
        memcpy(g_shadow + foff, before + boff, done);
        if ((size_t)foff + done > g_file_len)
            g_file_len = (size_t)foff + done;
        /* The written bytes, compared with the source buffer... */
        ssize_t r = pread_full(g_verify_fd, g_tmp, done, foff);
        CHECK(r == (ssize_t)done, "pread after write returned %zd", r);
        if (r == (ssize_t)done) {
            long long d = first_diff(g_tmp, before + boff, done);
            CHECK(d < 0, "written data wrong at file offset %lld (%zu of %zu bytes differ): file %#x, source %#x",
                  (long long)foff + d, count_diff(g_tmp, before + boff, done), done, d < 0 ? 0 : g_tmp[d],
                  d < 0 ? 0 : before[boff + (size_t)d]);
        }
        /* ...and 64 KiB either side, compared with the model. */
        off_t lo = foff > (off_t)(64 * KiB) ? foff - (off_t)(64 * KiB) : 0;
        verify_range_against_shadow(lo, (size_t)(foff - lo), "bytes before the write");
        verify_range_against_shadow(foff + (off_t)done, 64 * KiB, "bytes after the write");
    }
    free(before);
    tbuf_free(&b);
}

/* hipFileRead of `size` bytes at file offset foff into buffer offset boff. */
static void op_read(hipFileHandle_t fh, enum buf_kind kind, int reg, size_t size, off_t foff, size_t boff)
{
    set_ctx("%s read size=%zu foff=%lld boff=%zu buf=%s%s", g_pass_name, size, (long long)foff, boff,
            k_kind_name[kind], reg ? "+registered" : "");
    size_t      guard = 4096;
    struct tbuf b;
    tbuf_make(&b, kind, boff + size + guard, reg);
    fill_canary(b.base, b.len);

    size_t expect = (size_t)foff >= g_file_len ? 0 : g_file_len - (size_t)foff;
    if (expect > size)
        expect = size;

    errno     = 0;
    ssize_t n = hipFileRead(fh, b.base, size, foff, (hoff_t)boff);
    int     e = errno;
    CHECK(n == (ssize_t)expect, "hipFileRead returned %zd (errno %d: %s), expected %zu", n, e, strerror(e), expect);
    if (n > 0 && (size_t)n <= size) {
        size_t  got = (size_t)n;
        ssize_t r   = pread_full(g_verify_fd, g_tmp, got, foff);
        CHECK(r == (ssize_t)got, "pread of the same range returned %zd", r);
        if (r == (ssize_t)got) {
            long long d = first_diff(b.base + boff, g_tmp, got);
            CHECK(d < 0, "read data wrong at file offset %lld (%zu of %zu bytes differ): got %#x, pread %#x",
                  (long long)foff + d, count_diff(b.base + boff, g_tmp, got), got, d < 0 ? 0 : b.base[boff + d],
                  d < 0 ? 0 : g_tmp[d]);
            d = first_diff(g_tmp, g_shadow + foff, got);
            CHECK(d < 0, "pread disagrees with the model at file offset %lld", (long long)foff + d);
        }
    }
    /* Nothing outside [boff, boff + size) may change. */
    long long c = canary_broken(b.base, 0, boff);
    CHECK(c < 0, "buffer byte %lld before buffer_offset was overwritten", c);
    c = canary_broken(b.base, boff + size, b.len);
    CHECK(c < 0, "buffer byte %lld after buffer_offset + size was overwritten", c);
    tbuf_free(&b);
}

static size_t pick_size(void)
{
    switch (rng_range(0, 9)) {
    case 0: return (size_t)rng_range(1, 16);
    case 1: return (size_t)rng_range(1, 4095);
    case 2: return 4096 * (size_t)rng_range(1, 256);
    case 3: return 4096 * (size_t)rng_range(1, 64) + (size_t)rng_range(1, 4095);
    case 4: return (size_t)rng_range(64 * KiB, 4 * MiB);
    case 5: return 16 * MiB - 4096 + (size_t)rng_range(0, 8192); /* around the 16 MiB chunk size */
    case 6: return (size_t)rng_range(16 * MiB + 1, MAX_OP_SIZE);
    case 7: return (size_t)rng_range(1, MiB);
    default: return (size_t)rng_range(1, 8 * MiB);
    }
}

static off_t pick_file_offset(size_t size)
{
    uint64_t hi  = FILE_BYTES - size;
    uint64_t off = rng_range(0, hi);
    switch (rng_range(0, 3)) {
    case 0: off &= ~(uint64_t)4095; break; /* page aligned */
    case 1: off &= ~(uint64_t)511; break;  /* sector aligned */
    default: break;                        /* anything */
    }
    return (off_t)off;
}

static size_t pick_buffer_offset(void)
{
    switch (rng_range(0, 6)) {
    case 0:
    case 1:
    case 2: return 0;
    case 3: return (size_t)rng_range(1, 4095);
    case 4: return 4096 * (size_t)rng_range(1, 4);
    default: return (size_t)rng_range(0, 65535);
    }
}

/* ---- one pass over one handle ---------------------------------------------------- */

static void run_pass(const char *name, const char *path, const char *empty_path, int flags, int iters)
{
    g_pass_name = name;
    set_ctx("%s setup", name);
    int fd = open(path, flags);
    if (fd < 0 && (flags & O_DIRECT) && errno == EINVAL) {
        printf("SKIP %s pass: open(O_DIRECT) failed with EINVAL (this filesystem does not support O_DIRECT; "
               "run with a directory on ext4/xfs to cover it)\n",
               name);
        return;
    }
    if (fd < 0) {
        CHECK(fd >= 0, "open(%s, %#x): %s", path, flags, strerror(errno));
        return;
    }
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type             = hipFileHandleTypeOpaqueFD;
    d.handle.fd        = fd;
    hipFileHandle_t fh = NULL;
    CHECK_ERR(hipFileHandleRegister(&fh, &d), hipFileSuccess);
    if (fh == NULL) {
        close(fd);
        return;
    }

    /* Fixed sizes, including the edges of pages and of the 16 MiB bounce chunk. */
    static const size_t fixed_sizes[] = {1,           2,           511,          512,          4095,
                                         4096,        4097,        8191,         65537,        MiB,
                                         MiB + 1,     16 * MiB - 1, 16 * MiB,    16 * MiB + 1, 16 * MiB + 4096 + 3,
                                         33 * MiB + 5};
    for (size_t i = 0; i < sizeof fixed_sizes / sizeof fixed_sizes[0]; i++) {
        size_t size = fixed_sizes[i];
        off_t  foff = pick_file_offset(size);
        op_write(fh, (enum buf_kind)rng_range(0, BUF_KINDS - 1), (int)rng_range(0, 1), size, foff,
                 pick_buffer_offset());
        op_read(fh, (enum buf_kind)rng_range(0, BUF_KINDS - 1), (int)rng_range(0, 1), size, foff,
                pick_buffer_offset());
    }

    /* Every buffer kind x registered or not x a set of buffer offsets (IO-16). */
    static const size_t boffs[] = {0, 1, 511, 4095, 4096 + 7};
    for (int kind = 0; kind < BUF_KINDS; kind++)
        for (int reg = 0; reg <= 1; reg++)
            for (size_t j = 0; j < sizeof boffs / sizeof boffs[0]; j++) {
                size_t size = (size_t)rng_range(1, 300 * KiB);
                off_t  foff = pick_file_offset(size);
                op_write(fh, (enum buf_kind)kind, reg, size, foff, boffs[j]);
                op_read(fh, (enum buf_kind)kind, reg, size, pick_file_offset(size), boffs[j]);
            }

    /* Random operations. */
    for (int it = 0; it < iters; it++) {
        size_t        size = pick_size();
        off_t         foff = pick_file_offset(size);
        size_t        boff = pick_buffer_offset();
        enum buf_kind kind = (enum buf_kind)rng_range(0, BUF_KINDS - 1);
        int           reg  = (int)rng_range(0, 1);
        if (rng_range(0, 1))
            op_write(fh, kind, reg, size, foff, boff);
        else
            op_read(fh, kind, reg, size, foff, boff);
    }
    set_ctx("%s after random operations", name);
    verify_whole_file("whole file after random operations");

    /* EOF behaviour (IO-11, IO-12). */
    {
        size_t F = g_file_len;
        op_read(fh, BUF_ALIGNED, 0, 4096, (off_t)F - 100, 0);     /* short count: 100 */
        op_read(fh, BUF_MISALIGNED, 1, 8192, (off_t)F - 3000, 5); /* unaligned, spans EOF */
        op_read(fh, BUF_MALLOC, 0, 1, (off_t)F - 1, 0);           /* the last byte */
        op_read(fh, BUF_MALLOC, 1, 16, (off_t)F, 0);              /* at EOF: 0 */
        op_read(fh, BUF_ALIGNED, 0, 4096, (off_t)F + 12345, 0);   /* past EOF: 0 */
        op_read(fh, BUF_MALLOC, 0, 17 * MiB, (off_t)F - 5 * MiB - 3, 0); /* large, spans EOF */
        set_ctx("%s size 0", name);
        unsigned char one[16];
        CHECK_SSIZE(hipFileRead(fh, one, 0, 0, 0), 0);
        CHECK_SSIZE(hipFileRead(fh, one, 0, (hoff_t)F + 100, 0), 0);
        CHECK_SSIZE(hipFileWrite(fh, one, 0, 0, 0), 0);
        CHECK_SSIZE(hipFileWrite(fh, one, 0, (hoff_t)F + 100, 0), 0);

        set_ctx("%s empty file", name);
        int efd = open(empty_path, flags);
        CHECK(efd >= 0, "open(empty file): %s", strerror(errno));
        if (efd >= 0) {
            hipFileDescr_t ed;
            memset(&ed, 0, sizeof ed);
            ed.type             = hipFileHandleTypeOpaqueFD;
            ed.handle.fd        = efd;
            hipFileHandle_t efh = NULL;
            CHECK_ERR(hipFileHandleRegister(&efh, &ed), hipFileSuccess);
            if (efh != NULL) {
                unsigned char *big = malloc(MiB);
                CHECK_SSIZE(hipFileRead(efh, big, MiB, 0, 0), 0);
                CHECK_SSIZE(hipFileRead(efh, big, 1, 0, 0), 0);
                CHECK_SSIZE(hipFileRead(efh, big, 4096, 4096, 0), 0);
                free(big);
                hipFileHandleDeregister(efh);
            }
            close(efd);
        }
    }

    /* Negative offsets are rejected with -5022 (IO-02) and change nothing. */
    {
        set_ctx("%s negative offsets", name);
        unsigned char *buf = malloc(8192);
        memset(buf, 0x77, 8192);
        CHECK_SSIZE(hipFileRead(fh, buf, 16, -1, 0), -hipFileInvalidValue);
        CHECK_SSIZE(hipFileRead(fh, buf, 16, INT64_MIN, 0), -hipFileInvalidValue);
        CHECK_SSIZE(hipFileRead(fh, buf, 16, 0, -1), -hipFileInvalidValue);
        CHECK_SSIZE(hipFileRead(fh, buf, 16, -4096, -4096), -hipFileInvalidValue);
        CHECK_SSIZE(hipFileWrite(fh, buf, 16, -1, 0), -hipFileInvalidValue);
        CHECK_SSIZE(hipFileWrite(fh, buf, 16, INT64_MIN, 0), -hipFileInvalidValue);
        CHECK_SSIZE(hipFileWrite(fh, buf, 16, 0, -1), -hipFileInvalidValue);
        CHECK_SSIZE(hipFileWrite(fh, buf, 4096, -4096, 0), -hipFileInvalidValue);
        CHECK(buf[0] == 0x77 && buf[8191] == 0x77, "rejected reads changed the buffer");
        free(buf);
        verify_whole_file("whole file after rejected writes");
    }

    /* Append at EOF and a write past EOF leaving a hole (IO-15). */
    {
        size_t F = g_file_len;
        op_write(fh, BUF_MISALIGNED, 0, 5000, (off_t)F, 3);
        op_read(fh, BUF_MALLOC, 0, 5000, (off_t)F, 0);
        size_t F2 = g_file_len;
        op_write(fh, BUF_ALIGNED, 1, 100, (off_t)F2 + 8192, 0);
        op_read(fh, BUF_ALIGNED, 0, 8192 + 100 + 4096, (off_t)F2 - 10, 0); /* data, the hole, the new bytes */
        set_ctx("%s after appends", name);
        verify_whole_file("whole file after appends");
        /* Back to the standard size for the next pass. */
        CHECK(ftruncate(g_verify_fd, (off_t)FILE_BYTES) == 0 || ftruncate(fd, (off_t)FILE_BYTES) == 0,
              "ftruncate: %s", strerror(errno));
        g_file_len = FILE_BYTES;
    }

    set_ctx("%s teardown", name);
    verify_whole_file("whole file at the end of the pass");
    hipFileHandleDeregister(fh);
    close(fd);
}

/* ---- main -------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *dir = argc > 1 ? argv[1] : getenv("TMPDIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";

    uint64_t    seed = 0x68697066696c65ull; /* "hipfile" */
    const char *s    = getenv("HIPFILE_TEST_SEED");
    if (s != NULL && s[0] != '\0')
        seed = strtoull(s, NULL, 0);
    int         iters = 60;
    const char *it    = getenv("HIPFILE_TEST_ITERS");
    if (it != NULL && it[0] != '\0')
        iters = atoi(it);
    g_rng = seed;
    printf("roundtrip: seed 0x%" PRIx64 " (set HIPFILE_TEST_SEED to reproduce), %d random operations per pass, "
           "directory %s\n",
           seed, iters, dir);

    size_t plen  = strlen(dir) + 40;
    char  *path  = malloc(plen);
    char  *empty = malloc(plen);
    snprintf(path, plen, "%s/hipfile-roundtrip-XXXXXX", dir);
    snprintf(empty, plen, "%s/hipfile-roundtrip-empty-XXXXXX", dir);
    int wfd = mkstemp(path);
    int efd = mkstemp(empty);
    if (wfd < 0 || efd < 0) {
        fprintf(stderr, "mkstemp in %s: %s\n", dir, strerror(errno));
        return 2;
    }
    close(efd);

    g_shadow = malloc(SHADOW_CAP);
    g_tmp    = malloc(TMP_BYTES);
    if (g_shadow == NULL || g_tmp == NULL) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    fill_random(g_shadow, FILE_BYTES);
    g_file_len = FILE_BYTES;
    for (size_t done = 0; done < FILE_BYTES;) {
        ssize_t w = pwrite(wfd, g_shadow + done, FILE_BYTES - done, (off_t)done);
        if (w <= 0) {
            fprintf(stderr, "initial pwrite: %s\n", strerror(errno));
            return 2;
        }
        done += (size_t)w;
    }
    close(wfd);
    g_verify_fd = open(path, O_RDWR);
    if (g_verify_fd < 0) {
        fprintf(stderr, "open %s: %s\n", path, strerror(errno));
        return 2;
    }

    CHECK_ERR(hipFileDriverOpen(), hipFileSuccess);

    run_pass("buffered", path, empty, O_RDWR, iters);
    run_pass("O_DIRECT", path, empty, O_RDWR | O_DIRECT, iters);

    set_ctx("end");
    CHECK_ERR(hipFileDriverClose(), hipFileSuccess);
    CHECK(hipFileUseCount() == 0, "use count %lld after close", (long long)hipFileUseCount());

    close(g_verify_fd);
    unlink(path);
    unlink(empty);
    free(path);
    free(empty);
    free(g_shadow);
    free(g_tmp);

    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
