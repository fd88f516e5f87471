//! Shared by the operator e2e tests: installing the CRDs, and the doubles that stand in for
//! what this control plane lacks (no kubelet, no node processes):
//! - [`ScriptedHosts`] stands in for the nodes' HostAdmin API behind the controller's `Hosts`
//!   trait (the real client, `AdminHosts`, is tested against `zlink-fake-node` processes in
//!   `operator_hosts.rs`);
//! - [`test_kubelet`] stands in for a kubelet: it only sets pod status. Unscheduled pods are
//!   deleted at once by the API server, so no kubelet confirmation is needed.
//!
//! [`Harness`] puts them together with a controller restricted to the test's namespace, and a
//! watcher that checks on every pod event that the mesh never has more than `replicas +
//! maxSurge` pods and that a pod is deleted only while its host is safe.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, CustomResourceExt as _};
use serde_json::{Value, json};
use zlink_e2e::k8s::{self, TestNamespace};
use zlink_operator::controller::{self, Config, Context};
use zlink_operator::crd::{Channel, Mesh};
use zlink_operator::hosts::{Hosts, PodAddr, RelocateCall};
use zlink_operator::planner::{
    HostObservation, HostState, HostView, RelocationState, RelocationView,
};

const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a test waits for a state the controller should reach.
pub const WAIT: Duration = Duration::from_secs(90);

/// What a scripted host's relocation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// Moves every object to a target, then becomes safe.
    Succeed,
    /// Ends `Failed`; the objects stay.
    Fail,
    /// Completes but never reports SafeToShutdown.
    NeverSafe,
    /// Answers `UNIMPLEMENTED`.
    Unsupported,
    /// Succeeds after this long.
    Slow(Duration),
}

