//! Channels on the real kube-apiserver (issue 18 items 2 and 6): a Channel without its Mesh is
//! `MeshNotFound`; the older of two Channels naming one channel wins and the other is
//! `DuplicateChannel`; a weight change goes live on the running nodes through
//! `SetChannelWeight` (no rollout), drift is re-applied, and a new channel membership rolls out
//! as a revision change (`PlannedMaintenance`). The doubles are in `operator_common`.

mod operator_common;

use anyhow::ensure;
use kube::api::{Api, Patch, PatchParams, PostParams};
use operator_common::Harness;
use serde_json::json;
use zlink_operator::crd::Channel;

fn channel(name: &str, channel_name: &str, weight: i32) -> anyhow::Result<Channel> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "zlink.io/v1alpha1",
        "kind": "Channel",
        "metadata": {"name": name},
        "spec": {"meshRef": "game", "channelName": channel_name, "weight": weight},
    }))?)
}

fn cond(c: &Channel, t: &str) -> Option<(String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == t)
        .map(|x| (x.status.clone(), x.reason.clone()))
}

async fn wait_channel(
    api: &Api<Channel>,
    name: &str,
    what: &str,
    pred: impl Fn(&Channel) -> bool,
) -> anyhow::Result<Channel> {
    operator_common::wait_for(what, async || {
        let c = api.get(name).await?;
        Ok(pred(&c).then_some(c))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_go_live_without_a_rollout_and_membership_rolls_out() -> anyhow::Result<()> {
    let Some(h) = Harness::start("channels", 3).await? else {
        return Ok(());
    };
    let channels: Api<Channel> = h.ns.api();
    let pp = PostParams::default();
    channels.create(&pp, &channel("chat", "chat", 100)?).await?;
    wait_channel(&channels, "chat", "MeshNotFound", |c| {
        cond(c, "Accepted") == Some(("False".into(), "MeshNotFound".into()))
    })
    .await?;

    h.create_store_secret().await?;
    h.create_mesh(json!({})).await?;
    h.wait_ready(1, 2).await?;
    let names = h.pod_names().await?;
    wait_channel(&channels, "chat", "Accepted and Applied", |c| {
        cond(c, "Accepted") == Some(("True".into(), "Accepted".into()))
            && cond(c, "Applied") == Some(("True".into(), "Applied".into()))
            && c.status.as_ref().is_some_and(|s| s.applied_nodes == 2)
    })
    .await?;
    ensure!(h.weights("chat").values().all(|w| *w == 100));

    // A weight change: live on both nodes, and no pod replaced.
    channels
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"weight": 7}})),
        )
        .await?;
    wait_channel(&channels, "chat", "weight 7 applied", |c| {
        cond(c, "Applied") == Some(("True".into(), "Applied".into()))
            && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
    })
    .await?;
    ensure!(
        h.weights("chat").values().all(|w| *w == 7),
        "{:?}",
        h.weights("chat")
    );
    ensure!(
        h.pod_names().await? == names,
        "a weight change replaced pods"
    );

    // Drift is re-applied.
    h.drift("chat", 3);
    operator_common::wait_for("drift re-applied", async || {
        Ok(h.weights("chat").values().all(|w| *w == 7).then_some(()))
    })
    .await?;

    // A second Channel naming the same channel loses to the older one.
    channels
        .create(&pp, &channel("chat-again", "chat", 50)?)
        .await?;
    wait_channel(&channels, "chat-again", "DuplicateChannel", |c| {
        cond(c, "Accepted") == Some(("False".into(), "DuplicateChannel".into()))
    })
    .await?;
    ensure!(
        cond(&channels.get("chat").await?, "Accepted") == Some(("True".into(), "Accepted".into()))
    );
    ensure!(
        h.weights("chat").values().all(|w| *w == 7),
        "the duplicate's weight was applied"
    );

    // A new channel is a new revision: rolled out with PlannedMaintenance at the same version.
    let before = h
        .meshes
        .get("game")
        .await?
        .status
        .unwrap_or_default()
        .update_revision;
    channels.create(&pp, &channel("zone", "zone", 5)?).await?;
    let m = h
        .wait_mesh("the new revision rolled out", |m| {
            let s = m.status.clone().unwrap_or_default();
            s.update_revision != before
                && operator_common::condition(m, "Ready")
                    == Some(("True".into(), "AllReplicasReady".into()))
                && s.replicas == 2
                && s.updated_replicas == 2
        })
        .await?;
    let now = h.pod_names().await?;
    ensure!(
        now.iter().all(|n| !names.contains(n)),
        "old pods remain: {now:?}"
    );
    ensure!(
        h.weights("zone").len() == 2,
        "new pods lack the zone channel: {:?}",
        h.weights("zone")
    );
    ensure!(h.weights("chat").values().all(|w| *w == 7));
    ensure!(h.violations().is_empty(), "{:?}", h.violations());
    let _ = m;
    Ok(())
}
