//! The session owner's binding routes (issue 19 items 4–5; routing `000_…` §3.1–§3.2): for
//! each open session, one route per bound Actor, stored at bind time and used for every relay,
//! push check and disconnect notice without a Location Store read.
//!
//! A pure table (no I/O, no clock): the runtime shell calls it under one lock.
//!
//! - [`BindingTable::begin`] takes the next **owner-local binding generation** (≥ 1, never
//!   reused on this node lifecycle) for a bind of one Actor; the session's current route for
//!   that Actor, if any, stays in use.
//! - [`BindingTable::complete`] applies the bind's success terminal: the route switches to the
//!   new one in one step ("the Session owner keeps the existing route until the terminal reply,
//!   and atomically switches to the new route afterward", routing §3.1). A bind that a later
//!   bind of the same Actor overtook does not switch (**ours**: the latest bind started wins;
//!   its Actor owner holds the later identity anyway).
//! - [`BindingTable::abandon`] applies a failure terminal: the old route is kept.
//! - [`BindingTable::accepts_push`] is the whole check of a `boundSessionSend` (36): the
//!   session's current route for the Actor has that binding generation and incarnation. The
//!   sender node is not compared (issue 19 item 5).
//! - [`BindingTable::close`] takes every route of a closed session (for its disconnect
//!   notices); [`BindingTable::drop_route`] removes exactly one binding identity (a dead
//!   Actor owner, a tombstone), never a newer one.
//! - [`needs_tombstone`] decides whether a rebind leaves a stale identity on the previous Actor
//!   owner that the session owner must remove (`zlink.session.BindingTombstone`, **ours**).

use std::collections::HashMap;

use zlink_session::SessionId;

use crate::object::actor_ref::ActorRef;

/// One stored binding route: the Actor incarnation and owner it was bound on, and the
/// binding generation its owner recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingRoute {
    /// The ActorRef the bind was made with (its full route fence).
    pub actor: ActorRef,
    /// The owner-local binding generation of this bind.
    pub binding_generation: u64,
}

/// Why a bind cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeginError {
    /// The session is not open on this node.
    SessionClosed,
    /// Binding generations of this node lifecycle are used up (never in practice: 2^64).
    Exhausted,
}

/// What a bind's success terminal did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// The session's route for the Actor is the new one; `previous` is the route it replaced.
    Switched {
        /// The replaced route, if the session had one for this Actor ID.
        previous: Option<BindingRoute>,
    },
    /// A later bind of the same Actor started meanwhile: this one did not switch.
    Superseded,
    /// The session closed meanwhile.
    SessionClosed,
}

#[derive(Debug, Default)]
struct SessionRoutes {
    routes: HashMap<String, BindingRoute>,
    /// The latest bind started per Actor ID that has no terminal yet.
    pending: HashMap<String, u64>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct BindingTable {
    last_generation: u64,
    sessions: HashMap<SessionId, SessionRoutes>,
}

impl BindingTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Session `id` is open (accepted). Opening an open session keeps its routes.
    pub fn open(&mut self, id: SessionId) {
        self.sessions.entry(id).or_default();
    }

    /// Whether session `id` is open.
    pub fn is_open(&self, id: SessionId) -> bool {
        self.sessions.contains_key(&id)
    }

    /// Open sessions.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Stored routes over all sessions.
    pub fn routes(&self) -> usize {
        self.sessions.values().map(|s| s.routes.len()).sum()
    }

    /// Start a bind of Actor `actor_id` on session `id`: its binding generation.
    ///
    /// # Errors
    /// [`BeginError`].
    pub fn begin(&mut self, id: SessionId, actor_id: &str) -> Result<u64, BeginError> {
        let s = self
            .sessions
            .get_mut(&id)
            .ok_or(BeginError::SessionClosed)?;
        let generation = self
            .last_generation
            .checked_add(1)
            .ok_or(BeginError::Exhausted)?;
        self.last_generation = generation;
        s.pending.insert(actor_id.to_owned(), generation);
        Ok(generation)
    }

