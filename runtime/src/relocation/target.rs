//! The target side of a direct transfer (issue 17 item 5; wire "Relocation manifest와 direct
//! chunk transfer"): assembling one object's `relocation-envelope-v1` payload from its
//! `relocationState` (52) chunks against the manifest its `relocationPrepare` (40) declared.
//! Pure: bytes in, a verdict out.
//!
//! - Chunks are copied on arrival, in ordinal order from 0. A gap, a duplicate, an ordinal at
//!   or past the declared count, or any chunk after the attempt finished is `chunkOrdinal`.
//! - More bytes than the declared total is `lengthMismatch` (checked before copying, so a
//!   lying sender cannot make the target buffer more than it declared); a short total at the
//!   last chunk is `lengthMismatch` too.
//! - A CRC-32C (Castagnoli, wire "CRC-32C 규약") of the assembled bytes other than the declared
//!   one is `checksumMismatch`.
//! - A failure is final for the attempt: no partial restore, no transparent retry. The shell
//!   answers the Prepare with `relocationFailed` (53) and drops the partial buffer.
//!
//! The declared total is not allocated up front: the buffer grows with the bytes that arrive
//! (at most the declared total), so a manifest alone costs nothing.

use zlink_protocol::crc::Crc32c;
use zlink_protocol::generated::RelocationFailureReason;

/// The payload a Prepare declared for one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Manifest {
    /// `payloadTotalLength`.
    pub total_length: u64,
    /// `payloadChunkCount`.
    pub chunk_count: u32,
    /// `payloadChecksumCrc32c`.
    pub crc32c: u32,
}

/// What one accepted chunk did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// More chunks are expected.
    More,
    /// The payload is complete and verified.
    Complete(Vec<u8>),
}

#[derive(Debug)]
enum State {
    Receiving {
        next: u32,
        crc: Crc32c,
        buf: Vec<u8>,
    },
    Finished,
}

/// One object's payload being assembled (see the module docs).
#[derive(Debug)]
pub struct Assembly {
    manifest: Manifest,
    state: State,
}

impl Assembly {
    /// An assembly for `manifest`.
    ///
    /// # Errors
    /// `lengthMismatch` for a manifest that cannot be met: no chunk for a non-empty payload, or
    /// chunks for an empty one.
    pub fn new(manifest: Manifest) -> Result<Self, RelocationFailureReason> {
        if (manifest.chunk_count == 0) != (manifest.total_length == 0) {
            return Err(RelocationFailureReason::LengthMismatch);
        }
        Ok(Self {
            manifest,
            state: State::Receiving {
                next: 0,
                crc: Crc32c::new(),
                buf: Vec::new(),
            },
        })
    }

    /// The declared manifest.
    pub fn manifest(&self) -> Manifest {
        self.manifest
    }

    /// Whether the attempt is finished (complete or failed).
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Finished)
    }

    /// For an empty payload (no chunk declared): the complete, empty payload, verified against
    /// the declared checksum.
    ///
    /// # Errors
    /// `chunkOrdinal` when chunks were declared or the attempt finished; `checksumMismatch`.
    pub fn complete_empty(&mut self) -> Result<Vec<u8>, RelocationFailureReason> {
        match &self.state {
            State::Receiving { next: 0, .. } if self.manifest.chunk_count == 0 => {
                self.state = State::Finished;
                if Crc32c::new().finish() == self.manifest.crc32c {
                    Ok(Vec::new())
                } else {
                    Err(RelocationFailureReason::ChecksumMismatch)
                }
            }
            State::Receiving { .. } | State::Finished => {
                self.state = State::Finished;
                Err(RelocationFailureReason::ChunkOrdinal)
            }
        }
    }

    /// Take chunk `ordinal` with `bytes`.
    ///
    /// # Errors
    /// `chunkOrdinal`, `lengthMismatch` or `checksumMismatch` (see the module docs); the
    /// attempt is finished after any error.
    pub fn push(
        &mut self,
        ordinal: u32,
        bytes: &[u8],
    ) -> Result<Progress, RelocationFailureReason> {
        let m = self.manifest;
        let state = std::mem::replace(&mut self.state, State::Finished);
        let State::Receiving {
            next,
            mut crc,
            mut buf,
        } = state
        else {
            return Err(RelocationFailureReason::ChunkOrdinal);
        };
        if ordinal != next || ordinal >= m.chunk_count {
            return Err(RelocationFailureReason::ChunkOrdinal);
        }
        let len = u64::try_from(buf.len()).unwrap_or(u64::MAX);
        let add = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if len.saturating_add(add) > m.total_length {
            return Err(RelocationFailureReason::LengthMismatch);
        }
        buf.extend_from_slice(bytes);
        crc.update(bytes);
        if ordinal + 1 < m.chunk_count {
            self.state = State::Receiving {
                next: ordinal + 1,
                crc,
                buf,
            };
            return Ok(Progress::More);
        }
        if u64::try_from(buf.len()).unwrap_or(u64::MAX) != m.total_length {
            return Err(RelocationFailureReason::LengthMismatch);
        }
        if crc.finish() != m.crc32c {
            return Err(RelocationFailureReason::ChecksumMismatch);
        }
        Ok(Progress::Complete(buf))
    }
}

