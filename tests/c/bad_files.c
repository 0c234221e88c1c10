/* Table-driven bad input that needs real descriptors: directories, pipes,
 * sockets, character devices and O_APPEND/O_PATH descriptors as files; writes
 * through read-only descriptors; reads through deregistered handles; huge and
 * negative offsets and sizes; misaligned pointers. Each row states the code of
 * the spec (or of the project decisions at its top). Usage: bad_files DIR */
#define _GNU_SOURCE
#include "hipfile.h"
#include "check.h"
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/hipfile-badfiles-%d", dir, getpid());
    int wfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    char data[65536];
    memset(data, 'x', sizeof data);
    if (write(wfd, data, sizeof data) != (ssize_t)sizeof data) return 2;
    CHECK(hipFileDriverOpen().err == 0, "open");

    /* 1. Things that are not files. */
    int pfd[2], sfd[2];
    CHECK(pipe(pfd) == 0, "pipe");
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sfd) == 0, "socketpair");
    struct {
        const char *what;
        int fd;
        int want;
    } rows[] = {
        {"directory", open(dir, O_RDONLY | O_DIRECTORY), hipFileInvalidFileType},
        {"pipe read end", pfd[0], hipFileInvalidFileType},
        {"pipe write end", pfd[1], hipFileInvalidFileType},
        {"socket", sfd[0], hipFileInvalidFileType},
        {"character device /dev/null", open("/dev/null", O_RDWR), hipFileInvalidFileType},
        {"O_APPEND file", open(path, O_WRONLY | O_APPEND), hipFileInvalidFileOpenFlag},
        {"O_PATH file", open(path, O_PATH), hipFileInvalidFileOpenFlag},
        {"closed descriptor", 1000000, hipFileInternalError},
        {"negative descriptor", -5, hipFileInternalError},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        hipFileHandle_t h = NULL;
        hipFileError_t e = check_register_fd(rows[i].fd, &h);
        CHECK((int)e.err == rows[i].want, "%s: got %d want %d", rows[i].what, e.err, rows[i].want);
        if (e.err == 0) hipFileHandleDeregister(h);
    }

    /* 2. I/O rows on a real file. */
    int ro = open(path, O_RDONLY);
    hipFileHandle_t hro = NULL, hrw = NULL, hdead = NULL;
    CHECK(check_register_fd(ro, &hro).err == 0, "register read-only");
    CHECK(check_register_fd(wfd, &hrw).err == 0, "register read-write");
    int dead = open(path, O_RDONLY);
    CHECK(check_register_fd(dead, &hdead).err == 0, "register then deregister");
    hipFileHandleDeregister(hdead);
    char *buf = aligned_alloc(4096, 1 << 20);
    CHECK(hipFileBufRegister(buf, 65536, 0).err == 0, "bufregister");
    struct {
        const char *what;
        int write;
        hipFileHandle_t h;
        void *b;
        size_t size;
        hoff_t foff, boff;
        ssize_t want;
        int want_errno;
    } io[] = {
        {"write through a read-only descriptor", 1, hro, buf, 4096, 0, 0, -1, EBADF},
        {"read through a deregistered handle", 0, hdead, buf, 4096, 0, 0, -hipFileHandleNotRegistered, 0},
        {"negative file offset", 0, hrw, buf, 4096, -4096, 0, -hipFileInvalidValue, 0},
        {"negative buffer offset", 0, hrw, buf, 4096, 0, -1, -hipFileInvalidValue, 0},
        {"buffer offset at the registered end", 0, hrw, buf, 1, 0, 65536, -hipFileInvalidValue, 0},
        {"size past the registered end", 0, hrw, buf, 65537, 0, 0, -hipFileInvalidValue, 0},
        {"SIZE_MAX on a registered buffer", 0, hrw, buf, SIZE_MAX, 0, 0, -hipFileInvalidValue, 0},
        {"file offset + size overflows", 0, hrw, buf, 4096, INT64_MAX - 100, 0, -hipFileInvalidValue, 0},
        {"huge offset, past EOF", 0, hrw, buf, 4096, (hoff_t)1 << 50, 0, 0, 0},
        {"NULL buffer", 0, hrw, NULL, 4096, 0, 0, -hipFileInvalidValue, 0},
        {"misaligned pointer (unregistered, +1)", 0, hrw, buf + 4097, 5000, 3, 0, 5000, 0},
        {"misaligned pointer, buffer offset 3", 0, hrw, buf, 5000, 1, 3, 5000, 0},
    };
    for (size_t i = 0; i < sizeof io / sizeof io[0]; i++) {
        errno = 0;
        ssize_t r = io[i].write ? hipFileWrite(io[i].h, io[i].b, io[i].size, io[i].foff, io[i].boff)
                                : hipFileRead(io[i].h, io[i].b, io[i].size, io[i].foff, io[i].boff);
        int e = errno;
        CHECK(r == io[i].want && (io[i].want_errno == 0 || e == io[i].want_errno), "%s: got %zd (errno %d) want %zd",
              io[i].what, r, e, io[i].want);
    }
    /* The misaligned reads brought the right bytes. */
    CHECK(memcmp(buf + 4097, data + 3, 5000) == 0 && memcmp(buf + 3, data + 1, 5000) == 0, "misaligned data");

    CHECK(hipFileBufDeregister(buf).err == 0, "bufderegister");
    hipFileHandleDeregister(hro);
    hipFileHandleDeregister(hrw);
    CHECK(hipFileDriverClose().err == 0, "close");
    unlink(path);
    return check_summary();
}
