//! The configuration file: cufile.json's format (JSON with `//` and `/* */`
//! comments, trailing commas allowed), named by `HIPFILE_CONFIG` or else by
//! `CUFILE_ENV_PATH_JSON`. No file is read unless one of them is set: a
//! machine's /etc/cufile.json is written for cuFile's thread pool (4 threads
//! per GPU, 16 MiB chunks), and reading it unasked would slow this library
//! down where the measured defaults are better.
//!
//! Precedence, most specific first: a parameter call (`hipFileSet*Parameter`),
//! the environment, this file, the default. The file stands in for the
//! environment through [`Layered`], which [`crate::config::Config::from_env`]
//! reads; keys that only parameters have (batch size and timeout, the
//! recorded properties) become the parameters' defaults ([`seeded_params`]).
//!
//! Keys:
//! - the cuFile keys in [`MAPPINGS`], translated to this library's settings;
//! - `hipfile.NAME` for any `HIPFILE_NAME` variable (`"hipfile": {"io_threads": 8}`);
//! - other cuFile keys have no effect here and are listed once in a warning,
//!   as are keys nobody knows (typos).
//!
//! A file that cannot be read or parsed is reported with its line and
//! ignored; a key with a malformed value is reported and ignored. Neither is
//! ever fatal.

use crate::config::{param, Env, Params, ProcessEnv};
use crate::{log_error, log_warn};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, OnceLock};

/// Variables that name the file, in order.
pub const PATH_VARS: [&str; 2] = ["HIPFILE_CONFIG", "CUFILE_ENV_PATH_JSON"];

/// What a file value must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Unsigned,
    Bool,
    Text,
}

/// Where a key's value goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// Stands in for an environment variable (below the environment).
    Env(&'static str),
    /// `true` stands in for `HIPFILE_READ_MODE=direct`.
    ReadModeDirect,
    /// The default of a size_t / bool / string parameter.
    SizeT(usize),
    Bool(usize),
    Str(usize),
    /// Read by the logger (`logging.level`, `logging.dir`).
    Logger,
}

pub struct Mapping {
    pub key: &'static str,
    pub kind: Kind,
    pub to: &'static [To],
    /// What it does here (docs/configuration.md repeats this).
    pub meaning: &'static str,
}

