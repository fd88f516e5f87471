//! Connector settings.

use std::time::Duration;

use zlink_protocol::stream::MaxMessageSize;

use crate::backoff::ReconnectPolicy;
use crate::error::ConnectError;

/// Where received packets' callbacks run (glossary §11 "Dispatch mode").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DispatchMode {
    /// Callbacks wait in the dispatch queue until the application calls
    /// [`Connector::dispatch_pending`](crate::Connector::dispatch_pending) from the context it
    /// chooses (a game engine's main thread). The default, as the glossary gives for game
    /// engines.
    #[default]
    Manual,
    /// Callbacks run on the connector's receive task as packets arrive. A callback must not
    /// block: the next packet waits for it.
    Immediate,
}

/// The settings of one [`Connector`](crate::Connector).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorConfig {
    /// The StreamNode's `host:port`, resolved again at every (re)connect.
    pub addr: String,
    /// Give up one connect attempt after this long (5 s).
    pub connect_timeout: Duration,
    /// The timeout of a request that sets none (10 s, the server's default).
    pub request_timeout: Duration,
    /// **(ours)** `zlink.Ping` this often (20 s; `None` turns keepalive off). The server closes
    /// a session silent for its `idle_timeout` (60 s by default).
    pub ping_interval: Option<Duration>,
    /// A ping unanswered this long ends the session (10 s).
    pub ping_timeout: Duration,
    /// **(ours)** The inbound packet limit (16 MiB): a bigger packet from the server ends the
    /// session (`MessageTooLarge`). 0 is unlimited.
    pub max_inbound_message_size: MaxMessageSize,
    /// Where callbacks run ([`DispatchMode::Manual`]).
    pub dispatch_mode: DispatchMode,
    /// **(ours)** Output waiting for the socket beyond this makes `send` and `request` wait
    /// (1 MiB): backpressure, never a drop.
    pub outbound_buffer_bytes: usize,
    /// **(ours)** Callbacks waiting for `dispatch_pending` beyond this stop the receive task
    /// from reading (4,096): the server's own output bound then applies to a client that never
    /// dispatches.
    pub dispatch_queue_capacity: usize,
    /// The reconnect schedule.
    pub reconnect: ReconnectPolicy,
    /// The jitter generator's seed (`None`: one per connector from the process's hasher keys).
    pub jitter_seed: Option<u64>,
}

impl ConnectorConfig {
    /// Default `connect_timeout`.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// Default `request_timeout`.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default `ping_interval`.
    pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(20);
    /// Default `ping_timeout`.
    pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default `max_inbound_message_size`: 16 MiB.
    pub const DEFAULT_MAX_INBOUND_MESSAGE_SIZE: i64 = 16 * 1024 * 1024;
    /// Default `outbound_buffer_bytes`.
    pub const DEFAULT_OUTBOUND_BUFFER_BYTES: usize = 1024 * 1024;
    /// Default `dispatch_queue_capacity`.
    pub const DEFAULT_DISPATCH_QUEUE_CAPACITY: usize = 4096;

    /// The defaults, connecting to `addr` (`host:port`).
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            ping_interval: Some(Self::DEFAULT_PING_INTERVAL),
            ping_timeout: Self::DEFAULT_PING_TIMEOUT,
            // A positive constant: `new` cannot refuse it.
            max_inbound_message_size: MaxMessageSize::new(Self::DEFAULT_MAX_INBOUND_MESSAGE_SIZE)
                .unwrap_or(MaxMessageSize::UNLIMITED),
            dispatch_mode: DispatchMode::Manual,
            outbound_buffer_bytes: Self::DEFAULT_OUTBOUND_BUFFER_BYTES,
            dispatch_queue_capacity: Self::DEFAULT_DISPATCH_QUEUE_CAPACITY,
            reconnect: ReconnectPolicy::default(),
            jitter_seed: None,
        }
    }

    /// Check the settings.
    ///
    /// # Errors
    /// [`ConnectError::Config`] naming the setting that cannot work.
    pub fn validate(&self) -> Result<(), ConnectError> {
        let zero =
            |what: &'static str| Err(ConnectError::Config(format!("{what} must be above 0")));
        if self.addr.trim().is_empty() {
            return Err(ConnectError::Config("addr is empty".into()));
        }
        if self.connect_timeout.is_zero() {
            return zero("connect_timeout");
        }
        if self.request_timeout.is_zero() {
            return zero("request_timeout");
        }
        if self.ping_interval.is_some_and(|d| d.is_zero()) {
            return zero("ping_interval");
        }
        if self.ping_timeout.is_zero() {
            return zero("ping_timeout");
        }
        if self.outbound_buffer_bytes == 0 {
            return zero("outbound_buffer_bytes");
        }
        if self.dispatch_queue_capacity == 0 {
            return zero("dispatch_queue_capacity");
        }
        if self.reconnect.enabled && self.reconnect.initial_backoff.is_zero() {
            return zero("reconnect.initial_backoff");
        }
        if self.reconnect.max_backoff < self.reconnect.initial_backoff {
            return Err(ConnectError::Config(
                "reconnect.max_backoff is below reconnect.initial_backoff".into(),
            ));
        }
        Ok(())
    }
}
