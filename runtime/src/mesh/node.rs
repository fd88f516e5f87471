//! The MeshNode: identity, listener, the reactor that runs admission, liveness and discovery,
//! and the node-direct send/request surface (glossary §1 "MeshNode", §7 "Node direct").
//!
//! Tasks of a running node:
//! * the **pump thread** sending on the ROUTER socket ([`crate::transport::pump`]);
//! * the **reactor** task: reads the socket ([`crate::transport::pump::Inbound`]) and the
//!   pump's events, runs the handshake, liveness ticks, credit,
//!   replies (terminal completions bypass the job queue) and discovery snapshots; it never
//!   waits on application work;
//! * the **dispatcher** task: takes a job-queue permit, then claims the next application
//!   record and hands it to its handler's runner ([`super::dispatch`]);
//! * with a store, the **discovery** task: lease renewal, descriptor publication, polling.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    ActorRequest, ActorSend, ChannelRequest, ChannelRole, ChannelSend, CommandBody, NodeDescriptor,
    NodeFence, NodeRequest, NodeSend, ReplyResult, RequestHeader, ReservationFence, RouteFence,
    RuntimeState, SpotRequest, SpotSend, Update, UserSpotCreate,
};
use zlink_protocol::ids;
use zlink_protocol::metadata::Metadata;
use zlink_protocol::record::{Record, WireContext};
use zlink_store::StoreError;
use zlink_store::types::OwnerToken;

use super::auth::random_bytes;
use super::config::{MeshConfigError, MeshNodeConfig, RidConfig};
use super::connection::{ConnRef, Leg};
use super::discovery::DiscoveryBackend;
use super::dispatch::Dispatcher;
use super::handler::{Handlers, JsonMessage, decode_json, encode_json};
use super::peer::{PeerEntry, PeerSnapshot, PeerState};
use super::reactor::{self, Cmd};
use crate::call::error::{CallError, ErrorKind};
use crate::call::ids::{CorrelationIdAllocator, OperationIdAllocator, ReplyRouteIdAllocator};
use crate::call::pending::{PeerRef, PendingKey, PendingTable};
use crate::jobs::JobQueue;
use crate::millis;
use crate::select::SmoothWeighted;
use crate::transport::header::Packed;
use crate::transport::pump::{Pump, PumpConfig};

/// The owner-lease keeper's counters ([`MeshNode::lease_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Renewal attempts of this lifecycle.
    pub attempts: u64,
    /// Failed renewal attempts (stale answers included).
    pub failures: u64,
    /// Time spent fenced.
    pub fenced: Duration,
    /// Whether the lease is lost for good.
    pub lost: bool,
}

/// Start-up failure of a MeshNode.
#[derive(Debug, Error)]
pub enum MeshError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] MeshConfigError),
    /// The socket could not be set up.
    #[error("transport: {0}")]
    Transport(#[from] crate::transport::pump::PumpError),
    /// The Location Store refused or failed.
    #[error("location store: {0}")]
    Store(#[from] StoreError),
    /// The OS random source failed.
    #[error("operating system random source failed")]
    Random,
    /// The job queue configuration is invalid.
    #[error("job queue: {0}")]
    Jobs(String),
}

pub use super::state::MeshMetrics;
pub(crate) use super::state::{ChannelSelector, Faults, Ids, Inner};

/// A running MeshNode. Dropping it without [`MeshNode::shutdown`] stops its tasks abruptly.
pub struct MeshNode {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    pump: Mutex<Option<Pump>>,
}

impl std::fmt::Debug for MeshNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshNode")
            .field("rid", &self.inner.rid)
            .field("endpoint", &self.inner.endpoint)
            .finish()
    }
}

fn random_u64() -> Result<u64, MeshError> {
    random_bytes::<8>()
        .map(u64::from_be_bytes)
        .map_err(|_| MeshError::Random)
}

/// A non-zero lifecycle generation ≤ `i64::MAX` from the CSPRNG (glossary §6).
pub(crate) fn new_lifecycle_generation() -> Result<u64, MeshError> {
    loop {
        if let Some(g) = ids::lifecycle_generation_from_random(random_u64()?) {
            return Ok(g);
        }
    }
}

/// A non-zero connection generation from the CSPRNG.
pub(crate) fn new_connection_generation() -> u64 {
    loop {
        match random_bytes::<8>().map(u64::from_be_bytes) {
            Ok(0) => continue,
            Ok(g) => return g,
            // The OS source failing is not recoverable; fall back to the clock so the
            // connection still gets a distinct non-zero value.
            Err(_) => {
                return SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64 | 1);
            }
        }
    }
}

/// The process's ZeroMQ context: one per process, as libzmq recommends, so nodes hosted in the
/// same process (tests, the demo) share its I/O thread instead of adding one each.
pub(crate) fn process_context() -> zmq::Context {
    static CONTEXT: std::sync::OnceLock<zmq::Context> = std::sync::OnceLock::new();
    CONTEXT.get_or_init(zmq::Context::new).clone()
}

