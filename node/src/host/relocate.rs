//! The host's `Relocate` (issue 17 items 1, 10 and 11): the pure lifecycle
//! [`HostRelocation`](zlink::relocation::host::HostRelocation) driven by the admin API and by
//! the shutdown path, over the object runtime's mover.
//!
//! `Serving | Relocated → Relocating → Relocated`: the host announces `Relocating` in its
//! descriptor (placement skips it), takes no unit from other hosts and creates nothing new; each
//! unit's outcome is fed to the lifecycle as it ends, so `WatchStatus` shows the counts move.
//! SafeToShutdown holds once the last relocation is terminal and the Message Follow window of
//! every unit it handed over has ended.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zlink::object::runtime::{RelocatePlan, UnitReport};
use zlink::relocation::host::{
    RelocateError, RelocateRequest, RelocationMode, RelocationState, Started,
};
use zlink_protocol::generated::RuntimeState;

use super::{Host, HostState, proto};

/// What a `Relocate` asks for (admin API or shutdown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelocateArgs {
    /// Why.
    pub mode: RelocationMode,
    /// `RollingUpdate`: the targets' exact version; `PlannedMaintenance`: 0 or this host's.
    pub target_version: u64,
    /// When still-pending units are reported `Unresolved`.
    pub deadline: Duration,
    /// Idempotency key (`None`: the host makes one).
    pub relocation_id: Option<String>,
    /// When not empty: only these peers may take units.
    pub target_rids: Vec<String>,
}

/// Why a `Relocate` was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelocateRefusal {
    /// Bad arguments (`INVALID_ARGUMENT`).
    InvalidArgument(String),
    /// Wrong state (`FAILED_PRECONDITION`).
    FailedPrecondition(String),
}

/// A relocation's result: its status and one outcome per unit.
#[derive(Debug, Clone, PartialEq)]
pub struct RelocateResult {
    /// The relocation as the status shows it.
    pub status: proto::RelocationStatus,
    /// The units (those of the last run of this relocation).
    pub units: Vec<UnitReport>,
}

fn mode_proto(m: RelocationMode) -> proto::RelocationMode {
    match m {
        RelocationMode::PlannedMaintenance => proto::RelocationMode::PlannedMaintenance,
        RelocationMode::RollingUpdate => proto::RelocationMode::RollingUpdate,
    }
}

fn state_proto(s: RelocationState) -> proto::RelocationState {
    match s {
        RelocationState::Running => proto::RelocationState::Running,
        RelocationState::Completed => proto::RelocationState::Completed,
        RelocationState::Failed => proto::RelocationState::Failed,
    }
}

/// One unit's outcome as the admin API shows it.
pub fn unit_result(u: &UnitReport) -> proto::UnitResult {
    proto::UnitResult {
        kind: match u.kind {
            zlink_store::types::ObjectKind::Actor => "actor".into(),
            zlink_store::types::ObjectKind::Spot => "spot".into(),
        },
        id: u.id.clone(),
        stable_type: u.stable_type.clone(),
        target_rid: u.target.clone().unwrap_or_default(),
        outcome: u.outcome.name().to_owned(),
        detail: match &u.outcome {
            zlink::relocation::host::UnitOutcome::Failed(why) => why.clone(),
            _ => String::new(),
        },
        member_actor_ids: u.members.clone(),
    }
}

