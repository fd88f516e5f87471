//! Per-source sequence tracking (issue "node host" §6: the load generator "reports per-ID gaps
//! and duplicates, not just totals").
//!
//! Every application message of the reference application carries `(source, seq)`: `source`
//! names one sending stream (a load-generator caller on one node, or a room broadcasting to its
//! members) and `seq` counts that stream's messages **to this one receiver**, from 0. The
//! receiver records them in a [`SeqTracker`]; a report then tells, per source, which sequence
//! numbers are missing and which arrived more than once, so a test can prove that no message
//! was lost or duplicated for any single ID.
//!
//! Pure: no clock, no I/O. The record per source is compact: the next expected number (every
//! number below it was received), plus the set of numbers received above it (out of order).
//! In-order traffic therefore keeps the set empty; concurrent senders keep it small.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// At most this many duplicate numbers and gap ranges are listed per source in a report (the
/// counts are always exact).
pub const REPORT_SAMPLE_LIMIT: usize = 16;

/// What one [`SeqTracker::record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receipt {
    /// The first arrival of this number, in order (it was the next expected one).
    InOrder,
    /// The first arrival of this number, ahead of a missing lower one (or filling a hole).
    OutOfOrder,
    /// This number was received before.
    Duplicate,
}

/// The compact record of one source's sequence numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceSeqs {
    /// Every number below this was received at least once.
    next: u64,
    /// Numbers above `next` received so far (never contains `next`).
    ahead: BTreeSet<u64>,
    /// Arrivals of a number already received.
    duplicates: u64,
    /// The first few duplicated numbers, for the report.
    duplicate_samples: Vec<u64>,
    /// First arrivals that were not the next expected number.
    out_of_order: u64,
}

impl SourceSeqs {
    /// Record the arrival of `seq`.
    pub fn record(&mut self, seq: u64) -> Receipt {
        if seq < self.next || self.ahead.contains(&seq) {
            self.duplicates += 1;
            if self.duplicate_samples.len() < REPORT_SAMPLE_LIMIT {
                self.duplicate_samples.push(seq);
            }
            return Receipt::Duplicate;
        }
        if seq == self.next {
            self.next += 1;
            // Close the hole: pull consecutive numbers out of the out-of-order set.
            while self.ahead.remove(&self.next) {
                self.next += 1;
            }
            return Receipt::InOrder;
        }
        self.ahead.insert(seq);
        self.out_of_order += 1;
        Receipt::OutOfOrder
    }

    /// Distinct numbers received.
    pub fn distinct(&self) -> u64 {
        self.next + self.ahead.len() as u64
    }

    /// One past the highest number received (0: none).
    pub fn end(&self) -> u64 {
        self.ahead.last().map_or(self.next, |h| h + 1)
    }

    /// Every missing range below [`Self::end`], uncapped (a receiver whose state was reset
    /// shows its lost prefix as one range).
    pub fn holes(&self) -> Vec<SeqRange> {
        let mut out = Vec::new();
        let mut from = self.next;
        for &got in &self.ahead {
            if from < got {
                out.push(SeqRange {
                    first: from,
                    last: got - 1,
                });
            }
            from = got + 1;
        }
        out
    }

    /// The report of this source, checked against `expected` messages numbered `0..expected`
    /// (`None`: no expectation, so only holes below the highest number received are gaps).
    pub fn report(&self, source: &str, expected: Option<u64>) -> SourceReport {
        let highest = self.ahead.last().copied().or(self.next.checked_sub(1));
        let end = expected.unwrap_or_else(|| highest.map_or(0, |h| h + 1));
        // Missing numbers in 0..end, as ranges: the holes between `next` and each received
        // number above it, then the tail up to `end`.
        let mut missing = 0;
        let mut gaps = Vec::new();
        let mut from = self.next;
        for &got in self.ahead.iter().chain(std::iter::once(&u64::MAX)) {
            let to = got.min(end);
            if from < to {
                missing += to - from;
                if gaps.len() < REPORT_SAMPLE_LIMIT {
                    gaps.push(SeqRange {
                        first: from,
                        last: to - 1,
                    });
                }
            }
            if got >= end {
                break;
            }
            from = got + 1;
        }
        let unexpected = self.ahead.range(end..).count() as u64 + self.next.saturating_sub(end);
        SourceReport {
            source: source.to_owned(),
            distinct: self.distinct(),
            expected,
            missing,
            gaps,
            duplicates: self.duplicates,
            duplicate_samples: self.duplicate_samples.clone(),
            unexpected,
            out_of_order: self.out_of_order,
        }
    }
}