impl MeshNode {
    /// Start a node: validate, choose RID and lifecycle, bind, claim the owner lease and
    /// publish the descriptor (with a store), then start the tasks.
    ///
    /// # Errors
    /// [`MeshError`] for bad configuration, a socket failure, a store failure or a
    /// `RoutingIdConflict`.
    pub async fn start(
        config: MeshNodeConfig,
        handlers: Handlers,
        store: Option<Arc<dyn DiscoveryBackend>>,
    ) -> Result<Self, MeshError> {
        config.validate()?;
        let handler_map = handlers.build_all(&config.mesh_name)?;
        for name in handler_map.channels.keys() {
            if !config
                .channels
                .iter()
                .any(|c| &c.channel_name == name && c.role == ChannelRole::Server)
            {
                return Err(MeshConfigError::Invalid {
                    field: "channels",
                    reason: format!(
                        "handlers are registered for channel {name:?}, but this node has no \
                         Server membership for it"
                    ),
                }
                .into());
            }
        }
        let selectors = config
            .channels
            .iter()
            .map(|c| {
                (
                    c.channel_name.clone(),
                    ChannelSelector {
                        version: None,
                        selector: SmoothWeighted::new(),
                    },
                )
            })
            .collect();
        let jobs = JobQueue::new(config.jobs).map_err(|e| MeshError::Jobs(e.to_string()))?;
        let rid = match &config.rid {
            RidConfig::Automatic { prefix } => {
                let r = random_bytes::<16>().map_err(|_| MeshError::Random)?;
                ids::automatic_rid(prefix, r).map_err(|e| MeshConfigError::Invalid {
                    field: "rid.prefix",
                    reason: e.to_string(),
                })?
            }
            RidConfig::Fixed(rid) => rid.clone(),
        };
        let lifecycle = new_lifecycle_generation()?;
        let entry_spot_id = match &config.entry_spot_prefix {
            Some(prefix) => {
                ids::entry_spot_id(prefix, random_bytes::<16>().map_err(|_| MeshError::Random)?)
                    .map_err(|e| MeshConfigError::Invalid {
                        field: "entry_spot_prefix",
                        reason: e.to_string(),
                    })?
            }
            None => String::new(),
        };
        let owner_id = config
            .owner_id
            .clone()
            .unwrap_or_else(|| format!("host-{rid}"));

        let ctx = process_context();
        let bind = format!("tcp://{}:{}", bracket(&config.bind_host), config.port);
        let mut pump_cfg = PumpConfig::new(rid.clone().into_bytes(), bind);
        pump_cfg.send_hwm = config.flow.zmq_hwm;
        pump_cfg.recv_hwm = config.flow.zmq_hwm;
        pump_cfg.batch = config.flow.batch;
        pump_cfg.queue_cap_bytes = config.flow.pump_queue_bytes;
        pump_cfg.max_message_bytes =
            i64::try_from(config.flow.max_message_bytes).unwrap_or(i64::MAX);
        let (pump, pump_rx) = Pump::start(&ctx, pump_cfg)?;
        let port = pump
            .endpoint()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or(MeshError::Transport(
                crate::transport::pump::PumpError::Endpoint,
            ))?;
        let advertise = config
            .advertise_host
            .clone()
            .unwrap_or_else(|| config.bind_host.clone());
        let endpoint = format!(
            "tcp://{}:{}",
            bracket(&advertise),
            config.advertise_port.unwrap_or(port)
        );

        let descriptor = NodeDescriptor {
            mesh_name: config.mesh_name.clone(),
            node: NodeFence {
                rid: rid.clone().into(),
                lifecycle_generation: lifecycle,
            },
            descriptor_revision: 1,
            endpoint: endpoint.clone(),
            security_identity: config.security_identity.clone(),
            object_role: config.object_role,
            state: if entry_spot_id.is_empty() {
                RuntimeState::Serving
            } else {
                // Serving only once the object runtime created the Entry Spot.
                RuntimeState::Starting
            },
            application_version: config.application_version,
            maintenance_wave: config.maintenance_wave.clone(),
            placement_weight: config.placement_weight,
            entry_spot_id: entry_spot_id.clone(),
            channels: config.channels.clone(),
            object_capabilities: config.object_capabilities.clone(),
        };

        // Lease, RID claim and first descriptor before anyone can discover us.
        let mut lease = None;
        let epoch = Instant::now();
        let mut fencing_deadline_ms = u64::MAX;
        let mut keeper = None;
        if let Some(store) = &store {
            // A live lease of this owner ID belongs to an earlier lifecycle of this host that
            // may still be running (a crash-restart, a duplicated pod). Claiming now would
            // replace it while that lifecycle still admits work until its next renewal; wait
            // for it to lapse instead (bounded by one minute), so lifecycles never overlap and
            // a replaced lease always means a finished one (fenced cleanup relies on that).
            if let zlink_store::types::LeaseRead::Found {
                lease_expires_at,
                store_now,
                ..
            } = store.read_lease(&owner_id).await?
            {
                let wait = Duration::from_millis(
                    lease_expires_at
                        .millis()
                        .saturating_sub(store_now.millis())
                        .saturating_add(50),
                );
                tracing::warn!(
                    owner = %owner_id,
                    ?wait,
                    "a live lease of this owner ID exists; waiting for it to lapse"
                );
                tokio::time::sleep(wait.min(Duration::from_secs(60))).await;
            }
            let sent_ms = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
            let grant = store
                .claim_lease(&owner_id, config.timings.lease_ttl)
                .await?;
            if let RidConfig::Automatic { .. } = config.rid {
                match store
                    .claim_routing_id(&grant.token, &config.mesh_name, &rid)
                    .await
                {
                    Ok(()) => {}
                    Err(StoreError::RoutingIdConflict(_)) => {
                        return Err(MeshConfigError::RoutingIdConflict(rid).into());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            store
                .publish_descriptor(
                    &grant.token,
                    &super::discovery::descriptor_key(&config.mesh_name, &rid),
                    lifecycle,
                    1,
                    super::discovery::encode_descriptor(&descriptor),
                )
                .await?;
            fencing_deadline_ms = sent_ms.saturating_add(
                u64::try_from(
                    grant
                        .fencing_delay(config.timings.fencing_margin)
                        .as_millis(),
                )
                .unwrap_or(u64::MAX),
            );
            keeper = Some(super::lease::LeaseKeeper::claimed(
                super::lease::RenewPolicy::new(
                    millis(config.timings.lease_renew),
                    millis(config.timings.fencing_margin),
                ),
                sent_ms,
                millis(grant.fencing_delay(config.timings.fencing_margin)),
            ));
            lease = Some(grant.token);
        }

        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (dispatcher, dispatch_tasks) = Dispatcher::new(handler_map);
        let correlation =
            CorrelationIdAllocator::new("c").map_err(|e| MeshError::Jobs(e.to_string()))?;
        let inner = Arc::new(Inner {
            secret: config.secret.clone(),
            config,
            rid: rid.into(),
            lifecycle,
            endpoint,
            owner_id,
            descriptor: Mutex::new(descriptor),
            pump: pump.handle(),
            peers: Mutex::new(foldhash::HashMap::default()),
            pending: Mutex::new(PendingTable::new(1 << 20)),
            ids: Mutex::new(Ids {
                operation: OperationIdAllocator::new(),
                reply_route: ReplyRouteIdAllocator::new(),
                correlation,
            }),
            jobs,
            metrics: MeshMetrics::default(),
            shutting_down: AtomicBool::new(false),
            cmd_tx,
            dispatcher,
            store,
            lease: Mutex::new(lease),
            epoch,
            peer_change: watch::channel(0).0,
            placement_capacity: AtomicU64::new(0),
            faults: Faults::default(),
            op_key: ring::hmac::Key::new(
                ring::hmac::HMAC_SHA256,
                &random_bytes::<32>().map_err(|_| MeshError::Random)?,
            ),
            selectors: Mutex::new(selectors),
            object_sink: std::sync::OnceLock::new(),
            fencing_deadline_ms: AtomicU64::new(fencing_deadline_ms),
            lease_keeper: Mutex::new(keeper),
            lease_lost: watch::channel(false).0,
        });

        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(reactor::run(
            Arc::clone(&inner),
            pump_rx,
            cmd_rx,
            ctx,
        )));
        tasks.extend(Dispatcher::spawn(&inner, dispatch_tasks));
        if inner.store.is_some() {
            tasks.push(tokio::spawn(reactor::discovery_loop(Arc::clone(&inner))));
            tasks.push(tokio::spawn(reactor::lease_loop(Arc::clone(&inner))));
        }
        for p in inner.config.manual_peers.clone() {
            let _ = inner.cmd_tx.send(Cmd::AddManual(p));
        }
        Ok(Self {
            inner,
            tasks: Mutex::new(tasks),
            pump: Mutex::new(Some(pump)),
        })
    }

    /// This node's RID.
    pub fn rid(&self) -> &str {
        &self.inner.rid
    }

    /// This lifecycle's generation.
    pub fn lifecycle_generation(&self) -> u64 {
        self.inner.lifecycle
    }

    /// The advertised endpoint (`tcp://advertise-host:actual-port`).
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// The current descriptor.
    pub fn descriptor(&self) -> NodeDescriptor {
        self.inner.descriptor()
    }

    /// `f` of the current descriptor, read in place: for a field or two on a hot path, where
    /// [`MeshNode::descriptor`] would clone the whole descriptor (its capabilities and
    /// channels) to read them.
    pub fn with_descriptor<R>(&self, f: impl FnOnce(&NodeDescriptor) -> R) -> R {
        f(&self
            .inner
            .descriptor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The host owner identity of the owner lease.
    pub fn owner_id(&self) -> &str {
        &self.inner.owner_id
    }

    /// The generation of this host's current owner lease, when the node runs with a store
    /// (target admission compares only this; no clone of the token).
    pub fn owner_lease_generation(&self) -> Option<u64> {
        self.inner
            .lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|t| t.lease_generation)
    }

    /// This host's current owner lease token, if it holds one (a clone: use
    /// [`MeshNode::owner_lease_generation`] where the generation is all that is compared).
    pub fn owner_token(&self) -> Option<OwnerToken> {
        self.inner
            .lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A snapshot of every known peer, ordered by RID.
    pub fn peers(&self) -> Vec<PeerSnapshot> {
        let mut v: Vec<_> = self
            .inner
            .peers()
            .values()
            .map(PeerEntry::snapshot)
            .collect();
        v.sort_by(|a, b| a.rid.cmp(&b.rid));
        v
    }

    /// A snapshot of one peer.
    pub fn peer(&self, rid: &str) -> Option<PeerSnapshot> {
        self.inner.peers().get(rid).map(PeerEntry::snapshot)
    }

    /// `f` over the admitted descriptors of the `Ready` peers, read in place, in no particular
    /// order: placement looks at every peer on each creation, and a snapshot of each
    /// ([`MeshNode::peers`]) copied all their descriptors to read a few fields. The peer table
    /// stays locked while `f` runs: keep it short, and take no mesh lock in it.
    pub fn with_ready_peer_descriptors<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = &NodeDescriptor>) -> R,
    ) -> R {
        let peers = self.inner.peers();
        let mut ready = peers
            .values()
            .filter(|e| e.state == PeerState::Ready)
            .filter_map(|e| e.descriptor.as_ref());
        f(&mut ready)
    }

    /// `f` of `rid`'s admitted descriptor, read in place (see [`MeshNode::with_descriptor`]).
    pub fn with_peer_descriptor<R>(
        &self,
        rid: &str,
        f: impl FnOnce(&NodeDescriptor) -> R,
    ) -> Option<R> {
        self.inner
            .peers()
            .get(rid)
            .and_then(|e| e.descriptor.as_ref())
            .map(f)
    }

    /// The generation of the current connection (epoch) to `rid`, if connected: what
    /// [`MeshNode::peer`] reports, without building the snapshot (a hot path of relocation).
    pub fn peer_connection_generation(&self, rid: &str) -> Option<u64> {
        self.inner
            .peers()
            .get(rid)
            .and_then(|e| e.conn.as_ref().map(|c| c.generation()))
    }

    /// The chunk limit `rid` admitted us with, if any ([`PeerSnapshot::receive_chunk_limit`]),
    /// without building the snapshot.
    pub fn peer_receive_chunk_limit(&self, rid: &str) -> Option<u32> {
        self.inner
            .peers()
            .get(rid)
            .and_then(|e| e.receive_chunk_limit)
    }

    /// The current connection (epoch) to `rid`, if ready.
    pub fn connection(&self, rid: &str) -> Option<ConnRef> {
        self.inner.ready_conn(rid).ok()
    }

    /// Wait until `pred` holds for the peer snapshot of `rid` (or `timeout` passes).
    ///
    /// # Errors
    /// `DeadlineExceeded` with the last observed state.
    pub async fn wait_peer(
        &self,
        rid: &str,
        timeout: Duration,
        pred: impl Fn(&PeerSnapshot) -> bool,
    ) -> Result<PeerSnapshot, CallError> {
        let mut rx = self.inner.peer_change.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(s) = self.peer(rid)
                && pred(&s)
            {
                return Ok(s);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(CallError::new(
                        ErrorKind::DeadlineExceeded,
                        format!("peer {rid}: {:?}", self.peer(rid).map(|s| s.state)),
                    ));
                }
            }
        }
    }

