//! RouteMesh Channels on real ZeroMQ sockets (issue "Channels", part 1): Client/Server
//! memberships, select-one by smooth weighted round-robin (glossary §6 "Weight", §7
//! "Select-one"), separate handler namespaces (§7 "Handler namespace"), runtime weight changes
//! through the revision-ordered descriptor `update` (wire §4), and drain.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::cluster::{Cluster, ClusterBuilder};
use common::*;
use serde::{Deserialize, Serialize};
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::config::ManualPeer;
use zlink::mesh::{Handlers, JsonMessage, MeshError, MeshNode, MeshNodeConfig};
use zlink_protocol::generated::RuntimeState;

const CH: &str = "work";

/// Asks the selected Server for its RID.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Who {
    n: u64,
}
impl JsonMessage for Who {
    const PACKET_NAME: &'static str = "test.Who";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Me {
    rid: String,
    n: u64,
}
impl JsonMessage for Me {
    const PACKET_NAME: &'static str = "test.Me";
}

/// A request the Server holds until the test opens its gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Slow {
    n: u64,
}
impl JsonMessage for Slow {
    const PACKET_NAME: &'static str = "test.Slow";
}

/// What one Server saw.
struct Seen {
    sends: AtomicU64,
    slow_started: tokio::sync::Notify,
    gate: tokio::sync::Semaphore,
}

impl Default for Seen {
    fn default() -> Self {
        Self {
            sends: AtomicU64::new(0),
            slow_started: tokio::sync::Notify::new(),
            gate: tokio::sync::Semaphore::new(0),
        }
    }
}

