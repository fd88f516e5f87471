//! Terminal completion tracking of a unit's carried requests on its target (issue 17 item 9;
//! wire §11 "Terminal completion 추적", "`Completed` 조건", "Root replacement").
//!
//! A request the source carried into the unit (saved in an envelope, or relayed before the
//! switch) runs on the target; its terminal goes back to the requester as `replyRelay` (33)
//! until `replyRelayAck` (46). The target keeps, per unit, one ledger:
//!
//! ```text
//!   Accepted ──► (terminal) ──► durable ──► relayed … acked
//!                    │              ▲
//!                    └─ Publish ────┘  (a new immutable root, then the Preserve CAS of
//!                                       TerminalCompletionCount / PendingRelayCount)
//! ```
//!
//! - Every change of the terminal or delivery state (a terminal, an ack) makes the ledger
//!   dirty; it asks for **one** publish at a time of the latest state (coalesced per unit): the
//!   shell writes and verifies a new ZRM1/ZRD1 root, links its ZRP1 pointer with the counts by
//!   a Preserve CAS, and reports `Published`.
//! - A terminal is relayed (33) only once a published version holds it (durable first).
//! - `Completed` iff accepted = terminals and pending (relayed, not acked) = 0: a last publish
//!   clears the root reference, then the ledger retires.
//! - At its last deadline with work pending it retires `ForceStopped`: the root and its reply
//!   bytes stay for the retention.
//! - A published root found missing or corrupt retires it `DataLost` (non-retriable, no
//!   rollback of the committed owner).
//!
//! Pure: events in, actions out; no clock (the deadline is an event).

use std::collections::BTreeMap;

/// How a unit's terminal tracking ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retired {
    /// Every carried request answered and every terminal acknowledged; root released.
    Completed,
    /// The last deadline passed with terminals unacknowledged (or requests unanswered); the
    /// root is kept for the retention.
    ForceStopped,
    /// The published root was missing or corrupt (`RelocationDataLost`).
    DataLost,
    /// The unit's object is not this node's when a publish links (its commit did not happen
    /// here, or it moved on): nothing can be kept here; terminals not relayed yet go out as
    /// they are ([`TerminalLedger::unrelayed`]).
    Abandoned,
}

/// An input of the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerEvent<K> {
    /// One more carried request entered the unit's queue.
    Accepted,
    /// The request `K` reached its terminal on this node.
    Terminal(K),
    /// The requester acknowledged `K`'s terminal (46).
    Acked(K),
    /// Publish `version` is linked (root written, verified, Preserve CAS done).
    Published(u64),
    /// Publish `version` failed for now (the store did not answer): try again.
    PublishFailed(u64),
    /// The published root is missing or corrupt.
    RootLost,
    /// The unit's object is not this node's (its commit did not happen here).
    Abandoned,
    /// The unit's last deadline passed.
    DeadlinePassed,
}

/// An output of the ledger, for the shell to perform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerAction<K> {
    /// Write the state as root `version`: every terminal so far with its ack state, the counts,
    /// and — with `clear` — release the root reference instead (nothing left to keep).
    Publish {
        /// The version to write.
        version: u64,
        /// TerminalCompletionCount.
        terminals: u64,
        /// PendingRelayCount: terminals not acknowledged yet.
        pending: u64,
        /// Release the root reference (the unit is complete).
        clear: bool,
    },
    /// Send `K`'s terminal (33) until it is acknowledged; it is durable now.
    Relay(K),
    /// The ledger ended.
    Retire(Retired),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// The version that first holds this terminal.
    version: u64,
    relayed: bool,
    acked: bool,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct TerminalLedger<K: Ord + Clone> {
    accepted: u64,
    entries: BTreeMap<K, Entry>,
    /// The next version a publish gets.
    next_version: u64,
    /// The publish in flight.
    in_flight: Option<u64>,
    /// The latest linked version.
    durable: u64,
    /// Whether the state changed since the latest publish was issued.
    dirty: bool,
    /// Whether the publish in flight releases the root.
    clearing: bool,
    retired: Option<Retired>,
}

impl<K: Ord + Clone> Default for TerminalLedger<K> {
    fn default() -> Self {
        Self {
            accepted: 0,
            entries: BTreeMap::new(),
            next_version: 1,
            in_flight: None,
            durable: 0,
            dirty: false,
            clearing: false,
            retired: None,
        }
    }
}

