//! A test-only **process kubelet** (issue 18 item 10): pods bound to its fake Nodes run as local
//! processes, so operator tests get real pods on the real kube-apiserver without a container
//! runtime. It stands in for a kubelet only; nothing of it ships.
//!
//! - **Nodes**: `nodes` fake Nodes, Ready, with Leases renewed in `kube-node-lease`.
//! - **Scheduling**: on a control plane without kube-scheduler (`k8s::control_plane()`), pods
//!   without a `nodeName` are bound round-robin to its Nodes (`bind_unscheduled`); with one
//!   (`k8s::full_control_plane()`), leave that off and the scheduler binds them.
//! - **Network**: one 127.x.y.z per pod (from `ip_base`), so pods listen on their real ports.
//!   Loopback only.
//! - **Images**: a table maps images (with or without tag) to executables; an unknown image waits
//!   in `ImagePullBackOff`. A container's `command` and `args` follow the executable.
//! - **Volumes**: Secret, ConfigMap and emptyDir volumes are written to a per-pod directory; a
//!   `mountPath` in env values or args is rewritten to that directory.
//! - **Env**: values, `fieldRef`, `secretKeyRef`, `configMapKeyRef` and `$(VAR)`, on a cleared
//!   environment ([`env`]); a missing key waits in `CreateContainerConfigError`.
//! - **In-cluster access**: a bound TokenRequest token for the pod's ServiceAccount, in a
//!   kubeconfig passed as `KUBECONFIG`.
//! - **Probes and restarts**: httpGet readiness (the Ready condition) and liveness (a restart);
//!   `restartPolicy` with backoff (500 ms doubling to 10 s); pod IP, container states, exit codes
//!   and conditions in the status.
//! - **Delete**: SIGTERM, SIGKILL after the grace period, the terminal phase (`Succeeded` on
//!   exit 0, else `Failed`) and exit code in the status, then the final delete (grace 0, uid
//!   precondition).
//! - **Limits**: more than one container, init containers, host namespaces or other volume kinds
//!   fail the pod (`Unsupported`). Each pod's output goes to `<work_dir>/<pod uid>/log`.

pub mod env;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::sync::watch;

/// How the process kubelet runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Fake Nodes to register (`process-node-0` …).
    pub nodes: usize,
    /// Image (with or without its tag) → executable.
    pub images: BTreeMap<String, PathBuf>,
    /// Pod IPs are `127.<a>.<b>.<n>` from `[a, b]` on.
    pub ip_base: [u8; 2],
    /// Per-pod directories (volumes, kubeconfig, log).
    pub work_dir: PathBuf,
    /// Bind pods without a `nodeName` to these Nodes.
    pub bind_unscheduled: bool,
    /// The API server URL and CA file for in-cluster kubeconfigs.
    pub server: String,
    /// The CA of `server`.
    pub ca_file: PathBuf,
}

/// The name of fake Node `i`.
pub fn node_name(i: usize) -> String {
    format!("process-node-{i}")
}

struct Shared {
    client: Client,
    cfg: Config,
    next_ip: AtomicU32,
}

