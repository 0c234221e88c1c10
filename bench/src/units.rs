//! Numbers as fio reads and prints them: sizes, times and booleans in option
//! values, and fio's `num2str` rendering of figures in its reports.

use std::time::Duration;

/// Parse a size as fio does with its default `kb_base=1024`: a number
/// (decimal, `0x` hex, or with a fraction), then an optional unit,
/// case-insensitive. `k`/`m`/`g`/`t`/`p` (optionally followed by `b`) are
/// powers of 1024, and `ki`/`mi`/... (optionally followed by `b`) powers of
/// 1000: fio's compatibility mode, which keeps old job files meaning what
/// they meant ("4k" = 4096, "4KiB" = 4000, "1mi" = 1000000).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).map_err(|_| format!("bad size '{s}'"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.chars().filter(|&c| c == '.').count() > 1 || num == "." {
        return Err(format!("bad size '{s}'"));
    }
    let u = unit.to_ascii_lowercase();
    let u = u.strip_suffix('b').unwrap_or(&u);
    let (base, exp): (u64, u32) = match u {
        "" => (1, 0),
        "k" => (1024, 1),
        "m" => (1024, 2),
        "g" => (1024, 3),
        "t" => (1024, 4),
        "p" => (1024, 5),
        "ki" => (1000, 1),
        "mi" => (1000, 2),
        "gi" => (1000, 3),
        "ti" => (1000, 4),
        "pi" => (1000, 5),
        _ => return Err(format!("bad size '{s}': unknown unit '{unit}'")),
    };
    let mult = base.pow(exp);
    let too_large = || format!("size '{s}' is too large");
    if let Some((int, frac)) = num.split_once('.') {
        let int_v: u64 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| format!("bad size '{s}'"))?
        };
        let whole = int_v.checked_mul(mult).ok_or_else(too_large)?;
        // The fraction in exact integer arithmetic: 0.5 g = 5 * 2^30 / 10.
        let digits = frac.len().min(18) as u32;
        let frac_v: u128 = if digits == 0 {
            0
        } else {
            frac[..digits as usize]
                .parse()
                .map_err(|_| format!("bad size '{s}'"))?
        };
        let part = (frac_v * mult as u128) / 10u128.pow(digits);
        whole.checked_add(part as u64).ok_or_else(too_large)
    } else {
        let v: u64 = num.parse().map_err(|_| format!("bad size '{s}'"))?;
        v.checked_mul(mult).ok_or_else(too_large)
    }
}

/// An integer range as fio writes it (`1k-4k` or `1k:4k`); one value is a
/// range of one. A lower value above the upper one is swapped, as in fio.
pub fn parse_size_range(s: &str) -> Result<(u64, u64), String> {
    let t = s.trim();
    let sep = t.find([':', '-']);
    match sep {
        Some(i) if i > 0 => {
            let a = parse_size(&t[..i])?;
            let b = parse_size(&t[i + 1..])?;
            Ok((a.min(b), a.max(b)))
        }
        _ => {
            let v = parse_size(t)?;
            Ok((v, v))
        }
    }
}

/// Parse a time as fio does: a plain number is in `default_unit` (seconds for
/// most options); suffixes us/usec, ms/msec, s/sec, m/min, h, d.
pub fn parse_time_in(s: &str, default_unit: Duration) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("bad time '{s}'"))?;
    let secs = match unit.to_ascii_lowercase().as_str() {
        "" => v * default_unit.as_secs_f64(),
        "s" | "sec" => v,
        "us" | "usec" => v / 1e6,
        "ms" | "msec" => v / 1e3,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        _ => return Err(format!("bad time '{s}': unknown unit '{unit}'")),
    };
    if !secs.is_finite() || !(0.0..1e10).contains(&secs) {
        return Err(format!("bad time '{s}'"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A time whose plain numbers are seconds (runtime, ramp_time, ...).
pub fn parse_time(s: &str) -> Result<Duration, String> {
    parse_time_in(s, Duration::from_secs(1))
}

/// fio booleans: 0/1, plus true/false/yes/no/on/off.
pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("expected 0 or 1, got '{v}'")),
    }
}

/// An unsigned integer in `min..=max` (decimal or `0x` hex).
pub fn parse_uint(v: &str, min: u64, max: u64) -> Result<u64, String> {
    let t = v.trim();
    let n = if let Some(h) = t.strip_prefix("0x") {
        u64::from_str_radix(h, 16)
    } else {
        t.parse()
    }
    .map_err(|_| format!("expected an integer, got '{v}'"))?;
    if n < min || n > max {
        return Err(format!("{n} is out of range {min}..={max}"));
    }
    Ok(n)
}

