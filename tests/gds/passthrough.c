/*
 * passthrough.c: libhipfile's backend as a program sees it. Run by
 * ffi/tests/passthrough.rs with HIPFILE_BACKEND and HIPFILE_CUFILE_LIB set;
 * the first argument says what to expect:
 *
 *   answers   the calls reach tests/gds/fake_cufile.c built with -DFAKE_ANSWERS,
 *             and come back translated (properties widened field by field)
 *   nvidia    the calls reach NVIDIA's libcufile 1.15 (the PyPI wheel), which on a
 *             machine without a GPU cannot open its driver
 *   engine    the engine serves (whatever the library path says)
 *
 * Prints "N passed, M failed" and exits 0 only when nothing failed.
 */
#define _GNU_SOURCE
#include "hipfile.h"

#include <stdio.h>
#include <string.h>

static int g_passed, g_failed;
#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (cond) {                                        \
            g_passed++;                                    \
        } else {                                           \
            g_failed++;                                    \
            printf("passthrough.c:%d: FAIL: %s: ", __LINE__, #cond); \
            printf(__VA_ARGS__);                           \
            printf("\n");                                  \
        }                                                  \
    } while (0)

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    unsigned a = 9, b = 9, c = 9;
    hipFileError_t e = hipFileGetVersion(&a, &b, &c);
    CHECK(e.err == 0 && a == HIPFILE_VERSION_MAJOR && b == HIPFILE_VERSION_MINOR, "version %u.%u", a, b);
    if (strcmp(mode, "answers") == 0) {
        e = hipFileDriverOpen();
        CHECK(e.err == 0, "open %d", e.err);
        CHECK(hipFileUseCount() == 4242, "use count %lld", (long long)hipFileUseCount());
        hipFileDriverProps_t p;
        memset(&p, 0, sizeof p);
        e = hipFileDriverGetProperties(&p);
        CHECK(e.err == 0, "properties %d", e.err);
        CHECK(p.nvfs.major_version == 2 && p.nvfs.minor_version == 17, "nvfs %u.%u", p.nvfs.major_version,
              p.nvfs.minor_version);
        CHECK(p.nvfs.poll_thresh_size == 11 && p.nvfs.max_direct_io_size == 22, "nvfs sizes %llu %llu",
              (unsigned long long)p.nvfs.poll_thresh_size, (unsigned long long)p.nvfs.max_direct_io_size);
        CHECK(p.nvfs.driver_status_flags == 0x30 && p.nvfs.driver_control_flags == 0x3 && p.feature_flags == 0xe,
              "flags %#x %#x %#x", p.nvfs.driver_status_flags, p.nvfs.driver_control_flags, p.feature_flags);
        CHECK(p.max_device_cache_size == 33 && p.per_buffer_cache_size == 44 &&
                  p.max_device_pinned_mem_size == 4000000000ull,
              "sizes %llu %llu %llu", (unsigned long long)p.max_device_cache_size,
              (unsigned long long)p.per_buffer_cache_size, (unsigned long long)p.max_device_pinned_mem_size);
        CHECK(p.max_batch_io_count == 66 && p.max_batch_io_timeout_msecs == 77, "batch %u %u",
              p.max_batch_io_count, p.max_batch_io_timeout_msecs);
        CHECK(hipFileDriverGetProperties(NULL).err == hipFileInvalidValue, "NULL properties");
        char buf[8];
        CHECK(hipFileRead(NULL, buf, 100, 20, 3) == 123, "read answered %zd", hipFileRead(NULL, buf, 100, 20, 3));
        hipFileBatchHandle_t h = NULL;
        e = hipFileBatchIOSetUp(&h, 5);
        CHECK(e.err == 0 && h == (hipFileBatchHandle_t)0x1005, "batch set-up %d %p", e.err, h);
    } else if (strcmp(mode, "nvidia") == 0) {
        size_t v = 0;
        e = hipFileGetParameterSizeT(hipFileParamExecutionMinIOThresholdSizeKB, &v);
        /* libcufile 1.15's value without a cufile.json; the engine's is 8192. */
        CHECK(e.err == 0 && v == 1024, "min I/O threshold %d %zu", e.err, v);
        e = hipFileDriverOpen();
        CHECK(e.err != 0, "NVIDIA's driver opened without a GPU");
        CHECK(hipFileUseCount() == 0, "use count %lld", (long long)hipFileUseCount());
    } else if (strcmp(mode, "engine") == 0) {
        e = hipFileDriverOpen();
        CHECK(e.err == 0, "open %d", e.err);
        CHECK(hipFileUseCount() == 1, "use count %lld", (long long)hipFileUseCount());
        size_t v = 0;
        e = hipFileGetParameterSizeT(hipFileParamExecutionMinIOThresholdSizeKB, &v);
        CHECK(e.err == 0 && v == 8192, "min I/O threshold %d %zu", e.err, v);
        e = hipFileDriverClose();
        CHECK(e.err == 0, "close %d", e.err);
    } else {
        printf("usage: passthrough answers|nvidia|engine\n");
        return 2;
    }
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
