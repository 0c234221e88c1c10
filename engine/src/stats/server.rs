//! The library side: makes the region, serves it to readers, and copies the
//! engines' own counters into it.
//!
//! The region is a sealed memfd mapped shared; a listener thread hands the
//! memfd to whoever connects to the abstract UNIX socket
//! `@hipfile-stats.<pid>` (after checking the peer's uid), then keeps the
//! connection to refresh the engine figures every 100 ms until the reader
//! hangs up. `ais-stats PROGRAM` instead passes an inherited socket in
//! `HIPFILE_STATS_SOCKET`, over which the library sends its memfd as soon as
//! the region exists, so a program that runs for a millisecond is still seen.
//! See `stats.rs` for why this mechanism.

use super::layout::{self, engine, Region};
use super::record;
use crate::config::Config;
use crate::stats::{Stats, StatsSnapshot, STAGES};
use crate::{log_info, log_warn};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// The abstract socket a process with statistics listens on.
pub fn socket_name(pid: u32) -> String {
    format!("hipfile-stats.{pid}")
}

/// The abstract socket a process with statistics turned off binds (and does
/// not listen on): `ais-stats` finds it in /proc/net/unix and can say
/// "statistics are off" instead of "not a hipfile process".
pub fn off_marker_name(pid: u32) -> String {
    format!("hipfile-stats-off.{pid}")
}

/// The memfd's name, as /proc/PID/fd and /proc/PID/maps show it.
pub const MEMFD_NAME: &str = "hipfile-stats";
/// Environment variable `ais-stats PROGRAM` sets: `FD:PID`, an inherited
/// datagram socket and the pid of the `ais-stats` at its other end.
pub const HANDOFF_ENV: &str = "HIPFILE_STATS_SOCKET";
/// How often the engine figures are refreshed while a reader is connected.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(100);
/// First byte of the server's reply: the memfd follows, or the peer may not read.
pub const REPLY_OK: u8 = b'Y';
pub const REPLY_DENIED: u8 = b'N';

/// What the server knows about one running engine.
struct Watched {
    stats: Weak<Stats>,
    /// Bounce slots per worker (workers start as work needs them; their
    /// number and slab bytes are in `stats`).
    slots_per_worker: u64,
}

#[derive(Default)]
struct Engines {
    live: Vec<Watched>,
    /// Counters of engines that have been dropped.
    retired: [u64; engine::FIELDS],
}

static ENGINES: Mutex<Engines> = Mutex::new(Engines {
    live: Vec::new(),
    retired: [0; engine::FIELDS],
});
/// The level a `ProfileStats` parameter asked for; beats the engines' configs.
static EXPLICIT_LEVEL: Mutex<Option<u32>> = Mutex::new(None);
static MADE: OnceLock<Option<&'static Region>> = OnceLock::new();
static OFF_MARKER: OnceLock<Option<UnixListener>> = OnceLock::new();
/// Descriptors a child after fork must close (see [`in_fork_child`]).
static MEMFD: AtomicI32 = AtomicI32::new(-1);
static LISTEN_FD: AtomicI32 = AtomicI32::new(-1);

/// An engine started: count it, and make the region if its config asks for
/// statistics (the `ProfileStats` parameter, when set, decides instead).
pub(crate) fn watch(stats: &Arc<Stats>, cfg: &Config) {
    let level = EXPLICIT_LEVEL
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or(cfg.stats_level);
    ensure(level);
    if let Some(r) = record::region() {
        // The backend is chosen once per process for a setting; an engine
        // started with another setting says so here for the engines after it.
        r.header.storage.store(
            crate::storage::choice_word(cfg.io_backend),
            Ordering::Relaxed,
        );
    }
    {
        let mut e = ENGINES.lock().unwrap_or_else(|p| p.into_inner());
        e.live.retain(|w| w.stats.strong_count() > 0);
        let slots: usize = cfg.slot_classes().iter().map(|&(n, _)| n).sum();
        e.live.push(Watched {
            stats: Arc::downgrade(stats),
            slots_per_worker: slots as u64,
        });
    }
    record::event(layout::Event::EngineStart);
    publish();
}

/// `stats` is being dropped: keep its counters in the process totals.
pub(crate) fn retire(stats: &Stats) {
    let snap = stats.snapshot();
    {
        let mut e = ENGINES.lock().unwrap_or_else(|p| p.into_inner());
        let me = stats as *const Stats;
        let Some(i) = e.live.iter().position(|w| w.stats.as_ptr() == me) else {
            // Never watched (a worker's unit test): not part of the process totals.
            return;
        };
        e.live.swap_remove(i);
        let f = figures(&snap);
        for (k, v) in f.iter().enumerate() {
            if engine::is_max(k) {
                e.retired[k] = e.retired[k].max(*v);
            } else {
                e.retired[k] += v;
            }
        }
    }
    publish();
}

