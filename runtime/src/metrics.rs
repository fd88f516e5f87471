//! Lock-free latency histograms with fixed Prometheus buckets (the host's `/metrics`, issue 8
//! item 4). Observing is a few relaxed atomic adds, so the hot paths can record every call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds (0.5 ms … 10 s; `+Inf` is implicit).
pub const BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
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
    /// All observations (the `+Inf` bucket).
    pub count: u64,
    /// Sum of observations in microseconds.
    pub sum_us: u64,
}

impl Histogram {
    /// Record one observation.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        if let Some(i) = BUCKETS_US.iter().position(|&b| us <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them_and_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(400));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.cumulative[0], (500, 1));
        assert_eq!(s.cumulative[3], (5_000, 2));
        assert_eq!(s.cumulative.last(), Some(&(10_000_000, 2)));
        assert_eq!(s.sum_us, 400 + 3_000 + 60_000_000);
    }
}
