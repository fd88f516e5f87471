//! The node host behind `zlink-node run` (issue 8): one MeshNode plus an object runtime hosting
//! an application's object types (a [`Registry`]: the reference application
//! [`crate::refapp::registry`] in `zlink-node run`, a user's own in their own binary, see
//! [`main`]) on Redis, the gRPC `HostAdmin`
//! service with the standard health service ([`admin`]), the HTTP `/healthz`, `/readyz` and
//! `/metrics` endpoints ([`http`], [`metrics`]), and graceful shutdown (glossary §5 "Drain과
//! draining", "Drain deadline").
//!
//! Lifecycle ([`HostState`]): `Starting` while the store connection, the MeshNode and the
//! object runtime start (the admin and HTTP listeners are already up, so an operator sees
//! `Starting`); `Serving` once the runtime created this lifecycle's Entry Spot; `Draining` on
//! SIGTERM, SIGINT or `Shutdown`; `Stopped` after the owner lease (and with it every descriptor
//! and RID claim of this lifecycle) is released. `Fenced` while a host whose owner lease was
//! lost rejoins as a new node lifecycle ([`recovery`], issue 20: `lease_loss: rejoin`), then
//! `Serving` again; with `lease_loss: exit` it stops with [`EXIT_LEASE_LOST`].
//!
//! Drain: the host seal announces `Draining` in the MeshNode descriptor (an `update` to every
//! peer at once, the store copy on the next discovery poll), so peers stop selecting this host
//! for select-one and placement; the gRPC health status turns `NOT_SERVING` and `/readyz` 503.
//! Accepted work — queued application jobs, this host's outstanding requests and unfinished
//! cold activations — finishes until the drain deadline; then the objects are closed, the
//! MeshNode shuts down (pending requests end `ShuttingDown`) and the lease is released. Work
//! still in flight at the deadline is cut: the count is logged and reported in the exit status
//! (see `docs/operations.md`).
//!
//! Every channel this host serves answers [`Whoami`] with its RID, so an operator (and the
//! tests) can see which host a select-one picks.

pub mod admin;
pub mod config;
pub mod http;
pub mod limits;
pub mod load;
pub mod metrics;
mod process;
pub mod recovery;
pub mod relocate;
mod sessions;

pub use process::{
    EXIT_DRAIN_CUT, EXIT_LEASE_LOST, EXIT_START_FAILED, init_logs, main, run_from_config,
    termination,
};

/// The generated HostAdmin protobuf types, server and client (crate `zlink-admin-api`).
pub use zlink_admin_api::proto;
/// The host's lifecycle state (crate `zlink-admin-api`).
pub use zlink_admin_api::state;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;
use zlink_store::redis::{RedisStore, RedisStoreConfig};

use zlink::call::error::CallError;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::peer::PeerState;
use zlink::mesh::{Handlers, JsonMessage, MeshNode};
use zlink::object::registry::Registry;
use zlink::object::runtime::ObjectRuntime;
use zlink::routing::CacheConfig;

pub use self::config::{HostConfig, HostConfigError};
pub use self::state::HostState;

/// Built-in request every Server channel of a host answers with [`WhoamiReply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whoami {}
impl JsonMessage for Whoami {
    const PACKET_NAME: &'static str = "zlink.host.Whoami";
}

/// The answer to [`Whoami`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoamiReply {
    /// The answering host's RID.
    pub rid: String,
}
impl JsonMessage for WhoamiReply {
    const PACKET_NAME: &'static str = "zlink.host.WhoamiReply";
}

