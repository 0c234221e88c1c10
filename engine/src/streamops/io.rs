//! File I/O of the stream service: positional reads and writes between a
//! file and host memory (a pinned stage slot or the caller's host buffer),
//! with the engine's read-mode rules, and a fault hook for tests. What each
//! result means (retry, fall back to the page cache, EOF, fail) is
//! [`crate::errno`]'s table, as for the workers and the inline path.
//! Nothing here touches a GPU.

use crate::config::ReadMode;
use crate::errno::{take_retry, verdict, Verdict, Way};
use crate::error::{Error, OpError, Result};
use crate::file::File;
use crate::log::Level;
use crate::log_once;
use crate::ring::Op;
#[cfg(feature = "testing")]
use crate::ring::{Cqe, FaultPlan};
use crate::worker::Faults;
use std::sync::Arc;

/// Per-thread I/O context: with the `testing` feature, a fault plan that
/// rewrites each call's result as it would a ring completion.
#[derive(Default)]
pub(crate) struct IoCtx {
    #[cfg(feature = "testing")]
    pub faults: Option<Box<dyn FaultPlan>>,
}

impl IoCtx {
    /// The context of I/O thread `n`: the fault plan `faults` makes for it,
    /// if tests gave a factory.
    #[cfg_attr(not(feature = "testing"), allow(unused_variables))]
    pub(crate) fn new(faults: &Faults, n: usize) -> IoCtx {
        match faults {
            None => IoCtx::default(),
            #[cfg(feature = "testing")]
            Some(f) => IoCtx { faults: f(n) },
            #[cfg(not(feature = "testing"))]
            Some(never) => match *never {},
        }
    }

    /// The result of one call after the fault plan (bytes or −errno).
    #[cfg(not(feature = "testing"))]
    fn filter(&mut self, _op: Op, r: i64) -> i64 {
        r
    }

    /// The result of one call after the fault plan (bytes or −errno).
    #[cfg(feature = "testing")]
    fn filter(&mut self, op: Op, r: i64) -> i64 {
        let Some(plan) = self.faults.as_mut() else {
            return r;
        };
        let mut out = Vec::with_capacity(1);
        plan.on_complete(
            &op,
            Cqe {
                user_data: 0,
                result: r as i32,
            },
            &mut out,
        );
        // The call is synchronous: a completion the plan holds back comes out now.
        plan.flush(&mut out);
        out.first().map_or(r, |c| c.result as i64)
    }
}

