//! The command line, as fio reads it: options of the run itself (`--output`,
//! `--output-format`, `--status-interval`, ...), job options (`--bs=4k`:
//! before the first `--name` they are defaults for every job; `--name=X`
//! starts job X and the options after it are its own; `--name=global` starts
//! defaults again), and job files (each one a group of its own, run after the
//! jobs before it finish). One or two dashes both work, as in fio.

use crate::jobfile::{self, Entry, Section};
use crate::options::{self, JobOptions, Kind};
use crate::units::{parse_time, parse_time_in, parse_uint};
use std::path::PathBuf;
use std::time::Duration;

/// Which reports to print (`--output-format`, comma-separated).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Formats {
    pub normal: bool,
    pub terse: bool,
    pub json: bool,
    /// json+ : json with each latency histogram's `bins`.
    pub json_plus: bool,
}

impl Formats {
    pub fn parse(v: &str) -> Result<Formats, String> {
        let mut f = Formats::default();
        for part in v.split(',') {
            match part.trim() {
                "normal" => f.normal = true,
                "terse" => f.terse = true,
                "json" => f.json = true,
                "json+" => {
                    f.json = true;
                    f.json_plus = true;
                }
                other => {
                    return Err(format!(
                        "--output-format: '{other}' is not normal, terse, json or json+"
                    ))
                }
            }
        }
        Ok(f)
    }
}

/// `--eta`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eta {
    /// While stderr is a terminal.
    Auto,
    Always,
    Never,
}

/// Options of the run as a whole.
#[derive(Clone, Debug)]
pub struct Global {
    pub formats: Formats,
    pub output: Option<PathBuf>,
    pub terse_version: u32,
    pub status_interval: Option<Duration>,
    pub eta: Eta,
    pub eta_newline: Option<Duration>,
    pub eta_interval: Duration,
    pub sections: Vec<String>,
    pub parse_only: bool,
    pub showcmd: bool,
    /// `--readonly`: refuse any job that writes.
    pub readonly: bool,
}

impl Default for Global {
    fn default() -> Global {
        Global {
            formats: Formats {
                normal: true,
                ..Formats::default()
            },
            output: None,
            terse_version: 3,
            status_interval: None,
            eta: Eta::Auto,
            eta_newline: None,
            eta_interval: Duration::from_millis(500),
            sections: Vec::new(),
            parse_only: false,
            showcmd: false,
            readonly: false,
        }
    }
}

/// One job as written: its name, the defaults in force where it stands, its
/// own options, and whether it starts a new job file (a stonewall).
#[derive(Clone, Debug)]
pub struct JobDef {
    pub name: String,
    pub globals: Vec<Entry>,
    pub entries: Vec<Entry>,
    pub file_boundary: bool,
}

impl JobDef {
    /// The job's options: fio's defaults, then the defaults in force, then its own.
    pub fn resolve(&self) -> Result<JobOptions, String> {
        let mut o = JobOptions {
            name: self.name.clone(),
            ..JobOptions::default()
        };
        for e in self.globals.iter().chain(&self.entries) {
            options::apply(&mut o, &e.key, e.value.as_deref())
                .map_err(|err| format!("{}: {err}", e.origin))?;
        }
        if self.file_boundary {
            o.stonewall = true;
        }
        o.check().map_err(|e| format!("job '{}': {e}", self.name))?;
        Ok(o)
    }

    /// The job's own `key=value` options, in order (a key given twice keeps
    /// its last value): fio's "job options".
    pub fn shown_options(&self) -> indexmap::IndexMap<String, String> {
        shown(&self.entries)
    }
}

/// Entries with a value, in order, as fio lists them in its JSON (bare flags
/// are not listed).
pub fn shown(entries: &[Entry]) -> indexmap::IndexMap<String, String> {
    let mut m = indexmap::IndexMap::new();
    for e in entries {
        if let Some(v) = &e.value {
            m.insert(e.key.clone(), v.clone());
        }
    }
    m
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    Run(Invocation),
    Help,
    Version,
    CmdHelp(Option<String>),
}

#[derive(Debug)]
pub struct Invocation {
    pub global: Global,
    pub jobs: Vec<JobDef>,
    /// Every default given (command line and `[global]` sections): fio's "global options".
    pub global_options: Vec<Entry>,
}

