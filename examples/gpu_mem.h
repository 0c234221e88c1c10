/*
 * gpu_mem.h: GPU memory for the examples, through the CUDA driver API loaded at run
 * time (dlopen of libcuda.so.1, which every NVIDIA driver installs), so the examples
 * build without a CUDA toolkit and still run, in host memory, on a machine without a
 * GPU. libhipfile finds the GPU runtime the same way.
 *
 * Compiles as C11 and C++17. Link with -ldl (glibc 2.34 and later have dlopen in libc).
 */
#ifndef HIPFILE_EXAMPLES_GPU_MEM_H
#define HIPFILE_EXAMPLES_GPU_MEM_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few driver API types used here (cuda.h, 64-bit). */
typedef int gm_result;               /* CUresult: 0 is CUDA_SUCCESS */
typedef int gm_device;               /* CUdevice */
typedef void *gm_context;            /* CUcontext */
typedef unsigned long long gm_dptr;  /* CUdeviceptr */

struct gpu_mem {
    void *lib;
    gm_device dev;
    gm_context ctx;
    gm_result (*mem_alloc)(gm_dptr *, size_t);
    gm_result (*mem_free)(gm_dptr);
    gm_result (*copy_dtoh)(void *, gm_dptr, size_t);
    gm_result (*ctx_release)(gm_device);
};

/* Looks a symbol up into a function pointer (C++ needs the cast spelled out). */
#define GM_SYM(g, field, name) \
    (*(void **)(&(g)->field) = dlsym((g)->lib, (name)), (g)->field != NULL)

/*
 * Opens GPU 0 with its primary context (the context libhipfile uses too) and makes it
 * current. Returns 0 on success; otherwise fills `why` and returns -1, and the caller
 * uses host memory.
 */
static int gpu_mem_open(struct gpu_mem *g, char *why, size_t why_len)
{
    gm_result (*init)(unsigned);
    gm_result (*count)(int *);
    gm_result (*get)(gm_device *, int);
    gm_result (*retain)(gm_context *, gm_device);
    gm_result (*set_current)(gm_context);
    int n = 0;
    gm_result r;

    memset(g, 0, sizeof *g);
    g->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g->lib == NULL) {
        snprintf(why, why_len, "no CUDA driver (%s)", dlerror());
        return -1;
    }
    if (!GM_SYM(g, mem_alloc, "cuMemAlloc_v2") || !GM_SYM(g, mem_free, "cuMemFree_v2") ||
        !GM_SYM(g, copy_dtoh, "cuMemcpyDtoH_v2") ||
        !GM_SYM(g, ctx_release, "cuDevicePrimaryCtxRelease_v2")) {
        snprintf(why, why_len, "libcuda.so.1 lacks the CUDA 11 driver API");
        dlclose(g->lib);
        return -1;
    }
    *(void **)(&init) = dlsym(g->lib, "cuInit");
    *(void **)(&count) = dlsym(g->lib, "cuDeviceGetCount");
    *(void **)(&get) = dlsym(g->lib, "cuDeviceGet");
    *(void **)(&retain) = dlsym(g->lib, "cuDevicePrimaryCtxRetain");
    *(void **)(&set_current) = dlsym(g->lib, "cuCtxSetCurrent");
    if (!init || !count || !get || !retain || !set_current) {
        snprintf(why, why_len, "libcuda.so.1 lacks the CUDA driver API");
        dlclose(g->lib);
        return -1;
    }
    if ((r = init(0)) != 0 || (r = count(&n)) != 0 || n == 0) {
        snprintf(why, why_len, "CUDA driver present but no usable GPU (cuInit/cuDeviceGetCount: %d, %d devices)", r, n);
        dlclose(g->lib);
        return -1;
    }
    if ((r = get(&g->dev, 0)) != 0 || (r = retain(&g->ctx, g->dev)) != 0 || (r = set_current(g->ctx)) != 0) {
        snprintf(why, why_len, "cannot open GPU 0 (CUDA error %d)", r);
        dlclose(g->lib);
        return -1;
    }
    return 0;
}

/* Device memory of `len` bytes, or NULL. */
static void *gpu_mem_alloc(struct gpu_mem *g, size_t len)
{
    gm_dptr p = 0;
    if (g->mem_alloc(&p, len) != 0)
        return NULL;
    return (void *)(uintptr_t)p;
}

static void gpu_mem_free(struct gpu_mem *g, void *p)
{
    g->mem_free((gm_dptr)(uintptr_t)p);
}

/* Copies `len` bytes of device memory at `src` to host memory at `dst`; 0 on success. */
static int gpu_mem_to_host(struct gpu_mem *g, void *dst, const void *src, size_t len)
{
    return g->copy_dtoh(dst, (gm_dptr)(uintptr_t)src, len) == 0 ? 0 : -1;
}

static void gpu_mem_close(struct gpu_mem *g)
{
    g->ctx_release(g->dev);
    dlclose(g->lib);
}

#endif
