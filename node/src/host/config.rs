//! The host configuration of `zlink-node run`: a YAML file, every field overridable by a
//! `ZLINK_*` environment variable, validated at startup with errors that name the field and
//! its allowed range (issue 8, item 1; defaults from [`zlink::config::defaults`] and
//! `/work/shared/DESIGN.md`).
//!
//! The environment variable of a field is `ZLINK_` followed by its dotted path in upper case
//! with `.` replaced by `_`: `mesh.name` → `ZLINK_MESH_NAME`, `admin.grpc_listen` →
//! `ZLINK_ADMIN_GRPC_LISTEN`, `timings.lease_ttl_ms` → `ZLINK_TIMINGS_LEASE_TTL_MS`
//! ([`env_var_of`]). An empty value clears an optional field. `mesh.channels` takes a list
//! `name:role[:weight],…` (for example `chat:server:100,ops:client`). Secrets are never part of
//! the file: the mesh secret is read from `mesh.secret_file` or the variable named by
//! `mesh.secret_env` (default `ZLINK_MESH_SECRET`), the admin token from `admin.token_file` or
//! the variable named by `admin.token_env` (default `ZLINK_ADMIN_TOKEN`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use zlink_protocol::generated::{ChannelMembership, ChannelRole, ObjectRole};

use zlink::config::defaults;
use zlink::mesh::MeshNodeConfig;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::config::{MeshTimings, RidConfig};

/// Longest accepted interval or deadline (one hour), in milliseconds.
pub const MAX_INTERVAL_MS: u64 = 3_600_000;

/// A configuration that cannot be used. Every variant names the field (its dotted YAML path)
/// so an operator finds it in the file or the environment.
#[derive(Debug, Error)]
pub enum HostConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid YAML for this schema (unknown field, wrong type, value out of the
    /// field type's range). The message names the field path and line.
    #[error("configuration file {path}: {message}")]
    Parse {
        /// The file (or `<inline>`).
        path: String,
        /// The parser's message, with the field path.
        message: String,
    },
    /// An environment variable did not parse as its field's type.
    #[error("{var} (field {field}): {reason}")]
    Env {
        /// The variable.
        var: String,
        /// The field it overrides.
        field: &'static str,
        /// Why it did not parse.
        reason: String,
    },
    /// A field's value is outside its allowed range.
    #[error("{field} = {value}: must be {allowed}")]
    Invalid {
        /// The field (dotted path).
        field: &'static str,
        /// The offending value, as configured.
        value: String,
        /// The allowed range or form.
        allowed: String,
    },
    /// A secret (mesh secret or admin token) could not be loaded.
    #[error("{field}: {reason}")]
    Secret {
        /// `mesh.secret_file` / `mesh.secret_env` / `admin.token_file` / `admin.token_env`.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

impl HostConfigError {
    /// The field the error is about (`None` for a file that could not be read).
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Read { .. } | Self::Parse { .. } => None,
            Self::Env { field, .. } | Self::Invalid { field, .. } | Self::Secret { field, .. } => {
                Some(field)
            }
        }
    }
}

/// One Channel membership of the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    /// The RouteMesh Channel name (1..=255 bytes).
    pub name: String,
    /// `server` or `client`.
    pub role: String,
    /// Selection weight of a Server membership, 0..=10000 (default 100; ignored for clients).
    #[serde(default = "default_weight")]
    pub weight: u16,
}

fn default_weight() -> u16 {
    defaults::DEFAULT_WEIGHT
}

/// `mesh:` — the MeshNode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeshSection {
    /// The RouteMesh to join (1..=255 bytes).
    pub name: String,
    /// A fixed RID; `None` (default) issues `<rid_prefix>-<uuid>` per lifecycle.
    pub rid: Option<String>,
    /// Prefix of the automatic RID.
    pub rid_prefix: String,
    /// Interface to bind.
    pub bind_host: String,
    /// Address peers dial; required when `bind_host` is a wildcard.
    pub advertise_host: Option<String>,
    /// Mesh port (0 = ephemeral).
    pub port: u16,
    /// The port peers dial, when it is not `port` (a port forward or a proxy in front of the
    /// node); unset advertises the bound port.
    pub advertise_port: Option<u16>,
    /// File holding the mesh secret (a mounted Kubernetes Secret); wins over `secret_env`.
    pub secret_file: Option<PathBuf>,
    /// Environment variable holding the mesh secret.
    pub secret_env: String,
    /// Channel memberships.
    pub channels: Vec<ChannelConfig>,
}

impl Default for MeshSection {
    fn default() -> Self {
        Self {
            name: "default".into(),
            rid: None,
            rid_prefix: "node".into(),
            bind_host: "127.0.0.1".into(),
            advertise_host: None,
            port: 0,
            advertise_port: None,
            secret_file: None,
            secret_env: "ZLINK_MESH_SECRET".into(),
            channels: Vec::new(),
        }
    }
}

/// `redis:` — the Location Store (required by `run`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSection {
    /// `redis://…`, `rediss://…` or `unix://…` (required).
    pub url: String,
    /// Key namespace (non-empty, no `{` or `}`).
    pub namespace: String,
    /// Reply timeout of one store call.
    pub response_timeout_ms: u64,
    /// Timeout of one connection attempt.
    pub connection_timeout_ms: u64,
}

impl Default for RedisSection {
    fn default() -> Self {
        Self {
            url: String::new(),
            namespace: "zlink".into(),
            response_timeout_ms: 2_000,
            connection_timeout_ms: 2_000,
        }
    }
}

