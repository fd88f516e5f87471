//! Fuzzes the pure STREAM session core (`zlink-session`, issue 19 acceptance 1).
//!
//! The input is a program: each step's first byte picks an operation — feed the next bytes as
//! one read, reply to a dispatched request, move the clock and run the timers, queue a server
//! send or request, write some output, drain, or hit EOF. After every step the invariants the
//! crate documents are checked:
//!
//! - every packet handed to a handler re-validates, is within `MaxMessageSize` and does not carry
//!   a reserved `zlink.` name;
//! - the decoder holds at most the last read plus one partial packet (`6 + limit`);
//! - `Closed` comes exactly once, last, and nothing (no event, no output after a non-flushing
//!   close) follows it;
//! - everything transmitted decodes as valid STREAM packets.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use zlink_protocol::stream::{MaxMessageSize, StreamCodec, StreamDecoder, StreamPacket};
use zlink_session::{
    ErrorKind, ErrorPayload, Event, Inbound, Reply, Session, SessionConfig, SessionId,
    RESERVED_PREFIX,
};

const LIMIT: u64 = 512;

struct Harness {
    session: Session,
    now: Instant,
    requests: Vec<u64>,
    closed: bool,
    output: StreamDecoder,
}

impl Harness {
    fn drain_events(&mut self) {
        while let Some(event) = self.session.poll_event() {
            assert!(!self.closed, "an event after Closed: {event:?}");
            match event {
                Event::Dispatch(inbound) => {
                    let packet = inbound.packet();
                    packet.validate().expect("a dispatched packet is valid");
                    assert!(packet.encoded_len() as u64 - 6 <= LIMIT, "oversized dispatch");
                    assert!(!packet.packet_name.starts_with(RESERVED_PREFIX));
                    if let Inbound::Request { request_seq, .. } = inbound {
                        self.requests.push(request_seq);
                    }
                }
                Event::ClientReplied { .. } | Event::ServerRequestFailed { .. } => {}
                Event::Closed(_) => self.closed = true,
            }
        }
        assert_eq!(self.closed, self.session.is_closed());
    }

    fn write(&mut self, fraction: u8) {
        if let Some(bytes) = self.session.transmit() {
            if let Some(reason) = self.session.close_reason() {
                assert!(reason.flushes_output(), "output after a {reason} close");
            }
            let n = bytes.len() * usize::from(fraction) / 255;
            self.session.handle_written(n);
            self.output.extend(&bytes);
            while let Some(_packet) = self.output.next_packet().expect("output decodes") {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let config = SessionConfig {
        max_message_size: MaxMessageSize::new(LIMIT as i64).expect("limit"),
        idle_timeout: Duration::from_millis(5_000),
        outbound_buffer_bytes: 2_048,
        request_timeout: Duration::from_millis(1_000),
        max_pending_requests: 8,
    };
    let start = Instant::now();
    let mut h = Harness {
        session: Session::new(SessionId::new(1).expect("non-zero"), config, start),
        now: start,
        requests: Vec::new(),
        closed: false,
        output: StreamDecoder::new(MaxMessageSize::UNLIMITED),
    };
    let mut input = data;
    while let Some((&op, rest)) = input.split_first() {
        input = rest;
        let arg = input.first().copied().unwrap_or(0);
        match op % 10 {
            0..=2 => {
                let n = usize::from(arg).min(input.len().saturating_sub(1));
                let read = &input[1.min(input.len())..1.min(input.len()) + n];
                h.session.handle_read(read, h.now);
                assert!(h.session.buffered_inbound() <= read.len() + 6 + LIMIT as usize);
                input = &input[(1 + n).min(input.len())..];
                h.drain_events();
                continue;
            }
            3 => {
                if !h.requests.is_empty() {
                    let seq = h.requests.remove(usize::from(arg) % h.requests.len());
                    let reply = if arg % 2 == 0 {
                        Reply::Response { codec: StreamCodec::Raw, payload: vec![arg; usize::from(arg)] }
                    } else {
                        Reply::Error(ErrorPayload::new(ErrorKind::Application, "no"))
                    };
                    let _ = h.session.reply(seq, reply);
                }
            }
            4 => {
                h.now += Duration::from_millis(u64::from(arg) * 50);
                h.session.handle_timeout(h.now);
            }
            5 => {
                let packet = StreamPacket::send(StreamCodec::Raw, "push", vec![0; usize::from(arg) * 8]);
                let _ = h.session.send(packet);
            }
            6 => {
                let packet = StreamPacket::request(StreamCodec::Raw, 1, "ask", vec![arg]);
                let _ = h.session.request(packet, h.now);
            }
            7 => h.write(arg),
            8 => h.session.drain(h.now + Duration::from_millis(u64::from(arg) * 10)),
            _ => h.session.handle_eof(),
        }
        input = input.get(1..).unwrap_or(&[]);
        h.drain_events();
        // An open session always has a deadline (at least its idle timeout); a closed one none.
        assert_eq!(h.session.poll_timeout().is_none(), h.closed);
    }
    h.write(255);
});
