/*
 * invalid_args.c: every one of the 31 hipFile entry points called with NULL
 * pointers and invalid arguments, and the driver reference-count rules,
 * checked against spec/hipfile-abi.md sections 5 and 8 (rows INIT-01..12,
 * ERR-01, VER-01, HDL-02..05, HDL-12, HDL-14, BUF-04, BUF-08, IO-01..03,
 * IO-11/12, STR-01..04, ASY-01/02/04/06, BAT-01..07, CFG-01..07; INIT-10
 * with 64 threads) and the project decisions at the top of the spec (host
 * memory accepted, O_APPEND and O_PATH rejected with 5019, hipFileBatchFull
 * 5037, unregistered fh in a batch 5027, final DriverClose clears files,
 * buffers, streams and batches).
 *
 * Usage: invalid_args [DIR]   (temporary files go to DIR, else $TMPDIR, else /tmp)
 * Prints one line per failed check and a final "N passed, M failed" line;
 * exits 0 only when nothing failed.
 *
 * The library state is process-global, so the order of the sections matters:
 * each section starts from a known use count (reset_driver() closes the driver
 * until hipFileUseCount() is 0).
 *
 * ASSUMPTIONS (behaviour the spec leaves open, or that this GPU-less test has
 * to assume; a failure of a check tagged "(assumption N)" or "(inferred)" may
 * mean the assumption, not the library, is wrong):
 *
 *  1. Without a GPU runtime the NULL (default) stream can still be registered
 *     and deregistered: StreamRegister/StreamDeregister keep only bookkeeping
 *     for it, need no device, and do not change the use count (spec 5.1:
 *     "not needed, no change"). STR-01..04 are tested on the NULL stream only;
 *     no fake non-NULL stream pointer is ever passed to the library.
 *  2. hipFileReadAsync/WriteAsync run steps 1 to 5 of spec 5.6 (refcount,
 *     NULL checks, handle lookup, submit-time validation, *size_p == 0) before
 *     anything needs a device runtime, and host memory passes step 3 (project
 *     decision). So on a GPU-less machine argument errors are still 5022/5027
 *     and a zero-size request on the NULL stream succeeds with *bytes = 0.
 *     Nothing with a non-zero size is ever enqueued here.
 *  3. A NULL hipFileHandle_t is an unknown handle. The spec pins -5027/5027 for
 *     unknown handles but not whether NULL is screened earlier, so NULL may
 *     give 5027 or 5022 (both accepted); a non-NULL unknown handle must give
 *     5027. Unknown handles used here point at a local variable, so even a
 *     library that dereferenced them would not crash.
 *  4. hipFileBufDeregister(NULL) with the driver open: 5024 or 5022 (both
 *     accepted). At use count 0 every BufDeregister gives 5006, NULL included
 *     (the refcount test comes first, spec 5.4).
 *  5. hipFileHandleDeregister does not change the use count.
 *  6. BatchIOGetStatus and BatchIOCancel on an unknown batch handle give 5022,
 *     like BatchIOSubmit (BAT-03), also before the driver is open and for NULL.
 *  7. Items the spec marks "(inferred)": out-of-range parameter enums and NULL
 *     value pointers give 5022; GetParameterString with len too small for the
 *     string plus its NUL, or len <= 0, gives 5022; DriverSet* while the driver
 *     is open succeed and show in DriverGetProperties; buffer_offset equal to
 *     the buffer length is rejected even with size 0; the control-flag bits of
 *     DriverGetProperties follow PropertiesUsePollMode/AllowCompatMode.
 *  8. The default-value table of spec 5.8 is checked only when nothing can
 *     override it (no HIPFILE_ or CUFILE_ environment variable, no
 *     /etc/cufile.json); otherwise the check is skipped with a message. The
 *     reset-to-defaults check (CFG-04) compares with the values read before
 *     any Set, so it holds either way. ProfileStats' default is not checked
 *     (the spec gives 0 and HIPFILE_STATS_LEVEL=1 side by side).
 *  9. Files are keyed by descriptor number (spec 5.3 step 6), so a dup() of a
 *     registered descriptor registers successfully.
 * 10. O_RDONLY, O_WRONLY, O_NONBLOCK and O_SYNC descriptors are accepted
 *     ("other flags accepted"); only O_APPEND and O_PATH give 5019. The 5019
 *     checks run with the driver open so the count question does not arise.
 * 11. For a registered host buffer the buffer length used by the bounds checks
 *     of spec 5.5 is the registered length. Unregistered host memory has no
 *     known length, so only negative offsets are checked with it.
 * 12. Batch operations on host memory execute without a GPU, and completed
 *     operations that GetStatus has not yet returned still count against the
 *     batch capacity (they stay "outstanding" until reaped, spec 5.7).
 * 13. "Owned fds closed" (INIT-12) is observed as: after the final close, the
 *     only descriptor of this process that refers to the test file is the
 *     test's own.
 * 14. The logging level accepts "WARN" (a cufile.json level name).
 */

#define _GNU_SOURCE

#include "hipfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- check helpers ---------------------------------------------------------- */

static int         g_passed;
static int         g_failed;
static const char *g_section = "start";

static void section(const char *name)
{
    g_section = name;
}

static void check_impl(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
{
    if (ok) {
        g_passed++;
        return;
    }
    g_failed++;
    printf("%s:%d: [%s] FAIL: %s: ", file, line, g_section, expr);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* Generic condition with a printf-style description of the values. */
#define CHECK(cond, ...) check_impl((cond) ? 1 : 0, __FILE__, __LINE__, #cond, __VA_ARGS__)

static void check_err(hipFileError_t got, int want1, int want2, const char *file, int line, const char *expr)
{
    int ok_code = (int)got.err == want1 || (int)got.err == want2;
    int ok_hip  = got.err == hipFileHipDriverError || got.hip_drv_err == hipSuccess;
    if (want1 == want2)
        check_impl(ok_code && ok_hip, file, line, expr, "got {%d, %d}, expected {%d, 0}", (int)got.err,
                   (int)got.hip_drv_err, want1);
    else
        check_impl(ok_code && ok_hip, file, line, expr, "got {%d, %d}, expected {%d or %d, 0}", (int)got.err,
                   (int)got.hip_drv_err, want1, want2);
}

/* A hipFileError_t result: err must be `code` and hip_drv_err hipSuccess. */
#define CHECK_ERR(expr, code) check_err((expr), (code), (code), __FILE__, __LINE__, #expr)
/* Either of two codes is accepted (see the assumptions above). */
#define CHECK_ERR2(expr, code1, code2) check_err((expr), (code1), (code2), __FILE__, __LINE__, #expr)

/* An ssize_t result. */
#define CHECK_SSIZE(expr, want)                                                                         \
    do {                                                                                                \
        errno           = 0;                                                                            \
        ssize_t got_    = (expr);                                                                       \
        int     errno_  = errno;                                                                        \
        ssize_t want_   = (want);                                                                       \
        check_impl(got_ == want_, __FILE__, __LINE__, #expr, "got %zd (errno %d: %s), expected %zd", got_, \
                   errno_, strerror(errno_), want_);                                                    \
    } while (0)

/* An ssize_t result that may be either of two values. */
#define CHECK_SSIZE2(expr, want1, want2)                                                                 \
    do {                                                                                                 \
        errno         = 0;                                                                               \
        ssize_t got_  = (expr);                                                                          \
        int     errno_ = errno;                                                                          \
        check_impl(got_ == (want1) || got_ == (want2), __FILE__, __LINE__, #expr,                        \
                   "got %zd (errno %d), expected %zd or %zd", got_, errno_, (ssize_t)(want1), (ssize_t)(want2)); \
    } while (0)

/* An ssize_t result of -1 with a given errno. */
#define CHECK_SSIZE_ERRNO(expr, want_errno)                                                              \
    do {                                                                                                 \
        errno          = 0;                                                                              \
        ssize_t got_   = (expr);                                                                         \
        int     errno_ = errno;                                                                          \
        check_impl(got_ == -1 && errno_ == (want_errno), __FILE__, __LINE__, #expr,                      \
                   "got %zd (errno %d: %s), expected -1 with errno %d", got_, errno_, strerror(errno_),  \
                   (int)(want_errno));                                                                   \
    } while (0)

/* The driver use count. */
#define CHECK_COUNT(want)                                                                                \
    do {                                                                                                 \
        int64_t got_ = hipFileUseCount();                                                                \
        check_impl(got_ == (int64_t)(want), __FILE__, __LINE__, "hipFileUseCount() == " #want,           \
                   "got %lld, expected %lld", (long long)got_, (long long)(want));                       \
    } while (0)

#define CHECK_STR(got, want)                                                                             \
    do {                                                                                                 \
        const char *got_ = (got);                                                                        \
        const char *want_ = (want);                                                                      \
        check_impl(got_ != NULL && strcmp(got_, want_) == 0, __FILE__, __LINE__, #got " == \"" #want "\"", \
                   "got \"%s\"", got_ ? got_ : "(null)");                                                \
    } while (0)

static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("[%s] ", g_section);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

/* ---- watchdog: a hang in the library must not hang the test run ------------ */

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "invalid_args: TIMEOUT (watchdog), section: ";
    ssize_t           r     = write(STDOUT_FILENO, msg, sizeof msg - 1);
    r                       = write(STDOUT_FILENO, g_section, strlen(g_section));
    r                       = write(STDOUT_FILENO, "\n", 1);
    (void)r;
    _exit(3);
}

/* ---- environment helpers ---------------------------------------------------- */

static const char *g_dir;

/* Byte i of the content of every test file. */
static unsigned char pattern_byte(size_t i)
{
    return (unsigned char)((i * 131u) ^ (i >> 9) ^ 0x5au);
}

/* Create a file of `size` pattern bytes in g_dir; returns its malloc'd path. */
static char *make_file(size_t size)
{
    size_t len  = strlen(g_dir) + 32;
    char  *path = malloc(len);
    if (path == NULL) {
        perror("malloc");
        exit(2);
    }
    snprintf(path, len, "%s/hipfile-args-XXXXXX", g_dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "mkstemp(%s): %s\n", path, strerror(errno));
        exit(2);
    }
    unsigned char chunk[4096];
    for (size_t done = 0; done < size;) {
        size_t n = size - done < sizeof chunk ? size - done : sizeof chunk;
        for (size_t i = 0; i < n; i++)
            chunk[i] = pattern_byte(done + i);
        if (pwrite(fd, chunk, n, (off_t)done) != (ssize_t)n) {
            perror("pwrite");
            exit(2);
        }
        done += n;
    }
    close(fd);
    return path;
}