/// Set the level explicitly (`hipFileSetParameterSizeT(ProfileStats)`): it
/// takes effect at once and wins over `HIPFILE_STATS_LEVEL` and the file.
pub fn set_level(level: u32) {
    let level = level.min(3);
    *EXPLICIT_LEVEL.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    ensure(level);
    record::set_level_raw(level);
}

/// Make the region if `level` > 0 and it does not exist; otherwise apply
/// `level` to the existing one. Level 0 before any region only binds the
/// off marker: no memory is shared.
fn ensure(level: u32) {
    if level == 0 && MADE.get().is_none() {
        let _ = OFF_MARKER.get_or_init(|| {
            let addr = SocketAddr::from_abstract_name(off_marker_name(std::process::id())).ok()?;
            UnixListener::bind_addr(&addr).ok()
        });
        return;
    }
    let made = MADE.get_or_init(|| match make_region(level) {
        Ok(r) => Some(r),
        Err(e) => {
            log_warn!("statistics are off: could not make their shared memory ({e})");
            None
        }
    });
    if made.is_some() {
        record::set_level_raw(level);
    }
}

fn figures(s: &StatsSnapshot) -> [u64; engine::FIELDS] {
    let mut f = [0u64; engine::FIELDS];
    f[engine::CACHE_HIT_BYTES] = s.cache_hit_bytes;
    f[engine::DIRECT_READ_BYTES] = s.direct_read_bytes;
    f[engine::BUFFERED_READ_BYTES] = s.buffered_read_bytes;
    f[engine::DIRECT_WRITE_BYTES] = s.direct_write_bytes;
    f[engine::BUFFERED_WRITE_BYTES] = s.buffered_write_bytes;
    f[engine::CACHE_MISSES] = s.cache_misses;
    f[engine::GPU_COPIES] = s.gpu_copies;
    f[engine::GPU_EVENTS] = s.gpu_events;
    f[engine::GPU_COPY_BATCHES] = s.gpu_copy_batches;
    f[engine::BOUNCED_CHUNKS] = s.bounced_chunks;
    f[engine::RETRIES] = s.retries;
    f[engine::INLINE_BYTES] = s.inline_bytes;
    f[engine::STAGE_NS..engine::STAGE_NS + STAGES].copy_from_slice(&s.stage_ns);
    f[engine::STAGE_MAX_NS..engine::STAGE_MAX_NS + STAGES].copy_from_slice(&s.stage_max_ns);
    f[engine::CHUNKS] = s.chunks;
    f[engine::CHUNK_NS] = s.chunk_ns;
    f[engine::CHUNK_MAX_NS] = s.chunk_max_ns;
    f
}

/// Copy the engines' counters (retired plus running) into the region.
pub(crate) fn publish() {
    let held = {
        let e = ENGINES.lock().unwrap_or_else(|p| p.into_inner());
        publish_locked(&e)
    };
    // Only now, with the lock released: an engine dropped while it was being
    // published leaves the last reference to its counters here, and their
    // drop (`retire`) takes the lock.
    drop(held);
}

/// Publish with the list locked. Returns the references to the running
/// engines' counters it took, for the caller to drop after unlocking (see
/// [`publish`]).
#[must_use = "drop the counters only after releasing the lock"]
fn publish_locked(e: &Engines) -> Vec<Arc<Stats>> {
    let Some(region) = record::region() else {
        return Vec::new();
    };
    let mut held = Vec::with_capacity(e.live.len());
    let mut f = e.retired;
    let (mut engines, mut workers, mut slots, mut bytes) = (0, 0, 0, 0);
    for w in &e.live {
        let Some(s) = w.stats.upgrade() else { continue };
        let snap = s.snapshot();
        for (k, v) in figures(&snap).iter().enumerate() {
            if engine::is_max(k) {
                f[k] = f[k].max(*v);
            } else {
                f[k] += v;
            }
        }
        engines += 1;
        workers += snap.workers;
        slots += snap.workers * w.slots_per_worker;
        bytes += snap.bounce_bytes;
        held.push(s);
    }
    f[engine::ENGINES] = engines;
    f[engine::WORKERS] = workers;
    f[engine::BOUNCE_SLOTS] = slots;
    f[engine::BOUNCE_BYTES] = bytes;
    for (k, v) in f.iter().enumerate() {
        region.engine[k].store(*v, Ordering::Relaxed);
    }
    let h = &region.header;
    h.published_ns
        .store(record::since_start_ns(), Ordering::Relaxed);
    h.publications.fetch_add(1, Ordering::Release);
    held
}

/// At process exit (and at unload), a last copy of the engine figures, so a
/// reader holding the memfd sees what the engines did to the end. Never
/// waits: another thread may hold the lock while the process exits.
extern "C" fn publish_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let held = match ENGINES.try_lock() {
            Ok(e) => publish_locked(&e),
            Err(_) => return,
        };
        drop(held);
    });
}

