//! The engine's single queue of chunks waiting for a worker.
//!
//! Workers pull from it, so a chunk goes to whichever worker can start it
//! first: one that has a bounce slot free for it (device memory) or room in
//! its host-I/O budget. Chunks dealt out round-robin instead wait behind a
//! worker that is blocked on its oldest GPU copy while other workers have
//! free slots (4.5 ms mean queueing at QD128 on the H200), and a large
//! request waits for its most loaded worker.
//!
//! Idle workers sleep on the condition variable; busy ones poll the queue
//! between completions, and take the front chunk only when it fits (strict
//! FIFO: chunks start in the order they were cut).
//!
//! One mutex-guarded deque is enough: at 50 GB/s in 4 MiB chunks the queue
//! sees about 12,000 pushes and as many pops a second, and 4 KiB random
//! reads at the 90,000 IOPS of the H200's disk about 90,000; each holds the
//! lock for one VecDeque operation (tens of nanoseconds), well under 1 % of
//! one core even when every hold is contended. Busy workers look at an
//! atomic length before they take the lock.
//!
//! The queue has no bound of its own; its bound is the callers'. It holds
//! the chunks of requests that callers have submitted and not yet seen
//! finish, and each caller bounds those: a synchronous call waits for its
//! one request, a batch context holds at most `max_batch_entries` entries,
//! a stream op is one request. A request is at most `MAX_RW_COUNT` bytes,
//! so at most 32,768 chunks of 64 KiB. Blocking in `push` instead would
//! make an asynchronous submission (a batch, a stream op) wait for the
//! workers, and a completion callback that submits more I/O on a worker
//! thread could wait for itself.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

struct State<T> {
    chunks: VecDeque<T>,
    closed: bool,
    /// Workers asleep in [`WorkQueue::pop_wait_for`] that may take any item,
    /// and those that may not take restricted ones.
    waiting_all: usize,
    waiting_open: usize,
}

/// FIFO of work items (the engine's are [`crate::request::Chunk`]s).
pub(crate) struct WorkQueue<T> {
    state: Mutex<State<T>>,
    wake_all: Condvar,
    wake_open: Condvar,
    /// Chunks queued, readable without the lock (busy workers poll often).
    len: AtomicUsize,
    /// Chunks taken and not finished, over all workers ([`WorkQueue::started`]).
    held: AtomicUsize,
    workers: usize,
    /// Items for which this says true may be taken only by some workers
    /// (those that call [`WorkQueue::pop_wait_for`] with `all`).
    restricted: Option<fn(&T) -> bool>,
}

fn notify(cv: &Condvar, n: usize) {
    if n == 1 {
        cv.notify_one();
    } else if n > 1 {
        cv.notify_all();
    }
}

impl<T> WorkQueue<T> {
    /// A queue for `workers` workers (the divisor of [`WorkQueue::fair_share`]).
    #[cfg(test)]
    pub(crate) fn new(workers: usize) -> Self {
        Self::with_restriction(workers, None)
    }

