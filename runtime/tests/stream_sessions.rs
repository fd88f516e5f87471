//! The StreamNode on real loopback TCP (issue 19 items 1–2, acceptance 2): bad input closes only
//! its own session with EOF and zero bytes and one count, no handler sees it; requests get one
//! terminal each; the connection bound, drain and shutdown hold.
#![allow(clippy::unwrap_used)] // In tests a panic is the failure report.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};
use zlink::session::{
    CloseReason, ErrorKind, ErrorPayload, SessionConfig, SessionHandlers, StreamConfig,
    StreamError, StreamNode,
};
use zlink_protocol::stream::{
    MaxMessageSize, StreamCodec, StreamDecoder, StreamKind, StreamPacket, StreamPrefix,
};

/// Bound for every wait on the network in this file.
const WAIT: Duration = Duration::from_secs(10);

/// A raw STREAM client: one TCP connection and a decoder.
struct Client {
    stream: TcpStream,
    decoder: StreamDecoder,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Self {
        Self {
            stream: TcpStream::connect(addr).await.unwrap(),
            decoder: StreamDecoder::new(MaxMessageSize::UNLIMITED),
        }
    }

    async fn write(&mut self, packets: &[StreamPacket]) {
        let bytes: Vec<u8> = packets.iter().flat_map(|p| p.encode().unwrap()).collect();
        self.stream.write_all(&bytes).await.unwrap();
    }

    /// The next packet from the server (panics at EOF or after [`WAIT`]).
    async fn next(&mut self) -> StreamPacket {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(p) = self.decoder.next_packet().unwrap() {
                    return p;
                }
                let mut buf = [0u8; 4096];
                let n = self.stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "EOF while waiting for a packet");
                self.decoder.extend(&buf[..n]);
            }
        })
        .await
        .expect("a packet within the wait")
    }

    async fn echo(&mut self, seq: u64, payload: &[u8]) -> StreamPacket {
        self.write(&[StreamPacket::request(
            StreamCodec::Raw,
            seq,
            "test.Echo",
            payload.to_vec(),
        )])
        .await;
        self.next().await
    }

    /// Everything until EOF.
    async fn read_to_eof(mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, self.stream.read_to_end(&mut rest))
            .await
            .expect("EOF within the wait")
            .expect("a clean EOF, not a reset");
        rest
    }
}

/// What the handlers saw.
#[derive(Default)]
struct Seen {
    sends: AtomicU64,
    holds: AtomicU64,
    release: Notify,
}

fn handlers(seen: &Arc<Seen>) -> SessionHandlers {
    let mut h = SessionHandlers::new();
    h.on_request("test.Echo", |_ctx, packet, reply| async move {
        reply.ok(packet.codec, packet.payload);
    })
    .unwrap();
    let s = Arc::clone(seen);
    h.on_send("test.Note", move |_ctx, _packet| {
        let s = Arc::clone(&s);
        async move {
            s.sends.fetch_add(1, Ordering::SeqCst);
        }
    })
    .unwrap();
    let s = Arc::clone(seen);
    h.on_request("test.Hold", move |_ctx, _packet, reply| {
        let s = Arc::clone(&s);
        async move {
            s.holds.fetch_add(1, Ordering::SeqCst);
            s.release.notified().await;
            reply.ok(StreamCodec::Raw, b"late".to_vec());
        }
    })
    .unwrap();
    h.on_request("test.Drop", |_ctx, _packet, reply| async move {
        drop(reply);
    })
    .unwrap();
    h.on_request("test.Panic", |_ctx, _packet, _reply| async move {
        panic!("handler bug");
    })
    .unwrap();
    h
}

fn config() -> StreamConfig {
    StreamConfig::new("127.0.0.1:0".parse().unwrap())
}

async fn node(config: StreamConfig, seen: &Arc<Seen>) -> StreamNode {
    StreamNode::bind(config, handlers(seen)).await.unwrap()
}

fn error_kind(packet: &StreamPacket) -> ErrorKind {
    assert_eq!(packet.kind, StreamKind::Error);
    ErrorPayload::from_json(&packet.payload).unwrap().kind
}

