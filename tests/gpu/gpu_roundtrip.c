/* Sync round trips with H200 device memory (cudaMalloc), checked by copying
 * back and comparing with pread: hot and cold files, buffered and O_DIRECT
 * descriptors, registered and unregistered buffers, random offsets, sizes and
 * buffer offsets. Prints a pass/fail table. Usage: gpu_roundtrip DIR */
#include "common.h"

#define FILE_BYTES ((size_t)96 << 20)
#define BUF_BYTES ((size_t)40 << 20)

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    seed_from_env();
    char path[512];
    snprintf(path, sizeof path, "%s/hipfile-gpu-rt-%d", dir, getpid());
    unsigned char *data = malloc(FILE_BYTES), *host = malloc(BUF_BYTES), *chk = malloc(BUF_BYTES);
    fill(data, FILE_BYTES, 0x5a);
    int wfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (pwrite(wfd, data, FILE_BYTES, 0) != (ssize_t)FILE_BYTES) { perror("pwrite"); return 2; }
    fsync(wfd);
    void *dev = NULL;
    CU(cudaMalloc(&dev, BUF_BYTES));
    CHECK(hipFileDriverOpen().err == 0, "open");

    printf("\n| descriptor | cache | buffer | reads ok | writes ok | result |\n|---|---|---|---|---|---|\n");
    for (int direct = 0; direct < 2; direct++) {
        for (int cold = 0; cold < 2; cold++) {
            for (int registered = 0; registered < 2; registered++) {
                int before = g_fail;
                int fd = open(path, O_RDWR | (direct ? O_DIRECT : 0));
                if (fd < 0) { perror("open"); return 2; }
                hipFileHandle_t h = reg_fd(fd);
                if (registered) CHECK(hipFileBufRegister(dev, BUF_BYTES, 0).err == 0, "bufregister");
                int rok = 0, rn = 0, wok = 0, wn = 0;
                for (int i = 0; i < 12; i++) {
                    if (cold) drop_caches(wfd);
                    size_t off = below(FILE_BYTES + 8192);
                    size_t boff = (i % 3 == 0) ? 0 : below(8192);
                    size_t size = 1 + below(i % 2 ? (32 << 20) : 65536);
                    if (i % 4 == 0) { off &= ~(size_t)4095; size = (size + 4095) & ~(size_t)4095; }
                    if (boff + size > BUF_BYTES) size = BUF_BYTES - boff;
                    CU(cudaMemset(dev, 0xee, BUF_BYTES));
                    ssize_t r = hipFileRead(h, dev, size, (hoff_t)off, (hoff_t)boff);
                    size_t want = off >= FILE_BYTES ? 0 : (FILE_BYTES - off < size ? FILE_BYTES - off : size);
                    rn++;
                    int ok = r == (ssize_t)want;
                    if (ok && want) {
                        CU(cudaMemcpy(host, (char *)dev + boff, want, cudaMemcpyDeviceToHost));
                        ok = memcmp(host, data + off, want) == 0;
                    }
                    CHECK(ok, "read direct=%d cold=%d reg=%d off=%zu size=%zu boff=%zu: got %zd want %zu",
                          direct, cold, registered, off, size, boff, r, want);
                    rok += ok;
                }
                for (int i = 0; i < 8; i++) {
                    size_t off = below(FILE_BYTES - (8 << 20));
                    size_t size = 1 + below(i % 2 ? (8 << 20) : 20000);
                    size_t boff = below(4096);
                    if (i % 2 == 0) { off &= ~(size_t)4095; size = (size + 4095) & ~(size_t)4095; boff = 0; }
                    fill(host, size, (unsigned)(i + 17 * direct + 5 * cold));
                    CU(cudaMemcpy((char *)dev + boff, host, size, cudaMemcpyHostToDevice));
                    ssize_t w = hipFileWrite(h, dev, size, (hoff_t)off, (hoff_t)boff);
                    memcpy(data + off, host, size);
                    wn++;
                    int ok = w == (ssize_t)size;
                    if (ok) ok = pread(wfd, chk, size, (off_t)off) == (ssize_t)size && memcmp(chk, host, size) == 0;
                    CHECK(ok, "write direct=%d reg=%d off=%zu size=%zu: got %zd", direct, registered, off, size, w);
                    wok += ok;
                }
                if (registered) CHECK(hipFileBufDeregister(dev).err == 0, "bufderegister");
                hipFileHandleDeregister(h);
                close(fd);
                printf("| %s | %s | %s | %d/%d | %d/%d | %s |\n", direct ? "O_DIRECT" : "buffered",
                       cold ? "cold" : "hot", registered ? "registered" : "unregistered", rok, rn, wok, wn,
                       g_fail == before ? "PASS" : "FAIL");
            }
        }
    }
    CHECK(hipFileDriverClose().err == 0, "close");
    unlink(path);
    printf("\n%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