impl<K: Ord + Clone> TerminalLedger<K> {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// How it ended, once it did.
    pub fn retired(&self) -> Option<Retired> {
        self.retired
    }

    /// Carried requests accepted.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// TerminalCompletionCount.
    pub fn terminals(&self) -> u64 {
        self.entries.len() as u64
    }

    /// PendingRelayCount: terminals not acknowledged.
    pub fn pending(&self) -> u64 {
        self.entries.values().filter(|e| !e.acked).count() as u64
    }

    /// Whether `k`'s terminal is acknowledged.
    pub fn is_acked(&self, k: &K) -> bool {
        self.entries.get(k).is_some_and(|e| e.acked)
    }

    /// The terminals a root of the current state holds, with their ack state.
    pub fn entries(&self) -> impl Iterator<Item = (&K, bool)> {
        self.entries.iter().map(|(k, e)| (k, e.acked))
    }

    /// Terminals not relayed yet (an `Abandoned` unit's shell relays them as they are, best
    /// effort: there is no row here to make them durable in).
    pub fn unrelayed(&self) -> Vec<K> {
        self.entries
            .iter()
            .filter(|(_, e)| !e.relayed && !e.acked)
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn complete(&self) -> bool {
        self.terminals() == self.accepted && self.pending() == 0
    }

    /// Apply `event`; the actions to perform, in order.
    pub fn handle(&mut self, event: LedgerEvent<K>) -> Vec<LedgerAction<K>> {
        let mut out = Vec::new();
        if self.retired.is_some() {
            return out;
        }
        match event {
            LedgerEvent::Accepted => self.accepted += 1,
            LedgerEvent::Terminal(k) => {
                if !self.entries.contains_key(&k) {
                    self.entries.insert(
                        k,
                        Entry {
                            version: self.next_version,
                            relayed: false,
                            acked: false,
                        },
                    );
                    self.dirty = true;
                }
            }
            LedgerEvent::Acked(k) => {
                if let Some(e) = self.entries.get_mut(&k)
                    && !e.acked
                {
                    e.acked = true;
                    self.dirty = true;
                }
            }
            LedgerEvent::Published(v) => {
                if self.in_flight != Some(v) {
                    return out;
                }
                self.in_flight = None;
                self.durable = v;
                // Still complete: no request was accepted meanwhile.
                if self.clearing && !self.dirty && self.complete() {
                    self.retired = Some(Retired::Completed);
                    out.push(LedgerAction::Retire(Retired::Completed));
                    return out;
                }
                self.clearing = false;
                for (k, e) in &mut self.entries {
                    if e.version <= v && !e.relayed && !e.acked {
                        e.relayed = true;
                        out.push(LedgerAction::Relay(k.clone()));
                    }
                }
            }
            LedgerEvent::PublishFailed(v) => {
                if self.in_flight == Some(v) {
                    self.in_flight = None;
                    self.clearing = false;
                    self.dirty = true;
                }
            }
            LedgerEvent::RootLost => {
                self.retired = Some(Retired::DataLost);
                out.push(LedgerAction::Retire(Retired::DataLost));
                return out;
            }
            LedgerEvent::Abandoned => {
                self.retired = Some(Retired::Abandoned);
                out.push(LedgerAction::Retire(Retired::Abandoned));
                return out;
            }
            LedgerEvent::DeadlinePassed => {
                if !self.complete() {
                    self.retired = Some(Retired::ForceStopped);
                    out.push(LedgerAction::Retire(Retired::ForceStopped));
                    return out;
                }
                // Complete: the clearing publish retires it.
                self.dirty = true;
            }
        }
        if self.dirty && self.in_flight.is_none() {
            let version = self.next_version;
            self.next_version += 1;
            self.in_flight = Some(version);
            self.dirty = false;
            self.clearing = self.complete();
            out.push(LedgerAction::Publish {
                version,
                terminals: self.terminals(),
                pending: self.pending(),
                clear: self.clearing,
            });
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use LedgerAction as A;
    use LedgerEvent as E;

    fn publish(version: u64, terminals: u64, pending: u64, clear: bool) -> A<u32> {
        A::Publish {
            version,
            terminals,
            pending,
            clear,
        }
    }

    #[test]
    fn a_terminal_is_published_before_it_is_relayed_and_an_ack_completes_the_unit() {
        let mut l = TerminalLedger::new();
        assert_eq!(l.handle(E::Accepted), vec![]);
        assert_eq!(l.handle(E::Terminal(7)), vec![publish(1, 1, 1, false)]);
        assert_eq!(l.handle(E::Published(1)), vec![A::Relay(7)]);
        assert_eq!(l.handle(E::Acked(7)), vec![publish(2, 1, 0, true)]);
        assert_eq!(
            l.handle(E::Published(2)),
            vec![A::Retire(Retired::Completed)]
        );
        assert_eq!(l.retired(), Some(Retired::Completed));
        assert_eq!(l.handle(E::Acked(7)), vec![], "nothing after retirement");
    }

    #[test]
    fn changes_during_a_publish_are_coalesced_into_the_next_one() {
        let mut l = TerminalLedger::new();
        for _ in 0..3 {
            l.handle(E::Accepted);
        }
        assert_eq!(l.handle(E::Terminal(1)), vec![publish(1, 1, 1, false)]);
        assert_eq!(l.handle(E::Terminal(2)), vec![], "one publish at a time");
        assert_eq!(l.handle(E::Terminal(3)), vec![]);
        // Version 1 held only terminal 1: only it is relayed; the rest go in version 2.
        assert_eq!(
            l.handle(E::Published(1)),
            vec![A::Relay(1), publish(2, 3, 3, false)]
        );
        assert_eq!(l.handle(E::Published(2)), vec![A::Relay(2), A::Relay(3)]);
        assert_eq!(l.handle(E::Published(2)), vec![], "a repeated answer");
        assert_eq!(l.handle(E::Acked(1)), vec![publish(3, 3, 2, false)]);
    }

    #[test]
    fn a_failed_publish_is_tried_again_and_an_unanswered_request_is_not_completion() {
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        l.handle(E::Accepted);
        l.handle(E::Terminal(1));
        assert_eq!(l.handle(E::PublishFailed(1)), vec![publish(2, 1, 1, false)]);
        assert_eq!(l.handle(E::Published(2)), vec![A::Relay(1)]);
        // Acked, but one accepted request has no terminal yet: not complete.
        assert_eq!(l.handle(E::Acked(1)), vec![publish(3, 1, 0, false)]);
        assert_eq!(l.handle(E::Published(3)), vec![]);
        assert_eq!(
            l.handle(E::DeadlinePassed),
            vec![A::Retire(Retired::ForceStopped)]
        );
    }

    #[test]
    fn the_deadline_force_stops_pending_work_and_a_lost_root_is_data_lost() {
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        l.handle(E::Terminal(1));
        l.handle(E::Published(1));
        assert_eq!(l.pending(), 1);
        assert_eq!(
            l.handle(E::DeadlinePassed),
            vec![A::Retire(Retired::ForceStopped)]
        );
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        l.handle(E::Terminal(1));
        assert_eq!(l.handle(E::RootLost), vec![A::Retire(Retired::DataLost)]);
        assert_eq!(l.handle(E::Published(1)), vec![]);
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        l.handle(E::Terminal(1));
        assert_eq!(l.handle(E::Abandoned), vec![A::Retire(Retired::Abandoned)]);
        assert_eq!(
            l.handle(E::Published(1)),
            vec![],
            "nothing relayed for a unit not ours"
        );
    }

    #[test]
    fn a_request_accepted_during_the_clearing_publish_keeps_the_ledger_open() {
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        l.handle(E::Terminal(1));
        l.handle(E::Published(1));
        assert_eq!(l.handle(E::Acked(1)), vec![publish(2, 1, 0, true)]);
        assert_eq!(l.handle(E::Accepted), vec![], "nothing to publish yet");
        assert_eq!(
            l.handle(E::Published(2)),
            vec![],
            "not complete any more: not retired"
        );
        assert_eq!(l.retired(), None);
        assert_eq!(l.handle(E::Terminal(2)), vec![publish(3, 2, 1, false)]);
        assert_eq!(l.handle(E::Published(3)), vec![A::Relay(2)]);
    }

    #[test]
    fn an_ack_during_the_clearing_publish_keeps_it_and_a_late_terminal_reopens_it() {
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        l.handle(E::Terminal(1));
        l.handle(E::Published(1));
        assert_eq!(l.handle(E::Acked(1)), vec![publish(2, 1, 0, true)]);
        // Another carried request arrives while the clearing publish is in flight.
        l.handle(E::Accepted);
        assert_eq!(l.handle(E::Terminal(2)), vec![]);
        assert_eq!(
            l.handle(E::Published(2)),
            vec![publish(3, 2, 1, false)],
            "not retired: the state changed meanwhile"
        );
        assert_eq!(
            l.handle(E::Published(3)),
            vec![A::Relay(2)],
            "durable in version 3"
        );
    }

    proptest! {
        /// Whatever the order of terminals, acks, publish answers and failures: a terminal is
        /// relayed at most once and only after a publish that holds it, and the ledger completes
        /// exactly when every accepted request is terminal and acknowledged.
        #[test]
        fn relays_follow_durability_and_completion_needs_every_ack(
            n in 1u32..6,
            steps in proptest::collection::vec((0u8..5, 0u32..6), 0..80),
        ) {
            let mut l: TerminalLedger<u32> = TerminalLedger::new();
            // Requests are accepted along the way too (a late relay), not only at the start.
            let mut accepted = 1u32;
            l.handle(E::Accepted);
            let mut in_flight: Option<u64> = None;
            let mut relayed = std::collections::BTreeSet::new();
            let mut terminal = std::collections::BTreeSet::new();
            let mut published_with: BTreeMap<u64, std::collections::BTreeSet<u32>> = BTreeMap::new();
            let run = |l: &mut TerminalLedger<u32>, e: E<u32>, in_flight: &mut Option<u64>,
                           terminal: &std::collections::BTreeSet<u32>, relayed: &mut std::collections::BTreeSet<u32>,
                           published_with: &mut BTreeMap<u64, std::collections::BTreeSet<u32>>| {
                let durable_at = match &e { E::Published(v) => Some(*v), _ => None };
                for a in l.handle(e) {
                    match a {
                        A::Publish { version, .. } => {
                            prop_assert!(in_flight.is_none(), "one publish at a time");
                            *in_flight = Some(version);
                            published_with.insert(version, terminal.clone());
                        }
                        A::Relay(k) => {
                            let v = durable_at.expect("relayed only on a publish answer");
                            prop_assert!(published_with[&v].contains(&k), "relayed before durable");
                            prop_assert!(relayed.insert(k), "relayed twice");
                        }
                        A::Retire(_) => {}
                    }
                }
                Ok(())
            };
            for (what, k) in steps {
                let k = k % accepted;
                let e = match what {
                    4 if accepted < n => {
                        accepted += 1;
                        // A completed ledger takes nothing more: the shell opens a new one.
                        if l.retired() == Some(Retired::Completed) {
                            l = TerminalLedger::new();
                            in_flight = None;
                        }
                        E::Accepted
                    }
                    4 => continue,
                    // A request ends once.
                    0 if terminal.insert(k) => E::Terminal(k),
                    0 => continue,
                    1 if relayed.contains(&k) => E::Acked(k),
                    1 => continue,
                    2 => match in_flight.take() { Some(v) => E::Published(v), None => continue },
                    _ => match in_flight.take() { Some(v) => E::PublishFailed(v), None => continue },
                };
                run(&mut l, e, &mut in_flight, &terminal, &mut relayed, &mut published_with)?;
            }
            // Drain: accept the rest, answer terminals, acks and publishes until nothing moves.
            while accepted < n {
                accepted += 1;
                if l.retired() == Some(Retired::Completed) {
                    l = TerminalLedger::new();
                    in_flight = None;
                }
                run(&mut l, E::Accepted, &mut in_flight, &terminal, &mut relayed, &mut published_with)?;
            }
            for k in 0..n {
                if !terminal.contains(&k) {
                    terminal.insert(k);
                    run(&mut l, E::Terminal(k), &mut in_flight, &terminal, &mut relayed, &mut published_with)?;
                }
            }
            for _ in 0..(4 * n + 8) {
                if let Some(v) = in_flight.take() {
                    run(&mut l, E::Published(v), &mut in_flight, &terminal, &mut relayed, &mut published_with)?;
                }
                let unacked: Vec<u32> = relayed.iter().copied().filter(|k| !l.is_acked(k)).collect();
                for k in unacked {
                    run(&mut l, E::Acked(k), &mut in_flight, &terminal, &mut relayed, &mut published_with)?;
                }
            }
            prop_assert_eq!(l.retired(), Some(Retired::Completed));
            prop_assert_eq!(relayed.len() as u32, n);
        }
    }
}
