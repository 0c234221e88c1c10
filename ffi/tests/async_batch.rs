//! Stream and batch I/O through the C ABI, with the test GPU double (device
//! memory that only copies reach, streams on their own threads, real
//! wait/write-value) and with host memory. The driver is process-wide, so the
//! tests take one lock and each starts and ends with the driver closed.

#![allow(clippy::undocumented_unsafe_blocks)] // every call here is an unsafe C entry point on test-owned locals

mod common;

use common::*;
use hipfile::types::{HipFileIoEvents, HipFileIoParams};
use hipfile::*;
use hipfile_engine::gpu::{Gpu, Stream};
use std::ffi::c_void;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

#[test]
fn all_16_flag_combinations_bind_at_the_right_time() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("flags", 4 << 20);
    let dev = gpu.device_alloc(0, 4 << 20).unwrap();
    for flags in 0u32..16 {
        let s = gpu.stream_create(0).unwrap();
        assert_eq!(hipFileStreamRegister(sptr(s), flags).err, 0);
        let gate = Gate::holding(&gpu, s);
        let (mut size, mut foff, mut boff, mut bytes) = (256usize << 10, 8192i64, 4096i64, 7isize);
        let (size0, foff0, boff0) = (size, foff, boff);
        assert_eq!(
            read_async(
                tf.fh,
                dev,
                &mut size,
                &mut foff,
                &mut boff,
                &mut bytes,
                sptr(s)
            ),
            0
        );
        assert_eq!(bytes, 0, "bytes are pre-set to 0 at submit");
        // Change everything before the stream reaches the op.
        size = 100 << 10;
        foff = 3 * 4096 + 17;
        boff = 1 << 20;
        gate.release();
        gpu.stream_synchronize(s).unwrap();
        let want_size = if flags & 4 != 0 { size0 } else { size };
        let want_foff = if flags & 2 != 0 { foff0 } else { foff } as usize;
        let want_boff = if flags & 1 != 0 { boff0 } else { boff } as u64;
        assert_eq!(bytes as usize, want_size, "flags {flags:#x}");
        let got = gpu.read_device(dev + want_boff, want_size);
        assert!(
            got == tf.data[want_foff..want_foff + want_size],
            "flags {flags:#x}: wrong data"
        );
        assert_eq!(hipFileStreamDeregister(sptr(s)).err, 0);
        gpu.stream_destroy(s);
    }
    drop(tf);
    teardown();
}

#[test]
fn streams_proceed_independently_and_in_order() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("streams", 8 << 20);
    let dev = gpu.device_alloc(0, 8 << 20).unwrap();
    let streams: Vec<Stream> = (0..4).map(|_| gpu.stream_create(0).unwrap()).collect();
    let gates: Vec<Gate> = (0..4).map(|_| Gate::new(&gpu)).collect();
    let mut p: Vec<(usize, i64, i64, isize)> = (0..4)
        .map(|i| {
            (
                1usize << 20,
                (i as i64) * (2 << 20) + 5,
                (i as i64) * (2 << 20),
                -7isize,
            )
        })
        .collect();
    for i in 0..4 {
        gates[i].hold(&gpu, streams[i]);
        let (size, foff, boff, bytes) = &mut p[i];
        assert_eq!(
            read_async(tf.fh, dev, size, foff, boff, bytes, sptr(streams[i])),
            0
        );
    }
    // Release the last stream only: it completes while the others stay parked.
    gates[3].release();
    gpu.stream_synchronize(streams[3]).unwrap();
    assert_eq!(p[3].3, 1 << 20);
    for q in &p[..3] {
        assert_eq!(q.3, 0, "a held stream's op ran early");
    }
    for i in (0..3).rev() {
        gates[i].release();
    }
    for (i, s) in streams.iter().enumerate() {
        gpu.stream_synchronize(*s).unwrap();
        let (size, foff, boff, bytes) = p[i];
        assert_eq!(bytes as usize, size);
        assert!(
            gpu.read_device(dev + boff as u64, size)
                == tf.data[foff as usize..foff as usize + size]
        );
    }
    // Stream order: a write, then a read of the same range, on one stream.
    let s = streams[0];
    let src = pattern(300_000, 0x99);
    gpu.write_device(dev, &src);
    let (mut ws, mut wf, mut wb, mut wbytes) = (src.len(), 1_000_000i64, 0i64, 0isize);
    let (mut rs, mut rf, mut rb, mut rbytes) = (src.len(), 1_000_000i64, 4 << 20, 0isize);
    // SAFETY: locals outlive the synchronised stream.
    let e = unsafe {
        hipFileWriteAsync(
            tf.fh,
            dev as *mut c_void,
            &mut ws,
            &mut wf,
            &mut wb,
            &mut wbytes,
            sptr(s),
        )
    };
    assert_eq!(e.err, 0);
    assert_eq!(
        read_async(tf.fh, dev, &mut rs, &mut rf, &mut rb, &mut rbytes, sptr(s)),
        0
    );
    gpu.stream_synchronize(s).unwrap();
    assert_eq!((wbytes as usize, rbytes as usize), (src.len(), src.len()));
    assert!(
        gpu.read_device(dev + (4 << 20), src.len()) == src,
        "read did not see the earlier write"
    );
    let mut back = vec![0u8; src.len()];
    tf.file.read_exact_at(&mut back, 1_000_000).unwrap();
    assert!(back == src);
    drop(tf);
    teardown();
}

