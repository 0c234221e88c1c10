//! fio's status line while jobs run (`--eta`), on stderr so that the report
//! on stdout or in `--output` stays clean:
//!
//! ```text
//! Jobs: 2 (f=2): [R(2)][45.0%][r=1000MiB/s,w=0KiB/s][r=16.0k,w=0 IOPS][eta 00m:05s]
//! ```

use crate::units::num2str;
use std::io::Write;

/// What the line shows at one moment.
pub struct Progress {
    pub running: usize,
    pub files: usize,
    /// One letter per job, fio's: R/r read, W/w write, M/m mixed
    /// (capital: sequential), _ done.
    pub states: String,
    pub done_frac: f64,
    pub rate: [f64; 2],
    pub iops: [f64; 2],
    pub eta_s: u64,
}

/// fio's run-length form of the job letters: "RRRR_" is "R(4),_(1)".
fn compress(states: &str) -> String {
    let mut out = Vec::new();
    let mut chars = states.chars().peekable();
    while let Some(c) = chars.next() {
        let mut n = 1;
        while chars.peek() == Some(&c) {
            chars.next();
            n += 1;
        }
        out.push(format!("{c}({n})"));
    }
    out.join(",")
}

pub fn line(p: &Progress) -> String {
    let bw = |v: f64| num2str(v as u64, 4, true, "B/s");
    let io = |v: f64| num2str(v as u64, 4, false, "");
    format!(
        "Jobs: {} (f={}): [{}][{:.1}%][r={},w={}][r={},w={} IOPS][eta {:02}m:{:02}s]",
        p.running,
        p.files,
        compress(&p.states),
        p.done_frac * 100.0,
        bw(p.rate[0]),
        bw(p.rate[1]),
        io(p.iops[0]),
        io(p.iops[1]),
        p.eta_s / 60,
        p.eta_s % 60
    )
}

/// Writes the line in place (`\r`), or as lines of their own when asked.
pub struct Eta {
    shown: bool,
    newline: bool,
}

impl Eta {
    pub fn new() -> Eta {
        Eta {
            shown: false,
            newline: false,
        }
    }

    /// The next line ends with a newline (`--eta-newline`).
    pub fn newline_next(&mut self) {
        self.newline = true;
    }

    pub fn show(&mut self, p: &Progress) {
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r{:<100}", line(p));
        if std::mem::take(&mut self.newline) {
            let _ = writeln!(e);
        }
        let _ = e.flush();
        self.shown = true;
    }

    /// Clear the line before anything else is written.
    pub fn clear(&mut self) {
        if std::mem::take(&mut self.shown) {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r{:100}\r", "");
            let _ = e.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_reads_like_fios() {
        let p = Progress {
            running: 2,
            files: 2,
            states: "RR_".into(),
            done_frac: 0.45,
            rate: [1_048_576_000.0, 0.0],
            iops: [16_000.0, 0.0],
            eta_s: 65,
        };
        assert_eq!(
            line(&p),
            "Jobs: 2 (f=2): [R(2),_(1)][45.0%][r=1000MiB/s,w=0B/s][r=16.0k,w=0 IOPS][eta 01m:05s]"
        );
    }
}
