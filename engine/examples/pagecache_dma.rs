//! Probe (hot reads): can the GPU DMA straight out of the
//! page cache, skipping the CPU copy into a bounce buffer?
//!
//! The file is mapped read-only; each thread takes every T-th chunk, page-locks
//! it with `cuMemHostRegister(READ_ONLY)`, copies it to device memory on its own
//! stream, and unregisters it. A second pass registers the whole mapping once
//! (what a persistent registration of a hot file would cost) and only copies.
//! Prints the rate of each stage. Not part of the library or the tests.
//!
//! Usage (GPU machine): pagecache_dma FILE [CHUNK_MIB=64] [THREADS=8]

use cudarc::driver::sys;
use std::ffi::c_void;
use std::time::{Duration, Instant};

mod common;
use common::{check, primary_context};

#[derive(Default, Clone, Copy)]
struct Times {
    register: Duration,
    copy: Duration,
    unregister: Duration,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: pagecache_dma FILE [CHUNK_MIB=64] [THREADS=8]");
        std::process::exit(2);
    }
    let chunk = args
        .get(2)
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(64)
        << 20;
    let threads = args
        .get(3)
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(8);
    let file = std::fs::File::open(&args[1]).expect("open");
    let len = file.metadata().expect("stat").len() as usize;
    let len = len / chunk * chunk;
    assert!(len > 0, "file shorter than one chunk");
    let ctx = primary_context();
    use std::os::fd::AsRawFd;
    // SAFETY: a read-only shared mapping of an open file, unmapped at exit.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            file.as_raw_fd(),
            0,
        )
    };
    assert!(map != libc::MAP_FAILED, "mmap failed");
    let base = map as usize;
    let dev_bytes = chunk * threads;
    let mut dev: sys::CUdeviceptr = 0;
    // SAFETY: out-pointer to a live local; the context is current.
    unsafe { check("cuMemAlloc", sys::cuMemAlloc_v2(&mut dev, dev_bytes)) };
    let ctx_u = ctx as usize;
    let n = len / chunk;
    let pass = |per_chunk: bool| {
        let t0 = Instant::now();
        let per: Vec<Times> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        let mut tm = Times::default();
                        let mut st: sys::CUstream = std::ptr::null_mut();
                        // SAFETY: the context outlives the threads; out-pointer to a local.
                        unsafe {
                            check(
                                "cuCtxSetCurrent",
                                sys::cuCtxSetCurrent(ctx_u as sys::CUcontext),
                            );
                            check("cuStreamCreate", sys::cuStreamCreate(&mut st, 1));
                        }
                        for i in (t..n).step_by(threads) {
                            let p = (base + i * chunk) as *mut c_void;
                            let a = Instant::now();
                            if per_chunk {
                                let fl = sys::CU_MEMHOSTREGISTER_READ_ONLY;
                                // SAFETY: p..p+chunk lies in the live mapping.
                                check("cuMemHostRegister", unsafe {
                                    sys::cuMemHostRegister_v2(p, chunk, fl)
                                });
                            }
                            let b = Instant::now();
                            let d = dev + (t * chunk) as u64;
                            // SAFETY: source registered (or the whole map is), destination allocated.
                            unsafe {
                                check(
                                    "cuMemcpyHtoDAsync",
                                    sys::cuMemcpyHtoDAsync_v2(d, p, chunk, st),
                                );
                                check("cuStreamSynchronize", sys::cuStreamSynchronize(st));
                            }
                            let c = Instant::now();
                            if per_chunk {
                                // SAFETY: registered above, copy finished.
                                check("cuMemHostUnregister", unsafe {
                                    sys::cuMemHostUnregister(p)
                                });
                            }
                            tm.register += b - a;
                            tm.copy += c - b;
                            tm.unregister += c.elapsed();
                        }
                        // SAFETY: the stream is idle.
                        unsafe { sys::cuStreamDestroy_v2(st) };
                        tm
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let wall = t0.elapsed().as_secs_f64();
        let sum = |f: fn(&Times) -> Duration| per.iter().map(f).sum::<Duration>().as_secs_f64();
        let gb = len as f64 / 1e9;
        // Stage rates are per thread-second, scaled by the thread count: what
        // the stage alone would deliver with all threads on it.
        let rate = |secs: f64| {
            if secs > 0.0 {
                gb * threads as f64 / secs
            } else {
                f64::INFINITY
            }
        };
        println!(
            "{}: {:.2} GB in {wall:.3} s = {:.1} GB/s; stage rates (x{threads} threads): register {:.1}, copy {:.1}, unregister {:.1} GB/s",
            if per_chunk { "register per chunk" } else { "registered once  " },
            gb,
            gb / wall,
            rate(sum(|t| t.register)),
            rate(sum(|t| t.copy)),
            rate(sum(|t| t.unregister)),
        );
    };
    println!(
        "file {} ({} MiB), chunk {} MiB, {threads} threads",
        args[1],
        len >> 20,
        chunk >> 20
    );
    pass(true);
    pass(true);
    let t = Instant::now();
    let fl = sys::CU_MEMHOSTREGISTER_READ_ONLY;
    // SAFETY: the whole mapping is live until munmap below.
    check("cuMemHostRegister(all)", unsafe {
        sys::cuMemHostRegister_v2(map, len, fl)
    });
    println!("register whole file: {:.3} s", t.elapsed().as_secs_f64());
    pass(false);
    pass(false);
    // SAFETY: registered above; every copy finished.
    unsafe {
        check("cuMemHostUnregister(all)", sys::cuMemHostUnregister(map));
        libc::munmap(map, len);
    }
}
