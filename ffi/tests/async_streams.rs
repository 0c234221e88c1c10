//! Stream-ordered I/O through the C ABI on the test GPU double: ops of
//! several stages, execution-time binding, EOF, I/O and GPU failures, many
//! streams, and the driver closing under parked streams. Every stream is
//! synchronised under a watchdog: a stream left parked fails the test.

#![allow(clippy::undocumented_unsafe_blocks)] // unsafe C entry points on test-owned locals

mod common;

use common::*;
use hipfile::*;
use hipfile_engine::gpu::testgpu::{TestGpu, FRESH_DEVICE_BYTE};
use hipfile_engine::gpu::{Gpu, Stream};
use hipfile_engine::registry::driver;
use hipfile_engine::ring::{Cqe, FaultPlan, Op};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};

const MIB: usize = 1 << 20;

fn no_faults(gpu: &TestGpu) {
    assert_eq!(
        gpu.described_copy_faults(),
        0,
        "a place kernel was given memory outside device allocations"
    );
}

/// The driver, a test file of `file_len` bytes, `dev_len` bytes of device
/// memory on device 0 and a stream there.
fn with_stream(
    name: &str,
    file_len: usize,
    dev_len: usize,
) -> (MutexGuard<'static, ()>, Arc<TestGpu>, TestFile, u64, Stream) {
    let (g, gpu) = setup();
    let (tf, dev, s) = stream_on(&gpu, name, file_len, dev_len);
    (g, gpu, tf, dev, s)
}

/// `with_stream` on a driver already set up.
fn stream_on(
    gpu: &TestGpu,
    name: &str,
    file_len: usize,
    dev_len: usize,
) -> (TestFile, u64, Stream) {
    let tf = TestFile::new(name, file_len);
    let dev = gpu.device_alloc(0, dev_len).unwrap();
    let s = gpu.stream_create(0).unwrap();
    (tf, dev, s)
}

/// Neither the first `len` bytes of device memory at `dev` nor the file's
/// first `len` bytes (all of it) were written.
fn assert_nothing_moved(gpu: &TestGpu, tf: &TestFile, dev: u64, len: usize) {
    assert!(gpu
        .read_device(dev, len)
        .iter()
        .all(|&x| x == FRESH_DEVICE_BYTE));
    assert!(file_bytes(tf, 0, len) == tf.data);
}

/// Destroy the test's stream, drop its file and close the driver.
fn close(gpu: &TestGpu, s: Stream, tf: TestFile) {
    gpu.stream_destroy(s);
    drop(tf);
    teardown();
}

/// `close`, after checking that no place kernel left device memory.
fn finish(gpu: &TestGpu, s: Stream, tf: TestFile) {
    no_faults(gpu);
    close(gpu, s, tf);
}

#[test]
fn execution_time_values_bind_a_multi_stage_read() {
    let (_g, gpu, tf, dev, s) = with_stream("bindread", 24 * MIB, 16 * MIB);
    let gate = Gate::holding(&gpu, s);
    let mut p = P::new(10 * MIB, 4096, 0);
    assert_eq!(read(&tf, dev, &mut p, s), 0);
    assert_eq!(p.bytes, 0, "bytes are pre-set to 0 at submit");
    // Smaller, at other (unaligned) offsets, before the stream gets there.
    p.size = 6 * MIB + 123;
    p.foff = 7 * 4096 + 5;
    p.boff = 3;
    gate.release();
    sync_within(&gpu, s, "bound read");
    assert_eq!(p.bytes as usize, p.size);
    let (f, b) = (p.foff as usize, p.boff as u64);
    assert!(gpu.read_device(dev + b, p.size) == tf.data[f..f + p.size]);
    assert_eq!(gpu.read_device(dev, 3), vec![FRESH_DEVICE_BYTE; 3]);
    let after = gpu.read_device(dev + b + p.size as u64, MIB);
    assert!(
        after.iter().all(|&x| x == FRESH_DEVICE_BYTE),
        "bytes past the execution-time size were written"
    );
    finish(&gpu, s, tf);
}

