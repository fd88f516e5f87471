//! Leader election on a `coordination.k8s.io` Lease (issue 18 item 6), so several operator
//! replicas run one controller at a time. A pure core ([`Elector`], `now` as input) decides;
//! [`LeaderElection`] reads and writes the Lease with resourceVersion preconditions.
//!
//! # Guarantees
//! - A replica leads only after it wrote the Lease naming itself (create, or an update that
//!   checked the resourceVersion it read).
//! - A leader that sees another holder, or cannot renew within `renew_deadline`, is `Lost` for
//!   good: it stops within one retry period, and `zlink-operator run` then exits non-zero (its
//!   replacement starts clean, from the cluster's state).
//! - A leader stopping on SIGTERM releases the Lease, so the next replica takes over at once.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ObjectMeta, PostParams};

/// Timings (client-go's defaults: 15 s / 10 s / 2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How long a Lease not renewed stays its holder's.
    pub lease_duration_ms: u64,
    /// How long a leader keeps leading without a successful renew.
    pub renew_deadline_ms: u64,
    /// How often it reads and renews.
    pub retry_period_ms: u64,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            lease_duration_ms: 15_000,
            renew_deadline_ms: 10_000,
            retry_period_ms: 2_000,
        }
    }
}

/// The Lease as the elector sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// Its holder (None or empty: released).
    pub holder: Option<String>,
    /// When it was last renewed (ms since the epoch).
    pub renewed_ms: u64,
    /// Its duration.
    pub duration_ms: u64,
}

/// Where this replica stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elector {
    /// Not leading; trying.
    Follower,
    /// Leading; last renewed at `renewed_ms`.
    Leader {
        /// The last successful write.
        renewed_ms: u64,
    },
    /// Was leading and lost it: stop.
    Lost,
}

/// What to do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Write the Lease naming this replica (take it).
    Acquire,
    /// Write the Lease again (keep it).
    Renew,
    /// Someone else holds it.
    Wait,
    /// Stop leading.
    StepDown,
}

impl Elector {
    /// Decides from the Lease just read (`None`: it does not exist).
    pub fn decide(
        &mut self,
        me: &str,
        lease: Option<&LeaseView>,
        now_ms: u64,
        t: &Timings,
    ) -> Decision {
        let held_by_other = |l: &LeaseView| {
            l.holder
                .as_deref()
                .is_some_and(|h| !h.is_empty() && h != me)
                && now_ms < l.renewed_ms.saturating_add(l.duration_ms)
        };
        match *self {
            Elector::Lost => Decision::StepDown,
            Elector::Follower => match lease {
                Some(l) if held_by_other(l) => Decision::Wait,
                None | Some(_) => Decision::Acquire,
            },
            Elector::Leader { renewed_ms } => {
                let other = lease.is_some_and(|l| l.holder.as_deref().is_some_and(|h| h != me));
                if other || now_ms.saturating_sub(renewed_ms) > t.renew_deadline_ms {
                    *self = Elector::Lost;
                    Decision::StepDown
                } else {
                    Decision::Renew
                }
            }
        }
    }

    /// A write naming this replica succeeded at `now_ms`.
    pub fn wrote(&mut self, now_ms: u64) {
        if *self != Elector::Lost {
            *self = Elector::Leader { renewed_ms: now_ms };
        }
    }

    /// A write failed (a conflict or an error) at `now_ms`.
    pub fn write_failed(&mut self, now_ms: u64, t: &Timings) {
        if let Elector::Leader { renewed_ms } = *self
            && now_ms.saturating_sub(renewed_ms) > t.renew_deadline_ms
        {
            *self = Elector::Lost;
        }
    }

    /// Leading now.
    pub fn is_leader(&self) -> bool {
        matches!(self, Elector::Leader { .. })
    }
}

fn now_ms() -> u64 {
    u64::try_from(k8s_openapi::jiff::Timestamp::now().as_millisecond()).unwrap_or(0)
}

