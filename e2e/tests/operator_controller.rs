//! The operator's controller on the real kube-apiserver (issue 18 items 4–6): it waits for the
//! Redis Secret, creates the node pods, the PodDisruptionBudget and the generated Secrets, and
//! rolls a version bump out by surging a new pod, writing the relocation intent, calling
//! `Relocate`, and deleting each old pod only once its host reports the relocation completed
//! and safe.
//!
//! Two doubles stand in for what this control plane lacks (no kubelet, no node processes):
//! - [`ScriptedHosts`] stands in for the nodes' HostAdmin API behind the controller's `Hosts`
//!   trait: each pod's host serves, relocates (moving its objects to a target) and becomes safe
//!   on a script, and records every `Relocate` id.
//! - [`TestKubelet`] stands in for a kubelet: it gives each new pod a 127.0.0.x IP, a running
//!   node container and a Ready condition through the status subresource. (Unscheduled pods are
//!   deleted at once by the API server, so no kubelet confirmation is needed.)
//!
//! A watcher checks on every pod event that the mesh never has more than `replicas + maxSurge`
//! pods and that a pod is deleted only while its host is safe.

mod operator_common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::json;
use zlink_e2e::k8s;
use zlink_operator::controller::{self, Config, Context};
use zlink_operator::crd::Mesh;
use zlink_operator::hosts::{Hosts, PodAddr, RelocateCall};
use zlink_operator::planner::{
    HostObservation, HostState, HostView, RelocationState, RelocationView,
};

const TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Debug, Clone)]
struct FakeHost {
    name: String,
    rid: String,
    version: u64,
    state: HostState,
    objects: u64,
    relocation: Option<RelocationView>,
    safe: bool,
    alive: bool,
}

/// Stands in for the nodes' HostAdmin API (see the module docs).
struct ScriptedHosts {
    hosts: Mutex<HashMap<String, FakeHost>>,
    /// Every `Relocate` call: (pod uid, id).
    calls: Mutex<Vec<(String, String)>>,
    meshes: Mutex<HashMap<String, ObjectRef<Mesh>>>,
    wake: futures::channel::mpsc::UnboundedSender<ObjectRef<Mesh>>,
    step: Duration,
}

impl ScriptedHosts {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A host starts serving for pod `uid`.
    fn start(&self, uid: &str, name: &str, version: u64, objects: u64) {
        Self::lock(&self.hosts).insert(
            uid.into(),
            FakeHost {
                name: name.into(),
                rid: format!("rid-{name}"),
                version,
                state: HostState::Serving,
                objects,
                relocation: None,
                safe: true,
                alive: true,
            },
        );
        self.wake_all();
    }

    fn stop(&self, uid: &str) {
        if let Some(h) = Self::lock(&self.hosts).get_mut(uid) {
            h.alive = false;
        }
        self.wake_all();
    }

    fn wake_all(&self) {
        for m in Self::lock(&self.meshes).values() {
            let _ = self.wake.unbounded_send(m.clone());
        }
    }

    fn host(&self, uid: &str) -> Option<FakeHost> {
        Self::lock(&self.hosts).get(uid).cloned()
    }

    /// Objects on live hosts, by pod name.
    fn objects(&self) -> BTreeMap<String, u64> {
        Self::lock(&self.hosts)
            .values()
            .filter(|h| h.alive)
            .map(|h| (h.name.clone(), h.objects))
            .collect()
    }
}

/// The controller's handle on the shared [`ScriptedHosts`].
struct Scripted(Arc<ScriptedHosts>);

impl Hosts for Scripted {
    fn observe(&self, pod: &PodAddr, _token: &str) -> HostObservation {
        ScriptedHosts::lock(&self.0.meshes).insert(pod.uid.clone(), pod.mesh.clone());
        let hosts = ScriptedHosts::lock(&self.0.hosts);
        let Some(h) = hosts.get(&pod.uid).filter(|h| h.alive) else {
            return HostObservation::Unknown;
        };
        HostObservation::Status(HostView {
            rid: h.rid.clone(),
            lifecycle: 0,
            state: h.state,
            version: h.version,
            objects: h.objects,
            safe_to_shutdown: h.safe,
            ready_peers: hosts
                .values()
                .filter(|o| o.alive && o.rid != h.rid)
                .map(|o| o.rid.clone())
                .collect(),
            relocation: h.relocation.clone(),
            relocate_unsupported: false,
        })
    }