/// Applies both CRDs (once per test binary is enough, but applying is idempotent) and waits
/// until the API server serves them.
pub async fn install_crds(client: Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in [Mesh::crd(), Channel::crd()] {
        let name = crd.metadata.name.clone().context("CRD name")?;
        crds.patch(
            &name,
            &PatchParams::apply("zlink-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying {name}"))?;
        tokio::time::timeout(TIMEOUT, async {
            loop {
                let crd = crds.get(&name).await?;
                let established = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                if established {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .with_context(|| format!("{name} was not Established in time"))??;
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub struct FakeHost {
    pub name: String,
    pub rid: String,
    pub version: u64,
    pub state: HostState,
    pub objects: u64,
    pub relocation: Option<RelocationView>,
    pub safe: bool,
    pub alive: bool,
    pub unsupported: bool,
    pub channels: BTreeMap<String, u32>,
}

/// Stands in for the nodes' HostAdmin API behind the controller's `Hosts` trait: each pod's
/// host serves, relocates on [`Script`] (moving its objects to a target) and becomes safe, and
/// every `Relocate` id is recorded.
pub struct ScriptedHosts {
    hosts: Mutex<HashMap<String, FakeHost>>,
    /// Every `Relocate` call: (pod uid, id).
    pub calls: Mutex<Vec<(String, String)>>,
    meshes: Mutex<HashMap<String, ObjectRef<Mesh>>>,
    wake: Mutex<futures::channel::mpsc::UnboundedSender<ObjectRef<Mesh>>>,
    step: Duration,
    /// What a relocation does (changeable mid-test).
    pub script: Mutex<Script>,
    /// `observe` calls by pod uid (one per reconcile that saw the pod running): a marker that
    /// the controller looked again.
    pub observes: Mutex<HashMap<String, u64>>,
}

impl ScriptedHosts {
    pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A host starts serving for pod `uid`.
    fn start(
        &self,
        uid: &str,
        name: &str,
        version: u64,
        objects: u64,
        channels: BTreeMap<String, u32>,
    ) {
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
                unsupported: false,
                channels,
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
        let wake = Self::lock(&self.wake).clone();
        for m in Self::lock(&self.meshes).values() {
            let _ = wake.unbounded_send(m.clone());
        }
    }

    pub fn host(&self, uid: &str) -> Option<FakeHost> {
        Self::lock(&self.hosts).get(uid).cloned()
    }

    /// Objects on live hosts, by pod name.
    pub fn objects(&self) -> BTreeMap<String, u64> {
        Self::lock(&self.hosts)
            .values()
            .filter(|h| h.alive)
            .map(|h| (h.name.clone(), h.objects))
            .collect()
    }
}

/// The controller's handle on the shared [`ScriptedHosts`].
pub struct Scripted(pub Arc<ScriptedHosts>);

impl Hosts for Scripted {
    fn observe(&self, pod: &PodAddr, _token: &str) -> HostObservation {
        ScriptedHosts::lock(&self.0.meshes).insert(pod.uid.clone(), pod.mesh.clone());
        *ScriptedHosts::lock(&self.0.observes)
            .entry(pod.uid.clone())
            .or_default() += 1;
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
            relocate_unsupported: h.unsupported,
        })
    }

    fn relocate(&self, pod: &PodAddr, _token: &str, call: RelocateCall) {
        ScriptedHosts::lock(&self.0.calls).push((pod.uid.clone(), call.id.clone()));
        let script = *ScriptedHosts::lock(&self.0.script);
        if script == Script::Unsupported {
            if let Some(h) = ScriptedHosts::lock(&self.0.hosts).get_mut(&pod.uid) {
                h.unsupported = true;
            }
            self.0.wake_all();
            return;
        }
        {
            let mut hosts = ScriptedHosts::lock(&self.0.hosts);
            let Some(h) = hosts.get_mut(&pod.uid) else {
                return;
            };
            if h.relocation.as_ref().is_some_and(|r| r.id == call.id)
                || h.state == HostState::Relocating
            {
                return; // idempotent per id; one relocation at a time
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
            let step = match script {
                Script::Slow(d) => d,
                _ => me.step,
            };
            tokio::time::sleep(step).await;
            {
                let mut hosts = ScriptedHosts::lock(&me.hosts);
                let target = hosts
                    .iter()
                    .find(|(_, h)| h.alive && call.target_rids.contains(&h.rid))
                    .map(|(u, _)| u.clone());
                let moved = hosts.get(&uid).map_or(0, |h| h.objects);
                let (state, objects_left) = match target.filter(|_| script != Script::Fail) {
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
            if script == Script::NeverSafe {
                return;
            }
            tokio::time::sleep(me.step).await;
            if let Some(h) = ScriptedHosts::lock(&me.hosts).get_mut(&uid) {
                h.safe = true;
            }
            me.wake_all();
        });
    }

    fn retain(&self, _mesh: &ObjectRef<Mesh>, _keep: &HashSet<String>) {}

    fn channel_weights(&self, pod: &PodAddr) -> Option<BTreeMap<String, u32>> {
        ScriptedHosts::lock(&self.0.hosts)
            .get(&pod.uid)
            .filter(|h| h.alive)
            .map(|h| h.channels.clone())
    }

    fn set_channel_weight(&self, pod: &PodAddr, _token: &str, channel: &str, weight: u32) {
        if let Some(w) = ScriptedHosts::lock(&self.0.hosts)
            .get_mut(&pod.uid)
            .and_then(|h| h.channels.get_mut(channel))
        {
            *w = weight;
        }
        self.0.wake_all();
    }
}

/// Stands in for a kubelet (see the module docs): gives every new pod an IP, a running node
/// container and a Ready condition through the status subresource, and starts its host.
pub async fn test_kubelet(pods: Api<Pod>, hosts: Arc<ScriptedHosts>, objects_per_v1_pod: u64) {
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
                    // The channels the pod was given (ZLINK_MESH_CHANNELS name:role:weight).
                    let channels = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.first())
                        .and_then(|c| c.env.as_ref())
                        .and_then(|e| e.iter().find(|v| v.name == "ZLINK_MESH_CHANNELS"))
                        .and_then(|v| v.value.clone())
                        .unwrap_or_default()
                        .split(',')
                        .filter_map(|item| {
                            let mut parts = item.split(':');
                            let name = parts.next().filter(|n| !n.is_empty())?;
                            let weight = parts.nth(1)?.parse().ok()?;
                            Some((name.to_owned(), weight))
                        })
                        .collect();
                    hosts.start(&uid, &name, version, objects, channels);
                    started.insert(uid);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the invariants on every pod event; returns the violations seen and the deleted pods.
pub async fn watch_invariants(
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
                let forced = p.annotations().contains_key("zlink.io/force-delete");
                match hosts.host(&uid) {
                    _ if forced => {}
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

/// Creates the Redis Secret `redis` (key `url`) that the test Meshes name.
pub async fn create_store_secret(secrets: &Api<Secret>) -> anyhow::Result<()> {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "redis"},
        "stringData": {"url": "redis://127.0.0.1:6379"},
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;
    Ok(())
}

/// A task that runs until told to stop: [`Stoppable::stop`] asks and waits; dropping it aborts
/// the task.
pub struct Stoppable<T> {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<T>,
}

impl<T: Send + 'static> Stoppable<T> {
    /// Spawns `run(stopped)`, where `stopped` resolves once [`Self::stop`] is called.
    pub fn spawn<F>(
        run: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send + Sync>>) -> F,
    ) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run(Box::pin(async move {
            let _ = stop_rx.await;
        })));
        Self {
            stop: Some(stop),
            task,
        }
    }

    /// Asks the task to stop and waits for it.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl<T> Drop for Stoppable<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A process kubelet ([`zlink_e2e::kubelet`]) as a task of the calling runtime: three Nodes on
/// `plane`, pods at `127.<ip_base>.*`, their directories under `work_dir`, `images` (image →
/// executable) its table; `bind_unscheduled` when the plane has no kube-scheduler. Stopping it
/// stops every pod process.
pub async fn process_kubelet(
    plane: &k8s::ControlPlane,
    images: &[(&str, &str)],
    ip_base: [u8; 2],
    work_dir: std::path::PathBuf,
    bind_unscheduled: bool,
) -> anyhow::Result<Stoppable<anyhow::Result<()>>> {
    let env = plane.env();
    let cfg = zlink_e2e::kubelet::Config {
        nodes: 3,
        images: images
            .iter()
            .map(|(i, exe)| ((*i).to_owned(), (*exe).into()))
            .collect(),
        ip_base,
        work_dir,
        bind_unscheduled,
        server: env.get("ZLINK_K8S_SERVER").cloned().context("server")?,
        ca_file: env.get("ZLINK_K8S_CA_FILE").cloned().context("CA")?.into(),
    };
    let client = plane.client().await?;
    Ok(Stoppable::spawn(|stopped| {
        zlink_e2e::kubelet::run(client, cfg, stopped)
    }))
}

/// The controller of `ns` with the real HostAdmin client (`AdminHosts`) as a task, with resync
/// period `resync` (a missing store Secret is looked at every 500 ms).
pub fn admin_controller(ns: &TestNamespace, resync: Duration) -> Stoppable<()> {
    let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded();
    let ctx = Arc::new(Context::new(
        ns.client(),
        Arc::new(zlink_operator::hosts::AdminHosts::new(
            zlink_operator::pods::ADMIN_PORT as u16,
            wake_tx,
        )),
        Config {
            namespace: Some(ns.name().to_owned()),
            store_missing_requeue: Duration::from_millis(500),
            resync,
            instance: "e2e".into(),
        },
    ));
    Stoppable::spawn(|stopped| controller::run(ctx, wake_rx, stopped))
}

/// A control plane of the calling test's own: etcd, kube-apiserver and an audit log, no
/// controllers (`Ok(None)`: skipped, see [`k8s::own_control_plane`]).
pub fn own_audited_plane() -> anyhow::Result<Option<k8s::ControlPlane>> {
    tokio::task::block_in_place(|| {
        k8s::own_control_plane(k8s::Options {
            controllers: false,
            audit_log: true,
        })
    })
}

/// Merge-patches Mesh `game` to application version 2 on image `zlink-fake-node:2` (the
/// rollouts of the process-kubelet tests).
pub async fn bump_fake_nodes_to_v2(meshes: &Api<Mesh>) -> anyhow::Result<()> {
    meshes
        .patch(
            "game",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"applicationVersion": 2, "image": "zlink-fake-node:2"}})),
        )
        .await?;
    Ok(())
}

