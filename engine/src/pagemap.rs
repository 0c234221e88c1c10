//! Whether a caller's host memory is physically contiguous enough for the
//! disk, from the process's own page tables (`/proc/self/pagemap`).
//!
//! An O_DIRECT read carries one segment per physically contiguous run of its
//! destination, and a virtio disk spends time on each (`crate::host_bounce`),
//! so reads of more than a few pages into 4 KiB pages go through a huge page
//! and a copy. That copy is pure cost when the caller's memory is contiguous
//! already, and it is not small: on the 2-core VM copying 4 MiB out of a
//! freshly read huge page took 315 µs against 1.07–1.15 ms for the read.
//! Two kinds of caller memory need no bounce:
//!
//! - Memory the kernel maps with huge pages: transparent huge pages (a
//!   `madvise(MADV_HUGEPAGE)` region, or any large anonymous region where
//!   THP is `always`) and hugetlbfs. The `PAGEMAP_SCAN` ioctl (Linux 6.7)
//!   says so for a whole range in one call, to any process about itself.
//! - Memory whose 4 KiB pages the allocator happened to hand out in physical
//!   order. A buffer faulted in page by page after the kernel freed a lot of
//!   memory often is: fio's 4 MiB buffer on the VM held 34–35 runs, where
//!   `posix_memalign` + `memset` gave 800–900. Only the page frame numbers
//!   tell, and the kernel shows them to `CAP_SYS_ADMIN` only (zeros
//!   otherwise), so this check runs where they are visible and is skipped
//!   elsewhere.
//!
//! Pages that are not present (never touched, or swapped out) count as
//! scattered: the bounce's copy faults them in, and the next read of the same
//! buffer may then go straight. The answer only picks a path: a wrong one
//! costs time, never bytes (both paths read the same range and report the
//! same errors).

use crate::fork::PerProcess;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

const PAGE: usize = 4096;

/// A range whose physical runs average at least this many bytes goes to the
/// disk straight: at most 32 segments per MiB, about 29 µs of disk time on
/// the VM (0.9 µs a segment) against 200–250 µs for the 1 MiB read, and
/// well below a copy out of a huge page (70–80 µs per MiB there). A 4 MiB
/// request stays within the queue's 254 segments. glibc's `malloc` of a few
/// MiB right after the kernel freed page cache comes out at about 64 KiB a
/// run (fio's buffer on the VM), so a threshold at 64 KiB itself would miss
/// it by one run.
const MIN_AVERAGE_RUN: usize = 32 << 10;

/// Page-table entries read per `pread` of the pagemap (4 KiB of entries,
/// 2 MiB of memory).
const ENTRIES_PER_READ: usize = 512;

/// `PAGEMAP_SCAN`'s categories (`linux/fs.h`).
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_HUGE: u64 = 1 << 6;

/// `struct pm_scan_arg` (`linux/fs.h`, Linux 6.7).
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: libc::c_ulong = (3 << 30)
    | ((std::mem::size_of::<PmScanArg>() as libc::c_ulong) << 16)
    | ((b'f' as libc::c_ulong) << 8)
    | 16;

/// This process's pagemap, opened once per process: a descriptor opened
/// before a `fork()` would describe the parent's memory in the child.
struct Pagemap {
    fd: Option<OwnedFd>,
    /// Whether this kernel answers `PAGEMAP_SCAN` (cleared on its first refusal).
    scan: AtomicBool,
    /// Whether page frame numbers are visible to this process.
    pfns: bool,
}

static PAGEMAP: PerProcess<Pagemap> = PerProcess::new();

impl Pagemap {
    fn open() -> Pagemap {
        // SAFETY: a NUL-terminated path; the result is checked.
        let fd = unsafe {
            libc::open(
                c"/proc/self/pagemap".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Pagemap {
                fd: None,
                scan: AtomicBool::new(false),
                pfns: false,
            };
        }
        // SAFETY: `fd` was just opened and is owned here alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // A page that is certainly present: the one holding this variable.
        let probe = 0u64;
        let pfns = entries(fd.as_raw_fd(), &probe as *const u64 as usize, 1)
            .and_then(|e| e.first().copied())
            .is_some_and(|e| present(e) && pfn(e) != 0);
        Pagemap {
            fd: Some(fd),
            scan: AtomicBool::new(true),
            pfns,
        }
    }
}

fn present(entry: u64) -> bool {
    entry >> 63 == 1
}

fn pfn(entry: u64) -> u64 {
    entry & ((1 << 55) - 1)
}

/// Whether an O_DIRECT read of `len` bytes straight into `[addr, addr + len)`
/// reaches the disk in few enough segments that a bounce through a huge page
/// would cost more than it saves (see the module notes).
pub(crate) fn few_segments(addr: usize, len: usize) -> bool {
    if len == 0 {
        return false;
    }
    let map = PAGEMAP.get_or_init(Pagemap::open);
    let Some(fd) = map.fd.as_ref().map(|f| f.as_raw_fd()) else {
        return false;
    };
    let start = addr & !(PAGE - 1);
    let Some(end) = addr
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(PAGE))
    else {
        return false;
    };
    if map.scan.load(Ordering::Relaxed) {
        match huge_mapped(fd, start, end) {
            Some(true) => return true,
            Some(false) => {}
            None => map.scan.store(false, Ordering::Relaxed),
        }
    }
    map.pfns && runs_fit(fd, start, end)
}