/// `objects:` — the object runtime hosting the reference application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObjectsSection {
    /// `server` (hosts objects), `client` (calls them only) or `none`.
    pub role: String,
    /// Placement weight, 0..=10000 (0: no new objects placed here).
    pub placement_weight: u16,
    /// Period of a room's housekeeping timer.
    pub room_tick_ms: u64,
    /// Actors this host holds at most (0: unlimited): creations beyond it are refused
    /// (`Rejected`) and relocations bring no more (peers skip it; its Prepare refuses).
    pub capacity_actors: u32,
    /// User and Instance Spots this host holds at most (0: unlimited; its Entry Spot is not
    /// counted).
    pub capacity_spots: u32,
}

impl HostConfig {
    /// The capacity limits of `objects.capacity_*` (0 = unlimited).
    pub fn capacity_limits(&self) -> zlink_store::types::CapacityLimits {
        zlink_store::types::CapacityLimits {
            actors: self.objects.capacity_actors,
            spots: self.objects.capacity_spots,
        }
    }
}

impl Default for ObjectsSection {
    fn default() -> Self {
        Self {
            role: "server".into(),
            placement_weight: defaults::DEFAULT_WEIGHT,
            room_tick_ms: 100,
            capacity_actors: 0,
            capacity_spots: 0,
        }
    }
}

/// `relocation:` — moving this host's objects away (issue 17; glossary §5 "Relocation").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelocationSection {
    /// What SIGTERM, SIGINT and an admin `Shutdown` without `relocate_first` do before the
    /// drain: `planned_maintenance` (relocate every unit, wait for SafeToShutdown) or `none`.
    pub on_shutdown: String,
    /// How long the relocation before a drain may take.
    pub shutdown_deadline_ms: u64,
    /// The default deadline of an admin `Relocate`.
    pub deadline_ms: u64,
    /// How long a target retries its commit after a Prepare (`relocation.restore_timeout_ms`).
    pub restore_timeout_ms: u64,
    /// `RelocationCutoverWaitTimeout`: the target's fallback after Ready, and the source's
    /// retransmission window after its cutover.
    pub cutover_wait_ms: u64,
    /// `MessageFollowDuration`: how long an old owner follows arrivals to the new one (0: off).
    pub message_follow_ms: u64,
    /// `RelocationPayloadChunkLimit`: the largest state chunk sent, in bytes.
    pub chunk_limit_bytes: u64,
    /// `RelocationInFlightPayloadBudget`: relocation payload bytes in flight to one target
    /// before a further unit waits to seal (0: off).
    pub in_flight_budget_bytes: u64,
    /// `RelocationNodeInFlightPayloadBudget`: the same over all targets (0: off, the default).
    pub node_in_flight_budget_bytes: u64,
    /// This host's maintenance wave (empty: none); units never move to a host of the same wave.
    pub maintenance_wave: String,
    /// How long a cached route lives (routing §2.2); with Message Follow on it must be at least
    /// 5 s shorter than `message_follow_ms`, so a cached route to an old owner expires before
    /// the detour closes.
    pub route_cache_max_age_ms: u64,
    /// How long the terminal root of a unit's carried requests stays in the Relocation Store
    /// (a `ForceStopped` one is kept that long; issue 17 item 9).
    pub terminal_retention_ms: u64,
}

impl Default for RelocationSection {
    fn default() -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            on_shutdown: "planned_maintenance".into(),
            shutdown_deadline_ms: 30_000,
            deadline_ms: 60_000,
            restore_timeout_ms: 10_000,
            cutover_wait_ms: ms(defaults::RELOCATION_CUTOVER_WAIT_TIMEOUT),
            message_follow_ms: ms(defaults::MESSAGE_FOLLOW_DURATION),
            chunk_limit_bytes: defaults::RELOCATION_PAYLOAD_CHUNK_LIMIT,
            in_flight_budget_bytes: defaults::RELOCATION_IN_FLIGHT_PAYLOAD_BUDGET,
            node_in_flight_budget_bytes: 0,
            maintenance_wave: String::new(),
            route_cache_max_age_ms: ms(defaults::ROUTE_CACHE_MAX_AGE),
            terminal_retention_ms: ms(defaults::TERMINAL_RETENTION),
        }
    }
}

/// `stream:` — the StreamNode that accepts game clients over TCP (issue 19 item 1; glossary
/// §10 "STREAM session", §6 "MaxMessageSize"). Off unless `listen` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamSection {
    /// Listen address (`ip:port`, port 0 = ephemeral); empty or absent: no StreamNode.
    pub listen: Option<String>,
    /// Inbound limit of one packet, header + payload, in bytes: 65,536 by default, 0 =
    /// unlimited, negative = a startup error.
    pub max_message_size: i64,
    /// Sessions at once; a connection beyond is closed and counted.
    pub max_connections: u64,
    /// A session that sends nothing this long is closed (`Idle`).
    pub idle_timeout_ms: u64,
    /// Output a client has not read beyond this closes its session (`SlowConsumer`).
    pub outbound_buffer_bytes: u64,
    /// A request without a terminal this long is answered `DeadlineExceeded`.
    pub request_timeout_ms: u64,
    /// **(ours)** The reference application's session token key (≥ 16 bytes): set, every
    /// session must log in (`chat.Login` / `refapp.Bind`) with a token for its user
    /// (`zlink-node session-token`); absent, sessions are not authenticated.
    pub auth_key: Option<String>,
}

