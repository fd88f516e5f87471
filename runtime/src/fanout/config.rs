//! Publisher and subscriber settings. Every interval and deadline is a setting whose default is
//! the spec's (wire §5: beacon every 5 s, not-ready 15 s after the last valid receive), so tests
//! run the real code paths with millisecond timings.

use std::time::Duration;

use zlink_store::types::OwnerToken;

use super::error::FanoutError;
use crate::config::defaults::{FANOUT_BEACON_INTERVAL, FANOUT_SUBSCRIBER_NOT_READY_AFTER};

/// Whose owner lease a publisher's descriptor hangs on (glossary §6 "Descriptor": an ephemeral
/// record tied to the host owner lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerLease {
    /// The publisher claims its own lease for this host owner ID, renews it and releases it on
    /// shutdown. Claiming issues a new lease generation and makes any older token of the same
    /// owner ID stale, so do not use the owner ID of a MeshNode running in the same host.
    ///
    /// **A stopgap** until the node host shares one host lease with everything it runs:
    /// glossary §8 has one host owner token fence every descriptor of the host, and a
    /// publisher-owned lease is a second fence beside it. If the lease is lost (it expired by
    /// store time while renewals failed, or another claim replaced it), the publisher claims a
    /// new one and publishes its descriptor again — same lifecycle generation, next revision.
    Claim {
        /// Host owner ID; `None` = `host-<publisher RID>`.
        owner_id: Option<String>,
    },
    /// Publish under the host's existing lease (for example the MeshNode's
    /// [`owner_token`](crate::mesh::MeshNode::owner_token)); its holder renews and releases it.
    /// On shutdown the publisher only removes its descriptor.
    Shared(OwnerToken),
}

/// Settings of a [`Publisher`](super::Publisher).
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// The fanout ChannelName (descriptor scope).
    pub channel_name: String,
    /// The publisher RID; `None` = an automatic RID `<rid_prefix>-<uuid v4>`.
    pub rid: Option<String>,
    /// Prefix of an automatic RID.
    pub rid_prefix: String,
    /// Host to bind the PUB socket on.
    pub bind_host: String,
    /// Port to bind (0 = an ephemeral port, read back after bind).
    pub port: u16,
    /// Host advertised in the descriptor; `None` = `bind_host` (must not be a wildcard then).
    pub advertise_host: Option<String>,
    /// Beacon period (wire §5; default 5 s).
    pub beacon_interval: Duration,
    /// Security identity written to the descriptor.
    pub security_identity: String,
    /// The owner lease the descriptor hangs on (used only with a store).
    pub owner: OwnerLease,
    /// Owner lease TTL when the publisher claims its own lease.
    pub lease_ttl: Duration,
    /// Owner lease renewal period (shorter than the TTL).
    pub lease_renew: Duration,
    /// ZeroMQ send high-water mark per subscriber, in messages (1 or more: 0 would mean
    /// *unlimited* to ZeroMQ and is refused). A PUB socket *drops* messages for a subscriber
    /// whose pipe is full; the subscriber sees a gap, never a reorder.
    pub send_hwm: i32,
    /// Byte cap of the outbound queue between `publish` callers and the socket thread;
    /// `publish` waits for room.
    pub queue_cap_bytes: usize,
    /// How long the socket may keep flushing queued messages after shutdown.
    pub linger: Duration,
}

impl PublisherConfig {
    /// Defaults for a publisher of `channel_name` on `127.0.0.1`, ephemeral port.
    pub fn new(channel_name: impl Into<String>) -> Self {
        Self {
            channel_name: channel_name.into(),
            rid: None,
            rid_prefix: "fanout".into(),
            bind_host: "127.0.0.1".into(),
            port: 0,
            advertise_host: None,
            beacon_interval: FANOUT_BEACON_INTERVAL,
            security_identity: String::new(),
            owner: OwnerLease::Claim { owner_id: None },
            lease_ttl: Duration::from_secs(10),
            lease_renew: Duration::from_secs(3),
            send_hwm: 100_000,
            queue_cap_bytes: 8 * 1024 * 1024,
            linger: Duration::from_secs(1),
        }
    }

