//! Command-line options: fio's `--name=value` syntax, parsed by hand.
//!
//! Every error is one line that names the option; `main` prints it and exits
//! with status 2.

use std::time::Duration;

/// The I/O pattern (`--rw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Read,
    Write,
    RandRead,
    RandWrite,
    /// Sequential mixed reads and writes (`--rwmixread`).
    Rw,
    RandRw,
}

impl Workload {
    pub fn parse(s: &str) -> Option<Workload> {
        Some(match s {
            "read" => Workload::Read,
            "write" => Workload::Write,
            "randread" => Workload::RandRead,
            "randwrite" => Workload::RandWrite,
            // fio accepts "readwrite" as a synonym of "rw", and "randrw" only as is.
            "rw" | "readwrite" => Workload::Rw,
            "randrw" => Workload::RandRw,
            _ => return None,
        })
    }

    pub fn is_random(self) -> bool {
        matches!(
            self,
            Workload::RandRead | Workload::RandWrite | Workload::RandRw
        )
    }

    pub fn has_writes(self) -> bool {
        !matches!(self, Workload::Read | Workload::RandRead)
    }

    /// Percentage of reads among the operations.
    pub fn read_percent(self, rwmixread: u32) -> u32 {
        match self {
            Workload::Read | Workload::RandRead => 100,
            Workload::Write | Workload::RandWrite => 0,
            Workload::Rw | Workload::RandRw => rwmixread,
        }
    }
}

/// `--ioengine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoEngine {
    HipfileSync,
    HipfileAsync,
    HipfileBatch,
    Posix,
    Raw,
    Copy,
}

impl IoEngine {
    pub fn parse(s: &str) -> Option<IoEngine> {
        Some(match s {
            "hipfile-sync" => IoEngine::HipfileSync,
            "hipfile-async" => IoEngine::HipfileAsync,
            "hipfile-batch" => IoEngine::HipfileBatch,
            "posix" => IoEngine::Posix,
            "raw" => IoEngine::Raw,
            "copy" => IoEngine::Copy,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            IoEngine::HipfileSync => "hipfile-sync",
            IoEngine::HipfileAsync => "hipfile-async",
            IoEngine::HipfileBatch => "hipfile-batch",
            IoEngine::Posix => "posix",
            IoEngine::Raw => "raw",
            IoEngine::Copy => "copy",
        }
    }

    /// The engines that go through libhipfile (driver open, handle and buffer registration).
    pub fn uses_hipfile(self) -> bool {
        matches!(
            self,
            IoEngine::HipfileSync | IoEngine::HipfileAsync | IoEngine::HipfileBatch
        )
    }

    /// Synchronous engines run one I/O at a time per job, whatever `--iodepth` says.
    pub fn is_sync(self) -> bool {
        matches!(self, IoEngine::HipfileSync | IoEngine::Posix)
    }
}

/// `--mem`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemChoice {
    Device,
    Host,
}

