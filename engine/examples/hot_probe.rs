//! Probe (hot reads): which part of the bounce path sets the
//! page-cache-hot ceiling?
//!
//! T threads each read every T-th chunk of a page-cached file into their own
//! B pinned buffers (round robin) and, with `gpu=1`, copy each buffer to device
//! memory on the thread's stream, waiting for a buffer's previous copy before
//! reading into it again. Variants isolate one difference from the engine at a
//! time: how the bytes are read (`pread`, a synchronous io_uring read, or a
//! READ_FIXED read from registered buffers), how the buffers are allocated
//! (`cuMemHostAlloc` or mmap + `cuMemHostRegister`, as the engine's slab), and
//! how a thread waits (blocking-sync event, spinning event, stream sync).
//! Prints the rate of each pass and the process CPU time. Not part of the
//! library or the tests.
//!
//! Usage (GPU machine): hot_probe FILE [threads=12] [chunk_kib=4096] [bufs=2]
//!   [read=pread|uring|fixed] [nowait=1] [gpu=1] [alloc=hostalloc|register]
//!   [wait=block|spin|stream] [passes=5] [huge=0]

use cudarc::driver::sys;
use io_uring::{opcode, types, IoUring};
use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::time::Instant;

mod common;
use common::{check, key_value, number, primary_context};

#[derive(Clone, Copy, PartialEq)]
enum Read {
    Pread,
    Uring,
    Fixed,
}

#[derive(Clone, Copy, PartialEq)]
enum Wait {
    Block,
    Spin,
    Stream,
}

#[derive(Clone, Copy)]
struct Opts {
    threads: usize,
    chunk: usize,
    bufs: usize,
    read: Read,
    nowait: bool,
    gpu: bool,
    hostalloc: bool,
    wait: Wait,
    passes: usize,
    huge: bool,
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        threads: 12,
        chunk: 4 << 20,
        bufs: 2,
        read: Read::Pread,
        nowait: true,
        gpu: true,
        hostalloc: true,
        wait: Wait::Block,
        passes: 5,
        huge: false,
    };
    for a in args {
        let (k, v) = key_value(a);
        let num = || number(k, v);
        match k {
            "threads" => o.threads = num().max(1),
            "chunk_kib" => o.chunk = num().max(4) << 10,
            "bufs" => o.bufs = num().max(1),
            "passes" => o.passes = num().max(1),
            "nowait" => o.nowait = num() != 0,
            "gpu" => o.gpu = num() != 0,
            "huge" => o.huge = num() != 0,
            "read" => {
                o.read = match v {
                    "pread" => Read::Pread,
                    "uring" => Read::Uring,
                    "fixed" => Read::Fixed,
                    _ => {
                        eprintln!("read={v:?}: pread, uring or fixed");
                        std::process::exit(2)
                    }
                }
            }
            "alloc" => o.hostalloc = v == "hostalloc",
            "wait" => {
                o.wait = match v {
                    "block" => Wait::Block,
                    "spin" => Wait::Spin,
                    "stream" => Wait::Stream,
                    _ => {
                        eprintln!("wait={v:?}: block, spin or stream");
                        std::process::exit(2)
                    }
                }
            }
            _ => {
                eprintln!("unknown option {k}");
                std::process::exit(2)
            }
        }
    }
    o
}

/// One thread's pinned buffers.
struct Bufs {
    base: *mut u8,
    bytes: usize,
    hostalloc: bool,
}

impl Bufs {
    fn new(o: &Opts) -> Bufs {
        let bytes = o.chunk * o.bufs;
        let mut p: *mut c_void = std::ptr::null_mut();
        if o.hostalloc {
            // SAFETY: out-pointer to a live local; a context is current.
            check("cuMemHostAlloc", unsafe {
                sys::cuMemHostAlloc(&mut p, bytes, 0)
            });
        } else {
            // SAFETY: anonymous mapping, no preconditions.
            p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert!(p != libc::MAP_FAILED, "mmap failed");
            if o.huge {
                // SAFETY: advice on our own mapping.
                unsafe { libc::madvise(p, bytes, libc::MADV_HUGEPAGE) };
            }
            // SAFETY: touch every page so the pin below sees populated memory.
            unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
            if o.gpu {
                let fl = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
                // SAFETY: the mapping lives until drop, which unregisters first.
                check("cuMemHostRegister", unsafe {
                    sys::cuMemHostRegister_v2(p, bytes, fl)
                });
            }
        }
        Bufs {
            base: p.cast(),
            bytes,
            hostalloc: o.hostalloc,
        }
    }

