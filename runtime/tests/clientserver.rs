//! ClientServer Channel acceptance tests (glossary §6, §7 Select-one, §8; wire §2 size limit,
//! §4 admission and "ClientServer 방향", §5 liveness): real ZeroMQ sockets on 127.0.0.1, the
//! memory Location Store where a store is needed, and a raw ROUTER socket where a test needs a
//! server that breaks the rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use zlink::call::error::{CallError, ErrorKind};
use zlink::clientserver::admission::{self, SideIdentity};
use zlink::clientserver::store::ClientServerStore;
use zlink::clientserver::{
    ClientConfig, ClientServerClient, ClientServerError, ClientServerServer, ClientServerTimings,
    ServerConfig,
};
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::{Handlers, JsonMessage};
use zlink_protocol::channel_envelope::ChannelHeader;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    ChannelRole, ChannelWeight, CommandBody, NodeFence, NodeSend, RuntimeState, Update,
};
use zlink_protocol::record::{Leg, Record, WireContext};
use zlink_store::MemoryStore;
use zlink_store::clock::SystemClock;

const SECRET: &[u8] = b"clientserver-test-secret-0123";
const WAIT: Duration = Duration::from_secs(10);
const MIB: u64 = 1024 * 1024;

fn secret() -> MeshSecret {
    MeshSecret::from_bytes(SECRET).unwrap()
}

fn timings() -> ClientServerTimings {
    ClientServerTimings {
        probe_interval: Duration::from_millis(100),
        liveness_deadline: Duration::from_millis(1_500),
        discovery_poll: Duration::from_millis(50),
        lease_ttl: Duration::from_millis(2_000),
        lease_renew: Duration::from_millis(300),
        fencing_margin: Duration::from_millis(300),
        hello_retry: Duration::from_millis(200),
        admission_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(10),
        shutdown_grace: Duration::from_secs(2),
        reconnect_interval: Duration::from_millis(50),
    }
}

fn server_config(channel: &str, rid: &str) -> ServerConfig {
    let mut c = ServerConfig::new(channel, secret());
    c.rid = Some(rid.into());
    c.timings = timings();
    c
}

fn client_config(channel: &str, endpoints: &[&str]) -> ClientConfig {
    let mut c = ClientConfig::new(channel, secret());
    c.manual_endpoints = endpoints.iter().map(|e| (*e).to_owned()).collect();
    c.timings = timings();
    c
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Who {
    delay_ms: u64,
}
impl JsonMessage for Who {
    const PACKET_NAME: &'static str = "test.Who";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Me {
    rid: String,
}
impl JsonMessage for Me {
    const PACKET_NAME: &'static str = "test.Me";
}

/// Handlers of a server named `rid`: `test.Who` answers the server's RID after `delay_ms`
/// (8 at a time); `bulk` echoes raw bytes.
fn handlers(rid: &str) -> Handlers {
    let mut h = Handlers::new();
    let name = rid.to_owned();
    h.on_request_concurrent(8, move |_, w: Who| {
        let name = name.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(w.delay_ms)).await;
            Ok::<_, CallError>(Me { rid: name })
        }
    });
    h.on_request_raw("bulk", 2, |_, b| async move { Ok(b) });
    h
}

async fn server(channel: &str, rid: &str) -> ClientServerServer {
    ClientServerServer::start(server_config(channel, rid), handlers(rid), None)
        .await
        .unwrap()
}

async fn who(c: &ClientServerClient, delay_ms: u64) -> Result<String, ClientServerError> {
    c.request_json::<Who, Me>(&Who { delay_ms })
        .await
        .map(|m| m.rid)
}

fn bulk(size: usize) -> TypedPayload {
    let mut v = vec![0u8; size];
    for (i, b) in v.iter_mut().enumerate().step_by(4096) {
        *b = (i / 4096) as u8;
    }
    TypedPayload::new("bulk", "application/octet-stream", v)
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Admission (wire §4): a client with the channel's secret and name is admitted and served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_secret_and_channel_are_admitted_and_served() {
    let s = server("admit", "cs-a").await;
    let c = ClientServerClient::start(client_config("admit", &[s.endpoint()]), None)
        .await
        .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    let snap = &c.servers()[0];
    assert_eq!(snap.server_rid.as_deref(), Some("cs-a"));
    assert_eq!(snap.lifecycle_generation, Some(s.lifecycle_generation()));
    assert_eq!(snap.weight, 100);
    assert_eq!(who(&c, 0).await.unwrap(), "cs-a");
    // The largest timeout saturates the deadline instead of overflowing a clock (review 5).
    let echoed = c.request(bulk(16), Some(Duration::MAX)).await.unwrap();
    assert_eq!(echoed.payload.len(), 16);
    assert_eq!(s.metrics().admitted.load(Ordering::Relaxed), 1);
    assert_eq!(s.metrics().delivered.load(Ordering::Relaxed), 2);
    c.shutdown().await;
    s.shutdown().await;
}

/// Admission (wire §4): a wrong secret and a wrong ChannelName are rejected with their reason
/// on the hello's reply leg; the client reports the server not ready with that reason and
/// selects nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_or_channel_is_rejected_with_a_reason() {
    let s = server("reject", "cs-a").await;

    let mut bad_secret = client_config("reject", &[s.endpoint()]);
    bad_secret.secret = MeshSecret::from_bytes(b"some-other-secret-9876").unwrap();
    let c1 = ClientServerClient::start(bad_secret, None).await.unwrap();
    assert!(
        c1.wait_for(WAIT, |s| s[0]
            .not_ready_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("authenticationFailed")))
            .await,
        "{:?}",
        c1.servers()
    );
    assert!(!c1.servers()[0].ready);

    let c2 = ClientServerClient::start(client_config("chat", &[s.endpoint()]), None)
        .await
        .unwrap();
    assert!(
        c2.wait_for(WAIT, |s| s[0].not_ready_reason.as_deref().is_some_and(
            |r| r.starts_with("meshMismatch") && r.contains("reject")
        ))
        .await,
        "{:?}",
        c2.servers()
    );
    assert!(matches!(
        who(&c2, 0).await,
        Err(ClientServerError::NoReadyServer(_))
    ));
    assert!(s.metrics().rejected.load(Ordering::Relaxed) >= 2);
    assert_eq!(s.metrics().admitted.load(Ordering::Relaxed), 0);
    assert_eq!(s.client_count(), 0);
    c1.shutdown().await;
    c2.shutdown().await;
    s.shutdown().await;
}

/// Size limit (wire §2): with 32 MiB on both sides a 17 MiB payload goes out and comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_mib_on_both_sides_carries_a_17_mib_request_and_reply() {
    let mut sc = server_config("big32", "cs-big");
    sc.max_message_bytes = 32 * MIB;
    let s = ClientServerServer::start(sc, handlers("cs-big"), None)
        .await
        .unwrap();
    let mut cc = client_config("big32", &[s.endpoint()]);
    cc.max_message_bytes = 32 * MIB;
    let c = ClientServerClient::start(cc, None).await.unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    assert_eq!(c.servers()[0].max_message_bytes, Some(32 * MIB));
    let p = bulk(17 * MIB as usize);
    let back = c.request(p.clone(), None).await.unwrap();
    assert_eq!(back.payload.len(), 17 * MIB as usize);
    assert!(back.payload == p.payload);
    c.shutdown().await;
    s.shutdown().await;
}

