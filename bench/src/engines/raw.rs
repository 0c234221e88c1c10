//! `raw`: the storage limit. io_uring reads/writes (O_DIRECT unless
//! `--direct=0`) into page-aligned host memory, `iodepth` in flight per job,
//! no GPU involved. With `--fixedbufs=1` the job's buffer is registered with
//! the ring when the kernel allows it (READ_FIXED/WRITE_FIXED, as the
//! engine's workers use for their slabs). The default is fio's (0): a
//! registered buffer of 4 KiB pages reaches the block layer one segment per
//! page, which on a disk with max_segments 254 splits every 1 MiB read in
//! two, while a plain read merges physically contiguous pages.

use super::{Dir, Done, Engine, Op};
use io_uring::{opcode, squeue, types, IoUring};

/// io_uring's largest ring (IORING_MAX_ENTRIES).
const MAX_RING_ENTRIES: u32 = 32768;
/// io_uring's limits on registered buffers: count and bytes per buffer.
const MAX_FIXED_BUFFERS: usize = 1 << 14;
const MAX_FIXED_BUFFER_BYTES: usize = 1 << 30;

pub struct RawEngine {
    ring: IoUring,
    base: *mut u8,
    slot_bytes: usize,
    /// One registered buffer per slot (buf_index = slot), when registration worked.
    fixed: bool,
    ops: Vec<Op>,
    in_flight: usize,
}

// SAFETY: the raw pointer names the job's buffer, used by this job's thread only.
unsafe impl Send for RawEngine {}

impl RawEngine {
    pub fn new(
        base: u64,
        slot_bytes: usize,
        slots: usize,
        register: bool,
    ) -> Result<RawEngine, String> {
        let entries = (slots as u32)
            .next_power_of_two()
            .clamp(8, MAX_RING_ENTRIES);
        let ring = IoUring::new(entries).map_err(|e| {
            format!(
                "io_uring_setup({entries}): {e}: raw measures io_uring, which this process may \
                 not use (the hipfile engines work here through their POSIX backend)"
            )
        })?;
        let mut fixed = false;
        if register && slots <= MAX_FIXED_BUFFERS && slot_bytes <= MAX_FIXED_BUFFER_BYTES {
            let iovs: Vec<libc::iovec> = (0..slots)
                .map(|i| libc::iovec {
                    // SAFETY: i < slots: inside the job's buffer.
                    iov_base: unsafe { (base as *mut u8).add(i * slot_bytes) }.cast(),
                    iov_len: slot_bytes,
                })
                .collect();
            // SAFETY: the buffers outlive the ring (the job drops the engine first).
            fixed = unsafe { ring.submitter().register_buffers(&iovs) }.is_ok();
        }
        Ok(RawEngine {
            ring,
            base: base as *mut u8,
            slot_bytes,
            fixed,
            ops: vec![
                Op {
                    dir: Dir::Read,
                    offset: 0,
                    len: 0,
                    fd: -1,
                    fh: 0,
                };
                slots
            ],
            in_flight: 0,
        })
    }

    pub fn uses_fixed_buffers(&self) -> bool {
        self.fixed
    }

    fn entry(&self, slot: usize, op: Op) -> squeue::Entry {
        // SAFETY: slot < slots: the slot's region of the job's buffer.
        let buf = unsafe { self.base.add(slot * self.slot_bytes) };
        let fd = types::Fd(op.fd);
        let len = op.len as u32;
        let e = match (op.dir, self.fixed) {
            (Dir::Read, true) => opcode::ReadFixed::new(fd, buf, len, slot as u16)
                .offset(op.offset)
                .build(),
            (Dir::Write, true) => opcode::WriteFixed::new(fd, buf, len, slot as u16)
                .offset(op.offset)
                .build(),
            (Dir::Read, false) => opcode::Read::new(fd, buf, len).offset(op.offset).build(),
            (Dir::Write, false) => opcode::Write::new(fd, buf, len).offset(op.offset).build(),
        };
        e.user_data(slot as u64)
    }

    fn push(&mut self, slot: usize, op: Op) -> Result<(), String> {
        let e = self.entry(slot, op);
        loop {
            // SAFETY: the entry's buffer stays valid and untouched until its CQE.
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                return Ok(());
            }
            // Submission queue full: hand what is queued to the kernel, then retry.
            self.ring
                .submit()
                .map_err(|err| format!("io_uring_enter: {err}"))?;
        }
    }
}

impl Drop for RawEngine {
    fn drop(&mut self) {
        // A buffer belongs to the kernel until its CQE: wait for stragglers
        // (only an aborted job leaves any) before the job frees the memory.
        let mut tries = 0;
        while self.in_flight > 0 && tries < 10_000 {
            tries += 1;
            if self.ring.submit_and_wait(1).is_err() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let n = self.ring.completion().count();
            self.in_flight = self.in_flight.saturating_sub(n);
        }
    }
}

impl Engine for RawEngine {
    fn submit(&mut self, slot: usize, op: Op) -> Result<(), String> {
        self.ops[slot] = op;
        self.push(slot, op)?;
        self.in_flight += 1;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        self.ring
            .submit()
            .map(|_| ())
            .map_err(|e| format!("io_uring_enter: {e}"))
    }

    fn reap(&mut self, min: usize, out: &mut Vec<Done>) -> Result<(), String> {
        let mut got = 0usize;
        let want = min.min(self.in_flight);
        loop {
            let need = want.saturating_sub(got);
            match self.ring.submit_and_wait(need) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                Err(e) => return Err(format!("io_uring_enter: {e}")),
            }
            let cqes: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (ud, res) in cqes {
                let slot = ud as usize;
                if res == -libc::EAGAIN || res == -libc::EINTR {
                    // Transient: the same I/O again (it is still in flight).
                    let op = self.ops[slot];
                    self.push(slot, op)?;
                    continue;
                }
                self.in_flight -= 1;
                got += 1;
                let op = self.ops[slot];
                let result = if res < 0 {
                    let what = match op.dir {
                        Dir::Read => "read",
                        Dir::Write => "write",
                    };
                    let err = std::io::Error::from_raw_os_error(-res);
                    let hint = if res == -libc::EINVAL {
                        " (O_DIRECT needs aligned offsets, sizes and memory; try --direct=0)"
                    } else {
                        ""
                    };
                    Err(format!(
                        "io_uring {what} of {} bytes at {}: {err}{hint}",
                        op.len, op.offset
                    ))
                } else {
                    Ok(res as usize)
                };
                out.push(Done { slot, result });
            }
            if got >= want {
                return Ok(());
            }
        }
    }
}
