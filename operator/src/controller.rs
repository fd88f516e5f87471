//! The controller (issue 18 item 6): a kube-runtime controller on `Mesh` that owns the node pods
//! and the PodDisruptionBudget, watches Channels, and is woken by the hosts' status streams
//! ([`Hosts`]). Each reconcile reads the cluster, asks the pure [`planner`] what
//! to do, applies it, and writes the status by server-side apply.
//!
//! # Guarantees
//! - It never writes the Mesh spec, and it has no finalizer: ownerReferences and the nodes'
//!   SIGTERM drain clean up; the Location Store's data is kept.
//! - The Redis Secret is read with a get only (no list or watch); while it is missing the Mesh
//!   is requeued every [`Config::store_missing_requeue`] (30 s by default) and nothing is
//!   created, relocated or deleted.
//! - Pod deletes carry uid and resourceVersion preconditions; creates use deterministic names,
//!   so a stale cache gets 409, never a second pod.
//! - A failed reconcile is retried with a per-Mesh backoff (500 ms doubling to 60 s).
//!
//! # Assumptions
//! The nodes' admin API listens on [`ADMIN_PORT`](crate::pods::ADMIN_PORT) of the pod IP and
//! accepts the token of the Mesh's admin Secret.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource as _, ResourceExt as _};

use crate::crd::{Channel, Condition, Mesh, MeshStatus, PodReport};
use crate::hosts::{Hosts, PodAddr, RelocateCall};
use crate::planner::{self, Action, HostObservation, Plan, RELOCATION_ANNOTATION};
use crate::{observe, pods};

/// The field manager of everything the operator applies.
pub const FIELD_MANAGER: &str = "zlink-operator";

/// Controller settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Only this namespace (`None`: every namespace).
    pub namespace: Option<String>,
    /// Requeue while the Redis Secret is missing.
    pub store_missing_requeue: Duration,
    /// Requeue of a Mesh nothing else wakes.
    pub resync: Duration,
    /// The reporting instance in events (the pod name).
    pub instance: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: None,
            store_missing_requeue: Duration::from_secs(30),
            resync: Duration::from_secs(60),
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| "zlink-operator".into()),
        }
    }
}

/// A reconcile failure (the API server's error, with what was being done).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct Error {
    what: String,
    #[source]
    source: kube::Error,
}

fn ctx_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error { what, source }
}

/// What every reconcile shares.
pub struct Context {
    client: Client,
    hosts: Arc<dyn Hosts>,
    recorder: Recorder,
    config: Config,
    failures: Mutex<HashMap<ObjectRef<Mesh>, u32>>,
    shutdown: tokio::sync::watch::Sender<bool>,
    metrics: Arc<crate::metrics::Metrics>,
    /// The last value read of each generated Secret, by (namespace, name): (the owning Mesh's
    /// uid, value). A generated Secret deleted by hand is recreated with it, so the running
    /// pods' mounted copies stay valid.
    generated: Mutex<HashMap<(String, String), (String, String)>>,
}

impl Context {
    /// A context over `client` and `hosts`.
    pub fn new(client: Client, hosts: Arc<dyn Hosts>, config: Config) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: Some(config.instance.clone()),
            },
        );
        Self {
            client,
            hosts,
            recorder,
            config,
            failures: Mutex::default(),
            shutdown: tokio::sync::watch::Sender::new(false),
            metrics: Arc::default(),
            generated: Mutex::default(),
        }
    }

    /// The operator's metrics (served at `/metrics` by `zlink-operator run`).
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// Resolves once [`run`] was asked to stop.
    fn shutdown_signal(&self) -> impl std::future::Future<Output = ()> + Send + Sync + 'static {
        let mut rx = self.shutdown.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn now_ms() -> u64 {
    u64::try_from(k8s_openapi::jiff::Timestamp::now().as_millisecond()).unwrap_or(0)
}

