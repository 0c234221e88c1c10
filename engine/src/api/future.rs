//! The result of an asynchronous transfer: a std `Future` (no runtime needed)
//! that can also be waited for by blocking.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    out: Option<T>,
    finished: bool,
    waker: Option<Waker>,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    cv: Condvar,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, Slot<T>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An asynchronous transfer in flight. Its output is `(result, buffer)`:
/// the byte count or the error, and the buffer given to the call, back in
/// the caller's hands (for a batch: one result per entry and every buffer).
///
/// Await it from any executor, or block with [`IoFuture::wait`]. Dropping it
/// does not cancel the transfer: the engine keeps the buffer until the
/// transfer has finished and then drops it.
///
/// ```
/// use hipfile_engine::{Config, Engine, OpenMode};
/// # let path = std::env::temp_dir().join(format!("hipfile-doc-fut-{}", std::process::id()));
/// std::fs::write(&path, vec![3u8; 1 << 20]).unwrap();
/// let engine = Engine::new(Config { io_threads: 2, ..Config::default() }).unwrap();
/// let f = engine.open(&path, OpenMode::Read).unwrap();
/// let pending = f.read_async(vec![0u8; 1 << 20], 0);
/// let (n, buf) = pending.wait();
/// assert_eq!(n.unwrap(), 1 << 20);
/// assert!(buf.iter().all(|&b| b == 3));
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[must_use = "the transfer runs anyway; wait for it or await it to get the buffer back"]
pub struct IoFuture<T> {
    shared: Arc<Shared<T>>,
}

/// The engine's side of an [`IoFuture`]: fills it once.
pub(crate) struct Completer<T> {
    shared: Arc<Shared<T>>,
}

pub(crate) fn pair<T>() -> (IoFuture<T>, Completer<T>) {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot {
            out: None,
            finished: false,
            waker: None,
        }),
        cv: Condvar::new(),
    });
    (
        IoFuture {
            shared: shared.clone(),
        },
        Completer { shared },
    )
}

impl<T> Completer<T> {
    pub(crate) fn complete(self, out: T) {
        let waker = {
            let mut s = self.shared.lock();
            s.out = Some(out);
            s.finished = true;
            s.waker.take()
        };
        self.shared.cv.notify_all();
        // Outside the lock: a waker may run the task inline.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> IoFuture<T> {
    /// An already finished future (a transfer refused before it started).
    pub(crate) fn ready(out: T) -> IoFuture<T> {
        let (f, c) = pair();
        c.complete(out);
        f
    }

    /// True once the transfer has finished (the output is ready).
    pub fn is_done(&self) -> bool {
        self.shared.lock().finished
    }

    /// Block the calling thread until the transfer has finished.
    pub fn wait(self) -> T {
        let mut s = self.shared.lock();
        loop {
            if let Some(out) = s.out.take() {
                return out;
            }
            s = self.shared.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Block until finished without taking the output (it stays for
    /// [`IoFuture::wait`], [`IoFuture::try_take`] or `.await`).
    pub fn wait_done(&self) {
        let mut s = self.shared.lock();
        while !s.finished {
            s = self.shared.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// As [`IoFuture::wait_done`], for at most `limit`; true once finished.
    pub fn wait_done_timeout(&self, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        let mut s = self.shared.lock();
        while !s.finished {
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            s = self
                .shared
                .cv
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// The output if the transfer has finished and it was not taken yet.
    pub fn try_take(&mut self) -> Option<T> {
        self.shared.lock().out.take()
    }
}

impl<T> Future for IoFuture<T> {
    type Output = T;

    /// Ready with the output once the transfer has finished. Polling again
    /// after that is a contract violation of `Future` and panics.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.shared.lock();
        if let Some(out) = s.out.take() {
            return Poll::Ready(out);
        }
        assert!(!s.finished, "IoFuture polled after it returned Ready");
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> std::fmt::Debug for IoFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoFuture")
            .field("done", &self.is_done())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn poll_is_pending_until_completed_then_ready_and_wakes_once() {
        let (mut f, c) = pair::<u32>();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert!(!f.is_done());
        c.complete(9);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(f.is_done());
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(9));
    }

    #[test]
    fn wait_returns_the_output_completed_on_another_thread() {
        let (f, c) = pair::<String>();
        let t = std::thread::spawn(move || c.complete("done".into()));
        assert_eq!(f.wait(), "done");
        t.join().unwrap();
    }

    #[test]
    fn wait_done_timeout_gives_up_while_pending() {
        let (f, c) = pair::<u8>();
        assert!(!f.wait_done_timeout(std::time::Duration::from_millis(1)));
        c.complete(2);
        assert!(f.wait_done_timeout(std::time::Duration::from_millis(1)));
    }

    #[test]
    fn wait_done_leaves_the_output_for_try_take() {
        let (mut f, c) = pair::<u8>();
        c.complete(1);
        f.wait_done();
        assert_eq!(f.try_take(), Some(1));
        assert_eq!(f.try_take(), None);
    }
}
