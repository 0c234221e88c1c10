/*
 * cufile_front.c: a cuFile program, written against NVIDIA's cufile.h as any
 * user's is, run on hipfile-rs's libcufile.so.0 with CUDA device memory: sync
 * reads and writes (registered and unregistered buffers, buffer offsets, an
 * O_DIRECT and a buffered descriptor), a batch of reads and writes, stream
 * reads and writes (fixed and execution-time parameters, a stream held while
 * the parameters change, the NULL stream, an error reported in *bytes), every
 * byte checked against pread. Also the driver properties, statistics and the
 * BAR1 size. It refuses to run on any other libcufile.
 *
 * Built on the GPU machine by scripts/gpu-run.sh (suite cufile):
 *   nvcc -O2 tests/gpu/cufile_front.c -o cufile_front -L .carry/cufile -l:libcufile.so.0 \
 *        -lcuda -ldl -Xlinker -rpath=.carry/cufile
 * Usage: cufile_front DIR   (about 200 MiB of files go there)
 * Prints one line per failed check and "N passed, M failed"; exit 0 only when
 * nothing failed.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <cufile.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../c/check.h"

#define OK(expr)                                                                         \
    do {                                                                                 \
        CUfileError_t e_ = (expr);                                                       \
        CHECK(e_.err == CU_FILE_SUCCESS, "%s -> {%d, %d}", #expr, e_.err, (int)e_.cu_err); \
    } while (0)
#define CU(x)                                                                                           \
    do {                                                                                                \
        cudaError_t c_ = (x);                                                                           \
        if (c_ != cudaSuccess) {                                                                        \
            printf("CUDA error %d (%s) at line %d: %s\n", c_, cudaGetErrorString(c_), __LINE__, #x);    \
            exit(2);                                                                                    \
        }                                                                                               \
    } while (0)

#define FILE_BYTES ((size_t)64 << 20)
#define DEV_BYTES ((size_t)72 << 20)

static unsigned char *g_host; /* scratch for device contents */

static uint64_t g_rng = 0x6a09e667f3bcc908ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static void fill(unsigned char *p, size_t n, unsigned salt)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u >> 7) ^ salt ^ (i >> 12));
}

/* Device bytes [dev + off, +n) equal the file's [foff, +n). */
static int device_matches_file(const unsigned char *dev, size_t off, size_t n, int fd, off_t foff)
{
    unsigned char *want = malloc(n ? n : 1);
    ssize_t got = pread(fd, want, n, foff);
    CU(cudaMemcpy(g_host, dev + off, n, cudaMemcpyDeviceToHost));
    int same = got == (ssize_t)n && memcmp(g_host, want, n) == 0;
    free(want);
    return same;
}

static void on_alarm(int s)
{
    (void)s;
    static const char m[] = "HANG: cufile_front did not finish within 140 s\n";
    if (write(1, m, sizeof m - 1) < 0) _exit(3);
    _exit(3);
}

static void sync_io(int fd, int fd_direct, unsigned char *dev)
{
    printf("== sync reads and writes into device memory\n");
    static const size_t sizes[] = {4096, (1 << 20) + 7, 16 << 20, 40 << 20};
    static const off_t offs[] = {0, 4096, 12345, (7 << 20) + 1};
    CUfileHandle_t fh = check_cufile_register_fd(fd), fhd = check_cufile_register_fd(fd_direct);
    for (int registered = 0; registered < 2; registered++) {
        if (registered) OK(cuFileBufRegister(dev, DEV_BYTES, 0));
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            for (size_t j = 0; j < sizeof offs / sizeof *offs; j++) {
                CUfileHandle_t h = (i + j) % 2 ? fhd : fh;
                off_t bo = (off_t)(j * 4096 + (registered ? 0 : 17));
                ssize_t n = cuFileRead(h, dev, sizes[i], offs[j], bo);
                CHECK(n == (ssize_t)sizes[i], "read %zu at %jd: %zd", sizes[i], (intmax_t)offs[j], n);
                if (n > 0)
                    CHECK(device_matches_file(dev, (size_t)bo, (size_t)n, fd, offs[j]),
                          "read %zu at %jd (buffer offset %jd, %s) differs", sizes[i], (intmax_t)offs[j],
                          (intmax_t)bo, registered ? "registered" : "unregistered");
            }
        if (registered) OK(cuFileBufDeregister(dev));
    }
    /* Writes from device memory, then pread. */
    fill(g_host, 24 << 20, 0x5a);
    CU(cudaMemcpy(dev, g_host, 24 << 20, cudaMemcpyHostToDevice));
    ssize_t n = cuFileWrite(fh, dev, (9 << 20) + 3, 123456, 4096);
    CHECK(n == (9 << 20) + 3, "write: %zd", n);
    CHECK(device_matches_file(dev, 4096, (9 << 20) + 3, fd, 123456), "written bytes differ");
    n = cuFileWrite(fhd, dev, 8 << 20, 16 << 20, 0);
    CHECK(n == 8 << 20, "O_DIRECT write: %zd", n);
    CHECK(device_matches_file(dev, 0, 8 << 20, fd, 16 << 20), "O_DIRECT written bytes differ");
    CHECK(cuFileRead(fh, dev, 4096, -1, 0) == -CU_FILE_INVALID_VALUE, "negative offset");
    cuFileHandleDeregister(fh);
    cuFileHandleDeregister(fhd);
}