/// Options of the run (not of a job): name, whether a value is required.
const RUN_OPTIONS: &[(&str, bool)] = &[
    ("output", true),
    ("output_format", true),
    ("terse_version", true),
    ("minimal", false),
    ("append_terse", false),
    ("status_interval", true),
    ("eta", true),
    ("eta_newline", true),
    ("eta_interval", true),
    ("section", true),
    ("parse_only", false),
    ("showcmd", false),
    ("readonly", false),
    ("version", false),
    ("help", false),
    ("cmdhelp", false),
];

fn set_run_option(
    g: &mut Global,
    key: &str,
    value: Option<&str>,
) -> Result<Option<Command>, String> {
    let v = value.unwrap_or("");
    match key {
        "output" => {
            if v.is_empty() {
                return Err("--output: empty file name".into());
            }
            g.output = Some(PathBuf::from(v));
        }
        "output_format" => g.formats = Formats::parse(v)?,
        "terse_version" => {
            g.terse_version =
                parse_uint(v, 3, 5).map_err(|e| format!("--terse-version: {e}"))? as u32
        }
        "minimal" => g.formats = Formats::parse("terse")?,
        "append_terse" => g.formats.terse = true,
        "status_interval" => {
            let t = parse_time(v).map_err(|e| format!("--status-interval: {e}"))?;
            if t < Duration::from_millis(100) {
                return Err("--status-interval: at least 100ms".into());
            }
            g.status_interval = Some(t);
        }
        "eta" => {
            g.eta = match v {
                "auto" => Eta::Auto,
                "always" => Eta::Always,
                "never" => Eta::Never,
                _ => return Err(format!("--eta: '{v}' is not auto, always or never")),
            }
        }
        "eta_newline" => {
            g.eta_newline = Some(parse_time(v).map_err(|e| format!("--eta-newline: {e}"))?)
        }
        "eta_interval" => {
            let t = parse_time_in(v, Duration::from_millis(1))
                .map_err(|e| format!("--eta-interval: {e}"))?;
            // fio's floor: faster refreshes only flood the terminal.
            g.eta_interval = t.max(Duration::from_millis(250));
        }
        "section" => g.sections.push(v.to_string()),
        "parse_only" => g.parse_only = true,
        "showcmd" => g.showcmd = true,
        "readonly" => g.readonly = true,
        "version" => return Ok(Some(Command::Version)),
        "help" => return Ok(Some(Command::Help)),
        "cmdhelp" => return Ok(Some(Command::CmdHelp(value.map(str::to_string)))),
        _ => unreachable!("RUN_OPTIONS lists {key}"),
    }
    Ok(None)
}