/// Runs the kubelet until `shutdown` resolves; every pod process is killed then.
///
/// # Errors
/// Only when the Nodes cannot be registered.
pub async fn run(
    client: Client,
    cfg: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&cfg.work_dir)?;
    let shared = Arc::new(Shared {
        client,
        cfg,
        next_ip: AtomicU32::new(0),
    });
    register_nodes(&shared).await?;
    let mut runs: HashMap<String, watch::Sender<Option<i64>>> = HashMap::new();
    let mut tasks = Vec::new();
    let mut rr = 0usize;
    let mine: HashSet<String> = (0..shared.cfg.nodes).map(node_name).collect();
    let mut beat = tokio::time::Instant::now();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep(Duration::from_millis(150)) => {}
        }
        if beat.elapsed() > Duration::from_secs(10) {
            beat = tokio::time::Instant::now();
            let _ = heartbeat(&shared).await;
        }
        let pods: Api<Pod> = Api::all(shared.client.clone());
        let Ok(list) = pods.list(&Default::default()).await else {
            continue;
        };
        let mut seen = HashSet::new();
        for p in list.items {
            let Some(uid) = p.metadata.uid.clone() else {
                continue;
            };
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            match node {
                None if shared.cfg.bind_unscheduled && p.metadata.deletion_timestamp.is_none() => {
                    let target = node_name(rr % shared.cfg.nodes.max(1));
                    rr += 1;
                    let _ = bind(&shared, &p, &target).await;
                    continue;
                }
                Some(n) if mine.contains(&n) => {}
                _ => continue,
            }
            seen.insert(uid.clone());
            if let Some(tx) = runs.get(&uid) {
                if p.metadata.deletion_timestamp.is_some() && tx.borrow().is_none() {
                    let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(30);
                    let _ = tx.send(Some(grace));
                }
                continue;
            }
            let (tx, rx) = watch::channel(None);
            if p.metadata.deletion_timestamp.is_some() {
                let _ = tx.send(Some(0));
            }
            runs.insert(uid, tx);
            tasks.push(tokio::spawn(supervise(Arc::clone(&shared), p, rx)));
        }
        // Pods gone from the API: stop their processes at once.
        runs.retain(|uid, tx| {
            if seen.contains(uid) {
                true
            } else {
                let _ = tx.send(Some(0));
                false
            }
        });
    }
    for tx in runs.values() {
        let _ = tx.send(Some(0));
    }
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    Ok(())
}

async fn register_nodes(s: &Shared) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(s.client.clone());
    for i in 0..s.cfg.nodes {
        let name = node_name(i);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "zlink.test/process-kubelet": "true",
            }},
        }))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("register Node {name}")),
        }
    }
    let leases_ns: Api<Namespace> = Api::all(s.client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "kube-node-lease"}}))?;
    let _ = leases_ns.create(&PostParams::default(), &ns).await;
    heartbeat(s).await
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn now_micro() -> String {
    let t = k8s_openapi::jiff::Timestamp::now();
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

async fn heartbeat(s: &Shared) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(s.client.clone());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(s.client.clone(), "kube-node-lease");
    for i in 0..s.cfg.nodes {
        let name = node_name(i);
        let t = now();
        nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                    "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "conditions": [{
                        "type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "process kubelet", "lastHeartbeatTime": t, "lastTransitionTime": t,
                    }],
                }})),
            )
            .await
            .with_context(|| format!("Node {name} status"))?;
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()},
        });
        leases
            .patch(
                &name,
                &PatchParams::apply("process-kubelet").force(),
                &Patch::Apply(&lease),
            )
            .await
            .with_context(|| format!("Node {name} lease"))?;
    }
    Ok(())
}

async fn bind(s: &Shared, p: &Pod, node: &str) -> anyhow::Result<()> {
    let ns = p.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &ns);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": p.name_any(), "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let _: serde_json::Value = pods
        .create_subresource("binding", &p.name_any(), &PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Why a pod cannot run here (`Unsupported`), if it cannot.
fn unsupported(p: &Pod) -> Option<String> {
    let spec = p.spec.as_ref()?;
    if spec.containers.len() != 1 {
        return Some(format!(
            "{} containers (exactly one is supported)",
            spec.containers.len()
        ));
    }
    if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        return Some("init containers".into());
    }
    if spec.host_network == Some(true) || spec.host_pid == Some(true) || spec.host_ipc == Some(true)
    {
        return Some("host namespaces".into());
    }
    for v in spec.volumes.iter().flatten() {
        if v.secret.is_none()
            && v.config_map.is_none()
            && v.empty_dir.is_none()
            && v.projected.is_none()
        {
            return Some(format!(
                "volume {} (only secret, configMap, emptyDir and the ServiceAccount's projected token)",
                v.name
            ));
        }
    }
    None
}

