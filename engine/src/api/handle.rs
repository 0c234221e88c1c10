//! Open files and transfers into and out of memory the caller proves valid.

use super::buf::{IoBuf, IoBufMut, Region};
use super::future::{pair, IoFuture};
use crate::error::{Error, OpError, Result};
use crate::file::File;
use crate::gpu::{GpuError, MemKind};
use crate::pipeline::{Completion, Direction, Engine, IoRequest, Memory};
use crate::{log_warn, MAX_RW_COUNT};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

/// How [`Engine::open`] opens a path (the Python package's mode strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// `"r"`: an existing file, read only.
    Read,
    /// `"r+"`: an existing file, read and write.
    ReadWrite,
    /// `"w"`: created or truncated, write only.
    Write,
    /// `"w+"`: created or truncated, read and write.
    WriteRead,
}

impl OpenMode {
    /// `"r"`, `"r+"`, `"w"` or `"w+"` (a `b` anywhere is accepted and ignored).
    pub fn parse(mode: &str) -> Option<OpenMode> {
        let m: String = mode.chars().filter(|&c| c != 'b').collect();
        match m.as_str() {
            "r" => Some(OpenMode::Read),
            "r+" => Some(OpenMode::ReadWrite),
            "w" => Some(OpenMode::Write),
            "w+" => Some(OpenMode::WriteRead),
            _ => None,
        }
    }

    fn options(self) -> std::fs::OpenOptions {
        let mut o = std::fs::OpenOptions::new();
        match self {
            OpenMode::Read => o.read(true),
            OpenMode::ReadWrite => o.read(true).write(true),
            OpenMode::Write => o.write(true).create(true).truncate(true),
            OpenMode::WriteRead => o.read(true).write(true).create(true).truncate(true),
        };
        o
    }
}

struct Inner {
    engine: Engine,
    file: Arc<File>,
    /// The descriptor when the handle owns it; closed after `file` (whose
    /// O_DIRECT reopen refers to it) is gone. In-flight transfers hold the
    /// `Inner`, so the descriptor outlives them.
    _fd: Option<OwnedFd>,
}

/// An open file of one [`Engine`]. Cheap to clone (clones share the file);
/// the descriptor it owns is closed when the last clone and the last
/// transfer using it are gone.
///
/// ```
/// use hipfile_engine::{Config, Engine, HostBuffer, OpenMode};
/// # let path = std::env::temp_dir().join(format!("hipfile-doc-handle-{}", std::process::id()));
/// let engine = Engine::new(Config { io_threads: 2, ..Config::default() }).unwrap();
/// let f = engine.open(&path, OpenMode::WriteRead).unwrap();
/// assert_eq!(f.write(b"hello, file".as_slice(), 0).unwrap(), 11);
/// let mut buf = HostBuffer::new(5);
/// assert_eq!(f.read(&mut buf, 7).unwrap(), 4); // 4 bytes before EOF
/// assert_eq!(&buf[..4], b"file");
/// let mut word = [0u8; 5];
/// assert_eq!(f.read(&mut word[..], 0).unwrap(), 5);
/// assert_eq!(&word, b"hello");
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Clone)]
pub struct FileHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle")
            .field("fd", &self.inner.file.client_fd)
            .finish()
    }
}

impl Engine {
    /// Open `path` for transfers through this engine.
    /// Errors: the `open(2)` errno as `Error::Os`; files the engine cannot
    /// serve as for `hipFileHandleRegister` (5018 not a regular file or block
    /// device, 5019 `O_APPEND`).
    pub fn open(&self, path: impl AsRef<Path>, mode: OpenMode) -> Result<FileHandle> {
        let f = mode
            .options()
            .open(path.as_ref())
            .map_err(|e| Error::Os(e.raw_os_error().unwrap_or(libc::EIO)))?;
        self.open_fd(f)
    }