/// Why a target gave a unit up after Ready (wire §9 "Target CAS와 남은 Store 역할").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandon {
    /// Another owner or generation holds the authority: a stale relocation.
    Stale,
    /// The store did not confirm the commit by the restore deadline (`location_update_failed`).
    LocationUpdateFailed,
}

/// What the target's commit heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitEvent {
    /// A cutover (34) arrived; the staging's verdict on its boundary.
    Cutover(super::relay::Boundary),
    /// Time passed.
    Tick,
    /// The CAS committed.
    CasOk,
    /// The CAS was refused: the fence no longer matches.
    CasStale,
    /// The CAS may or may not have happened.
    CasAmbiguous,
    /// The CAS did not happen (the store did not answer); it may be retried.
    CasRetryable,
    /// A re-read found this target owning the unit.
    ReadSelf,
    /// A re-read found another owner or generation.
    ReadOther,
    /// A re-read did not answer.
    ReadFailed,
}

/// What the target's shell does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitAction {
    /// Run the one `commit_aggregate` / transfer CAS.
    StartCas,
    /// Re-read the authority after an ambiguous answer.
    Reread,
    /// Open the unit here: saved work, staged relays, temporary-queue arrivals, then dispatch.
    Switch,
    /// Remove everything prepared; revive nothing.
    Remove(Abandon),
    /// Log `cutover_timeout` (the fallback started the CAS).
    WarnCutoverTimeout,
    /// Log `late_cutover` (nothing changes).
    WarnLateCutover,
    /// Log a cutover whose boundary did not match (counted as no cutover).
    WarnBoundaryMismatch,
}

/// How long a failed CAS waits before the next try.
pub const CAS_RETRY_MS: u64 = 100;

/// The target's commit of one unit, from Ready to the switch (wire §9–§10): the CAS runs on a
/// matching cutover or `cutover_wait_ms` after Ready, is retried until `deadline_ms`, re-reads
/// after an ambiguous answer, and is never undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetCommit {
    /// Ready was sent at `ready_at_ms`; waiting for the cutover.
    AwaitingCutover {
        /// When Ready was sent.
        ready_at_ms: u64,
    },
    /// The CAS runs.
    Committing {
        /// A CAS or re-read is in flight.
        in_flight: bool,
        /// When the next try may start.
        next_try_ms: u64,
    },
    /// This target owns the unit.
    Committed,
    /// Given up.
    Abandoned(Abandon),
}

