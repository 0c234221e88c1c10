//! The live view (`-w SECONDS`): what happened in each interval, redrawn in
//! place on a terminal (like `top`), appended frame after frame otherwise.

use crate::report::{bytes, duration_ns};
use crate::Target;
use hipfile_engine::stats::layout::{engine, Api, APIS, API_NAMES, DIRS, DIR_NAMES};
use hipfile_engine::stats::snapshot::Snapshot;
use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Show `targets[0]` every `every` until `exited()` says the process has
/// gone, or `count` frames have been shown.
pub fn run(
    targets: &[&Target],
    every: Duration,
    count: Option<u64>,
    as_json: bool,
    out: &mut impl Write,
    mut exited: impl FnMut() -> bool,
) -> std::io::Result<()> {
    let Some(t) = targets.first() else {
        return Ok(());
    };
    let in_place = !as_json && std::io::stdout().is_terminal();
    let mut prev = t.map.snapshot();
    let mut prev_at = Instant::now();
    let mut frame = 0u64;
    loop {
        let due = prev_at + every;
        let mut gone = false;
        while Instant::now() < due {
            if exited() {
                gone = true;
                break;
            }
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(50)));
        }
        let now = Instant::now();
        let cur = t.map.snapshot();
        let d = cur.since(&prev);
        let secs = (now - prev_at).as_secs_f64();
        frame += 1;
        let f = Frame::new(&d, &cur, secs);
        if as_json {
            writeln!(out, "{}", f.json(t, frame))?;
        } else {
            if in_place {
                // Cursor home, clear the screen.
                write!(out, "\x1b[H\x1b[2J")?;
            } else if frame > 1 {
                writeln!(out)?;
            }
            write!(out, "{}", f.text(t, frame, secs))?;
        }
        out.flush()?;
        prev = cur;
        prev_at = now;
        if gone || count.is_some_and(|c| frame >= c) {
            return Ok(());
        }
    }
}

/// One direction over one interval.
struct Rate {
    bytes_per_s: f64,
    iops: f64,
    errors: u64,
    pcts: [Option<u64>; 4],
}

const PCTS: [f64; 4] = [50.0, 90.0, 99.0, 99.9];

struct Frame {
    dirs: [Rate; DIRS],
    /// Bytes per entry point in the interval.
    api_bytes: [u64; APIS],
    /// Worker read bytes: page cache, O_DIRECT, buffered; and inline reads.
    read_paths: [u64; 4],
    /// Mean chunks in each stage over the interval (Little's law: the time
    /// chunks spent there divided by the interval).
    in_stage: [f64; 4],
    slots: u64,
    totals: [(u64, u64); DIRS],
    errors: u64,
    /// The storage backend's name, once an engine has started.
    storage: Option<&'static str>,
}

impl Frame {
    fn new(d: &Snapshot, cur: &Snapshot, secs: f64) -> Frame {
        let secs = secs.max(1e-9);
        let dirs = std::array::from_fn(|k| {
            let c = d.dir_total(k);
            Rate {
                bytes_per_s: c.bytes as f64 / secs,
                iops: c.ops as f64 / secs,
                errors: c.errors,
                pcts: PCTS.map(|p| c.percentile_ns(p)),
            }
        });
        let api_bytes = std::array::from_fn(|a| (0..DIRS).map(|k| d.class[a][k].bytes).sum());
        let e = &d.engine;
        let read_paths = [
            e[engine::CACHE_HIT_BYTES],
            e[engine::DIRECT_READ_BYTES],
            e[engine::BUFFERED_READ_BYTES],
            d.class[Api::Inline as usize][0].bytes,
        ];
        let in_stage = std::array::from_fn(|i| e[engine::STAGE_NS + i] as f64 / (secs * 1e9));
        let totals = std::array::from_fn(|k| {
            let c = cur.dir_total(k);
            (c.bytes, c.ops)
        });
        let errors = (0..DIRS).map(|k| cur.dir_total(k).errors).sum();
        Frame {
            dirs,
            api_bytes,
            read_paths,
            in_stage,
            slots: cur.engine[engine::BOUNCE_SLOTS],
            totals,
            errors,
            storage: crate::report::storage(cur).map(|c| c.backend.name()),
        }
    }

