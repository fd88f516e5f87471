//! What a host does about its owner lease (issue 20 item 2): the pure core. Time comes in as
//! `now_ms`, the node's lease view as [`LeaseView`]; the host's supervisor (`recover_loop` in
//! the host module) performs the [`Action`]s.
//!
//! ```text
//!   Serving ──fenced──▶ Fenced ──renewed──▶ Serving
//!      │                  │
//!      └──────lost────────┴──▶ (lease_loss: rejoin) Rejoining ──rejoined──▶ Serving
//!                               │  ▲ attempt failed: retry after a backoff
//!                               └──┘
//!                          ──▶ (lease_loss: exit)   Exiting (status 4)
//! ```
//!
//! - **Fenced** (the fencing deadline passed, renewals still retrying): the host admits no new
//!   object work but keeps its objects: a renewal landing before the lease deadline heals it
//!   with nothing lost.
//! - **Lost** (stale in the store, or the lease deadline passed): another host may own this
//!   host's objects now. `rejoin` drops them and claims a new lease as a new node lifecycle;
//!   attempts are retried after 50 ms doubling up to `retry_cap_ms` (the discovery poll), so a
//!   host is back within a poll or two of the store's return. `exit` ends the process.
//! - **Healthy** (`/healthz`): always, except a host that has been fenced for longer than a
//!   lease TTL without progress — fenced with no renewal healing it, or a rejoin attempt that
//!   neither succeeded nor failed within a TTL. A liveness probe then restarts a stuck host,
//!   never a healing one.

/// What the host does after a lost lease (`lease_loss`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseLoss {
    /// Drop the objects, rejoin as a new node lifecycle.
    Rejoin,
    /// Exit with [`super::EXIT_LEASE_LOST`].
    Exit,
}

impl LeaseLoss {
    /// From the configuration value (`rejoin` | `exit`; validated at load).
    pub fn from_config(v: &str) -> Self {
        if v == "exit" {
            Self::Exit
        } else {
            Self::Rejoin
        }
    }
}

/// The current node lifecycle's lease, as the host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseView {
    /// The fencing deadline passed (admission closed).
    pub fenced: bool,
    /// The lease is lost for good.
    pub lost: bool,
}

/// Where the recovery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The lease is confirmed.
    Serving,
    /// Admission closed since `since_ms`; the lease may still heal.
    Fenced {
        /// When the fence was first seen.
        since_ms: u64,
    },
    /// The lease is lost; rejoining as a new node lifecycle.
    Rejoining {
        /// When the host was first fenced (or learned the loss).
        since_ms: u64,
        /// Attempts started so far.
        attempts: u32,
        /// When the next attempt may start.
        next_ms: u64,
        /// The delay before `next_ms` (doubles on each failure).
        backoff_ms: u64,
        /// An attempt is running.
        running: bool,
        /// The last time an attempt started or ended.
        progress_ms: u64,
    },
    /// The lease is lost and `lease_loss: exit`: the process ends.
    Exiting {
        /// When.
        at_ms: u64,
    },
}

/// What the supervisor must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// Enter the fenced state (status `Fenced`, not ready); the objects are dropped and the
    /// old lifecycle ended by the first [`Action::Rejoin`].
    Fence,
    /// Start a rejoin attempt (drop what the old lifecycle still holds, start a new one).
    Rejoin,
    /// Exit the process.
    Exit,
}

/// The first delay between rejoin attempts.
pub const RETRY_FIRST_MS: u64 = 50;

/// The pure recovery core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    mode: LeaseLoss,
    ttl_ms: u64,
    retry_cap_ms: u64,
    phase: Phase,
    rejoins: u64,
    /// Fenced time of the spells that ended.
    fenced_before_ms: u64,
}