    /// Check every setting.
    ///
    /// # Errors
    /// [`FanoutError::Config`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), FanoutError> {
        let bad = |field, reason: &str| {
            Err(FanoutError::Config {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.channel_name.is_empty() {
            return bad("channel_name", "empty");
        }
        if let Some(rid) = &self.rid {
            zlink_protocol::ids::validate_rid(rid).map_err(|e| FanoutError::Config {
                field: "rid",
                reason: e.to_string(),
            })?;
        }
        if self.beacon_interval.is_zero() {
            return bad("beacon_interval", "must be positive");
        }
        if self.lease_renew.is_zero() || self.lease_renew >= self.lease_ttl {
            return bad("lease_renew", "must be positive and shorter than lease_ttl");
        }
        if self.send_hwm <= 0 {
            return bad(
                "send_hwm",
                "must be 1 or more (0 means unlimited to ZeroMQ)",
            );
        }
        if self.queue_cap_bytes == 0 {
            return bad("queue_cap_bytes", "zero");
        }
        let advertise = self.advertise_host.as_deref().unwrap_or(&self.bind_host);
        if matches!(advertise, "0.0.0.0" | "::" | "[::]" | "*" | "") {
            return bad(
                "advertise_host",
                "a wildcard or empty host cannot be advertised (glossary §9)",
            );
        }
        Ok(())
    }
}

/// Settings of a [`Subscriber`](super::Subscriber).
#[derive(Debug, Clone)]
pub struct SubscriberConfig {
    /// The fanout ChannelName whose publisher descriptors are discovered.
    pub channel_name: String,
    /// Publisher endpoints configured by hand (glossary §6 "Manual endpoint"), each with its
    /// own SUB socket.
    pub manual_endpoints: Vec<String>,
    /// How often the Location Store is polled for publisher descriptors (with a store).
    pub discovery_poll: Duration,
    /// A publisher turns not-ready this long after its last valid receive (wire §5; 15 s).
    pub not_ready_after: Duration,
    /// ZeroMQ receive high-water mark per SUB socket, in messages (1 or more: 0 would mean
    /// *unlimited* to ZeroMQ and is refused).
    pub recv_hwm: i32,
    /// Largest inbound frame accepted (`ZMQ_MAXMSGSIZE`, checked per frame by libzmq); a
    /// larger one closes that connection. A resource guard against a hostile publisher.
    /// Default 16 MiB; see [`SubscriberConfig::worst_case_buffered_bytes`] for what it bounds.
    pub max_message_bytes: i64,
    /// Records read per socket per wake-up. One batch handed to tokio holds the records of
    /// one wake-up from *every* socket, so it has up to `batch` × (number of publishers)
    /// records.
    pub batch: usize,
    /// Capacity of the channel from the socket thread to the dispatcher, in batches. When the
    /// handlers fall behind and it is full, the socket thread holds one more batch and stops
    /// reading the SUB sockets (readiness deadlines still run); ZeroMQ buffers up to
    /// `recv_hwm` per socket and then the publisher drops (PUB/SUB has no backpressure).
    pub inbound_batches: usize,
    /// ZeroMQ reconnect interval of the SUB sockets.
    pub reconnect_ivl: Duration,
    /// How long `Subscriber::shutdown` lets handlers finish the records already read before it
    /// cancels them.
    pub shutdown_drain: Duration,
}

impl SubscriberConfig {
    /// Defaults for a subscriber of `channel_name`.
    pub fn new(channel_name: impl Into<String>) -> Self {
        Self {
            channel_name: channel_name.into(),
            manual_endpoints: Vec::new(),
            discovery_poll: Duration::from_secs(1),
            not_ready_after: FANOUT_SUBSCRIBER_NOT_READY_AFTER,
            recv_hwm: 100_000,
            max_message_bytes: 16 * 1024 * 1024,
            batch: 256,
            inbound_batches: 64,
            reconnect_ivl: Duration::from_millis(100),
            shutdown_drain: Duration::from_secs(5),
        }
    }

    /// Check every setting.
    ///
    /// # Errors
    /// [`FanoutError::Config`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), FanoutError> {
        let bad = |field, reason: &str| {
            Err(FanoutError::Config {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.channel_name.is_empty() {
            return bad("channel_name", "empty");
        }
        if self.discovery_poll.is_zero() {
            return bad("discovery_poll", "must be positive");
        }
        if self.not_ready_after.is_zero() {
            return bad("not_ready_after", "must be positive");
        }
        if self.recv_hwm <= 0 {
            return bad(
                "recv_hwm",
                "must be 1 or more (0 means unlimited to ZeroMQ)",
            );
        }
        if self.max_message_bytes <= 0 {
            return bad(
                "max_message_bytes",
                "must be 1 or more (-1 would mean unlimited to ZeroMQ)",
            );
        }
        if self.batch == 0 || self.inbound_batches == 0 {
            return bad("batch", "batch and inbound_batches must be positive");
        }
        if let Some(e) = self
            .manual_endpoints
            .iter()
            .find(|e| !e.starts_with("tcp://"))
        {
            return Err(FanoutError::Config {
                field: "manual_endpoints",
                reason: format!("{e:?} is not tcp://host:port"),
            });
        }
        // Two sockets on one publisher would deliver each of its events twice.
        let mut seen = std::collections::BTreeSet::new();
        if let Some(e) = self.manual_endpoints.iter().find(|e| !seen.insert(*e)) {
            return Err(FanoutError::Config {
                field: "manual_endpoints",
                reason: format!("{e:?} is listed twice"),
            });
        }
        Ok(())
    }

    /// The worst-case bytes one subscriber may hold for `publishers` publishers, as a bound of
    /// the settings (not an estimate): each SUB socket buffers up to `recv_hwm` records, every
    /// record is at most three frames of `max_message_bytes`, and on the tokio side there are
    /// up to `inbound_batches` batches in the channel, one held by the socket thread and one
    /// in the dispatcher, each of up to `batch` records per publisher. Kernel TCP buffers come
    /// on top. With the defaults this is astronomically large (100,000 × 48 MiB per socket):
    /// a deployment that must bound memory sets `recv_hwm` and `max_message_bytes` to its real
    /// event sizes.
    pub fn worst_case_buffered_bytes(&self, publishers: usize) -> u128 {
        let record = 3 * u128::try_from(self.max_message_bytes.max(0)).unwrap_or(0);
        let zmq = u128::try_from(self.recv_hwm.max(0)).unwrap_or(0) * record;
        let tokio = (self.inbound_batches as u128 + 2) * self.batch as u128 * record;
        (zmq + tokio) * publishers as u128
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_spec_defaults_and_valid() {
        let p = PublisherConfig::new("c");
        assert_eq!(p.beacon_interval, Duration::from_secs(5));
        assert!(p.validate().is_ok());
        let s = SubscriberConfig::new("c");
        assert_eq!(s.not_ready_after, Duration::from_secs(15));
        assert!(s.validate().is_ok());
    }

    #[test]
    fn bad_settings_name_their_field() {
        let field = |r: Result<(), FanoutError>| match r {
            Err(FanoutError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let mut p = PublisherConfig::new("c");
        p.beacon_interval = Duration::ZERO;
        assert_eq!(field(p.validate()), "beacon_interval");
        let mut p = PublisherConfig::new("c");
        p.bind_host = "0.0.0.0".into();
        assert_eq!(field(p.validate()), "advertise_host");
        p.advertise_host = Some("10.0.0.1".into());
        assert!(p.validate().is_ok());
        let mut p = PublisherConfig::new("");
        assert_eq!(field(p.validate()), "channel_name");
        p = PublisherConfig::new("c");
        p.lease_renew = p.lease_ttl;
        assert_eq!(field(p.validate()), "lease_renew");
        let mut s = SubscriberConfig::new("c");
        s.not_ready_after = Duration::ZERO;
        assert_eq!(field(s.validate()), "not_ready_after");
        let mut s = SubscriberConfig::new("c");
        s.manual_endpoints.push("ipc:///x".into());
        assert_eq!(field(s.validate()), "manual_endpoints");
        let mut s = SubscriberConfig::new("c");
        s.manual_endpoints = vec!["tcp://127.0.0.1:1".into(), "tcp://127.0.0.1:1".into()];
        assert_eq!(field(s.validate()), "manual_endpoints");
        // 0 is "unlimited" to ZeroMQ: refused for both high-water marks and the frame cap.
        let mut p = PublisherConfig::new("c");
        p.send_hwm = 0;
        assert_eq!(field(p.validate()), "send_hwm");
        let mut s = SubscriberConfig::new("c");
        s.recv_hwm = 0;
        assert_eq!(field(s.validate()), "recv_hwm");
        let mut s = SubscriberConfig::new("c");
        s.max_message_bytes = 0;
        assert_eq!(field(s.validate()), "max_message_bytes");
    }

    #[test]
    fn worst_case_bound_follows_the_settings() {
        let mut s = SubscriberConfig::new("c");
        assert_eq!(s.max_message_bytes, 16 * 1024 * 1024);
        s.recv_hwm = 10;
        s.max_message_bytes = 1000;
        s.batch = 4;
        s.inbound_batches = 2;
        // Per publisher: 10 × 3000 in ZeroMQ + (2 + 2) × 4 × 3000 on the tokio side.
        assert_eq!(s.worst_case_buffered_bytes(1), 30_000 + 48_000);
        assert_eq!(s.worst_case_buffered_bytes(3), 3 * 78_000);
    }
}
