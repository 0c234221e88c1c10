// hipfile-batch-read: read a file into GPU memory with the batch API, one batch of up
// to 64 entries of 1 MiB in flight at a time, then check every byte against the file
// read with std::ifstream.
//
//   hipfile-batch-read [--mem=auto|device|host] FILE
//
// --mem as in hipfile-read-file. The whole file goes into one buffer, so it must fit in
// memory. Exit status 0 only when every byte matched.
#include <hipfile.h>

#include "gpu_mem.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

constexpr size_t kEntry = 1u << 20;
constexpr unsigned kBatch = 64;

// Throws on any hipFile error, with the library's sentence for the code.
void check(hipFileError_t e, const char *what)
{
    if (e.err == hipFileSuccess)
        return;
    std::string msg = std::string(what) + ": ";
    if (IS_HIP_DRV_ERR(e))
        msg += "GPU runtime error " + std::to_string(HIP_DRV_ERR(e));
    else
        msg += std::string(hipFileGetOpErrorString(e.err)) + " (" + std::to_string(e.err) + ")";
    throw std::runtime_error(msg);
}

// The driver stays open for the object's life; the final close releases everything.
struct Driver {
    Driver() { check(hipFileDriverOpen(), "hipFileDriverOpen"); }
    ~Driver() { (void)hipFileDriverClose(); }
    Driver(const Driver &) = delete;
    Driver &operator=(const Driver &) = delete;
};

struct FileHandle {
    hipFileHandle_t fh = nullptr;
    explicit FileHandle(int fd)
    {
        hipFileDescr_t d{};
        d.type = hipFileHandleTypeOpaqueFD;
        d.handle.fd = fd;
        check(hipFileHandleRegister(&fh, &d), "hipFileHandleRegister");
    }
    ~FileHandle() { hipFileHandleDeregister(fh); }
    FileHandle(const FileHandle &) = delete;
    FileHandle &operator=(const FileHandle &) = delete;
};

struct BatchHandle {
    hipFileBatchHandle_t id = nullptr;
    explicit BatchHandle(unsigned max_nr) { check(hipFileBatchIOSetUp(&id, max_nr), "hipFileBatchIOSetUp"); }
    ~BatchHandle() { hipFileBatchIODestroy(id); }
    BatchHandle(const BatchHandle &) = delete;
    BatchHandle &operator=(const BatchHandle &) = delete;
};

// Reads [0, size) of the file into buf (registered), kBatch entries at a time.
void batch_read(hipFileHandle_t fh, void *buf, size_t size)
{
    BatchHandle batch(kBatch);
    std::vector<hipFileIOParams_t> params;
    std::vector<hipFileIOEvents_t> events(kBatch);
    for (size_t off = 0; off < size;) {
        params.clear();
        for (; off < size && params.size() < kBatch; off += kEntry) {
            hipFileIOParams_t p{};
            p.mode = hipFileBatch;
            p.u.batch.devPtr_base = buf;
            p.u.batch.file_offset = static_cast<int64_t>(off);
            p.u.batch.devPtr_offset = static_cast<int64_t>(off);
            p.u.batch.size = std::min(kEntry, size - off);
            p.fh = fh;
            p.opcode = hipFileBatchRead;
            p.cookie = reinterpret_cast<void *>(off);
            params.push_back(p);
        }
        const auto nr = static_cast<unsigned>(params.size());
        check(hipFileBatchIOSubmit(batch.id, nr, params.data(), 0), "hipFileBatchIOSubmit");
        // Wait for all of them (NULL timeout); events come back in any order.
        for (unsigned left = nr; left > 0;) {
            unsigned got = left;
            check(hipFileBatchIOGetStatus(batch.id, left, &got, events.data(), nullptr),
                  "hipFileBatchIOGetStatus");
            for (unsigned i = 0; i < got; i++) {
                const auto at = reinterpret_cast<size_t>(events[i].cookie);
                const auto ret = static_cast<ssize_t>(events[i].ret);
                const size_t expect = std::min(kEntry, size - at);
                if (events[i].status != hipFileComplete || ret != static_cast<ssize_t>(expect))
                    throw std::runtime_error("entry at " + std::to_string(at) + ": status " +
                                             std::to_string(events[i].status) + ", ret " +
                                             std::to_string(ret) +
                                             (IS_HIPFILE_ERR(ret) ? std::string(" (") + HIPFILE_ERRSTR(ret) + ")"
                                                                  : std::string()));
            }
            left -= got;
        }
    }
}

}  // namespace

int main(int argc, char **argv)
{
    std::string mem = "auto", path;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::cout << "usage: " << argv[0] << " [--mem=auto|device|host] FILE\n"
                      << "Reads FILE into GPU memory (host memory without a GPU) with hipFile batches\n"
                      << "and checks every byte against the file.\n";
            return 0;
        }
        if (a.rfind("--mem=", 0) == 0)
            mem = a.substr(6);
        else if (path.empty())
            path = a;
        else
            path.clear(), i = argc;
    }
    if (path.empty() || (mem != "auto" && mem != "device" && mem != "host")) {
        std::cerr << "usage: " << argv[0] << " [--mem=auto|device|host] FILE\n";
        return 2;
    }

    gpu_mem gpu{};
    char why[256] = "";
    const bool on_gpu = mem != "host" && gpu_mem_open(&gpu, why, sizeof why) == 0;
    if (!on_gpu && mem == "device") {
        std::cerr << "--mem=device: " << why << "\n";
        return 1;
    }

    std::ifstream in(path, std::ios::binary);
    const std::vector<char> want((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int fd = open(path.c_str(), O_RDONLY);
    if (!in.good() && !in.eof()) {
        std::cerr << path << ": cannot read\n";
        return 1;
    }
    if (fd < 0) {
        std::cerr << path << ": " << std::strerror(errno) << "\n";
        return 1;
    }
    const size_t size = want.size();
    const size_t len = size > 0 ? size : 1;

    int status = 0;
    void *buf = on_gpu ? gpu_mem_alloc(&gpu, len) : std::malloc(len);
    if (buf == nullptr) {
        std::cerr << "cannot allocate " << len << " bytes of " << (on_gpu ? "device" : "host") << " memory\n";
        return 1;
    }
    try {
        Driver driver;
        FileHandle file(fd);
        // Batch entries name a registered buffer and an offset into it.
        check(hipFileBufRegister(buf, len, 0), "hipFileBufRegister");
        batch_read(file.fh, buf, size);
        std::vector<char> got(len);
        if (on_gpu ? gpu_mem_to_host(&gpu, got.data(), buf, size) : (std::memcpy(got.data(), buf, size), 0))
            throw std::runtime_error("copying the data back from the GPU failed");
        check(hipFileBufDeregister(buf), "hipFileBufDeregister");
        if (std::memcmp(got.data(), want.data(), size) != 0)
            throw std::runtime_error("the data read differ from the file");
        std::cout << "read " << size << " bytes into " << (on_gpu ? "device memory (GPU 0)" : "host memory")
                  << " in batches of " << kBatch << " x " << (kEntry >> 20) << " MiB; every byte matches\n";
        if (!on_gpu && mem == "auto")
            std::cout << "(host memory: " << why << ")\n";
    } catch (const std::exception &e) {
        std::cerr << e.what() << "\n";
        status = 1;
    }
    if (on_gpu) {
        gpu_mem_free(&gpu, buf);
        gpu_mem_close(&gpu);
    } else {
        std::free(buf);
    }
    close(fd);
    return status;
}
