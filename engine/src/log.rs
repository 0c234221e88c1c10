//! Logging through the `log` facade, target `hipfile`.
//!
//! A Rust program that embeds the engine routes and filters these records
//! with its own logger; the library never installs one behind its back. The
//! C library (and the workspace's tools) install [`install_default`] on their
//! first call, which takes effect only where no logger is set: one line per
//! event, `2026-12-04T10:11:12.345678Z [pid=1234 tid=1240 hipfile-io-3] WARN
//! hipfile: ...`, to stderr or to a log file.
//!
//! Level, most specific first: the `LoggingLevel` parameter,
//! `HIPFILE_LOG_LEVEL`, `CUFILE_LOGGING_LEVEL`, the configuration file's
//! `logging.level`; otherwise warn under the default logger, and everything
//! the embedder's own filter lets through under another logger. Names are
//! cuFile's (error, warn, info, debug; NOTICE counts as error, TRACE as
//! debug); an unknown name is reported and the default used.
//!
//! Destination (default logger only): the `EnvLogfilePath` parameter, the
//! `LogDir` parameter (`DIR/hipfile.PID.log`), `CUFILE_LOGFILE_PATH`, the
//! file's `logging.dir`; otherwise stderr.
//!
//! The I/O path logs only at debug level and checks [`enabled`] first: with
//! debug off a chunk pays one relaxed load.
//!
//! `log_once!` keeps a repeated condition to one line per process.

use std::fmt;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::RwLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

impl Level {
    pub fn facade(self) -> ::log::Level {
        match self {
            Level::Error => ::log::Level::Error,
            Level::Warn => ::log::Level::Warn,
            Level::Info => ::log::Level::Info,
            Level::Debug => ::log::Level::Debug,
        }
    }

    fn from_u8(v: u8) -> Level {
        match v {
            1 => Level::Error,
            2 => Level::Warn,
            3 => Level::Info,
            _ => Level::Debug,
        }
    }
}

/// The target every record of the library carries.
pub const TARGET: &str = "hipfile";

/// Not yet read from the environment and the file.
const UNRESOLVED: u8 = 0;
/// Read: nothing names a level.
const NOT_SET: u8 = 5;
static LEVEL: AtomicU8 = AtomicU8::new(UNRESOLVED);
static DEFAULT_INSTALLED: AtomicBool = AtomicBool::new(false);

/// Parse a level name as cuFile's `logging.level` spells them (case-insensitive).
pub fn parse_level(s: &str) -> Option<Level> {
    match s.trim().to_ascii_lowercase().as_str() {
        "error" | "notice" => Some(Level::Error),
        "warn" | "warning" => Some(Level::Warn),
        "info" => Some(Level::Info),
        "debug" | "trace" => Some(Level::Debug),
        _ => None,
    }
}

/// The level named by the environment or the configuration file, and a
/// complaint about a name that is not a level.
fn configured_level() -> (Option<Level>, Option<String>) {
    let env = crate::config_file::Layered::process();
    for (name, value) in [
        ("HIPFILE_LOG_LEVEL", std::env::var("HIPFILE_LOG_LEVEL").ok()),
        (
            "CUFILE_LOGGING_LEVEL",
            std::env::var("CUFILE_LOGGING_LEVEL").ok(),
        ),
        (
            "logging.level",
            env.file_value("logging.level")
                .or_else(|| env.file_value("hipfile.log_level")),
        ),
    ] {
        if let Some(v) = value {
            return match parse_level(&v) {
                Some(l) => (Some(l), None),
                None => (
                    None,
                    Some(format!(
                        "{name}={v:?} is not a log level (error, warn, info, debug; \
                         cuFile's notice and trace also work); using the default"
                    )),
                ),
            };
        }
    }
    (None, None)
}

/// The most detailed level the library logs at now.
pub fn max_level() -> Level {
    let mut v = LEVEL.load(Ordering::Relaxed);
    if v == UNRESOLVED {
        let (level, complaint) = configured_level();
        v = level.map_or(NOT_SET, |l| l as u8);
        // Store before complaining: the complaint is itself logged.
        if LEVEL
            .compare_exchange(UNRESOLVED, v, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            if let Some(c) = complaint {
                write(Level::Warn, format_args!("{c}"));
            }
        } else {
            v = LEVEL.load(Ordering::Relaxed);
        }
    }
    if v == NOT_SET {
        // Under another logger the embedder's filter decides.
        if DEFAULT_INSTALLED.load(Ordering::Relaxed) {
            Level::Warn
        } else {
            Level::Debug
        }
    } else {
        Level::from_u8(v)
    }
}

