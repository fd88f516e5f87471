//! The ClientServer Server (glossary §8): one ROUTER, admission of client `hello`s, liveness
//! both ways, `update` pushes, handler dispatch of `request`/`command` envelopes and their
//! single terminal `response`/`error`, drain, runtime weight, descriptor publication under an
//! owner lease and graceful shutdown.
//!
//! The server never starts a call to a client: it has no API for it, and the only records it
//! originates are `admit`/`reject` (on a hello's reply leg), `update`, liveness and the reply
//! of a request it received.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::JoinHandle;
use zlink_protocol::channel_envelope::{
    ChannelHeader, MAX_DETAIL_BYTES, decode_record, is_channel_envelope,
};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    ChannelRole, ChannelWeight, CommandBody, Hello, LivenessAck, LivenessProbe, NodeDescriptor,
    NodeFence, Reject, RejectReason, RuntimeState, Update,
};
use zlink_protocol::ids;
use zlink_protocol::metadata::Metadata;
use zlink_protocol::record::{Leg, Record, WireContext};
use zlink_protocol::shared_str::SharedStr;
use zlink_store::types::OwnerToken;

use super::admission::{self, NonceGuard, SideIdentity};
use super::config::{
    ClientServerError, ServerConfig, normalize_max_message_bytes, validate_name, validate_timings,
    validate_weight,
};
use super::descriptor::ServerDescriptor;
use super::socket::{ROUTER_CONN, SocketConfig, SocketEvent, SocketHandle, SocketThread};
use super::store::ClientServerStore;
use super::{ProtocolErrors, ms, new_generation, process_context, random};
use crate::call::error::{CallError, ErrorKind};
use crate::jobs::{JobPermit, JobQueue};
use crate::mesh::handler::{Handler, Handlers, MessageContext, MessageKind};
use crate::mesh::liveness::{Liveness, LivenessAction};

/// Counters of a server.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    /// Protocol errors by kind (never dispatched).
    pub protocol_errors: ProtocolErrors,
    /// Hellos admitted.
    pub admitted: AtomicU64,
    /// Hellos rejected.
    pub rejected: AtomicU64,
    /// Records from a routing identity that is not admitted (dropped).
    pub unadmitted: AtomicU64,
    /// Records handed to handlers.
    pub delivered: AtomicU64,
    /// Requests or commands without a handler.
    pub no_handler: AtomicU64,
    /// Handlers that panicked.
    pub handler_panics: AtomicU64,
    /// Terminal replies sent.
    pub replies_sent: AtomicU64,
    /// Replies refused because they exceeded the admitted limit (sent as an error instead).
    pub replies_too_large: AtomicU64,
    /// Client connections declared dead by liveness.
    pub liveness_deaths: AtomicU64,
    /// `update` records pushed.
    pub updates_sent: AtomicU64,
    /// Requests and commands refused because the owner lease's fencing deadline passed.
    pub fenced_refusals: AtomicU64,
    /// Clients disconnected because their parked replies passed `client_queue_cap_bytes`.
    pub client_overflows: AtomicU64,
    /// Requests answered `Backpressured` and commands dropped because every job permit was
    /// in use.
    pub backpressured: AtomicU64,
    /// Requests refused (`Unavailable`) and commands dropped because the server drains.
    pub drain_refusals: AtomicU64,
}

/// One admitted client connection (keyed by its ROUTER routing identity).
struct ClientConn {
    client: Arc<NodeFence>,
    liveness: Liveness,
    limit: u64,
}

/// The selection state the server announces.
#[derive(Debug, Clone, Copy)]
struct Selection {
    weight: u16,
    state: RuntimeState,
    revision: u64,
}

/// Fault injection for tests (like MeshNode's).
#[derive(Debug, Default)]
struct Faults {
    drop_liveness_acks: AtomicBool,
}

struct Job {
    ctx: MessageContext,
    payload: TypedPayload,
    reply: Option<ReplyTo>,
    /// Released at the handler's first instruction (as in `mesh/dispatch.rs`).
    permit: JobPermit,
}

struct ReplyTo {
    routing_id: Bytes,
    correlation_id: String,
    limit: u64,
}

pub(crate) struct ServerInner {
    config: ServerConfig,
    rid: zlink_protocol::shared_str::SharedStr,
    lifecycle: u64,
    endpoint: String,
    owner_id: String,
    limit: u64,
    socket: SocketHandle,
    conns: Mutex<HashMap<Bytes, ClientConn>>,
    selection: Mutex<Selection>,
    nonces: Mutex<NonceGuard>,
    metrics: ServerMetrics,
    shutting_down: AtomicBool,
    /// Set by `drain()`: new requests and commands are refused.
    draining: AtomicBool,
    inflight: AtomicUsize,
    idle: Notify,
    wake: Notify,
    faults: Faults,
    store: Option<Arc<dyn ClientServerStore>>,
    lease: Mutex<Option<OwnerToken>>,
    /// Fencing deadline in ms of `epoch` (glossary §8): after it, without a newer renewal, no
    /// new work is accepted. `u64::MAX` without a store.
    fence_at: AtomicU64,
    epoch: Instant,
    runners: RunnerTxs,
    jobs: JobQueue,
}

