//! What the **Actor owner** decides about session traffic (issue 19 items 4–5; routing
//! `000_…` §3.1, §3.2, §2.6): pure functions of what the node knows, table-tested. The shell
//! (`object::runtime::sessions`) gathers the facts under its locks and acts on the verdict.
//!
//! - [`bind_verdict`]: a `boundSessionBind` (38) is accepted only for the exact incarnation,
//!   node lifecycle, owner generation and owner lease the session's ActorRef names, within the
//!   request deadline, while this node admits work.
//! - [`relay_verdict`]: an `actorSend` / `actorRequest` (24/25) with a bound-session tail is
//!   admitted only when the Actor's current binding is exactly that SessionRef and the route
//!   names the live incarnation (a session relay, unlike a direct message, is not retargeted to
//!   a re-created incarnation: routing §2.6 "Session bind and relay").

use zlink_protocol::generated::{NodeFence, RouteFence, SessionRef};

use crate::call::error::ErrorKind;

/// What the owner's live table holds for the Actor ID of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveFact {
    /// Nothing: no incarnation lives here (never created here, closed, or destroyed).
    NotLive,
    /// Incarnation `generation` lives here under `authority_owner_generation`.
    Live {
        /// ObjectGeneration.
        generation: u64,
        /// AuthorityOwnerGeneration.
        authority_owner_generation: u64,
    },
    /// The incarnation is being moved (sealed on this source or not yet switched in here).
    Moving,
    /// The incarnation was handed over to another node; its entry here only follows arrivals.
    HandedOver,
}

/// Everything [`bind_verdict`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct BindFacts<'a> {
    /// The runtime is stopping.
    pub shutting_down: bool,
    /// The node admits new object work (its owner lease is confirmed, the fencing deadline has
    /// not passed).
    pub admission_open: bool,
    /// This node lifecycle.
    pub me: &'a NodeFence,
    /// This node's current owner lease generation (`None`: it holds none).
    pub lease_generation: Option<u64>,
    /// Now, in wall-clock Unix milliseconds (the request deadline's clock).
    pub now_unix_ms: u64,
    /// The live table's answer for the route's Actor ID.
    pub live: LiveFact,
}

/// A refusal: the closed error kind and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The error kind the request ends with.
    pub kind: ErrorKind,
    /// Why (for the detail text and logs).
    pub why: &'static str,
}

const fn refuse(kind: ErrorKind, why: &'static str) -> Refusal {
    Refusal { kind, why }
}