static int open_or_die(const char *path, int flags)
{
    int fd = open(path, flags);
    if (fd < 0) {
        fprintf(stderr, "open(%s, %#x): %s\n", path, flags, strerror(errno));
        exit(2);
    }
    return fd;
}

static hipFileDescr_t fd_descr(int fd)
{
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type      = hipFileHandleTypeOpaqueFD;
    d.handle.fd = fd;
    d.fs_ops    = NULL;
    return d;
}

/* Register fd; on failure report it and return NULL. */
#define REGISTER_FD(fd) register_fd((fd), __FILE__, __LINE__)
static hipFileHandle_t register_fd(int fd, const char *file, int line)
{
    hipFileDescr_t  d  = fd_descr(fd);
    hipFileHandle_t fh = NULL;
    hipFileError_t  e  = hipFileHandleRegister(&fh, &d);
    check_impl(e.err == hipFileSuccess && fh != NULL, file, line, "hipFileHandleRegister(valid fd)",
               "got {%d, %d}, handle %p", (int)e.err, (int)e.hip_drv_err, fh);
    return e.err == hipFileSuccess ? fh : NULL;
}

/* Number of this process's descriptors that refer to the file at real path `rp`. */
static int count_fds_to(const char *rp)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int            n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        char link[300], target[PATH_MAX];
        if (ent->d_name[0] == '.')
            continue;
        snprintf(link, sizeof link, "/proc/self/fd/%s", ent->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len < 0)
            continue;
        target[len] = '\0';
        if (strcmp(target, rp) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* Close the driver until the use count is 0. */
static void reset_driver(void)
{
    for (int i = 0; i < 1000 && hipFileUseCount() > 0; i++)
        (void)hipFileDriverClose();
    int64_t n = hipFileUseCount();
    check_impl(n == 0, __FILE__, __LINE__, "reset_driver: use count reaches 0", "still %lld", (long long)n);
}

static void open_driver(void)
{
    CHECK_ERR(hipFileDriverOpen(), hipFileSuccess);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A non-NULL handle value that the library never handed out (it points at a
 * static object of the test, so no dereference can fault). */
static int                   g_not_a_handle_obj;
static hipFileHandle_t const g_unknown_handle = &g_not_a_handle_obj;

/* ---- ERR-01, VER-01 ------------------------------------------------------------ */

static const int k_all_codes[] = {5001, 5002, 5003, 5004, 5005, 5006, 5007, 5008, 5009, 5010, 5011, 5012, 5013,
                                  5014, 5015, 5016, 5017, 5018, 5019, 5020, 5022, 5023, 5024, 5025, 5026, 5027,
                                  5028, 5029, 5030, 5031, 5033, 5034, 5035, 5036, 5037, 5038, 5039};
#define N_CODES ((int)(sizeof k_all_codes / sizeof k_all_codes[0]))

static void test_error_strings_and_version(void)
{
    section("ERR-01");
    CHECK_STR(hipFileGetOpErrorString(hipFileSuccess), "hipFile success");
    const char *strs[N_CODES];
    for (int i = 0; i < N_CODES; i++) {
        const char *s = hipFileGetOpErrorString((hipFileOpError_t)k_all_codes[i]);
        strs[i]       = s;
        CHECK(s != NULL && s[0] != '\0' && strcmp(s, "Unknown hipFile error") != 0 &&
                  strcmp(s, "hipFile success") != 0,
              "code %d -> \"%s\"", k_all_codes[i], s ? s : "(null)");
    }
    for (int i = 0; i < N_CODES; i++)
        for (int j = i + 1; j < N_CODES; j++)
            if (strs[i] != NULL && strs[j] != NULL)
                CHECK(strcmp(strs[i], strs[j]) != 0, "codes %d and %d share \"%s\"", k_all_codes[i],
                      k_all_codes[j], strs[i]);
    {
        const char *s = hipFileGetOpErrorString(hipFileHipDriverError);
        CHECK(s != NULL && strncmp(s, "GPU driver error", 16) == 0, "5011 -> \"%s\"", s ? s : "(null)");
    }
    static const int unknown[] = {1, -1, 2, 999, 4999, 5000, 5021, 5032, 5040, 5049, 6000, -5022, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *s = hipFileGetOpErrorString((hipFileOpError_t)unknown[i]);
        CHECK(s != NULL && strcmp(s, "Unknown hipFile error") == 0, "value %d -> \"%s\"", unknown[i],
              s ? s : "(null)");
    }
    /* HIPFILE_ERRSTR takes negated ssize_t returns. */
    {
        ssize_t     ret = -5022;
        const char *a   = HIPFILE_ERRSTR(ret);
        const char *b   = hipFileGetOpErrorString(hipFileInvalidValue);
        CHECK(a != NULL && b != NULL && strcmp(a, b) == 0, "\"%s\" vs \"%s\"", a ? a : "(null)", b ? b : "(null)");
        CHECK(IS_HIPFILE_ERR(ret), "%zd", ret);
    }
    CHECK_COUNT(0);

    section("VER-01");
    CHECK_ERR(hipFileGetVersion(NULL, NULL, NULL), hipFileSuccess);
    {
        unsigned major = 99, minor = 99, patch = 99;
        CHECK_ERR(hipFileGetVersion(&major, &minor, &patch), hipFileSuccess);
        CHECK(major == HIPFILE_VERSION_MAJOR && minor == HIPFILE_VERSION_MINOR && patch == HIPFILE_VERSION_PATCH,
              "got %u.%u.%u", major, minor, patch);
        major = minor = patch = 99;
        CHECK_ERR(hipFileGetVersion(&major, NULL, NULL), hipFileSuccess);
        CHECK_ERR(hipFileGetVersion(NULL, &minor, NULL), hipFileSuccess);
        CHECK_ERR(hipFileGetVersion(NULL, NULL, &patch), hipFileSuccess);
        CHECK(major == 0 && minor == 2 && patch == 0, "got %u.%u.%u", major, minor, patch);
        major = patch = 99;
        CHECK_ERR(hipFileGetVersion(&major, NULL, &patch), hipFileSuccess);
        CHECK(major == 0 && patch == 0, "got %u.?.%u", major, patch);
    }
    CHECK_COUNT(0);
}

/* ---- INIT-01, 02, 06, 07, 08, 09: behaviour at use count 0 ---------------------- */

static void test_count_zero(void)
{
    unsigned char buf[64];

    section("INIT-02");
    reset_driver();
    CHECK_ERR(hipFileDriverClose(), hipFileDriverNotInitialized);
    CHECK_COUNT(0);

    section("INIT-07");
    CHECK_ERR(hipFileBufDeregister(buf), hipFileDriverClosing);
    CHECK_ERR(hipFileBufDeregister(NULL), hipFileDriverClosing);
    CHECK_COUNT(0);

    section("INIT-08");
    hipFileHandleDeregister(NULL);
    hipFileHandleDeregister(g_unknown_handle);
    CHECK_COUNT(0);

    section("INIT-06");
    CHECK_SSIZE_ERRNO(hipFileRead(g_unknown_handle, buf, sizeof buf, 0, 0), EINVAL);
    CHECK_SSIZE_ERRNO(hipFileWrite(g_unknown_handle, buf, sizeof buf, 0, 0), EINVAL);
    CHECK_SSIZE_ERRNO(hipFileRead(NULL, buf, sizeof buf, 0, 0), EINVAL);
    CHECK_SSIZE_ERRNO(hipFileWrite(NULL, NULL, 0, -1, -1), EINVAL);
    CHECK_COUNT(0);

    section("INIT-09");
    {
        hipFileBatchHandle_t b = NULL;
        CHECK_ERR(hipFileBatchIOSetUp(&b, 8), hipFileSuccess);
        CHECK(b != NULL, "handle %p", b);
        CHECK_COUNT(0);
        hipFileBatchIODestroy(b);
        CHECK_COUNT(0);
    }

    /* Before the driver is open no batch exists, so every handle is unknown: 5022, as
     * upstream's batch implementation answers (libcufile: 5030, and success for
     * Cancel(NULL); README, notes on the spec). The count stays 0. */
    section("BAT-03/07 at count 0");
    {
        hipFileIOEvents_t ev;
        unsigned          nr   = 1;
        struct timespec   zero = {0, 0};
        CHECK_ERR(hipFileBatchIOGetStatus(NULL, 0, NULL, NULL, NULL), hipFileInvalidValue);
        CHECK_ERR(hipFileBatchIOGetStatus(NULL, 0, &nr, &ev, &zero), hipFileInvalidValue);
        CHECK_ERR(hipFileBatchIOGetStatus((hipFileBatchHandle_t)g_unknown_handle, 0, &nr, &ev, &zero),
                  hipFileInvalidValue);
        CHECK_ERR(hipFileBatchIOCancel(NULL), hipFileInvalidValue);
        CHECK_ERR(hipFileBatchIOCancel((hipFileBatchHandle_t)g_unknown_handle), hipFileInvalidValue);
        CHECK_COUNT(0);
    }

    section("INIT-01");
    CHECK_ERR(hipFileDriverOpen(), hipFileSuccess);
    CHECK_COUNT(1);
    CHECK_ERR(hipFileDriverOpen(), hipFileSuccess);
    CHECK_COUNT(2);
    CHECK_ERR(hipFileDriverClose(), hipFileSuccess);
    CHECK_COUNT(1);
    CHECK_ERR(hipFileDriverClose(), hipFileSuccess);
    CHECK_COUNT(0);
    CHECK_ERR(hipFileDriverClose(), hipFileDriverNotInitialized);
    CHECK_COUNT(0);
}

/* ---- CFG-01..07 ------------------------------------------------------------------ */

#define N_SIZE_PARAMS 12
#define N_BOOL_PARAMS 12
#define N_STR_PARAMS  3

static int defaults_may_be_overridden(void)
{
    extern char **environ;
    for (char **e = environ; *e != NULL; e++)
        if ((strncmp(*e, "HIPFILE_", 8) == 0 && strncmp(*e, "HIPFILE_TEST_", 13) != 0) ||
            strncmp(*e, "CUFILE_", 7) == 0)
            return 1;
    return access("/etc/cufile.json", F_OK) == 0;
}

static size_t get_size_param(hipFileSizeTConfigParameter_t p)
{
    size_t v = (size_t)-1;
    CHECK_ERR(hipFileGetParameterSizeT(p, &v), hipFileSuccess);
    return v;
}

static bool get_bool_param(hipFileBoolConfigParameter_t p)
{
    bool v = false;
    CHECK_ERR(hipFileGetParameterBool(p, &v), hipFileSuccess);
    return v;
}

static void get_str_param(hipFileStringConfigParameter_t p, char *out, int len)
{
    out[0] = '\0';
    CHECK_ERR(hipFileGetParameterString(p, out, len), hipFileSuccess);
}

/* A Set*Parameter of each kind, for the 5026 checks. */
static void check_sets_rejected(int want, const char *why)
{
    (void)why;
    CHECK_ERR(hipFileSetParameterSizeT(hipFileParamExecutionMaxIOQueueDepth, 32), want);
    CHECK_ERR(hipFileSetParameterBool(hipFileParamProfileNvtx, true), want);
    CHECK_ERR(hipFileSetParameterString(hipFileParamLoggingLevel, "WARN"), want);
}

static void test_config(void)
{
    size_t snap_size[N_SIZE_PARAMS];
    bool   snap_bool[N_BOOL_PARAMS];
    char   snap_str[N_STR_PARAMS][512];
    char   s[512];

    reset_driver();

    section("CFG-05");
    {
        size_t v = 12345;
        CHECK_ERR(hipFileGetParameterSizeT(hipFileParamExecutionMaxIOThreads, &v), hipFileSuccess);
        CHECK(v == 0, "ExecutionMaxIOThreads before any Set = %zu, expected 0", v);
    }

    section("CFG defaults (closed)");
    for (int i = 0; i < N_SIZE_PARAMS; i++)
        snap_size[i] = get_size_param((hipFileSizeTConfigParameter_t)i);
    for (int i = 0; i < N_BOOL_PARAMS; i++)
        snap_bool[i] = get_bool_param((hipFileBoolConfigParameter_t)i);
    for (int i = 0; i < N_STR_PARAMS; i++)
        get_str_param((hipFileStringConfigParameter_t)i, snap_str[i], (int)sizeof snap_str[i]);
    if (defaults_may_be_overridden()) {
        note("SKIP default-value table: HIPFILE_*/CUFILE_* variables or /etc/cufile.json present");
    } else {
        static const struct {
            hipFileSizeTConfigParameter_t p;
            size_t                        v;
        } sz[] = {
            {hipFileParamExecutionMaxIOQueueDepth, 128},
            {hipFileParamExecutionMaxIOThreads, 0},
            {hipFileParamExecutionMinIOThresholdSizeKB, 8192},
            {hipFileParamExecutionMaxRequestParallelism, 4},
            {hipFileParamPropertiesMaxDirectIOSizeKB, 16384},
            {hipFileParamPropertiesMaxDeviceCacheSizeKB, 131072},
            {hipFileParamPropertiesPerBufferCacheSizeKB, 1024},
            {hipFileParamPropertiesMaxDevicePinnedMemSizeKB, 33554432},
            {hipFileParamPropertiesIOBatchsize, 128},
            {hipFileParamPollthresholdSizeKB, 4},
            {hipFileParamPropertiesBatchIOTimeoutMs, 5},
        };
        for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
            CHECK(snap_size[sz[i].p] == sz[i].v, "size_t param %d default = %zu, expected %zu", (int)sz[i].p,
                  snap_size[sz[i].p], sz[i].v);
        static const struct {
            hipFileBoolConfigParameter_t p;
            bool                         v;
        } bl[] = {
            {hipFileParamPropertiesUsePollMode, false},  {hipFileParamPropertiesAllowCompatMode, true},
            {hipFileParamForceCompatMode, false},        {hipFileParamFsMiscApiCheckAggressive, false},
            {hipFileParamExecutionParallelIO, true},     {hipFileParamProfileNvtx, false},
            {hipFileParamUsePcip2pdma, false},           {hipFileParamSkipTopologyDetection, false},
        };
        for (size_t i = 0; i < sizeof bl / sizeof bl[0]; i++)
            CHECK(snap_bool[bl[i].p] == bl[i].v, "bool param %d default = %d, expected %d", (int)bl[i].p,
                  (int)snap_bool[bl[i].p], (int)bl[i].v);
        CHECK(strcmp(snap_str[hipFileParamLoggingLevel], "ERROR") == 0, "LoggingLevel default \"%s\"",
              snap_str[hipFileParamLoggingLevel]);
        /* Empty, as libcufile reports them: no log file, the current directory. */
        CHECK(strcmp(snap_str[hipFileParamEnvLogfilePath], "") == 0, "EnvLogfilePath default \"%s\"",
              snap_str[hipFileParamEnvLogfilePath]);
        CHECK(strcmp(snap_str[hipFileParamLogDir], "") == 0, "LogDir default \"%s\"", snap_str[hipFileParamLogDir]);
    }

    section("CFG-07 / invalid parameters (closed)");
    CHECK_ERR(hipFileDriverGetProperties(NULL), hipFileInvalidValue);
    /* (inferred) NULL value pointers and out-of-range enums. */
    CHECK_ERR(hipFileGetParameterSizeT(hipFileParamExecutionMaxIOThreads, NULL), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterBool(hipFileParamProfileNvtx, NULL), hipFileInvalidValue);
    CHECK_ERR(hipFileGetParameterString(hipFileParamLoggingLevel, NULL, 64), hipFileInvalidValue);
    {
        size_t v;
        bool   b;
        CHECK_ERR(hipFileGetParameterSizeT((hipFileSizeTConfigParameter_t)N_SIZE_PARAMS, &v), hipFileInvalidValue);
        CHECK_ERR(hipFileGetParameterSizeT((hipFileSizeTConfigParameter_t)-1, &v), hipFileInvalidValue);
        CHECK_ERR(hipFileGetParameterSizeT((hipFileSizeTConfigParameter_t)INT_MAX, &v), hipFileInvalidValue);
        CHECK_ERR(hipFileGetParameterBool((hipFileBoolConfigParameter_t)N_BOOL_PARAMS, &b), hipFileInvalidValue);
        CHECK_ERR(hipFileGetParameterBool((hipFileBoolConfigParameter_t)-1, &b), hipFileInvalidValue);
        CHECK_ERR(hipFileGetParameterString((hipFileStringConfigParameter_t)N_STR_PARAMS, s, (int)sizeof s),
                  hipFileInvalidValue);
        CHECK_ERR(hipFileGetParameterString((hipFileStringConfigParameter_t)-1, s, (int)sizeof s),
                  hipFileInvalidValue);
        CHECK_ERR(hipFileSetParameterSizeT((hipFileSizeTConfigParameter_t)N_SIZE_PARAMS, 1), hipFileInvalidValue);
        CHECK_ERR(hipFileSetParameterBool((hipFileBoolConfigParameter_t)N_BOOL_PARAMS, true), hipFileInvalidValue);
        CHECK_ERR(hipFileSetParameterString((hipFileStringConfigParameter_t)N_STR_PARAMS, "x"), hipFileInvalidValue);
        CHECK_ERR(hipFileSetParameterString(hipFileParamLogDir, NULL), hipFileInvalidValue);
        /* (inferred) len too small for "ERROR" plus its NUL, zero or negative. */
        size_t need = strlen(snap_str[hipFileParamLoggingLevel]) + 1;
        CHECK_ERR(hipFileGetParameterString(hipFileParamLoggingLevel, s, (int)need - 1), hipFileInvalidValue);
        CHECK_ERR(hipFileGetParameterString(hipFileParamLoggingLevel, s, 0), hipFileInvalidValue);
        CHECK_ERR(hipFileGetParameterString(hipFileParamLoggingLevel, s, -1), hipFileInvalidValue);
        memset(s, 'x', sizeof s);
        CHECK_ERR(hipFileGetParameterString(hipFileParamLoggingLevel, s, (int)need), hipFileSuccess);
        CHECK(memcmp(s, snap_str[hipFileParamLoggingLevel], need) == 0, "exact-length copy \"%.*s\"", (int)need, s);
    }
    CHECK_COUNT(0);

    section("CFG-02");
    CHECK_ERR(hipFileSetParameterSizeT(hipFileParamExecutionMaxIOQueueDepth, 64), hipFileSuccess);
    CHECK_ERR(hipFileSetParameterBool(hipFileParamFsMiscApiCheckAggressive,
                                      !snap_bool[hipFileParamFsMiscApiCheckAggressive]),
              hipFileSuccess);
    CHECK_ERR(hipFileSetParameterString(hipFileParamLoggingLevel, "WARN"), hipFileSuccess); /* assumption 14 */
    CHECK(get_size_param(hipFileParamExecutionMaxIOQueueDepth) == 64, "staged value not read back");
    CHECK(get_bool_param(hipFileParamFsMiscApiCheckAggressive) == !snap_bool[hipFileParamFsMiscApiCheckAggressive],
          "staged bool not read back");
    get_str_param(hipFileParamLoggingLevel, s, (int)sizeof s);
    CHECK(strcmp(s, "WARN") == 0, "staged string \"%s\"", s);
    CHECK_COUNT(0);

    section("CFG-03");
    open_driver();
    CHECK(get_size_param(hipFileParamExecutionMaxIOQueueDepth) == 64, "applied value not read back");
    CHECK(get_bool_param(hipFileParamFsMiscApiCheckAggressive) == !snap_bool[hipFileParamFsMiscApiCheckAggressive],
          "applied bool not read back");
    get_str_param(hipFileParamLoggingLevel, s, (int)sizeof s);
    CHECK(strcmp(s, "WARN") == 0, "applied string \"%s\"", s);

    section("CFG-01");
    check_sets_rejected(hipFileDriverAlreadyOpen, "open");
    CHECK_ERR(hipFileSetParameterSizeT(hipFileParamExecutionMaxIOQueueDepth, 64), hipFileDriverAlreadyOpen);
    CHECK(get_size_param(hipFileParamExecutionMaxIOQueueDepth) == 64, "rejected Set changed the value");
    CHECK(get_size_param(hipFileParamExecutionMaxIOThreads) == 0, "ExecutionMaxIOThreads while open");

    section("CFG-07 (open)");
    CHECK_ERR(hipFileDriverGetProperties(NULL), hipFileInvalidValue);
    {
        hipFileDriverProps_t p;
        memset(&p, 0xab, sizeof p);
        CHECK_ERR(hipFileDriverGetProperties(&p), hipFileSuccess);
        CHECK(p.nvfs.max_direct_io_size == get_size_param(hipFileParamPropertiesMaxDirectIOSizeKB),
              "max_direct_io_size %llu", (unsigned long long)p.nvfs.max_direct_io_size);
        CHECK(p.nvfs.poll_thresh_size == get_size_param(hipFileParamPollthresholdSizeKB), "poll_thresh_size %llu",
              (unsigned long long)p.nvfs.poll_thresh_size);
        CHECK(p.max_device_cache_size == get_size_param(hipFileParamPropertiesMaxDeviceCacheSizeKB),
              "max_device_cache_size %llu", (unsigned long long)p.max_device_cache_size);
        CHECK(p.per_buffer_cache_size == get_size_param(hipFileParamPropertiesPerBufferCacheSizeKB),
              "per_buffer_cache_size %llu", (unsigned long long)p.per_buffer_cache_size);
        CHECK(p.max_device_pinned_mem_size == get_size_param(hipFileParamPropertiesMaxDevicePinnedMemSizeKB),
              "max_device_pinned_mem_size %llu", (unsigned long long)p.max_device_pinned_mem_size);
        CHECK(p.max_batch_io_count == get_size_param(hipFileParamPropertiesIOBatchsize), "max_batch_io_count %u",
              p.max_batch_io_count);
        CHECK(p.max_batch_io_timeout_msecs == get_size_param(hipFileParamPropertiesBatchIOTimeoutMs),
              "max_batch_io_timeout_msecs %u", p.max_batch_io_timeout_msecs);
        /* (inferred) control-flag bits mirror the bool parameters. */
        bool poll   = (p.nvfs.driver_control_flags >> hipFileUsePollMode) & 1u;
        bool compat = (p.nvfs.driver_control_flags >> hipFileAllowCompatMode) & 1u;
        CHECK(poll == get_bool_param(hipFileParamPropertiesUsePollMode), "(inferred) control flags %#x",
              p.nvfs.driver_control_flags);
        CHECK(compat == get_bool_param(hipFileParamPropertiesAllowCompatMode), "(inferred) control flags %#x",
              p.nvfs.driver_control_flags);
    }
    /* (inferred) DriverSet* while open update the live properties. */
    CHECK_ERR(hipFileDriverSetMaxDirectIOSize(8192), hipFileSuccess);
    CHECK_ERR(hipFileDriverSetMaxCacheSize(65536), hipFileSuccess);
    CHECK_ERR(hipFileDriverSetMaxPinnedMemSize(1048576), hipFileSuccess);
    CHECK_ERR(hipFileDriverSetPollMode(true, 8), hipFileSuccess);
    {
        hipFileDriverProps_t p;
        memset(&p, 0, sizeof p);
        CHECK_ERR(hipFileDriverGetProperties(&p), hipFileSuccess);
        CHECK(p.nvfs.max_direct_io_size == 8192, "(inferred) live max_direct_io_size %llu",
              (unsigned long long)p.nvfs.max_direct_io_size);
        CHECK(p.max_device_cache_size == 65536, "(inferred) live max_device_cache_size %llu",
              (unsigned long long)p.max_device_cache_size);
        CHECK(p.max_device_pinned_mem_size == 1048576, "(inferred) live max_device_pinned_mem_size %llu",
              (unsigned long long)p.max_device_pinned_mem_size);
        CHECK(((p.nvfs.driver_control_flags >> hipFileUsePollMode) & 1u) == 1u && p.nvfs.poll_thresh_size == 8,
              "(inferred) live poll mode: flags %#x, threshold %llu", p.nvfs.driver_control_flags,
              (unsigned long long)p.nvfs.poll_thresh_size);
    }
    CHECK_COUNT(1);

    section("CFG-04");
    CHECK_ERR(hipFileDriverClose(), hipFileSuccess);
    CHECK_COUNT(0);
    for (int i = 0; i < N_SIZE_PARAMS; i++) {
        size_t v = get_size_param((hipFileSizeTConfigParameter_t)i);
        CHECK(v == snap_size[i], "size_t param %d after final close = %zu, default %zu", i, v, snap_size[i]);
    }
    for (int i = 0; i < N_BOOL_PARAMS; i++) {
        bool v = get_bool_param((hipFileBoolConfigParameter_t)i);
        CHECK(v == snap_bool[i], "bool param %d after final close = %d, default %d", i, (int)v, (int)snap_bool[i]);
    }
    for (int i = 0; i < N_STR_PARAMS; i++) {
        get_str_param((hipFileStringConfigParameter_t)i, s, (int)sizeof s);
        CHECK(strcmp(s, snap_str[i]) == 0, "string param %d after final close = \"%s\", default \"%s\"", i, s,
              snap_str[i]);
    }

    section("CFG-06");
    for (int which = 0; which < 4; which++) {
        reset_driver();
        hipFileError_t e;
        switch (which) {
        case 0: e = hipFileDriverSetPollMode(false, 4); break;
        case 1: e = hipFileDriverSetMaxDirectIOSize(16384); break;
        case 2: e = hipFileDriverSetMaxCacheSize(131072); break;
        default: e = hipFileDriverSetMaxPinnedMemSize(33554432); break;
        }
        CHECK(e.err == hipFileSuccess && e.hip_drv_err == hipSuccess, "DriverSet #%d while closed: {%d, %d}", which,
              (int)e.err, (int)e.hip_drv_err);
        CHECK_COUNT(0);
        check_sets_rejected(hipFileDriverAlreadyOpen, "after DriverSet while closed");
        CHECK(get_size_param(hipFileParamExecutionMaxIOQueueDepth) == snap_size[hipFileParamExecutionMaxIOQueueDepth],
              "Get after DriverSet #%d", which);
        open_driver();
        CHECK_ERR(hipFileDriverClose(), hipFileSuccess);
        CHECK_ERR(hipFileSetParameterSizeT(hipFileParamExecutionMaxIOQueueDepth, 32), hipFileSuccess);
        CHECK(get_size_param(hipFileParamExecutionMaxIOQueueDepth) == 32, "Set after open/close cycle, #%d", which);
        /* An open/close cycle drops the staged value again. */
        open_driver();
        CHECK_ERR(hipFileDriverClose(), hipFileSuccess);
        CHECK(get_size_param(hipFileParamExecutionMaxIOQueueDepth) == snap_size[hipFileParamExecutionMaxIOQueueDepth],
              "staged value survived a final close, #%d", which);
    }
    CHECK_COUNT(0);
}

/* ---- INIT-03, 04, 05, 11 and HDL-03/04/05: implicit initialisation ------------- */

static void test_implicit_init(const char *path)
{
    int            fd = open_or_die(path, O_RDWR);
    hipFileDescr_t d  = fd_descr(fd);
    hipFileHandle_t fh;

    section("INIT-03");
    reset_driver();
    fh = REGISTER_FD(fd);
    CHECK_COUNT(1);
    hipFileHandleDeregister(fh);
    CHECK_COUNT(1); /* assumption 5 */
    reset_driver();

    section("HDL-03 (count 0)");
    fh = NULL;
    CHECK_ERR(hipFileHandleRegister(NULL, &d), hipFileInvalidValue);
    CHECK_COUNT(0);
    CHECK_ERR(hipFileHandleRegister(&fh, NULL), hipFileInvalidValue);
    CHECK_COUNT(0);
    CHECK_ERR(hipFileHandleRegister(NULL, NULL), hipFileInvalidValue);
    CHECK_COUNT(0);

    section("HDL-04 (count 0)");
    {
        static const int bad_types[] = {hipFileHandleTypeOpaqueWin32, hipFileHandleTypeUserspaceFS, 0, 4, -1, INT_MAX};
        for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
            hipFileDescr_t bd = fd_descr(fd);
            bd.type           = (hipFileFileHandleType_t)bad_types[i];
            fh                = NULL;
            hipFileError_t e  = hipFileHandleRegister(&fh, &bd);
            CHECK(e.err == hipFileIONotSupported && e.hip_drv_err == hipSuccess, "type %d: got {%d, %d}, expected {5008, 0}",
                  bad_types[i], (int)e.err, (int)e.hip_drv_err);
            CHECK_COUNT(0);
        }
    }

    section("HDL-05 (count 0)");
    {
        hipFileDescr_t bd = fd_descr(-1);
        CHECK_ERR(hipFileHandleRegister(&fh, &bd), hipFileInternalError);
        CHECK_COUNT(0);
        bd.handle.fd = 987654; /* not an open descriptor: statx fails with EBADF */
        CHECK_ERR(hipFileHandleRegister(&fh, &bd), hipFileInternalError);
        CHECK_COUNT(0);
    }

    section("INIT-11");
    reset_driver();
    fh = REGISTER_FD(fd);
    CHECK_COUNT(1);
    open_driver();
    CHECK_COUNT(2);
    hipFileHandleDeregister(fh);
    reset_driver();

    section("INIT-04");
    reset_driver();
    CHECK_ERR(hipFileBufRegister(NULL, 4096, 0), hipFileInvalidValue);
    CHECK_COUNT(1);
    reset_driver();
    {
        void *host = malloc(8192);
        CHECK_ERR(hipFileBufRegister(host, 8192, 0), hipFileSuccess); /* project: host memory accepted */
        CHECK_COUNT(1);
        reset_driver(); /* the final close drops the registration */
        free(host);
    }

    section("INIT-05");
    {
        unsigned char buf[64];
        size_t        size = sizeof buf;
        hoff_t        foff = 0, boff = 0;
        ssize_t       bytes = 0;
        reset_driver();
        CHECK_ERR(hipFileReadAsync(NULL, buf, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        CHECK_COUNT(1);
        reset_driver();
        CHECK_ERR(hipFileWriteAsync(NULL, buf, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        CHECK_COUNT(1);
        reset_driver();
        /* Even with a registered-looking handle: the count-0 rule comes first. */
        CHECK_ERR(hipFileReadAsync(g_unknown_handle, buf, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        CHECK_COUNT(1);
        reset_driver();
    }

    section("HDL-03/04 (open)");
    open_driver();
    CHECK_ERR(hipFileHandleRegister(NULL, &d), hipFileInvalidValue);
    CHECK_ERR(hipFileHandleRegister(&fh, NULL), hipFileInvalidValue);
    {
        hipFileDescr_t bd = fd_descr(fd);
        bd.type           = hipFileHandleTypeUserspaceFS;
        CHECK_ERR(hipFileHandleRegister(&fh, &bd), hipFileIONotSupported);
        bd.type = hipFileHandleTypeOpaqueWin32;
        CHECK_ERR(hipFileHandleRegister(&fh, &bd), hipFileIONotSupported);
        bd = fd_descr(-1);
        CHECK_ERR(hipFileHandleRegister(&fh, &bd), hipFileInternalError);
    }
    CHECK_COUNT(1);
    reset_driver();
    close(fd);
}

/* ---- INIT-10: concurrent implicit initialisation -------------------------------- */

#define N_THREADS 64

struct init10_arg {
    pthread_barrier_t *barrier;
    int                fd;  /* >= 0: HandleRegister this descriptor; else BufRegister buf */
    void              *buf;
    hipFileHandle_t    fh;
    hipFileError_t     result;
};

static void *init10_thread(void *p)
{
    struct init10_arg *a = p;
    pthread_barrier_wait(a->barrier);
    if (a->fd >= 0) {
        hipFileDescr_t d = fd_descr(a->fd);
        a->result        = hipFileHandleRegister(&a->fh, &d);
    } else {
        a->result = hipFileBufRegister(a->buf, 4096, 0);
    }
    return NULL;
}

static void test_concurrent_init(const char *path)
{
    section("INIT-10");
    reset_driver();
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, N_THREADS);
    struct init10_arg args[N_THREADS];
    pthread_t         tid[N_THREADS];
    int               base_fd = open_or_die(path, O_RDWR);
    int               started = 0;
    for (int i = 0; i < N_THREADS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].barrier = &barrier;
        args[i].fd      = (i % 2 == 0) ? dup(base_fd) : -1; /* half files, half buffers */
        args[i].buf     = args[i].fd >= 0 ? NULL : malloc(4096);
        if (pthread_create(&tid[i], NULL, init10_thread, &args[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(2);
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < N_THREADS; i++)
        CHECK(args[i].result.err == hipFileSuccess, "thread %d (%s): {%d, %d}", i,
              args[i].fd >= 0 ? "HandleRegister" : "BufRegister", (int)args[i].result.err,
              (int)args[i].result.hip_drv_err);
    CHECK_COUNT(1);
    for (int i = 0; i < N_THREADS; i++) {
        if (args[i].fd >= 0) {
            hipFileHandleDeregister(args[i].fh);
            close(args[i].fd);
        } else {
            CHECK_ERR(hipFileBufDeregister(args[i].buf), hipFileSuccess);
            free(args[i].buf);
        }
    }
    CHECK_COUNT(1);
    reset_driver();
    close(base_fd);
}

/* ---- INIT-12: the final DriverClose releases everything -------------------------- */

static void test_final_close(const char *path)
{
    char rp[PATH_MAX];
    if (realpath(path, rp) == NULL) {
        fprintf(stderr, "realpath(%s): %s\n", path, strerror(errno));
        exit(2);
    }
    section("INIT-12");
    reset_driver();
    open_driver();
    int fd = open_or_die(path, O_RDWR);
    CHECK(count_fds_to(rp) == 1, "fds to the file before registering: %d", count_fds_to(rp));
    hipFileHandle_t fh  = REGISTER_FD(fd);
    unsigned char  *buf = malloc(65536);
    CHECK_ERR(hipFileBufRegister(buf, 65536, 0), hipFileSuccess);
    CHECK_ERR(hipFileStreamRegister(NULL, HIPFILE_STREAM_FIXED_BUF_OFFSET), hipFileSuccess); /* assumption 1 */
    hipFileBatchHandle_t b = NULL;
    CHECK_ERR(hipFileBatchIOSetUp(&b, 4), hipFileSuccess);
    CHECK_SSIZE(hipFileRead(fh, buf, 4096, 0, 0), 4096); /* the handle works before the close */

    CHECK_ERR(hipFileDriverClose(), hipFileSuccess);
    CHECK_COUNT(0);
    CHECK(fcntl(fd, F_GETFD) != -1, "client fd closed by the library: %s", strerror(errno));
    CHECK(count_fds_to(rp) == 1, "fds to the file after the final close: %d (library-owned fds left open)",
          count_fds_to(rp));

    open_driver();
    CHECK_SSIZE(hipFileRead(fh, buf, 16, 0, 0), -hipFileHandleNotRegistered);
    CHECK_ERR(hipFileBufDeregister(buf), hipFileMemoryNotRegistered);
    CHECK_ERR(hipFileStreamDeregister(NULL), hipFileInvalidValue); /* streams were cleared */
    {
        hipFileHandle_t fh2 = REGISTER_FD(fd); /* files were cleared: no 5028 */
        CHECK_ERR(hipFileBufRegister(buf, 65536, 0), hipFileSuccess); /* buffers were cleared: no 5023 */
        hipFileIOParams_t io;
        memset(&io, 0, sizeof io);
        io.mode                  = hipFileBatch;
        io.u.batch.devPtr_base   = buf;
        io.u.batch.file_offset   = 0;
        io.u.batch.devPtr_offset = 0;
        io.u.batch.size          = 4096;
        io.fh                    = fh2;
        io.opcode                = hipFileBatchRead;
        CHECK_ERR(hipFileBatchIOSubmit(b, 1, &io, 0), hipFileInvalidValue); /* batches were cleared */
        CHECK_ERR(hipFileStreamRegister(NULL, 0), hipFileSuccess);          /* not "already registered" */
        CHECK_ERR(hipFileStreamDeregister(NULL), hipFileSuccess);
        CHECK_ERR(hipFileBufDeregister(buf), hipFileSuccess);
        hipFileHandleDeregister(fh2);
    }
    reset_driver();
    close(fd);
    free(buf);
}

/* ---- HDL-01, 02, 12, 14 and open-flag screening ---------------------------------- */

static void test_handles(const char *path)
{
    unsigned char buf[4096];
    reset_driver();
    open_driver();

    section("HDL-02");
    int             fd = open_or_die(path, O_RDWR);
    hipFileHandle_t fh = REGISTER_FD(fd);
    {
        hipFileDescr_t  d   = fd_descr(fd);
        hipFileHandle_t fh2 = NULL;
        CHECK_ERR(hipFileHandleRegister(&fh2, &d), hipFileHandleAlreadyRegistered);
        CHECK_COUNT(1);
        int             dfd = dup(fd);
        hipFileHandle_t fh3 = REGISTER_FD(dfd); /* assumption 9: keyed by descriptor number */
        CHECK(fh3 != fh, "dup'd fd got the same handle %p", fh3);
        hipFileHandleDeregister(fh3);
        close(dfd);
    }

    section("HDL-12");
    hipFileHandleDeregister(NULL);
    hipFileHandleDeregister(g_unknown_handle);
    CHECK_SSIZE(hipFileRead(fh, buf, 16, 0, 0), 16); /* the real handle is untouched */
    CHECK_COUNT(1);

    section("HDL-14");
    hipFileHandleDeregister(fh);
    CHECK(fcntl(fd, F_GETFD) != -1, "client fd closed by HandleDeregister: %s", strerror(errno));
    hipFileHandleDeregister(fh); /* twice: no-op */
    CHECK_SSIZE(hipFileRead(fh, buf, 16, 0, 0), -hipFileHandleNotRegistered);
    fh = REGISTER_FD(fd); /* can be registered again */
    hipFileHandleDeregister(fh);
    close(fd);
    CHECK_COUNT(1);

    section("open flags: O_APPEND / O_PATH -> 5019");
    {
        static const struct {
            int         flags;
            const char *name;
        } rejected[] = {
            {O_RDWR | O_APPEND, "O_RDWR|O_APPEND"},
            {O_WRONLY | O_APPEND, "O_WRONLY|O_APPEND"},
            {O_RDONLY | O_APPEND, "O_RDONLY|O_APPEND"},
            {O_PATH, "O_PATH"},
        };
        for (size_t i = 0; i < sizeof rejected / sizeof rejected[0]; i++) {
            int             rfd = open_or_die(path, rejected[i].flags);
            hipFileDescr_t  d   = fd_descr(rfd);
            hipFileHandle_t rfh = NULL;
            hipFileError_t  e   = hipFileHandleRegister(&rfh, &d);
            CHECK(e.err == hipFileInvalidFileOpenFlag && e.hip_drv_err == hipSuccess,
                  "%s: got {%d, %d}, expected {5019, 0}", rejected[i].name, (int)e.err, (int)e.hip_drv_err);
            if (e.err == hipFileSuccess)
                hipFileHandleDeregister(rfh);
            CHECK_COUNT(1);
            close(rfd);
        }
    }

    section("open flags: accepted (assumption 10)");
    {
        static const struct {
            int         flags;
            const char *name;
        } accepted[] = {
            {O_RDONLY, "O_RDONLY"},
            {O_WRONLY, "O_WRONLY"},
            {O_RDWR | O_NONBLOCK, "O_RDWR|O_NONBLOCK"},
            {O_RDWR | O_SYNC, "O_RDWR|O_SYNC"},
            {O_RDWR | O_CLOEXEC, "O_RDWR|O_CLOEXEC"},
            {O_RDWR | O_DIRECT, "O_RDWR|O_DIRECT"},
        };
        for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
            int afd = open(path, accepted[i].flags);
            if (afd < 0) {
                note("SKIP %s: open failed: %s", accepted[i].name, strerror(errno));
                continue;
            }
            hipFileDescr_t  d   = fd_descr(afd);
            hipFileHandle_t afh = NULL;
            hipFileError_t  e   = hipFileHandleRegister(&afh, &d);
            CHECK(e.err == hipFileSuccess && afh != NULL, "%s: got {%d, %d}", accepted[i].name, (int)e.err,
                  (int)e.hip_drv_err);
            if (e.err == hipFileSuccess)
                hipFileHandleDeregister(afh);
            close(afd);
        }
    }
    CHECK_COUNT(1);
    reset_driver();
}

/* ---- BUF-04, BUF-08 with host memory --------------------------------------------- */

static void test_buffers(void)
{
    reset_driver();
    open_driver();
    section("BUF host memory");
    unsigned char *a = malloc(1 << 20);
    void          *b = NULL;
    if (posix_memalign(&b, 4096, 1 << 16) != 0) {
        perror("posix_memalign");
        exit(2);
    }
    unsigned char never[64];

    CHECK_ERR(hipFileBufRegister(a, 1 << 20, 0), hipFileSuccess);
    CHECK_ERR(hipFileBufRegister(b, 1 << 16, HIPFILE_RDMA_REGISTER | HIPFILE_RDMA_RELAXED_ORDERING), hipFileSuccess);

    section("BUF-04");
    CHECK_ERR(hipFileBufRegister(a, 1 << 20, 0), hipFileMemoryAlreadyRegistered);
    CHECK_ERR(hipFileBufRegister(a, 4096, 0), hipFileMemoryAlreadyRegistered); /* same base, other length */

    section("BUF-08");
    CHECK_ERR(hipFileBufDeregister(a), hipFileSuccess);
    CHECK_ERR(hipFileBufDeregister(a), hipFileMemoryNotRegistered);
    CHECK_ERR(hipFileBufDeregister(never), hipFileMemoryNotRegistered);
    CHECK_ERR2(hipFileBufDeregister(NULL), hipFileMemoryNotRegistered, hipFileInvalidValue); /* assumption 4 */
    CHECK_ERR(hipFileBufDeregister(b), hipFileSuccess);
    CHECK_ERR(hipFileBufDeregister(b), hipFileMemoryNotRegistered);

    section("BUF NULL");
    CHECK_ERR(hipFileBufRegister(NULL, 4096, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileBufRegister(NULL, 0, 0), hipFileInvalidValue);
    CHECK_COUNT(1);

    /* Registration again after deregistration. */
    CHECK_ERR(hipFileBufRegister(a, 1 << 20, 0), hipFileSuccess);
    CHECK_ERR(hipFileBufDeregister(a), hipFileSuccess);
    reset_driver();
    free(a);
    free(b);
}

/* ---- IO-01..03, IO-11/12: synchronous IO argument checks ------------------------- */

#define FILE_SIZE 65536

static void test_sync_io(const char *path, const char *empty_path)
{
    reset_driver();
    open_driver();
    int             fd  = open_or_die(path, O_RDWR);
    hipFileHandle_t fh  = REGISTER_FD(fd);
    const size_t    L   = 8192; /* registered length */
    unsigned char  *reg = malloc(L);
    unsigned char  *unr = malloc(L);
    CHECK_ERR(hipFileBufRegister(reg, L, 0), hipFileSuccess);

    section("IO-01");
    CHECK_SSIZE(hipFileRead(g_unknown_handle, unr, 16, 0, 0), -hipFileHandleNotRegistered);
    CHECK_SSIZE(hipFileWrite(g_unknown_handle, unr, 16, 0, 0), -hipFileHandleNotRegistered);
    CHECK_SSIZE2(hipFileRead(NULL, unr, 16, 0, 0), -hipFileHandleNotRegistered, -hipFileInvalidValue);
    CHECK_SSIZE2(hipFileWrite(NULL, unr, 16, 0, 0), -hipFileHandleNotRegistered, -hipFileInvalidValue);

    section("IO-02");
    CHECK_SSIZE(hipFileRead(fh, unr, 16, -1, 0), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, unr, 16, INT64_MIN, 0), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, unr, 16, 0, -1), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, unr, 16, 0, INT64_MIN), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, reg, 16, -4096, 0), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, reg, 16, 0, -1), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, unr, 16, -1, 0), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, unr, 16, 0, -1), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, reg, 16, -1, 0), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, reg, 16, 0, -1), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, unr, 0, -1, 0), -hipFileInvalidValue); /* size 0 does not skip validation */

    section("IO-03 (registered host buffer, assumption 11)");
    CHECK_SSIZE(hipFileRead(fh, reg, 16, 0, (hoff_t)L), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, reg, 16, 0, (hoff_t)L + 1), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, reg, 0, 0, (hoff_t)L), -hipFileInvalidValue); /* (inferred) */
    CHECK_SSIZE(hipFileRead(fh, reg, L + 1, 0, 0), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, reg, L / 2 + 1, 0, (hoff_t)(L / 2)), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, reg, SIZE_MAX, 0, 1), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileRead(fh, reg, 4096, 0, INT64_MAX), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, reg, 16, 0, (hoff_t)L), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, reg, L + 1, 0, 0), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, reg, L / 2 + 1, 0, (hoff_t)(L / 2)), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, reg, SIZE_MAX, 0, 1), -hipFileInvalidValue);
    CHECK_SSIZE(hipFileWrite(fh, reg, 4096, 0, INT64_MAX), -hipFileInvalidValue);
    /* The boundaries themselves are valid. */
    memset(reg, 0, L);
    CHECK_SSIZE(hipFileRead(fh, reg, L, 0, 0), (ssize_t)L);
    CHECK_SSIZE(hipFileRead(fh, reg, 1, 100, (hoff_t)L - 1), 1);
    CHECK(reg[L - 1] == pattern_byte(100), "byte at buffer end: %#x, expected %#x", reg[L - 1], pattern_byte(100));
    CHECK_SSIZE(hipFileRead(fh, reg, L / 2, 0, (hoff_t)(L / 2)), (ssize_t)(L / 2));
    {
        int bad = -1;
        for (size_t i = 0; i < L / 2 && bad < 0; i++)
            if (reg[L / 2 + i] != pattern_byte(i))
                bad = (int)i;
        CHECK(bad < 0, "data mismatch at buffer offset %d", bad < 0 ? 0 : (int)(L / 2) + bad);
    }
    /* Nothing above may have written to the file. */
    {
        unsigned char *chk = malloc(FILE_SIZE);
        ssize_t        n   = pread(fd, chk, FILE_SIZE, 0);
        int            bad = -1;
        for (ssize_t i = 0; i < n && bad < 0; i++)
            if (chk[i] != pattern_byte((size_t)i))
                bad = (int)i;
        CHECK(n == FILE_SIZE && bad < 0, "file changed by rejected writes: pread %zd, first difference at %d", n, bad);
        free(chk);
    }

    section("IO-11");
    {
        int             efd = open_or_die(empty_path, O_RDWR);
        hipFileHandle_t efh = REGISTER_FD(efd);
        CHECK_SSIZE(hipFileRead(efh, unr, 4096, 0, 0), 0);
        CHECK_SSIZE(hipFileRead(efh, reg, L, 0, 0), 0);
        CHECK_SSIZE(hipFileRead(efh, unr, 1, 0, 0), 0);
        hipFileHandleDeregister(efh);
        close(efd);
    }

    section("IO-12");
    memset(unr, 0, L);
    CHECK_SSIZE(hipFileRead(fh, unr, 4096, FILE_SIZE - 100, 0), 100);
    {
        int bad = -1;
        for (int i = 0; i < 100 && bad < 0; i++)
            if (unr[i] != pattern_byte((size_t)(FILE_SIZE - 100 + i)))
                bad = i;
        CHECK(bad < 0, "short read data mismatch at %d", bad);
    }
    CHECK_SSIZE(hipFileRead(fh, unr, 1, FILE_SIZE - 1, 7), 1);
    CHECK(unr[7] == pattern_byte(FILE_SIZE - 1), "last byte %#x, expected %#x", unr[7], pattern_byte(FILE_SIZE - 1));
    CHECK_SSIZE(hipFileRead(fh, unr, 16, FILE_SIZE, 0), 0);
    CHECK_SSIZE(hipFileRead(fh, unr, 16, FILE_SIZE + 4096, 0), 0);
    CHECK_SSIZE(hipFileRead(fh, reg, L, FILE_SIZE - 1, 0), 1);

    section("size 0");
    CHECK_SSIZE(hipFileRead(fh, unr, 0, 0, 0), 0);
    CHECK_SSIZE(hipFileRead(fh, reg, 0, 0, 0), 0);
    CHECK_SSIZE(hipFileWrite(fh, unr, 0, 0, 0), 0);
    CHECK_SSIZE(hipFileWrite(fh, reg, 0, 12345, 0), 0);
    {
        struct stat st = {0};
        CHECK(fstat(fd, &st) == 0 && st.st_size == FILE_SIZE, "size after zero-byte writes %lld",
              (long long)st.st_size);
    }

    CHECK_ERR(hipFileBufDeregister(reg), hipFileSuccess);
    hipFileHandleDeregister(fh);
    reset_driver();
    close(fd);
    free(reg);
    free(unr);
}