    fn relocate(&self, pod: &PodAddr, _token: &str, call: RelocateCall) {
        ScriptedHosts::lock(&self.0.calls).push((pod.uid.clone(), call.id.clone()));
        {
            let mut hosts = ScriptedHosts::lock(&self.0.hosts);
            let Some(h) = hosts.get_mut(&pod.uid) else {
                return;
            };
            if h.relocation.as_ref().is_some_and(|r| r.id == call.id) {
                return; // idempotent per id
            }
            h.state = HostState::Relocating;
            h.safe = false;
            h.relocation = Some(RelocationView {
                id: call.id.clone(),
                state: RelocationState::Running,
                reason: String::new(),
            });
        }
        self.0.wake_all();
        let me = Arc::clone(&self.0);
        let uid = pod.uid.clone();
        tokio::spawn(async move {
            tokio::time::sleep(me.step).await;
            {
                let mut hosts = ScriptedHosts::lock(&me.hosts);
                let target = hosts
                    .iter()
                    .find(|(_, h)| h.alive && call.target_rids.contains(&h.rid))
                    .map(|(u, _)| u.clone());
                let moved = hosts.get(&uid).map_or(0, |h| h.objects);
                let (state, objects_left) = match target {
                    Some(t) => {
                        if let Some(t) = hosts.get_mut(&t) {
                            t.objects += moved;
                        }
                        (RelocationState::Completed, 0)
                    }
                    None => (RelocationState::Failed, moved),
                };
                if let Some(h) = hosts.get_mut(&uid) {
                    h.state = HostState::Relocated;
                    h.objects = objects_left;
                    if let Some(r) = h.relocation.as_mut() {
                        r.state = state;
                    }
                }
            }
            me.wake_all();
            // The Message Follow window, then SafeToShutdown.
            tokio::time::sleep(me.step).await;
            if let Some(h) = ScriptedHosts::lock(&me.hosts).get_mut(&uid) {
                h.safe = true;
            }
            me.wake_all();
        });
    }

    fn retain(&self, _mesh: &ObjectRef<Mesh>, _keep: &HashSet<String>) {}
}

