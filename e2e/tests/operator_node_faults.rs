//! Node faults at the controller level (issue 18 "Bad input and faults", acceptance 5
//! "Faults"), with the real HostAdmin client and `zlink-fake-node` pods under the process
//! kubelet, each fault made by the fake itself (`FAKE_NODE_FAULT`, for one version only):
//! - a new pod never Ready: `Progressing=False/ProgressDeadlineExceeded` and
//!   `RolloutBlocked/NewPodNotReady`, and no old pod relocates; a newer version without the
//!   fault resumes the rollout;
//! - an old pod's admin API unreachable: `Degraded/HostUnreachable` and the pod's reason; it is
//!   skipped (no relocation, no delete) while the new pod comes up;
//! - an old pod's token rejected: `Degraded/AdminAuthFailed`, the same way.
//!
//! Each sets its condition reason and a Warning event with that reason. The three Meshes run at
//! once in one namespace: one process kubelet serves them all (its Node names are fixed, so a
//! binary runs one).

mod operator_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use operator_common::{condition, wait_for};
use serde_json::json;
use zlink_e2e::k8s;
use zlink_operator::crd::Mesh;

/// A Mesh `name` of `replicas` fake nodes at v1, its pods broken by `fault` at `fault_version`.
async fn create_mesh(
    meshes: &Api<Mesh>,
    work: &Path,
    name: &str,
    replicas: i32,
    fault: &str,
    fault_version: i64,
) -> anyhow::Result<()> {
    let mesh: Mesh = serde_json::from_value(json!({
        "apiVersion": "zlink.io/v1alpha1", "kind": "Mesh",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "image": "zlink-fake-node:1",
            "applicationVersion": 1,
            "locationStore": {"redisUrlSecretRef": {"name": "redis", "key": "url"}, "namespace": name},
            "rollout": {"progressDeadlineSeconds": 3},
            "shutdown": {"relocationDeadlineSeconds": 5, "drainDeadlineSeconds": 1},
            "template": {"env": [
                {"name": "FAKE_NODE_DIR", "value": work.join(name).join("peers").display().to_string()},
                {"name": "FAKE_NODE_EVENTS", "value": work.join(name).join("events.jsonl").display().to_string()},
                {"name": "FAKE_NODE_FAULT", "value": fault},
                {"name": "FAKE_NODE_FAULT_VERSION", "value": fault_version.to_string()},
            ]},
        },
    }))?;
    meshes.create(&PostParams::default(), &mesh).await?;
    Ok(())
}

async fn bump(meshes: &Api<Mesh>, name: &str) -> anyhow::Result<()> {
    meshes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"applicationVersion": 2, "image": "zlink-fake-node:2"}})),
        )
        .await?;
    Ok(())
}

/// The Mesh's pods by version label.
async fn pods_of(pods: &Api<Pod>, mesh: &str) -> anyhow::Result<BTreeMap<String, Pod>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("zlink.io/mesh={mesh}")))
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect())
}

/// The Warning events about Mesh `name`, by reason.
async fn warnings(events: &Api<Event>, name: &str) -> anyhow::Result<Vec<String>> {
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Mesh")
        })
        .filter_map(|e| e.reason)
        .collect())
}

/// No pod of `mesh` was relocated, marked for relocation or deleted: the fakes recorded no
/// relocation step, no pod carries the intent annotation, and the `old` pods are all there,
/// not terminating.
async fn untouched(pods: &Api<Pod>, work: &Path, mesh: &str, old: &[String]) -> anyhow::Result<()> {
    let steps = std::fs::read_to_string(work.join(mesh).join("events.jsonl")).unwrap_or_default();
    ensure!(steps.is_empty(), "{mesh}: a node relocated: {steps}");
    let now = pods_of(pods, mesh).await?;
    for name in old {
        let p = now
            .get(name)
            .with_context(|| format!("{mesh}: old pod {name} is gone"))?;
        ensure!(
            p.metadata.deletion_timestamp.is_none(),
            "{mesh}: old pod {name} is being deleted"
        );
        ensure!(
            !p.annotations().contains_key("zlink.io/relocation"),
            "{mesh}: old pod {name} was given a relocation: {:?}",
            p.annotations()
        );
    }
    Ok(())
}

/// `mesh`'s v1 pods, once there are `n` of them running with an IP.
async fn v1_pods(pods: &Api<Pod>, mesh: &str, n: usize) -> anyhow::Result<Vec<String>> {
    wait_for(&format!("{mesh}: {n} running v1 pods"), async || {
        let now = pods_of(pods, mesh).await?;
        let running: Vec<String> = now
            .iter()
            .filter(|(_, p)| {
                p.status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_deref())
                    .is_some()
                    && p.labels().get("zlink.io/version").map(String::as_str) == Some("1")
            })
            .map(|(n, _)| n.clone())
            .collect();
        Ok((running.len() == n).then_some(running))
    })
    .await
}

