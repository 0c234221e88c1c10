//! What the machine offers, each probed by trying it (not by guessing from
//! versions): io_uring setup, O_DIRECT on each file system, the memory-lock
//! limit, GPU runtimes, GDS and KFD.

use serde_json::{json, Value};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A finding: a verdict and a sentence.
#[derive(Clone, Debug)]
pub struct Finding {
    pub ok: bool,
    pub text: String,
}

impl Finding {
    pub fn json(&self) -> Value {
        json!({"ok": self.ok, "detail": self.text})
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::ENOMEM => "ENOMEM",
        libc::EROFS => "EROFS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::ENOENT => "ENOENT",
        _ => "",
    };
    let msg = std::io::Error::from_raw_os_error(e);
    if name.is_empty() {
        msg.to_string()
    } else {
        format!("{name}: {msg}")
    }
}

/// The process's seccomp mode (0 none, 1 strict, 2 filter).
pub fn seccomp_mode() -> Option<u32> {
    read("/proc/self/status")?
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether the process holds capability `bit` (effective set).
pub fn has_capability(bit: u32) -> bool {
    read("/proc/self/status")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

pub const CAP_IPC_LOCK: u32 = 14;

/// io_uring: set up a ring, and say why not when refused.
pub fn io_uring() -> Finding {
    let disabled = read("/proc/sys/kernel/io_uring_disabled");
    match io_uring::IoUring::new(4) {
        Ok(_) => Finding {
            ok: true,
            text: format!(
                "allowed (a ring was set up{})",
                disabled.as_deref().map_or(String::new(), |d| format!(
                    "; kernel.io_uring_disabled = {d}"
                ))
            ),
        },
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(0);
            let mut why = Vec::new();
            match disabled.as_deref() {
                Some("2") => why.push("kernel.io_uring_disabled = 2: off for every process".into()),
                Some("1") => why.push(format!(
                    "kernel.io_uring_disabled = 1: only root and group {} may use it",
                    read("/proc/sys/kernel/io_uring_group").unwrap_or_else(|| "?".into())
                )),
                _ => {}
            }
            if seccomp_mode() == Some(2) {
                why.push(
                    "a seccomp filter is active (container runtimes' default profiles block \
                     io_uring_setup)"
                        .into(),
                );
            }
            if errno == libc::ENOSYS && why.is_empty() {
                why.push(
                    "the kernel has no io_uring (older than 5.1, or CONFIG_IO_URING=n)".into(),
                );
            }
            Finding {
                ok: false,
                text: format!(
                    "refused ({}){}; the library cannot start its workers",
                    errno_name(errno),
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", why.join("; "))
                    }
                ),
            }
        }
    }
}

/// The memory-lock limit and what it means for the bounce memory.
pub fn memlock(bounce_bytes: usize) -> (Finding, Value) {
    // SAFETY: an all-zero rlimit is a valid out-parameter.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes into rl.
    unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    let unlimited = rl.rlim_cur == libc::RLIM_INFINITY;
    let cap = has_capability(CAP_IPC_LOCK);
    let fmt = |v: u64| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            format!("{} MiB", v >> 20)
        }
    };
    let enough = unlimited || cap || rl.rlim_cur as usize >= bounce_bytes;
    let text = if enough {
        format!(
            "{} (hard {}){}: the {} MiB of bounce buffers can be registered with io_uring",
            fmt(rl.rlim_cur),
            fmt(rl.rlim_max),
            if cap {
                ", and CAP_IPC_LOCK lifts it"
            } else {
                ""
            },
            bounce_bytes >> 20
        )
    } else {
        format!(
            "{} (hard {}) is below the {} MiB of bounce buffers: io_uring cannot register them, \
             so reads and writes use unregistered buffers (a little more CPU per I/O). Raise it \
             (ulimit -l unlimited, LimitMEMLOCK=infinity for a service, --ulimit memlock=-1 for \
             docker) or use fewer workers (HIPFILE_IO_THREADS)",
            fmt(rl.rlim_cur),
            fmt(rl.rlim_max),
            bounce_bytes >> 20
        )
    };
    let v = json!({
        "soft_bytes": (!unlimited).then_some(rl.rlim_cur),
        "hard_bytes": (rl.rlim_max != libc::RLIM_INFINITY).then_some(rl.rlim_max),
        "cap_ipc_lock": cap,
        "bounce_bytes": bounce_bytes,
        "enough": enough,
    });
    (Finding { ok: enough, text }, v)
}