/// An inclusive range of missing sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqRange {
    /// The first missing number.
    pub first: u64,
    /// The last missing number (inclusive).
    pub last: u64,
}

/// What one receiver got from one source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceReport {
    /// The source stream.
    pub source: String,
    /// Distinct sequence numbers received.
    pub distinct: u64,
    /// How many messages (`0..expected`) the check expected, when it was told.
    pub expected: Option<u64>,
    /// Numbers below the expected count (or below the highest received) never received.
    pub missing: u64,
    /// The first [`REPORT_SAMPLE_LIMIT`] missing ranges.
    pub gaps: Vec<SeqRange>,
    /// Arrivals of an already received number.
    pub duplicates: u64,
    /// The first [`REPORT_SAMPLE_LIMIT`] duplicated numbers.
    pub duplicate_samples: Vec<u64>,
    /// Numbers received at or above the expected count (never sent, as far as the check knows).
    pub unexpected: u64,
    /// First arrivals that overtook a lower number (concurrent senders; not an error).
    pub out_of_order: u64,
}

impl SourceReport {
    /// No gap, no duplicate and nothing unexpected.
    pub fn is_clean(&self) -> bool {
        self.missing == 0 && self.duplicates == 0 && self.unexpected == 0
    }
}

/// The per-source sequence records of one receiver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqTracker {
    sources: BTreeMap<String, SourceSeqs>,
}

impl SeqTracker {
    /// Nothing received.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record `seq` from `source`.
    pub fn record(&mut self, source: &str, seq: u64) -> Receipt {
        if let Some(s) = self.sources.get_mut(source) {
            return s.record(seq);
        }
        self.sources
            .entry(source.to_owned())
            .or_default()
            .record(seq)
    }

    /// The record of one source, if it sent anything.
    pub fn source(&self, source: &str) -> Option<&SourceSeqs> {
        self.sources.get(source)
    }

    /// Distinct messages received over all sources.
    pub fn distinct(&self) -> u64 {
        self.sources.values().map(SourceSeqs::distinct).sum()
    }

    /// Duplicate arrivals over all sources.
    pub fn duplicates(&self) -> u64 {
        self.sources.values().map(|s| s.duplicates).sum()
    }

    /// First arrivals ahead of a missing lower number, over all sources (reordering, reported
    /// only: pipelined one-way traffic may reorder across a move, wire §10).
    pub fn out_of_order(&self) -> u64 {
        self.sources.values().map(|s| s.out_of_order).sum()
    }

    /// One report per source received from, without expectations (gaps are holes below the
    /// highest number received).
    pub fn report(&self) -> Vec<SourceReport> {
        self.sources
            .iter()
            .map(|(name, s)| s.report(name, None))
            .collect()
    }