impl Recovery {
    /// A serving host with `mode`, lease TTL `ttl_ms` and attempts retried at most every
    /// `retry_cap_ms`.
    pub fn new(mode: LeaseLoss, ttl_ms: u64, retry_cap_ms: u64) -> Self {
        Self {
            mode,
            ttl_ms,
            retry_cap_ms: retry_cap_ms.max(RETRY_FIRST_MS),
            phase: Phase::Serving,
            rejoins: 0,
            fenced_before_ms: 0,
        }
    }

    /// The phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Completed rejoins.
    pub fn rejoins(&self) -> u64 {
        self.rejoins
    }

    /// Observe the current lifecycle's lease at `now_ms`; returns what to do.
    pub fn observe(&mut self, now_ms: u64, view: LeaseView) -> Action {
        match self.phase {
            Phase::Serving if view.lost => self.lost(now_ms, now_ms),
            Phase::Serving if view.fenced => {
                self.phase = Phase::Fenced { since_ms: now_ms };
                Action::Fence
            }
            Phase::Serving => Action::None,
            Phase::Fenced { since_ms } if view.lost => self.lost(now_ms, since_ms),
            Phase::Fenced { since_ms } if !view.fenced => {
                // Renewed before the lease deadline: nothing was lost.
                self.fenced_before_ms += now_ms.saturating_sub(since_ms);
                self.phase = Phase::Serving;
                Action::None
            }
            Phase::Fenced { .. } => Action::None,
            Phase::Rejoining {
                running: false,
                next_ms,
                since_ms,
                attempts,
                backoff_ms,
                ..
            } if now_ms >= next_ms => {
                self.phase = Phase::Rejoining {
                    since_ms,
                    attempts: attempts.saturating_add(1),
                    next_ms,
                    backoff_ms,
                    running: true,
                    progress_ms: now_ms,
                };
                Action::Rejoin
            }
            // The old lifecycle's view no longer matters while rejoining; the new one is
            // observed once `rejoined` says it serves.
            Phase::Rejoining { .. } => Action::None,
            Phase::Exiting { .. } => Action::Exit,
        }
    }

    fn lost(&mut self, now_ms: u64, since_ms: u64) -> Action {
        match self.mode {
            LeaseLoss::Exit => {
                self.phase = Phase::Exiting { at_ms: now_ms };
                Action::Exit
            }
            LeaseLoss::Rejoin => {
                self.phase = Phase::Rejoining {
                    since_ms,
                    attempts: 1,
                    next_ms: now_ms,
                    backoff_ms: 0,
                    running: true,
                    progress_ms: now_ms,
                };
                Action::Rejoin
            }
        }
    }

    /// The running rejoin attempt failed at `now_ms`: the next one starts after a backoff.
    pub fn attempt_failed(&mut self, now_ms: u64) {
        if let Phase::Rejoining {
            since_ms,
            attempts,
            backoff_ms,
            running: true,
            ..
        } = self.phase
        {
            let backoff = if backoff_ms == 0 {
                RETRY_FIRST_MS
            } else {
                backoff_ms.saturating_mul(2).min(self.retry_cap_ms)
            };
            self.phase = Phase::Rejoining {
                since_ms,
                attempts,
                next_ms: now_ms.saturating_add(backoff),
                backoff_ms: backoff,
                running: false,
                progress_ms: now_ms,
            };
        }
    }

    /// The running rejoin attempt succeeded at `now_ms`: the new lifecycle serves.
    pub fn rejoined(&mut self, now_ms: u64) {
        if let Phase::Rejoining {
            running: true,
            since_ms,
            ..
        } = self.phase
        {
            self.fenced_before_ms += now_ms.saturating_sub(since_ms);
            self.phase = Phase::Serving;
            self.rejoins += 1;
        }
    }

