//! Client STREAM sessions on a real `zlink-node run` process (issue 19 items 1–2): the host
//! announces its STREAM listener, serves the reference application's `refapp.Echo`, counts
//! sessions on `/metrics`, closes a session that sends an oversized packet with EOF and zero
//! bytes, refuses a negative `stream.max_message_size` at startup, and on SIGTERM sends
//! `zlink.GoAway` before closing its sessions and exiting 0.
#![allow(clippy::unwrap_used)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common_procs;
use common_procs::{BIN, Host, SECRET, TOKEN, http_get, metric};
use zlink_protocol::stream::{
    MaxMessageSize, StreamCodec, StreamDecoder, StreamKind, StreamPacket, StreamPrefix,
};

fn write_config(dir: &Path, redis_url: &str, namespace: &str) -> PathBuf {
    let path = dir.join("node.yaml");
    std::fs::write(
        &path,
        format!(
            "mesh:\n  name: streams\n  rid_prefix: yaml\n\
             redis:\n  url: {redis_url}\n  namespace: {namespace}\n\
             timings:\n  probe_interval_ms: 100\n  liveness_deadline_ms: 3000\n  lease_ttl_ms: 6000\n  discovery_poll_ms: 100\n\
             admin:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n\
             stream:\n  listen: 127.0.0.1:0\n\
             relocation:\n  on_shutdown: none\n\
             drain_deadline_ms: 4000\nlog_level: warn\n"
        ),
    )
    .unwrap();
    path
}

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
    let config = write_config(&dir, &redis.url(), &tag);
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
