/* Stream I/O interleaved with the application's own CUDA calls.
 *
 * While hipFileReadAsync / hipFileWriteAsync ops are parked on a stream, the
 * application makes one of the calls below, from the same thread or from
 * another thread; then the stream is synchronised under a watchdog and every
 * byte is checked against pread. Each case runs N randomised rounds: op kind
 * and count, sizes (4 KiB .. 64 MiB, sometimes unaligned), file and buffer
 * offsets, the stream's registration flags, whether the stream is first held
 * (and its parameters changed before it reaches the op), and the delays
 * before the call and before the hold is lifted.
 *
 * A hang (no progress for WATCHDOG_S seconds) prints the case and round and
 * exits with status 3. The table lists, per case and thread: rounds,
 * completed, hangs, wrong bytes (or results).
 *
 * Usage: stream_interleave DIR [ROUNDS [FIRST LAST]]
 *   ROUNDS per case and thread (default 1000); FIRST..LAST: the cases to run
 *   (0-based, inclusive; default all), to split a long run.
 * HIPFILE_TEST_SEED reproduces a run. */
#include "common.h"
#include <pthread.h>
#include <signal.h>

#define FILE_BYTES ((size_t)256 << 20)
#define BUF_BYTES ((size_t)128 << 20) /* reads land in the low half, writes come from the high half */
#define HALF (BUF_BYTES / 2)
#define SCRATCH ((size_t)1 << 20)
#define WATCHDOG_S 60

static unsigned char *data;      /* the read file's bytes */
static unsigned char *check;     /* pinned: device bytes read back */
static unsigned char *wcheck;    /* file bytes read back */
static int rfd, wfd;
static hipFileHandle_t rh, wh;
static void *dev;                /* the ops' device buffer */
static void *dev_scratch, *pinned, *pageable;
static CUfunction bump;          /* a trivial kernel for the launch case */
static CUdeviceptr bump_counter;
static cudaStream_t streams[4];  /* registered with flags 0, 0x7, 0xF, 0x3 */
static const unsigned stream_flags[4] = {0, 0x7, 0xF, 0x3};
static cudaStream_t other;       /* an unrelated stream of the application */

/* ---- the application's calls ---------------------------------------- */

struct call_ctx {
    cudaStream_t s; /* the stream the ops are on */
    void *prior;    /* a device allocation made before the ops, freed by one case */
};

static void c_pageable_h2d(struct call_ctx *c) { CU(cudaMemcpyAsync(dev_scratch, pageable, SCRATCH, cudaMemcpyHostToDevice, c->s)); }
static void c_pageable_d2h(struct call_ctx *c) { CU(cudaMemcpyAsync(pageable, dev_scratch, SCRATCH, cudaMemcpyDeviceToHost, c->s)); }
static void c_pinned_h2d(struct call_ctx *c) { CU(cudaMemcpyAsync(dev_scratch, pinned, SCRATCH, cudaMemcpyHostToDevice, c->s)); }
static void c_pinned_d2h(struct call_ctx *c) { CU(cudaMemcpyAsync(pinned, dev_scratch, SCRATCH, cudaMemcpyDeviceToHost, c->s)); }
static void c_memcpy_legacy(struct call_ctx *c) { (void)c; CU(cudaMemcpy(pageable, dev_scratch, SCRATCH, cudaMemcpyDeviceToHost)); }
static void c_sync_other(struct call_ctx *c) {
    (void)c;
    CU(cudaMemcpyAsync(dev_scratch, pinned, 4096, cudaMemcpyHostToDevice, other));
    CU(cudaStreamSynchronize(other));
}
static void c_device_sync(struct call_ctx *c) { (void)c; CU(cudaDeviceSynchronize()); }
static void c_malloc_free(struct call_ctx *c) {
    (void)c;
    void *p;
    CU(cudaMalloc(&p, SCRATCH));
    CU(cudaFree(p));
}
static void c_free_prior(struct call_ctx *c) { CU(cudaFree(c->prior)); c->prior = NULL; }
static void c_malloc_async(struct call_ctx *c) {
    void *p;
    CU(cudaMallocAsync(&p, SCRATCH, c->s));
    CU(cudaFreeAsync(p, c->s));
}
static void c_host_alloc(struct call_ctx *c) {
    (void)c;
    void *p;
    CU(cudaHostAlloc(&p, SCRATCH, cudaHostAllocDefault));
    CU(cudaFreeHost(p));
}
static void c_stream_create(struct call_ctx *c) {
    (void)c;
    cudaStream_t t;
    CU(cudaStreamCreate(&t));
    CU(cudaStreamDestroy(t));
}
static void c_event_create(struct call_ctx *c) {
    (void)c;
    cudaEvent_t e;
    CU(cudaEventCreate(&e));
    CU(cudaEventDestroy(e));
}
static void c_kernel(struct call_ctx *c) {
    void *args[] = {&bump_counter};
    CUresult r = cuLaunchKernel(bump, 1, 1, 1, 32, 1, 1, 0, (CUstream)c->s, args, NULL);
    if (r != CUDA_SUCCESS) { printf("cuLaunchKernel: %d\n", r); exit(2); }
}