    /// Take ownership of an open descriptor (a `std::fs::File`, an `OwnedFd`).
    pub fn open_fd(&self, fd: impl Into<OwnedFd>) -> Result<FileHandle> {
        let fd: OwnedFd = fd.into();
        self.handle(fd.as_raw_fd(), Some(fd))
    }

    /// Use a descriptor the caller keeps open.
    ///
    /// # Safety
    /// `fd` must stay open, and name the same file, until the handle, its
    /// clones and every transfer started through them are gone; otherwise
    /// transfers would reach whatever file reuses the number.
    pub unsafe fn open_raw_fd(&self, fd: RawFd) -> Result<FileHandle> {
        self.handle(fd, None)
    }

    fn handle(&self, fd: RawFd, owned: Option<OwnedFd>) -> Result<FileHandle> {
        check_engine(self)?;
        let file = self.open_file(fd)?;
        Ok(FileHandle {
            inner: Arc::new(Inner {
                engine: self.clone(),
                file,
                _fd: owned,
            }),
        })
    }
}

/// An engine started before `fork()` has no workers in the child: refuse it
/// instead of queueing work that nothing would ever take.
fn check_engine(engine: &Engine) -> Result<()> {
    if engine.is_from_before_fork() {
        log_warn!(
            "an engine started before fork() was used in the child; its workers exist only in \
             the parent: start a new engine in this process"
        );
        return Err(OpError::DriverNotInitialized.into());
    }
    Ok(())
}

/// Check what the engine cannot check for itself: that a device region is
/// device memory of that device, inside one allocation.
pub(crate) fn check_region(engine: &Engine, r: &Region) -> Result<()> {
    let Memory::Device { ptr, device } = r.mem else {
        return Ok(());
    };
    let gpu = engine.gpu();
    if !gpu.has_devices() {
        return Err(Error::Gpu(crate::fork::missing_gpu_error(gpu.as_ref())));
    }
    if !engine.config().allow_compat_mode {
        log_warn!(
            "device I/O refused: HIPFILE_ALLOW_COMPAT_MODE=false and no direct path is available"
        );
        return Err(OpError::InternalError.into());
    }
    let info = gpu.pointer_info(ptr).map_err(|e| match e {
        GpuError::InvalidValue(_) => Error::Op(OpError::InvalidValue),
        e => Error::Gpu(e),
    })?;
    match info.kind {
        MemKind::Device { device: d } if d == device => {}
        kind => {
            log_warn!("DeviceSlice {ptr:#x} on device {device}: the runtime says it is {kind:?}");
            return Err(OpError::InvalidValue.into());
        }
    }
    let end = ptr
        .checked_add(r.len as u64)
        .ok_or(OpError::HipPointerRangeError)?;
    if ptr < info.alloc_base || end > info.alloc_base.saturating_add(info.alloc_bytes) {
        log_warn!(
            "DeviceSlice [{ptr:#x}, {end:#x}) runs past its allocation [{:#x}, +{})",
            info.alloc_base,
            info.alloc_bytes
        );
        return Err(OpError::HipPointerRangeError.into());
    }
    Ok(())
}

impl FileHandle {
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The descriptor transfers use (owned by the handle, or the caller's).
    pub fn raw_fd(&self) -> RawFd {
        self.inner.file.client_fd
    }

    /// The engine's view of the file (descriptors, alignment, filesystem).
    pub fn file(&self) -> &Arc<File> {
        &self.inner.file
    }

    /// The file's size in bytes (`fstat`).
    pub fn size(&self) -> Result<u64> {
        // SAFETY: fstat writes only into `st`, an owned, zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above; the descriptor is open while the handle lives.
        if unsafe { libc::fstat(self.raw_fd(), &mut st) } != 0 {
            return Err(Error::last_os());
        }
        Ok(st.st_size as u64)
    }

    fn request(&self, dir: Direction, r: &Region, offset: u64) -> Result<IoRequest> {
        check_engine(&self.inner.engine)?;
        if offset
            .checked_add(r.len.min(MAX_RW_COUNT) as u64)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(OpError::InvalidValue.into());
        }
        check_region(&self.inner.engine, r)?;
        Ok(IoRequest::new(
            self.inner.file.clone(),
            dir,
            r.mem,
            r.len,
            offset,
        ))
    }

