//! Which storage backend serves the workers, and the seam between the two.
//!
//! A worker hands its reads, writes and syncs to a [`Ring`]: it pushes
//! operations tagged with user data, submits, waits, and reaps completions
//! (bytes or −errno). Two backends stand behind that interface:
//! - io_uring ([`crate::ring`], the only module that touches io_uring): many
//!   operations in flight per worker, registered bounce buffers.
//! - POSIX ([`posix`]): the same operations as plain `pread`, `pwrite`,
//!   `preadv2` and `fdatasync` on the worker's thread, with the same results,
//!   for hosts that refuse io_uring. Docker's default seccomp profile (since
//!   Docker 25.0 and Docker Desktop 4.42), containerd 2.0's and Kubernetes'
//!   `RuntimeDefault` answer `io_uring_setup` with EPERM, as does the sysctl
//!   `kernel.io_uring_disabled`; gVisor and kernels built without io_uring
//!   answer ENOSYS.
//!
//! `HIPFILE_IO_BACKEND` picks one: `auto` (the default) probes io_uring once
//! per process ([`crate::ring::probe`]: setup, the opcodes the workers use,
//! one submission) and falls back to POSIX when any step fails; `io_uring`
//! insists on it (driver open fails where it is refused); `posix` never calls
//! io_uring at all, so a sandbox that kills a process for a forbidden call
//! stays quiet. Everything above the storage step — chunking, bounce slots,
//! page-cache-aware reads, GPU copies, the C ABI and its codes — is the same
//! with either backend.

pub mod posix;

use crate::log::Level;
#[cfg(feature = "testing")]
use crate::ring::FaultPlan;
use crate::ring::{self, Cqe, Op, Unusable};
use std::io;
use std::sync::OnceLock;
use std::time::Duration;

/// The storage backend a process's workers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    IoUring,
    Posix,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::IoUring => "io_uring",
            Backend::Posix => "posix",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `HIPFILE_IO_BACKEND` = auto | io_uring | posix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendSetting {
    Auto,
    IoUring,
    Posix,
}

/// The backend for a setting, why, and how loud the line at driver open is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub backend: Backend,
    /// The rest of the driver-open line "storage backend: …".
    pub why: String,
    /// Warn for a fallback nobody asked for, error for io_uring insisted on
    /// but refused, info otherwise.
    pub level: Level,
}

/// What the host says about io_uring, to name the cause of a refusal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// `kernel.io_uring_disabled` (Linux 6.6 and later): 0, 1 or 2.
    pub io_uring_disabled: Option<u32>,
    /// A seccomp filter is installed on this process (`Seccomp: 2` in
    /// /proc/self/status): what container runtimes install.
    pub seccomp_filter: bool,
    /// The kernel is gVisor's (runsc): it reports a fixed uname version.
    pub gvisor: bool,
}

impl HostFacts {
    fn read() -> HostFacts {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        HostFacts {
            io_uring_disabled: std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            seccomp_filter: seccomp_filtered(&status),
            gvisor: uname().is_some_and(|(release, version)| is_gvisor(&release, &version)),
        }
    }
}

/// Whether /proc/self/status says a seccomp filter is installed.
pub fn seccomp_filtered(status: &str) -> bool {
    status
        .lines()
        .any(|l| l.strip_prefix("Seccomp:").is_some_and(|v| v.trim() == "2"))
}

/// Whether uname's release and version are gVisor's: it reports release
/// 4.4.0 (or 4.19.0-gvisor) with a version string fixed at the build of v4.4.
pub fn is_gvisor(release: &str, version: &str) -> bool {
    release.contains("gvisor") || version.contains("Sun Jan 10 15:06:54 PST 2016")
}

fn uname() -> Option<(String, String)> {
    // SAFETY: utsname is plain bytes; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid utsname to fill.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some((field(&u.release), field(&u.version)))
}

/// The probe's answer and the host's facts, found once per process (a probe
/// creates a ring: not something to repeat per worker or per driver open).
fn probed() -> &'static (Result<(), Unusable>, HostFacts) {
    static PROBED: OnceLock<(Result<(), Unusable>, HostFacts)> = OnceLock::new();
    PROBED.get_or_init(|| {
        let r = ring::probe();
        let facts = if r.is_ok() {
            HostFacts::default()
        } else {
            HostFacts::read()
        };
        (r, facts)
    })
}

