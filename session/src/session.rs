//! One STREAM session: the state machine the shell drives.
//!
//! ```text
//!            drain(deadline)               deadline passed
//!   Open ─────────────────────► Draining ─────────────────► Closed(Draining)
//!    │                              │
//!    │ EOF · idle · bad bytes ·     │ (the same causes)
//!    │ reused seq · slow consumer · │
//!    │ close(reason)                │
//!    └──────────────► Closed(reason) ◄┘
//! ```
//!
//! Inputs are `handle_*`, `reply`, `send`, `request`, `drain` and `close`; outputs are
//! [`Session::poll_event`], [`Session::transmit`] and [`Session::poll_timeout`]. Nothing here
//! reads a clock: `now` is a parameter.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU64;
use std::time::Instant;

use thiserror::Error;
use zlink_protocol::ProtocolError;
use zlink_protocol::stream::{StreamCodec, StreamDecoder, StreamKind, StreamPacket};

use crate::config::SessionConfig;
use crate::reason::{CloseReason, ErrorKind, ErrorPayload};

/// Packet names starting with this are the framework's own; an application may not register
/// them (a startup error in the shell).
pub const RESERVED_PREFIX: &str = "zlink.";

/// The keepalive request (and send) a Stream Connector issues every 20 s **(ours)**. A Request
/// is answered with an empty Response by the core; a Send only counts as activity.
pub const PING: &str = "zlink.Ping";

/// The Send the server pushes when it starts draining (issue 19 item 2).
pub const GO_AWAY: &str = "zlink.GoAway";

/// A session's identity on its StreamNode: non-zero and never reused, so a reconnect is always
/// a new session (glossary §10 "STREAM session").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(NonZeroU64);

impl SessionId {
    /// `None` for 0.
    pub const fn new(value: u64) -> Option<Self> {
        match NonZeroU64::new(value) {
            Some(v) => Some(Self(v)),
            None => None,
        }
    }

    /// The value.
    pub const fn get(self) -> u64 {
        self.0.get()
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An accepted client packet for the application's handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// A one-way message.
    Send {
        /// Its session sequence.
        sequence: u64,
        /// The packet (kind Send).
        packet: StreamPacket,
    },
    /// A request: answer it with [`Session::reply`] and its `request_seq`.
    Request {
        /// Its session sequence.
        sequence: u64,
        /// The client's request sequence (the reply echoes it).
        request_seq: u64,
        /// The packet (kind Request).
        packet: StreamPacket,
    },
}

impl Inbound {
    /// The packet.
    pub fn packet(&self) -> &StreamPacket {
        match self {
            Self::Send { packet, .. } | Self::Request { packet, .. } => packet,
        }
    }

    /// Its session sequence.
    pub fn sequence(&self) -> u64 {
        match self {
            Self::Send { sequence, .. } | Self::Request { sequence, .. } => *sequence,
        }
    }
}

/// The client's answer to a server → client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientReply {
    /// A Response packet.
    Response(StreamPacket),
    /// An Error packet.
    Error(StreamPacket),
}

/// What the shell acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Hand this to the handler registered for its kind and packet name.
    Dispatch(Inbound),
    /// The client answered server request `request_seq`.
    ClientReplied {
        /// The server-side request sequence.
        request_seq: u64,
        /// The answer.
        reply: ClientReply,
    },
    /// Server request `request_seq` ended without an answer: `DeadlineExceeded` or
    /// `ConnectionLost`.
    ServerRequestFailed {
        /// The server-side request sequence.
        request_seq: u64,
        /// Why.
        kind: ErrorKind,
    },
    /// The session closed; always the last event, exactly once.
    Closed(CloseReason),
}

/// A handler's answer to a client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A Response with this payload.
    Response {
        /// Payload codec.
        codec: StreamCodec,
        /// Payload bytes.
        payload: Vec<u8>,
    },
    /// An Error with this payload (framework-json).
    Error(ErrorPayload),
}

/// A reply the session did not take.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplyError {
    /// The request already has its terminal (a reply or `DeadlineExceeded`), or never existed.
    #[error("request {request_seq} is not pending (already answered or timed out)")]
    NotPending {
        /// The request sequence.
        request_seq: u64,
    },
    /// The session is closed.
    #[error("session closed ({0})")]
    Closed(CloseReason),
    /// The reply does not encode (a payload over 4 GiB); the client got `HandlerFailed`
    /// instead, so the request still has its one terminal.
    #[error("reply does not encode: {0}")]
    Invalid(#[source] ProtocolError),
}

