//! Admission (wire §4) and liveness (wire §5) between real MeshNodes on 127.0.0.1: secret and
//! mesh checks, DescriptorRevision ordering through `update`, idempotent repeated hello, loss
//! detection within the deadline plus a stated tolerance, and recovery.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use zlink::call::error::ErrorKind;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::{Handlers, ManualPeer, PeerState};
use zlink_protocol::generated::{RejectReason, RuntimeState};

/// Liveness deadline of `fast_timings` and the tolerance we allow on top of it: the reactor
/// ticks every deadline/10 (25 ms) plus scheduling on a loaded 2-core CI machine.
const DEADLINE: Duration = Duration::from_millis(250);
const TOLERANCE: Duration = Duration::from_millis(200);

async fn dial(
    a_cfg: zlink::mesh::MeshNodeConfig,
    b: &zlink::mesh::MeshNode,
) -> zlink::mesh::MeshNode {
    let mut a_cfg = a_cfg;
    a_cfg.manual_peers.push(ManualPeer {
        endpoint: b.endpoint().to_owned(),
        expected_rid: Some(b.rid().to_owned()),
    });
    start(a_cfg, Handlers::new()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_mesh_secret_is_rejected_as_authentication_failed() {
    let b = start(config("m", "node-b"), echo_handlers()).await;
    let mut ca = config("m", "node-a");
    ca.secret = MeshSecret::from_bytes(b"another-secret-of-the-wrong-mesh").unwrap();
    let a = dial(ca, &b).await;
    a.wait_peer("node-b", WAIT, |p| {
        p.state == PeerState::Rejected(RejectReason::AuthenticationFailed)
    })
    .await
    .unwrap();
    assert!(b.metrics().rejected.load(Ordering::Relaxed) >= 1);
    assert_ne!(b.peer("node-a").map(|p| p.state), Some(PeerState::Ready));
    // It keeps being refused on re-dial (after the reject backoff), never admitted: node-a
    // dials again, and node-b refuses again, at least twice each.
    eventually("two refused dials on each side", || {
        a.metrics().rejected.load(Ordering::Relaxed) >= 2
            && b.metrics().rejected.load(Ordering::Relaxed) >= 2
    })
    .await;
    // (Between refusals a re-dial may be handshaking: never Ready, never an epoch.)
    let p = a.peer("node-b").unwrap();
    assert_ne!(p.state, PeerState::Ready);
    assert_eq!(p.epochs, 0, "a refused dial was admitted");
    assert_ne!(b.peer("node-a").map(|p| p.state), Some(PeerState::Ready));
    assert_eq!(a.metrics().admitted.load(Ordering::Relaxed), 0);
    assert_eq!(b.metrics().admitted.load(Ordering::Relaxed), 0);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_mesh_is_rejected_as_mesh_mismatch() {
    let b = start(config("mesh-two", "node-b"), echo_handlers()).await;
    let a = dial(config("mesh-one", "node-a"), &b).await;
    a.wait_peer("node-b", WAIT, |p| {
        p.state == PeerState::Rejected(RejectReason::MeshMismatch)
    })
    .await
    .unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_updates_reach_the_peer_in_revision_order() {
    let (a, b) = pair(Handlers::new(), Handlers::new()).await;
    assert_eq!(
        b.peer("node-a")
            .unwrap()
            .descriptor
            .unwrap()
            .descriptor_revision,
        1
    );
    a.set_placement_weight(7).unwrap();
    a.set_maintenance_wave("wave-2");
    a.set_runtime_state(RuntimeState::Draining);
    let p = b
        .wait_peer("node-a", WAIT, |p| {
            p.descriptor
                .as_ref()
                .is_some_and(|d| d.descriptor_revision == 4)
        })
        .await
        .unwrap();
    let d = p.descriptor.unwrap();
    assert_eq!(d.placement_weight, 7);
    assert_eq!(d.maintenance_wave, "wave-2");
    assert_eq!(d.state, RuntimeState::Draining);
    assert_eq!(b.metrics().updates_applied.load(Ordering::Relaxed), 3);
    assert!(a.set_placement_weight(10_001).is_err());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_hello_on_a_live_connection_keeps_its_generation() {
    let (a, b) = pair(Handlers::new(), echo_handlers()).await;
    let before = a.peer("node-b").unwrap().connection_generation;
    a.resend_hello("node-b");
    let deadline = tokio::time::Instant::now() + WAIT;
    while b.metrics().idempotent_admissions.load(Ordering::Relaxed) == 0
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(b.metrics().idempotent_admissions.load(Ordering::Relaxed), 1);
    // A reply sent after node-b's answer to the hello, on the same connection (FIFO): once it
    // is back, node-a has handled that answer too.
    let r: Echo = a
        .request(
            "node-b",
            &Echo {
                text: String::new(),
                n: 1,
            },
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.n, 2);
    for (n, rid) in [(&a, "node-b"), (&b, "node-a")] {
        let p = n.peer(rid).unwrap();
        assert_eq!(
            p.connection_generation, before,
            "generation rotated on {rid}"
        );
        assert_eq!(p.epochs, 1);
        assert_eq!(p.state, PeerState::Ready);
    }
    assert!(
        a.metrics().protocol_errors().is_empty(),
        "{:?}",
        a.metrics().protocol_errors()
    );
    a.shutdown().await;
    b.shutdown().await;
}

async fn liveness_loss_then_recovery(freeze_dialer: bool) {
    let (a, b) = pair_timed(Handlers::new(), echo_handlers(), liveness_timings()).await;
    let (frozen, watcher, watched_rid) = if freeze_dialer {
        (&a, &b, "node-a")
    } else {
        (&b, &a, "node-b")
    };
    let generation = watcher.peer(watched_rid).unwrap().connection_generation;
    // The last ACK may have landed just before the freeze: the peer is declared dead between
    // deadline − probe interval and deadline + tolerance after it.
    let t0 = Instant::now();
    frozen.set_frozen(true);
    watcher
        .wait_peer(
            watched_rid,
            DEADLINE + TOLERANCE + Duration::from_millis(500),
            |p| p.state != PeerState::Ready,
        )
        .await
        .unwrap();
    let took = t0.elapsed();
    assert!(
        took >= DEADLINE - Duration::from_millis(60) && took <= DEADLINE + TOLERANCE,
        "peer declared dead after {took:?}, deadline {DEADLINE:?} + tolerance {TOLERANCE:?}"
    );
    assert_eq!(watcher.metrics().liveness_deaths.load(Ordering::Relaxed), 1);
    if !freeze_dialer {
        // Not ready means no new work goes there.
        let err = a
            .request::<Echo, Echo>(
                "node-b",
                &Echo {
                    text: String::new(),
                    n: 0,
                },
                WAIT,
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
    }
    frozen.set_frozen(false);
    let p = watcher.wait_ready(watched_rid, WAIT).await.unwrap();
    assert_ne!(
        p.connection_generation, generation,
        "recovery is a new connection epoch"
    );
    assert_eq!(p.epochs, 2);
    a.wait_ready("node-b", WAIT).await.unwrap();
    let r: Echo = a
        .request(
            "node-b",
            &Echo {
                text: String::new(),
                n: 5,
            },
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.n, 6);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_acceptor_is_not_ready_within_the_deadline_and_recovers() {
    liveness_loss_then_recovery(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_dialer_is_not_ready_within_the_deadline_and_recovers() {
    liveness_loss_then_recovery(true).await;
}

/// wire §5: only the matching ACK restarts the deadline. The peer keeps sending application
/// records and its own probes but never ACKs; it is declared dead all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_ack_traffic_does_not_extend_the_liveness_deadline() {
    let mut ha = Handlers::new();
    ha.on_send(|_, _: Note| async { Ok(()) });
    let (a, b) = pair_timed(ha, Handlers::new(), liveness_timings()).await;
    b.set_drop_liveness_acks(true);
    let t0 = Instant::now();
    let b = std::sync::Arc::new(b);
    let sender = {
        let b = std::sync::Arc::clone(&b);
        tokio::spawn(async move {
            let mut seq = 0;
            // Bounded: at most 2 s of traffic, one record every 5 ms.
            while seq < 400 {
                if b.send(
                    "node-a",
                    &Note {
                        seq,
                        body: "keepalive?".into(),
                    },
                )
                .await
                .is_err()
                {
                    break;
                }
                seq += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seq
        })
    };
    a.wait_peer(
        "node-b",
        DEADLINE + TOLERANCE + Duration::from_millis(500),
        |p| p.state != PeerState::Ready,
    )
    .await
    .unwrap();
    let took = t0.elapsed();
    assert!(
        took <= DEADLINE + TOLERANCE,
        "declared dead only after {took:?}"
    );
    let delivered = a.metrics().delivered.load(Ordering::Relaxed);
    assert!(
        delivered >= 10,
        "the peer did send traffic meanwhile ({delivered} records)"
    );
    sender.abort();
    b.set_drop_liveness_acks(false);
    a.wait_ready("node-b", WAIT).await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}
