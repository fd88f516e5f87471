//! Manual topology details (glossary §6 "Manual endpoint", §9 "Network listener") and the
//! per-message metadata snapshot (glossary §5).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use zlink::mesh::config::ManualPeer;
use zlink::mesh::{Handlers, MeshNode, PeerState};
use zlink_protocol::metadata::Metadata;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_only_manual_peer_learns_the_rid_from_the_greeting() {
    let b = start(config("m", "node-b"), echo_handlers()).await;
    let mut ca = config("m", "node-a");
    ca.manual_peers.push(ManualPeer {
        endpoint: b.endpoint().to_owned(),
        expected_rid: None,
    });
    let a = start(ca, Handlers::new()).await;
    let p = a.wait_ready("node-b", WAIT).await.unwrap();
    assert_eq!(p.dial_endpoint.as_deref(), Some(b.endpoint()));
    let r: Echo = a
        .request(
            "node-b",
            &Echo {
                text: String::new(),
                n: 2,
            },
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(r.n, 3);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_zero_advertises_the_actual_port_and_never_a_wildcard() {
    let mut c = config("m", "node-w");
    c.bind_host = "0.0.0.0".into();
    c.advertise_host = Some("127.0.0.1".into());
    let w = MeshNode::start(c, Handlers::new(), None).await.unwrap();
    let port: u16 = w.endpoint().rsplit(':').next().unwrap().parse().unwrap();
    assert_ne!(port, 0);
    assert_eq!(w.endpoint(), format!("tcp://127.0.0.1:{port}"));
    assert_eq!(w.descriptor().endpoint, w.endpoint());
    w.shutdown().await;
    let mut c = config("m", "node-x");
    c.bind_host = "0.0.0.0".into();
    let err = MeshNode::start(c, Handlers::new(), None).await.unwrap_err();
    assert!(err.to_string().contains("advertise_host"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_intent_is_terminal() {
    let (a, b) = pair(Handlers::new(), echo_handlers()).await;
    a.remove_peer("node-b");
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.peer("node-b").is_some() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(a.peer("node-b").is_none());
    // The peer notices the epoch ended; nothing re-creates a's intent afterwards. (A bounded
    // window, not a marker: once the intent is gone neither node produces anything further
    // about the other — no record, no monitor event, no peer-change notification — so there is
    // no later event to wait for.)
    b.wait_peer("node-a", WAIT, |p| p.state != PeerState::Ready)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        a.peer("node-b").is_none(),
        "a late event revived a removed intent"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_see_the_metadata_snapshot_of_their_message() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut hb = Handlers::new();
    {
        let seen = Arc::clone(&seen);
        hb.on_request(move |ctx, e: Echo| {
            seen.lock().unwrap().push((
                ctx.metadata.find("trace").map(str::to_owned),
                ctx.correlation_id.is_some(),
                ctx.source.rid.to_string(),
            ));
            async move { Ok(e) }
        });
    }
    let (a, b) = pair(Handlers::new(), hb).await;
    let md = Metadata::new([("trace".to_owned(), "abc".to_owned())]).unwrap();
    let payload = zlink::mesh::handler::encode_json(&Echo {
        text: String::new(),
        n: 0,
    })
    .unwrap();
    a.request_payload("node-b", payload.clone(), Some(md), WAIT)
        .await
        .unwrap();
    a.request_payload("node-b", payload, None, WAIT)
        .await
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (Some("abc".to_owned()), true, "node-a".to_owned()),
            (None, true, "node-a".to_owned())
        ]
    );
    // Oversized metadata is refused before anything is sent (≤ 1,024 bytes).
    let big = Metadata::new([("k".to_owned(), "v".repeat(1_100))]);
    assert!(big.is_err());
    a.shutdown().await;
    b.shutdown().await;
}
