//! ais-stats: the statistics of a process that uses hipfile-rs, read from
//! outside it without stopping it.
//!
//! `ais-stats PROGRAM [ARGS...]` runs PROGRAM and reports when it exits;
//! `ais-stats -p PID` attaches to a running process and reports when it
//! exits, or at once with `-i`. `-w SECONDS` shows a live view refreshed in
//! place (like `top`); `--json` writes JSON for scripts (one object per
//! line). Upstream hipFile's `ais-stats` has the same name and the
//! `PROGRAM`, `-p` and `-i` forms.
//!
//! Exit status: PROGRAM's own status when it was run and reported on; 0
//! after `-p`; 1 when no statistics could be had (the message says why);
//! 2 for bad options.

mod live;
mod report;

use clap::Parser;
use hipfile_engine::stats::client::{self, Attached, ExitWatch, Handoff, Mapped};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "ais-stats",
    version,
    about = "Statistics of a process that uses hipfile-rs (libhipfile), read from outside it",
    after_help = "Examples:\n  ais-stats python train.py        run it, report at its exit\n  \
                  ais-stats -p 4242 -i             report process 4242 now\n  \
                  ais-stats -p 4242 -w 1           live view, refreshed every second\n  \
                  ais-stats --json -p 4242 -i      the same report as JSON\n\n\
                  The process must run with HIPFILE_STATS_LEVEL >= 1 (the default)."
)]
struct Args {
    /// Process to collect statistics from.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        allow_negative_numbers = true
    )]
    pid: Option<i32>,
    /// Report immediately instead of waiting for the process to exit.
    #[arg(
        short = 'i',
        long = "immediate",
        requires = "pid",
        conflicts_with = "watch"
    )]
    immediate: bool,
    /// Live view: refresh every SECONDS (bandwidth, IOPS, latency
    /// percentiles, path mix) until the process exits.
    #[arg(short = 'w', long = "watch", value_name = "SECONDS", value_parser = parse_interval)]
    watch: Option<f64>,
    /// With -w: stop after COUNT refreshes.
    #[arg(short = 'n', long = "count", value_name = "COUNT", requires = "watch")]
    count: Option<u64>,
    /// Write JSON (one object per line) instead of text.
    #[arg(long)]
    json: bool,
    /// Program to run, with its arguments.
    #[arg(
        value_name = "PROGRAM",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        conflicts_with = "pid"
    )]
    program: Vec<OsString>,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.01 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds of at least 0.01")),
    }
}

/// A process being reported on.
pub struct Target {
    pub pid: u32,
    pub comm: String,
    pub map: Mapped,
    /// Keeps the engine figures refreshed while open.
    _control: Option<std::os::unix::net::UnixStream>,
}

impl Target {
    fn new(map: Mapped, control: Option<std::os::unix::net::UnixStream>) -> Target {
        Target {
            pid: map.pid(),
            comm: map.region().comm(),
            map,
            _control: control,
        }
    }

    fn attached(a: Attached) -> Target {
        Target::new(a.map, a.control)
    }
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ais-stats: {msg}");
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Our own warnings (none expected) go through the library's logger.
    hipfile_engine::log::install_default();
    if args.pid.is_none() && args.program.is_empty() {
        eprintln!("ais-stats: give a PROGRAM to run or -p PID (see --help)");
        return ExitCode::from(2);
    }
    let out = std::io::stdout();
    let result = match args.pid {
        Some(pid) => run_pid(&args, pid, &mut out.lock()),
        None => run_program(&args, &mut out.lock()),
    };
    match result {
        Ok(code) => code,
        Err(msg) => fail(msg),
    }
}

fn run_pid(args: &Args, pid: i32, out: &mut impl Write) -> Result<ExitCode, String> {
    let attached = if args.immediate {
        client::attach(pid)
    } else {
        client::attach_waiting(pid, None, |why| {
            eprintln!("ais-stats: waiting for process {pid} to start hipfile statistics ({why})")
        })
    };
    let target = Target::attached(attached.map_err(|e| e.to_string())?);
    let watch = ExitWatch::new(pid);
    if let Some(secs) = args.watch {
        live::run(
            &[&target],
            Duration::from_secs_f64(secs),
            args.count,
            args.json,
            out,
            || watch.wait(Some(Duration::ZERO)),
        )
        .map_err(|e| e.to_string())?;
        if args.count.is_some() {
            return Ok(ExitCode::SUCCESS);
        }
    } else if !args.immediate {
        watch.wait(None);
    }
    report::write(&[&target], args.json, out).map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

fn run_program(args: &Args, out: &mut impl Write) -> Result<ExitCode, String> {
    let mut handoff = Handoff::new().map_err(|e| format!("socketpair: {e}"))?;
    let prog = &args.program[0];
    let mut child = std::process::Command::new(prog)
        .args(&args.program[1..])
        .env(
            hipfile_engine::stats::server::HANDOFF_ENV,
            handoff.env_value(),
        )
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", prog.to_string_lossy()))?;
    handoff.started();
    // Like time(1): the terminal's ^C and ^\ are for the program; we report
    // once it has gone.
    // SAFETY: setting the disposition of two signals to "ignore".
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let mut targets: Vec<Target> = Vec::new();
    let mut status = None;
    if let Some(secs) = args.watch {
        // The first region arrives when the program makes its first hipFile call.
        while status.is_none() && targets.is_empty() {
            if let Some(m) = handoff.recv(Duration::from_millis(100)) {
                targets.push(connect_control(m));
            }
            status = child.try_wait().map_err(|e| e.to_string())?;
        }
        if !targets.is_empty() {
            let refs: Vec<&Target> = targets.iter().collect();
            live::run(
                &refs,
                Duration::from_secs_f64(secs),
                args.count,
                args.json,
                out,
                || matches!(child.try_wait(), Ok(Some(_))),
            )
            .map_err(|e| e.to_string())?;
        }
    }
    let status = match status {
        Some(s) => s,
        None => child.wait().map_err(|e| e.to_string())?,
    };
    while let Some(m) = handoff.try_recv() {
        targets.push(Target::new(m, None));
    }
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    if targets.is_empty() {
        return Err(format!(
            "{} exited ({}) without hipfile statistics: it made no hipFile call, or ran with \
             HIPFILE_STATS_LEVEL=0",
            prog.to_string_lossy(),
            status
        ));
    }
    let refs: Vec<&Target> = targets.iter().collect();
    report::write(&refs, args.json, out).map_err(|e| e.to_string())?;
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// A region the program sent: also connect to its socket, so the engine
/// figures stay fresh during the live view.
fn connect_control(m: Mapped) -> Target {
    let pid = m.pid() as i32;
    let deadline = Some(Instant::now() + Duration::from_secs(1));
    match client::attach_waiting(pid, deadline, |_| {}) {
        Ok(a) => Target::new(m, a.control),
        Err(_) => Target::new(m, None),
    }
}
