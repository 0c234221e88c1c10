//! Fault injection on the stream (async) path through the C ABI: seeded
//! faults (the engine's fault plans, applied to every read and write of the
//! stream I/O threads) under hipFileReadAsync/WriteAsync on test-double
//! streams. Every op ends with the right count and bytes, or a negative
//! *bytes_p — and failures never outnumber the hard faults injected.
//! HIPFILE_FAULT_SEED reproduces one seed.
//! `HIPFILE_TEST_GPU=cuda` runs the same ops on a real GPU's streams and memory.

#![allow(clippy::undocumented_unsafe_blocks)] // every call here is an unsafe C entry point on test-owned locals

mod common;

use hipfile::*;
use hipfile_engine::gpu::flaky::{read_device, runtime_under_test, write_device};
use hipfile_engine::gpu::Gpu;
use hipfile_engine::registry::driver;
use hipfile_engine::ring::{FaultPlan, SeededFaults};
use std::ffi::c_void;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[test]
fn stream_ops_under_seeded_faults() {
    let (gpu, double) = runtime_under_test(1);
    driver().set_gpu_override(Some(gpu.clone() as Arc<dyn Gpu>));
    let path = common::test_dir().join(format!("async-faults-{}", std::process::id()));
    let len = 2 << 20;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
    let seeds: Vec<u64> = match std::env::var("HIPFILE_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => (1..=30).collect(),
    };
    let mut ops_run = 0;
    let mut failed_total = 0;
    for &seed in &seeds {
        let hard: Arc<Mutex<Vec<Arc<AtomicU64>>>> = Arc::default();
        let h2 = hard.clone();
        driver().set_fault_factory(Some(Arc::new(move |w| {
            let p = SeededFaults::new(seed * 100 + w as u64, 150, true);
            h2.lock().unwrap().push(p.injected_hard.clone());
            Some(Box::new(p) as Box<dyn FaultPlan>)
        })));
        std::fs::write(&path, &data).unwrap();
        let (f, fh) = common::open_registered(&path);
        let dev = gpu.device_alloc(0, 16 * 65536).unwrap();
        let streams = [gpu.stream_create(0).unwrap(), gpu.stream_create(0).unwrap()];
        let mut p: Vec<(usize, i64, i64, isize)> = (0..16)
            .map(|i| {
                (
                    65536usize,
                    ((seed as usize * 31 + i * 97) % 28) as i64 * 65536 + 17,
                    i as i64 * 65536,
                    1isize,
                )
            })
            .collect();
        // Ops 0..12 read, 12..16 write the bytes that are in device memory,
        // which go in first.
        for (i, q) in p.iter().enumerate().skip(12) {
            write_device(gpu.inner().as_ref(), 0, dev + q.2 as u64, &[i as u8; 65536]).unwrap();
        }
        for (i, q) in p.iter_mut().enumerate() {
            let s = streams[i % 2].0 as *mut c_void;
            let (size, foff, boff, bytes) = (&mut q.0, &mut q.1, &mut q.2, &mut q.3);
            let e = if i < 12 {
                unsafe { hipFileReadAsync(fh, dev as *mut c_void, size, foff, boff, bytes, s) }
            } else {
                *foff = (30 << 16) + ((i - 12) as i64) * 65536;
                unsafe { hipFileWriteAsync(fh, dev as *mut c_void, size, foff, boff, bytes, s) }
            };
            assert_eq!(e.err, 0, "seed {seed} op {i}");
        }
        for s in streams {
            gpu.stream_synchronize(s).unwrap();
        }
        let injected: u64 = hard
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        let mut failed = 0;
        for (i, q) in p.iter().enumerate() {
            ops_run += 1;
            let (size, foff, boff, bytes) = *q;
            if bytes < 0 {
                failed += 1;
                continue;
            }
            if i >= 12 && (bytes as usize) < size {
                // A write that failed part way reports what it wrote, as
                // pwrite does; that counts as a failure to the fault budget.
                failed += 1;
                let mut back = vec![0u8; bytes as usize];
                f.read_exact_at(&mut back, foff as u64).unwrap();
                assert!(
                    back.iter().all(|&b| b == i as u8),
                    "seed {seed} op {i}: the file lacks the {bytes} bytes reported"
                );
                continue;
            }
            assert_eq!(
                bytes as usize, size,
                "seed {seed} op {i}: short count reported as success"
            );
            if i < 12 {
                let got = read_device(gpu.inner().as_ref(), 0, dev + boff as u64, size).unwrap();
                assert!(
                    got == data[foff as usize..foff as usize + size],
                    "seed {seed} op {i}: wrong bytes"
                );
            } else {
                let mut back = vec![0u8; size];
                f.read_exact_at(&mut back, foff as u64).unwrap();
                assert!(
                    back.iter().all(|&b| b == i as u8),
                    "seed {seed} op {i}: file lacks the write"
                );
            }
        }
        failed_total += failed;
        assert!(
            failed <= injected,
            "seed {seed}: {failed} failed ops, {injected} hard faults"
        );
        hipFileHandleDeregister(fh);
        while hipFileUseCount() > 0 {
            hipFileDriverClose();
        }
        unsafe { gpu.device_free(dev).unwrap() };
    }
    if let Some(t) = &double {
        // Stream ops make no GPU call off the caller's thread, so no library
        // thread creates a stream while one is parked.
        let ours: Vec<String> = t
            .streams_created_while_parked()
            .into_iter()
            .filter(|n| n.starts_with("hipfile"))
            .collect();
        assert!(ours.is_empty(), "streams created while parked by {ours:?}");
    }
    eprintln!(
        "stream fault injection ({}): {} seeds, {ops_run} ops, {failed_total} failed with an injected fault",
        gpu.name(),
        seeds.len()
    );
    driver().set_fault_factory(None);
    std::fs::remove_file(&path).ok();
}
