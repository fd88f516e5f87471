//! The host side of `Relocate` (issue 17 items 1, 2 and 10; glossary §5 "Relocation",
//! "SafeToShutdown"; wire §9–§10): which relocation runs, what it ends as, and when the host may
//! be shut down. Pure: no clock (times are milliseconds of the caller's clock, passed in), no
//! I/O. The shell (the node host's admin `Relocate`, SIGTERM, the operator's rollout) feeds it
//! requests and unit outcomes and publishes what it answers.
//!
//! ```text
//!              start(req)                 every unit terminal
//!   Serving ──────────────► Relocating ─────────────────────► Relocated
//!      ▲                                                          │
//!      └──────────── (never back: a new lifecycle serves) ◄───────┤ start(req): Relocating again
//! ```
//!
//! - A relocation starts only from `Serving` or `Relocated`, one at a time. A request naming the
//!   `relocation_id` of the running or last relocation returns it and starts nothing
//!   (idempotent, so an operator can retry a call whose answer it lost).
//! - `PlannedMaintenance` keeps the host's application version; `RollingUpdate` needs a higher
//!   one.
//! - It is `Completed` only when every unit ended `HandedOver` or `Stayed(Disabled)`; any other
//!   outcome makes it `Failed` with the reasons, so an operator never deletes a pod that still
//!   holds objects it could have moved.
//! - `SafeToShutdown` holds when no relocation has run, or when the last one is terminal and
//!   every handed-over unit's Message Follow window (plus its cutover retransmission window) has
//!   ended.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

/// Why a relocation runs (the admin API's `RelocationMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RelocationMode {
    /// Move objects away keeping the application version (a node drain, an eviction).
    PlannedMaintenance,
    /// Move objects to hosts of a higher application version (a rollout).
    RollingUpdate,
}

/// Why a unit stayed on this host (issue 17 item 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StayReason {
    /// Its type's relocation policy is `DisableRelocation`: staying is the expected outcome.
    Disabled,
    /// No eligible target host.
    NoTarget,
    /// An `ApplicationSignaled` unit never reached `relocation_ready().defer()`.
    NotSignaled,
    /// The relocation deadline passed before it was sealed.
    Deadline,
    /// Its Message Follow chain is full (8 moves within the follow duration).
    FollowChainFull,
    /// More objects than one aggregate commit may move.
    TooManyParticipants,
}

/// How one relocation unit ended (issue 17 item 2).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnitOutcome {
    /// The target committed ownership: the unit lives there now.
    HandedOver,
    /// It was never sealed: it keeps serving here.
    Stayed(StayReason),
    /// The transfer failed (the wire reason, or a capture failure) and the source restored it.
    Failed(String),
    /// The target went away before it could commit; the source restored the unit.
    RestoredTargetGone,
    /// The deadline passed with the outcome still unknown; resolution goes on.
    Unresolved,
}

impl UnitOutcome {
    /// Whether a relocation whose every unit ended like this is `Completed`.
    pub fn completes(&self) -> bool {
        match self {
            Self::HandedOver | Self::Stayed(StayReason::Disabled) => true,
            Self::Stayed(
                StayReason::NoTarget
                | StayReason::NotSignaled
                | StayReason::Deadline
                | StayReason::FollowChainFull
                | StayReason::TooManyParticipants,
            )
            | Self::Failed(_)
            | Self::RestoredTargetGone
            | Self::Unresolved => false,
        }
    }

    /// Stable name (metrics label, status counts, logs).
    pub fn name(&self) -> &'static str {
        match self {
            Self::HandedOver => "handed_over",
            Self::Stayed(StayReason::Disabled) => "stayed_disabled",
            Self::Stayed(StayReason::NoTarget) => "stayed_no_target",
            Self::Stayed(StayReason::NotSignaled) => "stayed_not_signaled",
            Self::Stayed(StayReason::Deadline) => "stayed_deadline",
            Self::Stayed(StayReason::FollowChainFull) => "stayed_follow_chain_full",
            Self::Stayed(StayReason::TooManyParticipants) => "stayed_too_many_participants",
            Self::Failed(_) => "failed",
            Self::RestoredTargetGone => "restored_target_gone",
            Self::Unresolved => "unresolved",
        }
    }
}