#[test]
fn stages_that_move_nothing_leave_earlier_destinations_alone() {
    // A read of 8 stages fills every stage slot and leaves each slot's
    // descriptor behind. The next op reuses slots 0..3 with its size
    // lowered to one stage before the stream gets there: the stages that
    // then move nothing must not repeat the old descriptors (which would
    // copy the staging over the first op's destination).
    let (_g, gpu, tf, dev, s) = with_stream("stale", 40 * MIB, 56 * MIB);
    let mut first = P::new(32 * MIB, 0, 0);
    assert_eq!(read(&tf, dev, &mut first, s), 0);
    sync_within(&gpu, s, "the first read");
    assert_eq!(first.bytes as usize, 32 * MIB);
    // The application reuses the first destination: a replayed copy would
    // put the file's bytes back over what it wrote.
    let mine = vec![0x5a_u8; 32 * MIB];
    gpu.write_device(dev, &mine);
    let gate = Gate::holding(&gpu, s);
    let mut second = P::new(12 * MIB, 32 * MIB as i64, 40 * MIB as i64);
    assert_eq!(read(&tf, dev, &mut second, s), 0);
    second.size = MIB;
    gate.release();
    sync_within(&gpu, s, "the lowered read");
    assert_eq!(second.bytes as usize, MIB);
    assert!(gpu.read_device(dev + 40 * MIB as u64, MIB) == tf.data[32 * MIB..33 * MIB]);
    assert!(
        gpu.read_device(dev, 32 * MIB) == mine,
        "the first read's destination was written again"
    );
    finish(&gpu, s, tf);
}

#[test]
fn flags_0xf_keep_the_submit_time_values_of_a_multi_stage_write() {
    let (_g, gpu, tf, dev, s) = with_stream("fixedwrite", 24 * MIB, 16 * MIB);
    let src = pattern(16 * MIB, 0x5a);
    gpu.write_device(dev, &src);
    assert_eq!(hipFileStreamRegister(sptr(s), 0xf).err, 0);
    let gate = Gate::holding(&gpu, s);
    let mut p = P::new(9 * MIB + 17, 2 * MIB as i64 + 1, 100);
    let (size0, foff0, boff0) = (p.size, p.foff as usize, p.boff as usize);
    assert_eq!(write(&tf, dev, &mut p, s), 0);
    p.size = 4096;
    p.foff = 0;
    p.boff = 0;
    gate.release();
    sync_within(&gpu, s, "fixed write");
    assert_eq!(p.bytes as usize, size0);
    assert!(file_bytes(&tf, foff0, size0) == src[boff0..boff0 + size0]);
    assert!(
        file_bytes(&tf, 0, 4096) == tf.data[..4096],
        "wrote at the changed offset"
    );
    assert_eq!(hipFileStreamDeregister(sptr(s)).err, 0);
    finish(&gpu, s, tf);
}

#[test]
fn flags_0_bind_a_multi_stage_write_at_execution_time() {
    let (_g, gpu, tf, dev, s) = with_stream("boundwrite", 24 * MIB, 16 * MIB);
    let src = pattern(16 * MIB, 0x33);
    gpu.write_device(dev, &src);
    let gate = Gate::holding(&gpu, s);
    let mut p = P::new(12 * MIB, 0, 0);
    assert_eq!(write(&tf, dev, &mut p, s), 0);
    p.size = 5 * MIB + 999;
    p.foff = 3 * MIB as i64 + 11;
    p.boff = 7;
    gate.release();
    sync_within(&gpu, s, "bound write");
    let (n, f, b) = (p.size, p.foff as usize, p.boff as usize);
    assert_eq!(p.bytes as usize, n);
    assert!(file_bytes(&tf, f, n) == src[b..b + n]);
    assert!(
        file_bytes(&tf, 0, f) == tf.data[..f],
        "bytes before the range changed"
    );
    assert!(
        file_bytes(&tf, f + n, 2 * MIB) == tf.data[f + n..f + n + 2 * MIB],
        "bytes past the execution-time size changed"
    );
    finish(&gpu, s, tf);
}

