//! The engine's single queue of chunks waiting for a worker.
//!
//! Workers pull from it, so a chunk goes to whichever worker can start it
//! first: one that has a bounce slot free for it (device memory) or room in
//! its host-I/O budget. Dealing chunks out round-robin instead left chunks
//! waiting behind a worker that was blocked on its oldest GPU copy while
//! other workers had free slots (run 7: 4.5 ms mean queueing at QD128), and
//! made a large request wait for its most loaded worker.
//!
//! Idle workers sleep on the condition variable; busy ones poll the queue
//! between completions, and take the front chunk only when it fits (strict
//! FIFO: chunks start in the order they were cut).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

struct State<T> {
    chunks: VecDeque<T>,
    closed: bool,
    /// Workers asleep in [`WorkQueue::pop_wait`].
    waiting: usize,
}

/// FIFO of work items (the engine's are [`crate::pipeline::Chunk`]s).
pub(crate) struct WorkQueue<T> {
    state: Mutex<State<T>>,
    wake: Condvar,
    /// Chunks queued, readable without the lock (busy workers poll often).
    len: AtomicUsize,
    /// Chunks taken and not finished, over all workers ([`WorkQueue::started`]).
    held: AtomicUsize,
    workers: usize,
    /// Some items may be taken by only some workers: every push wakes every
    /// sleeper, so a worker that may take the new front is among them.
    restricted: bool,
}

impl<T> WorkQueue<T> {
    /// A queue for `workers` workers (the divisor of [`WorkQueue::fair_share`]).
    #[cfg(test)]
    pub(crate) fn new(workers: usize) -> Self {
        Self::with_restriction(workers, false)
    }