/// A `Relocate` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelocateRequest {
    /// Caller-chosen identity (idempotency key); `None`: the host makes one.
    pub relocation_id: Option<String>,
    /// Why.
    pub mode: RelocationMode,
    /// For `RollingUpdate`: the application version targets must run (higher than this
    /// host's). For `PlannedMaintenance`: 0 or this host's own version.
    pub target_application_version: u64,
    /// Relocation deadline, in the caller's clock (milliseconds).
    pub deadline_ms: u64,
}

/// Where the host's relocation lifecycle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Accepting new work; no relocation running.
    Serving,
    /// A relocation is moving units.
    Relocating,
    /// The last relocation is terminal.
    Relocated,
    /// Draining or stopped: no relocation may start.
    Stopping,
}

/// How a relocation ended, or that it still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RelocationState {
    /// Units are still moving.
    Running,
    /// Every unit ended `HandedOver` or `Stayed(Disabled)`.
    Completed,
    /// Some unit ended otherwise (see [`Relocation::reasons`]).
    Failed,
}

/// One relocation this host ran or runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relocation {
    /// Its identity.
    pub id: String,
    /// Why.
    pub mode: RelocationMode,
    /// The application version targets run (this host's own for `PlannedMaintenance`).
    pub effective_version: u64,
    /// Deadline (caller's clock, ms).
    pub deadline_ms: u64,
    /// Units still moving.
    pending: BTreeSet<u64>,
    /// Terminal units and how they ended.
    outcomes: BTreeMap<u64, UnitOutcome>,
    /// Latest end of a handed-over unit's Message Follow window (caller's clock, ms).
    follow_until_ms: u64,
}

impl Relocation {
    /// Running, Completed or Failed (see the module docs).
    pub fn state(&self) -> RelocationState {
        if !self.pending.is_empty() {
            RelocationState::Running
        } else if self.outcomes.values().all(UnitOutcome::completes) {
            RelocationState::Completed
        } else {
            RelocationState::Failed
        }
    }

    /// Units by outcome name.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for o in self.outcomes.values() {
            *m.entry(o.name()).or_default() += 1;
        }
        if !self.pending.is_empty() {
            m.insert("running", self.pending.len());
        }
        m
    }

    /// Why it failed: the distinct outcomes that keep it from `Completed`, in order.
    pub fn reasons(&self) -> Vec<UnitOutcome> {
        let set: BTreeSet<&UnitOutcome> =
            self.outcomes.values().filter(|o| !o.completes()).collect();
        set.into_iter().cloned().collect()
    }
}

/// A `Relocate` call refused (mapped to `INVALID_ARGUMENT` / `FAILED_PRECONDITION` at the admin
/// API's edge).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RelocateError {
    /// `RollingUpdate` to a version that is not higher than this host's.
    #[error("RollingUpdate needs a target application version above {current}, got {requested}")]
    VersionNotHigher {
        /// This host's version.
        current: u64,
        /// The requested one.
        requested: u64,
    },
    /// `PlannedMaintenance` naming another version than this host's.
    #[error("PlannedMaintenance keeps the host's version {current}; got {requested}")]
    VersionChanged {
        /// This host's version.
        current: u64,
        /// The requested one.
        requested: u64,
    },
    /// The deadline is not after now.
    #[error("the relocation deadline is already past")]
    DeadlinePast,
    /// Another relocation is running.
    #[error("relocation {running} is running; one at a time")]
    Busy {
        /// The running relocation's id.
        running: String,
    },
    /// The host is draining or stopped.
    #[error("the host is stopping: no relocation starts")]
    Stopping,
    /// A unit outcome for a unit the running relocation does not have.
    #[error("unit {0} is not a pending unit of the running relocation")]
    UnknownUnit(u64),
}

/// What [`HostRelocation::start`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// A new relocation is running with these units (the shell seals and moves them).
    New(Relocation),
    /// The request named the running or last relocation: nothing new started.
    Existing(Relocation),
}

/// The host's relocation lifecycle (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRelocation {
    phase: Phase,
    application_version: u64,
    current: Option<Relocation>,
}

