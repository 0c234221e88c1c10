/*
 * api.c: every function of NVIDIA's cufile.h 1.15, compiled against that header
 * and run against hipfile-rs's libcufile.so.0 on host memory (no GPU needed):
 * error codes for bad input, the driver and parameter lifecycle, synchronous
 * reads and writes checked against pread, batches, stream calls on the NULL
 * stream (synchronous in cuFile), the statistics, the POSIX pool slabs, and the
 * places where cuFile's semantics differ from hipFile's (docs/cufile.md lists
 * them; each check below names the one it pins).
 *
 * Usage: api [DIR]   (files go to DIR, else $TMPDIR, else /tmp)
 * Prints one line per failed check and "N passed, M failed"; exits 0 only when
 * nothing failed. Sections run in a fixed order from a closed driver.
 */
#define _GNU_SOURCE
#include <cufile.h>

#include "../c/check.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHECK_ERR(expr, code)                                                                           \
    do {                                                                                                \
        CUfileError_t e_ = (expr);                                                                      \
        CHECK(e_.err == (code) && e_.cu_err == 0, "%s: got {%d, %d}, expected {%d, 0}", #expr,             \
              (int)e_.err, (int)e_.cu_err, (int)(code));                                                \
    } while (0)
#define CHECK_OK(expr) CHECK_ERR(expr, CU_FILE_SUCCESS)
#define CHECK_SZ(expr, want)                                                                  \
    do {                                                                                      \
        ssize_t n_ = (expr);                                                                  \
        CHECK(n_ == (ssize_t)(want), "%s: got %zd, expected %zd (errno %d)", #expr, n_,         \
              (ssize_t)(want), errno);                                                          \
    } while (0)

static char g_dir[3072];

static void rnd_fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

/* A new file of `size` random bytes (seed), opened read-write. */
static int make_file(const char *name, size_t size, uint64_t seed, char *path)
{
    snprintf(path, 4096, "%s/cufile-api-%d-%s", g_dir, (int)getpid(), name);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0) {
        perror(path);
        exit(2);
    }
    unsigned char *b = malloc(size ? size : 1);
    rnd_fill(b, size, seed);
    if (size && pwrite(fd, b, size, 0) != (ssize_t)size) {
        perror("pwrite");
        exit(2);
    }
    free(b);
    return fd;
}

/* The bytes at [off, off + n) of fd equal p. */
static int same_as_file(int fd, const unsigned char *p, size_t n, off_t off)
{
    unsigned char *q = malloc(n ? n : 1);
    ssize_t got = pread(fd, q, n, off);
    int same = got == (ssize_t)n && memcmp(p, q, n) == 0;
    free(q);
    return same;
}

static void close_all(void)
{
    while (cuFileUseCount() > 0)
        if (cuFileDriverClose().err != CU_FILE_SUCCESS) break;
}

/* Deregisters fh, closes and removes its file (fd, path), and closes the driver. */
static void drop_file(CUfileHandle_t fh, int fd, const char *path)
{
    cuFileHandleDeregister(fh);
    close(fd);
    unlink(path);
    close_all();
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "api: watchdog: a call did not return within 300 s (HANG)\n";
    if (write(1, m, sizeof m - 1) < 0) _exit(3);
    _exit(3);
}

/* ---- sections ---------------------------------------------------------------------- */

static void version(void)
{
    g_section = "version";
    int v = 0;
    CHECK_ERR(cuFileGetVersion(NULL), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileGetVersion(&v));
    CHECK(v == 1150, "version %d, expected 1150 (cufile.h 1.15: 1000 * major + 10 * minor)", v);
    CHECK(dlsym(RTLD_DEFAULT, "hipfile_cufile_front") != NULL, "the front's marker is not exported");
}

