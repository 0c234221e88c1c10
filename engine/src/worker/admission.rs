//! Routing and admission: which chunks this worker takes from the engine's
//! queue, and when.

use super::{Active, Phase, Worker};
use crate::error::{Error, OpError};
use crate::request::Chunk;
use crate::stats::Stage;

impl Worker {
    /// Whether to take `c` from the queue now: this worker can start it at
    /// once (a free slot it fits, or room in the host budget), nothing it
    /// holds is still waiting for a slot, and it holds fewer than its `fair`
    /// share of the engine's chunks ([`WorkQueue::fair_share`]). Otherwise
    /// another worker may be able to start it sooner, or has less to do:
    /// without the share, the first worker to wake took up to 32 small reads
    /// of a batch while others slept, and one worker polled all their copies
    /// (run 9: 4 KiB random reads at QD128 fell from 0.95 to 0.77 of raw).
    pub(super) fn can_start(&self, c: &Chunk, fair: usize) -> bool {
        if !self.may_take(c) {
            return false;
        }
        let fair = match self.cfg.cold_limit() {
            Some(n) if c.cold => self.queue.fair_share_among(n),
            _ => fair,
        };
        let held = self.table.len() - self.free_ids.len();
        if self.free_ids.is_empty() || !self.need_slot.is_empty() || held >= fair {
            return false;
        }
        if c.mem.is_device() {
            self.fitting_class(c.len).is_some()
        } else {
            let budget = self.cfg.slots_per_worker * self.cfg.chunk_bytes;
            self.host_bytes == 0 || self.host_bytes + c.len <= budget
        }
    }

    /// Storage-bound reads go only to the first `cold_io_threads` workers
    /// (when that is fewer than all of them).
    pub(super) fn may_take(&self, c: &Chunk) -> bool {
        !c.cold || self.takes_cold()
    }

    pub(super) fn takes_cold(&self) -> bool {
        self.cfg.cold_limit().is_none_or(|n| self.id < n)
    }

    pub(super) fn admit(&mut self, chunk: Chunk) {
        if chunk.req.canceled() {
            chunk
                .req
                .chunk_done(chunk.idx, Err(Error::Os(libc::ECANCELED)));
            return;
        }
        let Some(id) = self.free_ids.pop() else {
            // Cannot happen: admit is only called with a free entry.
            chunk
                .req
                .chunk_done(chunk.idx, Err(OpError::InternalError.into()));
            return;
        };
        self.queue.started();
        let needs_slot = chunk.mem.is_device();
        if !needs_slot {
            self.host_bytes += chunk.len;
        }
        let queued_at = chunk.queued_at;
        self.table[id] = Some(Active {
            chunk,
            slot: None,
            done: 0,
            slot_from: 0,
            phase: Phase::NeedSlot,
            io_start: 0,
            buffered_only: false,
            want_direct: false,
            write_direct: false,
            has_event: false,
            retries: 0,
            open: Stage::Queue,
            since: queued_at,
        });
        if needs_slot {
            self.enter(id, Stage::Slot);
            self.need_slot.push_back(id);
            self.grant_slots();
        } else {
            self.enter(id, Stage::Storage);
            self.step(id);
        }
    }
}