impl HostRelocation {
    /// A serving host of `application_version` that has not relocated.
    pub fn new(application_version: u64) -> Self {
        Self {
            phase: Phase::Serving,
            application_version,
            current: None,
        }
    }

    /// The lifecycle phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The running or last relocation.
    pub fn current(&self) -> Option<&Relocation> {
        self.current.as_ref()
    }

    /// Start relocating `units` (unit ids the shell chose) for `req` at `now_ms`; `fresh_id` is
    /// the identity used when the request names none.
    ///
    /// # Errors
    /// [`RelocateError`]: a bad version or deadline, another relocation running, or a stopping
    /// host. A request whose id names the running or last relocation is not an error: it
    /// returns [`Started::Existing`].
    pub fn start(
        &mut self,
        req: &RelocateRequest,
        units: impl IntoIterator<Item = u64>,
        now_ms: u64,
        fresh_id: &str,
    ) -> Result<Started, RelocateError> {
        if let (Some(id), Some(cur)) = (&req.relocation_id, &self.current)
            && *id == cur.id
        {
            return Ok(Started::Existing(cur.clone()));
        }
        match self.phase {
            Phase::Serving | Phase::Relocated => {}
            Phase::Relocating => {
                return Err(RelocateError::Busy {
                    running: self
                        .current
                        .as_ref()
                        .map(|c| c.id.clone())
                        .unwrap_or_default(),
                });
            }
            Phase::Stopping => return Err(RelocateError::Stopping),
        }
        let current = self.application_version;
        let effective_version = match req.mode {
            RelocationMode::PlannedMaintenance => {
                if req.target_application_version != 0 && req.target_application_version != current
                {
                    return Err(RelocateError::VersionChanged {
                        current,
                        requested: req.target_application_version,
                    });
                }
                current
            }
            RelocationMode::RollingUpdate => {
                if req.target_application_version <= current {
                    return Err(RelocateError::VersionNotHigher {
                        current,
                        requested: req.target_application_version,
                    });
                }
                req.target_application_version
            }
        };
        if req.deadline_ms <= now_ms {
            return Err(RelocateError::DeadlinePast);
        }
        let r = Relocation {
            id: req
                .relocation_id
                .clone()
                .unwrap_or_else(|| fresh_id.to_owned()),
            mode: req.mode,
            effective_version,
            deadline_ms: req.deadline_ms,
            pending: units.into_iter().collect(),
            outcomes: BTreeMap::new(),
            follow_until_ms: 0,
        };
        // No unit at all is terminal at once.
        self.phase = if r.pending.is_empty() {
            Phase::Relocated
        } else {
            Phase::Relocating
        };
        self.current = Some(r.clone());
        Ok(Started::New(r))
    }

    /// Unit `unit` of the running relocation ended as `outcome`; a handed-over unit's Message
    /// Follow window ends at `follow_until_ms`. Returns the relocation's state afterwards.
    ///
    /// # Errors
    /// [`RelocateError::UnknownUnit`] when no running relocation has `unit` pending (a late or
    /// repeated outcome changes nothing).
    pub fn unit_ended(
        &mut self,
        unit: u64,
        outcome: UnitOutcome,
        follow_until_ms: u64,
    ) -> Result<RelocationState, RelocateError> {
        let Some(r) = self.current.as_mut().filter(|r| r.pending.contains(&unit)) else {
            return Err(RelocateError::UnknownUnit(unit));
        };
        r.pending.remove(&unit);
        if outcome == UnitOutcome::HandedOver {
            r.follow_until_ms = r.follow_until_ms.max(follow_until_ms);
        }
        r.outcomes.insert(unit, outcome);
        let state = r.state();
        if state != RelocationState::Running && self.phase == Phase::Relocating {
            self.phase = Phase::Relocated;
        }
        Ok(state)
    }

    /// The host starts draining (SIGTERM, admin `Shutdown`): no relocation starts from now on; a
    /// running one finishes its sealed units (none is cancelled).
    pub fn stopping(&mut self) {
        self.phase = Phase::Stopping;
    }

    /// SafeToShutdown at `now_ms` (glossary §5): no relocation ran, or the last one is terminal
    /// and every handed-over unit's follow window has ended.
    pub fn safe_to_shutdown(&self, now_ms: u64) -> bool {
        match &self.current {
            None => true,
            Some(r) => r.state() != RelocationState::Running && now_ms >= r.follow_until_ms,
        }
    }