/// One mounted file system.
pub struct Mount {
    pub point: String,
    pub fstype: String,
    pub source: String,
    pub read_only: bool,
}

/// File systems that hold no user data.
const PSEUDO: &[&str] = &[
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "mqueue",
    "debugfs",
    "tracefs",
    "securityfs",
    "pstore",
    "bpf",
    "configfs",
    "fusectl",
    "autofs",
    "binfmt_misc",
    "rpc_pipefs",
    "nsfs",
    "efivarfs",
    "hugetlbfs",
    "selinuxfs",
    "ramfs",
];

/// Mounts that can hold data files, from /proc/self/mountinfo (a mount point
/// seen twice keeps its top mount).
pub fn mounts() -> Vec<Mount> {
    let text = read("/proc/self/mountinfo").unwrap_or_default();
    let mut out: Vec<Mount> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(dash) = f.iter().position(|&x| x == "-") else {
            continue;
        };
        if f.len() < dash + 3 || f.len() < 6 {
            continue;
        }
        let point = unescape(f[4]);
        let fstype = f[dash + 1].to_string();
        if PSEUDO.contains(&fstype.as_str()) || !std::path::Path::new(&point).is_dir() {
            continue;
        }
        let read_only = f[5].split(',').any(|o| o == "ro");
        out.retain(|m| m.point != point);
        out.push(Mount {
            point,
            fstype,
            source: unescape(f[dash + 2]),
            read_only,
        });
    }
    out.sort_by(|a, b| a.point.cmp(&b.point));
    out
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// O_DIRECT in directory `dir`: an anonymous O_TMPFILE (or, where the file
/// system has none, a named file removed at once) opened with O_DIRECT,
/// and its DIO alignment from statx.
pub fn o_direct(dir: &str, read_only: bool) -> Finding {
    if read_only {
        return Finding {
            ok: false,
            text: "not tested: mounted read-only".into(),
        };
    }
    let Ok(c) = CString::new(dir) else {
        return Finding {
            ok: false,
            text: "not tested: path has a NUL byte".into(),
        };
    };
    let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_DIRECT;
    // SAFETY: open with a valid C string.
    let mut fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_TMPFILE, 0o600) };
    let mut err = if fd < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    } else {
        0
    };
    if fd < 0 && (err == libc::EOPNOTSUPP || err == libc::EISDIR) {
        // No O_TMPFILE here: a named file, unlinked straight away.
        let name = format!(
            "{}/.hipfile-check.{}",
            dir.trim_end_matches('/'),
            std::process::id()
        );
        if let Ok(n) = CString::new(name) {
            // SAFETY: open with a valid C string.
            fd = unsafe { libc::open(n.as_ptr(), flags | libc::O_CREAT | libc::O_EXCL, 0o600) };
            err = if fd < 0 {
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
            } else {
                0
            };
            // SAFETY: unlink with a valid C string (harmless if absent).
            unsafe { libc::unlink(n.as_ptr()) };
            if fd < 0 && err == libc::EEXIST {
                err = libc::EACCES;
            }
        }
    }
    if fd < 0 {
        let text = match err {
            libc::EINVAL => "refused (EINVAL): reads go through the page cache only; cold reads \
                             cost a copy and pollute the cache"
                .to_string(),
            libc::EACCES | libc::EPERM | libc::EROFS => {
                format!(
                    "not tested: cannot create a file here ({})",
                    errno_name(err)
                )
            }
            e => format!("not tested ({})", errno_name(e)),
        };
        return Finding { ok: false, text };
    }
    // SAFETY: fd is a new descriptor we own.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    let align = dio_align(&file);
    Finding {
        ok: true,
        text: match align {
            Some((mem, off)) => format!(
                "yes (offsets aligned to {off} B, memory to {mem} B): cold reads bypass the page cache"
            ),
            None => "yes: cold reads bypass the page cache".into(),
        },
    }
}