    /// As [`WorkQueue::new`]; `restricted`: not every worker may take every
    /// item (see [`WorkQueue::pop_wait_if`]).
    pub(crate) fn with_restriction(workers: usize, restricted: bool) -> Self {
        WorkQueue {
            state: Mutex::new(State {
                chunks: VecDeque::new(),
                closed: false,
                waiting: 0,
            }),
            wake: Condvar::new(),
            len: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            workers: workers.max(1),
            restricted,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A worker that panicked while holding the lock left the queue itself
        // consistent (every operation is a single VecDeque call).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `chunks` in order; gives them back if the queue is closed.
    pub(crate) fn push(&self, chunks: Vec<T>) -> Result<(), Vec<T>> {
        let mut s = self.lock();
        if s.closed {
            return Err(chunks);
        }
        let n = chunks.len();
        s.chunks.extend(chunks);
        self.len.store(s.chunks.len(), Ordering::Release);
        let wake = if self.restricted {
            s.waiting
        } else {
            s.waiting.min(n)
        };
        drop(s);
        if wake == 1 {
            self.wake.notify_one();
        } else if wake > 1 {
            self.wake.notify_all();
        }
        Ok(())
    }

    /// The front chunk, if there is one and `fits` accepts it.
    pub(crate) fn try_pop(&self, fits: impl FnOnce(&T) -> bool) -> Option<T> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut s = self.lock();
        if !s.chunks.front().is_some_and(fits) {
            return None;
        }
        let c = s.chunks.pop_front();
        self.len.store(s.chunks.len(), Ordering::Release);
        self.front_changed(&s);
        c
    }

    /// With restricted items, a sleeper that could not take the old front may
    /// take the new one (or, once closed, find nothing left for it and exit).
    fn front_changed(&self, s: &State<T>) {
        if self.restricted && s.waiting > 0 {
            self.wake.notify_all();
        }
    }

    /// A worker took a chunk into its table.
    pub(crate) fn started(&self) {
        self.held.fetch_add(1, Ordering::AcqRel);
    }

    /// A worker finished a chunk it had [`WorkQueue::started`].
    pub(crate) fn finished(&self) {
        self.held.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many chunks one busy worker should hold at most: an even split of
    /// everything queued or in progress. While anything is queued, some worker
    /// holds less than this (else the workers would hold everything). With a
    /// slack of one more, the first worker to wake took both halves of a
    /// 1 MiB read meant for two (the 2-core machine: 3.3 GB/s instead of 10).
    pub(crate) fn fair_share(&self) -> usize {
        self.fair_share_among(self.workers)
    }

    /// The same split over `n` of the workers (those that may take an item).
    pub(crate) fn fair_share_among(&self, n: usize) -> usize {
        let all = self.held.load(Ordering::Acquire) + self.len.load(Ordering::Acquire);
        all.div_ceil(n.max(1)).max(1)
    }

    /// Workers asleep in the queue now.
    #[cfg(test)]
    fn sleepers(&self) -> usize {
        self.lock().waiting
    }

    /// Whether anything is queued (no lock taken).
    pub(crate) fn pending(&self) -> bool {
        self.len.load(Ordering::Acquire) > 0
    }

    /// Wait for a chunk. `None` once the queue is closed and empty.
    #[cfg(test)]
    pub(crate) fn pop_wait(&self) -> Option<T> {
        self.pop_wait_if(|_| true)
    }

    /// Wait for a front chunk that `may_take` accepts. `None` once the queue
    /// is closed and holds nothing this worker may take (the others drain it).
    pub(crate) fn pop_wait_if(&self, may_take: impl Fn(&T) -> bool) -> Option<T> {
        let mut s = self.lock();
        loop {
            if s.chunks.front().is_some_and(&may_take) {
                let c = s.chunks.pop_front();
                self.len.store(s.chunks.len(), Ordering::Release);
                self.front_changed(&s);
                return c;
            }
            if s.closed && !s.chunks.iter().any(&may_take) {
                return None;
            }
            s.waiting += 1;
            s = self.wake.wait(s).unwrap_or_else(|e| e.into_inner());
            s.waiting -= 1;
        }
    }

    /// Refuse new chunks; workers drain what is queued, then exit.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::WorkQueue;
    use std::sync::Arc;

    #[test]
    fn front_only_and_in_order() {
        let q = WorkQueue::new(1);
        q.push(vec![1, 2, 3]).unwrap();
        // The front does not fit: nothing is taken, not even a later item that would.
        assert_eq!(q.try_pop(|&x| x != 1), None);
        assert_eq!(q.try_pop(|_| true), Some(1));
        assert_eq!(q.pop_wait(), Some(2));
        assert_eq!(q.try_pop(|_| true), Some(3));
        assert_eq!(q.try_pop(|_| true), None);
    }

    #[test]
    fn fair_share_splits_queued_and_held_work() {
        let q = WorkQueue::new(4);
        assert_eq!(q.fair_share(), 1, "nothing to do: one each");
        q.push((0..10).collect()).unwrap();
        assert_eq!(q.fair_share(), 3); // ceil(10 / 4)
        for _ in 0..6 {
            q.try_pop(|_| true).unwrap();
            q.started();
        }
        assert_eq!(q.fair_share(), 3, "taking work does not change the total");
        for _ in 0..6 {
            q.finished();
        }
        assert_eq!(q.fair_share(), 1); // ceil(4 / 4)
    }

    #[test]
    fn a_worker_that_may_take_only_some_items_sees_each_new_front() {
        let q = Arc::new(WorkQueue::with_restriction(2, true));
        let even_only = {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                while let Some(x) = q.pop_wait_if(|x: &i32| x % 2 == 0) {
                    got.push(x);
                }
                got
            })
        };
        // The front (1) is not for the sleeper: another worker takes it, and
        // the sleeper must wake for the 2 behind it without a new push.
        q.push(vec![1, 2]).unwrap();
        while q.sleepers() == 0 {
            std::thread::yield_now();
        }
        assert_eq!(q.try_pop(|&x| x == 1), Some(1));
        let t0 = std::time::Instant::now();
        while q.pending() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!q.pending(), "the sleeper never took the new front");
        // Closed with only an item it may not take: it exits and leaves it.
        q.push(vec![3]).unwrap();
        q.close();
        assert_eq!(even_only.join().unwrap(), vec![2]);
        assert_eq!(q.try_pop(|_| true), Some(3));
    }

    #[test]
    fn sleeping_workers_wake_and_drain_before_close_ends_them() {
        let q = Arc::new(WorkQueue::new(3));
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(x) = q.pop_wait() {
                        got.push(x);
                    }
                    got
                })
            })
            .collect();
        for i in 0..100 {
            q.push(vec![2 * i, 2 * i + 1]).unwrap();
        }
        q.close();
        assert_eq!(q.push(vec![7]), Err(vec![7]), "a closed queue refuses work");
        let mut all: Vec<i32> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        all.sort();
        assert_eq!(all, (0..200).collect::<Vec<_>>(), "each item exactly once");
        assert_eq!(q.pop_wait(), None);
    }
}