static void closed_driver(void)
{
    g_section = "closed driver";
    CHECK(cuFileUseCount() == 0, "use count %ld", cuFileUseCount());
    CHECK_ERR(cuFileDriverClose(), CU_FILE_DRIVER_NOT_INITIALIZED);
    /* The symbol binaries built against old headers import. */
    CUfileError_t (*old_close)(void) = (CUfileError_t (*)(void))dlsym(RTLD_DEFAULT, "cuFileDriverClose");
    CHECK(old_close != NULL, "cuFileDriverClose is not exported");
    if (old_close) CHECK_ERR(old_close(), CU_FILE_DRIVER_NOT_INITIALIZED);
    char buf[64];
    errno = 0;
    CHECK_SZ(cuFileRead(NULL, buf, sizeof buf, 0, 0), -1);
    CHECK(errno == EINVAL, "errno %d after a read with the driver closed", errno);
    /* cuFile checks the pointer first (hipFile would say 5006, driver closing). */
    CHECK_ERR(cuFileBufDeregister(NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBufDeregister(buf), CU_FILE_DRIVER_CLOSING);
    /* cuFile: batch set-up needs the open driver (hipFile succeeds). */
    CUfileBatchHandle_t b = NULL;
    CHECK_ERR(cuFileBatchIOSetUp(&b, 4), CU_FILE_INTERNAL_ERROR);
    CHECK(cuFileUseCount() == 0, "batch set-up opened the driver");
    /* cuFile: cancelling NULL is nothing to do. */
    CHECK_OK(cuFileBatchIOCancel(NULL));
    unsigned nr = 0;
    CHECK_ERR(cuFileBatchIOGetStatus(NULL, 0, &nr, NULL, NULL), CU_FILE_INVALID_VALUE);
    cuFileBatchIODestroy(NULL);
    /* Streams need no open driver; an unregistered stream deregisters (cuFile). */
    CHECK_OK(cuFileStreamDeregister(NULL));
    CHECK_OK(cuFileStreamRegister(NULL, 0));
    CHECK_OK(cuFileStreamDeregister(NULL));
    CHECK_OK(cuFileStreamDeregister(NULL));
    CHECK(cuFileUseCount() == 0, "stream calls opened the driver");
    /* Statistics: the level is free, the rest needs the driver. */
    int level = -1;
    CHECK_ERR(cuFileGetStatsLevel(NULL), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileGetStatsLevel(&level));
    CHECK(level == 0, "default statistics level %d", level);
    CHECK_ERR(cuFileSetStatsLevel(4), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetStatsLevel(-1), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileSetStatsLevel(2));
    CHECK_OK(cuFileGetStatsLevel(&level));
    CHECK(level == 2, "level %d after setting 2", level);
    CHECK_OK(cuFileSetStatsLevel(0));
    CHECK_ERR(cuFileStatsStart(), CU_FILE_DRIVER_NOT_INITIALIZED);
    CHECK_ERR(cuFileStatsStop(), CU_FILE_DRIVER_NOT_INITIALIZED);
    CHECK_ERR(cuFileStatsReset(), CU_FILE_DRIVER_NOT_INITIALIZED);
    CUfileStatsLevel1_t s1;
    CHECK_ERR(cuFileGetStatsL1(NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetStatsL1(&s1), CU_FILE_DRIVER_NOT_INITIALIZED);
    /* An async call at use count 0 opens the driver implicitly and fails. */
    size_t size = 0;
    off_t fo = 0, bo = 0;
    ssize_t br = 7;
    CHECK_ERR(cuFileReadAsync(NULL, buf, &size, &fo, &bo, &br, NULL), CU_FILE_INVALID_VALUE);
    CHECK(cuFileUseCount() == 1, "use count %ld after an async call at 0", cuFileUseCount());
    close_all();
}

static void parameters(void)
{
    g_section = "parameters";
    size_t v, lo, hi;
    for (int p = 0; p <= CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS; p++) {
        CHECK_OK(cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)p, &v));
        if (p == CUFILE_PARAM_PROFILE_STATS) {
            CHECK_ERR(cuFileGetParameterMinMaxValue((CUFileSizeTConfigParameter_t)p, &lo, &hi),
                      CU_FILE_INVALID_VALUE);
            continue;
        }
        CHECK_OK(cuFileGetParameterMinMaxValue((CUFileSizeTConfigParameter_t)p, &lo, &hi));
        /* ExecutionMaxIOThreads reads 0, "the library's default", which its range includes. */
        CHECK(lo <= v && v <= hi, "parameter %d: default %zu outside [%zu, %zu]", p, v, lo, hi);
    }
    CHECK_ERR(cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)12, &v), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)-1, &v), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, NULL, &hi),
              CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &lo, NULL),
              CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterMinMaxValue((CUFileSizeTConfigParameter_t)12, &lo, &hi), CU_FILE_INVALID_VALUE);
    /* Set: checked against the range. */
    CHECK_OK(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &lo, &hi));
    CHECK_ERR(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, lo - 1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, hi + 1), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 16));
    CHECK_OK(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &v));
    CHECK(v == 16, "IO_BATCHSIZE staged as %zu", v);
    CHECK_OK(cuFileGetParameterMinMaxValue(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, &lo, &hi));
    CHECK_ERR(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, hi + 1), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileSetParameterSizeT(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, 2));
    CHECK_ERR(cuFileSetParameterSizeT((CUFileSizeTConfigParameter_t)12, 1), CU_FILE_INVALID_VALUE);
    bool b = false;
    for (int p = 0; p <= CUFILE_PARAM_STREAM_MEMOPS_BYPASS; p++)
        CHECK_OK(cuFileGetParameterBool((CUFileBoolConfigParameter_t)p, &b));
    CHECK_ERR(cuFileGetParameterBool((CUFileBoolConfigParameter_t)12, &b), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterBool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, NULL), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, true));
    CHECK_OK(cuFileGetParameterBool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, &b));
    CHECK(b, "USE_POLL_MODE not staged");
    char s[256];
    CHECK_OK(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, s, sizeof s));
    CHECK_ERR(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, s, 2), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, NULL, 8), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterString((CUFileStringConfigParameter_t)3, s, sizeof s), CU_FILE_INVALID_VALUE);
    /* cuFile: an unset log file path has no value. */
    CHECK_ERR(cuFileGetParameterString(CUFILE_PARAM_ENV_LOGFILE_PATH, s, sizeof s), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileSetParameterString(CUFILE_PARAM_ENV_LOGFILE_PATH, "/tmp/cufile-api.log"));
    CHECK_OK(cuFileGetParameterString(CUFILE_PARAM_ENV_LOGFILE_PATH, s, sizeof s));
    CHECK(strcmp(s, "/tmp/cufile-api.log") == 0, "log path read back as '%s'", s);
    CHECK_ERR(cuFileSetParameterString(CUFILE_PARAM_LOG_DIR, NULL), CU_FILE_INVALID_VALUE);

    g_section = "POSIX pool slabs";
    size_t kb[4] = {0}, ct[4] = {0};
    CHECK_OK(cuFileGetParameterPosixPoolSlabArray(kb, ct, 3));
    CHECK(kb[0] == 4 && kb[1] == 1024 && kb[2] == 16384 && ct[0] == 128 && ct[1] == 64 && ct[2] == 64,
          "default slabs [%zu %zu %zu] x [%zu %zu %zu]", kb[0], kb[1], kb[2], ct[0], ct[1], ct[2]);
    CHECK_ERR(cuFileGetParameterPosixPoolSlabArray(kb, ct, 2), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterPosixPoolSlabArray(kb, ct, 4), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetParameterPosixPoolSlabArray(NULL, ct, 3), CU_FILE_INVALID_VALUE);
    size_t nkb[2] = {8, 2048}, nct[2] = {4, 2}, bad_kb[1] = {3}, zero[1] = {0};
    CHECK_ERR(cuFileSetParameterPosixPoolSlabArray(NULL, nct, 2), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetParameterPosixPoolSlabArray(nkb, nct, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetParameterPosixPoolSlabArray(bad_kb, nct, 1), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileSetParameterPosixPoolSlabArray(nkb, zero, 1), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileSetParameterPosixPoolSlabArray(nkb, nct, 2));
    memset(kb, 0, sizeof kb);
    CHECK_OK(cuFileGetParameterPosixPoolSlabArray(kb, ct, 2));
    CHECK(kb[0] == 8 && kb[1] == 2048 && ct[0] == 4 && ct[1] == 2, "slabs read back [%zu %zu] x [%zu %zu]",
          kb[0], kb[1], ct[0], ct[1]);

    g_section = "parameters while open";
    CHECK_OK(cuFileDriverOpen());
    CHECK_OK(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &v));
    CHECK(v == 16, "IO_BATCHSIZE applied as %zu", v);
    CHECK_ERR(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 32), CU_FILE_DRIVER_ALREADY_OPEN);
    CHECK_ERR(cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, false), CU_FILE_DRIVER_ALREADY_OPEN);
    CHECK_ERR(cuFileSetParameterString(CUFILE_PARAM_LOG_DIR, "/tmp"), CU_FILE_DRIVER_ALREADY_OPEN);
    CHECK_ERR(cuFileSetParameterPosixPoolSlabArray(nkb, nct, 2), CU_FILE_DRIVER_ALREADY_OPEN);
    CUfileDrvProps_t pr;
    memset(&pr, 0xee, sizeof pr);
    CHECK_ERR(cuFileDriverGetProperties(NULL), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileDriverGetProperties(&pr));
    CHECK(pr.nvfs.major_version == 0 && pr.nvfs.minor_version == 0 && pr.nvfs.dstatusflags == 0,
          "nvidia-fs reported as %u.%u, flags %#x", pr.nvfs.major_version, pr.nvfs.minor_version,
          pr.nvfs.dstatusflags);
    CHECK(pr.max_batch_io_size == 16, "max_batch_io_size %u", pr.max_batch_io_size);
    CHECK(pr.nvfs.dcontrolflags & (1u << CU_FILE_USE_POLL_MODE), "poll mode flag missing: %#x",
          pr.nvfs.dcontrolflags);
    CHECK(pr.nvfs.dcontrolflags & (1u << CU_FILE_ALLOW_COMPAT_MODE), "compat flag missing: %#x",
          pr.nvfs.dcontrolflags);
    CHECK((pr.fflags & (1u << CU_FILE_BATCH_IO_SUPPORTED)) && (pr.fflags & (1u << CU_FILE_STREAMS_SUPPORTED)),
          "feature flags %#x", pr.fflags);
    CHECK(pr.per_buffer_cache_size == 1024 && pr.max_device_pinned_mem_size == 33554432u,
          "sizes %u %u", pr.per_buffer_cache_size, pr.max_device_pinned_mem_size);
    CHECK_OK(cuFileDriverSetPollMode(false, 8));
    CHECK_OK(cuFileDriverSetMaxDirectIOSize(8192));
    CHECK_OK(cuFileDriverSetMaxCacheSize(65536));
    CHECK_OK(cuFileDriverSetMaxPinnedMemSize(1u << 20));
    CHECK_OK(cuFileDriverGetProperties(&pr));
    CHECK(pr.nvfs.poll_thresh_size == 8 && pr.nvfs.max_direct_io_size == 8192 && pr.max_device_cache_size == 65536 &&
              pr.max_device_pinned_mem_size == (1u << 20),
          "DriverSet* not visible: %zu %zu %u %u", pr.nvfs.poll_thresh_size, pr.nvfs.max_direct_io_size,
          pr.max_device_cache_size, pr.max_device_pinned_mem_size);
    /* A size beyond what CUfileDrvProps_t's unsigned fields hold. */
    CHECK_OK(cuFileDriverSetMaxPinnedMemSize((size_t)1 << 33));
    CHECK_ERR(cuFileDriverGetProperties(&pr), CU_FILE_DRIVER_INVALID_PROPS);
    CHECK_OK(cuFileDriverSetMaxPinnedMemSize(33554432));

    g_section = "final close resets";
    close_all();
    CHECK_OK(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, &v));
    CHECK(v == 128, "IO_BATCHSIZE after the final close: %zu", v);
    CHECK_OK(cuFileGetParameterPosixPoolSlabArray(kb, ct, 3));
    CHECK(kb[2] == 16384, "slabs not reset: %zu", kb[2]);
    CHECK_ERR(cuFileGetParameterString(CUFILE_PARAM_ENV_LOGFILE_PATH, s, sizeof s), CU_FILE_INVALID_VALUE);
}