fn executable(cfg: &Config, image: &str) -> Option<PathBuf> {
    if let Some(p) = cfg.images.get(image) {
        return Some(p.clone());
    }
    let repo = image
        .rsplit_once(':')
        .map_or(image, |(r, tag)| if tag.contains('/') { image } else { r });
    cfg.images.get(repo).cloned()
}

struct Status {
    phase: &'static str,
    ip: String,
    ready: bool,
    started: bool,
    restarts: i32,
    state: serde_json::Value,
    last: Option<serde_json::Value>,
    reason: Option<(String, String)>,
}

impl Status {
    fn to_json(&self, c: &Container, started_at: &str) -> serde_json::Value {
        let t = now();
        let cond = |ty: &str, ok: bool| json!({"type": ty, "status": if ok { "True" } else { "False" }, "lastTransitionTime": t});
        let mut cs = json!({
            "name": c.name,
            "image": c.image.clone().unwrap_or_default(),
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restarts,
            "state": self.state,
        });
        if let Some(l) = &self.last {
            cs["lastState"] = l.clone();
        }
        let mut status = json!({
            "phase": self.phase,
            "hostIP": "127.0.0.1",
            "startTime": started_at,
            "conditions": [
                cond("PodScheduled", true),
                cond("Initialized", true),
                cond("ContainersReady", self.ready),
                cond("Ready", self.ready),
            ],
            "containerStatuses": [cs],
        });
        if !self.ip.is_empty() {
            status["podIP"] = json!(self.ip);
            status["podIPs"] = json!([{"ip": self.ip}]);
        }
        if let Some((reason, message)) = &self.reason {
            status["reason"] = json!(reason);
            status["message"] = json!(message);
        }
        json!({"status": status})
    }
}

async fn patch_status(pods: &Api<Pod>, name: &str, body: &serde_json::Value) {
    let _ = pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await;
}

fn waiting(reason: &str, message: &str) -> serde_json::Value {
    json!({"waiting": {"reason": reason, "message": message}})
}

