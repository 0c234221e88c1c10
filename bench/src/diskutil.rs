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

/// One disk being watched, with the disks it is built on (device-mapper,
/// md: its `slaves`), as fio reports them.
#[derive(Clone, Debug)]
pub struct Disk {
    pub name: String,
    stat: PathBuf,
    before: Counters,
    slaves: Vec<Disk>,
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

fn disk_at(dir: &Path, depth: usize) -> Option<Disk> {
    let stat = dir.join("stat");
    let name = dir.file_name()?.to_string_lossy().into_owned();
    let before = parse_stat(&std::fs::read_to_string(&stat).ok()?)?;
    let mut slaves = Vec::new();
    if depth < 4 {
        if let Ok(rd) = std::fs::read_dir(dir.join("slaves")) {
            let mut dirs: Vec<PathBuf> = rd
                .filter_map(|e| std::fs::canonicalize(e.ok()?.path()).ok())
                .collect();
            dirs.sort();
            slaves.extend(dirs.iter().filter_map(|d| disk_at(d, depth + 1)));
        }
    }
    Some(Disk {
        name,
        stat,
        before,
        slaves,
    })
}

/// Start watching the disks that hold `paths` (each disk once).
pub fn watch<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<Disk> {
    let mut disks: Vec<Disk> = Vec::new();
    for p in paths {
        let Some(dir) = disk_dir(Path::new(p)) else {
            continue;
        };
        let Some(name) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        if disks.iter().any(|d| d.name == name) {
            continue;
        }
        if let Some(d) = disk_at(&dir, 0) {
            disks.push(d);
        }
    }
    disks
}

/// What fio reports of a disk over a run: ios, merges and ticks per
/// direction, time in queue, and the share of the run it was busy (percent).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    pub ios: [u64; 2],
    pub merges: [u64; 2],
    pub ticks: [u64; 2],
    pub in_queue: u64,
    pub util: f64,
}

impl Figures {
    /// The figures in fio's order, as text (terse joins them with ';').
    pub fn fields(&self) -> [String; 8] {
        let [r, w] = self.ios;
        let [mr, mw] = self.merges;
        let [tr, tw] = self.ticks;
        let mut out = [r, w, mr, mw, tr, tw, self.in_queue, 0].map(|v| v.to_string());
        out[7] = format!("{:3.2}%", self.util);
        out
    }

    /// Another run's figures of the same disk: counts add, the busier share stays.
    pub fn add(&mut self, o: &Figures) {
        for k in 0..2 {
            self.ios[k] += o.ios[k];
            self.merges[k] += o.merges[k];
            self.ticks[k] += o.ticks[k];
        }
        self.in_queue += o.in_queue;
        self.util = self.util.max(o.util);
    }
}

/// What a disk did during the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    pub name: String,
    pub figures: Figures,
    /// A disk built on others (device-mapper, md): its members folded as fio
    /// does, counts averaged over them and the busiest one's share.
    pub aggregate: Option<Figures>,
}

impl Disk {
    fn delta(&self) -> Option<Counters> {
        let now = parse_stat(&std::fs::read_to_string(&self.stat).ok()?)?;
        let b = self.before;
        Some(Counters {
            ios: [now.ios[0] - b.ios[0], now.ios[1] - b.ios[1]],
            merges: [now.merges[0] - b.merges[0], now.merges[1] - b.merges[1]],
            ticks: [now.ticks[0] - b.ticks[0], now.ticks[1] - b.ticks[1]],
            io_ticks: now.io_ticks - b.io_ticks,
            in_queue: now.in_queue - b.in_queue,
        })
    }

    /// This disk's figures over the run, then its members' (fio lists them
    /// after the disk they make up).
    pub fn usage(&self, wall_ms: u64) -> Vec<Usage> {
        let Some(d) = self.delta() else {
            return Vec::new();
        };
        let members: Vec<Vec<Usage>> = self.slaves.iter().map(|s| s.usage(wall_ms)).collect();
        let direct: Vec<&Figures> = members
            .iter()
            .filter_map(|m| m.first())
            .map(|u| &u.figures)
            .collect();
        let aggregate = (!direct.is_empty()).then(|| {
            let mut sum = Figures::default();
            for f in &direct {
                sum.add(f);
            }
            let n = direct.len() as u64;
            Figures {
                ios: sum.ios.map(|v| v / n),
                merges: sum.merges.map(|v| v / n),
                ticks: sum.ticks.map(|v| v / n),
                in_queue: sum.in_queue / n,
                util: sum.util.min(100.0),
            }
        });
        let util = if wall_ms > 0 {
            (100.0 * d.io_ticks as f64 / wall_ms as f64).min(100.0)
        } else {
            0.0
        };
        let mut out = vec![Usage {
            name: self.name.clone(),
            figures: Figures {
                ios: d.ios,
                merges: d.merges,
                ticks: d.ticks,
                in_queue: d.in_queue,
                util,
            },
            aggregate,
        }];
        out.extend(members.into_iter().flatten());
        out
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
    fn a_disk_made_of_others_reports_its_members_as_fio_does() {
        let base = std::env::var_os("HIPFILE_TEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
            .join(format!("diskutil-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (dm, a, b) = (base.join("dm-0"), base.join("sda"), base.join("sdb"));
        for d in [&dm, &a, &b] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("stat"), "0 0 0 0 0 0 0 0 0 0 0\n").unwrap();
        }
        std::fs::create_dir_all(dm.join("slaves")).unwrap();
        std::os::unix::fs::symlink(&a, dm.join("slaves/sda")).unwrap();
        std::os::unix::fs::symlink(&b, dm.join("slaves/sdb")).unwrap();
        let disk = disk_at(&dm, 0).unwrap();
        std::fs::write(dm.join("stat"), "10 0 0 5 0 0 0 0 0 50 5\n").unwrap();
        std::fs::write(a.join("stat"), "4 2 0 6 0 0 0 0 0 100 6\n").unwrap();
        std::fs::write(b.join("stat"), "8 0 0 2 0 0 0 0 0 20 2\n").unwrap();
        let u = disk.usage(100);
        let names: Vec<&str> = u.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["dm-0", "sda", "sdb"]);
        assert_eq!(u[0].figures.util, 50.0);
        assert_eq!(u[0].figures.ios, [10, 0]);
        let agg = u[0].aggregate.unwrap();
        assert_eq!(agg.ios, [6, 0]);
        assert_eq!(agg.merges, [1, 0]);
        assert_eq!(agg.in_queue, 4);
        assert_eq!(agg.util, 100.0);
        assert_eq!(agg.fields()[0], "6");
        assert_eq!(agg.fields()[7], "100.00%");
        assert!(u[1].aggregate.is_none());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn watching_a_path_without_a_block_device_finds_nothing_or_a_disk() {
        // /proc is not on a block device.
        assert!(watch(["/proc/self/stat"]).is_empty());
    }
}
