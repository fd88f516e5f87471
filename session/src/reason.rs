//! Why a session closed, and the error replies it sends.

use serde::{Deserialize, Serialize};

/// Why a session closed (issue 19 item 2; a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CloseReason {
    /// The client closed its side (EOF) or the connection broke.
    ClientClosed,
    /// No inbound byte within `idle_timeout`.
    Idle,
    /// Malformed STREAM bytes, a reused pending request sequence, or an exhausted session
    /// sequence.
    ProtocolError,
    /// A packet's prefix announced more than `MaxMessageSize` (logged as `EMSGSIZE`).
    MessageTooLarge,
    /// The client did not read its output: more than `outbound_buffer_bytes` waited.
    SlowConsumer,
    /// A newer session took over this session's binding (`on_binding_replaced`).
    Replaced,
    /// No `sessionRelocationRoute` (44) within `SessionRelocationSealTimeout`.
    SealTimeout,
    /// The StreamNode is draining and the drain deadline passed with the session still open.
    Draining,
    /// The server closed the session (application request or shutdown).
    ServerClosed,
    /// **(ours)** The application's authenticator refused the session's first packet
    /// (issue 19 item 10); the refusal is answered before the close.
    Unauthenticated,
}

impl CloseReason {
    /// Every reason, in declaration order (metrics label every one).
    pub const ALL: [Self; 10] = [
        Self::ClientClosed,
        Self::Idle,
        Self::ProtocolError,
        Self::MessageTooLarge,
        Self::SlowConsumer,
        Self::Replaced,
        Self::SealTimeout,
        Self::Draining,
        Self::ServerClosed,
        Self::Unauthenticated,
    ];

    /// The metric label and log name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ClientClosed => "ClientClosed",
            Self::Idle => "Idle",
            Self::ProtocolError => "ProtocolError",
            Self::MessageTooLarge => "MessageTooLarge",
            Self::SlowConsumer => "SlowConsumer",
            Self::Replaced => "Replaced",
            Self::SealTimeout => "SealTimeout",
            Self::Draining => "Draining",
            Self::ServerClosed => "ServerClosed",
            Self::Unauthenticated => "Unauthenticated",
        }
    }

    /// Whether output already accepted is still written before the connection closes.
    ///
    /// **(ours)** A session closed for bad input sends nothing more (the client only observes
    /// the close, glossary §6 "MaxMessageSize"); a slow consumer's output is what overflowed, so
    /// it is dropped too. Every other close first flushes what was accepted (for example the
    /// replies before a `Draining` close), within the shell's bounded flush time.
    pub const fn flushes_output(self) -> bool {
        match self {
            Self::ProtocolError | Self::MessageTooLarge | Self::SlowConsumer => false,
            Self::ClientClosed
            | Self::Idle
            | Self::Replaced
            | Self::SealTimeout
            | Self::Draining
            | Self::ServerClosed
            | Self::Unauthenticated => true,
        }
    }
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of an Error reply (the `kind` of [`ErrorPayload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The handler ended (returned, failed or panicked) without replying.
    HandlerFailed,
    /// No terminal within the deadline.
    DeadlineExceeded,
    /// No handler is registered for this packet name (or the name is reserved).
    UnknownPacket,
    /// The target cannot take the work now.
    Unavailable,
    /// The server is shutting down.
    ShuttingDown,
    /// The route's fences are no longer current.
    StaleRoute,
    /// The operation does not apply to the current incarnation.
    InvalidOperation,
    /// The addressed object does not exist.
    NotFound,
    /// The session closed before the terminal (server → client requests only; never sent).
    ConnectionLost,
    /// The application's own refusal; `detail` says why.
    Application,
}

/// An Error packet's payload: `{"kind": …, "detail": …}` as framework-json **(ours)**.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorPayload {
    /// What failed.
    pub kind: ErrorKind,
    /// Human-readable detail; never a secret.
    pub detail: String,
}

impl ErrorPayload {
    /// An error of `kind` with `detail`.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
        }
    }

    /// The framework-json bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // A struct of an enum and a string always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parse framework-json bytes (a client reading an Error packet).
    ///
    /// # Errors
    /// serde's error for anything but `{kind, detail}`.
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}
