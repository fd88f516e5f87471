//! ClientServer settings, their validation and the public error type (glossary §6 "Weight",
//! "MaxMessageSize"; wire §2 complete-message limit, §5 liveness).

use std::time::Duration;

use thiserror::Error;
use zlink_store::StoreError;

use crate::call::error::CallError;
use crate::config::defaults;
use crate::mesh::auth::MeshSecret;

/// Complete-message limit used when a side configures `0` (glossary §6 "MaxMessageSize": `0`
/// on a general application socket means the binding's default). 64 MiB, the same resource
/// guard the mesh transport uses; there is no hidden 16 MiB cap (wire §2).
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 64 * 1024 * 1024;

/// Largest configurable complete-message limit: the schema's absolute application payload
/// limit (wire §2, `applicationPayloadAbsoluteBytes`).
pub const MAX_MESSAGE_BYTES_LIMIT: u64 =
    zlink_protocol::envelope::APPLICATION_PAYLOAD_ABSOLUTE_BYTES;

/// Default cap on application bytes a client keeps queued for its sockets (requests and
/// commands not yet written to a ZeroMQ pipe).
pub const DEFAULT_QUEUE_CAP_BYTES: usize = 64 * 1024 * 1024;

/// Timings of one side. Every interval of the spec is here so tests run the real code paths in
/// milliseconds.
#[derive(Debug, Clone)]
pub struct ClientServerTimings {
    /// Liveness probe interval, both directions (wire §5; default 5 s).
    pub probe_interval: Duration,
    /// Not-ready deadline since the last matching ACK (wire §5; default 15 s).
    pub liveness_deadline: Duration,
    /// Client: how often the Location Store is polled for Server descriptors (default 1 s).
    pub discovery_poll: Duration,
    /// Server: owner lease TTL (default 15 s).
    pub lease_ttl: Duration,
    /// Server: owner lease renewal interval (default 5 s).
    pub lease_renew: Duration,
    /// Server: margin before the lease deadline at which the server stops accepting new work
    /// if no renewal succeeded (glossary §8 "Fencing deadline"; default 2 s).
    pub fencing_margin: Duration,
    /// Client: delay before a rejected `hello` is tried again (default 1 s).
    pub hello_retry: Duration,
    /// Client: how long a `hello` may go unanswered before the connection is replaced by a
    /// new one (default 5 s).
    pub admission_timeout: Duration,
    /// Client: request deadline when the caller gives none (default 30 s).
    pub request_timeout: Duration,
    /// Server: how long graceful shutdown waits for accepted requests (default 5 s).
    pub shutdown_grace: Duration,
    /// ZeroMQ reconnect interval (default 100 ms).
    pub reconnect_interval: Duration,
}

impl Default for ClientServerTimings {
    fn default() -> Self {
        Self {
            probe_interval: defaults::LIVENESS_PROBE_INTERVAL,
            liveness_deadline: defaults::LIVENESS_DEADLINE,
            discovery_poll: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(15),
            lease_renew: Duration::from_secs(5),
            fencing_margin: Duration::from_secs(2),
            hello_retry: Duration::from_secs(1),
            admission_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
            reconnect_interval: Duration::from_millis(100),
        }
    }
}

