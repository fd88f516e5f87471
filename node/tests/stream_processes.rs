//! Client STREAM sessions on a real `zlink-node run` process (issue 19 items 1–2): the host
//! announces its STREAM listener, serves the reference application's `refapp.Echo`, counts
//! sessions on `/metrics`, closes a session that sends an oversized packet with EOF and zero
//! bytes, refuses a negative `stream.max_message_size` at startup, and on SIGTERM sends
//! `zlink.GoAway` before closing its sessions and exiting 0; and (issue 19 acceptance 3) a
//! session on one of three hosts bound to a player on another carries 10,000 sends and 1,000
//! requests once and in order with no object-path store operation during the traffic.
#![allow(clippy::unwrap_used)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

mod common_procs;
use common_procs::{BIN, Host, SECRET, TOKEN, drain_all, http_get, metric, write_stream_config};
use zlink_protocol::stream::{
    MaxMessageSize, StreamCodec, StreamDecoder, StreamKind, StreamPacket, StreamPrefix,
};

/// A blocking STREAM client.
struct Client {
    stream: TcpStream,
    decoder: StreamDecoder,
}

impl Client {
    fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Self {
            stream,
            decoder: StreamDecoder::new(MaxMessageSize::UNLIMITED),
        }
    }

    fn write(&mut self, packet: &StreamPacket) {
        self.stream.write_all(&packet.encode().unwrap()).unwrap();
    }

    fn next(&mut self) -> StreamPacket {
        loop {
            if let Some(p) = self.decoder.next_packet().unwrap() {
                return p;
            }
            let mut buf = [0u8; 4096];
            let n = self.stream.read(&mut buf).unwrap();
            assert!(n > 0, "EOF while waiting for a packet");
            self.decoder.extend(&buf[..n]);
        }
    }

    fn rest_until_eof(mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        self.stream.read_to_end(&mut rest).expect("a clean EOF");
        rest
    }
}

#[test]
fn a_host_serves_stream_sessions_counts_them_and_sends_go_away_on_sigterm() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let tag = format!("{}-streams", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_stream_config(&dir, &redis.url(), &tag, "streams");
    let mut host = Host::spawn(&config, "stream");
    let addr = host
        .stream
        .clone()
        .expect("the announce line names the STREAM listener");

    let mut client = Client::connect(&addr);
    client.write(&StreamPacket::request(
        StreamCodec::FrameworkJson,
        1,
        "refapp.Echo",
        br#"{"hello":1}"#.to_vec(),
    ));
    let echo = client.next();
    assert_eq!(
        (echo.kind, echo.request_seq, echo.payload.as_slice()),
        (StreamKind::Response, Some(1), br#"{"hello":1}"#.as_slice())
    );

    // An oversized prefix (over the 64 KiB default) closes that session only.
    let mut bad = Client::connect(&addr);
    let prefix = StreamPrefix {
        header_len: 8,
        payload_size: 65_600,
    };
    bad.stream.write_all(&prefix.to_bytes()).unwrap();
    assert!(bad.rest_until_eof().is_empty(), "nothing is sent to it");
    // A closed session leaves the gauge when its task ends, just after the client's EOF.
    let t0 = std::time::Instant::now();
    let text = loop {
        let (_, text) = http_get(&host.http, "/metrics");
        if metric(&text, "zlink_stream_sessions") == 1.0 || t0.elapsed() > Duration::from_secs(10) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        metric(
            &text,
            "zlink_stream_sessions_closed_total{reason=\"MessageTooLarge\"}"
        ),
        1.0
    );
    assert_eq!(metric(&text, "zlink_stream_sessions"), 1.0);
    assert_eq!(metric(&text, "zlink_stream_sessions_accepted_total"), 2.0);

    // SIGTERM: the session is told to go, then closed; the host exits 0.
    let pid = host.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let go_away = client.next();
    assert_eq!(
        (go_away.kind, go_away.packet_name.as_str()),
        (StreamKind::Send, "zlink.GoAway")
    );
    assert!(client.rest_until_eof().is_empty());
    assert!(host.wait_exit().success());
    drop(redis);
}

#[test]
fn a_negative_max_message_size_stops_the_start_naming_the_field() {
    let out = Command::new(BIN)
        .args(["run"])
        .env("ZLINK_REDIS_URL", "redis://127.0.0.1:1/")
        .env("ZLINK_STREAM_LISTEN", "127.0.0.1:0")
        .env("ZLINK_STREAM_MAX_MESSAGE_SIZE", "-5")
        .env("ZLINK_MESH_SECRET", SECRET)
        .env("ZLINK_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stream.max_message_size = -5"), "{err}");
}

