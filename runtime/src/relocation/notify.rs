//! `messageFollow` (50) suppression (issue 17 item 8; wire §3.1; routing `000_…` §2.5): the
//! owner that admitted a followed record tells that record's source its cache is stale — once
//! per stale route, not once per record. Pure: `now` is an input, there are no timers; an entry
//! ends when its window passes (checked when it is next looked at, and by [`Suppression::sweep`])
//! or when the owner's route it names is replaced.
//!
//! Per key — the recipient plus every field of both route fences (the sender's stale
//! `sourceRoute` and the owner's own `targetRoute`):
//!
//! ```text
//!            followed (send)              submitted
//!   Idle ────────────────────► InFlight ───────────► SentUntil(expiry)
//!    ▲                            │                      │
//!    └──── submit failed ─────────┘                      │ now ≥ expiry, or the route is replaced
//!    └───────────────────────────────────────────────────┘
//! ```
//!
//! A record followed while its key is `InFlight` or `SentUntil` (before expiry) sends nothing.
//! The table is bounded ([`MAX_ENTRIES`]): when full (after dropping expired entries) a
//! notification is sent without being remembered — a duplicate notice is harmless, a missing
//! one only delays the sender's refresh until its cache entry lapses.

use std::collections::HashMap;

use zlink_protocol::generated::{NodeFence, ObjectKind, RouteFence};
use zlink_protocol::shared_str::SharedStr;

/// Most suppression entries a node keeps.
pub const MAX_ENTRIES: usize = 65_536;

/// A route fence's fields, as a map key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FenceKey {
    object_kind: u8,
    object_id: String,
    object_generation: u64,
    target_rid: String,
    target_lifecycle: u64,
    authority_owner_generation: u64,
    owner_lease_generation: u64,
}

impl From<&RouteFence> for FenceKey {
    fn from(r: &RouteFence) -> Self {
        Self {
            object_kind: r.object_kind.to_wire(),
            object_id: r.object_id.clone(),
            object_generation: r.object_generation,
            target_rid: r.target_node.rid.to_string(),
            target_lifecycle: r.target_node.lifecycle_generation,
            authority_owner_generation: r.authority_owner_generation,
            owner_lease_generation: r.owner_lease_generation,
        }
    }
}

/// One suppression key: recipient + both route fences, every field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NotifyKey {
    recipient_rid: String,
    recipient_lifecycle: u64,
    source_route: FenceKey,
    target_route: FenceKey,
}

impl NotifyKey {
    /// The key of a notice to `recipient` that its `source_route` is replaced by
    /// `target_route`.
    pub fn new(
        recipient: &NodeFence,
        source_route: &RouteFence,
        target_route: &RouteFence,
    ) -> Self {
        Self {
            recipient_rid: recipient.rid.to_string(),
            recipient_lifecycle: recipient.lifecycle_generation,
            source_route: source_route.into(),
            target_route: target_route.into(),
        }
    }
}

/// Where a key is (Idle is "no entry").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A notice is being submitted.
    InFlight,
    /// A notice went out; nothing more until `expiry` (ms, caller's clock).
    SentUntil(u64),
}

/// What to do with a followed record's notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Submit a `messageFollow`; report its submit with [`Suppression::submitted`].
    Send,
    /// Submit one, but it is not remembered (the table is full): no report needed.
    SendUntracked,
    /// A notice for this key is in flight or was sent within its window: send nothing.
    Suppress,
}

/// The suppression table of one node (see the module docs).
#[derive(Debug, Default)]
pub struct Suppression {
    entries: HashMap<NotifyKey, Entry>,
}

impl Suppression {
    /// A record was followed under `key` at `now_ms`: send a notice, or not.
    pub fn followed(&mut self, key: NotifyKey, now_ms: u64) -> Decision {
        match self.entries.get(&key).copied() {
            Some(Entry::InFlight) => Decision::Suppress,
            Some(Entry::SentUntil(expiry)) if now_ms < expiry => Decision::Suppress,
            Some(Entry::SentUntil(_)) => {
                self.entries.insert(key, Entry::InFlight);
                Decision::Send
            }
            None => {
                if self.entries.len() >= MAX_ENTRIES {
                    self.sweep(now_ms);
                }
                if self.entries.len() >= MAX_ENTRIES {
                    return Decision::SendUntracked;
                }
                self.entries.insert(key, Entry::InFlight);
                Decision::Send
            }
        }
    }

    /// The notice for `key` was submitted (`ok`) or its submit failed; a sent notice
    /// suppresses others until `until_ms`. A report for a key that is not in flight (its route
    /// was replaced meanwhile, or it was never tracked) changes nothing.
    pub fn submitted(&mut self, key: &NotifyKey, ok: bool, until_ms: u64) {
        if self.entries.get(key) != Some(&Entry::InFlight) {
            return;
        }
        if ok {
            self.entries.insert(key.clone(), Entry::SentUntil(until_ms));
        } else {
            self.entries.remove(key);
        }
    }