/* ---- STR-01..04 on the NULL stream (assumption 1) --------------------------------- */

static void test_streams(void)
{
    static const unsigned bad_flags[] = {0x10, 0x20, 0x1f, 0x100, 0x80000000u, 0xffffffffu};

    reset_driver();
    section("STR at count 0");
    CHECK_ERR(hipFileStreamRegister(NULL, 0), hipFileSuccess);
    CHECK_COUNT(0);
    CHECK_ERR(hipFileStreamDeregister(NULL), hipFileSuccess);
    CHECK_COUNT(0);
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++)
        CHECK_ERR(hipFileStreamRegister(NULL, bad_flags[i]), hipFileInvalidValue);
    CHECK_ERR(hipFileStreamDeregister(NULL), hipFileInvalidValue);
    CHECK_COUNT(0);

    open_driver();
    section("STR-02");
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++)
        CHECK_ERR(hipFileStreamRegister(NULL, bad_flags[i]), hipFileInvalidValue);
    CHECK_ERR(hipFileStreamDeregister(NULL), hipFileInvalidValue); /* the rejected calls registered nothing */

    section("STR-01/03/04");
    for (unsigned f = 0; f <= HIPFILE_STREAM_FLAGS_MASK; f++) {
        hipFileError_t e = hipFileStreamRegister(NULL, f);
        CHECK(e.err == hipFileSuccess && e.hip_drv_err == hipSuccess, "register flags %#x: {%d, %d}", f, (int)e.err,
              (int)e.hip_drv_err);
        e = hipFileStreamRegister(NULL, f);
        CHECK(e.err == hipFileInvalidValue, "register twice, flags %#x: {%d, %d}, expected 5022", f, (int)e.err,
              (int)e.hip_drv_err);
        e = hipFileStreamRegister(NULL, (f + 1) & HIPFILE_STREAM_FLAGS_MASK);
        CHECK(e.err == hipFileInvalidValue, "register twice, other flags after %#x: {%d, %d}, expected 5022", f,
              (int)e.err, (int)e.hip_drv_err);
        e = hipFileStreamDeregister(NULL);
        CHECK(e.err == hipFileSuccess && e.hip_drv_err == hipSuccess, "deregister, flags %#x: {%d, %d}", f, (int)e.err,
              (int)e.hip_drv_err);
        e = hipFileStreamDeregister(NULL);
        CHECK(e.err == hipFileInvalidValue, "deregister twice, flags %#x: {%d, %d}, expected 5022", f, (int)e.err,
              (int)e.hip_drv_err);
    }
    CHECK_COUNT(1);
    reset_driver();
}

