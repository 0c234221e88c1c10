/* What the C test programs share: CHECK, which counts a passed check or
 * prints the failed one (file, line, the condition, a printf-style message,
 * and the current section when a program names one), the summary line the
 * test runner reads. Each program includes
 * hipfile.h or cufile.h before this header, which then also gives a helper
 * that registers a descriptor through that API. */
#ifndef HIPFILE_TESTS_CHECK_H
#define HIPFILE_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_pass, g_fail;
/* The part of a program that runs now; printed with each failure when set. */
static const char *g_section = "";

#define CHECK(c, ...)                                                                  \
    do {                                                                               \
        if (c) {                                                                       \
            g_pass++;                                                                  \
        } else {                                                                       \
            g_fail++;                                                                  \
            printf("FAIL %s:%d: %s%s%s%s: ", __FILE__, __LINE__, *g_section ? "[" : "", \
                   g_section, *g_section ? "] " : "", #c);                             \
            printf(__VA_ARGS__);                                                       \
            printf("\n");                                                              \
            fflush(stdout);                                                            \
        }                                                                              \
    } while (0)

/* Prints "N passed, M failed" and returns the exit status. */
static inline int check_summary(void) {
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}

#ifdef HIPFILE_H
/* Registers an OS descriptor as a hipFile handle. */
static inline hipFileError_t check_register_fd(int fd, hipFileHandle_t *h) {
    hipFileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = hipFileHandleTypeOpaqueFD;
    d.handle.fd = fd;
    return hipFileHandleRegister(h, &d);
}
#endif

#ifdef __CUFILE_H_
/* Registers an OS descriptor as a cuFile handle; the program cannot go on without one. */
static inline CUfileHandle_t check_cufile_register_fd(int fd) {
    CUfileDescr_t d;
    memset(&d, 0, sizeof d);
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    CUfileHandle_t fh = NULL;
    CUfileError_t e = cuFileHandleRegister(&fh, &d);
    if (e.err != CU_FILE_SUCCESS) {
        printf("cuFileHandleRegister(fd %d) failed: %d\n", fd, e.err);
        exit(2);
    }
    return fh;
}
#endif

#endif
