//! The rollout planner (issue 18 item 5): `plan(desired, observed, now_ms) -> Plan`. No I/O, no
//! clock, no memory between calls — everything it needs to remember lives in the cluster (the
//! pods, their `zlink.io/relocation` annotation, the hosts' reported status), so an operator
//! restart or a failover resumes exactly where the last one stopped.
//!
//! # What it does
//! A pod is *staying* when it runs the spec's revision and is among the first `replicas` of
//! them; every other live pod is *leaving* (an old revision, or an excess one after a scale
//! down). Each call:
//!
//! 1. **Deletes** leaving pods that may go: ones with no running container (directly), ones that
//!    are *safe* (below), ones marked `zlink.io/force-delete` (with a Warning), and — only when
//!    `replicas` is 0 — every pod (with a Warning: there is nowhere to move objects).
//! 2. **Surges**: creates pods of the spec's revision while the mesh has fewer than `replicas`
//!    of them and fewer than `replicas + maxSurge` pods in all (terminating ones count).
//! 3. **Relocates** leaving pods, fewest objects first, only once a staying pod is a target: its
//!    container runs, it is Ready, its host is `Serving` at the target version, and the source
//!    host lists it as a Ready peer. A version change is `RollingUpdate`; a revision-only
//!    change or a scale down is `PlannedMaintenance`. Starting one never takes availability
//!    below `replicas - maxUnavailable` (and never lower than it already is). An unavailable
//!    leaving pod whose host reports no objects relocates without a target (`PlannedMaintenance`
//!    at its own version): nothing to move, so it completes and the pod goes as safe — the
//!    surge pod of a version that never became Ready would otherwise hold the slot a fixing
//!    version needs.
//!
//! A relocation starts by writing its intent ([`Intent`]) to the pod: [`Action::WriteIntent`].
//! Only a later call, which sees that annotation, asks the host: [`Action::Relocate`], with the
//! annotation's id (the host's `Relocate` is idempotent per id), until the host reports that id.
//! So every pod attempt has exactly one relocation id, written before any `Relocate` names it.
//!
//! # Safe
//! A pod is safe to delete only when its host reports `Relocated`, its last relocation is the
//! intent's id and `Completed`, `safe_to_shutdown` is set, and its RID and node lifecycle are
//! those the intent recorded. `safe_to_shutdown` alone is not enough: a host that never
//! relocated reports it too.
//!
//! # Faults
//! - A changed RID or lifecycle (the container restarted) voids the attempt: the next one gets a
//!   new id.
//! - A `Failed` relocation is retried up to `relocationAttempts` per series; then the pod keeps
//!   serving and `RolloutBlocked` says `RelocationFailed`. A new `zlink.io/retry` value or a spec
//!   change (a higher generation) starts a new series.
//! - A host that answered `UNIMPLEMENTED` gets `RelocateUnsupported`; an unreachable host or a
//!   rejected token is skipped and reported (`HostUnreachable`, `AdminAuthFailed`); none of them
//!   is ever deleted for it.
//! - A relocation not safe within `safe_timeout_ms` of its intent is `RelocationTimedOut`: only
//!   `zlink.io/force-delete` removes that pod.
//! - A new pod not Ready within the progress deadline is `ProgressDeadlineExceeded` (and
//!   `RolloutBlocked: NewPodNotReady`); no old pod relocates to it.
//! - Without the Redis Secret (`store_ready == false`) nothing is created, relocated or
//!   deleted: `StoreSecretMissing`.
//!
//! Deletes carry the pod's uid and resourceVersion, so a stale view gets a conflict, never a
//! wrong delete.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The pod annotation holding the relocation intent (JSON of [`Intent`]).
pub const RELOCATION_ANNOTATION: &str = "zlink.io/relocation";
/// A pod annotation that lets the planner delete the pod even when it is not safe.
pub const FORCE_DELETE_ANNOTATION: &str = "zlink.io/force-delete";
/// A pod annotation whose new value starts a new series of relocation attempts.
pub const RETRY_ANNOTATION: &str = "zlink.io/retry";