#[test]
fn a_size_raised_after_submit_fails_with_5022_and_moves_nothing() {
    let (_g, gpu, tf, dev, s) = with_stream("raised", 16 * MIB, 16 * MIB);
    let gate = Gate::holding(&gpu, s);
    let mut r = P::new(5 * MIB, 0, 0);
    let mut w = P::new(5 * MIB, 0, 8 * MIB as i64);
    assert_eq!(read(&tf, dev, &mut r, s), 0);
    assert_eq!(write(&tf, dev, &mut w, s), 0);
    r.size += 1;
    w.size += 4096;
    gate.release();
    sync_within(&gpu, s, "raised sizes");
    assert_eq!((r.bytes, w.bytes), (-5022, -5022));
    assert_nothing_moved(&gpu, &tf, dev, 16 * MIB);
    close(&gpu, s, tf);
}

#[test]
fn reads_across_eof_report_the_bytes_before_it() {
    let (_g, gpu) = setup();
    let len = 10 * MIB + 333;
    let (tf, dev, s) = stream_on(&gpu, "eof", len, 16 * MIB);
    // Three stages submitted; EOF in the second.
    let mut a = P::new(12 * MIB, 2 * MIB as i64 + 9, 5);
    // Entirely past EOF.
    let mut b = P::new(MIB, len as i64 + 4096, 0);
    assert_eq!(read(&tf, dev, &mut a, s), 0);
    assert_eq!(read(&tf, dev, &mut b, s), 0);
    sync_within(&gpu, s, "eof");
    let want = len - a.foff as usize;
    assert_eq!(a.bytes as usize, want);
    assert!(gpu.read_device(dev + 5, want) == tf.data[a.foff as usize..]);
    assert_eq!(b.bytes, 0);
    let st = driver().engine().unwrap().stats();
    assert_eq!(
        st.buffered_read_bytes + st.direct_read_bytes,
        want as u64,
        "the engine's path statistics"
    );
    finish(&gpu, s, tf);
}

/// A fault plan for the stream I/O threads: the read or write at one file
/// offset fails with EIO, every other call passes.
struct FailAt {
    offset: u64,
    write: bool,
    hits: Arc<AtomicU64>,
}

impl FaultPlan for FailAt {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>) {
        let hit = match *op {
            Op::Read { offset, .. } => !self.write && offset == self.offset,
            Op::Write { offset, .. } => self.write && offset == self.offset,
            Op::Fsync { .. } => false,
        };
        if hit {
            self.hits.fetch_add(1, Ordering::Relaxed);
            out.push(Cqe {
                user_data: cqe.user_data,
                result: -libc::EIO,
            });
        } else {
            out.push(cqe);
        }
    }
    fn flush(&mut self, _out: &mut Vec<Cqe>) {}
    fn holding(&self) -> usize {
        0
    }
}

/// Open the driver with every I/O thread failing at `offset` (reads or writes).
fn fail_at(offset: u64, write: bool) -> Arc<AtomicU64> {
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    driver().set_fault_factory(Some(Arc::new(move |_| {
        Some(Box::new(FailAt {
            offset,
            write,
            hits: h.clone(),
        }) as Box<dyn FaultPlan>)
    })));
    while hipFileUseCount() > 0 {
        hipFileDriverClose();
    }
    assert_eq!(hipFileDriverOpen().err, 0);
    hits
}

