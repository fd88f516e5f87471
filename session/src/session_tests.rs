#![allow(clippy::unwrap_used)] // In tests a panic is the failure report.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use zlink_protocol::stream::{MaxMessageSize, StreamPrefix};

use super::*;

fn config() -> SessionConfig {
    SessionConfig {
        max_message_size: MaxMessageSize::new(1024).unwrap(),
        idle_timeout: Duration::from_secs(60),
        outbound_buffer_bytes: 4096,
        request_timeout: Duration::from_secs(10),
        max_pending_requests: 4,
    }
}

fn session(now: Instant) -> Session {
    Session::new(SessionId::new(7).unwrap(), config(), now)
}

fn send(name: &str, payload: &[u8]) -> StreamPacket {
    StreamPacket::send(StreamCodec::Raw, name, payload.to_vec())
}

fn request(seq: u64, name: &str) -> StreamPacket {
    StreamPacket::request(StreamCodec::Raw, seq, name, b"q".to_vec())
}

fn bytes(packets: &[StreamPacket]) -> Vec<u8> {
    packets.iter().flat_map(|p| p.encode().unwrap()).collect()
}

fn events(s: &mut Session) -> Vec<Event> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

/// Decode everything the session transmitted.
fn output(s: &mut Session) -> Vec<StreamPacket> {
    let mut decoder = StreamDecoder::new(MaxMessageSize::UNLIMITED);
    while let Some(b) = s.transmit() {
        s.handle_written(b.len());
        decoder.extend(&b);
    }
    std::iter::from_fn(|| decoder.next_packet().unwrap()).collect()
}

fn error_kind(packet: &StreamPacket) -> ErrorKind {
    assert_eq!(packet.kind, StreamKind::Error);
    ErrorPayload::from_json(&packet.payload).unwrap().kind
}

#[test]
fn accepted_packets_are_dispatched_in_order_with_increasing_session_sequence() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_read(
        &bytes(&[send("a", b"1"), request(5, "b"), send("c", b"3")]),
        now,
    );
    let got: Vec<(u64, String)> = events(&mut s)
        .into_iter()
        .map(|e| match e {
            Event::Dispatch(i) => (i.sequence(), i.packet().packet_name.clone()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        got,
        [(1, "a".into()), (2, "b".into()), (3, "c".into())].to_vec()
    );
    assert_eq!(s.pending_requests(), 1);
    assert!(output(&mut s).is_empty(), "nothing is sent before a reply");
}

#[test]
fn a_reply_answers_its_request_once_and_echoes_the_correlation_id() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_read(
        &bytes(&[request(9, "q").with_correlation_id("corr-1")]),
        now,
    );
    assert!(matches!(
        events(&mut s).as_slice(),
        [Event::Dispatch(Inbound::Request { request_seq: 9, .. })]
    ));
    let reply = Reply::Response {
        codec: StreamCodec::Raw,
        payload: b"ok".to_vec(),
    };
    s.reply(9, reply.clone()).unwrap();
    assert_eq!(
        s.reply(9, reply),
        Err(ReplyError::NotPending { request_seq: 9 })
    );
    let out = output(&mut s);
    assert_eq!(
        out,
        [
            StreamPacket::response(StreamCodec::Raw, 9, b"ok".to_vec())
                .with_correlation_id("corr-1")
        ]
    );
    assert_eq!(s.counters().late_replies, 1);
}

#[test]
fn a_request_sequence_may_be_reused_once_it_has_its_terminal() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_read(&bytes(&[request(1, "q")]), now);
    s.reply(
        1,
        Reply::Error(ErrorPayload::new(ErrorKind::Application, "no")),
    )
    .unwrap();
    s.handle_read(&bytes(&[request(1, "q")]), now);
    assert!(!s.is_closed());
    assert_eq!(events(&mut s).len(), 2);
}

