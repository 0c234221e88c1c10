//! The report: what a process did over its life, as text or JSON.

use crate::Target;
use hipfile_engine::stats::layout::{
    self, engine, Event, API_NAMES, DIR_NAMES, EVENT_NAMES, LAT_BUCKETS, SIZE_BUCKETS, TARGETS,
};
use hipfile_engine::stats::snapshot::{ClassTotals, Snapshot};
use serde_json::{json, Map, Value};
use std::io::Write;

/// Report every target: text sections, or one JSON object per line.
pub fn write(targets: &[&Target], as_json: bool, out: &mut impl Write) -> std::io::Result<()> {
    for (i, t) in targets.iter().enumerate() {
        let s = t.map.snapshot();
        if as_json {
            writeln!(out, "{}", to_json(t, &s))?;
        } else {
            if i > 0 {
                writeln!(out)?;
            }
            write!(out, "{}", to_text(t, &s))?;
        }
    }
    out.flush()
}

pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn duration_ns(ns: u64) -> String {
    let v = ns as f64;
    if v < 1e3 {
        format!("{ns} ns")
    } else if v < 1e6 {
        format!("{:.1} µs", v / 1e3)
    } else if v < 1e9 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

fn opt_ns(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), duration_ns)
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1} %", part as f64 * 100.0 / whole as f64)
    }
}

fn class_row(out: &mut String, label: &str, c: &ClassTotals) {
    let rate = if c.lat_ns > 0 {
        format!("{:.2}", c.bytes as f64 / c.lat_ns as f64)
    } else {
        "-".into()
    };
    out.push_str(&format!(
        "  {label:<13} {:>9} {:>11} {:>7} {:>10} {:>10} {:>10} {:>10} {:>9}\n",
        c.ops,
        bytes(c.bytes),
        c.errors,
        opt_ns(c.mean_lat_ns()),
        opt_ns(c.percentile_ns(50.0)),
        opt_ns(c.percentile_ns(99.0)),
        opt_ns((c.ops > 0).then_some(c.lat_max_ns)),
        rate
    ));
}

/// The storage backend serving the process, and why; None before an engine
/// started (or from a library that does not record it).
pub fn storage(s: &Snapshot) -> Option<hipfile_engine::storage::Choice> {
    hipfile_engine::storage::described(s.storage)
}

fn event(s: &Snapshot, e: Event) -> u64 {
    s.event(e)
}