/// Everything a pod reads before it starts: the env and the files of its volumes.
async fn materialize(
    s: &Shared,
    p: &Pod,
    c: &Container,
    dir: &Path,
    ip: &str,
) -> Result<(Vec<(String, String)>, Vec<String>), env::ConfigError> {
    let ns = p.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), &ns);
    let mut src = env::Sources {
        pod_ip: ip.to_owned(),
        ..env::Sources::default()
    };
    let spec = p.spec.clone().unwrap_or_default();
    let mut wanted_secrets: HashSet<String> = HashSet::new();
    let mut wanted_maps: HashSet<String> = HashSet::new();
    for e in c.env.iter().flatten() {
        if let Some(f) = &e.value_from {
            if let Some(k) = &f.secret_key_ref {
                wanted_secrets.insert(k.name.clone());
            }
            if let Some(k) = &f.config_map_key_ref {
                wanted_maps.insert(k.name.clone());
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(sv) = &v.secret {
            wanted_secrets.insert(sv.secret_name.clone().unwrap_or_default());
        }
        if let Some(cm) = &v.config_map {
            wanted_maps.insert(cm.name.clone());
        }
    }
    for name in wanted_secrets {
        if let Ok(Some(sec)) = secrets.get_opt(&name).await {
            let mut data: BTreeMap<String, String> = sec
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            data.extend(sec.string_data.unwrap_or_default());
            src.secrets.insert(name, data);
        }
    }
    for name in wanted_maps {
        if let Ok(Some(cm)) = maps.get_opt(&name).await {
            src.config_maps.insert(name, cm.data.unwrap_or_default());
        }
    }
    // Volumes to files; mount paths to their directories.
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for v in spec.volumes.iter().flatten() {
        let vdir = dir.join("volumes").join(&v.name);
        let _ = std::fs::create_dir_all(&vdir);
        let files: BTreeMap<String, String> = if let Some(sv) = &v.secret {
            let name = sv.secret_name.clone().unwrap_or_default();
            match src.secrets.get(&name) {
                Some(d) => d.clone(),
                None if sv.optional == Some(true) => BTreeMap::new(),
                None => {
                    return Err(env::ConfigError(format!(
                        "secret {name:?} not found (volume {})",
                        v.name
                    )));
                }
            }
        } else if let Some(cm) = &v.config_map {
            match src.config_maps.get(&cm.name) {
                Some(d) => d.clone(),
                None if cm.optional == Some(true) => BTreeMap::new(),
                None => {
                    return Err(env::ConfigError(format!(
                        "configmap {:?} not found (volume {})",
                        cm.name, v.name
                    )));
                }
            }
        } else if let Some(pr) = &v.projected {
            // The ServiceAccount admission's kube-api-access volume: token, CA and namespace.
            let mut files = BTreeMap::new();
            for src_ in pr.sources.iter().flatten() {
                if let Some(t) = &src_.service_account_token {
                    let token = service_account_token(s, p)
                        .await
                        .map_err(|e| env::ConfigError(format!("TokenRequest: {e:#}")))?;
                    files.insert(t.path.clone(), token);
                }
                if let Some(cm) = &src_.config_map {
                    for item in cm.items.iter().flatten() {
                        if item.key == "ca.crt" {
                            files.insert(
                                item.path.clone(),
                                std::fs::read_to_string(&s.cfg.ca_file).unwrap_or_default(),
                            );
                        }
                    }
                }
                if let Some(d) = &src_.downward_api {
                    for item in d.items.iter().flatten() {
                        if let Some(f) = &item.field_ref {
                            let val = env::resolve(
                                p,
                                &[k8s_openapi::api::core::v1::EnvVar {
                                    name: "X".into(),
                                    value: None,
                                    value_from: Some(k8s_openapi::api::core::v1::EnvVarSource {
                                        field_ref: Some(f.clone()),
                                        ..Default::default()
                                    }),
                                }],
                                &src,
                            )?;
                            files.insert(
                                item.path.clone(),
                                val.first().map(|x| x.1.clone()).unwrap_or_default(),
                            );
                        }
                    }
                }
            }
            files
        } else {
            BTreeMap::new()
        };
        for (k, val) in files {
            let _ = std::fs::write(vdir.join(k), val);
        }
        for m in c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.name == v.name)
        {
            mounts.push((m.mount_path.clone(), vdir.clone()));
        }
    }
    mounts.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
    let rewrite = |s: &str| -> String {
        for (from, to) in &mounts {
            if let Some(rest) = s.strip_prefix(from.as_str())
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return format!("{}{rest}", to.display());
            }
        }
        s.to_owned()
    };
    let mut envs = env::resolve(p, c.env.as_deref().unwrap_or(&[]), &src)?;
    for (_, v) in &mut envs {
        *v = rewrite(v);
    }
    let vars: BTreeMap<String, String> = envs.iter().cloned().collect();
    let args: Vec<String> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .map(|a| rewrite(&env::expand(a, &vars)))
        .collect();
    Ok((envs, args))
}

/// A bound TokenRequest token for the pod's ServiceAccount.
async fn service_account_token(s: &Shared, p: &Pod) -> anyhow::Result<String> {
    let ns = p.namespace().unwrap_or_default();
    let sa = p
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(s.client.clone(), &ns);
    let req = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": p.name_any(), "uid": p.uid()},
        },
    });
    let r: serde_json::Value = accounts
        .create_subresource("token", &sa, &PostParams::default(), &req)
        .await
        .context("TokenRequest")?;
    Ok(r["status"]["token"]
        .as_str()
        .context("no token")?
        .to_owned())
}

/// A kubeconfig for the pod's ServiceAccount (a bound TokenRequest token).
async fn in_cluster_kubeconfig(s: &Shared, p: &Pod, dir: &Path) -> anyhow::Result<PathBuf> {
    let ns = p.namespace().unwrap_or_default();
    let token = service_account_token(s, p).await?;
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u, namespace: {ns}}}\ncurrent-context: x\n",
        s.cfg.server,
        s.cfg.ca_file.display()
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn http_ok(ip: &str, port: i32, path: &str) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect((ip, u16::try_from(port).ok()?))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = vec![0u8; 64];
        let n = s.read(&mut buf).await.ok()?;
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        let code: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some((200..400).contains(&code))
    };
    tokio::time::timeout(Duration::from_secs(1), fut)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