/// Bad input of every kind closes the session, hands nothing more to a handler and sends
/// nothing (issue 19 item 2, acceptance 2 at the core level).
#[test]
fn bad_input_closes_with_nothing_dispatched_and_nothing_sent() {
    let oversized = StreamPrefix {
        header_len: 10,
        payload_size: 2000,
    }
    .to_bytes()
    .to_vec();
    let mut bad_marker = send("a", b"x").encode().unwrap();
    bad_marker[6] = 0xF3;
    let mut reused = bytes(&[request(3, "q")]);
    reused.extend(bytes(&[request(3, "q")]));
    let mut undefined_flag = send("a", b"x").encode().unwrap();
    undefined_flag[9] = 0x80;
    let cases: [(&str, Vec<u8>, CloseReason, usize); 4] = [
        (
            "oversized prefix",
            oversized,
            CloseReason::MessageTooLarge,
            0,
        ),
        ("bad marker", bad_marker, CloseReason::ProtocolError, 0),
        ("reused pending seq", reused, CloseReason::ProtocolError, 1),
        (
            "undefined flag",
            undefined_flag,
            CloseReason::ProtocolError,
            0,
        ),
    ];
    for (name, input, reason, dispatched_before) in cases {
        let now = Instant::now();
        let mut s = session(now);
        // Output accepted before the bad bytes is dropped as well.
        s.send(send("hello", b"")).unwrap();
        s.handle_read(&input, now);
        let evs = events(&mut s);
        let dispatches = evs
            .iter()
            .filter(|e| matches!(e, Event::Dispatch(_)))
            .count();
        assert_eq!(dispatches, dispatched_before, "{name}");
        assert_eq!(evs.last(), Some(&Event::Closed(reason)), "{name}");
        assert_eq!(s.close_reason(), Some(reason), "{name}");
        assert!(s.transmit().is_none(), "{name}: nothing is sent");
        assert!(!s.wants_read(), "{name}");
        // Later bytes change nothing.
        s.handle_read(&bytes(&[send("late", b"")]), now);
        assert!(events(&mut s).is_empty(), "{name}");
        assert_eq!(s.buffered_inbound(), 0, "{name}");
    }
}

#[test]
fn valid_packets_before_bad_bytes_in_the_same_read_are_dispatched() {
    let now = Instant::now();
    let mut s = session(now);
    let mut input = bytes(&[send("a", b"1"), send("b", b"2")]);
    input.extend([0, 1, 0, 0, 0, 0, 0x00]);
    s.handle_read(&input, now);
    let evs = events(&mut s);
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert_eq!(evs[2], Event::Closed(CloseReason::ProtocolError));
}

#[test]
fn the_size_limit_is_checked_from_the_prefix_before_the_payload_arrives() {
    let now = Instant::now();
    let mut s = session(now);
    let big = send("a", &[7; 1100]).encode().unwrap();
    s.handle_read(&big[..6], now);
    assert_eq!(s.close_reason(), Some(CloseReason::MessageTooLarge));
    assert_eq!(s.buffered_inbound(), 0);
}

#[test]
fn a_packet_at_the_limit_is_accepted() {
    let now = Instant::now();
    let mut s = session(now);
    // header: 4 fixed + 1 name len + 1 name byte = 6; payload fills the rest of 1,024.
    let at_limit = send("a", &[1; 1018]);
    assert_eq!(at_limit.encoded_len() - 6, 1024);
    s.handle_read(&at_limit.encode().unwrap(), now);
    assert!(matches!(events(&mut s).as_slice(), [Event::Dispatch(_)]));
}

#[test]
fn reserved_names_never_reach_a_handler() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_read(
        &bytes(&[
            send(PING, b""),
            send("zlink.Other", b""),
            request(1, PING),
            request(2, "zlink.Other"),
        ]),
        now,
    );
    assert!(events(&mut s).is_empty());
    assert_eq!(s.counters().reserved_send_drops, 1);
    let out = output(&mut s);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].kind, StreamKind::Response);
    assert_eq!(out[0].request_seq, Some(1));
    assert_eq!(error_kind(&out[1]), ErrorKind::UnknownPacket);
    assert_eq!(out[1].request_seq, Some(2));
    assert_eq!(s.pending_requests(), 0);
}

#[test]
fn a_client_reply_matches_a_server_request_and_an_unknown_one_is_counted() {
    let now = Instant::now();
    let mut s = session(now);
    let seq = s
        .request(
            StreamPacket::request(StreamCodec::Raw, 99, "ask", vec![]),
            now,
        )
        .unwrap();
    assert_eq!(seq, 1, "the server's own sequence, not the one passed in");
    let sent = output(&mut s);
    assert_eq!(sent[0].request_seq, Some(1));
    let answer = StreamPacket::response(StreamCodec::Raw, 1, b"yes".to_vec());
    let unknown = StreamPacket::error(StreamCodec::Raw, 42, vec![]);
    s.handle_read(&bytes(&[answer.clone(), unknown, answer.clone()]), now);
    assert_eq!(
        events(&mut s),
        [Event::ClientReplied {
            request_seq: 1,
            reply: ClientReply::Response(answer)
        }]
    );
    assert_eq!(s.counters().unknown_reply_drops, 2);
    assert!(!s.is_closed());
}