/// What the spec asks for, as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// The Mesh's name (pod names are `<mesh>-<rev8>-<n>`).
    pub mesh: String,
    /// `metadata.generation` of the Mesh.
    pub generation: i64,
    /// Pods to run.
    pub replicas: u32,
    /// The pod revision of the spec ([`revision`]).
    pub revision: String,
    /// The application version of the spec.
    pub version: u64,
    /// Pods above `replicas` a rollout may start.
    pub max_surge: u32,
    /// Pods below `replicas` that may be unavailable.
    pub max_unavailable: u32,
    /// No new relocation and no surge for a rollout.
    pub paused: bool,
    /// A pod of the spec's revision not Ready this long after its creation blocks the rollout.
    pub progress_deadline_ms: u64,
    /// `Relocate` attempts per series.
    pub relocation_attempts: u32,
    /// The deadline passed to `Relocate`.
    pub relocation_deadline_ms: u64,
    /// From an intent until its pod must be safe (relocation deadline + Message Follow window +
    /// margin); later is `RelocationTimedOut`.
    pub safe_timeout_ms: u64,
    /// The Redis URL Secret and key exist.
    pub store_ready: bool,
}

/// Why a relocation runs (the HostAdmin `RelocationMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Keep the version (a revision-only change, a scale down).
    PlannedMaintenance,
    /// Move to pods of exactly the target version.
    RollingUpdate,
}

/// The `zlink.io/relocation` annotation: one attempt to empty a pod, written before the
/// `Relocate` call that names its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Intent {
    /// The relocation id passed to `Relocate` (`<uid>-<attempt>`: one per pod attempt).
    pub id: String,
    /// The mode.
    pub mode: Mode,
    /// The version targets run.
    pub target_version: u64,
    /// The host's RID when the attempt was written.
    pub rid: String,
    /// The host's node lifecycle when the attempt was written.
    pub lifecycle: u64,
    /// This pod's attempt number (1, 2, … over the pod's life).
    pub attempt: u32,
    /// The first attempt of the current series (attempts used = `attempt - first_attempt + 1`).
    pub first_attempt: u32,
    /// The `zlink.io/retry` value the series started under.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub retry: String,
    /// The Mesh generation the series started under.
    pub generation: i64,
    /// When the attempt was written (the planner's `now_ms`).
    pub started_ms: u64,
}

impl Intent {
    /// The relocation id of attempt `attempt` of the pod with `uid`.
    pub fn id_for(uid: &str, attempt: u32) -> String {
        format!("{uid}-{attempt}")
    }
}

/// A host's admin state (HostAdmin `HostState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostState {
    /// Starting up.
    Starting,
    /// Serving new work.
    Serving,
    /// A relocation is moving its objects away.
    Relocating,
    /// The last relocation is terminal; nothing new is created there.
    Relocated,
    /// Draining for shutdown.
    Draining,
    /// Stopped.
    Stopped,
    /// Lost its lease; rejoining.
    Fenced,
}

/// A relocation's state as the host reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelocationState {
    /// Still moving units.
    Running,
    /// Every unit handed over (or disabled).
    Completed,
    /// Some unit could not move.
    Failed,
}

/// The host's last relocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelocationView {
    /// Its id.
    pub id: String,
    /// Its state.
    pub state: RelocationState,
    /// Why it failed.
    pub reason: String,
}

/// A host's reported status (HostAdmin `WatchStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostView {
    /// The node's RID.
    pub rid: String,
    /// The node lifecycle generation (0 = not reported).
    pub lifecycle: u64,
    /// The admin state.
    pub state: HostState,
    /// The application version it announces.
    pub version: u64,
    /// Live objects.
    pub objects: u64,
    /// `SafeToShutdown`.
    pub safe_to_shutdown: bool,
    /// RIDs of the peers it has Ready connections to.
    pub ready_peers: Vec<String>,
    /// The running or last relocation.
    pub relocation: Option<RelocationView>,
    /// The host answered `Relocate` with `UNIMPLEMENTED`.
    pub relocate_unsupported: bool,
}

