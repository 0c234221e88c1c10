//! The I/O engines behind `--ioengine`, all behind one queue interface: the
//! job loop `submit`s operations into free slots (one slot = one `bs` region of
//! the job's buffer) and `reap`s completions. Synchronous engines do the work
//! in `reap`, so their time shows as completion latency, as in fio.

pub mod copy;
pub mod hipfile;
pub mod posix;
pub mod raw;

use hipfile_engine::gpu::{Event, Gpu, Stream};
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// One I/O: `len` bytes at `offset` of the file open as `fd` (registered
/// with libhipfile as `fh` for the hipfile engines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub dir: Dir,
    pub offset: u64,
    pub len: usize,
    pub fd: i32,
    pub fh: usize,
}

/// A finished I/O: its slot and the bytes moved (or why it failed).
#[derive(Debug)]
pub struct Done {
    pub slot: usize,
    pub result: Result<usize, String>,
}

pub trait Engine {
    /// Start `op` in `slot` (the slot is free: its previous I/O was reaped).
    fn submit(&mut self, slot: usize, op: Op) -> Result<(), String>;
    /// Hand what `submit` queued to the kernel or library now (fio's
    /// commit); engines that act at `submit` or `reap` need do nothing.
    fn flush(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Wait for at least `min` completions (fewer only if fewer are in
    /// flight) and append every completion available to `out`.
    fn reap(&mut self, min: usize, out: &mut Vec<Done>) -> Result<(), String>;
    /// Everything has been reaped: release what the engine holds.
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// Completions of GPU-stream work in stream order: one event per slot,
/// recorded after the slot's operation; a stream finishes work in order, so
/// the oldest event is always the next to complete.
pub struct EventFifo {
    gpu: Arc<dyn Gpu>,
    events: Vec<Event>,
    order: VecDeque<usize>,
}

impl EventFifo {
    pub fn new(gpu: &Arc<dyn Gpu>, slots: usize) -> Result<EventFifo, String> {
        let mut events = Vec::with_capacity(slots);
        for _ in 0..slots {
            match gpu.event_create() {
                Ok(e) => events.push(e),
                Err(e) => {
                    for ev in events {
                        gpu.event_destroy(ev);
                    }
                    return Err(format!("event_create: {e}"));
                }
            }
        }
        Ok(EventFifo {
            gpu: gpu.clone(),
            events,
            order: VecDeque::with_capacity(slots),
        })
    }

    pub fn record(&mut self, slot: usize, stream: Stream) -> Result<(), String> {
        self.gpu
            .event_record(self.events[slot], stream)
            .map_err(|e| format!("event_record: {e}"))?;
        self.order.push_back(slot);
        Ok(())
    }

    /// Wait for the oldest `min`, then take whatever else has finished.
    pub fn reap(
        &mut self,
        min: usize,
        out: &mut Vec<Done>,
        mut result: impl FnMut(usize) -> Result<usize, String>,
    ) -> Result<(), String> {
        let mut got = 0;
        while let Some(&slot) = self.order.front() {
            let ev = self.events[slot];
            if got < min {
                self.gpu
                    .event_synchronize(ev)
                    .map_err(|e| format!("event_synchronize: {e}"))?;
            } else if !self
                .gpu
                .event_query(ev)
                .map_err(|e| format!("event_query: {e}"))?
            {
                break;
            }
            self.order.pop_front();
            out.push(Done {
                slot,
                result: result(slot),
            });
            got += 1;
        }
        Ok(())
    }
}

impl Drop for EventFifo {
    fn drop(&mut self) {
        for &ev in &self.events {
            self.gpu.event_destroy(ev);
        }
    }
}

/// `pread` until `len` bytes or end of file; EINTR retries.
pub fn pread_full(fd: i32, dst: *mut u8, len: usize, offset: u64) -> Result<usize, String> {
    full_loop("pread", len, offset, false, |done, off| {
        // SAFETY: the caller gives `len` writable bytes at dst; done < len.
        unsafe { libc::pread(fd, dst.add(done).cast(), len - done, off) }
    })
}

/// `pwrite` all `len` bytes; EINTR retries.
pub fn pwrite_full(fd: i32, src: *const u8, len: usize, offset: u64) -> Result<usize, String> {
    full_loop("pwrite", len, offset, true, |done, off| {
        // SAFETY: the caller gives `len` readable bytes at src; done < len.
        unsafe { libc::pwrite(fd, src.add(done).cast(), len - done, off) }
    })
}

/// The loop of [`pread_full`] and [`pwrite_full`]: `call(done, offset)`
/// moves bytes from `done` on; 0 ends a read (end of file) and fails a
/// write (`zero_fails`).
fn full_loop(
    what: &str,
    len: usize,
    offset: u64,
    zero_fails: bool,
    mut call: impl FnMut(usize, libc::off_t) -> isize,
) -> Result<usize, String> {
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        let r = call(done, at as libc::off_t);
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(format!("{what} at {at}: {e}"));
        }
        if r == 0 {
            if zero_fails {
                return Err(format!("{what} at {at} wrote nothing"));
            }
            break;
        }
        done += r as usize;
    }
    Ok(done)
}
