//! The session legs of one moving unit, as its source coordinator runs them (issue 19 item 7;
//! routing `000_…` §3.3 steps 1, 7 and 8 and its abort paragraph; wire §9 "Session seal과
//! source relay", §10 "Session route"). Pure: `now` is an input, no timers, no I/O.
//!
//! Each Actor of the unit that is bound to a STREAM session is one leg:
//!
//! 1. Before the source seals the unit's admission it sends each leg's session owner a
//!    `sessionRelocationSeal` (42) and waits for the `sessionRelocationSealed` (43) answers.
//!    `sealed` → the leg is on: its SessionRef travels in the envelope's `boundSession`, and the
//!    target sends the `sessionRelocationRoute` (44) `route` once its dispatch opens.
//!    `notCurrent` / `sessionClosed` → no session leg (the Actor arrives unbound). A session
//!    owner that cannot be reached at all → no session leg either (**ours**: its sessions are
//!    gone with it, and a push would find it `Unavailable`).
//! 2. No answer from a leg by the wait's end → an explicit failure before relay-ready: the unit
//!    stays where it is, and every leg that is or may be sealed gets a 44 `abort`.
//! 3. The unit ends before the target's relay-ready (30) was accepted → 44 `abort` to every
//!    sealed leg (held relays go to the source route, only the matching seal is released).
//!    Once relay-ready was accepted nothing is aborted: the target sends the route, or — the
//!    target gone — the session owner's `SessionRelocationSealTimeout` closes the session
//!    (routing §3.3: "a different runtime doesn't automatically take over the route update").

use zlink_protocol::generated::SealOutcome;

/// Why a leg has no session part in the move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffReason {
    /// 43 `notCurrent`: the session holds another binding (or none) for that Actor now.
    NotCurrent,
    /// 43 `sessionClosed`: the session is gone.
    SessionClosed,
    /// The 42 could not be sent: no connection to the session owner's lifecycle.
    Unreachable,
}

/// Where one leg is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegState {
    /// 42 sent, no answer yet.
    Asked,
    /// 43 `sealed`.
    Sealed,
    /// No session part (see [`OffReason`]).
    Off(OffReason),
}

/// Where the unit's legs are together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the answers until `until_ms`.
    Sealing {
        /// The end of the wait (caller's clock).
        until_ms: u64,
    },
    /// Every leg answered: the unit seals its admission and captures.
    Proceeding,
    /// The target's relay-ready was accepted: from here the target owns the route update.
    Committed,
    /// The unit ended before relay-ready (its sealed legs were aborted).
    Aborted,
    /// A leg did not answer in time (the unit fails; its legs were aborted).
    TimedOut,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegEvent {
    /// Leg `leg`'s 43.
    Answered {
        /// Which leg.
        leg: usize,
        /// Its outcome.
        outcome: SealOutcome,
    },
    /// Leg `leg`'s 42 could not be sent.
    Unreachable {
        /// Which leg.
        leg: usize,
    },
    /// Time passed.
    Tick,
    /// The target's relay-ready (30) was accepted.
    Ready,
    /// The unit ended without relay-ready (stayed, failed, refused by the target).
    GaveUp,
}

/// What the shell does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegAction {
    /// Every leg answered: seal the unit's admission and capture.
    Proceed,
    /// Send 44 `abort` to these legs.
    Abort(Vec<usize>),
    /// Fail the unit: these legs did not answer in time.
    Fail {
        /// The legs still `Asked`.
        unanswered: Vec<usize>,
    },
    /// A 43 that changed nothing (late or repeated): counted.
    Late(usize),
}

/// The session legs of one unit (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLegs {
    legs: Vec<LegState>,
    phase: Phase,
}

impl SessionLegs {
    /// `n` legs whose 42s were just sent at `now_ms`, answered by `now_ms + wait_ms` or the unit
    /// fails. With no legs the unit proceeds at once.
    #[must_use]
    pub fn new(n: usize, now_ms: u64, wait_ms: u64) -> Self {
        let phase = if n == 0 {
            Phase::Proceeding
        } else {
            Phase::Sealing {
                until_ms: now_ms.saturating_add(wait_ms),
            }
        };
        Self {
            legs: vec![LegState::Asked; n],
            phase,
        }
    }

    /// Where the unit's legs are.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Where leg `i` is (`None`: no such leg).
    #[must_use]
    pub fn leg(&self, i: usize) -> Option<LegState> {
        self.legs.get(i).copied()
    }

