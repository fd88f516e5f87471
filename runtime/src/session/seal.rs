//! The session owner's relocation seal of one binding route (issue 19 item 6; wire §9 "Session
//! seal과 source relay", §10 "Session route"; routing `000_…` §3.3 steps 1, 7, 8): a pure state
//! machine, `now` as input, exhaustive matches, tested by a state × event table.
//!
//! - **42** `sessionRelocationSeal` checks only the binding identity (binding generation,
//!   Actor ID + ObjectGeneration — the shell looks the binding up by session and Actor ID) and
//!   the relocation identity: `sealed` (idempotent for the same relocation) or `notCurrent`.
//!   A session the shell does not know answers `sessionClosed` without a machine.
//! - **Sealed**: relays to that Actor are held in order, with no bound of their own (ordinary
//!   backpressure applies); a held request past its deadline ends `DeadlineExceeded`, unsent.
//!   Other Actors of the session and pushes (36) are not this machine's and keep flowing.
//! - **44 `route`** with the matching seal: the shell swaps the route and ActorRef snapshot to
//!   the target in one step, then the held relays go to it in order and the seal is released.
//!   **44 `abort`** with the matching seal: the held relays go on the unchanged (source) route.
//! - No matching 44 within `SessionRelocationSealTimeout` (3,000 ms): the session closes
//!   (`SealTimeout`) and its held relays end with it.
//! - A late, duplicate or mismatched 44 changes nothing and is only reported (a warning and a
//!   counter in the shell). Command 45 does not exist here.
//!
//! **(ours)** A 42 of another relocation while one seal is installed answers `notCurrent` and
//! leaves the installed seal (one relocation of an Actor at a time; the installed one ends by
//! its 44 or its timeout).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use zlink_protocol::generated::SealOutcome;

/// The binding identity a 42 or 44 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindingIdentity {
    /// The binding generation.
    pub binding_generation: u64,
    /// The Actor's ObjectGeneration.
    pub object_generation: u64,
}

/// A relay waiting in a seal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held<T> {
    /// The relay (the shell's: payload, reply handle, …).
    pub item: T,
    /// A request's deadline; `None` for a one-way relay.
    pub deadline: Option<Instant>,
}

/// What the machine is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealState<T> {
    /// No seal: relays go out on the route in use.
    Open,
    /// Sealed for `relocation_id` until `deadline`; relays wait in `held`, in order.
    Sealed {
        /// The relocation the seal belongs to.
        relocation_id: [u8; 16],
        /// When the session closes if no matching 44 came.
        deadline: Instant,
        /// The held relays, in submission order.
        held: VecDeque<Held<T>>,
    },
    /// The seal timed out (the session is closed) or the session closed.
    Closed,
}

/// An input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealEvent<T> {
    /// Command 42 for this binding.
    Seal {
        /// Its relocation.
        relocation_id: [u8; 16],
        /// The binding identity it names.
        identity: BindingIdentity,
    },
    /// The session relays to this Actor.
    Relay(Held<T>),
    /// Command 44 `route` (the target's route switch).
    Route {
        /// Its relocation.
        relocation_id: [u8; 16],
        /// The binding identity it names.
        identity: BindingIdentity,
    },
    /// Command 44 `abort` (the source's explicit failure before relay-ready).
    Abort {
        /// Its relocation.
        relocation_id: [u8; 16],
        /// The binding identity it names.
        identity: BindingIdentity,
    },
    /// Time passed (see [`SealMachine::poll_timeout`]).
    Tick,
    /// The session closed for another reason.
    SessionClosed,
}

/// Why a 44 changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// The same relocation's 44 was applied already (or its seal was released).
    Duplicate,
    /// No seal is installed and the 44's relocation is not the last one applied: late (after
    /// the timeout closed the session, or never sealed here).
    Late,
    /// A seal is installed but the 44 names another relocation or binding identity.
    Mismatch,
}

/// An output, for the shell to carry out in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealAction<T> {
    /// Reply 43 with this outcome.
    Answer(SealOutcome),
    /// Submit the relay on the route in use (after a [`SealAction::SwitchRoute`], the new
    /// one).
    Submit(T),
    /// Swap the binding route and the ActorRef snapshot to the 44's target route, in one step,
    /// before the submissions that follow.
    SwitchRoute,
    /// A held request passed its deadline: it ends `DeadlineExceeded`, unsent.
    Expired(T),
    /// The relay cannot be sent: the session is closing (held relays end with it).
    Failed(T),
    /// Close the session `SealTimeout` and clear its binding, held and seal state.
    CloseSession,
    /// A 44 that changed nothing: warn and count.
    Ignored(Ignored),
}

