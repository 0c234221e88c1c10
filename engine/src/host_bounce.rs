//! O_DIRECT reads into a caller's host memory, through a huge page.
//!
//! A block device reads into a list of physically contiguous runs of memory
//! (segments), and a virtio disk spends time on each one. The buffers
//! programs pass (malloc, posix_memalign, NumPy arrays) are faulted in 4 KiB
//! pages that seldom lie next to each other physically, so a 1 MiB O_DIRECT
//! read into one carries some 200–256 segments, and past the queue's
//! `max_segments` the block layer splits it. Into a 2 MiB transparent huge
//! page the same read is one segment. On the 2-core VM's virtio disk that is
//! about 0.9 µs of disk time per segment saved (a 1 MiB request took about
//! 620 µs into 4 KiB pages and 400 µs into a huge page), while copying a
//! 4 KiB page out costs the CPU about 0.3 µs.
//!
//! So a read that goes to the disk with O_DIRECT and spans more than
//! [`MIN_BYTES`] is read into a huge page and copied out: on the caller's
//! thread into a per-thread page ([`pread`]), on a worker into a slot of its
//! huge-page slab (`worker::chunk`). Reads served from the page cache never
//! come here: the kernel copies those already, and a second copy would be
//! pure cost. Nor do reads into memory that is physically contiguous already
//! (huge-page mappings, small pages that lie in order: `crate::pagemap`).

use crate::errno::{libc_result, take_retry, verdict, Verdict, Way};
use crate::error::{Error, OpError, Result};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Reads of at most this many bytes go straight into the caller's memory:
/// 16 pages are at most 16 segments (about 14 µs of a read that takes
/// 100 µs or more), and a program that reads only small blocks never maps a
/// huge page for them. It is also the workers' small-slot size, so 4 KiB
/// random reads keep their slots.
pub const MIN_BYTES: usize = 64 << 10;

/// Bytes of one bounce: one huge page.
pub const PAGE_BYTES: usize = 2 << 20;

/// Huge pages the threads of a process may hold at once (64 MiB): a program
/// with more threads reading cold data reads straight on the others.
const MAX_PAGES: usize = 32;

/// Whether an O_DIRECT read of `len` bytes into a caller's host memory of
/// small pages should go through a huge page.
pub fn worth_it(len: usize) -> bool {
    len > MIN_BYTES
}

/// Whether an O_DIRECT read of `len` bytes into the caller's host memory at
/// `dst` should go through a huge page: it spans more than [`MIN_BYTES`], and
/// the memory is not known to be physically contiguous (a huge-page mapping,
/// or pages that happen to lie in order: `crate::pagemap`), in which case
/// the read goes straight and skips the copy.
pub fn scattered(dst: usize, len: usize) -> bool {
    worth_it(len) && !crate::pagemap::few_segments(dst, len)
}

/// Read up to [`PAGE_BYTES`] of `len` bytes at `off` from `fd` (an O_DIRECT
/// descriptor) into this thread's huge page, and copy what was read to
/// `dst`. Returns what `pread` returned (a count, or `-errno`; a bad `dst`
/// gives `-EFAULT`, as a read straight into it would), or None when this
/// thread has no huge page to read into (THP off or short, or the process's
/// pages are all held): then the caller reads straight.
pub(crate) fn pread(fd: i32, dst: usize, len: usize, off: u64) -> Option<isize> {
    PAGE.with(|cell| {
        let mut state = cell.borrow_mut();
        if matches!(*state, State::Untried) {
            *state = HugePage::make();
        }
        let State::Have(page) = &*state else {
            return None;
        };
        let len = len.min(PAGE_BYTES);
        // SAFETY: the page is ours and spans PAGE_BYTES >= len bytes.
        let r = unsafe { libc::pread(fd, page.base.cast(), len, off as i64) };
        let r = libc_result(r);
        if r > 0 {
            match copy_to_caller(page.base, dst, r as usize) {
                Ok(()) => {}
                Err(Error::Os(errno)) => return Some(-(errno as isize)),
                Err(_) => return Some(-(libc::EIO as isize)),
            }
        }
        Some(r)
    })
}

enum State {
    /// Not asked for yet (or the process's pages were all held then).
    Untried,
    Have(HugePage),
    /// The kernel gave no huge page: this thread reads straight.
    Refused,
}

thread_local! {
    static PAGE: RefCell<State> = const { RefCell::new(State::Untried) };
    /// Tests: behave as if THP were off, on this thread.
    static NO_THP: Cell<bool> = const { Cell::new(false) };
}