    fn text(&self, t: &Target, frame: u64, secs: f64) -> String {
        let mut o = String::new();
        let now = hipfile_engine::log::utc_timestamp(std::time::SystemTime::now());
        o.push_str(&format!(
            "ais-stats  pid {} ({})  storage {}  every {secs:.2} s  {}  frame {frame}\n\n",
            t.pid,
            t.comm,
            self.storage.unwrap_or("-"),
            &now[11..19]
        ));
        o.push_str(&format!(
            "        {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}\n",
            "GB/s", "IOPS", "p50", "p90", "p99", "p99.9", "errors"
        ));
        for (k, r) in self.dirs.iter().enumerate() {
            let p = |i: usize| r.pcts[i].map_or_else(|| "-".to_string(), duration_ns);
            o.push_str(&format!(
                "{:<7} {:>9.3} {:>10.1} {:>10} {:>10} {:>10} {:>10} {:>7}\n",
                DIR_NAMES[k],
                r.bytes_per_s / 1e9,
                r.iops,
                p(0),
                p(1),
                p(2),
                p(3),
                r.errors
            ));
        }
        let share = |v: u64, all: u64| {
            if all == 0 {
                "-".to_string()
            } else {
                format!("{:.1} %", v as f64 * 100.0 / all as f64)
            }
        };
        let api_all: u64 = self.api_bytes.iter().sum();
        let mix: Vec<String> = (0..APIS)
            .map(|a| format!("{} {}", API_NAMES[a], share(self.api_bytes[a], api_all)))
            .collect();
        o.push_str(&format!(
            "\ncalls   {}   (share of bytes)\n",
            mix.join("  ")
        ));
        let rp_all: u64 = self.read_paths.iter().sum();
        let names = ["page cache", "O_DIRECT", "buffered", "inline"];
        let paths: Vec<String> = (0..4)
            .map(|i| format!("{} {}", names[i], share(self.read_paths[i], rp_all)))
            .collect();
        o.push_str(&format!(
            "reads   {}   (share of bytes)\n",
            paths.join("  ")
        ));
        o.push_str(&format!(
            "chunks  queued {:.1}  waiting for a slot {:.1}  in storage {:.1}  in GPU copy {:.1}   \
             (mean number; {} bounce slots)\n",
            self.in_stage[0], self.in_stage[1], self.in_stage[2], self.in_stage[3], self.slots
        ));
        o.push_str(&format!(
            "so far  read {} in {} calls, wrote {} in {} calls, {} errors\n",
            bytes(self.totals[0].0),
            self.totals[0].1,
            bytes(self.totals[1].0),
            self.totals[1].1,
            self.errors
        ));
        o
    }

    fn json(&self, t: &Target, frame: u64) -> Value {
        let dir = |r: &Rate| {
            json!({
                "bytes_per_s": r.bytes_per_s,
                "iops": r.iops,
                "errors": r.errors,
                "latency_ns": {"p50": r.pcts[0], "p90": r.pcts[1], "p99": r.pcts[2], "p99.9": r.pcts[3]},
            })
        };
        let apis: serde_json::Map<String, Value> = (0..APIS)
            .map(|a| (API_NAMES[a].to_string(), json!(self.api_bytes[a])))
            .collect();
        json!({
            "pid": t.pid,
            "frame": frame,
            "read": dir(&self.dirs[0]),
            "write": dir(&self.dirs[1]),
            "bytes_by_call": apis,
            "read_bytes_by_path": {
                "page_cache": self.read_paths[0],
                "direct": self.read_paths[1],
                "buffered": self.read_paths[2],
                "inline": self.read_paths[3],
            },
            "chunks_in_stage": {
                "queue": self.in_stage[0],
                "slot": self.in_stage[1],
                "storage": self.in_stage[2],
                "gpu": self.in_stage[3],
            },
            "bounce_slots": self.slots,
            "storage_backend": self.storage,
        })
    }
}