    /// The legs whose session is part of the move (43 `sealed`): their SessionRefs go in the
    /// envelopes.
    pub fn sealed(&self) -> impl Iterator<Item = usize> + '_ {
        self.legs
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == LegState::Sealed)
            .map(|(i, _)| i)
    }

    /// When the shell must tick next (the wait's end while sealing).
    #[must_use]
    pub fn next_tick_ms(&self) -> Option<u64> {
        match self.phase {
            Phase::Sealing { until_ms } => Some(until_ms),
            Phase::Proceeding | Phase::Committed | Phase::Aborted | Phase::TimedOut => None,
        }
    }

    fn with_state(&self, keep: impl Fn(LegState) -> bool) -> Vec<usize> {
        self.legs
            .iter()
            .enumerate()
            .filter(|(_, s)| keep(**s))
            .map(|(i, _)| i)
            .collect()
    }

    /// Sealed or perhaps sealed (an unanswered 42 may still be installed).
    fn to_abort(&self) -> Vec<usize> {
        self.with_state(|s| match s {
            LegState::Asked | LegState::Sealed => true,
            LegState::Off(_) => false,
        })
    }

    /// Every leg answered while sealing: proceed.
    fn settle(&mut self) -> Vec<LegAction> {
        let answered = self.legs.iter().all(|s| match s {
            LegState::Asked => false,
            LegState::Sealed | LegState::Off(_) => true,
        });
        if answered {
            self.phase = Phase::Proceeding;
            vec![LegAction::Proceed]
        } else {
            Vec::new()
        }
    }

    /// Leg `leg` gets its answer `to` while sealing; a leg that answered already (or does not
    /// exist) only counts as late.
    fn answer(&mut self, leg: usize, to: LegState) -> Vec<LegAction> {
        match self.legs.get_mut(leg) {
            Some(s @ LegState::Asked) => {
                *s = to;
                self.settle()
            }
            Some(LegState::Sealed | LegState::Off(_)) | None => vec![LegAction::Late(leg)],
        }
    }

    /// Apply `event` at `now_ms`.
    pub fn step(&mut self, event: LegEvent, now_ms: u64) -> Vec<LegAction> {
        match (self.phase, event) {
            (Phase::Sealing { .. }, LegEvent::Answered { leg, outcome }) => {
                let to = match outcome {
                    SealOutcome::Sealed => LegState::Sealed,
                    SealOutcome::NotCurrent => LegState::Off(OffReason::NotCurrent),
                    SealOutcome::SessionClosed => LegState::Off(OffReason::SessionClosed),
                };
                self.answer(leg, to)
            }
            (Phase::Sealing { .. }, LegEvent::Unreachable { leg }) => {
                self.answer(leg, LegState::Off(OffReason::Unreachable))
            }
            (Phase::Sealing { until_ms }, LegEvent::Tick) => {
                if now_ms < until_ms {
                    return Vec::new();
                }
                self.phase = Phase::TimedOut;
                let unanswered = self.with_state(|s| s == LegState::Asked);
                vec![
                    LegAction::Fail { unanswered },
                    LegAction::Abort(self.to_abort()),
                ]
            }
            // Relay-ready cannot come before the unit proceeded: nothing to commit.
            (Phase::Sealing { .. }, LegEvent::Ready) => Vec::new(),
            (Phase::Sealing { .. }, LegEvent::GaveUp) => {
                self.phase = Phase::Aborted;
                vec![LegAction::Abort(self.to_abort())]
            }
            (
                Phase::Proceeding | Phase::Committed | Phase::Aborted | Phase::TimedOut,
                LegEvent::Answered { leg, .. } | LegEvent::Unreachable { leg },
            ) => vec![LegAction::Late(leg)],
            (
                Phase::Proceeding | Phase::Committed | Phase::Aborted | Phase::TimedOut,
                LegEvent::Tick,
            ) => Vec::new(),
            (Phase::Proceeding, LegEvent::Ready) => {
                self.phase = Phase::Committed;
                Vec::new()
            }
            (Phase::Proceeding, LegEvent::GaveUp) => {
                self.phase = Phase::Aborted;
                let sealed: Vec<usize> = self.sealed().collect();
                if sealed.is_empty() {
                    Vec::new()
                } else {
                    vec![LegAction::Abort(sealed)]
                }
            }
            // After relay-ready the target owns the route update: nothing is rolled back.
            (Phase::Committed, LegEvent::Ready | LegEvent::GaveUp) => Vec::new(),
            (Phase::Aborted | Phase::TimedOut, LegEvent::Ready | LegEvent::GaveUp) => Vec::new(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const WAIT: u64 = 1_000;

    /// Two legs in each phase the machine can be in (leg 0 sealed where that is possible).
    fn in_phase(p: Phase) -> SessionLegs {
        let mut m = SessionLegs::new(2, 0, WAIT);
        let sealed = LegEvent::Answered {
            leg: 0,
            outcome: SealOutcome::Sealed,
        };
        let closed = LegEvent::Answered {
            leg: 1,
            outcome: SealOutcome::SessionClosed,
        };
        match p {
            Phase::Sealing { .. } => {
                m.step(sealed, 1);
            }
            Phase::Proceeding => {
                m.step(sealed, 1);
                m.step(closed, 2);
            }
            Phase::Committed => {
                m.step(sealed, 1);
                m.step(closed, 2);
                m.step(LegEvent::Ready, 3);
            }
            Phase::Aborted => {
                m.step(sealed, 1);
                m.step(LegEvent::GaveUp, 2);
            }
            Phase::TimedOut => {
                m.step(sealed, 1);
                m.step(LegEvent::Tick, WAIT);
            }
        }
        assert_eq!(
            std::mem::discriminant(&m.phase()),
            std::mem::discriminant(&p),
            "set-up of {p:?}"
        );
        m
    }

    /// State × event: every phase against every event, with the action and the next phase.
    #[test]
    fn every_transition() {
        let sealing = Phase::Sealing { until_ms: WAIT };
        let answer1 = |outcome| LegEvent::Answered { leg: 1, outcome };
        // (phase, event, now, actions, next phase)
        let table: Vec<(Phase, LegEvent, u64, Vec<LegAction>, Phase)> = vec![
            // Sealing: leg 0 is sealed, leg 1 asked.
            (
                sealing,
                answer1(SealOutcome::Sealed),
                5,
                vec![LegAction::Proceed],
                Phase::Proceeding,
            ),
            (
                sealing,
                answer1(SealOutcome::NotCurrent),
                5,
                vec![LegAction::Proceed],
                Phase::Proceeding,
            ),
            (
                sealing,
                answer1(SealOutcome::SessionClosed),
                5,
                vec![LegAction::Proceed],
                Phase::Proceeding,
            ),
            (
                sealing,
                LegEvent::Answered {
                    leg: 0,
                    outcome: SealOutcome::Sealed,
                },
                5,
                vec![LegAction::Late(0)],
                sealing,
            ),
            (
                sealing,
                LegEvent::Unreachable { leg: 1 },
                5,
                vec![LegAction::Proceed],
                Phase::Proceeding,
            ),
            (
                sealing,
                LegEvent::Unreachable { leg: 7 },
                5,
                vec![LegAction::Late(7)],
                sealing,
            ),
            (sealing, LegEvent::Tick, WAIT - 1, vec![], sealing),
            (
                sealing,
                LegEvent::Tick,
                WAIT,
                vec![
                    LegAction::Fail {
                        unanswered: vec![1],
                    },
                    LegAction::Abort(vec![0, 1]),
                ],
                Phase::TimedOut,
            ),
            (sealing, LegEvent::Ready, 5, vec![], sealing),
            (
                sealing,
                LegEvent::GaveUp,
                5,
                vec![LegAction::Abort(vec![0, 1])],
                Phase::Aborted,
            ),
            // Proceeding: leg 0 sealed, leg 1 off.
            (
                Phase::Proceeding,
                answer1(SealOutcome::Sealed),
                5,
                vec![LegAction::Late(1)],
                Phase::Proceeding,
            ),
            (
                Phase::Proceeding,
                LegEvent::Unreachable { leg: 1 },
                5,
                vec![LegAction::Late(1)],
                Phase::Proceeding,
            ),
            (
                Phase::Proceeding,
                LegEvent::Tick,
                WAIT * 9,
                vec![],
                Phase::Proceeding,
            ),
            (
                Phase::Proceeding,
                LegEvent::Ready,
                5,
                vec![],
                Phase::Committed,
            ),
            (
                Phase::Proceeding,
                LegEvent::GaveUp,
                5,
                vec![LegAction::Abort(vec![0])],
                Phase::Aborted,
            ),
            // Committed: the target owns the route update.
            (
                Phase::Committed,
                answer1(SealOutcome::Sealed),
                5,
                vec![LegAction::Late(1)],
                Phase::Committed,
            ),
            (
                Phase::Committed,
                LegEvent::Unreachable { leg: 0 },
                5,
                vec![LegAction::Late(0)],
                Phase::Committed,
            ),
            (
                Phase::Committed,
                LegEvent::Tick,
                5,
                vec![],
                Phase::Committed,
            ),
            (
                Phase::Committed,
                LegEvent::Ready,
                5,
                vec![],
                Phase::Committed,
            ),
            (
                Phase::Committed,
                LegEvent::GaveUp,
                5,
                vec![],
                Phase::Committed,
            ),
            // Aborted and timed out: final.
            (
                Phase::Aborted,
                answer1(SealOutcome::Sealed),
                5,
                vec![LegAction::Late(1)],
                Phase::Aborted,
            ),
            (
                Phase::Aborted,
                LegEvent::Unreachable { leg: 1 },
                5,
                vec![LegAction::Late(1)],
                Phase::Aborted,
            ),
            (Phase::Aborted, LegEvent::Tick, 5, vec![], Phase::Aborted),
            (Phase::Aborted, LegEvent::Ready, 5, vec![], Phase::Aborted),
            (Phase::Aborted, LegEvent::GaveUp, 5, vec![], Phase::Aborted),
            (
                Phase::TimedOut,
                answer1(SealOutcome::Sealed),
                5,
                vec![LegAction::Late(1)],
                Phase::TimedOut,
            ),
            (
                Phase::TimedOut,
                LegEvent::Unreachable { leg: 1 },
                5,
                vec![LegAction::Late(1)],
                Phase::TimedOut,
            ),
            (Phase::TimedOut, LegEvent::Tick, 5, vec![], Phase::TimedOut),
            (Phase::TimedOut, LegEvent::Ready, 5, vec![], Phase::TimedOut),
            (
                Phase::TimedOut,
                LegEvent::GaveUp,
                5,
                vec![],
                Phase::TimedOut,
            ),
        ];
        for (phase, event, now, actions, next) in table {
            let mut m = in_phase(phase);
            assert_eq!(m.step(event, now), actions, "{phase:?} × {event:?}");
            assert_eq!(m.phase(), next, "{phase:?} × {event:?} → phase");
        }
    }

    #[test]
    fn no_legs_proceed_at_once_and_abort_nothing() {
        let mut m = SessionLegs::new(0, 0, WAIT);
        assert_eq!(m.phase(), Phase::Proceeding);
        assert_eq!(m.next_tick_ms(), None);
        assert_eq!(m.step(LegEvent::GaveUp, 1), vec![]);
        assert_eq!(m.phase(), Phase::Aborted);
    }

    #[test]
    fn only_sealed_legs_travel_and_the_wait_is_polled_while_sealing() {
        let mut m = SessionLegs::new(3, 100, WAIT);
        assert_eq!(m.next_tick_ms(), Some(100 + WAIT));
        assert!(
            m.step(
                LegEvent::Answered {
                    leg: 2,
                    outcome: SealOutcome::Sealed
                },
                101
            )
            .is_empty()
        );
        assert!(
            m.step(
                LegEvent::Answered {
                    leg: 0,
                    outcome: SealOutcome::NotCurrent
                },
                102
            )
            .is_empty()
        );
        assert_eq!(
            m.step(LegEvent::Unreachable { leg: 1 }, 103),
            vec![LegAction::Proceed]
        );
        assert_eq!(m.sealed().collect::<Vec<_>>(), vec![2]);
        assert_eq!(m.leg(0), Some(LegState::Off(OffReason::NotCurrent)));
        assert_eq!(m.leg(1), Some(LegState::Off(OffReason::Unreachable)));
        assert_eq!(m.next_tick_ms(), None);
        // Relay-ready accepted, then the unit ends anyway: nothing is aborted.
        assert!(m.step(LegEvent::Ready, 104).is_empty());
        assert!(m.step(LegEvent::GaveUp, 105).is_empty());
    }

    /// Property: whatever the answers and their order, a unit never proceeds while a leg is
    /// unanswered, the sealed legs are exactly the `sealed` answers, and an abort names only
    /// legs that are or may be sealed.
    #[test]
    fn answers_in_any_order() {
        let outcomes = [
            SealOutcome::Sealed,
            SealOutcome::NotCurrent,
            SealOutcome::SessionClosed,
        ];
        // Every assignment of 3 outcomes (or unreachable = 3) to 3 legs, in every order.
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        for code in 0..64u32 {
            let pick = [code % 4, (code / 4) % 4, (code / 16) % 4];
            for order in orders {
                let mut m = SessionLegs::new(3, 0, WAIT);
                let mut proceeded = 0;
                for (k, &leg) in order.iter().enumerate() {
                    let event = match pick[leg] {
                        3 => LegEvent::Unreachable { leg },
                        o => LegEvent::Answered {
                            leg,
                            outcome: outcomes[o as usize],
                        },
                    };
                    let actions = m.step(event, 1 + k as u64);
                    if actions.contains(&LegAction::Proceed) {
                        assert_eq!(k, 2, "proceeded with a leg unanswered");
                        proceeded += 1;
                    }
                }
                assert_eq!(proceeded, 1);
                let want: Vec<usize> = (0..3).filter(|&i| pick[i] == 0).collect();
                assert_eq!(m.sealed().collect::<Vec<_>>(), want);
                let abort = m.step(LegEvent::GaveUp, 10);
                if want.is_empty() {
                    assert!(abort.is_empty());
                } else {
                    assert_eq!(abort, vec![LegAction::Abort(want)]);
                }
            }
        }
    }
}
