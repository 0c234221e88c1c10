//! The data file: a deterministic pattern, its creation, checks against it,
//! and dropping the file's page cache (`--invalidate`).
//!
//! Pattern: the 8-byte little-endian word at file offset `o` (a multiple of 8)
//! is `o ^ PATTERN_KEY`, so every byte says where in the file it belongs: a
//! block landing at the wrong offset or the wrong place of a buffer is caught,
//! not just a corrupted byte. Byte `p` is byte `p % 8` of the word at `p & !7`.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

pub const PATTERN_KEY: u64 = 0x9e37_79b9_7f4a_7c15;

/// The word that holds file byte `p`.
#[inline]
fn word_at(p: u64) -> u64 {
    (p & !7) ^ PATTERN_KEY
}

/// The pattern byte at file offset `p`.
#[inline]
pub fn byte_at(p: u64) -> u8 {
    word_at(p).to_le_bytes()[(p & 7) as usize]
}

/// Fill `buf` with the pattern of the file range starting at `file_offset`.
pub fn fill(buf: &mut [u8], file_offset: u64) {
    let mut i = 0usize;
    // Unaligned head, byte by byte, until the file offset is a multiple of 8.
    while i < buf.len() && (file_offset + i as u64) % 8 != 0 {
        buf[i] = byte_at(file_offset + i as u64);
        i += 1;
    }
    let mut chunks = buf[i..].chunks_exact_mut(8);
    let mut p = file_offset + i as u64;
    for c in &mut chunks {
        c.copy_from_slice(&word_at(p).to_le_bytes());
        p += 8;
    }
    for (k, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b = byte_at(p + k as u64);
    }
}

/// The first file offset in `buf` (which holds the file from `file_offset`)
/// whose byte differs from the pattern, with the byte found and the byte expected.
pub fn check(buf: &[u8], file_offset: u64) -> Option<(u64, u8, u8)> {
    let mut i = 0usize;
    while i < buf.len() && (file_offset + i as u64) % 8 != 0 {
        let p = file_offset + i as u64;
        if buf[i] != byte_at(p) {
            return Some((p, buf[i], byte_at(p)));
        }
        i += 1;
    }
    let body = &buf[i..];
    let mut p = file_offset + i as u64;
    let mut chunks = body.chunks_exact(8);
    for c in &mut chunks {
        let want = word_at(p).to_le_bytes();
        if c != want {
            // The first differing byte inside this word.
            let k = (0..8).find(|&k| c[k] != want[k]).unwrap_or(0);
            return Some((p + k as u64, c[k], want[k]));
        }
        p += 8;
    }
    for (k, &b) in chunks.remainder().iter().enumerate() {
        let q = p + k as u64;
        if b != byte_at(q) {
            return Some((q, b, byte_at(q)));
        }
    }
    None
}

fn cpath(path: &str) -> io::Result<CString> {
    CString::new(path).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in file name"))
}

