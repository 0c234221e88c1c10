//! Per-I/O logs in fio's format (`write_bw_log`, `write_lat_log`,
//! `write_iops_log`): one line per I/O, or per `log_avg_msec` window,
//!
//! ```text
//! time (ms), value, direction (0 read, 1 write), block size, [offset,] priority
//! ```
//!
//! with latencies in ns, bandwidth in KiB/s (per I/O: bytes * 10^6 / clat ns,
//! as fio computes it) and IOPS. Windowed lines carry the window's average
//! (rounded) and 0 for block size and offset, as fio's do.

use std::io::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bw,
    Iops,
    Lat,
    Clat,
    Slat,
}

impl Kind {
    pub fn suffix(self) -> &'static str {
        match self {
            Kind::Bw => "bw",
            Kind::Iops => "iops",
            Kind::Lat => "lat",
            Kind::Clat => "clat",
            Kind::Slat => "slat",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub t_ms: u64,
    pub value: u64,
    pub dir: u8,
    pub bs: u64,
    pub offset: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Window {
    n: u64,
    sum: u128,
    start_ms: u64,
}

/// One log of one job.
#[derive(Clone, Debug)]
pub struct Log {
    pub kind: Kind,
    pub prefix: String,
    pub rows: Vec<Row>,
    avg_msec: u64,
    window: [Window; 2],
}

impl Log {
    pub fn new(kind: Kind, prefix: &str, avg_msec: u64) -> Log {
        Log {
            kind,
            prefix: prefix.to_string(),
            rows: Vec::new(),
            avg_msec,
            window: [Window::default(); 2],
        }
    }

    pub fn windowed(&self) -> bool {
        self.avg_msec > 0
    }

    /// One I/O's value (latency logs, and per-I/O bandwidth/IOPS logs).
    pub fn add(&mut self, t_ms: u64, value: u64, dir: u8, bs: u64, offset: u64) {
        if self.avg_msec == 0 {
            self.rows.push(Row {
                t_ms,
                value,
                dir,
                bs,
                offset,
            });
            return;
        }
        let w = &mut self.window[dir as usize];
        w.n += 1;
        w.sum += value as u128;
        if t_ms.saturating_sub(w.start_ms) >= self.avg_msec {
            self.close(dir, t_ms);
        }
    }

    /// A window's row computed elsewhere (windowed bandwidth and IOPS).
    pub fn push_window(&mut self, t_ms: u64, value: u64, dir: u8) {
        self.rows.push(Row {
            t_ms,
            value,
            dir,
            bs: 0,
            offset: 0,
        });
    }

    fn close(&mut self, dir: u8, t_ms: u64) {
        let w = &mut self.window[dir as usize];
        if w.n > 0 {
            let mean = ((w.sum + w.n as u128 / 2) / w.n as u128) as u64;
            self.rows.push(Row {
                t_ms,
                value: mean,
                dir,
                bs: 0,
                offset: 0,
            });
        }
        let start = t_ms - t_ms % self.avg_msec.max(1);
        self.window[dir as usize] = Window {
            start_ms: start,
            ..Window::default()
        };
    }

    /// The job is over: the partial windows become rows.
    pub fn finish(&mut self, t_ms: u64) {
        if self.avg_msec > 0 {
            for d in 0..2 {
                self.close(d, t_ms);
            }
        }
    }

    /// `prefix_kind.N.log` (per-job logs) or `prefix_kind.log`.
    pub fn file_name(&self, job_number: Option<usize>) -> String {
        match job_number {
            Some(n) => format!("{}_{}.{n}.log", self.prefix, self.kind.suffix()),
            None => format!("{}_{}.log", self.prefix, self.kind.suffix()),
        }
    }
}

/// fio's line for one row.
pub fn format_row(r: &Row, with_offset: bool) -> String {
    if with_offset {
        format!(
            "{}, {}, {}, {}, {}, 0\n",
            r.t_ms, r.value, r.dir, r.bs, r.offset
        )
    } else {
        format!("{}, {}, {}, {}, 0\n", r.t_ms, r.value, r.dir, r.bs)
    }
}

/// Write `logs` to their files (appending: jobs that share a file with
/// per_job_logs=0 add their rows one after the other).
pub fn write(logs: &[Log], job_number: Option<usize>, with_offset: bool) -> Result<(), String> {
    for log in logs {
        let name = log.file_name(job_number);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&name)
            .map_err(|e| format!("log {name}: {e}"))?;
        let mut text = String::with_capacity(log.rows.len() * 24);
        for r in &log.rows {
            text.push_str(&format_row(r, with_offset));
        }
        f.write_all(text.as_bytes())
            .map_err(|e| format!("log {name}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_io_rows_are_kept_as_given() {
        let mut l = Log::new(Kind::Clat, "x", 0);
        l.add(3, 277_572, 0, 65536, 4096);
        assert_eq!(format_row(&l.rows[0], false), "3, 277572, 0, 65536, 0\n");
        assert_eq!(
            format_row(&l.rows[0], true),
            "3, 277572, 0, 65536, 4096, 0\n"
        );
    }

    #[test]
    fn windowed_rows_average_per_direction() {
        let mut l = Log::new(Kind::Lat, "x", 10);
        l.add(1, 100, 0, 4096, 0);
        l.add(5, 201, 0, 4096, 0);
        l.add(6, 7, 1, 4096, 0);
        l.add(12, 300, 0, 4096, 0); // closes the read window: (100+201+300)/3
        l.finish(15);
        assert_eq!(l.rows.len(), 2);
        assert_eq!(
            (l.rows[0].t_ms, l.rows[0].value, l.rows[0].dir),
            (12, 200, 0)
        );
        assert_eq!((l.rows[1].value, l.rows[1].dir, l.rows[1].bs), (7, 1, 0));
    }

    #[test]
    fn file_names_follow_fio() {
        let l = Log::new(Kind::Bw, "run", 0);
        assert_eq!(l.file_name(Some(2)), "run_bw.2.log");
        assert_eq!(l.file_name(None), "run_bw.log");
    }
}