static void handles_and_buffers(int fd)
{
    g_section = "handles and buffers";
    CHECK_OK(cuFileDriverOpen());
    CUfileDescr_t d;
    memset(&d, 0, sizeof d);
    CUfileHandle_t fh = NULL;
    d.type = CU_FILE_HANDLE_TYPE_USERSPACE_FS;
    d.handle.fd = fd;
    CHECK_ERR(cuFileHandleRegister(&fh, &d), CU_FILE_IO_NOT_SUPPORTED);
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_WIN32;
    CHECK_ERR(cuFileHandleRegister(&fh, &d), CU_FILE_IO_NOT_SUPPORTED);
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    CHECK_ERR(cuFileHandleRegister(NULL, &d), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileHandleRegister(&fh, NULL), CU_FILE_INVALID_VALUE);
    d.handle.fd = -1;
    CHECK_ERR(cuFileHandleRegister(&fh, &d), CU_FILE_INTERNAL_ERROR);
    d.handle.fd = fd;
    CHECK_OK(cuFileHandleRegister(&fh, &d));
    CHECK(fh != NULL, "NULL handle");
    CUfileHandle_t fh2 = NULL;
    CHECK_ERR(cuFileHandleRegister(&fh2, &d), CU_FILE_HANDLE_ALREADY_REGISTERED);
    cuFileHandleDeregister(fh);
    cuFileHandleDeregister(NULL);

    unsigned char *buf = aligned_alloc(4096, 1 << 20);
    /* No RDMA path here. */
    CHECK_ERR(cuFileBufRegister(buf, 1 << 20, CU_FILE_RDMA_REGISTER), CU_FILE_PLATFORM_NOT_SUPPORTED);
    CHECK_ERR(cuFileBufRegister(NULL, 4096, 0), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileBufRegister(buf, 1 << 20, 0));
    CHECK_ERR(cuFileBufRegister(buf, 1 << 20, 0), CU_FILE_MEMORY_ALREADY_REGISTERED);
    CHECK_OK(cuFileBufDeregister(buf));
    CHECK_ERR(cuFileBufDeregister(buf), CU_FILE_MEMORY_NOT_REGISTERED);
    CHECK_ERR(cuFileBufDeregister(NULL), CU_FILE_INVALID_VALUE);
    free(buf);
    close_all();
}

