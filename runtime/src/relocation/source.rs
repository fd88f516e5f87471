//! The source side of one unit's move (issue 17 items 4 and 6; wire §9 "Relocation manifest와
//! direct chunk transfer", §10 "Authority와 target-only CAS"): from the submitted Prepare to the
//! unit's outcome. Pure: events and `now` in, actions out; the shell in the object runtime
//! sends the records, reads the authority and restores or drops the captured copies.
//!
//! ```text
//!             Ready                 window over            authority names the target
//! Preparing ─────────► CutoverSent ─────────────► Resolving ───────────────────────────► HandedOver
//!   │  │  epoch lost:      │ epoch lost:             │ target lease dead, row unchanged
//!   │  │  resend all       │ resend relays+cutover   └──────────────────────────────────► RestoredTargetGone
//!   │  └── 53 ──► Failed(reason) (restore)           (still pending at the deadline: report Unresolved once,
//!   └── no answer by the prepare timeout ──► Resolving  keep resolving)
//! ```
//!
//! - The source never writes the store. Only an explicit `relocationFailed` (53) before
//!   `relocationReady` (30) restores at once (wire §9: an indeterminate outcome is irreversible
//!   for the source).
//! - After the window (`RelocationCutoverWaitTimeout` from the cutover submit) it reads the
//!   authority once, then every [`RESOLVE_EVERY_MS`]. It restores only when no commit can
//!   happen any more: the target's lease is dead and the authority row is unchanged (ours, in
//!   `docs/architecture.md`: the alternative loses the object).
//! - A 53 after Ready, a duplicate Ready, and anything after the outcome change nothing.

use zlink_protocol::generated::RelocationFailureReason;

/// How often an unresolved unit re-reads the authority.
pub const RESOLVE_EVERY_MS: u64 = 1_000;

/// The earliest first look at the authority after the cutover submit (it comes one Prepare →
/// Ready round trip after it when that took longer, see [`first_peek_ms`]; then 2×, 4×, …
/// that gap until the window ends): unloaded, most commits land within a millisecond (the
/// cutover's hop and one store write), and a unit handed over early lets a relocation of many
/// units finish without waiting out every window. Until the source sees the handover,
/// arrivals on the old route are relayed as carried work (terminal ledger, 33/46) and no
/// `messageFollow` notice goes out, so the first look is early: 1 ms instead of 2 cut the move
/// of 200 busy Actors, 8 at a time, from 81–103 ms to 53–66 ms (`scripts/bench-relocation`,
/// docs/benchmarks.md). On Redis a look is one round trip; a unit whose commit is not seen at
/// its first look is looked at again after 2×, 4×, … that delay.
pub const FIRST_PEEK_MS: u64 = 1;

/// Timing of one unit (milliseconds of the caller's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceTimings {
    /// How long after the Prepare the source waits for Ready or 53 before it resolves from
    /// the store (the target's restore deadline: it cannot commit later than that).
    pub prepare_timeout_ms: u64,
    /// `RelocationCutoverWaitTimeout`: the retransmission window from the cutover submit.
    pub cutover_wait_ms: u64,
    /// When a still-pending unit is reported `Unresolved` (it keeps resolving).
    pub deadline_ms: u64,
}

/// Where one unit's move stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceUnit {
    /// Prepare and chunks submitted at `since_ms`; waiting for Ready or 53.
    Preparing {
        /// When the Prepare was submitted.
        since_ms: u64,
    },
    /// Ready arrived and the cutover was submitted at `at_ms`.
    CutoverSent {
        /// When the (first) cutover was submitted: the window runs from here.
        at_ms: u64,
        /// When the next early look at the authority is due: a row that names the target
        /// already is a handover (a commit is never undone); anything else waits for the window.
        next_peek_ms: u64,
        /// The gap after that look (twice the first look's delay, doubling after each look).
        peek_gap_ms: u64,
    },
    /// The window ended without a decision: re-reading the authority.
    Resolving {
        /// When the next read is due.
        next_read_ms: u64,
        /// `Unresolved` was reported already.
        reported: bool,
        /// The target declared after Ready that it gave the move up for good (it will never
        /// commit): an unchanged row then restores at once.
        abandoned: Option<RelocationFailureReason>,
    },
    /// The outcome.
    Done(SourceOutcome),
}

