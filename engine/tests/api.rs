//! The safe API (`hipfile_engine::api`): slices, owned buffers, device
//! slices over the test double, futures, batches, refusals.

mod common;

use common::test_dir;
use hipfile_engine::api::{read_batch, read_batch_async, ReadOp};
use hipfile_engine::gpu::testgpu::TestGpu;
use hipfile_engine::gpu::{Gpu, NoGpu};
use hipfile_engine::{
    Config, DeviceSlice, Engine, Error, FileHandle, HostBuffer, OpError, OpenMode,
};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[2] ^ salt)
        .collect()
}

/// A file with `data` that is removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, data: &[u8]) -> TempFile {
        let p = test_dir().join(format!("api-{name}-{}", std::process::id()));
        std::fs::write(&p, data).unwrap();
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn host_engine() -> Engine {
    let cfg = Config {
        io_threads: 2,
        chunk_bytes: 256 << 10,
        inline_max_bytes: 64 << 10,
        ..Config::default()
    };
    Engine::with_gpu(cfg, Arc::new(NoGpu { why: "test".into() })).unwrap()
}

fn test_gpu_engine() -> (Engine, Arc<TestGpu>) {
    let gpu = Arc::new(TestGpu::new(2));
    let cfg = Config {
        io_threads: 2,
        chunk_bytes: 256 << 10,
        ..Config::default()
    };
    (Engine::with_gpu(cfg, gpu.clone()).unwrap(), gpu)
}

#[test]
fn read_into_a_slice_through_the_workers_matches_the_file() {
    let data = pattern(3 << 20, 1);
    let t = TempFile::new("slice", &data);
    let e = host_engine();
    let f = e.open(&t.0, OpenMode::Read).unwrap();
    let mut buf = vec![0u8; 2 << 20];
    assert_eq!(f.read(buf.as_mut_slice(), 12345).unwrap(), 2 << 20);
    assert_eq!(buf, &data[12345..12345 + (2 << 20)]);
}

#[test]
fn read_past_end_of_file_is_short_then_zero() {
    let data = pattern(10_000, 2);
    let t = TempFile::new("eof", &data);
    let f = host_engine().open(&t.0, OpenMode::Read).unwrap();
    let mut buf = HostBuffer::new(8192);
    assert_eq!(f.read(&mut buf, 4096).unwrap(), 10_000 - 4096);
    assert_eq!(&buf[..10_000 - 4096], &data[4096..]);
    assert_eq!(f.read(&mut buf, 1 << 30).unwrap(), 0);
}

#[test]
fn write_then_read_back_through_a_host_buffer() {
    let t = TempFile::new("rw", b"");
    let f = host_engine().open(&t.0, OpenMode::WriteRead).unwrap();
    let data = pattern(1 << 20, 3);
    assert_eq!(f.write(data.as_slice(), 4096).unwrap(), 1 << 20);
    assert_eq!(f.size().unwrap(), 4096 + (1 << 20));
    let mut back = HostBuffer::new(1 << 20);
    assert_eq!(f.read(&mut back, 4096).unwrap(), 1 << 20);
    assert_eq!(&back[..], &data[..]);
}

#[test]
fn write_to_a_read_only_handle_fails_with_ebadf() {
    let t = TempFile::new("ro", &pattern(4096, 4));
    let f = host_engine().open(&t.0, OpenMode::Read).unwrap();
    assert_eq!(
        f.write(vec![1u8; 4096].as_slice(), 0),
        Err(Error::Os(libc::EBADF))
    );
}

#[test]
fn opening_a_missing_path_reports_enoent() {
    let e = host_engine();
    let r = e.open(test_dir().join("api-no-such-file"), OpenMode::Read);
    assert_eq!(r.unwrap_err(), Error::Os(libc::ENOENT));
}

#[test]
fn opening_a_directory_reports_invalid_file_type() {
    let e = host_engine();
    let dir = std::fs::File::open(test_dir()).unwrap();
    assert_eq!(
        e.open_fd(dir).unwrap_err(),
        Error::Op(OpError::InvalidFileType)
    );
}