/// Set the level (the `LoggingLevel` parameter): beats every other source.
pub fn set_max_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
    if DEFAULT_INSTALLED.load(Ordering::Relaxed) {
        ::log::set_max_level(level.facade().to_level_filter());
    }
}

/// Whether a record at `level` would be written.
pub fn enabled(level: Level) -> bool {
    level <= max_level() && ::log::log_enabled!(target: TARGET, level.facade())
}

pub fn write(level: Level, args: fmt::Arguments<'_>) {
    if enabled(level) {
        ::log::log!(target: TARGET, level.facade(), "{}", args);
    }
}

// ---------------------------------------------------------------------------
// The default logger.

enum Dest {
    Stderr,
    File { fd: OwnedFd, path: String },
}

static DEST: RwLock<Option<Dest>> = RwLock::new(None);
/// Destinations set by the `EnvLogfilePath` and `LogDir` parameters.
static PARAM_FILE: RwLock<Option<String>> = RwLock::new(None);
static PARAM_DIR: RwLock<Option<String>> = RwLock::new(None);

struct DefaultLogger;
static DEFAULT: DefaultLogger = DefaultLogger;

impl ::log::Log for DefaultLogger {
    fn enabled(&self, m: &::log::Metadata<'_>) -> bool {
        m.level() <= max_level().facade()
    }

    fn log(&self, r: &::log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let line = format_line(
            std::time::SystemTime::now(),
            std::process::id(),
            // SAFETY: gettid has no preconditions.
            unsafe { libc::syscall(libc::SYS_gettid) } as i64,
            std::thread::current().name(),
            r.level(),
            r.target(),
            r.args(),
        );
        let dest = DEST.read().unwrap_or_else(|p| p.into_inner());
        match dest.as_ref() {
            Some(Dest::File { fd, .. }) => {
                // One write(2) per line: lines from several threads (or
                // processes sharing the file, O_APPEND) never interleave.
                // SAFETY: writing our byte buffer to an open descriptor.
                unsafe { libc::write(fd.as_raw_fd(), line.as_ptr().cast(), line.len()) };
            }
            _ => {
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
        }
    }

    fn flush(&self) {}
}

/// Install the default logger unless the process has one; true if it is ours.
/// Safe to call many times (the C library calls it on every first call).
pub fn install_default() -> bool {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if ::log::set_logger(&DEFAULT).is_ok() {
            DEFAULT_INSTALLED.store(true, Ordering::Relaxed);
            // Open everything until our level is known: reading it may itself
            // log (an unknown level name), and that line must not be lost.
            ::log::set_max_level(::log::LevelFilter::Trace);
            // The destination first, so those lines land where the rest will.
            reopen();
            ::log::set_max_level(max_level().facade().to_level_filter());
            // Problems found in the configuration file before logging worked.
            crate::config_file::report_problems();
        }
    });
    DEFAULT_INSTALLED.load(Ordering::Relaxed)
}

/// Whether the library's own logger is the process's logger.
pub fn default_installed() -> bool {
    DEFAULT_INSTALLED.load(Ordering::Relaxed)
}

/// Log to `path` (`EnvLogfilePath`); an empty path or None goes back to the
/// next source (LogDir, the environment, the file, stderr).
pub fn set_file(path: Option<&str>) {
    *PARAM_FILE.write().unwrap_or_else(|p| p.into_inner()) =
        path.filter(|p| !p.is_empty()).map(str::to_string);
    reopen();
}

/// Log to `DIR/hipfile.PID.log` (`LogDir`).
pub fn set_dir(dir: Option<&str>) {
    *PARAM_DIR.write().unwrap_or_else(|p| p.into_inner()) =
        dir.filter(|d| !d.is_empty()).map(str::to_string);
    reopen();
}

/// The log file in directory `dir` for process `pid`.
pub fn file_in_dir(dir: &str, pid: u32) -> String {
    format!("{}/hipfile.{pid}.log", dir.trim_end_matches('/'))
}