impl MemChoice {
    pub fn name(self) -> &'static str {
        match self {
            MemChoice::Device => "device",
            MemChoice::Host => "host",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Normal,
    Json,
}

/// Everything one run needs to know from the command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--name`: the job name in the report (fio's default is the file name here).
    pub name: String,
    pub filename: String,
    /// `--size`: total bytes over all jobs; `None` = the file's size from `--offset` on.
    pub size: Option<u64>,
    pub bs: u64,
    pub rw: Workload,
    pub rwmixread: u32,
    pub offset: u64,
    pub iodepth: u32,
    pub numjobs: u32,
    /// `--direct`; `None` = the engine's default (raw: 1, the others: 0).
    pub direct: Option<bool>,
    pub runtime: Option<Duration>,
    pub time_based: bool,
    pub loops: u32,
    pub invalidate: bool,
    pub verify: bool,
    pub output_format: OutputFormat,
    pub group_reporting: bool,
    pub ramp_time: Option<Duration>,
    /// `--mem`; `None` = device when a GPU runtime with devices is present.
    pub mem: Option<MemChoice>,
    /// `--iomem=mmaphuge` (fio's name): host buffers on huge pages.
    pub iomem_huge: bool,
    /// `--fixedbufs` (fio's io_uring option): raw registers its buffer.
    pub fixedbufs: bool,
    /// `--main_tick`: how often the main thread wakes while jobs run (fio's
    /// status loop: 10 ms); zero = it sleeps until they finish.
    pub main_tick: Duration,
    pub gpu: i32,
    pub ioengine: IoEngine,
    /// The options as given, in order, for the JSON "job options".
    pub given: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            name: String::new(),
            filename: String::new(),
            size: None,
            bs: 1 << 20,
            rw: Workload::Read,
            rwmixread: 50,
            offset: 0,
            iodepth: 1,
            numjobs: 1,
            direct: None,
            runtime: None,
            time_based: false,
            loops: 1,
            invalidate: true,
            verify: false,
            output_format: OutputFormat::Normal,
            group_reporting: false,
            ramp_time: None,
            mem: None,
            iomem_huge: false,
            fixedbufs: false,
            main_tick: Duration::from_millis(10),
            gpu: 0,
            ioengine: IoEngine::HipfileSync,
            given: Vec::new(),
        }
    }
}

impl Options {
    /// `--direct` after the engine's default.
    pub fn direct(&self) -> bool {
        self.direct.unwrap_or(self.ioengine == IoEngine::Raw)
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    Run(Box<Options>),
    Help,
    Version,
}

/// Largest `--iodepth` accepted (fio's own limit is 65536 too).
pub const MAX_IODEPTH: u32 = 65536;
/// Largest `--numjobs` accepted: every job is a thread with its own buffer.
pub const MAX_NUMJOBS: u32 = 4096;

/// Parse a size the way fio does with its default `kb_base=1024`: a number
/// (decimals allowed), then an optional k/m/g/t/p prefix and an optional
/// `b`/`ib`, case-insensitive, all powers of 1024: "4k" = "4KiB" = "4kb" = 4096,
/// "1.5g" = 1610612736. (fio's compatibility mode reads "KiB" as 1000; we do
/// not copy that surprise: every suffix here is base 1024.)
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.chars().filter(|&c| c == '.').count() > 1 || num == "." {
        return Err(format!("bad size '{s}'"));
    }
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => return Err(format!("bad size '{s}': unknown unit '{unit}'")),
    };
    let mult = 1u64 << shift;
    if let Some((int, frac)) = num.split_once('.') {
        let int_v: u64 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| format!("bad size '{s}'"))?
        };
        let whole = int_v
            .checked_mul(mult)
            .ok_or_else(|| format!("size '{s}' is too large"))?;
        // The fraction in exact integer arithmetic: 0.5 g = 5 * 2^30 / 10.
        let digits = frac.len().min(18) as u32;
        let frac_v: u128 = if digits == 0 {
            0
        } else {
            frac[..digits as usize]
                .parse()
                .map_err(|_| format!("bad size '{s}'"))?
        };
        let part = (frac_v * mult as u128) / 10u128.pow(digits);
        whole
            .checked_add(part as u64)
            .ok_or_else(|| format!("size '{s}' is too large"))
    } else {
        let v: u64 = num.parse().map_err(|_| format!("bad size '{s}'"))?;
        v.checked_mul(mult)
            .ok_or_else(|| format!("size '{s}' is too large"))
    }
}