    /// The bind of `actor` with `binding_generation` on session `id` succeeded.
    pub fn complete(
        &mut self,
        id: SessionId,
        actor: ActorRef,
        binding_generation: u64,
    ) -> Completed {
        let Some(s) = self.sessions.get_mut(&id) else {
            return Completed::SessionClosed;
        };
        match s.pending.get(actor.actor_id()) {
            Some(g) if *g == binding_generation => {
                s.pending.remove(actor.actor_id());
            }
            Some(_) | None => return Completed::Superseded,
        }
        let previous = s.routes.insert(
            actor.actor_id().to_owned(),
            BindingRoute {
                actor,
                binding_generation,
            },
        );
        Completed::Switched { previous }
    }

    /// The bind of `actor_id` with `binding_generation` on session `id` failed: the route in
    /// use stays.
    pub fn abandon(&mut self, id: SessionId, actor_id: &str, binding_generation: u64) {
        if let Some(s) = self.sessions.get_mut(&id)
            && s.pending.get(actor_id) == Some(&binding_generation)
        {
            s.pending.remove(actor_id);
        }
    }

    /// Session `id`'s current route for Actor `actor_id`.
    pub fn route(&self, id: SessionId, actor_id: &str) -> Option<&BindingRoute> {
        self.sessions.get(&id)?.routes.get(actor_id)
    }

    /// Every route of session `id` (sorted by Actor ID).
    pub fn routes_of(&self, id: SessionId) -> Vec<BindingRoute> {
        let mut v: Vec<BindingRoute> = self
            .sessions
            .get(&id)
            .map(|s| s.routes.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.actor.actor_id().cmp(b.actor.actor_id()));
        v
    }

    /// Whether a push from Actor `actor_id` incarnation `object_generation` to session `id`
    /// under `binding_generation` matches the session's current route for it.
    pub fn accepts_push(
        &self,
        id: SessionId,
        binding_generation: u64,
        actor_id: &str,
        object_generation: u64,
    ) -> bool {
        self.route(id, actor_id).is_some_and(|r| {
            r.binding_generation == binding_generation
                && r.actor.object_generation() == object_generation
        })
    }

    /// Remove session `id`'s route for `actor_id` if it is exactly `binding_generation`;
    /// whether one was removed.
    pub fn drop_route(&mut self, id: SessionId, actor_id: &str, binding_generation: u64) -> bool {
        let Some(s) = self.sessions.get_mut(&id) else {
            return false;
        };
        if s.routes
            .get(actor_id)
            .is_some_and(|r| r.binding_generation == binding_generation)
        {
            s.routes.remove(actor_id);
            true
        } else {
            false
        }
    }

    /// Session relocation (44 `route`, routing §3.3 step 7): session `id`'s route for
    /// `actor.actor_id()` under `binding_generation` now names `actor` (the same incarnation on
    /// its new owner); whether it did. The binding identity is kept.
    pub fn switch_route(
        &mut self,
        id: SessionId,
        binding_generation: u64,
        actor: ActorRef,
    ) -> bool {
        let Some(r) = self
            .sessions
            .get_mut(&id)
            .and_then(|s| s.routes.get_mut(actor.actor_id()))
        else {
            return false;
        };
        if r.binding_generation != binding_generation
            || r.actor.object_generation() != actor.object_generation()
        {
            return false;
        }
        r.actor = actor;
        true
    }

    /// Remove session `id`'s route for `actor_id` (an explicit unbind).
    pub fn unbind(&mut self, id: SessionId, actor_id: &str) -> Option<BindingRoute> {
        self.sessions.get_mut(&id)?.routes.remove(actor_id)
    }

    /// Session `id` closed: its routes (sorted by Actor ID), which it no longer has.
    pub fn close(&mut self, id: SessionId) -> Vec<BindingRoute> {
        let mut v: Vec<BindingRoute> = self
            .sessions
            .remove(&id)
            .map(|s| s.routes.into_values().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.actor.actor_id().cmp(b.actor.actor_id()));
        v
    }
}

/// Whether a rebind that replaced route `previous` with one naming `new` leaves the previous
/// Actor owner holding the retired binding identity: it does when `previous` named another
/// node lifecycle or another incarnation. On the same owner and incarnation the bind itself
/// replaced it (an Actor has one current binding), so nothing is left to remove.
pub fn needs_tombstone(previous: &BindingRoute, new: &ActorRef) -> bool {
    previous.actor.owner() != new.owner()
        || previous.actor.object_generation() != new.object_generation()
}