    /// Whether new creations and activations are refused here (placement skips the host while
    /// it relocates and once it has relocated).
    pub fn refuses_new_objects(&self) -> bool {
        match self.phase {
            Phase::Serving => false,
            Phase::Relocating | Phase::Relocated | Phase::Stopping => true,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn req(mode: RelocationMode, version: u64) -> RelocateRequest {
        RelocateRequest {
            relocation_id: None,
            mode,
            target_application_version: version,
            deadline_ms: 60_000,
        }
    }

    fn started(s: Started) -> Relocation {
        match s {
            Started::New(r) => r,
            Started::Existing(r) => panic!("expected a new relocation, got {r:?}"),
        }
    }

    /// Every phase × request kind: which starts, which is refused and how.
    #[test]
    fn a_relocation_starts_only_from_serving_or_relocated_and_one_at_a_time() {
        use RelocationMode::*;
        let cases: [(Phase, RelocateRequest, Result<(), RelocateError>); 8] = [
            (Phase::Serving, req(PlannedMaintenance, 0), Ok(())),
            (Phase::Serving, req(PlannedMaintenance, 7), Ok(())),
            (
                Phase::Serving,
                req(PlannedMaintenance, 8),
                Err(RelocateError::VersionChanged {
                    current: 7,
                    requested: 8,
                }),
            ),
            (Phase::Serving, req(RollingUpdate, 8), Ok(())),
            (
                Phase::Serving,
                req(RollingUpdate, 7),
                Err(RelocateError::VersionNotHigher {
                    current: 7,
                    requested: 7,
                }),
            ),
            (Phase::Relocated, req(RollingUpdate, 9), Ok(())),
            (
                Phase::Relocating,
                req(PlannedMaintenance, 0),
                Err(RelocateError::Busy {
                    running: "r-0".into(),
                }),
            ),
            (
                Phase::Stopping,
                req(PlannedMaintenance, 0),
                Err(RelocateError::Stopping),
            ),
        ];
        for (phase, r, want) in cases {
            let mut h = HostRelocation::new(7);
            match phase {
                Phase::Serving => {}
                Phase::Relocating => {
                    h.start(&req(PlannedMaintenance, 0), [1], 0, "r-0").unwrap();
                }
                Phase::Relocated => {
                    h.start(&req(PlannedMaintenance, 0), [], 0, "r-0").unwrap();
                }
                Phase::Stopping => h.stopping(),
            }
            assert_eq!(h.phase(), phase);
            let got = h.start(&r, [1, 2], 10, "r-1").map(|_| ());
            assert_eq!(got, want, "{phase:?} {r:?}");
            if want.is_ok() {
                assert_eq!(h.phase(), Phase::Relocating);
                assert!(h.refuses_new_objects());
            }
        }
        let mut h = HostRelocation::new(1);
        let late = RelocateRequest {
            deadline_ms: 10,
            ..req(PlannedMaintenance, 0)
        };
        assert_eq!(
            h.start(&late, [1], 10, "x"),
            Err(RelocateError::DeadlinePast)
        );
        assert_eq!(h.phase(), Phase::Serving, "a refused start changes nothing");
    }

    #[test]
    fn the_same_relocation_id_returns_the_running_or_last_relocation_and_starts_nothing() {
        let mut h = HostRelocation::new(3);
        let r = RelocateRequest {
            relocation_id: Some("rollout-42".into()),
            ..req(RelocationMode::RollingUpdate, 4)
        };
        let first = started(h.start(&r, [1, 2], 0, "unused").unwrap());
        assert_eq!(
            (first.id.as_str(), first.effective_version),
            ("rollout-42", 4)
        );
        let again = h.start(&r, [9], 5, "unused").unwrap();
        assert!(
            matches!(&again, Started::Existing(x) if x.id == "rollout-42" && x.state() == RelocationState::Running)
        );
        h.unit_ended(1, UnitOutcome::HandedOver, 100).unwrap();
        h.unit_ended(2, UnitOutcome::HandedOver, 100).unwrap();
        let done = h.start(&r, [9], 50, "unused").unwrap();
        assert!(matches!(&done, Started::Existing(x) if x.state() == RelocationState::Completed));
        // Another id after the last is terminal: a new relocation.
        let other = RelocateRequest {
            relocation_id: Some("rollout-43".into()),
            ..req(RelocationMode::RollingUpdate, 5)
        };
        assert_eq!(
            started(h.start(&other, [7], 60, "unused").unwrap()).id,
            "rollout-43"
        );
    }

    /// Every outcome × whether it lets the relocation complete (issue 17 item 1).
    #[test]
    fn only_handed_over_and_stayed_disabled_complete_a_relocation() {
        let all = [
            (UnitOutcome::HandedOver, true),
            (UnitOutcome::Stayed(StayReason::Disabled), true),
            (UnitOutcome::Stayed(StayReason::NoTarget), false),
            (UnitOutcome::Stayed(StayReason::NotSignaled), false),
            (UnitOutcome::Stayed(StayReason::Deadline), false),
            (UnitOutcome::Stayed(StayReason::FollowChainFull), false),
            (UnitOutcome::Stayed(StayReason::TooManyParticipants), false),
            (UnitOutcome::Failed("checksumMismatch".into()), false),
            (UnitOutcome::RestoredTargetGone, false),
            (UnitOutcome::Unresolved, false),
        ];
        for (outcome, completes) in all {
            let mut h = HostRelocation::new(1);
            h.start(&req(RelocationMode::PlannedMaintenance, 0), [1, 2], 0, "r")
                .unwrap();
            assert_eq!(
                h.unit_ended(1, UnitOutcome::HandedOver, 10).unwrap(),
                RelocationState::Running
            );
            let state = h.unit_ended(2, outcome.clone(), 10).unwrap();
            let want = if completes {
                RelocationState::Completed
            } else {
                RelocationState::Failed
            };
            assert_eq!(state, want, "{outcome:?}");
            assert_eq!(h.phase(), Phase::Relocated);
            let r = h.current().unwrap();
            assert_eq!(r.reasons().is_empty(), completes, "{outcome:?}");
            assert_eq!(r.counts().values().sum::<usize>(), 2);
        }
    }

    #[test]
    fn a_late_or_repeated_unit_outcome_changes_nothing() {
        let mut h = HostRelocation::new(1);
        h.start(&req(RelocationMode::PlannedMaintenance, 0), [1], 0, "r")
            .unwrap();
        assert_eq!(
            h.unit_ended(2, UnitOutcome::HandedOver, 0),
            Err(RelocateError::UnknownUnit(2))
        );
        h.unit_ended(1, UnitOutcome::HandedOver, 0).unwrap();
        assert_eq!(
            h.unit_ended(1, UnitOutcome::Unresolved, 0),
            Err(RelocateError::UnknownUnit(1))
        );
        assert_eq!(h.current().unwrap().state(), RelocationState::Completed);
    }

    #[test]
    fn safe_to_shutdown_waits_for_every_handed_over_follow_window() {
        let mut h = HostRelocation::new(1);
        assert!(h.safe_to_shutdown(0), "no relocation ran");
        h.start(
            &req(RelocationMode::PlannedMaintenance, 0),
            [1, 2, 3],
            0,
            "r",
        )
        .unwrap();
        assert!(!h.safe_to_shutdown(0), "running");
        h.unit_ended(1, UnitOutcome::HandedOver, 31_000).unwrap();
        h.unit_ended(2, UnitOutcome::HandedOver, 32_000).unwrap();
        // A unit that stayed has no follow window: it does not extend the wait.
        h.unit_ended(3, UnitOutcome::Stayed(StayReason::NoTarget), 99_000)
            .unwrap();
        assert!(!h.safe_to_shutdown(31_999));
        assert!(h.safe_to_shutdown(32_000));
        // A stopping host finishes its relocation; nothing new starts.
        h.stopping();
        assert_eq!(
            h.start(
                &req(RelocationMode::PlannedMaintenance, 0),
                [4],
                40_000,
                "r2"
            ),
            Err(RelocateError::Stopping)
        );
        assert!(h.safe_to_shutdown(40_000));
    }
}