    /// Wait until `rid` is ready.
    ///
    /// # Errors
    /// `DeadlineExceeded`.
    pub async fn wait_ready(
        &self,
        rid: &str,
        timeout: Duration,
    ) -> Result<PeerSnapshot, CallError> {
        self.wait_peer(rid, timeout, |s| s.state == PeerState::Ready)
            .await
    }

    /// A receiver that changes whenever a peer's state or descriptor changes.
    pub fn subscribe_peer_changes(&self) -> watch::Receiver<u64> {
        self.inner.peer_change.subscribe()
    }

    /// Counters.
    pub fn metrics(&self) -> &MeshMetrics {
        &self.inner.metrics
    }

    /// The application job queue.
    pub fn jobs(&self) -> &JobQueue {
        &self.inner.jobs
    }

    /// Requests waiting for their terminal result.
    pub fn pending_requests(&self) -> usize {
        self.inner.pending().len()
    }

    /// Terminal-completion counters of this node's requests (completed by kind, late replies,
    /// late cancels, relayed replies).
    pub fn request_stats(&self) -> crate::call::pending::Stats {
        self.inner.pending().stats().clone()
    }

    /// Late replies dropped so far.
    pub fn late_replies(&self) -> u64 {
        self.inner.pending().late_replies()
    }

    /// Counters of the socket pump.
    pub fn pump_stats(&self) -> &crate::transport::pump::PumpStats {
        self.inner.pump.stats()
    }

    /// Bytes queued in the transport's outbound data queue.
    pub fn queued_data_bytes(&self) -> usize {
        self.inner.pump.queued_data_bytes()
    }

    /// Add a manual peer at run time.
    pub fn add_manual_peer(&self, peer: super::config::ManualPeer) {
        let _ = self.inner.cmd_tx.send(Cmd::AddManual(peer));
    }

    /// Remove the connection intent for `rid` (terminal: a late READY does not revive it).
    pub fn remove_peer(&self, rid: &str) {
        let _ = self.inner.cmd_tx.send(Cmd::RemoveIntent(rid.to_owned()));
    }