/// Poll until `f` holds (bounded by [`WAIT`]); counters settle just after the socket closes.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_closes_only_its_session_with_eof_zero_bytes_and_one_count() {
    let seen = Arc::new(Seen::default());
    let node = node(config(), &seen).await;
    let addr = node.local_addr();
    let mut bystander = Client::connect(addr).await;
    assert_eq!(bystander.echo(1, b"before").await.payload, b"before");

    // 1. A prefix announcing more than the 64 KiB MaxMessageSize; the payload never follows.
    let oversized = StreamPrefix {
        header_len: 16,
        payload_size: 70_000,
    }
    .to_bytes();
    // 2. A header whose marker is not 0xF2.
    let mut bad_marker = StreamPacket::send(StreamCodec::Raw, "test.Note", b"x".to_vec())
        .encode()
        .unwrap();
    bad_marker[6] = 0x00;
    // 3. A request sequence reused while its request is still pending (the first one is held
    //    by its handler, so no reply can reach the client before the close).
    let held = StreamPacket::request(StreamCodec::Raw, 5, "test.Hold", vec![]);
    let mut reused = held.encode().unwrap();
    reused.extend(
        StreamPacket::request(StreamCodec::Raw, 5, "test.Echo", vec![])
            .encode()
            .unwrap(),
    );
    let cases: [(&str, Vec<u8>, CloseReason); 3] = [
        (
            "oversized prefix",
            oversized.to_vec(),
            CloseReason::MessageTooLarge,
        ),
        ("bad marker", bad_marker, CloseReason::ProtocolError),
        ("reused pending seq", reused, CloseReason::ProtocolError),
    ];
    for (name, bytes, reason) in cases {
        let before = node.metrics().closed(reason);
        let mut client = Client::connect(addr).await;
        client.stream.write_all(&bytes).await.unwrap();
        let rest = client.read_to_eof().await;
        assert!(
            rest.is_empty(),
            "{name}: the server sent {} bytes",
            rest.len()
        );
        eventually(name, || node.metrics().closed(reason) == before + 1).await;
        // The bystander's session carries on, on the same connection.
        assert_eq!(
            bystander.echo(2, name.as_bytes()).await.payload,
            name.as_bytes()
        );
    }
    assert_eq!(
        seen.sends.load(Ordering::SeqCst),
        0,
        "the bad-marker Send reached no handler"
    );
    assert_eq!(
        seen.holds.load(Ordering::SeqCst),
        1,
        "only the first, valid request ran"
    );
    seen.release.notify_waiters();
    assert_eq!(node.metrics().closed(CloseReason::MessageTooLarge), 1);
    assert_eq!(node.metrics().closed(CloseReason::ProtocolError), 2);
    // The gauge drops once a closed session's task ends (after its bounded linger).
    eventually("only the bystander is open", || node.active_sessions() == 1).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_gets_one_terminal_and_sends_reach_their_handler_in_order() {
    let seen = Arc::new(Seen::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut h = handlers(&seen);
    h.on_send("test.Seq", move |_ctx, packet| {
        let tx = tx.clone();
        async move {
            tx.send(packet.payload).unwrap();
        }
    })
    .unwrap();
    let node = StreamNode::bind(config(), h).await.unwrap();
    let mut c = Client::connect(node.local_addr()).await;

    let sends: Vec<StreamPacket> = (0..500u32)
        .map(|i| StreamPacket::send(StreamCodec::Raw, "test.Seq", i.to_be_bytes().to_vec()))
        .collect();
    c.write(&sends).await;
    for i in 0..500u32 {
        assert_eq!(rx.recv().await.unwrap(), i.to_be_bytes());
    }

    let r = c.echo(10, b"hi").await;
    assert_eq!((r.kind, r.request_seq), (StreamKind::Response, Some(10)));
    c.write(&[StreamPacket::request(
        StreamCodec::Raw,
        11,
        "test.Drop",
        vec![],
    )])
    .await;
    let r = c.next().await;
    assert_eq!(
        (error_kind(&r), r.request_seq),
        (ErrorKind::HandlerFailed, Some(11))
    );
    c.write(&[StreamPacket::request(
        StreamCodec::Raw,
        12,
        "test.Panic",
        vec![],
    )])
    .await;
    let r = c.next().await;
    assert_eq!(
        (error_kind(&r), r.request_seq),
        (ErrorKind::HandlerFailed, Some(12))
    );
    c.write(&[StreamPacket::request(
        StreamCodec::Raw,
        13,
        "test.Missing",
        vec![],
    )])
    .await;
    assert_eq!(error_kind(&c.next().await), ErrorKind::UnknownPacket);
    // The correlation ID is echoed.
    c.write(&[
        StreamPacket::request(StreamCodec::Raw, 14, "test.Echo", vec![])
            .with_correlation_id("c-14"),
    ])
    .await;
    assert_eq!(c.next().await.correlation_id.as_deref(), Some("c-14"));
    // The session survived the panic and serves on.
    assert_eq!(c.echo(15, b"after").await.payload, b"after");
    assert_eq!(node.metrics().handler_panics.load(Ordering::Relaxed), 1);
    assert_eq!(node.metrics().handler_failed.load(Ordering::Relaxed), 2);
    drop(c);
    eventually("ClientClosed counted", || {
        node.metrics().closed(CloseReason::ClientClosed) == 1
    })
    .await;
    assert_eq!(node.metrics().packets_in.load(Ordering::Relaxed), 506);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_pushes_and_asks_the_client_over_the_same_session() {
    let seen = Arc::new(Seen::default());
    let mut h = handlers(&seen);
    h.on_request("test.AskBack", |ctx, _packet, reply| async move {
        ctx.send("test.Pushed", StreamCodec::Raw, b"p".to_vec())
            .unwrap();
        let answer = ctx
            .request("test.Question", StreamCodec::Raw, b"?".to_vec())
            .await;
        match answer {
            Ok(zlink::session::ClientReply::Response(p)) => reply.ok(StreamCodec::Raw, p.payload),
            other => reply.error(ErrorKind::Application, format!("{other:?}")),
        }
    })
    .unwrap();
    let node = StreamNode::bind(config(), h).await.unwrap();
    let mut c = Client::connect(node.local_addr()).await;
    c.write(&[StreamPacket::request(
        StreamCodec::Raw,
        1,
        "test.AskBack",
        vec![],
    )])
    .await;
    let pushed = c.next().await;
    assert_eq!(
        (pushed.kind, pushed.packet_name.as_str()),
        (StreamKind::Send, "test.Pushed")
    );
    let question = c.next().await;
    assert_eq!(question.kind, StreamKind::Request);
    let seq = question.request_seq.unwrap();
    c.write(&[StreamPacket::response(
        StreamCodec::Raw,
        seq,
        b"42".to_vec(),
    )])
    .await;
    let answer = c.next().await;
    assert_eq!(
        (answer.request_seq, answer.payload),
        (Some(1), b"42".to_vec())
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_bound_are_closed_and_counted() {
    let seen = Arc::new(Seen::default());
    let mut cfg = config();
    cfg.max_connections = 2;
    let node = node(cfg, &seen).await;
    let mut a = Client::connect(node.local_addr()).await;
    let mut b = Client::connect(node.local_addr()).await;
    a.echo(1, b"a").await;
    b.echo(1, b"b").await;
    let c = Client::connect(node.local_addr()).await;
    assert!(c.read_to_eof().await.is_empty());
    assert_eq!(
        node.metrics().rejected_connections.load(Ordering::Relaxed),
        1
    );
    drop(a);
    eventually("a slot frees up", || node.active_sessions() == 1).await;
    let mut d = Client::connect(node.local_addr()).await;
    assert_eq!(d.echo(1, b"d").await.payload, b"d");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_sends_go_away_refuses_new_connections_and_closes_at_the_deadline() {
    let seen = Arc::new(Seen::default());
    let node = node(config(), &seen).await;
    let addr = node.local_addr();
    let mut c = Client::connect(addr).await;
    c.echo(1, b"x").await;
    node.drain(Duration::from_millis(300));
    let go_away = c.next().await;
    assert_eq!(
        (go_away.kind, go_away.packet_name.as_str()),
        (StreamKind::Send, "zlink.GoAway")
    );
    // Still served until the deadline.
    assert_eq!(c.echo(2, b"y").await.payload, b"y");
    eventually("the listener is closed", || {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await;
    assert!(c.read_to_eof().await.is_empty());
    assert_eq!(node.metrics().closed(CloseReason::Draining), 1);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_is_closed_as_idle_and_shutdown_closes_the_rest() {
    let seen = Arc::new(Seen::default());
    let mut cfg = config();
    cfg.session.idle_timeout = Duration::from_millis(200);
    let node = node(cfg, &seen).await;
    let silent = Client::connect(node.local_addr()).await;
    assert!(silent.read_to_eof().await.is_empty());
    assert_eq!(node.metrics().closed(CloseReason::Idle), 1);

    let mut c = Client::connect(node.local_addr()).await;
    c.echo(1, b"x").await;
    node.shutdown().await;
    assert!(c.read_to_eof().await.is_empty());
}

#[tokio::test]
async fn bad_settings_and_reserved_names_are_refused_up_front() {
    let mut h = SessionHandlers::new();
    assert!(matches!(
        h.on_send("zlink.Ping", |_c, _p| async {}),
        Err(StreamError::ReservedPacketName { .. })
    ));
    h.on_send("a", |_c, _p| async {}).unwrap();
    assert!(matches!(
        h.on_send("a", |_c, _p| async {}),
        Err(StreamError::DuplicateHandler { .. })
    ));
    // The same name as a request is another key.
    h.on_request("a", |_c, _p, _r| async {}).unwrap();
    assert!(matches!(
        h.on_request(&"n".repeat(256), |_c, _p, _r| async {}),
        Err(StreamError::PacketNameTooLong { .. })
    ));
    let mut cfg = config();
    cfg.session = SessionConfig {
        request_timeout: Duration::ZERO,
        ..SessionConfig::default()
    };
    assert!(matches!(
        StreamNode::bind(cfg, SessionHandlers::new()).await,
        Err(StreamError::Config(_))
    ));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = StreamConfig::new(taken.local_addr().unwrap());
    assert!(matches!(
        StreamNode::bind(cfg, SessionHandlers::new()).await,
        Err(StreamError::Bind { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_as_slow_consumer_and_pushes_then_fail() {
    let seen = Arc::new(Seen::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut h = handlers(&seen);
    h.on_send("test.Flood", move |ctx, _packet| {
        let tx = tx.clone();
        async move {
            // 64 KiB pushes until the session refuses one; bounded at 256 MiB.
            let mut pushed = 0u32;
            while pushed < 4096 {
                if ctx
                    .send("test.Chunk", StreamCodec::Raw, vec![7; 64 * 1024])
                    .is_err()
                {
                    break;
                }
                pushed += 1;
                tokio::task::yield_now().await;
            }
            tx.send(pushed).unwrap();
        }
    })
    .unwrap();
    let mut cfg = config();
    cfg.session.outbound_buffer_bytes = 256 * 1024;
    let node = StreamNode::bind(cfg, h).await.unwrap();
    let mut c = Client::connect(node.local_addr()).await;
    c.write(&[StreamPacket::send(StreamCodec::Raw, "test.Flood", vec![])])
        .await;
    // The client reads nothing; the kernel buffers fill, then the session's output bound.
    let pushed = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        pushed < 4096,
        "a push failed once the session closed ({pushed} went out)"
    );
    eventually("SlowConsumer counted", || {
        node.metrics().closed(CloseReason::SlowConsumer) == 1
    })
    .await;
    let mut other = Client::connect(node.local_addr()).await;
    assert_eq!(other.echo(1, b"fine").await.payload, b"fine");
    node.shutdown().await;
}

/// Issue 19 item 10: with an authenticator, the first packet decides who the session is. A
/// refused first request is answered `Application` "unauthenticated: …" and the session
/// closes `Unauthenticated` (counted) without any handler running — not even for packets
/// queued behind it; an accepted one reaches its handler, which sees the identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticator_decides_who_a_session_is_from_its_first_packet() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut h = SessionHandlers::new();
    h.on_request("test.Who", move |ctx, _packet, reply| {
        let tx = tx.clone();
        async move {
            tx.send(ctx.identity().map(str::to_owned)).unwrap();
            reply.ok(
                StreamCodec::Raw,
                ctx.identity().unwrap_or("").as_bytes().to_vec(),
            );
        }
    })
    .unwrap();
    h.authenticate(|packet| {
        let verdict = match packet.payload.as_slice() {
            b"good:ann" => Ok("ann".to_owned()),
            other => Err(format!("bad credential {other:?}")),
        };
        std::future::ready(verdict)
    });
    let node = StreamNode::bind(config(), h).await.unwrap();

    let mut ok = Client::connect(node.local_addr()).await;
    ok.write(&[StreamPacket::request(
        StreamCodec::Raw,
        1,
        "test.Who",
        b"good:ann".to_vec(),
    )])
    .await;
    assert_eq!(ok.next().await.payload, b"ann");
    assert_eq!(rx.recv().await.unwrap().as_deref(), Some("ann"));
    // Later packets are not authenticated again.
    ok.write(&[StreamPacket::request(
        StreamCodec::Raw,
        2,
        "test.Who",
        b"anything".to_vec(),
    )])
    .await;
    assert_eq!(ok.next().await.payload, b"ann");
    assert_eq!(rx.recv().await.unwrap().as_deref(), Some("ann"));

    let mut bad = Client::connect(node.local_addr()).await;
    bad.write(&[
        StreamPacket::request(StreamCodec::Raw, 1, "test.Who", b"forged".to_vec()),
        StreamPacket::request(StreamCodec::Raw, 2, "test.Who", b"good:ann".to_vec()),
    ])
    .await;
    let refusal = bad.next().await;
    assert_eq!(error_kind(&refusal), ErrorKind::Application);
    let detail = ErrorPayload::from_json(&refusal.payload).unwrap().detail;
    assert!(
        detail.starts_with("unauthenticated: bad credential"),
        "{detail}"
    );
    assert!(
        bad.read_to_eof().await.is_empty(),
        "nothing after the refusal"
    );
    eventually("the refused session counted", || {
        node.metrics().closed(CloseReason::Unauthenticated) == 1
    })
    .await;
    assert!(
        rx.try_recv().is_err(),
        "no handler ran for the refused session"
    );
    drop(ok);
    node.shutdown().await;
}
