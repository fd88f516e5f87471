//! A rollout end to end (issue 18 acceptance 5, "Rollout"): the operator's controller with the
//! real HostAdmin client, node pods built by the operator and run by the process kubelet as
//! `zlink-fake-node` processes (the pod spec's env, Secret volumes, probes and grace period all
//! real), on the real kube-apiserver. A watcher checks on every pod event that the mesh never has
//! more than `replicas + maxSurge` pods, and that when a pod is marked for deletion its host had
//! reported the annotated relocation `Completed`, `Relocated` and SafeToShutdown.

mod operator_common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use operator_common::{condition, wait_for};
use serde_json::json;
use zlink_e2e::k8s;
use zlink_e2e::kubelet;
use zlink_operator::controller::{self, Config, Context};
use zlink_operator::crd::Mesh;
use zlink_operator::hosts::{AdminHosts, Hosts as _, PodAddr};
use zlink_operator::planner::{HostObservation, HostState, HostView, RelocationState};

#[derive(Default)]
struct Seen {
    violations: Vec<String>,
    deleted: Vec<String>,
    max_pods: usize,
}

/// Watches the pods; keeps each live pod's latest host status (through its own HostAdmin
/// client), and checks the invariants when a pod is marked for deletion.
async fn watch(pods: Api<Pod>, secrets: Api<Secret>, limit: usize, seen: Arc<Mutex<Seen>>) {
    let (tx, _rx) = futures::channel::mpsc::unbounded();
    let hosts = AdminHosts::new(zlink_operator::pods::ADMIN_PORT as u16, tx);
    let mut last: HashMap<String, HostView> = HashMap::new();
    let mut live: HashMap<String, Pod> = HashMap::new();
    let mut marked: HashSet<String> = HashSet::new();
    let mut stream = watcher::watcher(pods, watcher::Config::default()).boxed();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        let event = tokio::select! {
            e = stream.next() => match e { Some(Ok(e)) => Some(e), Some(Err(_)) => None, None => return },
            _ = tick.tick() => None,
        };
        match event {
            Some(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                live.insert(p.uid().unwrap_or_default(), p);
            }
            Some(watcher::Event::Delete(p)) => {
                live.remove(&p.uid().unwrap_or_default());
            }
            _ => {}
        }
        let token = secrets
            .get_opt("game-admin")
            .await
            .ok()
            .flatten()
            .and_then(|s| s.data)
            .and_then(|d| {
                d.get("admin-token")
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            })
            .unwrap_or_default();
        let mut s = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.max_pods = s.max_pods.max(live.len());
        if live.len() > limit {
            let n = live.len();
            s.violations
                .push(format!("{n} pods, more than replicas + maxSurge = {limit}"));
        }
        for (uid, p) in &live {
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
            if p.metadata.deletion_timestamp.is_some() {
                if marked.insert(uid.clone()) {
                    s.deleted.push(p.name_any());
                    let intent = p
                        .annotations()
                        .get("zlink.io/relocation")
                        .and_then(|a| serde_json::from_str::<serde_json::Value>(a).ok())
                        .and_then(|v| v["id"].as_str().map(str::to_owned));
                    let ok = last.get(uid).is_some_and(|v| {
                        v.state == HostState::Relocated
                            && v.safe_to_shutdown
                            && v.relocation.as_ref().is_some_and(|r| {
                                r.state == RelocationState::Completed
                                    && Some(&r.id) == intent.as_ref()
                            })
                    });
                    if !ok {
                        s.violations.push(format!(
                            "{} marked for deletion while its host was {:?} (intent {intent:?})",
                            p.name_any(),
                            last.get(uid)
                        ));
                    }
                }
                continue;
            }
            let Some(ip) = ip else { continue };
            let addr = PodAddr {
                mesh: ObjectRef::<Mesh>::new("game"),
                name: p.name_any(),
                uid: uid.clone(),
                ip,
            };
            if let HostObservation::Status(v) = hosts.observe(&addr, &token) {
                last.insert(uid.clone(), v);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_of_fake_node_pods_deletes_each_old_pod_only_after_a_safe_relocation()
-> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let ns = plane.namespace("rollout").await?;
    operator_common::install_crds(ns.client()).await?;
    let env = plane.env();
    let work = std::env::temp_dir().join(format!("zlink-rollout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let kcfg = kubelet::Config {
        nodes: 3,
        images: BTreeMap::from([(
            "zlink-fake-node".to_owned(),
            env!("CARGO_BIN_EXE_zlink-fake-node").into(),
        )]),
        ip_base: [42, 0],
        work_dir: work.join("pods"),
        bind_unscheduled: true,
        server: env.get("ZLINK_K8S_SERVER").cloned().context("server")?,
        ca_file: env.get("ZLINK_K8S_CA_FILE").cloned().context("CA")?.into(),
    };
    let (stop_k, stop_k_rx) = tokio::sync::oneshot::channel::<()>();
    let kubelet_task = tokio::spawn(kubelet::run(plane.client().await?, kcfg, async move {
        let _ = stop_k_rx.await;
    }));
    let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded();
    let ctx = Arc::new(Context::new(
        ns.client(),
        Arc::new(AdminHosts::new(
            zlink_operator::pods::ADMIN_PORT as u16,
            wake_tx,
        )),
        Config {
            namespace: Some(ns.name().to_owned()),
            store_missing_requeue: Duration::from_millis(500),
            resync: Duration::from_secs(5),
            instance: "e2e".into(),
        },
    ));
    let (stop_c, stop_c_rx) = tokio::sync::oneshot::channel::<()>();
    let controller_task = tokio::spawn(controller::run(ctx, wake_rx, async move {
        let _ = stop_c_rx.await;
    }));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watcher_task = tokio::spawn(watch(ns.api(), ns.api(), 3, Arc::clone(&seen)));

    let secrets: Api<Secret> = ns.api();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "redis"}, "stringData": {"url": "redis://127.0.0.1:6379"},
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;
    let peers = work.join("peers");
    let mesh: Mesh = serde_json::from_value(json!({
        "apiVersion": "zlink.io/v1alpha1", "kind": "Mesh",
        "metadata": {"name": "game"},
        "spec": {
            "replicas": 2,
            "image": "zlink-fake-node:1",
            "applicationVersion": 1,
            "locationStore": {"redisUrlSecretRef": {"name": "redis", "key": "url"}, "namespace": "game"},
            "shutdown": {"relocationDeadlineSeconds": 5, "drainDeadlineSeconds": 1},
            "template": {"env": [
                {"name": "FAKE_NODE_DIR", "value": peers.display().to_string()},
                {"name": "FAKE_NODE_OBJECTS", "value": "5"},
                {"name": "FAKE_NODE_STEP_MS", "value": "200"},
            ]},
        },
    }))?;
    let meshes: Api<Mesh> = ns.api();
    meshes.create(&PostParams::default(), &mesh).await?;
    let ready = |version: i64| {
        let meshes = meshes.clone();
        async move {
            wait_for(&format!("Ready at v{version}"), async || {
                let m = meshes.get("game").await?;
                let s = m.status.clone().unwrap_or_default();
                Ok(
                    (condition(&m, "Ready") == Some(("True".into(), "AllReplicasReady".into()))
                        && s.current_version == Some(version)
                        && s.replicas == 2
                        && s.observed_generation == m.metadata.generation)
                        .then_some(m),
                )
            })
            .await
        }
    };
    ready(1).await?;
    let pods: Api<Pod> = ns.api();
    let old: HashSet<String> = pods
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    meshes
        .patch(
            "game",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"applicationVersion": 2, "image": "zlink-fake-node:2"}})),
        )
        .await?;
    let m = ready(2).await?;
    let now: HashSet<String> = pods
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    ensure!(now.is_disjoint(&old), "old pods remain: {now:?}");
    for p in m.status.context("status")?.pods {
        ensure!(p.phase == "Serving" && p.rid.starts_with(&p.name), "{p:?}");
    }

    let _ = stop_c.send(());
    let _ = controller_task.await;
    watcher_task.abort();
    let _ = stop_k.send(());
    let _ = kubelet_task.await;
    let s = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    ensure!(
        s.violations.is_empty(),
        "invariants broken: {:?}",
        s.violations
    );
    let deleted: HashSet<String> = s.deleted.iter().cloned().collect();
    ensure!(deleted == old, "deleted {deleted:?}, old {old:?}");
    ensure!(
        s.max_pods == 3,
        "the surge never reached replicas + maxSurge: {}",
        s.max_pods
    );
    eprintln!(
        "rollout over the process kubelet: deleted {:?}, at most {} pods",
        s.deleted, s.max_pods
    );
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
