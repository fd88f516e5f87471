//! # zlink-session
//!
//! The pure core of one client STREAM session (glossary §10 "STREAM session", §11 "Stream
//! packet"; wire §3). A game client holds one TCP connection to a StreamNode; this crate decides
//! everything that happens on it, and the runtime's `session` module is the thin tokio shell
//! that moves bytes and runs handlers.
//!
//! Like `quinn-proto`, the core has no sockets and no clock: the shell feeds it
//! [`Session::handle_read`] (bytes as they arrived), [`Session::reply`] (a handler's answer),
//! [`Session::send`] / [`Session::request`] (server → client traffic) and
//! [`Session::handle_timeout`] with `now`; it drains [`Session::poll_event`] (packets to
//! dispatch, client replies, the close) and [`Session::transmit`] (bytes to write). So every
//! rule below is tested by tables and fuzzed (`protocol/fuzz`, target `stream_session`) without
//! a network.
//!
//! ## What the core guarantees
//!
//! - **No bad packet reaches a handler.** A packet over `MaxMessageSize` closes the session
//!   with [`CloseReason::MessageTooLarge`] before any of its header or payload is buffered;
//!   malformed bytes close it with [`CloseReason::ProtocolError`]. Either way nothing more is
//!   sent (unsent output is discarded) and no event for that packet or any later byte is
//!   produced.
//! - **Bounded inbound memory**: the decoder holds at most the unread tail of one read plus
//!   one partial packet (`6 + MaxMessageSize` bytes); at [`SessionConfig::max_pending_requests`]
//!   unanswered requests [`Session::wants_read`] turns false and the shell stops reading.
//! - **Bounded outbound memory**: output the client does not read beyond
//!   [`SessionConfig::outbound_buffer_bytes`] closes the session with
//!   [`CloseReason::SlowConsumer`]. A single packet is never refused for its size (outbound
//!   has no `MaxMessageSize`).
//! - **One terminal per request**: every client Request gets exactly one Response or Error —
//!   the handler's, [`ErrorKind::DeadlineExceeded`] at `request_timeout`, or
//!   [`ErrorKind::HandlerFailed`] when the shell reports the handler dropped its reply — and a
//!   request sequence still pending may not be reused (reuse closes with `ProtocolError`).
//!   Server → client requests have their own sequence space and end once: the client's reply,
//!   `DeadlineExceeded`, or `ConnectionLost` at close.
//! - **Session sequence**: each accepted Send or Request gets the next value in
//!   `1..=i64::MAX` (glossary §10 "Session sequence"); it stays local and is never sent.
//!
//! Choices the spec leaves open are marked **(ours)** in the item docs and collected in
//! `docs/architecture.md`, "Sessions".

mod config;
mod reason;
mod session;

pub use config::{SessionConfig, SessionConfigError};
pub use reason::{CloseReason, ErrorKind, ErrorPayload};
pub use session::{
    ClientReply, Event, GO_AWAY, Inbound, PING, RESERVED_PREFIX, Reply, ReplyError, SendError,
    Session, SessionCounters, SessionId,
};