#[test]
fn offsets_beyond_i64_are_refused() {
    let t = TempFile::new("off", &pattern(4096, 5));
    let f = host_engine().open(&t.0, OpenMode::Read).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(
        f.read(&mut buf[..], i64::MAX as u64),
        Err(Error::Op(OpError::InvalidValue))
    );
}

#[test]
fn read_async_hands_the_buffer_back_with_the_count() {
    let data = pattern(1 << 20, 6);
    let t = TempFile::new("async", &data);
    let f = host_engine().open(&t.0, OpenMode::Read).unwrap();
    let futs: Vec<_> = (0..4)
        .map(|i| f.read_async(HostBuffer::new(256 << 10), i * (256 << 10)))
        .collect();
    for (i, fut) in futs.into_iter().enumerate() {
        let (n, buf) = fut.wait();
        assert_eq!(n.unwrap(), 256 << 10);
        assert_eq!(&buf[..], &data[i * (256 << 10)..(i + 1) * (256 << 10)]);
    }
}

#[test]
fn read_async_future_can_be_awaited_by_a_minimal_executor() {
    let data = pattern(300_000, 7);
    let t = TempFile::new("await", &data);
    let f = host_engine().open(&t.0, OpenMode::Read).unwrap();
    let fut = f.read_async(vec![0u8; 300_000], 0);
    // A one-future executor: park the thread until the waker unparks it.
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    let (n, buf) = loop {
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => break out,
            std::task::Poll::Pending => std::thread::park(),
        }
    };
    assert_eq!(n.unwrap(), 300_000);
    assert_eq!(buf, data);
}

#[test]
fn write_async_then_read_back() {
    let t = TempFile::new("wasync", b"");
    let f = host_engine().open(&t.0, OpenMode::WriteRead).unwrap();
    let data = pattern(700_000, 8);
    let (n, _) = f.write_async(data.clone(), 0).wait();
    assert_eq!(n.unwrap(), 700_000);
    let mut back = vec![0u8; 700_000];
    assert_eq!(f.read(back.as_mut_slice(), 0).unwrap(), 700_000);
    assert_eq!(back, data);
}

#[test]
fn a_dropped_future_still_lets_the_transfer_finish_and_the_file_stay_usable() {
    let data = pattern(2 << 20, 9);
    let t = TempFile::new("dropfut", &data);
    let f = host_engine().open(&t.0, OpenMode::Read).unwrap();
    for i in 0..8 {
        drop(f.read_async(HostBuffer::new(1 << 20), i * 4096));
    }
    let mut buf = vec![0u8; 4096];
    assert_eq!(f.read(buf.as_mut_slice(), 0).unwrap(), 4096);
    assert_eq!(buf, &data[..4096]);
}

#[test]
fn the_descriptor_outlives_the_handle_while_a_transfer_runs() {
    let data = pattern(4 << 20, 10);
    let t = TempFile::new("fdlife", &data);
    let e = host_engine();
    let fut = {
        let f = e.open(&t.0, OpenMode::Read).unwrap();
        f.read_async(HostBuffer::new(4 << 20), 0)
    };
    let (n, buf) = fut.wait();
    assert_eq!(n.unwrap(), 4 << 20);
    assert_eq!(&buf[..], &data[..]);
}

#[test]
fn read_batch_fills_every_destination_in_order() {
    let files: Vec<(TempFile, Vec<u8>)> = (0..6)
        .map(|i| {
            let d = pattern(200_000 + i * 1000, i as u8);
            (TempFile::new(&format!("batch{i}"), &d), d)
        })
        .collect();
    let e = host_engine();
    let handles: Vec<FileHandle> = files
        .iter()
        .map(|(t, _)| e.open(&t.0, OpenMode::Read).unwrap())
        .collect();
    let mut bufs: Vec<Vec<u8>> = files.iter().map(|(_, d)| vec![0u8; d.len()]).collect();
    let ops = handles
        .iter()
        .zip(bufs.iter_mut())
        .map(|(f, b)| ReadOp::new(f, 0, b.as_mut_slice()));
    let results = read_batch(ops);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(*r, Ok(files[i].1.len()), "entry {i}");
        assert_eq!(bufs[i], files[i].1, "entry {i}");
    }
}

