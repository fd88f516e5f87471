//! The client session core on virtual time: request pairing, deadlines, keepalive, GoAway,
//! reserved names, the inbound limit and close (issue 19 item 8).
#![allow(clippy::unwrap_used)] // In tests a panic is the failure report.

use std::time::{Duration, Instant};

use zlink_protocol::stream::{
    MaxMessageSize, PREFIX_LEN, StreamCodec, StreamDecoder, StreamKind, StreamPacket,
};
use zlink_session::{ErrorKind, ErrorPayload, GO_AWAY, PING};

use super::*;

const PING_EVERY: Duration = Duration::from_secs(20);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
const T: Duration = Duration::from_secs(5);

fn config() -> CoreConfig {
    CoreConfig {
        max_inbound_message_size: MaxMessageSize::new(1024).unwrap(),
        ping_interval: Some(PING_EVERY),
        ping_timeout: PING_TIMEOUT,
    }
}

fn session(now: Instant) -> ClientSession {
    ClientSession::new(config(), now)
}

/// Every packet the core wrote.
fn written(s: &mut ClientSession) -> Vec<StreamPacket> {
    let mut d = StreamDecoder::new(MaxMessageSize::UNLIMITED);
    while let Some(bytes) = s.transmit() {
        s.handle_written(bytes.len());
        d.extend(&bytes);
    }
    std::iter::from_fn(|| d.next_packet().unwrap()).collect()
}

fn events(s: &mut ClientSession) -> Vec<CoreEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn read(s: &mut ClientSession, packets: &[StreamPacket]) {
    let bytes: Vec<u8> = packets.iter().flat_map(|p| p.encode().unwrap()).collect();
    s.handle_read(&bytes);
}

fn request(name: &str) -> StreamPacket {
    StreamPacket::request(StreamCodec::Raw, 1, name, b"q".to_vec())
}

#[test]
fn requests_get_their_own_sequences_and_answers_pair_by_sequence_in_any_order() {
    let now = Instant::now();
    let mut s = session(now);
    let a = s.request(request("app.A"), T, now).unwrap();
    let b = s.request(request("app.B"), T, now).unwrap();
    assert_ne!(a, b);
    let out = written(&mut s);
    assert_eq!(
        out.iter().map(|p| p.request_seq).collect::<Vec<_>>(),
        vec![Some(a), Some(b)]
    );
    read(
        &mut s,
        &[
            StreamPacket::response(StreamCodec::Raw, b, b"B".to_vec()),
            StreamPacket::error(
                StreamCodec::FrameworkJson,
                a,
                ErrorPayload::new(ErrorKind::NotFound, "x").to_json(),
            ),
        ],
    );
    let ev = events(&mut s);
    assert!(
        matches!(&ev[0], CoreEvent::Replied { request_seq, packet } if *request_seq == b && packet.payload == b"B")
    );
    assert!(
        matches!(&ev[1], CoreEvent::Replied { request_seq, packet } if *request_seq == a && packet.kind == StreamKind::Error)
    );
    assert_eq!(s.pending_requests(), 0);
}

#[test]
fn a_request_without_an_answer_times_out_once_and_its_late_answer_is_a_counted_drop() {
    let now = Instant::now();
    let mut s = session(now);
    let seq = s
        .request(request("app.Slow"), Duration::from_secs(2), now)
        .unwrap();
    let other = s
        .request(request("app.Later"), Duration::from_secs(4), now)
        .unwrap();
    assert_eq!(s.poll_timeout(), Some(now + Duration::from_secs(2)));
    s.handle_timeout(now + Duration::from_millis(1999));
    assert!(events(&mut s).is_empty());
    s.handle_timeout(now + Duration::from_secs(2));
    assert_eq!(
        events(&mut s),
        vec![CoreEvent::RequestFailed {
            request_seq: seq,
            failure: RequestFailure::TimedOut
        }]
    );
    s.handle_timeout(now + Duration::from_secs(3));
    assert!(events(&mut s).is_empty(), "one terminal per request");
    read(
        &mut s,
        &[StreamPacket::response(StreamCodec::Raw, seq, vec![])],
    );
    assert!(events(&mut s).is_empty());
    assert_eq!(s.counters().unknown_reply_drops, 1);
    assert_eq!(s.pending_requests(), 1, "{other} still waits");
}