#[test]
fn async_invalid_inputs_get_the_spec_codes() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("asyncbad", 1 << 20);
    let dev = gpu.device_alloc(0, 1 << 20).unwrap();
    let dev1 = gpu.device_alloc(1, 1 << 20).unwrap();
    let s = gpu.stream_create(0).unwrap();
    let (mut size, mut foff, mut boff, mut bytes) = (4096usize, 0i64, 0i64, 0isize);
    let null = std::ptr::null_mut();
    // SAFETY: NULL arguments are what is being tested; valid ones are locals.
    unsafe {
        assert_eq!(
            hipFileReadAsync(
                tf.fh,
                null,
                &mut size,
                &mut foff,
                &mut boff,
                &mut bytes,
                sptr(s)
            )
            .err,
            5022
        );
        assert_eq!(
            hipFileReadAsync(
                tf.fh,
                dev as _,
                null.cast(),
                &mut foff,
                &mut boff,
                &mut bytes,
                sptr(s)
            )
            .err,
            5022
        );
        assert_eq!(
            hipFileReadAsync(
                tf.fh,
                dev as _,
                &mut size,
                null.cast(),
                &mut boff,
                &mut bytes,
                sptr(s)
            )
            .err,
            5022
        );
        assert_eq!(
            hipFileReadAsync(
                tf.fh,
                dev as _,
                &mut size,
                &mut foff,
                null.cast(),
                &mut bytes,
                sptr(s)
            )
            .err,
            5022
        );
        assert_eq!(
            hipFileReadAsync(
                tf.fh,
                dev as _,
                &mut size,
                &mut foff,
                &mut boff,
                null.cast(),
                sptr(s)
            )
            .err,
            5022
        );
    }
    let mut other = 0u8;
    let bogus = &mut other as *mut u8 as *mut c_void;
    assert_eq!(
        read_async(
            bogus,
            dev,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        5027
    );
    foff = -1;
    assert_eq!(
        read_async(
            tf.fh,
            dev,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        5022
    );
    foff = 0;
    boff = (1 << 20) - 100;
    assert_eq!(
        read_async(
            tf.fh,
            dev,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        5022,
        "size past the buffer end"
    );
    boff = 0;
    // A buffer on device 1 with a stream of device 0.
    assert_eq!(
        read_async(
            tf.fh,
            dev1,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        5022
    );
    // Size 0: success, *bytes = 0, nothing enqueued.
    size = 0;
    bytes = 9;
    assert_eq!(
        read_async(
            tf.fh,
            dev,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        0
    );
    assert_eq!(bytes, 0);
    // Past EOF: a short count through *bytes.
    size = 8192;
    foff = (1 << 20) - 100;
    assert_eq!(
        read_async(
            tf.fh,
            dev,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        0
    );
    gpu.stream_synchronize(s).unwrap();
    assert_eq!(bytes, 100);
    // Size raised above the submitted size while held: −5022 through *bytes.
    let gate = Gate::holding(&gpu, s);
    size = 4096;
    foff = 0;
    assert_eq!(
        read_async(
            tf.fh,
            dev,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        0
    );
    size = 8192;
    std::hint::black_box(&mut size);
    gate.release();
    gpu.stream_synchronize(s).unwrap();
    assert_eq!(bytes, -5022);
    // Stream registration rules.
    assert_eq!(hipFileStreamRegister(sptr(s), 0x10).err, 5022);
    assert_eq!(hipFileStreamRegister(sptr(s), 0xf).err, 0);
    assert_eq!(hipFileStreamRegister(sptr(s), 0).err, 5022, "twice");
    assert_eq!(hipFileStreamDeregister(sptr(s)).err, 0);
    assert_eq!(hipFileStreamDeregister(sptr(s)).err, 5022, "twice");
    drop(tf);
    // Driver closed: implicit init, then 5022 and no I/O.
    teardown();
    let tf2 = {
        // Registering a file re-opens the driver (count 1); close it again.
        let t = TestFile::new("asyncbad2", 4096);
        hipFileDriverClose();
        t
    };
    assert_eq!(hipFileUseCount(), 0);
    size = 4096;
    assert_eq!(
        read_async(
            tf2.fh,
            dev,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        5022
    );
    assert_eq!(hipFileUseCount(), 1);
    drop(tf2);
    teardown();
}

fn params(
    fh: *mut c_void,
    base: u64,
    foff: i64,
    boff: i64,
    size: usize,
    write: bool,
    cookie: usize,
) -> HipFileIoParams {
    HipFileIoParams {
        mode: 1,
        dev_ptr_base: base as *mut c_void,
        file_offset: foff,
        dev_ptr_offset: boff,
        size,
        fh,
        opcode: write as i32,
        cookie: cookie as *mut c_void,
    }
}

fn get_status(
    b: *mut c_void,
    min_nr: u32,
    max: u32,
    timeout: Option<Duration>,
) -> Vec<HipFileIoEvents> {
    let mut ev = vec![
        HipFileIoEvents {
            cookie: std::ptr::null_mut(),
            status: 0,
            ret: 0
        };
        max as usize
    ];
    let mut nr = max;
    let mut ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as i64,
        tv_nsec: t.subsec_nanos() as i64,
    });
    let tp = ts.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut _);
    // SAFETY: ev has `max` entries; nr and ts are locals.
    let e = unsafe { hipFileBatchIOGetStatus(b, min_nr, &mut nr, ev.as_mut_ptr(), tp) };
    assert_eq!(e.err, 0);
    ev.truncate(nr as usize);
    ev
}

#[test]
fn batches_run_concurrently_and_report_each_entry_once() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("batch", 8 << 20);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let fh = tf.fh as usize;
            let gpu = gpu.clone();
            let data = tf.data.clone();
            std::thread::spawn(move || {
                let dev = gpu.device_alloc((t % 2) as i32, 128 * 8192).unwrap();
                let mut b = std::ptr::null_mut();
                // SAFETY: b is a local.
                assert_eq!(unsafe { hipFileBatchIOSetUp(&mut b, 128) }.err, 0);
                let mut ps: Vec<HipFileIoParams> = (0..100)
                    .map(|i| {
                        params(
                            fh as _,
                            dev,
                            ((i * 7919 + t * 13) % 1000) as i64 * 8192,
                            i as i64 * 8192,
                            8192,
                            false,
                            i + 1,
                        )
                    })
                    .collect();
                // SAFETY: ps has 100 entries.
                assert_eq!(
                    unsafe { hipFileBatchIOSubmit(b, 100, ps.as_mut_ptr(), 0) }.err,
                    0
                );
                // 29 more do not fit (128 − 100 outstanding): BatchFull, nothing queued.
                // SAFETY: ps has at least 29 entries.
                assert_eq!(
                    unsafe { hipFileBatchIOSubmit(b, 29, ps.as_mut_ptr(), 0) }.err,
                    5037
                );
                let mut seen = [false; 101];
                let mut got = 0;
                while got < 100 {
                    let ev = get_status(b, 1, 128, None);
                    assert!(
                        !ev.is_empty(),
                        "NULL timeout with min_nr 1 returned nothing"
                    );
                    for e in ev {
                        let c = e.cookie as usize;
                        assert!(!seen[c], "entry {c} reported twice");
                        seen[c] = true;
                        assert_eq!(
                            e.status, 0x10,
                            "entry {c}: status {:#x} ret {}",
                            e.status, e.ret as isize
                        );
                        assert_eq!(e.ret, 8192);
                        got += 1;
                    }
                }
                for (i, p) in ps.iter().enumerate() {
                    let off = p.file_offset as usize;
                    assert!(
                        gpu.read_device(dev + (i as u64) * 8192, 8192) == data[off..off + 8192],
                        "entry {i} data"
                    );
                }
                // Nothing outstanding: a poll returns at once with no events.
                assert!(get_status(b, 0, 16, Some(Duration::ZERO)).is_empty());
                hipFileBatchIODestroy(b);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(tf);
    teardown();
}

#[test]
fn batch_timeouts_cancel_and_invalid_entries() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("batch2", 4 << 20);
    let dev = gpu.device_alloc(0, 4 << 20).unwrap();
    let mut host = vec![0u8; 1 << 20];
    let hptr = host.as_mut_ptr() as u64;
    let mut b = std::ptr::null_mut();
    // SAFETY: b is a local.
    unsafe {
        assert_eq!(hipFileBatchIOSetUp(std::ptr::null_mut(), 8).err, 5022);
        assert_eq!(hipFileBatchIOSetUp(&mut b, 0).err, 5022);
        assert_eq!(hipFileBatchIOSetUp(&mut b, 129).err, 5022);
        assert_eq!(hipFileBatchIOSetUp(&mut b, 128).err, 0);
    }
    // Every invalid field rejects the whole submission; nothing runs.
    let good = params(tf.fh, dev, 0, 0, 4096, false, 1);
    let mut other = 0u8;
    let cases: Vec<(HipFileIoParams, i32)> = vec![
        (HipFileIoParams { mode: 2, ..good }, 5022),
        (HipFileIoParams { opcode: 2, ..good }, 5022),
        (
            HipFileIoParams {
                fh: &mut other as *mut u8 as _,
                ..good
            },
            5027,
        ),
        (
            HipFileIoParams {
                file_offset: -1,
                ..good
            },
            5022,
        ),
        (
            HipFileIoParams {
                dev_ptr_offset: -1,
                ..good
            },
            5022,
        ),
        (
            HipFileIoParams {
                dev_ptr_offset: 4 << 20,
                ..good
            },
            5022,
        ),
        (
            HipFileIoParams {
                size: (4 << 20) + 1,
                ..good
            },
            5022,
        ),
        (
            HipFileIoParams {
                dev_ptr_base: std::ptr::null_mut(),
                ..good
            },
            5022,
        ),
    ];
    for (bad, code) in cases {
        let mut two = [good, bad];
        // SAFETY: two entries.
        assert_eq!(
            unsafe { hipFileBatchIOSubmit(b, 2, two.as_mut_ptr(), 0) }.err,
            code,
            "{bad:?}"
        );
    }
    assert!(
        get_status(b, 0, 8, Some(Duration::ZERO)).is_empty(),
        "a rejected submission ran"
    );
    // SAFETY: NULL iocbp with nr > 0.
    assert_eq!(
        unsafe { hipFileBatchIOSubmit(b, 1, std::ptr::null_mut(), 0) }.err,
        5022
    );
    assert_eq!(
        unsafe { hipFileBatchIOSubmit(std::ptr::null_mut(), 1, &mut [good][0], 0) }.err,
        5022
    );
    // GetStatus argument checks.
    let mut nr = 4u32;
    let mut ev = [HipFileIoEvents {
        cookie: std::ptr::null_mut(),
        status: 0,
        ret: 0,
    }; 4];
    let mut bad_ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000_000,
    };
    // SAFETY: pointers to locals; NULLs and bad values are what is tested.
    unsafe {
        assert_eq!(
            hipFileBatchIOGetStatus(
                b,
                0,
                std::ptr::null_mut(),
                ev.as_mut_ptr(),
                std::ptr::null_mut()
            )
            .err,
            5022
        );
        assert_eq!(
            hipFileBatchIOGetStatus(b, 0, &mut nr, std::ptr::null_mut(), std::ptr::null_mut()).err,
            5022
        );
        assert_eq!(
            hipFileBatchIOGetStatus(b, 5, &mut nr, ev.as_mut_ptr(), std::ptr::null_mut()).err,
            5022
        );
        assert_eq!(
            hipFileBatchIOGetStatus(b, 1, &mut nr, ev.as_mut_ptr(), &mut bad_ts).err,
            5022
        );
    }
    // A deadline: slow copies make entries take a while; min_nr larger than what
    // finishes by the deadline returns what has finished when it passes.
    gpu.set_copy_delay(Duration::from_millis(30));
    let mut ps: Vec<HipFileIoParams> = (0..8)
        .map(|i| {
            params(
                tf.fh,
                dev,
                i * 65536,
                i * 65536,
                65536,
                false,
                i as usize + 1,
            )
        })
        .collect();
    // SAFETY: 8 entries.
    assert_eq!(
        unsafe { hipFileBatchIOSubmit(b, 8, ps.as_mut_ptr(), 0) }.err,
        0
    );
    let t0 = Instant::now();
    let first = get_status(b, 8, 8, Some(Duration::from_millis(5)));
    assert!(
        t0.elapsed() >= Duration::from_millis(5),
        "returned before the deadline without min_nr events"
    );
    assert!(first.len() < 8);
    let rest = get_status(b, (8 - first.len()) as u32, 8, None);
    assert_eq!(first.len() + rest.len(), 8);
    // Cancel while in flight: returns only when nothing runs any more; every
    // entry is then reported, Complete or Canceled, and the host buffer can go.
    let mut ps: Vec<HipFileIoParams> = (0..64)
        .map(|i| {
            if i % 2 == 0 {
                params(tf.fh, dev, i * 4096, i * 4096, 4096, false, i as usize + 1)
            } else {
                params(tf.fh, hptr, i * 4096, i * 4096, 4096, false, i as usize + 1)
            }
        })
        .collect();
    // SAFETY: 64 entries.
    assert_eq!(
        unsafe { hipFileBatchIOSubmit(b, 64, ps.as_mut_ptr(), 0) }.err,
        0
    );
    assert_eq!(hipFileBatchIOCancel(b).err, 0);
    let ev = get_status(b, 0, 128, Some(Duration::ZERO));
    assert_eq!(ev.len(), 64, "cancel returned with entries still running");
    for e in &ev {
        assert!(
            e.status == 0x10 || e.status == 0x08,
            "status {:#x}",
            e.status
        );
    }
    drop(host);
    gpu.set_copy_delay(Duration::ZERO);
    assert_eq!(hipFileBatchIOCancel(std::ptr::null_mut()).err, 5022);
    hipFileBatchIODestroy(b);
    hipFileBatchIODestroy(std::ptr::null_mut());
    // SAFETY: submit to a destroyed handle.
    assert_eq!(
        unsafe { hipFileBatchIOSubmit(b, 1, &mut [good][0], 0) }.err,
        5022
    );
    drop(tf);
    teardown();
}

#[test]
fn driver_close_with_batches_and_stream_ops_outstanding() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("closebusy", 2 << 20);
    let dev = gpu.device_alloc(0, 2 << 20).unwrap();
    gpu.set_copy_delay(Duration::from_millis(2));
    let mut b = std::ptr::null_mut();
    // SAFETY: b is a local.
    assert_eq!(unsafe { hipFileBatchIOSetUp(&mut b, 32) }.err, 0);
    let mut ps: Vec<HipFileIoParams> = (0..32)
        .map(|i| params(tf.fh, dev, i * 65536, i * 65536, 65536, false, i as usize))
        .collect();
    // SAFETY: 32 entries.
    assert_eq!(
        unsafe { hipFileBatchIOSubmit(b, 32, ps.as_mut_ptr(), 0) }.err,
        0
    );
    let s = gpu.stream_create(0).unwrap();
    let (mut size, mut foff, mut boff, mut bytes) = (1usize << 20, 0i64, 0i64, 0isize);
    assert_eq!(
        read_async(
            tf.fh,
            dev,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s)
        ),
        0
    );
    // Final close while both are in flight: waits for the batch, stream op completes.
    while hipFileUseCount() > 0 {
        assert_eq!(hipFileDriverClose().err, 0);
    }
    gpu.stream_synchronize(s).unwrap();
    assert_eq!(bytes, 1 << 20);
    gpu.set_copy_delay(Duration::ZERO);
    drop(tf);
}

#[test]
fn device_one_buffers_leave_the_callers_current_device_alone() {
    let (_g, gpu) = setup();
    let tf = TestFile::new("dev1", 4 << 20);
    gpu.bind_thread(0).unwrap();
    let dev1 = gpu.device_alloc(1, 2 << 20).unwrap();
    assert_eq!(hipFileBufRegister(dev1 as *const c_void, 2 << 20, 0).err, 0);
    // Sync read into device 1.
    let n = hipFileRead(tf.fh, dev1 as *mut c_void, 1 << 20, 4096, 0);
    assert_eq!(n, 1 << 20);
    assert!(gpu.read_device(dev1, 1 << 20) == tf.data[4096..4096 + (1 << 20)]);
    assert_eq!(
        gpu.current_device().unwrap(),
        0,
        "a sync read changed the caller's device"
    );
    // A batch entry into device 1.
    let mut b = std::ptr::null_mut();
    assert_eq!(unsafe { hipFileBatchIOSetUp(&mut b, 4) }.err, 0);
    let mut p = [params(tf.fh, dev1, 8192, 1 << 20, 65536, false, 1)];
    assert_eq!(
        unsafe { hipFileBatchIOSubmit(b, 1, p.as_mut_ptr(), 0) }.err,
        0
    );
    let ev = get_status(b, 1, 4, None);
    assert_eq!((ev.len(), ev[0].status, ev[0].ret), (1, 0x10, 65536));
    assert!(gpu.read_device(dev1 + (1 << 20), 65536) == tf.data[8192..8192 + 65536]);
    hipFileBatchIODestroy(b);
    assert_eq!(
        gpu.current_device().unwrap(),
        0,
        "a batch changed the caller's device"
    );
    // A stream op on a device-1 stream.
    let s1 = gpu.stream_create(1).unwrap();
    let (mut size, mut foff, mut boff, mut bytes) = (65536usize, 0i64, 0i64, 0isize);
    assert_eq!(
        read_async(
            tf.fh,
            dev1,
            &mut size,
            &mut foff,
            &mut boff,
            &mut bytes,
            sptr(s1)
        ),
        0
    );
    gpu.stream_synchronize(s1).unwrap();
    assert_eq!(bytes, 65536);
    assert!(gpu.read_device(dev1, 65536) == tf.data[..65536]);
    assert_eq!(
        gpu.current_device().unwrap(),
        0,
        "a stream op changed the caller's device"
    );
    assert_eq!(hipFileBufDeregister(dev1 as *const c_void).err, 0);
    drop(tf);
    teardown();
}