static void batch(int fd, unsigned char *dev)
{
    printf("== batch of reads and writes\n");
    enum { N = 40, PIECE = 1 << 20 };
    CUfileHandle_t fh = check_cufile_register_fd(fd);
    CUfileBatchHandle_t b;
    OK(cuFileBatchIOSetUp(&b, N));
    CUfileIOParams_t io[N];
    memset(io, 0, sizeof io);
    fill(g_host, (size_t)N * PIECE, 0x33);
    CU(cudaMemcpy(dev, g_host, (size_t)N * PIECE, cudaMemcpyHostToDevice));
    for (int i = 0; i < N; i++) {
        io[i].mode = CUFILE_BATCH;
        io[i].fh = fh;
        io[i].opcode = i % 5 == 4 ? CUFILE_WRITE : CUFILE_READ;
        io[i].cookie = (void *)(intptr_t)(i + 1);
        io[i].u.batch.devPtr_base = dev;
        io[i].u.batch.devPtr_offset = (off_t)i * PIECE;
        /* Writes go to distinct places past 48 MiB; reads from random offsets below. */
        io[i].u.batch.file_offset = io[i].opcode == CUFILE_WRITE ? (off_t)(48 << 20) + (off_t)i * PIECE
                                                                 : (off_t)(rnd() % ((40 << 20) - PIECE));
        io[i].u.batch.size = PIECE - (size_t)(i % 3) * 999;
    }
    OK(cuFileBatchIOSubmit(b, N, io, 0));
    CUfileIOEvents_t ev[N];
    unsigned seen = 0;
    int done[N] = {0};
    while (seen < N) {
        unsigned nr = N;
        OK(cuFileBatchIOGetStatus(b, 1, &nr, ev, NULL));
        if (nr == 0) break;
        for (unsigned k = 0; k < nr; k++) {
            int i = (int)(intptr_t)ev[k].cookie - 1;
            CHECK(i >= 0 && i < N && !done[i], "bad or repeated cookie %p", ev[k].cookie);
            if (i < 0 || i >= N) continue;
            done[i] = 1;
            CHECK(ev[k].status == CUFILE_COMPLETE && ev[k].ret == io[i].u.batch.size, "entry %d: status %#x ret %zu", i,
                  ev[k].status, ev[k].ret);
        }
        seen += nr;
    }
    CHECK(seen == N, "%u of %d events", seen, N);
    for (int i = 0; i < N; i++)
        CHECK(device_matches_file(dev, (size_t)i * PIECE, io[i].u.batch.size, fd, io[i].u.batch.file_offset),
              "batch entry %d (%s) differs", i, io[i].opcode == CUFILE_WRITE ? "write" : "read");
    cuFileBatchIODestroy(b);
    cuFileHandleDeregister(fh);
}

