//! Minimal leveled logging to stderr (`HIPFILE_LOG_LEVEL`: error, warn, info, debug;
//! default warn). A library must not take over the host's logger, so this is
//! self-contained; `log_once!` keeps repeated conditions to one line.

use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

const UNSET: u8 = 0;
static LEVEL: AtomicU8 = AtomicU8::new(UNSET);

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

pub fn max_level() -> Level {
    match LEVEL.load(Ordering::Relaxed) {
        UNSET => {
            let lvl = std::env::var("HIPFILE_LOG_LEVEL")
                .ok()
                .and_then(|v| parse_level(&v))
                .unwrap_or(Level::Warn);
            LEVEL.store(lvl as u8, Ordering::Relaxed);
            lvl
        }
        1 => Level::Error,
        2 => Level::Warn,
        3 => Level::Info,
        _ => Level::Debug,
    }
}

pub fn set_max_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level <= max_level()
}

pub fn write(level: Level, args: std::fmt::Arguments<'_>) {
    if enabled(level) {
        let tag = match level {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
        };
        eprintln!("hipfile: {tag}: {args}");
    }
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