static void sync_io(void)
{
    g_section = "sync I/O";
    char path[4096];
    const size_t fsize = (9u << 20) + 12345;
    int fd = make_file("sync", fsize, 1, path);
    CUfileHandle_t fh = check_cufile_register_fd(fd);
    CHECK(cuFileUseCount() == 1, "registration did not open the driver implicitly");
    unsigned char *buf = aligned_alloc(4096, 8 << 20);
    CHECK_OK(cuFileBufRegister(buf, 8 << 20, 0));
    /* Reads into the registered buffer at buffer offsets, and into an interior pointer. */
    static const size_t sizes[] = {1, 4095, 4096, 65537, 1 << 20, (5 << 20) + 7};
    static const off_t offs[] = {0, 1, 4096, 777777, (4 << 20) - 3};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (size_t j = 0; j < sizeof offs / sizeof *offs; j++) {
            off_t bo = (off_t)(j * 513);
            memset(buf, 0xa5, 8 << 20);
            CHECK_SZ(cuFileRead(fh, buf, sizes[i], offs[j], bo), sizes[i]);
            CHECK(same_as_file(fd, buf + bo, sizes[i], offs[j]), "read of %zu at %jd (buffer offset %jd) differs",
                  sizes[i], (intmax_t)offs[j], (intmax_t)bo);
            CHECK(bo == 0 || buf[bo - 1] == 0xa5, "byte before the buffer offset changed");
        }
    /* Short read at EOF, nothing past it. */
    CHECK_SZ(cuFileRead(fh, buf, 1 << 20, (off_t)fsize - 100, 0), 100);
    CHECK_SZ(cuFileRead(fh, buf, 4096, (off_t)fsize + 5, 0), 0);
    /* Bad input. */
    CHECK_SZ(cuFileRead(fh, buf, 4096, -1, 0), -CU_FILE_INVALID_VALUE);
    CHECK_SZ(cuFileRead(fh, buf, 4096, 0, -1), -CU_FILE_INVALID_VALUE);
    CHECK_SZ(cuFileRead(fh, buf, 4096, 0, 8 << 20), -CU_FILE_INVALID_VALUE);
    CHECK_SZ(cuFileRead(fh, buf, (8 << 20) + 1, 0, 0), -CU_FILE_INVALID_VALUE);
    int local;
    CHECK_SZ(cuFileRead((CUfileHandle_t)&local, buf, 4096, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);
    CHECK_SZ(cuFileRead(fh, NULL, 4096, 0, 0), -CU_FILE_INVALID_VALUE);
    /* Writes from an unregistered malloc'd buffer, read back with pread. */
    unsigned char *src = malloc(3 << 20);
    rnd_fill(src, 3 << 20, 99);
    CHECK_SZ(cuFileWrite(fh, src, 3 << 20, 12345, 0), 3 << 20);
    CHECK(same_as_file(fd, src, 3 << 20, 12345), "write of 3 MiB at 12345 differs");
    CHECK_SZ(cuFileWrite(fh, src, 4097, (off_t)fsize, 17), 4097);
    CHECK(same_as_file(fd, src + 17, 4097, (off_t)fsize), "appending write differs");
    CHECK_SZ(cuFileWrite(fh, src, 4096, -5, 0), -CU_FILE_INVALID_VALUE);
    free(src);
    CHECK_OK(cuFileBufDeregister(buf));
    free(buf);
    drop_file(fh, fd, path);
}

static void stream_calls(void)
{
    g_section = "stream calls on the NULL stream";
    char path[4096];
    const size_t fsize = 4 << 20;
    int fd = make_file("async", fsize, 2, path);
    CHECK_OK(cuFileDriverOpen());
    CUfileHandle_t fh = check_cufile_register_fd(fd);
    unsigned char *buf = aligned_alloc(4096, 2 << 20);
    CHECK_OK(cuFileBufRegister(buf, 2 << 20, 0));
    CHECK_OK(cuFileStreamRegister(NULL, CU_FILE_STREAM_FIXED_BUF_OFFSET | CU_FILE_STREAM_FIXED_FILE_OFFSET |
                                            CU_FILE_STREAM_FIXED_FILE_SIZE | CU_FILE_STREAM_PAGE_ALIGNED_INPUTS));
    CHECK_ERR(cuFileStreamRegister(NULL, 0), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileStreamDeregister(NULL));
    CHECK_ERR(cuFileStreamRegister(NULL, 0x10), CU_FILE_INVALID_VALUE);
    size_t size = 1 << 20;
    off_t fo = 4096 + 3, bo = 100;
    ssize_t n = 12345;
    /* cuFile: on the NULL stream the call is synchronous, so *bytes is final on return. */
    memset(buf, 0, 2 << 20);
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &fo, &bo, &n, NULL));
    CHECK(n == (ssize_t)size, "bytes read %zd", n);
    CHECK(same_as_file(fd, buf + bo, size, fo), "NULL-stream read differs");
    rnd_fill(buf, 2 << 20, 3);
    fo = 77;
    bo = 5;
    n = 12345;
    CHECK_OK(cuFileWriteAsync(fh, buf, &size, &fo, &bo, &n, NULL));
    CHECK(n == (ssize_t)size, "bytes written %zd", n);
    CHECK(same_as_file(fd, buf + bo, size, fo), "NULL-stream write differs");
    /* Short read at EOF. */
    fo = (off_t)fsize - 10;
    bo = 0;
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &fo, &bo, &n, NULL));
    CHECK(n == 10, "bytes read at EOF %zd", n);
    /* cuFile reports bad values in *bytes, not as the return code. */
    fo = -1;
    n = 0;
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &fo, &bo, &n, NULL));
    CHECK(n == -CU_FILE_INVALID_VALUE, "negative file offset: *bytes %zd, expected -5022", n);
    fo = 0;
    bo = -1;
    n = 0;
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &fo, &bo, &n, NULL));
    CHECK(n == -CU_FILE_INTERNAL_ERROR, "negative buffer offset: *bytes %zd, expected -5030", n);
    bo = (2 << 20) - 10;
    n = 0;
    CHECK_OK(cuFileWriteAsync(fh, buf, &size, &fo, &bo, &n, NULL));
    CHECK(n == -CU_FILE_INVALID_MAPPING_SIZE, "range beyond the buffer: *bytes %zd, expected -5016", n);
    /* Argument errors are return codes. */
    bo = 0;
    CHECK_ERR(cuFileReadAsync(fh, buf, NULL, &fo, &bo, &n, NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileReadAsync(fh, buf, &size, &fo, &bo, NULL, NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileReadAsync(fh, NULL, &size, &fo, &bo, &n, NULL), CU_FILE_INVALID_VALUE);
    int local;
    CHECK_ERR(cuFileReadAsync((CUfileHandle_t)&local, buf, &size, &fo, &bo, &n, NULL),
              CU_FILE_HANDLE_NOT_REGISTERED);
    size = 0;
    n = 9;
    CHECK_OK(cuFileReadAsync(fh, buf, &size, &fo, &bo, &n, NULL));
    CHECK(n == 0, "size 0: *bytes %zd", n);
    CHECK_OK(cuFileBufDeregister(buf));
    free(buf);
    drop_file(fh, fd, path);
}

static void batches(void)
{
    g_section = "batch";
    char path[4096];
    const size_t fsize = 8 << 20;
    int fd = make_file("batch", fsize, 4, path);
    CHECK_OK(cuFileDriverOpen());
    CUfileHandle_t fh = check_cufile_register_fd(fd);
    CUfileBatchHandle_t b = NULL;
    CHECK_ERR(cuFileBatchIOSetUp(NULL, 4), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOSetUp(&b, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOSetUp(&b, 129), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileBatchIOSetUp(&b, 8));
    enum { N = 8, PIECE = 200000 };
    unsigned char *bufs = aligned_alloc(4096, ((size_t)N * PIECE + 4095) & ~(size_t)4095);
    int cookies[N];
    CUfileIOParams_t io[N + 1];
    memset(io, 0, sizeof io);
    for (int i = 0; i < N; i++) {
        io[i].mode = CUFILE_BATCH;
        io[i].fh = fh;
        io[i].opcode = i % 4 == 3 ? CUFILE_WRITE : CUFILE_READ;
        io[i].cookie = &cookies[i];
        io[i].u.batch.devPtr_base = bufs + (size_t)i * PIECE;
        io[i].u.batch.devPtr_offset = 0;
        io[i].u.batch.file_offset = (off_t)i * 999983;
        io[i].u.batch.size = PIECE - (size_t)i;
        if (io[i].opcode == CUFILE_WRITE) rnd_fill(bufs + (size_t)i * PIECE, PIECE, 50 + i);
    }
    io[N] = io[0];
    CHECK_ERR(cuFileBatchIOSubmit(b, N + 1, io, 0), CU_FILE_BATCH_FULL);
    CUfileIOParams_t bad = io[0];
    bad.opcode = 7;
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, &bad, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, NULL, 0), CU_FILE_INVALID_VALUE);
    CHECK_OK(cuFileBatchIOSubmit(b, N, io, 0));
    CHECK(io[0].cookie == &cookies[0], "the caller's array was changed");
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, io, 0), CU_FILE_BATCH_FULL);
    CUfileIOEvents_t ev[N];
    unsigned nr = N, seen = 0, mask = 0;
    CHECK_ERR(cuFileBatchIOGetStatus(b, N + 1, &nr, ev, NULL), CU_FILE_INVALID_VALUE);
    while (seen < N) {
        nr = N;
        CHECK_OK(cuFileBatchIOGetStatus(b, 1, &nr, ev, NULL));
        if (nr == 0) break;
        for (unsigned k = 0; k < nr; k++) {
            int i = (int)((int *)ev[k].cookie - cookies);
            CHECK(i >= 0 && i < N, "event with a cookie that was not submitted: %p", ev[k].cookie);
            if (i < 0 || i >= N) continue;
            CHECK(!(mask & (1u << i)), "entry %d reported twice", i);
            mask |= 1u << i;
            CHECK(ev[k].status == CUFILE_COMPLETE, "entry %d: status %#x", i, ev[k].status);
            CHECK(ev[k].ret == io[i].u.batch.size, "entry %d: ret %zu", i, ev[k].ret);
            CHECK(same_as_file(fd, bufs + (size_t)i * PIECE, io[i].u.batch.size, io[i].u.batch.file_offset),
                  "entry %d (%s) differs from the file", i, io[i].opcode == CUFILE_WRITE ? "write" : "read");
        }
        seen += nr;
    }
    CHECK(seen == N, "%u of %d events", seen, N);
    /* The capacity is free again: a batch of one, then cancel and destroy. */
    CHECK_OK(cuFileBatchIOSubmit(b, 1, io, 0));
    CHECK_OK(cuFileBatchIOCancel(b));
    struct timespec zero = {0, 0};
    nr = 1;
    CHECK_OK(cuFileBatchIOGetStatus(b, 0, &nr, ev, &zero));
    CHECK(nr <= 1 && (nr == 0 || ev[0].cookie == &cookies[0]), "after cancel: %u events", nr);
    cuFileBatchIODestroy(b);
    CHECK_ERR(cuFileBatchIOSubmit(b, 1, io, 0), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileBatchIOCancel(b), CU_FILE_INVALID_VALUE);
    free(bufs);
    drop_file(fh, fd, path);
}