fn probe_target(c: &Container, readiness: bool) -> Option<(i32, String, u64, u32)> {
    let p = if readiness {
        c.readiness_probe.as_ref()?
    } else {
        c.liveness_probe.as_ref()?
    };
    let h = p.http_get.as_ref()?;
    let port = match &h.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => *i,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(name) => {
            c.ports
                .iter()
                .flatten()
                .find(|cp| cp.name.as_deref() == Some(name))?
                .container_port
        }
    };
    Some((
        port,
        h.path.clone().unwrap_or_else(|| "/".into()),
        u64::try_from(p.period_seconds.unwrap_or(10)).unwrap_or(10) * 1000,
        u32::try_from(p.failure_threshold.unwrap_or(3)).unwrap_or(3),
    ))
}

/// A container's exit code as a kubelet reports it: the process's code, or 128 + the signal
/// that ended it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(137)
}

/// A `terminated` container state.
fn terminated(exit: i32) -> serde_json::Value {
    json!({"terminated": {
        "exitCode": exit, "finishedAt": now(),
        "reason": if exit == 0 { "Completed" } else { "Error" },
    }})
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status();
}

/// Runs one pod until it is deleted (or gone).
async fn supervise(s: Arc<Shared>, p: Pod, mut stop: watch::Receiver<Option<i64>>) {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let uid = p.uid().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &ns);
    let dir = s.cfg.work_dir.join(&uid);
    let _ = std::fs::create_dir_all(&dir);
    let started_at = now();
    let Some(c) = p.spec.as_ref().and_then(|s| s.containers.first()).cloned() else {
        return;
    };
    let n = s.next_ip.fetch_add(1, Ordering::Relaxed);
    let [a, b] = s.cfg.ip_base;
    let ip = format!("127.{a}.{}.{}", u32::from(b) + n / 250, n % 250 + 2);
    let mut st = Status {
        phase: "Pending",
        ip: String::new(),
        ready: false,
        started: false,
        restarts: 0,
        state: waiting("ContainerCreating", ""),
        last: None,
        reason: None,
    };
    let final_delete = async |pods: &Api<Pod>| {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let _ = pods.delete(&name, &dp).await;
    };
    if let Some(why) = unsupported(&p) {
        st.phase = "Failed";
        st.state = waiting("Unsupported", &why);
        st.reason = Some((
            "Unsupported".into(),
            format!("the process kubelet does not support {why}"),
        ));
        patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
        let _ = stop.wait_for(Option::is_some).await;
        final_delete(&pods).await;
        return;
    }
    let restart_policy = p
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_else(|| "Always".into());
    let mut backoff = Duration::from_millis(500);
    loop {
        // Image, config, volumes: retried until they resolve or the pod is deleted.
        let exe = loop {
            if stop.borrow().is_some() {
                final_delete(&pods).await;
                return;
            }
            let image = c.image.clone().unwrap_or_default();
            let Some(exe) = executable(&s.cfg, &image) else {
                st.state = waiting(
                    "ImagePullBackOff",
                    &format!("image {image:?} is not in the process kubelet's table"),
                );
                patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
                let _ = tokio::time::timeout(Duration::from_secs(1), stop.changed()).await;
                continue;
            };
            break exe;
        };
        let (envs, args) = match materialize(&s, &p, &c, &dir, &ip).await {
            Ok(v) => v,
            Err(e) => {
                st.state = waiting("CreateContainerConfigError", &e.0);
                patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
                let _ = tokio::time::timeout(Duration::from_secs(1), stop.changed()).await;
                if stop.borrow().is_some() {
                    final_delete(&pods).await;
                    return;
                }
                continue;
            }
        };
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.args(&args)
            .env_clear()
            .envs(envs.iter().cloned())
            .kill_on_drop(true);
        let automount = p
            .spec
            .as_ref()
            .and_then(|s| s.automount_service_account_token)
            != Some(false);
        if automount
            && !envs.iter().any(|(k, _)| k == "KUBECONFIG")
            && let Ok(k) = in_cluster_kubeconfig(&s, &p, &dir).await
        {
            cmd.env("KUBECONFIG", k);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("log"));
        if let Ok(log) = log {
            if let Ok(l2) = log.try_clone() {
                cmd.stdout(l2);
            }
            cmd.stderr(log);
        }
        let mut child = match cmd.spawn() {
            Ok(ch) => ch,
            Err(e) => {
                st.state = waiting("RunContainerError", &e.to_string());
                patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
                let _ = tokio::time::timeout(backoff, stop.changed()).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        st.phase = "Running";
        st.ip.clone_from(&ip);
        st.started = true;
        st.state = json!({"running": {"startedAt": now()}});
        patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
        let readiness = probe_target(&c, true);
        let liveness = probe_target(&c, false);
        let mut next_ready = tokio::time::Instant::now();
        let mut next_live = tokio::time::Instant::now() + Duration::from_secs(1);
        let mut live_failures = 0u32;
        let exit = loop {
            tokio::select! {
                r = child.wait() => break r.map_or(137, exit_code),
                _ = stop.changed() => {
                    let grace = stop.borrow().unwrap_or(0);
                    if let Some(pid) = child.id() {
                        signal(pid, "-TERM");
                    }
                    let secs = u64::try_from(grace).unwrap_or(0);
                    let exit = match tokio::time::timeout(Duration::from_secs(secs), child.wait()).await {
                        Ok(r) => r.map_or(137, exit_code),
                        Err(_) => {
                            let _ = child.kill().await;
                            137
                        }
                    };
                    // Like a kubelet: the terminal phase and the container's exit code go into
                    // the status before the final delete, so a watcher sees how the pod ended.
                    st.ready = false;
                    st.phase = if exit == 0 { "Succeeded" } else { "Failed" };
                    st.state = terminated(exit);
                    patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
                    final_delete(&pods).await;
                    return;
                }
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            let now_i = tokio::time::Instant::now();
            if now_i >= next_ready {
                let ready = match &readiness {
                    Some((port, path, period, _)) => {
                        next_ready = now_i + Duration::from_millis((*period).min(1000));
                        http_ok(&ip, *port, path).await
                    }
                    None => true,
                };
                if ready != st.ready {
                    st.ready = ready;
                    patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
                }
            }
            if let Some((port, path, period, threshold)) = &liveness
                && now_i >= next_live
            {
                next_live = now_i + Duration::from_millis(*period);
                if http_ok(&ip, *port, path).await {
                    live_failures = 0;
                } else {
                    live_failures += 1;
                    if live_failures >= *threshold {
                        let _ = child.kill().await;
                    }
                }
            }
        };
        st.ready = false;
        st.last = Some(terminated(exit));
        let again = match restart_policy.as_str() {
            "Never" => false,
            "OnFailure" => exit != 0,
            _ => true,
        };
        if !again {
            st.phase = if exit == 0 { "Succeeded" } else { "Failed" };
            st.state = st.last.clone().unwrap_or_default();
            patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
            let _ = stop.wait_for(Option::is_some).await;
            final_delete(&pods).await;
            return;
        }
        st.restarts += 1;
        st.state = waiting(
            "CrashLoopBackOff",
            &format!(
                "back-off {} ms restarting the container",
                backoff.as_millis()
            ),
        );
        patch_status(&pods, &name, &st.to_json(&c, &started_at)).await;
        let _ = tokio::time::timeout(backoff, stop.changed()).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
        if stop.borrow().is_some() {
            final_delete(&pods).await;
            return;
        }
    }
}