pub fn to_text(t: &Target, s: &Snapshot) -> String {
    let mut o = String::new();
    let name = if t.comm.is_empty() {
        String::new()
    } else {
        format!(" ({})", t.comm)
    };
    o.push_str(&format!(
        "hipfile statistics of process {}{name}, level {}\n",
        s.pid, s.level
    ));
    let started = hipfile_engine::log::utc_timestamp(
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(s.start_unix_ns),
    );
    o.push_str(&format!(
        "  started {started}; last call finished {} after that\n",
        duration_ns(s.last_io_ns)
    ));
    o.push_str(&format!(
        "  storage backend: {}\n\n",
        storage(s).map_or_else(
            || "not recorded (no engine has started)".to_string(),
            |c| c.why
        )
    ));
    o.push_str(&format!(
        "  {:<13} {:>9} {:>11} {:>7} {:>10} {:>10} {:>10} {:>10} {:>9}\n",
        "calls", "ok", "bytes", "errors", "mean", "p50", "p99", "max", "GB/s/call"
    ));
    for (d, dir) in DIR_NAMES.iter().enumerate() {
        let total = s.dir_total(d);
        if total.ops + total.errors == 0 {
            class_row(&mut o, &format!("{dir} -"), &total);
            continue;
        }
        for (a, api) in API_NAMES.iter().enumerate() {
            let c = &s.class[a][d];
            if c.ops + c.errors > 0 {
                class_row(&mut o, &format!("{dir} {api}"), c);
            }
        }
        class_row(&mut o, &format!("{dir} total"), &total);
    }
    let rej_r = event(s, Event::ReadRejected);
    let rej_w = event(s, Event::WriteRejected);
    if rej_r + rej_w > 0 {
        o.push_str(&format!(
            "  refused before any I/O (bad handle, buffer, offset or size): {rej_r} reads, \
             {rej_w} writes\n"
        ));
    }

    let e = &s.engine;
    let reads =
        e[engine::CACHE_HIT_BYTES] + e[engine::DIRECT_READ_BYTES] + e[engine::BUFFERED_READ_BYTES];
    let writes = e[engine::DIRECT_WRITE_BYTES] + e[engine::BUFFERED_WRITE_BYTES];
    let inline_read = s.class[layout::Api::Inline as usize][0].bytes;
    o.push_str("\nstorage paths (bytes the workers moved; inline calls apart)\n");
    o.push_str(&format!(
        "  reads   page cache {} ({}), O_DIRECT {} ({}), buffered {} ({}); inline {}\n",
        bytes(e[engine::CACHE_HIT_BYTES]),
        pct(e[engine::CACHE_HIT_BYTES], reads),
        bytes(e[engine::DIRECT_READ_BYTES]),
        pct(e[engine::DIRECT_READ_BYTES], reads),
        bytes(e[engine::BUFFERED_READ_BYTES]),
        pct(e[engine::BUFFERED_READ_BYTES], reads),
        bytes(inline_read),
    ));
    o.push_str(&format!(
        "  writes  O_DIRECT {} ({}), page cache {} ({})\n",
        bytes(e[engine::DIRECT_WRITE_BYTES]),
        pct(e[engine::DIRECT_WRITE_BYTES], writes),
        bytes(e[engine::BUFFERED_WRITE_BYTES]),
        pct(e[engine::BUFFERED_WRITE_BYTES], writes),
    ));
    o.push_str(&format!(
        "  page-cache misses {}, retried ops {}\n",
        e[engine::CACHE_MISSES],
        e[engine::RETRIES]
    ));
    o.push_str(&format!(
        "\nengines (running now: {}, with {} workers, {} bounce slots, {})\n",
        e[engine::ENGINES],
        e[engine::WORKERS],
        e[engine::BOUNCE_SLOTS],
        bytes(e[engine::BOUNCE_BYTES])
    ));
    let chunks = e[engine::CHUNKS];
    let per_chunk = |ns: u64| duration_ns(ns.checked_div(chunks).unwrap_or(0));
    o.push_str(&format!(
        "  chunks {} ({} through a bounce slot); GPU copies {} in {} batches, {} events\n",
        chunks,
        e[engine::BOUNCED_CHUNKS],
        e[engine::GPU_COPIES],
        e[engine::GPU_COPY_BATCHES],
        e[engine::GPU_EVENTS]
    ));
    if chunks > 0 {
        let stage = |i: usize| {
            format!(
                "{} {}/{}",
                ["queue", "slot", "storage", "GPU copy"][i],
                per_chunk(e[engine::STAGE_NS + i]),
                duration_ns(e[engine::STAGE_MAX_NS + i])
            )
        };
        o.push_str(&format!(
            "  per chunk (mean/longest): {}, {}, {}, {}; whole {}/{}\n",
            stage(0),
            stage(1),
            stage(2),
            stage(3),
            per_chunk(e[engine::CHUNK_NS]),
            duration_ns(e[engine::CHUNK_MAX_NS])
        ));
    }

    o.push_str(&format!(
        "\nregistrations  files {} ({} failed, {} deregistered); buffers {} ({} failed, {} \
         deregistered, {} registered in all)\n",
        event(s, Event::HandleRegister),
        event(s, Event::HandleRegisterError),
        event(s, Event::HandleDeregister),
        event(s, Event::BufRegister),
        event(s, Event::BufRegisterError),
        event(s, Event::BufDeregister),
        bytes(event(s, Event::BufRegisterBytes)),
    ));
    o.push_str(&format!(
        "driver         {} opens, {} closes, {} engines started\n",
        event(s, Event::DriverOpen),
        event(s, Event::DriverClose),
        event(s, Event::EngineStart),
    ));
    o.push_str(&format!(
        "batches        {} set up, {} submits ({} refused), {} cancels, {} destroyed\n",
        event(s, Event::BatchSetup),
        event(s, Event::BatchSubmit),
        event(s, Event::BatchSubmitError),
        event(s, Event::BatchCancel),
        event(s, Event::BatchDestroy),
    ));

    if s.level >= 2 {
        let r = s.dir_total(0);
        let w = s.dir_total(1);
        o.push_str("\nrequest sizes (calls)\n  size            read      write\n");
        for i in 0..SIZE_BUCKETS {
            if r.size_hist[i] + w.size_hist[i] == 0 {
                continue;
            }
            o.push_str(&format!(
                "  {:<12} {:>7} {:>10}\n",
                size_label(i),
                r.size_hist[i],
                w.size_hist[i]
            ));
        }
    }
    if s.level >= 3 {
        o.push_str("\nper target (level 3)\n");
        o.push_str("  (latency percentiles per target are within a factor of two)\n");
        o.push_str(&format!(
            "  {:<8} {:<5} {:>9} {:>11} {:>7} {:>10} {:>10} {:>10}\n",
            "target", "", "ok", "bytes", "errors", "mean", "p50", "p99"
        ));
        for k in 0..TARGETS {
            for (d, dir) in DIR_NAMES.iter().enumerate() {
                let t = &s.target[k][d];
                if t.ops + t.errors == 0 {
                    continue;
                }
                o.push_str(&format!(
                    "  {:<8} {:<5} {:>9} {:>11} {:>7} {:>10} {:>10} {:>10}\n",
                    target_label(k),
                    dir,
                    t.ops,
                    bytes(t.bytes),
                    t.errors,
                    opt_ns(t.lat_ns.checked_div(t.ops)),
                    opt_ns(t.percentile_ns(50.0)),
                    opt_ns(t.percentile_ns(99.0)),
                ));
            }
        }
    }
    o
}

pub fn size_label(i: usize) -> String {
    let lo = layout::size_bucket_low(i) >> 10;
    if i + 1 == SIZE_BUCKETS {
        format!("{lo}K-")
    } else {
        format!("{lo}-{}K", layout::size_bucket_low(i + 1) >> 10)
    }
}