impl Default for StreamSection {
    fn default() -> Self {
        Self {
            listen: None,
            max_message_size: defaults::STREAM_MAX_MESSAGE_SIZE as i64,
            max_connections: zlink::session::StreamConfig::DEFAULT_MAX_CONNECTIONS as u64,
            idle_timeout_ms: ms(zlink::session::SessionConfig::DEFAULT_IDLE_TIMEOUT),
            outbound_buffer_bytes: zlink::session::SessionConfig::DEFAULT_OUTBOUND_BUFFER_BYTES
                as u64,
            request_timeout_ms: ms(zlink::session::SessionConfig::DEFAULT_REQUEST_TIMEOUT),
            auth_key: None,
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `timings:` — every interval and deadline, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimingsSection {
    /// Liveness probe interval (wire §5).
    pub probe_interval_ms: u64,
    /// Liveness deadline (wire §5); longer than the probe interval.
    pub liveness_deadline_ms: u64,
    /// Owner lease TTL.
    pub lease_ttl_ms: u64,
    /// Lease renewal period; `None` = a third of the TTL.
    pub lease_renew_ms: Option<u64>,
    /// Fencing margin (glossary §8); `None` = the spec default 2 s, capped at a fifth of the
    /// TTL for short test leases.
    pub fencing_margin_ms: Option<u64>,
    /// Descriptor poll (and lease renewal tick) period.
    pub discovery_poll_ms: u64,
    /// How often the host recomputes its status for `WatchStatus` (state changes are pushed at
    /// once regardless).
    pub status_poll_ms: u64,
    /// How long a drain keeps serving after announcing `Draining` before it counts in-flight
    /// work and stops: peers that picked this host just before the announcement reach it.
    pub drain_seal_ms: u64,
}

impl Default for TimingsSection {
    fn default() -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let t = MeshTimings::default();
        Self {
            probe_interval_ms: ms(defaults::LIVENESS_PROBE_INTERVAL),
            liveness_deadline_ms: ms(defaults::LIVENESS_DEADLINE),
            lease_ttl_ms: ms(t.lease_ttl),
            lease_renew_ms: None,
            fencing_margin_ms: None,
            discovery_poll_ms: ms(t.discovery_poll),
            status_poll_ms: 250,
            drain_seal_ms: 1_000,
        }
    }
}

/// `admin:` — the gRPC HostAdmin service and the HTTP endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    /// gRPC listen address (`host:port`, port 0 = ephemeral).
    pub grpc_listen: String,
    /// HTTP listen address for `/healthz`, `/readyz`, `/metrics`.
    pub http_listen: String,
    /// File holding the bearer token (a mounted Kubernetes Secret); wins over `token_env`.
    pub token_file: Option<PathBuf>,
    /// Environment variable holding the bearer token.
    pub token_env: String,
}

impl Default for AdminSection {
    fn default() -> Self {
        Self {
            grpc_listen: "127.0.0.1:7070".into(),
            http_listen: "127.0.0.1:9090".into(),
            token_file: None,
            token_env: "ZLINK_ADMIN_TOKEN".into(),
        }
    }
}

/// The whole host configuration (see the [module documentation](self)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// The MeshNode.
    pub mesh: MeshSection,
    /// The Location Store.
    pub redis: RedisSection,
    /// The object runtime.
    pub objects: ObjectsSection,
    /// Intervals and deadlines.
    pub timings: TimingsSection,
    /// Admin API and HTTP endpoints.
    pub admin: AdminSection,
    /// Relocation.
    pub relocation: RelocationSection,
    /// Client STREAM sessions.
    pub stream: StreamSection,
    /// How long a shutdown (SIGTERM, SIGINT or `Shutdown` without a deadline) may take before
    /// the host force-stops: the relocation first (`relocation.on_shutdown`), the wait for
    /// SafeToShutdown, then the drain of accepted work. The default (95 s) covers the defaults
    /// of the three (30 s + 31 s + 30 s); a pod's `terminationGracePeriodSeconds` must exceed it.
    pub drain_deadline_ms: u64,
    /// Application version announced in the descriptor (rollout ordering).
    pub application_version: u64,
    /// `error`, `warn`, `info`, `debug` or `trace` (logs go to stderr).
    pub log_level: String,
    /// What the host does once its owner lease is lost for good (a store outage longer than
    /// the lease, a process stopped past it): `rejoin` (the default) drops the fenced objects
    /// and claims a new lease as a new node lifecycle, serving again without a restart;
    /// `exit` ends the process with status 4 so its supervisor restarts it (issue 20).
    pub lease_loss: String,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            mesh: MeshSection::default(),
            redis: RedisSection::default(),
            objects: ObjectsSection::default(),
            timings: TimingsSection::default(),
            admin: AdminSection::default(),
            relocation: RelocationSection::default(),
            stream: StreamSection::default(),
            drain_deadline_ms: 95_000,
            application_version: 0,
            log_level: "info".into(),
            lease_loss: "rejoin".into(),
        }
    }
}

/// Every field that an environment variable overrides, as dotted paths.
pub const FIELDS: &[&str] = &[
    "mesh.name",
    "mesh.rid",
    "mesh.rid_prefix",
    "mesh.bind_host",
    "mesh.advertise_host",
    "mesh.port",
    "mesh.advertise_port",
    "mesh.secret_file",
    "mesh.secret_env",
    "mesh.channels",
    "redis.url",
    "redis.namespace",
    "redis.response_timeout_ms",
    "redis.connection_timeout_ms",
    "objects.role",
    "objects.placement_weight",
    "objects.room_tick_ms",
    "objects.capacity_actors",
    "objects.capacity_spots",
    "timings.probe_interval_ms",
    "timings.liveness_deadline_ms",
    "timings.lease_ttl_ms",
    "timings.lease_renew_ms",
    "timings.fencing_margin_ms",
    "timings.discovery_poll_ms",
    "timings.status_poll_ms",
    "timings.drain_seal_ms",
    "admin.grpc_listen",
    "admin.http_listen",
    "admin.token_file",
    "admin.token_env",
    "relocation.on_shutdown",
    "relocation.shutdown_deadline_ms",
    "relocation.deadline_ms",
    "relocation.restore_timeout_ms",
    "relocation.cutover_wait_ms",
    "relocation.message_follow_ms",
    "relocation.chunk_limit_bytes",
    "relocation.in_flight_budget_bytes",
    "relocation.node_in_flight_budget_bytes",
    "relocation.maintenance_wave",
    "relocation.route_cache_max_age_ms",
    "relocation.terminal_retention_ms",
    "stream.listen",
    "stream.max_message_size",
    "stream.max_connections",
    "stream.idle_timeout_ms",
    "stream.outbound_buffer_bytes",
    "stream.request_timeout_ms",
    "stream.auth_key",
    "drain_deadline_ms",
    "application_version",
    "log_level",
    "lease_loss",
];