/// Size limit (wire §2): client 32 MiB / server 16 MiB admits 16 MiB; a 17 MiB request is
/// refused with a typed error before anything is sent (the server's handler count does not
/// move) and the connection keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smaller_limit_is_negotiated_and_an_over_limit_send_is_refused_before_sending() {
    let mut sc = server_config("big16", "cs-16");
    sc.max_message_bytes = 16 * MIB;
    let s = ClientServerServer::start(sc, handlers("cs-16"), None)
        .await
        .unwrap();
    let mut cc = client_config("big16", &[s.endpoint()]);
    cc.max_message_bytes = 32 * MIB;
    let c = ClientServerClient::start(cc, None).await.unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    assert_eq!(c.servers()[0].max_message_bytes, Some(16 * MIB));

    let before = s.metrics().delivered.load(Ordering::Relaxed);
    let err = c.request(bulk(17 * MIB as usize), None).await.unwrap_err();
    match err {
        ClientServerError::MessageTooLarge { bytes, limit } => {
            assert_eq!(limit, 16 * MIB);
            assert!(bytes > 17 * MIB);
        }
        other => panic!("expected MessageTooLarge, got {other:?}"),
    }
    assert!(matches!(
        c.send(bulk(17 * MIB as usize)),
        Err(ClientServerError::MessageTooLarge { .. })
    ));
    assert_eq!(c.metrics().requests_sent.load(Ordering::Relaxed), 0);
    // Just under the limit still works, and only that one reached a handler.
    let ok = c.request(bulk(15 * MIB as usize), None).await.unwrap();
    assert_eq!(ok.payload.len(), 15 * MIB as usize);
    assert_eq!(s.metrics().delivered.load(Ordering::Relaxed), before + 1);
    assert_eq!(s.metrics().protocol_errors.total(), 0);
    c.shutdown().await;
    s.shutdown().await;
}

/// A raw ROUTER standing in for a server that breaks the rules.
struct Rogue {
    socket: zmq::Socket,
    routing_id: Vec<u8>,
    lifecycle: u64,
}