/// How long a graceful stop waits before closing the socket, and its linger at the close, so
/// the last replies leave and are read by the clients (see `shutdown`).
const SHUTDOWN_LINGER: Duration = Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running ClientServer Server.
pub struct ClientServerServer {
    inner: Arc<ServerInner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    socket: Mutex<Option<SocketThread>>,
}

impl std::fmt::Debug for ClientServerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientServerServer")
            .field("rid", &self.inner.rid)
            .field("lifecycle", &self.inner.lifecycle)
            .field("endpoint", &self.inner.endpoint)
            .finish_non_exhaustive()
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

impl ClientServerServer {
    /// Validate, bind the ROUTER with a new lifecycle generation, claim the owner lease and
    /// publish the Server descriptor (with a store), then start serving.
    ///
    /// # Errors
    /// [`ClientServerError`] for bad configuration (including duplicate handlers), a socket
    /// or a store failure.
    pub async fn start(
        config: ServerConfig,
        handlers: Handlers,
        store: Option<Arc<dyn ClientServerStore>>,
    ) -> Result<Self, ClientServerError> {
        validate_name("channel_name", &config.channel_name)?;
        validate_name("security_identity", &config.security_identity)?;
        validate_timings(&config.timings)?;
        validate_weight(u32::from(config.weight))?;
        let limit = normalize_max_message_bytes(config.max_message_bytes)?;
        let jobs = JobQueue::new(config.jobs).map_err(|e| ClientServerError::Config {
            field: "jobs",
            reason: e.to_string(),
        })?;
        let handler_map =
            handlers
                .build(&config.channel_name)
                .map_err(|e| ClientServerError::Config {
                    field: "handlers",
                    reason: e.to_string(),
                })?;
        let rid = match &config.rid {
            Some(r) => {
                validate_name("rid", r)?;
                r.clone()
            }
            None => ids::automatic_rid("cs", random::<16>()?).map_err(|e| {
                ClientServerError::Config {
                    field: "rid",
                    reason: e.to_string(),
                }
            })?,
        };
        let lifecycle = new_generation()?;
        let owner_id = config
            .owner_id
            .clone()
            .unwrap_or_else(|| format!("host-{rid}"));

        let ctx = process_context();
        let bind = format!("tcp://{}:{}", bracket(&config.bind_host), config.port);
        let sock_cfg = SocketConfig {
            hwm: config.hwm,
            max_message_bytes: i64::try_from(limit).unwrap_or(i64::MAX),
            batch: 256,
            inbound_batches: 64,
            reconnect_ivl_ms: i32::try_from(config.timings.reconnect_interval.as_millis())
                .unwrap_or(i32::MAX),
            // The server sends only control messages (`send`, not `send_data`), which the total
            // data cap does not apply to; what waits for one client is capped per client.
            queue_cap_bytes: super::config::DEFAULT_QUEUE_CAP_BYTES,
            park_cap_bytes: config.client_queue_cap_bytes.max(1),
        };
        let (socket, bound, rx) = SocketThread::start_router(&ctx, &bind, &sock_cfg)
            .map_err(ClientServerError::Transport)?;
        let port = bound
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| ClientServerError::Transport(format!("bound endpoint {bound}")))?;
        let advertise = config
            .advertise_host
            .clone()
            .unwrap_or_else(|| config.bind_host.clone());
        let endpoint = format!("tcp://{}:{port}", bracket(&advertise));

        let (runner_txs, runner_rxs) = runners(handler_map);
        let inner = Arc::new(ServerInner {
            selection: Mutex::new(Selection {
                weight: config.weight,
                state: RuntimeState::Serving,
                revision: 1,
            }),
            config,
            rid: rid.into(),
            lifecycle,
            endpoint,
            owner_id,
            limit,
            socket: socket.handle(),
            conns: Mutex::new(HashMap::new()),
            nonces: Mutex::new(NonceGuard::new(1 << 16)),
            metrics: ServerMetrics::default(),
            shutting_down: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            idle: Notify::new(),
            wake: Notify::new(),
            faults: Faults::default(),
            store,
            lease: Mutex::new(None),
            fence_at: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            runners: runner_txs,
            jobs,
        });