/// What the operator knows of a pod's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostObservation {
    /// No status yet (no pod IP, or the stream not opened yet).
    Unknown,
    /// The admin API cannot be reached.
    Unreachable,
    /// The admin API rejected the token.
    AuthFailed,
    /// The last status.
    Status(HostView),
}

/// One node pod as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPod {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its resourceVersion.
    pub resource_version: String,
    /// Its `zlink.io/revision` label.
    pub revision: String,
    /// Its `zlink.io/version` label.
    pub version: u64,
    /// When it was created (planner clock, milliseconds).
    pub created_ms: u64,
    /// It has a deletionTimestamp.
    pub terminating: bool,
    /// Its node container is running.
    pub container_running: bool,
    /// Its Ready condition is true.
    pub ready: bool,
    /// Its host.
    pub host: HostObservation,
    /// Its `zlink.io/relocation` annotation, when present and parseable.
    pub intent: Option<Intent>,
    /// It carries `zlink.io/force-delete`.
    pub force_delete: bool,
    /// Its `zlink.io/retry` value (empty when absent).
    pub retry: String,
}

impl ObservedPod {
    fn view(&self) -> Option<&HostView> {
        match &self.host {
            HostObservation::Status(v) => Some(v),
            HostObservation::Unknown
            | HostObservation::Unreachable
            | HostObservation::AuthFailed => None,
        }
    }

    /// The pod's intent, when it still belongs to the running host (same RID and lifecycle).
    fn current_intent(&self) -> Option<&Intent> {
        let (i, v) = (self.intent.as_ref()?, self.view()?);
        (i.rid == v.rid && i.lifecycle == v.lifecycle).then_some(i)
    }

    /// Whether its relocation counts as started: a current intent exists.
    fn relocation_started(&self) -> bool {
        self.current_intent().is_some()
    }

    /// Counts towards availability: running, Ready, its host (when known) serving new work, and
    /// no relocation started on it.
    fn available(&self) -> bool {
        !self.terminating
            && self.container_running
            && self.ready
            && !self.relocation_started()
            && match &self.host {
                HostObservation::Status(v) => v.state == HostState::Serving,
                HostObservation::Unknown
                | HostObservation::Unreachable
                | HostObservation::AuthFailed => true,
            }
    }

    /// Safe to delete (see the module docs).
    pub fn safe(&self) -> bool {
        let (Some(i), Some(v)) = (self.current_intent(), self.view()) else {
            return false;
        };
        v.state == HostState::Relocated
            && v.safe_to_shutdown
            && v.relocation
                .as_ref()
                .is_some_and(|r| r.id == i.id && r.state == RelocationState::Completed)
    }
}

/// The cluster as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// Every pod the Mesh owns (terminating ones included).
    pub pods: Vec<ObservedPod>,
}

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeleteReason {
    /// Relocated, completed and safe.
    Safe,
    /// No container runs: nothing to move.
    NoContainer,
    /// `zlink.io/force-delete`.
    Forced,
    /// `replicas` is 0.
    ScaledToZero,
}

