//! Message Follow on the previous owner (issue 17 item 7; routing `000_…` §2.5; wire §3.1,
//! §10): after a unit moved, a record that still arrives on its old route is forwarded to the
//! new owner as `relocationData` (31), frames unchanged, for a bounded time. Pure: `now` is an
//! input, no timers, no I/O.
//!
//! - A follow route of an object exists from its cutover submit until the end of the cutover
//!   retransmission window plus `MessageFollowDuration` (30 s by default; 0 = off), fixed when
//!   the relocation starts.
//! - A record is forwarded only to an owner generation higher than the one its route names: a
//!   forward that would go back to the same or an older incarnation of the authority is a loop
//!   and is refused (`Unavailable`).
//! - The move history kept in the authority payload bounds a chain: [`MAX_FOLLOW_HOPS`] (8)
//!   moves within the follow duration and the object stays where it is (`FollowChainFull`).
//! - No follow route, or an expired one: a request is answered `Unavailable`, a one-way send is
//!   a counted drop.

use std::collections::HashMap;

use zlink_protocol::generated::{NodeFence, ObjectKind, RouteFence};

/// Most moves of one object within the follow duration (routing §2.5: the chain is at most 8
/// hops); a unit that would make the 9th stays (`FollowChainFull`).
pub const MAX_FOLLOW_HOPS: usize = 8;

/// Where a moved object went, and until when this node forwards to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowRoute {
    /// The new owner node.
    pub to: NodeFence,
    /// The owner generation the new owner holds (higher than any route to this node).
    pub owner_generation: u64,
    /// End of the follow window (caller's clock, ms).
    pub until_ms: u64,
}

/// What to do with a record that arrived on an object's old route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowDecision {
    /// Forward it to `to` as `relocationData` (31), frames unchanged.
    Forward {
        /// The new owner.
        to: NodeFence,
    },
    /// The object never moved from here (or its follow route ended long ago): not ours to
    /// follow; a request is answered `Unavailable` (`StaleRoute` handling stays the caller's),
    /// a send dropped and counted.
    NoRoute,
    /// The follow window has passed.
    Expired,
    /// Forwarding would not move forward in owner generation (a loop): refused.
    Loop,
}

/// Follow routes of the objects that moved away from this node.
#[derive(Debug, Default)]
pub struct FollowTable {
    routes: HashMap<(u8, String), FollowRoute>,
}

impl FollowTable {
    /// Object (`kind`, `id`) moved: from its cutover submit at `now_ms`, records on its old
    /// route follow to `to` for `window_ms` (retransmission window + MessageFollowDuration). A
    /// `window_ms` of 0 (Message Follow off) records nothing.
    pub fn moved(
        &mut self,
        kind: ObjectKind,
        id: &str,
        to: NodeFence,
        owner_generation: u64,
        now_ms: u64,
        window_ms: u64,
    ) {
        if window_ms == 0 {
            return;
        }
        self.routes.insert(
            (kind.to_wire(), id.to_owned()),
            FollowRoute {
                to,
                owner_generation,
                until_ms: now_ms.saturating_add(window_ms),
            },
        );
    }

    /// A record arrived on `route` (which names this node) at `now_ms`.
    pub fn decide(&self, route: &RouteFence, now_ms: u64) -> FollowDecision {
        let Some(f) = self
            .routes
            .get(&(route.object_kind.to_wire(), route.object_id.clone()))
        else {
            return FollowDecision::NoRoute;
        };
        if now_ms >= f.until_ms {
            FollowDecision::Expired
        } else if f.owner_generation <= route.authority_owner_generation {
            FollowDecision::Loop
        } else {
            FollowDecision::Forward { to: f.to.clone() }
        }
    }

    /// The latest end of any follow window (for SafeToShutdown), or 0.
    pub fn last_until_ms(&self) -> u64 {
        self.routes.values().map(|f| f.until_ms).max().unwrap_or(0)
    }

