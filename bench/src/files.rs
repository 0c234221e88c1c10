//! A job's files, as fio names and sizes them: `filename` (shared by every
//! clone) or generated names (`directory` + `filename_format`, one set per
//! clone), each with its I/O region; laying them out with the data pattern
//! (in parallel, one sync per file system at the end); opening them.

use crate::options::JobOptions;
use crate::pattern;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One file of a job and the region its I/O covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    pub path: String,
    pub start: u64,
    pub len: u64,
    /// Bytes the file must hold (the region's end, or `filesize`).
    pub need: u64,
}

/// fio's file name keywords: $jobname, $jobnum (the clone), $filenum.
pub fn generated_name(format: &str, jobname: &str, jobnum: u64, filenum: u64) -> String {
    format
        .replace("$jobname", jobname)
        .replace("$jobnum", &jobnum.to_string())
        .replace("$filenum", &filenum.to_string())
}

fn in_dir(dir: Option<&String>, name: &str) -> String {
    match dir {
        Some(d) if !Path::new(name).is_absolute() => Path::new(d).join(name).display().to_string(),
        _ => name.to_string(),
    }
}

/// Random-size files (`filesize=lo-hi`) draw from this, per file, so a run repeats.
fn pick_size(lo: u64, hi: u64, jobnum: u64, filenum: u64, unit: u64) -> u64 {
    if lo == hi {
        return lo;
    }
    let mut z = (jobnum << 32 ^ filenum).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^= z >> 27;
    let v = lo + z % (hi - lo + 1);
    // Whole blocks where the range allows.
    let aligned = v / unit * unit;
    if aligned >= lo {
        aligned
    } else {
        v
    }
}

/// The files of clone `clone` of job `o`, with their regions, and the bytes
/// of I/O per pass (fio: `io_size`, else `size`, else the regions' total).
pub fn job_files(o: &JobOptions, clone: u64) -> Result<(Vec<FileSpec>, u64), String> {
    let names: Vec<String> = if o.filenames.is_empty() {
        // Generated names: clones take the directories in turn.
        let dir = if o.directories.is_empty() {
            None
        } else {
            Some(&o.directories[(clone % o.directories.len() as u64) as usize])
        };
        (0..o.nrfiles)
            .map(|i| in_dir(dir, &generated_name(&o.filename_format, &o.name, clone, i)))
            .collect()
    } else {
        o.filenames
            .iter()
            .map(|f| in_dir(o.directories.first(), f))
            .collect()
    };
    let n = names.len() as u64;
    let start = o
        .offset
        .checked_add(o.offset_increment.saturating_mul(clone))
        .ok_or("offset + offset_increment overflows")?;
    let unit = o.bs[0].min(o.bs[1]).max(1);
    let mut files = Vec::with_capacity(names.len());
    for (i, path) in names.into_iter().enumerate() {
        let existing = pattern::file_size(&path).map_err(|e| format!("stat {path}: {e}"))?;
        let (len, need) = if let Some((lo, hi)) = o.filesize {
            let fs = pick_size(lo, hi, clone, i as u64, unit);
            (fs.saturating_sub(start), fs)
        } else if let Some(size) = o.size.filter(|s| s / n > 0) {
            let per = size / n;
            (per, start + per)
        } else if let Some(pct) = o.size_percent {
            let have = existing.ok_or_else(|| {
                format!("size={pct}%: {path} does not exist (a share of nothing)")
            })?;
            let len = have.saturating_sub(start) * pct as u64 / 100;
            (len, start + len)
        } else {
            match existing {
                Some(have) if have > start => (have - start, have),
                _ => {
                    return Err(format!(
                        "job '{}': size is required: {path} does not exist or holds nothing past offset",
                        o.name
                    ))
                }
            }
        };
        if len == 0 {
            return Err(format!(
                "job '{}': {path} has no room for I/O past offset {start}",
                o.name
            ));
        }
        files.push(FileSpec {
            path,
            start,
            len,
            need,
        });
    }
    let regions: u64 = files.iter().map(|f| f.len).sum();
    let pass = match (o.io_size, o.filesize, o.size) {
        (Some(io), _, _) => io,
        // With filesize, size only sets how much I/O there is.
        (None, Some(_), Some(size)) => size,
        _ => regions,
    };
    Ok((files, pass))
}

/// What laying out the files did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub bytes: u64,
    pub created: usize,
    pub extended: usize,
}

