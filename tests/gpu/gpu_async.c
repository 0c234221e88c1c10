/* Stream-ordered and batch I/O with CUDA streams and H200 device memory.
 * - 4 streams with reads in flight at once, data checked
 * - a stream held with cuStreamWaitValue32: size and offsets changed before the
 *   stream reaches the op (execution-time binding), then released
 * - the same with the stream registered FIXED (0x7): submit-time values used
 * - size raised above the submitted size: *bytes = -5022
 * - several ops on one stream run in stream order (write then read back)
 * - WriteAsync checked with pread
 * - a batch of 128 x 4 KiB random reads into device memory, checked
 * Usage: gpu_async DIR */
#include "common.h"

#define FILE_BYTES ((size_t)64 << 20)

static unsigned char *data;
static unsigned char host[(size_t)16 << 20];

static int check_dev(void *dev, size_t boff, size_t foff, size_t n) {
    CU(cudaMemcpy(host, (char *)dev + boff, n, cudaMemcpyDeviceToHost));
    return memcmp(host, data + foff, n) == 0;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    seed_from_env();
    char path[512];
    snprintf(path, sizeof path, "%s/hipfile-gpu-async-%d", dir, getpid());
    data = malloc(FILE_BYTES);
    fill(data, FILE_BYTES, 0x33);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (pwrite(fd, data, FILE_BYTES, 0) != (ssize_t)FILE_BYTES) { perror("pwrite"); return 2; }
    fsync(fd);
    CHECK(hipFileDriverOpen().err == 0, "open");
    hipFileHandle_t h = reg_fd(fd);
    void *dev = NULL;
    CU(cudaMalloc(&dev, (size_t)64 << 20));
    CHECK(hipFileBufRegister(dev, (size_t)64 << 20, 0).err == 0, "bufregister");

    /* 1. four streams at once */
    {
        cudaStream_t s[4];
        size_t size[4];
        hoff_t foff[4], boff[4];
        ssize_t bytes[4];
        for (int i = 0; i < 4; i++) {
            CU(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
            size[i] = (8 << 20) + 1000 * i;
            foff[i] = (hoff_t)(i * (12 << 20) + 77);
            boff[i] = (hoff_t)(i * (16 << 20));
            hipFileError_t e = hipFileReadAsync(h, dev, &size[i], &foff[i], &boff[i], &bytes[i], (hipStream_t)s[i]);
            CHECK(e.err == 0, "readasync %d: %d", i, e.err);
        }
        for (int i = 0; i < 4; i++) {
            CU(cudaStreamSynchronize(s[i]));
            CHECK(bytes[i] == (ssize_t)size[i], "stream %d bytes %zd", i, bytes[i]);
            CHECK(check_dev(dev, (size_t)boff[i], (size_t)foff[i], size[i]), "stream %d data", i);
            CU(cudaStreamDestroy(s[i]));
        }
        printf("| 4 concurrent streams | %s |\n", g_fail ? "FAIL" : "PASS");
    }

    /* 2./3. held stream: execution-time binding, and FIXED flags */
    for (int fixed = 0; fixed < 2; fixed++) {
        int before = g_fail;
        cudaStream_t s;
        CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        if (fixed) CHECK(hipFileStreamRegister((hipStream_t)s, 7).err == 0, "streamregister");
        volatile uint32_t *flag;
        CU(cudaHostAlloc((void **)&flag, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
        *flag = 0;
        CUdeviceptr dflag;
        CHECK(cuMemHostGetDevicePointer(&dflag, (void *)flag, 0) == CUDA_SUCCESS, "devptr");
        CHECK(cuStreamWaitValue32((CUstream)s, dflag, 1, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS, "wait");
        size_t size = 4 << 20;
        hoff_t foff = 4096 * 3, boff = 100;
        ssize_t bytes = 12345;
        CU(cudaMemset(dev, 0, 16 << 20));
        hipFileError_t e = hipFileReadAsync(h, dev, &size, &foff, &boff, &bytes, (hipStream_t)s);
        CHECK(e.err == 0, "held readasync %d", e.err);
        usleep(20000);
        CHECK(bytes == 0, "bytes pre-set to 0 and untouched while held: %zd", bytes);
        size_t size0 = size;
        hoff_t foff0 = foff, boff0 = boff;
        size = 1 << 20;
        foff = 999999;
        boff = 5 << 20;
        __sync_synchronize();
        *flag = 1;
        CU(cudaStreamSynchronize(s));
        if (fixed) {
            CHECK(bytes == (ssize_t)size0, "fixed: bytes %zd want %zu", bytes, size0);
            CHECK(check_dev(dev, (size_t)boff0, (size_t)foff0, size0), "fixed: data at submit-time offsets");
        } else {
            CHECK(bytes == (ssize_t)size, "bound: bytes %zd want %zu", bytes, size);
            CHECK(check_dev(dev, (size_t)boff, (size_t)foff, size), "bound: data at execution-time offsets");
        }
        if (fixed) CHECK(hipFileStreamDeregister((hipStream_t)s).err == 0, "streamderegister");
        CU(cudaStreamDestroy(s));
        CU(cudaFreeHost((void *)flag));
        printf("| held stream, %s | %s |\n", fixed ? "FIXED 0x7: submit-time values" : "flags 0: execution-time values",
               g_fail == before ? "PASS" : "FAIL");
    }

    /* 4. size raised above submitted */
    {
        int before = g_fail;
        cudaStream_t s;
        CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        volatile uint32_t *flag;
        CU(cudaHostAlloc((void **)&flag, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
        *flag = 0;
        CUdeviceptr dflag;
        cuMemHostGetDevicePointer(&dflag, (void *)flag, 0);
        cuStreamWaitValue32((CUstream)s, dflag, 1, CU_STREAM_WAIT_VALUE_GEQ);
        size_t size = 65536;
        hoff_t foff = 0, boff = 0;
        ssize_t bytes = 1;
        CHECK(hipFileReadAsync(h, dev, &size, &foff, &boff, &bytes, (hipStream_t)s).err == 0, "submit");
        size = 131072;
        *flag = 1;
        CU(cudaStreamSynchronize(s));
        CHECK(bytes == -5022, "raised size: bytes %zd", bytes);
        CU(cudaStreamDestroy(s));
        CU(cudaFreeHost((void *)flag));
        printf("| size raised after submit -> -5022 | %s |\n", g_fail == before ? "PASS" : "FAIL");
    }

    /* 5./6. stream order: WriteAsync then ReadAsync on one stream */
    {
        int before = g_fail;
        cudaStream_t s;
        CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        fill(host, 3 << 20, 0x77);
        CU(cudaMemcpy(dev, host, 3 << 20, cudaMemcpyHostToDevice));
        size_t wsize = 3 << 20, rsize = 3 << 20;
        hoff_t wfoff = 40 << 20, wboff = 0, rfoff = 40 << 20, rboff = 32 << 20;
        ssize_t wb = 0, rb = 0;
        CHECK(hipFileWriteAsync(h, dev, &wsize, &wfoff, &wboff, &wb, (hipStream_t)s).err == 0, "writeasync");
        CHECK(hipFileReadAsync(h, dev, &rsize, &rfoff, &rboff, &rb, (hipStream_t)s).err == 0, "readasync");
        CU(cudaStreamSynchronize(s));
        memcpy(data + (40 << 20), host, 3 << 20);
        CHECK(wb == (ssize_t)wsize && rb == (ssize_t)rsize, "bytes %zd %zd", wb, rb);
        CHECK(check_dev(dev, 32 << 20, 40 << 20, 3 << 20), "read after write in stream order");
        static unsigned char chk[3 << 20];
        CHECK(pread(fd, chk, 3 << 20, 40 << 20) == (3 << 20) && memcmp(chk, host, 3 << 20) == 0, "pread sees write");
        CU(cudaStreamDestroy(s));
        printf("| write then read on one stream, checked with pread | %s |\n", g_fail == before ? "PASS" : "FAIL");
    }

    /* 7. batch: 128 x 4 KiB random reads, cold */
    {
        int before = g_fail;
        drop_caches(fd);
        hipFileBatchHandle_t b;
        CHECK(hipFileBatchIOSetUp(&b, 128).err == 0, "setup");
        hipFileIOParams_t p[128];
        size_t offs[128];
        memset(p, 0, sizeof p);
        for (int i = 0; i < 128; i++) {
            offs[i] = below(FILE_BYTES / 4096) * 4096;
            p[i].mode = hipFileBatch;
            p[i].u.batch.devPtr_base = dev;
            p[i].u.batch.file_offset = (hoff_t)offs[i];
            p[i].u.batch.devPtr_offset = (hoff_t)i * 4096;
            p[i].u.batch.size = 4096;
            p[i].fh = h;
            p[i].opcode = hipFileBatchRead;
            p[i].cookie = (void *)(uintptr_t)(i + 1);
        }
        CHECK(hipFileBatchIOSubmit(b, 128, p, 0).err == 0, "submit");
        hipFileIOEvents_t ev[128];
        int got = 0, ok = 0;
        while (got < 128) {
            unsigned nr = 128;
            hipFileError_t e = hipFileBatchIOGetStatus(b, 1, &nr, ev, NULL);
            if (e.err) { CHECK(0, "getstatus %d", e.err); break; }
            for (unsigned j = 0; j < nr; j++) {
                int i = (int)(uintptr_t)ev[j].cookie - 1;
                ok += ev[j].status == hipFileComplete && ev[j].ret == 4096 && i >= 0 && i < 128;
            }
            got += (int)nr;
        }
        CHECK(ok == 128, "batch complete %d/128", ok);
        int data_ok = 1;
        for (int i = 0; i < 128; i++) data_ok &= check_dev(dev, (size_t)i * 4096, offs[i], 4096);
        CHECK(data_ok, "batch data");
        hipFileBatchIODestroy(b);
        printf("| batch 128 x 4 KiB cold random reads | %s |\n", g_fail == before ? "PASS" : "FAIL");
    }

    CHECK(hipFileBufDeregister(dev).err == 0, "dereg");
    hipFileHandleDeregister(h);
    CHECK(hipFileDriverClose().err == 0, "close");
    unlink(path);
    printf("\n%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
