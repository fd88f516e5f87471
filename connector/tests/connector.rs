//! The Stream Connector against a real StreamNode on loopback TCP (issue 19 item 8): typed and
//! raw requests, per-call names and timeouts, sends in order, pushes in both dispatch modes,
//! `wait`, server → client requests, reconnect as a new session with nothing resent, the
//! inbound limit, keepalive, GoAway and connect errors.
#![allow(clippy::unwrap_used)] // In tests a panic is the failure report.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use zlink::session::{CloseReason, SessionConfig, SessionHandlers, StreamConfig, StreamNode};
use zlink_connector::{
    ConnectError, Connector, ConnectorConfig, ConnectorEvent, DisconnectReason, DispatchMode,
    ErrorKind, ReconnectPolicy, RequestError, SendError,
};
use zlink_protocol::json::JsonMessage;
use zlink_protocol::stream::{MaxMessageSize, StreamCodec};

/// Bound for every wait in this file.
const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Hello {
    name: String,
}
impl JsonMessage for Hello {
    const PACKET_NAME: &'static str = "test.Hello";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Line {
    n: u64,
}
impl JsonMessage for Line {
    const PACKET_NAME: &'static str = "test.Line";
}

/// A StreamNode whose handlers: `test.Hello` answers "hi <name>"; `test.Count` records sends;
/// `test.Push` pushes `n` lines back; `test.Ask` asks the client and answers with its answer;
/// `test.Never` never answers (the reply moves to a parked task); `test.Kick` closes the session.
struct Server {
    node: StreamNode,
    seen: Arc<Mutex<Vec<u64>>>,
    sessions: Arc<Mutex<Vec<u64>>>,
}

async fn server(session: SessionConfig) -> Server {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sessions = Arc::new(Mutex::new(Vec::new()));
    let mut h = SessionHandlers::new();
    h.on_request("test.Hello", |_ctx, packet, reply| async move {
        let hello: Hello = serde_json::from_slice(&packet.payload).unwrap();
        reply.json(&format!("hi {}", hello.name));
    })
    .unwrap();
    h.on_request("test.Echo", |_ctx, packet, reply| async move {
        reply.ok(packet.codec, packet.payload);
    })
    .unwrap();
    let s = Arc::clone(&seen);
    let ids = Arc::clone(&sessions);
    h.on_send("test.Line", move |ctx, packet| {
        let s = Arc::clone(&s);
        let ids = Arc::clone(&ids);
        async move {
            let line: Line = serde_json::from_slice(&packet.payload).unwrap();
            s.lock().unwrap().push(line.n);
            ids.lock().unwrap().push(ctx.id().get());
        }
    })
    .unwrap();
    h.on_send("test.Push", |ctx, packet| async move {
        let n: u64 = serde_json::from_slice(&packet.payload).unwrap();
        for i in 0..n {
            ctx.send_json("test.Line", &Line { n: i }).unwrap();
        }
    })
    .unwrap();
    h.on_request("test.Ask", |ctx, _packet, reply| async move {
        match ctx
            .request("test.Question", StreamCodec::Raw, b"?".to_vec())
            .await
        {
            Ok(zlink::session::ClientReply::Response(p)) => reply.ok(StreamCodec::Raw, p.payload),
            other => reply.error(ErrorKind::Application, format!("{other:?}")),
        }
    })
    .unwrap();
    h.on_request("test.Never", |_ctx, _packet, reply| async move {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(reply);
        });
    })
    .unwrap();
    h.on_send("test.Kick", |ctx, _packet| async move {
        ctx.close(CloseReason::ServerClosed);
    })
    .unwrap();
    h.on_send("test.Big", |ctx, packet| async move {
        let n: usize = serde_json::from_slice(&packet.payload).unwrap();
        ctx.send("test.Blob", StreamCodec::Raw, vec![7; n]).unwrap();
    })
    .unwrap();
    let mut config = StreamConfig::new("127.0.0.1:0".parse().unwrap());
    config.session = session;
    Server {
        node: StreamNode::bind(config, h).await.unwrap(),
        seen,
        sessions,
    }
}