#[used]
#[link_section = ".fini_array"]
static PUBLISH_AT_EXIT: extern "C" fn() = publish_at_exit;

/// In a child after fork: the region and sockets are the parent's. Count
/// nothing, and close the listening socket (a reader connecting after the
/// parent exited would otherwise wait on this child forever) and the memfd
/// (or /proc/CHILD/fd would show the parent's statistics as the child's).
extern "C" fn in_fork_child() {
    record::detach();
    for fd in [&LISTEN_FD, &MEMFD] {
        let f = fd.swap(-1, Ordering::Relaxed);
        if f >= 0 {
            // SAFETY: closing a descriptor number this process inherited; close
            // is async-signal-safe, as a fork handler needs.
            unsafe { libc::close(f) };
        }
    }
}

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn make_region(level: u32) -> Result<&'static Region, String> {
    let size = std::mem::size_of::<Region>();
    let name = std::ffi::CString::new(MEMFD_NAME).expect("no NUL in the name");
    // SAFETY: plain syscall with a valid C string.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(os_err("memfd_create"));
    }
    // SAFETY: fd is a descriptor we own from here on.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizing our own memfd.
    if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
        return Err(os_err("ftruncate"));
    }
    // SAFETY: a fresh shared mapping of our memfd, never unmapped (the region
    // lives as long as the process).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_err("mmap"));
    }
    // A forked child must not write into the parent's counters: it gets no
    // mapping at all (and the fork handler stops it counting).
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(p, size, libc::MADV_DONTFORK) };
    // Seal the size, and (Linux 5.1+) refuse writable mappings from now on, so
    // a reader holding the memfd can only read it.
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own memfd.
    unsafe {
        if libc::fcntl(fd, libc::F_ADD_SEALS, seals | libc::F_SEAL_FUTURE_WRITE) != 0 {
            libc::fcntl(fd, libc::F_ADD_SEALS, seals);
        }
    }
    // SAFETY: the mapping is size_of::<Region>() zeroed bytes (a fresh memfd),
    // suitably aligned (page-aligned), a valid Region (all atomics).
    let region: &'static Region = unsafe { &*(p as *const Region) };
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let pid = std::process::id();
    region.init(level.min(3), pid, start_unix_ns);
    record::install(region, level);
    crate::log_debug!(
        "statistics: call latencies timed with {}",
        if super::clock::uses_tsc() {
            "the invariant TSC"
        } else {
            "CLOCK_MONOTONIC (no invariant TSC)"
        }
    );

    // SAFETY: registering a plain extern "C" function as the child handler.
    unsafe { libc::pthread_atfork(None, None, Some(in_fork_child)) };
    MEMFD.store(memfd.as_raw_fd(), Ordering::Relaxed);
    hand_off(&memfd);
    let listener =
        SocketAddr::from_abstract_name(socket_name(pid)).and_then(|a| UnixListener::bind_addr(&a));
    match listener {
        Ok(l) => {
            LISTEN_FD.store(l.as_raw_fd(), Ordering::Relaxed);
            let spawned = std::thread::Builder::new()
                .name("hipfile-stats".into())
                .spawn(move || serve(l, memfd));
            if let Err(e) = spawned {
                log_warn!("statistics: no listener thread ({e}); ais-stats -p cannot attach");
            }
        }
        Err(e) => {
            // Two copies of the engine in one process (a Rust program that also
            // loads libhipfile.so) share one pid: the second counts, unserved.
            log_info!("statistics: socket @{} not bound ({e})", socket_name(pid));
            std::mem::forget(memfd);
        }
    }
    Ok(region)
}

/// Send the memfd over the socket `ais-stats PROGRAM` left us, if any.
fn hand_off(memfd: &OwnedFd) {
    let Ok(v) = std::env::var(HANDOFF_ENV) else {
        return;
    };
    let Some((fd, pid)) = v
        .split_once(':')
        .and_then(|(f, p)| Some((f.parse::<RawFd>().ok()?, p.parse::<i32>().ok()?)))
    else {
        log_warn!("{HANDOFF_ENV}={v:?} is not FD:PID; not sending statistics");
        return;
    };
    // The number may have been closed and reused since exec: send only to a
    // socket whose other end is that ais-stats.
    match peer_pid(fd) {
        Some(p) if p == pid => {}
        _ => {
            log_info!("{HANDOFF_ENV}: descriptor {fd} is not the ais-stats socket; not sending");
            return;
        }
    }
    if let Err(e) = send_fd(fd, REPLY_OK, Some(memfd.as_raw_fd())) {
        log_info!("{HANDOFF_ENV}: could not send the statistics ({e})");
    }
}

