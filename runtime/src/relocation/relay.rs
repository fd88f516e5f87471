//! Relayed records on the target (issue 17 items 4, 5 and 7; wire §9 "Session seal과 source
//! relay", `relocationCutover`): the `relocationData` (31) records a source relays — held
//! arrivals before the cutover, followed arrivals after it — staged by `relayOrdinal` and
//! applied exactly once, in ordinal order. Pure.
//!
//! - Before the switch every record is staged; a record whose ordinal is staged already is a
//!   retransmission and replaces it (a resent batch replaces the partial one: the same
//!   ordinals, the same frames).
//! - The cutover (34) names the batch it closes: `boundaryRecordCount` records, ordinals
//!   `0..count`, and the CRC-32C of [`boundary_crc`] over them. A mismatch counts as no cutover
//!   (the target waits for a resend or its fallback).
//! - At the switch the staged records go out in ordinal order up to the first gap; from then on
//!   each record is applied once, in order: a duplicate (ordinal below the next one) is
//!   dropped, an early one waits for the gap to fill.

use std::collections::BTreeMap;

use bytes::Bytes;
use zlink_protocol::crc::Crc32c;

/// The boundary checksum of a relay batch (`boundaryChecksumCrc32c`; ours, pinned by a golden
/// value in the tests and documented in `docs/protocol.md`): CRC-32C over, for each record in
/// ordinal order, its frame count as one byte, then each frame as a big-endian u32 length and
/// its bytes.
pub fn boundary_crc<'a>(records: impl IntoIterator<Item = &'a [Bytes]>) -> u32 {
    let mut crc = Crc32c::new();
    for frames in records {
        crc.update(&[u8::try_from(frames.len()).unwrap_or(u8::MAX)]);
        for f in frames {
            crc.update(&u32::try_from(f.len()).unwrap_or(u32::MAX).to_be_bytes());
            crc.update(f);
        }
    }
    crc.finish()
}

/// What a cutover said about the staged batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// Every record `0..count` is staged and the checksum matches.
    Matches,
    /// Some record below the count is missing (not all of the batch arrived).
    Incomplete,
    /// All are there but the checksum differs.
    ChecksumMismatch,
}

/// The relay records of one unit on the target (see the module docs).
#[derive(Debug, Default)]
pub struct RelayStaging {
    staged: BTreeMap<u64, Vec<Bytes>>,
    /// After the switch: the next ordinal to apply.
    next: Option<u64>,
}

impl RelayStaging {
    /// Nothing staged.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the switch happened.
    pub fn switched(&self) -> bool {
        self.next.is_some()
    }

    /// Stage (before the switch) or apply (after it) record `ordinal`. Returns the records
    /// now ready to run, in order (always empty before the switch).
    pub fn accept(&mut self, ordinal: u64, frames: Vec<Bytes>) -> Vec<Vec<Bytes>> {
        match self.next {
            None => {
                self.staged.insert(ordinal, frames);
                Vec::new()
            }
            Some(next) if ordinal < next => Vec::new(),
            Some(_) => {
                self.staged.entry(ordinal).or_insert(frames);
                self.drain_ready()
            }
        }
    }

    /// Check the cutover's boundary against the staged records.
    pub fn boundary(&self, count: u64, crc32c: u32) -> Boundary {
        let mut batch = Vec::new();
        for ord in 0..count {
            match self.staged.get(&ord) {
                Some(f) => batch.push(f.as_slice()),
                None => return Boundary::Incomplete,
            }
        }
        if boundary_crc(batch) == crc32c {
            Boundary::Matches
        } else {
            Boundary::ChecksumMismatch
        }
    }

    /// The switch: the staged records from ordinal 0 in order up to the first gap; later
    /// records apply through [`RelayStaging::accept`].
    pub fn switch(&mut self) -> Vec<Vec<Bytes>> {
        if self.next.is_some() {
            return Vec::new();
        }
        self.next = Some(0);
        self.drain_ready()
    }

    /// Records staged but not applied (a gap before them).
    pub fn waiting(&self) -> usize {
        self.staged.len()
    }

