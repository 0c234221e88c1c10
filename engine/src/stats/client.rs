//! The reader side (`ais-stats`, tests): find a process's region, map it
//! read-only, and say clearly why not when it cannot be had.

use super::layout::Region;
use super::server::{self, REPLY_DENIED, REPLY_OK};
use super::snapshot::Snapshot;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::{Duration, Instant};

/// Why a process's statistics cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachError {
    /// Not a usable pid (0 or negative).
    BadPid(i32),
    NoProcess(i32),
    /// The process has exited (a zombie not yet reaped).
    Exited(i32),
    /// Not ours to inspect: it runs as another user.
    PermissionDenied {
        pid: i32,
        uid: Option<u32>,
    },
    /// The library runs there with `HIPFILE_STATS_LEVEL=0`.
    StatsOff(i32),
    /// libhipfile is loaded there but has not started (no hipFile call yet).
    NotStarted(i32),
    /// Neither a statistics socket nor libhipfile.so in the process.
    NoLibrary(i32),
    /// The region's layout is not the one this reader knows.
    Incompatible(String),
    Io(String),
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachError::BadPid(p) => write!(f, "{p} is not a process id"),
            AttachError::NoProcess(p) => write!(f, "no process with pid {p}"),
            AttachError::Exited(p) => write!(f, "process {p} has exited"),
            AttachError::PermissionDenied { pid, uid } => {
                // SAFETY: geteuid has no preconditions.
                let me = unsafe { libc::geteuid() };
                match uid {
                    Some(u) if *u != me => write!(
                        f,
                        "permission denied: process {pid} runs as uid {u}; run ais-stats as \
                         that user or as root"
                    ),
                    _ => write!(
                        f,
                        "permission denied: process {pid} cannot be inspected from here \
                         (/proc/{pid} is closed to this process: a container boundary, \
                         kernel.yama.ptrace_scope, or a missing CAP_SYS_PTRACE)"
                    ),
                }
            }
            AttachError::StatsOff(p) => write!(
                f,
                "statistics are off in process {p} (HIPFILE_STATS_LEVEL=0, profile.cufile_stats \
                 0 in its configuration file, or the ProfileStats parameter); start it with \
                 HIPFILE_STATS_LEVEL=1 or higher"
            ),
            AttachError::NotStarted(p) => write!(
                f,
                "process {p} has libhipfile loaded but has not started it yet: statistics \
                 appear with its first hipFile call"
            ),
            AttachError::NoLibrary(p) => write!(
                f,
                "process {p} does not use hipfile: it has no statistics socket and \
                 libhipfile.so is not loaded"
            ),
            AttachError::Incompatible(why) => write!(f, "{why}"),
            AttachError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AttachError {}

/// A region mapped read-only. It stays readable after its process exits.
pub struct Mapped {
    ptr: *const Region,
    len: usize,
    _fd: OwnedFd,
}

// SAFETY: the mapping is read-only shared memory of atomics; any thread may
// load from it.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Map the region behind `fd` (a memfd from a hipfile process).
    pub fn from_fd(fd: OwnedFd) -> Result<Mapped, AttachError> {
        // SAFETY: an all-zero stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into `st`.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(AttachError::Io(format!(
                "fstat: {}",
                std::io::Error::last_os_error()
            )));
        }
        let len = st.st_size as usize;
        if len < std::mem::size_of::<Region>() {
            return Err(AttachError::Incompatible(format!(
                "statistics region of {len} bytes, this reader needs {}: use the ais-stats \
                 built with that library",
                std::mem::size_of::<Region>()
            )));
        }
        // SAFETY: a read-only shared mapping of `len` bytes of the memfd.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(AttachError::Io(format!(
                "mmap: {}",
                std::io::Error::last_os_error()
            )));
        }
        let m = Mapped {
            ptr: p as *const Region,
            len,
            _fd: fd,
        };
        m.region().compatible().map_err(AttachError::Incompatible)?;
        Ok(m)
    }

    /// The region. Only loads are made through it: aligned 64-bit atomic
    /// loads are plain loads on x86-64 and aarch64, which a read-only
    /// mapping serves.
    pub fn region(&self) -> &Region {
        // SAFETY: the mapping covers size_of::<Region>() bytes, page-aligned,
        // and lives as long as self.
        unsafe { &*self.ptr }
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot::of(self.region())
    }

    pub fn pid(&self) -> u32 {
        self.snapshot().pid
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in from_fd, once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// How a region was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// From the process's socket: the connection keeps the engine figures
    /// refreshed (every 100 ms) until it is dropped.
    Socket,
    /// From /proc/PID/fd (the socket was out of reach, as from another
    /// network namespace): engine figures are as last published.
    ProcFd,
    /// Sent by the process at start (`ais-stats PROGRAM`).
    Handoff,
}

