//! Batch I/O contexts (spec §5.7): entries become engine requests at submit
//! time, which the workers turn straight into ring submissions; completions are
//! queued in completion order and handed out once each by `get_status`.

use crate::error::{Error, OpError, Result};
use crate::pipeline::{Completion, Engine, IoRequest};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `hipFileStatus_t` values (bit flags, identical to cuFile's).
pub mod status {
    pub const WAITING: u32 = 0x01;
    pub const PENDING: u32 = 0x02;
    pub const INVALID: u32 = 0x04;
    pub const CANCELED: u32 = 0x08;
    pub const COMPLETE: u32 = 0x10;
    pub const TIMEOUT: u32 = 0x20;
    pub const FAILED: u32 = 0x40;
}

/// One finished entry, as `hipFileIOEvents_t` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchEvent {
    pub cookie: usize,
    pub status: u32,
    /// Bytes, or a negative error (−errno for system errors, −hipFileOpError otherwise).
    pub ret: i64,
}

/// One entry to submit. `hold` is dropped when the entry finishes (it keeps a
/// registered buffer marked busy, for instance).
pub struct BatchEntry {
    pub req: IoRequest,
    pub cookie: usize,
    pub hold: Option<Box<dyn Send>>,
}

#[derive(Default)]
struct State {
    /// Submitted and not yet reported by get_status.
    outstanding: usize,
    /// Submitted and not yet finished in the engine.
    running: usize,
    done: VecDeque<BatchEvent>,
}

pub struct Batch {
    max_nr: usize,
    state: Mutex<State>,
    cv: Condvar,
    cancel: Arc<AtomicBool>,
}

/// Map an engine result to the event's status and `ret` (spec §5.7 "Execution").
pub fn event_of(cookie: usize, r: &Result<usize>, canceled: bool) -> BatchEvent {
    match r {
        _ if canceled => BatchEvent {
            cookie,
            status: status::CANCELED,
            ret: -(libc::ECANCELED as i64),
        },
        Ok(n) => BatchEvent {
            cookie,
            status: status::COMPLETE,
            ret: *n as i64,
        },
        Err(e) => BatchEvent {
            cookie,
            status: status::FAILED,
            ret: negative_code(e),
        },
    }
}

/// The negative value a failed entry reports: −errno, −hipFileOpError or −GPU code
/// (`Error::negative_code`, the one map of the C conventions).
pub fn negative_code(e: &Error) -> i64 {
    e.negative_code()
}

impl Batch {
    pub fn new(max_nr: usize) -> Arc<Batch> {
        Arc::new(Batch {
            max_nr,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            cancel: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn max_nr(&self) -> usize {
        self.max_nr
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Room left for entries: `max_nr` minus those not yet reported.
    pub fn capacity_left(&self) -> usize {
        self.max_nr - self.lock().outstanding.min(self.max_nr)
    }

    /// Start every entry (the caller has validated all of them already).
    /// More entries than the capacity left → `BatchFull`, and nothing starts.
    ///
    /// # Safety
    /// Every entry's memory must meet [`Engine::submit`]'s terms until that
    /// entry has been reported finished (by `get_status`, or `cancel` returning).
    pub unsafe fn submit(
        self: &Arc<Self>,
        engine: &Engine,
        entries: Vec<BatchEntry>,
    ) -> Result<()> {
        {
            let mut st = self.lock();
            if entries.len() > self.max_nr - st.outstanding.min(self.max_nr) {
                return Err(OpError::BatchFull.into());
            }
            st.outstanding += entries.len();
            st.running += entries.len();
        }
        // A new submission after a cancel runs normally.
        self.cancel.store(false, Ordering::Release);
        for e in entries {
            let me = self.clone();
            let cookie = e.cookie;
            let hold = e.hold;
            let mut req = e.req;
            req.cancel = Some(self.cancel.clone());
            // SAFETY: the caller vouches for every entry's memory (see above).
            unsafe {
                engine.submit(
                    req,
                    Completion::Callback(Box::new(move |r| {
                        drop(hold);
                        me.finished(cookie, r);
                    })),
                )
            };
        }
        Ok(())
    }

    fn finished(&self, cookie: usize, r: Result<usize>) {
        let canceled =
            self.cancel.load(Ordering::Acquire) && matches!(r, Err(Error::Os(libc::ECANCELED)));
        let ev = event_of(cookie, &r, canceled);
        let mut st = self.lock();
        st.running -= 1;
        st.done.push_back(ev);
        self.cv.notify_all();
    }

    /// Up to `max` finished entries, after waiting (per `timeout`: None = no
    /// limit, zero = poll) until at least `min_nr` have finished; `min_nr` is
    /// capped at the number outstanding. Returned entries are forgotten.
    pub fn get_status(
        &self,
        min_nr: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> Vec<BatchEvent> {
        let mut st = self.lock();
        let min_nr = min_nr.min(st.outstanding).min(max);
        let deadline = timeout.map(|t| Instant::now() + t);
        while st.done.len() < min_nr {
            match deadline {
                None => st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break;
                    }
                    st = self
                        .cv
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
        let n = st.done.len().min(max);
        let out: Vec<BatchEvent> = st.done.drain(..n).collect();
        st.outstanding -= out.len();
        out
    }

    /// Skip the entries that have not started, wait for the running ones.
    /// Skipped entries are reported as Canceled; finished ones as they finished.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Release);
        let mut st = self.lock();
        while st.running > 0 {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Nothing of this batch is still in the engine.
    pub fn idle(&self) -> bool {
        self.lock().running == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuError;

    #[test]
    fn failed_entry_reports_gpu_invalid_value_as_minus_5022() {
        let e = Error::Gpu(GpuError::Driver { call: "t", code: 1 });
        let ev = event_of(7, &Err(e), false);
        assert_eq!((ev.cookie, ev.status, ev.ret), (7, status::FAILED, -5022));
    }

    #[test]
    fn failed_entry_reports_system_error_as_minus_errno() {
        let ev = event_of(7, &Err(Error::Os(libc::EIO)), false);
        assert_eq!((ev.status, ev.ret), (status::FAILED, -(libc::EIO as i64)));
    }
}
