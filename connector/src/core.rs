//! The client end of one STREAM session: the state machine the connector's task drives.
//!
//! ```text
//!            EOF · bad bytes · packet over the inbound limit ·
//!            ping unanswered · close(reason)
//!   Open ─────────────────────────────────────────────────────► Closed(reason)
//! ```
//!
//! Like the server's `zlink_session::Session`, it reads no clock and does no I/O: inputs are
//! `handle_read(bytes, now)`, `handle_eof`, `handle_timeout(now)`, `send`, `request`, `reply`
//! and `close`; outputs are [`ClientSession::poll_event`], [`ClientSession::transmit`] and
//! [`ClientSession::poll_timeout`].
//!
//! One session is one TCP connection. A reconnect is a new `ClientSession`: nothing pending on
//! the old one is carried over (its requests end [`RequestFailure::ConnectionLost`]).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;
use zlink_protocol::ProtocolError;
use zlink_protocol::stream::{
    MaxMessageSize, StreamCodec, StreamDecoder, StreamKind, StreamPacket,
};
use zlink_session::{ErrorKind, ErrorPayload, GO_AWAY, PING, RESERVED_PREFIX};

/// The settings of one client session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreConfig {
    /// Inbound packet limit (**(ours)** 16 MiB for the connector: outbound from the server has
    /// no Framework limit, so the client's own bound keeps a broken server from exhausting it).
    pub max_inbound_message_size: MaxMessageSize,
    /// Send `zlink.Ping` this often (**(ours)** 20 s; the server closes a session silent for its
    /// `idle_timeout`, 60 s by default). `None` never pings.
    pub ping_interval: Option<Duration>,
    /// A ping unanswered this long closes the session ([`DisconnectReason::PingTimeout`]).
    pub ping_timeout: Duration,
}

/// Why a session ended (reported as `ConnectorEvent::Disconnected`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisconnectReason {
    /// The server closed the connection (EOF) without announcing a drain.
    ServerClosed,
    /// The server announced `zlink.GoAway` (it is draining) and then closed.
    GoAway,
    /// The server sent bytes that are not valid STREAM packets.
    ProtocolError,
    /// The server sent a packet over the connector's inbound limit.
    MessageTooLarge,
    /// A `zlink.Ping` got no answer within `ping_timeout`.
    PingTimeout,
    /// Reading or writing the socket failed.
    Io(std::io::ErrorKind),
    /// The application closed the connector.
    ClientClosed,
}

impl std::fmt::Display for DisconnectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ServerClosed => f.write_str("server closed the connection"),
            Self::GoAway => f.write_str("server is draining (zlink.GoAway)"),
            Self::ProtocolError => f.write_str("server sent malformed STREAM bytes"),
            Self::MessageTooLarge => f.write_str("server sent a packet over the inbound limit"),
            Self::PingTimeout => f.write_str("keepalive ping unanswered"),
            Self::Io(kind) => write!(f, "socket error: {kind}"),
            Self::ClientClosed => f.write_str("closed by the application"),
        }
    }
}

/// Why a client request ended without the server's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFailure {
    /// No answer within the request's timeout. A late answer is dropped and counted.
    TimedOut,
    /// The session closed first. The request is not resent on the next session.
    ConnectionLost,
}

/// What the shell acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreEvent {
    /// A server Send for the application (waiter, handler or counted drop).
    Push(StreamPacket),
    /// A server → client Request: answer it with [`ClientSession::reply`].
    ServerRequest {
        /// The server's request sequence.
        request_seq: u64,
        /// The packet (kind Request).
        packet: StreamPacket,
    },
    /// The server answered client request `request_seq` (a Response or an Error packet).
    Replied {
        /// The client's request sequence.
        request_seq: u64,
        /// The Response or Error packet.
        packet: StreamPacket,
    },
    /// Client request `request_seq` ended without an answer.
    RequestFailed {
        /// The client's request sequence.
        request_seq: u64,
        /// Why.
        failure: RequestFailure,
    },
    /// The server announced a drain; the session closes as [`DisconnectReason::GoAway`] when
    /// the server closes it.
    GoAway,
    /// The session closed; always the last event, exactly once.
    Closed(DisconnectReason),
}

/// The application's answer to a server → client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAnswer {
    /// A Response with this payload.
    Response {
        /// Payload codec.
        codec: StreamCodec,
        /// Payload bytes.
        payload: Vec<u8>,
    },
    /// An Error `{kind, detail}`.
    Error(ErrorPayload),
}

