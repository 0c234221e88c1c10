//! fio 3.33's JSON report as types (`--output-format=json` and `json+`),
//! plus our `hipfile` objects. Field order and key spelling follow fio, so
//! tools written for fio's JSON read ours; the tests deserialize fio's own
//! output into these types, unknown keys refused, to keep them complete.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// String-keyed objects in fio's order.
pub type Map<T> = IndexMap<String, T>;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Report {
    #[serde(rename = "fio version")]
    pub fio_version: String,
    pub timestamp: u64,
    pub timestamp_ms: u64,
    pub time: String,
    #[serde(
        rename = "global options",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub global_options: Option<Map<String>>,
    pub jobs: Vec<Job>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub disk_util: Option<Vec<DiskUtil>>,
    /// Ours: the run as a whole (engine, memory, GB/s, cache state).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hipfile: Option<Extras>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Job {
    pub jobname: String,
    pub groupid: u64,
    pub error: i64,
    pub eta: u64,
    pub elapsed: u64,
    #[serde(
        rename = "job options",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub job_options: Option<Map<String>>,
    pub read: Dir,
    pub write: Dir,
    pub trim: Dir,
    pub sync: Sync,
    pub job_runtime: u64,
    pub usr_cpu: f64,
    pub sys_cpu: f64,
    pub ctx: u64,
    pub majf: u64,
    pub minf: u64,
    pub iodepth_level: Map<f64>,
    pub iodepth_submit: Map<f64>,
    pub iodepth_complete: Map<f64>,
    pub latency_ns: Map<f64>,
    pub latency_us: Map<f64>,
    pub latency_ms: Map<f64>,
    pub latency_depth: u64,
    pub latency_target: u64,
    pub latency_percentile: f64,
    pub latency_window: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub desc: Option<String>,
    /// Ours: this job's engine, memory and GB/s.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hipfile: Option<Extras>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Dir {
    pub io_bytes: u64,
    pub io_kbytes: u64,
    pub bw_bytes: u64,
    pub bw: u64,
    pub iops: f64,
    pub runtime: u64,
    pub total_ios: u64,
    pub short_ios: u64,
    pub drop_ios: u64,
    pub slat_ns: Lat,
    pub clat_ns: Lat,
    pub lat_ns: Lat,
    pub bw_min: u64,
    pub bw_max: u64,
    pub bw_agg: f64,
    pub bw_mean: f64,
    pub bw_dev: f64,
    pub bw_samples: u64,
    pub iops_min: u64,
    pub iops_max: u64,
    pub iops_mean: f64,
    pub iops_stddev: f64,
    pub iops_samples: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Lat {
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    pub stddev: f64,
    #[serde(rename = "N")]
    pub n: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub percentile: Option<Map<u64>>,
    /// json+ only: the histogram's non-empty buckets, value (ns) -> count.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bins: Option<Map<u64>>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Sync {
    pub total_ios: u64,
    pub lat_ns: Lat,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DiskUtil {
    pub name: String,
    pub read_ios: u64,
    pub write_ios: u64,
    pub read_merges: u64,
    pub write_merges: u64,
    pub read_ticks: u64,
    pub write_ticks: u64,
    pub in_queue: u64,
    pub util: f64,
    /// A disk made of others (device-mapper, md): its members, averaged
    /// (fio's spelling, `aggr_write_merge` included).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aggr_read_ios: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aggr_write_ios: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aggr_read_merges: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aggr_write_merge: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aggr_read_ticks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aggr_write_ticks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aggr_in_queue: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aggr_util: Option<f64>,
}

/// Ours: what was measured, in words a reader of the figures needs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Extras {
    /// The engine that ran (hipfile-sync, posix, raw, ...).
    pub ioengine: String,
    /// The name the job gave (fio's psync, libcufile, ...), when it differs.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ioengine_as: Option<String>,
    /// device, host or host-huge.
    pub mem: String,
    pub gpu_runtime: String,
    /// GB/s (10^9 bytes per second), both directions together.
    pub gbps: f64,
    pub read_gbps: f64,
    pub write_gbps: f64,
    pub direct: bool,
    pub iodepth: u64,
    /// Bytes per I/O (the larger of the read and write sizes the job uses).
    pub bs: u64,
    pub files: u64,
    /// Bytes of I/O per pass over the files (io_size, else size).
    pub bytes_per_pass: u64,
    /// hipFileBufRegister was called for the buffer (hipfile engines).
    pub buf_registered: bool,
    /// Files opened (and registered) around each I/O.
    pub open_per_io: bool,
    pub verify: bool,
    pub verified_bytes: u64,
    /// Pattern bytes written to lay out the files before the run.
    pub created_bytes: u64,
    /// Share of the job's file ranges in the page cache when the run
    /// started (None: could not be told, e.g. a block device).
    pub cache_resident_pct: Option<f64>,
    /// "hot", "cold", "partly cached" or "unknown", from cache_resident_pct.
    pub cache: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fixed_buffers: Option<bool>,
    /// The library's storage backend (io_uring or posix), for the engines
    /// that go through the library.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub storage_backend: Option<String>,
}

/// The cache-state word for a residency percentage.
pub fn cache_word(pct: Option<f64>) -> &'static str {
    match pct {
        None => "unknown",
        Some(p) if p >= 95.0 => "hot",
        Some(p) if p <= 5.0 => "cold",
        Some(_) => "partly cached",
    }
}

/// fio's key for a percentile: "%f" of the value.
pub fn percentile_key(p: f64) -> String {
    format!("{p:.6}")
}

pub fn to_string_pretty(r: &Report) -> String {
    // Serializing plain data into a String cannot fail.
    let mut s = serde_json::to_string_pretty(r).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fio 3.33's own output for reference jobs, captured from Debian's fio.
    const FIO_SAMPLES: &[(&str, &str)] = &[
        (
            "psync read, json",
            include_str!("../tests/data/fio-3.33-psync-read.json"),
        ),
        (
            "io_uring randrw, json+ with lat and slat percentiles",
            include_str!("../tests/data/fio-3.33-iouring-randrw-jsonplus.json"),
        ),
        (
            "two jobs, [global], fsync, group_reporting",
            include_str!("../tests/data/fio-3.33-global-fsync-group.json"),
        ),
    ];

    #[test]
    fn the_model_holds_every_key_fio_writes() {
        for (what, text) in FIO_SAMPLES {
            let r: Report = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("{what}: fio's JSON does not fit the model: {e}"));
            assert!(r.fio_version.starts_with("fio-3.33"), "{what}");
            assert!(!r.jobs.is_empty());
        }
    }

    #[test]
    fn the_model_writes_back_what_fio_wrote() {
        for (what, text) in FIO_SAMPLES {
            let r: Report = serde_json::from_str(text).unwrap();
            let ours: serde_json::Value = serde_json::from_str(&to_string_pretty(&r)).unwrap();
            let theirs: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{what}");
        }
    }

    #[test]
    fn cache_words() {
        assert_eq!(cache_word(Some(100.0)), "hot");
        assert_eq!(cache_word(Some(0.0)), "cold");
        assert_eq!(cache_word(Some(50.0)), "partly cached");
        assert_eq!(cache_word(None), "unknown");
        assert_eq!(percentile_key(99.95), "99.950000");
    }
}
