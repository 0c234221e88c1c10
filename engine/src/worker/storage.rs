//! Storage I/O: the worker's ring (`crate::storage::Ring`: io_uring or the
//! POSIX backend, the same interface). A chunk's op goes in tagged with the
//! chunk's index in the worker's table; its completion comes back to the
//! same chunk, which is then the only thing that can take it.

use super::chunk::InKernel;
use super::Worker;
use crate::ring::Op;
use crate::{log::Level, log_once};

/// Longest a worker waits for the kernel while it has GPU copies in flight or
/// room for more work (a 1 MiB copy takes about 20 µs on the H200's link).
const WAIT_SLICE: std::time::Duration = std::time::Duration::from_micros(100);

impl Worker {
    /// Put `chunk`'s op in the ring; the chunk waits in the table for its completion.
    pub(super) fn submit(&mut self, chunk: InKernel, op: Op) {
        let Some(id) = self.free_ids.pop() else {
            // The table holds as many chunks as the worker may hold at all.
            crate::log_error!(
                "internal error: hipfile-io-{}: no table entry free",
                self.id
            );
            self.finish(chunk.refused(libc::EIO));
            return;
        };
        // SAFETY: the op's memory is a bounce slot the chunk's op owns until
        // its completion (the chunk keeps it in the table), or the caller's
        // buffer, which the request keeps alive until it completes (the C
        // contract for sync, async and batch I/O alike).
        match unsafe { self.ring.push(op, id as u64) } {
            Ok(()) => self.table[id] = Some(chunk),
            Err(e) => {
                self.free_ids.push(id);
                self.finish(chunk.refused(e.raw_os_error().unwrap_or(libc::EIO)));
            }
        }
    }

    /// Enter the ring: submit and wait for a completion. With a GPU copy to
    /// notice, or room for work from the queue, wait only a little at a time:
    /// cold 1 MiB batch entries otherwise held their slots 13 ms on average
    /// after their copy had finished, while the worker slept on O_DIRECT reads.
    pub(super) fn wait_for_storage(&mut self) {
        let r = if !self.copies.is_empty() || self.has_room() {
            self.ring.submit_and_wait_for(1, WAIT_SLICE)
        } else {
            self.ring.submit_and_wait(1)
        };
        if let Err(e) = r {
            log_once!(Level::Error, "io_uring_enter failed: {e}");
        }
    }

    /// Give each completion to the chunk whose op it ends.
    pub(super) fn complete_storage(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        self.ring.reap(&mut cqes);
        for c in cqes.drain(..) {
            let id = c.user_data as usize;
            let Some(chunk) = self.table.get_mut(id).and_then(Option::take) else {
                log_once!(
                    Level::Error,
                    "internal error: hipfile-io-{}: a completion for no chunk (tag {id})",
                    self.id
                );
                continue;
            };
            self.free_ids.push(id);
            let next = chunk.completed(c.result, &self.ctx());
            self.apply(next);
        }
        self.cqes = cqes;
    }

    /// Hand the ops queued since the last entry to the kernel.
    pub(super) fn submit_storage(&mut self) {
        if let Err(e) = self.ring.submit() {
            log_once!(Level::Error, "io_uring submit failed: {e}");
        }
    }
}