    fn transfer(&self, dir: Direction, r: Region, offset: u64) -> Result<usize> {
        let req = self.request(dir, &r, offset)?;
        if req.size == 0 {
            return Ok(0);
        }
        // SAFETY: `r` comes from an `IoBuf(Mut)` borrowed by our caller for
        // the whole call, and `transfer` returns only once every byte has landed.
        unsafe { self.inner.engine.transfer(req) }
    }

    /// Read `buf.len()` bytes from `offset` into `buf` (host or device
    /// memory); returns the bytes read, fewer at end of file (0 past it) and
    /// at most [`MAX_RW_COUNT`].
    pub fn read<B: IoBufMut + ?Sized>(&self, buf: &mut B, offset: u64) -> Result<usize> {
        self.transfer(Direction::Read, buf.io_region_mut(), offset)
    }

    /// Write all of `buf` at `offset`; durable before it returns unless
    /// `HIPFILE_WRITE_SYNC=false`. Returns the bytes written.
    pub fn write<B: IoBuf + ?Sized>(&self, buf: &B, offset: u64) -> Result<usize> {
        self.transfer(Direction::Write, buf.io_region(), offset)
    }

    /// Start a transfer of region `r` and call `done` with its outcome (on a
    /// worker thread, or on this one when it is refused up front).
    ///
    /// # Safety
    /// `r` must stay valid for the transfer until `done` has been called.
    pub(crate) unsafe fn start(
        &self,
        dir: Direction,
        r: Region,
        offset: u64,
        done: impl FnOnce(Result<usize>) + Send + 'static,
    ) {
        let req = match self.request(dir, &r, offset) {
            Ok(req) => req,
            Err(e) => return done(Err(e)),
        };
        let keep = self.inner.clone();
        let callback = move |res| {
            // The descriptor stays open until the transfer has finished.
            drop(keep);
            done(res)
        };
        // SAFETY: the caller keeps `r` valid until `done` runs, which is after
        // the engine has finished with the memory.
        unsafe {
            self.inner
                .engine
                .submit(req, Completion::Callback(Box::new(callback)))
        };
    }

    /// Start reading `buf.len()` bytes from `offset` into `buf`, which the
    /// returned future hands back with the byte count.
    pub fn read_async<B: IoBufMut + Send + 'static>(
        &self,
        mut buf: B,
        offset: u64,
    ) -> IoFuture<(Result<usize>, B)> {
        let r = buf.io_region_mut();
        self.start_owned(Direction::Read, r, buf, offset)
    }

    /// Start writing all of `buf` at `offset` (not made durable: the data is
    /// in the page cache or on the device when the future is ready).
    pub fn write_async<B: IoBuf + Send + 'static>(
        &self,
        buf: B,
        offset: u64,
    ) -> IoFuture<(Result<usize>, B)> {
        let r = buf.io_region();
        self.start_owned(Direction::Write, r, buf, offset)
    }

    fn start_owned<B: Send + 'static>(
        &self,
        dir: Direction,
        r: Region,
        buf: B,
        offset: u64,
    ) -> IoFuture<(Result<usize>, B)> {
        if r.is_empty() {
            return IoFuture::ready((Ok(0), buf));
        }
        let (fut, completer) = pair();
        // SAFETY: `buf` owns the region (IoBuf's contract for values moved
        // into an asynchronous call) and is moved into the callback, so it
        // lives until the transfer has finished.
        unsafe {
            self.start(dir, r, offset, move |res| completer.complete((res, buf)));
        }
        fut
    }
}