/// Pages held by the process's threads now.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// One 2 MiB transparent huge page, mapped for this thread.
struct HugePage {
    base: *mut u8,
}

impl HugePage {
    /// A huge page, or why not: [`State::Refused`] when the kernel has THP
    /// off or could not give one, [`State::Untried`] while the process holds
    /// [`MAX_PAGES`].
    fn make() -> State {
        if NO_THP.get() || !crate::bounce::thp_allowed() {
            return State::Refused;
        }
        let reserved = HELD.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < MAX_PAGES).then_some(n + 1)
        });
        if reserved.is_err() {
            return State::Untried;
        }
        match map_huge_page() {
            Some(base) => State::Have(HugePage { base }),
            None => {
                HELD.fetch_sub(1, Ordering::Relaxed);
                State::Refused
            }
        }
    }
}

impl Drop for HugePage {
    fn drop(&mut self) {
        // SAFETY: `base` is the 2 MiB mapping made by map_huge_page, unmapped once.
        unsafe { libc::munmap(self.base.cast(), PAGE_BYTES) };
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Map 2 MiB on a 2 MiB boundary backed by one transparent huge page, or
/// None. The kernel places a huge page only at an aligned 2 MiB of an
/// madvised range, so 4 MiB are mapped and the slack around the aligned
/// half unmapped. After the first touch, MADV_COLLAPSE says whether the
/// page is really huge (a fault falls back to 4 KiB pages when compaction
/// finds no free 2 MiB); a kernel without it (before 6.1) is trusted.
fn map_huge_page() -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping with no address hint.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * PAGE_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let map = p as usize;
    let base = map.next_multiple_of(PAGE_BYTES);
    // SAFETY: head and tail are the parts of our fresh mapping outside
    // [base, base + PAGE_BYTES), which lies inside it (PAGE_BYTES of slack).
    unsafe {
        if base > map {
            libc::munmap(map as *mut libc::c_void, base - map);
        }
        let tail = map + 2 * PAGE_BYTES - (base + PAGE_BYTES);
        if tail > 0 {
            libc::munmap((base + PAGE_BYTES) as *mut libc::c_void, tail);
        }
    }
    let base = base as *mut u8;
    const MADV_COLLAPSE: i32 = 25;
    // SAFETY: advice and a first touch on our own mapping of PAGE_BYTES.
    let huge = unsafe {
        libc::madvise(base.cast(), PAGE_BYTES, libc::MADV_HUGEPAGE) == 0 && {
            base.write(0);
            libc::madvise(base.cast(), PAGE_BYTES, MADV_COLLAPSE) == 0
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
        }
    };
    if !huge {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(base.cast(), PAGE_BYTES) };
        return None;
    }
    Some(base)
}

/// Tests: make this thread behave as if THP were off (for its huge page not
/// yet made).
#[cfg(any(test, feature = "testing"))]
pub fn pretend_thp_off_on_this_thread() {
    NO_THP.set(true);
}

/// Copy `len` bytes from a bounce buffer into the caller's host buffer at `dst`.
///
/// The caller's pointer is not something the library can vouch for (an
/// unregistered host pointer has no known extent), and a bad one must give
/// EFAULT, as a read straight into it would, not crash the thread. So the
/// destination is checked before a plain copy runs:
///
/// - First the kernel is asked which mappings cover the range
///   ([`private_anon_writable`], Linux 6.11's PROCMAP_QUERY, about 1.2 µs on
///   the 2-core VM). Private anonymous writable memory (malloc, the stack,
///   NumPy and PyTorch CPU tensors) takes any write, so the copy runs.
/// - Otherwise `madvise(MADV_POPULATE_WRITE)` (Linux 5.14) faults every page
///   of the range in writable, or fails where a write would fault. It walks
///   every 4 KiB page, even resident ones: 45–50 µs per MiB on the 2-core VM,
///   as long as copying the MiB, which is why it is not the first question.
///   A file mapping must take this way: a write past the file's end would
///   raise SIGBUS in a range whose mapping says writable.
/// - Where that check fails or the kernel lacks it, the kernel does the copy
///   (process_vm_writev on our own process, which reports EFAULT for a bad
///   destination); where that call is refused (seccomp), a plain copy is
///   used. process_vm_writev pins and maps the destination one 4 KiB page at
///   a time: on the 2-core VM it moved 2 MiB in 229 µs.
///
/// (A destination that another thread unmaps or protects between the check
/// and the copy is the caller's race, as it is for any library that writes
/// to a buffer.)
pub(crate) fn copy_to_caller(src: *const u8, dst: usize, len: usize) -> Result<()> {
    if private_anon_writable(dst, len) == Some(true) || writable_now(dst, len) {
        // SAFETY: the bounce holds `len` valid bytes at `src`; the kernel has
        // just said every page of [dst, dst + len) takes a write.
        unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, len) };
        return Ok(());
    }
    static REFUSED: AtomicBool = AtomicBool::new(false);
    let bounce = src as usize;
    let copied = kernel_copy(
        &REFUSED,
        len,
        // SAFETY: `local` names the bounce's `len` bytes; the kernel
        // validates `remote`, the caller's range.
        |local, remote| unsafe { libc::process_vm_writev(libc::getpid(), local, 1, remote, 1, 0) },
        bounce,
        dst,
    );
    if let Some(r) = copied {
        return r;
    }
    // SAFETY: the bounce holds `len` valid bytes at `src`; the caller promised
    // a buffer covering the request (the C contract) — the checked path above
    // is unavailable on this system.
    unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, len) };
    Ok(())
}

