//! Disk statistics over a run, as fio's `disk_util`: the block devices that
//! hold the job files (a partition counts as its disk), read from
//! `/sys/block/<disk>/stat` before and after. They say whether a "cold" run
//! reached the disk at all.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Counters of `/sys/block/<disk>/stat` (see the kernel's
/// Documentation/block/stat.rst): ios, merges and ticks per direction, time
/// busy and weighted time in queue, all in ms where they are times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub ios: [u64; 2],
    pub merges: [u64; 2],
    pub ticks: [u64; 2],
    pub io_ticks: u64,
    pub in_queue: u64,
}

fn parse_stat(text: &str) -> Option<Counters> {
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    if v.len() < 11 {
        return None;
    }
    Some(Counters {
        ios: [v[0], v[4]],
        merges: [v[1], v[5]],
        ticks: [v[3], v[7]],
        io_ticks: v[9],
        in_queue: v[10],
    })
}

/// One disk being watched.
#[derive(Clone, Debug)]
pub struct Disk {
    pub name: String,
    stat: PathBuf,
    before: Counters,
}

/// The disk (not partition) directory in sysfs of the device holding `path`.
fn disk_dir(path: &Path) -> Option<PathBuf> {
    let m = std::fs::metadata(path)
        .ok()
        .or_else(|| path.parent().and_then(|p| std::fs::metadata(p).ok()))?;
    use std::os::unix::fs::FileTypeExt;
    let dev = if m.file_type().is_block_device() {
        m.rdev()
    } else {
        m.dev()
    };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let link = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let dir = std::fs::canonicalize(link).ok()?;
    if dir.join("partition").exists() {
        dir.parent().map(Path::to_path_buf)
    } else {
        Some(dir)
    }
}

/// Start watching the disks that hold `paths` (each disk once).
pub fn watch<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<Disk> {
    let mut disks: Vec<Disk> = Vec::new();
    for p in paths {
        let Some(dir) = disk_dir(Path::new(p)) else {
            continue;
        };
        let stat = dir.join("stat");
        let Some(name) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        if disks.iter().any(|d| d.name == name) {
            continue;
        }
        let Some(before) = std::fs::read_to_string(&stat)
            .ok()
            .and_then(|t| parse_stat(&t))
        else {
            continue;
        };
        disks.push(Disk { name, stat, before });
    }
    disks
}

/// What a disk did during the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    pub name: String,
    pub delta: Counters,
    /// Share of the run the disk was busy, percent.
    pub util: f64,
}

impl Disk {
    pub fn usage(&self, wall_ms: u64) -> Option<Usage> {
        let now = parse_stat(&std::fs::read_to_string(&self.stat).ok()?)?;
        let b = self.before;
        let d = Counters {
            ios: [now.ios[0] - b.ios[0], now.ios[1] - b.ios[1]],
            merges: [now.merges[0] - b.merges[0], now.merges[1] - b.merges[1]],
            ticks: [now.ticks[0] - b.ticks[0], now.ticks[1] - b.ticks[1]],
            io_ticks: now.io_ticks - b.io_ticks,
            in_queue: now.in_queue - b.in_queue,
        };
        let util = if wall_ms > 0 {
            (100.0 * d.io_ticks as f64 / wall_ms as f64).min(100.0)
        } else {
            0.0
        };
        Some(Usage {
            name: self.name.clone(),
            delta: d,
            util,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_into_counters() {
        let c = parse_stat("  100 2 800 30 50 4 400 60 0 90 120 0 0 0 0 0 0\n").unwrap();
        assert_eq!(c.ios, [100, 50]);
        assert_eq!(c.merges, [2, 4]);
        assert_eq!(c.ticks, [30, 60]);
        assert_eq!((c.io_ticks, c.in_queue), (90, 120));
        assert!(parse_stat("1 2 3").is_none());
        assert!(parse_stat("a b c d e f g h i j k").is_none());
    }

    #[test]
    fn watching_a_path_without_a_block_device_finds_nothing_or_a_disk() {
        // /proc is not on a block device.
        assert!(watch(["/proc/self/stat"]).is_empty());
    }
}