/// The environment variable overriding `field` (`mesh.name` → `ZLINK_MESH_NAME`).
pub fn env_var_of(field: &str) -> String {
    format!("ZLINK_{}", field.to_ascii_uppercase().replace('.', "_"))
}

fn parse_num<T: std::str::FromStr>(
    var: &str,
    field: &'static str,
    raw: &str,
) -> Result<T, HostConfigError>
where
    T::Err: std::fmt::Display,
{
    raw.trim()
        .parse()
        .map_err(|e: T::Err| HostConfigError::Env {
            var: var.to_owned(),
            field,
            reason: format!("{raw:?} is not a valid number: {e}"),
        })
}

fn opt_string(raw: &str) -> Option<String> {
    (!raw.is_empty()).then(|| raw.to_owned())
}

/// Parse `name:role[:weight],…` (the `ZLINK_MESH_CHANNELS` form).
///
/// # Errors
/// [`HostConfigError::Env`] naming `mesh.channels`.
pub fn parse_channels(var: &str, raw: &str) -> Result<Vec<ChannelConfig>, HostConfigError> {
    let mut out = Vec::new();
    for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        let bad = |reason: String| HostConfigError::Env {
            var: var.to_owned(),
            field: "mesh.channels",
            reason,
        };
        let (name, role, weight) = match parts.as_slice() {
            [name, role] => (*name, *role, defaults::DEFAULT_WEIGHT),
            [name, role, weight] => (
                *name,
                *role,
                weight
                    .parse()
                    .map_err(|e| bad(format!("weight {weight:?} in {item:?}: {e}")))?,
            ),
            _ => return Err(bad(format!("{item:?} is not name:role[:weight]"))),
        };
        out.push(ChannelConfig {
            name: name.to_owned(),
            role: role.to_owned(),
            weight,
        });
    }
    Ok(out)
}