    fn at(&self, i: usize, chunk: usize) -> *mut u8 {
        // SAFETY: i < bufs, so the slot lies inside the allocation.
        unsafe { self.base.add(i * chunk) }
    }
}

fn read_chunk(
    o: &Opts,
    ring: Option<&mut IoUring>,
    fd: i32,
    buf: *mut u8,
    idx: u16,
    off: u64,
) -> usize {
    match (o.read, ring) {
        (Read::Pread, _) | (_, None) => {
            let mut done = 0;
            while done < o.chunk {
                // SAFETY: buf..buf+chunk is one of this thread's buffers.
                let n = unsafe {
                    libc::pread(
                        fd,
                        buf.add(done).cast(),
                        o.chunk - done,
                        (off + done as u64) as i64,
                    )
                };
                if n <= 0 {
                    break;
                }
                done += n as usize;
            }
            done
        }
        (r, Some(ring)) => {
            let flags = if o.nowait { libc::RWF_NOWAIT } else { 0 };
            let e = if r == Read::Fixed {
                opcode::ReadFixed::new(types::Fd(fd), buf, o.chunk as u32, idx)
                    .offset(off)
                    .rw_flags(flags)
                    .build()
            } else {
                opcode::Read::new(types::Fd(fd), buf, o.chunk as u32)
                    .offset(off)
                    .rw_flags(flags)
                    .build()
            };
            // SAFETY: the buffer outlives the wait below.
            unsafe { ring.submission().push(&e).expect("sq full") };
            ring.submit_and_wait(1).expect("io_uring_enter");
            let c = ring.completion().next().expect("cqe");
            if c.result() < 0 {
                eprintln!(
                    "read at {off}: {}",
                    std::io::Error::from_raw_os_error(-c.result())
                );
                std::process::exit(1);
            }
            c.result() as usize
        }
    }
}