/// A random 32-byte secret as 64 hex digits.
pub(crate) fn random_hex() -> String {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 32];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        // The OS RNG failing is not recoverable; a fixed value would be a shared secret.
        panic!("the system random number generator failed");
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The value of `key` in the generated Secret `name`, which the operator keeps as it made it:
/// - missing: created `immutable` with the value last read (when it was deleted by hand while
///   this operator ran: the running pods' mounted copies stay valid) or a random one; a lost
///   create race reads the winner's;
/// - present: its labels, its owner reference and `immutable: true` are restored when a hand
///   edit removed them (its data cannot be edited once immutable: the API server refuses it);
/// - present without `key` (a mutable Secret edited by hand): the key is written back.
async fn ensure_secret(
    ctx: &Context,
    secrets: &Api<Secret>,
    mesh: &Mesh,
    name: &str,
    key: &str,
) -> Result<Option<String>, Error> {
    let ns = mesh.namespace().unwrap_or_default();
    let mesh_uid = mesh.uid().unwrap_or_default();
    let cache_key = (ns, name.to_owned());
    let labels = pods::selector_labels(&mesh.name_any());
    let owner = pods::owner(mesh);
    let current = secrets
        .get_opt(name)
        .await
        .map_err(ctx_err(format!("read Secret {name}")))?;
    let remembered = lock(&ctx.generated)
        .get(&cache_key)
        .filter(|(uid, _)| *uid == mesh_uid)
        .map(|(_, v)| v.clone());
    let value = match current {
        Some(s) => {
            let value = value_of(&s, key);
            let labelled = labels.iter().all(|(k, v)| s.labels().get(k) == Some(v));
            let owned = owner
                .as_ref()
                .is_none_or(|o| s.owner_references().iter().any(|r| r.uid == o.uid));
            let immutable = s.immutable == Some(true);
            if value.is_some() && labelled && owned && immutable {
                value
            } else {
                let restored = value.clone().or(remembered).unwrap_or_else(random_hex);
                let mut patch = serde_json::json!({
                    "metadata": {"labels": labels, "ownerReferences": owner.iter().collect::<Vec<_>>()},
                    "immutable": true,
                });
                if value.is_none() && !immutable {
                    patch["stringData"] = serde_json::json!({ key: restored });
                }
                tracing::warn!(
                    secret = name,
                    labelled,
                    owned,
                    immutable,
                    has_key = value.is_some(),
                    "restoring a generated Secret edited by hand"
                );
                secrets
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(ctx_err(format!("restore Secret {name}")))?;
                if value.is_none() && immutable {
                    // Made by hand, not by the operator: it cannot be fixed in place.
                    tracing::error!(
                        secret = name,
                        key,
                        "the generated Secret is immutable and lacks its key: delete it and the operator makes it again"
                    );
                    return Ok(None);
                }
                Some(restored)
            }
        }
        None => {
            let value = remembered.unwrap_or_else(random_hex);
            let s = Secret {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    labels: Some(labels),
                    owner_references: owner.map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                immutable: Some(true),
                string_data: Some([(key.to_owned(), value.clone())].into()),
                ..Secret::default()
            };
            match secrets.create(&PostParams::default(), &s).await {
                Ok(_) => Some(value),
                Err(e) if is_status(&e, 409) => secret_value(secrets, name, key).await?,
                Err(e) => return Err(ctx_err(format!("create Secret {name}"))(e)),
            }
        }
    };
    if let Some(v) = &value {
        lock(&ctx.generated).insert(cache_key, (mesh_uid, v.clone()));
    }
    Ok(value)
}

/// `key` of Secret `s` (from `data`, or `stringData` of an object not yet stored).
fn value_of(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()
        .and_then(|d| {
            d.get(key)
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        })
        .or_else(|| s.string_data.as_ref().and_then(|d| d.get(key).cloned()))
}

/// Reads `name`'s `key` (None when the Secret or the key is missing).
async fn secret_value(
    secrets: &Api<Secret>,
    name: &str,
    key: &str,
) -> Result<Option<String>, Error> {
    let s = secrets
        .get_opt(name)
        .await
        .map_err(ctx_err(format!("read Secret {name}")))?;
    Ok(s.and_then(|s| value_of(&s, key)))
}