/// fio's rendering of a figure in its reports: divide by 1000 (or 1024 for
/// `pow2`) until at most `maxlen` digits remain, then spend what room is left
/// on decimals of the remainder, and append the unit prefix and `unit`:
/// 1048576000 B/s with maxlen 4 and pow2 is "1000MiB/s", 12800 with maxlen 4
/// is "12.8k", 2059690 with maxlen 6 is "2059.7k".
pub fn num2str(value: u64, maxlen: usize, pow2: bool, unit: &str) -> String {
    const SI: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    const IEC: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let prefixes = if pow2 { &IEC } else { &SI };
    let thousand: u64 = if pow2 { 1024 } else { 1000 };
    let digits = |n: u64| n.to_string().len();
    let mut num = value;
    let mut level = 0usize;
    let mut rem: Option<u64> = None;
    while level < prefixes.len() && digits(num) > maxlen {
        rem = Some(num % thousand);
        num /= thousand;
        level += 1;
    }
    if level >= prefixes.len() {
        level = 0;
    }
    let prefix = prefixes[level];
    let Some(r) = rem else {
        return format!("{num}{prefix}{unit}");
    };
    let room = maxlen as isize - digits(num) as isize - 1;
    if room <= 0 {
        if r >= thousand / 2 {
            num += 1;
        }
        return format!("{num}{prefix}{unit}");
    }
    let frac = format!("{:.*}", room as usize, r as f64 / thousand as f64);
    // A remainder that rounds up to a whole unit carries into the integer part.
    if frac.starts_with('1') {
        num += 1;
    }
    format!("{num}.{}{prefix}{unit}", &frac[2..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_fios_default_kb_base() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4kb"), Ok(4096));
        assert_eq!(parse_size("4KB"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("2t"), Ok(2 << 40));
        assert_eq!(parse_size("1p"), Ok(1 << 50));
        assert_eq!(parse_size("100b"), Ok(100));
        assert_eq!(parse_size("1.5g"), Ok(1_610_612_736));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size(".5m"), Ok(512 << 10));
        assert_eq!(parse_size("0x1000"), Ok(4096));
    }

    #[test]
    fn iec_suffixes_are_powers_of_1000_as_in_fio_compat_mode() {
        assert_eq!(parse_size("4KiB"), Ok(4000));
        assert_eq!(parse_size("4ki"), Ok(4000));
        assert_eq!(parse_size("1mi"), Ok(1_000_000));
        assert_eq!(parse_size("1MiB"), Ok(1_000_000));
        assert_eq!(parse_size("1gi"), Ok(1_000_000_000));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for s in [
            "",
            "k",
            "-1",
            "1x",
            "4kk",
            "1.2.3",
            ".",
            "1 k",
            "16777216t",
            "0xg",
        ] {
            assert!(parse_size(s).is_err(), "{s:?} should be refused");
        }
        assert!(parse_size("18446744073709551615").is_ok());
        assert!(parse_size("18446744073709551616").is_err());
    }

    #[test]
    fn size_ranges() {
        assert_eq!(parse_size_range("4k"), Ok((4096, 4096)));
        assert_eq!(parse_size_range("4k-8k"), Ok((4096, 8192)));
        assert_eq!(parse_size_range("8k:4k"), Ok((4096, 8192)));
        assert!(parse_size_range("4k-x").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_time("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_time("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_time("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_time("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(
            parse_time_in("250", Duration::from_millis(1)),
            Ok(Duration::from_millis(250))
        );
        assert!(parse_time("ten").is_err());
        assert!(parse_time("5x").is_err());
    }

    #[test]
    fn booleans_and_integers() {
        assert_eq!(parse_bool("1"), Ok(true));
        assert_eq!(parse_bool("off"), Ok(false));
        assert!(parse_bool("2").is_err());
        assert_eq!(parse_uint("16", 1, 65536), Ok(16));
        assert!(parse_uint("0", 1, 65536).is_err());
        assert!(parse_uint("x", 1, 65536).is_err());
    }

    #[test]
    fn num2str_matches_fios_report_figures() {
        // Figures taken from fio 3.33 reports of the same quantities.
        assert_eq!(num2str(1_048_576_000, 4, true, "B/s"), "1000MiB/s");
        assert_eq!(num2str(1_048_576_000, 4, false, "B/s"), "1049MB/s");
        assert_eq!(num2str(475_000_000, 4, true, "B/s"), "453MiB/s");
        assert_eq!(num2str(12_800, 4, false, ""), "12.8k");
        assert_eq!(num2str(7_250, 4, false, ""), "7250");
        assert_eq!(num2str(4_194_304, 4, true, "B"), "4096KiB");
        assert_eq!(num2str(4_194_304, 4, false, "B"), "4194kB");
        assert_eq!(num2str(65_536, 4, true, "B"), "64.0KiB");
        assert_eq!(num2str(1 << 20, 4, true, "B"), "1024KiB");
        assert_eq!(num2str(2_059_690, 6, false, ""), "2059.7k");
        assert_eq!(num2str(120, 6, false, ""), "120");
        assert_eq!(num2str(0, 4, true, "B/s"), "0B/s");
    }
}