#[cfg(test)]
mod tests {
    use zlink_protocol::generated::{NodeFence, ObjectKind, RouteFence};

    use super::*;

    fn sid(n: u64) -> SessionId {
        SessionId::new(n).expect("non-zero")
    }

    fn actor(id: &str, generation: u64, node: &str) -> ActorRef {
        ActorRef::from_route(
            RouteFence {
                object_kind: ObjectKind::Actor,
                object_id: id.into(),
                object_generation: generation,
                target_node: NodeFence {
                    rid: zlink_protocol::shared_str::SharedStr::copy_from(node),
                    lifecycle_generation: 1,
                },
                authority_owner_generation: 1,
                owner_lease_generation: 1,
            },
            "m",
        )
        .expect("an Actor route")
    }

    #[test]
    fn binding_generations_are_owner_local_increasing_and_never_reused_across_sessions() {
        let mut t = BindingTable::new();
        t.open(sid(1));
        t.open(sid(2));
        let a = t.begin(sid(1), "a").expect("open");
        let b = t.begin(sid(2), "a").expect("open");
        let c = t.begin(sid(1), "b").expect("open");
        assert_eq!((a, b, c), (1, 2, 3));
        assert_eq!(t.begin(sid(9), "a"), Err(BeginError::SessionClosed));
        t.close(sid(1));
        t.open(sid(1));
        assert_eq!(
            t.begin(sid(1), "a"),
            Ok(4),
            "a reopened id does not restart the count"
        );
    }

    #[test]
    fn the_old_route_stays_until_the_terminal_then_switches_in_one_step() {
        let mut t = BindingTable::new();
        t.open(sid(1));
        let g1 = t.begin(sid(1), "a").expect("open");
        assert_eq!(
            t.complete(sid(1), actor("a", 1, "n1"), g1),
            Completed::Switched { previous: None }
        );
        let g2 = t.begin(sid(1), "a").expect("open");
        // In flight: the first route is still the one in use.
        assert_eq!(t.route(sid(1), "a").map(|r| r.binding_generation), Some(g1));
        assert!(t.accepts_push(sid(1), g1, "a", 1));
        assert!(!t.accepts_push(sid(1), g2, "a", 2));
        let done = t.complete(sid(1), actor("a", 2, "n2"), g2);
        assert_eq!(
            done,
            Completed::Switched {
                previous: Some(BindingRoute {
                    actor: actor("a", 1, "n1"),
                    binding_generation: g1
                })
            }
        );
        assert!(t.accepts_push(sid(1), g2, "a", 2));
        assert!(
            !t.accepts_push(sid(1), g1, "a", 1),
            "the old identity is gone"
        );
        assert!(!t.accepts_push(sid(1), g2, "a", 1), "another incarnation");
    }

    #[test]
    fn a_failed_bind_keeps_the_route_in_use_and_an_overtaken_bind_does_not_switch() {
        let mut t = BindingTable::new();
        t.open(sid(1));
        let g1 = t.begin(sid(1), "a").expect("open");
        t.complete(sid(1), actor("a", 1, "n1"), g1);
        let g2 = t.begin(sid(1), "a").expect("open");
        t.abandon(sid(1), "a", g2);
        assert_eq!(t.route(sid(1), "a").map(|r| r.binding_generation), Some(g1));
        // Two binds in flight: the later one wins whichever terminal comes first.
        let g3 = t.begin(sid(1), "a").expect("open");
        let g4 = t.begin(sid(1), "a").expect("open");
        assert_eq!(
            t.complete(sid(1), actor("a", 1, "n1"), g3),
            Completed::Superseded
        );
        assert_eq!(t.route(sid(1), "a").map(|r| r.binding_generation), Some(g1));
        t.abandon(sid(1), "a", g3);
        assert!(matches!(
            t.complete(sid(1), actor("a", 1, "n1"), g4),
            Completed::Switched { .. }
        ));
        assert_eq!(t.route(sid(1), "a").map(|r| r.binding_generation), Some(g4));
    }