#[test]
fn an_answer_removes_its_deadline() {
    let now = Instant::now();
    let mut s = session(now);
    let seq = s.request(request("app.A"), T, now).unwrap();
    read(
        &mut s,
        &[StreamPacket::response(StreamCodec::Raw, seq, vec![])],
    );
    events(&mut s);
    assert_eq!(
        s.poll_timeout(),
        Some(now + PING_EVERY),
        "only the ping is left"
    );
    s.handle_timeout(now + T);
    assert!(events(&mut s).is_empty());
}

#[test]
fn the_core_pings_on_schedule_and_an_answered_ping_schedules_the_next_from_its_send_time() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_timeout(now + PING_EVERY - Duration::from_millis(1));
    assert!(written(&mut s).is_empty());
    let sent = now + PING_EVERY;
    s.handle_timeout(sent);
    let out = written(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].kind, StreamKind::Request);
    assert_eq!(out[0].packet_name, PING);
    assert_eq!(s.counters().pings, 1);
    assert_eq!(s.poll_timeout(), Some(sent + PING_TIMEOUT));
    let seq = out[0].request_seq.unwrap();
    read(
        &mut s,
        &[StreamPacket::response(StreamCodec::Raw, seq, vec![])],
    );
    assert!(
        events(&mut s).is_empty(),
        "the ping's answer is the core's own"
    );
    assert_eq!(s.poll_timeout(), Some(sent + PING_EVERY));
    assert_eq!(s.counters().unknown_reply_drops, 0);
}

#[test]
fn an_unanswered_ping_closes_the_session_with_ping_timeout_and_fails_pending_requests() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_timeout(now + PING_EVERY);
    written(&mut s);
    let seq = s
        .request(request("app.A"), Duration::from_secs(60), now + PING_EVERY)
        .unwrap();
    s.handle_timeout(now + PING_EVERY + PING_TIMEOUT);
    assert_eq!(
        events(&mut s),
        vec![
            CoreEvent::RequestFailed {
                request_seq: seq,
                failure: RequestFailure::ConnectionLost
            },
            CoreEvent::Closed(DisconnectReason::PingTimeout)
        ]
    );
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn no_ping_interval_means_no_pings() {
    let now = Instant::now();
    let mut s = ClientSession::new(
        CoreConfig {
            ping_interval: None,
            ..config()
        },
        now,
    );
    assert_eq!(s.poll_timeout(), None);
    s.handle_timeout(now + Duration::from_secs(3600));
    assert!(written(&mut s).is_empty());
}

#[test]
fn request_sequences_skip_the_ping_in_flight() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_timeout(now + PING_EVERY);
    let ping_seq = written(&mut s)[0].request_seq.unwrap();
    for _ in 0..3 {
        let seq = s.request(request("app.A"), T, now + PING_EVERY).unwrap();
        assert_ne!(seq, ping_seq);
    }
}

#[test]
fn go_away_is_reported_once_and_the_following_eof_closes_as_go_away() {
    let now = Instant::now();
    let mut s = session(now);
    let go_away = StreamPacket::send(StreamCodec::FrameworkJson, GO_AWAY, b"{}".to_vec());
    read(&mut s, &[go_away.clone(), go_away]);
    assert_eq!(events(&mut s), vec![CoreEvent::GoAway]);
    assert!(s.is_going_away());
    s.handle_eof();
    assert_eq!(
        events(&mut s),
        vec![CoreEvent::Closed(DisconnectReason::GoAway)]
    );
}

#[test]
fn a_plain_eof_closes_as_server_closed() {
    let mut s = session(Instant::now());
    s.handle_eof();
    assert_eq!(
        events(&mut s),
        vec![CoreEvent::Closed(DisconnectReason::ServerClosed)]
    );
}