    /// Whether [`MeshNode::shutdown`] has begun.
    pub fn is_shut_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::Acquire)
    }

    fn check_open(&self) -> Result<(), CallError> {
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(CallError::new(
                ErrorKind::ShuttingDown,
                "node is shutting down",
            ));
        }
        Ok(())
    }

    /// One-way node-direct send of JSON message `M` to `(MeshName, rid)`; completes at
    /// source-local admission (glossary §3 "One-way normal completion"). Never retargeted.
    ///
    /// # Errors
    /// `ShuttingDown`, `Unavailable` (no ready connection), `InvalidOperation` (encoding).
    pub async fn send<M: JsonMessage>(&self, rid: &str, msg: &M) -> Result<(), CallError> {
        self.send_payload(rid, encode_json(msg)?, None).await
    }

    /// One-way node-direct send of a typed payload with optional metadata.
    ///
    /// # Errors
    /// As [`MeshNode::send`].
    pub async fn send_payload(
        &self,
        rid: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.inner.ready_conn(rid)?;
        if metadata.is_none() {
            // The common case: frame 0 depends only on the two fences, so it is encoded once
            // per connection epoch and only the payload frame per message.
            let ctx = WireContext::route_mesh(zlink_protocol::record::Leg::Send);
            let head = conn
                .send_head(|peer| {
                    Record::new(CommandBody::NodeSend(NodeSend {
                        source: self.inner.fence(),
                        target: peer.clone(),
                    }))
                    .with_payload(TypedPayload::default())
                    .encode(ctx)
                    .map(|mut frames| frames.swap_remove(0))
                })
                .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
            let mut msg = Packed::stamped_in(
                self.inner.pump.buffer(),
                4 + head.len() + 4 + payload.encoded_len(),
            );
            msg.push(&head);
            super::state::push_encoded(&mut msg, |w| payload.encode_into(w))?;
            return self.inner.send_packed(&conn, Leg::Send, msg).await;
        }
        let mut record = Record::new(CommandBody::NodeSend(NodeSend {
            source: self.inner.fence(),
            target: conn.peer().clone(),
        }))
        .with_payload(payload);
        record.metadata = metadata;
        self.inner.send_app_record(&conn, Leg::Send, &record).await
    }

    /// Node-direct request of JSON `Req`, answered with JSON `Resp`, with one end-to-end
    /// deadline `timeout` from now.
    ///
    /// # Errors
    /// The request's single terminal error: `DeadlineExceeded`, `Unavailable`, `ShuttingDown`,
    /// `Cancelled` (never observed by the caller: dropping the future cancels), or the error
    /// the handler returned.
    pub async fn request<Req: JsonMessage, Resp: JsonMessage>(
        &self,
        rid: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError> {
        let reply = self
            .request_payload(rid, encode_json(req)?, None, timeout)
            .await?;
        decode_json(&reply)
    }

    /// Node-direct request with a typed payload and optional metadata.
    ///
    /// # Errors
    /// As [`MeshNode::request`].
    pub async fn request_payload(
        &self,
        rid: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Duration,
    ) -> Result<TypedPayload, CallError> {
        self.check_open()?;
        let conn = self.inner.ready_conn(rid)?;
        self.node_request_on(conn, payload, metadata, timeout).await
    }

    /// A node-direct request (17) on `conn`, answered once.
    async fn node_request_on(
        &self,
        conn: ConnRef,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Duration,
    ) -> Result<TypedPayload, CallError> {
        self.request_on(
            conn,
            |request, source, target| {
                CommandBody::NodeRequest(NodeRequest {
                    request,
                    source,
                    target,
                })
            },
            Some(payload),
            metadata,
            timeout,
        )
        .await
    }

    /// Node-direct request to exactly node lifecycle `target` (never to a later lifecycle of its
    /// RID), with one end-to-end deadline `timeout` from now.
    ///
    /// # Errors
    /// As [`MeshNode::request`]; `Unavailable` also when the ready connection to `target.rid`
    /// is of another lifecycle.
    pub async fn request_to_lifecycle(
        &self,
        target: &NodeFence,
        payload: TypedPayload,
        timeout: Duration,
    ) -> Result<TypedPayload, CallError> {
        self.check_open()?;
        let conn = self.conn_to(target, &payload.packet_name)?;
        self.node_request_on(conn, payload, None, timeout).await
    }

    /// Whether this node has a ready (admitted) connection to exactly node lifecycle `target`.
    pub fn is_admitted(&self, target: &NodeFence) -> bool {
        self.conn_to(target, "").is_ok()
    }

    /// Select-one request on RouteMesh Channel `channel` (glossary §7 "Select-one"): one ready,
    /// serving Server with a positive weight is chosen by smooth weighted round-robin and the
    /// request is submitted to it in the same operation; it is never resubmitted to another
    /// Server. The handler runs in the Server's `channel` namespace ([`Handlers::channel`]).
    ///
    /// # Errors
    /// As [`MeshNode::request`]; `InvalidOperation` when this node has no membership of
    /// `channel`; `Unavailable` when no Server is eligible.
    pub async fn channel_request<Req: JsonMessage, Resp: JsonMessage>(
        &self,
        channel: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError> {
        let reply = self
            .channel_request_payload(channel, encode_json(req)?, None, timeout)
            .await?;
        decode_json(&reply)
    }

    /// Select-one request with a typed payload and optional metadata.
    ///
    /// # Errors
    /// As [`MeshNode::channel_request`].
    pub async fn channel_request_payload(
        &self,
        channel: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Duration,
    ) -> Result<TypedPayload, CallError> {
        self.check_open()?;
        let conn = self.inner.select_channel(channel)?;
        self.request_on(
            conn,
            |request, source, target| {
                CommandBody::ChannelRequest(ChannelRequest {
                    request,
                    channel_name: channel.to_owned(),
                    source,
                    target,
                })
            },
            Some(payload),
            metadata,
            timeout,
        )
        .await
    }

    /// One-way select-one send on RouteMesh Channel `channel`; completes at source-local
    /// admission, like [`MeshNode::send`].
    ///
    /// # Errors
    /// `ShuttingDown`; `InvalidOperation` (no membership of `channel`, or encoding);
    /// `Unavailable` when no Server is eligible.
    pub async fn channel_send<M: JsonMessage>(
        &self,
        channel: &str,
        msg: &M,
    ) -> Result<(), CallError> {
        self.channel_send_payload(channel, encode_json(msg)?, None)
            .await
    }

    /// One-way select-one send of a typed payload with optional metadata.
    ///
    /// # Errors
    /// As [`MeshNode::channel_send`].
    pub async fn channel_send_payload(
        &self,
        channel: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.inner.select_channel(channel)?;
        let mut record = Record::new(CommandBody::ChannelSend(ChannelSend {
            channel_name: channel.to_owned(),
            source: self.inner.fence(),
            target: conn.peer().clone(),
        }))
        .with_payload(payload);
        record.metadata = metadata;
        self.inner.send_app_record(&conn, Leg::Send, &record).await
    }

    /// The configured fencing margin (glossary §8).
    pub fn fencing_margin(&self) -> Duration {
        self.inner.config.timings.fencing_margin
    }

    /// Whether this host may admit new object work now: its owner lease was last confirmed
    /// recently enough that the fencing deadline (lease deadline − fencing margin, glossary §8)
    /// has not passed. Always open without a store. A host whose renewals keep failing closes
    /// admission here, before any other node could take its objects over.
    pub fn admission_open(&self) -> bool {
        self.inner.now_ms() < self.inner.fencing_deadline_ms.load(Ordering::Acquire)
    }

    /// Whether the owner lease is lost for good: the store said the token is stale, or the
    /// lease deadline passed before a renewal landed. Such a node stays fenced; only a new
    /// lifecycle (a new [`MeshNode`]) serves again (issue 20 item 2). Never true without a
    /// store.
    pub fn lease_lost(&self) -> bool {
        *self.inner.lease_lost.borrow()
    }

    /// A watch that turns `true` when the owner lease is lost for good.
    pub fn subscribe_lease_lost(&self) -> watch::Receiver<bool> {
        self.inner.lease_lost.subscribe()
    }

    /// The owner-lease keeper's counters now (zeros without a store).
    pub fn lease_stats(&self) -> LeaseStats {
        let now = self.inner.now_ms();
        let k = self
            .inner
            .lease_keeper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        k.as_ref().map_or_else(LeaseStats::default, |k| LeaseStats {
            attempts: k.attempts(),
            failures: k.failures(),
            fenced: Duration::from_millis(k.fenced_ms(now)),
            lost: k.lost(),
        })
    }

    /// Attach the object runtime that receives admitted Spot / Actor commands (once).
    ///
    /// # Errors
    /// `InvalidOperation` when a sink is attached already.
    pub fn set_object_sink(&self, sink: Arc<dyn super::ObjectSink>) -> Result<(), CallError> {
        self.inner.object_sink.set(sink).map_err(|_| {
            CallError::new(
                ErrorKind::InvalidOperation,
                "an object runtime is attached to this node already",
            )
        })
    }

    /// The ready connection to the owner node named by `route`, if it is still that lifecycle.
    fn owner_conn(&self, route: &RouteFence) -> Result<ConnRef, CallError> {
        self.conn_to(&route.target_node, &route.object_id)
    }

    /// The ready connection to node `target`, only while it is still that lifecycle (`what`
    /// names the object the call is about, for the error).
    fn conn_to(&self, target: &NodeFence, what: &str) -> Result<ConnRef, CallError> {
        let conn = self.inner.ready_conn(&target.rid)?;
        if conn.peer().lifecycle_generation != target.lifecycle_generation {
            return Err(CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "node {} (for {what}) is another lifecycle than the one chosen",
                    target.rid
                ),
            ));
        }
        Ok(conn)
    }

    /// One-way Spot / Actor send on a resolved `route` (wire 21 / 24); completes at
    /// source-local admission. Never retargeted.
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that owner lifecycle), `ShuttingDown`,
    /// `InvalidOperation` (encoding).
    pub async fn object_send(
        &self,
        route: RouteFence,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.owner_conn(&route)?;
        let record = self.object_send_record(route, payload, metadata);
        self.inner.send_app_record(&conn, Leg::Send, &record).await
    }

    /// The `spotSend` (21) / `actorSend` (24) record of a one-way send on `route`.
    fn object_send_record(
        &self,
        route: RouteFence,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Record {
        let source = self.inner.fence();
        let body = match route.object_kind {
            zlink_protocol::generated::ObjectKind::Actor => {
                CommandBody::ActorSend(ActorSend { route, source })
            }
            zlink_protocol::generated::ObjectKind::Spot => {
                CommandBody::SpotSend(SpotSend { route, source })
            }
        };
        let mut record = Record::new(body).with_payload(payload);
        record.metadata = metadata;
        record
    }

    /// [`MeshNode::object_send`] without waiting, for a caller that would otherwise build the
    /// waiting path's future only to find it ready: `Ok` once sent; the payload and metadata
    /// come back when the record cannot go at once (no connection, credit or queue room now,
    /// shutting down), and [`MeshNode::object_send`] then sends it or reports why.
    pub(crate) fn try_object_send(
        &self,
        route: RouteFence,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<(), (TypedPayload, Option<Metadata>)> {
        let conn = match self.check_open().and_then(|()| self.owner_conn(&route)) {
            Ok(c) => c,
            Err(_) => return Err((payload, metadata)),
        };
        let record = self.object_send_record(route, payload, metadata);
        if self.inner.try_send_app_record(&conn, Leg::Send, &record) {
            Ok(())
        } else {
            Err((record.payload.unwrap_or_default(), record.metadata))
        }
    }

    /// Spot / Actor request on a resolved `route` (wire 22 / 25), with one end-to-end deadline.
    ///
    /// # Errors
    /// As [`MeshNode::request`]; `StaleRoute` when the owner no longer holds the route.
    pub async fn object_request(
        &self,
        route: RouteFence,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Duration,
    ) -> Result<TypedPayload, CallError> {
        self.check_open()?;
        let conn = self.owner_conn(&route)?;
        self.request_on(
            conn,
            move |request, source, _target| match route.object_kind {
                zlink_protocol::generated::ObjectKind::Actor => {
                    CommandBody::ActorRequest(ActorRequest {
                        request,
                        route,
                        source,
                    })
                }
                zlink_protocol::generated::ObjectKind::Spot => {
                    CommandBody::SpotRequest(SpotRequest {
                        request,
                        route,
                        source,
                    })
                }
            },
            Some(payload),
            metadata,
            timeout,
        )
        .await
    }

    /// A session relay one-way on a stored binding route (wire 24 with the bound-session tail;
    /// issue 19 item 5); completes at source-local admission. Never retargeted.
    ///
    /// # Errors
    /// As [`MeshNode::object_send`].
    pub async fn object_send_bound(
        &self,
        route: &RouteFence,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        session: zlink_protocol::generated::SessionRef,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.owner_conn(route)?;
        let mut record = Record::new(CommandBody::ActorSend(ActorSend {
            route: route.clone(),
            source: self.inner.fence(),
        }))
        .with_payload(payload);
        record.metadata = metadata;
        record.bound_session = Some(zlink_protocol::generated::BoundSessionTail { session });
        self.inner.send_app_record(&conn, Leg::Send, &record).await
    }

    /// A session relay request on a stored binding route (wire 25 with the bound-session
    /// tail), with one end-to-end deadline. `submitted` runs once the request was handed to the
    /// connection (or failed to be): what is sent on that connection afterwards goes behind it.
    ///
    /// # Errors
    /// As [`MeshNode::object_request`].
    pub async fn object_request_bound(
        &self,
        route: &RouteFence,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        session: zlink_protocol::generated::SessionRef,
        timeout: Duration,
        submitted: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<TypedPayload, CallError> {
        self.check_open()?;
        let conn = self.owner_conn(route)?;
        let route = route.clone();
        self.request_on_tailed(
            conn,
            move |request, source, _target| {
                CommandBody::ActorRequest(ActorRequest {
                    request,
                    route,
                    source,
                })
            },
            Some(payload),
            metadata,
            Some(session),
            timeout,
            submitted,
        )
        .await
    }

    /// Bind `session` (one of this node's) to the Actor incarnation `route` names: command 38
    /// to its owner, answered once (issue 19 item 4).
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that owner lifecycle), the owner's refusal,
    /// `DeadlineExceeded`.
    pub async fn session_bind(
        &self,
        session: &zlink_protocol::generated::SessionRef,
        route: &RouteFence,
        timeout: Duration,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.owner_conn(route)?;
        self.request_on(
            conn,
            |request, _source, _target| {
                CommandBody::BoundSessionBind(zlink_protocol::generated::BoundSessionBind {
                    request,
                    session: session.clone(),
                    actor_route: route.clone(),
                })
            },
            None,
            None,
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// An Actor's push to its bound session on the session's owner node (wire 36; no
    /// metadata). Completes at source-local admission.
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that session owner lifecycle), `ShuttingDown`.
    pub async fn bound_session_send(
        &self,
        body: zlink_protocol::generated::BoundSessionSend,
        payload: TypedPayload,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.conn_to(&body.session.owner_node, &body.actor_id)?;
        let record = Record::new(CommandBody::BoundSessionSend(body)).with_payload(payload);
        self.inner.send_app_record(&conn, Leg::Send, &record).await
    }

    /// Send one session control record to node lifecycle `target`: `sessionRelocationSeal`
    /// (42, request leg), `sessionRelocationSealed` (43, reply leg), `sessionRelocationRoute`
    /// (44, send leg; wire §10 "Session route") or `boundSessionReplaced` (51, send leg; wire
    /// §3.2). They carry their own identities (no
    /// request header); on one connection they keep their order with the relays before them.
    ///
    /// # Errors
    /// `InvalidOperation` for any other command; as the relocation control records otherwise
    /// (`Unavailable`: no ready connection to that lifecycle).
    pub fn session_control(&self, target: &NodeFence, body: CommandBody) -> Result<(), CallError> {
        let leg = match &body {
            CommandBody::SessionRelocationSeal(_) => Leg::Request,
            CommandBody::SessionRelocationSealed(_) => Leg::Reply,
            CommandBody::SessionRelocationRoute(_) | CommandBody::BoundSessionReplaced(_) => {
                Leg::Send
            }
            other => {
                return Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "{:?} is not a session relocation control record",
                        other.command()
                    ),
                ));
            }
        };
        self.relocation_record(target, leg, body, None)
    }

    /// Whether this node is shutting down (it takes no new work).
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::Acquire)
    }

    /// Send the single terminal reply of an admitted request back to `source` (on its current
    /// connection; a source that is gone is counted as `reply_unroutable`).
    pub fn reply_to(
        &self,
        source: &NodeFence,
        request: &RequestHeader,
        result: Result<TypedPayload, CallError>,
    ) {
        super::dispatch::send_reply(&self.inner, source, request, result);
    }

    /// Ask node `target` to create an object into the slot reserved by `reservation`: a User
    /// Spot (command 47, `membership` `None`) or an Actor (command 49, member of `membership`).
    /// Ok means the target committed it (Created).
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that lifecycle), `DeadlineExceeded` (outcome
    /// unknown: reconcile by reading the authority), the target's error.
    pub async fn object_create(
        &self,
        target: &NodeFence,
        id: &str,
        stable_type: &str,
        membership: Option<&str>,
        reservation: ReservationFence,
        timeout: Duration,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.conn_to(target, id)?;
        self.request_on(
            conn,
            |request, source, _| match membership {
                None => CommandBody::UserSpotCreate(UserSpotCreate {
                    request,
                    source,
                    spot_id: id.to_owned(),
                    stable_type: stable_type.to_owned(),
                    reservation,
                }),
                Some(spot) => CommandBody::ActorCreate(zlink_protocol::generated::ActorCreate {
                    request,
                    source,
                    actor_id: id.to_owned(),
                    stable_type: stable_type.to_owned(),
                    membership_spot_id: spot.to_owned(),
                    reservation,
                }),
            },
            None,
            None,
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Ask node `target` to close User Spot incarnation `spot` (command 48, wire §8.1), with
    /// the owner generation and StoreVersion the caller read. Ok means closed.
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that lifecycle), `DeadlineExceeded`, the target's
    /// error (`Conflict` when the Spot changed meanwhile).
    pub async fn user_spot_close(
        &self,
        target: &NodeFence,
        spot: zlink_protocol::generated::SpotRef,
        authority_owner_generation: u64,
        store_version: u64,
        timeout: Duration,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.conn_to(target, &spot.spot_id)?;
        let target_node = target.clone();
        self.request_on(
            conn,
            move |request, source, _| {
                CommandBody::UserSpotClose(zlink_protocol::generated::UserSpotClose {
                    request,
                    source,
                    spot,
                    target_node,
                    authority_owner_generation,
                    store_version,
                })
            },
            None,
            None,
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Ask the owner named by `route` to destroy that Actor incarnation (command 27). Ok means
    /// destroyed.
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that lifecycle), `DeadlineExceeded`, the owner's
    /// error (`Conflict` when the incarnation or owner changed meanwhile).
    pub async fn actor_destroy(
        &self,
        route: &RouteFence,
        timeout: Duration,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.owner_conn(route)?;
        let route = route.clone();
        self.request_on(
            conn,
            move |request, source, _| {
                CommandBody::ActorDestroy(zlink_protocol::generated::ActorDestroy {
                    request,
                    route,
                    source,
                })
            },
            None,
            None,
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// One Logical Multicast publish (command 23) to node `target`, a one-way record that
    /// completes at source-local admission.
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that lifecycle), `ShuttingDown`, `InvalidOperation`
    /// (encoding).
    pub async fn logical_multicast(
        &self,
        target: &NodeFence,
        channel: &str,
        topic: &str,
        publish_sequence: u64,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.conn_to(target, topic)?;
        let mut record = Record::new(CommandBody::LogicalMulticast(
            zlink_protocol::generated::LogicalMulticast {
                channel_name: channel.to_owned(),
                topic: topic.to_owned(),
                publish_sequence,
                source: self.inner.fence(),
            },
        ))
        .with_payload(payload);
        record.metadata = metadata;
        self.inner.send_app_record(&conn, Leg::Send, &record).await
    }

    /// An Instance Spot operation (command 39, wire §8) to node `target`: a request when
    /// `timeout` is `Some` (its reply is the result), otherwise a one-way send that completes
    /// at source-local admission. `route` is kind 2 (cold activation) or kind 1.
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that lifecycle), `DeadlineExceeded`, the target's
    /// error.
    pub async fn instance_spot(
        &self,
        target: &NodeFence,
        route: zlink_protocol::generated::InstanceRoute,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        use zlink_protocol::generated::{InstanceSpot, OperationKind};
        self.check_open()?;
        let conn = self.conn_to(target, "an Instance Spot")?;
        // Kind 2 names the operation's deadline: the body carries the same value (wire §8).
        let route_deadline = match &route {
            zlink_protocol::generated::InstanceRoute::Missing(m) => Some(m.deadline_unix_ms),
            zlink_protocol::generated::InstanceRoute::Ready(_) => None,
        };
        if let Some(timeout) = timeout {
            return self
                .request_on(
                    conn,
                    move |request, source, _| {
                        CommandBody::InstanceSpot(InstanceSpot {
                            operation_kind: OperationKind::Request,
                            operation_id: request.operation_id,
                            reply_route_id: Some(request.reply_route_id),
                            correlation_id: Some(request.correlation_id),
                            deadline_unix_ms: route_deadline.unwrap_or(request.deadline_unix_ms),
                            source,
                            source_spot_id: String::new(),
                            route,
                        })
                    },
                    Some(payload),
                    metadata,
                    timeout,
                )
                .await
                .map(Some);
        }
        let operation_id = {
            let mut ids = self
                .inner
                .ids
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ids.operation.allocate()?
        };
        let deadline_unix_ms = match &route {
            zlink_protocol::generated::InstanceRoute::Missing(m) => m.deadline_unix_ms,
            zlink_protocol::generated::InstanceRoute::Ready(_) => SystemTime::now()
                .checked_add(Duration::from_secs(30))
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(u64::MAX, |d| {
                    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
                }),
        };
        let mut record = Record::new(CommandBody::InstanceSpot(InstanceSpot {
            operation_kind: OperationKind::Send,
            operation_id,
            reply_route_id: None,
            correlation_id: None,
            deadline_unix_ms,
            source: self.inner.fence(),
            source_spot_id: String::new(),
            route,
        }))
        .with_payload(payload);
        record.metadata = metadata;
        self.inner
            .send_app_record(&conn, Leg::Send, &record)
            .await
            .map(|()| None)
    }

    /// Propose that the Actor of `actor_route` join the Spot of `spot_route` (command 28,
    /// wire §9), to the owner `actor_route` names. Ok means the membership change committed.
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that lifecycle), `DeadlineExceeded` (outcome
    /// unknown: read the Actor's authority), the owner's error (`StaleRoute` when a fence no
    /// longer matches, `NotFound`, `InvalidOperation`).
    pub async fn actor_join(
        &self,
        actor_route: &RouteFence,
        entry: bool,
        spot_route: &RouteFence,
        timeout: Duration,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.owner_conn(actor_route)?;
        let (actor_route, target_spot_route) = (actor_route.clone(), spot_route.clone());
        self.request_on(
            conn,
            move |request, _, _| {
                CommandBody::ActorJoin(zlink_protocol::generated::ActorJoin {
                    request,
                    actor_route,
                    entry,
                    target_spot_route,
                })
            },
            None,
            None,
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// Answer an object control request (create, close, destroy, join) once: `Ok(tail)` carries the operation's success tail
    /// (e.g. `ReplyResult::UserSpotCreate { outcome: Created, spot }`).
    pub fn reply_create(
        &self,
        source: &NodeFence,
        request: &RequestHeader,
        result: Result<ReplyResult, CallError>,
    ) {
        match result {
            Ok(tail) => {
                super::dispatch::send_reply_tail(&self.inner, source, request, Ok(None), tail)
            }
            Err(e) => super::dispatch::send_reply(&self.inner, source, request, Err(e)),
        }
    }

    /// Send one relocation control record (wire §9–§11: 40, 52, 30, 53, 31, 34, 33) to node
    /// lifecycle `target` on its current connection. Control records are not flow charged and
    /// keep their order with each other on one connection epoch.
    ///
    /// # Errors
    /// `Unavailable` (no ready connection to that lifecycle, or the connection refused the
    /// record), `ShuttingDown`, `InvalidOperation` (encoding).
    pub(crate) fn relocation_record(
        &self,
        target: &NodeFence,
        leg: super::connection::Leg,
        body: CommandBody,
        payload: Option<TypedPayload>,
    ) -> Result<(), CallError> {
        self.check_open()?;
        let conn = self.conn_to(target, "a relocation")?;
        let mut record = Record::new(body);
        record.payload = payload;
        // Encoded straight into the message (a chunk's payload is copied once, not twice).
        let msg = self.inner.encode_packed(
            &record,
            zlink_protocol::record::WireContext::route_mesh(leg.wire()),
        )?;
        if conn.send_control_packed(leg, msg) {
            Ok(())
        } else {
            Err(CallError::new(
                ErrorKind::Unavailable,
                format!("the connection to {} did not take the record", target.rid),
            ))
        }
    }

    /// Carry a request this node accepted into a relocation (wire §11): register `waker` as a
    /// pending request answered by a `replyRelay` (33) from `via` (the relocation target), and
    /// return the terminal identity the carried record names. The request keeps its deadline.
    ///
    /// # Errors
    /// `InvalidOperation` (identities exhausted), `Backpressured` (pending table full),
    /// `ShuttingDown`; the waker is dropped then, so its caller sees the request end.
    pub(crate) fn carry_request(
        &self,
        via: &NodeFence,
        waker: super::state::Waker,
        deadline_unix_ms: u64,
    ) -> Result<(RequestHeader, PendingKey), CallError> {
        let (operation_id, reply_route_id, correlation_id) = self.request_identity()?;
        let key = PendingKey::new(&operation_id, reply_route_id);
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let deadline_ms = self
            .inner
            .now_ms()
            .saturating_add(deadline_unix_ms.saturating_sub(now_unix));
        self.inner.pending().insert(
            key,
            correlation_id.clone(),
            PeerRef::new(via.rid.clone(), via.lifecycle_generation),
            deadline_ms,
            waker,
        )?;
        Ok((
            RequestHeader {
                operation_id,
                reply_route_id,
                correlation_id,
                deadline_unix_ms: deadline_unix_ms.max(1),
            },
            key,
        ))
    }

    /// A fresh terminal identity for a request this node issues: OperationId, ReplyRouteId
    /// and correlation ID (wire §11).
    pub(crate) fn request_identity(
        &self,
    ) -> Result<(zlink_protocol::generated::OperationId, u64, String), CallError> {
        let (mut operation_id, reply_route_id, correlation_id) = {
            let mut ids = self
                .inner
                .ids
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (
                ids.operation.allocate()?,
                ids.reply_route.allocate()?,
                ids.correlation.allocate()?,
            )
        };
        // The counter keeps OperationIds unique (the low word never repeats); a keyed PRF in
        // the high word makes them unguessable, so a peer that sees its own requests' IDs
        // cannot forge replies to requests sent elsewhere.
        operation_id.high ^= self.inner.operation_salt(operation_id.low);
        Ok((operation_id, reply_route_id, correlation_id))
    }

    /// Take a carried request back (its relocation was undone): the waker, unless its terminal
    /// arrived already.
    pub(crate) fn uncarry(&self, key: &PendingKey) -> Option<super::state::Waker> {
        self.inner.pending().cancel(key).map(|c| c.waker)
    }

    /// This node's current owner lease as a wire fence, when it runs with a store.
    pub fn lease_fence(&self) -> Option<zlink_protocol::generated::LeaseFence> {
        self.owner_token()
            .map(|t| zlink_protocol::generated::LeaseFence {
                owner_node: self.inner.fence(),
                owner_lease_generation: t.lease_generation,
            })
    }

    /// This node's fence (RID and lifecycle generation).
    pub fn fence(&self) -> NodeFence {
        self.inner.fence()
    }

    /// Change this node's Server weight for RouteMesh Channel `channel` (0..=10000) and
    /// announce it to peers by a revision-ordered `update` (wire §4). Weight `0` keeps the node
    /// out of new selections without cancelling work already submitted to it.
    ///
    /// # Errors
    /// `Configuration` for a weight above 10000; `InvalidOperation` when this node has no
    /// Server membership of `channel`.
    pub fn set_channel_weight(&self, channel: &str, weight: u16) -> Result<(), CallError> {
        if weight > crate::select::MAX_WEIGHT {
            return Err(CallError::new(
                ErrorKind::Configuration,
                format!("channel weight {weight} is outside 0..=10000"),
            ));
        }
        let serves = self
            .inner
            .config
            .channels
            .iter()
            .any(|c| c.channel_name == channel && c.role == ChannelRole::Server);
        if !serves {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!("this node has no Server membership of channel {channel:?}"),
            ));
        }
        self.update_descriptor(|d| {
            for c in &mut d.channels {
                if c.channel_name == channel && c.role == ChannelRole::Server {
                    c.weight = weight;
                }
            }
        });
        Ok(())
    }

    /// The request path shared by node direct, select-one and object requests: `conn` is the
    /// chosen target; `body` builds the command from the request header, this node's fence
    /// and the target's.
    async fn request_on(
        &self,
        conn: ConnRef,
        body: impl FnOnce(RequestHeader, NodeFence, NodeFence) -> CommandBody,
        payload: Option<TypedPayload>,
        metadata: Option<Metadata>,
        timeout: Duration,
    ) -> Result<TypedPayload, CallError> {
        self.request_on_tailed(conn, body, payload, metadata, None, timeout, None)
            .await
    }

    /// [`MeshNode::request_on`] with a bound-session tail (flag 0x02) on the record.
    #[allow(clippy::too_many_arguments)]
    async fn request_on_tailed(
        &self,
        conn: ConnRef,
        body: impl FnOnce(RequestHeader, NodeFence, NodeFence) -> CommandBody,
        payload: Option<TypedPayload>,
        metadata: Option<Metadata>,
        bound_session: Option<zlink_protocol::generated::SessionRef>,
        timeout: Duration,
        submitted: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<TypedPayload, CallError> {
        let started = Instant::now();
        let deadline_wall = SystemTime::now() + timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let (operation_id, reply_route_id, correlation_id) = self.request_identity()?;
        let key = PendingKey::new(&operation_id, reply_route_id);
        let (tx, rx) = oneshot::channel();
        let deadline_ms = self
            .inner
            .now_ms()
            .saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        self.inner.pending().insert(
            key,
            correlation_id.clone(),
            PeerRef::new(conn.peer().rid.clone(), conn.peer().lifecycle_generation),
            deadline_ms,
            tx,
        )?;
        // From here on the table owns the terminal; this guard cancels it if the caller drops
        // the future.
        let guard = CancelGuard {
            inner: &self.inner,
            key,
            armed: true,
        };
        let deadline_unix_ms = deadline_wall.duration_since(UNIX_EPOCH).map_or(1, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        let request = RequestHeader {
            operation_id,
            reply_route_id,
            correlation_id,
            deadline_unix_ms,
        };
        let body = body(request, self.inner.fence(), conn.peer().clone());
        let mut record = Record::new(body);
        record.payload = payload;
        record.metadata = metadata;
        record.bound_session =
            bound_session.map(|session| zlink_protocol::generated::BoundSessionTail { session });
        let sent = tokio::time::timeout_at(
            deadline,
            self.inner.send_app_record(&conn, Leg::Request, &record),
        )
        .await;
        if let Some(f) = submitted {
            f();
        }
        let send_err = match sent {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(CallError::new(
                ErrorKind::DeadlineExceeded,
                "deadline passed while waiting for send capacity",
            )),
        };
        if let Some(e) = send_err {
            // The send failed before the request left: complete it with that error unless
            // something else already completed it.
            let done = self.inner.pending().cancel(&key);
            let mut guard = guard;
            guard.armed = false;
            return match done {
                Some(_) => Err(e),
                None => rx.await.unwrap_or_else(|_| Err(e)),
            };
        }
        let mut rx = rx;
        let outcome = match tokio::time::timeout_at(deadline, &mut rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(CallError::new(ErrorKind::ShuttingDown, "node stopped")),
            Err(_) => {
                // Deadline: let the table decide whether the timer or a racing reply won.
                let expired = self.inner.pending().expire_key(&key);
                match expired {
                    Some(_) => Err(CallError::new(
                        ErrorKind::DeadlineExceeded,
                        format!("no reply from {} within {timeout:?}", conn.peer().rid),
                    )),
                    None => rx.await.unwrap_or_else(|_| {
                        Err(CallError::new(ErrorKind::ShuttingDown, "node stopped"))
                    }),
                }
            }
        };
        let mut guard = guard;
        guard.armed = false;
        self.inner
            .metrics
            .request_latency
            .observe(started.elapsed());
        outcome
    }

    /// Change the placement weight (0..=10000) and announce it by `update`.
    ///
    /// # Errors
    /// `InvalidOperation` for a weight above 10000.
    pub fn set_placement_weight(&self, weight: u16) -> Result<(), CallError> {
        if weight > 10_000 {
            return Err(CallError::new(
                ErrorKind::Configuration,
                "weight must be 0..=10000",
            ));
        }
        self.update_descriptor(|d| d.placement_weight = weight);
        Ok(())
    }

    /// Change the announced runtime state.
    pub fn set_runtime_state(&self, state: RuntimeState) {
        self.update_descriptor(|d| d.state = state);
    }

    /// Change the maintenance wave.
    pub fn set_maintenance_wave(&self, wave: &str) {
        let wave = wave.chars().take(255).collect::<String>();
        self.update_descriptor(|d| d.maintenance_wave = wave);
    }

    /// Change the placement capacity announced in `update`.
    pub fn set_placement_capacity(&self, capacity: u32) {
        self.inner
            .placement_capacity
            .store(u64::from(capacity), Ordering::Release);
        self.update_descriptor(|_| {});
    }

    fn update_descriptor(&self, f: impl FnOnce(&mut NodeDescriptor)) {
        let mut d = self
            .inner
            .descriptor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut d);
        d.descriptor_revision += 1;
        // Queued while the lock is held, so broadcasts leave in revision order.
        let _ = self
            .inner
            .cmd_tx
            .send(Cmd::Broadcast(update_of(&self.inner, &d)));
    }

    /// Fault injection: while frozen, the node's reactor processes nothing — no inbound
    /// records, no timers — but its socket stays open, like a stalled process (a long pause or
    /// `SIGSTOP`). Peers must detect it by liveness alone. Unfreezing resumes processing of
    /// everything that queued up meanwhile.
    pub fn set_frozen(&self, frozen: bool) {
        self.inner.faults.frozen.store(frozen, Ordering::Release);
        self.inner.faults.changed.notify_waiters();
    }

    /// Fault injection: answer no liveness probe while still sending everything else
    /// (application records, own probes). Peers must still declare this node dead at their
    /// deadline (wire §5: other traffic does not extend it).
    pub fn set_drop_liveness_acks(&self, drop_acks: bool) {
        self.inner
            .faults
            .drop_liveness_acks
            .store(drop_acks, Ordering::Release);
    }

    /// Fault injection: stop renewing the owner lease (everything else keeps running), as a
    /// host whose store connection is cut would. The node fences itself at its fencing
    /// deadline; once the lease expired, resuming renewals finds it lost.
    pub fn set_lease_renewal_paused(&self, paused: bool) {
        self.inner
            .faults
            .pause_lease_renewal
            .store(paused, Ordering::Release);
    }

    /// Send a repeated `hello` on the live admitted connection to `rid` (which this node must
    /// have dialed). Admission is idempotent: the connection keeps its generation (wire §5).
    /// For tests and diagnostics.
    pub fn resend_hello(&self, rid: &str) {
        let _ = self.inner.cmd_tx.send(Cmd::ReHello(rid.to_owned()));
    }

    /// Graceful shutdown: refuse new work, complete pending requests with `ShuttingDown`,
    /// release the owner lease, stop the tasks and close the socket.
    pub async fn shutdown(&self) {
        if self.inner.shutting_down.swap(true, Ordering::AcqRel) {
            return;
        }
        for c in self.inner.pending().shutdown() {
            let _ = c.waker.send(c.outcome);
        }
        let (tx, rx) = oneshot::channel();
        let _ = self.inner.cmd_tx.send(Cmd::Shutdown(tx));
        let _ = tokio::time::timeout(Duration::from_secs(2), rx).await;
        self.inner.jobs.close();
        let token = self
            .inner
            .lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let (Some(store), Some(token)) = (&self.inner.store, token) {
            let _ = store.release_lease(&token).await;
        }
        self.stop_tasks().await;
    }

    /// Abort the node's tasks, then stop the pump (its inbound receiver is gone by then, so
    /// the join cannot wait on a full channel).
    async fn stop_tasks(&self) {
        let tasks: Vec<_> = std::mem::take(
            &mut *self
                .tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        let pump = self
            .pump
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut p) = pump {
            tokio::task::spawn_blocking(move || p.stop()).await.ok();
        }
    }
}

impl Drop for MeshNode {
    fn drop(&mut self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            t.abort();
        }
    }
}

struct CancelGuard<'a> {
    inner: &'a Arc<Inner>,
    key: PendingKey,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            // The caller dropped the request future: it completes as Cancelled (nobody is
            // listening) and a late reply is counted and dropped.
            let _ = self.inner.pending().cancel(&self.key);
        }
    }
}

/// The `update` body announcing descriptor `d`.
pub(crate) fn update_of(inner: &Inner, d: &NodeDescriptor) -> Update {
    Update {
        sender: NodeFence {
            rid: d.node.rid.clone(),
            lifecycle_generation: d.node.lifecycle_generation,
        },
        descriptor_revision: d.descriptor_revision,
        state: d.state,
        placement_weight: d.placement_weight,
        placement_capacity: u32::try_from(inner.placement_capacity.load(Ordering::Acquire))
            .unwrap_or(u32::MAX),
        maintenance_wave: d.maintenance_wave.clone(),
        channel_weights: d
            .channels
            .iter()
            .filter(|c| c.role == ChannelRole::Server)
            .map(|c| zlink_protocol::generated::ChannelWeight {
                channel_name: c.channel_name.clone(),
                weight: c.weight,
            })
            .collect(),
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}