fn is_block_device(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// Make every file hold what its jobs need: create missing ones and extend
/// short ones with the data pattern, several files at once (a set of 8192
/// small files is mostly per-file overhead), then one syncfs per file system
/// so that dropping the page cache afterwards can drop these pages too.
pub fn lay_out(need: &BTreeMap<String, u64>, allow_create: bool) -> Result<Layout, String> {
    let mut todo: Vec<(&String, u64, Option<u64>)> = Vec::new();
    for (path, &bytes) in need {
        let have = pattern::file_size(path).map_err(|e| format!("stat {path}: {e}"))?;
        if have.is_some_and(|h| h >= bytes) {
            continue;
        }
        if have.is_none() && !allow_create {
            return Err(format!("{path} does not exist and allow_file_create=0"));
        }
        if is_block_device(path) {
            return Err(format!(
                "{path} holds {} bytes, fewer than the {bytes} the jobs need",
                have.unwrap_or(0)
            ));
        }
        if have.is_none() {
            if let Some(parent) = Path::new(path)
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
            {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("creating directory {}: {e}", parent.display()))?;
            }
        }
        todo.push((path, bytes, have));
    }
    if todo.is_empty() {
        return Ok(Layout::default());
    }
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8)
        .min(todo.len());
    let next = AtomicUsize::new(0);
    let first_err: Mutex<Option<String>> = Mutex::new(None);
    let written = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(path, bytes, _)) = todo.get(i) else {
                    break;
                };
                if first_err.lock().map(|e| e.is_some()).unwrap_or(true) {
                    break;
                }
                match pattern::ensure_file(path, bytes, false) {
                    Ok(n) => {
                        written.fetch_add(n as usize, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if let Ok(mut slot) = first_err.lock() {
                            slot.get_or_insert(format!("creating {path}: {e}"));
                        }
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = first_err.into_inner().ok().flatten() {
        return Err(e);
    }
    // One sync per file system: the directories of the files written.
    let mut dirs: Vec<String> = todo
        .iter()
        .map(|(p, _, _)| {
            Path::new(p.as_str())
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or(".".into(), |d| d.display().to_string())
        })
        .collect();
    dirs.sort();
    dirs.dedup();
    let mut seen_dev = Vec::new();
    for d in dirs {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = std::fs::metadata(&d) else {
            continue;
        };
        if seen_dev.contains(&m.dev()) {
            continue;
        }
        seen_dev.push(m.dev());
        if let Ok(f) = std::fs::File::open(&d) {
            use std::os::fd::AsRawFd;
            // SAFETY: syncfs only names a descriptor we hold open.
            unsafe { libc::syncfs(f.as_raw_fd()) };
        }
    }
    Ok(Layout {
        bytes: written.into_inner() as u64,
        created: todo.iter().filter(|t| t.2.is_none()).count(),
        extended: todo.iter().filter(|t| t.2.is_some()).count(),
    })
}

/// Let the process hold as many descriptors as its hard limit allows: a job
/// over thousands of files keeps each open (and libhipfile may hold a second,
/// O_DIRECT descriptor per registered file), beyond the usual soft limit of 1024.
pub fn raise_open_file_limit() {
    // SAFETY: an all-zero rlimit is a valid value for getrlimit to overwrite.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: r is a live rlimit; setrlimit only raises the soft limit to the hard one.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Open a job file for its I/O.
pub fn open(path: &str, writes: bool, direct: bool) -> Result<i32, String> {
    let c = std::ffi::CString::new(path).map_err(|_| format!("{path}: NUL in file name"))?;
    let mut flags = if writes { libc::O_RDWR } else { libc::O_RDONLY } | libc::O_CLOEXEC;
    if direct {
        flags |= libc::O_DIRECT;
    }
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let hint = match e.raw_os_error() {
            Some(libc::EINVAL) if direct => " (the filesystem refuses O_DIRECT; try direct=0)",
            Some(libc::EMFILE) | Some(libc::ENFILE) => {
                " (too many open files: raise `ulimit -n`, or hold fewer open with openfiles=N or open_per_io=1)"
            }
            _ => "",
        };
        return Err(format!("open {path}: {e}{hint}"));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::apply;

    fn opts(kv: &[(&str, &str)]) -> JobOptions {
        let mut o = JobOptions {
            name: "job".into(),
            ..JobOptions::default()
        };
        for (k, v) in kv {
            apply(&mut o, k, Some(v)).unwrap();
        }
        o
    }

    fn test_dir(tag: &str) -> String {
        let base = std::env::var("HIPFILE_TEST_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string());
        let d = format!("{base}/files-{tag}-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn generated_names_follow_the_format() {
        assert_eq!(
            generated_name("$jobname.$jobnum.$filenum", "j", 2, 7),
            "j.2.7"
        );
        assert_eq!(generated_name("data/$filenum", "j", 2, 7), "data/7");
    }

    #[test]
    fn size_is_per_job_and_shared_out_over_its_files() {
        let o = opts(&[("directory", "/d"), ("nrfiles", "4"), ("size", "1m")]);
        let (f, pass) = job_files(&o, 1).unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(f[3].path, "/d/job.1.3");
        assert!(f.iter().all(|x| x.len == 256 << 10 && x.start == 0));
        assert_eq!(pass, 1 << 20);
    }

    #[test]
    fn filesize_sets_each_file_and_size_the_io() {
        let o = opts(&[
            ("directory", "/d"),
            ("nrfiles", "8"),
            ("filesize", "64k"),
            ("size", "128k"),
        ]);
        let (f, pass) = job_files(&o, 0).unwrap();
        assert!(f.iter().all(|x| x.len == 64 << 10 && x.need == 64 << 10));
        assert_eq!(pass, 128 << 10);
        let o = opts(&[("directory", "/d"), ("nrfiles", "8"), ("filesize", "64k")]);
        assert_eq!(job_files(&o, 0).unwrap().1, 512 << 10);
    }

    #[test]
    fn random_file_sizes_stay_in_range_and_repeat() {
        let o = opts(&[
            ("directory", "/d"),
            ("nrfiles", "50"),
            ("filesize", "16k-64k"),
        ]);
        let (a, _) = job_files(&o, 0).unwrap();
        let (b, _) = job_files(&o, 0).unwrap();
        assert_eq!(a, b);
        assert!(a.iter().all(|x| (16 << 10..=64 << 10).contains(&x.len)));
        assert!(a.iter().any(|x| x.len != a[0].len));
    }

    #[test]
    fn clones_share_named_files_and_offset_increment_spreads_them() {
        let o = opts(&[
            ("filename", "/x/f"),
            ("size", "1m"),
            ("offset_increment", "1m"),
        ]);
        let (f0, _) = job_files(&o, 0).unwrap();
        let (f2, _) = job_files(&o, 2).unwrap();
        assert_eq!(f0[0].path, f2[0].path);
        assert_eq!((f2[0].start, f2[0].need), (2 << 20, 3 << 20));
    }

    #[test]
    fn directories_go_round_the_clones_for_generated_names() {
        let o = opts(&[("directory", "/a:/b"), ("size", "4k")]);
        assert_eq!(job_files(&o, 0).unwrap().0[0].path, "/a/job.0.0");
        assert_eq!(job_files(&o, 1).unwrap().0[0].path, "/b/job.1.0");
        let o = opts(&[("directory", "/a:/b"), ("filename", "f"), ("size", "4k")]);
        assert_eq!(job_files(&o, 1).unwrap().0[0].path, "/a/f");
    }

    #[test]
    fn a_missing_file_without_size_is_an_error() {
        let o = opts(&[("filename", "/nonexistent/hipfile-bench/x")]);
        assert!(job_files(&o, 0).unwrap_err().contains("size is required"));
    }

    #[test]
    fn lay_out_creates_and_extends_files_with_the_pattern() {
        let d = test_dir("layout");
        let mut need = BTreeMap::new();
        for i in 0..20 {
            need.insert(format!("{d}/sub/f{i}"), 64 << 10);
        }
        let l = lay_out(&need, true).unwrap();
        assert_eq!((l.created, l.extended, l.bytes), (20, 0, 20 * (64 << 10)));
        for p in need.keys() {
            let data = std::fs::read(p).unwrap();
            assert_eq!(data.len(), 64 << 10);
            assert_eq!(pattern::check(&data, 0), None);
        }
        need.insert(format!("{d}/sub/f0"), 128 << 10);
        let l = lay_out(&need, true).unwrap();
        assert_eq!((l.created, l.extended, l.bytes), (0, 1, 64 << 10));
        assert_eq!(lay_out(&need, true).unwrap(), Layout::default());
        let mut missing = BTreeMap::new();
        missing.insert(format!("{d}/none"), 1);
        assert!(lay_out(&missing, false).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
