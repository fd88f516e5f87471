//! The chart installed for real (issue 18 acceptance 5: "Install", "Restarts: leader killed",
//! "Mesh deletion"), on the full control plane (kube-controller-manager runs the Deployment,
//! ReplicaSet and garbage collectors, kube-scheduler places the pods) with the process kubelet
//! running the pods: the chart's operator image is `zlink-e2e-operator` (the operator's own
//! `main`), the Mesh's node image is `zlink-fake-node`.
//!
//! One test, in phases, because a process kubelet owns its Node names (two in one control
//! plane would fight over them):
//! 1. `helm install --wait` with two operator replicas: the Deployment becomes available and
//!    one replica holds the leader Lease.
//! 2. `helm test` passes (`zlink-operator check` in a pod, as that ServiceAccount).
//! 3. The in-pod operator makes a Mesh of two fake nodes Ready; the audit log shows the node
//!    pods created by the chart's ServiceAccount (the pod's TokenRequest credentials).
//! 4. A rollout to v2 starts, and once the first old pod carries its relocation intent the
//!    leader's process is SIGKILLed (its Lease is not released): another operator process takes
//!    the Lease once it expires — never sooner — and finishes the rollout with one relocation
//!    id per old pod, then a scale-up to three; a node pod evicted
//!    through the operator's PodDisruptionBudget exits 0 on its SIGTERM and is replaced.
//! 5. The Mesh is deleted: the garbage collector removes every object it owns, each node pod's
//!    process exits 0 on its SIGTERM (the kubelet records the terminal phase and exit code
//!    before the final delete).
//! 6. `helm uninstall --wait`: the operator pods exit 0 too.
//!
//! SelfSubjectAccessReview denials of the same ServiceAccount are in `operator_chart.rs`.

mod operator_common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context as _, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use operator_common::{condition, wait_for};
use serde_json::json;
use zlink_e2e::k8s;
use zlink_operator::crd::Mesh;

const RELEASE: &str = "zlink";

/// Runs a tool; fails with its output unless it exits 0.
fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("spawn {cmd:?}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "{cmd:?} failed: {text}");
    Ok(text)
}

/// The pid of the process running pod `pod` under the process kubelet: the kubelet gives each
/// pod's process `POD_NAME` (from the chart's fieldRef) on a cleared environment.
fn pid_of(pod: &str, exe_name: &str) -> anyhow::Result<u32> {
    let want = format!("POD_NAME={pod}");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc")? {
        let e = e?;
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let exe = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        if environ.split(|b| *b == 0).any(|v| v == want.as_bytes())
            && exe.ends_with(exe_name.as_bytes())
        {
            found.push(pid);
        }
    }
    ensure!(found.len() == 1, "processes of pod {pod}: {found:?}");
    Ok(found[0])
}

/// How each pod ended, by uid: its status in the watch's `Delete` event (the kubelet's last
/// patch). By uid, since the operator gives a replacement pod the name of the one it replaces.
#[derive(Default)]
struct Ended(HashMap<String, (String, Option<i32>)>);