/// Whether a bind of `route` with request deadline `deadline_unix_ms` is accepted here (the
/// closed failures of issue 19 item 4: `ShuttingDown`, `DeadlineExceeded`, `Unavailable`,
/// `StaleRoute`, `NotFound`, `InvalidOperation`).
///
/// # Errors
/// The [`Refusal`].
pub fn bind_verdict(
    route: &RouteFence,
    deadline_unix_ms: u64,
    f: &BindFacts<'_>,
) -> Result<(), Refusal> {
    if f.shutting_down {
        return Err(refuse(
            ErrorKind::ShuttingDown,
            "the object runtime is stopping",
        ));
    }
    if deadline_unix_ms <= f.now_unix_ms {
        return Err(refuse(
            ErrorKind::DeadlineExceeded,
            "the bind's deadline passed before it was admitted",
        ));
    }
    if !f.admission_open {
        return Err(refuse(
            ErrorKind::Unavailable,
            "the owner lease could not be renewed before the fencing deadline",
        ));
    }
    if route.target_node != *f.me {
        return Err(refuse(
            ErrorKind::StaleRoute,
            "the ActorRef names another node lifecycle",
        ));
    }
    match f.lease_generation {
        None => {
            return Err(refuse(
                ErrorKind::Unavailable,
                "this node holds no owner lease",
            ));
        }
        Some(g) if g != route.owner_lease_generation => {
            return Err(refuse(
                ErrorKind::StaleRoute,
                "the ActorRef's owner lease is not this node's current lease",
            ));
        }
        Some(_) => {}
    }
    match f.live {
        LiveFact::NotLive => Err(refuse(ErrorKind::NotFound, "the Actor does not live here")),
        LiveFact::HandedOver => Err(refuse(
            ErrorKind::StaleRoute,
            "the Actor moved to another node",
        )),
        LiveFact::Moving => Err(refuse(
            ErrorKind::Unavailable,
            "the Actor is being moved; bind again with a fresh ActorRef",
        )),
        LiveFact::Live {
            generation,
            authority_owner_generation,
        } => {
            if generation > route.object_generation {
                Err(refuse(
                    ErrorKind::InvalidOperation,
                    "the ActorRef names an earlier incarnation; a new one needs its own bind",
                ))
            } else if generation < route.object_generation {
                Err(refuse(
                    ErrorKind::StaleRoute,
                    "the ActorRef names an incarnation this node does not hold",
                ))
            } else if authority_owner_generation != route.authority_owner_generation {
                Err(refuse(
                    ErrorKind::StaleRoute,
                    "the Actor's owner generation changed since the ActorRef was taken",
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Whether a relay of incarnation `route_generation` with bound-session tail `tail` reaches
/// the Actor whose live incarnation is `live_generation` and whose current binding is
/// `binding` (target admission of the route itself is checked before). A request refused here
/// ends with the kind; a one-way relay is dropped and counted.
///
/// # Errors
/// `InvalidOperation` for another incarnation, `StaleRoute` for a binding that is not current.
pub fn relay_verdict(
    route_generation: u64,
    tail: &SessionRef,
    live_generation: u64,
    binding: Option<&SessionRef>,
) -> Result<(), Refusal> {
    if live_generation != route_generation {
        return Err(refuse(
            ErrorKind::InvalidOperation,
            "the session is bound to another incarnation of this Actor",
        ));
    }
    match binding {
        Some(b) if b == tail => Ok(()),
        Some(_) => Err(refuse(
            ErrorKind::StaleRoute,
            "the session's binding was replaced",
        )),
        None => Err(refuse(ErrorKind::StaleRoute, "the Actor has no binding")),
    }
}

#[cfg(test)]
mod tests {
    use zlink_protocol::generated::ObjectKind;

    use super::*;

    fn me() -> NodeFence {
        NodeFence {
            rid: "b".into(),
            lifecycle_generation: 2,
        }
    }

    fn route() -> RouteFence {
        RouteFence {
            object_kind: ObjectKind::Actor,
            object_id: "player:ann".into(),
            object_generation: 4,
            target_node: me(),
            authority_owner_generation: 9,
            owner_lease_generation: 3,
        }
    }

    const LIVE: LiveFact = LiveFact::Live {
        generation: 4,
        authority_owner_generation: 9,
    };

    /// Every refusal of a bind, each from one fact changed off the accepted baseline, in the
    /// order the checks apply.
    #[test]
    fn a_bind_is_accepted_only_for_the_exact_incarnation_node_owner_and_lease() {
        let me = me();
        let ok = BindFacts {
            shutting_down: false,
            admission_open: true,
            me: &me,
            lease_generation: Some(3),
            now_unix_ms: 1_000,
            live: LIVE,
        };
        assert_eq!(bind_verdict(&route(), 2_000, &ok), Ok(()));
        let other_node = NodeFence {
            rid: "b".into(),
            lifecycle_generation: 3,
        };
        type Case<'a> = (&'a str, BindFacts<'a>, u64, ErrorKind);
        let cases: Vec<Case<'_>> = vec![
            (
                "stopping",
                BindFacts {
                    shutting_down: true,
                    ..ok
                },
                2_000,
                ErrorKind::ShuttingDown,
            ),
            ("past deadline", ok, 1_000, ErrorKind::DeadlineExceeded),
            (
                "fenced",
                BindFacts {
                    admission_open: false,
                    ..ok
                },
                2_000,
                ErrorKind::Unavailable,
            ),
            (
                "restarted node",
                BindFacts {
                    me: &other_node,
                    ..ok
                },
                2_000,
                ErrorKind::StaleRoute,
            ),
            (
                "no lease",
                BindFacts {
                    lease_generation: None,
                    ..ok
                },
                2_000,
                ErrorKind::Unavailable,
            ),
            (
                "new lease",
                BindFacts {
                    lease_generation: Some(4),
                    ..ok
                },
                2_000,
                ErrorKind::StaleRoute,
            ),
            (
                "gone",
                BindFacts {
                    live: LiveFact::NotLive,
                    ..ok
                },
                2_000,
                ErrorKind::NotFound,
            ),
            (
                "moved",
                BindFacts {
                    live: LiveFact::HandedOver,
                    ..ok
                },
                2_000,
                ErrorKind::StaleRoute,
            ),
            (
                "moving",
                BindFacts {
                    live: LiveFact::Moving,
                    ..ok
                },
                2_000,
                ErrorKind::Unavailable,
            ),
            (
                "re-created",
                BindFacts {
                    live: LiveFact::Live {
                        generation: 5,
                        authority_owner_generation: 9,
                    },
                    ..ok
                },
                2_000,
                ErrorKind::InvalidOperation,
            ),
            (
                "older here",
                BindFacts {
                    live: LiveFact::Live {
                        generation: 3,
                        authority_owner_generation: 9,
                    },
                    ..ok
                },
                2_000,
                ErrorKind::StaleRoute,
            ),
            (
                "owner changed",
                BindFacts {
                    live: LiveFact::Live {
                        generation: 4,
                        authority_owner_generation: 10,
                    },
                    ..ok
                },
                2_000,
                ErrorKind::StaleRoute,
            ),
        ];
        for (what, facts, deadline, kind) in cases {
            let got = bind_verdict(&route(), deadline, &facts).map_err(|r| r.kind);
            assert_eq!(got, Err(kind), "{what}");
        }
    }

    #[test]
    fn a_relay_reaches_the_actor_only_under_its_current_binding_and_incarnation() {
        let s = |session_id, binding_generation| SessionRef {
            owner_node: NodeFence {
                rid: "a".into(),
                lifecycle_generation: 1,
            },
            session_id,
            binding_generation,
        };
        assert_eq!(relay_verdict(4, &s(1, 7), 4, Some(&s(1, 7))), Ok(()));
        let kind = |r: Result<(), Refusal>| r.map_err(|r| r.kind);
        assert_eq!(
            kind(relay_verdict(4, &s(1, 7), 5, Some(&s(1, 7)))),
            Err(ErrorKind::InvalidOperation),
            "a re-created incarnation is not the bound one"
        );
        assert_eq!(
            kind(relay_verdict(4, &s(1, 7), 4, Some(&s(1, 8)))),
            Err(ErrorKind::StaleRoute),
            "a rebind of the same session retired generation 7"
        );
        assert_eq!(
            kind(relay_verdict(4, &s(1, 7), 4, Some(&s(2, 7)))),
            Err(ErrorKind::StaleRoute),
            "another session replaced it"
        );
        assert_eq!(
            kind(relay_verdict(4, &s(1, 7), 4, None)),
            Err(ErrorKind::StaleRoute)
        );
    }
}