/// Settings of a ClientServer Server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The ChannelName served.
    pub channel_name: String,
    /// Shared secret both sides prove in admission.
    pub secret: MeshSecret,
    /// Security identity published in the descriptor and bound by the proofs.
    pub security_identity: String,
    /// Server RID; `None` = automatic `cs-<uuid>`.
    pub rid: Option<String>,
    /// Host to bind (`127.0.0.1`, `0.0.0.0`, …).
    pub bind_host: String,
    /// Port to bind; `0` = ephemeral.
    pub port: u16,
    /// Host advertised in the descriptor; defaults to `bind_host`.
    pub advertise_host: Option<String>,
    /// Selection weight, `0..=10000` (glossary §6 "Weight"; default 100).
    pub weight: u16,
    /// This side's complete-message limit in bytes (`0` = [`DEFAULT_MAX_MESSAGE_BYTES`]).
    pub max_message_bytes: u64,
    /// Host owner identity of the lease; defaults to `host-<rid>`.
    pub owner_id: Option<String>,
    /// ZeroMQ high-water mark per pipe, in messages.
    pub hwm: i32,
    /// Most bytes parked for one client whose pipe is full (a client that does not read its
    /// replies). Beyond it the client is disconnected: its admission is dropped, so its
    /// requests fail by liveness instead of growing the server's memory. One reply of any
    /// admitted size is always parked when nothing else waits for that client.
    pub client_queue_cap_bytes: usize,
    /// The application job queue (glossary §3): a permit is taken before a request or
    /// command is dispatched and released when its handler starts. With every permit in use
    /// a new request is answered `Backpressured` (a command is dropped and counted) instead
    /// of queueing without bound.
    pub jobs: crate::jobs::JobQueueConfig,
    /// Timings.
    pub timings: ClientServerTimings,
}

impl ServerConfig {
    /// Defaults for `channel_name` on `127.0.0.1`, ephemeral port.
    pub fn new(channel_name: impl Into<String>, secret: MeshSecret) -> Self {
        Self {
            channel_name: channel_name.into(),
            secret,
            security_identity: "zlink".into(),
            rid: None,
            bind_host: "127.0.0.1".into(),
            port: 0,
            advertise_host: None,
            weight: defaults::DEFAULT_WEIGHT,
            max_message_bytes: 0,
            owner_id: None,
            hwm: 10_000,
            client_queue_cap_bytes: DEFAULT_QUEUE_CAP_BYTES,
            jobs: crate::jobs::JobQueueConfig::with_permits(
                crate::mesh::config::DEFAULT_JOB_PERMITS,
            ),
            timings: ClientServerTimings::default(),
        }
    }
}

/// Settings of a ClientServer Client.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The ChannelName used.
    pub channel_name: String,
    /// Shared secret both sides prove in admission.
    pub secret: MeshSecret,
    /// Security identity bound by the proofs.
    pub security_identity: String,
    /// Client RID; `None` = automatic `csc-<uuid>`.
    pub rid: Option<String>,
    /// This side's complete-message limit in bytes (`0` = [`DEFAULT_MAX_MESSAGE_BYTES`]).
    pub max_message_bytes: u64,
    /// Manual server endpoints (glossary §6 "Manual endpoint"): identity learnt at admission.
    pub manual_endpoints: Vec<String>,
    /// ZeroMQ high-water mark per pipe, in messages.
    pub hwm: i32,
    /// Most requests in flight.
    pub max_pending: usize,
    /// Most application bytes queued for the sockets and not yet written to a ZeroMQ pipe;
    /// beyond it a send or request is refused with
    /// [`ClientServerError::Backpressured`] (one message of any admitted size is always
    /// accepted when nothing waits).
    pub queue_cap_bytes: usize,
    /// Timings.
    pub timings: ClientServerTimings,
}

impl ClientConfig {
    /// Defaults for `channel_name`, no manual endpoints.
    pub fn new(channel_name: impl Into<String>, secret: MeshSecret) -> Self {
        Self {
            channel_name: channel_name.into(),
            secret,
            security_identity: "zlink".into(),
            rid: None,
            max_message_bytes: 0,
            manual_endpoints: Vec::new(),
            hwm: 10_000,
            max_pending: 1 << 16,
            queue_cap_bytes: DEFAULT_QUEUE_CAP_BYTES,
            timings: ClientServerTimings::default(),
        }
    }
}