async fn record_endings(pods: Api<Pod>, ended: Arc<Mutex<Ended>>) {
    let mut stream = watcher::watcher(pods, watcher::Config::default()).boxed();
    while let Some(e) = stream.next().await {
        if let Ok(watcher::Event::Delete(p)) = e {
            let status = p.status.unwrap_or_default();
            let exit = status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code));
            ended
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0
                .insert(
                    p.metadata.uid.unwrap_or_default(),
                    (status.phase.unwrap_or_default(), exit),
                );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_an_operator_that_leads_fails_over_and_collects_a_deleted_mesh()
-> anyhow::Result<()> {
    let Some(plane) = k8s::full_control_plane() else {
        return Ok(());
    };
    let helm = plane
        .env()
        .get("ZLINK_K8S_HELM")
        .cloned()
        .context("scripts/k8s-env printed no ZLINK_K8S_HELM")?;
    let ns = plane.namespace("install").await?;
    let work = std::env::temp_dir().join(format!("zlink-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let kubelet = operator_common::process_kubelet(
        plane,
        &[
            ("zlink-operator", env!("CARGO_BIN_EXE_zlink-e2e-operator")),
            ("zlink-fake-node", env!("CARGO_BIN_EXE_zlink-fake-node")),
        ],
        [43, 0],
        work.join("pods"),
        false,
    )
    .await?;
    let ended = Arc::new(Mutex::new(Ended::default()));
    let endings = tokio::spawn(record_endings(ns.api(), Arc::clone(&ended)));
    let helm_cmd = |args: &[&str]| {
        let mut c = Command::new(&helm);
        c.args(args)
            .args(["--namespace", ns.name()])
            .arg("--kubeconfig")
            .arg(plane.kubeconfig());
        c
    };

    // 1. Install and wait for the Deployment.
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/zlink");
    let t = Instant::now();
    run(helm_cmd(&["install", RELEASE]).arg(&chart).args([
        "--wait",
        "--timeout",
        "120s",
        "--set",
        "replicas=2",
    ]))?;
    eprintln!("helm install --wait: {:.1} s", t.elapsed().as_secs_f64());
    // kube-controller-manager started before helm made the CRDs; its disruption controller
    // cannot find the Mesh's scale subresource until its discovery starts fresh (it did not
    // within 90 s on its own: docs/operator.md, "The PodDisruptionBudget right after install").
    tokio::task::block_in_place(|| plane.restart_controller_manager())?;
    let deployments: Api<Deployment> = ns.api();
    let d = deployments.get(RELEASE).await?;
    let sa = d
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .context("the Deployment names no ServiceAccount")?;
    let available = d.status.as_ref().and_then(|s| s.available_replicas);
    ensure!(
        available == Some(2),
        "available operator replicas: {available:?}"
    );
    let leases: Api<Lease> = ns.api();
    let holder = || async {
        Ok::<_, anyhow::Error>(
            leases
                .get_opt("zlink-operator")
                .await?
                .and_then(|l| l.spec?.holder_identity)
                .filter(|h| !h.is_empty()),
        )
    };
    wait_for("an operator to lead", async || holder().await).await?;
    // 2. helm test.
    let out = run(&mut helm_cmd(&["test", RELEASE, "--timeout", "120s"]))?;
    ensure!(
        out.contains("Phase:") && out.contains("Succeeded"),
        "helm test: {out}"
    );

    // 3. A Mesh the in-pod operator makes Ready.
    let secrets: Api<Secret> = ns.api();
    operator_common::create_store_secret(&secrets).await?;
    let meshes: Api<Mesh> = ns.api();
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
                {"name": "FAKE_NODE_DIR", "value": work.join("peers").display().to_string()},
                {"name": "FAKE_NODE_EVENTS", "value": work.join("events.jsonl").display().to_string()},
                {"name": "FAKE_NODE_STEP_MS", "value": "1500"},
            ]},
        },
    }))?;
    meshes.create(&PostParams::default(), &mesh).await?;
    let ready = |replicas: i32| {
        let meshes = meshes.clone();
        async move {
            wait_for(&format!("the Mesh Ready with {replicas}"), async || {
                let m = meshes.get("game").await?;
                let s = m.status.clone().unwrap_or_default();
                Ok(
                    (condition(&m, "Ready") == Some(("True".into(), "AllReplicasReady".into()))
                        && s.replicas == replicas
                        && s.observed_generation == m.metadata.generation)
                        .then_some(m),
                )
            })
            .await
        }
    };
    let mesh = ready(2).await?;

    // The node pods were created by the chart's ServiceAccount (the in-pod operator's
    // TokenRequest credentials), not by an admin. (Lease writes are not in the audit log.)
    let user = format!("system:serviceaccount:{}:{sa}", ns.name());
    let creators: Vec<String> = plane
        .audit_events()?
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] == ns.name()
                && e["objectRef"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("game-"))
                && e["objectRef"]["subresource"].is_null()
                && e["verb"] == "create"
        })
        .filter_map(|e| e["user"]["username"].as_str().map(str::to_owned))
        .collect();
    ensure!(
        creators.len() == 2 && creators.iter().all(|u| *u == user),
        "the node pods were created by {creators:?}, not twice by {user}"
    );

    // 4. Start a rollout to v2 and, once the first old pod carries its relocation intent,
    // kill the leader's process; another takes over after the Lease expires and finishes the
    // rollout without a second relocation id for any pod.
    let v1_pods: Vec<String> = ns
        .api::<Pod>()
        .list(&ListParams::default().labels("zlink.io/mesh=game"))
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    operator_common::bump_fake_nodes_to_v2(&meshes).await?;
    let relocating = operator_common::wait_relocation_intent(&ns.api(), None).await?;
    let leader = holder().await?.context("no leader")?;
    let leader_pod = leader
        .rsplit_once('_')
        .map_or(leader.as_str(), |(pod, _)| pod)
        .to_owned();
    let pid = pid_of(&leader_pod, "zlink-e2e-operator")?;
    let renewed_before_kill = leases
        .get("zlink-operator")
        .await?
        .spec
        .and_then(|s| s.renew_time)
        .context("the Lease's renewTime")?
        .0;
    let t = Instant::now();
    run(Command::new("kill").args(["-KILL", &pid.to_string()]))?;
    let next = wait_for("another operator process to lead", async || {
        Ok(holder().await?.filter(|h| *h != leader))
    })
    .await?;
    eprintln!(
        "leader {leader} killed while {relocating} relocated; {next} leads after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // No second leader while the dead one's Lease was valid: the new holder acquired it at
    // least a lease duration (15 s) after a renew the dead leader made (less 1 ms: the elector
    // compares milliseconds, the Lease keeps microseconds).
    let acquired = leases
        .get("zlink-operator")
        .await?
        .spec
        .and_then(|s| s.acquire_time)
        .context("the Lease's acquireTime")?
        .0;
    let gap = acquired.duration_since(renewed_before_kill);
    ensure!(
        gap >= k8s_openapi::jiff::SignedDuration::from_millis(14_999),
        "{next} acquired the Lease {gap:?} after the dead leader's renew, inside its 15 s duration"
    );
    wait_for("the Mesh Ready at v2", async || {
        let m = meshes.get("game").await?;
        let s = m.status.clone().unwrap_or_default();
        Ok(
            (condition(&m, "Ready") == Some(("True".into(), "AllReplicasReady".into()))
                && s.current_version == Some(2)
                && s.observed_generation == m.metadata.generation)
                .then_some(()),
        )
    })
    .await?;
    // Each old pod's node relocated once, under one id, across the failover.
    let steps: Vec<serde_json::Value> = std::fs::read_to_string(work.join("events.jsonl"))
        .context("the fake nodes' events")?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    for pod in &v1_pods {
        let mine: Vec<&serde_json::Value> =
            steps.iter().filter(|e| e["pod"] == pod.as_str()).collect();
        let ids: std::collections::BTreeSet<&str> = mine
            .iter()
            .filter_map(|e| e["relocation_id"].as_str())
            .collect();
        let completed = mine.iter().filter(|e| e["event"] == "completed").count();
        ensure!(
            ids.len() == 1 && completed == 1,
            "old pod {pod}: relocation ids {ids:?}, {completed} completed, across the failover"
        );
    }
    meshes
        .patch(
            "game",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    ready(3).await?;

    let pods: Api<Pod> = ns.api();
    // An eviction through the operator's PodDisruptionBudget (what `kubectl drain` does): the
    // pod gets its SIGTERM, exits 0, and the operator replaces it.
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    wait_for("the PDB to allow a disruption", async || {
        let allowed = pdbs
            .get("game")
            .await?
            .status
            .and_then(|s| s.disruptions_allowed)
            .unwrap_or(0);
        Ok((allowed >= 1).then_some(()))
    })
    .await?;
    let (victim, victim_uid) = pods
        .list(&ListParams::default().labels("zlink.io/mesh=game"))
        .await?
        .items
        .first()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .context("no node pod")?;
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        pods.evict(&victim, &kube::api::EvictParams::default()),
    )
    .await
    .context("the eviction did not answer within 30 s")??;
    let evicted = wait_for("the evicted pod's ending", async || {
        Ok(ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0
            .get(&victim_uid)
            .cloned())
    })
    .await?;
    ensure!(
        evicted == ("Succeeded".to_owned(), Some(0)),
        "the evicted pod {victim} ended {evicted:?}"
    );
    wait_for("a replacement for the evicted pod", async || {
        let now = pods
            .list(&ListParams::default().labels("zlink.io/mesh=game"))
            .await?
            .items;
        Ok(
            (now.len() == 3 && now.iter().all(|p| p.uid().as_ref() != Some(&victim_uid)))
                .then_some(()),
        )
    })
    .await?;
    ready(3).await?;

    // 5. Delete the Mesh: the garbage collector takes what it owned, node pods exit 0.
    let mesh_uid = mesh.uid().context("the Mesh's uid")?;
    let node_pods: Vec<(String, String)> = pods
        .list(&ListParams::default().labels("zlink.io/mesh=game"))
        .await?
        .items
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect();
    ensure!(node_pods.len() == 3, "node pods: {node_pods:?}");
    meshes.delete("game", &DeleteParams::background()).await?;
    let owned_by_mesh =
        |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
            refs.iter().any(|o| o.uid == mesh_uid)
        };
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let maps: Api<ConfigMap> = ns.api();
    wait_for(
        "the garbage collector to remove the Mesh's objects",
        async || {
            let lp = ListParams::default();
            let mut left: Vec<String> = Vec::new();
            for p in pods.list(&lp).await?.items {
                if owned_by_mesh(p.owner_references()) {
                    left.push(format!("pod/{}", p.name_any()));
                }
            }
            for s in secrets.list(&lp).await?.items {
                if owned_by_mesh(s.owner_references()) {
                    left.push(format!("secret/{}", s.name_any()));
                }
            }
            for b in pdbs.list(&lp).await?.items {
                if owned_by_mesh(b.owner_references()) {
                    left.push(format!("pdb/{}", b.name_any()));
                }
            }
            for m in maps.list(&lp).await?.items {
                if owned_by_mesh(m.owner_references()) {
                    left.push(format!("configmap/{}", m.name_any()));
                }
            }
            Ok(left.is_empty().then_some(()))
        },
    )
    .await?;
    let node_endings = wait_for("the node pods' endings", async || {
        let e = ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(node_pods
            .iter()
            .map(|(_, uid)| e.0.get(uid).cloned())
            .collect::<Option<Vec<_>>>())
    })
    .await?;
    for ((pod, _), end) in node_pods.iter().zip(&node_endings) {
        ensure!(
            *end == ("Succeeded".to_owned(), Some(0)),
            "node pod {pod} ended {end:?}, not Succeeded with exit 0"
        );
    }

    // 6. Uninstall: the operator pods exit 0 on SIGTERM.
    let operator_pods: Vec<(String, String)> = pods
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/name=zlink-operator,app.kubernetes.io/instance={RELEASE}"
        )))
        .await?
        .items
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect();
    ensure!(operator_pods.len() == 2, "operator pods: {operator_pods:?}");
    run(&mut helm_cmd(&[
        "uninstall",
        RELEASE,
        "--wait",
        "--timeout",
        "120s",
    ]))?;
    let operator_endings = wait_for("the operator pods' endings", async || {
        let e = ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(operator_pods
            .iter()
            .map(|(_, uid)| e.0.get(uid).cloned())
            .collect::<Option<Vec<_>>>())
    })
    .await?;
    for ((pod, _), end) in operator_pods.iter().zip(&operator_endings) {
        ensure!(
            *end == ("Succeeded".to_owned(), Some(0)),
            "operator pod {pod} ended {end:?}, not Succeeded with exit 0"
        );
    }

    endings.abort();
    kubelet.stop().await;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