/// Whether every page of `[start, end)` is present and mapped by a huge page
/// (THP or hugetlbfs), from one `PAGEMAP_SCAN`; None where the kernel lacks
/// the ioctl.
fn huge_mapped(fd: i32, start: usize, end: usize) -> Option<bool> {
    let want = PAGE_IS_PRESENT | PAGE_IS_HUGE;
    let mut region = PageRegion::default();
    let mut arg = PmScanArg {
        size: std::mem::size_of::<PmScanArg>() as u64,
        start: start as u64,
        end: end as u64,
        vec: &mut region as *mut PageRegion as u64,
        vec_len: 1,
        category_mask: want,
        return_mask: want,
        ..PmScanArg::default()
    };
    // SAFETY: `arg` and the one region it names live across the call; the
    // kernel writes `region` and `arg.walk_end` only.
    let r = unsafe { libc::ioctl(fd, PAGEMAP_SCAN, &mut arg) };
    if r < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error();
        // ENOTTY / EINVAL: a kernel before 6.7 (or a struct it does not
        // know). Anything else (EFAULT for a range it cannot walk) says
        // nothing about the kernel.
        return match errno {
            Some(libc::ENOTTY) | Some(libc::EINVAL) | Some(libc::ENOSYS) => None,
            _ => Some(false),
        };
    }
    // Pages alike merge into one region: one region spanning the range is
    // every page present and huge.
    Some(r == 1 && region.start == start as u64 && region.end == end as u64)
}

/// Whether `[start, end)` (page-aligned) is all present and its physical
/// runs average at least [`MIN_AVERAGE_RUN`].
fn runs_fit(fd: i32, start: usize, end: usize) -> bool {
    let pages = (end - start) / PAGE;
    let mut runs = 0usize;
    let mut last: Option<u64> = None;
    let mut at = start;
    while at < end {
        let n = ((end - at) / PAGE).min(ENTRIES_PER_READ);
        let Some(e) = entries(fd, at, n) else {
            return false;
        };
        match count_runs(&e, last) {
            Some((r, tail)) => {
                runs += r;
                last = Some(tail);
            }
            None => return false,
        }
        // Runs only add up: a scattered buffer is known after its first
        // 2 MiB, without walking the rest of its page tables.
        if !runs_average_enough(runs, pages * PAGE) {
            return false;
        }
        at += n * PAGE;
    }
    runs_average_enough(runs, pages * PAGE)
}

/// Whether `runs` physical runs over `bytes` average [`MIN_AVERAGE_RUN`].
fn runs_average_enough(runs: usize, bytes: usize) -> bool {
    runs * MIN_AVERAGE_RUN <= bytes
}

/// Physical runs begun in `entries` (pagemap entries of consecutive virtual
/// pages), after a page whose frame was `before`, and the last frame; None
/// when a page is absent or its frame hidden.
fn count_runs(entries: &[u64], before: Option<u64>) -> Option<(usize, u64)> {
    let mut runs = 0;
    let mut prev = before;
    for &e in entries {
        let f = pfn(e);
        if !present(e) || f == 0 {
            return None;
        }
        if prev.is_none_or(|p| p.checked_add(1) != Some(f)) {
            runs += 1;
        }
        prev = Some(f);
    }
    prev.map(|p| (runs, p))
}

