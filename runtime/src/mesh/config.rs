//! MeshNode configuration (glossary §1 "MeshNode", §6, §9) and its validation.

use std::time::Duration;

use thiserror::Error;
use zlink_protocol::generated::{ChannelMembership, ChannelRole, ObjectCapability, ObjectRole};
use zlink_protocol::ids;

use super::auth::MeshSecret;
use crate::jobs::JobQueueConfig;

/// Default application job-queue permits per host.
pub const DEFAULT_JOB_PERMITS: usize = 1024;

/// The capability every zlink node announces and requires in `hello` (wire §4).
pub const CAPABILITY: &str = "framework-service-v13";

/// How the node's Routing ID is chosen (glossary §9 "Routing ID").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RidConfig {
    /// `prefix-<lowercase uuid v4>` from the CSPRNG, new for every lifecycle.
    Automatic {
        /// Diagnostic prefix, ASCII `[A-Za-z0-9._-]`, 1..=64 characters.
        prefix: String,
    },
    /// A fixed RID (manual topology).
    Fixed(String),
}

/// A manually configured peer (glossary §6 "Manual endpoint").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualPeer {
    /// `tcp://host:port` of the peer's ROUTER listener.
    pub endpoint: String,
    /// The peer's RID when known; an endpoint-only intent learns it from the greeting.
    pub expected_rid: Option<String>,
}

/// Timings; every spec timeout is configurable so tests run the real paths fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshTimings {
    /// Liveness probe interval (wire §5; default 5 s).
    pub probe_interval: Duration,
    /// Liveness deadline since the last matching ACK (default 15 s).
    pub liveness_deadline: Duration,
    /// How often automatic discovery lists descriptors.
    pub discovery_poll: Duration,
    /// Owner lease TTL.
    pub lease_ttl: Duration,
    /// Owner lease renewal period (must be shorter than the TTL).
    pub lease_renew: Duration,
    /// Wait before re-dialing a peer that rejected us (not for `NotRequired`, which is final).
    pub reject_backoff: Duration,
    /// Fencing margin (glossary §8): with failing renewals, the host stops admitting object
    /// work this long before its last valid lease deadline (default 2 s; shorter than the TTL).
    pub fencing_margin: Duration,
}

impl Default for MeshTimings {
    fn default() -> Self {
        Self {
            probe_interval: Duration::from_secs(5),
            liveness_deadline: Duration::from_secs(15),
            discovery_poll: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(10),
            lease_renew: Duration::from_secs(3),
            reject_backoff: Duration::from_secs(5),
            fencing_margin: crate::config::defaults::FENCING_MARGIN,
        }
    }
}