/// The backend `setting` resolves to in this process (probing io_uring the
/// first time it is needed).
pub fn choice(setting: BackendSetting) -> Choice {
    match setting {
        // Never probed: io_uring is not called at all.
        BackendSetting::Posix => decide(setting, &Ok(()), &HostFacts::default()),
        BackendSetting::Auto | BackendSetting::IoUring => {
            let (probe, facts) = probed();
            decide(setting, probe, facts)
        }
    }
}

/// Log the line at driver open that says which backend serves and why. A
/// fallback warns once per process; later opens say it at info.
pub(crate) fn announce(setting: BackendSetting) -> Choice {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    let c = choice(setting);
    let level = if c.level == Level::Warn && WARNED.swap(true, Ordering::Relaxed) {
        Level::Info
    } else {
        c.level
    };
    crate::log_at!(level, "storage backend: {}", c.why);
    c
}

/// The choice for `setting` as one word: what the statistics region keeps,
/// so that `ais-stats` can name the backend and say why in the words of the
/// driver-open line ([`described`]).
pub fn choice_word(setting: BackendSetting) -> u64 {
    match setting {
        BackendSetting::Posix => encode(setting, &Ok(()), &HostFacts::default()),
        BackendSetting::Auto | BackendSetting::IoUring => {
            let (probe, facts) = probed();
            encode(setting, probe, facts)
        }
    }
}

/// The calls the probe makes, and the operations it needs, by their index
/// in a [`choice_word`].
const PROBE_CALLS: [&str; 3] = ["io_uring_setup", "io_uring_register", "io_uring_enter"];
pub(crate) const NEEDED_OPS: [&str; 5] = ["READ", "WRITE", "READ_FIXED", "WRITE_FIXED", "FSYNC"];

/// The word's layout, low byte first: the backend (1 io_uring, 2 posix);
/// the setting (1 auto, 2 io_uring, 3 posix); the probe's answer (1 usable,
/// 2 a call refused, 3 operations missing); the refused call (1 + its index
/// in [`PROBE_CALLS`], 0xff another) or the missing operations (a bit per
/// [`NEEDED_OPS`]); then 16 bits of errno; then the host's facts (bit 0 a
/// seccomp filter, bit 1 gVisor, bit 2 `kernel.io_uring_disabled` known,
/// bits 3–4 its value). 0 is no word at all.
pub fn encode(setting: BackendSetting, probe: &Result<(), Unusable>, facts: &HostFacts) -> u64 {
    let backend = match decide(setting, probe, facts).backend {
        Backend::IoUring => 1u64,
        Backend::Posix => 2,
    };
    let setting = match setting {
        BackendSetting::Auto => 1u64,
        BackendSetting::IoUring => 2,
        BackendSetting::Posix => 3,
    };
    let (answer, detail, errno) = match probe {
        Ok(()) => (1u64, 0u64, 0u64),
        Err(Unusable::Refused { call, errno }) => (
            2,
            PROBE_CALLS
                .iter()
                .position(|c| c == call)
                .map_or(0xff, |i| i as u64 + 1),
            u64::from(u16::try_from(*errno).unwrap_or(u16::MAX)),
        ),
        Err(Unusable::MissingOps(ops)) => (
            3,
            NEEDED_OPS
                .iter()
                .enumerate()
                .filter(|(_, op)| ops.contains(op))
                .map(|(i, _)| 1u64 << i)
                .sum(),
            0,
        ),
    };
    let mut f = u64::from(facts.seccomp_filter) | u64::from(facts.gvisor) << 1;
    if let Some(v) = facts.io_uring_disabled {
        f |= 1 << 2 | u64::from(v.min(3)) << 3;
    }
    backend | setting << 8 | answer << 16 | detail << 24 | errno << 32 | f << 48
}

