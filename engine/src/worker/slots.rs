//! Bounce slots: which chunk gets which slot, in what order, and where a
//! chunk's bytes lie inside its slot.

use super::storage::slot_base;
use super::{Active, Phase, Worker};
use crate::request::Memory;
use crate::stats::{Stage, Stats};

impl Worker {
    /// A table entry and some slot free: a chunk from the queue could start.
    pub(super) fn has_room(&self) -> bool {
        !self.free_ids.is_empty() && self.free.iter().any(|f| !f.is_empty())
    }

    /// The smallest slot class with a free slot that holds `len` bytes of data.
    pub(super) fn fitting_class(&self, len: usize) -> Option<usize> {
        let pad = 2 * crate::file::MAX_DIO_ALIGN;
        (0..self.free.len())
            .find(|&k| self.slab.class_bytes(k) >= len + pad && !self.free[k].is_empty())
    }

    /// Hand free slots to waiting chunks in arrival order; a chunk takes the
    /// smallest free slot its data fits in, so small I/O keeps flowing while
    /// large slots are busy.
    ///
    /// Page-cache reads are limited per pass ([`Worker::cached_limit`]): the
    /// kernel copies a cached read inline, inside the next `io_uring_enter`,
    /// so reads queued together are all copied before the first of their GPU
    /// copies can start.
    pub(super) fn grant_slots(&mut self) {
        self.withheld = false;
        let mut i = 0;
        while i < self.need_slot.len() && self.free.iter().any(|f| !f.is_empty()) {
            if self.cached_this_pass >= self.cached_limit() {
                self.withheld = true;
                break;
            }
            let id = self.need_slot[i];
            let len = self.table[id].as_ref().map_or(0, |a| a.chunk.len);
            let Some(slot) = self.fitting_class(len).and_then(|k| self.free[k].pop()) else {
                i += 1;
                continue;
            };
            self.need_slot.remove(i);
            if let Some(a) = self.table[id].as_mut() {
                a.slot = Some(slot);
                a.slot_from = a.done;
            }
            Stats::add(&self.stats.bounced_chunks, 1);
            self.enter(id, Stage::Storage);
            self.step(id);
            let cached_read = self.table[id]
                .as_ref()
                .is_some_and(|a| matches!(a.phase, Phase::NowaitRead | Phase::BufferedRead));
            if cached_read {
                self.cached_this_pass += 1;
            }
        }
    }

    /// Page-cache reads one pass may start: no limit, except (with
    /// `first_read_alone`) while no GPU copy is on its way: then the link
    /// waits for this worker's first read, and a second read queued with it
    /// would double that wait. Each request of a synchronous 1 GiB read
    /// starts that way on every worker: two 4 MiB page-cache copies (2 × 1.2
    /// ms on the H200) pass before its first byte can reach the GPU.
    pub(super) fn cached_limit(&self) -> usize {
        if self.cfg.first_read_alone && self.copying.is_empty() && self.unflushed.is_empty() {
            1
        } else {
            usize::MAX
        }
    }

    /// Where the bytes at chunk offset `at` go (reads) or come from (writes).
    pub(super) fn buf_at(&self, a: &Active, at: usize) -> *mut u8 {
        match (a.slot, a.chunk.mem) {
            (Some(s), _) => {
                let pos = a.chunk.file_offset + at as u64;
                // SAFETY: pos - base < slot_bytes by the slot sizing rule (Config::slot_bytes).
                unsafe {
                    self.slab
                        .slot(s)
                        .add((pos - slot_base(a.chunk.file_offset)) as usize)
                }
            }
            (None, Memory::Host(p)) => (p + at) as *mut u8,
            (None, Memory::Device { .. }) => std::ptr::null_mut(),
        }
    }

    pub(super) fn fixed_index(&self, a: &Active) -> Option<u16> {
        if self.fixed {
            a.slot.map(|s| s as u16)
        } else {
            None
        }
    }
}