/// Flow control and socket bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowConfig {
    /// Credit window per connection and direction: application bytes a sender may have in
    /// flight (sent but not yet consumed by the receiver's dispatcher). This is the HWM of the
    /// backpressure contract.
    pub window_bytes: u32,
    /// Byte cap of the pump's outbound data queue.
    pub pump_queue_bytes: usize,
    /// ZeroMQ per-pipe high-water marks, in messages.
    pub zmq_hwm: i32,
    /// Records the reactor reads from the socket per look at most.
    pub batch: usize,
    /// Largest inbound ZeroMQ message (a batch or one record) the socket accepts; a resource
    /// guard, not a framework message-size limit (RouteMesh has none, wire §2). A peer that
    /// sends more loses its connection.
    pub max_message_bytes: u64,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self {
            window_bytes: 4 * 1024 * 1024,
            pump_queue_bytes: 16 * 1024 * 1024,
            zmq_hwm: 100_000,
            batch: 256,
            max_message_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Everything a MeshNode needs to start.
#[derive(Debug, Clone)]
pub struct MeshNodeConfig {
    /// The RouteMesh this node joins.
    pub mesh_name: String,
    /// RID choice.
    pub rid: RidConfig,
    /// Host owner identity for the owner lease (e.g. the pod name); default `host-<rid>`.
    pub owner_id: Option<String>,
    /// Local interface to bind (`0.0.0.0` allowed); default `127.0.0.1`.
    pub bind_host: String,
    /// Address peers dial; required when `bind_host` is a wildcard.
    pub advertise_host: Option<String>,
    /// Port; 0 binds an ephemeral port and advertises the actual one.
    pub port: u16,
    /// The port peers dial, when it differs from the bound one (a port forward, a proxy in
    /// front of the node); `None` advertises the bound port.
    pub advertise_port: Option<u16>,
    /// Object role.
    pub object_role: ObjectRole,
    /// Application version (rollout ordering).
    pub application_version: u64,
    /// Maintenance wave stable ID (empty = none).
    pub maintenance_wave: String,
    /// Placement weight 0..=10000.
    pub placement_weight: u16,
    /// Channel memberships (a Server membership makes Client–Client pairs connect).
    pub channels: Vec<ChannelMembership>,
    /// Object kinds and stable types this node can host, announced in its descriptor (fixed for
    /// the lifecycle: a change needs re-admission, wire §4). Usually
    /// `object::registry::Registry::capabilities()`.
    pub object_capabilities: Vec<ObjectCapability>,
    /// With a prefix, an Object Server node issues one Entry Spot ID `<prefix>-entry-<uuid-v4>`
    /// per lifecycle, announces it in its descriptor and starts in state `Starting`; its object
    /// runtime creates the Entry Spot and then turns the node `Serving` (glossary §1).
    pub entry_spot_prefix: Option<String>,
    /// Security identity proven in admission.
    pub security_identity: String,
    /// Mesh secret.
    pub secret: MeshSecret,
    /// Manual peers.
    pub manual_peers: Vec<ManualPeer>,
    /// Timings.
    pub timings: MeshTimings,
    /// Flow control.
    pub flow: FlowConfig,
    /// Application job queue.
    pub jobs: JobQueueConfig,
}

impl MeshNodeConfig {
    /// A config with defaults for everything but the mesh name and secret.
    pub fn new(mesh_name: impl Into<String>, secret: MeshSecret) -> Self {
        Self {
            mesh_name: mesh_name.into(),
            rid: RidConfig::Automatic {
                prefix: "node".into(),
            },
            owner_id: None,
            bind_host: "127.0.0.1".into(),
            advertise_host: None,
            advertise_port: None,
            port: 0,
            object_role: ObjectRole::Server,
            application_version: 0,
            maintenance_wave: String::new(),
            placement_weight: 100,
            channels: Vec::new(),
            object_capabilities: Vec::new(),
            entry_spot_prefix: None,
            security_identity: "zlink-node".into(),
            secret,
            manual_peers: Vec::new(),
            timings: MeshTimings::default(),
            flow: FlowConfig::default(),
            jobs: JobQueueConfig::with_permits(DEFAULT_JOB_PERMITS),
        }
    }

    /// Check every setting.
    ///
    /// # Errors
    /// The first [`MeshConfigError`].
    pub fn validate(&self) -> Result<(), MeshConfigError> {
        let bad = |field: &'static str, reason: String| MeshConfigError::Invalid { field, reason };
        if self.mesh_name.is_empty() || self.mesh_name.len() > 255 {
            return Err(bad("mesh_name", "must be 1..=255 bytes".into()));
        }
        match &self.rid {
            RidConfig::Automatic { prefix } => {
                ids::validate_rid_prefix(prefix).map_err(|e| bad("rid.prefix", e.to_string()))?
            }
            RidConfig::Fixed(rid) => {
                ids::validate_rid(rid).map_err(|e| bad("rid", e.to_string()))?;
            }
        }
        if self.bind_host.is_empty() {
            return Err(bad("bind_host", "must not be empty".into()));
        }
        if let Some(a) = &self.advertise_host {
            if is_wildcard(a) || a.is_empty() {
                return Err(bad(
                    "advertise_host",
                    format!("{a:?} is a wildcard or empty; remotes cannot dial it"),
                ));
            }
        } else if is_wildcard(&self.bind_host) {
            return Err(bad(
                "advertise_host",
                format!(
                    "bind_host {:?} is a wildcard, so advertise_host must name a dialable address",
                    self.bind_host
                ),
            ));
        }
        if self.placement_weight > 10_000 {
            return Err(bad("placement_weight", "must be 0..=10000".into()));
        }
        for (i, c) in self.channels.iter().enumerate() {
            if c.channel_name.is_empty() || c.channel_name.len() > 255 {
                return Err(bad(
                    "channels.channel_name",
                    format!("{:?} must be 1..=255 bytes", c.channel_name),
                ));
            }
            if c.weight > 10_000 {
                return Err(bad(
                    "channels.weight",
                    format!(
                        "{} for channel {:?} is outside 0..=10000",
                        c.weight, c.channel_name
                    ),
                ));
            }
            // Each role at most once per ChannelName (glossary §6 "Channel Client와 Server role").
            if self.channels[..i]
                .iter()
                .any(|o| o.channel_name == c.channel_name && o.role == c.role)
            {
                return Err(bad(
                    "channels",
                    format!(
                        "channel {:?} registers the {:?} role twice",
                        c.channel_name, c.role
                    ),
                ));
            }
        }
        if let Some(p) = &self.entry_spot_prefix {
            ids::validate_rid_prefix(p).map_err(|e| bad("entry_spot_prefix", e.to_string()))?;
            if self.object_role != ObjectRole::Server {
                return Err(bad(
                    "entry_spot_prefix",
                    "only an Object Server node has an Entry Spot".into(),
                ));
            }
        }
        if self.security_identity.is_empty() || self.security_identity.len() > 255 {
            return Err(bad("security_identity", "must be 1..=255 bytes".into()));
        }
        if self.maintenance_wave.len() > 255 {
            return Err(bad("maintenance_wave", "must be at most 255 bytes".into()));
        }
        for p in &self.manual_peers {
            if !p.endpoint.starts_with("tcp://") {
                return Err(bad(
                    "manual_peers.endpoint",
                    format!("{:?} is not tcp://host:port", p.endpoint),
                ));
            }
            if let Some(rid) = &p.expected_rid {
                ids::validate_rid(rid)
                    .map_err(|e| bad("manual_peers.expected_rid", e.to_string()))?;
            }
        }
        let t = &self.timings;
        if t.probe_interval.is_zero() || t.liveness_deadline <= t.probe_interval {
            return Err(bad(
                "timings",
                "probe_interval must be positive and shorter than liveness_deadline".into(),
            ));
        }
        if t.lease_renew.is_zero() || t.lease_renew >= t.lease_ttl {
            return Err(bad(
                "timings",
                "lease_renew must be positive and shorter than lease_ttl".into(),
            ));
        }
        // Healthy renewals must land before the admission window closes: renew period <
        // lease TTL − fencing margin.
        if t.fencing_margin >= t.lease_ttl
            || t.lease_renew >= t.lease_ttl.saturating_sub(t.fencing_margin)
        {
            return Err(bad(
                "timings.fencing_margin",
                format!(
                    "lease_renew {:?} must be shorter than lease_ttl {:?} minus fencing_margin {:?}",
                    t.lease_renew, t.lease_ttl, t.fencing_margin
                ),
            ));
        }
        if t.discovery_poll.is_zero() {
            return Err(bad("timings", "discovery_poll must be positive".into()));
        }
        if self.flow.window_bytes < 1024 {
            return Err(bad("flow.window_bytes", "must be at least 1024".into()));
        }
        if self.flow.max_message_bytes < u64::from(self.flow.window_bytes)
            || self.flow.max_message_bytes > i64::MAX as u64
        {
            return Err(bad(
                "flow.max_message_bytes",
                "must be at least window_bytes".into(),
            ));
        }
        if self.flow.zmq_hwm <= 0 || self.flow.batch == 0 || self.flow.pump_queue_bytes == 0 {
            return Err(bad(
                "flow",
                "zmq_hwm, batch and pump_queue_bytes must be positive".into(),
            ));
        }
        Ok(())
    }

    /// Whether this node has a RouteMesh Channel Server membership.
    pub fn has_server_membership(&self) -> bool {
        self.channels.iter().any(|c| c.role == ChannelRole::Server)
    }

    /// Register a RouteMesh Channel Server membership with `weight` (0..=10000, default 100 by
    /// [`crate::select::DEFAULT_WEIGHT`]). A Server can also send on the Channel.
    #[must_use]
    pub fn channel_server(mut self, name: impl Into<String>, weight: u16) -> Self {
        self.channels.push(ChannelMembership {
            channel_name: name.into(),
            role: ChannelRole::Server,
            weight,
        });
        self
    }

    /// Register a RouteMesh Channel Client membership: this node may send and request on the
    /// Channel, and is never selected as its target.
    #[must_use]
    pub fn channel_client(mut self, name: impl Into<String>) -> Self {
        self.channels.push(ChannelMembership {
            channel_name: name.into(),
            role: ChannelRole::Client,
            weight: 0,
        });
        self
    }
}

/// `0.0.0.0` or `::` (glossary §9 "Wildcard address").
pub fn is_wildcard(host: &str) -> bool {
    matches!(host, "0.0.0.0" | "::" | "[::]" | "*")
}

/// A configuration the node refuses to start with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MeshConfigError {
    /// A setting is out of range.
    #[error("invalid mesh configuration {field}: {reason}")]
    Invalid {
        /// The setting.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Two handlers for the same (namespace, message kind, packet name).
    #[error("duplicate handler for {kind} {packet_name:?} in namespace {namespace:?}")]
    DuplicateHandler {
        /// Namespace (MeshName for node direct).
        namespace: String,
        /// Message kind.
        kind: &'static str,
        /// Packet name.
        packet_name: String,
    },
    /// Automatic RID claim found the RID active elsewhere (glossary §9 `RoutingIdConflict`).
    #[error("routing id conflict: {0} is claimed by another live owner")]
    RoutingIdConflict(String),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cfg() -> MeshNodeConfig {
        MeshNodeConfig::new("m", MeshSecret::from_bytes(b"0123456789abcdef").unwrap())
    }

    fn field_of(c: &MeshNodeConfig) -> &'static str {
        match c.validate().unwrap_err() {
            MeshConfigError::Invalid { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        cfg().validate().unwrap();
    }

    #[test]
    fn a_wildcard_bind_needs_a_dialable_advertise_host() {
        let mut c = cfg();
        c.bind_host = "0.0.0.0".into();
        assert_eq!(field_of(&c), "advertise_host");
        c.advertise_host = Some("::".into());
        assert_eq!(field_of(&c), "advertise_host");
        c.advertise_host = Some("10.1.2.3".into());
        c.validate().unwrap();
    }

    #[test]
    fn out_of_range_settings_name_their_field() {
        let mut c = cfg();
        c.placement_weight = 10_001;
        assert_eq!(field_of(&c), "placement_weight");
        let mut c = cfg();
        c.rid = RidConfig::Automatic {
            prefix: "bad prefix".into(),
        };
        assert_eq!(field_of(&c), "rid.prefix");
        let mut c = cfg();
        c.timings.liveness_deadline = c.timings.probe_interval;
        assert_eq!(field_of(&c), "timings");
        let mut c = cfg();
        c.timings.lease_renew = c.timings.lease_ttl;
        assert_eq!(field_of(&c), "timings");
        let mut c = cfg();
        c.manual_peers.push(ManualPeer {
            endpoint: "udp://x:1".into(),
            expected_rid: None,
        });
        assert_eq!(field_of(&c), "manual_peers.endpoint");
        let mut c = cfg();
        c.flow.window_bytes = 10;
        assert_eq!(field_of(&c), "flow.window_bytes");
        let mut c = cfg();
        c.mesh_name = String::new();
        assert_eq!(field_of(&c), "mesh_name");
    }
}
