//! Reconnect delays: bounded, exponential, jittered (issue 19 item 8).
//!
//! Attempt `n` (1-based) waits a delay drawn uniformly from `[cap_n / 2, cap_n]`, where
//! `cap_n = min(max, initial · 2^(n-1))` ("equal jitter"): never more than `max`, never less
//! than half the exponential step, so a fleet of clients cut off by one node restart spreads
//! its reconnects instead of arriving in one wave. The generator is seeded, so tests replay a
//! schedule exactly; the connector seeds it from the process's hasher keys.

use std::time::Duration;

/// The reconnect schedule settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Reconnect at all after a session ends (default true). False: the connector closes at
    /// the first disconnect.
    pub enabled: bool,
    /// The first attempt's step (100 ms).
    pub initial_backoff: Duration,
    /// The largest delay (5 s).
    pub max_backoff: Duration,
    /// Give up after this many failed attempts in a row (`None`, the default: keep trying until
    /// the application closes the connector).
    pub max_attempts: Option<u32>,
}

impl ReconnectPolicy {
    /// Default `initial_backoff`.
    pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
    /// Default `max_backoff`.
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(5);

    /// No reconnects.
    pub const fn never() -> Self {
        Self {
            enabled: false,
            initial_backoff: Self::DEFAULT_INITIAL_BACKOFF,
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
            max_attempts: None,
        }
    }
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_backoff: Self::DEFAULT_INITIAL_BACKOFF,
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
            max_attempts: None,
        }
    }
}

/// One run of reconnect attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: ReconnectPolicy,
    attempts: u32,
    rng: u64,
}

impl Backoff {
    /// A schedule for `policy` with generator `seed` (any value).
    pub fn new(policy: ReconnectPolicy, seed: u64) -> Self {
        Self {
            policy,
            attempts: 0,
            rng: splitmix64(seed),
        }
    }

    /// Attempts made since the last [`reset`](Self::reset).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The delay before the next attempt, or `None` when the policy gives up (disabled, or
    /// `max_attempts` made).
    pub fn next_delay(&mut self) -> Option<Duration> {
        if !self.policy.enabled {
            return None;
        }
        if self
            .policy
            .max_attempts
            .is_some_and(|max| self.attempts >= max)
        {
            return None;
        }
        let cap = self.cap(self.attempts);
        self.attempts += 1;
        let half = cap / 2;
        let span = u64::try_from((cap - half).as_nanos()).unwrap_or(u64::MAX);
        let jitter = if span == 0 {
            0
        } else {
            self.next_random() % (span + 1)
        };
        Some(half + Duration::from_nanos(jitter))
    }

    /// A session was established: the next disconnect starts from the first step again.
    pub fn reset(&mut self) {
        self.attempts = 0;
    }

    /// The upper bound of the delay for 0-based attempt `n`.
    pub fn cap(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
        self.policy
            .initial_backoff
            .checked_mul(factor)
            .map_or(self.policy.max_backoff, |d| d.min(self.policy.max_backoff))
    }

    /// xorshift64*: small, seeded, good enough for jitter (not for secrets).
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Spread a seed over all 64 bits (nearby seeds give unrelated schedules); never 0, which
/// xorshift would keep forever.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    if z == 0 { 1 } else { z }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: Option<u32>) -> ReconnectPolicy {
        ReconnectPolicy {
            max_attempts,
            ..ReconnectPolicy::default()
        }
    }

    #[test]
    fn delays_double_from_the_initial_step_up_to_the_cap_and_stay_in_the_jitter_band() {
        for seed in 0..200 {
            let mut b = Backoff::new(policy(None), seed);
            for n in 0..12 {
                let cap = Duration::from_millis(100)
                    .saturating_mul(1 << n)
                    .min(Duration::from_secs(5));
                let d = b.next_delay().expect("unlimited attempts");
                assert!(
                    d >= cap / 2 && d <= cap,
                    "seed {seed} attempt {n}: {d:?} vs {cap:?}"
                );
            }
            // Far past the doubling: still the cap.
            assert!(b.next_delay().expect("unlimited") <= Duration::from_secs(5));
        }
    }

    #[test]
    fn jitter_spreads_clients_that_start_together() {
        let firsts: std::collections::HashSet<Duration> = (1..50)
            .map(|seed| {
                Backoff::new(policy(None), seed)
                    .next_delay()
                    .expect("first")
            })
            .collect();
        assert!(
            firsts.len() > 40,
            "50 seeds gave {} distinct delays",
            firsts.len()
        );
    }

    #[test]
    fn the_same_seed_replays_the_same_schedule() {
        let run = |seed| {
            let mut b = Backoff::new(policy(None), seed);
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn max_attempts_gives_up_and_reset_starts_over() {
        let mut b = Backoff::new(policy(Some(3)), 1);
        assert!(b.next_delay().is_some());
        assert!(b.next_delay().is_some());
        let third = b.next_delay().expect("third attempt");
        assert!(third >= Duration::from_millis(200), "{third:?}");
        assert_eq!(b.next_delay(), None);
        assert_eq!(b.attempts(), 3);
        b.reset();
        let first = b.next_delay().expect("after reset");
        assert!(first <= Duration::from_millis(100), "{first:?}");
    }

    #[test]
    fn a_disabled_policy_never_reconnects() {
        assert_eq!(Backoff::new(ReconnectPolicy::never(), 1).next_delay(), None);
    }

    #[test]
    fn huge_steps_saturate_at_the_cap_instead_of_overflowing() {
        let p = ReconnectPolicy {
            initial_backoff: Duration::from_secs(u64::MAX / 4),
            max_backoff: Duration::from_secs(30),
            ..ReconnectPolicy::default()
        };
        let mut b = Backoff::new(p, 3);
        for _ in 0..40 {
            let d = b.next_delay().expect("unlimited");
            assert!(d <= Duration::from_secs(30));
        }
    }
}