/// Copy `len` bytes of the caller's host memory at `src` into the bounce at
/// `dst` (an O_DIRECT write from a huge-page slot), or EFAULT where the
/// source cannot be read, as a write straight from it would report. As for
/// [`copy_to_caller`], the source is checked first: private anonymous
/// memory (PROCMAP_QUERY) is copied plainly; anything else (a file's
/// mapping, which raises SIGBUS past the file's end, shared memory, an
/// older kernel) is copied by the kernel, `process_vm_readv` on our own
/// process, which reports a bad source as EFAULT; where that call is
/// refused (seccomp), a plain copy is used.
pub(crate) fn copy_from_caller(src: usize, dst: *mut u8, len: usize) -> Result<()> {
    if private_anon_readable(src, len) == Some(true) {
        // SAFETY: the bounce has room for `len` bytes at `dst`; the kernel
        // has just said every page of [src, src + len) may be read.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst, len) };
        return Ok(());
    }
    static REFUSED: AtomicBool = AtomicBool::new(false);
    let bounce = dst as usize;
    let copied = kernel_copy(
        &REFUSED,
        len,
        // SAFETY: `local` names the bounce's room for `len` bytes; the kernel
        // validates `remote`, the caller's range.
        |local, remote| unsafe { libc::process_vm_readv(libc::getpid(), local, 1, remote, 1, 0) },
        bounce,
        src,
    );
    if let Some(r) = copied {
        return r;
    }
    // SAFETY: the bounce has room for `len` bytes; the caller promised a
    // source covering the request (the C contract) — the checked path above
    // is unavailable on this system.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst, len) };
    Ok(())
}

/// Copy `len` bytes between the bounce at `bounce` and the caller's memory
/// at `caller` with `call` (`process_vm_readv` or `process_vm_writev` on our
/// own process, given the bounce's iovec and the caller's), resuming after
/// short copies. None where the kernel refused the call itself (a seccomp
/// filter; `refused` then remembers it for the process): the caller copies
/// plainly. A bad caller range gives EFAULT.
fn kernel_copy(
    refused: &AtomicBool,
    len: usize,
    call: impl Fn(&libc::iovec, &libc::iovec) -> isize,
    bounce: usize,
    caller: usize,
) -> Option<Result<()>> {
    if refused.load(Ordering::Relaxed) {
        return None;
    }
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < len {
        let local = libc::iovec {
            iov_base: (bounce + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (caller + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let res = libc_result(call(&local, &remote));
        match verdict(Way::CheckedCopy, res, len - done) {
            Verdict::Complete(n) | Verdict::Short(n) => done += n,
            Verdict::Retry(errno) => {
                if let Err(e) = take_retry(&mut retries, errno) {
                    return Some(Err(Error::Os(e)));
                }
            }
            Verdict::FallBack if done == 0 => {
                refused.store(true, Ordering::Relaxed);
                return None;
            }
            // Refused part-way: the system did not refuse the call itself.
            Verdict::FallBack => return Some(Err(Error::Os(-res as i32))),
            Verdict::Fail(errno) => return Some(Err(Error::Os(errno))),
            Verdict::Eof | Verdict::Miss => {
                crate::log_error!("internal error: a read verdict for a host copy");
                return Some(Err(OpError::InternalError.into()));
            }
        }
    }
    Some(Ok(()))
}

/// The layout of Linux's `struct procmap_query` (include/uapi/linux/fs.h).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: libc::c_ulong = 0xC068_6611;
const VMA_READABLE: u64 = 0x01;
const VMA_WRITABLE: u64 = 0x02;
const VMA_SHARED: u64 = 0x08;

/// This process's `/proc/self/maps`, opened once per process: `pid << 32 |
/// fd`, 0 before the first query. A child of fork inherits its parent's
/// descriptor, which still describes the parent's memory, so a pid that is
/// not ours means: open again.
static MAPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The kernel cannot answer the query (before 6.11, no /proc, a sandbox).
static NO_QUERY: AtomicBool = AtomicBool::new(false);

/// The descriptor of this process's `/proc/self/maps`, or None.
fn maps_fd() -> Option<i32> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32 as u64;
    let cur = MAPS.load(Ordering::Acquire);
    if cur != 0 && cur >> 32 == pid {
        return Some(cur as u32 as i32);
    }
    // SAFETY: a NUL-terminated path; the descriptor is ours.
    let fd = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        NO_QUERY.store(true, Ordering::Relaxed);
        return None;
    }
    let new = pid << 32 | fd as u32 as u64;
    match MAPS.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            if cur != 0 {
                // The parent's descriptor, inherited over fork: ours to close.
                // SAFETY: a descriptor this process holds and no longer uses.
                unsafe { libc::close(cur as u32 as i32) };
            }
            Some(fd)
        }
        Err(won) => {
            // SAFETY: our own descriptor, just opened and not shared.
            unsafe { libc::close(fd) };
            (won >> 32 == pid).then_some(won as u32 as i32)
        }
    }
}

