//! Helpers shared by the mesh integration tests: short timings and node construction, the
//! [`cluster::Cluster`] builder and the seeded [`rng::TestRng`]. (`sessions.rs`, a routed
//! StreamNode and its Stream Connector client, is included by the session tests alone: other
//! packages include this module and do not depend on the connector.)
#![allow(dead_code, clippy::unwrap_used)]

pub mod cluster;
pub mod rng;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::config::{ManualPeer, MeshTimings, RidConfig};
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, JsonMessage, MeshNode, MeshNodeConfig};

pub const SECRET: &[u8] = b"test-mesh-secret-0123456789";
pub const WAIT: Duration = Duration::from_secs(10);

/// Timings short enough for tests, with a liveness deadline (1.5 s) that a loaded 2-core CI
/// machine never misses by accident.
pub fn fast_timings() -> MeshTimings {
    MeshTimings {
        probe_interval: Duration::from_millis(100),
        liveness_deadline: Duration::from_millis(1_500),
        discovery_poll: Duration::from_millis(50),
        lease_ttl: Duration::from_millis(2_000),
        lease_renew: Duration::from_millis(300),
        reject_backoff: Duration::from_millis(200),
        fencing_margin: Duration::from_millis(200),
    }
}

/// Timings for the liveness tests themselves: probe every 50 ms, dead after 250 ms.
pub fn liveness_timings() -> MeshTimings {
    MeshTimings {
        probe_interval: Duration::from_millis(50),
        liveness_deadline: Duration::from_millis(250),
        ..fast_timings()
    }
}

pub fn config(mesh: &str, rid: &str) -> MeshNodeConfig {
    let mut c = MeshNodeConfig::new(mesh, MeshSecret::from_bytes(SECRET).unwrap());
    c.rid = RidConfig::Fixed(rid.into());
    c.timings = fast_timings();
    c
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Echo {
    pub text: String,
    pub n: u64,
}
impl JsonMessage for Echo {
    const PACKET_NAME: &'static str = "test.Echo";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Note {
    pub seq: u64,
    pub body: String,
}
impl JsonMessage for Note {
    const PACKET_NAME: &'static str = "test.Note";
}

pub fn echo_handlers() -> Handlers {
    let mut h = Handlers::new();
    h.on_request(|_, e: Echo| async move {
        Ok::<_, CallError>(Echo {
            text: e.text,
            n: e.n + 1,
        })
    });
    h
}

/// Wait until `cond` holds — a counter reached its value, a state was reached — polling every
/// 2 ms for at most [`WAIT`].
///
/// # Panics
/// When it does not hold in time, naming `what`.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

pub async fn start(cfg: MeshNodeConfig, h: Handlers) -> MeshNode {
    MeshNode::start(cfg, h, None).await.unwrap()
}

pub async fn start_with_store(
    cfg: MeshNodeConfig,
    h: Handlers,
    store: Arc<dyn DiscoveryBackend>,
) -> MeshNode {
    MeshNode::start(cfg, h, Some(store)).await.unwrap()
}

/// Two nodes, `a` dialing `b` by manual endpoint with known RID; both ready.
pub async fn pair(ha: Handlers, hb: Handlers) -> (MeshNode, MeshNode) {
    pair_timed(ha, hb, fast_timings()).await
}

/// [`pair`] with the given timings on both nodes.
pub async fn pair_timed(ha: Handlers, hb: Handlers, timings: MeshTimings) -> (MeshNode, MeshNode) {
    let mut cb = config("m", "node-b");
    cb.timings = timings.clone();
    let b = start(cb, hb).await;
    let mut ca = config("m", "node-a");
    ca.timings = timings;
    ca.manual_peers.push(ManualPeer {
        endpoint: b.endpoint().to_owned(),
        expected_rid: Some("node-b".into()),
    });
    let a = start(ca, ha).await;
    a.wait_ready("node-b", WAIT).await.unwrap();
    b.wait_ready("node-a", WAIT).await.unwrap();
    (a, b)
}

/// A raw `bulk` payload of `size` bytes whose first 8 bytes are `seq`.
pub fn payload(seq: u64, size: usize) -> zlink_protocol::envelope::TypedPayload {
    let mut v = vec![0u8; size];
    v[..8].copy_from_slice(&seq.to_be_bytes());
    zlink_protocol::envelope::TypedPayload::new("bulk", "application/octet-stream", v)
}

/// The sequence number [`payload`] wrote.
pub fn seq_of(b: &bytes::Bytes) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

/// node-a dialing node-b configured by `b_cfg` (node-a gets the same credit window).
pub async fn pair_with(
    b_cfg: zlink::mesh::MeshNodeConfig,
    hb: Handlers,
) -> (zlink::mesh::MeshNode, zlink::mesh::MeshNode) {
    let window = b_cfg.flow.window_bytes;
    let b = start(b_cfg, hb).await;
    let mut ca = config("m", "node-a");
    ca.flow.window_bytes = window;
    ca.manual_peers.push(ManualPeer {
        endpoint: b.endpoint().to_owned(),
        expected_rid: Some("node-b".into()),
    });
    let a = start(ca, Handlers::new()).await;
    a.wait_ready("node-b", WAIT).await.unwrap();
    b.wait_ready("node-a", WAIT).await.unwrap();
    (a, b)
}