/// Waits for a pod (one of `among`, when given) carrying the `zlink.io/relocation` intent; its
/// name.
pub async fn wait_relocation_intent(
    pods: &Api<Pod>,
    among: Option<&HashSet<String>>,
) -> anyhow::Result<String> {
    wait_for("a pod's relocation intent", async || {
        let list = pods.list(&Default::default()).await?;
        Ok(list
            .items
            .iter()
            .find(|p| {
                among.is_none_or(|a| a.contains(&p.name_any()))
                    && p.annotations().contains_key("zlink.io/relocation")
            })
            .map(|p| p.name_any()))
    })
    .await
}

pub async fn wait_for<T>(
    what: &str,
    mut f: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + WAIT;
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

pub fn condition(m: &Mesh, t: &str) -> Option<(String, String)> {
    m.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// A namespace with the CRDs, the doubles, an invariant watcher and a controller.
pub struct Harness {
    pub ns: TestNamespace,
    pub meshes: Api<Mesh>,
    pub pods: Api<Pod>,
    pub secrets: Api<Secret>,
    pub hosts: Arc<ScriptedHosts>,
    /// (violations, deleted pod names), from the watcher.
    pub report: Arc<Mutex<(Vec<String>, Vec<String>)>>,
    controller: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The metrics of the running controller.
    pub metrics: Option<Arc<zlink_operator::metrics::Metrics>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some((_, t)) = &self.controller {
            t.abort();
        }
    }
}

impl Harness {
    /// A harness in a fresh namespace (None when the control plane is not available), with at
    /// most `limit` pods allowed at any time.
    pub async fn start(hint: &str, limit: usize) -> anyhow::Result<Option<Self>> {
        let Some(plane) = k8s::control_plane() else {
            return Ok(None);
        };
        let ns = plane.namespace(hint).await?;
        install_crds(ns.client()).await?;
        let (wake, _) = futures::channel::mpsc::unbounded();
        let hosts = Arc::new(ScriptedHosts {
            hosts: Mutex::default(),
            calls: Mutex::default(),
            meshes: Mutex::default(),
            wake: Mutex::new(wake),
            step: Duration::from_millis(300),
            script: Mutex::new(Script::Succeed),
            observes: Mutex::default(),
        });
        let pods: Api<Pod> = ns.api();
        let report = Arc::new(Mutex::new((Vec::new(), Vec::new())));
        let tasks = vec![
            tokio::spawn(test_kubelet(pods.clone(), Arc::clone(&hosts), 10)),
            tokio::spawn(watch_invariants(
                pods.clone(),
                Arc::clone(&hosts),
                limit,
                Arc::clone(&report),
            )),
        ];
        let mut h = Self {
            meshes: ns.api(),
            secrets: ns.api(),
            pods,
            ns,
            hosts,
            report,
            controller: None,
            tasks,
            metrics: None,
        };
        h.start_controller();
        Ok(Some(h))
    }

    /// Starts a controller (a fresh one: an operator restart).
    pub fn start_controller(&mut self) {
        let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded();
        *ScriptedHosts::lock(&self.hosts.wake) = wake_tx;
        let ctx = Arc::new(Context::new(
            self.ns.client(),
            Arc::new(Scripted(Arc::clone(&self.hosts))),
            Config {
                namespace: Some(self.ns.name().to_owned()),
                store_missing_requeue: Duration::from_millis(500),
                resync: Duration::from_secs(5),
                instance: "e2e".into(),
            },
        ));
        self.metrics = Some(Arc::clone(ctx.metrics()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(controller::run(ctx, wake_rx, async move {
            let _ = stop_rx.await;
        }));
        self.controller = Some((stop_tx, task));
    }

    /// Stops the controller and waits for it.
    pub async fn stop_controller(&mut self) {
        if let Some((stop, task)) = self.controller.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
    }

    /// Creates the Redis Secret.
    pub async fn create_store_secret(&self) -> anyhow::Result<()> {
        create_store_secret(&self.secrets).await
    }

    /// Creates Mesh `game` (2 replicas, version 1) with `spec` merged in.
    pub async fn create_mesh(&self, spec: Value) -> anyhow::Result<()> {
        let mut base = json!({
            "replicas": 2,
            "image": "zlink-node:1",
            "applicationVersion": 1,
            "locationStore": {"redisUrlSecretRef": {"name": "redis", "key": "url"}, "namespace": "game"},
        });
        if let (Value::Object(b), Value::Object(s)) = (&mut base, spec) {
            b.extend(s);
        }
        let mesh: Mesh = serde_json::from_value(json!({
            "apiVersion": "zlink.io/v1alpha1",
            "kind": "Mesh",
            "metadata": {"name": "game"},
            "spec": base,
        }))?;
        self.meshes.create(&PostParams::default(), &mesh).await?;
        Ok(())
    }

    /// Merge-patches the Mesh spec.
    pub async fn patch_spec(&self, spec: Value) -> anyhow::Result<Mesh> {
        Ok(self
            .meshes
            .patch(
                "game",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await?)
    }

    /// Waits until `pred` holds for the Mesh.
    pub async fn wait_mesh(
        &self,
        what: &str,
        pred: impl Fn(&Mesh) -> bool,
    ) -> anyhow::Result<Mesh> {
        wait_for(what, async || {
            let m = self.meshes.get("game").await?;
            Ok(pred(&m).then_some(m))
        })
        .await
    }

    /// Waits until the Mesh is Ready at `version` with `replicas` pods.
    pub async fn wait_ready(&self, version: i64, replicas: i32) -> anyhow::Result<Mesh> {
        self.wait_mesh(&format!("Ready at v{version}"), |m| {
            let s = m.status.clone().unwrap_or_default();
            condition(m, "Ready") == Some(("True".into(), "AllReplicasReady".into()))
                && s.current_version == Some(version)
                && s.replicas == replicas
                && s.observed_generation == m.metadata.generation
        })
        .await
    }

    /// The names of the pods now.
    pub async fn pod_names(&self) -> anyhow::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .pods
            .list(&Default::default())
            .await?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Sets `channel`'s weight on every live host directly (drift, as a person might cause).
    pub fn drift(&self, channel: &str, weight: u32) {
        for h in ScriptedHosts::lock(&self.hosts.hosts).values_mut() {
            if let Some(w) = h.channels.get_mut(channel) {
                *w = weight;
            }
        }
        self.hosts.wake_all();
    }

    /// Each live host's weight of `channel`, by pod name.
    pub fn weights(&self, channel: &str) -> BTreeMap<String, u32> {
        ScriptedHosts::lock(&self.hosts.hosts)
            .values()
            .filter(|h| h.alive)
            .filter_map(|h| Some((h.name.clone(), *h.channels.get(channel)?)))
            .collect()
    }

    /// Relocate ids by pod uid.
    pub fn ids(&self) -> HashMap<String, HashSet<String>> {
        let mut ids: HashMap<String, HashSet<String>> = HashMap::new();
        for (uid, id) in ScriptedHosts::lock(&self.hosts.calls).iter() {
            ids.entry(uid.clone()).or_default().insert(id.clone());
        }
        ids
    }

    /// How often the controller looked at pod `uid`'s host.
    pub fn observes(&self, uid: &str) -> u64 {
        ScriptedHosts::lock(&self.hosts.observes)
            .get(uid)
            .copied()
            .unwrap_or(0)
    }

    /// The watcher's violations.
    pub fn violations(&self) -> Vec<String> {
        ScriptedHosts::lock(&self.report).0.clone()
    }

    /// The pods deleted so far.
    pub fn deleted(&self) -> Vec<String> {
        ScriptedHosts::lock(&self.report).1.clone()
    }
}