/// Whether `[dst, dst + len)` lies wholly in private, anonymous, writable
/// mappings, which take any write; None where the kernel cannot say. A range
/// the kernel says is not (unmapped, read-only, a file's or a device's
/// mapping) gives `Some(false)`: the slower checks then decide.
fn private_anon_writable(dst: usize, len: usize) -> Option<bool> {
    private_anon(dst, len, VMA_WRITABLE)
}

/// Whether `[src, src + len)` lies wholly in private, anonymous, readable
/// mappings, which any read may touch (a page never written reads as
/// zeros); None where the kernel cannot say. A file's mapping is not: a
/// read past the file's end raises SIGBUS.
fn private_anon_readable(src: usize, len: usize) -> Option<bool> {
    private_anon(src, len, VMA_READABLE)
}

/// Whether `[addr, addr + len)` lies wholly in private anonymous mappings
/// whose flags include `want`, from Linux 6.11's PROCMAP_QUERY.
fn private_anon(addr: usize, len: usize, want: u64) -> Option<bool> {
    if len == 0 || NO_QUERY.load(Ordering::Relaxed) {
        return None;
    }
    let end = addr.checked_add(len)? as u64;
    let fd = maps_fd()?;
    let mut at = addr as u64;
    while at < end {
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_addr: at,
            ..Default::default()
        };
        // SAFETY: `q` is a procmap_query of the size it announces; the kernel
        // writes only its output fields (no name or build-id buffers given).
        let r = unsafe { libc::ioctl(fd, PROCMAP_QUERY, &mut q) };
        if r != 0 {
            return match std::io::Error::last_os_error().raw_os_error() {
                // No mapping covers `at`.
                Some(libc::ENOENT) => Some(false),
                _ => {
                    NO_QUERY.store(true, Ordering::Relaxed);
                    None
                }
            };
        }
        let anon = q.inode == 0 && q.dev_major == 0 && q.dev_minor == 0;
        let ok = q.vma_start <= at
            && q.vma_end > at
            && q.vma_flags & want == want
            && q.vma_flags & VMA_SHARED == 0
            && anon;
        if !ok {
            return Some(false);
        }
        at = q.vma_end;
    }
    Some(true)
}