#[test]
fn requests_without_a_terminal_end_at_the_request_timeout() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_read(&bytes(&[request(4, "q")]), now);
    let server_seq = s
        .request(
            StreamPacket::request(StreamCodec::Raw, 1, "ask", vec![]),
            now,
        )
        .unwrap();
    events(&mut s);
    output(&mut s);
    let deadline = now + Duration::from_secs(10);
    assert_eq!(s.poll_timeout(), Some(deadline));
    s.handle_timeout(deadline - Duration::from_millis(1));
    assert!(output(&mut s).is_empty());
    s.handle_timeout(deadline);
    let out = output(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].request_seq, Some(4));
    assert_eq!(error_kind(&out[0]), ErrorKind::DeadlineExceeded);
    assert_eq!(
        events(&mut s),
        [Event::ServerRequestFailed {
            request_seq: server_seq,
            kind: ErrorKind::DeadlineExceeded
        }]
    );
    // The handler's late reply is dropped and counted.
    assert!(matches!(
        s.reply(
            4,
            Reply::Error(ErrorPayload::new(ErrorKind::Application, "late"))
        ),
        Err(ReplyError::NotPending { .. })
    ));
    assert_eq!(s.counters().request_deadlines, 1);
    assert_eq!(s.counters().late_replies, 1);
    assert_eq!(s.poll_timeout(), Some(now + Duration::from_secs(60)));
}

#[test]
fn a_reused_then_answered_sequence_keeps_only_its_own_deadline() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_read(&bytes(&[request(1, "q")]), now);
    s.reply(
        1,
        Reply::Response {
            codec: StreamCodec::Raw,
            payload: vec![],
        },
    )
    .unwrap();
    let later = now + Duration::from_secs(5);
    s.handle_read(&bytes(&[request(1, "q")]), later);
    output(&mut s);
    // The first deadline comes up; the second request is not due yet.
    s.handle_timeout(now + Duration::from_secs(10));
    assert!(output(&mut s).is_empty());
    assert_eq!(s.pending_requests(), 1);
    s.handle_timeout(later + Duration::from_secs(10));
    assert_eq!(error_kind(&output(&mut s)[0]), ErrorKind::DeadlineExceeded);
}

#[test]
fn reading_stops_at_the_pending_request_bound_and_resumes_after_a_reply() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_read(
        &bytes(&[request(1, "q"), request(2, "q"), request(3, "q")]),
        now,
    );
    assert!(s.wants_read());
    s.handle_read(&bytes(&[request(4, "q")]), now);
    assert!(!s.wants_read());
    s.reply(
        2,
        Reply::Response {
            codec: StreamCodec::Raw,
            payload: vec![],
        },
    )
    .unwrap();
    assert!(s.wants_read());
}

#[test]
fn output_beyond_the_bound_closes_as_slow_consumer_but_one_big_packet_is_allowed() {
    let now = Instant::now();
    let mut s = session(now);
    // One packet larger than the whole 4,096-byte bound goes out.
    s.send(send("big", &[0; 5000])).unwrap();
    let first = s.transmit().unwrap();
    // Still unwritten: another packet would overflow.
    assert_eq!(
        s.send(send("more", b"x")),
        Err(SendError::Closed(CloseReason::SlowConsumer))
    );
    assert_eq!(events(&mut s), [Event::Closed(CloseReason::SlowConsumer)]);
    assert!(s.transmit().is_none());
    drop(first);

    let mut s = session(now);
    for _ in 0..3 {
        s.send(send("m", &[0; 1000])).unwrap();
    }
    let b = s.transmit().unwrap();
    s.handle_written(b.len());
    assert_eq!(s.waiting_output(), 0, "written output no longer counts");
    for _ in 0..4 {
        s.send(send("m", &[0; 1000])).unwrap();
    }
    assert!(s.send(send("m", &[0; 1000])).is_err());
}