/// One thing the executor should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create a pod of the spec's revision.
    CreatePod {
        /// `<mesh>-<rev8>-<n>` (a stale cache gets 409, never a duplicate).
        name: String,
        /// Its revision.
        revision: String,
        /// Its application version.
        version: u64,
    },
    /// Write the relocation intent annotation (before any `Relocate` names it).
    WriteIntent {
        /// The pod.
        pod: String,
        /// Its uid (precondition).
        uid: String,
        /// The intent.
        intent: Intent,
    },
    /// Call `Relocate` on the pod's host (idempotent per id).
    Relocate {
        /// The pod.
        pod: String,
        /// The relocation id (the annotation's).
        id: String,
        /// The mode.
        mode: Mode,
        /// The targets' version.
        target_version: u64,
        /// The `Relocate` deadline.
        deadline_ms: u64,
        /// Only these peers may take units (the staying pods' RIDs).
        target_rids: Vec<String>,
    },
    /// Delete the pod with uid and resourceVersion preconditions.
    DeletePod {
        /// The pod.
        pod: String,
        /// Precondition.
        uid: String,
        /// Precondition.
        resource_version: String,
        /// Why.
        reason: DeleteReason,
    },
    /// Emit an event on the Mesh.
    Event {
        /// A Warning (else Normal).
        warning: bool,
        /// A CamelCase reason.
        reason: &'static str,
        /// For people.
        message: String,
    },
}

/// A condition as planned (the controller adds times and the generation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCondition {
    /// `Ready`, `Available`, `Progressing`, `Degraded`, `RolloutBlocked`.
    pub type_: &'static str,
    /// True or false.
    pub status: bool,
    /// A CamelCase reason.
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

/// A pod as reported in the Mesh status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPod {
    /// Its name.
    pub name: String,
    /// `Pending`, `Starting`, `Serving`, `Relocating`, `Relocated`, `Terminating`, `Failed`.
    pub phase: &'static str,
    /// The host's RID.
    pub rid: String,
    /// Live objects.
    pub objects: u64,
    /// A condition reason, when one applies to this pod.
    pub reason: &'static str,
}

/// The status the plan implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedStatus {
    /// Pods (terminating ones included).
    pub replicas: u32,
    /// Ready pods.
    pub ready: u32,
    /// Available pods.
    pub available: u32,
    /// Pods of the spec's revision.
    pub updated: u32,
    /// The five conditions, in a fixed order.
    pub conditions: Vec<PlannedCondition>,
    /// One per pod, by name.
    pub pods: Vec<PlannedPod>,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// What to do now, in order.
    pub actions: Vec<Action>,
    /// The status to publish.
    pub status: PlannedStatus,
    /// When the plan changes by time alone (a deadline passing), if ever.
    pub requeue_at_ms: Option<u64>,
}