/// Parse a time as fio does: plain numbers are seconds; suffixes
/// us, ms, s, m, h, d.
pub fn parse_time(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("bad time '{s}'"))?;
    let secs = match unit.to_ascii_lowercase().as_str() {
        "" | "s" | "sec" => v,
        "us" | "usec" => v / 1e6,
        "ms" | "msec" => v / 1e3,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        _ => return Err(format!("bad time '{s}': unknown unit '{unit}'")),
    };
    if !secs.is_finite() || !(0.0..1e10).contains(&secs) {
        return Err(format!("bad time '{s}'"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// fio booleans: 0/1, plus true/false/yes/no/on/off.
pub fn parse_bool(name: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("--{name}: expected 0 or 1, got '{v}'")),
    }
}

fn parse_uint(name: &str, v: &str, min: u32, max: u32) -> Result<u32, String> {
    let n: u32 = v
        .trim()
        .parse()
        .map_err(|_| format!("--{name}: expected an integer, got '{v}'"))?;
    if n < min || n > max {
        return Err(format!("--{name}: {n} is out of range {min}..={max}"));
    }
    Ok(n)
}

/// Options that are flags: `--time_based` means `--time_based=1`.
const FLAGS: &[&str] = &["time_based", "group_reporting", "thread", "fixedbufs"];

/// Parse the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut o = Options::default();
    let mut verify_set = false;
    for arg in args {
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        if arg == "--version" {
            return Ok(Command::Version);
        }
        let Some(body) = arg.strip_prefix("--") else {
            return Err(format!(
                "unexpected argument '{arg}': options are --name=value (job files are not supported)"
            ));
        };
        let (key, value) = match body.split_once('=') {
            Some((k, v)) => (k, v),
            None if FLAGS.contains(&body) => (body, "1"),
            None => return Err(format!("--{body} needs a value (--{body}=...)")),
        };
        // fio spells some options with dashes too (output-format); accept both.
        let k = key.replace('-', "_");
        match k.as_str() {
            "name" => o.name = value.to_string(),
            "filename" => {
                if value.is_empty() {
                    return Err("--filename: empty file name".into());
                }
                o.filename = value.to_string();
            }
            "size" => {
                let v = parse_size(value).map_err(|e| format!("--size: {e}"))?;
                if v == 0 {
                    return Err("--size: must be above 0".into());
                }
                o.size = Some(v);
            }
            "bs" => {
                let v = parse_size(value).map_err(|e| format!("--bs: {e}"))?;
                // One call moves at most MAX_RW_COUNT bytes (Linux's limit).
                if v == 0 || v > hipfile_engine::MAX_RW_COUNT as u64 {
                    return Err(format!(
                        "--bs: {v} is out of range 1..={}",
                        hipfile_engine::MAX_RW_COUNT
                    ));
                }
                o.bs = v;
            }
            "rw" | "readwrite" => {
                o.rw = Workload::parse(value).ok_or_else(|| {
                    format!(
                    "--rw: '{value}' is not one of read, write, randread, randwrite, rw, randrw"
                )
                })?
            }
            "rwmixread" => o.rwmixread = parse_uint(&k, value, 0, 100)?,
            "rwmixwrite" => o.rwmixread = 100 - parse_uint(&k, value, 0, 100)?,
            "offset" => o.offset = parse_size(value).map_err(|e| format!("--offset: {e}"))?,
            "iodepth" => o.iodepth = parse_uint(&k, value, 1, MAX_IODEPTH)?,
            "numjobs" => o.numjobs = parse_uint(&k, value, 1, MAX_NUMJOBS)?,
            "direct" => o.direct = Some(parse_bool(&k, value)?),
            "buffered" => o.direct = Some(!parse_bool(&k, value)?),
            "runtime" => {
                o.runtime = Some(parse_time(value).map_err(|e| format!("--runtime: {e}"))?)
            }
            "time_based" => o.time_based = parse_bool(&k, value)?,
            "loops" => o.loops = parse_uint(&k, value, 1, u32::MAX)?,
            "invalidate" => o.invalidate = parse_bool(&k, value)?,
            "verify" => {
                o.verify = match value {
                    "0" | "null" => false,
                    "1" | "pattern" => true,
                    _ => {
                        return Err(format!(
                            "--verify: expected 0 or 1, got '{value}' (checks use hipfile-bench's own pattern)"
                        ))
                    }
                };
                verify_set = true;
            }
            "output_format" => {
                o.output_format = match value {
                    "normal" => OutputFormat::Normal,
                    "json" => OutputFormat::Json,
                    _ => return Err(format!("--output-format: '{value}' is not normal or json")),
                }
            }
            "group_reporting" => o.group_reporting = parse_bool(&k, value)?,
            "ramp_time" => {
                o.ramp_time = Some(parse_time(value).map_err(|e| format!("--ramp_time: {e}"))?)
            }
            "mem" => {
                o.mem = Some(match value {
                    "device" => MemChoice::Device,
                    "host" => MemChoice::Host,
                    _ => return Err(format!("--mem: '{value}' is not device or host")),
                })
            }
            "fixedbufs" => o.fixedbufs = parse_bool(&k, value)?,
            "main_tick" => {
                o.main_tick = parse_time(value).map_err(|e| format!("--main_tick: {e}"))?
            }
            "iomem" => {
                o.iomem_huge = match value {
                    "malloc" | "mmap" => false,
                    "mmaphuge" => true,
                    _ => {
                        return Err(format!(
                            "--{k}: '{value}' is not malloc, mmap or mmaphuge \
                             (the ones hipfile-bench has)"
                        ))
                    }
                }
            }
            "gpu" => o.gpu = parse_uint(&k, value, 0, 1023)? as i32,
            "ioengine" => {
                o.ioengine = IoEngine::parse(value).ok_or_else(|| {
                    format!(
                        "--ioengine: '{value}' is not one of hipfile-sync, hipfile-async, \
                         hipfile-batch, posix, raw, copy"
                    )
                })?
            }
            // fio needs `thread` for the GPU engines; every job is a thread here anyway.
            "thread" => {}
            _ => return Err(format!("unknown option --{key}")),
        }
        // fio's "job options" hold job options only, not command-line switches.
        if k != "output_format" {
            o.given.push((k, value.to_string()));
        }
    }
    if o.filename.is_empty() {
        return Err("--filename is required".into());
    }
    if o.time_based && o.runtime.is_none() {
        return Err("--time_based needs --runtime".into());
    }
    if o.runtime.is_some_and(|r| r.is_zero()) {
        return Err("--runtime: must be above 0".into());
    }
    if verify_set && o.verify && o.ioengine == IoEngine::Copy {
        return Err("--verify=1 does not apply to --ioengine=copy (it moves no file data)".into());
    }
    if o.name.is_empty() {
        o.name = o.filename.rsplit('/').next().unwrap_or("job").to_string();
        if o.name.is_empty() {
            o.name = "job".into();
        }
    }
    Ok(Command::Run(Box::new(o)))
}