/// How a unit's move ended on the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceOutcome {
    /// The target owns it: the copies are dropped.
    HandedOver,
    /// The target refused before Ready: the source restored it.
    Failed(RelocationFailureReason),
    /// The target can no longer commit (lease dead, row unchanged): the source restored it.
    RestoredTargetGone,
}

/// What the authority read by the source says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorityView {
    /// The row names the target as owner.
    Target,
    /// The row still names the source, unchanged since the move began.
    Unchanged {
        /// The target's owner lease is still live (it may still commit).
        target_lease_live: bool,
    },
    /// The row names neither (moved on again, or removed): this copy is not the owner.
    Other,
    /// The store did not answer.
    ReadFailed,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceEvent {
    /// `relocationReady` (30) for this attempt.
    Ready,
    /// `relocationFailed` (53) for this attempt, before Ready.
    Failed(RelocationFailureReason),
    /// `relocationFailed` (53) after Ready: the target gave up for good and will never commit
    /// (ours: it sends this only after a definitive refusal, never after an ambiguous CAS).
    Abandoned(RelocationFailureReason),
    /// The connection epoch to the target was replaced.
    EpochLost,
    /// Time passed (`now` is the argument of [`SourceUnit::step`]).
    Tick,
    /// The result of a [`SourceAction::ReadAuthority`].
    Authority(AuthorityView),
}

/// What the shell does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceAction {
    /// Submit the held relays (if not yet) and the cutover (34).
    SendCutover,
    /// Resend the Prepare and every chunk under the same identity (an epoch lost before Ready).
    ResendPrepare,
    /// Resend every relay copy and a new cutover (an epoch lost inside the window).
    ResendRelaysAndCutover,
    /// Read the unit's authority and feed the answer back.
    ReadAuthority,
    /// Put the captured work, the relay copies and the timers back; the unit serves here.
    Restore,
    /// Drop the copies: the target owns the unit.
    DropCopies,
    /// Report the unit `Unresolved` (resolution goes on).
    ReportUnresolved,
}

/// The first early look after the cutover submit: one Prepare → Ready round trip after it
/// (`round_trip_ms`), at least [`FIRST_PEEK_MS`], at most the window. The commit needs the
/// cutover's hop and the target's store write, so it is rarely seen sooner than a round trip
/// under the same load; a fixed first look at 1 ms read the store 1.4 times per unit while
/// 10,000 idle Actors moved (the round trip: 1.0; `scripts/bench-relocation` prints it).
pub fn first_peek_ms(round_trip_ms: u64, t: &SourceTimings) -> u64 {
    round_trip_ms
        .max(FIRST_PEEK_MS)
        .min(t.cutover_wait_ms.max(FIRST_PEEK_MS))
}