/// Channel handlers of a Server named `rid`: `Who` answers the RID, `Note` sends are counted,
/// `Slow` waits for the gate.
fn server_handlers(rid: &str, seen: &Arc<Seen>) -> Handlers {
    let mut h = Handlers::new();
    let ch = h.channel(CH);
    let me = rid.to_owned();
    ch.on_request(move |ctx, w: Who| {
        let me = me.clone();
        async move {
            assert_eq!(ctx.channel.as_deref(), Some(CH));
            Ok::<_, CallError>(Me { rid: me, n: w.n })
        }
    });
    let s = Arc::clone(seen);
    ch.on_send(move |_, _: Note| {
        let s = Arc::clone(&s);
        async move {
            s.sends.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    });
    let s = Arc::clone(seen);
    let me = rid.to_owned();
    ch.on_request(move |_, w: Slow| {
        let s = Arc::clone(&s);
        let me = me.clone();
        async move {
            s.slow_started.notify_one();
            let _permit = s.gate.acquire().await.unwrap();
            Ok::<_, CallError>(Me { rid: me, n: w.n })
        }
    });
    h
}

/// The RID of Server `i`: `srv-a`, `srv-b`, …
fn server_rid(i: usize) -> String {
    format!("srv-{}", char::from(b'a' + u8::try_from(i).unwrap()))
}

/// Channel Servers `srv-a`, `srv-b`, … and, last, a Client-only node `cli` that dials each of
/// them (no store); every connection ready.
struct Servers {
    cluster: Cluster,
    /// What Server `i` saw.
    seen: Vec<Arc<Seen>>,
}

impl Servers {
    /// Servers with the given weights.
    async fn start(weights: &[u16]) -> Self {
        Self::start_with(weights, |b| b).await
    }

    /// [`Servers::start`], with `before` adding memberships ahead of the Server memberships
    /// (a node's memberships keep the order they were added in).
    async fn start_with(
        weights: &[u16],
        before: impl FnOnce(ClusterBuilder) -> ClusterBuilder,
    ) -> Self {
        let n = weights.len();
        let seen: Vec<Arc<Seen>> = (0..n).map(|_| Arc::default()).collect();
        let handler_seen = seen.clone();
        let builder = Cluster::builder(n + 1)
            .rids(move |i| if i < n { server_rid(i) } else { "cli".into() })
            .handlers(move |i| {
                handler_seen
                    .get(i)
                    .map_or_else(Handlers::new, |s| server_handlers(&server_rid(i), s))
            });
        let cluster = before(builder)
            .channel_servers(CH, weights)
            .channel_client(CH, n)
            .dialer(n)
            .start()
            .await;
        Self { cluster, seen }
    }

    fn client(&self) -> &Arc<MeshNode> {
        self.cluster.nodes.last().unwrap()
    }

    fn server(&self, i: usize) -> &MeshNode {
        &self.cluster.nodes[i]
    }

    async fn who(&self, n: u64) -> Result<String, CallError> {
        let me: Me = self
            .client()
            .channel_request(CH, &Who { n }, Duration::from_secs(5))
            .await?;
        assert_eq!(me.n, n);
        Ok(me.rid)
    }

    /// Wait until the client's view of `rid`'s descriptor satisfies `ok`.
    async fn client_sees(
        &self,
        rid: &str,
        ok: impl Fn(&zlink_protocol::generated::NodeDescriptor) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if self
                .client()
                .peer(rid)
                .and_then(|p| p.descriptor)
                .is_some_and(|d| ok(&d))
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "client never saw the descriptor change of {rid}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

fn weight_of(d: &zlink_protocol::generated::NodeDescriptor) -> u16 {
    d.channels
        .iter()
        .find(|c| c.channel_name == CH && c.role == zlink_protocol::generated::ChannelRole::Server)
        .map(|c| c.weight)
        .unwrap()
}

/// Reference smooth weighted round-robin, written out independently of `select.rs`: every
/// candidate adds its weight, the largest `current` wins (earliest on ties) and loses the total.
fn reference_swrr(weights: &[(&str, i64)], picks: usize) -> Vec<String> {
    let total: i64 = weights.iter().map(|(_, w)| w).sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::new();
    for _ in 0..picks {
        let mut best = None;
        for (i, (_, w)) in weights.iter().enumerate() {
            if *w == 0 {
                continue;
            }
            current[i] += w;
            if best.is_none_or(|b: usize| current[i] > current[b]) {
                best = Some(i);
            }
        }
        let b = best.unwrap();
        current[b] -= total;
        out.push(weights[b].0.to_owned());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_one_follows_the_exact_smooth_weighted_sequence_for_100_50_0() {
    let c = Servers::start(&[100, 50, 0]).await;
    let mut picks = Vec::new();
    for n in 0..150 {
        picks.push(c.who(n).await.unwrap());
    }
    // The exact sequence: A B A, repeated (100:50 spread out, never bunched).
    let expected = reference_swrr(&[("srv-a", 100), ("srv-b", 50), ("srv-c", 0)], 150);
    assert_eq!(picks, expected);
    assert_eq!(
        &picks[..6],
        &["srv-a", "srv-b", "srv-a", "srv-a", "srv-b", "srv-a"]
    );
    // Every prefix within 1 of the ideal share; the 0-weight Server never chosen.
    let mut count: HashMap<&str, i64> = HashMap::new();
    for (k, rid) in picks.iter().enumerate() {
        *count.entry(rid.as_str()).or_default() += 1;
        let k = i64::try_from(k).unwrap() + 1;
        let a = *count.get("srv-a").unwrap_or(&0);
        let b = *count.get("srv-b").unwrap_or(&0);
        assert!((3 * a - 2 * k).abs() <= 3, "prefix {k}: srv-a {a}");
        assert!((3 * b - k).abs() <= 3, "prefix {k}: srv-b {b}");
        assert_eq!(count.get("srv-c"), None, "the 0-weight Server was chosen");
    }
    // One-way sends share the same selector: 300 more picks split exactly 200 / 100 / 0.
    for seq in 0..300 {
        c.client()
            .channel_send(
                CH,
                &Note {
                    seq,
                    body: String::new(),
                },
            )
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    let counts = || -> Vec<u64> {
        c.seen
            .iter()
            .map(|s| s.sends.load(Ordering::Relaxed))
            .collect()
    };
    while counts().iter().sum::<u64>() < 300 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(counts(), vec![200, 100, 0]);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_weight_change_takes_effect_on_peers() {
    let c = Servers::start(&[100, 100]).await;
    let (a, b) = (c.server(0), c.server(1));
    let before = c.client().peer("srv-b").unwrap().descriptor.unwrap();
    // Weight 0: out of new selection (the revision orders the change).
    b.set_channel_weight(CH, 0).unwrap();
    c.client_sees("srv-b", |d| weight_of(d) == 0).await;
    let after = c.client().peer("srv-b").unwrap().descriptor.unwrap();
    assert!(after.descriptor_revision > before.descriptor_revision);
    for n in 0..20 {
        assert_eq!(c.who(n).await.unwrap(), "srv-a");
    }
    // Back to a positive weight: selected again, in the configured ratio (300:100).
    b.set_channel_weight(CH, 300).unwrap();
    c.client_sees("srv-b", |d| weight_of(d) == 300).await;
    let mut got = HashMap::<String, u32>::new();
    for n in 0..400 {
        *got.entry(c.who(n).await.unwrap()).or_default() += 1;
    }
    assert_eq!(got.get("srv-b"), Some(&300), "{got:?}");
    assert_eq!(got.get("srv-a"), Some(&100), "{got:?}");
    // Range and membership are checked locally, before anything is announced.
    assert_eq!(
        a.set_channel_weight(CH, 10_001).unwrap_err().kind(),
        ErrorKind::Configuration
    );
    assert_eq!(
        a.set_channel_weight("other", 5).unwrap_err().kind(),
        ErrorKind::InvalidOperation
    );
    c.shutdown().await;
}

/// Drain and weight 0 both stop new selection and neither cancels work already submitted:
/// a slow request accepted by `srv-a` before the change still completes with its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_or_zero_weight_server_gets_no_new_work_while_accepted_requests_finish() {
    for mode in ["drain", "weight0"] {
        let c = Servers::start(&[100, 100]).await;
        let (a, seen_a) = (c.server(0), Arc::clone(&c.seen[0]));
        // Equal weights: the first pick is the earliest candidate, srv-a.
        let client = Arc::clone(c.client());
        let slow = tokio::spawn(async move {
            client
                .channel_request::<Slow, Me>(CH, &Slow { n: 7 }, Duration::from_secs(10))
                .await
        });
        tokio::time::timeout(WAIT, seen_a.slow_started.notified())
            .await
            .unwrap();
        match mode {
            "drain" => {
                a.set_runtime_state(RuntimeState::Draining);
                c.client_sees("srv-a", |d| d.state == RuntimeState::Draining)
                    .await;
            }
            _ => {
                a.set_channel_weight(CH, 0).unwrap();
                c.client_sees("srv-a", |d| weight_of(d) == 0).await;
            }
        }
        for n in 0..20 {
            assert_eq!(
                c.who(n).await.unwrap(),
                "srv-b",
                "{mode}: new work went to srv-a"
            );
        }
        assert!(!slow.is_finished(), "{mode}: the slow request ended early");
        seen_a.gate.add_permits(1);
        let done = tokio::time::timeout(WAIT, slow).await.unwrap().unwrap();
        assert_eq!(
            done.unwrap(),
            Me {
                rid: "srv-a".into(),
                n: 7
            },
            "{mode}"
        );
        // With every Server out of selection, the caller gets a typed Unavailable at once.
        c.server(1).set_runtime_state(RuntimeState::Draining);
        if mode == "weight0" {
            a.set_runtime_state(RuntimeState::Draining);
        }
        c.client_sees("srv-b", |d| d.state == RuntimeState::Draining)
            .await;
        c.client_sees("srv-a", |d| d.state == RuntimeState::Draining)
            .await;
        assert_eq!(c.who(99).await.unwrap_err().kind(), ErrorKind::Unavailable);
        c.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_direct_and_channel_handlers_live_in_separate_namespaces() {
    let seen = Arc::new(Seen::default());
    // srv-a answers Who only in the Channel namespace, Echo only node-direct.
    let mut h = server_handlers("srv-a", &seen);
    h.on_request(|_, e: Echo| async move { Ok::<_, CallError>(e) });
    let server = start(config("m", "srv-a").channel_server(CH, 100), h).await;
    let mut cfg = config("m", "cli").channel_client(CH);
    cfg.manual_peers.push(ManualPeer {
        endpoint: server.endpoint().to_owned(),
        expected_rid: Some("srv-a".into()),
    });
    let client = start(cfg, Handlers::new()).await;
    client.wait_ready("srv-a", WAIT).await.unwrap();

    let t = Duration::from_secs(5);
    let who = client
        .channel_request::<Who, Me>(CH, &Who { n: 1 }, t)
        .await
        .unwrap();
    assert_eq!(who.rid, "srv-a");
    // Who is not a node-direct handler, Echo is not a Channel handler.
    let err = client
        .request::<Who, Me>("srv-a", &Who { n: 2 }, t)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let echo = Echo {
        text: "x".into(),
        n: 1,
    };
    let err = client
        .channel_request::<Echo, Echo>(CH, &echo, t)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        client
            .request::<Echo, Echo>("srv-a", &echo, t)
            .await
            .unwrap(),
        echo
    );
    // A Channel this node has no membership of is refused locally.
    let err = client
        .channel_request::<Who, Me>("elsewhere", &Who { n: 3 }, t)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation);
    // The Server's role includes sending: it may call the Channel too (here no other Server
    // is eligible, so the answer is a typed Unavailable, not a self-delivery).
    let err = server
        .channel_request::<Who, Me>(CH, &Who { n: 4 }, t)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    client.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn channel_registrations_are_checked_at_start() {
    let start_err = |cfg: MeshNodeConfig, h: Handlers| async move {
        match MeshNode::start(cfg, h, None).await {
            Err(MeshError::Config(e)) => e.to_string(),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("started"),
        }
    };
    // Each role at most once per ChannelName.
    let cfg = config("m", "x")
        .channel_server(CH, 10)
        .channel_server(CH, 20);
    assert!(start_err(cfg, Handlers::new()).await.contains("twice"));
    // Client and Server of the same Channel in one process is allowed.
    let ok = start(
        config("m", "y").channel_server(CH, 10).channel_client(CH),
        Handlers::new(),
    )
    .await;
    ok.shutdown().await;
    // Weight out of range.
    let cfg = config("m", "x").channel_server(CH, 10_001);
    assert!(start_err(cfg, Handlers::new()).await.contains("0..=10000"));
    // Channel handlers need a Server membership.
    let mut h = Handlers::new();
    h.channel("nobody").on_send(|_, _: Note| async { Ok(()) });
    let cfg = config("m", "x").channel_client("nobody");
    assert!(start_err(cfg, h).await.contains("no Server membership"));
    // Duplicates inside a Channel namespace are reported with the Channel as namespace.
    let mut h = Handlers::new();
    h.channel(CH).on_send(|_, _: Note| async { Ok(()) });
    h.channel(CH).on_send(|_, _: Note| async { Ok(()) });
    let msg = start_err(config("m", "x").channel_server(CH, 1), h).await;
    assert!(
        msg.contains("duplicate handler") && msg.contains(CH),
        "{msg}"
    );
}

/// A node may hold both roles of one Channel; its `update` carries Server weights only, and a
/// peer applies them to the Server membership (not to the Client entry listed first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_change_of_a_node_that_is_client_and_server_reaches_its_server_membership() {
    // srv-a is a Client of the Channel first, then a Server.
    let c = Servers::start_with(&[100, 100], |b| b.channel_client(CH, 0)).await;
    c.server(0).set_channel_weight(CH, 0).unwrap();
    c.client_sees("srv-a", |d| weight_of(d) == 0).await;
    for n in 0..10 {
        assert_eq!(c.who(n).await.unwrap(), "srv-b");
    }
    c.shutdown().await;
}