fn client_config(server: &Server) -> ConnectorConfig {
    let mut c = ConnectorConfig::new(server.node.local_addr().to_string());
    c.dispatch_mode = DispatchMode::Immediate;
    c.reconnect.initial_backoff = Duration::from_millis(20);
    c.reconnect.max_backoff = Duration::from_millis(100);
    c
}

/// Events into a channel (Immediate mode runs the callback on the receive task).
fn event_channel() -> (
    impl FnMut(&ConnectorEvent) + Send + 'static,
    mpsc::UnboundedReceiver<ConnectorEvent>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (move |e: &ConnectorEvent| drop(tx.send(e.clone())), rx)
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<ConnectorEvent>) -> ConnectorEvent {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("an event within the wait")
        .expect("events until Closed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_and_raw_requests_get_their_answers_and_remote_errors_are_typed() {
    let server = server(SessionConfig::default()).await;
    let c = Connector::connect(client_config(&server)).await.unwrap();
    let hi: String = c
        .request(&Hello { name: "ann".into() })
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(hi, "hi ann");
    // A per-call packet name: the same payload type under another handler.
    let echo = c
        .request(&Hello { name: "bob".into() })
        .packet_name("test.Echo")
        .correlation_id("c-1")
        .await
        .unwrap();
    assert_eq!(echo.json::<Hello>().unwrap().name, "bob");
    assert_eq!(echo.packet().correlation_id.as_deref(), Some("c-1"));
    match c.request_raw("test.Missing", vec![]).await {
        Err(RequestError::Remote(e)) => assert_eq!(e.kind, ErrorKind::UnknownPacket),
        other => panic!("{other:?}"),
    }
    match c.send_raw("zlink.Ping", vec![]).await {
        Err(SendError::ReservedName(n)) => assert_eq!(n, "zlink.Ping"),
        other => panic!("{other:?}"),
    }
    c.close().await;
    assert!(c.is_closed());
    assert!(matches!(
        c.request_raw("test.Echo", vec![]).await,
        Err(RequestError::Closed)
    ));
    server.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_times_out_locally_once_and_the_connector_carries_on() {
    let server = server(SessionConfig::default()).await;
    let c = Connector::connect(client_config(&server)).await.unwrap();
    let started = tokio::time::Instant::now();
    match c
        .request_raw("test.Never", vec![])
        .timeout(Duration::from_millis(200))
        .await
    {
        Err(RequestError::TimedOut { after }) => assert_eq!(after, Duration::from_millis(200)),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(200));
    let echo = c.request_raw("test.Echo", b"x".to_vec()).await.unwrap();
    assert_eq!(echo.payload(), b"x");
    c.close().await;
    server.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_arrive_once_in_order_and_pushes_reach_handler_and_waiter() {
    let server = server(SessionConfig::default()).await;
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    let c = Connector::builder(client_config(&server))
        .on_send(move |line: Line| g.lock().unwrap().push(line.n))
        .connect()
        .await
        .unwrap();
    for n in 0..2000 {
        c.send(&Line { n }).await.unwrap();
    }
    // A request after the sends: its answer means the server handled every send before it.
    c.request_raw("test.Echo", vec![]).await.unwrap();
    assert_eq!(*server.seen.lock().unwrap(), (0..2000).collect::<Vec<_>>());

    c.send_raw("test.Push", b"300".to_vec()).await.unwrap();
    tokio::time::timeout(WAIT, async {
        while got.lock().unwrap().len() < 300 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(*got.lock().unwrap(), (0..300).collect::<Vec<_>>());

    // A waiter takes the next push ahead of the handler.
    let waiting = c.wait::<Line>(WAIT);
    let (line, ()) = tokio::join!(waiting, async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.send_raw("test.Push", b"1".to_vec()).await.unwrap();
    });
    assert_eq!(line.unwrap(), Line { n: 0 });
    c.request_raw("test.Echo", vec![]).await.unwrap();
    assert_eq!(
        got.lock().unwrap().len(),
        300,
        "the waiter's line reached no handler"
    );
    c.close().await;
    server.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_mode_runs_callbacks_only_in_dispatch_pending_while_requests_still_complete() {
    let server = server(SessionConfig::default()).await;
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    let mut config = client_config(&server);
    config.dispatch_mode = DispatchMode::Manual;
    let c = Connector::builder(config)
        .on_send(move |line: Line| g.lock().unwrap().push(line.n))
        .on_request_raw("test.Question", |_packet, responder| {
            responder.ok(StreamCodec::Raw, b"42".to_vec());
        })
        .connect()
        .await
        .unwrap();
    c.send_raw("test.Push", b"10".to_vec()).await.unwrap();
    // The answer to this request comes after the ten pushes on the same connection.
    let echo = c.request_raw("test.Echo", b"e".to_vec()).await.unwrap();
    assert_eq!(
        echo.payload(),
        b"e",
        "request futures complete without dispatch"
    );
    assert!(
        got.lock().unwrap().is_empty(),
        "no callback ran outside dispatch_pending"
    );
    // Connected event + 10 pushes queued.
    assert_eq!(c.pending_dispatch(), 11);
    assert_eq!(c.dispatch_pending(4), 4);
    assert_eq!(*got.lock().unwrap(), vec![0, 1, 2]);
    assert_eq!(c.dispatch_pending(usize::MAX), 7);
    assert_eq!(*got.lock().unwrap(), (0..10).collect::<Vec<_>>());

    // A server → client request is answered once the application dispatches it.
    let ask = c.request_raw("test.Ask", vec![]);
    let (answer, ()) = tokio::join!(ask, async {
        tokio::time::timeout(WAIT, async {
            while c.dispatch_pending(1) == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .unwrap();
    });
    assert_eq!(answer.unwrap().payload(), b"42");
    c.close().await;
    server.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_close_reconnects_as_a_new_session_and_loses_the_pending_request() {
    let server = server(SessionConfig::default()).await;
    let (on_event, mut events) = event_channel();
    let c = Connector::builder(client_config(&server))
        .on_event(on_event)
        .connect()
        .await
        .unwrap();
    assert!(matches!(
        next_event(&mut events).await,
        ConnectorEvent::Connected { .. }
    ));
    c.send(&Line { n: 1 }).await.unwrap();
    let pending = c.request_raw("test.Never", vec![]).timeout(WAIT);
    let (lost, ()) = tokio::join!(pending, async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.send_raw("test.Kick", vec![]).await.unwrap();
    });
    assert!(
        matches!(lost, Err(RequestError::ConnectionLost)),
        "{lost:?}"
    );
    assert_eq!(
        next_event(&mut events).await,
        ConnectorEvent::Disconnected(DisconnectReason::ServerClosed)
    );
    assert!(matches!(
        next_event(&mut events).await,
        ConnectorEvent::Reconnecting { attempt: 1, .. }
    ));
    assert!(matches!(
        next_event(&mut events).await,
        ConnectorEvent::Reconnected { .. }
    ));
    c.send(&Line { n: 2 }).await.unwrap();
    c.request_raw("test.Echo", vec![]).await.unwrap();
    assert_eq!(*server.seen.lock().unwrap(), vec![1, 2], "nothing resent");
    let ids = server.sessions.lock().unwrap().clone();
    assert_ne!(ids[0], ids[1], "a reconnect is a new session");
    assert_eq!(c.stats().sessions, 2);
    c.close().await;
    assert_eq!(
        next_event(&mut events).await,
        ConnectorEvent::Disconnected(DisconnectReason::ClientClosed)
    );
    assert_eq!(next_event(&mut events).await, ConnectorEvent::Closed);
    server.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_away_then_a_dead_listener_ends_in_closed_after_max_attempts() {
    let server = server(SessionConfig::default()).await;
    let (on_event, mut events) = event_channel();
    let mut config = client_config(&server);
    config.reconnect.max_attempts = Some(2);
    let c = Connector::builder(config)
        .on_event(on_event)
        .connect()
        .await
        .unwrap();
    assert!(matches!(
        next_event(&mut events).await,
        ConnectorEvent::Connected { .. }
    ));
    server.node.drain(Duration::from_millis(200));
    assert_eq!(
        next_event(&mut events).await,
        ConnectorEvent::Disconnected(DisconnectReason::GoAway)
    );
    for attempt in 1..=2 {
        match next_event(&mut events).await {
            ConnectorEvent::Reconnecting { attempt: a, .. } => assert_eq!(a, attempt),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(next_event(&mut events).await, ConnectorEvent::Closed);
    assert!(c.is_closed());
    assert!(matches!(
        c.send(&Line { n: 0 }).await,
        Err(SendError::Closed)
    ));
    server.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_over_the_inbound_limit_ends_the_session_as_message_too_large() {
    let server = server(SessionConfig::default()).await;
    let (on_event, mut events) = event_channel();
    let mut config = client_config(&server);
    config.max_inbound_message_size = MaxMessageSize::new(4096).unwrap();
    config.reconnect = ReconnectPolicy::never();
    let c = Connector::builder(config)
        .on_event(on_event)
        .connect()
        .await
        .unwrap();
    next_event(&mut events).await;
    c.send_raw("test.Big", b"1000".to_vec()).await.unwrap();
    c.send_raw("test.Big", b"100000".to_vec()).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ConnectorEvent::Disconnected(DisconnectReason::MessageTooLarge)
    );
    assert_eq!(next_event(&mut events).await, ConnectorEvent::Closed);
    assert_eq!(c.stats().unhandled, 1, "the small blob arrived, unhandled");
    server.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_keep_an_otherwise_silent_session_past_the_server_idle_timeout() {
    let session = SessionConfig {
        idle_timeout: Duration::from_millis(600),
        ..SessionConfig::default()
    };
    let server = server(session).await;
    let mut with_ping = client_config(&server);
    with_ping.ping_interval = Some(Duration::from_millis(150));
    with_ping.reconnect = ReconnectPolicy::never();
    let mut without = with_ping.clone();
    without.ping_interval = None;
    let (on_a, mut a_events) = event_channel();
    let (on_b, mut b_events) = event_channel();
    let a = Connector::builder(with_ping)
        .on_event(on_a)
        .connect()
        .await
        .unwrap();
    let _b = Connector::builder(without)
        .on_event(on_b)
        .connect()
        .await
        .unwrap();
    next_event(&mut a_events).await;
    next_event(&mut b_events).await;
    // The unpinged session is closed Idle by the server: its EOF is our marker that the idle
    // timeout passed.
    assert_eq!(
        next_event(&mut b_events).await,
        ConnectorEvent::Disconnected(DisconnectReason::ServerClosed)
    );
    assert!(
        a.is_connected(),
        "the pinged session outlived the idle timeout"
    );
    assert!(
        a_events.try_recv().is_err(),
        "no event on the pinged session"
    );
    assert!(a.stats().pings >= 2, "{:?}", a.stats());
    assert_eq!(server.node.metrics().closed(CloseReason::Idle), 1);
    a.close().await;
    server.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_are_typed() {
    // A port nothing listens on: refused at once.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    match Connector::connect(ConnectorConfig::new(addr.to_string())).await {
        Err(ConnectError::Io { .. }) => {}
        other => panic!("{other:?}"),
    }
    let mut bad = ConnectorConfig::new(addr.to_string());
    bad.request_timeout = Duration::ZERO;
    assert!(matches!(
        Connector::connect(bad).await,
        Err(ConnectError::Config(_))
    ));
    assert!(matches!(
        Connector::connect(ConnectorConfig::new("not an address")).await,
        Err(ConnectError::Resolve { .. })
    ));
}
