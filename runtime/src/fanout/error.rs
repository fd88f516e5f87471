//! Errors of classic fanout publishers and subscribers.

use thiserror::Error;
use zlink_protocol::ProtocolError;
use zlink_store::StoreError;

use super::descriptor::DescriptorError;
use super::record::{RecordEncodeError, TopicError};
use crate::call::error::{CallError, ErrorKind};

/// A fanout operation or start-up failed.
#[derive(Debug, Error)]
pub enum FanoutError {
    /// A setting is invalid.
    #[error("fanout configuration {field}: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// An application topic was refused before transport (wire §5).
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// The same (topic, packet name) has two handlers.
    #[error("duplicate fanout handler for topic {topic:?}, packet {packet_name:?}")]
    DuplicateHandler {
        /// The topic.
        topic: String,
        /// The packet name.
        packet_name: String,
    },
    /// The typed payload envelope or metadata is over its wire bounds.
    #[error("fanout record: {0}")]
    Encode(#[from] ProtocolError),
    /// The event does not serialize with its codec.
    #[error("fanout event: {0}")]
    Serialize(#[source] CallError),
    /// ZeroMQ refused a socket operation.
    #[error("zeromq {op}: {source}")]
    Transport {
        /// The operation.
        op: &'static str,
        /// The libzmq error.
        #[source]
        source: zmq::Error,
    },
    /// An OS resource (the wake-up pipe, the socket thread) could not be created.
    #[error("{op}: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The Location Store refused or failed.
    #[error("location store: {0}")]
    Store(#[from] StoreError),
    /// A stored descriptor is unusable.
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
    /// The OS random source failed.
    #[error("operating system random source failed")]
    Random,
    /// `Subscriber::start` was called outside a tokio runtime (it runs its dispatcher and
    /// discovery there).
    #[error("fanout subscriber must be started from within a tokio runtime")]
    NoRuntime,
    /// The publisher or subscriber is shutting down.
    #[error("fanout endpoint is shutting down")]
    ShuttingDown,
}

impl From<RecordEncodeError> for FanoutError {
    fn from(e: RecordEncodeError) -> Self {
        match e {
            RecordEncodeError::Topic(t) => Self::Topic(t),
            RecordEncodeError::Envelope(p) => Self::Encode(p),
        }
    }
}

impl FanoutError {
    /// The closed error kind callers branch on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Config { .. } | Self::DuplicateHandler { .. } => ErrorKind::Configuration,
            Self::Topic(_) | Self::Encode(_) | Self::Serialize(_) | Self::NoRuntime => {
                ErrorKind::InvalidOperation
            }
            Self::Transport { .. } | Self::Io { .. } | Self::Random => ErrorKind::Unavailable,
            Self::Store(_) => ErrorKind::StoreFailure,
            Self::Descriptor(_) => ErrorKind::ProtocolError,
            Self::ShuttingDown => ErrorKind::ShuttingDown,
        }
    }
}

pub(crate) fn zerr(op: &'static str) -> impl FnOnce(zmq::Error) -> FanoutError {
    move |source| FanoutError::Transport { op, source }
}