/// `normalizedEffectiveMaxMessageBytes` of one side (wire §2).
///
/// # Errors
/// [`ClientServerError::Config`] above [`MAX_MESSAGE_BYTES_LIMIT`].
pub fn normalize_max_message_bytes(configured: u64) -> Result<u64, ClientServerError> {
    match configured {
        0 => Ok(DEFAULT_MAX_MESSAGE_BYTES),
        n if n > MAX_MESSAGE_BYTES_LIMIT => Err(ClientServerError::Config {
            field: "max_message_bytes",
            reason: format!("{n} exceeds the schema limit {MAX_MESSAGE_BYTES_LIMIT}"),
        }),
        n => Ok(n),
    }
}

pub(crate) fn validate_name(field: &'static str, s: &str) -> Result<(), ClientServerError> {
    if s.is_empty() || s.len() > 255 {
        return Err(ClientServerError::Config {
            field,
            reason: format!("must be 1..=255 UTF-8 bytes, got {}", s.len()),
        });
    }
    Ok(())
}

pub(crate) fn validate_weight(weight: u32) -> Result<u16, ClientServerError> {
    u16::try_from(weight)
        .ok()
        .filter(|w| *w <= defaults::MAX_WEIGHT)
        .ok_or(ClientServerError::WeightOutOfRange(weight))
}

pub(crate) fn validate_timings(t: &ClientServerTimings) -> Result<(), ClientServerError> {
    if t.probe_interval.is_zero() || t.liveness_deadline <= t.probe_interval {
        return Err(ClientServerError::Config {
            field: "timings.liveness_deadline",
            reason: "probe interval must be > 0 and shorter than the liveness deadline".into(),
        });
    }
    if t.lease_renew.is_zero() || t.lease_renew >= t.lease_ttl {
        return Err(ClientServerError::Config {
            field: "timings.lease_renew",
            reason: "must be > 0 and shorter than the lease TTL".into(),
        });
    }
    if t.fencing_margin >= t.lease_ttl {
        return Err(ClientServerError::Config {
            field: "timings.fencing_margin",
            reason: "must be shorter than the lease TTL".into(),
        });
    }
    if t.discovery_poll.is_zero()
        || t.hello_retry.is_zero()
        || t.admission_timeout.is_zero()
        || t.request_timeout.is_zero()
    {
        return Err(ClientServerError::Config {
            field: "timings",
            reason:
                "discovery poll, hello retry, admission timeout and request timeout must be > 0"
                    .into(),
        });
    }
    Ok(())
}

/// Errors of the ClientServer API.
#[derive(Debug, Error)]
pub enum ClientServerError {
    /// A setting is invalid.
    #[error("configuration {field}: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A weight outside `0..=10000` (glossary §6 "Weight": a configuration error).
    #[error("weight {0} is outside 0..=10000")]
    WeightOutOfRange(u32),
    /// The socket could not be created, bound or used.
    #[error("transport: {0}")]
    Transport(String),
    /// The Location Store failed.
    #[error("location store: {0}")]
    Store(#[from] StoreError),
    /// The operating system random source failed.
    #[error("operating system random source failed")]
    Random,
    /// The message (header + payload) is larger than the limit admitted for the connection it
    /// would use; refused before any frame was built.
    #[error("message of {bytes} bytes exceeds the admitted limit of {limit} bytes")]
    MessageTooLarge {
        /// Complete message size.
        bytes: u64,
        /// The admitted limit.
        limit: u64,
    },
    /// The client's outbound queue is at its byte cap: the servers or the network do not keep
    /// up. Nothing was sent; the caller may retry later.
    #[error("{queued} bytes already wait for the sockets (cap {cap})")]
    Backpressured {
        /// Bytes waiting.
        queued: usize,
        /// The cap.
        cap: usize,
    },
    /// No ready, admitted, positive-weight, non-draining server.
    #[error("no ready server for channel {0}")]
    NoReadyServer(String),
    /// The side is shutting down.
    #[error("shutting down")]
    ShuttingDown,
    /// The request completed with an error.
    #[error(transparent)]
    Call(#[from] CallError),
}