impl Rogue {
    fn bind(endpoint: &str) -> zmq::Socket {
        let ctx = zmq::Context::new();
        let s = ctx.socket(zmq::ROUTER).unwrap();
        s.set_linger(0).unwrap();
        s.set_rcvtimeo(5_000).unwrap();
        let start = Instant::now();
        // The endpoint may still be held for a moment by the socket that used it before.
        while let Err(e) = s.bind(endpoint) {
            assert!(start.elapsed() < WAIT, "bind {endpoint}: {e}");
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    /// Wait for a client's hello and admit it as server `rid` of a new lifecycle.
    fn admit(
        socket: zmq::Socket,
        channel: &str,
        rid: &str,
        endpoint: &str,
        lifecycle: u64,
    ) -> Self {
        loop {
            let frames = socket.recv_multipart(0).expect("hello");
            let Some((routing_id, rest)) = frames.split_first() else {
                continue;
            };
            let Ok(rec) = Record::decode(rest, WireContext::client_server(Leg::Request)) else {
                continue; // a liveness record of an earlier connection
            };
            let CommandBody::Hello(h) = rec.body else {
                continue;
            };
            let me = SideIdentity {
                channel_name: channel.into(),
                rid: rid.into(),
                lifecycle_generation: lifecycle,
                endpoint: endpoint.into(),
                security_identity: "zlink".into(),
            };
            let d = admission::descriptor(&me, ChannelRole::Server, 1, RuntimeState::Serving, 100);
            let admit = admission::admit(&secret(), d, &h.nonce, [7; 32], 99, h.max_message_bytes);
            let mut out = vec![routing_id.clone()];
            out.extend(
                admit
                    .encode(WireContext::client_server(Leg::Reply))
                    .unwrap(),
            );
            socket.send_multipart(out, 0).unwrap();
            return Self {
                socket,
                routing_id: routing_id.clone(),
                lifecycle,
            };
        }
    }

    fn send_update(&self, rid: &str, revision: u64, weight: u16) {
        let update = Record::new(CommandBody::Update(Update {
            sender: NodeFence {
                rid: zlink_protocol::shared_str::SharedStr::copy_from(rid),
                lifecycle_generation: self.lifecycle,
            },
            descriptor_revision: revision,
            state: RuntimeState::Serving,
            placement_weight: 0,
            placement_capacity: 0,
            maintenance_wave: String::new(),
            channel_weights: vec![ChannelWeight {
                channel_name: "order".into(),
                weight,
            }],
        }));
        let mut out = vec![self.routing_id.clone()];
        out.extend(
            update
                .encode(WireContext::client_server(Leg::Send))
                .unwrap(),
        );
        self.socket.send_multipart(out, 0).unwrap();
    }

    fn send_envelope(&self, header: &ChannelHeader, payload: &[u8]) {
        self.socket
            .send_multipart(
                [
                    self.routing_id.clone(),
                    header.encode().unwrap(),
                    payload.to_vec(),
                ],
                0,
            )
            .unwrap();
    }
}

/// Lifecycle generation (glossary §6, §8 Server identity): a server restarted on the same
/// endpoint is a new lifecycle. The request in flight to the old run ends with exactly one
/// terminal error; a late reply carrying that request's correlation through the new
/// connection is not delivered; the client sees the new generation and is served by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_a_new_lifecycle_and_old_requests_end_once() {
    let old = server("restart", "cs-r").await;
    let endpoint = old.endpoint().to_owned();
    let old_generation = old.lifecycle_generation();
    let c = Arc::new(
        ClientServerClient::start(client_config("restart", &[&endpoint]), None)
            .await
            .unwrap(),
    );
    assert!(c.wait_selectable(1, WAIT).await);

    // Request 1 (correlation "1") runs slowly on the old lifecycle; the old server dies.
    let c1 = Arc::clone(&c);
    let in_flight = tokio::spawn(async move { who(&c1, 2_000).await });
    eventually("the slow handler to start", || {
        old.metrics().delivered.load(Ordering::Relaxed) == 1
    })
    .await;
    old.abort().await;
    let first = tokio::time::timeout(WAIT, in_flight)
        .await
        .unwrap()
        .unwrap();
    match first {
        Err(ClientServerError::Call(e)) => {
            assert_eq!(e.kind(), ErrorKind::Unavailable);
            // Ended by the lifecycle it was sent to, not by whatever answers next.
            assert!(
                e.detail().contains(&old_generation.to_string()),
                "{}",
                e.detail()
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }

    // A new run at the same endpoint admits the client with another lifecycle generation
    // and then delivers a reply for the old request.
    let rogue_generation = old_generation ^ 0x5555;
    let socket = tokio::task::spawn_blocking({
        let endpoint = endpoint.clone();
        move || {
            let s = Rogue::bind(&endpoint);
            Rogue::admit(s, "restart", "cs-r", &endpoint, rogue_generation)
        }
    })
    .await
    .unwrap();
    assert!(
        c.wait_for(WAIT, |s| s[0].ready
            && s[0].lifecycle_generation == Some(rogue_generation))
            .await
    );
    socket.send_envelope(
        &ChannelHeader::Response {
            content_type: String::new(),
            correlation_id: "1".into(),
        },
        b"late",
    );
    eventually("the late reply to be dropped", || {
        c.metrics().late_replies.load(Ordering::Relaxed) == 1
    })
    .await;
    assert_eq!(socket.lifecycle, rogue_generation);
    drop(socket);

    // A real new run: new generation, serves the next request.
    let mut cfg = server_config("restart", "cs-r");
    cfg.port = endpoint.rsplit(':').next().unwrap().parse().unwrap();
    let rebind = Instant::now();
    let new = loop {
        match ClientServerServer::start(cfg.clone(), handlers("cs-r"), None).await {
            Ok(s) => break s,
            // The rogue's socket may hold the port for a moment after it closed.
            Err(ClientServerError::Transport(_)) if rebind.elapsed() < WAIT => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_ne!(new.lifecycle_generation(), old_generation);
    let new_generation = new.lifecycle_generation();
    assert!(
        c.wait_for(WAIT, |s| s[0].selectable
            && s[0].lifecycle_generation == Some(new_generation))
            .await
    );
    assert_eq!(who(&c, 0).await.unwrap(), "cs-r");
    assert_eq!(c.metrics().late_replies.load(Ordering::Relaxed), 1);
    c.shutdown().await;
    new.shutdown().await;
}

/// ClientServer Channel (glossary §8): the server never starts calls. A (rogue) server that
/// admits and then sends a `request` and a `command` envelope gets protocol errors; nothing
/// runs on the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_cannot_start_calls_to_a_client() {
    let socket = Rogue::bind("tcp://127.0.0.1:*");
    let endpoint = socket.get_last_endpoint().unwrap().unwrap();
    let c = ClientServerClient::start(client_config("rogue", &[&endpoint]), None)
        .await
        .unwrap();
    let rogue = tokio::task::spawn_blocking({
        let endpoint = endpoint.clone();
        move || Rogue::admit(socket, "rogue", "cs-rogue", &endpoint, 42)
    })
    .await
    .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    rogue.send_envelope(
        &ChannelHeader::Request {
            packet_name: "test.Who".into(),
            content_type: String::new(),
            correlation_id: "x1".into(),
            deadline_unix_ms: None,
        },
        b"{}",
    );
    rogue.send_envelope(
        &ChannelHeader::Command {
            packet_name: "test.Who".into(),
            content_type: String::new(),
        },
        b"{}",
    );
    eventually("both calls to be refused", || {
        c.metrics().server_initiated_calls.load(Ordering::Relaxed) == 2
    })
    .await;
    assert_eq!(
        c.metrics()
            .protocol_errors
            .snapshot()
            .get("ServerInitiatedCall"),
        Some(&2)
    );
    c.shutdown().await;
}

/// Wire §4 "ClientServer 방향": RouteMesh records (`nodeSend` 16, `channelRequest` 19) on an
/// admitted ClientServer connection are protocol errors and never reach a handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_mesh_records_on_a_client_server_connection_are_protocol_errors() {
    let s = server("routemesh", "cs-a").await;
    let ctx = zmq::Context::new();
    let d = ctx.socket(zmq::DEALER).unwrap();
    d.set_linger(0).unwrap();
    d.set_rcvtimeo(5_000).unwrap();
    d.connect(s.endpoint()).unwrap();
    let me = SideIdentity {
        channel_name: "routemesh".into(),
        rid: "raw-client".into(),
        lifecycle_generation: 5,
        endpoint: s.endpoint().into(),
        security_identity: "zlink".into(),
    };
    let hello = admission::hello(&secret(), &me, MIB, [3; 32], None);
    d.send_multipart(
        hello
            .encode(WireContext::client_server(Leg::Request))
            .unwrap(),
        0,
    )
    .unwrap();
    let reply = d.recv_multipart(0).unwrap();
    let rec = Record::decode(&reply, WireContext::client_server(Leg::Reply)).unwrap();
    assert!(matches!(rec.body, CommandBody::Admit(_)), "{rec:?}");

    let node_send = Record::new(CommandBody::NodeSend(NodeSend {
        source: NodeFence {
            rid: "raw-client".into(),
            lifecycle_generation: 5,
        },
        target: NodeFence {
            rid: "cs-a".into(),
            lifecycle_generation: s.lifecycle_generation(),
        },
    }))
    .with_payload(TypedPayload::new("test.Who", "", &b"{\"delay_ms\":0}"[..]))
    .encode(WireContext::route_mesh(Leg::Send))
    .unwrap();
    d.send_multipart(node_send, 0).unwrap();
    let golden: serde_json::Value = serde_json::from_str(include_str!(
        "../../protocol/golden/commands/19-channelRequest.json"
    ))
    .unwrap();
    let channel_request: Vec<Vec<u8>> = golden["valid"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| hex(f.as_str().unwrap()))
        .collect();
    d.send_multipart(channel_request, 0).unwrap();
    eventually("two protocol errors", || {
        s.metrics().protocol_errors().get("TopologyNotAllowed") == Some(&2)
    })
    .await;
    assert_eq!(s.metrics().delivered.load(Ordering::Relaxed), 0);
    s.shutdown().await;
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The reference smooth weighted round-robin (nginx) the client must follow exactly.
fn reference_sequence(weights: &[(&str, i64)], n: usize) -> Vec<String> {
    let total: i64 = weights.iter().map(|(_, w)| w).sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::new();
    for _ in 0..n {
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

/// Select-one (glossary §7) over servers weighted 100/50/0: the exact smooth weighted
/// sequence, every prefix within 1 of the ideal share, the 0-weight server never chosen;
/// then a runtime `set_weight` (revision-ordered `update`) changes the shares on the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_one_follows_the_smooth_weighted_sequence_and_runtime_weights() {
    let a = server("select", "cs-a").await;
    let mut bc = server_config("select", "cs-b");
    bc.weight = 50;
    let b = ClientServerServer::start(bc, handlers("cs-b"), None)
        .await
        .unwrap();
    let mut cc = server_config("select", "cs-c");
    cc.weight = 0;
    let zero = ClientServerServer::start(cc, handlers("cs-c"), None)
        .await
        .unwrap();
    let c = ClientServerClient::start(
        client_config("select", &[a.endpoint(), b.endpoint(), zero.endpoint()]),
        None,
    )
    .await
    .unwrap();
    assert!(
        c.wait_for(WAIT, |s| s.len() == 3 && s.iter().all(|x| x.ready))
            .await
    );
    assert!(!c.servers()[2].selectable, "weight 0 is not selectable");

    let mut got = Vec::new();
    for _ in 0..30 {
        got.push(who(&c, 0).await.unwrap());
    }
    let expected = reference_sequence(&[("cs-a", 100), ("cs-b", 50), ("cs-c", 0)], 30);
    assert_eq!(got, expected);
    for k in 1..=got.len() {
        let a_count = got[..k].iter().filter(|r| *r == "cs-a").count() as f64;
        let ideal = k as f64 * 100.0 / 150.0;
        assert!(
            (a_count - ideal).abs() <= 1.0,
            "prefix {k}: {a_count} vs {ideal}"
        );
    }
    assert!(!got.iter().any(|r| r == "cs-c"));
    assert_eq!(zero.metrics().delivered.load(Ordering::Relaxed), 0);

    assert!(matches!(
        b.set_weight(10_001).await,
        Err(ClientServerError::WeightOutOfRange(10_001))
    ));
    b.set_weight(200).await.unwrap();
    assert!(c.wait_for(WAIT, |s| s[1].weight == 200).await);
    let mut b_count = 0;
    for _ in 0..30 {
        if who(&c, 0).await.unwrap() == "cs-b" {
            b_count += 1;
        }
    }
    // 200 : 100 → two thirds of 30, give or take the carried-over smooth state.
    assert!((18..=22).contains(&b_count), "cs-b got {b_count} of 30");
    assert!(c.metrics().updates_applied.load(Ordering::Relaxed) >= 1);
    c.shutdown().await;
    for s in [a, b, zero] {
        s.shutdown().await;
    }
}

/// Drain (glossary §6 Ready target, §7 Select-one): a draining server gets no new work,
/// while the slow request it accepted before draining completes with its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_gets_no_new_work_but_finishes_accepted_requests() {
    let a = server("drain", "cs-a").await;
    let b = server("drain", "cs-b").await;
    let c = Arc::new(
        ClientServerClient::start(client_config("drain", &[a.endpoint(), b.endpoint()]), None)
            .await
            .unwrap(),
    );
    assert!(c.wait_selectable(2, WAIT).await);
    // Two slow requests: smooth weighted 100/100 sends one to each.
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let c = Arc::clone(&c);
            tokio::spawn(async move { who(&c, 600).await })
        })
        .collect();
    eventually("both slow handlers to start", || {
        a.metrics().delivered.load(Ordering::Relaxed) == 1
            && b.metrics().delivered.load(Ordering::Relaxed) == 1
    })
    .await;
    // drain() returns once the request A accepted is done and replied to.
    a.drain().await.unwrap();
    assert_eq!(a.metrics().replies_sent.load(Ordering::Relaxed), 1);
    assert!(
        c.wait_for(WAIT, |s| s[0].state == Some(RuntimeState::Draining)
            && !s[0].selectable)
            .await
    );
    for _ in 0..10 {
        assert_eq!(who(&c, 0).await.unwrap(), "cs-b");
    }
    // A request that still reaches the draining server is refused with a typed Unavailable.
    let raw = raw_admitted_client(&a, "drain", 11, MIB);
    let header = ChannelHeader::Request {
        packet_name: Who::PACKET_NAME.into(),
        content_type: "application/json".into(),
        correlation_id: "late".into(),
        deadline_unix_ms: None,
    };
    raw.send_multipart([header.encode().unwrap(), br#"{"delay_ms":0}"#.to_vec()], 0)
        .unwrap();
    // Skip liveness probes; the reply is the first channel envelope.
    let reply = loop {
        let m = raw.recv_multipart(0).unwrap();
        if m[0].first() == Some(&0xF2) {
            break m;
        }
    };
    match zlink_protocol::channel_envelope::decode_record(
        &reply.into_iter().map(Bytes::from).collect::<Vec<_>>(),
    )
    .unwrap()
    {
        ChannelHeader::Error { code, detail, .. } => {
            assert_eq!(
                CallError::from_status(code, detail).unwrap().kind(),
                ErrorKind::Unavailable
            );
        }
        other => panic!("expected an error reply, got {other:?}"),
    }
    assert_eq!(a.metrics().drain_refusals.load(Ordering::Relaxed), 1);
    let mut answered: Vec<String> = Vec::new();
    for h in slow {
        answered.push(h.await.unwrap().unwrap());
    }
    answered.sort();
    assert_eq!(answered, ["cs-a", "cs-b"]);
    assert_eq!(a.metrics().delivered.load(Ordering::Relaxed), 1);
    c.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}

/// Liveness (wire §5): a server that stops answering probes becomes not-ready at the deadline,
/// and is admitted again on a new connection once it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_acking_becomes_not_ready_at_the_deadline() {
    let fast = ClientServerTimings {
        probe_interval: Duration::from_millis(50),
        liveness_deadline: Duration::from_millis(300),
        ..timings()
    };
    let mut sc = server_config("live", "cs-a");
    sc.timings = fast.clone();
    let s = ClientServerServer::start(sc, handlers("cs-a"), None)
        .await
        .unwrap();
    let mut cc = client_config("live", &[s.endpoint()]);
    cc.timings = fast;
    let c = ClientServerClient::start(cc, None).await.unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    let admitted_before = s.metrics().admitted.load(Ordering::Relaxed);

    s.set_drop_liveness_acks(true);
    let start = Instant::now();
    assert!(
        c.wait_for(WAIT, |x| !x[0].ready
            && x[0].not_ready_reason.as_deref()
                == Some("liveness deadline passed"))
            .await
    );
    let took = start.elapsed();
    // The deadline runs from the last matching ACK (≤ one probe interval before the switch).
    assert!(
        took >= Duration::from_millis(200),
        "not-ready after {took:?}"
    );
    // Upper bound relative to the configured deadline (300 ms) with generous slack for a
    // loaded 2-core machine: far below "never".
    assert!(
        took <= Duration::from_millis(300) * 10,
        "not-ready after {took:?}"
    );
    // While the server keeps not answering, every new connection dies the same way.
    assert!(c.metrics().liveness_deaths.load(Ordering::Relaxed) >= 1);

    s.set_drop_liveness_acks(false);
    assert!(c.wait_selectable(1, WAIT).await);
    assert!(s.metrics().admitted.load(Ordering::Relaxed) > admitted_before);
    assert_eq!(who(&c, 0).await.unwrap(), "cs-a");
    c.shutdown().await;
    s.shutdown().await;
}

/// Automatic discovery (glossary §6): the server publishes its descriptor under an owner
/// lease; the client finds it by ChannelName, ignores and counts a malformed descriptor, and
/// drops the server after its graceful shutdown removed the descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_discovered_through_the_store_and_removed_on_shutdown() {
    let store = Arc::new(MemoryStore::new(SystemClock));
    let dyn_store: Arc<dyn ClientServerStore> = store.clone();
    let s = ClientServerServer::start(
        server_config("disco", "cs-d"),
        handlers("cs-d"),
        Some(Arc::clone(&dyn_store)),
    )
    .await
    .unwrap();

    // Someone else publishes garbage under the same channel.
    let grant = dyn_store
        .claim_lease("host-junk", Duration::from_secs(30))
        .await
        .unwrap();
    let key = zlink_store::types::DescriptorKey {
        kind: zlink_store::types::DescriptorKind::ClientServerServer,
        scope: "disco".into(),
        rid: "cs-junk".into(),
    };
    dyn_store
        .publish_descriptor(&grant.token, &key, 1, 1, Bytes::from_static(b"{not json"))
        .await
        .unwrap();

    let c = ClientServerClient::start(client_config("disco", &[]), Some(dyn_store))
        .await
        .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    assert_eq!(c.servers().len(), 1);
    assert_eq!(c.servers()[0].server_rid.as_deref(), Some("cs-d"));
    assert_eq!(who(&c, 0).await.unwrap(), "cs-d");
    assert!(c.metrics().malformed_descriptors.load(Ordering::Relaxed) >= 1);

    s.drain().await.unwrap();
    assert_eq!(s.descriptor().state, RuntimeState::Draining);
    assert_eq!(s.descriptor().descriptor_revision, 2);
    s.shutdown().await;
    assert!(c.wait_for(WAIT, <[_]>::is_empty).await, "{:?}", c.servers());
    c.shutdown().await;
}

/// A one-way command reaches its handler; the client counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_reaches_its_handler_once() {
    let seen = Arc::new(AtomicU64::new(0));
    let mut h = Handlers::new();
    let s2 = Arc::clone(&seen);
    h.on_send(move |ctx, _: Who| {
        let s2 = Arc::clone(&s2);
        async move {
            assert!(ctx.correlation_id.is_none());
            s2.fetch_add(1, Ordering::Relaxed);
            Ok::<_, CallError>(())
        }
    });
    let s = ClientServerServer::start(server_config("command", "cs-a"), h, None)
        .await
        .unwrap();
    let c = ClientServerClient::start(client_config("command", &[s.endpoint()]), None)
        .await
        .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    c.send_json(&Who { delay_ms: 0 }).unwrap();
    eventually("the command to run", || seen.load(Ordering::Relaxed) == 1).await;
    // A request for a packet with no request handler ends with NotFound.
    match who(&c, 0).await {
        Err(ClientServerError::Call(e)) => assert_eq!(e.kind(), ErrorKind::NotFound),
        other => panic!("{other:?}"),
    }
    c.shutdown().await;
    s.shutdown().await;
}

/// DescriptorRevision ordering (wire §4) of pushed `update`s: a higher revision applies, the
/// same revision with the same bytes is idempotent, the same revision with other bytes and a
/// lower revision are protocol errors, and an update naming another server is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_are_revision_ordered() {
    let socket = Rogue::bind("tcp://127.0.0.1:*");
    let endpoint = socket.get_last_endpoint().unwrap().unwrap();
    let c = ClientServerClient::start(client_config("order", &[&endpoint]), None)
        .await
        .unwrap();
    let rogue = tokio::task::spawn_blocking({
        let endpoint = endpoint.clone();
        move || Rogue::admit(socket, "order", "cs-rogue", &endpoint, 42)
    })
    .await
    .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    rogue.send_update("cs-rogue", 2, 30);
    assert!(c.wait_for(WAIT, |s| s[0].weight == 30).await);
    rogue.send_update("cs-rogue", 2, 30); // same bytes: idempotent
    rogue.send_update("cs-rogue", 2, 40); // same revision, other bytes
    rogue.send_update("cs-rogue", 1, 50); // lower
    rogue.send_update("cs-other", 3, 60); // not the admitted server
    eventually("three protocol errors", || {
        c.metrics().protocol_errors.total() == 3
    })
    .await;
    let errors = c.metrics().protocol_errors.snapshot();
    assert_eq!(errors.get("RevisionConflict"), Some(&1));
    assert_eq!(errors.get("RevisionLower"), Some(&1));
    assert_eq!(errors.get("UpdateSenderMismatch"), Some(&1));
    assert_eq!(c.metrics().updates_applied.load(Ordering::Relaxed), 1);
    assert_eq!(c.servers()[0].weight, 30);
    rogue.send_update("cs-rogue", 3, 70);
    assert!(c.wait_for(WAIT, |s| s[0].weight == 70).await);
    c.shutdown().await;
}