pub struct Attached {
    pub map: Mapped,
    pub via: Via,
    /// Held open while the reader wants refreshed engine figures.
    pub control: Option<UnixStream>,
}

/// Receive one byte and at most one descriptor from `sock`.
fn recv_fd(sock: RawFd, flags: i32) -> std::io::Result<(u8, Option<OwnedFd>)> {
    let mut data = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: msg describes live buffers for the call.
    let n = unsafe { libc::recvmsg(sock, &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n == 0 {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    let mut got = None;
    // SAFETY: walking the control messages the kernel wrote into cbuf.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                got = Some(OwnedFd::from_raw_fd(fd));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((data[0], got))
}

/// Connect to `pid`'s statistics socket. Ok(None): nothing listens there.
pub fn connect(pid: i32) -> Result<Option<Attached>, AttachError> {
    let addr = SocketAddr::from_abstract_name(server::socket_name(pid as u32))
        .map_err(|e| AttachError::Io(e.to_string()))?;
    let s = match UnixStream::connect_addr(&addr) {
        Ok(s) => s,
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => return Ok(None),
        Err(e) => return Err(AttachError::Io(format!("connect: {e}"))),
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    match recv_fd(s.as_raw_fd(), 0) {
        Ok((REPLY_OK, Some(fd))) => Ok(Some(Attached {
            map: Mapped::from_fd(fd)?,
            via: Via::Socket,
            control: Some(s),
        })),
        Ok((REPLY_DENIED, _)) => Err(AttachError::PermissionDenied {
            pid,
            uid: owner_uid(pid),
        }),
        Ok(_) => Err(AttachError::Io(
            "unexpected reply on the statistics socket".into(),
        )),
        // The process is exiting, or it is not ours: say why if we can.
        Err(_) => Ok(None),
    }
}

/// Find the region among `pid`'s descriptors (needs ptrace-read access).
pub fn from_proc_fd(pid: i32) -> Result<Option<Mapped>, AttachError> {
    let dir = format!("/proc/{pid}/fd");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(AttachError::PermissionDenied {
                pid,
                uid: owner_uid(pid),
            })
        }
        Err(_) => return Ok(None),
    };
    let want = format!("/memfd:{}", server::MEMFD_NAME);
    for e in entries.flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with(&want) {
            continue;
        }
        match std::fs::File::open(e.path()) {
            Ok(f) => return Mapped::from_fd(f.into()).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(AttachError::PermissionDenied {
                    pid,
                    uid: owner_uid(pid),
                })
            }
            Err(_) => continue,
        }
    }
    Ok(None)
}

/// Attach to `pid` now, or say why not.
pub fn attach(pid: i32) -> Result<Attached, AttachError> {
    if pid <= 0 {
        return Err(AttachError::BadPid(pid));
    }
    match process_state(pid) {
        ProcState::Gone => return Err(AttachError::NoProcess(pid)),
        ProcState::Zombie => return Err(AttachError::Exited(pid)),
        ProcState::Running => {}
    }
    if let Some(a) = connect(pid)? {
        return Ok(a);
    }
    if let Ok(Some(map)) = from_proc_fd(pid) {
        return Ok(Attached {
            map,
            via: Via::ProcFd,
            control: None,
        });
    }
    Err(diagnose(pid))
}