/// The revision of a pod spec: a stable 64-bit FNV-1a hash of the canonical JSON of the
/// pod-affecting inputs (image, version, store, secrets, shutdown, template and the channel
/// memberships; never replicas, rollout settings or channel weights), as 16 hex digits.
pub fn revision(spec: &crate::crd::MeshSpec, channels: &[String]) -> String {
    let mut channels = channels.to_vec();
    channels.sort();
    channels.dedup();
    let canonical = serde_json::json!({
        "image": spec.image,
        "version": spec.application_version,
        "store": spec.location_store,
        "meshSecret": spec.mesh_secret_ref,
        "adminSecret": spec.admin_secret_ref,
        "shutdown": spec.shutdown,
        "template": spec.template,
        "channels": channels,
    })
    .to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The name of pod `n` of `revision` in `mesh`.
pub fn pod_name(mesh: &str, revision: &str, n: u32) -> String {
    let rev8 = revision.get(..8).unwrap_or(revision);
    format!("{mesh}-{rev8}-{n}")
}

/// Per-pod findings that become conditions.
#[derive(Default)]
struct Findings {
    blocked: Vec<(&'static str, String)>,
    degraded: Vec<(&'static str, String)>,
    not_ready_new: Vec<String>,
    paused: bool,
    requeue_at_ms: Option<u64>,
}

impl Findings {
    fn requeue(&mut self, at: u64) {
        self.requeue_at_ms = Some(self.requeue_at_ms.map_or(at, |t| t.min(at)));
    }
}

/// Plans the next actions (see the module docs).
pub fn plan(desired: &Desired, observed: &Observed, now_ms: u64) -> Plan {
    let mut pods: Vec<&ObservedPod> = observed.pods.iter().collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name).then(a.uid.cmp(&b.uid)));
    let mut actions = Vec::new();
    let mut f = Findings::default();
    let mut pod_reason: std::collections::BTreeMap<&str, &'static str> =
        std::collections::BTreeMap::new();

    // Staying: the first `replicas` live pods of the spec's revision (most objects first, so a
    // scale down empties the emptiest); leaving: every other live pod.
    let live: Vec<&ObservedPod> = pods.iter().copied().filter(|p| !p.terminating).collect();
    let mut current: Vec<&ObservedPod> = live
        .iter()
        .copied()
        .filter(|p| p.revision == desired.revision)
        .collect();
    // A pod whose relocation started (or whose host stopped taking work) never becomes
    // staying again: that keeps the split stable while objects move.
    let going = |p: &ObservedPod| {
        p.relocation_started()
            || p.view().is_some_and(|v| {
                matches!(
                    v.state,
                    HostState::Relocating | HostState::Relocated | HostState::Draining
                )
            })
    };
    current.sort_by(|a, b| {
        going(a)
            .cmp(&going(b))
            .then(objects(b).cmp(&objects(a)))
            .then(b.available().cmp(&a.available()))
            .then(a.name.cmp(&b.name))
    });
    let replicas = desired.replicas as usize;
    let staying: Vec<&ObservedPod> = current.iter().copied().take(replicas).collect();
    let staying_names: BTreeSet<&str> = staying.iter().map(|p| p.name.as_str()).collect();
    let mut leaving: Vec<&ObservedPod> = live
        .iter()
        .copied()
        .filter(|p| !staying_names.contains(p.name.as_str()))
        .collect();
    leaving.sort_by(|a, b| {
        a.container_running
            .cmp(&b.container_running)
            .then(objects(a).cmp(&objects(b)))
            .then(a.name.cmp(&b.name))
    });

    let total = pods.len();
    let min_available = replicas.saturating_sub(desired.max_unavailable as usize);
    let mut available = live.iter().filter(|p| p.available()).count();

    // New pods not Ready within the progress deadline (while a rollout or scale up runs).
    let progressing = !leaving.is_empty() || current.len() < replicas;
    f.paused = desired.paused && !leaving.is_empty();
    for p in staying.iter().filter(|_| progressing) {
        if !p.ready {
            let due = p.created_ms.saturating_add(desired.progress_deadline_ms);
            if now_ms >= due {
                f.not_ready_new.push(p.name.clone());
                pod_reason.insert(&p.name, "ProgressDeadlineExceeded");
            } else {
                f.requeue(due);
            }
        }
    }
    for p in &live {
        match &p.host {
            HostObservation::Unreachable => {
                f.degraded.push(("HostUnreachable", p.name.clone()));
                pod_reason.insert(&p.name, "HostUnreachable");
            }
            HostObservation::AuthFailed => {
                f.degraded.push(("AdminAuthFailed", p.name.clone()));
                pod_reason.insert(&p.name, "AdminAuthFailed");
            }
            HostObservation::Unknown | HostObservation::Status(_) => {}
        }
    }

    if !desired.store_ready {
        f.blocked.push(("StoreSecretMissing", String::new()));
        return finish(desired, &pods, &live, actions, f, &pod_reason);
    }

    // 1. Deletions.
    let mut deleted: BTreeSet<&str> = BTreeSet::new();
    for p in &leaving {
        let reason = if desired.replicas == 0 {
            Some(DeleteReason::ScaledToZero)
        } else if !p.container_running {
            Some(DeleteReason::NoContainer)
        } else if p.safe() {
            Some(DeleteReason::Safe)
        } else if p.force_delete {
            Some(DeleteReason::Forced)
        } else {
            None
        };
        let Some(reason) = reason else { continue };
        if p.available() {
            available -= 1;
        }
        match reason {
            DeleteReason::Forced => actions.push(Action::Event {
                warning: true,
                reason: "ForceDelete",
                message: format!(
                    "deleting {} without a completed relocation ({FORCE_DELETE_ANNOTATION})",
                    p.name
                ),
            }),
            DeleteReason::ScaledToZero => actions.push(Action::Event {
                warning: true,
                reason: "ScaledToZero",
                message: format!(
                    "replicas is 0: deleting {} with nowhere to move its objects (its SIGTERM \
                     drain relocates what it can)",
                    p.name
                ),
            }),
            DeleteReason::Safe | DeleteReason::NoContainer => {}
        }
        actions.push(Action::DeletePod {
            pod: p.name.clone(),
            uid: p.uid.clone(),
            resource_version: p.resource_version.clone(),
            reason,
        });
        deleted.insert(&p.name);
    }

    // 2. Surge.
    let room = (replicas + desired.max_surge as usize).saturating_sub(total);
    let want = replicas.saturating_sub(current.len());
    // No room to surge while new pods are wanted (more old pods than replicas + maxSurge - 1):
    // one old pod at a time moves its objects to the other old pods (PlannedMaintenance),
    // which frees a slot. Only while no pod of the spec's revision exists yet and no other
    // relocation runs.
    let mut consolidate = want > room
        && staying.is_empty()
        && leaving
            .iter()
            .all(|p| !p.relocation_started() && !deleted.contains(p.name.as_str()));
    if !f.paused {
        let taken: BTreeSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
        let mut n = 0u32;
        for _ in 0..want.min(room) {
            let name = loop {
                let name = pod_name(&desired.mesh, &desired.revision, n);
                n += 1;
                if !taken.contains(name.as_str()) {
                    break name;
                }
            };
            actions.push(Action::CreatePod {
                name,
                revision: desired.revision.clone(),
                version: desired.version,
            });
        }
    }

    // 3. Relocations.
    for p in &leaving {
        if deleted.contains(p.name.as_str()) {
            continue;
        }
        let Some(view) = p.view() else {
            continue; // not reachable (reported above) or no status yet
        };
        if view.relocate_unsupported {
            f.blocked.push(("RelocateUnsupported", p.name.clone()));
            pod_reason.insert(&p.name, "RelocateUnsupported");
            continue;
        }
        let current_intent = p.current_intent();
        if let Some(i) = current_intent {
            let due = i.started_ms.saturating_add(desired.safe_timeout_ms);
            let timed_out = now_ms >= due;
            match view.relocation.as_ref().filter(|r| r.id == i.id) {
                Some(r) if r.state == RelocationState::Failed => {
                    // Retried below as the next attempt, when the series allows it.
                }
                Some(_) => {
                    // Running, or Completed and waiting for safe: the delete above takes it.
                    if timed_out {
                        f.blocked.push(("RelocationTimedOut", p.name.clone()));
                        pod_reason.insert(&p.name, "RelocationTimedOut");
                    } else {
                        f.requeue(due);
                    }
                    continue;
                }
                None => {
                    if timed_out {
                        f.blocked.push(("RelocationTimedOut", p.name.clone()));
                        pod_reason.insert(&p.name, "RelocationTimedOut");
                    } else {
                        f.requeue(due);
                        actions.push(Action::Relocate {
                            pod: p.name.clone(),
                            id: i.id.clone(),
                            mode: i.mode,
                            target_version: i.target_version,
                            deadline_ms: desired.relocation_deadline_ms,
                            target_rids: {
                                let t = targets(&staying, view, i.target_version);
                                if t.is_empty() && i.mode == Mode::PlannedMaintenance {
                                    peers_among(&leaving, p, view, i.target_version, &deleted)
                                } else {
                                    t
                                }
                            },
                        });
                    }
                    continue;
                }
            }
        }
        // No current attempt (none yet, a voided one, or a failed one): start the next.
        if desired.paused || (view.state != HostState::Serving && current_intent.is_none()) {
            continue;
        }
        let (attempt, first_attempt, generation, retry) = match &p.intent {
            None => (1, 1, desired.generation, p.retry.clone()),
            Some(prev) => {
                let next = prev.attempt.saturating_add(1);
                let new_series = p.retry != prev.retry || desired.generation > prev.generation;
                if new_series {
                    (next, next, desired.generation, p.retry.clone())
                } else {
                    (
                        next,
                        prev.first_attempt,
                        prev.generation,
                        prev.retry.clone(),
                    )
                }
            }
        };
        if attempt - first_attempt >= desired.relocation_attempts.max(1) {
            f.blocked.push(("RelocationFailed", p.name.clone()));
            pod_reason.insert(&p.name, "RelocationFailed");
            continue;
        }
        let (mut mode, mut target_version) = match p.version.cmp(&desired.version) {
            std::cmp::Ordering::Less => (Mode::RollingUpdate, desired.version),
            std::cmp::Ordering::Equal => (Mode::PlannedMaintenance, p.version),
            std::cmp::Ordering::Greater => {
                f.blocked.push(("VersionRegression", p.name.clone()));
                pod_reason.insert(&p.name, "VersionRegression");
                continue;
            }
        };
        if targets(&staying, view, target_version).is_empty() {
            if consolidate && !peers_among(&leaving, p, view, p.version, &deleted).is_empty() {
                (mode, target_version) = (Mode::PlannedMaintenance, p.version);
                consolidate = false;
            } else if view.objects == 0 && !p.available() {
                // An unavailable leaving pod whose host holds nothing (typically the surge pod
                // of a version that never became Ready, holding the slot a fixing version
                // needs): it relocates with nowhere to go. With no unit that completes at once
                // and the pod goes as safe; an object placed on it meanwhile makes the
                // relocation fail, and the pod stays.
                (mode, target_version) = (Mode::PlannedMaintenance, p.version);
            } else {
                continue;
            }
        }
        if p.available() {
            if available <= min_available {
                continue;
            }
            available -= 1;
        }
        actions.push(Action::WriteIntent {
            pod: p.name.clone(),
            uid: p.uid.clone(),
            intent: Intent {
                id: Intent::id_for(&p.uid, attempt),
                mode,
                target_version,
                rid: view.rid.clone(),
                lifecycle: view.lifecycle,
                attempt,
                first_attempt,
                retry,
                generation,
                started_ms: now_ms,
            },
        });
    }
    finish(desired, &pods, &live, actions, f, &pod_reason)
}

fn objects(p: &ObservedPod) -> u64 {
    p.view().map_or(0, |v| v.objects)
}

/// The staying pods a relocation from `source` may use: container running, Ready, host
/// Serving at `version`, and a Ready peer of the source. Sorted RIDs.
fn targets(staying: &[&ObservedPod], source: &HostView, version: u64) -> Vec<String> {
    let mut out: Vec<String> = staying
        .iter()
        .filter(|p| p.container_running && p.ready && !p.terminating)
        .filter_map(|p| p.view())
        .filter(|v| v.state == HostState::Serving && v.version == version)
        .filter(|v| source.ready_peers.contains(&v.rid))
        .map(|v| v.rid.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Other leaving pods that may take a consolidating relocation from `source` (pod `p`):
/// available, at `version`, Ready peers of the source. Sorted RIDs.
fn peers_among(
    leaving: &[&ObservedPod],
    p: &ObservedPod,
    source: &HostView,
    version: u64,
    deleted: &BTreeSet<&str>,
) -> Vec<String> {
    let mut out: Vec<String> = leaving
        .iter()
        .filter(|q| q.name != p.name && !deleted.contains(q.name.as_str()) && q.available())
        .filter_map(|q| q.view())
        .filter(|v| v.state == HostState::Serving && v.version == version)
        .filter(|v| source.ready_peers.contains(&v.rid))
        .map(|v| v.rid.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

fn finish(
    desired: &Desired,
    pods: &[&ObservedPod],
    live: &[&ObservedPod],
    actions: Vec<Action>,
    f: Findings,
    pod_reason: &std::collections::BTreeMap<&str, &'static str>,
) -> Plan {
    let replicas = desired.replicas as usize;
    let ready = live.iter().filter(|p| p.ready).count();
    let available_now = live.iter().filter(|p| p.available()).count();
    let updated = live
        .iter()
        .filter(|p| p.revision == desired.revision)
        .count();
    let min_available = replicas.saturating_sub(desired.max_unavailable as usize);
    let settled = pods.len() == replicas
        && live.len() == replicas
        && live
            .iter()
            .all(|p| p.revision == desired.revision && p.available());
    let join = |v: &[(&'static str, String)]| {
        v.iter()
            .map(|(r, p)| {
                if p.is_empty() {
                    (*r).to_owned()
                } else {
                    format!("{r}: {p}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut conditions = Vec::with_capacity(5);
    conditions.push(PlannedCondition {
        type_: "Ready",
        status: settled,
        reason: if settled {
            "AllReplicasReady"
        } else if !desired.store_ready {
            "StoreSecretMissing"
        } else if desired.replicas == 0 {
            "ScaledToZero"
        } else {
            "RolloutInProgress"
        },
        message: format!(
            "{updated} of {replicas} pods at revision {}, {available_now} available",
            desired.revision.get(..8).unwrap_or(&desired.revision)
        ),
    });
    let avail_ok = available_now >= min_available;
    conditions.push(PlannedCondition {
        type_: "Available",
        status: avail_ok,
        reason: if avail_ok {
            "MinimumReplicasAvailable"
        } else {
            "MinimumReplicasUnavailable"
        },
        message: format!("{available_now} available, at least {min_available} wanted"),
    });
    let deadline = !f.not_ready_new.is_empty();
    conditions.push(PlannedCondition {
        type_: "Progressing",
        status: !deadline,
        reason: if deadline {
            "ProgressDeadlineExceeded"
        } else if settled {
            "NewRevisionAvailable"
        } else {
            "RolloutInProgress"
        },
        message: if deadline {
            format!("not Ready in time: {}", f.not_ready_new.join(", "))
        } else {
            String::new()
        },
    });
    conditions.push(PlannedCondition {
        type_: "Degraded",
        status: !f.degraded.is_empty(),
        reason: f.degraded.first().map_or("AsExpected", |d| d.0),
        message: join(&f.degraded),
    });
    let mut blocked = f.blocked.clone();
    if deadline {
        blocked.push(("NewPodNotReady", f.not_ready_new.join(", ")));
    }
    if f.paused {
        blocked.push(("Paused", String::new()));
    }
    conditions.push(PlannedCondition {
        type_: "RolloutBlocked",
        status: !blocked.is_empty(),
        reason: blocked.first().map_or("NotBlocked", |b| b.0),
        message: join(&blocked),
    });
    let pods_report = pods
        .iter()
        .map(|p| PlannedPod {
            name: p.name.clone(),
            phase: phase(p),
            rid: p.view().map(|v| v.rid.clone()).unwrap_or_default(),
            objects: objects(p),
            reason: pod_reason.get(p.name.as_str()).copied().unwrap_or(""),
        })
        .collect();
    Plan {
        actions,
        status: PlannedStatus {
            replicas: count(pods.len()),
            ready: count(ready),
            available: count(available_now),
            updated: count(updated),
            conditions,
            pods: pods_report,
        },
        requeue_at_ms: f.requeue_at_ms,
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn phase(p: &ObservedPod) -> &'static str {
    if p.terminating {
        return "Terminating";
    }
    if !p.container_running {
        return "Pending";
    }
    match p.view().map(|v| v.state) {
        None | Some(HostState::Starting) => "Starting",
        Some(HostState::Serving) => "Serving",
        Some(HostState::Relocating) => "Relocating",
        Some(HostState::Relocated) => "Relocated",
        Some(HostState::Draining | HostState::Stopped) => "Terminating",
        Some(HostState::Fenced) => "Failed",
    }
}

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