fn cpu_secs() -> (f64, f64) {
    // SAFETY: rusage is plain old data; all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills a live local.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(u.ru_utime), s(u.ru_stime))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: hot_probe FILE [key=value ...] (see the source)");
        std::process::exit(2);
    }
    let o = parse(&args[2..]);
    let file = std::fs::File::open(&args[1]).expect("open");
    let len = file.metadata().expect("stat").len() as usize / o.chunk * o.chunk;
    let n = len / o.chunk;
    assert!(n > 0, "file shorter than one chunk");
    let fd = file.as_raw_fd();
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    let mut dev: sys::CUdeviceptr = 0;
    // Without the GPU and with plain buffers, CUDA is not needed (a dry run anywhere).
    let cuda = o.gpu || o.hostalloc;
    if cuda {
        ctx = primary_context();
        // SAFETY: an out-pointer to a live local; the context is current.
        unsafe {
            check(
                "cuMemAlloc",
                sys::cuMemAlloc_v2(&mut dev, o.chunk * o.bufs * o.threads),
            );
        }
    }
    let ctx_u = ctx as usize;
    let start = std::sync::Barrier::new(o.threads + 1);
    let rates: Vec<f64> = std::thread::scope(|s| {
        let mut hs = Vec::new();
        for t in 0..o.threads {
            let start = &start;
            hs.push(s.spawn(move || {
                if cuda {
                    // SAFETY: the context outlives the threads.
                    unsafe { check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx_u as _)) };
                }
                let bufs = Bufs::new(&o);
                let mut ring = (o.read != Read::Pread).then(|| IoUring::new(8).expect("ring"));
                if o.read == Read::Fixed {
                    let iov: Vec<libc::iovec> = (0..o.bufs)
                        .map(|i| libc::iovec {
                            iov_base: bufs.at(i, o.chunk).cast(),
                            iov_len: o.chunk,
                        })
                        .collect();
                    // SAFETY: the buffers outlive the ring (dropped first, below).
                    unsafe { ring.as_ref().unwrap().submitter().register_buffers(&iov) }
                        .expect("register_buffers");
                }
                let mut st: sys::CUstream = std::ptr::null_mut();
                let flags = match o.wait {
                    Wait::Block => {
                        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
                            | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32
                    }
                    _ => sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
                };
                let mut evs = vec![std::ptr::null_mut(); o.bufs];
                if o.gpu {
                    // SAFETY: out-pointers to live locals; a context is current.
                    unsafe {
                        check("cuStreamCreate", sys::cuStreamCreate(&mut st, 1));
                        for e in evs.iter_mut() {
                            check("cuEventCreate", sys::cuEventCreate(e, flags));
                        }
                    }
                }
                let mut busy = vec![false; o.bufs];
                let mut per = Vec::new();
                for _ in 0..o.passes {
                    start.wait();
                    for (k, i) in (t..n).step_by(o.threads).enumerate() {
                        let b = k % o.bufs;
                        if busy[b] {
                            match o.wait {
                                Wait::Stream => {
                                    // SAFETY: the stream is live.
                                    let r = unsafe { sys::cuStreamSynchronize(st) };
                                    check("cuStreamSynchronize", r);
                                    busy.iter_mut().for_each(|x| *x = false);
                                }
                                _ => {
                                    // SAFETY: the event is live.
                                    let r = unsafe { sys::cuEventSynchronize(evs[b]) };
                                    check("cuEventSynchronize", r);
                                    busy[b] = false;
                                }
                            }
                        }
                        let p = bufs.at(b, o.chunk);
                        let got =
                            read_chunk(&o, ring.as_mut(), fd, p, b as u16, (i * o.chunk) as u64);
                        assert_eq!(got, o.chunk, "short read at chunk {i}");
                        if o.gpu {
                            let d = dev + ((t * o.bufs + b) * o.chunk) as u64;
                            // SAFETY: pinned source, allocated destination; the
                            // buffer is not touched until its event completes.
                            unsafe {
                                check(
                                    "cuMemcpyHtoDAsync",
                                    sys::cuMemcpyHtoDAsync_v2(d, p.cast(), o.chunk, st),
                                );
                                check("cuEventRecord", sys::cuEventRecord(evs[b], st));
                            }
                            busy[b] = true;
                        }
                    }
                    if o.gpu {
                        // SAFETY: live stream.
                        unsafe { check("cuStreamSynchronize", sys::cuStreamSynchronize(st)) };
                    }
                    busy.iter_mut().for_each(|x| *x = false);
                    start.wait();
                    per.push(());
                }
                drop(ring);
                // SAFETY: everything is idle; the buffers are ours.
                unsafe {
                    if o.gpu {
                        for e in evs {
                            sys::cuEventDestroy_v2(e);
                        }
                        sys::cuStreamDestroy_v2(st);
                    }
                    if bufs.hostalloc {
                        sys::cuMemFreeHost(bufs.base.cast());
                    } else {
                        if o.gpu {
                            sys::cuMemHostUnregister(bufs.base.cast());
                        }
                        libc::munmap(bufs.base.cast(), bufs.bytes);
                    }
                }
            }));
        }
        let mut rates = Vec::new();
        for _ in 0..o.passes {
            start.wait();
            let t0 = Instant::now();
            start.wait();
            rates.push(len as f64 / t0.elapsed().as_secs_f64() / 1e9);
        }
        for h in hs {
            h.join().unwrap();
        }
        rates
    });
    let (u, s) = cpu_secs();
    let mut sorted = rates.clone();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "threads={} chunk_kib={} bufs={} read={} nowait={} gpu={} alloc={} wait={} huge={}: \
         median {:.2} GB/s, best {:.2} (passes {:?}); cpu usr {:.2} s sys {:.2} s",
        o.threads,
        o.chunk >> 10,
        o.bufs,
        match o.read {
            Read::Pread => "pread",
            Read::Uring => "uring",
            Read::Fixed => "fixed",
        },
        o.nowait as u8,
        o.gpu as u8,
        if o.hostalloc { "hostalloc" } else { "register" },
        match o.wait {
            Wait::Block => "block",
            Wait::Spin => "spin",
            Wait::Stream => "stream",
        },
        o.huge as u8,
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        rates
            .iter()
            .map(|r| (r * 100.0).round() / 100.0)
            .collect::<Vec<_>>(),
        u,
        s
    );
    if cuda {
        // SAFETY: every copy finished.
        unsafe { sys::cuMemFree_v2(dev) };
    }
}
