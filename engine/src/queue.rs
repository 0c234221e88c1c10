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
}

impl<T> WorkQueue<T> {
    /// A queue for `workers` workers (the divisor of [`WorkQueue::fair_share`]).
    pub(crate) fn new(workers: usize) -> Self {
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
        let wake = s.waiting.min(n);
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
        c
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
        let all = self.held.load(Ordering::Acquire) + self.len.load(Ordering::Acquire);
        all.div_ceil(self.workers).max(1)
    }

    /// Whether anything is queued (no lock taken).
    pub(crate) fn pending(&self) -> bool {
        self.len.load(Ordering::Acquire) > 0
    }

    /// Wait for a chunk. `None` once the queue is closed and empty.
    pub(crate) fn pop_wait(&self) -> Option<T> {
        let mut s = self.lock();
        loop {
            if let Some(c) = s.chunks.pop_front() {
                self.len.store(s.chunks.len(), Ordering::Release);
                return Some(c);
            }
            if s.closed {
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
