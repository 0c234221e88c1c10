//! A registered file: the caller's descriptor, a buffered and (where the
//! filesystem allows it) an O_DIRECT descriptor, the DIO alignments from statx,
//! and the filesystem from /proc/self/mountinfo (spec §5.3).

use crate::error::{Error, OpError, Result};
use crate::{log_debug, log_warn};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Largest DIO alignment the bounce slots are sized for (see `Config::slot_bytes`).
/// Files that need more are read and written through the page cache.
pub const MAX_DIO_ALIGN: usize = 4096;

/// Filesystem facts from the mount table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountInfo {
    pub fs_type: String,
    pub options: String,
}

impl MountInfo {
    /// ext4 with `data=ordered` (a missing `data=` option means ordered).
    pub fn is_ext4_ordered(&self) -> bool {
        self.fs_type == "ext4"
            && !self
                .options
                .split(',')
                .any(|o| o.starts_with("data=") && o != "data=ordered")
    }
}

/// A file registered with the engine.
///
/// Registration costs about what `open` costs: one `statx` and one `fcntl`.
/// What is slower to learn is learned once and shared: the O_DIRECT
/// descriptor is opened on the first I/O that wants it (a loader that reads
/// each file once from the page cache never pays for it), and the mount entry
/// is kept per device for the process (`DeviceFacts`).
#[derive(Debug)]
pub struct File {
    /// The caller's descriptor; never closed by us.
    pub client_fd: RawFd,
    /// Descriptor for page-cache I/O (the client's, or one we opened).
    pub buffered_fd: RawFd,
    /// The O_DIRECT descriptor: the client's when it opened the file with
    /// O_DIRECT, else opened on first use. `None` inside: the filesystem
    /// refuses O_DIRECT, or the reopen failed or reached another inode.
    direct_fd: std::sync::OnceLock<Option<RawFd>>,
    /// Descriptors we opened at registration and must close exactly once (the
    /// buffered one of an O_DIRECT client). A lazily opened O_DIRECT
    /// descriptor is closed from `direct_fd`.
    owned_fds: Vec<RawFd>,
    /// The caller opened the file with O_DIRECT: writes go around the page cache too.
    pub client_direct: bool,
    /// Flags for the O_DIRECT reopen (access mode and behaviour bits).
    reopen_flags: i32,
    /// Identity of the file at registration. A lazy reopen through
    /// /proc/self/fd/N must reach the same inode: a caller that closed its
    /// descriptor and got the number back for another file (which the API
    /// forbids) must not have I/O land in that other file.
    dev_ino: (u64, u64),
    /// The device the file lives on (`stx_dev`), for its mount entry.
    dev: (u32, u32),
    pub readable: bool,
    pub writable: bool,
    /// statx `stx_dio_mem_align` (4096 when statx does not say; 0 without O_DIRECT).
    pub dio_mem_align: u32,
    /// statx `stx_dio_offset_align` (same rules).
    pub dio_offset_align: u32,
    pub is_block_device: bool,
    pub is_regular_file: bool,
    /// I/O operations on this file: the low [`INFLIGHT_BITS`] count those in
    /// flight (deregistration refuses while any is), the bits above those
    /// started so far. One word, so that one load tells whether another
    /// operation has run beside a given one ([`File::alone_since`]).
    activity: AtomicU64,
    /// Page-cache probes of the inline path in a row that found their whole
    /// range resident, up to [`CACHE_TRUST`] ([`File::trusts_page_cache`]).
    cache_streak: AtomicU32,
    /// Keeps this process's page-cache writes to an O_DIRECT file apart
    /// from its O_DIRECT ones ([`File::write_pass`]).
    write_gate: WriteGate,
}

/// Probes in a row that must hit before small reads of a file skip them.
/// A probe is a `preadv2(RWF_NOWAIT)`; on the 2-core VM's kernel it costs
/// about 0.18 µs more than `pread` of the same 4 KiB (the iovec import and
/// `vfs_readv`), a seventh of the whole call. A file whose last 64 probes
/// all hit is read with `pread`; one probe in [`REPROBE_EVERY`] of a
/// thread's reads still asks, so a file that left the page cache is noticed
/// (its reads until then are buffered reads, correct and no slower than
/// `pread` of a cold range).
pub const CACHE_TRUST: u32 = 64;
/// See [`CACHE_TRUST`].
pub const REPROBE_EVERY: u32 = 64;

/// Facts about a device that every file on it shares, learned once per
/// process: reading /proc/self/mountinfo costs tens of microseconds, more than a 256 KiB page-cache read, and a loader registers
/// thousands of files on the same filesystem.
///
/// The mount table can change while the process runs. A device seen for the
/// first time (a filesystem mounted later has a new device number) is looked
/// up afresh, and the kernel marks an open /proc/self/mountinfo with POLLPRI
/// whenever the mount table changes (a remount with other options keeps the
/// device number), which empties the mount cache before the next lookup.
struct DeviceFacts {
    mountinfo_fd: RawFd,
    mounts: HashMap<(u32, u32), MountInfo>,
}

