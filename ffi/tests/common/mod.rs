//! Helpers shared by the C-ABI stream tests: the driver over the test GPU
//! double (one per test binary), test files, gates that hold a stream, and
//! stream synchronisation under a watchdog.

#![allow(dead_code)] // each test binary uses its own subset
#![allow(clippy::undocumented_unsafe_blocks)] // unsafe C entry points on test-owned locals

use hipfile::types::{HandleUnion, HipFileDescr, HipFileError};
use hipfile::*;
use hipfile_engine::gpu::testgpu::TestGpu;
use hipfile_engine::gpu::{Gpu, Stream};
use hipfile_engine::registry::driver;
use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

static LOCK: Mutex<()> = Mutex::new(());
static GPU: OnceLock<Arc<TestGpu>> = OnceLock::new();

pub fn setup() -> (MutexGuard<'static, ()>, Arc<TestGpu>) {
    let g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let gpu = GPU
        .get_or_init(|| {
            let gpu = Arc::new(TestGpu::new(2));
            driver().set_gpu_override(Some(gpu.clone() as Arc<dyn Gpu>));
            gpu
        })
        .clone();
    while hipFileUseCount() > 0 {
        hipFileDriverClose();
    }
    assert_eq!(hipFileDriverOpen().err, 0);
    (g, gpu)
}

pub fn teardown() {
    while hipFileUseCount() > 0 {
        hipFileDriverClose();
    }
}

pub fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761) >> 11) as u8 ^ salt)
        .collect()
}

/// Where test files go: `$HIPFILE_TEST_DIR`, else the system's temporary
/// directory (created if missing).
pub fn test_dir() -> std::path::PathBuf {
    let dir = std::env::var("HIPFILE_TEST_DIR")
        .map(Into::into)
        .unwrap_or_else(|_| std::env::temp_dir());
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Opens `path` for reading and writing and registers it with hipFile; the
/// file must stay open while the handle is in use.
pub fn open_registered(path: &std::path::Path) -> (std::fs::File, *mut c_void) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut d = HipFileDescr {
        kind: 1,
        handle: HandleUnion {
            fd: file.as_raw_fd(),
        },
        fs_ops: std::ptr::null(),
    };
    let mut fh = std::ptr::null_mut();
    // SAFETY: valid pointers to local storage.
    let e = unsafe { hipFileHandleRegister(&mut fh, &mut d) };
    assert_eq!(e.err, 0, "register {}", path.display());
    (file, fh)
}

pub struct TestFile {
    pub file: std::fs::File,
    pub path: std::path::PathBuf,
    pub data: Vec<u8>,
    pub fh: *mut c_void,
}

impl TestFile {
    pub fn new(name: &str, len: usize) -> TestFile {
        let path = test_dir().join(format!("{name}-{}", std::process::id()));
        let data = pattern(len, name.len() as u8);
        std::fs::write(&path, &data).unwrap();
        let (file, fh) = open_registered(&path);
        TestFile {
            file,
            path,
            data,
            fh,
        }
    }
}

// SAFETY: `fh` is an opaque handle, used only through the thread-safe C API.
unsafe impl Send for TestFile {}
// SAFETY: as above; the other fields are Sync.
unsafe impl Sync for TestFile {}

