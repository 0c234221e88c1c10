//! Life after `fork()`.
//!
//! `fork()` copies the calling thread only. Every worker thread, the rings
//! they own and the GPU runtime's own threads are absent in the child, and any
//! lock one of them held at the moment of the fork stays held there forever.
//! The child therefore never touches the parent's engine state: a
//! `pthread_atfork` child handler bumps a generation counter (an atomic add,
//! nothing else, as a handler in a multi-threaded parent must), and state that
//! belongs to one process ([`PerProcess`]) is created anew the first time the
//! child asks for it. The parent's copy is leaked on purpose: dropping it
//! would join threads that do not exist or take locks that nobody will
//! release. What the leak costs the child is the copy-on-write view of the
//! parent's heap it has anyway, plus descriptors inherited from the parent
//! (rings, O_DIRECT reopens), which stay open until the child exits.
//!
//! Workers start while the engine runs (as work needs them). A fork while
//! one is setting itself up (mapping and pinning its slab, opening its ring)
//! would copy whatever allocator or runtime lock that thread held into the
//! child, where nobody releases it: glibc's malloc guards its own locks
//! around fork, but an interposed allocator (AddressSanitizer's) or a GPU
//! runtime need not. So a `pthread_atfork` prepare handler lets such starts
//! finish first ([`Starting`]; it waits at most [`START_WAIT`]).
//!
//! The GPU runtime decides for itself whether a child may use it. CUDA does
//! not allow a child to use CUDA when the parent had initialised it: the
//! child's `cuInit` fails and device memory is unusable there, while host
//! memory keeps working. [`explain_missing_gpu`] says so in one log line,
//! with the remedy (Python's `spawn` or `forkserver` start method).

use crate::gpu::{Gpu, GpuError};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static GENERATION: AtomicU64 = AtomicU64::new(0);
static HOOKED: AtomicBool = AtomicBool::new(false);
/// Threads of ours setting themselves up now ([`Starting`]).
static STARTING: AtomicUsize = AtomicUsize::new(0);
/// The longest a fork waits for starting threads: a worker's start takes
/// milliseconds to tens of milliseconds (its slab mapped and pinned); past
/// this the fork goes ahead.
pub const START_WAIT: Duration = Duration::from_secs(2);

extern "C" fn in_child() {
    // Only atomic stores: the child of a multi-threaded parent may call
    // nothing that can take a lock until it execs or starts afresh. The
    // parent's starting threads do not exist here.
    GENERATION.fetch_add(1, Ordering::Relaxed);
    STARTING.store(0, Ordering::Relaxed);
}