/// Size limit on the receiving side (wire §2): a record above the admitted limit (but below
/// the socket's own ZMQ_MAXMSGSIZE) is refused before its header is parsed and never reaches
/// a handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_a_record_above_the_admitted_limit_before_decoding() {
    let s = server("recvlimit", "cs-a").await;
    let ctx = zmq::Context::new();
    let d = ctx.socket(zmq::DEALER).unwrap();
    d.set_linger(0).unwrap();
    d.set_rcvtimeo(5_000).unwrap();
    d.connect(s.endpoint()).unwrap();
    let me = SideIdentity {
        channel_name: "recvlimit".into(),
        rid: "raw-client".into(),
        lifecycle_generation: 5,
        endpoint: s.endpoint().into(),
        security_identity: "zlink".into(),
    };
    // The raw client announces 1 MiB, so 1 MiB is admitted.
    let hello = admission::hello(&secret(), &me, MIB, [4; 32], None);
    d.send_multipart(
        hello
            .encode(WireContext::client_server(Leg::Request))
            .unwrap(),
        0,
    )
    .unwrap();
    let reply = d.recv_multipart(0).unwrap();
    let rec = Record::decode(&reply, WireContext::client_server(Leg::Reply)).unwrap();
    let CommandBody::Admit(a) = rec.body else {
        panic!("{rec:?}")
    };
    assert_eq!(a.max_message_bytes, MIB);
    let header = ChannelHeader::Command {
        packet_name: "bulk".into(),
        content_type: String::new(),
    };
    d.send_multipart([header.encode().unwrap(), vec![0u8; 2 * MIB as usize]], 0)
        .unwrap();
    d.send_multipart([b"\xf2{not json".to_vec(), vec![1]], 0)
        .unwrap();
    eventually("two protocol errors", || {
        s.metrics().protocol_errors.total() == 2
    })
    .await;
    let errors = s.metrics().protocol_errors();
    assert_eq!(errors.get("MessageTooLarge"), Some(&1));
    assert_eq!(errors.get("InvalidJson"), Some(&1));
    assert_eq!(s.metrics().delivered.load(Ordering::Relaxed), 0);
    s.shutdown().await;
}