    /// As [`WorkQueue::new`]; items for which `restricted` says true may be
    /// taken only by some workers (see [`WorkQueue::pop_wait_for`]).
    pub(crate) fn with_restriction(workers: usize, restricted: Option<fn(&T) -> bool>) -> Self {
        WorkQueue {
            state: Mutex::new(State {
                chunks: VecDeque::new(),
                closed: false,
                waiting_all: 0,
                waiting_open: 0,
            }),
            wake_all: Condvar::new(),
            wake_open: Condvar::new(),
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
        let open = chunks.iter().filter(|c| self.open(c)).count();
        s.chunks.extend(chunks);
        self.len.store(s.chunks.len(), Ordering::Release);
        // A worker that may not take restricted items can start only when an
        // open one is at the front; the others can take anything.
        let front_open = s.chunks.front().is_some_and(|c| self.open(c));
        let wake_open = if front_open {
            s.waiting_open.min(open)
        } else {
            0
        };
        let wake_all = s.waiting_all.min(n - wake_open);
        drop(s);
        notify(&self.wake_open, wake_open);
        notify(&self.wake_all, wake_all);
        Ok(())
    }

    /// Any worker may take `item`.
    fn open(&self, item: &T) -> bool {
        !self.restricted.is_some_and(|r| r(item))
    }

    /// Whether a worker that may (`all`) or may not take restricted items may take `item`.
    fn may_take(&self, item: &T, all: bool) -> bool {
        all || self.open(item)
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
        self.take_front(&mut s)
    }

    /// Pop the front (the caller has checked it may), keeping `len` and the
    /// sleepers up to date.
    fn take_front(&self, s: &mut State<T>) -> Option<T> {
        let c = s.chunks.pop_front();
        self.len.store(s.chunks.len(), Ordering::Release);
        self.front_changed(s, c.as_ref().is_some_and(|c| !self.open(c)));
        c
    }

    /// After a pop: workers that may not take restricted items sleep only
    /// behind a restricted front (or on an empty queue), so when one left and
    /// an open item is now in front, they may start it. Once closed, every
    /// sleeper looks again (and exits when nothing is left for it).
    fn front_changed(&self, s: &State<T>, took_restricted: bool) {
        if s.closed {
            self.wake_all.notify_all();
            self.wake_open.notify_all();
        } else if took_restricted
            && s.waiting_open > 0
            && s.chunks.front().is_some_and(|c| self.open(c))
        {
            self.wake_open.notify_all();
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
    /// slack of one more, the first worker to wake takes both halves of a
    /// 1 MiB read meant for two (on a 2-core VM: 3.3 GB/s instead of 10).
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
        let s = self.lock();
        s.waiting_all + s.waiting_open
    }

    /// Whether anything is queued (no lock taken).
    #[cfg(test)]
    fn pending(&self) -> bool {
        self.len.load(Ordering::Acquire) > 0
    }

    /// Wait for a chunk. `None` once the queue is closed and empty.
    #[cfg(test)]
    pub(crate) fn pop_wait(&self) -> Option<T> {
        self.pop_wait_for(true)
    }

    /// Wait for a front chunk this worker may take (`all`: restricted ones
    /// too). `None` once the queue is closed and holds nothing this worker
    /// may take (the others drain it).
    pub(crate) fn pop_wait_for(&self, all: bool) -> Option<T> {
        let mut s = self.lock();
        loop {
            if s.chunks.front().is_some_and(|c| self.may_take(c, all)) {
                return self.take_front(&mut s);
            }
            if s.closed && !s.chunks.iter().any(|c| self.may_take(c, all)) {
                return None;
            }
            if all {
                s.waiting_all += 1;
                s = self.wake_all.wait(s).unwrap_or_else(|e| e.into_inner());
                s.waiting_all -= 1;
            } else {
                s.waiting_open += 1;
                s = self.wake_open.wait(s).unwrap_or_else(|e| e.into_inner());
                s.waiting_open -= 1;
            }
        }
    }

    /// Refuse new chunks; workers drain what is queued, then exit.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake_all.notify_all();
        self.wake_open.notify_all();
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

    /// A worker thread that pops (restricted items too when `all`) until the
    /// queue is closed, and returns what it got.
    fn collector(q: &Arc<WorkQueue<i32>>, all: bool) -> std::thread::JoinHandle<Vec<i32>> {
        let q = q.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            while let Some(x) = q.pop_wait_for(all) {
                got.push(x);
            }
            got
        })
    }

    /// Wait (at most 10 s) until nothing is queued.
    fn drained<T>(q: &WorkQueue<T>) {
        let t0 = std::time::Instant::now();
        while q.pending() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn a_worker_that_may_take_only_some_items_sees_each_new_front() {
        // Odd items are restricted; the sleeper may take only even ones.
        let q = Arc::new(WorkQueue::with_restriction(2, Some(|x: &i32| x % 2 == 1)));
        let open_only = collector(&q, false);
        // The front (1) is not for the sleeper: another worker takes it, and
        // the sleeper must wake for the 2 behind it without a new push.
        q.push(vec![1, 2]).unwrap();
        while q.sleepers() == 0 {
            std::thread::yield_now();
        }
        assert_eq!(q.try_pop(|&x| x == 1), Some(1));
        drained(&q);
        assert!(!q.pending(), "the sleeper never took the new front");
        // An open item pushed behind a restricted front waits for the front.
        q.push(vec![3, 4]).unwrap();
        assert_eq!(q.try_pop(|&x| x == 3), Some(3));
        drained(&q);
        assert!(!q.pending(), "the sleeper never took 4");
        // Closed with only an item it may not take: it exits and leaves it.
        q.push(vec![5]).unwrap();
        q.close();
        assert_eq!(open_only.join().unwrap(), vec![2, 4]);
        assert_eq!(q.try_pop(|_| true), Some(5));
    }

    #[test]
    fn restricted_items_wake_a_worker_that_may_take_them() {
        let q = Arc::new(WorkQueue::with_restriction(2, Some(|x: &i32| x % 2 == 1)));
        let (open_only, any) = (collector(&q, false), collector(&q, true));
        while q.sleepers() < 2 {
            std::thread::yield_now();
        }
        // One restricted item: only the worker that may take it can, and it
        // must be the one woken.
        q.push(vec![7]).unwrap();
        drained(&q);
        assert!(!q.pending(), "nobody took the restricted item");
        q.close();
        assert_eq!(open_only.join().unwrap(), Vec::<i32>::new());
        assert_eq!(any.join().unwrap(), vec![7]);
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
