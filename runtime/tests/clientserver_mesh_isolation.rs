//! Wire §4 "ClientServer 방향", the reverse direction: a ClientServer channel envelope (frame 0
//! starting with the `0xF2` marker) arriving on a RouteMesh MeshNode is a protocol error. The
//! mesh reactor reads frame 0 as its transport header, which refuses the marker; nothing is
//! dispatched.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use common::{config, start};
use zlink::call::error::CallError;
use zlink::mesh::Handlers;
use zlink::transport::header::{Header, split_batch};
use zlink_protocol::channel_envelope::ChannelHeader;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Who {
    delay_ms: u64,
}
impl zlink::mesh::JsonMessage for Who {
    const PACKET_NAME: &'static str = "test.Who";
}

/// A raw DEALER sends a valid channel envelope `command` and `request` to a MeshNode: each is
/// counted as a protocol error and no handler runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_envelope_on_a_mesh_node_is_a_protocol_error() {
    let ran = Arc::new(AtomicU64::new(0));
    let mut h = Handlers::new();
    let r1 = Arc::clone(&ran);
    h.on_send(move |_, _: Who| {
        let r1 = Arc::clone(&r1);
        async move {
            r1.fetch_add(1, Ordering::Relaxed);
            Ok::<_, CallError>(())
        }
    });
    let r2 = Arc::clone(&ran);
    h.on_request(move |_, w: Who| {
        let r2 = Arc::clone(&r2);
        async move {
            r2.fetch_add(1, Ordering::Relaxed);
            Ok::<_, CallError>(w)
        }
    });
    let node = start(config("m", "node-x"), h).await;
    let before: u64 = node.metrics().protocol_errors().values().sum();

    let ctx = zmq::Context::new();
    let d = ctx.socket(zmq::DEALER).unwrap();
    d.set_linger(0).unwrap();
    d.connect(node.endpoint()).unwrap();
    let command = ChannelHeader::Command {
        packet_name: "test.Who".into(),
        content_type: String::new(),
    };
    let request = ChannelHeader::Request {
        packet_name: "test.Who".into(),
        content_type: String::new(),
        correlation_id: "1".into(),
        deadline_unix_ms: None,
    };
    for header in [command, request] {
        d.send_multipart([header.encode().unwrap(), b"{\"delay_ms\":0}".to_vec()], 0)
            .unwrap();
    }
    // The sentinel: an empty message (the PROBE_ROUTER announcement) on the same pipe, which
    // the node answers with a greeting. The node handles one pipe's messages in order, so once
    // the greeting is back both envelopes have been handled: refused, or dispatched.
    // (The node's own probe of the new pipe, an empty message, may arrive first.)
    d.send(&b""[..], 0).unwrap();
    d.set_rcvtimeo(10_000).unwrap();
    tokio::task::spawn_blocking(move || {
        loop {
            let m = d.recv_multipart(0).expect("a greeting within 10 s");
            let frames = m.into_iter().map(Bytes::from).collect();
            let greeted = split_batch(frames).unwrap().iter().any(|m| {
                matches!(
                    m.first().map(|f| Header::decode(f)),
                    Some(Ok(Header::Greeting { ref rid, .. })) if rid == "node-x"
                )
            });
            if greeted {
                return;
            }
        }
    })
    .await
    .unwrap();
    // Both refused by the transport header check (the 0xF2 marker is not the mesh magic),
    // before any decode of a body.
    let errors = node.metrics().protocol_errors();
    assert_eq!(before, 0, "a fresh node has counted nothing: {errors:?}");
    assert_eq!(
        errors.get("header_bad_magic").copied(),
        Some(2),
        "{errors:?}"
    );
    // Nothing reached dispatch: no job permit was ever taken, no handler ran.
    assert_eq!(node.jobs().counters().acquired_total, 0);
    assert_eq!(node.metrics().delivered.load(Ordering::Relaxed), 0);
    assert_eq!(ran.load(Ordering::Relaxed), 0);
    node.shutdown().await;
}