    /// One report per source, checked against `expected` (source → message count): a source
    /// expected but never heard from reports all its messages missing; a source heard from but
    /// not expected reports everything it sent as unexpected.
    pub fn check(&self, expected: &BTreeMap<String, u64>) -> Vec<SourceReport> {
        let empty = SourceSeqs::default();
        let names: BTreeSet<&String> = self.sources.keys().chain(expected.keys()).collect();
        names
            .into_iter()
            .map(|name| {
                let seqs = self.sources.get(name).unwrap_or(&empty);
                seqs.report(name, Some(expected.get(name).copied().unwrap_or(0)))
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn expect(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn in_order_traffic_is_clean_and_keeps_no_out_of_order_set() {
        let mut t = SeqTracker::new();
        for seq in 0..100 {
            assert_eq!(t.record("a", seq), Receipt::InOrder);
        }
        let s = &t.sources["a"];
        assert_eq!((s.next, s.ahead.len()), (100, 0), "compact: one counter");
        let r = t.check(&expect(&[("a", 100)]));
        assert_eq!(r.len(), 1);
        assert!(r[0].is_clean(), "{r:?}");
        assert_eq!(r[0].distinct, 100);
    }

    #[test]
    fn out_of_order_arrivals_fill_in_without_a_gap() {
        let mut t = SeqTracker::new();
        for seq in [3, 1, 0, 2, 5, 4] {
            assert_ne!(t.record("a", seq), Receipt::Duplicate);
        }
        let s = &t.sources["a"];
        assert_eq!((s.next, s.ahead.len()), (6, 0), "holes closed");
        let r = &t.check(&expect(&[("a", 6)]))[0];
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.out_of_order, 3, "3, 1 and 5 overtook a lower number");
    }

    /// §6 "per-ID gaps": an injected gap (seq 4 never sent) is found, named and counted.
    #[test]
    fn an_injected_gap_is_reported_with_its_range() {
        let mut t = SeqTracker::new();
        for seq in (0..10).filter(|s| *s != 4) {
            t.record("node-1", seq);
        }
        // A second source with a missing tail.
        for seq in 0..7 {
            t.record("room-3", seq);
        }
        let r = t.check(&expect(&[("node-1", 10), ("room-3", 9)]));
        assert_eq!(r[0].source, "node-1");
        assert_eq!(r[0].missing, 1);
        assert_eq!(r[0].gaps, vec![SeqRange { first: 4, last: 4 }]);
        assert_eq!(r[0].duplicates, 0);
        assert!(!r[0].is_clean());
        assert_eq!(r[1].missing, 2, "tail 7..=8 missing");
        assert_eq!(r[1].gaps, vec![SeqRange { first: 7, last: 8 }]);
        // Without an expectation the hole below the highest number is still a gap.
        let plain = t.report();
        assert_eq!(plain[0].missing, 1);
        assert_eq!(
            plain[1].missing, 0,
            "a tail is invisible without expectations"
        );
    }

    /// §6 "per-ID duplicates": an injected duplicate (seq 2 twice, and seq 7 after the hole
    /// closed) is counted and named, and does not count as delivered twice.
    #[test]
    fn an_injected_duplicate_is_reported_and_not_counted_as_delivered() {
        let mut t = SeqTracker::new();
        for seq in [0, 1, 2, 2, 3, 7, 7, 4, 5, 6, 7] {
            t.record("node-0", seq);
        }
        let r = &t.check(&expect(&[("node-0", 8)]))[0];
        assert_eq!(r.duplicates, 3);
        assert_eq!(r.duplicate_samples, vec![2, 7, 7]);
        assert_eq!(r.distinct, 8);
        assert_eq!(r.missing, 0);
        assert!(!r.is_clean());
        assert_eq!(t.duplicates(), 3);
        assert_eq!(t.distinct(), 8);
    }

    #[test]
    fn silent_and_unexpected_sources_are_reported() {
        let mut t = SeqTracker::new();
        t.record("stranger", 0);
        t.record("a", 0);
        t.record("a", 5);
        let r = t.check(&expect(&[("a", 3), ("silent", 2)]));
        let by = |n: &str| r.iter().find(|x| x.source == n).cloned().expect(n);
        assert_eq!(by("a").missing, 2);
        assert_eq!(by("a").unexpected, 1, "seq 5 was never sent");
        assert_eq!(by("silent").missing, 2);
        assert_eq!(by("silent").gaps, vec![SeqRange { first: 0, last: 1 }]);
        assert_eq!(by("stranger").unexpected, 1);
    }

    #[test]
    fn report_samples_are_bounded_but_counts_are_exact() {
        let mut t = SeqTracker::new();
        // Every other number: 500 one-number gaps.
        for seq in (0..1000).step_by(2) {
            t.record("a", seq);
        }
        for _ in 0..40 {
            t.record("a", 0);
        }
        let r = &t.check(&expect(&[("a", 1000)]))[0];
        assert_eq!(r.missing, 500);
        assert_eq!(r.gaps.len(), REPORT_SAMPLE_LIMIT);
        assert_eq!(r.duplicates, 40);
        assert_eq!(r.duplicate_samples.len(), REPORT_SAMPLE_LIMIT);
    }

    #[test]
    fn the_tracker_round_trips_through_json() {
        let mut t = SeqTracker::new();
        for seq in [0, 2, 2, 9] {
            t.record("a", seq);
        }
        let back: SeqTracker = serde_json::from_slice(&serde_json::to_vec(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }
}