/// Bound everything (STYLE): a server that stops reading fills the pipes, and the client then
/// refuses further commands with `Backpressured` instead of queueing without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_refuses_sends_beyond_its_queue_cap_when_the_server_stops_reading() {
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::ROUTER).unwrap();
    socket.set_linger(0).unwrap();
    socket.set_rcvhwm(1).unwrap();
    socket.set_rcvtimeo(5_000).unwrap();
    socket.bind("tcp://127.0.0.1:*").unwrap();
    let endpoint = socket.get_last_endpoint().unwrap().unwrap();
    let mut cc = client_config("cap", &[&endpoint]);
    cc.hwm = 1;
    cc.queue_cap_bytes = 4 * MIB as usize;
    let c = ClientServerClient::start(cc, None).await.unwrap();
    let rogue = tokio::task::spawn_blocking({
        let endpoint = endpoint.clone();
        move || Rogue::admit(socket, "cap", "cs-stuck", &endpoint, 42)
    })
    .await
    .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    // The rogue never reads again.
    let mut refused = None;
    for i in 0..200 {
        match c.send(bulk(MIB as usize)) {
            Ok(()) => {}
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (sent, err) = refused.expect("a stuck server must make the client refuse");
    match err {
        ClientServerError::Backpressured { queued, cap } => {
            assert_eq!(cap, 4 * MIB as usize);
            assert!(queued <= cap + MIB as usize, "{queued} queued");
        }
        other => panic!("expected Backpressured, got {other:?}"),
    }
    // Three 1 MiB messages (plus headers) fill a 4 MiB cap when none has left yet.
    assert!(sent >= 3, "refused after only {sent} sends");
    drop(rogue);
    c.shutdown().await;
}

/// Admission (wire §4): a hello that gets no answer within `admission_timeout` ends that
/// physical connection; the client dials a new one with a new hello, which can be admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_hello_is_retried_on_a_new_connection() {
    let socket = Rogue::bind("tcp://127.0.0.1:*");
    let endpoint = socket.get_last_endpoint().unwrap().unwrap();
    let mut cc = client_config("silent", &[&endpoint]);
    cc.timings.admission_timeout = Duration::from_millis(300);
    let c = ClientServerClient::start(cc, None).await.unwrap();
    let (socket, first_identity) = tokio::task::spawn_blocking(move || {
        let frames = socket.recv_multipart(0).expect("first hello");
        let rec = Record::decode(&frames[1..], WireContext::client_server(Leg::Request)).unwrap();
        assert!(matches!(rec.body, CommandBody::Hello(_)));
        (socket, frames[0].clone())
    })
    .await
    .unwrap();
    // Not answered. The next hello comes on another connection (another routing identity).
    let rogue = tokio::task::spawn_blocking({
        let endpoint = endpoint.clone();
        move || Rogue::admit(socket, "silent", "cs-slow", &endpoint, 9)
    })
    .await
    .unwrap();
    assert_ne!(rogue.routing_id, first_identity);
    assert!(c.wait_selectable(1, WAIT).await);
    assert_eq!(c.servers()[0].server_rid.as_deref(), Some("cs-slow"));
    c.shutdown().await;
}

