//! The one errno table: what the result of one transfer step means for the
//! transfer. The ring completions of the workers, the inline path on the
//! caller's thread, the checked copy into a caller's buffer and the stream
//! service's file I/O all ask [`verdict`], so a given errno means the same
//! thing on every path.
//!
//! | result                          | way                        | verdict    |
//! |---------------------------------|----------------------------|------------|
//! | all bytes asked for             | any                        | `Complete` |
//! | fewer bytes, more than 0        | any                        | `Short`    |
//! | 0 bytes                         | a read                     | `Eof`      |
//! | 0 bytes                         | a write, the checked copy  | `Retry(EIO)` |
//! | EINTR                           | any                        | `Retry`    |
//! | EAGAIN                          | a page-cache probe         | `Miss`     |
//! | EAGAIN                          | anything else              | `Retry`    |
//! | EINVAL                          | O_DIRECT read or write     | `FallBack` |
//! | EINVAL, EOPNOTSUPP              | a page-cache probe         | `FallBack` |
//! | EFAULT                          | the checked copy           | `Fail`     |
//! | any other errno                 | the checked copy           | `FallBack` |
//! | any other errno                 | anything else              | `Fail`     |
//!
//! A `Retry` is bounded: after [`MAX_RETRIES`] in a row the transfer fails
//! with the errno the verdict carries.

/// Retries (EINTR, EAGAIN, no progress) of one transfer before it fails.
pub(crate) const MAX_RETRIES: u32 = 64;

/// Count one more retry of a transfer that has had `retries` so far, or,
/// once [`MAX_RETRIES`] are spent, `Err(errno)`: the errno to fail with.
pub(crate) fn take_retry(retries: &mut u32, errno: i32) -> Result<(), i32> {
    if *retries >= MAX_RETRIES {
        return Err(errno);
    }
    *retries += 1;
    Ok(())
}

/// How a transfer step moved (or tried to move) bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// A buffered read with RWF_NOWAIT: served only from the page cache.
    CacheProbe,
    /// A read through the page cache (it may block on storage).
    BufferedRead,
    /// A read with O_DIRECT.
    DirectRead,
    /// A write through the page cache.
    BufferedWrite,
    /// A write with O_DIRECT.
    DirectWrite,
    /// `process_vm_writev` into the caller's buffer: the kernel checks the
    /// destination, so a bad pointer gives EFAULT instead of a crash.
    CheckedCopy,
}

/// What to do after one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every byte asked for moved (the count is carried).
    Complete(usize),
    /// Fewer bytes than asked, more than 0, moved: issue the rest.
    Short(usize),
    /// A read moved nothing: the file ends here.
    Eof,
    /// A transient refusal, or a write or copy that moved nothing: issue the
    /// same step again, at most [`MAX_RETRIES`] times in a row, then fail
    /// with this errno.
    Retry(i32),
    /// The page cache lacks (part of) the range: read it with O_DIRECT.
    Miss,
    /// The kernel refused this way for the file or the process, not for the
    /// request: O_DIRECT with EINVAL (an alignment the file system did not
    /// announce), RWF_NOWAIT with EINVAL or EOPNOTSUPP (a file system that
    /// cannot probe the page cache), `process_vm_writev` refused (a seccomp
    /// filter). Use the page cache, or a plain copy, from now on.
    FallBack,
    /// The transfer fails with this errno.
    Fail(i32),
}

impl Way {
    fn is_read(self) -> bool {
        matches!(self, Way::CacheProbe | Way::BufferedRead | Way::DirectRead)
    }
}

/// The verdict on a step of `way` that asked for `asked` bytes and returned
/// `res`: a byte count, or a negative errno (as io_uring completions give it;
/// a libc caller passes `-errno` for a −1 return).
pub(crate) fn verdict(way: Way, res: isize, asked: usize) -> Verdict {
    use libc::{EAGAIN, EFAULT, EINTR, EINVAL, EIO, EOPNOTSUPP};
    if res < 0 {
        let errno = res.unsigned_abs().min(i32::MAX as usize) as i32;
        return match (way, errno) {
            (_, EINTR) => Verdict::Retry(EINTR),
            (Way::CacheProbe, EAGAIN) => Verdict::Miss,
            (_, EAGAIN) => Verdict::Retry(EAGAIN),
            (Way::CacheProbe, EINVAL | EOPNOTSUPP) => Verdict::FallBack,
            (Way::DirectRead | Way::DirectWrite, EINVAL) => Verdict::FallBack,
            (Way::CheckedCopy, EFAULT) => Verdict::Fail(EFAULT),
            (Way::CheckedCopy, _) => Verdict::FallBack,
            (_, errno) => Verdict::Fail(errno),
        };
    }
    let n = res as usize;
    if n == 0 && asked > 0 {
        if way.is_read() {
            Verdict::Eof
        } else {
            Verdict::Retry(EIO)
        }
    } else if n >= asked {
        Verdict::Complete(n)
    } else {
        Verdict::Short(n)
    }
}