/// Parse the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut g = Global::default();
    // Defaults in force at this point of the command line.
    let mut globals: Vec<Entry> = Vec::new();
    let mut all_globals: Vec<Entry> = Vec::new();
    let mut jobs: Vec<JobDef> = Vec::new();
    // The job the next option belongs to (None: the defaults).
    let mut current: Option<JobDef> = None;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "-h" {
            return Ok(Command::Help);
        }
        if arg == "-v" {
            return Ok(Command::Version);
        }
        let Some(body) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .filter(|b| !b.is_empty())
        else {
            files.push(PathBuf::from(arg));
            continue;
        };
        let (raw_key, inline) = match body.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (body, None),
        };
        let key = raw_key.replace('-', "_");
        if let Some(&(_, needs)) = RUN_OPTIONS.iter().find(|(n, _)| *n == key) {
            let value = match inline {
                Some(v) => Some(v),
                None if needs => {
                    let v = args
                        .get(i)
                        .ok_or_else(|| format!("--{raw_key} needs a value"))?;
                    i += 1;
                    Some(v.clone())
                }
                None => None,
            };
            if let Some(cmd) = set_run_option(&mut g, &key, value.as_deref())? {
                return Ok(cmd);
            }
            continue;
        }
        let spec = options::find(&key).ok_or_else(|| format!("unknown option --{raw_key}"))?;
        // Like fio (getopt), a job option that needs a value takes the next
        // argument when no '=' is given; booleans and log names do not.
        let value = match inline {
            Some(v) => Some(jobfile::expand(&v)?),
            None if spec.kind == Kind::Bool || spec.name.starts_with("write_") => None,
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("--{raw_key} needs a value (--{raw_key}=...)"))?;
                i += 1;
                Some(jobfile::expand(v)?)
            }
        };
        if spec.name == "name" {
            let name = value.clone().unwrap_or_default();
            if name.is_empty() {
                return Err("--name: empty job name".into());
            }
            if let Some(j) = current.take() {
                jobs.push(j);
            }
            if name == "global" {
                continue;
            }
            current = Some(JobDef {
                name: name.clone(),
                globals: globals.clone(),
                entries: vec![Entry {
                    key: "name".into(),
                    value: Some(name),
                    origin: "command line".into(),
                }],
                file_boundary: false,
            });
            continue;
        }
        let e = Entry {
            key: raw_key.to_string(),
            value,
            origin: "command line".into(),
        };
        // Check the value now, so the error names the argument.
        options::apply(&mut JobOptions::default(), &e.key, e.value.as_deref())?;
        match current.as_mut() {
            Some(j) => j.entries.push(e),
            None => {
                globals.push(e.clone());
                all_globals.push(e);
            }
        }
    }
    if let Some(j) = current.take() {
        jobs.push(j);
    }
    for f in &files {
        let sections = jobfile::read(f)?;
        add_file_jobs(
            &sections,
            &globals,
            &mut all_globals,
            &mut jobs,
            &g.sections,
        );
    }
    if jobs.is_empty() && files.is_empty() && !globals.is_empty() {
        // fio wants --name; a command line of options alone is one job,
        // named after its file, so short commands keep working.
        let name = globals
            .iter()
            .rev()
            .find(|e| e.key == "filename")
            .and_then(|e| e.value.as_deref())
            .and_then(|f| f.rsplit('/').next())
            .filter(|n| !n.is_empty())
            .unwrap_or("job")
            .to_string();
        jobs.push(JobDef {
            name,
            globals: Vec::new(),
            entries: std::mem::take(&mut globals),
            file_boundary: false,
        });
        all_globals.clear();
    }
    if jobs.is_empty() {
        return Err(if files.is_empty() {
            "no job: give --name=NAME with options, or a job file".into()
        } else {
            "the job file(s) define no job".into()
        });
    }
    Ok(Command::Run(Invocation {
        global: g,
        jobs,
        global_options: all_globals,
    }))
}