/// Stands in for a kubelet (see the module docs): starts every new pod.
async fn test_kubelet(pods: Api<Pod>, hosts: Arc<ScriptedHosts>, objects_per_v1_pod: u64) {
    let mut started: HashSet<String> = HashSet::new();
    let mut next_ip = 10u8;
    loop {
        if let Ok(list) = pods.list(&Default::default()).await {
            for p in list.items {
                let (Some(uid), name) = (p.metadata.uid.clone(), p.name_any()) else {
                    continue;
                };
                if started.contains(&uid) || p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let ip = format!("127.0.0.{next_ip}");
                next_ip = next_ip.wrapping_add(1).max(10);
                let status = json!({"status": {
                    "phase": "Running",
                    "podIP": ip,
                    "podIPs": [{"ip": ip}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [{
                        "name": "node", "ready": true, "restartCount": 0,
                        "image": "zlink-node", "imageID": "",
                        "state": {"running": {"startedAt": "2026-12-02T06:00:00Z"}},
                    }],
                }});
                if pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .is_ok()
                {
                    let version: u64 = p
                        .labels()
                        .get("zlink.io/version")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let objects = if version == 1 { objects_per_v1_pod } else { 0 };
                    hosts.start(&uid, &name, version, objects);
                    started.insert(uid);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the invariants on every pod event; returns the violations seen and the deleted pods.
async fn watch_invariants(
    pods: Api<Pod>,
    hosts: Arc<ScriptedHosts>,
    limit: usize,
    out: Arc<Mutex<(Vec<String>, Vec<String>)>>,
) {
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut stream = watcher::watcher(pods, watcher::Config::default()).boxed();
    while let Some(ev) = stream.next().await {
        let Ok(ev) = ev else { continue };
        let mut out = ScriptedHosts::lock(&out);
        match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                seen.insert(p.uid().unwrap_or_default(), p.name_any());
            }
            watcher::Event::Delete(p) => {
                let uid = p.uid().unwrap_or_default();
                seen.remove(&uid);
                match hosts.host(&uid) {
                    Some(h)
                        if h.safe
                            && h.state == HostState::Relocated
                            && h.relocation
                                .as_ref()
                                .is_some_and(|r| r.state == RelocationState::Completed) => {}
                    h => out
                        .0
                        .push(format!("{} deleted while its host was {h:?}", p.name_any())),
                }
                out.1.push(p.name_any());
                hosts.stop(&uid);
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
        if seen.len() > limit {
            out.0.push(format!(
                "{} pods, more than replicas + maxSurge = {limit}",
                seen.len()
            ));
        }
    }
}

async fn wait_for<T>(
    what: &str,
    mut f: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition(m: &Mesh, t: &str) -> Option<(String, String)> {
    m.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_bump_relocates_each_old_pod_once_and_deletes_it_only_when_safe()
-> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let ns = plane.namespace("operator").await?;
    operator_common::install_crds(ns.client()).await?;
    let meshes: Api<Mesh> = ns.api();
    let pods: Api<Pod> = ns.api();
    let secrets: Api<Secret> = ns.api();

    let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded();
    let hosts = Arc::new(ScriptedHosts {
        hosts: Mutex::default(),
        calls: Mutex::default(),
        meshes: Mutex::default(),
        wake: wake_tx,
        step: Duration::from_millis(300),
    });
    let ctx = Arc::new(Context::new(
        ns.client(),
        Arc::new(Scripted(Arc::clone(&hosts))),
        Config {
            namespace: Some(ns.name().to_owned()),
            store_missing_requeue: Duration::from_millis(500),
            resync: Duration::from_secs(5),
            instance: "e2e".into(),
        },
    ));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(controller::run(ctx, wake_rx, async move {
        let _ = stop_rx.await;
    }));
    let kubelet = tokio::spawn(test_kubelet(pods.clone(), Arc::clone(&hosts), 10));
    let report = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let watcher_task = tokio::spawn(watch_invariants(
        pods.clone(),
        Arc::clone(&hosts),
        3,
        Arc::clone(&report),
    ));

    let mesh: Mesh = serde_json::from_value(json!({
        "apiVersion": "zlink.io/v1alpha1",
        "kind": "Mesh",
        "metadata": {"name": "game"},
        "spec": {
            "replicas": 2,
            "image": "zlink-node:1",
            "applicationVersion": 1,
            "locationStore": {"redisUrlSecretRef": {"name": "redis", "key": "url"}, "namespace": "game"},
        },
    }))?;
    meshes.create(&PostParams::default(), &mesh).await?;

    // No Redis Secret: blocked, and nothing is created.
    wait_for("StoreSecretMissing", async || {
        let m = meshes.get("game").await?;
        Ok(
            (condition(&m, "RolloutBlocked") == Some(("True".into(), "StoreSecretMissing".into())))
                .then_some(()),
        )
    })
    .await?;
    ensure!(
        pods.list(&Default::default()).await?.items.is_empty(),
        "pods created without the store Secret"
    );

    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "redis"},
        "stringData": {"url": "redis://127.0.0.1:6379"},
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;

    // Two pods, Ready, named deterministically and owned by the Mesh.
    let m = wait_for("the mesh Ready at v1", async || {
        let m = meshes.get("game").await?;
        Ok(
            (condition(&m, "Ready") == Some(("True".into(), "AllReplicasReady".into())))
                .then_some(m),
        )
    })
    .await?;
    let status = m.status.clone().context("status")?;
    ensure!(
        status.ready_replicas == 2 && status.updated_replicas == 2,
        "{status:?}"
    );
    ensure!(status.observed_generation == m.metadata.generation);
    let rev1 = status.update_revision.clone();
    let mut names: Vec<String> = pods
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    names.sort();
    ensure!(
        names
            == [
                format!("game-{}-0", &rev1[..8]),
                format!("game-{}-1", &rev1[..8])
            ],
        "names {names:?}"
    );
    for p in pods.list(&Default::default()).await?.items {
        let o = p.owner_references();
        ensure!(
            o.len() == 1 && o[0].kind == "Mesh" && o[0].controller == Some(true),
            "owner {o:?}"
        );
    }
    for s in ["game-mesh", "game-admin"] {
        ensure!(
            secrets.get_opt(s).await?.is_some(),
            "generated Secret {s} missing"
        );
    }
    let pdb: Api<PodDisruptionBudget> = ns.api();
    let pdb = pdb.get("game").await.context("the PodDisruptionBudget")?;
    ensure!(pdb.spec.and_then(|s| s.max_unavailable).is_some());

    // The version bump.
    meshes
        .patch(
            "game",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"applicationVersion": 2, "image": "zlink-node:2"}})),
        )
        .await?;
    let m = wait_for("the mesh Ready at v2", async || {
        let m = meshes.get("game").await?;
        let s = m.status.clone().unwrap_or_default();
        Ok(
            (condition(&m, "Ready") == Some(("True".into(), "AllReplicasReady".into()))
                && s.update_revision != rev1
                && s.current_version == Some(2)
                && s.replicas == 2)
                .then_some(m),
        )
    })
    .await?;
    let _ = m;
    let _ = stop_tx.send(());
    let _ = controller.await;
    kubelet.abort();
    watcher_task.abort();

    let (violations, deleted) = ScriptedHosts::lock(&report).clone();
    ensure!(violations.is_empty(), "invariants broken: {violations:?}");
    let old: HashSet<String> = names.into_iter().collect();
    ensure!(
        deleted.iter().cloned().collect::<HashSet<_>>() == old,
        "deleted {deleted:?}, expected the old pods {old:?}"
    );
    // One relocation id per old pod, written before the call: the id is `<uid>-<attempt>`.
    let calls = ScriptedHosts::lock(&hosts.calls).clone();
    let mut ids: HashMap<String, HashSet<String>> = HashMap::new();
    for (uid, id) in &calls {
        ensure!(
            id.starts_with(uid.as_str()),
            "id {id} does not name pod {uid}"
        );
        ids.entry(uid.clone()).or_default().insert(id.clone());
    }
    ensure!(
        ids.len() == 2,
        "Relocate went to {} pods: {calls:?}",
        ids.len()
    );
    ensure!(
        ids.values().all(|s| s.len() == 1),
        "a pod got two ids: {ids:?}"
    );
    // Every object moved to the new pods.
    let objects = hosts.objects();
    eprintln!(
        "rollout: deleted {deleted:?}; {} Relocate calls for {} ids; objects now {objects:?}",
        calls.len(),
        ids.values().map(HashSet::len).sum::<usize>()
    );
    ensure!(objects.values().sum::<u64>() == 20, "objects {objects:?}");
    Ok(())
}