/// The setting, the probe's answer and the host's facts a [`choice_word`]
/// holds; None for 0 or a word this build cannot read.
pub fn decode(word: u64) -> Option<(BackendSetting, Result<(), Unusable>, HostFacts)> {
    let byte = |i: u32| (word >> (8 * i)) as u8;
    let setting = match byte(1) {
        1 => BackendSetting::Auto,
        2 => BackendSetting::IoUring,
        3 => BackendSetting::Posix,
        _ => return None,
    };
    let probe = match byte(2) {
        1 => Ok(()),
        2 => Err(Unusable::Refused {
            call: match byte(3) {
                i @ 1..=3 => PROBE_CALLS[usize::from(i) - 1],
                _ => "io_uring",
            },
            errno: i32::from((word >> 32) as u16),
        }),
        3 => Err(Unusable::MissingOps(
            NEEDED_OPS
                .iter()
                .enumerate()
                .filter(|(i, _)| byte(3) & (1 << i) != 0)
                .map(|(_, op)| *op)
                .collect(),
        )),
        _ => return None,
    };
    let f = byte(6);
    let facts = HostFacts {
        io_uring_disabled: (f & 4 != 0).then_some(u32::from(f >> 3 & 3)),
        seccomp_filter: f & 1 != 0,
        gvisor: f & 2 != 0,
    };
    Some((setting, probe, facts))
}

/// The backend and why, as the driver-open line said it, from a
/// [`choice_word`]; None for 0 (not recorded) or a word this build cannot
/// read.
pub fn described(word: u64) -> Option<Choice> {
    let (setting, probe, facts) = decode(word)?;
    Some(decide(setting, &probe, &facts))
}

const POSIX_WORDS: &str = "posix (pread/pwrite on the I/O threads)";

/// The choice for `setting` given the probe's answer (ignored for the posix
/// setting) and the host's facts. Pure, for the tests.
pub fn decide(setting: BackendSetting, probe: &Result<(), Unusable>, facts: &HostFacts) -> Choice {
    let info = |backend, why: String| Choice {
        backend,
        why,
        level: Level::Info,
    };
    match (setting, probe) {
        (BackendSetting::Posix, _) => info(
            Backend::Posix,
            format!("{POSIX_WORDS}, as HIPFILE_IO_BACKEND=posix asks"),
        ),
        (BackendSetting::Auto, Ok(())) => info(Backend::IoUring, "io_uring".into()),
        (BackendSetting::IoUring, Ok(())) => info(
            Backend::IoUring,
            "io_uring, as HIPFILE_IO_BACKEND=io_uring asks".into(),
        ),
        (BackendSetting::Auto, Err(u)) => Choice {
            backend: Backend::Posix,
            why: format!(
                "{POSIX_WORDS}, because {}; or set HIPFILE_IO_BACKEND=posix to silence this",
                explain(u, facts)
            ),
            level: Level::Warn,
        },
        (BackendSetting::IoUring, Err(u)) => Choice {
            backend: Backend::IoUring,
            why: format!(
                "io_uring, as HIPFILE_IO_BACKEND=io_uring asks, but {}; unset it to read and \
                 write with pread/pwrite instead",
                explain(u, facts)
            ),
            level: Level::Error,
        },
    }
}