/// The cuFile keys that mean something here.
pub const MAPPINGS: &[Mapping] = &[
    Mapping {
        key: "logging.level",
        kind: Kind::Text,
        to: &[To::Logger, To::Str(param::S_LOGGING_LEVEL)],
        meaning: "log level (below HIPFILE_LOG_LEVEL and CUFILE_LOGGING_LEVEL)",
    },
    Mapping {
        key: "logging.dir",
        kind: Kind::Text,
        to: &[To::Logger, To::Str(param::S_LOG_DIR)],
        meaning: "log to DIR/hipfile.PID.log instead of stderr",
    },
    Mapping {
        key: "profile.cufile_stats",
        kind: Kind::Unsigned,
        to: &[
            To::Env("HIPFILE_STATS_LEVEL"),
            To::SizeT(param::PROFILE_STATS),
        ],
        meaning: "statistics level 0..3 (HIPFILE_STATS_LEVEL)",
    },
    Mapping {
        key: "execution.max_io_threads",
        kind: Kind::Unsigned,
        to: &[To::Env("HIPFILE_IO_THREADS")],
        meaning:
            "worker threads (HIPFILE_IO_THREADS); cuFile counts them per GPU, here per process",
    },
    Mapping {
        key: "properties.max_direct_io_size_kb",
        kind: Kind::Unsigned,
        to: &[
            To::Env("HIPFILE_CHUNK_KB"),
            To::SizeT(param::PROPERTIES_MAX_DIRECT_IO_SIZE_KB),
        ],
        meaning: "chunk size in KiB (HIPFILE_CHUNK_KB): cuFile's compat-mode I/O chunk",
    },
    Mapping {
        key: "properties.allow_compat_mode",
        kind: Kind::Bool,
        to: &[To::Env("HIPFILE_ALLOW_COMPAT_MODE")],
        meaning: "HIPFILE_ALLOW_COMPAT_MODE",
    },
    Mapping {
        key: "properties.force_compat_mode",
        kind: Kind::Bool,
        to: &[To::Env("HIPFILE_FORCE_COMPAT_MODE")],
        meaning: "HIPFILE_FORCE_COMPAT_MODE",
    },
    Mapping {
        key: "properties.force_odirect_mode",
        kind: Kind::Bool,
        to: &[To::ReadModeDirect],
        meaning: "true: every read bypasses the page cache (HIPFILE_READ_MODE=direct)",
    },
    Mapping {
        key: "properties.io_batchsize",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::PROPERTIES_IO_BATCHSIZE)],
        meaning: "largest batch, 1..1024 (PropertiesIOBatchsize)",
    },
    Mapping {
        key: "profile.io_batchsize",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::PROPERTIES_IO_BATCHSIZE)],
        meaning: "as properties.io_batchsize (where older cufile.json files put it)",
    },
    Mapping {
        key: "properties.max_batch_io_timeout_msecs",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::PROPERTIES_BATCH_IO_TIMEOUT_MS)],
        meaning: "PropertiesBatchIOTimeoutMs",
    },
    Mapping {
        key: "properties.use_poll_mode",
        kind: Kind::Bool,
        to: &[To::Bool(param::B_PROPERTIES_USE_POLL_MODE)],
        meaning: "recorded (PropertiesUsePollMode, DriverGetProperties)",
    },
    Mapping {
        key: "properties.poll_mode_max_size_kb",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::POLLTHRESHOLD_SIZE_KB)],
        meaning: "recorded (PollthresholdSizeKB)",
    },
    Mapping {
        key: "properties.max_device_cache_size_kb",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB)],
        meaning: "recorded (PropertiesMaxDeviceCacheSizeKB)",
    },
    Mapping {
        key: "properties.per_buffer_cache_size_kb",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::PROPERTIES_PER_BUFFER_CACHE_SIZE_KB)],
        meaning: "recorded (PropertiesPerBufferCacheSizeKB)",
    },
    Mapping {
        key: "properties.max_device_pinned_mem_size_kb",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB)],
        meaning: "recorded (PropertiesMaxDevicePinnedMemSizeKB)",
    },
    Mapping {
        key: "execution.max_io_queue_depth",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::EXECUTION_MAX_IO_QUEUE_DEPTH)],
        meaning: "recorded (ExecutionMaxIOQueueDepth); not HIPFILE_QUEUE_DEPTH, whose slots \
                  are 4 MiB each",
    },
    Mapping {
        key: "execution.min_io_threshold_size_kb",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::EXECUTION_MIN_IO_THRESHOLD_SIZE_KB)],
        meaning: "recorded (ExecutionMinIOThresholdSizeKB)",
    },
    Mapping {
        key: "execution.max_request_parallelism",
        kind: Kind::Unsigned,
        to: &[To::SizeT(param::EXECUTION_MAX_REQUEST_PARALLELISM)],
        meaning: "recorded (ExecutionMaxRequestParallelism)",
    },
    Mapping {
        key: "execution.parallel_io",
        kind: Kind::Bool,
        to: &[To::Bool(param::B_EXECUTION_PARALLEL_IO)],
        meaning: "recorded (ExecutionParallelIO)",
    },
    Mapping {
        key: "profile.nvtx",
        kind: Kind::Bool,
        to: &[To::Bool(param::B_PROFILE_NVTX)],
        meaning: "recorded (ProfileNvtx)",
    },
    Mapping {
        key: "properties.use_pci_p2pdma",
        kind: Kind::Bool,
        to: &[To::Bool(param::B_USE_PCIP2PDMA)],
        meaning: "recorded (UsePcip2pdma)",
    },
    Mapping {
        key: "properties.prefer_iouring",
        kind: Kind::Bool,
        to: &[To::Bool(param::B_PREFER_IO_URING)],
        meaning: "recorded (PreferIOUring); io_uring is always used",
    },
    Mapping {
        key: "miscellaneous.api_check_aggressive",
        kind: Kind::Bool,
        to: &[To::Bool(param::B_FS_MISC_API_CHECK_AGGRESSIVE)],
        meaning: "recorded (FsMiscApiCheckAggressive)",
    },
    Mapping {
        key: "skip_topology_detection",
        kind: Kind::Bool,
        to: &[To::Bool(param::B_SKIP_TOPOLOGY_DETECTION)],
        meaning: "recorded (SkipTopologyDetection)",
    },
    Mapping {
        key: "properties.skip_topology_detection",
        kind: Kind::Bool,
        to: &[To::Bool(param::B_SKIP_TOPOLOGY_DETECTION)],
        meaning: "as skip_topology_detection",
    },
];