/// Fencing deadline (glossary §8): a server whose owner lease can no longer be renewed stops
/// accepting new work at the lease deadline minus the margin; requests end with `Unavailable`
/// and no handler runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lost_its_lease_stops_accepting_work_at_the_fencing_deadline() {
    let store: Arc<dyn ClientServerStore> = Arc::new(MemoryStore::new(SystemClock));
    let s = ClientServerServer::start(
        server_config("fence", "cs-f"),
        handlers("cs-f"),
        Some(Arc::clone(&store)),
    )
    .await
    .unwrap();
    let c = ClientServerClient::start(client_config("fence", &[s.endpoint()]), None)
        .await
        .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    assert_eq!(who(&c, 0).await.unwrap(), "cs-f");

    // The lease is taken away (as if another process of this host claimed it).
    let d = s.descriptor();
    let token = zlink_store::types::OwnerToken {
        owner_id: d.owner_id.clone(),
        lease_generation: d.lease_generation,
    };
    assert!(store.release_lease(&token).await.unwrap());
    let lost_at = Instant::now();
    loop {
        // Timestamp at send time: a reply delayed by a loaded machine does not count.
        let sent_at = lost_at.elapsed();
        match who(&c, 0).await {
            Ok(_) => {
                // Sent before the deadline (lease TTL 2 s − margin 0.3 s after the last
                // renewal, which was at most `lease_renew` 0.3 s before the release).
                assert!(
                    sent_at < Duration::from_millis(2_000),
                    "accepted at {sent_at:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(ClientServerError::Call(e)) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable);
                break;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(s.metrics().fenced_refusals.load(Ordering::Relaxed) >= 1);
    // Still fenced: refused again, and no handler ran for it.
    let before = s.metrics().delivered.load(Ordering::Relaxed);
    assert!(who(&c, 0).await.is_err());
    assert_eq!(s.metrics().delivered.load(Ordering::Relaxed), before);
    c.shutdown().await;
    s.shutdown().await;
}

/// A raw DEALER admitted as a client of `s` under `channel`, announcing `limit`.
fn raw_admitted_client(
    s: &ClientServerServer,
    channel: &str,
    nonce: u8,
    limit: u64,
) -> zmq::Socket {
    let ctx = zmq::Context::new();
    let d = ctx.socket(zmq::DEALER).unwrap();
    d.set_linger(0).unwrap();
    d.set_rcvtimeo(5_000).unwrap();
    // A small kernel receive buffer, so a client that stops reading fills its pipe early.
    d.set_rcvbuf(4096).unwrap();
    d.set_rcvhwm(1).unwrap();
    d.connect(s.endpoint()).unwrap();
    let me = SideIdentity {
        channel_name: channel.into(),
        rid: format!("raw-client-{nonce}"),
        lifecycle_generation: u64::from(nonce),
        endpoint: s.endpoint().into(),
        security_identity: "zlink".into(),
    };
    let hello = admission::hello(&secret(), &me, limit, [nonce; 32], None);
    d.send_multipart(
        hello
            .encode(WireContext::client_server(Leg::Request))
            .unwrap(),
        0,
    )
    .unwrap();
    let reply = d.recv_multipart(0).unwrap();
    let rec = Record::decode(&reply, WireContext::client_server(Leg::Reply)).unwrap();
    assert!(matches!(rec.body, CommandBody::Admit(_)), "{rec:?}");
    d
}

/// Bound everything (STYLE; review item 1): a client that is admitted and then never reads its
/// replies gets its replies parked in its own FIFO; the other clients keep getting replies and
/// stay live, the server's socket thread does not spin while that FIFO waits (its poll
/// wake-ups stay bounded over a quiet second), and once the stuck client's parked bytes pass
/// `client_queue_cap_bytes` it is disconnected instead of growing the server's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_stall_the_others_or_spin_the_server() {
    let mut cfg = server_config("slowpeer", "cs-a");
    cfg.hwm = 4;
    cfg.client_queue_cap_bytes = 16 * MIB as usize;
    // Liveness must not remove the stuck client before the overflow does.
    cfg.timings.liveness_deadline = Duration::from_secs(30);
    let s = ClientServerServer::start(cfg, handlers("cs-a"), None)
        .await
        .unwrap();
    let c1 = ClientServerClient::start(client_config("slowpeer", &[s.endpoint()]), None)
        .await
        .unwrap();
    let c2 = ClientServerClient::start(client_config("slowpeer", &[s.endpoint()]), None)
        .await
        .unwrap();
    assert!(c1.wait_selectable(1, WAIT).await);
    assert!(c2.wait_selectable(1, WAIT).await);
    assert_eq!(who(&c1, 0).await.unwrap(), "cs-a");
    assert_eq!(who(&c2, 0).await.unwrap(), "cs-a");

    let raw = raw_admitted_client(&s, "slowpeer", 9, MIB);
    let header = ChannelHeader::Request {
        packet_name: "bulk".into(),
        content_type: "application/octet-stream".into(),
        correlation_id: "stuck".into(),
        deadline_unix_ms: None,
    }
    .encode()
    .unwrap();
    let chunk = vec![7u8; 512 * 1024];
    let send_bulk = |n: usize| {
        for _ in 0..n {
            raw.send_multipart([header.clone(), chunk.clone()], 0)
                .unwrap();
        }
    };
    // 10 MiB of replies the raw client never reads: its pipe fills and the rest is parked.
    send_bulk(20);
    eventually("a parked reply", || s.socket_stalls() > 0).await;
    assert_eq!(s.client_count(), 3);

    // The others are served while the stuck client's replies wait.
    for _ in 0..20 {
        assert_eq!(who(&c1, 0).await.unwrap(), "cs-a");
        assert_eq!(who(&c2, 0).await.unwrap(), "cs-a");
    }
    // No busy loop: over a quiet second the socket thread wakes for the retry timer (at most
    // every 10 ms once nothing moves) and liveness, not continuously.
    let before = s.socket_wakeups();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let wakeups = s.socket_wakeups() - before;
    eprintln!("socket wake-ups in a quiet second with a parked client: {wakeups}");
    assert!(
        wakeups < 600,
        "{wakeups} socket wake-ups in one quiet second"
    );
    assert!(c1.servers().iter().all(|x| x.ready));
    assert!(c2.servers().iter().all(|x| x.ready));

    // More unread replies pass the 16 MiB cap: the stuck client is disconnected.
    send_bulk(40);
    eventually("the stuck client is disconnected", || {
        s.metrics().client_overflows.load(Ordering::Relaxed) == 1 && s.client_count() == 2
    })
    .await;
    assert_eq!(who(&c1, 0).await.unwrap(), "cs-a");
    assert_eq!(who(&c2, 0).await.unwrap(), "cs-a");
    c1.shutdown().await;
    c2.shutdown().await;
    s.shutdown().await;
}

/// Graceful shutdown (glossary §8; review item 2): a discovered server that shuts down with a
/// slow request in flight finishes it first and only then removes its descriptor; the client
/// gets the reply (not `Unavailable`) and afterwards forgets the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovered_server_shutting_down_finishes_a_request_in_flight() {
    let store = Arc::new(MemoryStore::new(SystemClock));
    let dyn_store: Arc<dyn ClientServerStore> = store.clone();
    let s = ClientServerServer::start(
        server_config("graceful", "cs-g"),
        handlers("cs-g"),
        Some(Arc::clone(&dyn_store)),
    )
    .await
    .unwrap();
    let c = Arc::new(
        ClientServerClient::start(client_config("graceful", &[]), Some(dyn_store))
            .await
            .unwrap(),
    );
    assert!(c.wait_selectable(1, WAIT).await);
    let c2 = Arc::clone(&c);
    let slow = tokio::spawn(async move { who(&c2, 600).await });
    eventually("the slow request is running", || {
        s.metrics().delivered.load(Ordering::Relaxed) == 1
    })
    .await;
    let started = Instant::now();
    s.shutdown().await;
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "shutdown did not wait"
    );
    let got = slow.await.unwrap();
    assert_eq!(
        got.as_deref().ok(),
        Some("cs-g"),
        "{got:?} {:?}",
        c.servers()
    );
    assert!(c.wait_for(WAIT, <[_]>::is_empty).await, "{:?}", c.servers());
    c.shutdown().await;
}