/// The size of `path` (block devices too), or None when it does not exist.
pub fn file_size(path: &str) -> io::Result<Option<u64>> {
    use std::io::Seek;
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        // Block devices report 0 in their metadata; their end is their size.
        Ok(m) if m.file_type().is_block_device() => {
            Ok(Some(std::fs::File::open(path)?.seek(io::SeekFrom::End(0))?))
        }
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Bytes per buffered write when laying out the file.
const LAYOUT_CHUNK_BYTES: usize = 8 << 20;

/// Make sure `path` holds at least `end` bytes of pattern: create the file, or
/// extend it from its current size, with large buffered writes, then (with
/// `sync`) one fdatasync. Returns the bytes written (0 when the file was big
/// enough).
pub fn ensure_file(path: &str, end: u64, sync: bool) -> io::Result<u64> {
    let have = file_size(path)?.unwrap_or(0);
    if have >= end {
        return Ok(0);
    }
    let c = cpath(path)?;
    // SAFETY: `c` is a NUL-terminated path; open has no other preconditions.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let r = write_pattern(fd, have, end, sync);
    // SAFETY: fd is ours and open.
    unsafe { libc::close(fd) };
    r.map(|_| end - have)
}

/// Write the pattern for `[from, end)` at those offsets of `fd`, then
/// (with `sync`) fdatasync.
fn write_pattern(fd: RawFd, from: u64, end: u64, sync: bool) -> io::Result<()> {
    let mut buf = vec![0u8; LAYOUT_CHUNK_BYTES];
    let mut pos = from;
    while pos < end {
        let n = ((end - pos) as usize).min(LAYOUT_CHUNK_BYTES);
        fill(&mut buf[..n], pos);
        let mut done = 0usize;
        while done < n {
            // SAFETY: buf[done..n] is initialised memory we own.
            let r = unsafe {
                libc::pwrite(
                    fd,
                    buf[done..].as_ptr().cast(),
                    n - done,
                    (pos + done as u64) as libc::off_t,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            if r == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwrite wrote 0 bytes",
                ));
            }
            done += r as usize;
        }
        pos += n as u64;
    }
    // SAFETY: fdatasync only names a descriptor.
    if sync && unsafe { libc::fdatasync(fd) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How much of a file range the page cache holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheState {
    pub resident_pages: u64,
    pub total_pages: u64,
}

fn page_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// fio's `invalidate=1`: write back dirty pages (fdatasync) and ask the kernel
/// to drop the range's page cache (POSIX_FADV_DONTNEED), then count what it
/// kept with mincore (tmpfs, for one, keeps everything: its pages are the file).
pub fn invalidate(path: &str, offset: u64, len: u64) -> io::Result<Option<CacheState>> {
    let c = cpath(path)?;
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is ours; these calls only name it.
    let r = unsafe {
        libc::fdatasync(fd);
        libc::posix_fadvise(
            fd,
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    let state = if r == 0 {
        resident(fd, offset, len).ok()
    } else {
        None
    };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(state)
}

/// fio's `pre_read=1`: read the range once (buffered), so the page cache holds it.
pub fn pre_read(path: &str, offset: u64, len: u64) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is ours; WILLNEED only starts readahead.
    unsafe {
        libc::posix_fadvise(
            fd,
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        )
    };
    let mut buf = vec![0u8; LAYOUT_CHUNK_BYTES];
    let mut pos = offset;
    let end = offset + len;
    let mut res = Ok(());
    while pos < end {
        let n = ((end - pos) as usize).min(buf.len());
        // SAFETY: buf has n writable bytes.
        let r = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), n, pos as libc::off_t) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            res = Err(e);
            break;
        }
        if r == 0 {
            break;
        }
        pos += r as u64;
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    res
}

/// The page-cache residency of a file range (mincore), or None when it
/// cannot be told (the file cannot be mapped, e.g. a block device).
pub fn residency(path: &str, offset: u64, len: u64) -> Option<CacheState> {
    let c = cpath(path).ok()?;
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let st = resident(fd, offset, len).ok();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    st
}

/// Pages of `fd`'s `[offset, offset + len)` in the page cache (mincore over a
/// read-only mapping, 1 GiB at a time; the mapping is never touched).
pub fn resident(fd: RawFd, offset: u64, len: u64) -> io::Result<CacheState> {
    let page = page_bytes();
    let start = offset / page * page;
    let end = offset + len;
    let window = 1u64 << 30;
    let mut st = CacheState {
        resident_pages: 0,
        total_pages: 0,
    };
    let mut vec = vec![0u8; (end.saturating_sub(start).min(window)).div_ceil(page) as usize];
    let mut pos = start;
    while pos < end {
        let n = (end - pos).min(window);
        // SAFETY: a fresh shared read-only mapping of our descriptor; no pointer into it is kept.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                pos as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let pages = n.div_ceil(page) as usize;
        // SAFETY: p..p+n is our mapping; vec holds at least `pages` bytes.
        let r = unsafe { libc::mincore(p, n as usize, vec.as_mut_ptr()) };
        let err = io::Error::last_os_error();
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(p, n as usize) };
        if r != 0 {
            return Err(err);
        }
        st.total_pages += pages as u64;
        st.resident_pages += vec[..pages].iter().filter(|&&b| b & 1 != 0).count() as u64;
        pos += n;
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_position_dependent_and_consistent() {
        let mut a = vec![0u8; 4096];
        fill(&mut a, 0);
        assert_eq!(&a[0..8], &PATTERN_KEY.to_le_bytes());
        assert_eq!(&a[8..16], &(8 ^ PATTERN_KEY).to_le_bytes());
        // Any sub-range filled at its own offset matches the big buffer, whatever the alignment.
        for (off, len) in [
            (1usize, 7usize),
            (3, 100),
            (8, 8),
            (13, 1000),
            (4000, 96),
            (5, 0),
        ] {
            let mut b = vec![0u8; len];
            fill(&mut b, off as u64);
            assert_eq!(&b[..], &a[off..off + len], "offset {off} len {len}");
            assert_eq!(check(&a[off..off + len], off as u64), None);
        }
        // Two different blocks differ.
        let mut c = vec![0u8; 4096];
        fill(&mut c, 4096);
        assert_ne!(a, c);
    }

    #[test]
    fn check_reports_the_first_bad_offset() {
        let mut a = vec![0u8; 1000];
        fill(&mut a, 12345);
        assert_eq!(check(&a, 12345), None);
        let want = a[500];
        a[500] ^= 0xff;
        a[700] ^= 1;
        assert_eq!(check(&a, 12345), Some((12845, want ^ 0xff, want)));
        // A block read from the wrong place fails at its first byte.
        let mut b = vec![0u8; 64];
        fill(&mut b, 64);
        assert_eq!(check(&b, 0).map(|x| x.0), Some(0));
        // Errors in the unaligned head and tail are found too.
        let mut t = vec![0u8; 21];
        fill(&mut t, 3);
        t[20] ^= 4;
        assert_eq!(check(&t, 3).map(|x| x.0), Some(23));
        t[20] ^= 4;
        t[1] ^= 4;
        assert_eq!(check(&t, 3).map(|x| x.0), Some(4));
    }

    #[test]
    fn file_is_created_and_extended_with_the_pattern() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("hipfile-bench-test-{}", std::process::id()));
        let p = path.to_str().unwrap();
        let _ = std::fs::remove_file(p);
        assert_eq!(file_size(p).unwrap(), None);
        assert_eq!(ensure_file(p, 100_000, true).unwrap(), 100_000);
        assert_eq!(ensure_file(p, 50_000, true).unwrap(), 0);
        assert_eq!(ensure_file(p, 9 << 20, false).unwrap(), (9 << 20) - 100_000);
        let data = std::fs::read(p).unwrap();
        assert_eq!(data.len(), 9 << 20);
        assert_eq!(check(&data, 0), None);
        let st = invalidate(p, 0, data.len() as u64).unwrap();
        if let Some(st) = st {
            assert_eq!(st.total_pages, (9u64 << 20).div_ceil(page_bytes()));
            assert!(st.resident_pages <= st.total_pages);
        }
        std::fs::remove_file(p).unwrap();
    }
}
