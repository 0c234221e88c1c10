//! Fault injection at the ring: a [`FaultPlan`] sits between the kernel's
//! completions and the engine and may rewrite, hold back or reorder them.

use super::{Cqe, Op};

/// Rewrites completions between the kernel and the engine (fault injection).
/// `op` is the operation that produced `cqe`. Returned completions are handed
/// to the engine; a plan may hold some back (reordering) and must release them
/// from `flush` when asked.
pub trait FaultPlan: Send {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>);
    /// Release held completions (called once nothing else is in the kernel).
    fn flush(&mut self, out: &mut Vec<Cqe>);
    /// How many completions the plan holds back right now.
    fn holding(&self) -> usize;
}

/// A reproducible fault plan for tests: rewrites completions by a seeded
/// generator. Short transfers stay 4 KiB multiples (what the kernel does
/// mid-file, also for O_DIRECT); hard errors are counted so a test can tell an
/// injected failure from a real one.
pub struct SeededFaults {
    state: u64,
    /// Per mille of completions to rewrite.
    pub rate: u32,
    /// Which rewrites are allowed.
    pub hard_errors: bool,
    held: Vec<Cqe>,
    pub injected_hard: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub injected_soft: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SeededFaults {
    pub fn new(seed: u64, rate: u32, hard_errors: bool) -> SeededFaults {
        SeededFaults {
            state: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            rate,
            hard_errors,
            held: Vec::new(),
            injected_hard: Default::default(),
            injected_soft: Default::default(),
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

impl FaultPlan for SeededFaults {
    fn on_complete(&mut self, op: &Op, cqe: Cqe, out: &mut Vec<Cqe>) {
        use std::sync::atomic::Ordering::Relaxed;
        let roll = (self.next() % 1000) as u32;
        if roll >= self.rate || matches!(op, Op::Fsync { .. }) {
            out.push(cqe);
            return;
        }
        let kind = self.next() % if self.hard_errors { 7 } else { 4 };
        let rewritten = match kind {
            // A short transfer: the engine must resubmit the rest.
            // (Never 0: that means EOF, which a kernel does not report mid-file.)
            0 if cqe.result >= 8192 => Some((cqe.result / 2) & !4095),
            1 => Some(-libc::EINTR),
            2 => Some(-libc::EAGAIN),
            3 => {
                // Hold it back: completions arrive out of order.
                self.held.push(cqe);
                self.injected_soft.fetch_add(1, Relaxed);
                return;
            }
            4 => Some(-libc::EIO),
            5 => Some(-libc::ENOSPC),
            6 => Some(-libc::ECANCELED),
            _ => None,
        };
        match rewritten {
            Some(r) => {
                if kind >= 4 {
                    self.injected_hard.fetch_add(1, Relaxed);
                } else {
                    self.injected_soft.fetch_add(1, Relaxed);
                }
                out.push(Cqe {
                    user_data: cqe.user_data,
                    result: r,
                });
            }
            None => out.push(cqe),
        }
    }

    fn flush(&mut self, out: &mut Vec<Cqe>) {
        // Release in reverse order of arrival.
        while let Some(c) = self.held.pop() {
            out.push(c);
        }
    }

    fn holding(&self) -> usize {
        self.held.len()
    }
}