/// Exactly one terminal reply per request (glossary §8; review item 3): a handler error whose
/// detail grows past the header frame once JSON-escaped (5000 `"`) still reaches the client as
/// that typed error, with its detail cut, not as a missing reply (`DeadlineExceeded`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_error_with_a_detail_that_escapes_large_still_replies() {
    let mut h = Handlers::new();
    h.on_request(|_, _: Who| async move {
        Err::<Me, _>(CallError::new(ErrorKind::Conflict, "\"".repeat(5000)))
    });
    let s = ClientServerServer::start(server_config("escape", "cs-e"), h, None)
        .await
        .unwrap();
    let mut cfg = client_config("escape", &[s.endpoint()]);
    cfg.timings.request_timeout = Duration::from_secs(3);
    let c = ClientServerClient::start(cfg, None).await.unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    let err = c
        .request_json::<Who, Me>(&Who { delay_ms: 0 })
        .await
        .unwrap_err();
    let ClientServerError::Call(call) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(call.kind(), ErrorKind::Conflict, "{err:?}");
    assert!(call.detail().chars().all(|ch| ch == '"'));
    assert!(!call.detail().is_empty());
    c.shutdown().await;
    s.shutdown().await;
}

/// Bound everything (review item 4): messages parked for a server that then goes away for good
/// are dropped with its connection and their bytes go back to the client's queue cap, so
/// later requests to another server are not refused with `Backpressured`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_parked_for_a_vanished_server_are_released() {
    let ctx = zmq::Context::new();
    let socket = ctx.socket(zmq::ROUTER).unwrap();
    socket.set_linger(0).unwrap();
    socket.set_rcvhwm(1).unwrap();
    socket.set_rcvtimeo(5_000).unwrap();
    socket.bind("tcp://127.0.0.1:*").unwrap();
    let endpoint = socket.get_last_endpoint().unwrap().unwrap();
    // Server B starts unselectable (weight 0).
    let mut bcfg = server_config("leak", "cs-b");
    bcfg.weight = 0;
    let b = ClientServerServer::start(bcfg, handlers("cs-b"), None)
        .await
        .unwrap();
    let mut cc = client_config("leak", &[&endpoint, b.endpoint()]);
    cc.hwm = 1;
    cc.queue_cap_bytes = 4 * MIB as usize;
    let c = ClientServerClient::start(cc, None).await.unwrap();
    let rogue = tokio::task::spawn_blocking({
        let endpoint = endpoint.clone();
        move || Rogue::admit(socket, "leak", "cs-stuck", &endpoint, 43)
    })
    .await
    .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    // Fill the cap towards the rogue, which never reads.
    let mut full = false;
    for _ in 0..200 {
        if let Err(e) = c.send(bulk(MIB as usize)) {
            assert!(
                matches!(e, ClientServerError::Backpressured { .. }),
                "{e:?}"
            );
            full = true;
            break;
        }
    }
    assert!(full, "the rogue must fill the cap");
    // The rogue goes away for good; B becomes the only candidate.
    drop(rogue);
    b.set_weight(100).await.unwrap();
    assert!(
        c.wait_for(WAIT, |v| {
            v.iter().filter(|x| x.selectable).count() == 1
                && v.iter()
                    .any(|x| x.selectable && x.server_rid.as_deref() == Some("cs-b"))
        })
        .await,
        "{:?}",
        c.servers()
    );
    // The rogue's parked bytes are released once its connection is dropped, which may come a
    // moment after it stopped being selectable: the first request may still find the cap full,
    // and must get through within WAIT (never, if the bytes stayed parked).
    let deadline = tokio::time::Instant::now() + WAIT;
    let first = loop {
        match c.request(bulk(MIB as usize), None).await {
            Err(ClientServerError::Backpressured { .. })
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r => break r.unwrap(),
        }
    };
    assert_eq!(first.payload.len(), MIB as usize);
    for _ in 0..2 {
        let reply = c.request(bulk(MIB as usize), None).await.unwrap();
        assert_eq!(reply.payload.len(), MIB as usize);
    }
    c.shutdown().await;
    b.shutdown().await;
}

/// Admission replay (wire §4; review item 6): a hello bound to server A (its RID and lifecycle
/// from the descriptor) is rejected by server B of the same channel with the same secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_captured_for_one_server_is_rejected_by_another() {
    let a = server("replay", "cs-a").await;
    let b = server("replay", "cs-b").await;
    let ctx = zmq::Context::new();
    let d = ctx.socket(zmq::DEALER).unwrap();
    d.set_linger(0).unwrap();
    d.set_rcvtimeo(5_000).unwrap();
    d.connect(b.endpoint()).unwrap();
    let me = SideIdentity {
        channel_name: "replay".into(),
        rid: "raw-client".into(),
        lifecycle_generation: 3,
        endpoint: a.endpoint().into(),
        security_identity: "zlink".into(),
    };
    let for_a = NodeFence {
        rid: zlink_protocol::shared_str::SharedStr::copy_from(a.rid()),
        lifecycle_generation: a.lifecycle_generation(),
    };
    let hello = admission::hello(&secret(), &me, MIB, [5; 32], Some(&for_a));
    d.send_multipart(
        hello
            .encode(WireContext::client_server(Leg::Request))
            .unwrap(),
        0,
    )
    .unwrap();
    let reply = d.recv_multipart(0).unwrap();
    let rec = Record::decode(&reply, WireContext::client_server(Leg::Reply)).unwrap();
    let CommandBody::Reject(r) = rec.body else {
        panic!("{rec:?}")
    };
    assert_eq!(
        r.reason,
        zlink_protocol::generated::RejectReason::AuthenticationFailed
    );
    assert_eq!(b.metrics().rejected.load(Ordering::Relaxed), 1);
    assert_eq!(b.client_count(), 0);
    a.shutdown().await;
    b.shutdown().await;
}

