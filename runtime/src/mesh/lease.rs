//! Keeping the owner lease (issue 20 item 1; glossary §8 "Fencing margin"): when the next
//! renewal is due, how a failed one is retried, when the host is fenced and when its lease is
//! lost for good. Pure: time comes in as `now_ms` on the node's clock, no I/O; the node's
//! lease task is a thin shell around it (see `reactor::lease_loop`).
//!
//! - A renewal that lands moves both deadlines: the fencing deadline is the store's lease
//!   deadline minus the fencing margin, measured from when the renewal was **sent** (the store
//!   may have applied it at any point of the round trip, so the earliest is the safe one); the
//!   lease deadline is the fencing deadline plus the margin.
//! - A renewal that fails for a transient reason (store unreachable, timeout) is retried after
//!   a short backoff — [`RenewPolicy::backoff_first_ms`], doubling, capped at
//!   [`RenewPolicy::backoff_cap_ms`] — instead of waiting a whole renew period, so a store blip
//!   shorter than `lease_ttl − fencing_margin − renew period` never costs the lease.
//! - The host is **fenced** (admits no new object work) from its fencing deadline on; retries
//!   continue, and a renewal that lands before the lease deadline lifts the fence with nothing
//!   lost (no other host may take the lease before its deadline).
//! - The lease is **lost** when the store answers that the token is stale (expired or
//!   replaced) or when the lease deadline passes without a renewal: from then on another host
//!   may own this host's objects, so they are dropped and only a new lifecycle can serve again
//!   (see the host's recovery, `zlink-node` `host::recovery`).

/// The renewal timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewPolicy {
    /// The regular renewal period (`timings.lease_renew`).
    pub period_ms: u64,
    /// The fencing margin.
    pub margin_ms: u64,
    /// The first retry delay after a failed renewal.
    pub backoff_first_ms: u64,
    /// The longest retry delay.
    pub backoff_cap_ms: u64,
}

/// The default first retry delay.
pub const BACKOFF_FIRST_MS: u64 = 50;

impl RenewPolicy {
    /// The policy for `period_ms` and `margin_ms`: first retry after 50 ms, doubling, capped
    /// at a quarter of the fencing margin (so at least four retries fit in the margin) but never
    /// below 50 ms nor above the renew period.
    pub fn new(period_ms: u64, margin_ms: u64) -> Self {
        let cap = (margin_ms / 4).max(BACKOFF_FIRST_MS).min(period_ms.max(1));
        Self {
            period_ms: period_ms.max(1),
            margin_ms,
            backoff_first_ms: BACKOFF_FIRST_MS.min(cap),
            backoff_cap_ms: cap,
        }
    }
}

impl RenewPolicy {
    /// The retry delay after `prev_ms` (0: the first failure): the first delay, then doubling
    /// up to the cap.
    pub fn next_backoff_ms(&self, prev_ms: u64) -> u64 {
        if prev_ms == 0 {
            self.backoff_first_ms
        } else {
            prev_ms.saturating_mul(2).min(self.backoff_cap_ms)
        }
    }
}

/// When a renew loop without a [`LeaseKeeper`] (the fanout publisher's and the ClientServer's
/// own leases) tries next: the period after a success, [`RenewPolicy::next_backoff_ms`] after
/// a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    policy: RenewPolicy,
    backoff_ms: u64,
}

impl RetrySchedule {
    /// A schedule for `policy`.
    pub fn new(policy: RenewPolicy) -> Self {
        Self {
            policy,
            backoff_ms: 0,
        }
    }

    /// The last attempt succeeded: the next is a period away.
    pub fn succeeded(&mut self) -> std::time::Duration {
        self.backoff_ms = 0;
        std::time::Duration::from_millis(self.policy.period_ms)
    }

    /// The last attempt failed: retry after the next backoff step.
    pub fn failed(&mut self) -> std::time::Duration {
        self.backoff_ms = self.policy.next_backoff_ms(self.backoff_ms);
        std::time::Duration::from_millis(self.backoff_ms)
    }
}