    /// Drop follow routes whose window has passed at `now_ms`.
    pub fn sweep(&mut self, now_ms: u64) {
        self.routes.retain(|_, f| now_ms < f.until_ms);
    }

    /// Follow routes kept.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// Whether one more move of an object is allowed, given the times of its recent moves (from
/// its authority payload) and the follow duration: at most [`MAX_FOLLOW_HOPS`] moves within
/// `follow_duration_ms` before `now_ms` (a move older than that has no follow route left).
pub fn chain_has_room(recent_moves_ms: &[u64], now_ms: u64, follow_duration_ms: u64) -> bool {
    let since = now_ms.saturating_sub(follow_duration_ms);
    recent_moves_ms.iter().filter(|&&t| t > since).count() < MAX_FOLLOW_HOPS
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn node(rid: &str) -> NodeFence {
        NodeFence {
            rid: zlink_protocol::shared_str::SharedStr::copy_from(rid),
            lifecycle_generation: 1,
        }
    }

    fn route(id: &str, owner_generation: u64) -> RouteFence {
        RouteFence {
            object_kind: ObjectKind::Actor,
            object_id: id.into(),
            object_generation: 1,
            target_node: node("old"),
            authority_owner_generation: owner_generation,
            owner_lease_generation: 1,
        }
    }

    /// Each case of a record arriving on an old route.
    #[test]
    fn a_record_on_an_old_route_follows_only_forward_and_only_within_the_window() {
        let mut t = FollowTable::default();
        t.moved(ObjectKind::Actor, "p", node("new"), 3, 1_000, 31_000);
        let cases = [
            (
                route("p", 2),
                1_000,
                FollowDecision::Forward { to: node("new") },
            ),
            (
                route("p", 1),
                31_999,
                FollowDecision::Forward { to: node("new") },
            ),
            (route("p", 2), 32_000, FollowDecision::Expired),
            (route("p", 3), 2_000, FollowDecision::Loop),
            (route("p", 4), 2_000, FollowDecision::Loop),
            (route("q", 2), 2_000, FollowDecision::NoRoute),
            (
                RouteFence {
                    object_kind: ObjectKind::Spot,
                    ..route("p", 2)
                },
                2_000,
                FollowDecision::NoRoute,
            ),
        ];
        for (r, now, want) in cases {
            assert_eq!(t.decide(&r, now), want, "{r:?} at {now}");
        }
    }

    #[test]
    fn message_follow_off_records_nothing_and_a_new_move_replaces_the_old_route() {
        let mut t = FollowTable::default();
        t.moved(ObjectKind::Actor, "p", node("b"), 2, 0, 0);
        assert!(t.is_empty(), "MessageFollowDuration 0: no follow");
        assert_eq!(t.decide(&route("p", 1), 0), FollowDecision::NoRoute);
        t.moved(ObjectKind::Actor, "p", node("b"), 2, 0, 10);
        t.moved(ObjectKind::Actor, "p", node("c"), 4, 5, 10);
        assert_eq!(
            t.decide(&route("p", 3), 6),
            FollowDecision::Forward { to: node("c") }
        );
        assert_eq!(t.last_until_ms(), 15);
        t.sweep(15);
        assert!(t.is_empty());
    }

    #[test]
    fn a_chain_allows_eight_moves_within_the_follow_duration() {
        let d = 30_000;
        let seven: Vec<u64> = (0..7).map(|i| 100_000 + i).collect();
        assert!(chain_has_room(&seven, 110_000, d));
        let eight: Vec<u64> = (0..8).map(|i| 100_000 + i).collect();
        assert!(
            !chain_has_room(&eight, 110_000, d),
            "a 9th move is FollowChainFull"
        );
        // Moves older than the follow duration no longer count.
        assert!(chain_has_room(&eight, 130_001, d));
        assert!(chain_has_room(&[], 0, d));
    }
}