/// Reads `bad`, whose I/O fails at file offset `fail`, then `good` on one
/// stream: the first reports -1, the second its bytes.
fn a_failed_read_then_the_next_op(name: &str, fail: u64, mut bad: Box<P>, mut good: Box<P>) {
    let (_g, gpu) = setup();
    let hits = fail_at(fail, false);
    let (tf, dev, s) = stream_on(&gpu, name, 20 * MIB, 16 * MIB);
    assert_eq!(read(&tf, dev, &mut bad, s), 0);
    assert_eq!(read(&tf, dev, &mut good, s), 0);
    sync_within(&gpu, s, name);
    assert_eq!(bad.bytes, -1);
    assert_eq!(hits.load(Ordering::Relaxed), 1);
    let (n, f, b) = (good.size, good.foff as usize, good.boff as u64);
    assert_eq!(good.bytes as usize, n, "the next op on the stream");
    assert!(gpu.read_device(dev + b, n) == tf.data[f..f + n]);
    driver().set_fault_factory(None);
    finish(&gpu, s, tf);
}

#[test]
fn an_io_error_in_a_middle_stage_reports_minus_one_and_releases_the_stream() {
    // Stages at 4, 8, 12 MiB (+4 MiB each): the one at 12 MiB fails.
    let bad = P::new(16 * MIB, 4 * MIB as i64, 0);
    let good = P::new(3 * MIB, 0, 0);
    a_failed_read_then_the_next_op("ioerr", 4 * MIB as u64 + 8 * MIB as u64, bad, good);
}

#[test]
fn an_io_error_in_one_piece_of_a_stage_fails_the_op() {
    // A 4 MiB stage is read in 1 MiB pieces on several I/O threads: the
    // third piece of the second stage (file offset 4 + 4 + 2 MiB) fails,
    // the pieces around it succeed, and the op must still report -1.
    let bad = P::new(12 * MIB, 4 * MIB as i64, 0);
    let good = P::new(5 * MIB + 7, 3, 1);
    a_failed_read_then_the_next_op("ioerrpiece", 10 * MIB as u64, bad, good);
}

#[test]
fn an_io_error_in_a_write_stage_reports_minus_one_and_releases_the_stream() {
    let (_g, gpu) = setup();
    let hits = fail_at(4 * MIB as u64, true);
    let (tf, dev, s) = stream_on(&gpu, "ioerrw", 20 * MIB, 16 * MIB);
    let mut bad = P::new(9 * MIB, 0, 0);
    assert_eq!(write(&tf, dev, &mut bad, s), 0);
    sync_within(&gpu, s, "write with an I/O error");
    assert_eq!(bad.bytes, -1);
    assert_eq!(hits.load(Ordering::Relaxed), 1);
    driver().set_fault_factory(None);
    close(&gpu, s, tf);
}

#[test]
fn writes_then_reads_on_one_stream_run_in_stream_order() {
    let (_g, gpu, tf, dev, s) = with_stream("order", 32 * MIB, 34 * MIB);
    let src = pattern(8 * MIB, 0x77);
    gpu.write_device(dev, &src);
    let gate = Gate::holding(&gpu, s);
    // Write 8 MiB + 5 from device offset 0 to file offset 1 MiB + 1, read it
    // back to device offset 16 MiB + 3, write that copy to 20 MiB, read that
    // to device offset 24 MiB + 64.
    let n = 8 * MIB + 5;
    let mut ops = [
        P::new(n, MIB as i64 + 1, 0),
        P::new(n, MIB as i64 + 1, 16 * MIB as i64 + 3),
        P::new(n, 20 * MIB as i64, 16 * MIB as i64 + 3),
        P::new(n, 20 * MIB as i64, 24 * MIB as i64 + 64),
    ];
    for (i, p) in ops.iter_mut().enumerate() {
        let e = if i % 2 == 0 {
            write(&tf, dev, p, s)
        } else {
            read(&tf, dev, p, s)
        };
        assert_eq!(e, 0, "op {i}");
    }
    gate.release();
    sync_within(&gpu, s, "write/read chain");
    for (i, p) in ops.iter().enumerate() {
        assert_eq!(p.bytes as usize, n, "op {i}");
    }
    let mut want = src[..n.min(src.len())].to_vec();
    want.extend(std::iter::repeat_n(FRESH_DEVICE_BYTE, n - want.len()));
    assert!(gpu.read_device(dev + 16 * MIB as u64 + 3, n) == want);
    assert!(gpu.read_device(dev + 24 * MIB as u64 + 64, n) == want);
    assert!(file_bytes(&tf, 20 * MIB, n) == want);
    finish(&gpu, s, tf);
}

