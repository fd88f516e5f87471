//! Service liveness of one admitted connection (wire §5), as a pure state machine.
//!
//! ```text
//!            admitted(now)                    tick(now) ≥ next_probe
//!   ──────────────────────► Probing ──────────────────────────────► send probe(id)
//!                             │  ▲   (outstanding id kept and resent until ACKed)
//!   ack(id == outstanding,    │  │
//!       generation matches)   ▼  │
//!         deadline = now + D, outstanding cleared, next probe gets a new non-zero id
//!
//!   tick(now) ≥ deadline  ──────────────► Dead (terminal: not-ready, tear down, re-dial)
//! ```
//!
//! Rules kept here (wire §5): both admitted peers probe every `interval`; one outstanding
//! non-zero probe ID at a time, resent with the same ID; only the **first** ACK matching the
//! outstanding ID and this connection's generation restarts the `deadline`; any other inbound
//! traffic (application records, wrong IDs, ACKs of another generation) does not extend it; a
//! missed deadline is terminal for the connection. Time is a parameter (`now` in ms of a
//! monotonic clock chosen by the caller).

/// What the owner of the connection must do after an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LivenessAction {
    /// Nothing.
    None,
    /// Send `livenessProbe { probe_id, connection_generation }`.
    SendProbe {
        /// Probe ID (non-zero; the same until ACKed).
        probe_id: u64,
    },
    /// The deadline passed: mark the peer not-ready at once and tear the connection down.
    Dead,
}

/// Result of an inbound ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// Matched the outstanding probe: deadline restarted.
    Accepted,
    /// Another connection generation: ignored.
    OtherConnection,
    /// No outstanding probe or a different ID (late or duplicate ACK): ignored.
    NotOutstanding,
    /// The connection is already dead.
    Dead,
}

/// Liveness of one admitted connection.
#[derive(Debug, Clone)]
pub struct Liveness {
    generation: u64,
    interval_ms: u64,
    deadline_ms: u64,
    /// Absolute time at which the peer is declared dead.
    deadline_at: u64,
    /// Absolute time of the next probe (or resend).
    next_probe_at: u64,
    outstanding: Option<u64>,
    next_id: u64,
    dead: bool,
}

impl Liveness {
    /// Start at admission time `now`: the deadline runs from here and the first probe goes out
    /// at once.
    pub fn admitted(generation: u64, interval_ms: u64, deadline_ms: u64, now: u64) -> Self {
        Self {
            generation,
            interval_ms: interval_ms.max(1),
            deadline_ms: deadline_ms.max(1),
            deadline_at: now.saturating_add(deadline_ms.max(1)),
            next_probe_at: now,
            outstanding: None,
            next_id: 1,
            dead: false,
        }
    }

    /// The connection generation probes and ACKs must carry.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the deadline was missed.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// The earliest time `tick` has something to do.
    pub fn next_wakeup(&self) -> u64 {
        self.next_probe_at.min(self.deadline_at)
    }

    /// Advance time.
    pub fn tick(&mut self, now: u64) -> LivenessAction {
        if self.dead {
            return LivenessAction::None;
        }
        if now >= self.deadline_at {
            self.dead = true;
            return LivenessAction::Dead;
        }
        if now >= self.next_probe_at {
            self.next_probe_at = now.saturating_add(self.interval_ms);
            let id = match self.outstanding {
                Some(id) => id,
                None => {
                    let id = self.next_id;
                    // IDs are non-zero and only need to differ from the previous outstanding
                    // one; wrapping after 2^64 − 1 probes skips 0.
                    self.next_id = self.next_id.checked_add(1).unwrap_or(1);
                    self.outstanding = Some(id);
                    id
                }
            };
            return LivenessAction::SendProbe { probe_id: id };
        }
        LivenessAction::None
    }

    /// An inbound `livenessAck`.
    pub fn on_ack(&mut self, probe_id: u64, generation: u64, now: u64) -> AckOutcome {
        if self.dead {
            return AckOutcome::Dead;
        }
        if generation != self.generation {
            return AckOutcome::OtherConnection;
        }
        if self.outstanding != Some(probe_id) {
            return AckOutcome::NotOutstanding;
        }
        self.outstanding = None;
        self.deadline_at = now.saturating_add(self.deadline_ms);
        AckOutcome::Accepted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_probe_goes_out_at_admission_and_is_resent_with_the_same_id() {
        let mut l = Liveness::admitted(9, 100, 300, 1_000);
        assert_eq!(l.tick(1_000), LivenessAction::SendProbe { probe_id: 1 });
        assert_eq!(l.tick(1_050), LivenessAction::None);
        assert_eq!(l.tick(1_100), LivenessAction::SendProbe { probe_id: 1 });
    }

    #[test]
    fn only_the_matching_ack_restarts_the_deadline() {
        let mut l = Liveness::admitted(9, 100, 300, 0);
        assert_eq!(l.tick(0), LivenessAction::SendProbe { probe_id: 1 });
        assert_eq!(l.on_ack(2, 9, 50), AckOutcome::NotOutstanding);
        assert_eq!(l.on_ack(1, 8, 50), AckOutcome::OtherConnection);
        assert_eq!(l.on_ack(1, 9, 250), AckOutcome::Accepted);
        // A duplicate of the same ACK does not extend again.
        assert_eq!(l.on_ack(1, 9, 500), AckOutcome::NotOutstanding);
        assert_eq!(l.tick(549), LivenessAction::SendProbe { probe_id: 2 });
        assert_eq!(l.tick(550), LivenessAction::Dead);
    }

    #[test]
    fn without_acks_the_peer_is_dead_at_the_deadline_not_before() {
        let mut l = Liveness::admitted(1, 100, 300, 0);
        let mut t = 0;
        while t < 300 {
            assert_ne!(l.tick(t), LivenessAction::Dead, "dead early at {t}");
            t += 10;
        }
        assert_eq!(l.tick(300), LivenessAction::Dead);
        assert!(l.is_dead());
        assert_eq!(l.tick(400), LivenessAction::None);
        assert_eq!(l.on_ack(1, 1, 400), AckOutcome::Dead);
    }

    #[test]
    fn next_wakeup_is_the_earlier_of_probe_and_deadline() {
        let mut l = Liveness::admitted(1, 100, 300, 0);
        assert_eq!(l.next_wakeup(), 0);
        l.tick(0);
        assert_eq!(l.next_wakeup(), 100);
    }
}