impl HostConfig {
    /// Parse YAML text (`origin` names it in errors). Unknown fields are errors.
    ///
    /// # Errors
    /// [`HostConfigError::Parse`] with the field path the parser reports.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, HostConfigError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_norway::from_str(text).map_err(|e| HostConfigError::Parse {
            path: origin.to_owned(),
            message: e.to_string(),
        })
    }

    /// Read and parse a YAML file.
    ///
    /// # Errors
    /// [`HostConfigError::Read`] or [`HostConfigError::Parse`].
    pub fn from_file(path: &std::path::Path) -> Result<Self, HostConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| HostConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    /// Load: the file (if any), then the environment overrides, then [`HostConfig::validate`].
    ///
    /// # Errors
    /// Any [`HostConfigError`].
    pub fn load(
        path: Option<&std::path::Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, HostConfigError> {
        let mut config = match path {
            Some(p) => Self::from_file(p)?,
            None => Self::default(),
        };
        config.apply_env(env)?;
        config.validate()?;
        Ok(config)
    }

    /// Apply every `ZLINK_*` override that `env` returns (pass `|k| std::env::var(k).ok()` for
    /// the process environment).
    ///
    /// # Errors
    /// [`HostConfigError::Env`] for a value that does not parse as its field's type.
    pub fn apply_env(
        &mut self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(), HostConfigError> {
        for &field in FIELDS {
            let var = env_var_of(field);
            if let Some(raw) = env(&var) {
                self.set_field(&var, field, &raw)?;
            }
        }
        Ok(())
    }

    fn set_field(
        &mut self,
        var: &str,
        field: &'static str,
        raw: &str,
    ) -> Result<(), HostConfigError> {
        match field {
            "mesh.name" => raw.clone_into(&mut self.mesh.name),
            "mesh.rid" => self.mesh.rid = opt_string(raw),
            "mesh.rid_prefix" => raw.clone_into(&mut self.mesh.rid_prefix),
            "mesh.bind_host" => raw.clone_into(&mut self.mesh.bind_host),
            "mesh.advertise_host" => self.mesh.advertise_host = opt_string(raw),
            "mesh.port" => self.mesh.port = parse_num(var, field, raw)?,
            "mesh.advertise_port" => {
                self.mesh.advertise_port = match raw {
                    "" => None,
                    v => Some(parse_num(var, field, v)?),
                }
            }
            "mesh.secret_file" => self.mesh.secret_file = opt_string(raw).map(PathBuf::from),
            "mesh.secret_env" => raw.clone_into(&mut self.mesh.secret_env),
            "mesh.channels" => self.mesh.channels = parse_channels(var, raw)?,
            "redis.url" => raw.clone_into(&mut self.redis.url),
            "redis.namespace" => raw.clone_into(&mut self.redis.namespace),
            "redis.response_timeout_ms" => {
                self.redis.response_timeout_ms = parse_num(var, field, raw)?;
            }
            "redis.connection_timeout_ms" => {
                self.redis.connection_timeout_ms = parse_num(var, field, raw)?;
            }
            "objects.role" => raw.clone_into(&mut self.objects.role),
            "objects.placement_weight" => {
                self.objects.placement_weight = parse_num(var, field, raw)?;
            }
            "objects.room_tick_ms" => self.objects.room_tick_ms = parse_num(var, field, raw)?,
            "objects.capacity_actors" => {
                self.objects.capacity_actors = parse_num(var, field, raw)?;
            }
            "objects.capacity_spots" => {
                self.objects.capacity_spots = parse_num(var, field, raw)?;
            }
            "timings.probe_interval_ms" => {
                self.timings.probe_interval_ms = parse_num(var, field, raw)?;
            }
            "timings.liveness_deadline_ms" => {
                self.timings.liveness_deadline_ms = parse_num(var, field, raw)?;
            }
            "timings.lease_ttl_ms" => self.timings.lease_ttl_ms = parse_num(var, field, raw)?,
            "timings.lease_renew_ms" => {
                self.timings.lease_renew_ms = match raw {
                    "" => None,
                    r => Some(parse_num(var, field, r)?),
                };
            }
            "timings.fencing_margin_ms" => {
                self.timings.fencing_margin_ms = match raw {
                    "" => None,
                    r => Some(parse_num(var, field, r)?),
                };
            }
            "timings.discovery_poll_ms" => {
                self.timings.discovery_poll_ms = parse_num(var, field, raw)?;
            }
            "timings.status_poll_ms" => self.timings.status_poll_ms = parse_num(var, field, raw)?,
            "timings.drain_seal_ms" => self.timings.drain_seal_ms = parse_num(var, field, raw)?,
            "stream.listen" => self.stream.listen = opt_string(raw),
            "stream.max_message_size" => {
                self.stream.max_message_size = parse_num(var, field, raw)?;
            }
            "stream.max_connections" => {
                self.stream.max_connections = parse_num(var, field, raw)?;
            }
            "stream.idle_timeout_ms" => self.stream.idle_timeout_ms = parse_num(var, field, raw)?,
            "stream.outbound_buffer_bytes" => {
                self.stream.outbound_buffer_bytes = parse_num(var, field, raw)?;
            }
            "stream.request_timeout_ms" => {
                self.stream.request_timeout_ms = parse_num(var, field, raw)?;
            }
            "stream.auth_key" => self.stream.auth_key = opt_string(raw),
            "admin.grpc_listen" => raw.clone_into(&mut self.admin.grpc_listen),
            "admin.http_listen" => raw.clone_into(&mut self.admin.http_listen),
            "admin.token_file" => self.admin.token_file = opt_string(raw).map(PathBuf::from),
            "admin.token_env" => raw.clone_into(&mut self.admin.token_env),
            "relocation.on_shutdown" => raw.clone_into(&mut self.relocation.on_shutdown),
            "relocation.shutdown_deadline_ms" => {
                self.relocation.shutdown_deadline_ms = parse_num(var, field, raw)?;
            }
            "relocation.deadline_ms" => self.relocation.deadline_ms = parse_num(var, field, raw)?,
            "relocation.restore_timeout_ms" => {
                self.relocation.restore_timeout_ms = parse_num(var, field, raw)?;
            }
            "relocation.cutover_wait_ms" => {
                self.relocation.cutover_wait_ms = parse_num(var, field, raw)?;
            }
            "relocation.message_follow_ms" => {
                self.relocation.message_follow_ms = parse_num(var, field, raw)?;
            }
            "relocation.chunk_limit_bytes" => {
                self.relocation.chunk_limit_bytes = parse_num(var, field, raw)?;
            }
            "relocation.in_flight_budget_bytes" => {
                self.relocation.in_flight_budget_bytes = parse_num(var, field, raw)?;
            }
            "relocation.node_in_flight_budget_bytes" => {
                self.relocation.node_in_flight_budget_bytes = parse_num(var, field, raw)?;
            }
            "relocation.maintenance_wave" => {
                raw.clone_into(&mut self.relocation.maintenance_wave);
            }
            "relocation.route_cache_max_age_ms" => {
                self.relocation.route_cache_max_age_ms = parse_num(var, field, raw)?;
            }
            "relocation.terminal_retention_ms" => {
                self.relocation.terminal_retention_ms = parse_num(var, field, raw)?;
            }
            "drain_deadline_ms" => self.drain_deadline_ms = parse_num(var, field, raw)?,
            "application_version" => self.application_version = parse_num(var, field, raw)?,
            "log_level" => raw.clone_into(&mut self.log_level),
            "lease_loss" => raw.clone_into(&mut self.lease_loss),
            other => {
                return Err(HostConfigError::Env {
                    var: var.to_owned(),
                    field: "(unknown)",
                    reason: format!("no field {other}"),
                });
            }
        }
        Ok(())
    }

    /// The effective lease renewal period.
    pub fn lease_renew(&self) -> Duration {
        Duration::from_millis(
            self.timings
                .lease_renew_ms
                .unwrap_or(self.timings.lease_ttl_ms / 3)
                .max(1),
        )
    }

    /// The effective fencing margin.
    pub fn fencing_margin(&self) -> Duration {
        match self.timings.fencing_margin_ms {
            Some(ms) => Duration::from_millis(ms),
            None => Duration::from_millis((self.timings.lease_ttl_ms / 5).max(1))
                .min(defaults::FENCING_MARGIN),
        }
    }

    /// The effective drain deadline.
    pub fn drain_deadline(&self) -> Duration {
        Duration::from_millis(self.drain_deadline_ms)
    }

    /// The object role.
    pub fn object_role(&self) -> ObjectRole {
        match self.objects.role.as_str() {
            "client" => ObjectRole::Client,
            "none" => ObjectRole::None,
            _ => ObjectRole::Server,
        }
    }

    /// The gRPC listen address (valid after [`HostConfig::validate`]).
    ///
    /// # Errors
    /// [`HostConfigError::Invalid`] naming `admin.grpc_listen`.
    pub fn grpc_addr(&self) -> Result<SocketAddr, HostConfigError> {
        parse_addr("admin.grpc_listen", &self.admin.grpc_listen)
    }

    /// The session token key (`stream.auth_key`), if one is configured.
    ///
    /// # Errors
    /// [`HostConfigError::Invalid`] naming `stream.auth_key` when it is shorter than 16 bytes
    /// (its value is not shown).
    pub fn session_key(&self) -> Result<Option<zlink::mesh::auth::MeshSecret>, HostConfigError> {
        match self.stream.auth_key.as_deref().filter(|k| !k.is_empty()) {
            None => Ok(None),
            Some(k) => zlink::mesh::auth::MeshSecret::from_bytes(k.as_bytes())
                .map(Some)
                .map_err(|e| HostConfigError::Invalid {
                    field: "stream.auth_key",
                    value: format!("({} bytes, not shown)", k.len()),
                    allowed: format!("at least 16 bytes ({e})"),
                }),
        }
    }

    /// The StreamNode settings, `None` when `stream.listen` is not set.
    ///
    /// # Errors
    /// [`HostConfigError::Invalid`] naming the `stream.*` field.
    pub fn stream_config(&self) -> Result<Option<zlink::session::StreamConfig>, HostConfigError> {
        let st = &self.stream;
        let Some(listen) = st.listen.as_deref().filter(|l| !l.is_empty()) else {
            return Ok(None);
        };
        let listen = parse_addr("stream.listen", listen)?;
        self.session_key()?;
        let max_message_size = zlink_protocol::stream::MaxMessageSize::new(st.max_message_size)
            .map_err(|e| HostConfigError::Invalid {
                field: "stream.max_message_size",
                value: st.max_message_size.to_string(),
                allowed: format!("0 (unlimited) or a positive byte count ({e})"),
            })?;
        check_range("stream.max_connections", st.max_connections, 1, 1_000_000)?;
        check_range(
            "stream.idle_timeout_ms",
            st.idle_timeout_ms,
            1,
            MAX_INTERVAL_MS,
        )?;
        check_range(
            "stream.outbound_buffer_bytes",
            st.outbound_buffer_bytes,
            1_024,
            1 << 30,
        )?;
        check_range(
            "stream.request_timeout_ms",
            st.request_timeout_ms,
            1,
            MAX_INTERVAL_MS,
        )?;
        Ok(Some(zlink::session::StreamConfig {
            listen,
            max_connections: st.max_connections as usize,
            session: zlink::session::SessionConfig {
                max_message_size,
                idle_timeout: Duration::from_millis(st.idle_timeout_ms),
                outbound_buffer_bytes: st.outbound_buffer_bytes as usize,
                request_timeout: Duration::from_millis(st.request_timeout_ms),
                max_pending_requests: zlink::session::SessionConfig::DEFAULT_MAX_PENDING_REQUESTS,
            },
        }))
    }

    /// The HTTP listen address (valid after [`HostConfig::validate`]).
    ///
    /// # Errors
    /// [`HostConfigError::Invalid`] naming `admin.http_listen`.
    pub fn http_addr(&self) -> Result<SocketAddr, HostConfigError> {
        parse_addr("admin.http_listen", &self.admin.http_listen)
    }

    /// Check every field; the first violation is returned, naming the field and the allowed
    /// range.
    ///
    /// # Errors
    /// [`HostConfigError::Invalid`].
    pub fn validate(&self) -> Result<(), HostConfigError> {
        let bad = |field: &'static str, value: &dyn std::fmt::Display, allowed: &str| {
            Err(HostConfigError::Invalid {
                field,
                value: value.to_string(),
                allowed: allowed.to_owned(),
            })
        };
        let m = &self.mesh;
        if m.name.is_empty() || m.name.len() > 255 {
            return bad("mesh.name", &format!("{:?}", m.name), "1..=255 bytes");
        }
        if let Some(rid) = &m.rid
            && let Err(e) = zlink_protocol::ids::validate_rid(rid)
        {
            return bad(
                "mesh.rid",
                &format!("{rid:?}"),
                &format!("a valid RID ({e})"),
            );
        }
        if let Err(e) = zlink_protocol::ids::validate_rid_prefix(&m.rid_prefix) {
            return bad(
                "mesh.rid_prefix",
                &format!("{:?}", m.rid_prefix),
                &format!("a valid RID prefix ({e})"),
            );
        }
        if m.bind_host.is_empty() {
            return bad("mesh.bind_host", &"\"\"", "a non-empty host or address");
        }
        match &m.advertise_host {
            Some(a) if a.is_empty() || zlink::mesh::config::is_wildcard(a) => {
                return bad(
                    "mesh.advertise_host",
                    &format!("{a:?}"),
                    "a concrete, dialable host (not a wildcard)",
                );
            }
            None if zlink::mesh::config::is_wildcard(&m.bind_host) => {
                return bad(
                    "mesh.advertise_host",
                    &"(unset)",
                    "set when mesh.bind_host is a wildcard",
                );
            }
            _ => {}
        }
        if let Some(p) = m.advertise_port {
            check_range("mesh.advertise_port", u64::from(p), 1, 65_535)?;
        }
        if m.secret_file.is_none() && m.secret_env.is_empty() {
            return bad(
                "mesh.secret_env",
                &"\"\"",
                "a variable name when mesh.secret_file is unset",
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &m.channels {
            if c.name.is_empty() || c.name.len() > 255 {
                return bad(
                    "mesh.channels",
                    &format!("{:?}", c.name),
                    "names of 1..=255 bytes",
                );
            }
            if !seen.insert(c.name.as_str()) {
                return bad(
                    "mesh.channels",
                    &format!("{:?}", c.name),
                    "each channel once",
                );
            }
            if c.role != "server" && c.role != "client" {
                return bad(
                    "mesh.channels",
                    &format!("role {:?}", c.role),
                    "server or client",
                );
            }
            if c.weight > defaults::MAX_WEIGHT {
                return bad(
                    "mesh.channels",
                    &format!("weight {}", c.weight),
                    "0..=10000",
                );
            }
        }
        let r = &self.redis;
        if !(r.url.starts_with("redis://")
            || r.url.starts_with("rediss://")
            || r.url.starts_with("unix://"))
        {
            return bad(
                "redis.url",
                &format!("{:?}", r.url),
                "a redis://, rediss:// or unix:// URL (required by run)",
            );
        }
        if r.namespace.is_empty() || r.namespace.contains(['{', '}']) {
            return bad(
                "redis.namespace",
                &format!("{:?}", r.namespace),
                "non-empty, without { or }",
            );
        }
        check_range(
            "redis.response_timeout_ms",
            r.response_timeout_ms,
            1,
            60_000,
        )?;
        check_range(
            "redis.connection_timeout_ms",
            r.connection_timeout_ms,
            1,
            60_000,
        )?;
        let o = &self.objects;
        if !["server", "client", "none"].contains(&o.role.as_str()) {
            return bad(
                "objects.role",
                &format!("{:?}", o.role),
                "server, client or none",
            );
        }
        if o.placement_weight > defaults::MAX_WEIGHT {
            return bad("objects.placement_weight", &o.placement_weight, "0..=10000");
        }
        check_range("objects.room_tick_ms", o.room_tick_ms, 1, MAX_INTERVAL_MS)?;
        let t = &self.timings;
        check_range(
            "timings.probe_interval_ms",
            t.probe_interval_ms,
            1,
            MAX_INTERVAL_MS,
        )?;
        check_range(
            "timings.liveness_deadline_ms",
            t.liveness_deadline_ms,
            t.probe_interval_ms.saturating_add(1),
            MAX_INTERVAL_MS,
        )?;
        check_range("timings.lease_ttl_ms", t.lease_ttl_ms, 100, MAX_INTERVAL_MS)?;
        let margin = u64::try_from(self.fencing_margin().as_millis()).unwrap_or(u64::MAX);
        if let Some(fm) = t.fencing_margin_ms {
            check_range("timings.fencing_margin_ms", fm, 1, t.lease_ttl_ms / 2)?;
        }
        // The configured value itself (an unset one is a third of the TTL).
        let renew = t.lease_renew_ms.unwrap_or(t.lease_ttl_ms / 3);
        let renew_max = t.lease_ttl_ms.saturating_sub(margin).saturating_sub(1);
        check_range("timings.lease_renew_ms", renew, 1, renew_max)?;
        check_range("timings.discovery_poll_ms", t.discovery_poll_ms, 1, renew)?;
        check_range("timings.status_poll_ms", t.status_poll_ms, 10, 60_000)?;
        let grpc = self.grpc_addr()?;
        let http = self.http_addr()?;
        if grpc == http && grpc.port() != 0 {
            return bad(
                "admin.http_listen",
                &self.admin.http_listen,
                "a different address than admin.grpc_listen",
            );
        }
        if self.admin.token_file.is_none() && self.admin.token_env.is_empty() {
            return bad(
                "admin.token_env",
                &"\"\"",
                "a variable name when admin.token_file is unset",
            );
        }
        check_range(
            "drain_deadline_ms",
            self.drain_deadline_ms,
            1,
            MAX_INTERVAL_MS,
        )?;
        if !["rejoin", "exit"].contains(&self.lease_loss.as_str()) {
            return bad(
                "lease_loss",
                &format!("{:?}", self.lease_loss),
                "rejoin or exit",
            );
        }
        let r = &self.relocation;
        if !["planned_maintenance", "none"].contains(&r.on_shutdown.as_str()) {
            return bad(
                "relocation.on_shutdown",
                &format!("{:?}", r.on_shutdown),
                "planned_maintenance or none",
            );
        }
        check_range(
            "relocation.shutdown_deadline_ms",
            r.shutdown_deadline_ms,
            1,
            MAX_INTERVAL_MS,
        )?;
        check_range("relocation.deadline_ms", r.deadline_ms, 1, MAX_INTERVAL_MS)?;
        check_range(
            "relocation.restore_timeout_ms",
            r.restore_timeout_ms,
            100,
            MAX_INTERVAL_MS,
        )?;
        check_range("relocation.cutover_wait_ms", r.cutover_wait_ms, 10, 60_000)?;
        check_range(
            "relocation.message_follow_ms",
            r.message_follow_ms,
            0,
            MAX_INTERVAL_MS,
        )?;
        check_range(
            "relocation.chunk_limit_bytes",
            r.chunk_limit_bytes,
            1_024,
            16 * 1024 * 1024,
        )?;
        for (field, v) in [
            (
                "relocation.in_flight_budget_bytes",
                r.in_flight_budget_bytes,
            ),
            (
                "relocation.node_in_flight_budget_bytes",
                r.node_in_flight_budget_bytes,
            ),
        ] {
            if v != 0 && !(1_024..=1 << 40).contains(&v) {
                return Err(HostConfigError::Invalid {
                    field,
                    value: v.to_string(),
                    allowed: "0 (off) or 1024..=1099511627776".into(),
                });
            }
        }
        check_range(
            "relocation.route_cache_max_age_ms",
            r.route_cache_max_age_ms,
            0,
            MAX_INTERVAL_MS,
        )?;
        check_range(
            "relocation.terminal_retention_ms",
            r.terminal_retention_ms,
            1,
            MAX_INTERVAL_MS,
        )?;
        if r.maintenance_wave.len() > 255 {
            return bad(
                "relocation.maintenance_wave",
                &format!("{:?}", r.maintenance_wave),
                "at most 255 bytes",
            );
        }
        if let Err(e) = zlink::config::validate_route_cache_vs_follow(
            Duration::from_millis(r.route_cache_max_age_ms),
            Duration::from_millis(r.message_follow_ms),
        ) {
            return bad(
                "relocation.route_cache_max_age_ms",
                &r.route_cache_max_age_ms,
                &e.to_string(),
            );
        }
        self.stream_config()?;
        // The drain uses at most half the deadline for the seal, whatever is configured.
        check_range("timings.drain_seal_ms", t.drain_seal_ms, 0, 60_000)?;
        if !["error", "warn", "info", "debug", "trace"].contains(&self.log_level.as_str()) {
            return bad(
                "log_level",
                &format!("{:?}", self.log_level),
                "error, warn, info, debug or trace",
            );
        }
        Ok(())
    }

    /// The mesh secret from `mesh.secret_file` or the variable named by `mesh.secret_env`.
    ///
    /// # Errors
    /// [`HostConfigError::Secret`].
    pub fn mesh_secret(&self) -> Result<MeshSecret, HostConfigError> {
        match &self.mesh.secret_file {
            Some(p) => MeshSecret::from_file(p).map_err(|e| HostConfigError::Secret {
                field: "mesh.secret_file",
                reason: e.to_string(),
            }),
            None => {
                MeshSecret::from_env(&self.mesh.secret_env).map_err(|e| HostConfigError::Secret {
                    field: "mesh.secret_env",
                    reason: e.to_string(),
                })
            }
        }
    }

    /// The admin bearer token from `admin.token_file` or the variable named by
    /// `admin.token_env` (surrounding whitespace trimmed; at least 16 bytes).
    ///
    /// # Errors
    /// [`HostConfigError::Secret`].
    pub fn admin_token(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<String, HostConfigError> {
        let (field, raw) = match &self.admin.token_file {
            Some(p) => (
                "admin.token_file",
                std::fs::read_to_string(p).map_err(|e| HostConfigError::Secret {
                    field: "admin.token_file",
                    reason: format!("cannot read {}: {e}", p.display()),
                })?,
            ),
            None => (
                "admin.token_env",
                env(&self.admin.token_env).ok_or_else(|| HostConfigError::Secret {
                    field: "admin.token_env",
                    reason: format!("variable {} is not set", self.admin.token_env),
                })?,
            ),
        };
        let token = raw.trim().to_owned();
        if token.len() < 16 {
            return Err(HostConfigError::Secret {
                field,
                reason: "the admin token must be at least 16 bytes".into(),
            });
        }
        Ok(token)
    }

    /// The MeshNode configuration this host config describes (with `secret`).
    pub fn mesh_node_config(&self, secret: MeshSecret) -> MeshNodeConfig {
        let mut cfg = MeshNodeConfig::new(self.mesh.name.clone(), secret);
        cfg.rid = match &self.mesh.rid {
            Some(rid) => RidConfig::Fixed(rid.clone()),
            None => RidConfig::Automatic {
                prefix: self.mesh.rid_prefix.clone(),
            },
        };
        cfg.bind_host.clone_from(&self.mesh.bind_host);
        cfg.advertise_host.clone_from(&self.mesh.advertise_host);
        cfg.port = self.mesh.port;
        cfg.advertise_port = self.mesh.advertise_port;
        cfg.object_role = self.object_role();
        cfg.application_version = self.application_version;
        cfg.placement_weight = self.objects.placement_weight;
        cfg.maintenance_wave
            .clone_from(&self.relocation.maintenance_wave);
        cfg.channels = self
            .mesh
            .channels
            .iter()
            .map(|c| ChannelMembership {
                channel_name: c.name.clone(),
                role: if c.role == "server" {
                    ChannelRole::Server
                } else {
                    ChannelRole::Client
                },
                weight: if c.role == "server" { c.weight } else { 0 },
            })
            .collect();
        let t = &self.timings;
        cfg.timings.probe_interval = Duration::from_millis(t.probe_interval_ms);
        cfg.timings.liveness_deadline = Duration::from_millis(t.liveness_deadline_ms);
        cfg.timings.discovery_poll = Duration::from_millis(t.discovery_poll_ms);
        cfg.timings.lease_ttl = Duration::from_millis(t.lease_ttl_ms);
        cfg.timings.lease_renew = self.lease_renew();
        cfg.timings.fencing_margin = self.fencing_margin();
        cfg
    }
}

fn check_range(field: &'static str, v: u64, lo: u64, hi: u64) -> Result<(), HostConfigError> {
    if v < lo || v > hi {
        return Err(HostConfigError::Invalid {
            field,
            value: v.to_string(),
            allowed: format!("{lo}..={hi}"),
        });
    }
    Ok(())
}

fn parse_addr(field: &'static str, raw: &str) -> Result<SocketAddr, HostConfigError> {
    raw.parse().map_err(|_| HostConfigError::Invalid {
        field,
        value: format!("{raw:?}"),
        allowed: "an ip:port socket address (port 0 = ephemeral)".into(),
    })
}