/// Why the host could not start or run.
#[derive(Debug, Error)]
pub enum HostError {
    /// Bad configuration or a missing secret.
    #[error(transparent)]
    Config(#[from] HostConfigError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({field}): {source}")]
    Listen {
        /// The configuration field of the address.
        field: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The StreamNode did not start.
    #[error(transparent)]
    Stream(#[from] zlink::session::StreamError),
    /// The Location Store could not be reached.
    #[error("location store {url}: {source}")]
    Store {
        /// The Redis URL.
        url: String,
        /// Why.
        source: zlink_store::StoreError,
    },
    /// The MeshNode did not start.
    #[error("mesh node: {0}")]
    Mesh(#[from] zlink::mesh::MeshError),
    /// The object runtime did not start.
    #[error("object runtime: {0}")]
    Runtime(#[from] zlink::object::runtime::RuntimeError),
    /// The capacity limits (`objects.capacity_*`) could not be set in the Location Store.
    #[error("capacity limits: {0}")]
    Capacity(zlink::call::error::CallError),
    /// A signal arrived while the host was starting (not an error for `run`).
    #[error("interrupted while starting")]
    Interrupted,
}

/// What `run` reports when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunOutcome {
    /// Units of accepted work still in flight when the drain deadline passed (0: clean drain).
    pub cut: u64,
    /// The host stopped because its owner lease was lost and `lease_loss` is `exit`.
    pub lease_lost: bool,
}

/// The addresses a started host announces (one JSON line on stdout in `zlink-node run`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announce {
    /// The node's RID.
    pub rid: String,
    /// The mesh endpoint.
    pub endpoint: String,
    /// The bound gRPC address.
    pub grpc: String,
    /// The bound HTTP address.
    pub http: String,
    /// The host state (`serving`).
    pub state: String,
    /// The bound STREAM listener address, when `stream.listen` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
}

/// The object runtime a host runs (its store calls counted).
pub type HostRuntime = ObjectRuntime<metrics::InstrumentedStore<RedisStore>>;

/// One running host: shared by the admin service, the HTTP endpoints and the drain.
pub struct Host {
    config: HostConfig,
    state: watch::Sender<HostState>,
    status: watch::Sender<proto::HostStatus>,
    /// The current node lifecycle's MeshNode (replaced by a rejoin, issue 20).
    node: std::sync::RwLock<Option<Arc<MeshNode>>>,
    /// The current lifecycle's object runtime (replaced by a rejoin).
    objects: std::sync::RwLock<Option<Arc<HostRuntime>>>,
    store_metrics: Arc<metrics::StoreMetrics>,
    drain: watch::Sender<Option<DrainRequest>>,
    sequence: AtomicU64,
    cut: AtomicU64,
    auth_failures: AtomicU64,
    health: tonic_health::server::HealthReporter,
    /// What the host does about its owner lease (issue 20): fenced, rejoining, exiting.
    recovery: std::sync::Mutex<recovery::Recovery>,
    /// The application's object types, kept for the runtime of a rejoined lifecycle.
    registry: Registry,
    /// The store connection, kept for a rejoined lifecycle.
    store: Arc<RedisStore>,
    /// Objects dropped because their lifecycle lost its lease.
    objects_dropped: AtomicU64,
    /// Renewal counters of the lifecycles before the current one (counters stay monotonic).
    lease_before: std::sync::Mutex<zlink::mesh::node::LeaseStats>,
    /// Set when the host stops because its lease was lost (`lease_loss: exit`).
    lease_exit: std::sync::atomic::AtomicBool,
    /// The relocation lifecycle's time base.
    epoch: Instant,
    /// The relocation lifecycle (issue 17).
    relocation: std::sync::Mutex<zlink::relocation::host::HostRelocation>,
    /// The units of the last relocation.
    relocation_units: std::sync::Mutex<Vec<zlink::object::runtime::UnitReport>>,
    /// Bumped on every relocation change (waiters of an idempotent `Relocate`).
    relocation_changed: watch::Sender<u64>,
    /// Units by outcome over every relocation (metrics).
    relocation_outcomes: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// The StreamNode for game clients (`stream.listen`), from Serving until the drain.
    stream: std::sync::Mutex<Option<zlink::session::StreamNode>>,
    /// Its counters, once it started (they outlive it for the last scrapes).
    stream_metrics: std::sync::OnceLock<Arc<zlink::session::StreamMetrics>>,
}

/// A requested drain: its deadline and whether it relocates first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainRequest {
    /// The whole shutdown's deadline.
    pub deadline: Duration,
    /// Relocate every unit and wait for SafeToShutdown before the drain.
    pub relocate_first: bool,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

impl Host {
    /// The configuration.
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// The current lifecycle state.
    pub fn state(&self) -> HostState {
        *self.state.borrow()
    }

    /// The MeshNode of the current node lifecycle, once started.
    pub fn node(&self) -> Option<Arc<MeshNode>> {
        self.node
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The object runtime of the current node lifecycle, once started.
    pub fn objects(&self) -> Option<Arc<HostRuntime>> {
        self.objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Store operation counters.
    pub fn store_metrics(&self) -> &metrics::StoreMetrics {
        &self.store_metrics
    }

    /// Admin calls rejected for a missing or wrong token.
    pub fn auth_failures(&self) -> u64 {
        self.auth_failures.load(Ordering::Relaxed)
    }

    /// Work units cut by a force-stop (0 until a drain deadline passes with work in flight).
    pub fn cut(&self) -> u64 {
        self.cut.load(Ordering::Relaxed)
    }

    /// Whether the process is healthy (`/healthz`): false only once the host has been fenced
    /// for longer than a lease TTL without progress — no renewal healed it and no rejoin
    /// attempt started or ended within a TTL ([`recovery::Recovery::healthy`]). A healing host
    /// stays healthy, so a liveness probe restarts only a stuck one.
    pub fn healthy(&self) -> bool {
        self.recovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .healthy(self.now_ms())
    }

    /// Milliseconds on the host's clock.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Objects dropped because their node lifecycle lost its owner lease.
    pub fn objects_dropped(&self) -> u64 {
        self.objects_dropped.load(Ordering::Relaxed)
    }

    /// Completed rejoins (new node lifecycles after a lost lease).
    pub fn rejoins(&self) -> u64 {
        self.recovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .rejoins()
    }

    /// Owner-lease counters over every lifecycle of this process.
    pub fn lease_stats(&self) -> zlink::mesh::node::LeaseStats {
        let before = *self
            .lease_before
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = self.node().map(|n| n.lease_stats()).unwrap_or_default();
        // Fenced time as the host saw it: every spell, across lifecycles and rejoins.
        let fenced = self
            .recovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fenced_ms(self.now_ms());
        zlink::mesh::node::LeaseStats {
            attempts: before.attempts + now.attempts,
            failures: before.failures + now.failures,
            fenced: Duration::from_millis(fenced),
            lost: now.lost,
        }
    }

    /// Whether `/readyz` answers ready: `Serving`, the mesh node admits work (its owner lease is
    /// confirmed and the fencing deadline has not passed) and its descriptor says `Serving`.
    pub fn ready(&self) -> bool {
        self.state() == HostState::Serving
            && self.node().is_some_and(|n| {
                n.admission_open()
                    && n.descriptor().state == zlink_protocol::generated::RuntimeState::Serving
            })
    }

    /// A watch of the published status (the current one first).
    pub fn subscribe_status(&self) -> watch::Receiver<proto::HostStatus> {
        self.status.subscribe()
    }

    /// Ask for a drain with `deadline` (`None`: the configured drain deadline), relocating
    /// first when `relocate_first` says so (`None`: `relocation.on_shutdown`). Returns whether
    /// this call started it (`false`: one was already requested; its deadline stays).
    pub fn request_drain(&self, deadline: Option<Duration>, relocate_first: Option<bool>) -> bool {
        let d = DrainRequest {
            deadline: deadline.unwrap_or_else(|| self.config.drain_deadline()),
            relocate_first: relocate_first
                .unwrap_or(self.config.relocation.on_shutdown == "planned_maintenance"),
        };
        self.drain.send_if_modified(|cur| {
            if cur.is_some() {
                return false;
            }
            *cur = Some(d);
            true
        })
    }

    fn set_state(&self, s: HostState) {
        self.state.send_replace(s);
        tracing::info!(state = s.name(), "host state");
        self.refresh_status();
    }

    /// Accepted work still in flight: queued application jobs, this node's outstanding
    /// requests, unfinished cold activations and work waiting in object queues.
    pub fn in_flight(&self) -> u64 {
        let node = self
            .node()
            .map_or(0, |n| n.jobs().in_use() + n.pending_requests());
        let objects = self
            .objects()
            .map_or(0, |o| o.unfinished_activations() + o.queued_work());
        u64::try_from(node + objects).unwrap_or(u64::MAX)
    }

    /// Compute the status now (without a sequence number).
    pub fn compute_status(&self) -> proto::HostStatus {
        let state = self.state();
        let mut st = proto::HostStatus {
            state: state.to_proto() as i32,
            mesh_name: self.config.mesh.name.clone(),
            application_version: self.config.application_version,
            safe_to_shutdown: self.safe_to_shutdown(),
            relocation: self.relocation_status(),
            ..Default::default()
        };
        if let Some(n) = self.node() {
            let d = n.descriptor();
            st.rid = n.rid().to_owned();
            st.endpoint = n.endpoint().to_owned();
            st.descriptor_revision = d.descriptor_revision;
            st.channels = d
                .channels
                .iter()
                .map(|c| proto::ChannelMembership {
                    channel: c.channel_name.clone(),
                    role: format!("{:?}", c.role).to_ascii_lowercase(),
                    weight: u32::from(c.weight),
                })
                .collect();
            for p in n.peers() {
                let ready = p.state == PeerState::Ready;
                if ready {
                    st.peers_ready += 1;
                } else if p.state != PeerState::NotRequired {
                    st.peers_not_ready += 1;
                }
                st.peers.push(proto::PeerStatus {
                    rid: p.rid,
                    ready,
                    state: peer_state_name(p.state),
                });
            }
        }
        if let Some(o) = self.objects() {
            let (actors, spots) = o.live_by_kind();
            st.objects_live = (actors + spots) as u64;
            st.objects = vec![
                proto::ObjectCount {
                    kind: "actor".into(),
                    count: actors as u64,
                },
                proto::ObjectCount {
                    kind: "spot".into(),
                    count: spots as u64,
                },
            ];
        }
        st
    }

    /// Recompute the status and publish it if anything changed (with the next sequence).
    pub fn refresh_status(&self) {
        let mut next = self.compute_status();
        self.status.send_if_modified(|cur| {
            next.sequence = cur.sequence;
            if *cur == next {
                return false;
            }
            next.sequence = self.sequence.fetch_add(1, Ordering::Relaxed) + 1;
            *cur = next;
            true
        });
    }
}

/// The state name `ctl` and the status show for a peer.
pub fn peer_state_name(s: PeerState) -> String {
    match s {
        PeerState::Rejected(r) => format!("Rejected({r:?})"),
        other => format!("{other:?}"),
    }
}

fn redis_config(c: &HostConfig) -> RedisStoreConfig {
    RedisStoreConfig {
        namespace: c.redis.namespace.clone(),
        response_timeout: Duration::from_millis(c.redis.response_timeout_ms),
        connection_timeout: Duration::from_millis(c.redis.connection_timeout_ms),
        reconnect_retries: 3,
    }
}

/// Connect to the Location Store the configuration names (`redis.*`), for [`run`].
///
/// # Errors
/// [`HostError::Config`] for an invalid configuration, [`HostError::Store`] when Redis cannot
/// be reached within `redis.connection_timeout_ms`.
pub async fn connect_store(config: &HostConfig) -> Result<Arc<RedisStore>, HostError> {
    config.validate()?;
    RedisStore::connect(&config.redis.url, redis_config(config))
        .await
        .map(Arc::new)
        .map_err(|source| HostError::Store {
            url: config.redis.url.clone(),
            source,
        })
}

/// How [`run`] reports to its caller besides its result.
pub struct RunOptions {
    /// The bearer token every admin call must carry ([`HostConfig::admin_token`] loads it).
    pub admin_token: String,
    /// Called once, when the host is `Serving` (`zlink-node run` prints it as a JSON line).
    pub announce: Box<dyn FnOnce(&Announce) + Send>,
}

impl RunOptions {
    /// Options with `admin_token` and an announce hook that does nothing.
    pub fn new(admin_token: impl Into<String>) -> Self {
        Self {
            admin_token: admin_token.into(),
            announce: Box::new(|_| {}),
        }
    }

    /// Call `f` with the addresses once the host is `Serving`.
    #[must_use]
    pub fn on_serving(mut self, f: impl FnOnce(&Announce) + Send + 'static) -> Self {
        self.announce = Box::new(f);
        self
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunOptions(..)")
    }
}

/// Run a host of `application` — the registry of the object types this node hosts (the
/// reference application in `zlink-node run`, a user's own types in their own binary) — on
/// `store`, until `shutdown` completes (SIGTERM/SIGINT in `zlink-node run`) or an admin
/// `Shutdown` arrives, then drain and stop. The configuration, admin API, probes, metrics and
/// drain are the same whichever application is hosted.
///
/// # Errors
/// [`HostError`] when the host cannot start; once `Serving`, the drain always completes
/// (cut work is reported in [`RunOutcome`]).
pub async fn run(
    config: HostConfig,
    application: Registry,
    store: Arc<RedisStore>,
    shutdown: impl Future<Output = ()> + Send,
    options: RunOptions,
) -> Result<RunOutcome, HostError> {
    let RunOptions {
        admin_token,
        announce,
    } = options;
    let signal = shutdown;
    config.validate()?;
    // Fail fast on a missing mesh secret, before any listener is bound.
    config.mesh_secret()?;
    let (health, health_service) = tonic_health::server::health_reporter();
    let host = Arc::new(Host {
        state: watch::channel(HostState::Starting).0,
        status: watch::channel(proto::HostStatus::default()).0,
        node: std::sync::RwLock::new(None),
        objects: std::sync::RwLock::new(None),
        store_metrics: Arc::new(metrics::StoreMetrics::default()),
        drain: watch::channel(None).0,
        sequence: AtomicU64::new(0),
        cut: AtomicU64::new(0),
        auth_failures: AtomicU64::new(0),
        health,
        recovery: std::sync::Mutex::new(recovery::Recovery::new(
            recovery::LeaseLoss::from_config(&config.lease_loss),
            config.timings.lease_ttl_ms,
            config.timings.discovery_poll_ms,
        )),
        registry: application,
        store,
        objects_dropped: AtomicU64::new(0),
        lease_before: std::sync::Mutex::new(zlink::mesh::node::LeaseStats::default()),
        lease_exit: std::sync::atomic::AtomicBool::new(false),
        epoch: Instant::now(),
        relocation: std::sync::Mutex::new(zlink::relocation::host::HostRelocation::new(
            config.application_version,
        )),
        relocation_units: std::sync::Mutex::new(Vec::new()),
        relocation_changed: watch::channel(0).0,
        relocation_outcomes: std::sync::Mutex::new(std::collections::BTreeMap::new()),
        stream: std::sync::Mutex::new(None),
        stream_metrics: std::sync::OnceLock::new(),
        config,
    });
    host.refresh_status();
    host.health
        .set_not_serving::<proto::host_admin_server::HostAdminServer<admin::AdminService>>()
        .await;
    host.health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;

    // Listeners first: a port conflict fails the start before anything is claimed.
    let grpc_addr = host.config.grpc_addr()?;
    let http_addr = host.config.http_addr()?;
    let grpc_listener = tokio::net::TcpListener::bind(grpc_addr)
        .await
        .map_err(|source| HostError::Listen {
            field: "admin.grpc_listen",
            addr: grpc_addr,
            source,
        })?;
    let http_listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .map_err(|source| HostError::Listen {
            field: "admin.http_listen",
            addr: http_addr,
            source,
        })?;
    let stream_config = host.config.stream_config()?;
    if let Some(sc) = &stream_config {
        // One file descriptor per client session (many systems start processes at 1,024).
        let sessions = sc.max_connections as u64;
        let want = sessions + limits::HOST_RESERVED_FILES;
        match limits::raise_open_files(want) {
            // The reserve is slack: warn only when the sessions themselves do not fit.
            Ok(f) if f.allows(sessions) => {
                tracing::debug!(before = ?f.before, now = ?f.now, "open-file limit");
            }
            Ok(f) => tracing::warn!(
                soft = ?f.now,
                hard = ?f.hard,
                want,
                "stream.max_connections needs more open files than the hard limit allows: \
                 sessions beyond it will fail to open (raise the hard limit: ulimit -Hn, \
                 systemd LimitNOFILE, or the container runtime's nofile ulimit)"
            ),
            Err(e) => tracing::warn!(error = %e, want, "the open-file limit could not be raised"),
        }
    }
    let stream_listener = match &stream_config {
        Some(sc) => Some(
            tokio::net::TcpListener::bind(sc.listen)
                .await
                .map_err(|source| HostError::Listen {
                    field: "stream.listen",
                    addr: sc.listen,
                    source,
                })?,
        ),
        None => None,
    };
    let grpc_bound = grpc_listener.local_addr().unwrap_or(grpc_addr);
    let http_bound = http_listener.local_addr().unwrap_or(http_addr);
    let (stop_tx, stop_rx) = watch::channel(false);
    let grpc_task = tokio::spawn(admin::serve(
        Arc::clone(&host),
        admin_token,
        health_service,
        grpc_listener,
        wait_true(stop_rx.clone()),
    ));
    let http_task = tokio::spawn(http::serve(
        Arc::clone(&host),
        http_listener,
        wait_true(stop_rx.clone()),
    ));

    // A signal during startup ends the start (handlers are installed before this point, so a
    // SIGTERM is never lost, also as PID 1 in a container).
    tokio::pin!(signal);
    let started = tokio::select! {
        r = start_node(&host) => r,
        () = &mut signal => Err(HostError::Interrupted),
    };
    if let Err(e) = started {
        host.set_state(HostState::Stopped);
        if let Some(o) = host.objects() {
            let _ = tokio::time::timeout(Duration::from_secs(5), o.shutdown()).await;
        }
        if let Some(n) = host.node() {
            let _ = tokio::time::timeout(Duration::from_secs(5), n.shutdown()).await;
        }
        let _ = stop_tx.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(2), grpc_task).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), http_task).await;
        if matches!(e, HostError::Interrupted) {
            tracing::info!("stopped by a signal while starting");
            return Ok(RunOutcome {
                cut: 0,
                lease_lost: false,
            });
        }
        return Err(e);
    }
    let stream_bound = match (stream_config, stream_listener) {
        (Some(sc), Some(listener)) => {
            // Sessions bind and relay through whichever object runtime is current.
            let node = zlink::session::StreamNode::serve_routed(
                listener,
                sc,
                host.registry.stream_handlers().clone(),
                sessions::HostRouter::new(&host),
            )?;
            let _ = host.stream_metrics.set(Arc::clone(node.metrics()));
            let bound = node.local_addr().to_string();
            *host
                .stream
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(node);
            Some(bound)
        }
        _ => None,
    };
    host.set_state(HostState::Serving);
    host.health
        .set_serving::<proto::host_admin_server::HostAdminServer<admin::AdminService>>()
        .await;
    host.health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    if let Some(n) = host.node() {
        announce(&Announce {
            rid: n.rid().to_owned(),
            endpoint: n.endpoint().to_owned(),
            grpc: grpc_bound.to_string(),
            http: http_bound.to_string(),
            state: HostState::Serving.name().to_owned(),
            stream: stream_bound,
        });
    }
    let refresher = tokio::spawn(refresh_loop(Arc::clone(&host)));
    let recoverer = tokio::spawn(recover_loop(Arc::clone(&host)));

    // Serve until a signal or an admin Shutdown.
    let mut drain_rx = host.drain.subscribe();
    tokio::select! {
        () = &mut signal => { host.request_drain(None, None); }
        _ = drain_rx.wait_for(Option::is_some) => {}
    }
    recoverer.abort();
    let req = (*host.drain.borrow()).unwrap_or(DrainRequest {
        deadline: host.config.drain_deadline(),
        relocate_first: false,
    });
    let shutdown_started = Instant::now();
    if req.relocate_first {
        // Item 11: a pod deleted by anyone moves its objects before the drain (no preStop).
        host.relocate_before_drain(req.deadline).await;
    }
    let left = req.deadline.saturating_sub(shutdown_started.elapsed());
    let cut = drain(&host, left.max(Duration::from_millis(1))).await;
    host.set_state(HostState::Stopped);
    refresher.abort();
    // Give WatchStatus streams a moment to deliver the final Stopped status.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), grpc_task).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), http_task).await;
    Ok(RunOutcome {
        cut,
        lease_lost: host.lease_exit.load(Ordering::Acquire),
    })
}

async fn wait_true(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Start a node lifecycle: a MeshNode (owner lease, RID claim, descriptor) and the object
/// runtime on it (which creates the lifecycle's Entry Spot). At start, and again for each
/// rejoin after a lost lease.
async fn start_node(host: &Arc<Host>) -> Result<(), HostError> {
    let registry = host.registry.clone();
    let store = Arc::clone(&host.store);
    let c = &host.config;
    let secret = c.mesh_secret()?;
    let mut cfg = c.mesh_node_config(secret);
    let hosts_objects = c.object_role() == zlink_protocol::generated::ObjectRole::Server;
    if hosts_objects {
        cfg.object_capabilities = registry.capabilities();
        // Peers filter their relocation targets by the limits projected here.
        zlink::relocation::capacity::with_limits(&mut cfg.object_capabilities, c.capacity_limits());
        // The lifecycle's Entry Spot, when the application has an Entry Spot type.
        cfg.entry_spot_prefix = registry.has_entry_spot().then(|| c.mesh.rid_prefix.clone());
    }
    let fencing_margin = cfg.timings.fencing_margin;
    let mut handlers = Handlers::new();
    for ch in c.mesh.channels.iter().filter(|ch| ch.role == "server") {
        let host = Arc::downgrade(host);
        handlers
            .channel(&ch.name)
            .on_request_concurrent(64, move |_, _: Whoami| {
                let rid = host
                    .upgrade()
                    .and_then(|h| h.node().map(|n| n.rid().to_owned()))
                    .unwrap_or_default();
                async move { Ok::<_, CallError>(WhoamiReply { rid }) }
            });
    }
    let backend: Arc<dyn DiscoveryBackend> = Arc::new(metrics::InstrumentedBackend::new(
        Arc::clone(&store) as Arc<dyn DiscoveryBackend>,
        Arc::clone(&host.store_metrics),
    ));
    let node = Arc::new(MeshNode::start(cfg, handlers, Some(backend)).await?);
    *host
        .node
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&node));
    host.refresh_status();
    if c.object_role() != zlink_protocol::generated::ObjectRole::None {
        // The runtime's store calls are counted too (authority, routing, creation content,
        // activation inbox), next to the mesh node's discovery calls.
        let counted = Arc::new(metrics::InstrumentedStore::new(
            store,
            Arc::clone(&host.store_metrics),
        ));
        let r = &c.relocation;
        let rt = ObjectRuntime::start(
            Arc::clone(&node),
            counted,
            registry,
            CacheConfig {
                fencing_margin,
                max_age: Duration::from_millis(r.route_cache_max_age_ms),
                message_follow: Duration::from_millis(r.message_follow_ms),
            },
        )
        .await;
        match rt {
            Ok(rt) => {
                rt.set_relocation_settings(zlink::object::runtime::RelocationSettings {
                    chunk_limit: usize::try_from(r.chunk_limit_bytes).unwrap_or(256 * 1024),
                    cutover_wait: Duration::from_millis(r.cutover_wait_ms),
                    restore_timeout: Duration::from_millis(r.restore_timeout_ms),
                    message_follow: Duration::from_millis(r.message_follow_ms),
                    in_flight_budget: r.in_flight_budget_bytes,
                    node_in_flight_budget: r.node_in_flight_budget_bytes,
                    session_seal_wait: zlink::config::defaults::SESSION_SEAL_ANSWER_WAIT,
                    terminal_retention: Duration::from_millis(r.terminal_retention_ms),
                    carried_request_deadline: Duration::from_secs(60),
                    fault: None,
                });
                let limits = c.capacity_limits();
                if zlink::relocation::capacity::is_limited(limits)
                    && let Err(e) = rt.set_capacity_limits(limits).await
                {
                    rt.shutdown().await;
                    node.shutdown().await;
                    return Err(HostError::Capacity(e));
                }
                *host
                    .objects
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(rt));
            }
            Err(e) => {
                node.shutdown().await;
                return Err(e.into());
            }
        }
    }
    Ok(())
}