/// One reconcile of `mesh` (see the module docs).
///
/// # Errors
/// The API server's error for a read or for the status write; single actions that fail are
/// logged and retried by the next reconcile.
pub async fn reconcile(mesh: Arc<Mesh>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let ns = mesh.namespace().unwrap_or_default();
    let name = mesh.name_any();
    let key = ObjectRef::from_obj(&*mesh);
    if mesh.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change());
    }
    let client = &ctx.client;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let meshes: Api<Mesh> = Api::namespaced(client.clone(), &ns);
    let channels_api: Api<Channel> = Api::namespaced(client.clone(), &ns);

    // The store Secret: a get, never a list or watch.
    let store = &mesh.spec.location_store.redis_url_secret_ref;
    let store_ready = secret_value(&secrets, &store.name, &store.key)
        .await?
        .is_some_and(|v| !v.trim().is_empty());
    let admin = pods::admin_secret_name(&mesh);
    let token = if store_ready && mesh.spec.admin_secret_ref.is_none() {
        ensure_secret(&ctx, &secrets, &mesh, &admin, pods::ADMIN_TOKEN_KEY).await?
    } else {
        secret_value(&secrets, &admin, pods::ADMIN_TOKEN_KEY).await?
    }
    .unwrap_or_default();
    if store_ready && mesh.spec.mesh_secret_ref.is_none() {
        ensure_secret(
            &ctx,
            &secrets,
            &mesh,
            &pods::mesh_secret_name(&mesh),
            pods::MESH_KEY,
        )
        .await?;
    }

    let all_channels = channels_api
        .list(&ListParams::default())
        .await
        .map_err(ctx_err("list Channels"))?;
    let (channels, _duplicates) = observe::mesh_channels(&name, &all_channels.items);

    // The PodDisruptionBudget, by server-side apply.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    pdbs.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&pods::pdb(&mesh)),
    )
    .await
    .map_err(ctx_err("apply the PodDisruptionBudget"))?;

    let listed = pods_api
        .list(&ListParams::default().labels(&format!("{}={name}", pods::MESH_LABEL)))
        .await
        .map_err(ctx_err("list pods"))?;
    let mesh_uid = mesh.uid();
    let owned: Vec<&Pod> = listed
        .items
        .iter()
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == mesh_uid.as_ref())
        })
        .collect();
    let mut addrs: HashMap<String, PodAddr> = HashMap::new();
    let mut observed = planner::Observed::default();
    for p in &owned {
        let Some(mut o) = observe::observed_pod(p, HostObservation::Unknown) else {
            continue;
        };
        if let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone()) {
            let a = PodAddr {
                mesh: key.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                ip,
            };
            if o.container_running && !o.terminating {
                o.host = ctx.hosts.observe(&a, &token);
            }
            addrs.insert(o.name.clone(), a);
        }
        observed.pods.push(o);
    }
    let keep: HashSet<String> = observed.pods.iter().map(|p| p.uid.clone()).collect();
    ctx.hosts.retain(&key, &keep);

    let desired = observe::desired(&mesh, &channels, store_ready);
    let now = now_ms();
    let plan = planner::plan(&desired, &observed, now);
    execute(&ctx, &mesh, &channels, &plan, &addrs, &token, &pods_api).await;

    // Channel weights on every serving node, re-applied on drift.
    let serving: Vec<(String, std::collections::BTreeMap<String, u32>)> = observed
        .pods
        .iter()
        .filter(|p| {
            !p.terminating
                && matches!(&p.host, HostObservation::Status(v) if v.state == planner::HostState::Serving)
        })
        .filter_map(|p| {
            let a = addrs.get(&p.name)?;
            Some((p.name.clone(), ctx.hosts.channel_weights(a)?))
        })
        .collect();
    let (calls, channel_report) = crate::channels::reconcile_weights(&channels, &serving);
    for c in calls {
        if let Some(a) = addrs.get(&c.pod) {
            ctx.hosts
                .set_channel_weight(a, &token, &c.channel, c.weight);
            ctx.metrics.acted("set_weight", true);
        }
    }

    let faults = fault_transitions(
        mesh.status.as_ref().map_or(&[][..], |s| &s.conditions[..]),
        &plan.status.conditions,
    );
    let mut status = status_of(&mesh, &desired, &observed, &plan, now);
    status.channels = channel_report;
    let patch = serde_json::json!({
        "apiVersion": "zlink.io/v1alpha1",
        "kind": "Mesh",
        "status": status,
    });
    meshes
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(ctx_err("apply the Mesh status"))?;
    lock(&ctx.failures).remove(&key);
    // A Warning event per condition that just turned bad (after the status is written, so a
    // failed write does not announce what the status does not show; the next reconcile sees the
    // same transition again).
    for (reason, message) in faults {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(message),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &mesh.object_ref(&())).await {
            tracing::warn!(mesh = %name, reason, error = %e, "publishing an event failed");
        }
    }

    let mut after = ctx.config.resync;
    if !store_ready {
        after = after.min(ctx.config.store_missing_requeue);
    }
    if let Some(at) = plan.requeue_at_ms {
        after = after.min(Duration::from_millis(at.saturating_sub(now).max(100)));
    }
    if !plan.actions.is_empty() {
        // Something changed: look again soon even if no watch event arrives.
        after = after.min(Duration::from_secs(2));
    }
    Ok(Requeue::requeue(after))
}