/// What the session refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoreError {
    /// The session closed.
    #[error("session closed ({0})")]
    Closed(DisconnectReason),
    /// Names starting `zlink.` are the framework's own.
    #[error("packet name {0:?} is reserved (zlink.)")]
    ReservedName(String),
    /// `send` takes Send packets, `request` Request packets.
    #[error("{got:?} packet given to {call}")]
    WrongKind {
        /// The call.
        call: &'static str,
        /// The packet's kind.
        got: StreamKind,
    },
    /// The packet does not encode.
    #[error("invalid STREAM packet: {0}")]
    Invalid(#[source] ProtocolError),
    /// The server request already has its answer, or never existed.
    #[error("server request {0} is not pending")]
    NotPending(u64),
}

/// What one session counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreCounters {
    /// Packets decoded from the server.
    pub packets_in: u64,
    /// Packets queued for the server (pings included).
    pub packets_out: u64,
    /// Bytes read from the server.
    pub bytes_in: u64,
    /// Bytes the shell reported written.
    pub bytes_out: u64,
    /// Responses/Errors matching no pending request (late after a timeout, or bogus): dropped.
    pub unknown_reply_drops: u64,
    /// Server Sends with a reserved name other than `zlink.GoAway`: dropped.
    pub reserved_send_drops: u64,
    /// Pings sent.
    pub pings: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Closed(DisconnectReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ping {
    /// No ping in flight; the next is due then (`None`: pings off).
    Idle { due: Option<Instant> },
    /// Ping `request_seq`, sent at `sent`, awaits its answer until `deadline`.
    InFlight {
        request_seq: u64,
        sent: Instant,
        deadline: Instant,
    },
}

/// The client end of one STREAM session.
#[derive(Debug)]
pub struct ClientSession {
    config: CoreConfig,
    state: State,
    decoder: StreamDecoder,
    /// The next request sequence to try (never 0).
    next_seq: u64,
    /// Client requests without an answer: `request_seq` → deadline.
    pending: HashMap<u64, Instant>,
    /// `(deadline, request_seq)`: requests carry their own timeouts, so a sorted set.
    deadlines: BTreeSet<(Instant, u64)>,
    /// Server → client requests the application has not answered.
    server_pending: HashSet<u64>,
    ping: Ping,
    going_away: bool,
    out: Vec<u8>,
    writing: usize,
    events: VecDeque<CoreEvent>,
    counters: CoreCounters,
}

impl ClientSession {
    /// A session whose connection was established at `now`.
    pub fn new(config: CoreConfig, now: Instant) -> Self {
        Self {
            config,
            state: State::Open,
            decoder: StreamDecoder::new(config.max_inbound_message_size),
            next_seq: 1,
            pending: HashMap::new(),
            deadlines: BTreeSet::new(),
            server_pending: HashSet::new(),
            ping: Ping::Idle {
                due: config.ping_interval.map(|i| now + i),
            },
            going_away: false,
            out: Vec::new(),
            writing: 0,
            events: VecDeque::new(),
            counters: CoreCounters::default(),
        }
    }

    /// Why it closed, once closed.
    pub fn close_reason(&self) -> Option<DisconnectReason> {
        match self.state {
            State::Open => None,
            State::Closed(reason) => Some(reason),
        }
    }

    /// Whether it closed.
    pub fn is_closed(&self) -> bool {
        self.close_reason().is_some()
    }

    /// Whether the server announced a drain.
    pub fn is_going_away(&self) -> bool {
        self.going_away
    }

    /// What it counted so far.
    pub fn counters(&self) -> CoreCounters {
        self.counters
    }

    /// Client requests awaiting an answer (the ping excluded).
    pub fn pending_requests(&self) -> usize {
        self.pending.len()
    }

    /// Output accepted and not yet reported written.
    pub fn waiting_output(&self) -> usize {
        self.out.len() + self.writing
    }

    /// Inbound bytes held by the decoder.
    pub fn buffered_inbound(&self) -> usize {
        self.decoder.buffered_len()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<CoreEvent> {
        self.events.pop_front()
    }

    /// Take the output to write, if any (queued output is still written after a close, so the
    /// last packets the application sent before `close` reach the server).
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
        if self.is_closed() {
            return None;
        }
        let ping = match self.ping {
            Ping::Idle { due } => due,
            Ping::InFlight { deadline, .. } => Some(deadline),
        };
        [ping, self.deadlines.first().map(|&(d, _)| d)]
            .into_iter()
            .flatten()
            .min()
    }

    /// Bytes read from the server.
    pub fn handle_read(&mut self, bytes: &[u8]) {
        if self.is_closed() || bytes.is_empty() {
            return;
        }
        self.counters.bytes_in += bytes.len() as u64;
        self.decoder.extend(bytes);
        while !self.is_closed() {
            match self.decoder.next_packet() {
                Ok(Some(packet)) => self.accept(packet),
                Ok(None) => break,
                Err(ProtocolError::MessageTooLarge { .. }) => {
                    self.close(DisconnectReason::MessageTooLarge);
                }
                Err(_) => self.close(DisconnectReason::ProtocolError),
            }
        }
    }

    /// The server closed its side.
    pub fn handle_eof(&mut self) {
        let reason = if self.going_away {
            DisconnectReason::GoAway
        } else {
            DisconnectReason::ServerClosed
        };
        self.close(reason);
    }

    /// Deadlines at `now`: request timeouts, the ping schedule and its answer.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.is_closed() {
            return;
        }
        while let Some(&(deadline, request_seq)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if self.pending.remove(&request_seq).is_some() {
                self.events.push_back(CoreEvent::RequestFailed {
                    request_seq,
                    failure: RequestFailure::TimedOut,
                });
            }
        }
        match self.ping {
            Ping::Idle { due: Some(due) } if now >= due => {
                let request_seq = self.next_request_seq();
                let ping = StreamPacket::request(StreamCodec::Raw, request_seq, PING, Vec::new());
                // A ping always encodes; a failure could only be a closed session.
                if self.queue(&ping).is_ok() {
                    self.counters.pings += 1;
                    self.ping = Ping::InFlight {
                        request_seq,
                        sent: now,
                        deadline: now + self.config.ping_timeout,
                    };
                }
            }
            Ping::InFlight { deadline, .. } if now >= deadline => {
                self.close(DisconnectReason::PingTimeout);
            }
            Ping::Idle { .. } | Ping::InFlight { .. } => {}
        }
    }

    /// Queue a Send.
    ///
    /// # Errors
    /// [`CoreError`]: closed, reserved name, wrong kind, or a packet that does not encode.
    pub fn send(&mut self, packet: &StreamPacket) -> Result<(), CoreError> {
        self.check_outgoing("send", StreamKind::Send, packet)?;
        self.queue(packet)
    }

    /// Queue a Request; its `request_seq` is assigned here and returned. It ends with
    /// [`CoreEvent::Replied`], or [`CoreEvent::RequestFailed`] at `now + timeout` or at close.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn request(
        &mut self,
        mut packet: StreamPacket,
        timeout: Duration,
        now: Instant,
    ) -> Result<u64, CoreError> {
        self.check_outgoing("request", StreamKind::Request, &packet)?;
        let request_seq = self.next_request_seq();
        packet.request_seq = Some(request_seq);
        self.queue(&packet)?;
        let deadline = now + timeout;
        self.pending.insert(request_seq, deadline);
        self.deadlines.insert((deadline, request_seq));
        Ok(request_seq)
    }

    /// The application's answer to server request `request_seq`.
    ///
    /// # Errors
    /// [`CoreError::Closed`], [`CoreError::NotPending`], or [`CoreError::Invalid`] (the
    /// server then gets `HandlerFailed`, so its request still ends once).
    pub fn reply(&mut self, request_seq: u64, answer: ClientAnswer) -> Result<(), CoreError> {
        if let Some(reason) = self.close_reason() {
            return Err(CoreError::Closed(reason));
        }
        if !self.server_pending.remove(&request_seq) {
            return Err(CoreError::NotPending(request_seq));
        }
        let packet = answer_packet(request_seq, answer);
        match self.queue(&packet) {
            Err(CoreError::Invalid(e)) => {
                let error = ErrorPayload::new(ErrorKind::HandlerFailed, "reply does not encode");
                self.queue(&answer_packet(request_seq, ClientAnswer::Error(error)))?;
                Err(CoreError::Invalid(e))
            }
            other => other,
        }
    }

    /// Close with `reason` (a no-op once closed): pending requests end `ConnectionLost`.
    pub fn close(&mut self, reason: DisconnectReason) {
        if self.is_closed() {
            return;
        }
        self.state = State::Closed(reason);
        if !matches!(reason, DisconnectReason::ClientClosed) {
            // The peer is gone or broken: nothing more can be written.
            self.out = Vec::new();
        }
        self.decoder = StreamDecoder::new(self.config.max_inbound_message_size);
        self.deadlines.clear();
        self.server_pending.clear();
        let mut lost: Vec<u64> = self.pending.drain().map(|(seq, _)| seq).collect();
        lost.sort_unstable();
        for request_seq in lost {
            self.events.push_back(CoreEvent::RequestFailed {
                request_seq,
                failure: RequestFailure::ConnectionLost,
            });
        }
        self.events.push_back(CoreEvent::Closed(reason));
    }

    fn check_outgoing(
        &self,
        call: &'static str,
        kind: StreamKind,
        packet: &StreamPacket,
    ) -> Result<(), CoreError> {
        if let Some(reason) = self.close_reason() {
            return Err(CoreError::Closed(reason));
        }
        if packet.kind != kind {
            return Err(CoreError::WrongKind {
                call,
                got: packet.kind,
            });
        }
        if packet.packet_name.starts_with(RESERVED_PREFIX) {
            return Err(CoreError::ReservedName(packet.packet_name.clone()));
        }
        Ok(())
    }

    fn accept(&mut self, packet: StreamPacket) {
        self.counters.packets_in += 1;
        let reserved = packet.packet_name.starts_with(RESERVED_PREFIX);
        match packet.kind {
            StreamKind::Send => {
                if !reserved {
                    self.events.push_back(CoreEvent::Push(packet));
                } else if packet.packet_name == GO_AWAY {
                    if !self.going_away {
                        self.going_away = true;
                        self.events.push_back(CoreEvent::GoAway);
                    }
                } else {
                    self.counters.reserved_send_drops += 1;
                }
            }
            StreamKind::Request => {
                let Some(request_seq) = packet.request_seq else {
                    self.close(DisconnectReason::ProtocolError);
                    return;
                };
                if self.server_pending.contains(&request_seq) {
                    // The server reused a sequence it has not seen answered.
                    self.close(DisconnectReason::ProtocolError);
                    return;
                }
                if reserved {
                    let answer = if packet.packet_name == PING {
                        ClientAnswer::Response {
                            codec: StreamCodec::Raw,
                            payload: Vec::new(),
                        }
                    } else {
                        ClientAnswer::Error(ErrorPayload::new(
                            ErrorKind::UnknownPacket,
                            format!("{:?} is reserved", packet.packet_name),
                        ))
                    };
                    let _ = self.queue(&answer_packet(request_seq, answer));
                    return;
                }
                self.server_pending.insert(request_seq);
                self.events.push_back(CoreEvent::ServerRequest {
                    request_seq,
                    packet,
                });
            }
            StreamKind::Response | StreamKind::Error => {
                let Some(request_seq) = packet.request_seq else {
                    self.close(DisconnectReason::ProtocolError);
                    return;
                };
                if let Ping::InFlight {
                    request_seq: ping,
                    sent,
                    ..
                } = self.ping
                    && ping == request_seq
                {
                    // The next ping is due an interval after this one was sent.
                    self.ping = Ping::Idle {
                        due: self.config.ping_interval.map(|i| sent + i),
                    };
                    return;
                }
                let Some(deadline) = self.pending.remove(&request_seq) else {
                    self.counters.unknown_reply_drops += 1;
                    return;
                };
                self.deadlines.remove(&(deadline, request_seq));
                self.events.push_back(CoreEvent::Replied {
                    request_seq,
                    packet,
                });
            }
        }
    }

    fn next_request_seq(&mut self) -> u64 {
        // At most `pending.len() + 1` values are taken, so this ends.
        loop {
            let seq = self.next_seq;
            self.next_seq = self.next_seq.checked_add(1).unwrap_or(1);
            let ping_seq = match self.ping {
                Ping::InFlight { request_seq, .. } => Some(request_seq),
                Ping::Idle { .. } => None,
            };
            if !self.pending.contains_key(&seq) && ping_seq != Some(seq) {
                return seq;
            }
        }
    }

    fn queue(&mut self, packet: &StreamPacket) -> Result<(), CoreError> {
        if let Some(reason) = self.close_reason() {
            return Err(CoreError::Closed(reason));
        }
        let bytes = packet.encode().map_err(CoreError::Invalid)?;
        if self.out.is_empty() {
            self.out = bytes;
        } else {
            self.out.extend_from_slice(&bytes);
        }
        self.counters.packets_out += 1;
        Ok(())
    }
}

fn answer_packet(request_seq: u64, answer: ClientAnswer) -> StreamPacket {
    match answer {
        ClientAnswer::Response { codec, payload } => {
            StreamPacket::response(codec, request_seq, payload)
        }
        ClientAnswer::Error(error) => {
            StreamPacket::error(StreamCodec::FrameworkJson, request_seq, error.to_json())
        }
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