/// The result of a libc call that returns −1 and sets errno, as [`verdict`]
/// takes it: the count, or `-errno`.
pub(crate) fn libc_result(r: isize) -> isize {
    if r < 0 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as isize)
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libc::{EAGAIN, EBADF, EFAULT, EINTR, EINVAL, EIO, ENOSPC, EOPNOTSUPP, EPERM};

    const ALL: [Way; 6] = [
        Way::CacheProbe,
        Way::BufferedRead,
        Way::DirectRead,
        Way::BufferedWrite,
        Way::DirectWrite,
        Way::CheckedCopy,
    ];

    #[test]
    fn every_byte_asked_for_completes_the_step() {
        for way in ALL {
            assert_eq!(verdict(way, 4096, 4096), Verdict::Complete(4096), "{way:?}");
        }
    }

    #[test]
    fn fewer_bytes_resubmit_the_rest() {
        for way in ALL {
            assert_eq!(verdict(way, 100, 4096), Verdict::Short(100), "{way:?}");
        }
    }

    #[test]
    fn zero_bytes_end_a_read_and_retry_a_write_or_copy() {
        for way in [Way::CacheProbe, Way::BufferedRead, Way::DirectRead] {
            assert_eq!(verdict(way, 0, 4096), Verdict::Eof, "{way:?}");
        }
        for way in [Way::BufferedWrite, Way::DirectWrite, Way::CheckedCopy] {
            assert_eq!(verdict(way, 0, 4096), Verdict::Retry(EIO), "{way:?}");
        }
    }

    #[test]
    fn eintr_retries_on_every_way() {
        for way in ALL {
            assert_eq!(verdict(way, -(EINTR as isize), 1), Verdict::Retry(EINTR));
        }
    }

    #[test]
    fn eagain_on_a_page_cache_probe_is_a_miss() {
        assert_eq!(
            verdict(Way::CacheProbe, -(EAGAIN as isize), 1),
            Verdict::Miss
        );
    }

    #[test]
    fn eagain_elsewhere_retries() {
        for way in ALL.into_iter().filter(|&w| w != Way::CacheProbe) {
            assert_eq!(
                verdict(way, -(EAGAIN as isize), 1),
                Verdict::Retry(EAGAIN),
                "{way:?}"
            );
        }
    }

    #[test]
    fn einval_on_o_direct_falls_back_to_the_page_cache() {
        for way in [Way::DirectRead, Way::DirectWrite] {
            assert_eq!(verdict(way, -(EINVAL as isize), 1), Verdict::FallBack);
        }
    }

    #[test]
    fn a_file_system_that_cannot_probe_falls_back_to_plain_reads() {
        for errno in [EINVAL, EOPNOTSUPP] {
            assert_eq!(
                verdict(Way::CacheProbe, -(errno as isize), 1),
                Verdict::FallBack
            );
        }
    }

    #[test]
    fn einval_on_a_page_cache_op_fails() {
        for way in [Way::BufferedRead, Way::BufferedWrite] {
            assert_eq!(verdict(way, -(EINVAL as isize), 1), Verdict::Fail(EINVAL));
        }
    }

    #[test]
    fn a_bad_caller_pointer_fails_the_checked_copy() {
        assert_eq!(
            verdict(Way::CheckedCopy, -(EFAULT as isize), 1),
            Verdict::Fail(EFAULT)
        );
    }

    #[test]
    fn a_refused_checked_copy_falls_back_to_a_plain_copy() {
        for errno in [EPERM, libc::ENOSYS] {
            assert_eq!(
                verdict(Way::CheckedCopy, -(errno as isize), 1),
                Verdict::FallBack
            );
        }
    }

    #[test]
    fn other_errors_fail_with_their_errno() {
        for way in ALL.into_iter().filter(|&w| w != Way::CheckedCopy) {
            for errno in [EIO, ENOSPC, EBADF, EFAULT] {
                assert_eq!(
                    verdict(way, -(errno as isize), 1),
                    Verdict::Fail(errno),
                    "{way:?}"
                );
            }
        }
    }

    #[test]
    fn a_libc_failure_carries_errno() {
        // SAFETY: close(-1) only sets errno (EBADF).
        let r = unsafe { libc::close(-1) } as isize;
        assert_eq!(libc_result(r), -(EBADF as isize));
        assert_eq!(libc_result(7), 7);
    }
}