async fn execute(
    ctx: &Context,
    mesh: &Mesh,
    channels: &[(String, i32)],
    plan: &Plan,
    addrs: &HashMap<String, PodAddr>,
    token: &str,
    pods_api: &Api<Pod>,
) {
    let reference = mesh.object_ref(&());
    for action in &plan.actions {
        let result = match action {
            Action::CreatePod { name, revision, .. } => {
                let pod = pods::node_pod(mesh, channels, name, revision);
                match pods_api.create(&PostParams::default(), &pod).await {
                    Err(e) if is_status(&e, 409) => Ok(()),
                    r => r.map(|_| ()),
                }
            }
            Action::WriteIntent { pod, uid, intent } => {
                let value = serde_json::to_string(intent).unwrap_or_default();
                let patch = serde_json::json!({
                    "metadata": {"uid": uid, "annotations": {RELOCATION_ANNOTATION: value}}
                });
                pods_api
                    .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            Action::Relocate {
                pod,
                id,
                mode,
                target_version,
                deadline_ms,
                target_rids,
            } => {
                if let Some(a) = addrs.get(pod) {
                    ctx.hosts.relocate(
                        a,
                        token,
                        RelocateCall {
                            id: id.clone(),
                            mode: *mode,
                            target_version: *target_version,
                            deadline_ms: *deadline_ms,
                            target_rids: target_rids.clone(),
                        },
                    );
                }
                Ok(())
            }
            Action::DeletePod {
                pod,
                uid,
                resource_version,
                reason,
            } => {
                tracing::info!(pod, ?reason, "deleting a node pod");
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: Some(resource_version.clone()),
                    }),
                    ..DeleteParams::default()
                };
                match pods_api.delete(pod, &dp).await {
                    Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
                    r => r.map(|_| ()),
                }
            }
            Action::Event {
                warning,
                reason,
                message,
            } => ctx
                .recorder
                .publish(
                    &Event {
                        type_: if *warning {
                            EventType::Warning
                        } else {
                            EventType::Normal
                        },
                        reason: (*reason).into(),
                        note: Some(message.clone()),
                        action: "Rollout".into(),
                        secondary: None,
                    },
                    &reference,
                )
                .await
                .map(|_| ()),
        };
        let name = match action {
            Action::CreatePod { .. } => "create_pod",
            Action::WriteIntent { .. } => "write_intent",
            Action::Relocate { .. } => "relocate",
            Action::DeletePod { .. } => "delete_pod",
            Action::Event { .. } => "event",
        };
        ctx.metrics.acted(name, result.is_ok());
        if let Err(e) = result {
            tracing::warn!(mesh = %mesh.name_any(), ?action, error = %e, "an action failed; the next reconcile retries");
        }
    }
}

/// The conditions of `planned` that just turned bad — `Degraded` or `RolloutBlocked` true,
/// `Progressing` or `Available` false — with a reason other than the one `previous` showed for
/// the same state: each is announced once as a Warning event (reason, message), not on every
/// reconcile while it stays.
fn fault_transitions(
    previous: &[crate::crd::Condition],
    planned: &[planner::PlannedCondition],
) -> Vec<(&'static str, String)> {
    planned
        .iter()
        .filter(|c| match c.type_ {
            "Degraded" | "RolloutBlocked" => c.status,
            "Progressing" | "Available" => !c.status,
            _ => false,
        })
        .filter(|c| {
            let status = if c.status { "True" } else { "False" };
            !previous
                .iter()
                .any(|p| p.type_ == c.type_ && p.status == status && p.reason == c.reason)
        })
        .map(|c| (c.reason, c.message.clone()))
        .collect()
}