static void statistics(void)
{
    g_section = "statistics";
    char path[4096];
    int fd = make_file("stats", 1 << 20, 5, path);
    CHECK_OK(cuFileDriverOpen());
    CHECK_ERR(cuFileStatsStart(), CU_FILE_INVALID_VALUE); /* level 0 */
    CHECK_OK(cuFileSetStatsLevel(1));
    CHECK_OK(cuFileStatsStart());
    CUfileStatsLevel2_t s2;
    CUfileStatsLevel3_t s3;
    CHECK_ERR(cuFileGetStatsL2(&s2), CU_FILE_INVALID_VALUE); /* level 1 only */
    CHECK_OK(cuFileSetStatsLevel(3));
    CUfileHandle_t fh = check_cufile_register_fd(fd);
    unsigned char *buf = aligned_alloc(4096, 1 << 20);
    CHECK_OK(cuFileBufRegister(buf, 1 << 20, 0));
    CHECK_SZ(cuFileRead(fh, buf, 4096, 0, 0), 4096);
    CHECK_SZ(cuFileRead(fh, buf, 4096, 1 << 20, 0), 0);
    CHECK_SZ(cuFileRead(fh, buf, 4096, -1, 0), -CU_FILE_INVALID_VALUE);
    CHECK_SZ(cuFileWrite(fh, buf, 65536, 0, 0), 65536);
    CUfileBatchHandle_t b;
    CHECK_OK(cuFileBatchIOSetUp(&b, 2));
    CUfileIOParams_t io[2];
    memset(io, 0, sizeof io);
    for (int i = 0; i < 2; i++) {
        io[i].mode = CUFILE_BATCH;
        io[i].fh = fh;
        io[i].opcode = i ? CUFILE_WRITE : CUFILE_READ;
        io[i].u.batch.devPtr_base = buf;
        io[i].u.batch.devPtr_offset = (off_t)i * 8192;
        io[i].u.batch.file_offset = 0;
        io[i].u.batch.size = 8192;
    }
    CHECK_OK(cuFileBatchIOSubmit(b, 2, io, 0));
    CUfileIOEvents_t ev[2];
    unsigned nr = 2;
    CHECK_OK(cuFileBatchIOGetStatus(b, 2, &nr, ev, NULL));
    CHECK(nr == 2, "%u batch events", nr);
    cuFileBatchIODestroy(b);
    CHECK_OK(cuFileGetStatsL3(&s3));
    CUfileStatsLevel1_t *s = &s3.detailed.basic;
    CHECK(s->read_ops.ok == 2 && s->read_ops.err == 1, "read ops %lu/%lu", (unsigned long)s->read_ops.ok,
          (unsigned long)s->read_ops.err);
    CHECK(s->write_ops.ok == 1 && s->write_bytes == 65536, "write ops %lu, bytes %lu",
          (unsigned long)s->write_ops.ok, (unsigned long)s->write_bytes);
    CHECK(s->read_bytes == 4096, "read bytes %lu", (unsigned long)s->read_bytes);
    CHECK(s->hdl_register_ops.ok == 1 && s->buf_register_ops.ok == 1, "registrations %lu %lu",
          (unsigned long)s->hdl_register_ops.ok, (unsigned long)s->buf_register_ops.ok);
    CHECK(s->batch_setup_ops.ok == 1 && s->batch_submit_ops.ok == 1 && s->batch_destroy_ops.ok == 1,
          "batch ops %lu %lu %lu", (unsigned long)s->batch_setup_ops.ok, (unsigned long)s->batch_submit_ops.ok,
          (unsigned long)s->batch_destroy_ops.ok);
    CHECK(s->batch_enqueued_ops.ok == 2 && s->batch_complete_ops.ok == 2 && s->batch_processed_ops.ok == 2,
          "batch entries %lu %lu %lu", (unsigned long)s->batch_enqueued_ops.ok,
          (unsigned long)s->batch_complete_ops.ok, (unsigned long)s->batch_processed_ops.ok);
    CHECK(s->batch_read_bytes == 8192 && s->batch_write_bytes == 8192, "batch bytes %lu %lu",
          (unsigned long)s->batch_read_bytes, (unsigned long)s->batch_write_bytes);
    /* 4 KiB falls in bucket 3 ([4, 8) KiB), 0 bytes in bucket 0, 64 KiB in bucket 7. */
    CHECK(s3.detailed.read_size_kb_hist[3] == 1 && s3.detailed.read_size_kb_hist[0] == 1 &&
              s3.detailed.write_size_kb_hist[7] == 1,
          "histograms %lu %lu %lu", (unsigned long)s3.detailed.read_size_kb_hist[3],
          (unsigned long)s3.detailed.read_size_kb_hist[0], (unsigned long)s3.detailed.write_size_kb_hist[7]);
    CHECK(s3.num_gpus == 0, "num_gpus %u without a GPU", s3.num_gpus);
    CHECK_OK(cuFileStatsStop());
    CHECK_SZ(cuFileRead(fh, buf, 4096, 0, 0), 4096);
    CHECK_OK(cuFileGetStatsL2(&s2));
    CHECK(s2.basic.read_ops.ok == 2, "counted after StatsStop: %lu", (unsigned long)s2.basic.read_ops.ok);
    CHECK_OK(cuFileStatsReset());
    CHECK_OK(cuFileGetStatsL2(&s2));
    CHECK(s2.basic.read_ops.ok == 0 && s2.read_size_kb_hist[3] == 0, "not reset");
    CHECK_OK(cuFileBufDeregister(buf));
    free(buf);
    drop_file(fh, fd, path);
    CHECK_ERR(cuFileGetStatsL1(&s3.detailed.basic), CU_FILE_DRIVER_NOT_INITIALIZED);
    CHECK_OK(cuFileSetStatsLevel(0));
}

static void bar_size(void)
{
    g_section = "BAR size";
    size_t kb = 0;
    CHECK_OK(cuFileDriverOpen());
    CHECK_ERR(cuFileGetBARSizeInKB(0, NULL), CU_FILE_INVALID_VALUE);
    CHECK_ERR(cuFileGetBARSizeInKB(-1, &kb), CU_FILE_INVALID_VALUE);
    /* No CUDA device on this machine: GPU 0 does not exist. */
    CHECK_ERR(cuFileGetBARSizeInKB(0, &kb), CU_FILE_INVALID_VALUE);
    close_all();
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : getenv("TMPDIR");
    dir = dir && *dir ? dir : "/tmp";
    if (strlen(dir) >= sizeof g_dir) {
        printf("api: directory name too long\n");
        return 2;
    }
    memcpy(g_dir, dir, strlen(dir) + 1);
    signal(SIGALRM, on_alarm);
    alarm(300);
    char path[4096];
    int fd = make_file("handles", 4096, 7, path);
    version();
    closed_driver();
    parameters();
    handles_and_buffers(fd);
    sync_io();
    stream_calls();
    batches();
    statistics();
    bar_size();
    close(fd);
    unlink(path);
    return check_summary();
}