#[test]
fn many_streams_from_many_threads_complete_with_the_right_bytes() {
    let (_g, gpu) = setup();
    let tf = Arc::new(TestFile::new("many", 32 * MIB));
    let threads: Vec<_> = (0..4usize)
        .map(|t| {
            let (gpu, tf) = (gpu.clone(), tf.clone());
            std::thread::spawn(move || {
                let device = (t % 2) as i32;
                let dev = gpu.device_alloc(device, 16 * MIB).unwrap();
                let streams = [
                    gpu.stream_create(device).unwrap(),
                    gpu.stream_create(device).unwrap(),
                ];
                // Per stream, in its own 8 MiB of the buffer: reads of one or
                // two stages at varied offsets, then a write of the last read's
                // bytes to a file region of its own (half a MiB at 12..16 MiB).
                let mut ops: Vec<(Box<P>, Stream, bool)> = Vec::new();
                for (j, &s) in streams.iter().enumerate() {
                    let boff = (j * 8 * MIB) as i64;
                    for i in 0..4usize {
                        let size = (i + 1) * 1_900_000 + t * 7;
                        let foff = ((t * 5 + j * 3 + i) * 997_331) % (20 * MIB);
                        ops.push((P::new(size, foff as i64, boff), s, false));
                    }
                    let region = (24 + t * 2 + j) * MIB / 2;
                    ops.push((P::new(MIB / 2, region as i64, boff), s, true));
                }
                for (p, s, w) in ops.iter_mut() {
                    let buf = dev;
                    let e = if *w {
                        write(&tf, buf, p, *s)
                    } else {
                        read(&tf, buf, p, *s)
                    };
                    assert_eq!(e, 0);
                }
                for &s in &streams {
                    sync_within(&gpu, s, "many streams");
                }
                for (p, _, w) in &ops {
                    assert_eq!(p.bytes as usize, p.size, "{p:?}");
                    if !*w {
                        continue;
                    }
                    // The last read before the write left its bytes there.
                    let got = file_bytes(&tf, p.foff as usize, p.size);
                    let dev_now = gpu.read_device(dev + p.boff as u64, p.size);
                    assert!(got == dev_now, "thread {t}: write {p:?}");
                }
                for s in streams {
                    gpu.stream_destroy(s);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    no_faults(&gpu);
    drop(tf);
    teardown();
}

#[test]
fn ops_of_size_zero_enqueue_nothing_and_a_size_bound_to_zero_moves_nothing() {
    let (_g, gpu, tf, dev, s) = with_stream("zero", 8 * MIB, 8 * MIB);
    let before = gpu.copies_issued();
    let mut z = P::new(0, 0, 0);
    assert_eq!(read(&tf, dev, &mut z, s), 0);
    assert_eq!(write(&tf, dev, &mut z, s), 0);
    assert_eq!(z.bytes, 0);
    assert_eq!(gpu.copies_issued(), before, "a size-0 op enqueued work");
    let gate = Gate::holding(&gpu, s);
    let mut r = P::new(6 * MIB, 0, 0);
    let mut w = P::new(6 * MIB, 0, 0);
    assert_eq!(read(&tf, dev, &mut r, s), 0);
    assert_eq!(write(&tf, dev, &mut w, s), 0);
    r.size = 0;
    w.size = 0;
    gate.release();
    sync_within(&gpu, s, "size bound to zero");
    assert_eq!((r.bytes, w.bytes), (0, 0));
    assert_nothing_moved(&gpu, &tf, dev, 8 * MIB);
    close(&gpu, s, tf);
}

#[test]
fn driver_close_with_ops_parked_still_completes_every_stream() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("closeparked", 16 * MIB);
    let dev = gpu.device_alloc(0, 16 * MIB).unwrap();
    let src = pattern(4 * MIB, 0x11);
    gpu.write_device(dev + 12 * MIB as u64, &src);
    let streams: Vec<Stream> = (0..3).map(|_| gpu.stream_create(0).unwrap()).collect();
    let gates: Vec<Gate> = streams.iter().map(|&s| Gate::holding(&gpu, s)).collect();
    let mut r0 = P::new(5 * MIB, 0, 0);
    let mut r1 = P::new(3 * MIB, 6 * MIB as i64, 6 * MIB as i64);
    let mut w2 = P::new(4 * MIB, 12 * MIB as i64, 12 * MIB as i64);
    assert_eq!(read(&tf, dev, &mut r0, streams[0]), 0);
    assert_eq!(read(&tf, dev, &mut r1, streams[1]), 0);
    assert_eq!(write(&tf, dev, &mut w2, streams[2]), 0);
    while hipFileUseCount() > 0 {
        assert_eq!(hipFileDriverClose().err, 0);
    }
    for g in &gates {
        g.release();
    }
    for &s in &streams {
        sync_within(&gpu, s, "after close");
    }
    assert_eq!(r0.bytes as usize, 5 * MIB);
    assert_eq!(r1.bytes as usize, 3 * MIB);
    assert_eq!(w2.bytes as usize, 4 * MIB);
    assert!(gpu.read_device(dev, 5 * MIB) == tf.data[..5 * MIB]);
    assert!(gpu.read_device(dev + 6 * MIB as u64, 3 * MIB) == tf.data[6 * MIB..9 * MIB]);
    assert!(file_bytes(&tf, 12 * MIB, 4 * MIB) == src);
    // The library works again after a new open.
    assert_eq!(hipFileDriverOpen().err, 0);
    let tf2 = TestFile::new("closeparked2", 2 * MIB);
    let mut again = P::new(2 * MIB, 0, 0);
    assert_eq!(read(&tf2, dev, &mut again, streams[0]), 0);
    sync_within(&gpu, streams[0], "after reopening");
    assert_eq!(again.bytes as usize, 2 * MIB);
    no_faults(&gpu);
    for s in streams {
        gpu.stream_destroy(s);
    }
    drop(tf2);
    drop(tf);
    teardown();
}

#[test]
fn a_gpu_call_failing_midway_through_submit_still_releases_the_stream() {
    let (_g, gpu, tf, dev, s) = with_stream("gpufail", 16 * MIB, 16 * MIB);
    let gate = Gate::holding(&gpu, s);
    // A read stage makes two copy calls (staging, then the place kernel):
    // the fourth call, stage 1's place kernel, fails.
    gpu.fail_copies_after(3, 1);
    let mut p = P::new(12 * MIB, 0, 0);
    assert_eq!(read(&tf, dev, &mut p, s), 0, "the op was committed");
    gpu.fail_next_copies(0);
    gate.release();
    sync_within(&gpu, s, "after a failed enqueue");
    assert_eq!(p.bytes, -999, "the injected driver error");
    // The stream takes new ops (on a fresh lane).
    let mut q = P::new(6 * MIB, MIB as i64, 0);
    assert_eq!(read(&tf, dev, &mut q, s), 0);
    sync_within(&gpu, s, "the next op");
    assert_eq!(q.bytes as usize, 6 * MIB);
    assert!(gpu.read_device(dev, 6 * MIB) == tf.data[MIB..7 * MIB]);
    finish(&gpu, s, tf);
}

#[test]
fn a_stream_the_runtime_does_not_know_fails_the_call() {
    let (_g, gpu, tf, dev, s) = with_stream("unknownstream", 4 * MIB, 4 * MIB);
    gpu.stream_destroy(s);
    let mut p = P::new(MIB, 0, 0);
    assert_eq!(read(&tf, dev, &mut p, s), 5022);
    assert_eq!(p.bytes, 0);
    drop(tf);
    teardown();
}

#[test]
fn host_memory_ops_bind_at_execution_time() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("hostmem", 16 * MIB);
    let mut host = vec![0u8; 12 * MIB];
    let base = host.as_mut_ptr() as u64;
    let s = gpu.stream_create(0).unwrap();
    let gate = Gate::holding(&gpu, s);
    let mut p = P::new(10 * MIB, 0, 0);
    assert_eq!(read(&tf, base, &mut p, s), 0);
    p.size = 9 * MIB + 1;
    p.foff = 12345;
    p.boff = 77;
    gate.release();
    sync_within(&gpu, s, "host read");
    assert_eq!(p.bytes as usize, p.size);
    assert!(host[77..77 + p.size] == tf.data[12345..12345 + p.size]);
    assert!(host[..77].iter().all(|&x| x == 0));
    close(&gpu, s, tf);
}

#[test]
fn a_deregistered_streams_lane_is_let_go() {
    let (_g, gpu, tf, dev, s) = with_stream("dereg", 4 * MIB, 4 * MIB);
    assert_eq!(hipFileStreamRegister(sptr(s), 0).err, 0);
    let mut p = P::new(4 * MIB, 0, 0);
    assert_eq!(read(&tf, dev, &mut p, s), 0);
    sync_within(&gpu, s, "before deregistering");
    let engine = driver().engine().unwrap();
    assert_eq!(engine.stream_ops().lanes(), 1);
    assert_eq!(hipFileStreamDeregister(sptr(s)).err, 0);
    assert_eq!(engine.stream_ops().lanes(), 0);
    gpu.stream_destroy(s);
    // Deregistered after the application destroyed it: found by its handle.
    let t = gpu.stream_create(0).unwrap();
    assert_eq!(hipFileStreamRegister(sptr(t), 0).err, 0);
    assert_eq!(read(&tf, dev, &mut p, t), 0);
    sync_within(&gpu, t, "before destroying");
    gpu.stream_destroy(t);
    assert_eq!(engine.stream_ops().lanes(), 1);
    assert_eq!(hipFileStreamDeregister(sptr(t)).err, 0);
    assert_eq!(engine.stream_ops().lanes(), 0);
    drop(tf);
    teardown();
}

#[test]
fn many_small_ops_cycle_every_stage_slot() {
    let (_g, gpu, tf, dev, s) = with_stream("cycle", 8 * MIB, 8 * MIB);
    let mut ps: Vec<Box<P>> = (0..200)
        .map(|i| P::new(4096 + i * 13, (i * 4099) as i64, (i * 16384) as i64))
        .collect();
    for p in ps.iter_mut() {
        assert_eq!(read(&tf, dev, p, s), 0);
    }
    sync_within(&gpu, s, "200 ops");
    for p in &ps {
        assert_eq!(p.bytes as usize, p.size);
        let (f, b) = (p.foff as usize, p.boff as u64);
        assert!(gpu.read_device(dev + b, p.size) == tf.data[f..f + p.size]);
    }
    finish(&gpu, s, tf);
}

#[test]
fn stage_sequences_and_generations_that_wrap_u32_keep_streams_moving() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("wrap", 16 * MIB);
    let dev = gpu.device_alloc(0, 16 * MIB).unwrap();
    let engine = driver().engine().unwrap();
    // Every slot is used a few times before the stage values wrap to 0; the
    // generations wrap past 0 too.
    engine
        .stream_ops()
        .start_sequences_at((1u64 << 32) - 70, u32::MAX - 20);
    let s = gpu.stream_create(0).unwrap();
    let stage = engine.stream_ops().stage_bytes();
    let mut ps: Vec<Box<P>> = (0..60)
        .map(|i| {
            P::new(
                stage + 4096 * (i % 3),
                (i * 65536) as i64,
                8192 * (i as i64 % 5),
            )
        })
        .collect();
    for p in ps.iter_mut() {
        assert_eq!(read(&tf, dev, p, s), 0);
    }
    sync_within(&gpu, s, "ops across the wrap");
    for p in &ps {
        assert_eq!(p.bytes as usize, p.size, "{p:?}");
    }
    let last = ps.last().unwrap();
    let (f, b) = (last.foff as usize, last.boff as u64);
    assert!(gpu.read_device(dev + b, last.size) == tf.data[f..f + last.size]);
    engine.stream_ops().start_sequences_at(0, 0);
    finish(&gpu, s, tf);
}

#[test]
fn pinning_refused_for_every_stage_falls_back_to_fewer_stages() {
    let (_g, gpu, tf, dev, s) = with_stream("pinlimit", 20 * MIB, 17 * MIB);
    // Two 4 MiB stages fit, four do not.
    gpu.set_pin_limit(10 * MIB);
    let mut p = P::new(16 * MIB, 4096 + 3, 1);
    let e = read(&tf, dev, &mut p, s);
    gpu.set_pin_limit(usize::MAX);
    assert_eq!(e, 0);
    sync_within(&gpu, s, "read through two stages");
    assert_eq!(p.bytes as usize, 16 * MIB);
    assert!(gpu.read_device(dev + 1, 16 * MIB) == tf.data[4099..4099 + 16 * MIB]);
    finish(&gpu, s, tf);
}

#[test]
fn pinning_refused_entirely_fails_the_call_and_parks_nothing() {
    let (_g, gpu, tf, dev, s) = with_stream("pinnone", 8 * MIB, 8 * MIB);
    gpu.set_pin_limit(MIB);
    let mut p = P::new(4 * MIB, 0, 0);
    let e = read_full(&tf, dev, &mut p, s);
    gpu.set_pin_limit(usize::MAX);
    assert_eq!((e.err, e.hip_drv_err), (5011, 2), "hipErrorOutOfMemory");
    sync_within(&gpu, s, "nothing was enqueued");
    assert_eq!(p.bytes, 0);
    // Once pinning works again the stream takes ops.
    assert_eq!(read(&tf, dev, &mut p, s), 0);
    sync_within(&gpu, s, "after pinning works again");
    assert_eq!(p.bytes as usize, 4 * MIB);
    close(&gpu, s, tf);
}

#[test]
fn a_failing_first_stream_call_returns_the_error_and_parks_nothing() {
    let (_g, gpu, tf, dev, s) = with_stream("firstfail", 8 * MIB, 8 * MIB);
    let mut p = P::new(6 * MIB, 0, 0);
    gpu.fail_value_ops_after(0, 1);
    let e = read_full(&tf, dev, &mut p, s);
    assert_eq!((e.err, e.hip_drv_err), (5011, 999));
    sync_within(&gpu, s, "nothing was enqueued");
    assert_eq!(p.bytes, 0);
    assert_eq!(read(&tf, dev, &mut p, s), 0);
    sync_within(&gpu, s, "the next op");
    assert_eq!(p.bytes as usize, 6 * MIB);
    assert!(gpu.read_device(dev, 6 * MIB) == tf.data[..6 * MIB]);
    close(&gpu, s, tf);
}

#[test]
fn a_done_wait_that_cannot_be_enqueued_still_reports_through_bytes() {
    let (_g, gpu, tf, dev, s) = with_stream("donefail", 8 * MIB, 8 * MIB);
    // One stage: started, ready wait and back write pass; the done wait fails.
    gpu.fail_value_ops_after(3, 1);
    let mut p = P::new(MIB, 0, 0);
    assert_eq!(read(&tf, dev, &mut p, s), 0, "the op was committed");
    sync_within(&gpu, s, "an op without its done wait");
    // The stream does not wait for the result; the service stores it anyway.
    let bytes = std::ptr::addr_of!(p.bytes);
    // SAFETY: `p` is live; the service writes it with a volatile store.
    wait_until("the result", || unsafe { bytes.read_volatile() } != 0);
    assert_eq!(p.bytes, -999);
    let mut q = P::new(2 * MIB, 0, 0);
    assert_eq!(read(&tf, dev, &mut q, s), 0);
    sync_within(&gpu, s, "the next op");
    assert_eq!(q.bytes as usize, 2 * MIB);
    finish(&gpu, s, tf);
}