async fn refresh_loop(host: Arc<Host>) {
    let every = Duration::from_millis(host.config.timings.status_poll_ms);
    loop {
        // The current lifecycle's node (a rejoin replaces it).
        match host.node().map(|n| n.subscribe_peer_changes()) {
            Some(mut rx) => {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    r = rx.changed() => { if r.is_err() { tokio::time::sleep(every).await; } }
                }
            }
            None => tokio::time::sleep(every).await,
        }
        host.refresh_status();
    }
}

/// The lease supervisor (issue 20 item 2): feeds the current lifecycle's lease view to the
/// pure [`recovery::Recovery`] and performs what it says — show `Fenced`, rejoin as a new
/// lifecycle, or stop the process with [`EXIT_LEASE_LOST`]. Ends when a drain starts.
async fn recover_loop(host: Arc<Host>) {
    use recovery::Action;
    let every = Duration::from_millis(host.config.timings.status_poll_ms.min(100));
    loop {
        let lost_rx = host.node().map(|n| n.subscribe_lease_lost());
        match lost_rx {
            Some(mut rx) => {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    _ = rx.wait_for(|lost| *lost) => {}
                }
            }
            None => tokio::time::sleep(every).await,
        }
        if host.drain.borrow().is_some() {
            return;
        }
        let view = host
            .node()
            .map_or(recovery::LeaseView::default(), |n| recovery::LeaseView {
                fenced: !n.admission_open(),
                lost: n.lease_lost(),
            });
        let now = host.now_ms();
        let action = host
            .recovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .observe(now, view);
        match action {
            Action::None => {}
            Action::Fence => {
                tracing::warn!(
                    "owner lease renewals are failing: fenced (no new object work) until one lands"
                );
                host.refresh_status();
            }
            Action::Exit => {
                tracing::error!(
                    "owner lease lost and lease_loss is exit: stopping (exit status {EXIT_LEASE_LOST})"
                );
                host.lease_exit.store(true, Ordering::Release);
                host.request_drain(Some(Duration::from_millis(500)), Some(false));
                return;
            }
            Action::Rejoin => {
                host.set_state(HostState::Fenced);
                let started = rejoin(&host).await;
                let mut r = host
                    .recovery
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match started {
                    Ok(()) => {
                        r.rejoined(host.now_ms());
                        drop(r);
                        let rid = host.node().map(|n| n.rid().to_owned()).unwrap_or_default();
                        tracing::warn!(%rid, "rejoined the mesh as a new node lifecycle: serving");
                        host.set_state(HostState::Serving);
                    }
                    Err(e) => {
                        r.attempt_failed(host.now_ms());
                        let attempts = match r.phase() {
                            recovery::Phase::Rejoining { attempts, .. } => attempts,
                            _ => 0,
                        };
                        drop(r);
                        // The first failure and every 20th: the store may be down for long.
                        if attempts == 1 || attempts % 20 == 0 {
                            tracing::warn!(error = %e, attempts, "rejoin attempt failed; retrying");
                        }
                        host.refresh_status();
                    }
                }
            }
        }
    }
}