impl Drop for TestFile {
    fn drop(&mut self) {
        hipFileHandleDeregister(self.fh);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A pinned host word a test uses to hold a stream (the cuStreamWaitValue32 pattern).
pub struct Gate {
    word: Box<AtomicU32>,
    gpu: Arc<TestGpu>,
}

impl Drop for Gate {
    fn drop(&mut self) {
        // SAFETY: registered in `new`; streams were synchronised before the drop.
        let _ = unsafe { self.gpu.host_unregister(self.word.as_ptr().cast()) };
    }
}

impl Gate {
    pub fn new(gpu: &Arc<TestGpu>) -> Gate {
        let word = Box::new(AtomicU32::new(0));
        // SAFETY: the box outlives every wait (the test synchronises streams first).
        unsafe { gpu.host_register(word.as_ptr().cast(), 4).unwrap() };
        Gate {
            word,
            gpu: gpu.clone(),
        }
    }
    /// A gate already holding `s`.
    pub fn holding(gpu: &Arc<TestGpu>, s: Stream) -> Gate {
        let g = Gate::new(gpu);
        g.hold(gpu, s);
        g
    }
    pub fn hold(&self, gpu: &TestGpu, s: Stream) {
        // SAFETY: registered above.
        unsafe { gpu.stream_wait_value32(s, self.word.as_ptr(), 1).unwrap() };
    }
    pub fn release(&self) {
        self.word.store(1, Ordering::Release);
    }
}

pub fn sptr(s: Stream) -> *mut c_void {
    s.0 as *mut c_void
}

#[allow(clippy::too_many_arguments)]
pub fn read_async(
    fh: *mut c_void,
    buf: u64,
    size: &mut usize,
    foff: &mut i64,
    boff: &mut i64,
    bytes: &mut isize,
    s: *mut c_void,
) -> i32 {
    // SAFETY: all pointers are to live locals that outlive the stream op (synchronised).
    unsafe { hipFileReadAsync(fh, buf as *mut c_void, size, foff, boff, bytes, s) }.err
}

/// How long a stream may take to drain before a test calls it a hang. Far
/// above what any op here needs; only a stream that never drains reaches it.
pub const WATCHDOG: Duration = Duration::from_secs(120);

/// Synchronise `s`, failing the test if it never drains (a parked stream
/// that is never released).
pub fn sync_within(gpu: &Arc<TestGpu>, s: Stream, what: &str) {
    let (tx, rx) = std::sync::mpsc::channel();
    let g = gpu.clone();
    std::thread::spawn(move || {
        let _ = tx.send(g.stream_synchronize(s));
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(r) => r.unwrap_or_else(|e| panic!("{what}: synchronize failed: {e}")),
        Err(_) => panic!("{what}: the stream never drained (hang)"),
    }
}

/// Wait until `cond` holds, failing the test if it never does.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed() < WATCHDOG, "{what}: never happened");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Parameters of one op, kept at a fixed address until its stream is synchronised.
#[derive(Debug)]
pub struct P {
    pub size: usize,
    pub foff: i64,
    pub boff: i64,
    pub bytes: isize,
}

impl P {
    pub fn new(size: usize, foff: i64, boff: i64) -> Box<P> {
        Box::new(P {
            size,
            foff,
            boff,
            bytes: 12345,
        })
    }
}

/// `hipFileReadAsync`'s and `hipFileWriteAsync`'s type.
type AsyncIo = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut usize,
    *mut i64,
    *mut i64,
    *mut isize,
    *mut c_void,
) -> HipFileError;

fn submit(f: AsyncIo, tf: &TestFile, buf: u64, p: &mut P, s: Stream) -> HipFileError {
    let P {
        size,
        foff,
        boff,
        bytes,
    } = p;
    // SAFETY: all pointers are to live locals that outlive the stream op (synchronised).
    unsafe { f(tf.fh, buf as *mut c_void, size, foff, boff, bytes, sptr(s)) }
}

/// `hipFileReadAsync` of `p` into `buf`: the whole error (with the driver's code).
pub fn read_full(tf: &TestFile, buf: u64, p: &mut P, s: Stream) -> HipFileError {
    submit(hipFileReadAsync, tf, buf, p, s)
}

pub fn read(tf: &TestFile, buf: u64, p: &mut P, s: Stream) -> i32 {
    read_full(tf, buf, p, s).err
}

pub fn write(tf: &TestFile, buf: u64, p: &mut P, s: Stream) -> i32 {
    submit(hipFileWriteAsync, tf, buf, p, s).err
}

pub fn file_bytes(tf: &TestFile, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let n = tf.file.read_at(&mut v, off as u64).unwrap();
    v.truncate(n);
    v
}