/// statx STATX_DIOALIGN: (memory, offset) alignment, when the kernel says.
fn dio_align(f: &OwnedFd) -> Option<(u32, u32)> {
    // SAFETY: an all-zero statx is a valid out-parameter.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: statx on our descriptor with AT_EMPTY_PATH writes into st.
    let r = unsafe {
        libc::statx(
            f.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut st,
        )
    };
    (r == 0 && st.stx_mask & libc::STATX_DIOALIGN != 0 && st.stx_dio_offset_align > 0)
        .then_some((st.stx_dio_mem_align, st.stx_dio_offset_align))
}

/// A library that dlopen finds, by its first name that loads.
pub fn library(names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| {
        // SAFETY: loading a system library runs its initialisers; these are
        // the vendors' own libraries, loaded the way their users load them.
        unsafe { libloading::Library::new(n) }
            .ok()
            .map(|_| (*n).to_string())
    })
}

/// NVIDIA GPUDirect Storage: the nvidia-fs module and libcufile.
pub fn gds() -> (Finding, Value) {
    let nvfs = read("/proc/driver/nvidia-fs/version")
        .map(|v| v.lines().next().unwrap_or("").to_string())
        .or_else(|| {
            std::path::Path::new("/sys/module/nvidia_fs")
                .exists()
                .then(|| "loaded".into())
        });
    let cufile = library(&["libcufile.so.0", "libcufile.so"]);
    let text = format!(
        "nvidia-fs {}; libcufile {}. The library does not use them: its own engine serves \
         every request",
        nvfs.as_deref().unwrap_or("not loaded"),
        cufile.as_deref().unwrap_or("not found")
    );
    (
        Finding {
            ok: nvfs.is_some() && cufile.is_some(),
            text,
        },
        json!({"nvidia_fs": nvfs, "libcufile": cufile}),
    )
}

/// AMD: /dev/kfd, and the kernel symbol upstream hipFile's fast path needs.
pub fn kfd() -> (Finding, Value) {
    let dev = std::path::Path::new("/dev/kfd");
    let present = dev.exists();
    let openable = present && std::fs::File::open(dev).is_ok();
    let ais = read("/proc/kallsyms").map(|k| k.contains(" kfd_ais_rw_file"));
    let text = format!(
        "/dev/kfd {}; kfd_ais_rw_file {}. The library has no AMD fast path: the engine serves \
         every request",
        if openable {
            "present"
        } else if present {
            "present but not openable (add the user to group render)"
        } else {
            "absent"
        },
        match ais {
            Some(true) => "in the kernel",
            Some(false) => "not in the kernel",
            None => "unknown (/proc/kallsyms unreadable)",
        }
    );
    (
        Finding { ok: openable, text },
        json!({"dev_kfd": present, "dev_kfd_openable": openable, "kfd_ais_rw_file": ais}),
    )
}

/// Transparent huge pages for the bounce slabs.
pub fn thp() -> Finding {
    let mode = read("/sys/kernel/mm/transparent_hugepage/enabled");
    let allowed = hipfile_engine::bounce::thp_allowed();
    Finding {
        ok: allowed,
        text: match mode {
            Some(m) if allowed => {
                format!("{m}: bounce slabs get 2 MiB pages (a 1 MiB O_DIRECT read is one segment)")
            }
            Some(m) => format!("{m}: bounce slabs use 4 KiB pages"),
            None => "no THP switch: bounce slabs use 4 KiB pages".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/mnt/with\\040space"), "/mnt/with space");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/a\\134b"), "/a\\b");
    }

    #[test]
    fn the_root_file_system_is_listed() {
        assert!(mounts().iter().any(|m| m.point == "/"));
    }

    #[test]
    fn the_o_direct_verdict_matches_opening_a_file_with_o_direct() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::env::var("HIPFILE_TEST_DIR").unwrap_or_else(|_| "/tmp".into());
        let path = format!("{dir}/probe-check-{}", std::process::id());
        let direct = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .is_ok();
        let _ = std::fs::remove_file(&path);
        let f = o_direct(&dir, false);
        assert_eq!(f.ok, direct, "{}", f.text);
    }

    #[test]
    fn a_read_only_mount_is_not_probed() {
        assert!(!o_direct("/", true).ok);
    }
}