/// The Mesh status for `plan`, keeping each condition's transition time while its status stays.
fn status_of(
    mesh: &Mesh,
    desired: &planner::Desired,
    observed: &planner::Observed,
    plan: &Plan,
    now: u64,
) -> MeshStatus {
    let previous = mesh.status.clone().unwrap_or_default();
    let generation = mesh.metadata.generation;
    let conditions = with_times(
        &previous.conditions,
        plan.status
            .conditions
            .iter()
            .map(|c| (c.type_, c.status, c.reason, c.message.clone())),
        generation,
        now,
    );
    let live: Vec<&planner::ObservedPod> =
        observed.pods.iter().filter(|p| !p.terminating).collect();
    let current_revision = live
        .iter()
        .filter(|p| p.revision != desired.revision)
        .map(|p| p.revision.clone())
        .min()
        .unwrap_or_else(|| desired.revision.clone());
    MeshStatus {
        observed_generation: generation,
        conditions,
        replicas: i32::try_from(plan.status.replicas).unwrap_or(i32::MAX),
        ready_replicas: i32::try_from(plan.status.ready).unwrap_or(i32::MAX),
        available_replicas: i32::try_from(plan.status.available).unwrap_or(i32::MAX),
        updated_replicas: i32::try_from(plan.status.updated).unwrap_or(i32::MAX),
        selector: pods::selector(&mesh.name_any()),
        current_revision,
        update_revision: desired.revision.clone(),
        current_version: live
            .iter()
            .map(|p| i64::try_from(p.version).unwrap_or(i64::MAX))
            .min(),
        update_version: Some(mesh.spec.application_version),
        pods: plan
            .status
            .pods
            .iter()
            .map(|p| PodReport {
                name: p.name.clone(),
                phase: p.phase.into(),
                rid: p.rid.clone(),
                objects: p.objects,
                reason: p.reason.into(),
            })
            .collect(),
        channels: Vec::new(),
    }
}

/// Conditions from (type, status, reason, message), each keeping its last transition time from
/// `previous` while its status stays.
fn with_times(
    previous: &[Condition],
    next: impl Iterator<Item = (&'static str, bool, &'static str, String)>,
    generation: Option<i64>,
    now: u64,
) -> Vec<Condition> {
    let stamp = k8s_openapi::jiff::Timestamp::from_millisecond(i64::try_from(now).unwrap_or(0))
        .ok()
        .and_then(|t| serde_json::to_value(Time(t)).ok())
        .and_then(|v| v.as_str().map(str::to_owned));
    next.map(|(type_, status, reason, message)| {
        let status = if status { "True" } else { "False" };
        let since = previous
            .iter()
            .find(|p| p.type_ == type_ && p.status == status)
            .and_then(|p| p.last_transition_time.clone())
            .or_else(|| stamp.clone());
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            last_transition_time: since,
            observed_generation: generation,
        }
    })
    .collect()
}

