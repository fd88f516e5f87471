//! Session settings.

use std::time::Duration;

use thiserror::Error;
use zlink_protocol::stream::MaxMessageSize;

/// The settings of every session of one StreamNode (issue 19 item 1; host config `stream:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// Inbound packet limit, header + payload (glossary §6; 64 KiB; unlimited allowed).
    pub max_message_size: MaxMessageSize,
    /// **(ours)** Close a session that sent no byte for this long (60 s). The Stream Connector
    /// pings every 20 s, so only a dead or stuck client reaches it.
    pub idle_timeout: Duration,
    /// **(ours)** Output waiting for the client beyond this closes the session as
    /// `SlowConsumer` (1 MiB).
    pub outbound_buffer_bytes: usize,
    /// **(ours)** A client request without a reply this long gets `DeadlineExceeded`; a server
    /// → client request without one ends the same way (10 s).
    pub request_timeout: Duration,
    /// **(ours)** Client requests awaiting a reply before the session stops reading (1,024).
    pub max_pending_requests: usize,
}

impl SessionConfig {
    /// Default `idle_timeout`.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_millis(60_000);
    /// Default `outbound_buffer_bytes`.
    pub const DEFAULT_OUTBOUND_BUFFER_BYTES: usize = 1024 * 1024;
    /// Default `request_timeout`.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_millis(10_000);
    /// Default `max_pending_requests`.
    pub const DEFAULT_MAX_PENDING_REQUESTS: usize = 1024;

    /// Check the settings.
    ///
    /// # Errors
    /// [`SessionConfigError`] for a zero timeout, buffer or request bound.
    pub fn validate(&self) -> Result<(), SessionConfigError> {
        if self.idle_timeout.is_zero() {
            return Err(SessionConfigError::Zero("idle_timeout_ms"));
        }
        if self.request_timeout.is_zero() {
            return Err(SessionConfigError::Zero("request_timeout_ms"));
        }
        if self.outbound_buffer_bytes == 0 {
            return Err(SessionConfigError::Zero("outbound_buffer_bytes"));
        }
        if self.max_pending_requests == 0 {
            return Err(SessionConfigError::Zero("max_pending_requests"));
        }
        Ok(())
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            max_message_size: MaxMessageSize::DEFAULT,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            outbound_buffer_bytes: Self::DEFAULT_OUTBOUND_BUFFER_BYTES,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            max_pending_requests: Self::DEFAULT_MAX_PENDING_REQUESTS,
        }
    }
}

/// A session setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SessionConfigError {
    /// The setting must be above zero.
    #[error("stream.{0} must be above 0")]
    Zero(&'static str),
}