/* ---- ASY-01, 02, 04, 06 (assumption 2) ---------------------------------------- */

typedef hipFileError_t (*async_fn)(hipFileHandle_t, void *, size_t *, hoff_t *, hoff_t *, ssize_t *, hipStream_t);

static void test_async(const char *path)
{
    static const struct {
        async_fn    fn;
        const char *asy01, *asy02, *asy04, *asy06;
    } fns[] = {
        {hipFileReadAsync, "ASY-01 ReadAsync", "ASY-02 ReadAsync", "ASY-04 ReadAsync", "ASY-06 ReadAsync"},
        {hipFileWriteAsync, "ASY-01 WriteAsync", "ASY-02 WriteAsync", "ASY-04 WriteAsync", "ASY-06 WriteAsync"},
    };
    reset_driver();
    open_driver();
    int             fd  = open_or_die(path, O_RDWR);
    hipFileHandle_t fh  = REGISTER_FD(fd);
    const size_t    L   = 8192;
    unsigned char  *reg = malloc(L);
    unsigned char  *unr = malloc(L);
    CHECK_ERR(hipFileBufRegister(reg, L, 0), hipFileSuccess);

    /* A handle that was registered once and then deregistered. */
    int             sfd   = open_or_die(path, O_RDONLY);
    hipFileHandle_t stale = REGISTER_FD(sfd);
    hipFileHandleDeregister(stale);

    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        async_fn f = fns[k].fn;
        size_t   size;
        hoff_t   foff, boff;
        ssize_t  bytes;
#define RESET_ARGS() (size = 16, foff = 0, boff = 0, bytes = 0)

        section(fns[k].asy01);
        RESET_ARGS();
        CHECK_ERR(f(fh, NULL, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        CHECK_ERR(f(fh, unr, NULL, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        CHECK_ERR(f(fh, unr, &size, NULL, &boff, &bytes, NULL), hipFileInvalidValue);
        CHECK_ERR(f(fh, unr, &size, &foff, NULL, &bytes, NULL), hipFileInvalidValue);
        CHECK_ERR(f(fh, unr, &size, &foff, &boff, NULL, NULL), hipFileInvalidValue);
        CHECK_ERR(f(fh, NULL, NULL, NULL, NULL, NULL, NULL), hipFileInvalidValue);
        CHECK_ERR(f(fh, reg, &size, &foff, &boff, NULL, NULL), hipFileInvalidValue);
        /* The NULL checks come before the handle lookup. */
        CHECK_ERR(f(g_unknown_handle, unr, &size, &foff, &boff, NULL, NULL), hipFileInvalidValue);
        CHECK_ERR(f(g_unknown_handle, NULL, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);

        section(fns[k].asy02);
        RESET_ARGS();
        CHECK_ERR(f(g_unknown_handle, unr, &size, &foff, &boff, &bytes, NULL), hipFileHandleNotRegistered);
        CHECK_ERR(f(stale, unr, &size, &foff, &boff, &bytes, NULL), hipFileHandleNotRegistered);
        CHECK_ERR2(f(NULL, unr, &size, &foff, &boff, &bytes, NULL), hipFileHandleNotRegistered,
                   hipFileInvalidValue); /* assumption 3 */
        /* An unknown handle is reported even for a zero-size request. */
        size = 0;
        CHECK_ERR(f(g_unknown_handle, unr, &size, &foff, &boff, &bytes, NULL), hipFileHandleNotRegistered);

        section(fns[k].asy04);
        RESET_ARGS();
        foff = -1;
        CHECK_ERR(f(fh, unr, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        RESET_ARGS();
        foff = INT64_MIN;
        CHECK_ERR(f(fh, reg, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        RESET_ARGS();
        boff = -1;
        CHECK_ERR(f(fh, unr, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        RESET_ARGS();
        boff = -1;
        CHECK_ERR(f(fh, reg, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        RESET_ARGS(); /* registered length L (assumption 11) */
        boff = (hoff_t)L;
        CHECK_ERR(f(fh, reg, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        RESET_ARGS();
        size = L + 1;
        CHECK_ERR(f(fh, reg, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        RESET_ARGS();
        size = L / 2 + 1;
        boff = (hoff_t)(L / 2);
        CHECK_ERR(f(fh, reg, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        RESET_ARGS();
        size = SIZE_MAX;
        boff = 1;
        CHECK_ERR(f(fh, reg, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);
        RESET_ARGS(); /* validation runs before the zero-size shortcut */
        size = 0;
        foff = -1;
        CHECK_ERR(f(fh, unr, &size, &foff, &boff, &bytes, NULL), hipFileInvalidValue);

        section(fns[k].asy06);
        RESET_ARGS();
        size  = 0;
        bytes = 777;
        CHECK_ERR(f(fh, unr, &size, &foff, &boff, &bytes, NULL), hipFileSuccess);
        CHECK(bytes == 0, "*bytes = %zd after a zero-size request, expected 0", bytes);
        size  = 0;
        bytes = 777;
        boff  = 100;
        foff  = 4096;
        CHECK_ERR(f(fh, reg, &size, &foff, &boff, &bytes, NULL), hipFileSuccess);
        CHECK(bytes == 0, "*bytes = %zd after a zero-size request (registered buffer), expected 0", bytes);
#undef RESET_ARGS
    }
    {
        struct stat st = {0};
        CHECK(fstat(fd, &st) == 0 && st.st_size == FILE_SIZE, "file size changed to %lld", (long long)st.st_size);
    }
    CHECK_COUNT(1);
    CHECK_ERR(hipFileBufDeregister(reg), hipFileSuccess);
    hipFileHandleDeregister(fh);
    reset_driver();
    close(fd);
    close(sfd);
    free(reg);
    free(unr);
}

/* ---- BAT-01..07 -------------------------------------------------------------------- */

/* Collect up to `want` events within `timeout_s` seconds; returns how many arrived. */
static unsigned collect_events(hipFileBatchHandle_t b, unsigned want, hipFileIOEvents_t *ev, int timeout_s)
{
    unsigned        got = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (got < want) {
        unsigned        nr = want - got;
        struct timespec to = {0, 200 * 1000000L};
        hipFileError_t  e  = hipFileBatchIOGetStatus(b, 1, &nr, ev + got, &to);
        if (e.err != hipFileSuccess) {
            CHECK(e.err == hipFileSuccess, "BatchIOGetStatus while collecting: {%d, %d}", (int)e.err,
                  (int)e.hip_drv_err);
            break;
        }
        CHECK(nr <= want - got, "GetStatus returned %u events, more than the %u asked for", nr, want - got);
        got += nr;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > timeout_s)
            break;
    }
    return got;
}

static hipFileIOParams_t io_entry(hipFileHandle_t fh, void *base, int64_t foff, int64_t boff, size_t size,
                                  hipFileOpcode_t op, void *cookie)
{
    hipFileIOParams_t io;
    memset(&io, 0, sizeof io);
    io.mode                  = hipFileBatch;
    io.u.batch.devPtr_base   = base;
    io.u.batch.file_offset   = foff;
    io.u.batch.devPtr_offset = boff;
    io.u.batch.size          = size;
    io.fh                    = fh;
    io.opcode                = op;
    io.cookie                = cookie;
    return io;
}

/* No events may be (or become) available: checks that a rejected submit queued nothing. */
static void check_nothing_queued(hipFileBatchHandle_t b, const char *what)
{
    hipFileIOEvents_t ev[8];
    struct timespec   zero = {0, 0};
    sleep_ms(50);
    unsigned nr = 8;
    CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, ev, &zero), hipFileSuccess);
    CHECK(nr == 0, "%s: %u events appeared after a rejected submit", what, nr);
}

static void test_batch(const char *path)
{
    reset_driver();
    open_driver();
    int             fd = open_or_die(path, O_RDWR);
    hipFileHandle_t fh = REGISTER_FD(fd);
    const size_t    L  = 65536;
    unsigned char  *rb = malloc(L);
    CHECK_ERR(hipFileBufRegister(rb, L, 0), hipFileSuccess);
    hipFileBatchHandle_t b = NULL;
    int                  cookies[8];

    section("BAT-01");
    CHECK_ERR(hipFileBatchIOSetUp(NULL, 8), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOSetUp(NULL, 0), hipFileInvalidValue);

    section("BAT-02");
    {
        size_t maxb = get_size_param(hipFileParamPropertiesIOBatchsize);
        if (!defaults_may_be_overridden())
            CHECK(maxb == 128, "PropertiesIOBatchsize default %zu", maxb);
        CHECK_ERR(hipFileBatchIOSetUp(&b, 0), hipFileInvalidValue);
        CHECK_ERR(hipFileBatchIOSetUp(&b, (unsigned)maxb + 1), hipFileInvalidValue);
        CHECK_ERR(hipFileBatchIOSetUp(&b, UINT_MAX), hipFileInvalidValue);
        b = NULL;
        CHECK_ERR(hipFileBatchIOSetUp(&b, (unsigned)maxb), hipFileSuccess);
        CHECK(b != NULL, "handle %p", b);
        hipFileBatchIODestroy(b);
        b = NULL;
        CHECK_ERR(hipFileBatchIOSetUp(&b, 1), hipFileSuccess);
        hipFileBatchIODestroy(b);
    }

    hipFileIOParams_t good = io_entry(fh, rb, 0, 0, 4096, hipFileBatchRead, &cookies[0]);

    section("BAT-03");
    CHECK_ERR(hipFileBatchIOSubmit((hipFileBatchHandle_t)g_unknown_handle, 1, &good, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOSubmit(NULL, 1, &good, 0), hipFileInvalidValue);
    {
        hipFileBatchHandle_t gone = NULL;
        CHECK_ERR(hipFileBatchIOSetUp(&gone, 4), hipFileSuccess);
        hipFileBatchIODestroy(gone);
        CHECK_ERR(hipFileBatchIOSubmit(gone, 1, &good, 0), hipFileInvalidValue);
    }
    /* assumption 6 */
    {
        unsigned          nr = 1;
        hipFileIOEvents_t ev[1];
        struct timespec   zero = {0, 0};
        CHECK_ERR(hipFileBatchIOGetStatus((hipFileBatchHandle_t)g_unknown_handle, 0, &nr, ev, &zero),
                  hipFileInvalidValue);
        CHECK_ERR(hipFileBatchIOCancel((hipFileBatchHandle_t)g_unknown_handle), hipFileInvalidValue);
        CHECK_ERR(hipFileBatchIOCancel(NULL), hipFileInvalidValue);
    }

    section("BAT-13 (destroy NULL)");
    hipFileBatchIODestroy(NULL);
    CHECK_COUNT(1);

    b = NULL;
    CHECK_ERR(hipFileBatchIOSetUp(&b, 4), hipFileSuccess);

    section("BAT-06");
    CHECK_ERR(hipFileBatchIOSubmit(b, 1, NULL, 0), hipFileInvalidValue);
    CHECK_ERR(hipFileBatchIOSubmit(b, 4, NULL, 0), hipFileInvalidValue);

    section("BAT-04");
    {
        static const struct {
            int         field;
            const char *what;
        } cases[] = {
            {0, "mode 0"},          {1, "mode 2"},          {2, "opcode 2"},          {3, "opcode -1"},
            {4, "file_offset -1"},  {5, "devPtr_offset -1"}, {6, "devPtr_offset = length"},
            {7, "size > length"},   {8, "offset + size > length"}, {9, "devPtr_base NULL"},
            {10, "size overflow"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            hipFileIOParams_t io = good;
            switch (cases[i].field) {
            case 0: io.mode = (hipFileBatchMode_t)0; break;
            case 1: io.mode = (hipFileBatchMode_t)2; break;
            case 2: io.opcode = (hipFileOpcode_t)2; break;
            case 3: io.opcode = (hipFileOpcode_t)-1; break;
            case 4: io.u.batch.file_offset = -1; break;
            case 5: io.u.batch.devPtr_offset = -1; break;
            case 6: io.u.batch.devPtr_offset = (int64_t)L; break;
            case 7: io.u.batch.size = L + 1; break;
            case 8:
                io.u.batch.devPtr_offset = (int64_t)(L - 100);
                io.u.batch.size          = 101;
                break;
            case 9: io.u.batch.devPtr_base = NULL; break;
            default:
                io.u.batch.devPtr_offset = 1;
                io.u.batch.size          = SIZE_MAX;
                break;
            }
            hipFileError_t e = hipFileBatchIOSubmit(b, 1, &io, 0);
            CHECK(e.err == hipFileInvalidValue && e.hip_drv_err == hipSuccess, "%s: got {%d, %d}, expected {5022, 0}",
                  cases[i].what, (int)e.err, (int)e.hip_drv_err);
        }
        hipFileIOParams_t io = good;
        io.fh                = g_unknown_handle;
        CHECK_ERR(hipFileBatchIOSubmit(b, 1, &io, 0), hipFileHandleNotRegistered);
        io.fh = NULL;
        CHECK_ERR2(hipFileBatchIOSubmit(b, 1, &io, 0), hipFileHandleNotRegistered, hipFileInvalidValue);
        check_nothing_queued(b, "single invalid entries");

        /* All or nothing: a valid write next to an invalid entry must not run. */
        unsigned char *wsrc = malloc(4096);
        memset(wsrc, 0xee, 4096);
        CHECK_ERR(hipFileBufRegister(wsrc, 4096, 0), hipFileSuccess);
        hipFileIOParams_t pair[2];
        pair[0]      = io_entry(fh, wsrc, 0, 0, 4096, hipFileBatchWrite, &cookies[1]);
        pair[1]      = good;
        pair[1].mode = (hipFileBatchMode_t)0;
        CHECK_ERR(hipFileBatchIOSubmit(b, 2, pair, 0), hipFileInvalidValue);
        pair[1]    = good;
        pair[1].fh = g_unknown_handle;
        CHECK_ERR(hipFileBatchIOSubmit(b, 2, pair, 0), hipFileHandleNotRegistered);
        check_nothing_queued(b, "valid + invalid pair");
        unsigned char first[16];
        CHECK(pread(fd, first, sizeof first, 0) == (ssize_t)sizeof first && first[0] == pattern_byte(0) &&
                  first[15] == pattern_byte(15),
              "the valid write of a rejected submit reached the file (first byte %#x)", first[0]);
        CHECK_ERR(hipFileBufDeregister(wsrc), hipFileSuccess);
        free(wsrc);
    }

    section("BAT-07");
    {
        hipFileIOEvents_t ev[4];
        unsigned          nr;
        struct timespec   ts;
        CHECK_ERR(hipFileBatchIOGetStatus(b, 0, NULL, ev, NULL), hipFileInvalidValue);
        nr = 1;
        CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, NULL, NULL), hipFileInvalidValue);
        nr = 1;
        CHECK_ERR(hipFileBatchIOGetStatus(b, 2, &nr, ev, NULL), hipFileInvalidValue);
        nr = 1;
        ts = (struct timespec){-1, 0};
        CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, ev, &ts), hipFileInvalidValue);
        nr = 1;
        ts = (struct timespec){0, -1};
        CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, ev, &ts), hipFileInvalidValue);
        nr = 1;
        ts = (struct timespec){0, 1000000000L};
        CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, ev, &ts), hipFileInvalidValue);
        /* Valid calls with nothing outstanding return at once with *nr = 0. */
        nr = 4;
        ts = (struct timespec){0, 0};
        CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, ev, &ts), hipFileSuccess);
        CHECK(nr == 0, "nr = %u with nothing outstanding", nr);
        nr = 4;
        CHECK_ERR(hipFileBatchIOGetStatus(b, 4, &nr, ev, NULL), hipFileSuccess); /* min_nr capped at 0 outstanding */
        CHECK(nr == 0, "nr = %u with nothing outstanding (NULL timeout)", nr);
        nr = 0;
        CHECK_ERR(hipFileBatchIOGetStatus(b, 0, &nr, NULL, NULL), hipFileSuccess); /* *nr == 0: events may be NULL */
        CHECK(nr == 0, "nr = %u", nr);
        CHECK_ERR(hipFileBatchIOCancel(b), hipFileSuccess);
    }

    section("BAT-05");
    {
        hipFileIOParams_t reads[5];
        for (int i = 0; i < 5; i++)
            reads[i] = io_entry(fh, rb, (int64_t)i * 4096, (int64_t)i * 4096, 4096, hipFileBatchRead, &cookies[i]);
        memset(rb, 0, L);
        CHECK_ERR(hipFileBatchIOSubmit(b, 5, reads, 0), hipFileBatchFull);
        CHECK_ERR(hipFileBatchIOSubmit(b, 3, reads, 0), hipFileSuccess);
        CHECK_ERR(hipFileBatchIOSubmit(b, 2, reads + 3, 0), hipFileBatchFull); /* 3 outstanding + 2 > 4 */
        CHECK_ERR(hipFileBatchIOSubmit(b, 1, reads + 3, 0), hipFileSuccess);
        CHECK_ERR(hipFileBatchIOSubmit(b, 1, reads + 4, 0), hipFileBatchFull); /* full, assumption 12 */

        hipFileIOEvents_t ev[4];
        memset(ev, 0, sizeof ev);
        unsigned got = collect_events(b, 4, ev, 20);
        CHECK(got == 4, "collected %u of 4 events", got);
        int seen[4] = {0, 0, 0, 0};
        for (unsigned i = 0; i < got; i++) {
            int idx = (int)((int *)ev[i].cookie - cookies);
            CHECK(idx >= 0 && idx < 4, "event %u: unexpected cookie %p", i, ev[i].cookie);
            CHECK(ev[i].status == hipFileComplete && ev[i].ret == 4096, "event %u: status %#x, ret %zd", i,
                  (unsigned)ev[i].status, (ssize_t)ev[i].ret);
            if (idx >= 0 && idx < 4)
                seen[idx]++;
        }
        CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1, "cookies seen %d %d %d %d", seen[0],
              seen[1], seen[2], seen[3]);
        int bad = -1;
        for (size_t i = 0; i < 4 * 4096 && bad < 0; i++)
            if (rb[i] != pattern_byte(i))
                bad = (int)i;
        CHECK(bad < 0, "batch read data mismatch at buffer offset %d", bad);

        /* Reaped events free the capacity again. */
        CHECK_ERR(hipFileBatchIOSubmit(b, 4, reads, 0), hipFileSuccess);
        got = collect_events(b, 4, ev, 20);
        CHECK(got == 4, "second round: collected %u of 4 events", got);
    }
    hipFileBatchIODestroy(b);

    CHECK_ERR(hipFileBufDeregister(rb), hipFileSuccess);
    hipFileHandleDeregister(fh);
    reset_driver();
    close(fd);
    free(rb);
}

/* ---- main ------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_dir = argc > 1 ? argv[1] : getenv("TMPDIR");
    if (g_dir == NULL || g_dir[0] == '\0')
        g_dir = "/tmp";
    signal(SIGALRM, on_alarm);
    alarm(300);

    char *path  = make_file(FILE_SIZE);
    char *empty = make_file(0);

    if (hipFileUseCount() != 0)
        note("use count is %lld at start", (long long)hipFileUseCount());

    test_error_strings_and_version();
    test_count_zero();
    test_config();
    test_implicit_init(path);
    test_concurrent_init(path);
    test_final_close(path);
    test_handles(path);
    test_buffers();
    test_sync_io(path, empty);
    test_streams();
    test_async(path);
    test_batch(path);

    section("end");
    reset_driver();
    unlink(path);
    unlink(empty);
    free(path);
    free(empty);

    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