/// cuFile keys (and sections) with no meaning here: named in the warning as
/// "no effect here" rather than as unknown.
const CUFILE_ONLY: &[&str] = &[
    "logging.max_file_size_mb",
    "logging.type",
    "logging.format",
    "properties.gpu_bounce_buffer_slab_config",
    "properties.max_direct_io_size_per_device_kb",
    "properties.io_priority",
    "properties.posix_pool_slab_size_kb",
    "properties.posix_pool_slab_count",
    "properties.gds_rdma_write_support",
    "properties.allow_system_memory",
    "properties.use_compat_mode",
    "properties.max_batch_io_size",
    "miscellaneous.enable_static_routing",
    "miscellaneous.static_routing_filepath",
    "properties.rdma_",
    "fs.",
    "block.",
    "denylist.",
];

/// A value of the file: its text as a variable would hold it, and its line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    value: Value,
    line: usize,
}

/// A parsed configuration file.
pub struct FileConfig {
    pub path: String,
    entries: BTreeMap<String, Entry>,
    /// What is wrong with the file, each a full sentence with the line.
    problems: Vec<String>,
    /// Keys something looked up (for the unused-key warning).
    used: Mutex<BTreeSet<String>>,
}

impl FileConfig {
    /// Parse `text` (the contents of `path`).
    pub fn parse(path: &str, text: &str) -> FileConfig {
        let mut f = FileConfig {
            path: path.to_string(),
            entries: BTreeMap::new(),
            problems: Vec::new(),
            used: Mutex::new(BTreeSet::new()),
        };
        let (clean, unterminated) = strip_comments(text);
        if let Some(line) = unterminated {
            f.problems.push(format!(
                "{path}:{line}: a /* comment is never closed; the file is ignored"
            ));
            return f;
        }
        let root: Value = match serde_json::from_str(&clean) {
            Ok(v) => v,
            Err(e) => {
                f.problems.push(format!(
                    "{path}:{}: {}; the file is ignored",
                    e.line(),
                    describe_json_error(&e)
                ));
                return f;
            }
        };
        let Value::Object(_) = root else {
            f.problems.push(format!(
                "{path}: the file is not a JSON object; it is ignored"
            ));
            return f;
        };
        let mut leaves = Vec::new();
        flatten("", &root, &mut leaves);
        for (key, value) in leaves {
            let segs: Vec<&str> = key.split('.').collect();
            let line = line_of(&clean, &segs).unwrap_or(0);
            match check(&key, &value) {
                Ok(()) => {
                    f.entries.insert(key, Entry { value, line });
                }
                Err(why) => f
                    .problems
                    .push(format!("{path}:{line}: {key}: {why}; the key is ignored")),
            }
        }
        f
    }

