/*
 * cufile_observe.c: prints what a libcufile answers to the calls where
 * hipfile-rs's cuFile front follows cuFile's semantics rather than hipFile's
 * (docs/cufile.md, "Where cuFile and hipFile differ"), with a CUDA GPU present.
 * scripts/gpu-run.sh (suite cufile) runs it once on NVIDIA's libcufile and once
 * on hipfile-rs's and puts both outputs and their diff in $OUT: a record for
 * the reader, not a pass/fail test (on a machine without nvidia-fs and udev,
 * NVIDIA's library fails some calls for reasons of its own).
 *
 *   nvcc -O2 tests/gpu/cufile_observe.c -o cufile_observe -lcufile -lcuda -ldl
 * Usage: cufile_observe DIR
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <cufile.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAY(expr)                                                                    \
    do {                                                                             \
        CUfileError_t e_ = (expr);                                                   \
        printf("%-72s {%d, %d}\n", #expr, (int)e_.err, (int)e_.cu_err);             \
        fflush(stdout);                                                              \
    } while (0)

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/cufile-observe-%d", dir, (int)getpid());
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    char block[65536];
    memset(block, 7, sizeof block);
    if (fd < 0 || pwrite(fd, block, sizeof block, 0) != (ssize_t)sizeof block) {
        perror(path);
        return 2;
    }
    printf("library: %s\n", dlsym(RTLD_DEFAULT, "hipfile_cufile_front") ? "hipfile-rs" : "NVIDIA");
    void *dev = NULL;
    cudaMalloc(&dev, 1 << 20);
    int v = 0;
    SAY(cuFileGetVersion(&v));
    printf("version %d\n", v);
    printf("use count before open: %ld\n", cuFileUseCount());
    CUfileBatchHandle_t b = NULL;
    SAY(cuFileBatchIOSetUp(&b, 4));
    SAY(cuFileBatchIOCancel(NULL));
    SAY(cuFileBufDeregister(NULL));
    SAY(cuFileBufDeregister(dev));
    SAY(cuFileStreamRegister(NULL, 0));
    SAY(cuFileStreamDeregister(NULL));
    SAY(cuFileStreamDeregister(NULL));
    SAY(cuFileStatsStart());
    char s[256] = "";
    SAY(cuFileGetParameterString(CUFILE_PARAM_ENV_LOGFILE_PATH, s, sizeof s));
    SAY(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, s, sizeof s));
    printf("logging level '%s'\n", s);
    for (int p = 0; p <= CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS; p++) {
        size_t lo = 0, hi = 0, val = 0;
        CUfileError_t e = cuFileGetParameterMinMaxValue((CUFileSizeTConfigParameter_t)p, &lo, &hi);
        CUfileError_t g = cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)p, &val);
        printf("size_t parameter %2d: value {%d} %zu, range {%d} [%zu, %zu]\n", p, g.err, val, e.err, lo, hi);
    }
    SAY(cuFileDriverOpen());
    CUfileDrvProps_t pr;
    memset(&pr, 0, sizeof pr);
    SAY(cuFileDriverGetProperties(&pr));
    printf("props: nvfs %u.%u poll %zu maxdio %zu dstatus %#x dcontrol %#x fflags %#x cache %u per-buffer %u "
           "pinned %u batch %u timeout %u\n",
           pr.nvfs.major_version, pr.nvfs.minor_version, pr.nvfs.poll_thresh_size, pr.nvfs.max_direct_io_size,
           pr.nvfs.dstatusflags, pr.nvfs.dcontrolflags, pr.fflags, pr.max_device_cache_size,
           pr.per_buffer_cache_size, pr.max_device_pinned_mem_size, pr.max_batch_io_size,
           pr.max_batch_io_timeout_msecs);
    size_t kb = 0;
    SAY(cuFileGetBARSizeInKB(0, &kb));
    printf("BAR size of GPU 0: %zu (the function's name says KiB, its header comment MiB)\n", kb);
    SAY(cuFileBufRegister(dev, 1 << 20, CU_FILE_RDMA_REGISTER));
    SAY(cuFileBufRegister(dev, 1 << 20, 0));
    SAY(cuFileBufDeregister(dev));
    CUfileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = CU_FILE_HANDLE_TYPE_USERSPACE_FS;
    d.handle.fd = fd;
    CUfileHandle_t fh = NULL;
    SAY(cuFileHandleRegister(&fh, &d));
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    SAY(cuFileHandleRegister(&fh, &d));
    size_t size = 4096;
    off_t fo = 0, bo = 0;
    ssize_t n = 1;
    SAY(cuFileReadAsync(fh, dev, &size, &fo, &bo, &n, NULL));
    printf("NULL-stream read: *bytes %zd right after the call\n", n);
    fo = -1;
    n = 1;
    SAY(cuFileReadAsync(fh, dev, &size, &fo, &bo, &n, NULL));
    cudaDeviceSynchronize();
    printf("negative file offset: *bytes %zd\n", n);
    fo = 0;
    bo = -1;
    n = 1;
    SAY(cuFileReadAsync(fh, dev, &size, &fo, &bo, &n, NULL));
    cudaDeviceSynchronize();
    printf("negative buffer offset: *bytes %zd\n", n);
    bo = 0;
    size = 2 << 20;
    n = 1;
    SAY(cuFileReadAsync(fh, dev, &size, &fo, &bo, &n, NULL));
    cudaDeviceSynchronize();
    printf("size beyond the allocation: *bytes %zd\n", n);
    SAY(cuFileBatchIOSetUp(&b, 4));
    unsigned nr = 0;
    SAY(cuFileBatchIOGetStatus(NULL, 0, &nr, NULL, NULL));
    if (fh) cuFileHandleDeregister(fh);
    SAY(cuFileDriverClose());
    printf("use count after close: %ld\n", cuFileUseCount());
    SAY(cuFileBatchIOCancel(b));
    close(fd);
    unlink(path);
    return 0;
}