/// Where the default logger writes, from the parameters, the environment
/// and the file (None: stderr).
fn wanted_path() -> Option<String> {
    let pid = std::process::id();
    let read = |l: &RwLock<Option<String>>| l.read().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(p) = read(&PARAM_FILE) {
        return Some(p);
    }
    if let Some(d) = read(&PARAM_DIR) {
        return Some(file_in_dir(&d, pid));
    }
    if let Some(p) = std::env::var("CUFILE_LOGFILE_PATH")
        .ok()
        .filter(|p| !p.is_empty())
    {
        return Some(p);
    }
    crate::config_file::Layered::process()
        .file_value("logging.dir")
        .filter(|d| !d.is_empty())
        .map(|d| file_in_dir(&d, pid))
}

/// Point the default logger at the destination the settings name now.
fn reopen() {
    if !default_installed() {
        return;
    }
    let want = wanted_path();
    let mut complaint = None;
    {
        let mut dest = DEST.write().unwrap_or_else(|p| p.into_inner());
        let same = match (dest.as_ref(), want.as_deref()) {
            (Some(Dest::File { path, .. }), Some(w)) => path == w,
            (Some(Dest::Stderr), None) => true,
            _ => false,
        };
        if same {
            return;
        }
        *dest = Some(match want {
            None => Dest::Stderr,
            Some(path) => match open_log(&path) {
                Ok(fd) => Dest::File { fd, path },
                Err(e) => {
                    complaint = Some(format!(
                        "cannot open log file {path} ({e}); logging to stderr"
                    ));
                    Dest::Stderr
                }
            },
        });
    }
    if let Some(c) = complaint {
        write(Level::Warn, format_args!("{c}"));
    }
}

fn open_log(path: &str) -> std::io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: open with a valid C string; the result is a new descriptor or -1.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One log line.
pub fn format_line(
    when: std::time::SystemTime,
    pid: u32,
    tid: i64,
    thread: Option<&str>,
    level: ::log::Level,
    target: &str,
    msg: &fmt::Arguments<'_>,
) -> String {
    let ts = utc_timestamp(when);
    let name = thread.map(|n| format!(" {n}")).unwrap_or_default();
    format!("{ts} [pid={pid} tid={tid}{name}] {level} {target}: {msg}\n")
}

/// `YYYY-MM-DDTHH:MM:SS.uuuuuuZ`.
pub fn utc_timestamp(when: std::time::SystemTime) -> String {
    let d = when
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        d.subsec_micros()
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian
/// calendar (eras of 400 years, March-based years so the leap day is last).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[macro_export]
macro_rules! log_at {
    ($lvl:expr, $($arg:tt)*) => {
        $crate::log::write($lvl, format_args!($($arg)*))
    };
}

#[macro_export]
macro_rules! log_error { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Error, $($arg)*) }; }
#[macro_export]
macro_rules! log_warn { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Warn, $($arg)*) }; }
#[macro_export]
macro_rules! log_info { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Info, $($arg)*) }; }
#[macro_export]
macro_rules! log_debug { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Debug, $($arg)*) }; }

/// Log once per call site for the life of the process.
#[macro_export]
macro_rules! log_once {
    ($lvl:expr, $($arg:tt)*) => {{
        static ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !ONCE.swap(true, std::sync::atomic::Ordering::Relaxed) {
            $crate::log_at!($lvl, $($arg)*);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn cufile_level_names_parse() {
        assert_eq!(parse_level("ERROR"), Some(Level::Error));
        assert_eq!(parse_level("notice"), Some(Level::Error));
        assert_eq!(parse_level(" Warn "), Some(Level::Warn));
        assert_eq!(parse_level("TRACE"), Some(Level::Debug));
        assert_eq!(parse_level("verbose"), None);
    }

    #[test]
    fn timestamps_are_utc_with_microseconds() {
        let t = UNIX_EPOCH + Duration::new(1_764_843_072, 345_678_000);
        assert_eq!(utc_timestamp(t), "2025-12-04T10:11:12.345678Z");
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        // A leap day.
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc_timestamp(t), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn a_line_carries_time_pid_thread_and_level() {
        let t = UNIX_EPOCH + Duration::from_secs(86_400);
        let line = format_line(
            t,
            42,
            43,
            Some("hipfile-io-3"),
            ::log::Level::Warn,
            "hipfile",
            &format_args!("slow {}", 7),
        );
        assert_eq!(
            line,
            "1970-01-02T00:00:00.000000Z [pid=42 tid=43 hipfile-io-3] WARN hipfile: slow 7\n"
        );
    }

    #[test]
    fn a_log_dir_names_one_file_per_process() {
        assert_eq!(file_in_dir("/var/log/", 7), "/var/log/hipfile.7.log");
        assert_eq!(file_in_dir(".", 7), "./hipfile.7.log");
    }
}