extern "C" fn before_fork() {
    // The parent, before it forks: an ordinary context, where waiting is allowed.
    let t0 = Instant::now();
    while STARTING.load(Ordering::Acquire) > 0 && t0.elapsed() < START_WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Held while a thread of the library sets itself up; `fork()` waits for it
/// (module notes). Made before the thread is spawned, so a fork between the
/// spawn and the thread's first instruction waits too.
pub(crate) struct Starting(());

impl Starting {
    pub(crate) fn begin() -> Starting {
        generation();
        STARTING.fetch_add(1, Ordering::AcqRel);
        Starting(())
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        STARTING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How many `fork()`s lie between the process that first used the library
/// and this one (0 in that process). Installs the fork handler on first use;
/// the handler is inherited by children, so grandchildren count too.
pub fn generation() -> u64 {
    // Every call through the C ABI comes here. A swap is a locked write even
    // when it stores the value already there, so it would take the cache
    // line exclusive on each call and bounce it between the calling
    // threads' cores; once the handler is in, a plain load answers.
    if !HOOKED.load(Ordering::Acquire) && !HOOKED.swap(true, Ordering::AcqRel) {
        // SAFETY: registers plain extern "C" functions (no unwinding; the
        // child's takes no lock, the parent's prepare handler only sleeps)
        // as fork handlers; glibc removes them if the library that holds
        // them is unloaded.
        unsafe { libc::pthread_atfork(Some(before_fork), None, Some(in_child)) };
    }
    GENERATION.load(Ordering::Acquire)
}

struct Slot<T> {
    generation: u64,
    value: T,
}

/// A value that exists once per process: created on first use, and created
/// again in a child after `fork()` (the parent's value is leaked, never
/// dropped or locked in the child; see the module notes).
///
/// ```
/// use hipfile_engine::fork::PerProcess;
/// static COUNTERS: PerProcess<std::sync::atomic::AtomicU32> = PerProcess::new();
/// let c = COUNTERS.get_or_init(Default::default);
/// c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
/// assert_eq!(COUNTERS.get_or_init(Default::default).load(std::sync::atomic::Ordering::Relaxed), 1);
/// ```
pub struct PerProcess<T> {
    current: AtomicPtr<Slot<T>>,
    /// Owns `T` values (drop check, auto traits); the impls below restore
    /// `Send`/`Sync` under the bounds that sharing the value needs.
    _owns: PhantomData<*mut T>,
}

// SAFETY: a value is reached only through `&T` (needs `T: Sync`), and may be
// created on one thread and dropped on another (needs `T: Send`).
unsafe impl<T: Send + Sync> Sync for PerProcess<T> {}
// SAFETY: moving the holder moves ownership of the values, which `T: Send` allows.
unsafe impl<T: Send> Send for PerProcess<T> {}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PerProcess<T> {
    pub const fn new() -> Self {
        PerProcess {
            current: AtomicPtr::new(std::ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// This process's value, made by `init` if this process has none yet.
    /// Two threads racing here may both run `init`; one value wins and the
    /// other is dropped before either returns.
    pub fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
        let gen = generation();
        let mut seen = self.current.load(Ordering::Acquire);
        // A slot, once published, is never freed while `self` lives (only
        // `Drop` frees the current one), so `&Slot` lives as long as `&self`.
        // SAFETY: `seen` is null or a published slot (see above).
        if let Some(slot) = unsafe { seen.as_ref() } {
            if slot.generation == gen {
                return &slot.value;
            }
        }
        let fresh = Box::into_raw(Box::new(Slot {
            generation: gen,
            value: init(),
        }));
        loop {
            match self
                .current
                .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // The parent's slot (if `seen` was one) is leaked on purpose.
                // SAFETY: `fresh` is published and never freed while `self` lives.
                Ok(_) => return unsafe { &(*fresh).value },
                Err(now) => {
                    // SAFETY: `now` is a published slot (see above).
                    if unsafe { (*now).generation } == gen {
                        // SAFETY: `fresh` was never published; we own it alone.
                        drop(unsafe { Box::from_raw(fresh) });
                        // SAFETY: `now` is published and lives as long as `self`.
                        return unsafe { &(*now).value };
                    }
                    seen = now;
                }
            }
        }
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let p = *self.current.get_mut();
        if !p.is_null() {
            // SAFETY: `&mut self`: nobody else can reach the slot; slots of
            // earlier generations were leaked when they were replaced.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// In a forked child where the GPU runtime refused to start, say why device
/// memory is unusable here and what to do instead. `gpu` is the runtime the
/// child loaded (without devices, it is the "none" runtime holding the reason).
pub fn explain_missing_gpu(gpu: &dyn Gpu) {
    if generation() == 0 || gpu.has_devices() {
        return;
    }
    // The "none" runtime answers every device call with the reason it has no
    // runtime; a failed cuInit/hipInit there means a runtime is installed but
    // refuses this process, which after fork() is the runtime's fork rule.
    let why = match gpu.bind_thread(0) {
        Err(GpuError::NotPresent(why)) => why,
        _ => return,
    };
    if why.contains("cuInit") || why.contains("hipInit") {
        crate::log_warn!(
            "this process was forked from one that had initialised the GPU runtime, which then \
             refuses the child ({why}): device memory cannot be used here, host memory works. \
             For device I/O in worker processes use the 'spawn' or 'forkserver' start method \
             (multiprocessing / torch DataLoader multiprocessing_context)"
        );
    }
}

/// The error a request for device memory gets when no runtime is usable:
/// the runtime's own reason (see [`explain_missing_gpu`]).
pub fn missing_gpu_error(gpu: &dyn Gpu) -> GpuError {
    match gpu.bind_thread(0) {
        Err(e) => e,
        Ok(()) => GpuError::NotPresent("no GPU runtime is loaded".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_process_value_is_made_once() {
        let p: PerProcess<u32> = PerProcess::new();
        let mut calls = 0;
        let a = *p.get_or_init(|| {
            calls += 1;
            7
        });
        let b = *p.get_or_init(|| {
            calls += 1;
            8
        });
        assert_eq!((a, b, calls), (7, 7, 1));
    }

    #[test]
    fn a_child_gets_a_fresh_value_and_the_parent_keeps_its_own() {
        static P: PerProcess<std::sync::atomic::AtomicU32> = PerProcess::new();
        P.get_or_init(Default::default)
            .store(41, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the child only reads atomics and calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let v = P
                .get_or_init(Default::default)
                .load(std::sync::atomic::Ordering::Relaxed);
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if v == 0 && generation() >= 1 { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child we made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(
            P.get_or_init(Default::default)
                .load(std::sync::atomic::Ordering::Relaxed),
            41
        );
    }
}