/// Bound accepted work (glossary §3 job queue; review item 8): with every job permit held by
/// requests waiting for their handler, a new request is answered `Backpressured` at once; the
/// accepted ones complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_job_queue_answers_backpressured() {
    let mut h = Handlers::new();
    // One at a time: the next requests wait for the handler, holding their permits.
    h.on_request(|_, w: Who| async move {
        tokio::time::sleep(Duration::from_millis(w.delay_ms)).await;
        Ok::<_, CallError>(Me { rid: "cs-j".into() })
    });
    let mut cfg = server_config("jobs", "cs-j");
    cfg.jobs = zlink::jobs::JobQueueConfig::with_permits(2);
    let s = ClientServerServer::start(cfg, h, None).await.unwrap();
    let c = Arc::new(
        ClientServerClient::start(client_config("jobs", &[s.endpoint()]), None)
            .await
            .unwrap(),
    );
    assert!(c.wait_selectable(1, WAIT).await);
    let spawn = |delay| {
        let c = Arc::clone(&c);
        tokio::spawn(async move { who(&c, delay).await })
    };
    let first = spawn(500);
    eventually("the first request runs", || {
        s.metrics().delivered.load(Ordering::Relaxed) == 1
    })
    .await;
    let waiting = [spawn(0), spawn(0)];
    eventually("two requests wait", || {
        s.metrics().delivered.load(Ordering::Relaxed) == 1
            && c.metrics().requests_sent.load(Ordering::Relaxed) == 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let err = who(&c, 0).await.unwrap_err();
    match &err {
        ClientServerError::Call(e) => assert_eq!(e.kind(), ErrorKind::Backpressured),
        other => panic!("expected Backpressured, got {other:?}"),
    }
    assert_eq!(s.metrics().backpressured.load(Ordering::Relaxed), 1);
    assert_eq!(first.await.unwrap().unwrap(), "cs-j");
    for w in waiting {
        assert_eq!(w.await.unwrap().unwrap(), "cs-j");
    }
    c.shutdown().await;
    s.shutdown().await;
}

/// Crash-restart on the same endpoint (glossary §6, §8; review item 10): the crashed
/// lifecycle's descriptor stays until its lease lapses, next to the successor's on the same
/// endpoint. The client accepts an admit that matches any live descriptor, so it is served by
/// the successor long before the old lease lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_on_the_same_endpoint_is_admitted_while_the_old_descriptor_lives() {
    let store = Arc::new(MemoryStore::new(SystemClock));
    let dyn_store: Arc<dyn ClientServerStore> = store.clone();
    let mut t = timings();
    t.lease_ttl = Duration::from_secs(20);
    t.lease_renew = Duration::from_secs(5);
    let mut first_cfg = server_config("restart", "cs-r1");
    first_cfg.timings = t.clone();
    let first =
        ClientServerServer::start(first_cfg, handlers("cs-r1"), Some(Arc::clone(&dyn_store)))
            .await
            .unwrap();
    let port: u16 = first
        .endpoint()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let c = ClientServerClient::start(client_config("restart", &[]), Some(Arc::clone(&dyn_store)))
        .await
        .unwrap();
    assert!(c.wait_selectable(1, WAIT).await);
    assert_eq!(who(&c, 0).await.unwrap(), "cs-r1");
    first.abort().await;
    // Named to sort before the crashed one: a client keeping only one descriptor per endpoint
    // would keep expecting the dead lifecycle.
    let mut second_cfg = server_config("restart", "cs-r0");
    second_cfg.timings = t;
    second_cfg.port = port;
    let start = Instant::now();
    let second = loop {
        match ClientServerServer::start(
            second_cfg.clone(),
            handlers("cs-r0"),
            Some(Arc::clone(&dyn_store)),
        )
        .await
        {
            Ok(s) => break s,
            Err(e) => {
                assert!(start.elapsed() < WAIT, "rebind: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(second.endpoint(), first.endpoint());
    // Both descriptors are live (the first lease has 20 s left): well before that the client
    // is admitted by the successor.
    assert!(
        c.wait_for(Duration::from_secs(5), |v| v
            .iter()
            .any(|x| x.selectable && x.server_rid.as_deref() == Some("cs-r0")))
            .await,
        "{:?}",
        c.servers()
    );
    assert_eq!(who(&c, 0).await.unwrap(), "cs-r0");
    c.shutdown().await;
    second.shutdown().await;
}

/// Receive limits per message (wire §2; review item 11): the socket thread reads frame by
/// frame, refuses a message with more than three frames and discards its rest without
/// desynchronising the connection: the next request on it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_with_too_many_frames_is_discarded_and_the_connection_keeps_working() {
    let s = server("frames", "cs-f").await;
    let raw = raw_admitted_client(&s, "frames", 12, MIB);
    let header = ChannelHeader::Request {
        packet_name: "bulk".into(),
        content_type: "application/octet-stream".into(),
        correlation_id: "ok".into(),
        deadline_unix_ms: None,
    }
    .encode()
    .unwrap();
    raw.send_multipart(
        [
            header.clone(),
            vec![1; 10],
            vec![2; 10],
            vec![3; 10],
            vec![4; 10],
        ],
        0,
    )
    .unwrap();
    raw.send_multipart([header, vec![9; 32]], 0).unwrap();
    let reply = loop {
        let m = raw.recv_multipart(0).unwrap();
        if m[0].first() == Some(&0xF2) {
            break m;
        }
    };
    assert_eq!(reply.len(), 2);
    assert_eq!(reply[1], vec![9; 32]);
    let errors = s.metrics().protocol_errors();
    assert_eq!(errors.get("WrongFrameCount"), Some(&1), "{errors:?}");
    assert_eq!(s.metrics().delivered.load(Ordering::Relaxed), 1);
    s.shutdown().await;
}

/// Stopping a server ends its handlers (review item 13): a handler still running when the
/// server is aborted does not run on to completion afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_server_aborts_its_running_handlers() {
    let finished = Arc::new(AtomicU64::new(0));
    let mut h = Handlers::new();
    let f = Arc::clone(&finished);
    h.on_request(move |_, w: Who| {
        let f = Arc::clone(&f);
        async move {
            tokio::time::sleep(Duration::from_millis(w.delay_ms)).await;
            f.fetch_add(1, Ordering::Relaxed);
            Ok::<_, CallError>(Me { rid: "cs-x".into() })
        }
    });
    let s = ClientServerServer::start(server_config("abort", "cs-x"), h, None)
        .await
        .unwrap();
    let c = Arc::new(
        ClientServerClient::start(client_config("abort", &[s.endpoint()]), None)
            .await
            .unwrap(),
    );
    assert!(c.wait_selectable(1, WAIT).await);
    let c2 = Arc::clone(&c);
    let req = tokio::spawn(async move { who(&c2, 300).await });
    eventually("the handler runs", || {
        s.metrics().delivered.load(Ordering::Relaxed) == 1
    })
    .await;
    s.abort().await;
    assert!(req.await.unwrap().is_err());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(finished.load(Ordering::Relaxed), 0);
    c.shutdown().await;
}

/// Select-one (glossary §7): a submit refused before sending (here over the admitted limit)
/// does not advance the smooth weighted sequence, so equal weights still alternate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_submit_does_not_advance_the_selection() {
    let a = server("refusedpick", "cs-a").await;
    let b = server("refusedpick", "cs-b").await;
    let mut cc = client_config("refusedpick", &[a.endpoint(), b.endpoint()]);
    cc.max_message_bytes = MIB;
    let c = ClientServerClient::start(cc, None).await.unwrap();
    assert!(c.wait_selectable(2, WAIT).await);
    for _ in 0..3 {
        let first = who(&c, 0).await.unwrap();
        let err = c.request(bulk(2 * MIB as usize), None).await.unwrap_err();
        assert!(
            matches!(err, ClientServerError::MessageTooLarge { .. }),
            "{err:?}"
        );
        let second = who(&c, 0).await.unwrap();
        assert_ne!(first, second, "the refused submit took a turn");
    }
    c.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}

/// Select-one (glossary §7): two endpoint strings reaching the same server (same RID and
/// lifecycle) count as one candidate, so it is not selected twice as often as its peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_endpoints_of_one_server_are_one_candidate() {
    let a = server("dedupe", "cs-a").await;
    let b = server("dedupe", "cs-b").await;
    let port = a.endpoint().rsplit(':').next().unwrap().to_owned();
    let alias = format!("tcp://localhost:{port}");
    let c = ClientServerClient::start(
        client_config("dedupe", &[a.endpoint(), &alias, b.endpoint()]),
        None,
    )
    .await
    .unwrap();
    assert!(
        c.wait_for(WAIT, |v| v.iter().filter(|x| x.ready).count() == 3)
            .await,
        "{:?}",
        c.servers()
    );
    let mut to_a = 0;
    for _ in 0..12 {
        if who(&c, 0).await.unwrap() == "cs-a" {
            to_a += 1;
        }
    }
    assert_eq!(to_a, 6, "cs-a got {to_a} of 12");
    c.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}