/// One reconcile of a Channel: `Accepted` (its Mesh exists and no older Channel names the same
/// channel) and `Applied` (every serving node of the Mesh runs its weight, as the Mesh status
/// reports). The Mesh reconcile does the applying.
///
/// # Errors
/// The API server's error for a read or for the status write.
pub async fn reconcile_channel(ch: Arc<Channel>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let ns = ch.namespace().unwrap_or_default();
    let name = ch.name_any();
    let meshes: Api<Mesh> = Api::namespaced(ctx.client.clone(), &ns);
    let channels: Api<Channel> = Api::namespaced(ctx.client.clone(), &ns);
    let mesh = meshes
        .get_opt(&ch.spec.mesh_ref)
        .await
        .map_err(ctx_err("read the Channel's Mesh"))?;
    let mut applied_nodes = 0;
    let (accepted, applied) = match &mesh {
        None => (
            (
                false,
                "MeshNotFound",
                format!("no Mesh {} in namespace {ns}", ch.spec.mesh_ref),
            ),
            (false, "MeshNotFound", String::new()),
        ),
        Some(m) => {
            let all = channels
                .list(&ListParams::default())
                .await
                .map_err(ctx_err("list Channels"))?;
            let (_, dups) = observe::mesh_channels(&m.name_any(), &all.items);
            if dups.contains(&name) {
                (
                    (
                        false,
                        "DuplicateChannel",
                        format!(
                            "an older Channel already names channel {} of Mesh {}",
                            ch.spec.channel_name, ch.spec.mesh_ref
                        ),
                    ),
                    (false, "DuplicateChannel", String::new()),
                )
            } else {
                let report = m
                    .status
                    .as_ref()
                    .and_then(|s| s.channels.iter().find(|c| c.name == ch.spec.channel_name));
                let applied = match report {
                    Some(r)
                        if r.weight == ch.spec.weight
                            && r.nodes > 0
                            && r.applied_nodes == r.nodes =>
                    {
                        applied_nodes = r.applied_nodes;
                        (
                            true,
                            "Applied",
                            format!("{} nodes run weight {}", r.nodes, r.weight),
                        )
                    }
                    Some(r) => {
                        applied_nodes = if r.weight == ch.spec.weight {
                            r.applied_nodes
                        } else {
                            0
                        };
                        (
                            false,
                            "Pending",
                            format!(
                                "{applied_nodes} of {} nodes run weight {}",
                                r.nodes, ch.spec.weight
                            ),
                        )
                    }
                    None => (
                        false,
                        "Pending",
                        "the Mesh has not reported this channel yet".into(),
                    ),
                };
                ((true, "Accepted", String::new()), applied)
            }
        }
    };
    let previous = ch.status.clone().unwrap_or_default();
    let was_accepted = previous
        .conditions
        .iter()
        .find(|c| c.type_ == "Accepted")
        .map(|c| (c.status == "True", c.reason.clone()));
    if !accepted.0 && was_accepted != Some((false, accepted.1.to_owned())) {
        let _ = ctx
            .recorder
            .publish(
                &Event {
                    type_: EventType::Warning,
                    reason: accepted.1.into(),
                    note: Some(accepted.2.clone()),
                    action: "Accept".into(),
                    secondary: None,
                },
                &ch.object_ref(&()),
            )
            .await;
    }
    let done = applied.0;
    let conditions = with_times(
        &previous.conditions,
        [
            ("Accepted", accepted.0, accepted.1, accepted.2),
            ("Applied", applied.0, applied.1, applied.2),
        ]
        .into_iter(),
        ch.metadata.generation,
        now_ms(),
    );
    let status = crate::crd::ChannelStatus {
        observed_generation: ch.metadata.generation,
        conditions,
        applied_nodes,
    };
    channels
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&serde_json::json!({
                "apiVersion": "zlink.io/v1alpha1",
                "kind": "Channel",
                "status": status,
            })),
        )
        .await
        .map_err(ctx_err("apply the Channel status"))?;
    Ok(Requeue::requeue(if done {
        ctx.config.resync
    } else {
        Duration::from_secs(1)
    }))
}

fn channel_error_policy(ch: Arc<Channel>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(channel = %ch.name_any(), %error, "channel reconcile failed");
    Requeue::requeue(Duration::from_secs(5))
}

/// The error policy: per-Mesh backoff, 500 ms doubling to 60 s.
pub fn error_policy(mesh: Arc<Mesh>, error: &Error, ctx: Arc<Context>) -> Requeue {
    let key = ObjectRef::from_obj(&*mesh);
    let n = {
        let mut f = lock(&ctx.failures);
        let n = f.entry(key).or_default();
        *n = n.saturating_add(1);
        *n
    };
    let delay =
        Duration::from_millis(500u64.saturating_mul(1 << n.min(7))).min(Duration::from_secs(60));
    tracing::warn!(mesh = %mesh.name_any(), %error, failures = n, ?delay, "reconcile failed");
    Requeue::requeue(delay)
}

/// Runs the controller until `shutdown` resolves. `wake` carries the hosts' change
/// notifications (the receiving end of the sender given to [`crate::hosts::AdminHosts`]).
pub async fn run(
    ctx: Arc<Context>,
    wake: impl futures::Stream<Item = ObjectRef<Mesh>> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let ns = ctx.config.namespace.clone();
    let api = |c: &Client| -> (Api<Mesh>, Api<Pod>, Api<PodDisruptionBudget>, Api<Channel>) {
        match &ns {
            Some(ns) => (
                Api::namespaced(c.clone(), ns),
                Api::namespaced(c.clone(), ns),
                Api::namespaced(c.clone(), ns),
                Api::namespaced(c.clone(), ns),
            ),
            None => (
                Api::all(c.clone()),
                Api::all(c.clone()),
                Api::all(c.clone()),
                Api::all(c.clone()),
            ),
        }
    };
    let (meshes, pods_api, pdbs, channels) = api(&client);
    let channel_controller = Controller::new(channels.clone(), watcher::Config::default())
        .graceful_shutdown_on(ctx.shutdown_signal())
        .run(
            |ch, ctx: Arc<Context>| async move {
                let r = reconcile_channel(ch, Arc::clone(&ctx)).await;
                ctx.metrics.reconciled("channel", r.is_ok());
                r
            },
            channel_error_policy,
            Arc::clone(&ctx),
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "channel controller event");
            }
        });
    let owned = watcher::Config::default().labels("app.kubernetes.io/managed-by=zlink-operator");
    let mesh_controller = Controller::new(meshes, watcher::Config::default())
        .owns(pods_api, owned.clone())
        .owns(pdbs, owned)
        .watches(channels, watcher::Config::default(), |c: Channel| {
            let ns = c.namespace().unwrap_or_default();
            Some(ObjectRef::<Mesh>::new(&c.spec.mesh_ref).within(&ns))
        })
        .reconcile_on(wake)
        .graceful_shutdown_on(ctx.shutdown_signal())
        .run(
            |mesh, ctx: Arc<Context>| async move {
                let r = reconcile(mesh, Arc::clone(&ctx)).await;
                ctx.metrics.reconciled("mesh", r.is_ok());
                r
            },
            error_policy,
            Arc::clone(&ctx),
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "controller event");
            }
        });
    let stop = Arc::clone(&ctx);
    let trigger = async move {
        shutdown.await;
        stop.shutdown.send_replace(true);
    };
    futures::join!(mesh_controller, channel_controller, trigger);
}

