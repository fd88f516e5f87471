//! The controller under faults on the real kube-apiserver (issue 18 "Bad input and faults"):
//! each case sets its condition reason and none deletes an unsafe pod. The doubles and the
//! invariant watcher are in `operator_common`.

mod operator_common;

use std::collections::HashSet;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use operator_common::{Harness, Script, ScriptedHosts, condition};
use serde_json::json;
use zlink_operator::planner::{HostState, RelocationState};

fn blocked(reason: &'static str) -> impl Fn(&zlink_operator::crd::Mesh) -> bool {
    move |m| condition(m, "RolloutBlocked") == Some(("True".into(), reason.into()))
}

/// A Mesh of two Ready v1 pods; returns their names.
async fn ready_mesh(h: &Harness, spec: serde_json::Value) -> anyhow::Result<Vec<String>> {
    h.create_store_secret().await?;
    h.create_mesh(spec).await?;
    h.wait_ready(1, 2).await?;
    h.pod_names().await
}

fn set_script(h: &Harness, s: Script) {
    *ScriptedHosts::lock(&h.hosts.script) = s;
}

async fn bump(h: &Harness) -> anyhow::Result<()> {
    h.patch_spec(json!({"applicationVersion": 2, "image": "zlink-node:2"}))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_relocation_is_retried_then_blocks_until_a_retry_annotation() -> anyhow::Result<()>
{
    let Some(h) = Harness::start("fault-fail", 3).await? else {
        return Ok(());
    };
    let old = ready_mesh(&h, json!({"rollout": {"relocationAttempts": 2}})).await?;
    set_script(&h, Script::Fail);
    bump(&h).await?;
    h.wait_mesh("RelocationFailed", blocked("RelocationFailed"))
        .await?;
    ensure!(h.deleted().is_empty(), "deleted {:?}", h.deleted());
    let ids = h.ids();
    ensure!(
        ids.len() == 1,
        "only one old pod may relocate at a time: {ids:?}"
    );
    let (uid, set) = ids.iter().next().context("no Relocate")?;
    let want: HashSet<String> = [format!("{uid}-1"), format!("{uid}-2")].into();
    ensure!(*set == want, "two attempts, two ids: {set:?}");
    // The pod keeps serving (it is still there), and a retry resumes.
    let failed = h
        .pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
        .context("the failed pod is gone")?;
    set_script(&h, Script::Succeed);
    h.pods
        .patch(
            &failed.metadata.name.clone().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"zlink.io/retry": "1"}}})),
        )
        .await?;
    h.wait_ready(2, 2).await?;
    ensure!(
        h.ids()[uid].contains(&format!("{uid}-3")),
        "the retry is attempt 3"
    );
    ensure!(h.violations().is_empty(), "{:?}", h.violations());
    let deleted: HashSet<String> = h.deleted().into_iter().collect();
    ensure!(deleted == old.into_iter().collect::<HashSet<_>>());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_never_becomes_safe_stays_until_force_delete_with_a_warning()
