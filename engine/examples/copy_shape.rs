//! Probe (1 MiB batch entries): does a 4 MiB host-to-device
//! copy into a device staging buffer, followed by device-to-device copies of
//! its 1 MiB pieces to their scattered destinations, carry more than four
//! 1 MiB host-to-device copies? No file, no reads: copies only.
//!
//! T threads, each with its own stream, `bufs` pinned slots of `slot_kib`
//! and (for the gather modes) a device staging slot per pinned slot. One op
//! moves one slot's bytes to the thread's device region in pieces of
//! `entry_kib`, placed in reverse order (so no two pieces are contiguous):
//! - `mode=h2d`: one host-to-device copy per piece;
//! - `mode=h2dev`: as h2d, with an event recorded after every piece (the
//!   engine records one per device and pass);
//! - `mode=whole`: one host-to-device copy of the whole slot (the link limit);
//! - `mode=gather`: the whole slot to staging, then one device-to-device copy
//!   per piece, all on the thread's stream;
//! - `mode=gather2`: as gather, but the device-to-device copies go on a second
//!   stream of the thread that waits for the staging copy's event;
//! - `mode=batch`: the pieces as one `cuMemcpyBatchAsync` (CUDA 12.8), then
//!   one event: does the driver carry a batch of 1 MiB copies better than
//!   the same copies queued one by one (h2d)?
//!
//! A slot is reused after its previous op's event. Prints GB/s of payload per
//! pass and the median. Not part of the library or the tests.
//!
//! Usage (GPU machine): copy_shape [mode=h2d] [threads=12] [slot_kib=4096]
//!   [entry_kib=1024] [bufs=2] [gib=16] [passes=3]

use cudarc::driver::sys;
use std::ffi::c_void;
use std::time::Instant;

mod common;
use common::{check, key_value, number, primary_context};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    H2d,
    H2dEv,
    Whole,
    Gather,
    Gather2,
    Batch,
}

#[derive(Clone, Copy)]
struct Opts {
    mode: Mode,
    threads: usize,
    slot: usize,
    entry: usize,
    bufs: usize,
    bytes: usize,
    passes: usize,
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        mode: Mode::H2d,
        threads: 12,
        slot: 4 << 20,
        entry: 1 << 20,
        bufs: 2,
        bytes: 16 << 30,
        passes: 3,
    };
    for a in args {
        let (k, v) = key_value(a);
        let num = || number(k, v);
        match k {
            "mode" => {
                o.mode = match v {
                    "h2d" => Mode::H2d,
                    "h2dev" => Mode::H2dEv,
                    "whole" => Mode::Whole,
                    "gather" => Mode::Gather,
                    "gather2" => Mode::Gather2,
                    "batch" => Mode::Batch,
                    _ => {
                        eprintln!("mode={v:?}: h2d, h2dev, whole, gather, gather2 or batch");
                        std::process::exit(2)
                    }
                }
            }
            "threads" => o.threads = num().max(1),
            "slot_kib" => o.slot = num().max(4) << 10,
            "entry_kib" => o.entry = num().max(4) << 10,
            "bufs" => o.bufs = num().max(1),
            "gib" => o.bytes = num().max(1) << 30,
            "passes" => o.passes = num().max(1),
            _ => {
                eprintln!("unknown option {k}");
                std::process::exit(2)
            }
        }
    }
    if o.slot % o.entry != 0 {
        eprintln!("slot_kib must be a multiple of entry_kib");
        std::process::exit(2)
    }
    o
}

/// Per-thread GPU objects.
struct Lane {
    stream: sys::CUstream,
    side: sys::CUstream,
    host: *mut u8,
    staging: sys::CUdeviceptr,
    dst: sys::CUdeviceptr,
    done: Vec<sys::CUevent>,
    staged: Vec<sys::CUevent>,
}

fn event() -> sys::CUevent {
    let mut e: sys::CUevent = std::ptr::null_mut();
    let fl = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
        | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
    // SAFETY: out-pointer to a live local; a context is current.
    check("cuEventCreate", unsafe { sys::cuEventCreate(&mut e, fl) });
    e
}

fn stream() -> sys::CUstream {
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: out-pointer to a live local; a context is current.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
    });
    s
}

impl Lane {
    fn new(o: &Opts) -> Lane {
        let mut host: *mut c_void = std::ptr::null_mut();
        let mut staging = 0;
        let mut dst = 0;
        // SAFETY: out-pointers to live locals; a context is current.
        unsafe {
            check(
                "cuMemHostAlloc",
                sys::cuMemHostAlloc(&mut host, o.slot * o.bufs, 0),
            );
            std::ptr::write_bytes(host.cast::<u8>(), 7, o.slot * o.bufs);
            check(
                "cuMemAlloc staging",
                sys::cuMemAlloc_v2(&mut staging, o.slot * o.bufs),
            );
            check("cuMemAlloc dst", sys::cuMemAlloc_v2(&mut dst, o.slot * 4));
        }
        Lane {
            stream: stream(),
            side: stream(),
            host: host.cast(),
            staging,
            dst,
            done: (0..o.bufs).map(|_| event()).collect(),
            staged: (0..o.bufs).map(|_| event()).collect(),
        }
    }