/// The pagemap entries of `n` (at most [`ENTRIES_PER_READ`]) pages from `addr`.
fn entries(fd: i32, addr: usize, n: usize) -> Option<Vec<u64>> {
    let n = n.min(ENTRIES_PER_READ);
    let mut e = vec![0u64; n];
    let want = n * 8;
    let off = (addr / PAGE * 8) as i64;
    // SAFETY: `e` holds `want` bytes.
    let r = unsafe { libc::pread(fd, e.as_mut_ptr().cast(), want, off) };
    (r == want as isize).then_some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1 << 63;

    #[test]
    fn runs_are_counted_across_reads_and_absent_pages_refuse() {
        assert_eq!(count_runs(&[P | 10, P | 11, P | 12], None), Some((1, 12)));
        assert_eq!(
            count_runs(&[P | 10, P | 12, P | 13, P | 9], None),
            Some((3, 9))
        );
        // Descending frames are not one run: the disk needs them in order.
        assert_eq!(count_runs(&[P | 5, P | 4], None), Some((2, 4)));
        // The run goes on from the previous read's last page.
        assert_eq!(count_runs(&[P | 13, P | 14], Some(12)), Some((0, 14)));
        assert_eq!(count_runs(&[P | 20], Some(12)), Some((1, 20)));
        // An absent page, or a hidden frame (0 without CAP_SYS_ADMIN).
        assert_eq!(count_runs(&[P | 10, 11], None), None);
        assert_eq!(count_runs(&[P | 10, P], None), None);
        assert_eq!(count_runs(&[], None), None);
    }

    #[test]
    fn a_buffer_laid_out_like_fios_goes_straight_and_a_scattered_one_does_not() {
        let four_mib = 4 << 20;
        // fio's 4 MiB malloc buffer on the VM: 1025 pages in 65-66 runs.
        assert!(runs_average_enough(66, four_mib));
        assert!(runs_average_enough(128, four_mib));
        assert!(!runs_average_enough(129, four_mib));
        // posix_memalign + memset after a cache drop: 1019-1023 runs.
        assert!(!runs_average_enough(1019, four_mib));
        assert!(runs_average_enough(1, 2 << 20));
    }

    /// The process's pagemap, and its descriptor.
    fn opened() -> (&'static Pagemap, i32) {
        let map = PAGEMAP.get_or_init(Pagemap::open);
        let fd = map.fd.as_ref().expect("/proc/self/pagemap opens");
        (map, fd.as_raw_fd())
    }

    /// A 4 MiB region made of 2 MiB-aligned pieces, touched.
    fn mapped(huge: bool) -> (*mut u8, usize) {
        let len = 4 << 20;
        // SAFETY: a fresh anonymous mapping, checked, aligned by hand below.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + (2 << 20),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        let base = (m as usize).next_multiple_of(2 << 20) as *mut u8;
        // SAFETY: inside the mapping.
        unsafe {
            libc::madvise(
                base.cast(),
                len,
                if huge {
                    libc::MADV_HUGEPAGE
                } else {
                    libc::MADV_NOHUGEPAGE
                },
            );
            std::ptr::write_bytes(base, 1, len);
        }
        (base, len)
    }

    #[test]
    fn small_pages_without_visible_frames_are_scattered_and_untouched_ones_always() {
        let (base, len) = mapped(false);
        let (map, fd) = opened();
        // Never huge: MADV_NOHUGEPAGE.
        assert_ne!(
            huge_mapped(fd, base as usize, base as usize + len),
            Some(true)
        );
        if !map.pfns {
            assert!(!few_segments(base as usize, len));
        }
        // Whatever the frames: pages never touched are absent.
        // SAFETY: a fresh anonymous mapping, checked.
        let fresh = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(fresh, libc::MAP_FAILED);
        assert!(!few_segments(fresh as usize, len));
        assert!(!few_segments(0, 0));
        // An address that is not mapped at all.
        assert!(!few_segments(fresh as usize + len * 1024, 1 << 20));
    }

    #[test]
    fn a_range_of_huge_pages_goes_straight_where_the_kernel_gave_them() {
        let (base, len) = mapped(true);
        let (map, fd) = opened();
        let Some(huge) = huge_mapped(fd, base as usize, base as usize + len) else {
            eprintln!("PAGEMAP_SCAN is not in this kernel (before 6.7): nothing to check here");
            return;
        };
        // The kernel may have no huge page to give (THP off, memory
        // fragmented): then the answer must come from the frames alone.
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if huge {
            assert!(few_segments(base as usize, len));
            assert!(few_segments(base as usize + 4096, len - 8192));
            // A range that runs one page past the huge pages does not count
            // as huge (the page past is not mapped at all here, or small).
            assert_ne!(
                huge_mapped(fd, base as usize, base as usize + len + 4096),
                Some(true)
            );
        } else {
            eprintln!("no transparent huge page given (THP: {})", thp.trim());
            assert_eq!(
                few_segments(base as usize, len),
                map.pfns && runs_fit(fd, base as usize, base as usize + len)
            );
        }
    }
}
