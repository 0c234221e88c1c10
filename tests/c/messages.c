/*
 * messages.c: the user mistakes that the library names in its log, each made once.
 *
 * Usage: messages DIR   (a scratch file goes to DIR)
 *
 * Each call must return its code; the log lines on stderr are checked by the
 * caller (ffi/tests/c_programs.rs, c_messages_name_the_mistake), which runs this
 * with HIPFILE_LOG_LEVEL=warn. Prints "N passed, M failed"; exits 0 when every code matched.
 */
#define _POSIX_C_SOURCE 200809L

#include "hipfile.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int passes, failures;

static void expect(hipFileError_t e, int want, const char *what)
{
    if ((int)e.err != want) {
        printf("FAIL: %s: got %d, expected %d\n", what, (int)e.err, want);
        failures++;
    } else {
        passes++;
    }
}

int main(int argc, char **argv)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/hipfile-messages-%d", argc > 1 ? argv[1] : "/tmp", (int)getpid());

    hipFileHandle_t fh;
    hipFileDescr_t  d;
    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeOpaqueFD;

    /* The -1 of an open() that failed. */
    d.handle.fd = open("/nonexistent/hipfile-messages", O_RDONLY);
    expect(hipFileHandleRegister(&fh, &d), hipFileInternalError, "register fd -1");

    /* A descriptor that was closed. */
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    close(fd);
    unlink(path);
    d.handle.fd = fd;
    expect(hipFileHandleRegister(&fh, &d), hipFileInternalError, "register a closed fd");

    /* A host buffer registered twice, then deregistered twice. */
    void *buf = malloc(4096);
    expect(hipFileBufRegister(buf, 4096, 0), hipFileSuccess, "register a host buffer");
    expect(hipFileBufRegister(buf, 4096, 0), hipFileMemoryAlreadyRegistered, "register it again");
    expect(hipFileBufDeregister(buf), hipFileSuccess, "deregister it");
    expect(hipFileBufDeregister(buf), hipFileMemoryNotRegistered, "deregister it again");

    /* A batch handle that was destroyed. */
    hipFileBatchHandle_t b;
    expect(hipFileBatchIOSetUp(&b, 4), hipFileSuccess, "batch setup");
    hipFileBatchIODestroy(b);
    expect(hipFileBatchIOCancel(b), hipFileInvalidValue, "cancel a destroyed batch");

    while (hipFileUseCount() > 0)
        (void)hipFileDriverClose();
    free(buf);
    printf("%d passed, %d failed\n", passes, failures);
    return failures == 0 ? 0 : 1;
}