pub const USAGE: &str = "\
usage: hipfile-bench --filename=PATH [--name=value ...]

fio-style options:
  --filename=PATH        file to read or write (created with a data pattern if needed)
  --size=N               bytes in all (k/m/g/t suffixes, base 1024); default: the file's size
  --bs=N                 block size per I/O (default 1M)
  --rw=MODE              read|write|randread|randwrite|rw|randrw (default read)
  --rwmixread=PCT        reads in a mixed workload (default 50)
  --offset=N             start of the region in the file (default 0)
  --iodepth=N            I/Os in flight per job (default 1; sync engines use 1)
  --numjobs=N            jobs (threads); each has its own buffer and region (default 1)
  --direct=0|1           open the file with O_DIRECT (default 0; raw: 1)
  --runtime=T            stop after T (seconds, or ms/s/m/h suffix)
  --time_based           loop over the region until --runtime is up
  --loops=N              passes over the region (default 1)
  --ramp_time=T          run T before the statistics start
  --invalidate=0|1       drop the file's page cache before the run (default 1)
  --verify=0|1           check read data against the pattern; write the pattern and read it back
  --output-format=F      normal|json
  --group_reporting      one report for all jobs
  --iomem=malloc|mmap|mmaphuge
                         host buffers: plain pages (default), or transparent huge
                         pages (madvise; fio's mmaphuge uses hugetlbfs)
  --fixedbufs=0|1        raw: register the buffer with the ring (default 0, as fio)
ours:
  --ioengine=E           hipfile-sync|hipfile-async|hipfile-batch|posix|raw|copy (default hipfile-sync)
  --mem=device|host      buffer memory (default device when a GPU is present)
  --gpu=N                GPU ordinal (default 0)
  --main_tick=T          the main thread wakes every T while jobs run, as fio's
                         status loop does (default 10ms; 0: it sleeps until they end)
";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn run(v: &[&str]) -> Result<Options, String> {
        match parse(&args(v))? {
            Command::Run(o) => Ok(*o),
            c => panic!("expected a run, got {c:?}"),
        }
    }

    #[test]
    fn sizes_are_base_1024() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4kb"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("2t"), Ok(2 << 40));
        assert_eq!(parse_size("1p"), Ok(1 << 50));
        assert_eq!(parse_size("100b"), Ok(100));
        assert_eq!(parse_size("1.5g"), Ok(1_610_612_736));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size(".5m"), Ok(512 << 10));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for s in ["", "k", "-1", "1x", "4kk", "1.2.3", ".", "1 k", "16777216t"] {
            assert!(parse_size(s).is_err(), "{s:?} should be refused");
        }
        assert!(parse_size("18446744073709551615").is_ok());
        assert!(parse_size("18446744073709551616").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_time("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_time("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_time("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_time("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_time("ten").is_err());
        assert!(parse_time("5x").is_err());
    }

    #[test]
    fn defaults() {
        let o = run(&["--filename=/tmp/x"]).unwrap();
        assert_eq!(o.bs, 1 << 20);
        assert_eq!(o.rw, Workload::Read);
        assert_eq!(o.iodepth, 1);
        assert_eq!(o.numjobs, 1);
        assert_eq!(o.rwmixread, 50);
        assert_eq!(o.loops, 1);
        assert!(o.invalidate);
        assert!(!o.verify);
        assert!(!o.direct());
        assert_eq!(o.mem, None);
        assert_eq!(o.size, None);
        assert_eq!(o.ioengine, IoEngine::HipfileSync);
        assert_eq!(o.output_format, OutputFormat::Normal);
        assert_eq!(o.name, "x");
    }

    #[test]
    fn full_command_line() {
        let o = run(&[
            "--name=seq",
            "--filename=/tmp/f",
            "--size=4G",
            "--bs=4k",
            "--rw=randrw",
            "--rwmixread=70",
            "--offset=1m",
            "--iodepth=32",
            "--numjobs=4",
            "--direct=1",
            "--runtime=30",
            "--time_based",
            "--loops=3",
            "--invalidate=0",
            "--verify=1",
            "--output-format=json",
            "--group_reporting",
            "--ramp_time=2s",
            "--mem=host",
            "--gpu=1",
            "--ioengine=raw",
        ])
        .unwrap();
        assert_eq!(o.name, "seq");
        assert_eq!(o.filename, "/tmp/f");
        assert_eq!(o.size, Some(4 << 30));
        assert_eq!(o.bs, 4096);
        assert_eq!(o.rw, Workload::RandRw);
        assert_eq!(o.rwmixread, 70);
        assert_eq!(o.offset, 1 << 20);
        assert_eq!(o.iodepth, 32);
        assert_eq!(o.numjobs, 4);
        assert!(o.direct());
        assert_eq!(o.runtime, Some(Duration::from_secs(30)));
        assert!(o.time_based);
        assert_eq!(o.loops, 3);
        assert!(!o.invalidate);
        assert!(o.verify);
        assert_eq!(o.output_format, OutputFormat::Json);
        assert!(o.group_reporting);
        assert_eq!(o.ramp_time, Some(Duration::from_secs(2)));
        assert_eq!(o.mem, Some(MemChoice::Host));
        assert_eq!(o.gpu, 1);
        assert_eq!(o.ioengine, IoEngine::Raw);
        assert_eq!(o.given.len(), 20);
        assert_eq!(o.given[2], ("size".to_string(), "4G".to_string()));
        // The flag form is recorded with its implied value.
        assert!(o
            .given
            .contains(&("time_based".to_string(), "1".to_string())));
    }

    #[test]
    fn iomem_picks_the_host_pages() {
        assert!(!run(&["--filename=f"]).unwrap().iomem_huge);
        assert!(!run(&["--filename=f", "--iomem=malloc"]).unwrap().iomem_huge);
        assert!(
            run(&["--filename=f", "--iomem=mmaphuge"])
                .unwrap()
                .iomem_huge
        );
    }

    #[test]
    fn fixedbufs_is_off_unless_asked_as_in_fio() {
        assert!(!run(&["--filename=f"]).unwrap().fixedbufs);
        assert!(run(&["--filename=f", "--fixedbufs=1"]).unwrap().fixedbufs);
        assert!(run(&["--filename=f", "--fixedbufs"]).unwrap().fixedbufs);
        assert!(run(&["--filename=f", "--fixedbufs=2"]).is_err());
    }

    #[test]
    fn main_tick_defaults_to_fios_status_loop() {
        assert_eq!(
            run(&["--filename=f"]).unwrap().main_tick,
            Duration::from_millis(10)
        );
        assert!(run(&["--filename=f", "--main_tick=0"])
            .unwrap()
            .main_tick
            .is_zero());
        assert_eq!(
            run(&["--filename=f", "--main_tick=2ms"]).unwrap().main_tick,
            Duration::from_millis(2)
        );
        assert!(run(&["--filename=f", "--main_tick=x"]).is_err());
    }

    #[test]
    fn raw_defaults_to_direct_unless_told() {
        assert!(run(&["--filename=f", "--ioengine=raw"]).unwrap().direct());
        assert!(!run(&["--filename=f", "--ioengine=raw", "--direct=0"])
            .unwrap()
            .direct());
        assert!(!run(&["--filename=f", "--ioengine=posix"]).unwrap().direct());
    }

    #[test]
    fn errors_are_one_line_and_name_the_option() {
        let cases: &[(&[&str], &str)] = &[
            (&["--bs=1M"], "--filename is required"),
            (
                &["--filename=f", "--frobnicate=1"],
                "unknown option --frobnicate",
            ),
            (&["--filename=f", "--size=12q"], "--size"),
            (&["--filename=f", "--size=0"], "--size"),
            (&["--filename=f", "--bs=0"], "--bs"),
            (&["--filename=f", "--rw=sideways"], "--rw"),
            (&["--filename=f", "--iodepth=0"], "--iodepth"),
            (&["--filename=f", "--numjobs=x"], "--numjobs"),
            (&["--filename=f", "--rwmixread=101"], "--rwmixread"),
            (&["--filename=f", "--direct=2"], "--direct"),
            (&["--filename=f", "--mem=gpu"], "--mem"),
            (&["--filename=f", "--iomem=shmhuge"], "--iomem"),
            (&["--filename=f", "--ioengine=libaio"], "--ioengine"),
            (
                &["--filename=f", "--output-format=terse"],
                "--output-format",
            ),
            (&["--filename=f", "--verify=md5"], "--verify"),
            (
                &["--filename=f", "--time_based"],
                "--time_based needs --runtime",
            ),
            (&["--filename=f", "--size"], "--size needs a value"),
            (&["--filename=f", "job.fio"], "unexpected argument"),
            (
                &["--filename=f", "--ioengine=copy", "--verify=1"],
                "--ioengine=copy",
            ),
        ];
        for (argv, want) in cases {
            let e = parse(&args(argv)).unwrap_err();
            assert!(e.contains(want), "{argv:?}: '{e}' should mention '{want}'");
            assert!(!e.contains('\n'), "{argv:?}: error is not one line: {e}");
        }
    }

    #[test]
    fn help_and_version() {
        assert!(matches!(parse(&args(&["--help"])), Ok(Command::Help)));
        assert!(matches!(parse(&args(&["-h"])), Ok(Command::Help)));
        assert!(matches!(parse(&args(&["--version"])), Ok(Command::Version)));
    }

    #[test]
    fn mixed_percentages() {
        assert_eq!(Workload::Read.read_percent(30), 100);
        assert_eq!(Workload::RandWrite.read_percent(30), 0);
        assert_eq!(Workload::Rw.read_percent(30), 30);
        let o = run(&["--filename=f", "--rw=rw", "--rwmixwrite=20"]).unwrap();
        assert_eq!(o.rwmixread, 80);
    }
}
