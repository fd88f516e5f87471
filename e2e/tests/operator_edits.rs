//! Conflicting edits (issue 18 "Bad input and faults": "a second version bump converges to the
//! newest; a hand-edited PDB or Secret is restored; `kubectl scale` is honoured"), on the real
//! kube-apiserver with the controller and the scripted hosts of `operator_common`:
//! - the PodDisruptionBudget edited by hand is applied back;
//! - a generated Secret is immutable (a data edit gets 422), its labels and owner reference
//!   removed by hand come back, and deleted by hand it is made again with the same value;
//! - a scale through the `scale` subresource (what `kubectl scale` sends) is rolled out;
//! - a pod deleted by hand is replaced;
//! - a second version bump while the first rolls out ends with every pod at the newest, and no
//!   pod deleted unsafe (the harness's watcher).

mod operator_common;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use operator_common::{Harness, wait_for};
use serde_json::json;

fn value(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(key)
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
}

fn max_unavailable(p: &PodDisruptionBudget) -> Option<IntOrString> {
    p.spec.as_ref()?.max_unavailable.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_edits_are_restored_scale_is_honoured_and_a_second_bump_wins() -> anyhow::Result<()> {
    let Some(h) = Harness::start("edits", 4).await? else {
        return Ok(());
    };
    h.create_store_secret().await?;
    h.create_mesh(json!({})).await?;
    let mesh = h.wait_ready(1, 2).await?;
    let mesh_uid = mesh.uid().context("uid")?;

    // The PDB, edited by hand, is applied back (the controller owns it: the edit wakes it).
    let pdbs: Api<PodDisruptionBudget> = h.ns.api();
    let want = max_unavailable(&pdbs.get("game").await?);
    ensure!(want.is_some(), "the PDB has no maxUnavailable");
    pdbs.patch(
        "game",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": 7}})),
    )
    .await?;
    wait_for("the PDB restored", async || {
        Ok((max_unavailable(&pdbs.get("game").await?) == want).then_some(()))
    })
    .await?;

    // The generated admin Secret.
    let name = "game-admin";
    let key = zlink_operator::pods::ADMIN_TOKEN_KEY;
    let s = h.secrets.get(name).await?;
    ensure!(
        s.immutable == Some(true),
        "not immutable: {:?}",
        s.immutable
    );
    let token = value(&s, key).context("no token")?;
    match h
        .secrets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {key: "edited"}})),
        )
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 422 => {}
        other => anyhow::bail!("a data edit of the immutable Secret: {other:?}"),
    }
    h.secrets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "labels": {"zlink.io/mesh": null, "app.kubernetes.io/managed-by": null},
                "ownerReferences": [],
            }})),
        )
        .await?;
    let restored = |s: &Secret| {
        s.labels().get("zlink.io/mesh").map(String::as_str) == Some("game")
            && s.owner_references().iter().any(|o| o.uid == mesh_uid)
    };
    wait_for("the Secret's labels and owner restored", async || {
        Ok(restored(&h.secrets.get(name).await?).then_some(()))
    })
    .await?;
    h.secrets.delete(name, &DeleteParams::default()).await?;
    let again = wait_for("the Secret made again", async || {
        Ok(h.secrets.get_opt(name).await?)
    })
    .await?;
    ensure!(
        value(&again, key).as_deref() == Some(token.as_str()),
        "the Secret was made again with another token: the running pods' copies are stale"
    );
    ensure!(
        restored(&again) && again.immutable == Some(true),
        "{again:?}"
    );

    // `kubectl scale` (the scale subresource).
    h.meshes
        .patch_scale(
            "game",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    h.wait_ready(1, 3).await?;

    // A pod deleted by hand is replaced (under this harness's stand-in kubelet an unscheduled
    // pod goes at once; the SIGTERM path is operator_install.rs's eviction).
    let victim = h.pods.list(&Default::default()).await?.items[0].clone();
    let victim_uid = victim.uid().context("uid")?;
    h.pods
        .delete(&victim.name_any(), &DeleteParams::default())
        .await?;
    wait_for("a replacement for the deleted pod", async || {
        let now = h.pods.list(&Default::default()).await?.items;
        Ok(
            (now.len() == 3 && now.iter().all(|p| p.uid().as_ref() != Some(&victim_uid)))
                .then_some(()),
        )
    })
    .await?;
    h.wait_ready(1, 3).await?;

    // Two bumps in a row: the second wins.
    h.patch_spec(json!({"applicationVersion": 2, "image": "zlink-node:2"}))
        .await?;
    wait_for("the first bump's rollout to start", async || {
        Ok((!h.ids().is_empty()).then_some(()))
    })
    .await?;
    h.patch_spec(json!({"applicationVersion": 3, "image": "zlink-node:3"}))
        .await?;
    let m = h.wait_ready(3, 3).await?;
    let status = m.status.context("status")?;
    ensure!(
        status.current_revision == status.update_revision,
        "revisions {} / {}",
        status.current_revision,
        status.update_revision
    );
    for p in h.pods.list(&Default::default()).await?.items {
        ensure!(
            p.labels().get("zlink.io/version").map(String::as_str) == Some("3"),
            "{} is not at v3: {:?}",
            p.name_any(),
            p.labels()
        );
    }
    // The watcher flags every delete of an unsafe pod; the hand delete above is ours.
    let hand = format!("{} deleted while", victim.name_any());
    let violations: Vec<String> = h
        .violations()
        .into_iter()
        .filter(|v| !v.starts_with(&hand))
        .collect();
    ensure!(violations.is_empty(), "{violations:?}");
    Ok(())
}
