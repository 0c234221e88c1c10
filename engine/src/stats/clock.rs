//! The clock per-call latencies are read from.
//!
//! A level-1 call reads the clock twice. `clock_gettime(CLOCK_MONOTONIC)`
//! through the vDSO costs 25–30 ns a read in a VM (it reads the TSC and then
//! the kernel's conversion page under a sequence lock), which for a 4 KiB
//! page-cache read of about 1.5 µs is most of what counting it costs. Where
//! the CPU's TSC is invariant (CPUID 0x80000007 EDX bit 8: it ticks at one
//! rate in every power state and is synchronised across cores, which is what
//! the kernel's own TSC clocksource relies on), `rdtsc` alone takes about
//! 10 ns, and ticks are turned into nanoseconds with a rate measured once
//! against CLOCK_MONOTONIC when the statistics start. Elsewhere (no
//! invariant TSC, or not x86-64) the monotonic clock is read as before.
//!
//! Times are "ticks since the origin": TSC ticks, or nanoseconds on the
//! fallback; [`to_ns`] converts either.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

struct Clock {
    /// CLOCK_MONOTONIC at the origin.
    origin: Instant,
    /// The TSC at the origin and nanoseconds per tick in 32.32 fixed point,
    /// when the TSC is used.
    tsc: Option<(u64, u64)>,
}

static CLOCK: OnceLock<Clock> = OnceLock::new();

/// How long the TSC's rate is measured for: a pair of readings is known to
/// within [`PAIR_WIDTH`], so the rate is within 0.2 % (latency buckets are
/// 19 % apart). Spent once per process, when its statistics start.
const CALIBRATION: Duration = Duration::from_micros(500);
/// A TSC reading and a monotonic reading taken closer than this count as
/// simultaneous; a pair wider than this was interrupted and is taken again.
const PAIR_WIDTH: Duration = Duration::from_nanos(500);

/// Fix the origin and choose the clock. Idempotent; must run before the
/// first [`now`] whose result is kept (the recorder calls it before it
/// turns counting on).
pub(crate) fn start() {
    let _ = CLOCK.get_or_init(|| {
        let tsc = tsc::calibrate();
        Clock {
            origin: tsc.map_or_else(Instant::now, |c| c.origin),
            tsc: tsc.map(|c| (c.tsc0, c.ns_per_tick_q32)),
        }
    });
}

/// Ticks since the origin (0 before [`start`]).
#[inline]
pub(crate) fn now() -> u64 {
    match CLOCK.get() {
        Some(Clock {
            tsc: Some((tsc0, _)),
            ..
        }) => tsc::read().saturating_sub(*tsc0),
        Some(c) => nanos(c.origin.elapsed()),
        None => 0,
    }
}

/// `ticks` (a time since the origin, or a difference of two) in ns.
#[inline]
pub(crate) fn to_ns(ticks: u64) -> u64 {
    match CLOCK.get() {
        Some(Clock {
            tsc: Some((_, q32)),
            ..
        }) => scale(ticks, *q32),
        _ => ticks,
    }
}

/// Whether latencies are read from the TSC (for the log line at start).
pub(crate) fn uses_tsc() -> bool {
    CLOCK.get().is_some_and(|c| c.tsc.is_some())
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `ticks` × `q32` / 2^32, saturating.
fn scale(ticks: u64, q32: u64) -> u64 {
    u64::try_from((u128::from(ticks) * u128::from(q32)) >> 32).unwrap_or(u64::MAX)
}

/// The rate of a tick counter read in pairs with the monotonic clock: the
/// first pair, then one taken at least `span` later. None when no pair
/// narrower than [`PAIR_WIDTH`] could be taken, or the rate is not one a
/// TSC has (100 MHz to 10 GHz).
fn measure(read: impl Fn() -> u64, span: Duration) -> Option<Calibration> {
    let pair = || {
        (0..8).find_map(|_| {
            let a = Instant::now();
            let t = read();
            let b = Instant::now();
            (b - a <= PAIR_WIDTH).then(|| (t, a + (b - a) / 2))
        })
    };
    let (t0, i0) = pair()?;
    while i0.elapsed() < span {
        std::hint::spin_loop();
    }
    let (t1, i1) = pair()?;
    let ticks = t1.checked_sub(t0).filter(|&t| t > 0)?;
    let ns = nanos(i1 - i0);
    let q32 = u64::try_from((u128::from(ns) << 32) / u128::from(ticks)).ok()?;
    // 10 GHz is 0.1 ns a tick, 100 MHz 10 ns.
    let plausible = (1u64 << 32) / 10..=(1u64 << 32) * 10;
    plausible.contains(&q32).then_some(Calibration {
        origin: i0,
        tsc0: t0,
        ns_per_tick_q32: q32,
    })
}

#[derive(Clone, Copy)]
struct Calibration {
    origin: Instant,
    tsc0: u64,
    ns_per_tick_q32: u64,
}

#[cfg(target_arch = "x86_64")]
mod tsc {
    use super::{measure, Calibration, CALIBRATION};

    pub(super) fn invariant() -> bool {
        use std::arch::x86_64::__cpuid;
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }

    #[inline]
    pub(super) fn read() -> u64 {
        // SAFETY: rdtsc reads a counter; every x86-64 CPU has it, and user
        // mode may execute it unless the kernel set CR4.TSD, which Linux
        // does only for seccomp-strict tasks (which cannot reach here).
        unsafe { std::arch::x86_64::_rdtsc() }
    }

    pub(super) fn calibrate() -> Option<Calibration> {
        if !invariant() {
            return None;
        }
        measure(read, CALIBRATION)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tsc {
    use super::Calibration;

    #[inline]
    pub(super) fn read() -> u64 {
        0
    }

    pub(super) fn calibrate() -> Option<Calibration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_by_one_in_q32_is_the_identity_and_saturates() {
        assert_eq!(scale(12_345, 1 << 32), 12_345);
        assert_eq!(scale(1000, 3 << 31), 1500);
        assert_eq!(scale(u64::MAX, 2 << 32), u64::MAX);
    }

    #[test]
    fn a_counter_that_counts_nanoseconds_calibrates_to_one() {
        let origin = Instant::now();
        let c = measure(|| nanos(origin.elapsed()), Duration::from_millis(2))
            .expect("a nanosecond counter has a plausible rate");
        let rate = c.ns_per_tick_q32 as f64 / (1u64 << 32) as f64;
        assert!((rate - 1.0).abs() < 0.01, "rate {rate}");
    }

    #[test]
    fn a_counter_that_does_not_move_is_refused() {
        assert!(measure(|| 7, Duration::from_micros(50)).is_none());
    }

    #[test]
    fn latencies_read_from_the_chosen_clock_follow_the_monotonic_clock() {
        start();
        // Each reading is bracketed by monotonic readings, so a preemption
        // widens the bounds instead of failing the comparison.
        let bracket = || {
            let a = Instant::now();
            let t = now();
            (a, t, Instant::now())
        };
        let (a0, t0, b0) = bracket();
        let deadline = b0 + Duration::from_millis(5);
        while Instant::now() < deadline {
            std::hint::spin_loop();
        }
        let (a1, t1, b1) = bracket();
        let ns = to_ns(t1 - t0) as f64;
        let (low, high) = ((a1 - b0).as_nanos() as f64, (b1 - a0).as_nanos() as f64);
        // The rate is measured to within 0.2 %; 1 % leaves room.
        assert!(
            ns >= low * 0.99 && ns <= high * 1.01,
            "{ns} ns by the stats clock (tsc: {}), {low}..{high} ns by Instant",
            uses_tsc()
        );
    }
}