#[test]
fn read_batch_reports_each_entry_on_its_own() {
    let t = TempFile::new("batcherr", &pattern(8192, 11));
    let e = host_engine();
    let f = e.open(&t.0, OpenMode::Read).unwrap();
    let mut a = vec![0u8; 4096];
    let mut b = vec![0u8; 4096];
    let mut c = vec![0u8; 4096];
    let results = read_batch([
        ReadOp::new(&f, 0, a.as_mut_slice()),
        ReadOp::new(&f, i64::MAX as u64, b.as_mut_slice()),
        ReadOp::new(&f, 6144, c.as_mut_slice()),
    ]);
    assert_eq!(
        results,
        vec![Ok(4096), Err(Error::Op(OpError::InvalidValue)), Ok(2048)]
    );
}

#[test]
fn an_empty_batch_returns_at_once() {
    assert!(read_batch(Vec::<ReadOp<'_>>::new()).is_empty());
}

#[test]
fn read_batch_async_hands_back_buffers_and_results() {
    let data = pattern(1 << 20, 12);
    let t = TempFile::new("batchasync", &data);
    let f = host_engine().open(&t.0, OpenMode::Read).unwrap();
    let ops = (0..8)
        .map(|i| {
            (
                f.clone(),
                (i * (128 << 10)) as u64,
                HostBuffer::new(128 << 10),
            )
        })
        .collect();
    let (results, bufs) = read_batch_async(ops).wait();
    for i in 0..8 {
        assert_eq!(results[i], Ok(128 << 10));
        assert_eq!(&bufs[i][..], &data[i * (128 << 10)..(i + 1) * (128 << 10)]);
    }
}

#[test]
fn device_slice_reads_and_writes_through_the_test_gpu() {
    let data = pattern(1 << 20, 13);
    let t = TempFile::new("dev", &data);
    let (e, gpu) = test_gpu_engine();
    let f = e.open(&t.0, OpenMode::ReadWrite).unwrap();
    let ptr = gpu.device_alloc(1, 1 << 20).unwrap();
    // SAFETY: a live 1 MiB allocation of device 1, freed at the end.
    let mut dev = unsafe { DeviceSlice::from_raw(ptr, 1 << 20, 1) };
    assert_eq!(f.read(&mut dev, 0).unwrap(), 1 << 20);
    assert_eq!(gpu.read_device(ptr, 1 << 20), data);
    let (head, _tail) = dev.split_at(4096);
    assert_eq!(f.write(&head, 1 << 20).unwrap(), 4096);
    let mut back = vec![0u8; 4096];
    assert_eq!(f.read(back.as_mut_slice(), 1 << 20).unwrap(), 4096);
    assert_eq!(back, &data[..4096]);
    // SAFETY: no transfer uses the allocation any more.
    unsafe { gpu.device_free(ptr) }.unwrap();
}

#[test]
fn device_slice_past_its_allocation_is_refused() {
    let t = TempFile::new("devrange", &pattern(1 << 20, 14));
    let (e, gpu) = test_gpu_engine();
    let f = e.open(&t.0, OpenMode::Read).unwrap();
    let ptr = gpu.device_alloc(0, 4096).unwrap();
    // SAFETY: deliberately wrong length; the engine must refuse it before any copy.
    let mut dev = unsafe { DeviceSlice::from_raw(ptr, 8192, 0) };
    assert_eq!(
        f.read(&mut dev, 0),
        Err(Error::Op(OpError::HipPointerRangeError))
    );
    // SAFETY: nothing uses the allocation.
    unsafe { gpu.device_free(ptr) }.unwrap();
}

#[test]
fn device_slice_naming_the_wrong_device_is_refused() {
    let t = TempFile::new("devwrong", &pattern(8192, 15));
    let (e, gpu) = test_gpu_engine();
    let f = e.open(&t.0, OpenMode::Read).unwrap();
    let ptr = gpu.device_alloc(0, 4096).unwrap();
    // SAFETY: deliberately the wrong device; refused before any copy.
    let mut dev = unsafe { DeviceSlice::from_raw(ptr, 4096, 1) };
    assert_eq!(f.read(&mut dev, 0), Err(Error::Op(OpError::InvalidValue)));
    // SAFETY: nothing uses the allocation.
    unsafe { gpu.device_free(ptr) }.unwrap();
}

#[test]
fn device_slice_without_a_gpu_runtime_reports_the_reason() {
    let t = TempFile::new("devnone", &pattern(8192, 16));
    let f = host_engine().open(&t.0, OpenMode::Read).unwrap();
    // SAFETY: never dereferenced: without a runtime the engine refuses it first.
    let mut dev = unsafe { DeviceSlice::from_raw(0x7000_0000_0000, 4096, 0) };
    match f.read(&mut dev, 0) {
        Err(Error::Gpu(hipfile_engine::gpu::GpuError::NotPresent(why))) => {
            assert_eq!(why, "test")
        }
        other => panic!("expected NotPresent, got {other:?}"),
    }
}

#[test]
fn an_engine_from_before_fork_is_refused_in_the_child_and_a_new_one_works() {
    let data = pattern(1 << 20, 17);
    let t = TempFile::new("fork", &data);
    let e = host_engine();
    let f = e.open(&t.0, OpenMode::Read).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(f.read(buf.as_mut_slice(), 0).unwrap(), 1 << 20);
    // SAFETY: the child reports through its exit status and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: a watchdog: a hang becomes SIGALRM, a failure of the test.
        unsafe { libc::alarm(30) };
        let old = f.read(buf.as_mut_slice(), 0);
        let fresh = host_engine();
        let g = fresh.open(&t.0, OpenMode::Read).unwrap();
        let mut b2 = vec![0u8; 1 << 20];
        let n = g.read(b2.as_mut_slice(), 0);
        let ok =
            old == Err(Error::Op(OpError::DriverNotInitialized)) && n == Ok(1 << 20) && b2 == data;
        std::mem::forget((fresh, g, f, e));
        // SAFETY: leaves the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    assert_eq!(f.read(buf.as_mut_slice(), 0).unwrap(), 1 << 20);
}

#[test]
fn async_writes_of_two_sizes_on_an_o_direct_descriptor_never_fail_with_eio() {
    // Each write's aligned part goes around the page cache and its tail
    // through it; the longer writes cover, O_DIRECT, the pages the shorter
    // ones' tails put in the page cache. The engine keeps the two kinds
    // apart, so no write fails and the descriptor's fdatasync succeeds.
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let t = TempFile::new("odirect2", b"");
    let path = std::ffi::CString::new(t.0.to_str().unwrap()).unwrap();
    // SAFETY: a plain open of our own test file.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_DIRECT) };
    if raw < 0 {
        eprintln!("O_DIRECT refused here: {}", std::io::Error::last_os_error());
        return;
    }
    // SAFETY: `raw` was just opened and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let probe = fd.as_raw_fd();
    let f = Arc::new(host_engine().open_fd(fd).unwrap());
    let sizes = [(1 << 20) + 100, (2 << 20) + 100];
    // Write-back keeps starting while the writers run (what makes a page
    // the tail write dirtied busy when an O_DIRECT write wants it gone).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut eio = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: fdatasync only names a descriptor, open until the
                // writers are joined (this thread is joined before `f` drops).
                if unsafe { libc::fdatasync(probe) } != 0 {
                    eio += 1;
                }
            }
            eio
        })
    };
    let writers: Vec<_> = sizes
        .iter()
        .map(|&size| {
            let f = f.clone();
            std::thread::spawn(move || {
                let data = pattern(size, 3);
                let mut failed = 0;
                for _ in 0..150 {
                    // Eight in flight, as a batch would have them.
                    let futs: Vec<_> = (0..8).map(|_| f.write_async(data.clone(), 0)).collect();
                    for fu in futs {
                        if fu.wait().0.is_err() {
                            failed += 1;
                        }
                    }
                }
                failed
            })
        })
        .collect();
    let failed: Vec<usize> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sync_failures = syncer.join().unwrap();
    assert_eq!(failed, vec![0, 0], "writes that failed, per writer");
    assert_eq!(sync_failures, 0, "fdatasync calls that failed meanwhile");
    // SAFETY: fdatasync only names a descriptor (still open: `f` owns it).
    let r = unsafe { libc::fdatasync(probe) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}