/// Where the keeper is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeeperState {
    /// The last claim or renewal landed; the next renewal is due at `due_ms`.
    Confirmed {
        /// When the next regular renewal is due.
        due_ms: u64,
    },
    /// Renewals are failing; the next attempt is at `retry_ms`.
    Retrying {
        /// When to try again.
        retry_ms: u64,
        /// The delay that produced `retry_ms` (the next one doubles it, up to the cap).
        backoff_ms: u64,
        /// Consecutive failures.
        failures: u32,
    },
    /// The lease is gone for good: stale in the store, or its deadline passed unrenewed.
    Lost {
        /// When the keeper learned it.
        at_ms: u64,
        /// Why.
        reason: LostReason,
    },
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// The store answered that the token is stale (expired or replaced).
    Stale,
    /// The lease deadline passed before any renewal landed.
    Expired,
}

/// What a renewal attempt ended with (the store call's outcome, classified by the shell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The store renewed the lease: `fencing_delay_ms` is the store's remaining lease time
    /// minus the fencing margin, to be counted from `sent_ms`.
    Renewed {
        /// When the renewal was sent.
        sent_ms: u64,
        /// Lease remaining minus the fencing margin.
        fencing_delay_ms: u64,
    },
    /// A transient failure (unreachable, timeout, any store error other than stale).
    Failed,
    /// The token is stale: the lease expired or was replaced.
    Stale,
}

/// The pure lease keeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseKeeper {
    policy: RenewPolicy,
    state: KeeperState,
    fencing_deadline_ms: u64,
    /// Fenced time of earlier spells (the current one is added by [`Self::fenced_ms`]).
    fenced_before_ms: u64,
    attempts: u64,
    failures: u64,
}

impl LeaseKeeper {
    /// A keeper for a lease claimed at `sent_ms` with `fencing_delay_ms` left before its
    /// fencing deadline.
    pub fn claimed(policy: RenewPolicy, sent_ms: u64, fencing_delay_ms: u64) -> Self {
        Self {
            policy,
            state: KeeperState::Confirmed {
                due_ms: sent_ms.saturating_add(policy.period_ms),
            },
            fencing_deadline_ms: sent_ms.saturating_add(fencing_delay_ms),
            fenced_before_ms: 0,
            attempts: 0,
            failures: 0,
        }
    }

    /// The state.
    pub fn state(&self) -> KeeperState {
        self.state
    }

    /// The fencing deadline (0 once the lease is lost).
    pub fn fencing_deadline_ms(&self) -> u64 {
        match self.state {
            KeeperState::Lost { .. } => 0,
            KeeperState::Confirmed { .. } | KeeperState::Retrying { .. } => {
                self.fencing_deadline_ms
            }
        }
    }

    /// The lease deadline as this host knows it (fencing deadline + margin).
    pub fn lease_deadline_ms(&self) -> u64 {
        self.fencing_deadline_ms
            .saturating_add(self.policy.margin_ms)
    }

    /// Whether the host is fenced at `now_ms` (admits no new object work).
    pub fn fenced(&self, now_ms: u64) -> bool {
        now_ms >= self.fencing_deadline_ms()
    }

    /// Whether the lease is lost for good.
    pub fn lost(&self) -> bool {
        matches!(self.state, KeeperState::Lost { .. })
    }