/// The seal of one binding route (see the module docs).
#[derive(Debug, Clone)]
pub struct SealMachine<T> {
    identity: BindingIdentity,
    timeout: Duration,
    state: SealState<T>,
    /// The last relocation whose seal was released (a repeated 44 of it is a duplicate).
    released: Option<[u8; 16]>,
}

impl<T> SealMachine<T> {
    /// `SessionRelocationSealTimeout` default (wire §10): 3,000 ms.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(3_000);

    /// An open machine for the binding `identity`.
    pub fn new(identity: BindingIdentity, timeout: Duration) -> Self {
        Self {
            identity,
            timeout,
            state: SealState::Open,
            released: None,
        }
    }

    /// The binding identity it seals.
    pub fn identity(&self) -> BindingIdentity {
        self.identity
    }

    /// The state.
    pub fn state(&self) -> &SealState<T> {
        &self.state
    }

    /// Whether a seal is installed.
    pub fn is_sealed(&self) -> bool {
        matches!(self.state, SealState::Sealed { .. })
    }

    /// Put `items`, in order, ahead of the relays held so far: relays an earlier seal released
    /// that had not gone out yet when this seal was installed (they were submitted before
    /// the relays held now). Returned unchanged unless sealed.
    pub fn hold_front(&mut self, items: Vec<Held<T>>) -> Vec<Held<T>> {
        match &mut self.state {
            SealState::Sealed { held, .. } => {
                for h in items.into_iter().rev() {
                    held.push_front(h);
                }
                Vec::new()
            }
            SealState::Open | SealState::Closed => items,
        }
    }