/// One rejoin attempt: end the old lifecycle if it is still there (drop its fenced objects,
/// shut its node down), then start a new one.
async fn rejoin(host: &Arc<Host>) -> Result<(), HostError> {
    let old_objects = host
        .objects
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let old_node = host
        .node
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(o) = old_objects {
        let dropped = o.live_count();
        host.objects_dropped.fetch_add(
            u64::try_from(dropped).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        tracing::error!(
            dropped,
            "owner lease lost: dropping every object of this node lifecycle (another node may own them now); rejoining as a new lifecycle"
        );
        if tokio::time::timeout(Duration::from_secs(2), o.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("fenced objects did not close within 2 s; dropping them");
        }
    }
    if let Some(n) = old_node {
        let stats = n.lease_stats();
        {
            let mut b = host
                .lease_before
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            b.attempts += stats.attempts;
            b.failures += stats.failures;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), n.shutdown()).await;
    }
    match start_node(host).await {
        Ok(()) => Ok(()),
        Err(e) => {
            // Leave nothing half-started for the next attempt.
            *host
                .objects
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            let node = host
                .node
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(n) = node {
                let _ = tokio::time::timeout(Duration::from_secs(2), n.shutdown()).await;
            }
            Err(e)
        }
    }
}

/// The drain: seal, wait for accepted work until `deadline`, close objects, shut the node down
/// (releasing the lease and with it the descriptors). Returns the work units cut.
async fn drain(host: &Arc<Host>, deadline: Duration) -> u64 {
    let started = Instant::now();
    let until = started + deadline;
    host.relocation
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .stopping();
    host.set_state(HostState::Draining);
    host.health
        .set_not_serving::<proto::host_admin_server::HostAdminServer<admin::AdminService>>()
        .await;
    host.health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    if let Some(n) = host.node() {
        n.set_runtime_state(HostState::Draining.runtime_state());
    }
    tracing::info!(?deadline, "drain started");
    // Game clients get `zlink.GoAway` and half the deadline to reconnect elsewhere; sessions
    // do not move (issue 19, out of scope), so the rest are closed `Draining`.
    let stream = host
        .stream
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(s) = &stream {
        s.drain(deadline / 2);
    }
    // The seal window: peers apply the Draining update and stop selecting this host; what they
    // sent just before still arrives and is served.
    // At most half the deadline: the rest is for the work in flight.
    let seal = Duration::from_millis(host.config.timings.drain_seal_ms).min(deadline / 2);
    tokio::time::sleep(seal).await;
    let mut cut = 0;
    loop {
        let left = host.in_flight();
        if left == 0 {
            break;
        }
        if Instant::now() >= until {
            cut = left;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let live = host.objects().map_or(0, |o| o.live_count());
    if cut > 0 {
        tracing::warn!(
            cut,
            live_objects_closed = live,
            ?deadline,
            "drain deadline passed: force-stopping with work still in flight"
        );
    }
    host.cut.store(cut, Ordering::Relaxed);
    if let Some(s) = stream
        && tokio::time::timeout(Duration::from_secs(5), s.shutdown())
            .await
            .is_err()
    {
        tracing::warn!("STREAM sessions did not close within 5 s; stopping anyway");
    }
    // Bounded: a handler that never ends cannot keep the process past its deadline (plus a
    // short grace); the lease is released by the node shutdown, itself bounded.
    let grace = until
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    if let Some(o) = host.objects()
        && tokio::time::timeout(grace, o.shutdown()).await.is_err()
    {
        tracing::warn!("objects did not close within the grace period; stopping anyway");
    }
    if let Some(n) = host.node()
        && tokio::time::timeout(Duration::from_secs(5), n.shutdown())
            .await
            .is_err()
    {
        tracing::warn!("the mesh node did not shut down within 5 s; its lease lapses by TTL");
    }
    tracing::info!(
        elapsed = ?started.elapsed(),
        cut,
        live_objects_closed = live,
        "drain finished: descriptors and owner lease released"
    );
    cut
}