/// A fault on the old pods' admin API (`fault` at v1): reported under `reason` in `Degraded`
/// and on each old pod, announced by a Warning event; after a version bump the new pod comes up
/// and reports Serving while the old one is skipped, never relocated or deleted.
async fn old_pods_unreachable(
    meshes: &Api<Mesh>,
    pods: &Api<Pod>,
    events: &Api<Event>,
    work: &Path,
    mesh: &str,
    reason: &'static str,
) -> anyhow::Result<()> {
    let old = v1_pods(pods, mesh, 1).await?;
    wait_for(&format!("{mesh}: Degraded/{reason}"), async || {
        let m = meshes.get(mesh).await?;
        let reported = m.status.as_ref().is_some_and(|s| {
            s.pods
                .iter()
                .any(|p| old.contains(&p.name) && p.reason == reason)
        });
        Ok(
            (condition(&m, "Degraded") == Some(("True".into(), reason.into())) && reported)
                .then_some(()),
        )
    })
    .await?;
    bump(meshes, mesh).await?;
    wait_for(
        &format!("{mesh}: the new pod Serving beside the skipped one"),
        async || {
            let m = meshes.get(mesh).await?;
            let s = m.status.clone().unwrap_or_default();
            let new_serving = s
                .pods
                .iter()
                .any(|p| !old.contains(&p.name) && p.phase == "Serving");
            let old_reported = s
                .pods
                .iter()
                .any(|p| old.contains(&p.name) && p.reason == reason);
            Ok(
                (new_serving && old_reported && s.observed_generation == m.metadata.generation)
                    .then_some(()),
            )
        },
    )
    .await?;
    untouched(pods, work, mesh, &old).await?;
    let w = warnings(events, mesh).await?;
    ensure!(
        w.iter().any(|r| r == reason),
        "{mesh}: no Warning event {reason}: {w:?}"
    );
    Ok(())
}

/// A new pod that never becomes Ready: the progress deadline (3 s) blocks the rollout and no
/// old pod relocates.
async fn new_pod_never_ready(
    meshes: &Api<Mesh>,
    pods: &Api<Pod>,
    events: &Api<Event>,
    work: &Path,
    mesh: &str,
) -> anyhow::Result<()> {
    wait_for(&format!("{mesh}: Ready at v1"), async || {
        let m = meshes.get(mesh).await?;
        Ok(
            (condition(&m, "Ready") == Some(("True".into(), "AllReplicasReady".into())))
                .then_some(()),
        )
    })
    .await?;
    let old = v1_pods(pods, mesh, 2).await?;
    bump(meshes, mesh).await?;
    let m = wait_for(&format!("{mesh}: ProgressDeadlineExceeded"), async || {
        let m = meshes.get(mesh).await?;
        Ok((condition(&m, "Progressing")
            == Some(("False".into(), "ProgressDeadlineExceeded".into()))
            && condition(&m, "RolloutBlocked") == Some(("True".into(), "NewPodNotReady".into())))
        .then_some(m))
    })
    .await?;
    let new: Vec<String> = pods_of(pods, mesh)
        .await?
        .into_keys()
        .filter(|n| !old.contains(n))
        .collect();
    ensure!(new.len() == 1, "{mesh}: one surge pod, got {new:?}");
    let reported = m
        .status
        .as_ref()
        .and_then(|s| s.pods.iter().find(|p| p.name == new[0]))
        .map(|p| p.reason.clone());
    ensure!(
        reported.as_deref() == Some("ProgressDeadlineExceeded"),
        "{mesh}: the new pod's reason is {reported:?}"
    );
    untouched(pods, work, mesh, &old).await?;
    let w = warnings(events, mesh).await?;
    ensure!(
        w.iter().any(|r| r == "ProgressDeadlineExceeded")
            && w.iter().any(|r| r == "NewPodNotReady"),
        "{mesh}: Warning events {w:?}"
    );
    // A newer version without the fault resumes the rollout: the old pods relocate now (their
    // fakes record it in the same file `untouched` read empty) and go.
    meshes
        .patch(
            mesh,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"applicationVersion": 3, "image": "zlink-fake-node:3"}})),
        )
        .await?;
    wait_for(&format!("{mesh}: Ready at v3"), async || {
        let m = meshes.get(mesh).await?;
        let s = m.status.clone().unwrap_or_default();
        Ok(
            (condition(&m, "Ready") == Some(("True".into(), "AllReplicasReady".into()))
                && s.current_version == Some(3)
                && s.observed_generation == m.metadata.generation)
                .then_some(()),
        )
    })
    .await?;
    let steps = std::fs::read_to_string(work.join(mesh).join("events.jsonl"))?;
    for name in &old {
        ensure!(
            steps
                .lines()
                .any(|l| l.contains(&format!("\"pod\":\"{name}\"")) && l.contains("\"completed\"")),
            "{mesh}: old pod {name} did not relocate after the fix: {steps}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_faults_set_their_reasons_and_no_unsafe_pod_relocates_or_goes() -> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let ns = plane.namespace("nodefaults").await?;
    operator_common::install_crds(ns.client()).await?;
    let work = std::env::temp_dir().join(format!("zlink-node-faults-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let kubelet = operator_common::process_kubelet(
        plane,
        &[("zlink-fake-node", env!("CARGO_BIN_EXE_zlink-fake-node"))],
        [45, 0],
        work.join("pods"),
        true,
    )
    .await?;
    let controller = operator_common::admin_controller(&ns, Duration::from_secs(2));
    operator_common::create_store_secret(&ns.api()).await?;
    let meshes: Api<Mesh> = ns.api();
    let pods: Api<Pod> = ns.api();
    let events: Api<Event> = ns.api();
    create_mesh(&meshes, &work, "late", 2, "not-ready", 2).await?;
    create_mesh(&meshes, &work, "dark", 1, "no-admin", 1).await?;
    create_mesh(&meshes, &work, "locked", 1, "bad-token", 1).await?;
    let (late, dark, locked) = tokio::join!(
        new_pod_never_ready(&meshes, &pods, &events, &work, "late"),
        old_pods_unreachable(&meshes, &pods, &events, &work, "dark", "HostUnreachable"),
        old_pods_unreachable(&meshes, &pods, &events, &work, "locked", "AdminAuthFailed"),
    );

    controller.stop().await;
    kubelet.stop().await;
    late.context("a new pod never Ready")?;
    dark.context("an unreachable admin API")?;
    locked.context("a rejected admin token")?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