#[test]
fn server_pushes_are_events_in_order_and_other_reserved_sends_are_counted_drops() {
    let mut s = session(Instant::now());
    read(
        &mut s,
        &[
            StreamPacket::send(StreamCodec::Raw, "chat.Line", b"1".to_vec()),
            StreamPacket::send(StreamCodec::Raw, "zlink.Future", vec![]),
            StreamPacket::send(StreamCodec::Raw, "chat.Line", b"2".to_vec()),
        ],
    );
    let payloads: Vec<Vec<u8>> = events(&mut s)
        .into_iter()
        .map(|e| match e {
            CoreEvent::Push(p) => p.payload,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(payloads, vec![b"1".to_vec(), b"2".to_vec()]);
    assert_eq!(s.counters().reserved_send_drops, 1);
}

#[test]
fn a_server_request_is_answered_once_with_its_sequence() {
    let mut s = session(Instant::now());
    read(
        &mut s,
        &[StreamPacket::request(
            StreamCodec::Raw,
            77,
            "app.Ask",
            b"?".to_vec(),
        )],
    );
    assert!(matches!(
        &events(&mut s)[..],
        [CoreEvent::ServerRequest {
            request_seq: 77,
            ..
        }]
    ));
    s.reply(
        77,
        ClientAnswer::Response {
            codec: StreamCodec::Raw,
            payload: b"!".to_vec(),
        },
    )
    .unwrap();
    assert_eq!(
        s.reply(
            77,
            ClientAnswer::Error(ErrorPayload::new(ErrorKind::Application, "x"))
        ),
        Err(CoreError::NotPending(77))
    );
    let out = written(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].kind, StreamKind::Response);
    assert_eq!(out[0].request_seq, Some(77));
    assert_eq!(out[0].payload, b"!");
}

#[test]
fn reserved_server_requests_are_answered_by_the_core() {
    let mut s = session(Instant::now());
    read(
        &mut s,
        &[
            StreamPacket::request(StreamCodec::Raw, 1, PING, vec![]),
            StreamPacket::request(StreamCodec::Raw, 2, "zlink.Other", vec![]),
        ],
    );
    assert!(events(&mut s).is_empty());
    let out = written(&mut s);
    assert_eq!(out[0].kind, StreamKind::Response);
    assert_eq!(out[1].kind, StreamKind::Error);
    let e = ErrorPayload::from_json(&out[1].payload).unwrap();
    assert_eq!(e.kind, ErrorKind::UnknownPacket);
}

#[test]
fn a_server_reusing_a_pending_request_sequence_is_a_protocol_error() {
    let mut s = session(Instant::now());
    let ask = StreamPacket::request(StreamCodec::Raw, 5, "app.Ask", vec![]);
    read(&mut s, &[ask.clone(), ask]);
    let ev = events(&mut s);
    assert_eq!(
        ev.last(),
        Some(&CoreEvent::Closed(DisconnectReason::ProtocolError))
    );
}

#[test]
fn a_packet_over_the_inbound_limit_closes_before_its_body_is_buffered() {
    let now = Instant::now();
    let mut s = session(now);
    let seq = s.request(request("app.A"), T, now).unwrap();
    written(&mut s);
    let big = StreamPacket::send(StreamCodec::Raw, "app.Big", vec![0; 2000])
        .encode()
        .unwrap();
    s.handle_read(&big[..PREFIX_LEN]);
    assert_eq!(
        events(&mut s),
        vec![
            CoreEvent::RequestFailed {
                request_seq: seq,
                failure: RequestFailure::ConnectionLost
            },
            CoreEvent::Closed(DisconnectReason::MessageTooLarge)
        ]
    );
    assert_eq!(s.buffered_inbound(), 0);
    s.handle_read(&big[PREFIX_LEN..]);
    assert!(events(&mut s).is_empty(), "nothing after the close");
}

#[test]
fn malformed_bytes_close_with_protocol_error() {
    let mut s = session(Instant::now());
    s.handle_read(&[0, 4, 0, 0, 0, 0, 0xAB, 1, 0, 0]);
    assert_eq!(
        events(&mut s),
        vec![CoreEvent::Closed(DisconnectReason::ProtocolError)]
    );
}

#[test]
fn split_reads_decode_the_same_packets() {
    let mut s = session(Instant::now());
    let bytes: Vec<u8> = (0..10)
        .flat_map(|i| {
            StreamPacket::send(StreamCodec::Raw, "app.P", vec![i; 40])
                .encode()
                .unwrap()
        })
        .collect();
    for chunk in bytes.chunks(7) {
        s.handle_read(chunk);
    }
    assert_eq!(events(&mut s).len(), 10);
    assert_eq!(s.buffered_inbound(), 0);
}

#[test]
fn applications_cannot_send_reserved_names_or_the_wrong_kind() {
    let now = Instant::now();
    let mut s = session(now);
    assert_eq!(
        s.send(&StreamPacket::send(StreamCodec::Raw, "zlink.Ping", vec![])),
        Err(CoreError::ReservedName("zlink.Ping".into()))
    );
    assert!(matches!(
        s.send(&request("app.A")),
        Err(CoreError::WrongKind { call: "send", .. })
    ));
    assert!(matches!(
        s.request(
            StreamPacket::send(StreamCodec::Raw, "app.A", vec![]),
            T,
            now
        ),
        Err(CoreError::WrongKind {
            call: "request",
            ..
        })
    ));
    assert!(written(&mut s).is_empty());
}

#[test]
fn a_client_close_keeps_queued_output_and_a_broken_one_drops_it() {
    let mut s = session(Instant::now());
    s.send(&StreamPacket::send(StreamCodec::Raw, "app.Bye", vec![]))
        .unwrap();
    s.close(DisconnectReason::ClientClosed);
    assert_eq!(written(&mut s).len(), 1, "the last send still goes out");
    assert_eq!(
        s.send(&StreamPacket::send(StreamCodec::Raw, "app.After", vec![])),
        Err(CoreError::Closed(DisconnectReason::ClientClosed))
    );

    let mut s = session(Instant::now());
    s.send(&StreamPacket::send(StreamCodec::Raw, "app.Lost", vec![]))
        .unwrap();
    s.handle_eof();
    assert!(written(&mut s).is_empty());
}

#[test]
fn close_is_reported_once_and_fails_every_pending_request_in_sequence_order() {
    let now = Instant::now();
    let mut s = session(now);
    let seqs: Vec<u64> = (0..5)
        .map(|_| s.request(request("app.A"), T, now).unwrap())
        .collect();
    s.close(DisconnectReason::Io(std::io::ErrorKind::ConnectionReset));
    s.close(DisconnectReason::ClientClosed);
    s.handle_eof();
    let ev = events(&mut s);
    let failed: Vec<u64> = ev
        .iter()
        .filter_map(|e| match e {
            CoreEvent::RequestFailed {
                request_seq,
                failure: RequestFailure::ConnectionLost,
            } => Some(*request_seq),
            _ => None,
        })
        .collect();
    assert_eq!(failed, seqs);
    assert_eq!(
        ev.last(),
        Some(&CoreEvent::Closed(DisconnectReason::Io(
            std::io::ErrorKind::ConnectionReset
        )))
    );
    assert_eq!(ev.len(), 6);
}

#[test]
fn an_error_answer_goes_out_as_framework_json_kind_and_detail() {
    let mut s = session(Instant::now());
    read(
        &mut s,
        &[StreamPacket::request(
            StreamCodec::Raw,
            9,
            "app.Ask",
            vec![],
        )],
    );
    events(&mut s);
    s.reply(
        9,
        ClientAnswer::Error(ErrorPayload::new(ErrorKind::Application, "no")),
    )
    .unwrap();
    let out = written(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].codec, StreamCodec::FrameworkJson);
    assert_eq!(
        ErrorPayload::from_json(&out[0].payload).unwrap(),
        ErrorPayload::new(ErrorKind::Application, "no")
    );
}