#[test]
fn silence_past_the_idle_timeout_closes_and_any_byte_resets_it() {
    let now = Instant::now();
    let mut s = session(now);
    let t1 = now + Duration::from_secs(50);
    s.handle_read(&bytes(&[send(PING, b"")]), t1);
    s.handle_timeout(now + Duration::from_secs(60));
    assert!(!s.is_closed());
    assert_eq!(s.poll_timeout(), Some(t1 + Duration::from_secs(60)));
    s.handle_timeout(t1 + Duration::from_secs(60));
    assert_eq!(s.close_reason(), Some(CloseReason::Idle));
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn drain_sends_go_away_and_closes_at_its_deadline_keeping_accepted_output() {
    let now = Instant::now();
    let mut s = session(now);
    s.handle_read(&bytes(&[request(1, "q")]), now);
    events(&mut s);
    let deadline = now + Duration::from_secs(2);
    s.drain(deadline);
    assert!(s.is_draining());
    s.reply(
        1,
        Reply::Response {
            codec: StreamCodec::Raw,
            payload: vec![],
        },
    )
    .unwrap();
    s.handle_timeout(deadline);
    assert_eq!(s.poll_event(), Some(Event::Closed(CloseReason::Draining)));
    let out = output(&mut s);
    assert_eq!(out[0].packet_name, GO_AWAY);
    assert_eq!(
        out[1].kind,
        StreamKind::Response,
        "accepted output is flushed"
    );
}

#[test]
fn close_ends_server_requests_as_connection_lost_then_reports_closed_once() {
    let now = Instant::now();
    let mut s = session(now);
    for _ in 0..2 {
        s.request(
            StreamPacket::request(StreamCodec::Raw, 1, "ask", vec![]),
            now,
        )
        .unwrap();
    }
    s.handle_read(&bytes(&[request(1, "q")]), now);
    events(&mut s);
    s.close(CloseReason::ServerClosed);
    s.handle_eof();
    s.close(CloseReason::Replaced);
    assert_eq!(
        events(&mut s),
        [
            Event::ServerRequestFailed {
                request_seq: 1,
                kind: ErrorKind::ConnectionLost
            },
            Event::ServerRequestFailed {
                request_seq: 2,
                kind: ErrorKind::ConnectionLost
            },
            Event::Closed(CloseReason::ServerClosed),
        ]
    );
    assert_eq!(
        s.reply(
            1,
            Reply::Response {
                codec: StreamCodec::Raw,
                payload: vec![]
            }
        ),
        Err(ReplyError::Closed(CloseReason::ServerClosed))
    );
    assert_eq!(
        s.send(send("x", b"")),
        Err(SendError::Closed(CloseReason::ServerClosed))
    );
}

#[test]
fn send_and_request_take_only_their_own_kind() {
    let now = Instant::now();
    let mut s = session(now);
    assert!(matches!(
        s.send(request(1, "q")),
        Err(SendError::WrongKind { call: "send", .. })
    ));
    assert!(matches!(
        s.request(send("a", b""), now),
        Err(SendError::WrongKind {
            call: "request",
            ..
        })
    ));
    assert!(matches!(
        s.send(StreamPacket::send(
            StreamCodec::Raw,
            "x".repeat(300),
            vec![]
        )),
        Err(SendError::Invalid(_))
    ));
    assert!(!s.is_closed());
}

#[test]
fn the_session_sequence_ends_at_i64_max_with_a_protocol_error() {
    let now = Instant::now();
    let mut s = session(now);
    s.set_last_sequence(i64::MAX as u64 - 1);
    s.handle_read(&bytes(&[send("a", b""), send("b", b"")]), now);
    let evs = events(&mut s);
    assert_eq!(evs.len(), 2);
    assert!(matches!(&evs[0], Event::Dispatch(i) if i.sequence() == i64::MAX as u64));
    assert_eq!(evs[1], Event::Closed(CloseReason::ProtocolError));
}

#[test]
fn server_request_sequences_skip_zero_and_ones_in_use() {
    let now = Instant::now();
    let mut s = session(now);
    s.next_server_seq = u64::MAX;
    let a = s
        .request(
            StreamPacket::request(StreamCodec::Raw, 1, "ask", vec![]),
            now,
        )
        .unwrap();
    let b = s
        .request(
            StreamPacket::request(StreamCodec::Raw, 1, "ask", vec![]),
            now,
        )
        .unwrap();
    assert_eq!((a, b), (u64::MAX, 1));
}

proptest! {
    /// However TCP splits the bytes, the same packets are dispatched in the same order.
    #[test]
    fn dispatch_does_not_depend_on_how_reads_split_the_stream(
        sizes in proptest::collection::vec(0usize..300, 1..12),
        cuts in proptest::collection::vec(1usize..64, 1..40),
    ) {
        let packets: Vec<StreamPacket> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| send(&format!("p{i}"), &vec![i as u8; n]))
            .collect();
        let input = bytes(&packets);
        let now = Instant::now();
        let mut s = session(now);
        let mut at = 0;
        let mut cut = cuts.iter().cycle();
        while at < input.len() {
            let n = (*cut.next().unwrap()).min(input.len() - at);
            s.handle_read(&input[at..at + n], now);
            prop_assert!(s.buffered_inbound() <= n + 6 + 1024);
            at += n;
        }
        let got: Vec<StreamPacket> = events(&mut s)
            .into_iter()
            .map(|e| match e {
                Event::Dispatch(Inbound::Send { packet, .. }) => packet,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        prop_assert_eq!(got, packets);
    }
}