/// Server → client traffic the session did not take.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SendError {
    /// The session is closed (possibly by this very packet: `SlowConsumer`).
    #[error("session closed ({0})")]
    Closed(CloseReason),
    /// The packet does not encode.
    #[error("invalid STREAM packet: {0}")]
    Invalid(#[source] ProtocolError),
    /// `send` takes Send packets and `request` Request packets.
    #[error("{got:?} packet given to {call}")]
    WrongKind {
        /// The call.
        call: &'static str,
        /// The packet's kind.
        got: StreamKind,
    },
}

/// What one session counted (the shell adds them to the node's metrics at close).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounters {
    /// Packets decoded from the client.
    pub packets_in: u64,
    /// Packets queued for the client.
    pub packets_out: u64,
    /// Bytes read from the client.
    pub bytes_in: u64,
    /// Bytes the shell reported written.
    pub bytes_out: u64,
    /// Client Responses/Errors that matched no pending server request (dropped).
    pub unknown_reply_drops: u64,
    /// Client Sends with a reserved name other than [`PING`] (dropped).
    pub reserved_send_drops: u64,
    /// Handler replies that came after the request's terminal (dropped).
    pub late_replies: u64,
    /// Client requests answered `DeadlineExceeded`.
    pub request_deadlines: u64,
}

/// Why [`Session::queue`] did not take a packet.
#[derive(Debug)]
enum QueueError {
    Closed(CloseReason),
    Invalid(ProtocolError),
}

impl From<QueueError> for SendError {
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::Closed(reason) => Self::Closed(reason),
            QueueError::Invalid(e) => Self::Invalid(e),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Draining { deadline: Instant },
    Closed(CloseReason),
}

#[derive(Debug)]
struct Pending {
    correlation_id: Option<String>,
    deadline: Instant,
}

/// One client STREAM session (see the crate documentation for its guarantees).
#[derive(Debug)]
pub struct Session {
    id: SessionId,
    config: SessionConfig,
    state: State,
    decoder: StreamDecoder,
    /// The last session sequence given out (0 before the first).
    last_sequence: u64,
    /// Client requests without a terminal, by `request_seq`.
    pending: HashMap<u64, Pending>,
    /// `(deadline, request_seq)` in deadline order (a constant timeout keeps insertion order);
    /// entries whose request ended are skipped when they come up.
    pending_deadlines: VecDeque<(Instant, u64)>,
    /// Server → client requests without an answer: `request_seq` → deadline.
    server_requests: HashMap<u64, Instant>,
    server_deadlines: VecDeque<(Instant, u64)>,
    /// The next server request sequence to try (never 0).
    next_server_seq: u64,
    /// Encoded output not yet taken by [`transmit`](Self::transmit).
    out: Vec<u8>,
    /// Bytes taken by `transmit` and not yet reported written.
    writing: usize,
    idle_deadline: Instant,
    events: VecDeque<Event>,
    counters: SessionCounters,
}

impl Session {
    /// A session accepted at `now`.
    pub fn new(id: SessionId, config: SessionConfig, now: Instant) -> Self {
        Self {
            id,
            config,
            state: State::Open,
            decoder: StreamDecoder::new(config.max_message_size),
            last_sequence: 0,
            pending: HashMap::new(),
            pending_deadlines: VecDeque::new(),
            server_requests: HashMap::new(),
            server_deadlines: VecDeque::new(),
            next_server_seq: 1,
            out: Vec::new(),
            writing: 0,
            idle_deadline: now + config.idle_timeout,
            events: VecDeque::new(),
            counters: SessionCounters::default(),
        }
    }

    /// The session's identity.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The settings.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// What it counted so far.
    pub fn counters(&self) -> SessionCounters {
        self.counters
    }

    /// Why it closed, once closed.
    pub fn close_reason(&self) -> Option<CloseReason> {
        match self.state {
            State::Closed(reason) => Some(reason),
            State::Open | State::Draining { .. } => None,
        }
    }

    /// Whether it closed.
    pub fn is_closed(&self) -> bool {
        self.close_reason().is_some()
    }