static const struct {
    const char *name;
    void (*fn)(struct call_ctx *);
} cases[] = {
    {"pageable cudaMemcpyAsync H2D, same stream", c_pageable_h2d},
    {"pageable cudaMemcpyAsync D2H, same stream", c_pageable_d2h},
    {"pinned cudaMemcpyAsync H2D, same stream", c_pinned_h2d},
    {"pinned cudaMemcpyAsync D2H, same stream", c_pinned_d2h},
    {"cudaMemcpy on the legacy default stream", c_memcpy_legacy},
    {"cudaStreamSynchronize of another stream", c_sync_other},
    {"cudaDeviceSynchronize", c_device_sync},
    {"cudaMalloc + cudaFree", c_malloc_free},
    {"cudaFree of an earlier allocation", c_free_prior},
    {"cudaMallocAsync + cudaFreeAsync, same stream", c_malloc_async},
    {"cudaHostAlloc + cudaFreeHost", c_host_alloc},
    {"cudaStreamCreate + cudaStreamDestroy", c_stream_create},
    {"cudaEventCreate + cudaEventDestroy", c_event_create},
    {"kernel launch, same stream", c_kernel},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

/* ---- watchdog -------------------------------------------------------- */

static char hang_msg[256];
static void on_alarm(int sig) {
    (void)sig;
    ssize_t w = write(1, hang_msg, strlen(hang_msg));
    (void)w;
    _exit(3);
}

/* ---- threads --------------------------------------------------------- */

static volatile uint32_t *gate; /* pinned, mapped: holds a stream */
static CUdeviceptr dgate;

struct delayed { useconds_t us; uint32_t v; };
static void *release_later(void *p) {
    struct delayed *d = p;
    if (d->us) usleep(d->us);
    __sync_synchronize();
    *gate = d->v;
    return NULL;
}

struct caller { struct call_ctx *c; void (*fn)(struct call_ctx *); useconds_t us; };
static void *call_later(void *p) {
    struct caller *k = p;
    if (k->us) usleep(k->us);
    k->fn(k->c);
    return NULL;
}

/* ---- one round --------------------------------------------------------- */

struct op {
    int write;
    size_t size, size0;
    hoff_t foff, foff0, boff, boff0;
    ssize_t bytes;
};

static size_t rand_size(void) {
    /* log-uniform 4 KiB .. 64 MiB, sometimes with an unaligned tail */
    size_t s = (size_t)4096 << below(15);
    if (below(4) == 0) s += below(4096);
    if (s > ((size_t)64 << 20)) s = (size_t)64 << 20;
    return s;
}

static void plan(struct op *o, int write) {
    memset(o, 0, sizeof *o);
    o->write = write;
    o->size = rand_size();
    o->foff = (hoff_t)below(FILE_BYTES - o->size + 1);
    if (below(2)) o->foff &= ~(hoff_t)4095;
    if (!write && below(16) == 0) o->foff = (hoff_t)(FILE_BYTES - below(o->size)); /* across EOF */
    o->boff = (hoff_t)below(HALF - o->size + 1);
    if (below(2)) o->boff &= ~(hoff_t)255;
    if (write) o->boff += (hoff_t)HALF;
    o->size0 = o->size;
    o->foff0 = o->foff;
    o->boff0 = o->boff;
}

/* Change the open parameters before the stream reaches the op. */
static void rebind(struct op *o) {
    size_t n = 1 + below(o->size);
    o->size = n;
    o->foff = (hoff_t)below(FILE_BYTES - n + 1);
    hoff_t base = o->write ? (hoff_t)HALF : 0;
    o->boff = base + (hoff_t)below(HALF - n + 1);
}

/* Compare what landed with pread; returns 1 when right. */
static int verify(const struct op *o, unsigned flags) {
    size_t size = (flags & 4) ? o->size0 : o->size;
    hoff_t foff = (flags & 2) ? o->foff0 : o->foff;
    hoff_t boff = (flags & 1) ? o->boff0 : o->boff;
    size_t want = size;
    if (!o->write && (size_t)foff + size > FILE_BYTES) want = FILE_BYTES - (size_t)foff;
    if (o->bytes != (ssize_t)want) {
        printf("  bytes %zd, want %zu (%s size %zu foff %lld boff %lld flags %#x)\n", o->bytes, want,
               o->write ? "write" : "read", size, (long long)foff, (long long)boff, flags);
        return 0;
    }
    if (want == 0) return 1;
    CU(cudaMemcpy(check, (char *)dev + boff, want, cudaMemcpyDeviceToHost));
    if (!o->write) return memcmp(check, data + foff, want) == 0;
    if (pread(wfd, wcheck, want, foff) != (ssize_t)want) return 0;
    return memcmp(check, wcheck, want) == 0;
}

static hipFileError_t submit(struct op *o, cudaStream_t s) {
    return o->write ? hipFileWriteAsync(wh, dev, &o->size, &o->foff, &o->boff, &o->bytes, (hipStream_t)s)
                    : hipFileReadAsync(rh, dev, &o->size, &o->foff, &o->boff, &o->bytes, (hipStream_t)s);
}

static uint32_t gate_gen = 0;

/* One round: returns 1 when every op completed with the right bytes. */
static int round_once(int cs, int other_thread, int round) {
    int k = (int)below(4);
    cudaStream_t s = streams[k];
    unsigned flags = stream_flags[k];
    struct call_ctx c = {s, NULL};
    snprintf(hang_msg, sizeof hang_msg, "HANG: case \"%s\" (%s thread), round %d, seed state %llu\n",
             cases[cs].name, other_thread ? "other" : "same", round, (unsigned long long)rng_state);
    alarm(WATCHDOG_S);
    if (cases[cs].fn == c_free_prior) CU(cudaMalloc(&c.prior, SCRATCH));
    int held = below(4) != 0;
    if (held) {
        gate_gen++;
        CHECK(cuStreamWaitValue32((CUstream)s, dgate, gate_gen, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS, "hold");
    }
    /* one read, or a read and a write (separate halves of the buffer) */
    struct op ops[2];
    int nops = 1 + (int)below(2);
    plan(&ops[0], 0);
    if (nops == 2) plan(&ops[1], 1);
    if (nops == 2 && below(2)) { struct op t = ops[0]; ops[0] = ops[1]; ops[1] = t; }
    for (int i = 0; i < nops; i++) {
        hipFileError_t e = submit(&ops[i], s);
        if (e.err) { printf("  submit: %d/%d\n", e.err, e.hip_drv_err); return 0; }
    }
    if (held && below(2)) for (int i = 0; i < nops; i++) rebind(&ops[i]);
    pthread_t rel, call;
    struct delayed d = {(useconds_t)below(2000), gate_gen};
    if (held) pthread_create(&rel, NULL, release_later, &d);
    struct caller k2 = {&c, cases[cs].fn, (useconds_t)below(500)};
    if (other_thread) {
        pthread_create(&call, NULL, call_later, &k2);
    } else {
        call_later(&k2);
    }
    CU(cudaStreamSynchronize(s));
    if (other_thread) pthread_join(call, NULL);
    if (held) pthread_join(rel, NULL);
    CU(cudaStreamSynchronize(s));
    alarm(0);
    if (c.prior) CU(cudaFree(c.prior));
    int ok = 1;
    for (int i = 0; i < nops; i++) ok &= verify(&ops[i], flags);
    return ok;
}

/* A kernel for the launch case: every thread adds 1 to a counter. */
static const char bump_ptx[] =
    ".version 6.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry bump(.param .u64 p)\n{\n"
    "  .reg .b64 %rd<3>;\n  .reg .b32 %r<2>;\n"
    "  ld.param.u64 %rd1, [p];\n  cvta.to.global.u64 %rd2, %rd1;\n"
    "  atom.global.add.u32 %r1, [%rd2], 1;\n  ret;\n}\n";

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    int rounds = argc > 2 ? atoi(argv[2]) : 1000;
    int first = argc > 3 ? atoi(argv[3]) : 0;
    int last = argc > 4 ? atoi(argv[4]) : NCASES - 1;
    if (first < 0) first = 0;
    if (last >= NCASES) last = NCASES - 1;
    seed_from_env();
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, on_alarm);
    char rpath[512], wpath[512];
    snprintf(rpath, sizeof rpath, "%s/hipfile-interleave-r-%d", dir, getpid());
    snprintf(wpath, sizeof wpath, "%s/hipfile-interleave-w-%d", dir, getpid());
    data = malloc(FILE_BYTES);
    wcheck = malloc(HALF);
    pageable = malloc(SCRATCH);
    fill(data, FILE_BYTES, 0x5c);
    rfd = open(rpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    wfd = open(wpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (rfd < 0 || wfd < 0 || pwrite(rfd, data, FILE_BYTES, 0) != (ssize_t)FILE_BYTES ||
        ftruncate(wfd, FILE_BYTES) != 0) {
        perror("test files");
        return 2;
    }
    CU(cudaSetDevice(0));
    CU(cudaFree(0)); /* the runtime's (primary) context */
    CHECK(hipFileDriverOpen().err == 0, "open");
    rh = reg_fd(rfd);
    wh = reg_fd(wfd);
    CU(cudaMalloc(&dev, BUF_BYTES));
    CU(cudaMalloc(&dev_scratch, SCRATCH));
    CU(cudaHostAlloc((void **)&check, HALF, cudaHostAllocDefault));
    CU(cudaHostAlloc(&pinned, SCRATCH, cudaHostAllocDefault));
    CU(cudaHostAlloc((void **)&gate, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    *gate = 0;
    CHECK(cuMemHostGetDevicePointer(&dgate, (void *)gate, 0) == CUDA_SUCCESS, "gate");
    CU(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    for (int i = 0; i < 4; i++) {
        /* half the streams blocking, half not */
        CU(cudaStreamCreateWithFlags(&streams[i], i % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
        CHECK(hipFileStreamRegister((hipStream_t)streams[i], stream_flags[i]).err == 0, "register");
    }
    CUmodule mod;
    CHECK(cuModuleLoadData(&mod, bump_ptx) == CUDA_SUCCESS, "bump module");
    CHECK(cuModuleGetFunction(&bump, mod, "bump") == CUDA_SUCCESS, "bump function");
    CU(cudaMalloc((void **)&bump_counter, 4));

    printf("| case | thread | rounds | completed | hangs | wrong bytes |\n|---|---|---|---|---|---|\n");
    int total_wrong = 0;
    for (int cs = first; cs <= last; cs++) {
        for (int ot = 0; ot < 2; ot++) {
            int done = 0, wrong = 0;
            for (int r = 0; r < rounds; r++) {
                int ok = round_once(cs, ot, r);
                done++;
                if (!ok) {
                    wrong++;
                    if (wrong <= 3) printf("  wrong: case \"%s\" round %d\n", cases[cs].name, r);
                }
            }
            total_wrong += wrong;
            printf("| %s | %s | %d | %d | 0 | %d |\n", cases[cs].name, ot ? "other" : "same", rounds, done, wrong);
        }
    }
    for (int i = 0; i < 4; i++) {
        CU(cudaStreamSynchronize(streams[i]));
        CHECK(hipFileStreamDeregister((hipStream_t)streams[i]).err == 0, "deregister");
        CU(cudaStreamDestroy(streams[i]));
    }
    hipFileHandleDeregister(rh);
    hipFileHandleDeregister(wh);
    CHECK(hipFileDriverClose().err == 0, "close");
    unlink(rpath);
    unlink(wpath);
    CHECK(total_wrong == 0, "%d rounds with wrong bytes", total_wrong);
    printf("\n%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