fn micro_time(ms: u64) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime> {
    k8s_openapi::jiff::Timestamp::from_millisecond(i64::try_from(ms).ok()?)
        .ok()
        .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime)
}

fn view(l: &Lease) -> LeaseView {
    let spec = l.spec.clone().unwrap_or_default();
    LeaseView {
        holder: spec.holder_identity,
        renewed_ms: spec
            .renew_time
            .map_or(0, |t| u64::try_from(t.0.as_millisecond()).unwrap_or(0)),
        duration_ms: u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15) * 1000,
    }
}

/// The shell: one replica (`identity`) on Lease `name`.
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: Timings,
    state: Elector,
    /// Lease reads so far (a marker for tests).
    pub attempts: u64,
}

impl LeaderElection {
    /// An elector for `identity` on `api`'s Lease `name`.
    pub fn new(api: Api<Lease>, name: &str, identity: &str, timings: Timings) -> Self {
        Self {
            api,
            name: name.into(),
            identity: identity.into(),
            timings,
            state: Elector::Follower,
            attempts: 0,
        }
    }

    /// The current state.
    pub fn state(&self) -> Elector {
        self.state
    }

    /// One round: read the Lease, decide, write. Returns the state after it.
    pub async fn step(&mut self) -> Elector {
        self.attempts += 1;
        let now = now_ms();
        let current = match self.api.get_opt(&self.name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "reading the leader Lease failed");
                self.state.write_failed(now, &self.timings);
                return self.state;
            }
        };
        let decision = self.state.decide(
            &self.identity,
            current.as_ref().map(view).as_ref(),
            now,
            &self.timings,
        );
        match decision {
            Decision::Wait | Decision::StepDown => {}
            Decision::Acquire | Decision::Renew => {
                let taking = decision == Decision::Acquire;
                let prev = current
                    .as_ref()
                    .and_then(|l| l.spec.clone())
                    .unwrap_or_default();
                let held_before = prev.holder_identity.as_deref() == Some(self.identity.as_str());
                let spec = k8s_openapi::api::coordination::v1::LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: i32::try_from(
                        self.timings.lease_duration_ms.div_ceil(1000),
                    )
                    .ok(),
                    acquire_time: if taking && !held_before {
                        micro_time(now)
                    } else {
                        prev.acquire_time.clone()
                    },
                    renew_time: micro_time(now),
                    lease_transitions: Some(
                        prev.lease_transitions.unwrap_or(0) + i32::from(taking && !held_before),
                    ),
                    ..Default::default()
                };
                let result = match current {
                    None => {
                        let lease = Lease {
                            metadata: ObjectMeta {
                                name: Some(self.name.clone()),
                                ..ObjectMeta::default()
                            },
                            spec: Some(spec),
                        };
                        self.api
                            .create(&PostParams::default(), &lease)
                            .await
                            .map(|_| ())
                    }
                    Some(mut l) => {
                        // `replace` sends the resourceVersion read: a concurrent writer gets 409.
                        l.spec = Some(spec);
                        self.api
                            .replace(&self.name, &PostParams::default(), &l)
                            .await
                            .map(|_| ())
                    }
                };
                match result {
                    Ok(()) => {
                        if taking && !self.state.is_leader() {
                            tracing::info!(identity = %self.identity, lease = %self.name, "became the leader");
                        }
                        self.state.wrote(now);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "writing the leader Lease failed");
                        self.state.write_failed(now, &self.timings);
                    }
                }
            }
        }
        self.state
    }

    /// Steps until this replica leads (or `stop` resolves: then `false`).
    pub async fn acquire(
        &mut self,
        stop: &mut (impl std::future::Future<Output = ()> + Unpin),
    ) -> bool {
        loop {
            if self.step().await.is_leader() {
                return true;
            }
            tokio::select! {
                () = &mut *stop => return false,
                () = tokio::time::sleep(Duration::from_millis(self.timings.retry_period_ms)) => {}
            }
        }
    }

    /// While leading: renews every retry period; returns once the lead is lost.
    pub async fn keep(&mut self) {
        loop {
            tokio::time::sleep(Duration::from_millis(self.timings.retry_period_ms)).await;
            if self.step().await == Elector::Lost {
                tracing::error!(identity = %self.identity, lease = %self.name, "lost the leader Lease");
                return;
            }
        }
    }

    /// Gives the Lease up (on a clean stop) so another replica takes over at once.
    pub async fn release(&mut self) {
        if !self.state.is_leader() {
            return;
        }
        if let Ok(Some(mut l)) = self.api.get_opt(&self.name).await
            && l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                == Some(self.identity.as_str())
        {
            if let Some(s) = l.spec.as_mut() {
                s.holder_identity = None;
                s.renew_time = None;
            }
            let _ = self
                .api
                .replace(&self.name, &PostParams::default(), &l)
                .await;
        }
        self.state = Elector::Lost;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timings = Timings {
        lease_duration_ms: 1_500,
        renew_deadline_ms: 1_000,
        retry_period_ms: 200,
    };

    fn lease(holder: Option<&str>, renewed_ms: u64) -> LeaseView {
        LeaseView {
            holder: holder.map(str::to_owned),
            renewed_ms,
            duration_ms: 1_500,
        }
    }

    #[test]
    fn table_of_every_state_and_lease() {
        // (state, lease, now) -> (decision, state after)
        let leader = Elector::Leader { renewed_ms: 1_000 };
        let cases: [(Elector, Option<LeaseView>, u64, Decision, Elector); 12] = [
            (
                Elector::Follower,
                None,
                5_000,
                Decision::Acquire,
                Elector::Follower,
            ),
            (
                Elector::Follower,
                Some(lease(Some("b"), 4_000)),
                5_000,
                Decision::Wait,
                Elector::Follower,
            ),
            (
                Elector::Follower,
                Some(lease(Some("b"), 3_000)),
                5_000,
                Decision::Acquire,
                Elector::Follower,
            ),
            (
                Elector::Follower,
                Some(lease(None, 4_900)),
                5_000,
                Decision::Acquire,
                Elector::Follower,
            ),
            (
                Elector::Follower,
                Some(lease(Some(""), 4_900)),
                5_000,
                Decision::Acquire,
                Elector::Follower,
            ),
            (
                Elector::Follower,
                Some(lease(Some("a"), 4_900)),
                5_000,
                Decision::Acquire,
                Elector::Follower,
            ),
            (
                leader,
                Some(lease(Some("a"), 1_000)),
                1_200,
                Decision::Renew,
                leader,
            ),
            (leader, None, 1_200, Decision::Renew, leader),
            (
                leader,
                Some(lease(Some("b"), 1_100)),
                1_200,
                Decision::StepDown,
                Elector::Lost,
            ),
            (
                leader,
                Some(lease(None, 1_100)),
                1_200,
                Decision::Renew,
                leader,
            ),
            (
                leader,
                Some(lease(Some("a"), 1_000)),
                2_001,
                Decision::StepDown,
                Elector::Lost,
            ),
            (
                Elector::Lost,
                Some(lease(Some("a"), 1_000)),
                1_100,
                Decision::StepDown,
                Elector::Lost,
            ),
        ];
        for (i, (mut s, l, now, want, after)) in cases.into_iter().enumerate() {
            assert_eq!(s.decide("a", l.as_ref(), now, &T), want, "case {i}");
            assert_eq!(s, after, "case {i}");
        }
    }

    #[test]
    fn writes_lead_and_failed_renews_lose_only_past_the_deadline() {
        let mut s = Elector::Follower;
        s.write_failed(0, &T);
        assert_eq!(s, Elector::Follower);
        s.wrote(100);
        assert_eq!(s, Elector::Leader { renewed_ms: 100 });
        s.write_failed(1_100, &T);
        assert!(s.is_leader(), "within the renew deadline");
        s.write_failed(1_101, &T);
        assert_eq!(s, Elector::Lost);
        s.wrote(1_200);
        assert_eq!(s, Elector::Lost, "lost is for good");
    }
}