    /// Whether it is draining (GoAway sent, still open).
    pub fn is_draining(&self) -> bool {
        matches!(self.state, State::Draining { .. })
    }

    /// Whether the shell should read more bytes: open, and fewer than
    /// `max_pending_requests` client requests await a reply.
    pub fn wants_read(&self) -> bool {
        !self.is_closed() && self.pending.len() < self.config.max_pending_requests
    }

    /// Client requests awaiting a reply.
    pub fn pending_requests(&self) -> usize {
        self.pending.len()
    }

    /// Inbound bytes held by the decoder (at most one read's unread tail plus one partial
    /// packet).
    pub fn buffered_inbound(&self) -> usize {
        self.decoder.buffered_len()
    }

    /// Output accepted and not yet reported written.
    pub fn waiting_output(&self) -> usize {
        self.out.len() + self.writing
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Take the output to write, if any. After a close that does not flush
    /// ([`CloseReason::flushes_output`]) there is none.
    pub fn transmit(&mut self) -> Option<Vec<u8>> {
        if self.out.is_empty() {
            return None;
        }
        let bytes = std::mem::take(&mut self.out);
        self.writing += bytes.len();
        Some(bytes)
    }

    /// `n` bytes taken by [`transmit`](Self::transmit) reached the socket.
    pub fn handle_written(&mut self, n: usize) {
        self.writing = self.writing.saturating_sub(n);
        self.counters.bytes_out += n as u64;
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work; `None` once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let drain = match self.state {
            State::Closed(_) => return None,
            State::Open => None,
            State::Draining { deadline } => Some(deadline),
        };
        [
            Some(self.idle_deadline),
            drain,
            self.pending_deadlines.front().map(|&(d, _)| d),
            self.server_deadlines.front().map(|&(d, _)| d),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Bytes read from the client at `now`.
    pub fn handle_read(&mut self, bytes: &[u8], now: Instant) {
        if self.is_closed() || bytes.is_empty() {
            return;
        }
        self.counters.bytes_in += bytes.len() as u64;
        self.idle_deadline = now + self.config.idle_timeout;
        self.decoder.extend(bytes);
        while !self.is_closed() {
            match self.decoder.next_packet() {
                Ok(Some(packet)) => self.accept(packet, now),
                Ok(None) => break,
                Err(ProtocolError::MessageTooLarge { .. }) => {
                    self.close(CloseReason::MessageTooLarge);
                }
                Err(_) => self.close(CloseReason::ProtocolError),
            }
        }
    }

    /// The client closed its side or the connection failed.
    pub fn handle_eof(&mut self) {
        self.close(CloseReason::ClientClosed);
    }

    /// Deadlines at `now`: idle, drain, client request and server request timeouts.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Closed(_) => return,
            State::Draining { deadline } if now >= deadline => {
                self.close(CloseReason::Draining);
                return;
            }
            State::Open | State::Draining { .. } => {}
        }
        if now >= self.idle_deadline {
            self.close(CloseReason::Idle);
            return;
        }
        while let Some(&(deadline, seq)) = self.pending_deadlines.front() {
            if deadline > now {
                break;
            }
            self.pending_deadlines.pop_front();
            if self
                .pending
                .get(&seq)
                .is_some_and(|p| p.deadline == deadline)
            {
                self.counters.request_deadlines += 1;
                let error = ErrorPayload::new(
                    ErrorKind::DeadlineExceeded,
                    format!(
                        "no reply within {} ms",
                        self.config.request_timeout.as_millis()
                    ),
                );
                if self.answer(seq, Reply::Error(error)).is_err() {
                    return;
                }
            }
        }
        while let Some(&(deadline, seq)) = self.server_deadlines.front() {
            if deadline > now {
                break;
            }
            self.server_deadlines.pop_front();
            if self.server_requests.get(&seq) == Some(&deadline) {
                self.server_requests.remove(&seq);
                self.events.push_back(Event::ServerRequestFailed {
                    request_seq: seq,
                    kind: ErrorKind::DeadlineExceeded,
                });
            }
        }
    }

    /// A handler's reply to client request `request_seq`.
    ///
    /// # Errors
    /// [`ReplyError::NotPending`] (counted as a late reply) or [`ReplyError::Closed`].
    pub fn reply(&mut self, request_seq: u64, reply: Reply) -> Result<(), ReplyError> {
        if let Some(reason) = self.close_reason() {
            return Err(ReplyError::Closed(reason));
        }
        if !self.pending.contains_key(&request_seq) {
            self.counters.late_replies += 1;
            return Err(ReplyError::NotPending { request_seq });
        }
        self.answer(request_seq, reply).map_err(|e| match e {
            QueueError::Closed(reason) => ReplyError::Closed(reason),
            QueueError::Invalid(e) => ReplyError::Invalid(e),
        })
    }

    /// Queue a server → client Send.
    ///
    /// # Errors
    /// [`SendError`]; `Closed(SlowConsumer)` when this packet overflowed the output bound.
    pub fn send(&mut self, packet: StreamPacket) -> Result<(), SendError> {
        if let Some(reason) = self.close_reason() {
            return Err(SendError::Closed(reason));
        }
        if packet.kind != StreamKind::Send {
            return Err(SendError::WrongKind {
                call: "send",
                got: packet.kind,
            });
        }
        self.queue(&packet).map_err(SendError::from)
    }

    /// Queue a server → client Request; its `request_seq` is assigned here (the server's own
    /// sequence space) and returned. Its answer comes as [`Event::ClientReplied`], or
    /// [`Event::ServerRequestFailed`] at `request_timeout` or at close.
    ///
    /// # Errors
    /// [`SendError`].
    pub fn request(&mut self, mut packet: StreamPacket, now: Instant) -> Result<u64, SendError> {
        if let Some(reason) = self.close_reason() {
            return Err(SendError::Closed(reason));
        }
        if packet.kind != StreamKind::Request {
            return Err(SendError::WrongKind {
                call: "request",
                got: packet.kind,
            });
        }
        let seq = self.next_server_request_seq();
        packet.request_seq = Some(seq);
        self.queue(&packet).map_err(SendError::from)?;
        let deadline = now + self.config.request_timeout;
        self.server_requests.insert(seq, deadline);
        self.server_deadlines.push_back((deadline, seq));
        Ok(seq)
    }

    /// Start draining: push [`GO_AWAY`] and close as `Draining` at `deadline` if the client is
    /// still there. A no-op unless open.
    pub fn drain(&mut self, deadline: Instant) {
        if self.state != State::Open {
            return;
        }
        self.state = State::Draining { deadline };
        let go_away = StreamPacket::send(StreamCodec::FrameworkJson, GO_AWAY, b"{}".to_vec());
        // A failure here closed the session (SlowConsumer), which is the right outcome.
        let _ = self.queue(&go_away);
    }

    /// Close with `reason` (a no-op once closed). Pending client requests lose their reply
    /// route; server requests end `ConnectionLost`; output is dropped unless the reason
    /// flushes it.
    pub fn close(&mut self, reason: CloseReason) {
        if self.is_closed() {
            return;
        }
        self.state = State::Closed(reason);
        if !reason.flushes_output() {
            self.out = Vec::new();
        }
        self.decoder = StreamDecoder::new(self.config.max_message_size);
        self.pending.clear();
        self.pending_deadlines.clear();
        self.server_deadlines.clear();
        let mut lost: Vec<u64> = self.server_requests.drain().map(|(seq, _)| seq).collect();
        lost.sort_unstable();
        for request_seq in lost {
            self.events.push_back(Event::ServerRequestFailed {
                request_seq,
                kind: ErrorKind::ConnectionLost,
            });
        }
        self.events.push_back(Event::Closed(reason));
    }

    fn accept(&mut self, packet: StreamPacket, now: Instant) {
        self.counters.packets_in += 1;
        let reserved = packet.packet_name.starts_with(RESERVED_PREFIX);
        match packet.kind {
            StreamKind::Send => {
                if reserved {
                    if packet.packet_name != PING {
                        self.counters.reserved_send_drops += 1;
                    }
                    return;
                }
                if let Some(sequence) = self.next_sequence() {
                    self.events
                        .push_back(Event::Dispatch(Inbound::Send { sequence, packet }));
                }
            }
            StreamKind::Request => {
                let Some(request_seq) = packet.request_seq else {
                    // The decoder guarantees a Request carries one.
                    self.close(CloseReason::ProtocolError);
                    return;
                };
                if self.pending.contains_key(&request_seq) {
                    self.close(CloseReason::ProtocolError);
                    return;
                }
                let deadline = now + self.config.request_timeout;
                self.pending.insert(
                    request_seq,
                    Pending {
                        correlation_id: packet.correlation_id.clone(),
                        deadline,
                    },
                );
                if reserved {
                    let reply = if packet.packet_name == PING {
                        Reply::Response {
                            codec: StreamCodec::Raw,
                            payload: Vec::new(),
                        }
                    } else {
                        Reply::Error(ErrorPayload::new(
                            ErrorKind::UnknownPacket,
                            format!("{:?} is reserved", packet.packet_name),
                        ))
                    };
                    let _ = self.answer(request_seq, reply);
                    return;
                }
                let Some(sequence) = self.next_sequence() else {
                    return;
                };
                self.pending_deadlines.push_back((deadline, request_seq));
                self.events.push_back(Event::Dispatch(Inbound::Request {
                    sequence,
                    request_seq,
                    packet,
                }));
            }
            StreamKind::Response | StreamKind::Error => {
                let Some(request_seq) = packet.request_seq else {
                    self.close(CloseReason::ProtocolError);
                    return;
                };
                if self.server_requests.remove(&request_seq).is_none() {
                    self.counters.unknown_reply_drops += 1;
                    return;
                }
                let reply = match packet.kind {
                    StreamKind::Response => ClientReply::Response(packet),
                    StreamKind::Error => ClientReply::Error(packet),
                    StreamKind::Send | StreamKind::Request => return,
                };
                self.events
                    .push_back(Event::ClientReplied { request_seq, reply });
            }
        }
    }

    /// The next session sequence, or a `ProtocolError` close past `i64::MAX`.
    fn next_sequence(&mut self) -> Option<u64> {
        if self.last_sequence >= i64::MAX as u64 {
            self.close(CloseReason::ProtocolError);
            return None;
        }
        self.last_sequence += 1;
        Some(self.last_sequence)
    }

    fn next_server_request_seq(&mut self) -> u64 {
        // At most `server_requests.len()` values are taken, so this ends.
        loop {
            let seq = self.next_server_seq;
            self.next_server_seq = self.next_server_seq.checked_add(1).unwrap_or(1);
            if !self.server_requests.contains_key(&seq) {
                return seq;
            }
        }
    }

    /// Send the terminal of pending request `request_seq`.
    fn answer(&mut self, request_seq: u64, reply: Reply) -> Result<(), QueueError> {
        let Some(pending) = self.pending.remove(&request_seq) else {
            return Ok(());
        };
        let packet = match reply {
            Reply::Response { codec, payload } => {
                StreamPacket::response(codec, request_seq, payload)
            }
            Reply::Error(error) => {
                StreamPacket::error(StreamCodec::FrameworkJson, request_seq, error.to_json())
            }
        };
        let echo = |packet: StreamPacket| match &pending.correlation_id {
            Some(c) => packet.with_correlation_id(c.clone()),
            None => packet,
        };
        match self.queue(&echo(packet)) {
            Err(QueueError::Invalid(e)) => {
                let error = ErrorPayload::new(ErrorKind::HandlerFailed, "reply does not encode");
                let fallback =
                    StreamPacket::error(StreamCodec::FrameworkJson, request_seq, error.to_json());
                self.queue(&echo(fallback))?;
                Err(QueueError::Invalid(e))
            }
            other => other,
        }
    }

    /// Encode `packet` onto the output, or close `SlowConsumer` if output already waiting
    /// plus this packet exceeds the bound (a packet alone is never too big).
    fn queue(&mut self, packet: &StreamPacket) -> Result<(), QueueError> {
        let bytes = packet.encode().map_err(QueueError::Invalid)?;
        let waiting = self.waiting_output();
        if waiting > 0 && waiting + bytes.len() > self.config.outbound_buffer_bytes {
            self.close(CloseReason::SlowConsumer);
            return Err(QueueError::Closed(CloseReason::SlowConsumer));
        }
        if self.out.is_empty() {
            self.out = bytes;
        } else {
            self.out.extend_from_slice(&bytes);
        }
        self.counters.packets_out += 1;
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn set_last_sequence(&mut self, value: u64) {
        self.last_sequence = value;
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
