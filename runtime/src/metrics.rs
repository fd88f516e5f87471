//! Lock-free latency histograms with fixed Prometheus buckets (the host's `/metrics`, issue 8
//! item 4). Observing is a binary search over a constant table and three relaxed atomic adds,
//! so the hot paths can record every call.
//!
//! This crate only counts: it does not depend on a metrics library. The node host reads a
//! [`HistogramSnapshot`] at scrape time and encodes it with `prometheus-client` (in seconds),
//! so an application that embeds the runtime without the host pays for no exposition code.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds (10 µs … 10 s; `+Inf` is implicit).
///
/// The 1–2.5–5 steps per decade start at 10 µs because a serial mesh request (node direct or
/// a remote Actor on a route cache hit) takes ~170–190 µs at p50 (docs/benchmarks.md,
/// `scripts/bench-objects`): with a first bound of 500 µs every such request landed in the
/// first bucket and the histogram said nothing about it (issue 16 item 5). The top stays at
/// 10 s, the longest store or request latency worth telling apart from `+Inf`.
pub const BUCKETS_US: [u64; 19] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A latency histogram: per-bucket counts (not cumulative), the count and the sum.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_US.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

/// A consistent-enough copy of a [`Histogram`] for rendering (cumulative bucket counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// `(upper bound in µs, observations ≤ bound)`, cumulative, in bound order.
    pub cumulative: Vec<(u64, u64)>,
    /// All observations (the `+Inf` bucket); never below the last cumulative count.
    pub count: u64,
    /// Sum of observations in microseconds.
    pub sum_us: u64,
}

impl Histogram {
    /// Record one observation (whole microseconds; a longer one than [`u64::MAX`] µs counts
    /// as that).
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        // The first bound ≥ us; past the last bound the observation is only in `+Inf`.
        let i = BUCKETS_US.partition_point(|&b| b < us);
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// A snapshot with cumulative buckets.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut acc = 0;
        let cumulative = BUCKETS_US
            .iter()
            .zip(&self.buckets)
            .map(|(&b, c)| {
                acc += c.load(Ordering::Relaxed);
                (b, acc)
            })
            .collect();
        // Count read last: never below the cumulative buckets read before it.
        let count = self.count.load(Ordering::Relaxed).max(acc);
        HistogramSnapshot {
            cumulative,
            count,
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

impl HistogramSnapshot {
    /// `(upper bound in µs, observations in this bucket only)`, in bound order: the
    /// non-cumulative form that encoders such as `prometheus-client` accumulate themselves.
    /// Observations above the last bound are in [`HistogramSnapshot::count`] only.
    pub fn bucket_counts(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut previous = 0;
        self.cumulative.iter().map(move |&(bound, n)| {
            let own = n.saturating_sub(previous);
            previous = n;
            (bound, own)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_increasing_from_ten_microseconds_to_ten_seconds() {
        assert!(BUCKETS_US.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(BUCKETS_US.first(), Some(&10));
        assert_eq!(BUCKETS_US.last(), Some(&10_000_000));
    }

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them_and_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(400));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.cumulative[0], (10, 0));
        assert_eq!(s.cumulative[4], (250, 0));
        assert_eq!(s.cumulative[5], (500, 1));
        assert_eq!(s.cumulative[8], (5_000, 2));
        assert_eq!(s.cumulative.last(), Some(&(10_000_000, 2)));
        assert_eq!(s.sum_us, 400 + 3_000 + 60_000_000);
    }

    #[test]
    fn a_bound_itself_belongs_to_its_bucket() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_micros(11));
        h.observe(Duration::from_secs(10));
        h.observe(Duration::from_nanos(10_999)); // whole microseconds: 10 µs
        let s = h.snapshot();
        assert_eq!(s.cumulative[0], (10, 2));
        assert_eq!(s.cumulative[1], (25, 3));
        assert_eq!(s.cumulative.last(), Some(&(10_000_000, 4)));
        assert_eq!(s.count, 4);
    }

    /// Issue 16 item 5: a mesh request at its ~170 µs p50 is resolved by the buckets, between
    /// 100 µs and 250 µs, not lumped into the first one.
    #[test]
    fn a_170_microsecond_observation_does_not_land_in_the_first_bucket() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(170));
        let s = h.snapshot();
        assert_eq!(s.cumulative[0], (10, 0), "first bucket");
        assert_eq!(s.cumulative[3], (100, 0));
        assert_eq!(s.cumulative[4], (250, 1));
        let own: Vec<u64> = s.bucket_counts().map(|(_, n)| n).collect();
        assert_eq!(own.iter().sum::<u64>(), 1);
        assert_eq!(own[4], 1, "only the 100–250 µs bucket holds it: {own:?}");
    }

    #[test]
    fn bucket_counts_undo_the_accumulation_and_leave_overflow_to_the_count() {
        let h = Histogram::default();
        for us in [5, 20, 20, 700, 20_000_000] {
            h.observe(Duration::from_micros(us));
        }
        let s = h.snapshot();
        let own: Vec<(u64, u64)> = s.bucket_counts().filter(|(_, n)| *n > 0).collect();
        assert_eq!(own, vec![(10, 1), (25, 2), (1_000, 1)]);
        assert_eq!(s.count, 5);
    }
}
