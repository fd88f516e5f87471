//! The operator's controller on the real kube-apiserver (issue 18 items 4–6): it waits for the
//! Redis Secret, creates the node pods, the PodDisruptionBudget and the generated Secrets, and
//! rolls a version bump out by surging a new pod, writing the relocation intent, calling
//! `Relocate`, and deleting each old pod only once its host reports the relocation completed
//! and safe. The doubles (scripted hosts, a status-only kubelet) and the invariant watcher are
//! in `operator_common`.

mod operator_common;

use std::collections::HashSet;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::Api;
use operator_common::{Harness, condition};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_bump_relocates_each_old_pod_once_and_deletes_it_only_when_safe()
-> anyhow::Result<()> {
    let Some(h) = Harness::start("operator", 3).await? else {
        return Ok(());
    };
    h.create_mesh(json!({})).await?;

    // No Redis Secret: blocked, and nothing is created.
    h.wait_mesh("StoreSecretMissing", |m| {
        condition(m, "RolloutBlocked") == Some(("True".into(), "StoreSecretMissing".into()))
    })
    .await?;
    ensure!(
        h.pod_names().await?.is_empty(),
        "pods created without the store Secret"
    );
    h.create_store_secret().await?;

    // Two pods, Ready, named deterministically and owned by the Mesh.
    let m = h.wait_ready(1, 2).await?;
    let status = m.status.clone().context("status")?;
    ensure!(
        status.ready_replicas == 2 && status.updated_replicas == 2,
        "{status:?}"
    );
    let rev1 = status.update_revision.clone();
    let names = h.pod_names().await?;
    ensure!(
        names
            == [
                format!("game-{}-0", &rev1[..8]),
                format!("game-{}-1", &rev1[..8])
            ],
        "names {names:?}"
    );
    for p in h.pods.list(&Default::default()).await?.items {
        let o = p.owner_references();
        ensure!(
            o.len() == 1 && o[0].kind == "Mesh" && o[0].controller == Some(true),
            "owner {o:?}"
        );
    }
    for s in ["game-mesh", "game-admin"] {
        ensure!(
            h.secrets.get_opt(s).await?.is_some(),
            "generated Secret {s} missing"
        );
    }
    let pdb: Api<PodDisruptionBudget> = h.ns.api();
    let pdb = pdb.get("game").await.context("the PodDisruptionBudget")?;
    ensure!(pdb.spec.and_then(|s| s.max_unavailable).is_some());

    // The version bump.
    h.patch_spec(json!({"applicationVersion": 2, "image": "zlink-node:2"}))
        .await?;
    let m = h.wait_ready(2, 2).await?;
    ensure!(m.status.context("status")?.update_revision != rev1);

    let violations = h.violations();
    ensure!(violations.is_empty(), "invariants broken: {violations:?}");
    let deleted = h.deleted();
    let old: HashSet<String> = names.into_iter().collect();
    ensure!(
        deleted.iter().cloned().collect::<HashSet<_>>() == old,
        "deleted {deleted:?}, expected the old pods {old:?}"
    );
    // One relocation id per old pod, and the id names the pod: `<uid>-<attempt>`.
    let ids = h.ids();
    ensure!(
        ids.len() == 2,
        "Relocate went to {} pods: {ids:?}",
        ids.len()
    );
    for (uid, set) in &ids {
        ensure!(set.len() == 1, "pod {uid} got ids {set:?}");
        ensure!(
            set.iter().all(|id| id == &format!("{uid}-1")),
            "ids {set:?} of {uid}"
        );
    }
    // Every object moved to the new pods.
    let objects = h.hosts.objects();
    ensure!(objects.values().sum::<u64>() == 20, "objects {objects:?}");
    // The controller's metrics saw it all.
    let m = h.metrics.as_ref().context("metrics")?;
    ensure!(m.actions("create_pod", true) >= 4, "{}", m.encode());
    ensure!(
        m.actions("write_intent", true) >= 2 && m.actions("relocate", true) >= 2,
        "{}",
        m.encode()
    );
    ensure!(m.actions("delete_pod", true) == 2, "{}", m.encode());
    ensure!(
        m.encode()
            .contains("zlink_operator_reconciles_total{controller=\"mesh\",result=\"ok\"}")
    );
    eprintln!("rollout: deleted {deleted:?}; ids {ids:?}; objects now {objects:?}");
    Ok(())
}