/// Attach to `pid`, waiting while the process runs without statistics yet:
/// it may not have made its first hipFile call, and a program with the
/// engine linked in (not libhipfile.so) looks like any other until then.
/// `waiting` is told once why, after the first second. Gives up at once on
/// what waiting cannot fix (no such process, no permission, statistics off)
/// and when `deadline` passes, with the last reason.
pub fn attach_waiting(
    pid: i32,
    deadline: Option<Instant>,
    mut waiting: impl FnMut(&AttachError),
) -> Result<Attached, AttachError> {
    let mut pause = Duration::from_millis(1);
    let start = Instant::now();
    let mut told = false;
    loop {
        let why = match attach(pid) {
            Err(e @ (AttachError::NotStarted(_) | AttachError::NoLibrary(_))) => e,
            other => return other,
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(why);
        }
        if !told && start.elapsed() >= Duration::from_secs(1) {
            waiting(&why);
            told = true;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

enum ProcState {
    Gone,
    Zombie,
    Running,
}

fn process_state(pid: i32) -> ProcState {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may
        // itself contain ") ".
        Ok(s) => match s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
        {
            Some("Z") | Some("X") => ProcState::Zombie,
            _ => ProcState::Running,
        },
        Err(_) => ProcState::Gone,
    }
}

/// The uid owning /proc/PID.
pub fn owner_uid(pid: i32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// Whether /proc/net/unix lists the abstract socket `name`.
fn abstract_socket_listed(name: &str) -> bool {
    let want = format!("@{name}");
    std::fs::read_to_string("/proc/net/unix").is_ok_and(|t| {
        t.lines()
            .any(|l| l.split_whitespace().last() == Some(&want))
    })
}

/// Why `pid` (running) offers no statistics.
pub fn diagnose(pid: i32) -> AttachError {
    if abstract_socket_listed(&server::off_marker_name(pid as u32)) {
        return AttachError::StatsOff(pid);
    }
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(maps) => classify_maps(pid, &maps),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            AttachError::PermissionDenied {
                pid,
                uid: owner_uid(pid),
            }
        }
        Err(_) => match process_state(pid) {
            ProcState::Running => AttachError::PermissionDenied {
                pid,
                uid: owner_uid(pid),
            },
            ProcState::Zombie => AttachError::Exited(pid),
            ProcState::Gone => AttachError::NoProcess(pid),
        },
    }
}

/// What a readable /proc/PID/maps says about a process with no socket.
pub fn classify_maps(pid: i32, maps: &str) -> AttachError {
    if maps.contains(&format!("/memfd:{}", server::MEMFD_NAME)) {
        // The region exists but neither the socket nor /proc/PID/fd gave it.
        AttachError::PermissionDenied {
            pid,
            uid: owner_uid(pid),
        }
    } else if maps.contains("libhipfile") {
        AttachError::NotStarted(pid)
    } else {
        AttachError::NoLibrary(pid)
    }
}

/// Waits for a process that is not our child to exit (pidfd, Linux 5.3+;
/// polling /proc where that is missing).
pub struct ExitWatch {
    pid: i32,
    pidfd: Option<OwnedFd>,
}

impl ExitWatch {
    pub fn new(pid: i32) -> ExitWatch {
        // SAFETY: plain syscall; the result is a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
        ExitWatch {
            pid,
            // SAFETY: fd is a descriptor we own when non-negative.
            pidfd: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }),
        }
    }

    /// Wait up to `timeout` (None: for ever); true once the process has exited.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        let end = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(fd) = &self.pidfd {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = end.map_or(-1, |e| {
                    e.saturating_duration_since(Instant::now()).as_millis() as i32
                });
                // SAFETY: one live pollfd.
                let n = unsafe { libc::poll(&mut p, 1, ms) };
                if n > 0 {
                    return true;
                }
                if n == 0 {
                    return false;
                }
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    return !matches!(process_state(self.pid), ProcState::Running);
                }
            } else {
                if !matches!(process_state(self.pid), ProcState::Running) {
                    return true;
                }
                if end.is_some_and(|e| Instant::now() >= e) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// `ais-stats PROGRAM`'s end of the hand-off: a datagram socket pair whose
/// other end the program inherits, named in `HIPFILE_STATS_SOCKET`.
pub struct Handoff {
    ours: OwnedFd,
    theirs: Option<OwnedFd>,
}

impl Handoff {
    pub fn new() -> std::io::Result<Handoff> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: socketpair writes two descriptors into fds.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, fds.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both are new descriptors we own.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Ours must not leak into the program; theirs must reach it.
        // SAFETY: fcntl on our own descriptor.
        unsafe { libc::fcntl(ours.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        Ok(Handoff {
            ours,
            theirs: Some(theirs),
        })
    }

    /// The value of `HIPFILE_STATS_SOCKET` for the program.
    pub fn env_value(&self) -> String {
        let fd = self.theirs.as_ref().map_or(-1, |f| f.as_raw_fd());
        format!("{fd}:{}", std::process::id())
    }

    /// Close the program's end here once the program has started.
    pub fn started(&mut self) {
        self.theirs = None;
    }

    /// A region sent by a process of the program, waiting up to `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<Mapped> {
        let mut p = libc::pollfd {
            fd: self.ours.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
        if n <= 0 {
            return None;
        }
        self.try_recv()
    }

    /// A region already sent, if any.
    pub fn try_recv(&self) -> Option<Mapped> {
        loop {
            match recv_fd(self.ours.as_raw_fd(), libc::MSG_DONTWAIT) {
                Ok((REPLY_OK, Some(fd))) => match Mapped::from_fd(fd) {
                    Ok(m) => return Some(m),
                    Err(_) => continue,
                },
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_without_the_library_mean_not_a_hipfile_process() {
        let maps = "7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n";
        assert_eq!(classify_maps(5, maps), AttachError::NoLibrary(5));
    }

    #[test]
    fn maps_with_the_library_but_no_region_mean_not_started() {
        let maps = "7f00-7f01 r-xp 0 08:01 1 /opt/lib/libhipfile.so.0\n";
        assert_eq!(classify_maps(5, maps), AttachError::NotStarted(5));
    }

    #[test]
    fn a_region_out_of_reach_is_a_permission_problem() {
        let maps = "7f00-7f01 r--s 0 00:01 1 /memfd:hipfile-stats (deleted)\n";
        assert!(matches!(
            classify_maps(5, maps),
            AttachError::PermissionDenied { pid: 5, .. }
        ));
    }

    #[test]
    fn bad_and_missing_pids_are_named() {
        assert_eq!(attach(0).err(), Some(AttachError::BadPid(0)));
        assert_eq!(attach(-4).err(), Some(AttachError::BadPid(-4)));
        // pid_max is at most 2^22: this pid cannot exist.
        let missing = (1 << 22) + 17;
        assert_eq!(attach(missing).err(), Some(AttachError::NoProcess(missing)));
    }

    #[test]
    fn messages_say_what_to_do() {
        let off = AttachError::StatsOff(7).to_string();
        assert!(off.contains("HIPFILE_STATS_LEVEL"), "{off}");
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let perm = AttachError::PermissionDenied {
            pid: 7,
            uid: Some(me + 1),
        }
        .to_string();
        assert!(
            perm.contains(&format!("uid {}", me + 1)) && perm.contains("root"),
            "{perm}"
        );
        let closed = AttachError::PermissionDenied {
            pid: 7,
            uid: Some(me),
        }
        .to_string();
        assert!(closed.contains("CAP_SYS_PTRACE"), "{closed}");
    }
}