    /// Read the file `path`; unreadable is a problem, not an error.
    pub fn load(path: &str) -> FileConfig {
        match std::fs::read_to_string(path) {
            Ok(t) => FileConfig::parse(path, &t),
            Err(e) => {
                let mut f = FileConfig::parse(path, "{}");
                f.problems.push(format!(
                    "cannot read the configuration file {path} ({e}); it is ignored"
                ));
                f
            }
        }
    }

    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    fn mark(&self, key: &str) {
        self.used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string());
    }

    /// The raw value of `key`, as a variable would hold it.
    pub fn value(&self, key: &str) -> Option<String> {
        let e = self.entries.get(key)?;
        self.mark(key);
        Some(as_text(&e.value))
    }

    /// The file's stand-in for environment variable `name`.
    pub fn for_env(&self, name: &str) -> Option<String> {
        if let Some(rest) = name.strip_prefix("HIPFILE_") {
            let key = format!("hipfile.{}", rest.to_ascii_lowercase());
            if let Some(v) = self.value(&key) {
                return Some(v);
            }
        }
        for m in MAPPINGS {
            if m.to.iter().any(|t| matches!(t, To::Env(n) if *n == name)) {
                if let Some(v) = self.value(m.key) {
                    return Some(v);
                }
            }
            if name == "HIPFILE_READ_MODE" && m.to.contains(&To::ReadModeDirect) {
                if let Some(v) = self.value(m.key) {
                    if v == "true" {
                        return Some("direct".into());
                    }
                }
            }
        }
        None
    }

    /// Put the file's parameter defaults into `p`.
    pub fn seed(&self, p: &mut Params) {
        for m in MAPPINGS {
            let Some(e) = self.entries.get(m.key) else {
                continue;
            };
            for to in m.to {
                match (*to, &e.value) {
                    (To::SizeT(i), Value::Number(n)) => {
                        if let Some(v) = n.as_u64() {
                            p.size_t[i] = v;
                            self.mark(m.key);
                        }
                    }
                    (To::Bool(i), Value::Bool(b)) => {
                        p.bools[i] = *b;
                        self.mark(m.key);
                    }
                    (To::Str(i), Value::String(s)) => {
                        p.strings[i] = s.clone();
                    }
                    _ => {}
                }
            }
        }
    }

    /// Keys present that nothing used: (cuFile keys with no effect here,
    /// unknown keys).
    pub fn unused(&self) -> (Vec<String>, Vec<String>) {
        let used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let (mut cufile, mut unknown) = (Vec::new(), Vec::new());
        for k in self.entries.keys() {
            let mapped = MAPPINGS.iter().any(|m| m.key == k);
            if used.contains(k) || mapped {
                continue;
            }
            if CUFILE_ONLY
                .iter()
                .any(|c| k == c || (c.ends_with(['.', '_']) && k.starts_with(c)))
            {
                cufile.push(k.clone());
            } else {
                unknown.push(k.clone());
            }
        }
        (cufile, unknown)
    }

    /// Log the unused keys, once per file.
    fn report_unused(&self) {
        let (cufile, unknown) = self.unused();
        if !cufile.is_empty() {
            log_warn!(
                "{}: cuFile settings with no effect in this library (ignored): {}",
                self.path,
                cufile.join(", ")
            );
        }
        if !unknown.is_empty() {
            log_warn!(
                "{}: unknown settings (ignored): {}",
                self.path,
                unknown
                    .iter()
                    .map(|k| format!("{k} (line {})", self.entries[k].line))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}

/// Whether `value` fits `key`'s kind: mapped keys by their table entry,
/// `hipfile.*` keys must be scalars (the setting itself checks the rest).
fn check(key: &str, value: &Value) -> Result<(), String> {
    let kind = MAPPINGS.iter().find(|m| m.key == key).map(|m| m.kind);
    if key.ends_with(".io_batchsize") {
        if let Some(n) = value.as_u64() {
            if !(1..=1024).contains(&n) {
                return Err(format!("{n} is outside 1..=1024"));
            }
        }
    }
    match (kind, value) {
        (Some(Kind::Unsigned), Value::Number(n)) if n.as_u64().is_some() => Ok(()),
        (Some(Kind::Unsigned), v) => Err(format!("{v} is not an unsigned integer")),
        (Some(Kind::Bool), Value::Bool(_)) => Ok(()),
        (Some(Kind::Bool), v) => Err(format!("{v} is not true or false")),
        (Some(Kind::Text), Value::String(_)) => Ok(()),
        (Some(Kind::Text), v) => Err(format!("{v} is not a string")),
        (None, v) if key.starts_with("hipfile.") => match v {
            Value::Bool(_) | Value::String(_) => Ok(()),
            Value::Number(n) if n.as_u64().is_some() => Ok(()),
            v => Err(format!(
                "{v} is not a boolean, an unsigned integer or a string"
            )),
        },
        (None, _) => Ok(()),
    }
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, child, out);
            }
        }
        leaf => out.push((prefix.to_string(), leaf.clone())),
    }
}