/// "io_uring_setup: EPERM — cause; remedy", in words a container user
/// understands.
pub fn explain(u: &Unusable, facts: &HostFacts) -> String {
    let (call, errno) = match u {
        Unusable::MissingOps(ops) => {
            return format!(
                "this kernel's io_uring lacks {} (Linux 5.6 or later has every operation \
                 the engine uses)",
                ops.join(", ")
            )
        }
        Unusable::Refused { call, errno } => (*call, *errno),
    };
    let seccomp = "the seccomp profile this process runs under forbids io_uring (as Docker's \
                   default does since 25.0 / Docker Desktop 4.42, and containerd 2.0's and \
                   Kubernetes' RuntimeDefault); run the container with a seccomp profile that \
                   allows io_uring_setup, io_uring_enter and io_uring_register";
    let mut causes: Vec<String> = Vec::new();
    match errno {
        libc::EPERM | libc::EACCES => {
            if facts.seccomp_filter {
                causes.push(seccomp.into());
            }
            match facts.io_uring_disabled {
                Some(2) => causes.push(
                    "the sysctl kernel.io_uring_disabled=2 turns io_uring off on this host; \
                     `sysctl -w kernel.io_uring_disabled=0` on the host turns it on"
                        .into(),
                ),
                Some(1) => causes.push(
                    "the sysctl kernel.io_uring_disabled=1 allows io_uring only to the group \
                     that kernel.io_uring_group names; add this user to that group, or set \
                     kernel.io_uring_disabled=0 on the host"
                        .into(),
                ),
                _ => {}
            }
            if errno == libc::EACCES {
                causes.push(
                    "a security module (SELinux, AppArmor) denies io_uring to this process; \
                     its policy must allow it"
                        .into(),
                );
            }
            if causes.is_empty() {
                causes.push(
                    "the kernel refused io_uring to this process (a seccomp filter of an \
                     outer sandbox, a security module, or the sysctl \
                     kernel.io_uring_disabled); allow io_uring_setup, io_uring_enter and \
                     io_uring_register there"
                        .into(),
                );
            }
        }
        libc::ENOSYS => {
            if facts.gvisor {
                causes
                    .push("this sandbox is gVisor (runsc), whose kernel offers no io_uring".into());
            } else if facts.seccomp_filter {
                causes.push(
                    "the seccomp profile this process runs under answers ENOSYS for \
                     io_uring; run the container with a profile that allows io_uring_setup, \
                     io_uring_enter and io_uring_register"
                        .into(),
                );
            } else {
                causes.push(
                    "this kernel has no io_uring (built without CONFIG_IO_URING, or older \
                     than 5.1)"
                        .into(),
                );
            }
        }
        libc::ENOMEM => causes.push(
            "no memory for the ring: kernels before 5.12 charge io_uring rings to the \
             locked-memory limit (raise `ulimit -l`; `docker run --ulimit memlock=-1`), or \
             the memory cgroup is full"
                .into(),
        ),
        libc::EMFILE | libc::ENFILE => causes.push(
            "no descriptor left for the ring; raise the open-file limit (`ulimit -n`)".into(),
        ),
        _ if call == "io_uring_register" => causes.push(
            "the kernel cannot list its io_uring operations (Linux 5.6 or later can), or a \
             sandbox emulates io_uring only in part"
                .into(),
        ),
        _ => causes.push(format!("{call} failed")),
    }
    format!("{call}: {} — {}", errno_name(errno), causes.join("; or "))
}

/// The symbolic name of the errnos a refusal comes with.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOSYS => "ENOSYS",
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EIO => "EIO",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => return format!("errno {errno}"),
    };
    name.into()
}

/// A worker's storage queue: io_uring or the POSIX backend, behind the
/// interface of [`crate::ring::Ring`] (each method says the same there).
// One per worker, made once and never moved: the size of the io_uring
// variant costs nothing, a box would cost an indirection per call.
#[allow(clippy::large_enum_variant)]
pub enum Ring {
    Uring(ring::Ring),
    Posix(posix::PosixRing),
}

impl Ring {
    /// A queue of the backend `setting` resolves to in this process.
    pub fn new(setting: BackendSetting, entries: u32) -> io::Result<Ring> {
        Ok(match choice(setting).backend {
            Backend::IoUring => Ring::Uring(ring::Ring::new(entries)?),
            Backend::Posix => Ring::Posix(posix::PosixRing::new()),
        })
    }

    pub fn backend(&self) -> Backend {
        match self {
            Ring::Uring(_) => Backend::IoUring,
            Ring::Posix(_) => Backend::Posix,
        }
    }

    #[cfg(feature = "testing")]
    pub fn set_fault_plan(&mut self, plan: Option<Box<dyn FaultPlan>>) {
        match self {
            Ring::Uring(r) => r.set_fault_plan(plan),
            Ring::Posix(r) => r.set_fault_plan(plan),
        }
    }

    /// Register buffers for READ_FIXED/WRITE_FIXED (the POSIX backend reads
    /// and writes any memory: nothing to register).
    ///
    /// # Safety
    /// As [`crate::ring::Ring::register_buffers`].
    pub unsafe fn register_buffers(&mut self, iovecs: &[libc::iovec]) -> io::Result<()> {
        match self {
            // SAFETY: the caller's contract.
            Ring::Uring(r) => unsafe { r.register_buffers(iovecs) },
            Ring::Posix(_) => Ok(()),
        }
    }

    pub fn in_flight(&self) -> usize {
        match self {
            Ring::Uring(r) => r.in_flight(),
            Ring::Posix(r) => r.in_flight(),
        }
    }

    /// # Safety
    /// As [`crate::ring::Ring::push`].
    pub unsafe fn push(&mut self, op: Op, user_data: u64) -> io::Result<()> {
        match self {
            // SAFETY: the caller's contract.
            Ring::Uring(r) => unsafe { r.push(op, user_data) },
            // SAFETY: the caller's contract.
            Ring::Posix(r) => unsafe { r.push(op, user_data) },
        }
    }