        if let Some(store) = &inner.store {
            let sent = inner.now();
            let grant = store
                .claim_lease(&inner.owner_id, inner.config.timings.lease_ttl)
                .await?;
            inner.fence_at.store(
                sent.saturating_add(ms(grant.fencing_delay(inner.config.timings.fencing_margin))),
                Ordering::Release,
            );
            let d = inner.server_descriptor(grant.token.lease_generation);
            store
                .publish_descriptor(
                    &grant.token,
                    &d.key(),
                    inner.lifecycle,
                    d.descriptor_revision,
                    d.encode(),
                )
                .await?;
            *lock(&inner.lease) = Some(grant.token);
        }

        let mut tasks = vec![tokio::spawn(reactor(Arc::clone(&inner), rx))];
        for (handler, concurrency, rx) in runner_rxs {
            tasks.push(tokio::spawn(runner(
                Arc::clone(&inner),
                handler,
                concurrency,
                rx,
            )));
        }
        if inner.store.is_some() {
            tasks.push(tokio::spawn(discovery_loop(Arc::clone(&inner))));
        }
        Ok(Self {
            inner,
            tasks: Mutex::new(tasks),
            socket: Mutex::new(Some(socket)),
        })
    }

    /// Server RID.
    pub fn rid(&self) -> &str {
        &self.inner.rid
    }

    /// This run's lifecycle generation (new on every start).
    pub fn lifecycle_generation(&self) -> u64 {
        self.inner.lifecycle
    }

    /// The advertised endpoint.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// This side's normalized complete-message limit.
    pub fn max_message_bytes(&self) -> u64 {
        self.inner.limit
    }

    /// Counters.
    pub fn metrics(&self) -> &ServerMetrics {
        &self.inner.metrics
    }

    /// Returns of the socket thread from `zmq::poll` so far (a busy loop shows here).
    pub fn socket_wakeups(&self) -> u64 {
        self.inner.socket.stats().wakeups.load(Ordering::Relaxed)
    }

    /// Times a client's pipe was full and a message for it was parked.
    pub fn socket_stalls(&self) -> u64 {
        self.inner.socket.stats().stalls.load(Ordering::Relaxed)
    }

    /// Admitted client connections.
    pub fn client_count(&self) -> usize {
        lock(&self.inner.conns).len()
    }

    /// The descriptor as currently announced.
    pub fn descriptor(&self) -> ServerDescriptor {
        let lease = lock(&self.inner.lease)
            .as_ref()
            .map_or(0, |t| t.lease_generation);
        self.inner.server_descriptor(lease)
    }

    /// Change the selection weight at runtime (`0..=10000`): a new descriptor revision, pushed
    /// to every admitted client as `update` and published to the store.
    ///
    /// # Errors
    /// [`ClientServerError::WeightOutOfRange`]; [`ClientServerError::ShuttingDown`].
    pub async fn set_weight(&self, weight: u32) -> Result<(), ClientServerError> {
        let weight = validate_weight(weight)?;
        self.change(|s| s.weight = weight).await
    }

    /// Drain: announce Draining (clients stop selecting this server), refuse every request
    /// that arrives from now on with a typed `Unavailable` ("server is draining", counted in
    /// `drain_refusals`; commands are dropped and counted too), and return once the requests
    /// and commands accepted before are done and replied to. The wait has no bound of its
    /// own: wrap it in a timeout to bound it.
    ///
    /// # Errors
    /// [`ClientServerError::ShuttingDown`].
    pub async fn drain(&self) -> Result<(), ClientServerError> {
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(ClientServerError::ShuttingDown);
        }
        self.inner.draining.store(true, Ordering::Release);
        self.change(|s| s.state = RuntimeState::Draining).await?;
        self.inner.wait_idle(Duration::MAX).await;
        Ok(())
    }

    async fn change(&self, f: impl FnOnce(&mut Selection)) -> Result<(), ClientServerError> {
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(ClientServerError::ShuttingDown);
        }
        self.inner.bump(f);
        self.inner.publish().await
    }

    /// Fault injection: stop answering client liveness probes (the connection stays open).
    pub fn set_drop_liveness_acks(&self, drop_acks: bool) {
        self.inner
            .faults
            .drop_liveness_acks
            .store(drop_acks, Ordering::Release);
    }

    /// Graceful shutdown, in this order: stop new work (announce Stopped so clients stop
    /// selecting, refuse new hellos and answer new requests with `ShuttingDown`), finish the
    /// requests already accepted (at most `shutdown_grace`), remove the descriptor, release
    /// the owner lease, close the socket. Clients that discovered the server keep their
    /// connection (unselectable) until their requests are answered.
    pub async fn shutdown(&self) {
        if self.inner.shutting_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.inner.bump(|s| s.state = RuntimeState::Stopped);
        self.inner
            .wait_idle(self.inner.config.timings.shutdown_grace)
            .await;
        let token = lock(&self.inner.lease).clone();
        if let (Some(store), Some(token)) = (&self.inner.store, &token) {
            let d = self.descriptor();
            let _ = store.remove_descriptor(token, &d.key()).await;
        }
        if let (Some(store), Some(token)) = (&self.inner.store, token) {
            let _ = store.release_lease(&token).await;
        }
        // A short linger before and at the close: the last replies reach the wire and the
        // clients' sockets read them before the TCP close. A client DEALER uses
        // ZMQ_IMMEDIATE, and libzmq then drops a pipe's *unread* inbound messages when its
        // connection ends, so closing right after the last reply could lose it.
        tokio::time::sleep(SHUTDOWN_LINGER).await;
        let socket = lock(&self.socket).take();
        if let Some(mut s) = socket {
            let _ = tokio::task::spawn_blocking(move || s.stop_lingering(SHUTDOWN_LINGER)).await;
        }
        self.stop_now().await;
    }

    /// Ungraceful stop, like a crash: the socket closes at once, nothing is announced and the
    /// descriptor stays until its lease lapses. For failure tests and fatal errors.
    pub async fn abort(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        self.stop_now().await;
    }

    async fn stop_now(&self) {
        let socket = lock(&self.socket).take();
        if let Some(mut s) = socket {
            let _ = tokio::task::spawn_blocking(move || s.stop()).await;
        }
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

impl Drop for ClientServerServer {
    fn drop(&mut self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

type RunnerRx = (Handler, usize, mpsc::UnboundedReceiver<Job>);
type RunnerTxs = HashMap<(MessageKind, String), mpsc::UnboundedSender<Job>>;

fn runners(
    map: HashMap<crate::mesh::handler::HandlerKey, (Handler, usize)>,
) -> (RunnerTxs, Vec<RunnerRx>) {
    let mut txs = HashMap::new();
    let mut rxs = Vec::new();
    for (key, (handler, concurrency)) in map {
        let (tx, rx) = mpsc::unbounded_channel();
        txs.insert((key.kind, key.packet_name), tx);
        rxs.push((handler, concurrency, rx));
    }
    (txs, rxs)
}

impl ServerInner {
    fn now(&self) -> u64 {
        ms(self.epoch.elapsed())
    }

    fn identity(&self) -> SideIdentity {
        SideIdentity {
            channel_name: self.config.channel_name.clone(),
            rid: self.rid.to_string(),
            lifecycle_generation: self.lifecycle,
            endpoint: self.endpoint.clone(),
            security_identity: self.config.security_identity.clone(),
        }
    }

    fn node_descriptor(&self) -> NodeDescriptor {
        let s = *lock(&self.selection);
        admission::descriptor(
            &self.identity(),
            ChannelRole::Server,
            s.revision,
            s.state,
            s.weight,
        )
    }

    fn server_descriptor(&self, lease_generation: u64) -> ServerDescriptor {
        let s = *lock(&self.selection);
        ServerDescriptor {
            v: super::descriptor::DESCRIPTOR_VERSION,
            channel_name: self.config.channel_name.clone(),
            server_rid: self.rid.to_string(),
            lifecycle_generation: self.lifecycle,
            descriptor_revision: s.revision,
            endpoint: self.endpoint.clone(),
            weight: s.weight,
            state: s.state,
            security_identity: self.config.security_identity.clone(),
            owner_id: self.owner_id.clone(),
            lease_generation,
        }
    }

    /// Apply a change as a new revision and push it to every admitted client, under the
    /// selection lock so revisions leave in order.
    fn bump(&self, f: impl FnOnce(&mut Selection)) {
        let mut s = lock(&self.selection);
        f(&mut s);
        s.revision += 1;
        let update = Record::new(CommandBody::Update(Update {
            sender: NodeFence {
                rid: self.rid.clone(),
                lifecycle_generation: self.lifecycle,
            },
            descriptor_revision: s.revision,
            state: s.state,
            placement_weight: 0,
            placement_capacity: 0,
            maintenance_wave: String::new(),
            channel_weights: vec![ChannelWeight {
                channel_name: self.config.channel_name.clone(),
                weight: s.weight,
            }],
        }));
        let Ok(frames) = update.encode(WireContext::client_server(Leg::Send)) else {
            return;
        };
        let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
        for routing_id in lock(&self.conns).keys() {
            let mut msg = Vec::with_capacity(1 + frames.len());
            msg.push(routing_id.clone());
            msg.extend(frames.iter().cloned());
            if self.socket.send(ROUTER_CONN, msg).is_ok() {
                self.metrics.updates_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn publish(&self) -> Result<(), ClientServerError> {
        let (Some(store), Some(token)) = (&self.store, lock(&self.lease).clone()) else {
            return Ok(());
        };
        let d = self.server_descriptor(token.lease_generation);
        store
            .publish_descriptor(
                &token,
                &d.key(),
                self.lifecycle,
                d.descriptor_revision,
                d.encode(),
            )
            .await?;
        Ok(())
    }

    fn send_record(&self, routing_id: &Bytes, rec: &Record, leg: Leg) {
        match rec.encode(WireContext::client_server(leg)) {
            Ok(frames) => {
                let mut msg = Vec::with_capacity(1 + frames.len());
                msg.push(routing_id.clone());
                msg.extend(frames.into_iter().map(Bytes::from));
                let _ = self.socket.send(ROUTER_CONN, msg);
            }
            Err(e) => tracing::warn!(error = %e, "ClientServer record did not encode"),
        }
    }

    fn on_event(&self, ev: SocketEvent) {
        match ev {
            SocketEvent::Message { frames, .. } => {
                let Some((routing_id, rest)) = frames.split_first() else {
                    return;
                };
                let Some(first) = rest.first() else {
                    self.metrics.protocol_errors.count("WrongFrameCount");
                    return;
                };
                if is_channel_envelope(first) {
                    self.on_envelope(routing_id, rest);
                } else {
                    self.on_record(routing_id, rest);
                }
            }
            SocketEvent::Unroutable { to } => {
                lock(&self.conns).remove(&to);
            }
            SocketEvent::Refused { kind, .. } => self.metrics.protocol_errors.count(kind),
            SocketEvent::Overflow { to, .. } => {
                // The client does not read its replies: disconnect it (its admission ends;
                // its requests fail on its side by liveness) rather than grow the parked
                // bytes (review item 1).
                if lock(&self.conns).remove(&to).is_some() {
                    self.metrics
                        .client_overflows
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            SocketEvent::Connected { .. }
            | SocketEvent::Disconnected { .. }
            | SocketEvent::OpenFailed { .. } => {}
        }
    }

    fn on_record(&self, routing_id: &Bytes, frames: &[Bytes]) {
        // On ClientServer the command fixes the leg: a hello is the request, everything a
        // client may originate besides it (liveness) is a send.
        let leg = if frames[0].get(3) == Some(&1) {
            Leg::Request
        } else {
            Leg::Send
        };
        let rec = match Record::decode_shared(frames, WireContext::client_server(leg)) {
            Ok(r) => r,
            Err(e) => {
                self.metrics.protocol_errors.count(e.kind());
                return;
            }
        };
        match rec.body {
            CommandBody::Hello(h) => self.on_hello(routing_id, &h),
            CommandBody::LivenessProbe(p) => {
                let conns = lock(&self.conns);
                let Some(c) = conns.get(routing_id) else {
                    self.metrics.unadmitted.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                if c.liveness.generation() != p.connection_generation {
                    return; // another connection's probe: ignored (wire §5)
                }
                drop(conns);
                if self.faults.drop_liveness_acks.load(Ordering::Acquire) {
                    return;
                }
                let ack = Record::new(CommandBody::LivenessAck(LivenessAck {
                    probe_id: p.probe_id,
                    connection_generation: p.connection_generation,
                }));
                self.send_record(routing_id, &ack, Leg::Send);
            }
            CommandBody::LivenessAck(a) => {
                let now = self.now();
                if let Some(c) = lock(&self.conns).get_mut(routing_id) {
                    c.liveness.on_ack(a.probe_id, a.connection_generation, now);
                } else {
                    self.metrics.unadmitted.fetch_add(1, Ordering::Relaxed);
                }
            }
            // A client never sends update, admit or reject (admit/reject already fail to
            // decode on the send leg).
            _ => self.metrics.protocol_errors.count("UnexpectedCommand"),
        }
    }

    fn on_hello(&self, routing_id: &Bytes, hello: &Hello) {
        let checked = if self.shutting_down.load(Ordering::Acquire) {
            Err(admission::Refusal {
                reason: RejectReason::ShuttingDown,
                detail: "server is shutting down".into(),
            })
        } else {
            admission::check_hello(
                hello,
                &self.config.secret,
                &self.config.channel_name,
                self.limit,
                &NodeFence {
                    rid: self.rid.clone(),
                    lifecycle_generation: self.lifecycle,
                },
            )
            .and_then(|limit| {
                if lock(&self.nonces).first_use(hello.nonce) {
                    Ok(limit)
                } else {
                    Err(admission::Refusal {
                        reason: RejectReason::AuthenticationFailed,
                        detail: "hello nonce already used".into(),
                    })
                }
            })
        };
        match checked {
            Ok(limit) => {
                let client = Arc::new(hello.descriptor.node.clone());
                let now = self.now();
                let mut conns = lock(&self.conns);
                // A repeated hello of the same client on the same connection keeps its
                // generation (idempotent, wire §5).
                let generation = match conns.get(routing_id) {
                    Some(c) if *c.client == *client => c.liveness.generation(),
                    _ => super::new_connection_generation(),
                };
                let t = &self.config.timings;
                conns.insert(
                    routing_id.clone(),
                    ClientConn {
                        client,
                        liveness: Liveness::admitted(
                            generation,
                            ms(t.probe_interval),
                            ms(t.liveness_deadline),
                            now,
                        ),
                        limit,
                    },
                );
                drop(conns);
                let Ok(server_nonce) = random::<32>() else {
                    return;
                };
                let admit = admission::admit(
                    &self.config.secret,
                    self.node_descriptor(),
                    &hello.nonce,
                    server_nonce,
                    generation,
                    limit,
                );
                self.metrics.admitted.fetch_add(1, Ordering::Relaxed);
                self.send_record(routing_id, &admit, Leg::Reply);
                self.wake.notify_one();
            }
            Err(refusal) => {
                self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
                let reject = Record::new(CommandBody::Reject(Reject {
                    reason: refusal.reason,
                    detail: refusal.detail,
                }));
                self.send_record(routing_id, &reject, Leg::Reply);
            }
        }
    }

    fn on_envelope(&self, routing_id: &Bytes, frames: &[Bytes]) {
        let (client, limit) = {
            let conns = lock(&self.conns);
            let Some(c) = conns.get(routing_id) else {
                self.metrics.unadmitted.fetch_add(1, Ordering::Relaxed);
                return;
            };
            (Arc::clone(&c.client), c.limit)
        };
        // The admitted limit is checked before the header is parsed.
        let total: u64 = frames.iter().map(|f| f.len() as u64).sum();
        if total > limit {
            self.metrics.protocol_errors.count("MessageTooLarge");
            return;
        }
        let header = match decode_record(frames) {
            Ok(h) => h,
            Err(e) => {
                self.metrics.protocol_errors.count(e.kind());
                return;
            }
        };
        let payload_frame = frames[1].clone();
        let (kind, packet_name, content_type, reply, deadline) = match header {
            ChannelHeader::Request {
                packet_name,
                content_type,
                correlation_id,
                deadline_unix_ms,
            } => (
                MessageKind::Request,
                packet_name,
                content_type,
                Some(ReplyTo {
                    routing_id: routing_id.clone(),
                    correlation_id,
                    limit,
                }),
                deadline_unix_ms.and_then(|d| UNIX_EPOCH.checked_add(Duration::from_millis(d))),
            ),
            ChannelHeader::Command {
                packet_name,
                content_type,
            } => (MessageKind::Send, packet_name, content_type, None, None),
            ChannelHeader::Response { .. } | ChannelHeader::Error { .. } => {
                // A client never replies: the server starts no calls.
                self.metrics.protocol_errors.count("ReplyFromClient");
                return;
            }
        };
        if self.now() >= self.fence_at.load(Ordering::Acquire) {
            // The owner lease could not be renewed: stop admitting work (glossary §8).
            self.metrics.fenced_refusals.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = reply {
                self.reply(
                    &r,
                    Err(CallError::new(
                        ErrorKind::Unavailable,
                        "the server's owner lease passed its fencing deadline",
                    )),
                );
            }
            return;
        }
        if self.shutting_down.load(Ordering::Acquire) {
            if let Some(r) = reply {
                self.reply(
                    &r,
                    Err(CallError::new(
                        ErrorKind::ShuttingDown,
                        "server is shutting down",
                    )),
                );
            }
            return;
        }
        if self.draining.load(Ordering::Acquire) {
            self.metrics.drain_refusals.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = reply {
                self.reply(
                    &r,
                    Err(CallError::new(ErrorKind::Unavailable, "server is draining")),
                );
            }
            return;
        }
        let Some(runner) = self.runners.get(&(kind, packet_name.clone())) else {
            self.metrics.no_handler.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = reply {
                self.reply(
                    &r,
                    Err(CallError::new(
                        ErrorKind::NotFound,
                        format!("no {} handler for {packet_name:?}", kind.name()),
                    )),
                );
            }
            return;
        };
        // Bound accepted work: a permit before dispatch, answered `Backpressured` when none is
        // free (the socket keeps being read so liveness and other clients are not starved).
        let Ok(permit) = self.jobs.try_acquire() else {
            self.metrics.backpressured.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = reply {
                self.reply(
                    &r,
                    Err(CallError::new(
                        ErrorKind::Backpressured,
                        "the server's job queue is full",
                    )),
                );
            }
            return;
        };
        let name = SharedStr::copy_from(&packet_name);
        let job = Job {
            ctx: MessageContext {
                source: client,
                correlation_id: reply.as_ref().map(|r| r.correlation_id.clone()),
                metadata: Metadata::default(),
                deadline,
                packet_name: name.clone(),
                channel: Some(SharedStr::copy_from(&self.config.channel_name)),
            },
            payload: TypedPayload::new(name, SharedStr::copy_from(&content_type), payload_frame),
            reply,
            permit,
        };
        self.inflight.fetch_add(1, Ordering::AcqRel);
        if runner.send(job).is_err() {
            self.job_done();
        }
    }

    /// Wait until no accepted request or command is running, at most `limit`. Returns whether
    /// it became idle.
    async fn wait_idle(&self, limit: Duration) -> bool {
        let grace = tokio::time::sleep(limit);
        tokio::pin!(grace);
        loop {
            let idle = self.idle.notified();
            if self.inflight.load(Ordering::Acquire) == 0 {
                return true;
            }
            tokio::select! {
                () = idle => {}
                () = &mut grace => return self.inflight.load(Ordering::Acquire) == 0,
            }
        }
    }

    fn job_done(&self) {
        if self.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Send the single terminal reply of a request. A successful reply larger than the
    /// admitted limit is refused before its frames are built and sent as an error instead.
    fn reply(&self, to: &ReplyTo, outcome: Result<TypedPayload, CallError>) {
        let built = match outcome {
            Ok(p) => {
                let header = ChannelHeader::Response {
                    content_type: p.content_type.as_str().to_owned(),
                    correlation_id: to.correlation_id.clone(),
                };
                match header.encode() {
                    Ok(h) if (h.len() + p.payload.len()) as u64 <= to.limit => Ok((h, p.payload)),
                    Ok(h) => {
                        self.metrics
                            .replies_too_large
                            .fetch_add(1, Ordering::Relaxed);
                        Err(CallError::new(
                            ErrorKind::InvalidOperation,
                            format!(
                                "reply of {} bytes exceeds the admitted limit of {} bytes",
                                h.len() + p.payload.len(),
                                to.limit
                            ),
                        ))
                    }
                    Err(e) => Err(CallError::new(
                        ErrorKind::InvalidOperation,
                        format!("reply header: {e}"),
                    )),
                }
            }
            Err(e) => Err(e),
        };
        let (header, payload) = match built {
            Ok(x) => x,
            Err(e) => match error_header(&to.correlation_id, &e) {
                Some(h) => (h, Bytes::new()),
                None => {
                    // Unreachable with a decoded correlation ID; counted, never silent.
                    self.metrics.protocol_errors.count("ErrorReplyUnencodable");
                    return;
                }
            },
        };
        if self
            .socket
            .send(
                ROUTER_CONN,
                vec![to.routing_id.clone(), Bytes::from(header), payload],
            )
            .is_ok()
        {
            self.metrics.replies_sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Liveness of every admitted client; returns the next wake-up time.
    fn tick(&self) -> u64 {
        let now = self.now();
        let mut probes = Vec::new();
        let mut next = u64::MAX;
        {
            let mut conns = lock(&self.conns);
            conns.retain(|rid, c| match c.liveness.tick(now) {
                LivenessAction::Dead => {
                    self.metrics.liveness_deaths.fetch_add(1, Ordering::Relaxed);
                    false
                }
                LivenessAction::SendProbe { probe_id } => {
                    probes.push((rid.clone(), probe_id, c.liveness.generation()));
                    next = next.min(c.liveness.next_wakeup());
                    true
                }
                LivenessAction::None => {
                    next = next.min(c.liveness.next_wakeup());
                    true
                }
            });
        }
        for (rid, probe_id, generation) in probes {
            let probe = Record::new(CommandBody::LivenessProbe(LivenessProbe {
                probe_id,
                connection_generation: generation,
            }));
            self.send_record(&rid, &probe, Leg::Send);
        }
        next
    }
}

/// The `error` header of a request's terminal reply. The detail is cut to what fits once
/// *encoded* (JSON escaping can grow it up to six times, and the header frame is bounded):
/// the longest prefix that encodes, halving the budget, and at worst an empty detail, which
/// always encodes for a correlation ID that was decoded (review item 3).
fn error_header(correlation_id: &str, e: &CallError) -> Option<Vec<u8>> {
    let mut budget = MAX_DETAIL_BYTES;
    loop {
        let mut detail = e.detail().to_owned();
        truncate_utf8(&mut detail, budget);
        let header = ChannelHeader::Error {
            correlation_id: correlation_id.to_owned(),
            code: e.status(),
            detail,
        };
        match header.encode() {
            Ok(h) => return Some(h),
            Err(_) if budget > 0 => budget /= 2,
            Err(_) => return None,
        }
    }
}

fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

async fn reactor(inner: Arc<ServerInner>, mut rx: mpsc::Receiver<Vec<SocketEvent>>) {
    let mut next = inner.tick();
    loop {
        let wait = Duration::from_millis(next.saturating_sub(inner.now()).min(60_000));
        let wake = inner.wake.notified();
        tokio::select! {
            batch = rx.recv() => match batch {
                Some(events) => for ev in events { inner.on_event(ev) },
                None => return,
            },
            () = tokio::time::sleep(wait) => {}
            () = wake => {}
        }
        next = inner.tick();
    }
}

// The runner mirrors `mesh/dispatch.rs`'s (per-handler concurrency slots, the job permit
// released at the handler's first instruction, panics caught) but not its claim/flow-credit
// steps, which ClientServer does not have; a shared helper would need those abstracted, so
// the duplication is kept deliberately small here.
async fn runner(
    inner: Arc<ServerInner>,
    handler: Handler,
    concurrency: usize,
    mut rx: mpsc::UnboundedReceiver<Job>,
) {
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    // Handler tasks are owned here: when the server stops (this task is aborted) the set is
    // dropped and every handler still running is aborted with it (review item 13).
    let mut handlers = tokio::task::JoinSet::new();
    while let Some(job) = rx.recv().await {
        while handlers.try_join_next().is_some() {}
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let inner = Arc::clone(&inner);
        let handler = handler.clone();
        handlers.spawn(async move {
            let Job {
                ctx,
                payload,
                reply,
                permit: job_permit,
            } = job;
            // The handler's first instruction: the job-queue permit goes back here.
            job_permit.release();
            run_job(&inner, &handler, ctx, payload, reply).await;
            drop(permit);
            inner.job_done();
        });
    }
}

async fn run_job(
    inner: &ServerInner,
    handler: &Handler,
    ctx: MessageContext,
    payload: TypedPayload,
    reply: Option<ReplyTo>,
) {
    inner.metrics.delivered.fetch_add(1, Ordering::Relaxed);
    let panicked = || {
        inner.metrics.handler_panics.fetch_add(1, Ordering::Relaxed);
        CallError::new(ErrorKind::HandlerFailed, "the handler panicked")
    };
    match (handler, reply) {
        (Handler::Send(f), None) => {
            let outcome = AssertUnwindSafe(f(ctx, payload))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(panicked()));
            if let Err(e) = outcome {
                tracing::debug!(error = %e, "ClientServer command handler failed");
            }
        }
        (Handler::Request(f), Some(reply)) => {
            let expired = ctx.deadline.is_some_and(|d| d <= SystemTime::now());
            let result = if expired {
                Err(CallError::new(
                    ErrorKind::DeadlineExceeded,
                    "deadline passed before the handler ran",
                ))
            } else {
                AssertUnwindSafe(f(ctx, payload))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(panicked()))
            };
            inner.reply(&reply, result);
        }
        (Handler::Send(_), Some(_)) | (Handler::Request(_), None) => {}
    }
}

/// Lease renewal and descriptor publication retries.
async fn discovery_loop(inner: Arc<ServerInner>) {
    let Some(store) = inner.store.clone() else {
        return;
    };
    let t = inner.config.timings.clone();
    let tick = t.lease_renew.min(t.discovery_poll);
    let mut last_renew = tokio::time::Instant::now();
    let mut published = 1u64;
    // A failed renewal is retried after 50 ms, doubling (issue 20), not on the next tick.
    let mut schedule = crate::mesh::lease::RetrySchedule::new(
        crate::mesh::lease::RenewPolicy::new(ms(t.lease_renew), ms(t.fencing_margin)),
    );
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        let wake = retry_at.map_or(tick, |at| {
            at.saturating_duration_since(tokio::time::Instant::now())
                .min(tick)
        });
        tokio::time::sleep(wake).await;
        if inner.shutting_down.load(Ordering::Acquire) {
            return;
        }
        let Some(token) = lock(&inner.lease).clone() else {
            return;
        };
        let due = retry_at.map_or(last_renew.elapsed() >= t.lease_renew, |at| {
            tokio::time::Instant::now() >= at
        });
        if due {
            let sent = inner.now();
            match store.renew_lease(&token, t.lease_ttl).await {
                Ok(grant) => {
                    last_renew = tokio::time::Instant::now();
                    retry_at = None;
                    let _ = schedule.succeeded();
                    inner.fence_at.store(
                        sent.saturating_add(ms(grant.fencing_delay(t.fencing_margin))),
                        Ordering::Release,
                    );
                }
                Err(e) => {
                    if retry_at.is_none() {
                        tracing::warn!(error = %e, "ClientServer owner lease renewal failed; retrying");
                    }
                    retry_at = Some(tokio::time::Instant::now() + schedule.failed());
                }
            }
        }
        let revision = lock(&inner.selection).revision;
        if revision != published {
            match inner.publish().await {
                Ok(()) => published = revision,
                Err(e) => tracing::warn!(error = %e, "ClientServer descriptor publish failed"),
            }
        }
    }
}

/// Protocol errors by kind, as a sorted map (for tests and metrics).
impl ServerMetrics {
    /// Protocol errors counted per kind.
    pub fn protocol_errors(&self) -> BTreeMap<String, u64> {
        self.protocol_errors.snapshot()
    }
}