/// Whether every page of `[dst, dst + len)` is mapped writable now (and
/// populated, so a copy into it takes no fault). False where the kernel
/// cannot say (before Linux 5.14, or a mapping it does not populate, such as
/// a device's): the caller then takes the checked copy.
fn writable_now(dst: usize, len: usize) -> bool {
    // madvise wants a page-aligned start: the kernel's page, not 4 KiB.
    // SAFETY: sysconf only reads a value the C library holds.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let Some(end) = dst
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(page))
    else {
        return false;
    };
    let start = dst - dst % page;
    if len == 0 || start == 0 {
        return false;
    }
    // SAFETY: MADV_POPULATE_WRITE only faults pages of our own address space
    // in, as a write would; over an unmapped or read-only range it fails.
    unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
            libc::MADV_POPULATE_WRITE,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_lands_or_gives_efault() {
        let src = vec![5u8; 3 << 20];
        // Writable memory, off page alignment at both ends.
        let mut dst = vec![0u8; (3 << 20) + 100];
        copy_to_caller(src.as_ptr(), dst.as_mut_ptr() as usize + 7, 3 << 20).unwrap();
        assert!(dst[..7].iter().all(|&b| b == 0));
        assert!(dst[7..7 + (3 << 20)].iter().all(|&b| b == 5));
        assert!(dst[7 + (3 << 20)..].iter().all(|&b| b == 0));
        // A read-only mapping and an unmapped one: EFAULT, not a crash.
        let n = 1 << 20;
        // SAFETY: fresh anonymous mappings of our own, unmapped below.
        let ro = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * n,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ro, libc::MAP_FAILED);
        let ro = ro as usize;
        assert!(!writable_now(ro, n));
        assert_eq!(
            copy_to_caller(src.as_ptr(), ro, n),
            Err(Error::Os(libc::EFAULT))
        );
        // SAFETY: the second half of our own mapping.
        unsafe { libc::munmap((ro + n) as *mut libc::c_void, n) };
        assert_eq!(
            copy_to_caller(src.as_ptr(), ro + n, n),
            Err(Error::Os(libc::EFAULT))
        );
        // Writable, then a hole: the check fails as a whole.
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: making the first half of our own mapping writable.
        let r = unsafe { libc::mprotect(ro as *mut libc::c_void, n, rw) };
        assert_eq!(r, 0);
        assert!(!writable_now(ro + n - 4096, 8192));
        assert!(copy_to_caller(src.as_ptr(), ro + n - 4096, 8192).is_err());
        assert!(writable_now(ro, n));
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(ro as *mut libc::c_void, n) };
    }

    #[test]
    fn a_copy_from_the_caller_lands_or_gives_efault() {
        let src = vec![9u8; (3 << 20) + 100];
        let mut dst = vec![0u8; 3 << 20];
        copy_from_caller(src.as_ptr() as usize + 7, dst.as_mut_ptr(), 3 << 20).unwrap();
        assert!(dst.iter().all(|&b| b == 9));
        let n = 1 << 20;
        // SAFETY: a fresh anonymous mapping of our own, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * n,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let p = p as usize;
        // Unreadable, then readable up to an unreadable half: EFAULT, not a crash.
        assert_eq!(
            copy_from_caller(p, dst.as_mut_ptr(), n),
            Err(Error::Os(libc::EFAULT))
        );
        // SAFETY: the first half of our own mapping.
        let r = unsafe { libc::mprotect(p as *mut libc::c_void, n, libc::PROT_READ) };
        assert_eq!(r, 0);
        copy_from_caller(p, dst.as_mut_ptr(), n).unwrap();
        assert!(
            dst[..n].iter().all(|&b| b == 0),
            "untouched memory reads as zeros"
        );
        assert!(copy_from_caller(p + n - 4096, dst.as_mut_ptr(), 8192).is_err());
        // A file's mapping past the file's end would raise SIGBUS on a plain read.
        let f = crate::scratch::ScratchFile::new("copy-from-file", &[3u8; 4096]);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f.file);
        // SAFETY: a fresh mapping of our own file, two pages over a one-page file.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        copy_from_caller(m as usize, dst.as_mut_ptr(), 4096).unwrap();
        assert!(dst[..4096].iter().all(|&b| b == 3));
        assert!(copy_from_caller(m as usize, dst.as_mut_ptr(), 8192).is_err());
        // SAFETY: our own mappings, unmapped once.
        unsafe {
            libc::munmap(m, 8192);
            libc::munmap(p as *mut libc::c_void, 2 * n);
        }
    }

    #[test]
    fn the_mapping_query_knows_private_anonymous_memory() {
        if private_anon_writable(4096, 1).is_none() {
            eprintln!("this kernel has no PROCMAP_QUERY (before 6.11): the slower checks serve");
            return;
        }
        let v = vec![0u8; 3 << 20];
        assert_eq!(
            private_anon_writable(v.as_ptr() as usize + 5, 3 << 20),
            Some(true)
        );
        let on_stack = [0u8; 64];
        assert_eq!(
            private_anon_writable(on_stack.as_ptr() as usize, 64),
            Some(true)
        );
        // Unmapped, read-only, shared, a file's: not for the plain copy.
        assert_eq!(private_anon_writable(16, 4096), Some(false));
        let n = 1 << 20;
        let map = |prot, flags, fd| {
            // SAFETY: a fresh mapping of our own, unmapped below.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), 2 * n, prot, flags, fd, 0) };
            assert_ne!(p, libc::MAP_FAILED);
            p as usize
        };
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let ro = map(libc::PROT_READ, anon, -1);
        assert_eq!(private_anon_writable(ro, 4096), Some(false));
        // Writable first half, read-only second: the range across both is not.
        // SAFETY: the first half of our own mapping.
        assert_eq!(unsafe { libc::mprotect(ro as *mut libc::c_void, n, rw) }, 0);
        assert_eq!(private_anon_writable(ro, n), Some(true));
        assert_eq!(private_anon_writable(ro + n - 4096, 8192), Some(false));
        let shared = map(rw, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1);
        assert_eq!(private_anon_writable(shared, 4096), Some(false));
        let f = crate::scratch::ScratchFile::new("maps-query", &[1u8; 8192]);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f.file);
        let file = map(rw, libc::MAP_PRIVATE, fd);
        assert_eq!(private_anon_writable(file, 4096), Some(false));
        // A hole after writable memory: the query stops at the hole.
        let holed = map(rw, anon, -1);
        // SAFETY: the second half of our own mapping.
        unsafe { libc::munmap((holed + n) as *mut libc::c_void, n) };
        assert_eq!(private_anon_writable(holed, n), Some(true));
        assert_eq!(private_anon_writable(holed + n - 4096, 8192), Some(false));
        for (p, len) in [(ro, 2 * n), (shared, 2 * n), (file, 2 * n), (holed, n)] {
            // SAFETY: our own mappings, unmapped once.
            unsafe { libc::munmap(p as *mut libc::c_void, len) };
        }
    }

    #[test]
    fn a_child_of_fork_asks_about_its_own_memory() {
        if private_anon_writable(4096, 1).is_none() {
            eprintln!("this kernel has no PROCMAP_QUERY (before 6.11): the slower checks serve");
            return;
        }
        let v = vec![0u8; 8192];
        assert_eq!(private_anon_writable(v.as_ptr() as usize, 8192), Some(true));
        // SAFETY: the child calls only async-signal-safe functions (getpid,
        // open, ioctl, mmap, munmap, close, _exit) before it exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // Memory mapped only in the child: the parent's descriptor would
            // not know it.
            // SAFETY: a fresh anonymous mapping of the child's own.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    1 << 20,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            let mut ok =
                p != libc::MAP_FAILED && private_anon_writable(p as usize, 1 << 20) == Some(true);
            // SAFETY: the child's own mapping; then the memory is gone.
            unsafe { libc::munmap(p, 1 << 20) };
            ok &= private_anon_writable(p as usize, 1 << 20) == Some(false);
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }

    /// `AnonHugePages` (KiB) of the mapping of /proc/self/smaps holding `addr`.
    fn anon_huge_kb(addr: usize) -> Option<u64> {
        crate::bounce::smaps_field(addr, "AnonHugePages")?
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }

    #[test]
    fn a_thread_s_page_is_one_huge_page_or_none() {
        std::thread::spawn(|| {
            let state = HugePage::make();
            match (&state, crate::bounce::thp_allowed()) {
                (State::Have(p), true) => {
                    assert_eq!(p.base as usize % PAGE_BYTES, 0);
                    assert_eq!(anon_huge_kb(p.base as usize), Some(2048));
                }
                (State::Refused, true) => eprintln!("THP is on, but no huge page was free"),
                (State::Refused, false) => {}
                _ => panic!("THP {}: no decision", crate::bounce::thp_allowed()),
            }
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            pretend_thp_off_on_this_thread();
            assert!(matches!(HugePage::make(), State::Refused));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_bad_destination_is_efault_not_a_crash() {
        let f = crate::scratch::ScratchFile::new("bounce-efault", &[7u8; 8192]);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f.file);
        std::thread::spawn(move || {
            if let Some(r) = pread(fd, 8, 8192, 0) {
                assert_eq!(r, -(libc::EFAULT as isize));
            }
            let mut buf = vec![0u8; 8192];
            if let Some(r) = pread(fd, buf.as_mut_ptr() as usize, 8192, 0) {
                assert_eq!(r, 8192);
                assert!(buf.iter().all(|&b| b == 7));
            }
        })
        .join()
        .unwrap();
    }
}