    /// The next instant a [`SealEvent::Tick`] has work: the seal's deadline or a held
    /// request's, whichever is first.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            SealState::Sealed { deadline, held, .. } => held
                .iter()
                .filter_map(|h| h.deadline)
                .chain(std::iter::once(*deadline))
                .min(),
            SealState::Open | SealState::Closed => None,
        }
    }

    /// Apply `event` at `now`; the actions, in order.
    pub fn handle(&mut self, event: SealEvent<T>, now: Instant) -> Vec<SealAction<T>> {
        let state = std::mem::replace(&mut self.state, SealState::Closed);
        let (next, actions) = self.step(state, event, now);
        self.state = next;
        actions
    }

    fn step(
        &mut self,
        state: SealState<T>,
        event: SealEvent<T>,
        now: Instant,
    ) -> (SealState<T>, Vec<SealAction<T>>) {
        use SealAction as A;
        match (state, event) {
            // ---- Open ----
            (
                SealState::Open,
                SealEvent::Seal {
                    relocation_id,
                    identity,
                },
            ) => {
                if identity == self.identity {
                    let sealed = SealState::Sealed {
                        relocation_id,
                        deadline: now + self.timeout,
                        held: VecDeque::new(),
                    };
                    (sealed, vec![A::Answer(SealOutcome::Sealed)])
                } else {
                    (SealState::Open, vec![A::Answer(SealOutcome::NotCurrent)])
                }
            }
            (SealState::Open, SealEvent::Relay(h)) => (SealState::Open, vec![A::Submit(h.item)]),
            (
                SealState::Open,
                SealEvent::Route { relocation_id, .. } | SealEvent::Abort { relocation_id, .. },
            ) => {
                let why = if self.released == Some(relocation_id) {
                    Ignored::Duplicate
                } else {
                    Ignored::Late
                };
                (SealState::Open, vec![A::Ignored(why)])
            }
            (SealState::Open, SealEvent::Tick) => (SealState::Open, Vec::new()),
            (SealState::Open, SealEvent::SessionClosed) => (SealState::Closed, Vec::new()),

            // ---- Sealed ----
            (
                SealState::Sealed {
                    relocation_id,
                    deadline,
                    held,
                },
                SealEvent::Seal {
                    relocation_id: asked,
                    identity,
                },
            ) => {
                let answer = if asked == relocation_id && identity == self.identity {
                    SealOutcome::Sealed
                } else {
                    SealOutcome::NotCurrent
                };
                let same = SealState::Sealed {
                    relocation_id,
                    deadline,
                    held,
                };
                (same, vec![A::Answer(answer)])
            }
            (
                SealState::Sealed {
                    relocation_id,
                    deadline,
                    mut held,
                },
                SealEvent::Relay(h),
            ) => {
                held.push_back(h);
                let same = SealState::Sealed {
                    relocation_id,
                    deadline,
                    held,
                };
                (same, Vec::new())
            }
            (
                SealState::Sealed {
                    relocation_id,
                    deadline,
                    held,
                },
                SealEvent::Route {
                    relocation_id: named,
                    identity,
                },
            ) => {
                if named == relocation_id && identity == self.identity {
                    self.released = Some(relocation_id);
                    let mut actions = vec![A::SwitchRoute];
                    actions.extend(held.into_iter().map(|h| A::Submit(h.item)));
                    (SealState::Open, actions)
                } else {
                    let same = SealState::Sealed {
                        relocation_id,
                        deadline,
                        held,
                    };
                    (same, vec![A::Ignored(Ignored::Mismatch)])
                }
            }
            (
                SealState::Sealed {
                    relocation_id,
                    deadline,
                    held,
                },
                SealEvent::Abort {
                    relocation_id: named,
                    identity,
                },
            ) => {
                if named == relocation_id && identity == self.identity {
                    self.released = Some(relocation_id);
                    let actions = held.into_iter().map(|h| A::Submit(h.item)).collect();
                    (SealState::Open, actions)
                } else {
                    let same = SealState::Sealed {
                        relocation_id,
                        deadline,
                        held,
                    };
                    (same, vec![A::Ignored(Ignored::Mismatch)])
                }
            }
            (
                SealState::Sealed {
                    relocation_id,
                    deadline,
                    held,
                },
                SealEvent::Tick,
            ) => {
                if now >= deadline {
                    let mut actions: Vec<_> = held.into_iter().map(|h| A::Failed(h.item)).collect();
                    actions.push(A::CloseSession);
                    return (SealState::Closed, actions);
                }
                let mut actions = Vec::new();
                let mut kept = VecDeque::with_capacity(held.len());
                for h in held {
                    match h.deadline {
                        Some(d) if d <= now => actions.push(A::Expired(h.item)),
                        Some(_) | None => kept.push_back(h),
                    }
                }
                let same = SealState::Sealed {
                    relocation_id,
                    deadline,
                    held: kept,
                };
                (same, actions)
            }
            (SealState::Sealed { held, .. }, SealEvent::SessionClosed) => {
                let actions = held.into_iter().map(|h| A::Failed(h.item)).collect();
                (SealState::Closed, actions)
            }

            // ---- Closed ----
            (SealState::Closed, SealEvent::Seal { .. }) => (
                SealState::Closed,
                vec![A::Answer(SealOutcome::SessionClosed)],
            ),
            (SealState::Closed, SealEvent::Relay(h)) => {
                (SealState::Closed, vec![A::Failed(h.item)])
            }
            (SealState::Closed, SealEvent::Route { .. } | SealEvent::Abort { .. }) => {
                (SealState::Closed, vec![A::Ignored(Ignored::Late)])
            }
            (SealState::Closed, SealEvent::Tick | SealEvent::SessionClosed) => {
                (SealState::Closed, Vec::new())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R1: [u8; 16] = [1; 16];
    const R2: [u8; 16] = [2; 16];
    const ME: BindingIdentity = BindingIdentity {
        binding_generation: 7,
        object_generation: 3,
    };
    const OTHER_BINDING: BindingIdentity = BindingIdentity {
        binding_generation: 8,
        object_generation: 3,
    };
    const OTHER_INCARNATION: BindingIdentity = BindingIdentity {
        binding_generation: 7,
        object_generation: 4,
    };
    const T: Duration = Duration::from_millis(3_000);

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Open,
        Sealed,
        Closed,
    }

    fn kind<X>(s: &SealState<X>) -> Kind {
        match s {
            SealState::Open => Kind::Open,
            SealState::Sealed { .. } => Kind::Sealed,
            SealState::Closed => Kind::Closed,
        }
    }

    /// A machine in `k` at `t0`; a sealed one (relocation R1) holds relays 1 (a request due at
    /// t0 + 1 s) and 2 (one-way); an open one released R2 before.
    fn machine(k: Kind, t0: Instant) -> SealMachine<u32> {
        let mut m = SealMachine::new(ME, T);
        match k {
            Kind::Open => {
                m.handle(seal(R2, ME), t0);
                m.handle(route(R2, ME), t0);
            }
            Kind::Sealed => {
                m.handle(seal(R1, ME), t0);
                m.handle(relay(1, Some(t0 + Duration::from_secs(1))), t0);
                m.handle(relay(2, None), t0);
            }
            Kind::Closed => {
                m.handle(SealEvent::SessionClosed, t0);
            }
        }
        assert_eq!(kind(m.state()), k);
        m
    }

    fn seal(r: [u8; 16], identity: BindingIdentity) -> SealEvent<u32> {
        SealEvent::Seal {
            relocation_id: r,
            identity,
        }
    }
    fn route(r: [u8; 16], identity: BindingIdentity) -> SealEvent<u32> {
        SealEvent::Route {
            relocation_id: r,
            identity,
        }
    }
    fn abort(r: [u8; 16], identity: BindingIdentity) -> SealEvent<u32> {
        SealEvent::Abort {
            relocation_id: r,
            identity,
        }
    }
    fn relay(n: u32, deadline: Option<Instant>) -> SealEvent<u32> {
        SealEvent::Relay(Held { item: n, deadline })
    }

    /// Every state × event, with the resulting state and actions. `at` is the offset of the
    /// event after the machine was set up.
    #[test]
    fn every_state_and_event_has_one_outcome() {
        use SealAction as A;
        use SealOutcome::{NotCurrent, Sealed, SessionClosed};
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        type Row = (Kind, SealEvent<u32>, Duration, Kind, Vec<SealAction<u32>>);
        let rows: Vec<Row> = vec![
            // Open
            (
                Kind::Open,
                seal(R1, ME),
                ms(0),
                Kind::Sealed,
                vec![A::Answer(Sealed)],
            ),
            (
                Kind::Open,
                seal(R1, OTHER_BINDING),
                ms(0),
                Kind::Open,
                vec![A::Answer(NotCurrent)],
            ),
            (
                Kind::Open,
                seal(R1, OTHER_INCARNATION),
                ms(0),
                Kind::Open,
                vec![A::Answer(NotCurrent)],
            ),
            (
                Kind::Open,
                relay(9, None),
                ms(0),
                Kind::Open,
                vec![A::Submit(9)],
            ),
            (
                Kind::Open,
                route(R2, ME),
                ms(0),
                Kind::Open,
                vec![A::Ignored(Ignored::Duplicate)],
            ),
            (
                Kind::Open,
                route(R1, ME),
                ms(0),
                Kind::Open,
                vec![A::Ignored(Ignored::Late)],
            ),
            (
                Kind::Open,
                abort(R2, ME),
                ms(0),
                Kind::Open,
                vec![A::Ignored(Ignored::Duplicate)],
            ),
            (
                Kind::Open,
                abort(R1, ME),
                ms(0),
                Kind::Open,
                vec![A::Ignored(Ignored::Late)],
            ),
            (Kind::Open, SealEvent::Tick, ms(5_000), Kind::Open, vec![]),
            (
                Kind::Open,
                SealEvent::SessionClosed,
                ms(0),
                Kind::Closed,
                vec![],
            ),
            // Sealed (R1, holding 1 = request due at +1 s, 2 = one-way)
            (
                Kind::Sealed,
                seal(R1, ME),
                ms(0),
                Kind::Sealed,
                vec![A::Answer(Sealed)],
            ),
            (
                Kind::Sealed,
                seal(R2, ME),
                ms(0),
                Kind::Sealed,
                vec![A::Answer(NotCurrent)],
            ),
            (
                Kind::Sealed,
                seal(R1, OTHER_BINDING),
                ms(0),
                Kind::Sealed,
                vec![A::Answer(NotCurrent)],
            ),
            (Kind::Sealed, relay(9, None), ms(0), Kind::Sealed, vec![]),
            (
                Kind::Sealed,
                route(R1, ME),
                ms(0),
                Kind::Open,
                vec![A::SwitchRoute, A::Submit(1), A::Submit(2)],
            ),
            (
                Kind::Sealed,
                route(R2, ME),
                ms(0),
                Kind::Sealed,
                vec![A::Ignored(Ignored::Mismatch)],
            ),
            (
                Kind::Sealed,
                route(R1, OTHER_INCARNATION),
                ms(0),
                Kind::Sealed,
                vec![A::Ignored(Ignored::Mismatch)],
            ),
            (
                Kind::Sealed,
                abort(R1, ME),
                ms(0),
                Kind::Open,
                vec![A::Submit(1), A::Submit(2)],
            ),
            (
                Kind::Sealed,
                abort(R2, ME),
                ms(0),
                Kind::Sealed,
                vec![A::Ignored(Ignored::Mismatch)],
            ),
            (
                Kind::Sealed,
                abort(R1, OTHER_BINDING),
                ms(0),
                Kind::Sealed,
                vec![A::Ignored(Ignored::Mismatch)],
            ),
            (Kind::Sealed, SealEvent::Tick, ms(999), Kind::Sealed, vec![]),
            (
                Kind::Sealed,
                SealEvent::Tick,
                ms(1_000),
                Kind::Sealed,
                vec![A::Expired(1)],
            ),
            (
                Kind::Sealed,
                SealEvent::Tick,
                ms(3_000),
                Kind::Closed,
                vec![A::Failed(1), A::Failed(2), A::CloseSession],
            ),
            (
                Kind::Sealed,
                SealEvent::SessionClosed,
                ms(0),
                Kind::Closed,
                vec![A::Failed(1), A::Failed(2)],
            ),
            // Closed
            (
                Kind::Closed,
                seal(R1, ME),
                ms(0),
                Kind::Closed,
                vec![A::Answer(SessionClosed)],
            ),
            (
                Kind::Closed,
                relay(9, None),
                ms(0),
                Kind::Closed,
                vec![A::Failed(9)],
            ),
            (
                Kind::Closed,
                route(R1, ME),
                ms(0),
                Kind::Closed,
                vec![A::Ignored(Ignored::Late)],
            ),
            (
                Kind::Closed,
                abort(R1, ME),
                ms(0),
                Kind::Closed,
                vec![A::Ignored(Ignored::Late)],
            ),
            (
                Kind::Closed,
                SealEvent::Tick,
                ms(5_000),
                Kind::Closed,
                vec![],
            ),
            (
                Kind::Closed,
                SealEvent::SessionClosed,
                ms(0),
                Kind::Closed,
                vec![],
            ),
        ];
        for (i, (from, event, at, to, actions)) in rows.into_iter().enumerate() {
            let mut m = machine(from, t0);
            let what = format!("row {i}: {from:?} + {event:?} at +{at:?}");
            let got = m.handle(event, t0 + at);
            assert_eq!(got, actions, "{what}");
            assert_eq!(kind(m.state()), to, "{what}");
        }
    }

    #[test]
    fn held_relays_keep_their_order_and_the_next_deadline_is_polled() {
        let t0 = Instant::now();
        let mut m: SealMachine<u32> = SealMachine::new(ME, T);
        assert_eq!(m.poll_timeout(), None);
        m.handle(seal(R1, ME), t0);
        assert!(m.is_sealed());
        assert_eq!(m.poll_timeout(), Some(t0 + T));
        for n in 0..100 {
            let deadline = (n == 50).then(|| t0 + Duration::from_millis(500));
            assert!(
                m.handle(relay(n, deadline), t0).is_empty(),
                "held, unbounded"
            );
        }
        assert_eq!(m.poll_timeout(), Some(t0 + Duration::from_millis(500)));
        assert_eq!(
            m.handle(SealEvent::Tick, t0 + Duration::from_millis(500)),
            vec![SealAction::Expired(50)]
        );
        assert_eq!(m.poll_timeout(), Some(t0 + T));
        let out = m.handle(route(R1, ME), t0 + Duration::from_millis(600));
        let mut expected = vec![SealAction::SwitchRoute];
        expected.extend((0..100).filter(|n| *n != 50).map(SealAction::Submit));
        assert_eq!(out, expected);
        // A duplicate 44 changes nothing; relays go straight out again.
        assert_eq!(
            m.handle(route(R1, ME), t0 + Duration::from_millis(700)),
            vec![SealAction::Ignored(Ignored::Duplicate)]
        );
        assert_eq!(m.handle(relay(7, None), t0), vec![SealAction::Submit(7)]);
        assert_eq!(m.poll_timeout(), None);
    }

    #[test]
    fn relays_still_going_out_from_an_earlier_release_go_ahead_of_the_new_seals_held_ones() {
        let t0 = Instant::now();
        let mut m: SealMachine<u32> = SealMachine::new(ME, T);
        let held = |n| Held {
            item: n,
            deadline: None,
        };
        assert_eq!(m.hold_front(vec![held(1)]), vec![held(1)], "open: returned");
        m.handle(seal(R1, ME), t0);
        m.handle(relay(3, None), t0);
        assert!(m.hold_front(vec![held(1), held(2)]).is_empty());
        assert_eq!(
            m.handle(abort(R1, ME), t0),
            vec![
                SealAction::Submit(1),
                SealAction::Submit(2),
                SealAction::Submit(3)
            ]
        );
    }
}