    /// Renewal attempts so far.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// Failed renewal attempts so far (stale answers included).
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Total time spent fenced up to `now_ms` (a lost lease keeps counting: the host stays
    /// fenced until a new lifecycle takes over).
    pub fn fenced_ms(&self, now_ms: u64) -> u64 {
        self.fenced_before_ms + now_ms.saturating_sub(self.fencing_deadline_ms)
    }

    /// When the shell should wake next: the due renewal or retry, or the lease deadline if
    /// that comes first (to notice an expiry while a store call hangs). `None` once lost.
    pub fn next_wake_ms(&self) -> Option<u64> {
        match self.state {
            KeeperState::Confirmed { due_ms } => Some(due_ms.min(self.lease_deadline_ms())),
            KeeperState::Retrying { retry_ms, .. } => Some(retry_ms.min(self.lease_deadline_ms())),
            KeeperState::Lost { .. } => None,
        }
    }

    /// Advance to `now_ms`: the lease is lost once its deadline passed unrenewed. Returns
    /// whether a renewal attempt should start now.
    pub fn tick(&mut self, now_ms: u64) -> bool {
        match self.state {
            KeeperState::Lost { .. } => false,
            KeeperState::Confirmed { .. } | KeeperState::Retrying { .. }
                if now_ms >= self.lease_deadline_ms() =>
            {
                self.lose(now_ms, LostReason::Expired);
                false
            }
            KeeperState::Confirmed { due_ms } => now_ms >= due_ms,
            KeeperState::Retrying { retry_ms, .. } => now_ms >= retry_ms,
        }
    }

    /// A renewal attempt ended at `now_ms` with `outcome`.
    pub fn renewal(&mut self, now_ms: u64, outcome: RenewOutcome) {
        if self.lost() {
            return;
        }
        self.attempts += 1;
        match outcome {
            RenewOutcome::Renewed {
                sent_ms,
                fencing_delay_ms,
            } => {
                let deadline = sent_ms.saturating_add(fencing_delay_ms);
                if sent_ms >= self.lease_deadline_ms() {
                    // Sent after the deadline we knew: the store cannot have renewed a live
                    // lease then (a stale answer was expected); treat as lost.
                    self.lose(now_ms, LostReason::Expired);
                    return;
                }
                // Close the current fenced spell, if any.
                self.fenced_before_ms += now_ms
                    .min(deadline.max(self.fencing_deadline_ms))
                    .saturating_sub(self.fencing_deadline_ms);
                self.fencing_deadline_ms = self.fencing_deadline_ms.max(deadline);
                self.state = KeeperState::Confirmed {
                    due_ms: sent_ms.saturating_add(self.policy.period_ms),
                };
            }
            RenewOutcome::Failed => {
                self.failures += 1;
                let (backoff, failures) = match self.state {
                    KeeperState::Retrying {
                        backoff_ms,
                        failures,
                        ..
                    } => (
                        self.policy.next_backoff_ms(backoff_ms),
                        failures.saturating_add(1),
                    ),
                    KeeperState::Confirmed { .. } | KeeperState::Lost { .. } => {
                        (self.policy.next_backoff_ms(0), 1)
                    }
                };
                if now_ms >= self.lease_deadline_ms() {
                    self.lose(now_ms, LostReason::Expired);
                    return;
                }
                self.state = KeeperState::Retrying {
                    retry_ms: now_ms.saturating_add(backoff),
                    backoff_ms: backoff,
                    failures,
                };
            }
            RenewOutcome::Stale => {
                self.failures += 1;
                self.lose(now_ms, LostReason::Stale);
            }
        }
    }

    fn lose(&mut self, now_ms: u64, reason: LostReason) {
        // Time fenced before the loss stays counted by `fenced_ms`.
        self.state = KeeperState::Lost {
            at_ms: now_ms,
            reason,
        };
        if self.fencing_deadline_ms > now_ms {
            // Lost before the fencing deadline (a stale answer): fenced from now on.
            self.fencing_deadline_ms = now_ms;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TTL 3,000 ms, margin 600 ms, renew every 1,000 ms (the configuration).
    fn keeper() -> LeaseKeeper {
        LeaseKeeper::claimed(RenewPolicy::new(1_000, 600), 0, 2_400)
    }

    fn renewed(sent_ms: u64) -> RenewOutcome {
        RenewOutcome::Renewed {
            sent_ms,
            fencing_delay_ms: 2_400,
        }
    }

    #[test]
    fn the_policy_retries_well_inside_the_margin() {
        let p = RenewPolicy::new(1_000, 600);
        assert_eq!((p.backoff_first_ms, p.backoff_cap_ms), (50, 150));
        // A tiny margin still retries at 50 ms; a tiny period caps the backoff at the period.
        assert_eq!(RenewPolicy::new(1_000, 40).backoff_cap_ms, 50);
        let short = RenewPolicy::new(20, 2_000);
        assert_eq!((short.backoff_first_ms, short.backoff_cap_ms), (20, 20));
    }

    #[test]
    fn a_retry_schedule_backs_off_on_failures_and_resets_on_success() {
        let mut r = RetrySchedule::new(RenewPolicy::new(1_000, 600));
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap();
        let failures: Vec<u64> = (0..4).map(|_| ms(r.failed())).collect();
        assert_eq!(failures, vec![50, 100, 150, 150]);
        assert_eq!(ms(r.succeeded()), 1_000);
        assert_eq!(ms(r.failed()), 50, "a success resets the backoff");
    }

    #[test]
    fn renewals_are_due_once_per_period_and_move_both_deadlines() {
        let mut k = keeper();
        assert_eq!(k.next_wake_ms(), Some(1_000));
        assert!(!k.tick(999));
        assert!(k.tick(1_000));
        k.renewal(1_010, renewed(1_000));
        assert_eq!(k.state(), KeeperState::Confirmed { due_ms: 2_000 });
        assert_eq!(k.fencing_deadline_ms(), 3_400);
        assert_eq!(k.lease_deadline_ms(), 4_000);
        assert!(!k.fenced(3_399));
        assert!(k.fenced(3_400));
        assert_eq!((k.attempts(), k.failures()), (1, 0));
    }

    #[test]
    fn a_failed_renewal_is_retried_with_doubling_capped_backoff() {
        let mut k = keeper();
        assert!(k.tick(1_000));
        let mut at = 1_000;
        let mut delays = Vec::new();
        for _ in 0..5 {
            k.renewal(at, RenewOutcome::Failed);
            let KeeperState::Retrying { retry_ms, .. } = k.state() else {
                panic!("{:?}", k.state());
            };
            delays.push(retry_ms - at);
            assert!(!k.tick(retry_ms - 1));
            assert!(k.tick(retry_ms));
            at = retry_ms;
        }
        assert_eq!(delays, vec![50, 100, 150, 150, 150]);
        assert_eq!(k.failures(), 5);
        // Not fenced yet (deadline 2,400), and a landing renewal lifts everything.
        assert!(!k.fenced(at));
        k.renewal(at + 5, renewed(at));
        assert_eq!(k.state(), KeeperState::Confirmed { due_ms: at + 1_000 });
        assert_eq!(k.fenced_ms(at + 5), 0);
    }

    /// Run renewals from 0 to 10 s with the store down in `[down, up)`; the largest fenced
    /// spell and whether the lease was lost.
    fn outage(down: u64, up: u64) -> (u64, bool) {
        let mut k = keeper();
        let mut now = 0;
        while now < 10_000 && !k.lost() {
            if k.tick(now) {
                let outcome = if (down..up).contains(&now) {
                    RenewOutcome::Failed
                } else {
                    renewed(now)
                };
                k.renewal(now + 2, outcome);
            }
            now = k.next_wake_ms().map_or(now + 1, |w| w.max(now + 1));
        }
        (k.fenced_ms(now), k.lost())
    }

    /// Issue 20 item 3: an outage shorter than TTL − margin − one renew period (here 1,400 ms)
    /// never costs the lease, wherever it starts within the renew period; one shorter by a
    /// retry step more never even fences. A longer one fences; one past the TTL loses it.
    #[test]
    fn an_outage_shorter_than_ttl_minus_margin_minus_period_keeps_the_lease() {
        let cap = keeper().policy.backoff_cap_ms;
        for start in (0..1_000).step_by(37) {
            assert!(!outage(start, start + 1_399).1, "start {start}");
            assert_eq!(
                outage(start, start + 1_399 - cap),
                (0, false),
                "start {start}"
            );
            assert!(outage(start, start + 2_600).0 > 0, "start {start}");
            assert!(outage(start, start + 3_100).1, "start {start}");
        }
    }

    #[test]
    fn fenced_after_the_fencing_deadline_and_healed_before_the_lease_deadline() {
        let mut k = keeper();
        let mut now = 1_000;
        while now < 2_700 {
            if k.tick(now) {
                k.renewal(now, RenewOutcome::Failed);
            }
            now = k.next_wake_ms().unwrap().max(now + 1);
        }
        assert!(k.fenced(2_700), "past 2,400");
        assert!(!k.lost());
        assert_eq!(k.fenced_ms(2_700), 300);
        // The store is back before 3,000: the lease was still live, nothing is lost.
        k.renewal(2_720, renewed(2_710));
        assert!(!k.fenced(2_720));
        assert_eq!(k.fencing_deadline_ms(), 5_110);
        assert_eq!(k.fenced_ms(4_000), 320, "the spell ended at 2,720");
    }

    #[test]
    fn the_lease_is_lost_at_its_deadline_or_on_a_stale_answer() {
        let mut k = keeper();
        assert!(k.tick(1_000));
        k.renewal(1_000, RenewOutcome::Failed);
        assert!(!k.tick(3_000), "deadline 3,000 passed: no more attempts");
        assert_eq!(
            k.state(),
            KeeperState::Lost {
                at_ms: 3_000,
                reason: LostReason::Expired
            }
        );
        assert_eq!(k.next_wake_ms(), None);
        assert_eq!(k.fencing_deadline_ms(), 0);
        assert!(k.fenced(0));
        // Nothing revives a lost lease, not even a late success.
        k.renewal(3_010, renewed(2_990));
        assert!(k.lost());
        assert_eq!(k.fenced_ms(4_000), 600 + 1_000);

        let mut k = keeper();
        k.renewal(500, RenewOutcome::Stale);
        assert_eq!(
            k.state(),
            KeeperState::Lost {
                at_ms: 500,
                reason: LostReason::Stale
            }
        );
        assert!(k.fenced(500));
        assert_eq!(k.fenced_ms(700), 200);
    }

    #[test]
    fn a_success_sent_after_the_known_deadline_does_not_revive_the_lease() {
        let mut k = keeper();
        k.renewal(1_000, RenewOutcome::Failed);
        // A renewal sent at 3,100 (after the 3,000 deadline, a hung tick) cannot be trusted.
        k.renewal(3_150, renewed(3_100));
        assert!(k.lost());
    }

    /// Every state × outcome: the keeper never un-loses, never moves the fencing deadline
    /// backwards while live, and a failure never schedules a retry beyond the cap.
    #[test]
    fn every_state_and_outcome() {
        let states = {
            let mut v = vec![keeper()];
            let mut r = keeper();
            r.renewal(1_000, RenewOutcome::Failed);
            v.push(r);
            let mut l = keeper();
            l.renewal(1_000, RenewOutcome::Stale);
            v.push(l);
            v
        };
        for s in states {
            for outcome in [renewed(1_100), RenewOutcome::Failed, RenewOutcome::Stale] {
                let mut k = s.clone();
                let before = k.fencing_deadline_ms();
                k.renewal(1_200, outcome);
                match (s.state(), k.state()) {
                    (KeeperState::Lost { .. }, after) => {
                        assert!(matches!(after, KeeperState::Lost { .. }));
                    }
                    (_, KeeperState::Retrying { retry_ms, .. }) => {
                        assert!(retry_ms - 1_200 <= k.policy.backoff_cap_ms);
                        assert_eq!(k.fencing_deadline_ms(), before);
                    }
                    (_, KeeperState::Confirmed { .. }) => {
                        assert!(k.fencing_deadline_ms() >= before);
                    }
                    (_, KeeperState::Lost { reason, .. }) => {
                        assert_eq!(reason, LostReason::Stale);
                        assert_eq!(outcome, RenewOutcome::Stale);
                    }
                }
            }
        }
    }
}
