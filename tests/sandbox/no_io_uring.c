/*
 * no-io-uring ERRNO COMMAND [ARG...]
 *
 * Run COMMAND with io_uring refused the way a container refuses it: a seccomp
 * filter answers io_uring_setup, io_uring_enter and io_uring_register with
 * ERRNO (EPERM, as Docker's default profile does, or ENOSYS, as gVisor and
 * kernels without io_uring do); every other system call passes. The filter is
 * inherited by every child, so cargo's target runner
 * (CARGO_TARGET_<triple>_RUNNER) puts a whole test binary, and the programs it
 * starts, under it. Exits 125 when the filter cannot be installed or does not
 * take effect, so a test pass can never run with io_uring silently allowed.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define THIS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_ARCH AUDIT_ARCH_AARCH64
#else
#error "no-io-uring knows the audit architecture of x86_64 and aarch64 only"
#endif

/* The same numbers on every architecture (the unified syscall table). */
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_io_uring_enter
#define __NR_io_uring_enter 426
#endif
#ifndef __NR_io_uring_register
#define __NR_io_uring_register 427
#endif

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: no-io-uring EPERM|ENOSYS COMMAND [ARG...]\n");
        return 125;
    }
    unsigned err;
    if (strcmp(argv[1], "EPERM") == 0)
        err = EPERM;
    else if (strcmp(argv[1], "ENOSYS") == 0)
        err = ENOSYS;
    else {
        fprintf(stderr, "no-io-uring: errno must be EPERM or ENOSYS, not %s\n", argv[1]);
        return 125;
    }
    struct sock_filter code[] = {
        /* A call from another ABI (a 32-bit program) numbers differently: let it be. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_enter, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {
        .len = (unsigned short)(sizeof code / sizeof code[0]),
        .filter = code,
    };
    /* Lets a process without CAP_SYS_ADMIN install a filter. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("no-io-uring: PR_SET_NO_NEW_PRIVS");
        return 125;
    }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("no-io-uring: PR_SET_SECCOMP");
        return 125;
    }
    /* Check the filter answers as asked: struct io_uring_params is 120 bytes. */
    unsigned char params[120] = {0};
    long fd = syscall(__NR_io_uring_setup, 4, params);
    if (fd >= 0 || (unsigned)errno != err) {
        fprintf(stderr, "no-io-uring: io_uring_setup still answers %ld (errno %d)\n", fd, errno);
        return 125;
    }
    execvp(argv[2], argv + 2);
    fprintf(stderr, "no-io-uring: cannot run %s: %s\n", argv[2], strerror(errno));
    return 127;
}