pub fn target_label(k: usize) -> String {
    if k == 0 {
        "host".into()
    } else if k + 1 == TARGETS {
        format!("gpu {}+", k - 1)
    } else {
        format!("gpu {}", k - 1)
    }
}

fn class_json(c: &ClassTotals, level: u32) -> Value {
    let mut m = Map::new();
    m.insert("ops".into(), json!(c.ops));
    m.insert("bytes".into(), json!(c.bytes));
    m.insert("errors".into(), json!(c.errors));
    m.insert(
        "latency_ns".into(),
        json!({
            "sum": c.lat_ns,
            "mean": c.mean_lat_ns(),
            "max": (c.ops > 0).then_some(c.lat_max_ns),
            "p50": c.percentile_ns(50.0),
            "p90": c.percentile_ns(90.0),
            "p99": c.percentile_ns(99.0),
            "p99.9": c.percentile_ns(99.9),
        }),
    );
    // Non-empty latency buckets: [low_ns, high_ns or null, calls].
    let hist: Vec<Value> = (0..LAT_BUCKETS)
        .filter(|&i| c.lat_hist[i] > 0)
        .map(|i| {
            let (lo, hi) = layout::lat_bucket_range(i);
            json!([lo, (hi != u64::MAX).then_some(hi), c.lat_hist[i]])
        })
        .collect();
    m.insert("latency_histogram".into(), Value::Array(hist));
    if level >= 2 {
        let sizes: Vec<Value> = (0..SIZE_BUCKETS)
            .filter(|&i| c.size_hist[i] > 0)
            .map(|i| {
                let hi = (i + 1 < SIZE_BUCKETS).then(|| layout::size_bucket_low(i + 1));
                json!([layout::size_bucket_low(i), hi, c.size_hist[i]])
            })
            .collect();
        m.insert("size_histogram".into(), Value::Array(sizes));
    }
    Value::Object(m)
}

pub fn to_json(t: &Target, s: &Snapshot) -> Value {
    let mut calls = Map::new();
    for (d, dir) in DIR_NAMES.iter().enumerate() {
        let mut per = Map::new();
        for (a, api) in API_NAMES.iter().enumerate() {
            per.insert((*api).into(), class_json(&s.class[a][d], s.level));
        }
        per.insert("total".into(), class_json(&s.dir_total(d), s.level));
        calls.insert((*dir).into(), Value::Object(per));
    }
    let engine: Map<String, Value> = engine::NAMES
        .iter()
        .zip(s.engine.iter())
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    let events: Map<String, Value> = EVENT_NAMES
        .iter()
        .zip(s.events.iter())
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    let mut root = json!({
        "pid": s.pid,
        "command": t.comm,
        "level": s.level,
        "layout_version": layout::VERSION,
        "start_unix_ns": s.start_unix_ns,
        "last_io_ns": s.last_io_ns,
        "engine_published_ns": s.published_ns,
        "storage_backend": storage(s).map(|c| c.backend.name()),
        "storage_backend_why": storage(s).map(|c| c.why),
        "calls": calls,
        "engine": engine,
        "events": events,
    });
    if s.level >= 3 {
        let targets: Vec<Value> = (0..TARGETS)
            .filter(|&k| s.target[k].iter().any(|t| t.ops + t.errors > 0))
            .map(|k| {
                let dir = |d: usize| {
                    let t = &s.target[k][d];
                    let hist: Vec<Value> = (0..layout::TARGET_LAT_BUCKETS)
                        .filter(|&i| t.lat_hist[i] > 0)
                        .map(|i| {
                            let (lo, hi) = layout::target_lat_bucket_range(i);
                            json!([lo, (hi != u64::MAX).then_some(hi), t.lat_hist[i]])
                        })
                        .collect();
                    json!({
                        "ops": t.ops,
                        "bytes": t.bytes,
                        "errors": t.errors,
                        "latency_ns": {
                            "sum": t.lat_ns,
                            "mean": t.lat_ns.checked_div(t.ops),
                            "p50": t.percentile_ns(50.0),
                            "p99": t.percentile_ns(99.0),
                        },
                        "latency_histogram": hist,
                    })
                };
                json!({"target": target_label(k), "read": dir(0), "write": dir(1)})
            })
            .collect();
        root["targets"] = Value::Array(targets);
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn durations_pick_their_unit() {
        assert_eq!(duration_ns(999), "999 ns");
        assert_eq!(duration_ns(12_300), "12.3 µs");
        assert_eq!(duration_ns(4_560_000), "4.56 ms");
        assert_eq!(duration_ns(2_000_000_000), "2.00 s");
    }

    #[test]
    fn size_labels_follow_the_buckets() {
        assert_eq!(size_label(0), "0-4K");
        assert_eq!(size_label(1), "4-8K");
        assert_eq!(size_label(9), "1024-2048K");
        assert_eq!(size_label(15), "65536K-");
        assert_eq!(target_label(0), "host");
        assert_eq!(target_label(1), "gpu 0");
        assert_eq!(target_label(16), "gpu 15+");
    }
}