    /// Queue one op from slot `b`; `n` is the op's sequence number (picks
    /// where in the destination region it lands).
    fn op(&self, o: &Opts, b: usize, n: usize) {
        let src = self.host as usize + b * o.slot;
        let base = self.dst + ((n % 2) * 2 * o.slot) as u64;
        let pieces = o.slot / o.entry;
        // Piece i goes to the mirror position, with a gap of one piece.
        let at = |i: usize| base + ((pieces - 1 - i) * 2 * o.entry) as u64;
        let stage = self.staging + (b * o.slot) as u64;
        // SAFETY: every range lies inside this lane's allocations; the slot is
        // not reused before its previous op's event has completed.
        unsafe {
            match o.mode {
                Mode::Whole => check(
                    "cuMemcpyHtoDAsync",
                    sys::cuMemcpyHtoDAsync_v2(base, src as *const c_void, o.slot, self.stream),
                ),
                Mode::H2d | Mode::H2dEv => {
                    for i in 0..pieces {
                        let p = (src + i * o.entry) as *const c_void;
                        check(
                            "cuMemcpyHtoDAsync",
                            sys::cuMemcpyHtoDAsync_v2(at(i), p, o.entry, self.stream),
                        );
                        if o.mode == Mode::H2dEv && i + 1 < pieces {
                            check(
                                "cuEventRecord",
                                sys::cuEventRecord(self.staged[b], self.stream),
                            );
                        }
                    }
                }
                Mode::Batch => {
                    let mut dsts: Vec<sys::CUdeviceptr> = (0..pieces).map(at).collect();
                    let mut srcs: Vec<sys::CUdeviceptr> =
                        (0..pieces).map(|i| (src + i * o.entry) as u64).collect();
                    let mut sizes = vec![o.entry; pieces];
                    let mut attr = hipfile_engine::gpu::cuda::htod_batch_attributes();
                    let mut attr_idx = 0usize;
                    let mut fail = 0usize;
                    check(
                        "cuMemcpyBatchAsync",
                        sys::cuMemcpyBatchAsync(
                            dsts.as_mut_ptr(),
                            srcs.as_mut_ptr(),
                            sizes.as_mut_ptr(),
                            pieces,
                            &mut attr,
                            &mut attr_idx,
                            1,
                            &mut fail,
                            self.stream,
                        ),
                    );
                }
                Mode::Gather | Mode::Gather2 => {
                    check(
                        "cuMemcpyHtoDAsync",
                        sys::cuMemcpyHtoDAsync_v2(stage, src as *const c_void, o.slot, self.stream),
                    );
                    let s = if o.mode == Mode::Gather2 {
                        check(
                            "cuEventRecord",
                            sys::cuEventRecord(self.staged[b], self.stream),
                        );
                        check(
                            "cuStreamWaitEvent",
                            sys::cuStreamWaitEvent(self.side, self.staged[b], 0),
                        );
                        self.side
                    } else {
                        self.stream
                    };
                    for i in 0..pieces {
                        check(
                            "cuMemcpyDtoDAsync",
                            sys::cuMemcpyDtoDAsync_v2(
                                at(i),
                                stage + (i * o.entry) as u64,
                                o.entry,
                                s,
                            ),
                        );
                    }
                    check("cuEventRecord", sys::cuEventRecord(self.done[b], s));
                    return;
                }
            }
            check(
                "cuEventRecord",
                sys::cuEventRecord(self.done[b], self.stream),
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = parse(&args);
    let ctx_u = primary_context() as usize;
    let per_thread = (o.bytes / o.threads / o.slot).max(1);
    let mut rates = Vec::new();
    for pass in 0..o.passes {
        let start = std::sync::Barrier::new(o.threads + 1);
        let t0 = std::thread::scope(|s| {
            for _ in 0..o.threads {
                let start = &start;
                s.spawn(move || {
                    // SAFETY: the context outlives the threads.
                    unsafe { check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx_u as _)) };
                    let lane = Lane::new(&o);
                    start.wait();
                    for n in 0..per_thread {
                        let b = n % o.bufs;
                        if n >= o.bufs {
                            // SAFETY: the event was recorded by the op that used slot b.
                            check("cuEventSynchronize", unsafe {
                                sys::cuEventSynchronize(lane.done[b])
                            });
                        }
                        lane.op(&o, b, n);
                    }
                    // SAFETY: the lane's streams are live.
                    unsafe {
                        check("cuStreamSynchronize", sys::cuStreamSynchronize(lane.stream));
                        check("cuStreamSynchronize", sys::cuStreamSynchronize(lane.side));
                    }
                    // Lanes are left to the process exit: the probe measures copies only.
                    std::mem::forget(lane);
                });
            }
            start.wait();
            Instant::now()
        });
        let secs = t0.elapsed().as_secs_f64();
        let gbps = (per_thread * o.threads * o.slot) as f64 / secs / 1e9;
        println!(
            "pass {pass}: mode={:?} threads={} slot={} KiB entry={} KiB bufs={}: {gbps:.2} GB/s",
            o.mode,
            o.threads,
            o.slot >> 10,
            o.entry >> 10,
            o.bufs
        );
        rates.push(gbps);
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "median: mode={:?} threads={} slot_kib={} entry_kib={} bufs={}: {:.2} GB/s",
        o.mode,
        o.threads,
        o.slot >> 10,
        o.entry >> 10,
        o.bufs,
        rates[rates.len() / 2]
    );
}