    /// The owner's route of (`kind`, `id`) was replaced (the object moved again, or closed):
    /// every entry naming it as its target route ends.
    pub fn route_replaced(&mut self, kind: ObjectKind, id: &str) {
        let kind = kind.to_wire();
        self.entries
            .retain(|k, _| !(k.target_route.object_kind == kind && k.target_route.object_id == id));
    }

    /// Drop every entry whose window has passed at `now_ms` (bounded memory; entries in flight
    /// stay until their submit is reported).
    pub fn sweep(&mut self, now_ms: u64) {
        self.entries.retain(|_, e| match e {
            Entry::InFlight => true,
            Entry::SentUntil(expiry) => now_ms < *expiry,
        });
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Most peers [`RecentRecipients`] remembers.
pub const RECENT_RECIPIENTS_MAX: usize = 8;

/// The peers this node sent a `messageFollow` to lately (**ours**, docs/architecture.md
/// "Message Follow"): when a later unit is handed over, the old owner notifies them at once
/// instead of at their first followed record, since a peer that sent to one moved object of a
/// relocation usually sends to the next ones too (game rooms and zones are called by a few
/// gateway nodes). Each such record would otherwise take the follow path — old owner, new
/// owner, a relayed terminal and its ack — and be answered several hops later. A notice to a
/// peer without that route cached changes nothing there (routing §2.5: only an equal route is
/// dropped). Pure (`now_ms` is an input) and bounded: the [`RECENT_RECIPIENTS_MAX`] most
/// recent peers, so a moved object costs at most that many extra notices.
#[derive(Debug, Default)]
pub struct RecentRecipients {
    /// (rid, lifecycle generation) → when it was last sent a notice.
    last: HashMap<(SharedStr, u64), u64>,
}

impl RecentRecipients {
    /// A notice went to `peer` at `now_ms`.
    pub fn noted(&mut self, peer: &NodeFence, now_ms: u64) {
        let key = (peer.rid.clone(), peer.lifecycle_generation);
        if let Some(t) = self.last.get_mut(&key) {
            *t = (*t).max(now_ms);
            return;
        }
        if self.last.len() >= RECENT_RECIPIENTS_MAX
            && let Some(oldest) = self
                .last
                .iter()
                .min_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)))
                .map(|(k, _)| k.clone())
        {
            self.last.remove(&oldest);
        }
        self.last.insert(key, now_ms);
    }

    /// The peers noted within `window_ms` before `now_ms`, by RID; older ones are forgotten.
    pub fn within(&mut self, now_ms: u64, window_ms: u64) -> Vec<NodeFence> {
        self.last
            .retain(|_, t| t.saturating_add(window_ms) > now_ms);
        let mut out: Vec<NodeFence> = self
            .last
            .keys()
            .map(|(rid, lifecycle_generation)| NodeFence {
                rid: rid.clone(),
                lifecycle_generation: *lifecycle_generation,
            })
            .collect();
        out.sort_by(|a, b| {
            (a.rid.as_str(), a.lifecycle_generation).cmp(&(b.rid.as_str(), b.lifecycle_generation))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rid: &str, lifecycle: u64) -> NodeFence {
        NodeFence {
            rid: zlink_protocol::shared_str::SharedStr::copy_from(rid),
            lifecycle_generation: lifecycle,
        }
    }

    fn route(id: &str, owner: &str, owner_generation: u64) -> RouteFence {
        RouteFence {
            object_kind: ObjectKind::Actor,
            object_id: id.into(),
            object_generation: 1,
            target_node: node(owner, 1),
            authority_owner_generation: owner_generation,
            owner_lease_generation: 1,
        }
    }

    fn key(recipient: &str) -> NotifyKey {
        NotifyKey::new(
            &node(recipient, 1),
            &route("p", "old", 1),
            &route("p", "new", 2),
        )
    }

    /// Every state × event of the machine in the module docs.
    #[test]
    fn each_state_and_event_of_the_suppression_machine() {
        // Idle: followed → Send, InFlight.
        let mut s = Suppression::default();
        assert_eq!(s.followed(key("a"), 0), Decision::Send);
        // InFlight: followed → Suppress; failed submit → Idle; ok submit → SentUntil.
        assert_eq!(s.followed(key("a"), 1), Decision::Suppress);
        s.submitted(&key("a"), false, 100);
        assert!(s.is_empty(), "a failed submit returns the key to Idle");
        assert_eq!(
            s.followed(key("a"), 2),
            Decision::Send,
            "and the next record sends again"
        );
        s.submitted(&key("a"), true, 100);
        // SentUntil: followed before expiry → Suppress; at expiry → Send (InFlight again).
        assert_eq!(s.followed(key("a"), 99), Decision::Suppress);
        assert_eq!(s.followed(key("a"), 100), Decision::Send);
        assert_eq!(
            s.followed(key("a"), 100),
            Decision::Suppress,
            "in flight again"
        );
        // A report for a key that is not in flight changes nothing.
        s.submitted(&key("a"), true, 500);
        s.submitted(&key("a"), true, 700);
        assert_eq!(s.followed(key("a"), 499), Decision::Suppress);
        assert_eq!(
            s.followed(key("a"), 600),
            Decision::Send,
            "the first report's window counts, not the later one's"
        );
        s.submitted(&key("zz"), true, 900);
        assert_eq!(s.len(), 1, "an unknown key's report adds nothing");
    }

    #[test]
    fn every_field_of_the_recipient_and_both_fences_is_part_of_the_key() {
        let mut s = Suppression::default();
        assert_eq!(s.followed(key("a"), 0), Decision::Send);
        let src = route("p", "old", 1);
        let dst = route("p", "new", 2);
        let variants = [
            NotifyKey::new(&node("b", 1), &src, &dst),
            NotifyKey::new(&node("a", 2), &src, &dst),
            NotifyKey::new(&node("a", 1), &route("p", "old", 0), &dst),
            NotifyKey::new(&node("a", 1), &src, &route("p", "new", 3)),
            NotifyKey::new(&node("a", 1), &route("q", "old", 1), &dst),
            NotifyKey::new(
                &node("a", 1),
                &RouteFence {
                    owner_lease_generation: 9,
                    ..src.clone()
                },
                &dst,
            ),
            NotifyKey::new(
                &node("a", 1),
                &src,
                &RouteFence {
                    object_kind: ObjectKind::Spot,
                    ..dst.clone()
                },
            ),
        ];
        for k in variants {
            assert_eq!(
                s.followed(k.clone(), 0),
                Decision::Send,
                "{k:?} is its own key"
            );
        }
    }

    #[test]
    fn a_replaced_route_ends_its_entries_and_only_those() {
        let mut s = Suppression::default();
        s.followed(key("a"), 0);
        s.submitted(&key("a"), true, 1_000);
        let other = NotifyKey::new(&node("a", 1), &route("q", "old", 1), &route("q", "new", 2));
        s.followed(other.clone(), 0);
        s.route_replaced(ObjectKind::Spot, "p");
        assert_eq!(
            s.len(),
            2,
            "another kind with the same ID is another object"
        );
        s.route_replaced(ObjectKind::Actor, "p");
        assert_eq!(s.len(), 1);
        assert_eq!(
            s.followed(key("a"), 10),
            Decision::Send,
            "the new route is notified anew"
        );
        assert_eq!(s.followed(other, 10), Decision::Suppress);
    }

    #[test]
    fn the_table_is_bounded_and_sweeps_expired_entries_first() {
        let mut s = Suppression::default();
        for i in 0..MAX_ENTRIES {
            let k = key(&format!("n{i}"));
            assert_eq!(s.followed(k.clone(), 0), Decision::Send);
            s.submitted(&k, true, if i == 0 { 5 } else { 1_000 });
        }
        assert_eq!(s.len(), MAX_ENTRIES);
        // Full: one expired entry makes room.
        assert_eq!(s.followed(key("fresh"), 10), Decision::Send);
        assert_eq!(s.len(), MAX_ENTRIES);
        // Full with nothing expired: sent, not remembered.
        assert_eq!(s.followed(key("more"), 10), Decision::SendUntracked);
        assert_eq!(s.len(), MAX_ENTRIES);
        s.sweep(1_000);
        assert_eq!(s.len(), 1, "only the entry still in flight stays");
    }

    fn peer(rid: &str, lifecycle_generation: u64) -> NodeFence {
        NodeFence {
            rid: zlink_protocol::shared_str::SharedStr::copy_from(rid),
            lifecycle_generation,
        }
    }

    #[test]
    fn recent_recipients_are_the_peers_noted_within_the_window() {
        let mut r = RecentRecipients::default();
        assert!(r.within(0, 1_000).is_empty());
        r.noted(&peer("b", 1), 100);
        r.noted(&peer("a", 1), 200);
        // A new lifecycle of a peer is another recipient.
        r.noted(&peer("a", 2), 300);
        assert_eq!(
            r.within(300, 1_000),
            vec![peer("a", 1), peer("a", 2), peer("b", 1)]
        );
        // Noting again moves a peer's time on: b stays, a/1 lapses at 200 + 1,000.
        r.noted(&peer("b", 1), 900);
        assert_eq!(r.within(1_200, 1_000), vec![peer("a", 2), peer("b", 1)]);
        assert_eq!(r.within(1_900, 1_000), Vec::<NodeFence>::new());
        // Lapsed peers were forgotten, not only hidden.
        assert!(r.last.is_empty());
    }

    #[test]
    fn recent_recipients_keep_the_most_recent_peers_only() {
        let mut r = RecentRecipients::default();
        for i in 0..(RECENT_RECIPIENTS_MAX as u64 + 3) {
            r.noted(&peer(&format!("p{i:02}"), 1), 10 * i);
        }
        let kept = r.within(1_000, 10_000);
        assert_eq!(kept.len(), RECENT_RECIPIENTS_MAX);
        // The three oldest went.
        assert!(
            kept.iter()
                .all(|p| !["p00", "p01", "p02"].contains(&p.rid.as_str()))
        );
        assert!(kept.iter().any(|p| p.rid == "p10"));
        // An earlier time never moves a peer's time back.
        r.noted(&peer("p10", 1), 0);
        assert_eq!(r.within(100 + 10_000 - 1, 10_000), vec![peer("p10", 1)]);
    }
}