    #[test]
    fn a_closed_session_takes_its_routes_and_later_terminals_change_nothing() {
        let mut t = BindingTable::new();
        t.open(sid(1));
        t.open(sid(2));
        let ga = t.begin(sid(1), "a").expect("open");
        t.complete(sid(1), actor("a", 1, "n1"), ga);
        let gb = t.begin(sid(1), "b").expect("open");
        t.complete(sid(1), actor("b", 1, "n2"), gb);
        let other = t.begin(sid(2), "a").expect("open");
        t.complete(sid(2), actor("a", 1, "n1"), other);
        let pending = t.begin(sid(1), "c").expect("open");
        let closed = t.close(sid(1));
        assert_eq!(
            closed
                .iter()
                .map(|r| r.actor.actor_id())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            t.complete(sid(1), actor("c", 1, "n1"), pending),
            Completed::SessionClosed
        );
        assert!(!t.is_open(sid(1)));
        assert!(
            t.accepts_push(sid(2), other, "a", 1),
            "another session is untouched"
        );
        assert_eq!((t.sessions(), t.routes()), (1, 1));
    }

    #[test]
    fn a_rebind_to_another_owner_or_incarnation_needs_a_tombstone_and_a_same_owner_one_does_not() {
        let previous = |generation, node| BindingRoute {
            actor: actor("a", generation, node),
            binding_generation: 1,
        };
        let mut lifecycle_2 = actor("a", 1, "n1").route().clone();
        lifecycle_2.target_node.lifecycle_generation = 2;
        let mut moved_back = actor("a", 1, "n1").route().clone();
        moved_back.authority_owner_generation = 3;
        moved_back.owner_lease_generation = 2;
        let cases = [
            (
                "same owner, same incarnation",
                previous(1, "n1"),
                actor("a", 1, "n1"),
                false,
            ),
            (
                "same owner and incarnation, newer owner generation",
                previous(1, "n1"),
                ActorRef::from_route(moved_back, "m").expect("an Actor route"),
                false,
            ),
            (
                "another owner node",
                previous(1, "n1"),
                actor("a", 1, "n2"),
                true,
            ),
            (
                "another lifecycle of the owner's RID",
                previous(1, "n1"),
                ActorRef::from_route(lifecycle_2, "m").expect("an Actor route"),
                true,
            ),
            (
                "a newer incarnation on the same owner",
                previous(1, "n1"),
                actor("a", 2, "n1"),
                true,
            ),
            (
                "a newer incarnation elsewhere",
                previous(1, "n1"),
                actor("a", 2, "n2"),
                true,
            ),
        ];
        for (case, previous, new, expected) in cases {
            assert_eq!(needs_tombstone(&previous, &new), expected, "{case}");
        }
    }

    #[test]
    fn dropping_a_route_removes_only_that_exact_binding_identity() {
        let mut t = BindingTable::new();
        t.open(sid(1));
        let g1 = t.begin(sid(1), "a").expect("open");
        t.complete(sid(1), actor("a", 1, "n1"), g1);
        let g2 = t.begin(sid(1), "a").expect("open");
        t.complete(sid(1), actor("a", 1, "n1"), g2);
        assert!(
            !t.drop_route(sid(1), "a", g1),
            "the retired identity is not current"
        );
        assert!(t.accepts_push(sid(1), g2, "a", 1));
        assert!(t.drop_route(sid(1), "a", g2));
        assert!(t.route(sid(1), "a").is_none());
        assert!(!t.drop_route(sid(7), "a", g2));
        let g3 = t.begin(sid(1), "b").expect("open");
        t.complete(sid(1), actor("b", 1, "n1"), g3);
        // A route switch keeps the identity and needs the same incarnation.
        assert!(!t.switch_route(sid(1), g3, actor("b", 2, "n2")));
        assert!(!t.switch_route(sid(1), g3 + 1, actor("b", 1, "n2")));
        assert!(t.switch_route(sid(1), g3, actor("b", 1, "n2")));
        assert_eq!(
            t.route(sid(1), "b")
                .map(|r| (r.actor.owner().rid.as_str(), r.binding_generation)),
            Some(("n2", g3))
        );
        assert_eq!(
            t.unbind(sid(1), "b").map(|r| r.binding_generation),
            Some(g3)
        );
        assert!(t.routes_of(sid(1)).is_empty());
    }
}
