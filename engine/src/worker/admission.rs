//! Routing and admission: which chunks this worker takes from the engine's
//! queue, and when.

use super::chunk::ChunkIo;
use super::Worker;
use crate::error::{Error, OpError};
use crate::request::Chunk;

impl Worker {
    /// Whether to take `c` from the queue now: this worker can start it at
    /// once (a free slot it fits, or room in the host budget), nothing it
    /// holds is still waiting for a slot, and it holds fewer than its `fair`
    /// share of the engine's chunks ([`crate::queue::WorkQueue::fair_share`]).
    /// Otherwise another worker may be able to start it sooner, or has less
    /// to do: without the share, the first worker to wake takes up to 32
    /// small reads of a batch while others sleep, and one worker polls all
    /// their copies (4 KiB random reads at QD128 on the H200: 0.77 of the
    /// raw io_uring rate, against 0.95 with the share).
    pub(super) fn can_start(&self, c: &Chunk, fair: usize) -> bool {
        if !self.may_take(c) {
            return false;
        }
        let fair = match self.cfg.cold_limit() {
            // Split over the cold workers running (the rest may start later).
            Some(n) if c.cold => self.queue.fair_share_among(n.min(self.queue.reserved())),
            _ => fair,
        };
        if self.held >= self.cap || !self.slot_line.is_empty() || self.held >= fair {
            return false;
        }
        if c.mem.is_device() {
            self.slots.fitting_class(c.len).is_some()
        } else {
            let budget = self.cfg.slots_per_worker * self.cfg.chunk_bytes;
            self.host_bytes == 0 || self.host_bytes + c.len <= budget
        }
    }

    /// Storage-bound chunks go only to the first `cold_io_threads` workers
    /// (when that is fewer than all of them).
    pub(super) fn may_take(&self, c: &Chunk) -> bool {
        !c.cold || self.takes_cold()
    }

    pub(super) fn takes_cold(&self) -> bool {
        self.cfg.cold_limit().is_none_or(|n| self.id < n)
    }

    /// Room for another chunk, and some slot free: a chunk from the queue
    /// could start.
    pub(super) fn has_room(&self) -> bool {
        self.held < self.cap && self.slots.any_free()
    }

    /// Take `chunk` from the queue and start it.
    pub(super) fn admit(&mut self, chunk: Chunk) {
        if chunk.req.canceled() {
            chunk
                .req
                .chunk_done(chunk.idx, Err(Error::Os(libc::ECANCELED)));
            return;
        }
        if !self.slots.could_hold(chunk.len) {
            // No slot of this slab will ever hold it: fail the chunk rather
            // than leave its request waiting for one.
            crate::log_error!(
                "internal error: hipfile-io-{}: a piece of {} bytes is larger than every bounce slot",
                self.id,
                chunk.len
            );
            chunk
                .req
                .chunk_done(chunk.idx, Err(OpError::InternalError.into()));
            return;
        }
        if self.held >= self.cap {
            // `can_start` and an idle worker's wait admit only below the cap.
            crate::log_error!(
                "internal error: hipfile-io-{}: admitted past its cap",
                self.id
            );
            chunk
                .req
                .chunk_done(chunk.idx, Err(OpError::InternalError.into()));
            return;
        }
        self.queue.started();
        if self.held == 0 {
            self.queue.busy();
        }
        self.held += 1;
        if !chunk.mem.is_device() {
            self.host_bytes += chunk.len;
        }
        let next = ChunkIo::start(chunk, &self.ctx());
        self.apply(next);
        self.grant_slots();
    }
}
