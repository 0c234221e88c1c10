//! hipfile-check: what this machine offers hipfile-rs, and which path the
//! library will take here (NVIDIA's `gdscheck -p`, upstream's `ais-check`).
//!
//! Exit status: 0 when the library can start its engine here, 1 when it
//! cannot (io_uring refused, or the engine failed to start), 2 for bad options.

mod probes;

use clap::Parser;
use hipfile_engine::config::{Config, ReadMode};
use hipfile_engine::gpu::{self, Gpu, RuntimeChoice};
use probes::Finding;
use serde_json::{json, Map, Value};
use std::process::ExitCode;
use std::sync::Mutex;

#[derive(Parser, Debug)]
#[command(
    name = "hipfile-check",
    version,
    about = "What this machine offers hipfile-rs, and which path the library will take"
)]
struct Args {
    /// Write one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Check O_DIRECT in these directories (repeatable) instead of every
    /// mounted file system.
    #[arg(long = "path", value_name = "DIR")]
    paths: Vec<String>,
    /// Do not start an engine (no bounce memory, no GPU streams).
    #[arg(long)]
    no_start: bool,
}

/// Collects the library's warnings while the engine starts.
struct Collector(Mutex<Vec<String>>);

impl log::Log for Collector {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("{}: {}", r.level(), r.args()));
        }
    }
    fn flush(&self) {}
}

static COLLECTOR: Collector = Collector(Mutex::new(Vec::new()));

fn take_warnings() -> Vec<String> {
    std::mem::take(&mut *COLLECTOR.0.lock().unwrap_or_else(|p| p.into_inner()))
}

struct Section {
    title: &'static str,
    lines: Vec<(String, Finding)>,
}

fn mark(f: &Finding) -> &'static str {
    if f.ok {
        "ok  "
    } else {
        "--  "
    }
}

