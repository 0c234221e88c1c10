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
//! The queue also decides when the engine needs another worker. Workers
//! start lazily: an engine opens with one, and [`WorkQueue::push`] reserves
//! more (up to the configured maximum) when the chunks queued outnumber the
//! idle workers, so a process that issues one request at a time holds one
//! worker and its bounce slab, and one that keeps the link busy grows to the
//! maximum. The check runs under the lock `push` already holds: one atomic
//! load and a compare.
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
use std::ops::Range;
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

/// Which items only some workers may take, and how many workers (the first
/// ones) may take them.
pub(crate) type Restriction<T> = (fn(&T) -> bool, usize);

/// FIFO of work items (the engine's are [`crate::request::Chunk`]s).
pub(crate) struct WorkQueue<T> {
    state: Mutex<State<T>>,
    wake_all: Condvar,
    wake_open: Condvar,
    /// Chunks queued, readable without the lock (busy workers poll often).
    len: AtomicUsize,
    /// Chunks taken and not finished, over all workers ([`WorkQueue::started`]).
    held: AtomicUsize,
    /// Workers reserved so far (started, starting, or failed to start): the
    /// next worker's id, and the divisor of [`WorkQueue::fair_share`]. Only
    /// changed with the lock held.
    reserved: AtomicUsize,
    /// Workers that hold no chunk (asleep, on their way to sleep, or still
    /// starting): the ones a new chunk can go to at once.
    idle: AtomicUsize,
    /// The most workers the engine may have.
    max_workers: usize,
    /// Items for which this says true may be taken only by some workers
    /// (those that call [`WorkQueue::pop_wait_for`] with `all`): the first
    /// `.1` workers.
    restricted: Option<Restriction<T>>,
}

fn notify(cv: &Condvar, n: usize) {
    if n == 1 {
        cv.notify_one();
    } else if n > 1 {
        cv.notify_all();
    }
}

impl<T> WorkQueue<T> {
    /// A queue for `workers` workers, all reserved at once (no growth).
    #[cfg(test)]
    pub(crate) fn new(workers: usize) -> Self {
        let q = Self::with_restriction(workers, None);
        q.reserve(workers);
        q
    }