static void streams(int fd, unsigned char *dev)
{
    printf("== stream reads and writes\n");
    CUfileHandle_t fh = check_cufile_register_fd(fd);
    cudaStream_t s, s2;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    OK(cuFileStreamRegister(s, 0));
    OK(cuFileStreamRegister(s2, CU_FILE_STREAM_FIXED_BUF_OFFSET | CU_FILE_STREAM_FIXED_FILE_OFFSET |
                                    CU_FILE_STREAM_FIXED_FILE_SIZE | CU_FILE_STREAM_PAGE_ALIGNED_INPUTS));
    /* Parameters in pinned host memory, as cufile.h asks. */
    struct params {
        size_t size[4];
        off_t foff[4], boff[4];
        ssize_t bytes[4];
    } *p;
    CU(cudaHostAlloc((void **)&p, sizeof *p, cudaHostAllocDefault));
    for (int i = 0; i < 4; i++) {
        p->size[i] = (size_t)(3 << 20) + (size_t)i * 4096;
        p->foff[i] = (off_t)i * (5 << 20) + 4096;
        p->boff[i] = (off_t)i * (4 << 20);
        p->bytes[i] = 0;
    }
    for (int i = 0; i < 4; i++)
        OK(cuFileReadAsync(fh, dev, &p->size[i], &p->foff[i], &p->boff[i], &p->bytes[i], i % 2 ? s2 : s));
    CU(cudaStreamSynchronize(s));
    CU(cudaStreamSynchronize(s2));
    for (int i = 0; i < 4; i++) {
        CHECK(p->bytes[i] == (ssize_t)p->size[i], "stream read %d: %zd", i, p->bytes[i]);
        CHECK(device_matches_file(dev, (size_t)p->boff[i], p->size[i], fd, p->foff[i]), "stream read %d differs", i);
    }
    /* Execution-time binding: hold the stream, change size and offset, release it. */
    unsigned *word;
    CU(cudaHostAlloc((void **)&word, 4096, cudaHostAllocMapped));
    *word = 0;
    CUdeviceptr dword;
    CU(cudaHostGetDevicePointer((void **)&dword, word, 0));
    CUresult r = cuStreamWaitValue32((CUstream)s, dword, 1, CU_STREAM_WAIT_VALUE_GEQ);
    CHECK(r == CUDA_SUCCESS, "cuStreamWaitValue32: %d", (int)r);
    p->size[0] = 1 << 20;
    p->foff[0] = 0;
    p->boff[0] = 0;
    p->bytes[0] = 0;
    OK(cuFileReadAsync(fh, dev, &p->size[0], &p->foff[0], &p->boff[0], &p->bytes[0], s));
    p->size[0] = 8192;
    p->foff[0] = 3 << 20;
    __atomic_store_n(word, 1, __ATOMIC_RELEASE);
    CU(cudaStreamSynchronize(s));
    CHECK(p->bytes[0] == 8192, "bound at execution: %zd bytes, expected 8192", p->bytes[0]);
    CHECK(device_matches_file(dev, 0, 8192, fd, 3 << 20), "execution-time parameters not used");
    /* A stream write, then read back. */
    fill(g_host, 2 << 20, 0x77);
    CU(cudaMemcpy(dev, g_host, 2 << 20, cudaMemcpyHostToDevice));
    p->size[1] = 2 << 20;
    p->foff[1] = 60 << 20;
    p->boff[1] = 0;
    OK(cuFileWriteAsync(fh, dev, &p->size[1], &p->foff[1], &p->boff[1], &p->bytes[1], s2));
    CU(cudaStreamSynchronize(s2));
    CHECK(p->bytes[1] == 2 << 20, "stream write: %zd", p->bytes[1]);
    CHECK(device_matches_file(dev, 0, 2 << 20, fd, 60 << 20), "stream-written bytes differ");
    /* cuFile: the NULL stream is synchronous. */
    p->size[2] = 1 << 20;
    p->foff[2] = 7;
    p->boff[2] = 4096;
    p->bytes[2] = 0;
    OK(cuFileReadAsync(fh, dev, &p->size[2], &p->foff[2], &p->boff[2], &p->bytes[2], NULL));
    CHECK(p->bytes[2] == 1 << 20, "NULL-stream read: %zd before any synchronisation", p->bytes[2]);
    CHECK(device_matches_file(dev, 4096, 1 << 20, fd, 7), "NULL-stream read differs");
    /* cuFile: a negative file offset is reported in *bytes. */
    p->foff[3] = -1;
    p->bytes[3] = 0;
    OK(cuFileReadAsync(fh, dev, &p->size[3], &p->foff[3], &p->boff[3], &p->bytes[3], s));
    CU(cudaStreamSynchronize(s));
    CHECK(p->bytes[3] == -CU_FILE_INVALID_VALUE, "negative offset: *bytes %zd", p->bytes[3]);
    OK(cuFileStreamDeregister(s));
    OK(cuFileStreamDeregister(s2));
    CU(cudaStreamDestroy(s));
    CU(cudaStreamDestroy(s2));
    CU(cudaFreeHost(word));
    CU(cudaFreeHost(p));
    cuFileHandleDeregister(fh);
}