fn runtime(choice: RuntimeChoice) -> (Finding, Value) {
    let loaded = match choice {
        RuntimeChoice::Cuda => gpu::cuda::CudaGpu::load().map(|g| {
            let n = g.device_count();
            (n, "CUDA (libcuda)")
        }),
        _ => gpu::hip::HipGpu::load().map(|g| {
            let n = g.device_count();
            (n, "HIP (libamdhip64)")
        }),
    };
    match loaded {
        Ok((n, what)) => (
            Finding {
                ok: n > 0,
                text: format!("{what}: {n} device(s)"),
            },
            json!({"loaded": true, "devices": n}),
        ),
        Err(e) => (
            Finding {
                ok: false,
                text: e.to_string(),
            },
            json!({"loaded": false, "why": e.to_string()}),
        ),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The library's warnings during the checks are findings, not noise.
    let _ = log::set_logger(&COLLECTOR);
    log::set_max_level(log::LevelFilter::Warn);

    let cfg = Config::from_env();
    let config_warnings = take_warnings();
    let mut j = Map::new();
    let mut sections = Vec::new();

    // GPU runtimes.
    let (cuda, cuda_j) = runtime(RuntimeChoice::Cuda);
    let (hip, hip_j) = runtime(RuntimeChoice::Hip);
    j.insert("cuda".into(), cuda_j);
    j.insert("hip".into(), hip_j);
    sections.push(Section {
        title: "GPU runtimes",
        lines: vec![("CUDA".into(), cuda.clone()), ("HIP".into(), hip.clone())],
    });

    // Storage.
    let uring = probes::io_uring();
    let (memlock, memlock_j) = probes::memlock(cfg.bounce_bytes());
    let thp = probes::thp();
    j.insert("io_uring".into(), uring.json());
    j.insert("memlock".into(), memlock_j);
    j.insert("transparent_huge_pages".into(), thp.json());
    sections.push(Section {
        title: "Kernel",
        lines: vec![
            ("io_uring".into(), uring.clone()),
            ("memlock".into(), memlock.clone()),
            ("huge pages".into(), thp.clone()),
        ],
    });
    let mut fs_lines = Vec::new();
    let mut fs_j = Vec::new();
    let targets: Vec<(String, String, bool)> = if args.paths.is_empty() {
        probes::mounts()
            .into_iter()
            .map(|m| {
                (
                    m.point.clone(),
                    format!("{} ({})", m.fstype, m.source),
                    m.read_only,
                )
            })
            .collect()
    } else {
        args.paths
            .iter()
            .map(|p| (p.clone(), String::new(), false))
            .collect()
    };
    for (dir, what, ro) in targets {
        let f = probes::o_direct(&dir, ro);
        fs_j.push(json!({"path": dir, "filesystem": what, "o_direct": f.json()}));
        let label = if what.is_empty() {
            dir
        } else {
            format!("{dir}  {what}")
        };
        fs_lines.push((label, f));
    }
    j.insert("o_direct".into(), Value::Array(fs_j));
    sections.push(Section {
        title: "O_DIRECT per file system",
        lines: fs_lines,
    });

    // Vendor paths.
    let (gds, gds_j) = probes::gds();
    let (kfd, kfd_j) = probes::kfd();
    j.insert("gds".into(), gds_j);
    j.insert("kfd".into(), kfd_j);
    sections.push(Section {
        title: "Vendor direct paths",
        lines: vec![("GDS".into(), gds), ("KFD".into(), kfd)],
    });

    // The path the library takes here.
    let gpu_choice = match cfg.gpu_runtime {
        RuntimeChoice::None => "none (HIPFILE_GPU_RUNTIME=none): host memory only".to_string(),
        RuntimeChoice::Cuda if cuda.ok => "CUDA".into(),
        RuntimeChoice::Hip if hip.ok => "HIP".into(),
        RuntimeChoice::Auto if cuda.ok => "CUDA".into(),
        RuntimeChoice::Auto if hip.ok => "HIP".into(),
        _ => "none found: host memory only; device buffers fail with hipFileDeviceNotFound".into(),
    };
    let read_mode = match cfg.read_mode {
        ReadMode::Auto => "page cache where the data is resident, O_DIRECT where it is not",
        ReadMode::Direct => "always O_DIRECT (HIPFILE_READ_MODE=direct)",
        ReadMode::Buffered => "always through the page cache (HIPFILE_READ_MODE=buffered)",
    };
    let mut path = vec![
        ("GPU runtime".to_string(), gpu_choice.clone()),
        (
            "storage".into(),
            if uring.ok {
                format!(
                    "io_uring, {} workers ({} for cold reads), {} KiB chunks",
                    cfg.io_threads,
                    cfg.cold_io_threads,
                    cfg.chunk_bytes >> 10
                )
            } else {
                "none: io_uring is refused, so the engine cannot start".into()
            },
        ),
        ("reads".into(), read_mode.into()),
        (
            "bounce memory".into(),
            format!(
                "{} MiB, {}registered with io_uring, {}pinned for the GPU",
                cfg.bounce_bytes() >> 20,
                if cfg.register_buffers && memlock.ok {
                    ""
                } else {
                    "not "
                },
                if cfg.pin_buffers && (cuda.ok || hip.ok) {
                    ""
                } else {
                    "not "
                },
            ),
        ),
        (
            "writes".into(),
            if cfg.write_sync {
                "durable before return (O_DIRECT where aligned, one fdatasync per call)".into()
            } else {
                "through the page cache (HIPFILE_WRITE_SYNC=false)".into()
            },
        ),
        (
            "statistics".into(),
            format!("level {} (ais-stats -p PID reads them)", cfg.stats_level),
        ),
        (
            "configuration file".into(),
            hipfile_engine::config_file::process_file().map_or(
                "none (HIPFILE_CONFIG, CUFILE_ENV_PATH_JSON unset)".into(),
                |f| f.path.clone(),
            ),
        ),
    ];
    let mut started_ok = uring.ok;
    let mut start_j = Value::Null;
    if !args.no_start && uring.ok {
        let _ = take_warnings();
        let r = hipfile_engine::Engine::new(cfg.clone());
        let warnings = take_warnings();
        let (ok, text) = match &r {
            Ok(e) => (
                true,
                format!(
                    "started with {} workers on {}",
                    e.config().io_threads,
                    e.gpu().name()
                ),
            ),
            Err(e) => (false, format!("failed: {e:?}")),
        };
        started_ok = ok;
        start_j = json!({"ok": ok, "detail": text, "warnings": warnings});
        path.push(("engine".into(), text));
        for w in warnings {
            path.push(("  warning".into(), w));
        }
        drop(r);
    }
    for w in &config_warnings {
        path.push(("configuration".into(), w.clone()));
    }
    j.insert("engine_start".into(), start_j);
    j.insert("config_warnings".into(), json!(config_warnings));
    j.insert(
        "library_path".into(),
        Value::Object(path.iter().map(|(k, v)| (k.clone(), json!(v))).collect()),
    );
    j.insert("can_run".into(), json!(started_ok));

    if args.json {
        println!("{}", Value::Object(j));
    } else {
        for s in &sections {
            println!("{}", s.title);
            for (label, f) in &s.lines {
                println!("  {}{label}: {}", mark(f), f.text);
            }
            println!();
        }
        println!("Path the library takes here");
        for (k, v) in &path {
            println!("  {k}: {v}");
        }
    }
    if started_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