/// The object-path store operations a host counted (authority reads, creation, moves,
/// Relocation Store): everything but lease and descriptor calls.
fn object_store_ops(http: &str) -> f64 {
    // The host counts the MeshNode's lease and discovery calls first, then the object runtime's.
    const DISCOVERY: &[&str] = zlink_node::host::metrics::store::STORE_OPS.split_at(8).0;
    let (_, text) = http_get(http, "/metrics");
    text.lines()
        .filter_map(|l| l.strip_prefix("zlink_store_ops_total{op=\""))
        .filter(|l| !DISCOVERY.iter().any(|d| l.starts_with(&format!("{d}\""))))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Issue 19 acceptance 3: three `zlink-node run` processes on a real `redis-server`; a STREAM
/// session on host A bound (`refapp.Bind`, command 38) to a player Actor on host B ≠ A relays
/// 10,000 sends and 1,000 requests interleaved (24/25 with the bound-session tail): each
/// arrives once and in order (the player's per-source report), every request is acknowledged
/// in turn, and no host counts an object-path store operation during the traffic.
#[test]
fn a_session_bound_across_hosts_relays_every_message_once_in_order_without_store_reads() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let tag = format!("{}-bound", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_stream_config(&dir, &redis.url(), &tag, "streams");
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| Host::spawn(&config, &format!("b{i}")))
        .collect();
    for h in &hosts {
        h.wait_status("two ready peers", |s| s["peers_ready"] == 2);
    }
    let a = &hosts[0];
    let addr = a.stream.clone().unwrap();
    // A player placed on another host than A (placement spreads them over the three).
    let mut seq = 0u64;
    let mut bound = None;
    for i in 0..30 {
        let mut c = Client::connect(&addr);
        seq += 1;
        let bind = format!(r#"{{"player":"player:bound-{i}"}}"#);
        c.write(&StreamPacket::request(
            StreamCodec::FrameworkJson,
            seq,
            "refapp.Bind",
            bind.into_bytes(),
        ));
        let reply = c.next();
        assert_eq!(reply.kind, StreamKind::Response, "{reply:?}");
        let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
        if v["ownerRid"] != a.rid.as_str() {
            bound = Some((c, format!("player:bound-{i}")));
            break;
        }
    }
    let (mut c, player) = bound.expect("a player placed off host A within 30 tries");
    let before: f64 = hosts.iter().map(|h| object_store_ops(&h.http)).sum();
    let mut acks = 0u64;
    for round in 0..1_000u64 {
        let mut batch = Vec::new();
        for k in 0..10u64 {
            let n = round * 10 + k;
            batch.push(StreamPacket::send(
                StreamCodec::FrameworkJson,
                "refapp.Deliver",
                format!(r#"{{"source":"stream","seq":{n},"item":null}}"#).into_bytes(),
            ));
        }
        seq += 1;
        batch.push(StreamPacket::request(
            StreamCodec::FrameworkJson,
            seq,
            "refapp.DeliverRequest",
            format!(r#"{{"source":"stream-req","seq":{round},"item":null}}"#).into_bytes(),
        ));
        let bytes: Vec<u8> = batch.iter().flat_map(|p| p.encode().unwrap()).collect();
        c.stream.write_all(&bytes).unwrap();
        let ack = c.next();
        assert_eq!(
            (ack.kind, ack.request_seq),
            (StreamKind::Response, Some(seq)),
            "{ack:?}"
        );
        let v: serde_json::Value = serde_json::from_slice(&ack.payload).unwrap();
        assert_eq!(
            (v["seq"].as_u64(), v["duplicate"].as_bool()),
            (Some(round), Some(false))
        );
        acks += 1;
    }
    let after: f64 = hosts.iter().map(|h| object_store_ops(&h.http)).sum();
    assert_eq!(acks, 1_000);
    assert_eq!(
        after - before,
        0.0,
        "object-path store operations during the traffic"
    );
    // The player's own account: 10,000 + 1,000, no gap, no duplicate, none out of order.
    seq += 1;
    c.write(&StreamPacket::request(
        StreamCodec::FrameworkJson,
        seq,
        "refapp.ReportRequest",
        br#"{"expected":{"stream":10000,"stream-req":1000}}"#.to_vec(),
    ));
    let report = c.next();
    let v: serde_json::Value = serde_json::from_slice(&report.payload).unwrap();
    assert_eq!(v["player"], player.as_str(), "{v}");
    assert_eq!(
        (v["sends"].as_u64(), v["requests"].as_u64()),
        (Some(10_000), Some(1_000)),
        "{v}"
    );
    for source in v["sources"].as_array().unwrap() {
        assert_eq!(source["missing"], 0, "{source}");
        assert_eq!(source["duplicates"], 0, "{source}");
        assert_eq!(source["out_of_order"], 0, "{source}");
        assert_eq!(source["distinct"], source["expected"], "{source}");
    }
    assert_eq!(v["sources"].as_array().unwrap().len(), 2, "{v}");
    drop(c);
    drain_all(&mut hosts);
    drop(redis);
}

#[test]
fn a_short_session_auth_key_stops_the_start_naming_the_field_not_the_key() {
    let out = Command::new(BIN)
        .args(["run"])
        .env("ZLINK_REDIS_URL", "redis://127.0.0.1:1/")
        .env("ZLINK_STREAM_LISTEN", "127.0.0.1:0")
        .env("ZLINK_STREAM_AUTH_KEY", "tooshort-secret")
        .env("ZLINK_MESH_SECRET", SECRET)
        .env("ZLINK_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stream.auth_key") && err.contains("16 bytes"),
        "{err}"
    );
    assert!(
        !err.contains("tooshort-secret"),
        "the key is not printed: {err}"
    );
}

/// One STREAM request on `c` (framework JSON), its answer.
fn ask(c: &mut Client, seq: &mut u64, name: &str, body: &str) -> StreamPacket {
    *seq += 1;
    c.write(&StreamPacket::request(
        StreamCodec::FrameworkJson,
        *seq,
        name,
        body.as_bytes().to_vec(),
    ));
    let p = c.next();
    assert_eq!(p.request_seq, Some(*seq), "{p:?}");
    p
}

/// Issue 19 with issue 20 (the `HostRouter` re-open path): a session outlives its host's node
/// lifecycle. Redis goes away for longer than the lease TTL, the host loses its lease, drops
/// its objects and rejoins as a new lifecycle once Redis is back — the client's connection stays
/// open throughout. A relay on the old binding then fails typed (the binding died with the old
/// lifecycle's Actors; nothing hangs), and the same session binds again through the new
/// runtime and relays to the re-created player.
#[test]
fn a_session_outlives_a_rejoin_and_binds_again_through_the_new_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut redis = rt.block_on(redis_server::RedisServer::start());
    let tag = format!("{}-srejoin", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("node.yaml");
    std::fs::write(
        &config,
        format!(
            "mesh:\n  name: srejoin\n  rid_prefix: yaml\n\
             redis:\n  url: {}\n  namespace: {tag}\n  response_timeout_ms: 300\n  connection_timeout_ms: 300\n\
             timings:\n  probe_interval_ms: 100\n  liveness_deadline_ms: 3000\n  lease_ttl_ms: 3000\n  discovery_poll_ms: 100\n\
             admin:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n\
             stream:\n  listen: 127.0.0.1:0\n\
             relocation:\n  on_shutdown: none\n\
             drain_deadline_ms: 4000\nlog_level: warn\n",
            redis.url()
        ),
    )
    .unwrap();
    let mut hosts = vec![Host::spawn(&config, "r0")];
    let h = &hosts[0];
    let first_rid = h.status()["rid"].as_str().unwrap().to_owned();
    let mut c = Client::connect(h.stream.as_deref().unwrap());
    let mut seq = 0u64;
    let bind = r#"{"player":"player:rejoin"}"#;
    let req = |n: u64| format!(r#"{{"source":"s","seq":{n},"item":null}}"#);
    assert_eq!(
        ask(&mut c, &mut seq, "refapp.Bind", bind).kind,
        StreamKind::Response
    );
    let ack = ask(&mut c, &mut seq, "refapp.DeliverRequest", &req(0));
    assert_eq!(ack.kind, StreamKind::Response, "{ack:?}");
    // The lease is lost and the host rejoins as a new lifecycle; the connection stays.
    redis.stop();
    h.wait_status("fenced", |s| s["state"] == "fenced");
    std::thread::sleep(Duration::from_millis(4_500));
    rt.block_on(redis.restart());
    let s = h.wait_status("serving again", |s| s["state"] == "serving");
    assert_ne!(
        s["rid"],
        first_rid.as_str(),
        "rejoined as a new lifecycle: {s}"
    );
    // The old binding went with the old lifecycle: a typed refusal, not a hang.
    let refused = ask(&mut c, &mut seq, "refapp.DeliverRequest", &req(1));
    assert_eq!(refused.kind, StreamKind::Error, "{refused:?}");
    // The same session binds again through the new runtime and relays.
    let t0 = std::time::Instant::now();
    loop {
        let b = ask(&mut c, &mut seq, "refapp.Bind", bind);
        if b.kind == StreamKind::Response {
            break;
        }
        // The dead lifecycle's row may still need its lease to lapse before a re-create.
        assert!(t0.elapsed() < Duration::from_secs(20), "no rebind: {b:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let ack = ask(&mut c, &mut seq, "refapp.DeliverRequest", &req(0));
    assert_eq!(ack.kind, StreamKind::Response, "{ack:?}");
    let v: serde_json::Value = serde_json::from_slice(&ack.payload).unwrap();
    assert_eq!(
        (v["seq"].as_u64(), v["duplicate"].as_bool()),
        (Some(0), Some(false)),
        "the player of the new lifecycle starts afresh: {v}"
    );
    let (_, text) = http_get(&hosts[0].http, "/metrics");
    assert_eq!(metric(&text, "zlink_host_rejoins_total"), 1.0);
    assert_eq!(
        metric(&text, "zlink_stream_sessions"),
        1.0,
        "the session stayed open"
    );
    drop(c);
    drain_all(&mut hosts);
    drop(redis);
}