/// Per process: a thread of the parent may hold the lock at the instant of a
/// fork(), so a child starts with its own (the mount table may differ too).
static DEVICE_FACTS: crate::fork::PerProcess<Mutex<Option<DeviceFacts>>> =
    crate::fork::PerProcess::new();

impl DeviceFacts {
    fn with<T>(f: impl FnOnce(&mut DeviceFacts) -> T) -> T {
        let mut g = DEVICE_FACTS
            .get_or_init(|| Mutex::new(None))
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let facts = g.get_or_insert_with(|| DeviceFacts {
            // SAFETY: a NUL-terminated path; open has no other preconditions.
            mountinfo_fd: unsafe {
                libc::open(
                    c"/proc/self/mountinfo".as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            },
            mounts: HashMap::new(),
        });
        f(facts)
    }

    /// Empty the mount cache when the kernel says the mount table changed
    /// since this descriptor was last read.
    fn forget_if_mounts_changed(&mut self) {
        if self.mountinfo_fd < 0 || self.mounts.is_empty() {
            return;
        }
        let mut p = libc::pollfd {
            fd: self.mountinfo_fd,
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        if n > 0 && p.revents & (libc::POLLPRI | libc::POLLERR) != 0 {
            self.mounts.clear();
        }
    }

    /// The whole mount table, read through the cached descriptor (reading it
    /// also re-arms the change notification).
    fn read_mountinfo(&self) -> Option<String> {
        if self.mountinfo_fd < 0 {
            return std::fs::read_to_string("/proc/self/mountinfo").ok();
        }
        // SAFETY: seeking our own descriptor.
        if unsafe { libc::lseek(self.mountinfo_fd, 0, libc::SEEK_SET) } != 0 {
            return None;
        }
        let mut out = Vec::with_capacity(16 << 10);
        let mut buf = [0u8; 16 << 10];
        loop {
            // SAFETY: `buf` is valid for writes of its length.
            let n = unsafe { libc::read(self.mountinfo_fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                return None;
            }
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        String::from_utf8(out).ok()
    }

    fn mount(&mut self, dev: (u32, u32)) -> Option<MountInfo> {
        self.forget_if_mounts_changed();
        if let Some(m) = self.mounts.get(&dev) {
            return Some(m.clone());
        }
        let text = self.read_mountinfo()?;
        let m = parse_mountinfo(&text, dev.0, dev.1)?;
        self.mounts.insert(dev, m.clone());
        Some(m)
    }
}

/// Bits of `File::activity` that count operations in flight.
const INFLIGHT_BITS: u32 = 24;
const INFLIGHT_MASK: u64 = (1 << INFLIGHT_BITS) - 1;

/// What [`File::begin_io`] saw when an operation started.
#[derive(Clone, Copy, Debug)]
pub struct IoStart(u64);

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn reopen(fd: RawFd, flags: i32) -> std::result::Result<RawFd, i32> {
    let path = CString::new(format!("/proc/self/fd/{fd}")).map_err(|_| libc::EINVAL)?;
    // SAFETY: `path` is a valid NUL-terminated string; open has no other preconditions.
    let nfd = unsafe { libc::open(path.as_ptr(), flags) };
    if nfd < 0 {
        Err(errno())
    } else {
        Ok(nfd)
    }
}

/// Parse /proc/self/mountinfo for the mount whose device is `major:minor`.
/// Field 3 is `major:minor`; after the ` - ` separator come fs type, source, super options.
pub fn parse_mountinfo(text: &str, major: u32, minor: u32) -> Option<MountInfo> {
    let want = format!("{major}:{minor}");
    let mut found = None;
    for line in text.lines() {
        let mut fields = line.split(' ');
        let dev = fields.nth(2);
        if dev != Some(want.as_str()) {
            continue;
        }
        let (pre, post) = line.split_once(" - ")?;
        let mount_opts = pre.split(' ').nth(5).unwrap_or("");
        let mut post = post.split(' ');
        let fs_type = post.next()?.to_string();
        let _source = post.next();
        let super_opts = post.next().unwrap_or("");
        // The last matching line is the one visible at the top of the mount stack.
        found = Some(MountInfo {
            fs_type,
            options: format!("{mount_opts},{super_opts}"),
        });
    }
    found
}

impl File {
    /// Probe and register `fd` (spec §5.3 steps 3–5).
    ///
    /// Errors: a bad descriptor or failed probe → `InternalError` (5030, as upstream);
    /// O_APPEND or O_PATH → `InvalidFileOpenFlag` (5019: positional writes cannot be
    /// honoured); anything but a regular file or block device → `InvalidFileType` (5018).
    pub fn probe(fd: RawFd) -> Result<File> {
        // SAFETY: statx writes only into `stx`, a properly sized, owned struct.
        let mut stx: libc::statx = unsafe { std::mem::zeroed() };
        let empty = c"";
        // SAFETY: `empty` is NUL-terminated and `stx` is valid for writes.
        let rc = unsafe {
            libc::statx(
                fd,
                empty.as_ptr(),
                libc::AT_EMPTY_PATH,
                libc::STATX_TYPE | libc::STATX_MODE | libc::STATX_DIOALIGN,
                &mut stx,
            )
        };
        if rc != 0 {
            let e = errno();
            log_warn!("hipFileHandleRegister: statx(fd {fd}) failed: errno {e}");
            return Err(OpError::InternalError.into());
        }
        // SAFETY: fcntl(F_GETFL) only reads the descriptor's flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            log_warn!(
                "hipFileHandleRegister: fcntl(fd {fd}, F_GETFL) failed: errno {}",
                errno()
            );
            return Err(OpError::InternalError.into());
        }
        if flags & libc::O_PATH != 0 || flags & libc::O_APPEND != 0 {
            log_warn!(
                "hipFileHandleRegister: fd {fd} was opened with {}: positional I/O cannot be honoured",
                if flags & libc::O_PATH != 0 { "O_PATH" } else { "O_APPEND" }
            );
            return Err(OpError::InvalidFileOpenFlag.into());
        }
        let fmt = stx.stx_mode as u32 & libc::S_IFMT;
        let is_regular_file = fmt == libc::S_IFREG;
        let is_block_device = fmt == libc::S_IFBLK;
        if !is_regular_file && !is_block_device {
            log_warn!(
                "hipFileHandleRegister: fd {fd} is not a regular file or block device (mode {:o})",
                stx.stx_mode
            );
            return Err(OpError::InvalidFileType.into());
        }
        let accmode = flags & libc::O_ACCMODE;
        let readable = accmode == libc::O_RDONLY || accmode == libc::O_RDWR;
        let writable = accmode == libc::O_WRONLY || accmode == libc::O_RDWR;
        let client_direct = flags & libc::O_DIRECT != 0;
        // Flags that are meaningful for a reopen: access mode plus a few behaviour bits.
        let keep = flags & (libc::O_ACCMODE | libc::O_NOATIME | libc::O_SYNC | libc::O_DSYNC);
        // statx says whether the filesystem takes O_DIRECT at all (a zero
        // offset alignment); without the answer (kernel < 6.1) the reopen tells.
        let dio_known = stx.stx_mask & libc::STATX_DIOALIGN != 0;
        let no_dio = dio_known && stx.stx_dio_offset_align == 0;

        let mut owned_fds = Vec::new();
        let direct_fd = std::sync::OnceLock::new();
        let buffered_fd = if client_direct {
            let b = reopen(fd, (keep | libc::O_CLOEXEC) & !libc::O_DIRECT).map_err(|e| {
                log_warn!(
                    "hipFileHandleRegister: reopening fd {fd} without O_DIRECT failed: errno {e}"
                );
                Error::Op(OpError::InternalError)
            })?;
            owned_fds.push(b);
            let _ = direct_fd.set(Some(fd));
            b
        } else {
            if no_dio {
                let _ = direct_fd.set(None);
            }
            fd
        };
        let (dio_mem_align, dio_offset_align) = if no_dio && !client_direct {
            (0, 0)
        } else if dio_known && stx.stx_dio_offset_align != 0 {
            (stx.stx_dio_mem_align, stx.stx_dio_offset_align)
        } else {
            (4096, 4096)
        };
        let dev = (stx.stx_dev_major, stx.stx_dev_minor);
        Ok(File {
            client_fd: fd,
            buffered_fd,
            direct_fd,
            owned_fds,
            client_direct,
            reopen_flags: keep | libc::O_DIRECT | libc::O_CLOEXEC,
            dev_ino: (
                libc::makedev(stx.stx_dev_major, stx.stx_dev_minor),
                stx.stx_ino,
            ),
            dev,
            readable,
            writable,
            dio_mem_align,
            dio_offset_align,
            is_block_device,
            is_regular_file,
            activity: AtomicU64::new(0),
            cache_streak: AtomicU32::new(0),
            write_gate: WriteGate::default(),
        })
    }

    /// The mount entry of the file's filesystem (cached per device; see
    /// `DeviceFacts`). A block device, or a file on a device the mount table
    /// does not list, reports "bdev" or "unknown".
    pub fn mount(&self) -> MountInfo {
        DeviceFacts::with(|f| f.mount(self.dev)).unwrap_or_else(|| MountInfo {
            fs_type: if self.is_block_device {
                "bdev".into()
            } else {
                "unknown".into()
            },
            options: String::new(),
        })
    }

    /// Whether small reads of this file may skip the page-cache probe
    /// ([`CACHE_TRUST`]). A load only: calling threads share the word.
    pub fn trusts_page_cache(&self) -> bool {
        self.cache_streak.load(Ordering::Relaxed) >= CACHE_TRUST
    }

    /// Record a page-cache probe: `hit`, the whole range was resident. Writes
    /// the shared word only while the streak grows or when a miss ends it,
    /// so a trusted file's readers leave its cache line shared.
    pub fn record_probe(&self, hit: bool) {
        let s = self.cache_streak.load(Ordering::Relaxed);
        if hit {
            if s < CACHE_TRUST {
                self.cache_streak.fetch_add(1, Ordering::Relaxed);
            }
        } else if s != 0 {
            self.cache_streak.store(0, Ordering::Relaxed);
        }
    }

    /// The O_DIRECT descriptor and its alignment, if O_DIRECT I/O is possible with
    /// the engine's bounce slots (alignment a power of two no larger than 4 KiB).
    /// The first call opens the descriptor.
    pub fn direct(&self) -> Option<(RawFd, u64)> {
        let a = self.usable_dio_align()?;
        let fd = (*self.direct_fd.get_or_init(|| self.open_direct()))?;
        Some((fd, a))
    }

    /// The O_DIRECT alignment, if the engine's bounce slots can meet it (a
    /// power of two no larger than [`MAX_DIO_ALIGN`]).
    fn usable_dio_align(&self) -> Option<u64> {
        let a = self.dio_offset_align.max(self.dio_mem_align) as u64;
        (a.is_power_of_two() && a as usize <= MAX_DIO_ALIGN).then_some(a)
    }

    /// True once the file is known to have no O_DIRECT way (the filesystem
    /// refused it, or its alignment does not suit the engine): every read of
    /// it goes through the page cache. False while that is not known yet.
    pub(crate) fn page_cache_only(&self) -> bool {
        self.usable_dio_align().is_none() || self.direct_fd.get() == Some(&None)
    }

    /// The alignment [`File::direct`] announces for offsets and lengths, and
    /// the memory alignment [`File::dio_fits`] asks of an address (both at
    /// least 1).
    pub(crate) fn dio_alignment(&self) -> (u64, u64) {
        let a = self.dio_offset_align.max(self.dio_mem_align).max(1) as u64;
        (a, self.dio_mem_align.max(1) as u64)
    }

    /// Whether an O_DIRECT transfer of `len` bytes at `off`, to or from
    /// address `addr` (None: an aligned bounce slot), fits alignment `align`
    /// (from [`File::direct`]) and the file's memory alignment. The one rule
    /// every path uses to pick O_DIRECT or the page cache, and so the one
    /// [`File::write_pass`] must agree with.
    pub(crate) fn dio_fits(&self, align: u64, off: u64, len: u64, addr: Option<u64>) -> bool {
        let mem = self.dio_mem_align.max(1) as u64;
        off % align == 0 && len % align == 0 && addr.is_none_or(|p| p % mem == 0)
    }

    /// Open the O_DIRECT descriptor through /proc/self/fd, and check that it
    /// reaches the inode that was registered. Any failure leaves the file on
    /// the page cache, with a log line: I/O still works, only slower.
    fn open_direct(&self) -> Option<RawFd> {
        let fd = self.client_fd;
        let d = match reopen(fd, self.reopen_flags) {
            Ok(d) => d,
            Err(libc::EINVAL) => {
                log_debug!(
                    "fd {fd}: the filesystem ({}) refuses O_DIRECT; page cache only",
                    self.mount().fs_type
                );
                return None;
            }
            Err(e) => {
                log_warn!("fd {fd}: reopening with O_DIRECT failed (errno {e}); page cache only");
                return None;
            }
        };
        // SAFETY: fstat writes only into `st`, an owned struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `d` is our descriptor and `st` is valid for writes.
        let same =
            unsafe { libc::fstat(d, &mut st) } == 0 && (st.st_dev, st.st_ino) == self.dev_ino;
        if !same {
            log_warn!(
                "fd {fd} no longer names the file registered under it (was it closed and \
                 reused?); staying on the page cache"
            );
            // SAFETY: we opened `d` and nothing else holds it.
            unsafe { libc::close(d) };
            return None;
        }
        Some(d)
    }

    /// Before a write where the kernel lacks `RWF_NOAPPEND` ([`noappend_flag`]):
    /// refuse it with 5019 (the code registration gives an O_APPEND
    /// descriptor) when the caller's descriptor has O_APPEND now, since the
    /// write would land at the end of the file instead of at its offset.
    /// One fcntl per write request, only on such kernels; a descriptor set to
    /// O_APPEND between this check and the write still appends there.
    pub fn check_append(&self) -> Result<()> {
        if noappend_flag() != 0 {
            return Ok(());
        }
        // SAFETY: fcntl(F_GETFL) only reads the descriptor's flags.
        let flags = unsafe { libc::fcntl(self.client_fd, libc::F_GETFL) };
        if flags >= 0 && flags & libc::O_APPEND != 0 {
            log_warn!(
                "write refused: fd {} has O_APPEND set since its registration, and this kernel \
                 lacks RWF_NOAPPEND, so the write would land at the end of the file, not at \
                 its offset",
                self.client_fd
            );
            return Err(OpError::InvalidFileOpenFlag.into());
        }
        Ok(())
    }

    /// Unit tests of the engine's I/O decisions: take `fd` (owned from now
    /// on, closed on drop) as the O_DIRECT descriptor, with `align`-byte
    /// alignment, and `client_direct` as the caller's open mode. The tests
    /// never do I/O through it.
    #[cfg(test)]
    pub(crate) fn set_direct_for_tests(&mut self, fd: RawFd, align: u32, client_direct: bool) {
        if let Some(Some(old)) = self.direct_fd.get() {
            if !self.client_direct {
                // SAFETY: opened lazily by `open_direct`; replaced, so closed here.
                unsafe { libc::close(*old) };
            }
        }
        self.direct_fd = std::sync::OnceLock::from(Some(fd));
        self.client_direct = client_direct;
        if client_direct {
            // Drop closes a client's O_DIRECT descriptor only when we own it.
            self.owned_fds.push(fd);
        }
        self.dio_mem_align = align;
        self.dio_offset_align = align;
    }

    pub fn busy(&self) -> bool {
        self.activity.load(Ordering::Acquire) & INFLIGHT_MASK > 0
    }

    /// Count an operation as started and in flight until [`File::end_io`].
    pub fn begin_io(&self) -> IoStart {
        IoStart(
            self.activity
                .fetch_add((1 << INFLIGHT_BITS) + 1, Ordering::AcqRel),
        )
    }

    pub fn end_io(&self) {
        self.activity.fetch_sub(1, Ordering::AcqRel);
    }

    /// True when the operation that `start` began has had this file to
    /// itself: nothing else was in flight when it started, nothing has
    /// started since, and it has not ended yet. (Operations of this
    /// registration only; other descriptors and processes are not seen.)
    pub fn alone_since(&self, start: IoStart) -> bool {
        start.0 & INFLIGHT_MASK == 0
            && self.activity.load(Ordering::Acquire)
                == start.0.wrapping_add((1 << INFLIGHT_BITS) + 1)
    }
}

/// Page-cache residency of `[off, off + len)` of `fd` without causing any I/O
/// (Linux 6.5 `cachestat`). `Some(true)`: every page is cached; `Some(false)`:
/// at least one is not; `None`: the kernel lacks cachestat (then callers probe
/// with RWF_NOWAIT, which can start readahead on a miss).
///
/// Why not only RWF_NOWAIT: a buffered NOWAIT read that misses still kicks off
/// readahead of the range, so every cold chunk was read twice (once by
/// readahead, once by O_DIRECT). On the H200 host that cut cold reads to 0.38x
/// of the disk's O_DIRECT rate.
pub fn fully_cached(fd: RawFd, off: u64, len: u64) -> Option<bool> {
    use std::sync::atomic::AtomicBool;
    static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
    if UNSUPPORTED.load(Ordering::Relaxed) || len == 0 {
        return None;
    }
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct CacheStat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451; // x86_64 and aarch64 alike
    let first = off & !4095;
    let end = (off + len).div_ceil(4096) * 4096;
    let range = Range {
        off: first,
        len: end - first,
    };
    let mut cs = CacheStat::default();
    // SAFETY: both pointers name live, correctly laid out locals.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, fd, &range, &mut cs, 0) };
    if r != 0 {
        let e = errno();
        if e == libc::ENOSYS || e == libc::EPERM {
            // Old kernel, or a seccomp filter that forbids it: stop asking.
            UNSUPPORTED.store(true, Ordering::Relaxed);
            log_debug!("cachestat unavailable (errno {e}); probing with RWF_NOWAIT");
        }
        return None;
    }
    Some(cs.nr_cache >= (end - first) / 4096)
}

/// `RWF_NOAPPEND` support: 0 not asked yet, 1 the kernel has it, 2 it does not.
static NOAPPEND: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The flags every positional write carries: `RWF_NOAPPEND` (Linux 6.9) where
/// the kernel has it, else none.
///
/// Registration refuses O_APPEND descriptors, but the application can set
/// O_APPEND with fcntl afterwards on its own descriptor, which the library
/// writes through (the buffered one, or the O_DIRECT one when the caller
/// opened it so); pwrite on it would then ignore the offset and append.
/// `RWF_NOAPPEND` makes each write positional whatever the descriptor's flags
/// are now. Without it, [`File::check_append`] refuses the write instead.
pub fn noappend_flag() -> libc::c_int {
    use std::sync::atomic::Ordering::Relaxed;
    match NOAPPEND.load(Relaxed) {
        1 => return libc::RWF_NOAPPEND,
        2 => return 0,
        _ => {}
    }
    let supported = probe_noappend();
    // A test may have forced the fallback meanwhile: keep its answer.
    let _ = NOAPPEND.compare_exchange(0, if supported { 1 } else { 2 }, Relaxed, Relaxed);
    if NOAPPEND.load(Relaxed) == 1 {
        libc::RWF_NOAPPEND
    } else {
        log_debug!("RWF_NOAPPEND unavailable: writes check the descriptor for O_APPEND");
        0
    }
}

/// Ask the kernel once: a one-byte `pwritev2(RWF_NOAPPEND)` into a pipe of
/// our own. A kernel without the flag refuses it (EOPNOTSUPP; EINVAL on some
/// emulations) before looking at the descriptor.
fn probe_noappend() -> bool {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we own and close below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return false;
    }
    let byte = 0u8;
    let iov = libc::iovec {
        iov_base: &byte as *const u8 as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: `iov` names one live byte; the descriptors are ours.
    let r = unsafe { libc::pwritev2(fds[1], &iov, 1, -1, libc::RWF_NOAPPEND) };
    // SAFETY: closing the descriptors pipe2 gave us, once each.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    r == 1
}

/// Behave as on a kernel without `RWF_NOAPPEND` from now on (tests of the
/// fallback on kernels that have it).
#[doc(hidden)]
pub fn disable_noappend_for_tests() {
    NOAPPEND.store(2, std::sync::atomic::Ordering::Relaxed);
}

/// The size of the file behind `fd`, or None when fstat fails.
pub fn size_of(fd: RawFd) -> Option<u64> {
    // SAFETY: fstat writes into a local stat struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` is valid for writes.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_size as u64)
}

/// Start writing `[off, off + len)` of `file` back to storage without waiting
/// for it (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), for a write whose caller
/// waits for durability: the fdatasync that ends the request then finds most
/// of its pages already on their way. Errors are left to that fdatasync.
pub fn start_writeback(file: &File, off: u64, len: usize) {
    // SAFETY: sync_file_range only names a descriptor and a range.
    unsafe {
        libc::sync_file_range(
            file.buffered_fd,
            off as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
}

impl Drop for File {
    fn drop(&mut self) {
        for &fd in &self.owned_fds {
            // SAFETY: we opened `fd` and close it exactly once, here.
            unsafe { libc::close(fd) };
        }
        if let Some(Some(fd)) = self.direct_fd.get() {
            if !self.client_direct {
                // SAFETY: opened lazily by `open_direct`, closed once, here.
                unsafe { libc::close(*fd) };
            }
        }
    }
}

/// Keeps a file marked busy while an operation uses it.
pub struct InflightGuard<'a>(&'a File);

impl<'a> InflightGuard<'a> {
    pub fn new(f: &'a File) -> Self {
        f.begin_io();
        InflightGuard(f)
    }
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.end_io();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    const MI: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
23 22 0:21 / /dev/shm rw,nosuid,nodev shared:2 - tmpfs tmpfs rw,size=1024k
24 22 8:2 / /data rw,relatime shared:3 - ext4 /dev/sda2 rw,data=writeback
25 22 8:3 / /x rw shared:4 - xfs /dev/sda3 rw,attr2";

    #[test]
    fn mountinfo_parsing() {
        let m = parse_mountinfo(MI, 8, 1).unwrap();
        assert_eq!(m.fs_type, "ext4");
        assert!(m.is_ext4_ordered(), "missing data= means ordered");
        let m = parse_mountinfo(MI, 8, 2).unwrap();
        assert!(!m.is_ext4_ordered());
        assert_eq!(parse_mountinfo(MI, 0, 21).unwrap().fs_type, "tmpfs");
        assert_eq!(parse_mountinfo(MI, 8, 3).unwrap().fs_type, "xfs");
        assert!(parse_mountinfo(MI, 9, 9).is_none());
    }

    fn test_dir() -> std::path::PathBuf {
        std::env::var("HIPFILE_TEST_DIR")
            .map(Into::into)
            .unwrap_or_else(|_| std::env::temp_dir())
    }

    /// The (device, inode) `fd` names now, if it is open.
    fn names(fd: RawFd) -> Option<(u64, u64)> {
        // SAFETY: fstat writes only into `st`, an owned struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is valid for writes; a closed fd gives EBADF.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    }

    #[test]
    fn registration_opens_no_descriptor_until_direct_io_is_wanted() {
        let path = test_dir().join(format!("hipfile-lazy-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let reg = File::probe(f.as_raw_fd()).unwrap();
        assert!(reg.direct_fd.get().is_none(), "probe opened a descriptor");
        let Some((dfd, _)) = reg.direct() else {
            std::fs::remove_file(&path).unwrap();
            return; // this filesystem refuses O_DIRECT: nothing is opened at all
        };
        assert_ne!(dfd, f.as_raw_fd());
        assert_eq!(
            names(dfd),
            Some(reg.dev_ino),
            "the O_DIRECT descriptor names the file"
        );
        // The second call reuses it.
        assert_eq!(reg.direct().unwrap().0, dfd);
        drop(reg);
        // Closed: the number is free, or another test's file took it since.
        assert_ne!(
            names(dfd),
            names(f.as_raw_fd()),
            "the O_DIRECT descriptor was not closed"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_reused_descriptor_number_never_reaches_the_other_file() {
        let dir = test_dir();
        let a = dir.join(format!("hipfile-reuse-a-{}", std::process::id()));
        let b = dir.join(format!("hipfile-reuse-b-{}", std::process::id()));
        std::fs::write(&a, vec![1u8; 4096]).unwrap();
        std::fs::write(&b, vec![2u8; 4096]).unwrap();
        let fa = std::fs::File::open(&a).unwrap();
        let reg = File::probe(fa.as_raw_fd()).unwrap();
        // The caller breaks the contract: the number now names file b.
        let fb = std::fs::File::open(&b).unwrap();
        // SAFETY: dup2 onto a descriptor this test owns.
        assert!(unsafe { libc::dup2(fb.as_raw_fd(), fa.as_raw_fd()) } >= 0);
        assert!(
            reg.direct().is_none(),
            "the lazy O_DIRECT reopen reached another inode"
        );
        drop(reg);
        std::fs::remove_file(&a).unwrap();
        std::fs::remove_file(&b).unwrap();
    }

    #[test]
    fn files_on_different_filesystems_get_their_own_mount_entry() {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mut seen = Vec::new();
        for dir in [test_dir(), "/dev/shm".into(), std::env::temp_dir()] {
            let path = dir.join(format!("hipfile-mnt-{}", std::process::id()));
            let Ok(f) = std::fs::File::create(&path) else {
                continue;
            };
            let reg = File::probe(f.as_raw_fd()).unwrap();
            let want = parse_mountinfo(&table, reg.dev.0, reg.dev.1).unwrap();
            assert_eq!(reg.mount(), want, "{}", dir.display());
            seen.push(want.fs_type);
            std::fs::remove_file(&path).unwrap();
        }
        assert!(seen.len() >= 2, "no two filesystems to compare: {seen:?}");
    }

    #[test]
    fn mounts_made_after_the_first_lookup_are_seen() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP mounts_made_after_the_first_lookup_are_seen: mounting needs root");
            return;
        }
        let dir = test_dir().join(format!("hipfile-mnt-late-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let probe_fs = |opts: &str| {
            let path = dir.join("f");
            let f = std::fs::File::create(&path).unwrap();
            let m = File::probe(f.as_raw_fd()).unwrap().mount();
            assert!(m.options.contains(opts), "{opts} not in {m:?}");
            m.fs_type
        };
        // A lookup first, so the cache is warm before the mount exists.
        assert_ne!(probe_fs(""), "tmpfs");
        let target = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        let mount = |flags: libc::c_ulong, data: &std::ffi::CStr| {
            // SAFETY: NUL-terminated strings; mounting a tmpfs on our own directory.
            unsafe {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    flags,
                    data.as_ptr().cast(),
                )
            }
        };
        if mount(0, c"size=1m") != 0 {
            eprintln!("SKIP mounts_made_after_the_first_lookup_are_seen: mount refused");
            return;
        }
        assert_eq!(probe_fs("size=1024k"), "tmpfs");
        // A remount keeps the device number: the change notification must
        // empty the cache.
        assert_eq!(mount(libc::MS_REMOUNT, c"size=2m"), 0);
        assert_eq!(probe_fs("size=2048k"), "tmpfs");
        // SAFETY: unmounting what this test mounted.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn alone_since_sees_operations_before_beside_and_after() {
        let path = std::env::temp_dir().join(format!("hipfile-alone-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let reg = File::probe(f.as_raw_fd()).unwrap();
        let a = reg.begin_io();
        assert!(reg.busy() && reg.alone_since(a));
        // Another one starts (and even ends) while `a` runs.
        let b = reg.begin_io();
        assert!(!reg.alone_since(a) && !reg.alone_since(b));
        reg.end_io();
        assert!(!reg.alone_since(a), "b ran beside a");
        reg.end_io();
        assert!(!reg.busy());
        // One at a time: each has the file to itself.
        let c = reg.begin_io();
        assert!(reg.alone_since(c));
        reg.end_io();
        assert!(!reg.alone_since(c), "c has ended");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn probe_regular_file_and_reject_others() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("hipfile-probe-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let reg = File::probe(f.as_raw_fd()).unwrap();
        assert!(reg.is_regular_file);
        assert!(reg.writable && !reg.readable);
        assert_eq!(reg.client_fd, f.as_raw_fd());
        drop(reg);
        // The client's descriptor stays open after the registration is gone.
        // SAFETY: fcntl(F_GETFD) on a descriptor we own only queries it.
        assert!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFD) } >= 0);

        let d = std::fs::File::open(&dir).unwrap();
        assert_eq!(
            File::probe(d.as_raw_fd()).unwrap_err(),
            Error::Op(OpError::InvalidFileType)
        );
        assert_eq!(
            File::probe(-1).unwrap_err(),
            Error::Op(OpError::InternalError)
        );
        let a = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        assert_eq!(
            File::probe(a.as_raw_fd()).unwrap_err(),
            Error::Op(OpError::InvalidFileOpenFlag)
        );
        std::fs::remove_file(&path).unwrap();
    }
}

/// Who writes to an O_DIRECT file now: O_DIRECT writes (any number at
/// once), or one write that goes through the page cache.
///
/// On a descriptor the caller opened with O_DIRECT, a write whose range or
/// source is not aligned goes through the page cache (O_DIRECT cannot take
/// it); an aligned one goes around it. When an O_DIRECT write meets a page
/// of its range that a concurrent page-cache write has dirtied, the kernel
/// cannot invalidate it ("Page cache invalidation failure on direct I/O"):
/// the O_DIRECT write fails with EIO and the file's mapping records EIO
/// for the next `fsync` or `fdatasync` of every descriptor of the file, the
/// application's own and other processes' included. Two threads writing
/// 1 MiB + 100 and 2 MiB + 100 bytes at offset 0 of such a file failed 13–42
/// % of their writes that way. So within the process a page-cache write to
/// an O_DIRECT file runs alone, and leaves the range written back and out
/// of the page cache before O_DIRECT writes resume. A page-cache writer
/// that waits goes first: new O_DIRECT writes wait behind it.
#[derive(Default, Debug)]
struct WriteGate {
    state: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Default, Debug)]
struct GateState {
    /// O_DIRECT writes holding a pass.
    direct: usize,
    /// A page-cache write holds the gate.
    cached: bool,
    /// Page-cache writes waiting for it.
    cached_waiting: usize,
    /// O_DIRECT writes waiting for it.
    direct_waiting: usize,
}

impl WriteGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(
        &self,
        g: std::sync::MutexGuard<'a, GateState>,
    ) -> std::sync::MutexGuard<'a, GateState> {
        self.cv.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    fn enter_direct(&self) {
        let mut g = self.lock();
        while g.cached || g.cached_waiting > 0 {
            g.direct_waiting += 1;
            g = self.wait(g);
            g.direct_waiting -= 1;
        }
        g.direct += 1;
    }

    fn enter_cached(&self) {
        let mut g = self.lock();
        g.cached_waiting += 1;
        while g.cached || g.direct > 0 {
            g = self.wait(g);
        }
        g.cached_waiting -= 1;
        g.cached = true;
    }

    fn leave(&self, cached: bool) {
        let mut g = self.lock();
        if cached {
            g.cached = false;
        } else {
            g.direct -= 1;
        }
        let waiting = g.cached_waiting + g.direct_waiting > 0;
        drop(g);
        if waiting {
            self.cv.notify_all();
        }
    }
}

/// What a write holds while it runs ([`File::write_pass`]); let go when
/// dropped, after a page-cache write's range has been written back and
/// dropped from the page cache.
pub(crate) struct WritePass {
    held: Option<Held>,
}

/// The gate a [`WritePass`] holds: its file, and for a page-cache write the
/// page range to write back and drop.
struct Held {
    file: Arc<File>,
    cached: Option<(u64, u64)>,
}

impl WritePass {
    /// Nothing to keep apart (not an O_DIRECT descriptor).
    pub(crate) fn none() -> WritePass {
        WritePass { held: None }
    }

    /// True when the pass holds the gate.
    pub(crate) fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// Write a page-cache write's range back and drop it from the page
    /// cache, then let the gate go. The write-back's error, if any (the
    /// bytes are then not known to be on the device).
    pub(crate) fn finish(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        let Some(Held { file, cached }) = self.held.take() else {
            return Ok(());
        };
        let mut r = Ok(());
        if let Some((off, len)) = cached {
            let fd = file.buffered_fd;
            // SAFETY: sync_file_range and posix_fadvise only name a
            // descriptor and a range.
            unsafe {
                let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER;
                if libc::sync_file_range(fd, off as i64, len as i64, how) != 0 {
                    r = Err(Error::last_os());
                }
                libc::posix_fadvise(fd, off as i64, len as i64, libc::POSIX_FADV_DONTNEED);
            }
        }
        file.write_gate.leave(cached.is_some());
        r
    }
}

impl Drop for WritePass {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

impl File {
    /// The pass a write of `len` bytes at `off` must hold while it runs (see
    /// [`WriteGate`]); blocks while the other kind of write runs. `host_src`
    /// is the source's address when it is host memory the write is made from
    /// directly (device memory goes through aligned bounce slots). On a
    /// descriptor not opened with O_DIRECT, or a file without an O_DIRECT
    /// path, every write goes through the page cache and there is nothing to
    /// keep apart.
    pub(crate) fn write_pass(
        self: &Arc<Self>,
        off: u64,
        len: usize,
        host_src: Option<u64>,
    ) -> WritePass {
        if !self.client_direct || len == 0 {
            return WritePass::none();
        }
        let Some((_, a)) = self.direct() else {
            return WritePass::none();
        };
        let cached = if self.dio_fits(a, off, len as u64, host_src) {
            self.write_gate.enter_direct();
            None
        } else {
            self.write_gate.enter_cached();
            // The whole pages the write touches.
            let start = off - off % PAGE;
            let end = (off + len as u64).next_multiple_of(PAGE);
            Some((start, end - start))
        };
        WritePass {
            held: Some(Held {
                file: self.clone(),
                cached,
            }),
        }
    }
}

/// The page size the page cache works in.
const PAGE: u64 = 4096;