/// The pid at the other end of UNIX socket `fd` (as it was at connect time).
pub fn peer_pid(fd: RawFd) -> Option<i32> {
    peer_cred(fd).map(|c| c.pid)
}

pub fn peer_cred(fd: RawFd) -> Option<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred)
}

/// Whether a peer running as `peer_uid` may read this process's statistics:
/// the same user, or root (what /proc/PID/fd would allow it anyway). The
/// socket is abstract, so the file system grants no permission of its own.
pub fn may_read(peer_uid: u32, my_uid: u32) -> bool {
    peer_uid == my_uid || peer_uid == 0
}

/// Send one byte, with descriptor `pass` attached when given.
pub fn send_fd(sock: RawFd, byte: u8, pass: Option<RawFd>) -> std::io::Result<()> {
    let mut data = [byte];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // u64s keep the control buffer aligned for cmsghdr.
    let mut cbuf = [0u64; 4];
    // SAFETY: an all-zero msghdr is valid (no name, no control yet).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = pass {
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: msg_control points at `space` bytes (≤ 32) we own; the
        // first header fits there and receives one descriptor.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
    // SAFETY: msg describes live buffers for the duration of the call.
    let r = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if r == 1 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Most readers kept connected (for refreshes); more are served and closed.
const MAX_CLIENTS: usize = 16;

/// The listener thread: hand out the memfd, refresh the engine figures while
/// someone is connected. Sleeps in poll(2) without a timeout when nobody is.
fn serve(listener: UnixListener, memfd: OwnedFd) {
    // SAFETY: geteuid has no preconditions.
    let my_uid = unsafe { libc::geteuid() };
    let mut clients: Vec<UnixStream> = Vec::new();
    loop {
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(clients.iter().map(|c| c.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let timeout = if clients.is_empty() {
            -1
        } else {
            PUBLISH_INTERVAL.as_millis() as i32
        };
        // SAFETY: fds is a live array of fds.len() pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            log_warn!("statistics listener stopped: {}", os_err("poll"));
            return;
        }
        // A reader that sent anything or hung up is done.
        let mut i = 0;
        clients.retain(|_| {
            i += 1;
            fds[i].revents == 0
        });
        if !clients.is_empty() {
            publish();
        }
        if fds[0].revents & libc::POLLIN != 0 {
            if let Ok((s, _)) = listener.accept() {
                let allowed = peer_cred(s.as_raw_fd()).is_some_and(|c| may_read(c.uid, my_uid));
                if allowed {
                    publish();
                    if send_fd(s.as_raw_fd(), REPLY_OK, Some(memfd.as_raw_fd())).is_ok()
                        && clients.len() < MAX_CLIENTS
                    {
                        clients.push(s);
                    }
                } else {
                    let _ = send_fd(s.as_raw_fd(), REPLY_DENIED, None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_user_or_root_may_read() {
        assert!(may_read(1000, 1000));
        assert!(may_read(0, 1000));
        assert!(!may_read(1001, 1000));
        assert!(may_read(0, 0));
        assert!(!may_read(1000, 0));
    }

    /// An engine's counters dropped while the listener publishes them leave
    /// the publisher holding the last reference; their drop folds them into
    /// the process totals under the list's lock, which must not be the
    /// publisher's own (a thread waiting on itself, and every later engine
    /// start or stop behind it). One thread publishes without pause while
    /// this one registers and drops counters; a watchdog turns a deadlock
    /// into an abort with a message instead of a hang.
    #[test]
    fn counters_dropped_while_being_published_do_not_deadlock() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        const ROUNDS: usize = 50_000;
        let cfg = Config {
            stats_level: 1,
            ..Config::default()
        };
        let done = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicUsize::new(0));
        let watchdog = {
            let (done, rounds) = (done.clone(), rounds.clone());
            std::thread::spawn(move || {
                for _ in 0..3000 {
                    if done.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                eprintln!(
                    "statistics deadlocked: {} of {ROUNDS} counters registered and dropped \
                     in 300 s",
                    rounds.load(Ordering::Relaxed)
                );
                std::process::abort();
            })
        };
        let published = Arc::new(AtomicUsize::new(0));
        let publisher = {
            let (done, published) = (done.clone(), published.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    publish();
                    published.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        while published.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        for i in 0..ROUNDS {
            let s = Arc::new(Stats::default());
            watch(&s, &cfg);
            drop(s);
            rounds.store(i + 1, Ordering::Relaxed);
        }
        done.store(true, Ordering::Release);
        publisher.join().unwrap();
        watchdog.join().unwrap();
    }

    #[test]
    fn socket_names_carry_the_pid() {
        assert_eq!(socket_name(42), "hipfile-stats.42");
        assert_eq!(off_marker_name(42), "hipfile-stats-off.42");
    }
}
