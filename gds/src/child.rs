//! Running a program in a child process with a time limit, without ever
//! blocking the caller past it.
//!
//! The probe loads NVIDIA's libcufile and opens its driver, which can spin
//! forever (newer libcufile where `/proc/modules` is missing) or crash; in a
//! child it costs at most the limit. The child leads its own process group,
//! so a timeout kills whatever it started too. Output is read through pipes
//! with `poll(2)`; a child that outlives the limit, or that will not die
//! after `SIGKILL` (a task stuck in the kernel dies only when the kernel lets
//! it), is left to a background thread to reap.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What came of running a child.
#[derive(Debug)]
pub enum ChildOutcome {
    /// It ended within the limit. `status` is None when someone else reaped it
    /// (a host that ignores `SIGCHLD`, or reaps every child itself).
    Exited {
        stdout: String,
        stderr: String,
        status: Option<ExitStatus>,
    },
    /// It was still running at the limit and was killed, with its process group.
    TimedOut { stdout: String, stderr: String },
    /// It could not be started.
    SpawnFailed(String),
}

/// Bytes of each stream kept; the rest is read and dropped, so a chatty child
/// neither blocks on a full pipe nor grows the caller's memory.
const KEEP_BYTES: usize = 64 << 10;

/// How long a killed child may take to die before a thread is left to reap it.
const REAP_WAIT: Duration = Duration::from_secs(1);

/// Runs `cmd` (stdin from /dev/null, stdout and stderr captured) for at most
/// `limit`.
pub fn run(mut cmd: Command, limit: Duration) -> ChildOutcome {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let deadline = Instant::now() + limit;
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return ChildOutcome::SpawnFailed(e.to_string()),
    };
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        kill_and_reap(child);
        return ChildOutcome::SpawnFailed("no pipes to the child".into());
    };
    let mut streams = [Stream::new(out.into()), Stream::new(err.into())];
    let finished_output = drain_until(&mut streams, deadline);
    let [o, e] = streams.map(|s| String::from_utf8_lossy(&s.kept).into_owned());
    if finished_output {
        if let Some(status) = wait_until(&mut child, deadline) {
            return ChildOutcome::Exited {
                stdout: o,
                stderr: e,
                status,
            };
        }
    }
    kill_and_reap(child);
    ChildOutcome::TimedOut {
        stdout: o,
        stderr: e,
    }
}

struct Stream {
    pipe: File,
    kept: Vec<u8>,
    open: bool,
}

impl Stream {
    fn new(pipe: OwnedFd) -> Self {
        let pipe = File::from(pipe);
        // SAFETY: F_GETFL/F_SETFL on a pipe descriptor this process owns.
        unsafe {
            let fd = pipe.as_raw_fd();
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Stream {
            pipe,
            kept: Vec::new(),
            open: true,
        }
    }

    /// Reads what is there; false once the writer has closed its end.
    fn read_available(&mut self) {
        let mut buf = [0u8; 8192];
        loop {
            match self.pipe.read(&mut buf) {
                Ok(0) => {
                    self.open = false;
                    return;
                }
                Ok(n) => {
                    let room = KEEP_BYTES.saturating_sub(self.kept.len());
                    self.kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.open = false;
                    return;
                }
            }
        }
    }
}

/// Reads both streams until both are closed (true) or the deadline passes (false).
fn drain_until(streams: &mut [Stream; 2], deadline: Instant) -> bool {
    while streams.iter().any(|s| s.open) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut fds: Vec<libc::pollfd> = streams
            .iter()
            .filter(|s| s.open)
            .map(|s| libc::pollfd {
                fd: s.pipe.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // Round up so that a wait never spins on a sub-millisecond remainder.
        let ms = (left.as_micros().div_ceil(1000)).min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structures.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        for s in streams.iter_mut().filter(|s| s.open) {
            if fds
                .iter()
                .any(|p| p.fd == s.pipe.as_raw_fd() && p.revents != 0)
            {
                s.read_available();
            }
        }
    }
    true
}

/// The child's exit status once it has exited: Some(Some(status)), Some(None)
/// when it was reaped elsewhere, None if it is still running at the deadline.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<Option<ExitStatus>> {
    // The child closed its output, so it is exiting: back off from 1 ms.
    let mut nap = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(Some(st)),
            Ok(None) => {}
            Err(_) => return Some(None),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::sleep(nap.min(left));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// SIGKILL to the child's process group; reap it here if it dies at once,
/// else in a detached thread, so the caller never waits on a stuck task.
fn kill_and_reap(mut child: Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: signalling the process group this function's spawn created.
    if unsafe { libc::kill(-pgid, libc::SIGKILL) } != 0 {
        let _ = child.kill();
    }
    if wait_until(&mut child, Instant::now() + REAP_WAIT).is_none() {
        let _ = std::thread::Builder::new()
            .name("hipfile-reap".into())
            .spawn(move || {
                let _ = child.wait();
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    /// True while `pid` exists and has not exited (a zombie whose new parent
    /// has not reaped it yet counts as exited).
    fn running(pid: libc::pid_t) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !matches!(
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.chars().next()),
                Some('Z' | 'X')
            ),
            Err(_) => false,
        }
    }

    #[test]
    fn output_and_status_of_a_quick_child_are_returned() {
        match run(
            sh("echo result line; echo noise >&2; exit 3"),
            Duration::from_secs(30),
        ) {
            ChildOutcome::Exited {
                stdout,
                stderr,
                status,
            } => {
                assert_eq!(stdout, "result line\n");
                assert_eq!(stderr, "noise\n");
                assert_eq!(status.and_then(|s| s.code()), Some(3));
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn a_child_that_sleeps_forever_is_killed_at_the_limit_with_its_group() {
        // The shell starts a grandchild in its group and reports its pid first.
        let o = run(sh("sleep 1000 & echo $!; wait"), Duration::from_millis(300));
        let ChildOutcome::TimedOut { stdout, .. } = o else {
            panic!("{o:?}");
        };
        let grandchild: libc::pid_t = stdout.trim().parse().unwrap();
        // SIGKILL went to the whole group before `run` returned; the kernel
        // delivers it when the grandchild next runs. Another process's exit
        // cannot be waited for, so this polls (bounded) for it.
        let mut polls = 0;
        while running(grandchild) && polls < 10_000 {
            std::thread::sleep(Duration::from_millis(1));
            polls += 1;
        }
        assert!(!running(grandchild), "the grandchild survived the timeout");
    }

    #[test]
    fn a_child_that_closes_its_output_but_keeps_running_is_killed() {
        let o = run(
            sh("exec >/dev/null 2>&1; sleep 1000"),
            Duration::from_millis(300),
        );
        assert!(matches!(o, ChildOutcome::TimedOut { .. }), "{o:?}");
    }

    #[test]
    fn output_beyond_the_kept_size_is_drained_and_dropped() {
        let o = run(
            sh("head -c 1048576 /dev/zero; echo done >&2"),
            Duration::from_secs(30),
        );
        match o {
            ChildOutcome::Exited { stdout, stderr, .. } => {
                assert_eq!(stdout.len(), KEEP_BYTES);
                assert_eq!(stderr, "done\n");
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn a_missing_program_is_a_spawn_failure() {
        let o = run(
            Command::new("/nonexistent/hipfile-gds-probe"),
            Duration::from_secs(1),
        );
        assert!(matches!(o, ChildOutcome::SpawnFailed(_)), "{o:?}");
    }
}
