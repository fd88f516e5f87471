//! Leader election on the real kube-apiserver (issue 18 item 6): one of two replicas leads; a
//! leader whose Lease is taken over stops within one retry period; a released Lease is taken at
//! once; an expired one after its duration.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use zlink_e2e::k8s;
use zlink_operator::leader::{Elector, LeaderElection, Timings};

const T: Timings = Timings {
    lease_duration_ms: 2_000,
    renew_deadline_ms: 1_500,
    retry_period_ms: 200,
};

#[tokio::test]
async fn one_replica_leads_and_a_taken_lease_stops_the_leader_within_a_retry_period()
-> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let ns = plane.namespace("leader").await?;
    let api: Api<Lease> = ns.api();
    let mut a = LeaderElection::new(api.clone(), "zlink-operator", "a", T);
    let mut b = LeaderElection::new(api.clone(), "zlink-operator", "b", T);
    ensure!(a.step().await.is_leader(), "a takes the missing Lease");
    for _ in 0..3 {
        ensure!(
            b.step().await == Elector::Follower,
            "b must wait while a holds it"
        );
        ensure!(a.step().await.is_leader(), "a renews");
    }
    let lease = api.get("zlink-operator").await?;
    ensure!(
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some("a")
    );

    // Someone else writes the Lease (a replica that thought a was gone): a stops at its next
    // renew, i.e. within one retry period.
    let mut l = api.get("zlink-operator").await?;
    let spec = l.spec.as_mut().context("spec")?;
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    api.replace("zlink-operator", &PostParams::default(), &l)
        .await?;
    let taken = Instant::now();
    let started = Instant::now();
    let keep = tokio::time::timeout(Duration::from_secs(5), a.keep()).await;
    ensure!(keep.is_ok(), "a kept leading after its Lease was taken");
    let took = started.elapsed();
    ensure!(
        took <= Duration::from_millis(T.retry_period_ms * 2 + 500),
        "a stopped only after {took:?}"
    );
    ensure!(a.state() == Elector::Lost);
    ensure!(!a.step().await.is_leader(), "lost is for good");

    // The intruder never renews: b takes over once the Lease expired, not before.
    ensure!(
        b.step().await == Elector::Follower,
        "b waits for the intruder's Lease to expire"
    );
    let mut stop = Box::pin(tokio::time::sleep(Duration::from_secs(10)));
    ensure!(b.acquire(&mut stop).await, "b never took the expired Lease");
    let waited = taken.elapsed();
    ensure!(
        waited >= Duration::from_millis(T.lease_duration_ms - 50),
        "b took the intruder's live Lease {waited:?} after it was written"
    );

    // A clean stop releases it: the next replica takes it at its first look.
    b.release().await;
    let mut c = LeaderElection::new(api, "zlink-operator", "c", T);
    ensure!(
        c.step().await.is_leader(),
        "c did not take the released Lease at once"
    );
    Ok(())
}