static void properties_and_stats(int fd, unsigned char *dev)
{
    printf("== properties, statistics, BAR1\n");
    CUfileDrvProps_t pr;
    OK(cuFileDriverGetProperties(&pr));
    CHECK(pr.nvfs.major_version == 0 && pr.nvfs.minor_version == 0, "nvfs %u.%u", pr.nvfs.major_version,
          pr.nvfs.minor_version);
    OK(cuFileSetStatsLevel(3));
    OK(cuFileStatsStart());
    CUfileHandle_t fh = check_cufile_register_fd(fd);
    CHECK(cuFileRead(fh, dev, 1 << 20, 0, 0) == 1 << 20, "read");
    CUfileStatsLevel3_t s3;
    OK(cuFileGetStatsL3(&s3));
    CHECK(s3.detailed.basic.read_ops.ok == 1 && s3.detailed.basic.read_bytes == 1 << 20, "stats: %lu ops %lu bytes",
          (unsigned long)s3.detailed.basic.read_ops.ok, (unsigned long)s3.detailed.basic.read_bytes);
    CHECK(s3.num_gpus >= 1, "num_gpus %u", s3.num_gpus);
    OK(cuFileStatsStop());
    size_t kb = 0;
    CUfileError_t e = cuFileGetBARSizeInKB(0, &kb);
    CHECK(e.err == CU_FILE_SUCCESS && kb > 0, "BAR1 of GPU 0: {%d} %zu KiB", e.err, kb);
    printf("BAR1 of GPU 0: %zu KiB\n", kb);
    cuFileHandleDeregister(fh);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: cufile_front DIR\n");
        return 2;
    }
    signal(SIGALRM, on_alarm);
    alarm(140);
    if (!dlsym(RTLD_DEFAULT, "hipfile_cufile_front")) {
        printf("FAIL: this libcufile is not hipfile-rs's (no hipfile_cufile_front): check LD_LIBRARY_PATH\n");
        return 2;
    }
    Dl_info info;
    if (dladdr((void *)cuFileRead, &info)) printf("libcufile: %s\n", info.dli_fname);
    int v = 0;
    OK(cuFileGetVersion(&v));
    CHECK(v == 1150, "version %d", v);
    char path[4096], direct_path[4096];
    snprintf(path, sizeof path, "%s/cufile-front-%d.bin", argv[1], (int)getpid());
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0) {
        perror(path);
        return 2;
    }
    g_host = malloc(DEV_BYTES);
    for (size_t off = 0; off < FILE_BYTES + 12345; off += 1 << 20) {
        size_t n = FILE_BYTES + 12345 - off < (1 << 20) ? FILE_BYTES + 12345 - off : 1 << 20;
        for (size_t i = 0; i < n; i++) g_host[i] = (unsigned char)(rnd() >> 24);
        if (pwrite(fd, g_host, n, (off_t)off) != (ssize_t)n) {
            perror("pwrite");
            return 2;
        }
    }
    fsync(fd);
    snprintf(direct_path, sizeof direct_path, "%s", path);
    int fd_direct = open(direct_path, O_RDWR | O_DIRECT);
    if (fd_direct < 0) {
        printf("O_DIRECT open failed (%s): using a second buffered descriptor\n", strerror(errno));
        fd_direct = open(direct_path, O_RDWR);
    }
    unsigned char *dev;
    CU(cudaMalloc((void **)&dev, DEV_BYTES));
    OK(cuFileDriverOpen());
    sync_io(fd, fd_direct, dev);
    batch(fd, dev);
    streams(fd, dev);
    properties_and_stats(fd, dev);
    OK(cuFileDriverClose());
    CHECK(cuFileUseCount() == 0, "use count %ld", cuFileUseCount());
    CU(cudaFree(dev));
    close(fd_direct);
    close(fd);
    unlink(path);
    return check_summary();
}