impl Host {
    /// Milliseconds of this host's clock (the relocation lifecycle's time base).
    pub(super) fn relocation_now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn ms_of(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    /// The running or last relocation, as the status shows it.
    pub fn relocation_status(&self) -> Option<proto::RelocationStatus> {
        let core = self
            .relocation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let r = core.current()?;
        let state = r.state();
        Some(proto::RelocationStatus {
            relocation_id: r.id.clone(),
            mode: mode_proto(r.mode) as i32,
            target_application_version: r.effective_version,
            state: state_proto(state) as i32,
            reason: r
                .reasons()
                .iter()
                .map(|o| match o {
                    zlink::relocation::host::UnitOutcome::Failed(why) => format!("failed: {why}"),
                    other => other.name().to_owned(),
                })
                .collect::<Vec<_>>()
                .join("; "),
            units: r
                .counts()
                .into_iter()
                .map(|(outcome, count)| proto::OutcomeCount {
                    outcome: outcome.to_owned(),
                    count: count as u64,
                })
                .collect(),
        })
    }

    /// SafeToShutdown now (glossary §5).
    pub fn safe_to_shutdown(&self) -> bool {
        self.relocation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .safe_to_shutdown(self.relocation_now_ms())
    }

    /// Run a relocation (see the module docs). Returns when every unit is terminal; the same
    /// `relocation_id` as the running or last one waits for that one and starts nothing.
    ///
    /// # Errors
    /// [`RelocateRefusal`].
    pub async fn relocate(
        self: &Arc<Self>,
        args: RelocateArgs,
    ) -> Result<RelocateResult, RelocateRefusal> {
        let Some(objects) = self.objects() else {
            return Err(RelocateRefusal::FailedPrecondition(
                "this host runs no object runtime".into(),
            ));
        };
        match self.state() {
            HostState::Serving | HostState::Relocating | HostState::Relocated => {}
            s @ (HostState::Starting
            | HostState::Draining
            | HostState::Stopped
            | HostState::Fenced) => {
                return Err(RelocateRefusal::FailedPrecondition(format!(
                    "the host is {} and starts no relocation",
                    s.name()
                )));
            }
        }
        let units = objects.relocation_units();
        let now = self.relocation_now_ms();
        let deadline_ms =
            now.saturating_add(u64::try_from(args.deadline.as_millis()).unwrap_or(u64::MAX));
        let fresh = format!(
            "reloc-{}-{}",
            self.node()
                .map_or_else(|| "host".to_owned(), |n| n.rid().to_owned()),
            now
        );
        let started = self
            .relocation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .start(
                &RelocateRequest {
                    relocation_id: args.relocation_id.clone(),
                    mode: args.mode,
                    target_application_version: args.target_version,
                    deadline_ms,
                },
                0..units.len() as u64,
                now,
                &fresh,
            );
        let relocation = match started {
            Ok(Started::New(r)) => r,
            Ok(Started::Existing(r)) => {
                // The same id: wait for that relocation to end, start nothing.
                let mut changed = self.relocation_changed.subscribe();
                loop {
                    let done = {
                        let core = self
                            .relocation
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        core.current()
                            .is_some_and(|c| c.id == r.id && c.state() != RelocationState::Running)
                    };
                    if done {
                        break;
                    }
                    if changed.changed().await.is_err() {
                        break;
                    }
                }
                return Ok(self.relocate_result());
            }
            Err(
                e @ (RelocateError::VersionNotHigher { .. }
                | RelocateError::VersionChanged { .. }
                | RelocateError::DeadlinePast),
            ) => return Err(RelocateRefusal::InvalidArgument(e.to_string())),
            Err(
                e @ (RelocateError::Busy { .. }
                | RelocateError::Stopping
                | RelocateError::UnknownUnit(_)),
            ) => {
                return Err(RelocateRefusal::FailedPrecondition(e.to_string()));
            }
        };
        tracing::info!(
            relocation = %relocation.id,
            mode = ?relocation.mode,
            version = relocation.effective_version,
            units = units.len(),
            "relocation started"
        );
        objects.set_relocating(true);
        if let Some(n) = self.node() {
            n.set_runtime_state(RuntimeState::Relocating);
        }
        self.set_state(HostState::Relocating);
        self.relocation_changed.send_modify(|v| *v += 1);
        let plan = RelocatePlan {
            mode: relocation.mode,
            target_version: relocation.effective_version,
            deadline: args.deadline,
            target_rids: args.target_rids,
            concurrency: 32,
        };
        let reports = objects
            .relocate_units(&units, &plan, |i, report| {
                let follow = report.follow_until.map_or(0, |t| self.ms_of(t));
                let _ = self
                    .relocation
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .unit_ended(i as u64, report.outcome.clone(), follow);
                self.metrics_relocation_unit(report);
                self.refresh_status();
                self.relocation_changed.send_modify(|v| *v += 1);
            })
            .await;
        *self
            .relocation_units
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = reports;
        if let Some(n) = self.node() {
            n.set_runtime_state(RuntimeState::Relocated);
        }
        self.set_state(HostState::Relocated);
        self.relocation_changed.send_modify(|v| *v += 1);
        let result = self.relocate_result();
        tracing::info!(
            relocation = %relocation.id,
            state = ?result.status.state(),
            units = ?result.status.units,
            reason = %result.status.reason,
            "relocation ended"
        );
        Ok(result)
    }

    fn relocate_result(&self) -> RelocateResult {
        RelocateResult {
            status: self.relocation_status().unwrap_or_default(),
            units: self
                .relocation_units
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }

    fn metrics_relocation_unit(&self, report: &UnitReport) {
        self.relocation_outcomes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(report.outcome.name())
            .and_modify(|n| *n += 1)
            .or_insert(1);
    }

    /// Units by outcome over every relocation of this host (metrics).
    pub fn relocation_outcome_totals(&self) -> Vec<(&'static str, u64)> {
        self.relocation_outcomes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }

    /// The shutdown path (item 11): relocate every unit first (`PlannedMaintenance`, bounded by
    /// `relocation.shutdown_deadline_ms` and half the drain deadline), then wait for
    /// SafeToShutdown while keeping a quarter of the deadline (at least the drain seal) for the
    /// drain itself. A relocation already running is not restarted or cancelled: the wait
    /// covers it.
    pub(super) async fn relocate_before_drain(self: &Arc<Self>, deadline: Duration) {
        let started = Instant::now();
        let reserve = (deadline / 4)
            .max(
                Duration::from_millis(self.config.timings.drain_seal_ms)
                    + Duration::from_millis(500),
            )
            .min(deadline);
        let wait_until = started + deadline.saturating_sub(reserve);
        let has_units = self
            .objects()
            .is_some_and(|o| !o.relocation_units().is_empty());
        if has_units {
            let budget = Duration::from_millis(self.config.relocation.shutdown_deadline_ms)
                .min(deadline / 2)
                .max(Duration::from_millis(1));
            let r = self
                .relocate(RelocateArgs {
                    mode: RelocationMode::PlannedMaintenance,
                    target_version: 0,
                    deadline: budget,
                    relocation_id: None,
                    target_rids: Vec::new(),
                })
                .await;
            match r {
                Ok(r) => tracing::info!(
                    state = ?r.status.state(),
                    units = ?r.status.units,
                    "relocated before the drain"
                ),
                Err(e) => tracing::warn!(?e, "no relocation before the drain"),
            }
        } else {
            tracing::info!("nothing to relocate before the drain");
        }
        while !self.safe_to_shutdown() {
            if Instant::now() >= wait_until {
                tracing::warn!(
                    "SafeToShutdown not reached before the drain reserve: draining now (the \
                     follow window is cut short)"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