impl SourceUnit {
    /// A unit whose Prepare was submitted at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self::Preparing { since_ms: now_ms }
    }

    /// The outcome, once there is one.
    pub fn outcome(&self) -> Option<SourceOutcome> {
        match self {
            Self::Done(o) => Some(*o),
            Self::Preparing { .. } | Self::CutoverSent { .. } | Self::Resolving { .. } => None,
        }
    }

    /// When the shell should feed a [`SourceEvent::Tick`] next (`None`: only events move it).
    pub fn next_tick_ms(&self, t: &SourceTimings) -> Option<u64> {
        match self {
            Self::Preparing { since_ms } => Some(since_ms.saturating_add(t.prepare_timeout_ms)),
            Self::CutoverSent {
                at_ms,
                next_peek_ms,
                ..
            } => Some((*next_peek_ms).min(at_ms.saturating_add(t.cutover_wait_ms))),
            Self::Resolving { next_read_ms, .. } => Some(*next_read_ms),
            Self::Done(_) => None,
        }
    }

    /// Apply `event` at `now_ms`; returns the actions in order.
    pub fn step(
        &mut self,
        event: SourceEvent,
        now_ms: u64,
        t: &SourceTimings,
    ) -> Vec<SourceAction> {
        use SourceAction as A;
        use SourceEvent as E;
        let resolving = |reported, abandoned| Self::Resolving {
            next_read_ms: now_ms.saturating_add(RESOLVE_EVERY_MS),
            reported,
            abandoned,
        };
        match (self.clone(), event) {
            (Self::Preparing { since_ms }, E::Ready) => {
                let first = first_peek_ms(now_ms.saturating_sub(since_ms), t);
                *self = Self::CutoverSent {
                    at_ms: now_ms,
                    next_peek_ms: now_ms.saturating_add(first),
                    peek_gap_ms: first.saturating_mul(2),
                };
                vec![A::SendCutover]
            }
            // Before Ready an explicit failure restores at once (wire §9).
            (Self::Preparing { .. }, E::Failed(reason) | E::Abandoned(reason)) => {
                *self = Self::Done(SourceOutcome::Failed(reason));
                vec![A::Restore]
            }
            (Self::Preparing { .. }, E::EpochLost) => vec![A::ResendPrepare],
            (Self::Preparing { since_ms }, E::Tick) => {
                if now_ms >= since_ms.saturating_add(t.prepare_timeout_ms) {
                    // No Ready and no 53: resolve from the store, as after a window.
                    *self = resolving(false, None);
                    vec![A::ReadAuthority]
                } else {
                    Vec::new()
                }
            }
            (Self::Preparing { .. }, E::Authority(_)) => Vec::new(),
            (Self::CutoverSent { at_ms, .. }, E::EpochLost) => {
                if now_ms < at_ms.saturating_add(t.cutover_wait_ms) {
                    vec![A::ResendRelaysAndCutover]
                } else {
                    Vec::new()
                }
            }
            (
                Self::CutoverSent {
                    at_ms,
                    next_peek_ms,
                    peek_gap_ms,
                },
                E::Tick,
            ) => {
                if now_ms >= at_ms.saturating_add(t.cutover_wait_ms) {
                    *self = resolving(false, None);
                    vec![A::ReadAuthority]
                } else if now_ms >= next_peek_ms {
                    *self = Self::CutoverSent {
                        at_ms,
                        next_peek_ms: now_ms.saturating_add(peek_gap_ms),
                        peek_gap_ms: peek_gap_ms.saturating_mul(2),
                    };
                    vec![A::ReadAuthority]
                } else {
                    Vec::new()
                }
            }
            // An early look that finds the commit: handed over (never undone).
            (
                Self::CutoverSent { .. },
                E::Authority(AuthorityView::Target | AuthorityView::Other),
            ) => {
                *self = Self::Done(SourceOutcome::HandedOver);
                vec![A::DropCopies]
            }
            // Not committed yet: only the window's end may resolve otherwise.
            (
                Self::CutoverSent { .. },
                E::Authority(AuthorityView::Unchanged { .. } | AuthorityView::ReadFailed),
            ) => Vec::new(),
            (Self::CutoverSent { .. }, E::Abandoned(reason)) => {
                *self = resolving(false, Some(reason));
                vec![A::ReadAuthority]
            }
            // After Ready only the store decides: a plain 53 or a second Ready changes nothing.
            (Self::CutoverSent { .. }, E::Ready | E::Failed(_)) => Vec::new(),
            (
                Self::Resolving { .. },
                E::Authority(AuthorityView::Target | AuthorityView::Other),
            ) => {
                *self = Self::Done(SourceOutcome::HandedOver);
                vec![A::DropCopies]
            }
            (
                Self::Resolving {
                    abandoned: Some(reason),
                    ..
                },
                E::Authority(AuthorityView::Unchanged { .. }),
            ) => {
                *self = Self::Done(SourceOutcome::Failed(reason));
                vec![A::Restore]
            }
            (
                Self::Resolving {
                    abandoned: None, ..
                },
                E::Authority(AuthorityView::Unchanged {
                    target_lease_live: false,
                }),
            ) => {
                *self = Self::Done(SourceOutcome::RestoredTargetGone);
                vec![A::Restore]
            }
            (
                Self::Resolving {
                    reported,
                    abandoned: None,
                    ..
                },
                E::Authority(AuthorityView::Unchanged {
                    target_lease_live: true,
                }),
            )
            | (Self::Resolving { reported, .. }, E::Authority(AuthorityView::ReadFailed)) => {
                let abandoned = match self {
                    Self::Resolving { abandoned, .. } => *abandoned,
                    Self::Preparing { .. } | Self::CutoverSent { .. } | Self::Done(_) => None,
                };
                let report = !reported && now_ms >= t.deadline_ms;
                *self = resolving(reported || report, abandoned);
                if report {
                    vec![A::ReportUnresolved]
                } else {
                    Vec::new()
                }
            }
            (Self::Resolving { next_read_ms, .. }, E::Tick) => {
                if now_ms >= next_read_ms {
                    vec![A::ReadAuthority]
                } else {
                    Vec::new()
                }
            }
            (Self::Resolving { reported, .. }, E::Abandoned(reason)) => {
                *self = resolving(reported, Some(reason));
                vec![A::ReadAuthority]
            }
            (Self::Resolving { .. }, E::Ready | E::Failed(_) | E::EpochLost) => Vec::new(),
            (
                Self::Done(_),
                E::Ready
                | E::Failed(_)
                | E::Abandoned(_)
                | E::EpochLost
                | E::Tick
                | E::Authority(_),
            ) => Vec::new(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use RelocationFailureReason as R;
    use SourceAction as A;
    use SourceEvent as E;

    const T: SourceTimings = SourceTimings {
        prepare_timeout_ms: 10_000,
        cutover_wait_ms: 1_000,
        deadline_ms: 60_000,
    };

    fn preparing() -> SourceUnit {
        SourceUnit::new(0)
    }
    fn cutover() -> SourceUnit {
        SourceUnit::CutoverSent {
            at_ms: 100,
            next_peek_ms: 900,
            peek_gap_ms: 400,
        }
    }
    fn resolving() -> SourceUnit {
        SourceUnit::Resolving {
            next_read_ms: 2_000,
            reported: false,
            abandoned: None,
        }
    }

    /// The first look comes a round trip after the cutover: never sooner than
    /// [`FIRST_PEEK_MS`], never later than the window.
    #[test]
    fn the_first_look_waits_one_round_trip_within_bounds() {
        let window_0 = SourceTimings {
            cutover_wait_ms: 0,
            ..T
        };
        let cases: [(u64, SourceTimings, u64); 6] = [
            (0, T, FIRST_PEEK_MS),
            (FIRST_PEEK_MS, T, FIRST_PEEK_MS),
            (7, T, 7),
            (999, T, 999),
            (5_000, T, 1_000),
            (5, window_0, FIRST_PEEK_MS),
        ];
        for (round_trip, t, want) in cases {
            assert_eq!(
                first_peek_ms(round_trip, &t),
                want,
                "round trip {round_trip}"
            );
        }
        // In the machine: Ready 7 ms after the Prepare looks at 7 ms after the cutover, then
        // 14 ms after that.
        let mut u = SourceUnit::new(10);
        assert_eq!(u.step(E::Ready, 17, &T), vec![A::SendCutover]);
        assert_eq!(u.next_tick_ms(&T), Some(24));
        assert_eq!(u.step(E::Tick, 23, &T), vec![]);
        assert_eq!(u.step(E::Tick, 24, &T), vec![A::ReadAuthority]);
        assert_eq!(u.next_tick_ms(&T), Some(38));
    }

    /// Every state × event, with the state and actions it must give.
    #[test]
    fn table_of_every_state_and_event() {
        let live = E::Authority(AuthorityView::Unchanged {
            target_lease_live: true,
        });
        let dead = E::Authority(AuthorityView::Unchanged {
            target_lease_live: false,
        });
        let done = SourceUnit::Done(SourceOutcome::HandedOver);
        let cases: Vec<(SourceUnit, E, u64, SourceUnit, Vec<A>)> = vec![
            (
                preparing(),
                E::Ready,
                50,
                SourceUnit::CutoverSent {
                    at_ms: 50,
                    next_peek_ms: 100,
                    peek_gap_ms: 100,
                },
                vec![A::SendCutover],
            ),
            (
                preparing(),
                E::Failed(R::ChecksumMismatch),
                50,
                SourceUnit::Done(SourceOutcome::Failed(R::ChecksumMismatch)),
                vec![A::Restore],
            ),
            (
                preparing(),
                E::EpochLost,
                50,
                preparing(),
                vec![A::ResendPrepare],
            ),
            (preparing(), E::Tick, 9_999, preparing(), vec![]),
            (
                preparing(),
                E::Tick,
                10_000,
                SourceUnit::Resolving {
                    next_read_ms: 11_000,
                    reported: false,
                    abandoned: None,
                },
                vec![A::ReadAuthority],
            ),
            (
                preparing(),
                E::Authority(AuthorityView::Target),
                50,
                preparing(),
                vec![],
            ),
            (cutover(), E::Ready, 200, cutover(), vec![]),
            (cutover(), E::Failed(R::Stale), 200, cutover(), vec![]),
            (
                cutover(),
                E::EpochLost,
                1_099,
                cutover(),
                vec![A::ResendRelaysAndCutover],
            ),
            (cutover(), E::EpochLost, 1_100, cutover(), vec![]),
            (cutover(), E::Tick, 899, cutover(), vec![]),
            (
                cutover(),
                E::Tick,
                950,
                SourceUnit::CutoverSent {
                    at_ms: 100,
                    next_peek_ms: 1_350,
                    peek_gap_ms: 800,
                },
                vec![A::ReadAuthority],
            ),
            (
                cutover(),
                E::Authority(AuthorityView::Target),
                960,
                SourceUnit::Done(SourceOutcome::HandedOver),
                vec![A::DropCopies],
            ),
            (cutover(), live, 960, cutover(), vec![]),
            (cutover(), dead, 960, cutover(), vec![]),
            (
                cutover(),
                E::Authority(AuthorityView::ReadFailed),
                960,
                cutover(),
                vec![],
            ),
            (
                cutover(),
                E::Tick,
                1_100,
                SourceUnit::Resolving {
                    next_read_ms: 2_100,
                    reported: false,
                    abandoned: None,
                },
                vec![A::ReadAuthority],
            ),
            (
                resolving(),
                E::Authority(AuthorityView::Target),
                1_500,
                SourceUnit::Done(SourceOutcome::HandedOver),
                vec![A::DropCopies],
            ),
            (
                resolving(),
                E::Authority(AuthorityView::Other),
                1_500,
                SourceUnit::Done(SourceOutcome::HandedOver),
                vec![A::DropCopies],
            ),
            (
                resolving(),
                dead,
                1_500,
                SourceUnit::Done(SourceOutcome::RestoredTargetGone),
                vec![A::Restore],
            ),
            (
                resolving(),
                live,
                1_500,
                SourceUnit::Resolving {
                    next_read_ms: 2_500,
                    reported: false,
                    abandoned: None,
                },
                vec![],
            ),
            (
                resolving(),
                E::Authority(AuthorityView::ReadFailed),
                60_000,
                SourceUnit::Resolving {
                    next_read_ms: 61_000,
                    reported: true,
                    abandoned: None,
                },
                vec![A::ReportUnresolved],
            ),
            (
                SourceUnit::Resolving {
                    next_read_ms: 2_000,
                    reported: true,
                    abandoned: None,
                },
                live,
                70_000,
                SourceUnit::Resolving {
                    next_read_ms: 71_000,
                    reported: true,
                    abandoned: None,
                },
                vec![],
            ),
            (resolving(), E::Tick, 1_999, resolving(), vec![]),
            (
                resolving(),
                E::Tick,
                2_000,
                resolving(),
                vec![A::ReadAuthority],
            ),
            (resolving(), E::Ready, 1_500, resolving(), vec![]),
            (resolving(), E::Failed(R::Stale), 1_500, resolving(), vec![]),
            (resolving(), E::EpochLost, 1_500, resolving(), vec![]),
            (
                preparing(),
                E::Abandoned(R::Stale),
                50,
                SourceUnit::Done(SourceOutcome::Failed(R::Stale)),
                vec![A::Restore],
            ),
            (
                cutover(),
                E::Abandoned(R::Stale),
                200,
                SourceUnit::Resolving {
                    next_read_ms: 1_200,
                    reported: false,
                    abandoned: Some(R::Stale),
                },
                vec![A::ReadAuthority],
            ),
            (
                resolving(),
                E::Abandoned(R::RestoreFailed),
                1_500,
                SourceUnit::Resolving {
                    next_read_ms: 2_500,
                    reported: false,
                    abandoned: Some(R::RestoreFailed),
                },
                vec![A::ReadAuthority],
            ),
            (
                SourceUnit::Resolving {
                    next_read_ms: 2_000,
                    reported: false,
                    abandoned: Some(R::Stale),
                },
                live,
                1_500,
                SourceUnit::Done(SourceOutcome::Failed(R::Stale)),
                vec![A::Restore],
            ),
            (
                SourceUnit::Resolving {
                    next_read_ms: 2_000,
                    reported: false,
                    abandoned: Some(R::Stale),
                },
                E::Authority(AuthorityView::Target),
                1_500,
                SourceUnit::Done(SourceOutcome::HandedOver),
                vec![A::DropCopies],
            ),
            (
                SourceUnit::Resolving {
                    next_read_ms: 2_000,
                    reported: false,
                    abandoned: Some(R::Stale),
                },
                E::Authority(AuthorityView::ReadFailed),
                1_500,
                SourceUnit::Resolving {
                    next_read_ms: 2_500,
                    reported: false,
                    abandoned: Some(R::Stale),
                },
                vec![],
            ),
            (
                done.clone(),
                E::Abandoned(R::Stale),
                1,
                done.clone(),
                vec![],
            ),
            (done.clone(), E::Ready, 1, done.clone(), vec![]),
            (done.clone(), E::Failed(R::Stale), 1, done.clone(), vec![]),
            (done.clone(), E::EpochLost, 1, done.clone(), vec![]),
            (done.clone(), E::Tick, 1, done.clone(), vec![]),
            (done.clone(), dead, 1, done.clone(), vec![]),
        ];
        for (from, event, now, to, actions) in cases {
            let mut s = from.clone();
            let got = s.step(event, now, &T);
            assert_eq!((&s, &got), (&to, &actions), "{from:?} + {event:?} at {now}");
        }
    }

    #[test]
    fn next_tick_follows_the_state() {
        assert_eq!(preparing().next_tick_ms(&T), Some(10_000));
        assert_eq!(cutover().next_tick_ms(&T), Some(900));
        assert_eq!(resolving().next_tick_ms(&T), Some(2_000));
        assert_eq!(
            SourceUnit::Done(SourceOutcome::HandedOver).next_tick_ms(&T),
            None
        );
    }

    /// A seeded virtual-time simulation of one unit against a model target that may fail
    /// before Ready, die at any point, lose or duplicate the Ready, lose epochs and commit on
    /// cutover or by its fallback. Invariants: the source restores only when the target never
    /// committed (no double owner), and it hands over whenever the target committed (the
    /// object is never lost).
    #[test]
    fn virtual_time_property_no_double_owner_and_no_loss() {
        for seed in 0..2_000u64 {
            let mut rng = Lcg(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            // The model target.
            let refuse = rng.chance(15);
            let dies_at = if rng.chance(30) {
                Some(rng.below(4_000))
            } else {
                None
            };
            let ready_at = 5 + rng.below(50);
            let lose_ready = rng.chance(20);
            let dup_ready = rng.chance(20);
            let epoch_loss_at = if rng.chance(25) {
                Some(rng.below(2_000))
            } else {
                None
            };
            let lose_cutover = rng.chance(25);
            // A target that gives up after Ready for good (a definitive CAS refusal) says so.
            let abandons_at = if !refuse && rng.chance(15) {
                Some(ready_at + rng.below(1_500))
            } else {
                None
            };
            let mut committed_at: Option<u64> = None;
            let mut cutover_seen_at: Option<u64> = None;
            let mut src = SourceUnit::new(0);
            let mut restored = false;
            let mut handed = false;
            let alive = |now: u64| dies_at.is_none_or(|d| now < d);
            for now in 0..40_000u64 {
                // The target's own progress.
                let abandoned = abandons_at.is_some_and(|a| now >= a);
                if !refuse && !abandoned && alive(now) && committed_at.is_none() && now >= ready_at
                {
                    let by_cutover = cutover_seen_at.is_some_and(|c| now >= c);
                    if by_cutover || now >= ready_at + 1_000 {
                        committed_at = Some(now);
                    }
                }
                let mut events = Vec::new();
                if now == ready_at && alive(now) {
                    if refuse {
                        events.push(E::Failed(R::RestoreFailed));
                    } else if !lose_ready {
                        events.push(E::Ready);
                        if dup_ready {
                            events.push(E::Ready);
                        }
                    }
                }
                if Some(now) == epoch_loss_at {
                    events.push(E::EpochLost);
                }
                if Some(now) == abandons_at && committed_at.is_none() && alive(now) {
                    events.push(E::Abandoned(R::Stale));
                }
                events.push(E::Tick);
                for e in events {
                    for a in src.step(e, now, &T) {
                        match a {
                            A::SendCutover | A::ResendRelaysAndCutover => {
                                if alive(now) && (!lose_cutover || a == A::ResendRelaysAndCutover) {
                                    cutover_seen_at.get_or_insert(now + 1);
                                }
                            }
                            A::ResendPrepare | A::ReportUnresolved => {}
                            A::ReadAuthority => {
                                let view = if committed_at.is_some_and(|c| c <= now) {
                                    AuthorityView::Target
                                } else {
                                    // A dead target that never committed can never commit.
                                    AuthorityView::Unchanged {
                                        target_lease_live: alive(now) && !refuse,
                                    }
                                };
                                for a2 in src.step(E::Authority(view), now, &T) {
                                    match a2 {
                                        A::Restore => restored = true,
                                        A::DropCopies => handed = true,
                                        A::ReportUnresolved => {}
                                        other => panic!("seed {seed}: {other:?} after a read"),
                                    }
                                }
                            }
                            A::Restore => restored = true,
                            A::DropCopies => handed = true,
                        }
                    }
                }
                if src.outcome().is_some()
                    && (committed_at.is_some() || !alive(now) || refuse || abandoned)
                {
                    break;
                }
            }
            let outcome = src.outcome();
            assert!(outcome.is_some(), "seed {seed}: no outcome ({src:?})");
            assert!(
                !(restored && handed),
                "seed {seed}: restored and handed over"
            );
            if committed_at.is_some() {
                assert!(
                    !restored,
                    "seed {seed}: restored although the target committed"
                );
                assert!(handed, "seed {seed}: committed but not handed over");
            } else {
                assert!(
                    restored,
                    "seed {seed}: never committed, never restored: {outcome:?}"
                );
            }
        }
    }

    /// A tiny deterministic generator (the property needs no crate).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }
}