fn describe_json_error(e: &serde_json::Error) -> String {
    // serde_json's message ends with "at line L column C"; the line is ours.
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => format!("{} (column {})", &s[..i], e.column()),
        None => s,
    }
}

/// The line (from 1) where the key `path` is written: each segment is
/// looked for as `"name":` after the previous one. Best effort (a key
/// repeated in an earlier sibling section may be found first).
fn line_of(text: &str, path: &[&str]) -> Option<usize> {
    let mut pos = 0;
    for seg in path {
        let quoted = format!("\"{seg}\"");
        let mut from = pos;
        loop {
            let i = from + text[from..].find(&quoted)?;
            let after = text[i + quoted.len()..].trim_start();
            if after.starts_with(':') {
                pos = i + quoted.len();
                break;
            }
            from = i + quoted.len();
        }
    }
    Some(text[..pos].matches('\n').count() + 1)
}

/// `text` with comments blanked out (newlines kept, so lines still count)
/// and trailing commas before `}` or `]` removed; and the line of a `/*`
/// that is never closed.
pub fn strip_comments(text: &str) -> (String, Option<usize>) {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let mut line = 1;
    while i < b.len() {
        match b[i] {
            b'"' => {
                // Copy the string, escapes included.
                out.push(b'"');
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        out.push(b[i]);
                        i += 1;
                    }
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    out.push(b[i]);
                    i += 1;
                }
                if i < b.len() {
                    out.push(b'"');
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    out.push(b' ');
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let start = line;
                out.extend_from_slice(b"  ");
                i += 2;
                loop {
                    if i >= b.len() {
                        return (String::new(), Some(start));
                    }
                    if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        out.extend_from_slice(b"  ");
                        i += 2;
                        break;
                    }
                    if b[i] == b'\n' {
                        line += 1;
                        out.push(b'\n');
                    } else {
                        out.push(b' ');
                    }
                    i += 1;
                }
            }
            c => {
                if c == b'\n' {
                    line += 1;
                }
                out.push(c);
                i += 1;
            }
        }
    }
    // Trailing commas: a comma outside strings whose next non-blank byte
    // closes an object or array.
    let mut in_str = false;
    let mut k = 0;
    while k < out.len() {
        match out[k] {
            b'\\' if in_str => k += 1,
            b'"' => in_str = !in_str,
            b',' if !in_str => {
                let next = out[k + 1..].iter().find(|c| !c.is_ascii_whitespace());
                if matches!(next, Some(b'}') | Some(b']')) {
                    out[k] = b' ';
                }
            }
            _ => {}
        }
        k += 1;
    }
    // Only ASCII bytes were replaced, and only outside multi-byte sequences.
    (String::from_utf8(out).unwrap_or_default(), None)
}

static PROCESS_FILE: OnceLock<Option<FileConfig>> = OnceLock::new();