    pub fn submit(&mut self) -> io::Result<()> {
        match self {
            Ring::Uring(r) => r.submit(),
            Ring::Posix(r) => r.submit(),
        }
    }

    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<()> {
        match self {
            Ring::Uring(r) => r.submit_and_wait(want),
            // Every submitted op has completed when submit returns.
            Ring::Posix(r) => r.submit(),
        }
    }

    pub fn submit_and_wait_for(&mut self, want: usize, timeout: Duration) -> io::Result<()> {
        match self {
            Ring::Uring(r) => r.submit_and_wait_for(want, timeout),
            Ring::Posix(r) => r.submit(),
        }
    }

    pub fn reap(&mut self, out: &mut Vec<Cqe>) {
        match self {
            Ring::Uring(r) => r.reap(out),
            Ring::Posix(r) => r.reap(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(call: &'static str, errno: i32) -> Result<(), Unusable> {
        Err(Unusable::Refused { call, errno })
    }

    fn auto(probe: Result<(), Unusable>, facts: &HostFacts) -> Choice {
        decide(BackendSetting::Auto, &probe, facts)
    }

    fn in_container() -> HostFacts {
        HostFacts {
            io_uring_disabled: Some(0),
            seccomp_filter: true,
            gvisor: false,
        }
    }

    fn bare_host() -> HostFacts {
        HostFacts {
            io_uring_disabled: Some(0),
            ..HostFacts::default()
        }
    }

    /// Every fallback nobody asked for warns, serves by POSIX and says how
    /// to silence it.
    fn assert_fallback(c: &Choice, words: &[&str]) {
        assert_eq!(c.backend, Backend::Posix, "{c:?}");
        assert_eq!(c.level, Level::Warn, "{c:?}");
        assert!(c.why.contains("HIPFILE_IO_BACKEND=posix"), "{}", c.why);
        for w in words {
            assert!(c.why.contains(w), "{:?} lacks {w:?}", c.why);
        }
    }

    #[test]
    fn eperm_in_a_seccomp_container_falls_back_and_names_the_profile() {
        let c = auto(refused("io_uring_setup", libc::EPERM), &in_container());
        assert_fallback(
            &c,
            &[
                "io_uring_setup: EPERM",
                "seccomp profile",
                "Docker",
                "io_uring_register",
            ],
        );
        assert!(!c.why.contains("sysctl"), "{}", c.why);
    }

    #[test]
    fn eperm_from_the_sysctl_names_the_sysctl() {
        for (value, words) in [
            (2, "kernel.io_uring_disabled=2"),
            (1, "kernel.io_uring_group"),
        ] {
            let facts = HostFacts {
                io_uring_disabled: Some(value),
                ..HostFacts::default()
            };
            let c = auto(refused("io_uring_setup", libc::EPERM), &facts);
            assert_fallback(&c, &["io_uring_setup: EPERM", words]);
            assert!(!c.why.contains("seccomp profile"), "{}", c.why);
        }
    }

    #[test]
    fn eperm_with_no_visible_cause_lists_the_possible_ones() {
        let c = auto(refused("io_uring_setup", libc::EPERM), &bare_host());
        assert_fallback(&c, &["EPERM", "seccomp", "kernel.io_uring_disabled"]);
    }

    #[test]
    fn enosys_in_gvisor_says_gvisor() {
        let facts = HostFacts {
            gvisor: true,
            ..HostFacts::default()
        };
        let c = auto(refused("io_uring_setup", libc::ENOSYS), &facts);
        assert_fallback(&c, &["io_uring_setup: ENOSYS", "gVisor"]);
    }

    #[test]
    fn enosys_on_a_plain_kernel_names_the_kernel_and_under_seccomp_the_profile() {
        let c = auto(refused("io_uring_setup", libc::ENOSYS), &bare_host());
        assert_fallback(&c, &["ENOSYS", "CONFIG_IO_URING"]);
        let c = auto(refused("io_uring_setup", libc::ENOSYS), &in_container());
        assert_fallback(&c, &["ENOSYS", "seccomp profile"]);
    }

    #[test]
    fn eacces_names_a_security_module() {
        let c = auto(refused("io_uring_setup", libc::EACCES), &bare_host());
        assert_fallback(&c, &["io_uring_setup: EACCES", "SELinux"]);
    }

    #[test]
    fn enomem_names_the_locked_memory_limit() {
        let c = auto(refused("io_uring_setup", libc::ENOMEM), &in_container());
        assert_fallback(&c, &["io_uring_setup: ENOMEM", "ulimit -l"]);
    }

    #[test]
    fn missing_opcodes_or_a_refused_enter_fall_back_too() {
        let c = auto(
            Err(Unusable::MissingOps(vec!["READ", "WRITE"])),
            &bare_host(),
        );
        assert_fallback(&c, &["lacks READ, WRITE", "5.6"]);
        let c = auto(refused("io_uring_enter", libc::EPERM), &in_container());
        assert_fallback(&c, &["io_uring_enter: EPERM", "seccomp profile"]);
        let c = auto(refused("io_uring_register", libc::ENOSYS), &bare_host());
        assert_fallback(&c, &["io_uring_register: ENOSYS"]);
    }

    #[test]
    fn working_io_uring_serves_quietly() {
        let c = auto(Ok(()), &bare_host());
        assert_eq!((c.backend, c.level), (Backend::IoUring, Level::Info));
    }

    #[test]
    fn the_posix_setting_needs_no_probe() {
        let c = decide(
            BackendSetting::Posix,
            &refused("io_uring_setup", libc::EPERM),
            &in_container(),
        );
        assert_eq!((c.backend, c.level), (Backend::Posix, Level::Info));
        assert!(c.why.contains("HIPFILE_IO_BACKEND=posix asks"), "{}", c.why);
        // Even where io_uring works.
        let c = decide(BackendSetting::Posix, &Ok(()), &bare_host());
        assert_eq!(c.backend, Backend::Posix);
    }

    #[test]
    fn insisting_on_io_uring_where_it_is_refused_is_an_error_line() {
        let c = decide(
            BackendSetting::IoUring,
            &refused("io_uring_setup", libc::EPERM),
            &in_container(),
        );
        assert_eq!((c.backend, c.level), (Backend::IoUring, Level::Error));
        assert!(c.why.contains("seccomp profile"), "{}", c.why);
    }

    #[test]
    fn host_facts_parse_seccomp_and_gvisor() {
        assert!(seccomp_filtered(
            "Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t1\n"
        ));
        assert!(!seccomp_filtered("Seccomp:\t0\nSeccomp_filters:\t0\n"));
        assert!(!seccomp_filtered("Name:\tx\n"));
        assert!(is_gvisor("4.4.0", "#1 SMP Sun Jan 10 15:06:54 PST 2016"));
        assert!(is_gvisor("4.19.0-gvisor", "#1 SMP"));
        assert!(!is_gvisor(
            "6.8.0-45-generic",
            "#45-Ubuntu SMP PREEMPT_DYNAMIC"
        ));
    }

    #[test]
    fn a_choice_word_says_what_the_driver_open_line_says() {
        let facts = [
            HostFacts::default(),
            in_container(),
            bare_host(),
            HostFacts {
                io_uring_disabled: Some(1),
                seccomp_filter: false,
                gvisor: true,
            },
        ];
        let probes = [
            Ok(()),
            refused("io_uring_setup", libc::EPERM),
            refused("io_uring_setup", libc::ENOSYS),
            refused("io_uring_register", libc::EINVAL),
            refused("io_uring_enter", libc::EACCES),
            Err(Unusable::MissingOps(vec!["READ_FIXED", "FSYNC"])),
        ];
        for setting in [
            BackendSetting::Auto,
            BackendSetting::IoUring,
            BackendSetting::Posix,
        ] {
            for probe in &probes {
                for f in &facts {
                    let word = encode(setting, probe, f);
                    assert_ne!(word, 0);
                    assert_eq!(
                        described(word),
                        Some(decide(setting, probe, f)),
                        "{setting:?} {probe:?} {f:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn no_word_or_an_unknown_one_describes_nothing() {
        assert_eq!(described(0), None);
        assert_eq!(described(0x09_09_09), None);
    }

    #[test]
    fn the_posix_setting_is_recorded_without_a_probe() {
        let c = described(choice_word(BackendSetting::Posix)).unwrap();
        assert_eq!(c.backend, Backend::Posix);
        assert!(c.why.contains("HIPFILE_IO_BACKEND=posix"), "{}", c.why);
    }
}
