//! Bounce slots: the free slots of a worker's slab, and the line of chunks
//! waiting for one.
//!
//! A slot is a [`Slot`] value: made only by [`Slots::take_fitting`], owned by
//! the one chunk phase that uses it (the op in the kernel, the copy on the
//! GPU), and consumed only by [`Slots::give_back`]. It is neither `Copy` nor
//! `Clone`, so two chunks cannot hold one slot.

use super::chunk::Next;
use super::Worker;
use crate::bounce::Slab;
use std::ops::Range;

/// One bounce slot of the worker's slab (its index there; 32 bits keep a
/// chunk's phase values small, see `chunk.rs`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Slot(u32);

impl Slot {
    pub(super) fn index(&self) -> usize {
        self.0 as usize
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // `give_back` forgets the slot: only a slot that leaks gets here. It
        // is lost to the worker (which keeps working with one slot fewer).
        crate::log_error!(
            "internal error: bounce slot {} dropped, not given back",
            self.0
        );
    }
}

/// Whether a slot of `bytes` holds `len` bytes of data, widened at both ends
/// to the O_DIRECT alignment.
fn holds(bytes: usize, len: usize) -> bool {
    bytes >= len + 2 * crate::file::MAX_DIO_ALIGN
}

/// The free slots of a slab, by size class (smallest class first).
pub(super) struct Slots {
    free: Vec<Vec<usize>>,
    /// Slot indices and bytes per slot of each class.
    classes: Vec<(Range<usize>, usize)>,
}

impl Slots {
    /// Every slot of `slab` free.
    pub(super) fn new(slab: &Slab) -> Slots {
        let classes: Vec<(Range<usize>, usize)> = (0..slab.classes())
            .map(|k| (slab.class_range(k), slab.class_bytes(k)))
            .collect();
        Slots {
            free: classes
                .iter()
                .map(|(r, _)| r.clone().rev().collect())
                .collect(),
            classes,
        }
    }

    /// Some slot is free.
    pub(super) fn any_free(&self) -> bool {
        self.free.iter().any(|f| !f.is_empty())
    }

    /// Whether a slot of some class, free or not, holds `len` bytes of data.
    /// The engine cuts no piece longer than a chunk, and the largest class
    /// holds a chunk: a longer one would wait for a slot forever.
    pub(super) fn could_hold(&self, len: usize) -> bool {
        self.classes.iter().any(|&(_, bytes)| holds(bytes, len))
    }

    /// The smallest class with a free slot that holds `len` bytes of data.
    pub(super) fn fitting_class(&self, len: usize) -> Option<usize> {
        (0..self.free.len()).find(|&k| holds(self.classes[k].1, len) && !self.free[k].is_empty())
    }

    /// A free slot of the smallest class that holds `len` bytes of data.
    pub(super) fn take_fitting(&mut self, len: usize) -> Option<Slot> {
        let k = self.fitting_class(len)?;
        self.free[k].pop().map(|i| Slot(i as u32))
    }

    pub(super) fn give_back(&mut self, slot: Slot) {
        let i = slot.0 as usize;
        std::mem::forget(slot);
        match self.classes.iter().position(|(r, _)| r.contains(&i)) {
            Some(k) => self.free[k].push(i),
            None => crate::log_error!("internal error: slot {i} is not of this slab"),
        }
    }
}

impl Worker {
    /// Hand free slots to waiting chunks in arrival order; a chunk takes the
    /// smallest free slot its data fits in, so small I/O keeps flowing while
    /// large slots are busy.
    ///
    /// Page-cache reads are limited per pass ([`Worker::cached_limit`]): the
    /// kernel copies a cached read inline, inside the next `io_uring_enter`,
    /// so reads queued together are all copied before the first of their GPU
    /// copies can start.
    pub(super) fn grant_slots(&mut self) {
        if self.slot_line.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.slot_line.len() && self.slots.any_free() {
            if self.cached_this_pass >= self.cached_limit() {
                break;
            }
            let Some(slot) = self.slots.take_fitting(self.slot_line[i].len()) else {
                i += 1;
                continue;
            };
            let Some(waiting) = self.slot_line.remove(i) else {
                self.slots.give_back(slot);
                break;
            };
            let next = waiting.granted(slot, &self.ctx());
            if next.is_cached_read() {
                self.cached_this_pass += 1;
            }
            // A chunk with a slot never waits for another: `next` is not
            // `Next::Slot`, so the line before `i` stays as it is.
            debug_assert!(!matches!(next, Next::Slot(_)));
            self.apply(next);
        }
    }

    /// Page-cache reads one pass may start: no limit, except (with
    /// `first_read_alone`) while no GPU copy is on its way: then the link
    /// waits for this worker's first read, and a second read queued with it
    /// would double that wait. Each request of a synchronous 1 GiB read
    /// starts that way on every worker: two 4 MiB page-cache copies (2 × 1.2
    /// ms on the H200) pass before its first byte can reach the GPU.
    pub(super) fn cached_limit(&self) -> usize {
        if self.cfg.first_read_alone && self.copies.is_empty() {
            1
        } else {
            usize::MAX
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{Gpu, NoGpu};
    use std::sync::Arc;

    #[test]
    fn a_piece_longer_than_every_class_is_known_never_to_fit() {
        let gpu: Arc<dyn Gpu> = Arc::new(NoGpu { why: "test".into() });
        let pad = 2 * crate::file::MAX_DIO_ALIGN;
        let slab = Slab::new(&[(2, (64 << 10) + pad), (1, (1 << 20) + pad)], &gpu, false).unwrap();
        let mut slots = Slots::new(&slab);
        assert!(slots.could_hold(1 << 20));
        assert!(!slots.could_hold((1 << 20) + 1));
        // Busy slots still count: a chunk that fits waits, one that cannot is refused.
        let taken = slots.take_fitting(1 << 20).unwrap();
        assert!(slots.fitting_class(1 << 20).is_none());
        assert!(slots.could_hold(1 << 20));
        slots.give_back(taken);
    }
}
