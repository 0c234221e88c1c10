//! Stream I/O under the test double's model of the CUDA driver lock: while
//! any stream is parked, every GPU call a library thread (`hipfile-*`) makes
//! blocks until no stream is parked, as calls block behind an application's
//! `cudaFree` that waits for the device. Stream ops must complete anyway,
//! and so must a sync read whose worker the lock holds. The last test shows
//! that the model bites: the worker-driven stream path (what HIP uses) does
//! block under it.

#![allow(clippy::undocumented_unsafe_blocks)] // unsafe C entry points on test-owned locals

mod common;

use common::*;
use hipfile::*;
use hipfile_engine::gpu::testgpu::TestGpu;
use hipfile_engine::gpu::{Gpu, Stream};
use std::ffi::c_void;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

const MIB: usize = 1 << 20;

/// Turns the model off when dropped, so a failing test does not leave
/// library threads blocked for the tests after it.
struct Model(Arc<TestGpu>);

impl Model {
    fn on(gpu: &Arc<TestGpu>) -> Model {
        gpu.set_driver_lock_model(true);
        Model(gpu.clone())
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.0.set_driver_lock_model(false);
    }
}

#[test]
fn stream_ops_complete_and_no_library_thread_calls_the_gpu_while_a_stream_is_parked() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("model", 32 * MIB);
    let dev = gpu.device_alloc(0, 32 * MIB).unwrap();
    let src = pattern(8 * MIB, 0x42);
    gpu.write_device(dev + 24 * MIB as u64, &src);
    let streams: Vec<Stream> = (0..3).map(|_| gpu.stream_create(0).unwrap()).collect();
    let blocked_before = gpu.calls_ever_blocked_by_lock_model();
    let _model = Model::on(&gpu);
    let gates: Vec<Gate> = streams.iter().map(|&s| Gate::holding(&gpu, s)).collect();
    let mut ps = [
        P::new(9 * MIB, 5, 1),
        P::new(7 * MIB + 3, 9 * MIB as i64, 10 * MIB as i64),
        P::new(8 * MIB, 20 * MIB as i64, 24 * MIB as i64),
    ];
    for (i, (p, &s)) in ps.iter_mut().zip(&streams).enumerate() {
        let e = if i == 2 {
            write(&tf, dev, p, s)
        } else {
            read(&tf, dev, p, s)
        };
        assert_eq!(e, 0);
    }
    for g in &gates {
        g.release();
    }
    for &s in &streams {
        sync_within(&gpu, s, "stream op under the lock model");
    }
    for p in &ps {
        assert_eq!(p.bytes as usize, p.size, "{p:?}");
    }
    assert!(gpu.read_device(dev + 1, 9 * MIB) == tf.data[5..5 + 9 * MIB]);
    let mut back = vec![0u8; 8 * MIB];
    tf.file.read_exact_at(&mut back, 20 * MIB as u64).unwrap();
    assert!(back == src);
    assert_eq!(
        gpu.calls_ever_blocked_by_lock_model(),
        blocked_before,
        "a library thread called the GPU runtime while a stream was parked"
    );
    for s in streams {
        gpu.stream_destroy(s);
    }
    drop(tf);
    teardown();
}

#[test]
fn a_sync_read_held_by_the_driver_lock_does_not_hold_up_a_parked_stream() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("syncheld", 8 * MIB);
    let dev = gpu.device_alloc(0, 8 * MIB).unwrap();
    let s = gpu.stream_create(0).unwrap();
    let gate = Gate::holding(&gpu, s);
    let mut p = P::new(4 * MIB + 1, 3, 0);
    assert_eq!(read(&tf, dev, &mut p, s), 0);
    // The lock holds library calls only while a stream is parked: the
    // stream's thread must have reached the gate before the read starts.
    wait_until("the stream parked on the gate", || gpu.parked_streams() > 0);
    let _model = Model::on(&gpu);
    let blocked_before = gpu.calls_ever_blocked_by_lock_model();
    // A 1 MiB sync read goes through the engine's workers, whose GPU calls
    // the lock now holds: the stream is parked.
    let (fh, want) = (tf.fh as usize, tf.data[..MIB].to_vec());
    let target = dev + 6 * MIB as u64;
    let reader = std::thread::Builder::new()
        .name("app-reader".into())
        .spawn(move || hipFileRead(fh as *mut c_void, target as *mut c_void, MIB, 0, 0))
        .unwrap();
    wait_until("a worker blocked by the lock", || {
        gpu.calls_ever_blocked_by_lock_model() > blocked_before
    });
    // The stream op needs none of them.
    gate.release();
    sync_within(&gpu, s, "stream op while a worker is held");
    assert_eq!(p.bytes as usize, p.size);
    assert!(gpu.read_device(dev, p.size) == tf.data[3..3 + p.size]);
    // With the stream drained the lock lets the worker go.
    assert_eq!(reader.join().unwrap(), MIB as isize);
    assert!(gpu.read_device(target, MIB) == want);
    gpu.stream_destroy(s);
    drop(tf);
    teardown();
}

#[test]
fn the_model_blocks_the_worker_driven_stream_path() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("legacy", 8 * MIB);
    let dev = gpu.device_alloc(0, 8 * MIB).unwrap();
    let s = gpu.stream_create(0).unwrap();
    // The path HIP takes: the op's copies are the engine workers' calls.
    gpu.disable_described_copies(true);
    let model = Model::on(&gpu);
    let blocked_before = gpu.calls_ever_blocked_by_lock_model();
    let mut p = P::new(2 * MIB, 0, 0);
    assert_eq!(read(&tf, dev, &mut p, s), 0);
    // The stream waits for the workers; the workers wait for the lock, which
    // waits for the stream: held for good.
    wait_until("a worker blocked by the lock", || {
        gpu.calls_blocked_by_lock_model() > 0
    });
    assert!(gpu.calls_ever_blocked_by_lock_model() > blocked_before);
    assert_eq!(p.bytes, 0, "the op completed while its worker was held");
    assert!(gpu.parked_streams() > 0);
    // Lifting the lock lets it finish.
    drop(model);
    sync_within(&gpu, s, "worker-driven op after the lock is lifted");
    assert_eq!(p.bytes as usize, p.size);
    assert!(gpu.read_device(dev, p.size) == tf.data[..p.size]);
    gpu.disable_described_copies(false);
    gpu.stream_destroy(s);
    drop(tf);
    teardown();
}