-> anyhow::Result<()> {
    let Some(h) = Harness::start("fault-safe", 3).await? else {
        return Ok(());
    };
    ready_mesh(&h, json!({})).await?;
    set_script(&h, Script::NeverSafe);
    bump(&h).await?;
    // Marker: the controller has seen the relocation completed (the pod's phase in the status).
    let m = h
        .wait_mesh("a pod Relocated", |m| {
            m.status
                .as_ref()
                .is_some_and(|s| s.pods.iter().any(|p| p.phase == "Relocated"))
        })
        .await?;
    let pod = m
        .status
        .context("status")?
        .pods
        .into_iter()
        .find(|p| p.phase == "Relocated")
        .context("no Relocated pod")?
        .name;
    // Completed but not safe: three more reconciles look at it, and the pod stays.
    let uid = h.pods.get(&pod).await?.metadata.uid.context("uid")?;
    let looked = h.observes(&uid);
    operator_common::wait_for("three more reconciles", async || {
        Ok((h.observes(&uid) >= looked + 3).then_some(()))
    })
    .await?;
    ensure!(
        h.deleted().is_empty(),
        "deleted {:?} while unsafe",
        h.deleted()
    );
    let host = h.hosts.host(&uid).context("host")?;
    ensure!(
        host.state == HostState::Relocated
            && !host.safe
            && host
                .relocation
                .is_some_and(|r| r.state == RelocationState::Completed)
    );
    set_script(&h, Script::Succeed);
    h.pods
        .patch(
            &pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"zlink.io/force-delete": "true"}}})),
        )
        .await?;
    h.wait_ready(2, 2).await?;
    ensure!(h.deleted().contains(&pod));
    let events: Api<Event> = h.ns.api();
    let events = events.list(&Default::default()).await?.items;
    ensure!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("ForceDelete")
                && e.type_.as_deref() == Some("Warning")
                && e.note.as_deref().is_some_and(|n| n.contains(&pod))),
        "no ForceDelete Warning: {events:?}"
    );
    ensure!(h.violations().is_empty(), "{:?}", h.violations());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unimplemented_relocate_is_reported_and_never_deletes() -> anyhow::Result<()> {
    let Some(h) = Harness::start("fault-unimpl", 3).await? else {
        return Ok(());
    };
    let old = ready_mesh(&h, json!({})).await?;
    set_script(&h, Script::Unsupported);
    bump(&h).await?;
    h.wait_mesh("RelocateUnsupported", blocked("RelocateUnsupported"))
        .await?;
    ensure!(h.deleted().is_empty(), "deleted {:?}", h.deleted());
    let names = h.pod_names().await?;
    ensure!(
        old.iter().all(|o| names.contains(o)),
        "old pods {old:?}, now {names:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restarted_mid_relocation_resumes_with_the_same_id() -> anyhow::Result<()> {
    let Some(mut h) = Harness::start("fault-restart", 3).await? else {
        return Ok(());
    };
    ready_mesh(&h, json!({})).await?;
    set_script(&h, Script::Slow(std::time::Duration::from_secs(3)));
    bump(&h).await?;
    operator_common::wait_for("the first Relocate", async || {
        Ok((!h.ids().is_empty()).then_some(()))
    })
    .await?;
    h.stop_controller().await;
    h.start_controller();
    set_script(&h, Script::Succeed);
    h.wait_ready(2, 2).await?;
    let ids = h.ids();
    ensure!(ids.len() == 2, "{ids:?}");
    for (uid, set) in &ids {
        ensure!(
            *set == HashSet::from([format!("{uid}-1")]),
            "pod {uid}: {set:?}"
        );
    }
    ensure!(h.violations().is_empty(), "{:?}", h.violations());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_store_secret_no_pod_is_created_or_replaced() -> anyhow::Result<()> {
    let Some(h) = Harness::start("fault-store", 3).await? else {
        return Ok(());
    };
    let old = ready_mesh(&h, json!({})).await?;
    h.secrets.delete("redis", &DeleteParams::default()).await?;
    let generation = h
        .patch_spec(json!({"applicationVersion": 2, "image": "zlink-node:2"}))
        .await?
        .metadata
        .generation;
    // Marker: the status of the new generation says why nothing moves.
    h.wait_mesh("StoreSecretMissing for the new generation", |m| {
        blocked("StoreSecretMissing")(m)
            && m.status.as_ref().and_then(|s| s.observed_generation) == generation
    })
    .await?;
    ensure!(
        h.pod_names().await? == old,
        "pods changed without the store Secret"
    );
    ensure!(h.ids().is_empty(), "Relocate without the store Secret");
    // It is picked up once it appears.
    h.create_store_secret().await?;
    h.wait_ready(2, 2).await?;
    Ok(())
}