    fn drain_ready(&mut self) -> Vec<Vec<Bytes>> {
        let mut out = Vec::new();
        let Some(mut next) = self.next else {
            return out;
        };
        while let Some(f) = self.staged.remove(&next) {
            out.push(f);
            next += 1;
        }
        self.next = Some(next);
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rec(tag: &str) -> Vec<Bytes> {
        vec![
            Bytes::from(format!("h-{tag}")),
            Bytes::from(format!("p-{tag}")),
        ]
    }

    /// Golden value of the boundary checksum (docs/protocol.md, "Cutover boundary checksum"):
    /// two records, `["a"]` and `["bc", ""]`.
    #[test]
    fn boundary_crc_golden_value() {
        let r1 = vec![Bytes::from_static(b"a")];
        let r2 = vec![Bytes::from_static(b"bc"), Bytes::new()];
        // Input bytes: 01 00000001 61 | 02 00000002 6263 00000000
        let mut input = Vec::new();
        input.extend_from_slice(&[1, 0, 0, 0, 1, b'a']);
        input.extend_from_slice(&[2, 0, 0, 0, 2, b'b', b'c', 0, 0, 0, 0]);
        let mut c = Crc32c::new();
        c.update(&input);
        let want = c.finish();
        assert_eq!(boundary_crc([r1.as_slice(), r2.as_slice()]), want);
        assert_eq!(
            want, 0x1DE1_01C2,
            "the pinned golden value changed: {want:#010x}"
        );
        assert_eq!(boundary_crc(std::iter::empty::<&[Bytes]>()), 0);
    }

    #[test]
    fn staged_then_switched_in_ordinal_order_with_gaps_waiting() {
        let mut s = RelayStaging::new();
        assert!(s.accept(1, rec("1")).is_empty());
        assert!(s.accept(0, rec("0")).is_empty());
        assert!(s.accept(3, rec("3")).is_empty());
        assert_eq!(
            s.boundary(2, boundary_crc([rec("0").as_slice(), rec("1").as_slice()])),
            Boundary::Matches
        );
        assert_eq!(s.boundary(3, 0), Boundary::Incomplete);
        assert_eq!(s.boundary(2, 7), Boundary::ChecksumMismatch);
        assert_eq!(s.switch(), vec![rec("0"), rec("1")]);
        assert_eq!(s.waiting(), 1);
        assert!(s.switch().is_empty(), "a second switch applies nothing");
        assert_eq!(s.accept(2, rec("2")), vec![rec("2"), rec("3")]);
        assert!(
            s.accept(1, rec("1")).is_empty(),
            "a duplicate after the switch is dropped"
        );
        assert!(s.accept(3, rec("3")).is_empty());
        assert_eq!(s.accept(4, rec("4")), vec![rec("4")]);
    }

    #[test]
    fn a_resent_batch_replaces_the_staged_one() {
        let mut s = RelayStaging::new();
        s.accept(0, rec("old"));
        s.accept(0, rec("0"));
        s.accept(1, rec("1"));
        assert_eq!(s.switch(), vec![rec("0"), rec("1")]);
    }

    /// Property: whatever order and duplication the records arrive in, around a switch at any
    /// point, each ordinal is applied exactly once and in ascending order.
    #[test]
    fn any_arrival_order_applies_each_once_in_order() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rand = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..500 {
            let n = 1 + rand(30);
            let mut arrivals: Vec<u64> = (0..n).collect();
            for _ in 0..rand(10) {
                arrivals.push(rand(n));
            }
            for i in (1..arrivals.len()).rev() {
                let j = usize::try_from(rand(i as u64 + 1)).unwrap();
                arrivals.swap(i, j);
            }
            let switch_at = usize::try_from(rand(arrivals.len() as u64 + 1)).unwrap();
            let mut s = RelayStaging::new();
            let mut applied = Vec::new();
            for (i, ord) in arrivals.iter().enumerate() {
                if i == switch_at {
                    applied.extend(s.switch());
                }
                applied.extend(s.accept(*ord, rec(&ord.to_string())));
            }
            applied.extend(s.switch());
            let want: Vec<Vec<Bytes>> = (0..n).map(|o| rec(&o.to_string())).collect();
            assert_eq!(applied, want);
        }
    }
}