/// The jobs of one job file: each sees the command-line defaults and the
/// file's `[global]` sections above it; the file's first job waits for the
/// jobs before it (fio runs each job file as a group of its own).
fn add_file_jobs(
    sections: &[Section],
    cmdline_globals: &[Entry],
    all_globals: &mut Vec<Entry>,
    jobs: &mut Vec<JobDef>,
    only: &[String],
) {
    let mut globals = cmdline_globals.to_vec();
    let mut first = true;
    for s in sections {
        if s.name == "global" {
            globals.extend(s.entries.iter().cloned());
            all_globals.extend(s.entries.iter().cloned());
            continue;
        }
        if !only.is_empty() && !only.contains(&s.name) {
            continue;
        }
        jobs.push(JobDef {
            name: s.name.clone(),
            globals: globals.clone(),
            entries: s.entries.clone(),
            file_boundary: first && !jobs.is_empty(),
        });
        first = false;
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+%@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn arg(e: &Entry) -> String {
    match &e.value {
        Some(v) => shell_quote(&format!("--{}={v}", e.key)),
        None => format!("--{}", e.key),
    }
}

/// `--showcmd`: the jobs as one equivalent command line.
pub fn showcmd(inv: &Invocation) -> String {
    let mut out = vec!["hipfile-bench".to_string()];
    let mut shown_globals: Vec<Entry> = Vec::new();
    for (n, j) in inv.jobs.iter().enumerate() {
        // Command-line defaults only accumulate: defaults that extend the
        // ones shown become a `--name=global` block; others (a second job
        // file's) are spelled out as the job's own options.
        let mut inline: &[Entry] = &[];
        if j.globals != shown_globals {
            if j.globals.starts_with(&shown_globals) {
                if n > 0 {
                    out.push("--name=global".into());
                }
                out.extend(j.globals[shown_globals.len()..].iter().map(arg));
                shown_globals = j.globals.clone();
            } else {
                inline = &j.globals;
            }
        }
        out.push(shell_quote(&format!("--name={}", j.name)));
        out.extend(inline.iter().map(arg));
        out.extend(j.entries.iter().filter(|e| e.key != "name").map(arg));
        if j.file_boundary {
            out.push("--stonewall".into());
        }
    }
    out.join(" ")
}

pub const USAGE: &str = "\
usage: hipfile-bench [run options] [job options] [job file ...]

hipfile-bench speaks fio: job options as --name=value (before the first
--name they are defaults for every job; --name=NAME starts a job), and fio
job files ([global] and [job] sections, include, ${VAR}). See --cmdhelp for
every job option and bench/README.md for the engines and what differs.

run options:
  --output=FILE            write the report to FILE (notes stay on stderr)
  --output-format=LIST     normal, terse, json, json+ (comma-separated)
  --terse-version=3|4|5    terse layout (default 3)
  --minimal                --output-format=terse
  --append-terse           add the terse report to the others
  --status-interval=T      print the report so far every T
  --eta=auto|always|never  the status line on stderr (auto: when it is a terminal)
  --eta-newline=T          end the status line every T
  --eta-interval=T         refresh the status line every T (default 500ms)
  --section=NAME           run only this job-file section (repeatable)
  --parse-only             check the jobs and exit
  --showcmd                print the jobs as one command line and exit
  --readonly               refuse any job that writes
  --cmdhelp[=OPTION]       list the job options (or one)
  --version, --help

common job options:
  --filename=PATH --size=N --bs=N --rw=read|write|randread|randwrite|rw|randrw
  --ioengine=hipfile-sync|hipfile-async|hipfile-batch|posix|raw|copy
             (fio's names too: libcufile, libhipfile, psync, io_uring, libaio, ...)
  --iodepth=N --numjobs=N --direct=0|1 --runtime=T --time_based
  --mem=device|host|mmaphuge --nrfiles=N --filesize=N --directory=DIR
";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn run(v: &[&str]) -> Invocation {
        match parse(&args(v)).unwrap() {
            Command::Run(i) => i,
            c => panic!("expected a run, got {c:?}"),
        }
    }

    #[test]
    fn options_before_a_name_are_defaults_for_every_job() {
        let inv = run(&[
            "--bs=64k",
            "--name=a",
            "--rw=write",
            "--name=b",
            "--size=1m",
        ]);
        assert_eq!(inv.jobs.len(), 2);
        let a = inv.jobs[0].resolve().unwrap();
        let b = inv.jobs[1].resolve().unwrap();
        assert_eq!((a.bs[0], a.rw), (65536, options::Workload::Write));
        assert_eq!((b.bs[0], b.size), (65536, Some(1 << 20)));
        assert_eq!(b.rw, options::Workload::Read);
        assert_eq!(inv.global_options.len(), 1);
        let shown = inv.jobs[0].shown_options();
        assert_eq!(shown.get("name").map(String::as_str), Some("a"));
        assert_eq!(shown.get("rw").map(String::as_str), Some("write"));
    }

    #[test]
    fn single_dash_and_separate_values_work_like_fio() {
        let inv = run(&["-name=x", "-bs", "8k", "--time_based", "--runtime", "1"]);
        let o = inv.jobs[0].resolve().unwrap();
        assert_eq!(o.bs[0], 8192);
        assert!(o.time_based);
    }

    #[test]
    fn run_options_are_not_job_options() {
        let inv = run(&[
            "--output-format=json+,terse",
            "--output",
            "/tmp/x",
            "--status-interval=1",
            "--eta=never",
            "--name=j",
        ]);
        assert!(inv.global.formats.json_plus && inv.global.formats.terse);
        assert!(!inv.global.formats.normal);
        assert_eq!(inv.global.output, Some(PathBuf::from("/tmp/x")));
        assert_eq!(inv.global.status_interval, Some(Duration::from_secs(1)));
        assert_eq!(inv.global.eta, Eta::Never);
        assert!(inv.global_options.is_empty());
    }

    #[test]
    fn options_without_a_name_are_one_job_named_after_its_file() {
        let inv = run(&["--filename=/data/big.dat", "--bs=1m"]);
        assert_eq!(inv.jobs.len(), 1);
        assert_eq!(inv.jobs[0].name, "big.dat");
        let o = inv.jobs[0].resolve().unwrap();
        assert_eq!(o.bs[0], 1 << 20);
        assert_eq!(inv.jobs[0].shown_options()["bs"], "1m");
        assert!(inv.global_options.is_empty());
    }

    #[test]
    fn name_global_restarts_the_defaults() {
        let inv = run(&["--name=a", "--name=global", "--bs=8k", "--name=b"]);
        assert_eq!(inv.jobs[0].resolve().unwrap().bs[0], 4096);
        assert_eq!(inv.jobs[1].resolve().unwrap().bs[0], 8192);
    }

    #[test]
    fn errors_name_the_argument() {
        for (v, want) in [
            (vec!["--frob=1"], "unknown option --frob"),
            (vec!["--name=a", "--size"], "--size needs a value"),
            (vec!["--output-format=xml"], "--output-format"),
            (vec!["--eta=sometimes"], "--eta"),
            (vec!["--bs=1q", "--name=a"], "bs"),
            (vec!["--output-format=json"], "no job"),
        ] {
            let e = parse(&args(&v)).unwrap_err();
            assert!(e.contains(want), "{v:?}: '{e}' should mention '{want}'");
        }
    }

    #[test]
    fn help_version_and_cmdhelp() {
        assert!(matches!(parse(&args(&["--help"])), Ok(Command::Help)));
        assert!(matches!(parse(&args(&["-h"])), Ok(Command::Help)));
        assert!(matches!(parse(&args(&["--version"])), Ok(Command::Version)));
        assert!(matches!(
            parse(&args(&["--cmdhelp=bs"])),
            Ok(Command::CmdHelp(Some(_)))
        ));
    }

    fn write_job(name: &str, text: &str) -> PathBuf {
        let base = std::env::var_os("HIPFILE_TEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let p = base.join(format!("cli-{name}-{}.fio", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn job_files_take_globals_above_them_and_command_line_defaults() {
        let p = write_job(
            "globals",
            "[global]\nsize=1m\n[a]\nrw=read\n[global]\nbs=8k\n[b]\nrw=write\n",
        );
        let inv = run(&["--bs=16k", p.to_str().unwrap()]);
        let a = inv.jobs[0].resolve().unwrap();
        let b = inv.jobs[1].resolve().unwrap();
        assert_eq!((a.bs[0], a.size), (16384, Some(1 << 20)));
        assert_eq!((b.bs[0], b.rw), (8192, options::Workload::Write));
        // A job file's job lists its own options only (not its name).
        let shown = inv.jobs[0].shown_options();
        assert_eq!(shown.len(), 1);
        assert_eq!(shown["rw"], "read");
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn each_job_file_after_the_first_is_a_stonewall() {
        let p1 = write_job("f1", "[a]\nsize=1m\n[b]\nsize=1m\n");
        let p2 = write_job("f2", "[c]\nsize=1m\n");
        let inv = run(&[p1.to_str().unwrap(), p2.to_str().unwrap()]);
        let walls: Vec<bool> = inv
            .jobs
            .iter()
            .map(|j| j.resolve().unwrap().stonewall)
            .collect();
        assert_eq!(walls, [false, false, true]);
        std::fs::remove_file(p1).unwrap();
        std::fs::remove_file(p2).unwrap();
    }

    #[test]
    fn sections_filter_the_jobs() {
        let p = write_job("sect", "[a]\nsize=1m\n[b]\nsize=1m\n");
        let inv = run(&["--section=b", p.to_str().unwrap()]);
        assert_eq!(inv.jobs.len(), 1);
        assert_eq!(inv.jobs[0].name, "b");
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn showcmd_round_trips_a_job_file() {
        let p = write_job(
            "showcmd",
            "[global]\nsize=1m\nbs=64k\n[a]\nrw=read\ntime_based\nruntime=1\n[global]\niodepth=4\n[b]\nrw=randread\nstonewall\n",
        );
        let inv = run(&[p.to_str().unwrap()]);
        let line = showcmd(&inv);
        let argv: Vec<String> = line.split(' ').skip(1).map(str::to_string).collect();
        let back = match parse(&argv).unwrap() {
            Command::Run(i) => i,
            _ => panic!(),
        };
        assert_eq!(back.jobs.len(), inv.jobs.len());
        for (x, y) in inv.jobs.iter().zip(&back.jobs) {
            assert_eq!(
                format!("{:?}", x.resolve().unwrap()),
                format!("{:?}", y.resolve().unwrap()),
                "{line}"
            );
        }
        std::fs::remove_file(p).unwrap();
    }
}