/// Should a read of `len` bytes at `off` go around the page cache? Only
/// where O_DIRECT can serve it (offset aligned), and then: always for
/// `HIPFILE_READ_MODE=direct` or a descriptor the caller opened with
/// O_DIRECT, and in auto mode when `cachestat` says part of it is not cached.
pub(crate) fn wants_direct(file: &File, off: u64, len: usize, mode: ReadMode) -> bool {
    let Some((_, align)) = file.direct() else {
        return false;
    };
    if off % align != 0 {
        return false;
    }
    match mode {
        ReadMode::Buffered => false,
        ReadMode::Direct => true,
        ReadMode::Auto => {
            file.client_direct
                || crate::file::fully_cached(file.buffered_fd, off, len as u64) == Some(false)
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Read up to `len` bytes at `off` into `dst`. `room` (≥ `len`) bytes at
/// `dst` may be written: an O_DIRECT read rounds its length up to the
/// alignment. Returns the bytes read (short only at EOF) and whether the
/// reads went around the page cache.
///
/// # Safety
/// `dst..dst+room` must be writable memory that nothing else uses meanwhile.
pub(crate) unsafe fn read_into(
    ctx: &mut IoCtx,
    file: &File,
    dst: *mut u8,
    len: usize,
    room: usize,
    off: u64,
    direct: bool,
) -> Result<(usize, bool)> {
    let mut direct = direct;
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < len {
        let pos = off + done as u64;
        // SAFETY: done < len <= room.
        let p = unsafe { dst.add(done) };
        let (fd, want, way) = match file.direct() {
            Some((dfd, a)) if direct => {
                let want = (len - done).next_multiple_of(a as usize);
                let mem_ok = p as u64 % file.dio_mem_align.max(1) as u64 == 0;
                if pos % a != 0 || !mem_ok || want > room - done {
                    direct = false;
                    continue;
                }
                (dfd, want, Way::DirectRead)
            }
            _ => (file.buffered_fd, len - done, Way::BufferedRead),
        };
        // SAFETY: `p..p+want` lies within `dst..dst+room` (checked above for
        // O_DIRECT; want = len - done otherwise), which the caller lent us.
        let r = unsafe { libc::pread(fd, p.cast(), want, pos as i64) };
        let r = if r < 0 { -(errno() as i64) } else { r as i64 };
        let op = Op::Read {
            fd,
            buf: p,
            len: want as u32,
            offset: pos,
            fixed: None,
            nowait: false,
        };
        let r = ctx.filter(op, r);
        match verdict(way, r as isize, want) {
            // An O_DIRECT read asks for its length rounded up to the
            // alignment: only the first `len - done` bytes are the caller's.
            Verdict::Complete(n) | Verdict::Short(n) => done += n.min(len - done),
            Verdict::Eof => break,
            Verdict::Retry(e) => take_retry(&mut retries, e).map_err(Error::Os)?,
            Verdict::FallBack => {
                log_once!(
                    Level::Warn,
                    "an O_DIRECT read was refused with EINVAL; stream reads of such \
                     ranges use the page cache"
                );
                direct = false;
            }
            Verdict::Fail(e) => return Err(Error::Os(e)),
            Verdict::Miss => return Err(internal("a page-cache miss on a blocking read")),
        }
    }
    Ok((done, direct))
}

/// Write `len` bytes from `src` at `off`, looping over short writes.
/// Returns the bytes written and whether they went around the page cache.
///
/// # Safety
/// `src..src+len` must be readable and unchanged until the call returns.
pub(crate) unsafe fn write_from(
    ctx: &mut IoCtx,
    file: &Arc<File>,
    src: *const u8,
    len: usize,
    off: u64,
) -> Result<(usize, bool)> {
    // Apart from this process's writes of the other kind (File::write_pass).
    let pass = file.write_pass(off, len, Some(src as u64));
    // SAFETY: the caller's promise is passed on.
    let r = unsafe { write_unpassed(ctx, file, src, len, off) };
    let flushed = pass.finish();
    let (n, direct) = r?;
    flushed?;
    Ok((n, direct))
}

/// [`write_from`] without the pass.
///
/// # Safety
/// As for [`write_from`].
unsafe fn write_unpassed(
    ctx: &mut IoCtx,
    file: &File,
    src: *const u8,
    len: usize,
    off: u64,
) -> Result<(usize, bool)> {
    // Positional whatever the descriptor's flags are now; where the kernel
    // lacks RWF_NOAPPEND, a descriptor that has gained O_APPEND is refused
    // (5019) rather than appended to.
    let flags = crate::file::noappend_flag();
    if flags == 0 {
        file.check_append()?;
    }
    // Writes go around the page cache only where the caller asked for that
    // by opening the file with O_DIRECT (as the sync path). `direct()` is not
    // asked otherwise: it would open a descriptor.
    let mut fd = match file.client_direct.then(|| file.direct()).flatten() {
        Some((dfd, a)) if file.dio_fits(a, off, len as u64, Some(src as u64)) => dfd,
        _ => file.buffered_fd,
    };
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < len {
        let pos = off + done as u64;
        // SAFETY: done < len.
        let p = unsafe { src.add(done) };
        let iov = libc::iovec {
            iov_base: p.cast_mut().cast(),
            iov_len: len - done,
        };
        // SAFETY: `p..p+len-done` lies within the caller's range.
        let r = unsafe { libc::pwritev2(fd, &iov, 1, pos as i64, flags) };
        let r = if r < 0 { -(errno() as i64) } else { r as i64 };
        let op = Op::Write {
            fd,
            buf: p,
            len: (len - done) as u32,
            offset: pos,
            fixed: None,
        };
        let r = ctx.filter(op, r);
        let way = if fd == file.buffered_fd {
            Way::BufferedWrite
        } else {
            Way::DirectWrite
        };
        match verdict(way, r as isize, len - done) {
            Verdict::Complete(n) | Verdict::Short(n) => done += n.min(len - done),
            Verdict::Retry(e) => take_retry(&mut retries, e).map_err(Error::Os)?,
            Verdict::FallBack => {
                log_once!(
                    Level::Warn,
                    "an O_DIRECT write was refused with EINVAL; stream writes of such \
                     ranges use the page cache"
                );
                fd = file.buffered_fd;
            }
            Verdict::Fail(e) => return Err(Error::Os(e)),
            Verdict::Eof | Verdict::Miss => return Err(internal("a read verdict for a write")),
        }
    }
    Ok((done, fd != file.buffered_fd))
}

/// A state the code cannot be in: logged, and the op fails.
fn internal(what: &str) -> Error {
    crate::log_error!("internal error: stream I/O: {what}");
    OpError::InternalError.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchFile;
    use std::os::fd::AsRawFd;

    fn file_of(s: &ScratchFile) -> File {
        File::probe(s.file.as_raw_fd()).unwrap()
    }

    fn contents(s: &ScratchFile) -> Vec<u8> {
        std::fs::read(&s.path).unwrap()
    }

    #[test]
    fn a_stream_write_lands_at_its_offset_after_the_caller_sets_o_append() {
        let s = ScratchFile::new("sio-append", b"abcdefgh");
        let f = file_of(&s);
        let fd = s.file.as_raw_fd();
        // SAFETY: fcntl only changes our descriptor's flags.
        unsafe {
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_APPEND,
            )
        };
        let data = *b"XY";
        // SAFETY: `data` is live for the call.
        let r = unsafe { write_from(&mut IoCtx::default(), &Arc::new(f), data.as_ptr(), 2, 2) };
        if crate::file::noappend_flag() != 0 {
            assert_eq!(r, Ok((2, false)));
            assert_eq!(contents(&s), b"abXYefgh");
        } else {
            // No RWF_NOAPPEND: refused rather than appended.
            assert_eq!(r, Err(OpError::InvalidFileOpenFlag.into()));
            assert_eq!(contents(&s), b"abcdefgh");
        }
    }

    #[test]
    fn a_stream_read_stops_at_the_end_of_the_file() {
        let s = ScratchFile::new("sio-eof", b"0123456789");
        let f = file_of(&s);
        let mut buf = [0u8; 16];
        // SAFETY: `buf` is live and ours for the call.
        let r = unsafe {
            read_into(
                &mut IoCtx::default(),
                &f,
                buf.as_mut_ptr(),
                16,
                16,
                4,
                false,
            )
        };
        assert_eq!(r, Ok((6, false)));
        assert_eq!(&buf[..6], b"456789");
    }

    #[test]
    fn a_stream_read_of_a_bad_descriptor_fails_with_its_errno() {
        let s = ScratchFile::new("sio-ebadf", b"0123");
        let mut f = file_of(&s);
        f.buffered_fd = -1;
        let mut buf = [0u8; 4];
        // SAFETY: `buf` is live and ours for the call.
        let r = unsafe { read_into(&mut IoCtx::default(), &f, buf.as_mut_ptr(), 4, 4, 0, false) };
        assert_eq!(r, Err(Error::Os(libc::EBADF)));
    }
}
