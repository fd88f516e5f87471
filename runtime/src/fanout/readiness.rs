//! Per-publisher readiness of a classic fanout subscriber (wire §5 "Subscriber ready 판정";
//! glossary §6 "Ready target", §7 "Liveness와 liveness beacon"). Pure: time is a parameter.
//!
//! ```text
//!                 valid receive (beacon or application record)
//!   ┌──────────┐ ───────────────────────────────────────────► ┌───────┐ ──┐ valid receive:
//!   │ NotReady │                                              │ Ready │   │ refresh last
//!   └──────────┘ ◄─────────────────────────────────────────── └───────┘ ◄─┘ valid receive
//!                 poll(now) with now ≥ last valid receive + not_ready_after
//! ```
//!
//! A protocol error (a malformed beacon, a malformed application record) is not an input: it
//! neither makes a publisher ready nor refreshes it. Each publisher has its own machine, so one
//! silent publisher never affects another.

use std::time::{Duration, Instant};

/// A readiness change reported by [`PublisherLiveness`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// NotReady → Ready.
    BecameReady,
    /// Ready → NotReady.
    BecameNotReady,
}

/// The state of one publisher as its subscriber sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// No valid receive yet, or none within the deadline.
    NotReady,
    /// A valid receive within the deadline.
    Ready {
        /// When the last valid record arrived.
        last_valid_receive: Instant,
    },
}

/// The readiness state machine of one publisher.
#[derive(Debug, Clone)]
pub struct PublisherLiveness {
    not_ready_after: Duration,
    state: Readiness,
    last_valid_receive: Option<Instant>,
}

impl PublisherLiveness {
    /// A not-ready publisher that turns not-ready `not_ready_after` after its last valid
    /// receive.
    pub fn new(not_ready_after: Duration) -> Self {
        Self {
            not_ready_after,
            state: Readiness::NotReady,
            last_valid_receive: None,
        }
    }

    /// The current state.
    pub fn state(&self) -> Readiness {
        self.state
    }

    /// Whether the publisher is ready.
    pub fn is_ready(&self) -> bool {
        matches!(self.state, Readiness::Ready { .. })
    }

    /// The last valid receive ever seen (kept after the publisher turned not-ready).
    pub fn last_valid_receive(&self) -> Option<Instant> {
        self.last_valid_receive
    }

    /// A valid beacon or application record arrived at `now`.
    pub fn on_valid_receive(&mut self, now: Instant) -> Option<Transition> {
        self.last_valid_receive = Some(now);
        match self.state {
            Readiness::NotReady => {
                self.state = Readiness::Ready {
                    last_valid_receive: now,
                };
                Some(Transition::BecameReady)
            }
            Readiness::Ready { .. } => {
                self.state = Readiness::Ready {
                    last_valid_receive: now,
                };
                None
            }
        }
    }

    /// Apply the deadline at `now`.
    pub fn poll(&mut self, now: Instant) -> Option<Transition> {
        match self.state {
            Readiness::Ready { last_valid_receive }
                if now.saturating_duration_since(last_valid_receive) >= self.not_ready_after =>
            {
                self.state = Readiness::NotReady;
                Some(Transition::BecameNotReady)
            }
            Readiness::Ready { .. } | Readiness::NotReady => None,
        }
    }

    /// When [`poll`](Self::poll) will next change the state, if it can.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            Readiness::Ready { last_valid_receive } => {
                last_valid_receive.checked_add(self.not_ready_after)
            }
            Readiness::NotReady => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_millis(15_000);

    #[test]
    fn first_valid_receive_makes_ready_and_later_ones_only_refresh() {
        let t0 = Instant::now();
        let mut l = PublisherLiveness::new(D);
        assert!(!l.is_ready());
        assert_eq!(l.next_deadline(), None);
        assert_eq!(l.on_valid_receive(t0), Some(Transition::BecameReady));
        assert_eq!(l.next_deadline(), Some(t0 + D));
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(l.on_valid_receive(t1), None);
        assert_eq!(l.next_deadline(), Some(t1 + D));
        assert_eq!(l.last_valid_receive(), Some(t1));
    }

    #[test]
    fn not_ready_exactly_at_the_deadline_after_the_last_valid_receive() {
        let t0 = Instant::now();
        let mut l = PublisherLiveness::new(D);
        l.on_valid_receive(t0);
        let t1 = t0 + Duration::from_secs(10);
        l.on_valid_receive(t1);
        // 15 s after the first receive but only 5 s after the last: still ready.
        assert_eq!(l.poll(t0 + D), None);
        assert_eq!(l.poll(t1 + D - Duration::from_millis(1)), None);
        assert_eq!(l.poll(t1 + D), Some(Transition::BecameNotReady));
        assert_eq!(l.poll(t1 + D + D), None);
        assert_eq!(l.state(), Readiness::NotReady);
        assert_eq!(l.last_valid_receive(), Some(t1));
    }

    #[test]
    fn a_not_ready_publisher_becomes_ready_again_on_the_next_valid_receive() {
        let t0 = Instant::now();
        let mut l = PublisherLiveness::new(D);
        l.on_valid_receive(t0);
        l.poll(t0 + D);
        assert_eq!(
            l.on_valid_receive(t0 + D + D),
            Some(Transition::BecameReady)
        );
    }

    #[test]
    fn polling_a_never_ready_publisher_does_nothing() {
        let mut l = PublisherLiveness::new(D);
        assert_eq!(l.poll(Instant::now() + D + D), None);
        assert!(!l.is_ready());
    }
}