/// The process's configuration file, read once (None when no variable names one).
pub fn process_file() -> Option<&'static FileConfig> {
    PROCESS_FILE
        .get_or_init(|| {
            PATH_VARS
                .iter()
                .find_map(|v| std::env::var(v).ok().filter(|p| !p.is_empty()))
                .map(|p| FileConfig::load(&p))
        })
        .as_ref()
}

/// Report the file's problems, once per process (after a logger is set).
pub fn report_problems() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if let Some(f) = process_file() {
        ONCE.call_once(|| {
            for p in f.problems() {
                log_error!("{p}");
            }
        });
    }
}

/// The parameter table's defaults, with the file's values.
pub fn seeded_params() -> Params {
    let mut p = Params::default();
    if let Some(f) = process_file() {
        f.seed(&mut p);
    }
    p
}

/// The environment over the file: what [`crate::config::Config`] reads.
pub struct Layered<'a, E: Env + ?Sized> {
    env: &'a E,
    file: Option<&'a FileConfig>,
}

impl Layered<'static, ProcessEnv> {
    /// The process environment over the process's file.
    pub fn process() -> Layered<'static, ProcessEnv> {
        Layered {
            env: &ProcessEnv,
            file: process_file(),
        }
    }
}

impl<'a, E: Env + ?Sized> Layered<'a, E> {
    pub fn new(env: &'a E, file: Option<&'a FileConfig>) -> Layered<'a, E> {
        Layered { env, file }
    }

    /// A key of the file itself (for settings with no variable).
    pub fn file_value(&self, key: &str) -> Option<String> {
        self.file?.value(key)
    }
}

impl<E: Env + ?Sized> Env for Layered<'_, E> {
    fn get(&self, name: &str) -> Option<String> {
        self.env
            .get(name)
            .or_else(|| self.file.and_then(|f| f.for_env(name)))
    }
}

