//! The connector's errors, one type per call.

use std::time::Duration;

use thiserror::Error;
use zlink_protocol::ProtocolError;
use zlink_session::ErrorPayload;

/// Why [`ConnectorBuilder::connect`](crate::ConnectorBuilder::connect) failed. Reconnects report
/// failures as events instead.
#[derive(Debug, Error)]
pub enum ConnectError {
    /// A setting cannot work.
    #[error("connector config: {0}")]
    Config(String),
    /// The address did not resolve.
    #[error("cannot resolve {addr}: {source}")]
    Resolve {
        /// The configured address.
        addr: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
    /// No connection within `connect_timeout`.
    #[error("no connection to {addr} within {} ms", after.as_millis())]
    Timeout {
        /// The configured address.
        addr: String,
        /// The timeout.
        after: Duration,
    },
    /// The connection was refused or failed.
    #[error("cannot connect to {addr}: {source}")]
    Io {
        /// The configured address.
        addr: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a send was not queued on the session. A send that returned `Ok` was queued on the live
/// session; it is never resent on a later one.
#[derive(Debug, Error)]
pub enum SendError {
    /// No session right now (reconnecting); nothing was queued.
    #[error("not connected (reconnecting)")]
    NotConnected,
    /// The connector is closed.
    #[error("connector closed")]
    Closed,
    /// The value does not serialize as framework-json.
    #[error("message does not serialize: {0}")]
    Serialize(#[source] serde_json::Error),
    /// Names starting `zlink.` are the framework's own.
    #[error("packet name {0:?} is reserved (zlink.)")]
    ReservedName(String),
    /// The packet does not encode (a name over 255 bytes, a payload over 4 GiB).
    #[error("invalid packet: {0}")]
    Invalid(#[source] ProtocolError),
}

/// Why a request has no successful answer. Each request ends exactly once.
#[derive(Debug, Error)]
pub enum RequestError {
    /// No session right now (reconnecting); nothing was sent.
    #[error("not connected (reconnecting)")]
    NotConnected,
    /// The connector is closed.
    #[error("connector closed")]
    Closed,
    /// No answer within the request's timeout (a late answer is dropped and counted).
    #[error("no answer within {} ms", after.as_millis())]
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// The session ended before the answer. The request is not resent.
    #[error("connection lost before the answer")]
    ConnectionLost,
    /// The server answered with an Error `{kind, detail}`.
    #[error("server error {:?}: {}", .0.kind, .0.detail)]
    Remote(ErrorPayload),
    /// The server answered with an Error packet whose payload is not `{kind, detail}`.
    #[error("server error with an unreadable payload ({} bytes)", .0.len())]
    MalformedError(Vec<u8>),
    /// The value does not serialize as framework-json.
    #[error("message does not serialize: {0}")]
    Serialize(#[source] serde_json::Error),
    /// Names starting `zlink.` are the framework's own.
    #[error("packet name {0:?} is reserved (zlink.)")]
    ReservedName(String),
    /// The packet does not encode.
    #[error("invalid packet: {0}")]
    Invalid(#[source] ProtocolError),
}

impl From<SendError> for RequestError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::NotConnected => Self::NotConnected,
            SendError::Closed => Self::Closed,
            SendError::Serialize(e) => Self::Serialize(e),
            SendError::ReservedName(n) => Self::ReservedName(n),
            SendError::Invalid(e) => Self::Invalid(e),
        }
    }
}

/// A payload that is not the expected framework-json value.
#[derive(Debug, Error)]
pub enum DecodeError {
    /// The packet's codec is not framework-json.
    #[error("packet {packet:?} is not framework-json (raw codec)")]
    NotJson {
        /// The packet name (empty for replies).
        packet: String,
    },
    /// The bytes are not valid JSON for the type.
    #[error("packet {packet:?} does not decode: {source}")]
    Json {
        /// The packet name (empty for replies).
        packet: String,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
}

/// Why [`Connector::wait`](crate::Connector::wait) returned no message.
#[derive(Debug, Error)]
pub enum WaitError {
    /// Nothing arrived within the timeout.
    #[error("no message within {} ms", after.as_millis())]
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// The connector closed first.
    #[error("connector closed")]
    Closed,
    /// The message arrived and did not decode (it is consumed).
    #[error(transparent)]
    Decode(#[from] DecodeError),
}