    /// A queue for at most `max_workers` workers, none reserved yet (see
    /// [`WorkQueue::reserve`]); items for which `restricted.0` says true may
    /// be taken only by the first `restricted.1` workers (see
    /// [`WorkQueue::pop_wait_for`]).
    pub(crate) fn with_restriction(max_workers: usize, restricted: Option<Restriction<T>>) -> Self {
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
            reserved: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            max_workers: max_workers.max(1),
            restricted,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A worker that panicked while holding the lock left the queue itself
        // consistent (every operation is a single VecDeque call).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserve up to `n` more workers (never past the maximum); their ids.
    /// They count as idle from now on: the caller starts them, and reports
    /// each that cannot start with [`WorkQueue::start_failed`].
    pub(crate) fn reserve(&self, n: usize) -> Range<usize> {
        let _s = self.lock();
        self.reserve_locked(n)
    }

    fn reserve_locked(&self, n: usize) -> Range<usize> {
        self.reserve_up_to(n, self.max_workers)
    }

    /// Reserve up to `n` more workers, never past `limit` in all.
    fn reserve_up_to(&self, n: usize, limit: usize) -> Range<usize> {
        let first = self.reserved.load(Ordering::Relaxed);
        let n = n.min(limit.min(self.max_workers).saturating_sub(first));
        self.idle.fetch_add(n, Ordering::AcqRel);
        self.reserved.store(first + n, Ordering::Release);
        first..first + n
    }

    /// Workers reserved so far ([`WorkQueue::reserve`]).
    pub(crate) fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Acquire)
    }

    /// A worker that held nothing took a chunk.
    pub(crate) fn busy(&self) {
        self.idle.fetch_sub(1, Ordering::AcqRel);
    }

    /// A worker finished its last chunk. Called before that chunk's request
    /// is told, so a caller that waits for one request and then submits the
    /// next finds the worker idle and starts no other.
    pub(crate) fn idle(&self) {
        self.idle.fetch_add(1, Ordering::AcqRel);
    }

    /// A reserved worker could not start (its id stays used: the engine does
    /// not try again on every push).
    pub(crate) fn start_failed(&self) {
        self.idle.fetch_sub(1, Ordering::AcqRel);
    }

    /// Queue `chunks` in order; gives them back if the queue is closed.
    /// Returns the ids of the workers reserved to start for them: as many
    /// as the queued chunks outnumber the idle workers, up to the maximum
    /// (usually none).
    #[cfg(test)]
    pub(crate) fn push(&self, chunks: Vec<T>) -> Result<Range<usize>, Vec<T>> {
        self.push_expecting(chunks, 0)
    }

    /// [`WorkQueue::push`], where `more` chunks of the same request follow
    /// in later pushes: workers are reserved as if they were queued too, so
    /// a request queued in parts starts the workers one push of it would.
    /// Restricted or not, they are taken to be like these.
    pub(crate) fn push_expecting(
        &self,
        chunks: Vec<T>,
        more: usize,
    ) -> Result<Range<usize>, Vec<T>> {
        let mut s = self.lock();
        if s.closed {
            return Err(chunks);
        }
        let n = chunks.len();
        let open = chunks.iter().filter(|c| self.open(c)).count();
        s.chunks.extend(chunks);
        let queued = s.chunks.len();
        self.len.store(queued, Ordering::Release);
        let idle = self.idle.load(Ordering::Acquire);
        let queued = queued.saturating_add(more);
        let grow = if queued > idle && self.reserved.load(Ordering::Relaxed) < self.max_workers {
            // Only the first workers may take restricted chunks: a push of
            // nothing else needs no worker past them.
            let limit = match self.restricted {
                Some((_, takers)) if open == 0 => takers,
                _ => self.max_workers,
            };
            self.reserve_up_to(queued - idle, limit)
        } else {
            0..0
        };
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
        Ok(grow)
    }

    /// Any worker may take `item`.
    fn open(&self, item: &T) -> bool {
        !self.restricted.is_some_and(|(r, _)| r(item))
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
        self.fair_share_among(self.reserved())
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

    #[test]
    fn a_push_reserves_workers_only_for_chunks_no_idle_worker_can_take() {
        let q = WorkQueue::with_restriction(8, None);
        assert_eq!(q.reserve(1), 0..1, "the engine's first worker");
        // One chunk, one idle worker: nothing to start.
        assert_eq!(q.push(vec![1]).unwrap(), 0..0);
        q.try_pop(|_| true).unwrap();
        q.busy();
        // The worker is busy: one more chunk needs one more worker.
        assert_eq!(q.push(vec![2]).unwrap(), 1..2);
        // Three queued and one idle worker (1, still starting): two more.
        assert_eq!(q.push(vec![3, 4]).unwrap(), 2..4);
        // A burst grows to the maximum and no further.
        assert_eq!(q.push((0..100).collect()).unwrap(), 4..8);
        assert!(q.push(vec![5]).unwrap().is_empty());
        assert_eq!(q.reserved(), 8);
    }

    #[test]
    fn chunks_still_to_come_reserve_workers_as_if_queued() {
        let q = WorkQueue::with_restriction(8, None);
        q.reserve(1);
        // One chunk now, three to follow, one idle worker: three more start
        // with the first push, as with all four in one.
        assert_eq!(q.push_expecting(vec![1], 3).unwrap(), 1..4);
        // Restricted chunks stand for restricted ones to come.
        let r = WorkQueue::with_restriction(8, Some((|x: &i32| x % 2 == 1, 2)));
        r.reserve(1);
        r.busy();
        assert_eq!(r.push_expecting(vec![1], 5).unwrap(), 1..2);
    }

    #[test]
    fn a_worker_idle_again_before_the_next_push_starts_no_other() {
        let q = WorkQueue::with_restriction(8, None);
        q.reserve(1);
        for i in 0..10 {
            assert!(q.push(vec![i]).unwrap().is_empty(), "push {i}");
            q.try_pop(|_| true).unwrap();
            q.busy();
            q.idle();
        }
        assert_eq!(q.reserved(), 1);
    }

    #[test]
    fn restricted_chunks_alone_grow_only_to_the_workers_that_take_them() {
        let q = WorkQueue::with_restriction(8, Some((|x: &i32| x % 2 == 1, 2)));
        q.reserve(1);
        q.busy();
        assert_eq!(q.push(vec![1, 3, 5, 7]).unwrap(), 1..2);
        // Open chunks may go to any worker.
        assert_eq!(q.push(vec![2, 4]).unwrap(), 2..7);
    }

    #[test]
    fn a_worker_that_failed_to_start_is_not_idle_and_its_id_stays_used() {
        let q = WorkQueue::with_restriction(4, None);
        assert_eq!(q.reserve(2), 0..2);
        q.start_failed();
        // One idle worker for two chunks: one more starts, with a fresh id.
        assert_eq!(q.push(vec![1, 2]).unwrap(), 2..3);
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
        let q = Arc::new(WorkQueue::with_restriction(
            2,
            Some((|x: &i32| x % 2 == 1, 1)),
        ));
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
        let q = Arc::new(WorkQueue::with_restriction(
            2,
            Some((|x: &i32| x % 2 == 1, 1)),
        ));
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