impl TargetCommit {
    /// Ready sent at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self::AwaitingCutover {
            ready_at_ms: now_ms,
        }
    }

    /// Apply `event` at `now_ms`, with the cutover wait and the restore deadline.
    pub fn step(
        &mut self,
        event: CommitEvent,
        now_ms: u64,
        cutover_wait_ms: u64,
        deadline_ms: u64,
    ) -> Vec<CommitAction> {
        use super::relay::Boundary as B;
        use CommitAction as A;
        use CommitEvent as E;
        let committing = Self::Committing {
            in_flight: true,
            next_try_ms: now_ms,
        };
        match (self.clone(), event) {
            (Self::AwaitingCutover { .. }, E::Cutover(B::Matches)) => {
                *self = committing;
                vec![A::StartCas]
            }
            (Self::AwaitingCutover { .. }, E::Cutover(B::Incomplete | B::ChecksumMismatch)) => {
                vec![A::WarnBoundaryMismatch]
            }
            (Self::AwaitingCutover { ready_at_ms }, E::Tick) => {
                if now_ms >= ready_at_ms.saturating_add(cutover_wait_ms) {
                    *self = committing;
                    vec![A::WarnCutoverTimeout, A::StartCas]
                } else {
                    Vec::new()
                }
            }
            (
                Self::AwaitingCutover { .. },
                E::CasOk
                | E::CasStale
                | E::CasAmbiguous
                | E::CasRetryable
                | E::ReadSelf
                | E::ReadOther
                | E::ReadFailed,
            ) => Vec::new(),
            (Self::Committing { .. }, E::CasOk | E::ReadSelf) => {
                *self = Self::Committed;
                vec![A::Switch]
            }
            (Self::Committing { .. }, E::CasStale | E::ReadOther) => {
                *self = Self::Abandoned(Abandon::Stale);
                vec![A::Remove(Abandon::Stale)]
            }
            (Self::Committing { .. }, E::CasAmbiguous) => vec![A::Reread],
            (Self::Committing { .. }, E::CasRetryable | E::ReadFailed) => {
                if now_ms >= deadline_ms {
                    *self = Self::Abandoned(Abandon::LocationUpdateFailed);
                    vec![A::Remove(Abandon::LocationUpdateFailed)]
                } else {
                    *self = Self::Committing {
                        in_flight: false,
                        next_try_ms: now_ms.saturating_add(CAS_RETRY_MS),
                    };
                    Vec::new()
                }
            }
            (
                Self::Committing {
                    in_flight,
                    next_try_ms,
                },
                E::Tick,
            ) => {
                if in_flight || now_ms < next_try_ms {
                    Vec::new()
                } else if now_ms >= deadline_ms {
                    *self = Self::Abandoned(Abandon::LocationUpdateFailed);
                    vec![A::Remove(Abandon::LocationUpdateFailed)]
                } else {
                    *self = committing;
                    vec![A::StartCas]
                }
            }
            (Self::Committing { .. } | Self::Committed, E::Cutover(_)) => {
                vec![A::WarnLateCutover]
            }
            (
                Self::Committed,
                E::Tick
                | E::CasOk
                | E::CasStale
                | E::CasAmbiguous
                | E::CasRetryable
                | E::ReadSelf
                | E::ReadOther
                | E::ReadFailed,
            ) => Vec::new(),
            (
                Self::Abandoned(_),
                E::Cutover(_)
                | E::Tick
                | E::CasOk
                | E::CasStale
                | E::CasAmbiguous
                | E::CasRetryable
                | E::ReadSelf
                | E::ReadOther
                | E::ReadFailed,
            ) => Vec::new(),
        }
    }

    /// When the shell should feed a tick next.
    pub fn next_tick_ms(&self, cutover_wait_ms: u64) -> Option<u64> {
        match self {
            Self::AwaitingCutover { ready_at_ms } => {
                Some(ready_at_ms.saturating_add(cutover_wait_ms))
            }
            Self::Committing {
                in_flight: false,
                next_try_ms,
            } => Some(*next_try_ms),
            Self::Committing {
                in_flight: true, ..
            }
            | Self::Committed
            | Self::Abandoned(_) => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use zlink_protocol::crc::crc32c;

    use super::*;

    fn manifest_of(payload: &[u8], chunks: u32) -> Manifest {
        Manifest {
            total_length: payload.len() as u64,
            chunk_count: chunks,
            crc32c: crc32c(payload),
        }
    }

    fn split(payload: &[u8], chunks: usize) -> Vec<&[u8]> {
        let size = payload.len().div_ceil(chunks);
        payload.chunks(size).collect()
    }

    #[test]
    fn chunks_in_order_assemble_the_declared_payload() {
        let payload: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        for chunks in [1usize, 2, 7, 1000] {
            let parts = split(&payload, chunks);
            let mut a = Assembly::new(manifest_of(&payload, parts.len() as u32)).unwrap();
            for (i, p) in parts.iter().enumerate() {
                let got = a.push(i as u32, p).unwrap();
                if i + 1 < parts.len() {
                    assert_eq!(got, Progress::More);
                } else {
                    assert_eq!(got, Progress::Complete(payload.clone()), "{chunks} chunks");
                }
            }
            assert!(a.is_finished());
            assert_eq!(
                a.push(parts.len() as u32, b"x"),
                Err(RelocationFailureReason::ChunkOrdinal)
            );
        }
    }

    /// Every way a chunk stream can break, and the reason it ends with.
    #[test]
    fn each_broken_stream_fails_with_its_reason_and_finishes_the_attempt() {
        let payload = b"abcdefghij".to_vec();
        let m = manifest_of(&payload, 2);
        type Step = (u32, &'static [u8]);
        let cases: [(&str, Vec<Step>, RelocationFailureReason); 7] = [
            (
                "gap",
                vec![(1, b"fghij")],
                RelocationFailureReason::ChunkOrdinal,
            ),
            (
                "duplicate",
                vec![(0, b"abcde"), (0, b"abcde")],
                RelocationFailureReason::ChunkOrdinal,
            ),
            (
                "ordinal past the count",
                vec![(0, b"abcde"), (1, b"fghij"), (2, b"")],
                RelocationFailureReason::ChunkOrdinal,
            ),
            (
                "more bytes than declared",
                vec![(0, b"abcdefghijk")],
                RelocationFailureReason::LengthMismatch,
            ),
            (
                "fewer bytes than declared",
                vec![(0, b"abcde"), (1, b"fghi")],
                RelocationFailureReason::LengthMismatch,
            ),
            (
                "other bytes",
                vec![(0, b"abcde"), (1, b"fghiX")],
                RelocationFailureReason::ChecksumMismatch,
            ),
            (
                "anything after a failure",
                vec![(1, b"fghij"), (0, b"abcde")],
                RelocationFailureReason::ChunkOrdinal,
            ),
        ];
        for (what, steps, want) in cases {
            let mut a = Assembly::new(m).unwrap();
            let mut last = Ok(Progress::More);
            for (ordinal, bytes) in steps {
                last = a.push(ordinal, bytes);
                if last.is_err() {
                    break;
                }
            }
            // ("ordinal past the count": the stream completed, then one more chunk arrived for
            // the finished attempt.)
            assert_eq!(last, Err(want), "{what}");
            assert!(a.is_finished(), "{what}: the attempt is over");
            assert_eq!(
                a.push(0, b"abcde"),
                Err(RelocationFailureReason::ChunkOrdinal),
                "{what}"
            );
        }
    }

    #[test]
    fn an_empty_payload_has_no_chunk_and_a_manifest_that_cannot_be_met_is_refused() {
        let mut a = Assembly::new(manifest_of(b"", 0)).unwrap();
        assert_eq!(a.complete_empty(), Ok(Vec::new()));
        assert_eq!(
            a.complete_empty(),
            Err(RelocationFailureReason::ChunkOrdinal)
        );
        let mut bad_crc = Assembly::new(Manifest {
            total_length: 0,
            chunk_count: 0,
            crc32c: 1,
        })
        .unwrap();
        assert_eq!(
            bad_crc.complete_empty(),
            Err(RelocationFailureReason::ChecksumMismatch)
        );
        for m in [
            Manifest {
                total_length: 5,
                chunk_count: 0,
                crc32c: 0,
            },
            Manifest {
                total_length: 0,
                chunk_count: 1,
                crc32c: 0,
            },
        ] {
            assert_eq!(
                Assembly::new(m).err(),
                Some(RelocationFailureReason::LengthMismatch)
            );
        }
        let mut chunked = Assembly::new(manifest_of(b"abc", 1)).unwrap();
        assert_eq!(
            chunked.complete_empty(),
            Err(RelocationFailureReason::ChunkOrdinal)
        );
    }

    #[test]
    fn a_huge_declared_total_allocates_nothing_up_front() {
        let mut a = Assembly::new(Manifest {
            total_length: u64::MAX,
            chunk_count: u32::MAX,
            crc32c: 0,
        })
        .unwrap();
        assert_eq!(a.push(0, b"tiny"), Ok(Progress::More));
        match &a.state {
            State::Receiving { buf, .. } => assert!(buf.capacity() < 1024, "grows with arrivals"),
            State::Finished => panic!("still receiving"),
        }
    }

    mod commit {
        use super::super::*;
        use crate::relocation::relay::Boundary as B;
        use CommitAction as A;
        use CommitEvent as E;

        const WAIT: u64 = 1_000;
        const DEADLINE: u64 = 10_000;

        fn committing(in_flight: bool, next: u64) -> TargetCommit {
            TargetCommit::Committing {
                in_flight,
                next_try_ms: next,
            }
        }

        /// Every state × event.
        #[test]
        fn table_of_every_state_and_event() {
            let wait = TargetCommit::new(100);
            let all = [
                E::Cutover(B::Matches),
                E::Cutover(B::Incomplete),
                E::Cutover(B::ChecksumMismatch),
                E::Tick,
                E::CasOk,
                E::CasStale,
                E::CasAmbiguous,
                E::CasRetryable,
                E::ReadSelf,
                E::ReadOther,
                E::ReadFailed,
            ];
            let cases: Vec<(TargetCommit, E, u64, TargetCommit, Vec<A>)> = vec![
                (
                    wait.clone(),
                    E::Cutover(B::Matches),
                    200,
                    committing(true, 200),
                    vec![A::StartCas],
                ),
                (
                    wait.clone(),
                    E::Cutover(B::Incomplete),
                    200,
                    wait.clone(),
                    vec![A::WarnBoundaryMismatch],
                ),
                (
                    wait.clone(),
                    E::Cutover(B::ChecksumMismatch),
                    200,
                    wait.clone(),
                    vec![A::WarnBoundaryMismatch],
                ),
                (wait.clone(), E::Tick, 1_099, wait.clone(), vec![]),
                (
                    wait.clone(),
                    E::Tick,
                    1_100,
                    committing(true, 1_100),
                    vec![A::WarnCutoverTimeout, A::StartCas],
                ),
                (wait.clone(), E::CasOk, 200, wait.clone(), vec![]),
                (wait.clone(), E::ReadOther, 200, wait.clone(), vec![]),
                (
                    committing(true, 0),
                    E::CasOk,
                    300,
                    TargetCommit::Committed,
                    vec![A::Switch],
                ),
                (
                    committing(true, 0),
                    E::ReadSelf,
                    300,
                    TargetCommit::Committed,
                    vec![A::Switch],
                ),
                (
                    committing(true, 0),
                    E::CasStale,
                    300,
                    TargetCommit::Abandoned(Abandon::Stale),
                    vec![A::Remove(Abandon::Stale)],
                ),
                (
                    committing(true, 0),
                    E::ReadOther,
                    300,
                    TargetCommit::Abandoned(Abandon::Stale),
                    vec![A::Remove(Abandon::Stale)],
                ),
                (
                    committing(true, 0),
                    E::CasAmbiguous,
                    300,
                    committing(true, 0),
                    vec![A::Reread],
                ),
                (
                    committing(true, 0),
                    E::CasRetryable,
                    300,
                    committing(false, 400),
                    vec![],
                ),
                (
                    committing(true, 0),
                    E::ReadFailed,
                    300,
                    committing(false, 400),
                    vec![],
                ),
                (
                    committing(true, 0),
                    E::CasRetryable,
                    DEADLINE,
                    TargetCommit::Abandoned(Abandon::LocationUpdateFailed),
                    vec![A::Remove(Abandon::LocationUpdateFailed)],
                ),
                (
                    committing(true, 0),
                    E::Tick,
                    300,
                    committing(true, 0),
                    vec![],
                ),
                (
                    committing(false, 400),
                    E::Tick,
                    399,
                    committing(false, 400),
                    vec![],
                ),
                (
                    committing(false, 400),
                    E::Tick,
                    400,
                    committing(true, 400),
                    vec![A::StartCas],
                ),
                (
                    committing(false, 10_000),
                    E::Tick,
                    DEADLINE,
                    TargetCommit::Abandoned(Abandon::LocationUpdateFailed),
                    vec![A::Remove(Abandon::LocationUpdateFailed)],
                ),
                (
                    committing(true, 0),
                    E::Cutover(B::Matches),
                    300,
                    committing(true, 0),
                    vec![A::WarnLateCutover],
                ),
                (
                    TargetCommit::Committed,
                    E::Cutover(B::Matches),
                    300,
                    TargetCommit::Committed,
                    vec![A::WarnLateCutover],
                ),
            ];
            for (from, event, now, to, actions) in cases {
                let mut s = from.clone();
                let got = s.step(event, now, WAIT, DEADLINE);
                assert_eq!((&s, &got), (&to, &actions), "{from:?} + {event:?} at {now}");
            }
            // Terminal states ignore everything but a late cutover's warning.
            for e in all {
                let mut c = TargetCommit::Committed;
                let got = c.step(e, 5, WAIT, DEADLINE);
                assert_eq!(c, TargetCommit::Committed);
                assert_eq!(got.is_empty(), !matches!(e, E::Cutover(_)), "{e:?}");
                let mut a = TargetCommit::Abandoned(Abandon::Stale);
                assert!(a.step(e, 5, WAIT, DEADLINE).is_empty(), "{e:?}");
                assert_eq!(a, TargetCommit::Abandoned(Abandon::Stale));
            }
        }

        #[test]
        fn next_tick() {
            assert_eq!(TargetCommit::new(100).next_tick_ms(WAIT), Some(1_100));
            assert_eq!(committing(false, 7).next_tick_ms(WAIT), Some(7));
            assert_eq!(committing(true, 7).next_tick_ms(WAIT), None);
            assert_eq!(TargetCommit::Committed.next_tick_ms(WAIT), None);
        }
    }
}
