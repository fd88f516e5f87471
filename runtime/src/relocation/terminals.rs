//! Terminal completion tracking of a unit's carried requests on its target (issue 17 item 9;
//! wire §11 "Terminal completion 추적", "`Completed` 조건", "Root replacement").
//!
//! A request the source carried into the unit (saved in an envelope, or relayed before the
//! switch) runs on the target; its terminal goes back to the requester as `replyRelay` (33)
//! until `replyRelayAck` (46). The target keeps, per unit, one ledger:
//!
//! ```text
//!   Accepted ──► Terminal ──► relayed (33) … acked (46)
//!                   │                          │
//!                   └──── Publish ◄────────────┘   (a new immutable root, then the Preserve
//!                                                   CAS of TerminalCompletionCount /
//!                                                   PendingRelayCount)
//! ```
//!
//! - A terminal is relayed (33) at once; its record and delivery state go into the unit's
//!   root **(ours:** wire §11 orders the root before the counts' CAS, not before the relay; a
//!   relay that waited for the store cost a third of the callers' throughput while units move,
//!   and nothing reads a root back yet**)**.
//! - Every change of the terminal or delivery state (a terminal, an ack) makes the ledger
//!   dirty; it asks for **one** publish at a time of the latest state (coalesced per unit): the
//!   shell writes and verifies a new ZRM1/ZRD1 root, links its ZRP1 pointer with the counts by
//!   a Preserve CAS, and reports `Published`.
//! - `Completed` iff accepted = terminals and pending (relayed, not acked) = 0: a last publish
//!   clears the root reference, then the ledger retires — only if nothing was accepted
//!   meanwhile.
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
    /// Send `K`'s terminal (33) until it is acknowledged.
    Relay(K),
    /// The ledger ended.
    Retire(Retired),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
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

    /// The publish in flight, `version`, starts now (the shell waits a moment first, so what
    /// happened meanwhile joins it): its TerminalCompletionCount, PendingRelayCount and whether
    /// it releases the root, from the state now. `None` when `version` is not in flight.
    pub fn refresh(&mut self, version: u64) -> Option<(u64, u64, bool)> {
        if self.retired.is_some() || self.in_flight != Some(version) {
            return None;
        }
        self.dirty = false;
        self.clearing = self.complete();
        Some((self.terminals(), self.pending(), self.clearing))
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
                    self.entries.insert(k.clone(), Entry { acked: false });
                    self.dirty = true;
                    out.push(LedgerAction::Relay(k));
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
                // Still complete: no request was accepted meanwhile.
                if self.clearing && !self.dirty && self.complete() {
                    self.retired = Some(Retired::Completed);
                    out.push(LedgerAction::Retire(Retired::Completed));
                    return out;
                }
                self.clearing = false;
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
    fn a_terminal_is_relayed_at_once_and_published_and_an_ack_completes_the_unit() {
        let mut l = TerminalLedger::new();
        assert_eq!(l.handle(E::Accepted), vec![]);
        assert_eq!(
            l.handle(E::Terminal(7)),
            vec![A::Relay(7), publish(1, 1, 1, false)]
        );
        assert_eq!(l.handle(E::Terminal(7)), vec![], "one terminal per request");
        assert_eq!(l.handle(E::Published(1)), vec![]);
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
        assert_eq!(
            l.handle(E::Terminal(1)),
            vec![A::Relay(1), publish(1, 1, 1, false)]
        );
        assert_eq!(
            l.handle(E::Terminal(2)),
            vec![A::Relay(2)],
            "one publish at a time"
        );
        assert_eq!(l.handle(E::Terminal(3)), vec![A::Relay(3)]);
        assert_eq!(l.handle(E::Acked(1)), vec![]);
        assert_eq!(
            l.handle(E::Published(1)),
            vec![publish(2, 3, 2, false)],
            "the next publish holds everything since"
        );
        assert_eq!(l.handle(E::Published(2)), vec![]);
        assert_eq!(l.handle(E::Published(2)), vec![], "a repeated answer");
    }

    #[test]
    fn a_failed_publish_is_tried_again_and_an_unanswered_request_is_not_completion() {
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        l.handle(E::Accepted);
        l.handle(E::Terminal(1));
        assert_eq!(l.handle(E::PublishFailed(1)), vec![publish(2, 1, 1, false)]);
        assert_eq!(l.handle(E::Published(2)), vec![]);
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
            l.handle(E::Terminal(2)),
            vec![],
            "a retired ledger takes nothing"
        );
    }

    #[test]
    fn what_happens_before_a_publish_starts_joins_it() {
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        assert_eq!(
            l.handle(E::Terminal(1)),
            vec![A::Relay(1), publish(1, 1, 1, false)]
        );
        assert_eq!(l.handle(E::Acked(1)), vec![], "joins the publish in flight");
        assert_eq!(
            l.refresh(1),
            Some((1, 0, true)),
            "it releases the root at once"
        );
        assert_eq!(l.refresh(2), None, "not in flight");
        assert_eq!(
            l.handle(E::Published(1)),
            vec![A::Retire(Retired::Completed)]
        );
        assert_eq!(l.refresh(1), None, "retired");
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
        assert_eq!(
            l.handle(E::Terminal(2)),
            vec![A::Relay(2), publish(3, 2, 1, false)]
        );
    }

    #[test]
    fn a_terminal_during_the_clearing_publish_reopens_it() {
        let mut l = TerminalLedger::new();
        l.handle(E::Accepted);
        l.handle(E::Terminal(1));
        l.handle(E::Published(1));
        assert_eq!(l.handle(E::Acked(1)), vec![publish(2, 1, 0, true)]);
        l.handle(E::Accepted);
        assert_eq!(l.handle(E::Terminal(2)), vec![A::Relay(2)]);
        assert_eq!(
            l.handle(E::Published(2)),
            vec![publish(3, 2, 1, false)],
            "not retired: the state changed meanwhile"
        );
    }

    proptest! {
        /// Whatever the order of acceptances, terminals, acks, publish answers and failures:
        /// each terminal is relayed exactly once, one publish is in flight at a time, and the
        /// ledger completes exactly when every accepted request is terminal and acknowledged
        /// (a completed ledger takes nothing more; the shell opens a new one).
        #[test]
        fn each_terminal_is_relayed_once_and_completion_needs_every_ack(
            n in 1u32..6,
            steps in proptest::collection::vec((0u8..5, 0u32..6), 0..80),
        ) {
            let mut l: TerminalLedger<u32> = TerminalLedger::new();
            let mut accepted = 1u32;
            l.handle(E::Accepted);
            let mut in_flight: Option<u64> = None;
            let mut relayed = std::collections::BTreeSet::new();
            let mut terminal = std::collections::BTreeSet::new();
            let run = |l: &mut TerminalLedger<u32>, e: E<u32>, in_flight: &mut Option<u64>,
                       relayed: &mut std::collections::BTreeSet<u32>| {
                let is_terminal = matches!(e, E::Terminal(_));
                for a in l.handle(e) {
                    match a {
                        A::Publish { version, .. } => {
                            prop_assert!(in_flight.is_none(), "one publish at a time");
                            *in_flight = Some(version);
                        }
                        A::Relay(k) => {
                            prop_assert!(is_terminal, "relayed only at its terminal");
                            prop_assert!(relayed.insert(k), "relayed twice");
                        }
                        A::Retire(_) => {}
                    }
                }
                Ok(())
            };
            let renew = |l: &mut TerminalLedger<u32>, in_flight: &mut Option<u64>| {
                if l.retired() == Some(Retired::Completed) {
                    *l = TerminalLedger::new();
                    *in_flight = None;
                }
            };
            for (what, k) in steps {
                let k = k % accepted;
                let e = match what {
                    4 if accepted < n => {
                        accepted += 1;
                        renew(&mut l, &mut in_flight);
                        E::Accepted
                    }
                    4 => continue,
                    0 if terminal.insert(k) => E::Terminal(k),
                    0 => continue,
                    1 if relayed.contains(&k) => E::Acked(k),
                    1 => continue,
                    2 => match in_flight.take() { Some(v) => E::Published(v), None => continue },
                    _ => match in_flight.take() { Some(v) => E::PublishFailed(v), None => continue },
                };
                run(&mut l, e, &mut in_flight, &mut relayed)?;
            }
            while accepted < n {
                accepted += 1;
                renew(&mut l, &mut in_flight);
                run(&mut l, E::Accepted, &mut in_flight, &mut relayed)?;
            }
            for k in 0..n {
                if terminal.insert(k) {
                    run(&mut l, E::Terminal(k), &mut in_flight, &mut relayed)?;
                }
            }
            for _ in 0..(4 * n + 8) {
                if let Some(v) = in_flight.take() {
                    run(&mut l, E::Published(v), &mut in_flight, &mut relayed)?;
                }
                let unacked: Vec<u32> = relayed.iter().copied().filter(|k| !l.is_acked(k)).collect();
                for k in unacked {
                    run(&mut l, E::Acked(k), &mut in_flight, &mut relayed)?;
                }
            }
            prop_assert_eq!(l.retired(), Some(Retired::Completed));
            prop_assert_eq!(relayed.len() as u32, n);
        }
    }
}