/// The `helm test` probe (`zlink-operator check`): the credentials reach the API server, the
/// CRDs are served, and Meshes and Channels can be listed in `namespace` (`None`: everywhere).
///
/// # Errors
/// A message naming what failed.
pub async fn check(client: Client, namespace: Option<&str>) -> Result<String, String> {
    let (meshes, channels): (Api<Mesh>, Api<Channel>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    let lp = ListParams::default().limit(1);
    let where_ = namespace.unwrap_or("every namespace");
    meshes.list(&lp).await.map_err(|e| {
        format!("cannot list Meshes in {where_} (are the CRDs installed, and is the operator's Role bound?): {e}")
    })?;
    channels
        .list(&lp)
        .await
        .map_err(|e| format!("cannot list Channels in {where_}: {e}"))?;
    Ok(format!("ok: Meshes and Channels readable in {where_}"))
}

#[cfg(test)]
mod tests {
    use super::fault_transitions;
    use crate::crd::Condition;
    use crate::planner::PlannedCondition;

    fn was(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    fn now(type_: &'static str, status: bool, reason: &'static str) -> PlannedCondition {
        PlannedCondition {
            type_,
            status,
            reason,
            message: format!("{type_} {reason}"),
        }
    }

    #[test]
    fn a_condition_turning_bad_is_announced_once() {
        // (previous, planned, announced reasons)
        let cases: Vec<(Vec<Condition>, Vec<PlannedCondition>, Vec<&str>)> = vec![
            // Nothing before: every bad condition is new; good ones never announce.
            (
                vec![],
                vec![
                    now("Ready", false, "Progressing"),
                    now("Degraded", true, "HostUnreachable"),
                    now("RolloutBlocked", false, "NotBlocked"),
                    now("Progressing", true, "RolloutInProgress"),
                ],
                vec!["HostUnreachable"],
            ),
            // The same bad state and reason as before: said already.
            (
                vec![was("Degraded", "True", "HostUnreachable")],
                vec![now("Degraded", true, "HostUnreachable")],
                vec![],
            ),
            // Bad with another reason: announced.
            (
                vec![was("Degraded", "True", "HostUnreachable")],
                vec![now("Degraded", true, "AdminAuthFailed")],
                vec!["AdminAuthFailed"],
            ),
            // Progressing and Available are bad when false.
            (
                vec![was("Progressing", "True", "RolloutInProgress")],
                vec![
                    now("Progressing", false, "ProgressDeadlineExceeded"),
                    now("Available", false, "MinimumReplicasUnavailable"),
                    now("RolloutBlocked", true, "NewPodNotReady"),
                ],
                vec![
                    "ProgressDeadlineExceeded",
                    "MinimumReplicasUnavailable",
                    "NewPodNotReady",
                ],
            ),
            // Recovered: nothing to announce.
            (
                vec![was("RolloutBlocked", "True", "RelocationFailed")],
                vec![now("RolloutBlocked", false, "NotBlocked")],
                vec![],
            ),
        ];
        for (previous, planned, want) in cases {
            let got: Vec<&str> = fault_transitions(&previous, &planned)
                .into_iter()
                .map(|(r, _)| r)
                .collect();
            assert_eq!(got, want, "previous {previous:?}");
        }
    }
}