/// Run `f` (which builds the settings) over the process environment and
/// file, then report what in the file went unused, once per process.
pub fn with_process_env<T>(f: impl FnOnce(&Layered<'static, ProcessEnv>) -> T) -> T {
    let layered = Layered::process();
    let t = f(&layered);
    report_problems();
    static ONCE: std::sync::Once = std::sync::Once::new();
    if let Some(file) = layered.file {
        ONCE.call_once(|| file.report_unused());
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ReadMode};

    const SAMPLE: &str = r#"{
    // NOTE : cuFile's own sample starts with comments like this one
    "logging": {
        // "dir": "/home/<xxxx>",
        "level": "WARN"
    },
    /* a block
       comment */
    "profile": { "nvtx": false, "cufile_stats": 2 },
    "execution": {
        "max_io_threads": 6,
        "max_io_queue_depth": 128,
    },
    "properties": {
        "max_direct_io_size_kb": 1024,
        "allow_compat_mode": true,
        "io_batchsize": 64,
        "rdma_dev_addr_list": [],
        "url": "http://example.com/a//b"
    },
    "fs": { "generic": { "posix_unaligned_writes": false } },
    "hipfile": { "queue_depth": 3, "stream_stages": 4, "huge_pages": false }
}"#;

    fn sample() -> FileConfig {
        FileConfig::parse("cufile.json", SAMPLE)
    }

    #[test]
    fn comments_and_trailing_commas_are_accepted() {
        let f = sample();
        assert_eq!(f.problems(), &[] as &[String]);
        assert_eq!(f.value("logging.level").as_deref(), Some("WARN"));
        assert_eq!(
            f.value("logging.dir"),
            None,
            "a commented-out key is absent"
        );
        // "//" inside a string is not a comment.
        assert_eq!(
            f.value("properties.url").as_deref(),
            Some("http://example.com/a//b")
        );
    }

    #[test]
    fn the_file_maps_cufile_and_hipfile_keys_onto_settings() {
        let f = sample();
        let env: &[(&str, &str)] = &[];
        let c = Config::from_env_with(&Layered::new(env, Some(&f)));
        assert_eq!(c.io_threads, 6);
        assert_eq!(c.chunk_bytes, 1024 << 10);
        assert_eq!(c.stats_level, 2);
        assert_eq!(c.slots_per_worker, 3);
        assert_eq!(c.stream_stages, 4);
        assert!(!c.huge_pages);
    }

    #[test]
    fn the_environment_beats_the_file_and_the_file_beats_the_default() {
        let f = sample();
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "3"), ("HIPFILE_HUGE_PAGES", "true")];
        let c = Config::from_env_with(&Layered::new(env, Some(&f)));
        assert_eq!(c.io_threads, 3, "environment over file");
        assert!(c.huge_pages, "environment over file (hipfile section)");
        assert_eq!(c.chunk_bytes, 1024 << 10, "file over default");
        let d = Config::from_env_with(&Layered::new(env, None));
        assert_eq!(
            d.chunk_bytes,
            Config::default().chunk_bytes,
            "default without a file"
        );
    }

    #[test]
    fn a_parameter_beats_the_environment_and_the_file() {
        let f = sample();
        let env: &[(&str, &str)] = &[("HIPFILE_IO_THREADS", "3")];
        let mut c = Config::from_env_with(&Layered::new(env, Some(&f)));
        let mut p = Params::default();
        f.seed(&mut p);
        assert_eq!(
            p.size_t[param::PROPERTIES_IO_BATCHSIZE],
            64,
            "file seeds the parameter"
        );
        // 5: under the machine's clamp (4 workers per core) on any CI machine.
        p.size_t[param::EXECUTION_MAX_IO_THREADS] = 5;
        p.size_t[param::PROPERTIES_IO_BATCHSIZE] = 32;
        p.apply(&mut c);
        assert_eq!(c.io_threads, 5);
        assert_eq!(c.max_batch_entries, 32);
    }

    #[test]
    fn file_values_seed_parameters_only_where_given() {
        let f = sample();
        let mut p = Params::default();
        f.seed(&mut p);
        let d = Params::default();
        assert_eq!(p.size_t[param::PROPERTIES_MAX_DIRECT_IO_SIZE_KB], 1024);
        assert_eq!(p.size_t[param::EXECUTION_MAX_IO_QUEUE_DEPTH], 128);
        assert_eq!(p.strings[param::S_LOGGING_LEVEL], "WARN");
        assert_eq!(
            p.size_t[param::PROPERTIES_BATCH_IO_TIMEOUT_MS],
            d.size_t[param::PROPERTIES_BATCH_IO_TIMEOUT_MS]
        );
    }

    #[test]
    fn force_odirect_mode_means_direct_reads_unless_the_environment_says_otherwise() {
        let f = FileConfig::parse("x", r#"{"properties": {"force_odirect_mode": true}}"#);
        let none: &[(&str, &str)] = &[];
        assert_eq!(
            Config::from_env_with(&Layered::new(none, Some(&f))).read_mode,
            ReadMode::Direct
        );
        let env: &[(&str, &str)] = &[("HIPFILE_READ_MODE", "buffered")];
        assert_eq!(
            Config::from_env_with(&Layered::new(env, Some(&f))).read_mode,
            ReadMode::Buffered
        );
        let off = FileConfig::parse("x", r#"{"properties": {"force_odirect_mode": false}}"#);
        assert_eq!(
            Config::from_env_with(&Layered::new(none, Some(&off))).read_mode,
            ReadMode::Auto
        );
    }

    #[test]
    fn unknown_and_cufile_only_keys_are_told_apart() {
        let text = r#"{
            "properties": { "max_direct_io_sise_kb": 4, "posix_pool_slab_count": [1],
                            "rdma_dynamic_routing": false },
            "fs": { "lustre": { "posix_gds_min_kb": 0 } },
            "hipfile": { "io_threds": 4 }
        }"#;
        let f = FileConfig::parse("c.json", text);
        let none: &[(&str, &str)] = &[];
        let _ = Config::from_env_with(&Layered::new(none, Some(&f)));
        let (cufile, unknown) = f.unused();
        assert_eq!(
            cufile,
            [
                "fs.lustre.posix_gds_min_kb",
                "properties.posix_pool_slab_count",
                "properties.rdma_dynamic_routing"
            ]
        );
        assert_eq!(
            unknown,
            ["hipfile.io_threds", "properties.max_direct_io_sise_kb"]
        );
        assert_eq!(f.entries["hipfile.io_threds"].line, 5);
    }

    #[test]
    fn a_retired_setting_in_the_file_is_ignored_but_not_unknown() {
        let f = FileConfig::parse("c.json", r#"{"hipfile": {"poll_copies": true}}"#);
        let none: &[(&str, &str)] = &[];
        let c = Config::from_env_with(&Layered::new(none, Some(&f)));
        assert_eq!(c, Config::from_env_with(&Layered::new(none, None)));
        // Named by the retired-setting warning, so not again as unknown.
        assert_eq!(f.unused(), (vec![], vec![]));
    }

    #[test]
    fn a_malformed_value_is_reported_with_its_line_and_ignored() {
        let text = "{\n  \"execution\": {\n    \"max_io_threads\": -2\n  },\n  \"properties\": {\"allow_compat_mode\": \"yes\"}\n}";
        let f = FileConfig::parse("c.json", text);
        assert_eq!(f.problems().len(), 2, "{:?}", f.problems());
        assert!(
            f.problems()[0]
                .starts_with("c.json:3: execution.max_io_threads: -2 is not an unsigned integer"),
            "{}",
            f.problems()[0]
        );
        assert!(f.problems()[1].contains("c.json:5: properties.allow_compat_mode"));
        let none: &[(&str, &str)] = &[];
        let c = Config::from_env_with(&Layered::new(none, Some(&f)));
        assert_eq!(c.io_threads, Config::default().io_threads);
        assert!(c.allow_compat_mode);
    }

    #[test]
    fn a_syntax_error_is_reported_with_its_line_and_the_file_ignored() {
        let text =
            "{\n  \"execution\": {\n    \"max_io_threads\": 4\n    \"parallel_io\": true\n  }\n}";
        let f = FileConfig::parse("c.json", text);
        assert_eq!(f.problems().len(), 1);
        assert!(
            f.problems()[0].starts_with("c.json:4: "),
            "{}",
            f.problems()[0]
        );
        assert!(f.problems()[0].ends_with("the file is ignored"));
        assert_eq!(f.value("execution.max_io_threads"), None);
    }

    #[test]
    fn an_unclosed_block_comment_is_reported() {
        let f = FileConfig::parse("c.json", "{\n /* open\n \"a\": 1 }");
        assert_eq!(f.problems().len(), 1);
        assert!(f.problems()[0].starts_with("c.json:2: a /* comment is never closed"));
    }

    #[test]
    fn a_missing_file_is_a_problem_not_an_error() {
        let f = FileConfig::load("/nonexistent/hipfile-test/cufile.json");
        assert_eq!(f.problems().len(), 1);
        assert!(
            f.problems()[0].contains("cannot read"),
            "{}",
            f.problems()[0]
        );
    }

    #[test]
    fn an_out_of_range_batch_size_is_reported_and_does_not_seed() {
        let f = FileConfig::parse("x", r#"{"properties": {"io_batchsize": 5000}}"#);
        assert_eq!(f.problems().len(), 1);
        assert!(f.problems()[0].contains("5000 is outside 1..=1024"));
        let mut p = Params::default();
        f.seed(&mut p);
        assert_eq!(p.size_t[param::PROPERTIES_IO_BATCHSIZE], 128);
    }
}