    /// Total time fenced up to `now_ms`: from the first fenced observation of each spell to
    /// its heal or rejoin (the current spell included).
    pub fn fenced_ms(&self, now_ms: u64) -> u64 {
        let current = match self.phase {
            Phase::Serving => 0,
            Phase::Fenced { since_ms } | Phase::Rejoining { since_ms, .. } => {
                now_ms.saturating_sub(since_ms)
            }
            Phase::Exiting { at_ms } => now_ms.saturating_sub(at_ms),
        };
        self.fenced_before_ms + current
    }

    /// Whether the process is healthy at `now_ms` (`/healthz`).
    pub fn healthy(&self, now_ms: u64) -> bool {
        match self.phase {
            Phase::Serving | Phase::Exiting { .. } => true,
            Phase::Fenced { since_ms } => now_ms.saturating_sub(since_ms) <= self.ttl_ms,
            Phase::Rejoining { progress_ms, .. } => {
                now_ms.saturating_sub(progress_ms) <= self.ttl_ms
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: LeaseView = LeaseView {
        fenced: false,
        lost: false,
    };
    const FENCED: LeaseView = LeaseView {
        fenced: true,
        lost: false,
    };
    const LOST: LeaseView = LeaseView {
        fenced: true,
        lost: true,
    };

    fn rejoin() -> Recovery {
        Recovery::new(LeaseLoss::Rejoin, 3_000, 400)
    }

    #[test]
    fn a_fence_that_heals_before_the_deadline_returns_to_serving_with_nothing_done() {
        let mut r = rejoin();
        assert_eq!(r.observe(0, OK), Action::None);
        assert_eq!(r.observe(100, FENCED), Action::Fence);
        assert_eq!(r.phase(), Phase::Fenced { since_ms: 100 });
        assert!(
            matches!(r.phase(), Phase::Fenced { .. }),
            "not lost: still the same lifecycle, no rejoin"
        );
        assert_eq!(r.observe(200, FENCED), Action::None);
        assert_eq!(r.observe(300, OK), Action::None);
        assert_eq!(r.phase(), Phase::Serving);
        assert_eq!(r.rejoins(), 0);
        assert_eq!(r.fenced_ms(1_000), 200);
    }

    #[test]
    fn a_lost_lease_rejoins_with_backoff_until_an_attempt_succeeds() {
        let mut r = rejoin();
        assert_eq!(r.observe(100, FENCED), Action::Fence);
        assert_eq!(r.observe(700, LOST), Action::Rejoin);
        assert!(matches!(r.phase(), Phase::Rejoining { .. }));
        // While an attempt runs, nothing else starts.
        assert_eq!(r.observe(710, LOST), Action::None);
        let mut now = 800;
        let mut gaps = Vec::new();
        for _ in 0..5 {
            r.attempt_failed(now);
            let Phase::Rejoining { next_ms, .. } = r.phase() else {
                panic!("{:?}", r.phase());
            };
            assert_eq!(r.observe(next_ms - 1, LOST), Action::None);
            assert_eq!(r.observe(next_ms, LOST), Action::Rejoin);
            gaps.push(next_ms - now);
            now = next_ms + 10;
        }
        assert_eq!(gaps, vec![50, 100, 200, 400, 400]);
        let Phase::Rejoining {
            since_ms, attempts, ..
        } = r.phase()
        else {
            panic!()
        };
        assert_eq!((since_ms, attempts), (100, 6));
        assert_eq!(r.fenced_ms(now), now - 100);
        r.rejoined(now);
        assert_eq!(r.phase(), Phase::Serving);
        assert_eq!(r.rejoins(), 1);
        assert_eq!(r.fenced_ms(now + 5_000), now - 100, "the spell ended");
        // The new lifecycle is observed afresh.
        assert_eq!(r.observe(now, OK), Action::None);
    }

    #[test]
    fn exit_mode_exits_on_loss_and_only_on_loss() {
        let mut r = Recovery::new(LeaseLoss::Exit, 3_000, 400);
        assert_eq!(r.observe(100, FENCED), Action::Fence);
        assert_eq!(r.observe(200, OK), Action::None);
        assert_eq!(r.observe(300, LOST), Action::Exit);
        assert_eq!(r.phase(), Phase::Exiting { at_ms: 300 });
        assert_eq!(r.observe(301, OK), Action::Exit, "no way back");
        assert!(r.healthy(100_000));
    }

    #[test]
    fn healthz_fails_only_without_progress_for_longer_than_a_ttl() {
        let mut r = rejoin();
        assert!(r.healthy(0));
        r.observe(1_000, FENCED);
        assert!(r.healthy(4_000));
        assert!(
            !r.healthy(4_001),
            "fenced for more than a TTL, never lost: stuck"
        );
        r.observe(4_001, LOST);
        assert!(r.healthy(4_001), "a rejoin attempt started: progress");
        assert!(r.healthy(7_001));
        assert!(!r.healthy(7_002), "an attempt hung for more than a TTL");
        r.attempt_failed(7_500);
        assert!(r.healthy(7_500));
        // Failing attempts every few hundred ms (the store is still down) keep it healthy.
        let mut now = 7_500;
        for _ in 0..50 {
            let Phase::Rejoining { next_ms, .. } = r.phase() else {
                panic!()
            };
            now = next_ms;
            assert_eq!(r.observe(now, LOST), Action::Rejoin);
            assert!(r.healthy(now));
            r.attempt_failed(now + 20);
        }
        assert!(now > 7_500 + 3 * 3_000, "well past a TTL of fencing");
        assert!(r.healthy(now + 20));
    }

    /// Every phase × view: `rejoined` / `attempt_failed` are ignored unless an attempt runs,
    /// and a serving host never acts on a healthy lease.
    #[test]
    fn every_phase_and_event() {
        let phases = [
            Phase::Serving,
            Phase::Fenced { since_ms: 10 },
            Phase::Rejoining {
                since_ms: 10,
                attempts: 1,
                next_ms: 50,
                backoff_ms: 50,
                running: false,
                progress_ms: 20,
            },
            Phase::Rejoining {
                since_ms: 10,
                attempts: 1,
                next_ms: 0,
                backoff_ms: 0,
                running: true,
                progress_ms: 20,
            },
            Phase::Exiting { at_ms: 10 },
        ];
        for mode in [LeaseLoss::Rejoin, LeaseLoss::Exit] {
            for p in phases {
                for view in [OK, FENCED, LOST] {
                    let mut r = Recovery::new(mode, 3_000, 400);
                    r.phase = p;
                    let a = r.observe(100, view);
                    match (p, view.lost, view.fenced, a) {
                        (Phase::Serving, false, false, Action::None)
                        | (Phase::Serving | Phase::Fenced { .. }, true, _, Action::Rejoin)
                            if mode == LeaseLoss::Rejoin || !view.lost => {}
                        (Phase::Serving | Phase::Fenced { .. }, true, _, Action::Exit)
                            if mode == LeaseLoss::Exit => {}
                        (Phase::Serving, false, true, Action::Fence)
                        | (Phase::Fenced { .. }, false, _, Action::None)
                        | (Phase::Rejoining { running: true, .. }, _, _, Action::None)
                        | (Phase::Rejoining { running: false, .. }, _, _, Action::Rejoin)
                        | (Phase::Exiting { .. }, _, _, Action::Exit) => {}
                        other => panic!("{mode:?}: unexpected {other:?}"),
                    }
                }
                let mut r = Recovery::new(mode, 3_000, 400);
                r.phase = p;
                r.attempt_failed(200);
                r.rejoined(300);
                match p {
                    Phase::Rejoining { running: true, .. } => {
                        assert_eq!(r.rejoins(), 0, "failed first, so rejoined is ignored");
                        assert!(matches!(r.phase(), Phase::Rejoining { running: false, .. }));
                    }
                    other => assert_eq!(r.phase(), other),
                }
            }
        }
    }
}
