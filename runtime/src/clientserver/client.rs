//! The ClientServer Client (glossary §8): one DEALER per server endpoint, admission, liveness,
//! revision-ordered `update`s, automatic discovery and manual endpoints, and select-one
//! requests and commands with exactly one terminal result per request.
//!
//! # Per-connection states
//!
//! ```text
//!   Open(endpoint) ──► Connecting ──handshake──► HelloSent ──admit ok──► Ready
//!                         ▲                         │  ▲                   │
//!                         │                  reject │  │ retry after       │ disconnect,
//!                         │          / bad admit    ▼  │ hello_retry       │ liveness deadline,
//!                         │                      Rejected                  │ stale identity
//!                         └────────────────────────────────────────────────┘
//!   HelloSent without an answer by `admission_timeout` also goes back to Connecting on a
//!   new physical connection.
//! ```
//!
//! Leaving Ready completes every request sent on that connection with `Unavailable` (through
//! the pending table's `peer_lost`), before any record of a later connection is looked at, so
//! a reply can never complete a request of another server lifecycle. A liveness death or a
//! stale identity closes the DEALER and opens a new one (a new physical connection, a new
//! hello); a plain disconnect lets ZeroMQ reconnect and the new handshake sends a new hello.
//!
//! # Select-one
//!
//! [`ClientServerClient::request`] and [`ClientServerClient::send`] pick one server with
//! [`SmoothWeighted`] among Ready, positive-weight, Serving connections, check the admitted
//! complete-message limit of that connection, register the request and queue its frames — all
//! under one lock, so the server picked is the server the message goes to. A refused submit is
//! an error to the caller, never resent elsewhere.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use zlink_protocol::channel_envelope::{ChannelHeader, decode_record, is_channel_envelope};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    CommandBody, LivenessAck, LivenessProbe, NodeFence, OperationId, RuntimeState,
};
use zlink_protocol::ids;
use zlink_protocol::record::{Leg, Record, WireContext};

use super::admission::{self, ExpectedServer, SideIdentity};
use super::config::{
    ClientConfig, ClientServerError, normalize_max_message_bytes, validate_name, validate_timings,
};
use super::descriptor::{RevisionOutcome, ServerDescriptor, order_revision};
use super::socket::{
    ConnId, DataRefused, SocketCmd, SocketConfig, SocketEvent, SocketHandle, SocketThread,
};
use super::store::ClientServerStore;
use super::{ProtocolErrors, ms, new_generation, process_context, random};
use crate::call::error::{CallError, ErrorKind};
use crate::call::pending::{Delivered, PeerRef, PendingKey, PendingTable, ReplyFields};
use crate::mesh::handler::{JsonMessage, decode_json, encode_json};
use crate::mesh::liveness::{Liveness, LivenessAction};
use crate::select::SmoothWeighted;

type Waker = oneshot::Sender<Result<TypedPayload, CallError>>;

/// Counters of a client.
#[derive(Debug, Default)]
pub struct ClientMetrics {
    /// Protocol errors by kind (never delivered).
    pub protocol_errors: ProtocolErrors,
    /// Admissions.
    pub admitted: AtomicU64,
    /// Rejections (a `reject`, or an `admit` that failed the client's checks).
    pub rejected: AtomicU64,
    /// `request`/`command` envelopes a server tried to start (protocol errors, never run).
    pub server_initiated_calls: AtomicU64,
    /// Server descriptors ignored because their content was malformed.
    pub malformed_descriptors: AtomicU64,
    /// `update`s applied.
    pub updates_applied: AtomicU64,
    /// Server connections declared dead by liveness.
    pub liveness_deaths: AtomicU64,
    /// Requests submitted.
    pub requests_sent: AtomicU64,
    /// Commands submitted.
    pub commands_sent: AtomicU64,
    /// Replies that matched no pending request (late, duplicate or foreign): dropped.
    pub late_replies: AtomicU64,
}

/// A server connection as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSnapshot {
    /// Endpoint dialed.
    pub endpoint: String,
    /// Admitted and live.
    pub ready: bool,
    /// Ready, positive weight and Serving: a select-one candidate.
    pub selectable: bool,
    /// RID of the admitted (or last admitted) server.
    pub server_rid: Option<String>,
    /// Lifecycle generation of the admitted (or last admitted) server.
    pub lifecycle_generation: Option<u64>,
    /// Current weight (0 until admitted).
    pub weight: u16,
    /// Announced runtime state.
    pub state: Option<RuntimeState>,
    /// Admitted complete-message limit.
    pub max_message_bytes: Option<u64>,
    /// Why it is not ready (reject reason, disconnect, liveness deadline, …).
    pub not_ready_reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    HelloSent,
    Ready,
    Rejected,
}

struct Admitted {
    server: NodeFence,
    /// The server's security identity from its admit descriptor.
    security_identity: String,
    peer: PeerRef,
    limit: u64,
    liveness: Liveness,
    weight: u16,
    state: RuntimeState,
    revision: u64,
    /// Frame 0 of the `update` that set `revision` (`None`: set by admit or a descriptor).
    revision_bytes: Option<Bytes>,
}

struct ServerConn {
    endpoint: String,
    manual: bool,
    discovered: bool,
    /// Every live descriptor behind this endpoint (a crashed lifecycle's stays until its
    /// lease lapses, next to its successor's); empty for a manual endpoint.
    expected: Vec<ExpectedServer>,
    phase: Phase,
    connected: bool,
    reason: Option<String>,
    hello_nonce: Option<[u8; 32]>,
    retry_at: Option<u64>,
    admitted: Option<Admitted>,
    last_server: Option<NodeFence>,
    /// Its descriptor vanished while requests were in flight on it: never selected again,
    /// closed once those requests are done (or by liveness, or their deadlines).
    retiring: bool,
}

impl ServerConn {
    fn new(endpoint: String, manual: bool, expected: Vec<ExpectedServer>) -> Self {
        Self {
            endpoint,
            manual,
            discovered: !manual,
            expected,
            phase: Phase::Connecting,
            connected: false,
            reason: Some("connecting".into()),
            hello_nonce: None,
            retry_at: None,
            admitted: None,
            last_server: None,
            retiring: false,
        }
    }

    fn selectable(&self) -> bool {
        !self.retiring
            && self.phase == Phase::Ready
            && self
                .admitted
                .as_ref()
                .is_some_and(|a| a.weight > 0 && a.state == RuntimeState::Serving)
    }

    fn weight(&self) -> u16 {
        self.admitted.as_ref().map_or(0, |a| a.weight)
    }
}

struct State {
    conns: BTreeMap<ConnId, ServerConn>,
    next_conn: ConnId,
    selector: SmoothWeighted<ConnId>,
}

pub(crate) struct ClientInner {
    config: ClientConfig,
    rid: String,
    lifecycle: u64,
    limit: u64,
    socket: SocketHandle,
    state: Mutex<State>,
    pending: Mutex<PendingTable<Waker, TypedPayload>>,
    metrics: ClientMetrics,
    shutting_down: AtomicBool,
    wake: Notify,
    changed: watch::Sender<u64>,
    epoch: Instant,
    store: Option<Arc<dyn ClientServerStore>>,
    next_request: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running ClientServer Client.
pub struct ClientServerClient {
    inner: Arc<ClientInner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    socket: Mutex<Option<SocketThread>>,
}

impl std::fmt::Debug for ClientServerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientServerClient")
            .field("rid", &self.inner.rid)
            .finish_non_exhaustive()
    }
}

fn key_of(n: u64) -> PendingKey {
    PendingKey::new(&OperationId { high: 0, low: n }, n)
}

impl ClientServerClient {
    /// Validate, start the socket thread, dial the manual endpoints and (with a store) start
    /// polling Server descriptors of the channel.
    ///
    /// # Errors
    /// [`ClientServerError`] for bad configuration or a socket failure.
    pub async fn start(
        config: ClientConfig,
        store: Option<Arc<dyn ClientServerStore>>,
    ) -> Result<Self, ClientServerError> {
        validate_name("channel_name", &config.channel_name)?;
        validate_name("security_identity", &config.security_identity)?;
        validate_timings(&config.timings)?;
        let limit = normalize_max_message_bytes(config.max_message_bytes)?;
        let rid = match &config.rid {
            Some(r) => {
                validate_name("rid", r)?;
                r.clone()
            }
            None => ids::automatic_rid("csc", random::<16>()?).map_err(|e| {
                ClientServerError::Config {
                    field: "rid",
                    reason: e.to_string(),
                }
            })?,
        };
        let lifecycle = new_generation()?;
        let sock_cfg = SocketConfig {
            hwm: config.hwm,
            max_message_bytes: i64::try_from(limit).unwrap_or(i64::MAX),
            batch: 256,
            inbound_batches: 64,
            reconnect_ivl_ms: i32::try_from(config.timings.reconnect_interval.as_millis())
                .unwrap_or(i32::MAX),
            queue_cap_bytes: config.queue_cap_bytes,
            // The client's data is bounded by `queue_cap_bytes` and its control traffic by the
            // protocol (a stalled server dies by liveness), so no per-peer cap.
            park_cap_bytes: usize::MAX,
        };
        let (socket, rx) = SocketThread::start_dealers(&process_context(), &sock_cfg)
            .map_err(ClientServerError::Transport)?;
        let inner = Arc::new(ClientInner {
            pending: Mutex::new(PendingTable::new(config.max_pending.max(1))),
            config,
            rid,
            lifecycle,
            limit,
            socket: socket.handle(),
            state: Mutex::new(State {
                conns: BTreeMap::new(),
                next_conn: 1,
                selector: SmoothWeighted::new(),
            }),
            metrics: ClientMetrics::default(),
            shutting_down: AtomicBool::new(false),
            wake: Notify::new(),
            changed: watch::channel(0).0,
            epoch: Instant::now(),
            store,
            next_request: AtomicU64::new(1),
        });
        {
            let mut st = lock(&inner.state);
            for endpoint in inner.config.manual_endpoints.clone() {
                inner.open(&mut st, ServerConn::new(endpoint, true, Vec::new()));
            }
        }
        let mut tasks = vec![tokio::spawn(reactor(Arc::clone(&inner), rx))];
        if inner.store.is_some() {
            tasks.push(tokio::spawn(discovery_loop(Arc::clone(&inner))));
        }
        Ok(Self {
            inner,
            tasks: Mutex::new(tasks),
            socket: Mutex::new(Some(socket)),
        })
    }

    /// Client RID.
    pub fn rid(&self) -> &str {
        &self.inner.rid
    }

    /// This run's lifecycle generation.
    pub fn lifecycle_generation(&self) -> u64 {
        self.inner.lifecycle
    }

    /// This side's normalized complete-message limit.
    pub fn max_message_bytes(&self) -> u64 {
        self.inner.limit
    }

    /// Counters.
    pub fn metrics(&self) -> &ClientMetrics {
        &self.inner.metrics
    }

    /// Every server connection, in connection order.
    pub fn servers(&self) -> Vec<ServerSnapshot> {
        self.inner.snapshots()
    }

    /// Wait until `pred` holds for [`servers`](Self::servers), at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&[ServerSnapshot]) -> bool,
    ) -> bool {
        let mut rx = self.inner.changed.subscribe();
        let deadline = super::instant_after(tokio::time::Instant::now(), timeout);
        loop {
            if pred(&self.servers()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return pred(&self.servers());
            }
        }
    }

    /// Wait until at least `n` servers are selectable.
    pub async fn wait_selectable(&self, n: usize, timeout: Duration) -> bool {
        self.wait_for(timeout, |s| s.iter().filter(|x| x.selectable).count() >= n)
            .await
    }

    /// Select one server and send it a request; wait for its single terminal result.
    /// `timeout` defaults to the configured request timeout.
    ///
    /// # Errors
    /// [`ClientServerError::NoReadyServer`], [`ClientServerError::MessageTooLarge`] (nothing
    /// was sent), [`ClientServerError::ShuttingDown`], or the request's terminal
    /// [`ClientServerError::Call`] error.
    pub async fn request(
        &self,
        payload: TypedPayload,
        timeout: Option<Duration>,
    ) -> Result<TypedPayload, ClientServerError> {
        let rx = self.inner.submit(payload, Some(timeout))?;
        match rx {
            Some(rx) => match rx.await {
                Ok(Ok(p)) => Ok(p),
                Ok(Err(e)) => Err(ClientServerError::Call(e)),
                Err(_) => Err(ClientServerError::ShuttingDown),
            },
            None => Err(ClientServerError::ShuttingDown),
        }
    }

    /// Select one server and send it a one-way `command`.
    ///
    /// # Errors
    /// As [`request`](Self::request), without a terminal result.
    pub fn send(&self, payload: TypedPayload) -> Result<(), ClientServerError> {
        self.inner.submit(payload, None).map(|_| ())
    }

    /// [`request`](Self::request) of a JSON message answered with JSON `Resp`.
    ///
    /// # Errors
    /// As [`request`](Self::request), plus a decode failure as `Call(InvalidOperation)`.
    pub async fn request_json<Req: JsonMessage, Resp: JsonMessage>(
        &self,
        req: &Req,
    ) -> Result<Resp, ClientServerError> {
        let p = self.request(encode_json(req)?, None).await?;
        Ok(decode_json(&p)?)
    }

    /// [`send`](Self::send) of a JSON message.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_json<M: JsonMessage>(&self, msg: &M) -> Result<(), ClientServerError> {
        self.send(encode_json(msg)?)
    }

    /// Graceful shutdown: pending requests complete with `ShuttingDown`, sockets close.
    pub async fn shutdown(&self) {
        if self.inner.shutting_down.swap(true, Ordering::AcqRel) {
            return;
        }
        let done = lock(&self.inner.pending).shutdown();
        for c in done {
            let _ = c.waker.send(c.outcome);
        }
        let socket = lock(&self.socket).take();
        if let Some(mut s) = socket {
            let _ = tokio::task::spawn_blocking(move || s.stop()).await;
        }
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

impl Drop for ClientServerClient {
    fn drop(&mut self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

impl ClientInner {
    fn now(&self) -> u64 {
        ms(self.epoch.elapsed())
    }

    fn notify_changed(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn snapshots(&self) -> Vec<ServerSnapshot> {
        let st = lock(&self.state);
        st.conns
            .values()
            .map(|c| ServerSnapshot {
                endpoint: c.endpoint.clone(),
                ready: c.phase == Phase::Ready,
                selectable: c.selectable(),
                server_rid: c.last_server.as_ref().map(|s| s.rid.to_string()),
                lifecycle_generation: c.last_server.as_ref().map(|s| s.lifecycle_generation),
                weight: c.weight(),
                state: c.admitted.as_ref().map(|a| a.state),
                max_message_bytes: c.admitted.as_ref().map(|a| a.limit),
                not_ready_reason: c.reason.clone(),
            })
            .collect()
    }

    fn refresh_candidates(st: &mut State) {
        // Two endpoint strings can reach one server (a hostname and its address): only the
        // first connection admitted to a server (RID, lifecycle) gets its weight, the others
        // take no turns, so the server is not selected twice as often.
        let mut seen: std::collections::HashSet<(&str, u64)> = std::collections::HashSet::new();
        let candidates: Vec<(ConnId, u16)> = st
            .conns
            .iter()
            .map(|(id, c)| {
                let first = c.admitted.as_ref().is_none_or(|a| {
                    seen.insert((a.server.rid.as_str(), a.server.lifecycle_generation))
                });
                (*id, if first { c.weight() } else { 0 })
            })
            .collect();
        // Weights are checked at admission and update (0..=10000) and ids are unique, so
        // the set is always accepted.
        let _ = st.selector.set_candidates(candidates);
    }

    fn open(&self, st: &mut State, conn: ServerConn) -> ConnId {
        let id = st.next_conn;
        st.next_conn += 1;
        let endpoint = conn.endpoint.clone();
        st.conns.insert(id, conn);
        let _ = self.socket.push(SocketCmd::Open { conn: id, endpoint });
        Self::refresh_candidates(st);
        id
    }

    /// Leave Ready: every request sent on the connection completes with `Unavailable`.
    fn lose(&self, c: &mut ServerConn, reason: &str) {
        if let Some(a) = c.admitted.take() {
            let lost = lock(&self.pending).peer_lost(&a.peer);
            for done in lost {
                let _ = done.waker.send(done.outcome);
            }
        }
        c.phase = Phase::Connecting;
        c.hello_nonce = None;
        c.reason = Some(reason.to_owned());
    }

    /// Close a connection's DEALER and open a new physical connection to the same endpoint.
    fn reopen(&self, st: &mut State, id: ConnId, reason: &str) {
        let Some(mut old) = st.conns.remove(&id) else {
            return;
        };
        self.lose(&mut old, reason);
        let _ = self.socket.push(SocketCmd::Close { conn: id });
        let mut fresh = ServerConn::new(old.endpoint, old.manual, old.expected);
        fresh.discovered = old.discovered;
        fresh.last_server = old.last_server;
        fresh.reason = Some(reason.to_owned());
        self.open(st, fresh);
    }

    fn send_hello(&self, id: ConnId, c: &mut ServerConn, now: u64) {
        let Ok(nonce) = random::<32>() else { return };
        let me = SideIdentity {
            channel_name: self.config.channel_name.clone(),
            rid: self.rid.clone(),
            lifecycle_generation: self.lifecycle,
            endpoint: c.endpoint.clone(),
            security_identity: self.config.security_identity.clone(),
        };
        // Bound to the server the descriptor names (review item 6); a manual endpoint's
        // server is unknown before admission.
        // With several live descriptors behind the endpoint (a restart), which one answers is
        // not known: the hello is unbound then.
        let target = match c.expected.as_slice() {
            [e] => Some(NodeFence {
                rid: e.rid.clone().into(),
                lifecycle_generation: e.lifecycle_generation,
            }),
            _ => None,
        };
        let hello = admission::hello(&self.config.secret, &me, self.limit, nonce, target.as_ref());
        match hello.encode(WireContext::client_server(Leg::Request)) {
            Ok(frames) => {
                let _ = self
                    .socket
                    .send(id, frames.into_iter().map(Bytes::from).collect());
                c.hello_nonce = Some(nonce);
                c.phase = Phase::HelloSent;
                // One hello per exchange: no answer by the admission timeout ends this
                // physical connection (a late answer can then never meet a newer nonce).
                c.retry_at = Some(now.saturating_add(ms(self.config.timings.admission_timeout)));
            }
            Err(e) => tracing::warn!(error = %e, "hello did not encode"),
        }
    }

    fn send_record(&self, id: ConnId, rec: &Record) {
        if let Ok(frames) = rec.encode(WireContext::client_server(Leg::Send)) {
            let _ = self
                .socket
                .send(id, frames.into_iter().map(Bytes::from).collect());
        }
    }

    /// The atomic select-and-submit. `Some(timeout)` = request, `None` = command.
    fn submit(
        &self,
        payload: TypedPayload,
        request: Option<Option<Duration>>,
    ) -> Result<Option<oneshot::Receiver<Result<TypedPayload, CallError>>>, ClientServerError> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(ClientServerError::ShuttingDown);
        }
        let mut st = lock(&self.state);
        let State {
            conns, selector, ..
        } = &mut *st;
        // A refused submit must not advance the selection sequence: the pick is undone then.
        let before = selector.clone();
        let id = selector
            .pick_filtered(|id| conns.get(id).is_some_and(ServerConn::selectable))
            .ok_or_else(|| ClientServerError::NoReadyServer(self.config.channel_name.clone()))?;
        let result = self.submit_to(conns, id, payload, request);
        if result.is_err() {
            *selector = before;
        }
        drop(st);
        let rx = result?;
        if rx.is_some() {
            self.metrics.requests_sent.fetch_add(1, Ordering::Relaxed);
            self.wake.notify_one();
        } else {
            self.metrics.commands_sent.fetch_add(1, Ordering::Relaxed);
        }
        Ok(rx)
    }

    /// Build and queue the envelope for the picked connection `id` (under the state lock).
    fn submit_to(
        &self,
        conns: &BTreeMap<ConnId, ServerConn>,
        id: ConnId,
        payload: TypedPayload,
        request: Option<Option<Duration>>,
    ) -> Result<Option<oneshot::Receiver<Result<TypedPayload, CallError>>>, ClientServerError> {
        let Some(a) = conns.get(&id).and_then(|c| c.admitted.as_ref()) else {
            return Err(ClientServerError::NoReadyServer(
                self.config.channel_name.clone(),
            ));
        };
        let n = self.next_request.fetch_add(1, Ordering::Relaxed);
        let correlation_id = n.to_string();
        let timeout = request.map(|t| t.unwrap_or(self.config.timings.request_timeout));
        let header = match timeout {
            Some(t) => {
                let unix_ms = super::deadline_unix_ms(SystemTime::now(), t);
                ChannelHeader::Request {
                    packet_name: payload.packet_name.as_str().to_owned(),
                    content_type: payload.content_type.as_str().to_owned(),
                    correlation_id: correlation_id.clone(),
                    deadline_unix_ms: Some(unix_ms),
                }
            }
            None => ChannelHeader::Command {
                packet_name: payload.packet_name.as_str().to_owned(),
                content_type: payload.content_type.as_str().to_owned(),
            },
        };
        let header = header.encode().map_err(|e| {
            CallError::new(ErrorKind::InvalidOperation, format!("envelope header: {e}"))
        })?;
        // The complete-message limit is checked on lengths, before any frame is built.
        let bytes = header.len() as u64 + payload.payload.len() as u64;
        if bytes > a.limit {
            return Err(ClientServerError::MessageTooLarge {
                bytes,
                limit: a.limit,
            });
        }
        let rx = match timeout {
            Some(t) => {
                let (tx, rx) = oneshot::channel();
                let deadline_ms = self.now().saturating_add(ms(t));
                lock(&self.pending).insert(
                    key_of(n),
                    correlation_id,
                    a.peer.clone(),
                    deadline_ms,
                    tx,
                )?;
                Some(rx)
            }
            None => None,
        };
        if let Err(refused) = self
            .socket
            .send_data(id, vec![Bytes::from(header), payload.payload])
        {
            if rx.is_some() {
                lock(&self.pending).cancel(&key_of(n));
            }
            return Err(match refused {
                DataRefused::Stopped => ClientServerError::ShuttingDown,
                DataRefused::Full { queued, cap } => {
                    ClientServerError::Backpressured { queued, cap }
                }
            });
        }
        Ok(rx)
    }

    fn on_event(&self, ev: SocketEvent) {
        let now = self.now();
        match ev {
            SocketEvent::Connected { conn } => {
                let mut st = lock(&self.state);
                if let Some(c) = st.conns.get_mut(&conn) {
                    c.connected = true;
                    if c.phase != Phase::Ready {
                        self.send_hello(conn, c, now);
                    }
                }
            }
            SocketEvent::Disconnected { conn } => {
                let mut st = lock(&self.state);
                if let Some(c) = st.conns.get_mut(&conn) {
                    c.connected = false;
                    if c.phase == Phase::Ready || c.phase == Phase::HelloSent {
                        self.lose(c, "disconnected");
                    }
                    Self::refresh_candidates(&mut st);
                }
                drop(st);
                self.notify_changed();
            }
            SocketEvent::OpenFailed { conn, error } => {
                if let Some(c) = lock(&self.state).conns.get_mut(&conn) {
                    c.reason = Some(error);
                }
                self.notify_changed();
            }
            // Overflow never happens on the client's DEALERs (no per-peer cap).
            SocketEvent::Unroutable { .. } | SocketEvent::Overflow { .. } => {}
            SocketEvent::Refused { kind, .. } => self.metrics.protocol_errors.count(kind),
            SocketEvent::Message { conn, frames } => {
                let Some(first) = frames.first() else {
                    return;
                };
                if is_channel_envelope(first) {
                    self.on_envelope(conn, &frames);
                } else {
                    self.on_record(conn, &frames, now);
                }
            }
        }
    }

    fn on_record(&self, id: ConnId, frames: &[Bytes], now: u64) {
        // admit and reject travel on the hello's reply leg; the rest a server sends is a send.
        let leg = match frames[0].get(3) {
            Some(2 | 3) => Leg::Reply,
            _ => Leg::Send,
        };
        let rec = match Record::decode_shared(frames, WireContext::client_server(leg)) {
            Ok(r) => r,
            Err(e) => {
                self.metrics.protocol_errors.count(e.kind());
                return;
            }
        };
        let mut st = lock(&self.state);
        let Some(c) = st.conns.get_mut(&id) else {
            return; // a closed connection's late record
        };
        match rec.body {
            CommandBody::Admit(a) => {
                let Some(nonce) = c.hello_nonce.filter(|_| c.phase == Phase::HelloSent) else {
                    self.metrics.protocol_errors.count("UnexpectedAdmit");
                    return;
                };
                match admission::check_admit(
                    &a,
                    &self.config.secret,
                    &nonce,
                    &self.config.channel_name,
                    self.limit,
                    &c.expected,
                ) {
                    Ok(adm) => {
                        let t = &self.config.timings;
                        c.admitted = Some(Admitted {
                            peer: PeerRef::new(
                                adm.server.rid.clone(),
                                adm.server.lifecycle_generation,
                            ),
                            server: adm.server.clone(),
                            security_identity: adm.security_identity.clone(),
                            limit: adm.limit,
                            liveness: Liveness::admitted(
                                adm.connection_generation,
                                ms(t.probe_interval),
                                ms(t.liveness_deadline),
                                now,
                            ),
                            weight: adm.weight,
                            state: adm.state,
                            revision: adm.revision,
                            revision_bytes: None,
                        });
                        c.last_server = Some(adm.server);
                        c.phase = Phase::Ready;
                        c.reason = None;
                        c.hello_nonce = None;
                        c.retry_at = None;
                        self.metrics.admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(refusal) => {
                        c.phase = Phase::Rejected;
                        c.reason = Some(format!(
                            "{} (client check): {}",
                            refusal.reason.name(),
                            refusal.detail
                        ));
                        c.hello_nonce = None;
                        c.retry_at = Some(now.saturating_add(ms(self.config.timings.hello_retry)));
                        self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Self::refresh_candidates(&mut st);
                drop(st);
                self.wake.notify_one();
                self.notify_changed();
            }
            CommandBody::Reject(r) => {
                if c.phase != Phase::HelloSent {
                    self.metrics.protocol_errors.count("UnexpectedReject");
                    return;
                }
                c.phase = Phase::Rejected;
                c.reason = Some(format!("{}: {}", r.reason.name(), r.detail));
                c.hello_nonce = None;
                c.retry_at = Some(now.saturating_add(ms(self.config.timings.hello_retry)));
                self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
                drop(st);
                self.notify_changed();
            }
            CommandBody::Update(u) => {
                let Some(a) = c.admitted.as_mut() else {
                    self.metrics.protocol_errors.count("UpdateBeforeAdmit");
                    return;
                };
                if u.sender != a.server {
                    self.metrics.protocol_errors.count("UpdateSenderMismatch");
                    return;
                }
                let held = a.revision_bytes.as_ref().map_or_else(
                    || {
                        // Set by admit or a descriptor: its bytes are not an update's, so
                        // the same revision again is taken as idempotent.
                        Some((a.revision, &frames[0][..]))
                    },
                    |b| Some((a.revision, &b[..])),
                );
                match order_revision(held, u.descriptor_revision, &frames[0]) {
                    Err(e) => {
                        self.metrics.protocol_errors.count(match e {
                            super::descriptor::RevisionError::Lower { .. } => "RevisionLower",
                            super::descriptor::RevisionError::Conflict(_) => "RevisionConflict",
                        });
                    }
                    Ok(RevisionOutcome::Idempotent) => {}
                    Ok(RevisionOutcome::Apply) => {
                        if let Some(w) = u
                            .channel_weights
                            .iter()
                            .find(|w| w.channel_name == self.config.channel_name)
                        {
                            a.weight = w.weight;
                        }
                        a.state = u.state;
                        a.revision = u.descriptor_revision;
                        a.revision_bytes = Some(frames[0].clone());
                        self.metrics.updates_applied.fetch_add(1, Ordering::Relaxed);
                        Self::refresh_candidates(&mut st);
                        drop(st);
                        self.notify_changed();
                    }
                }
            }
            CommandBody::LivenessProbe(p) => {
                let Some(a) = c.admitted.as_ref() else {
                    return;
                };
                if a.liveness.generation() != p.connection_generation {
                    return;
                }
                let ack = Record::new(CommandBody::LivenessAck(LivenessAck {
                    probe_id: p.probe_id,
                    connection_generation: p.connection_generation,
                }));
                self.send_record(id, &ack);
            }
            CommandBody::LivenessAck(k) => {
                if let Some(a) = c.admitted.as_mut() {
                    a.liveness.on_ack(k.probe_id, k.connection_generation, now);
                }
            }
            _ => self.metrics.protocol_errors.count("UnexpectedCommand"),
        }
    }

    fn on_envelope(&self, id: ConnId, frames: &[Bytes]) {
        let (peer, limit) = {
            let st = lock(&self.state);
            let Some(a) = st.conns.get(&id).and_then(|c| c.admitted.as_ref()) else {
                self.metrics.protocol_errors.count("EnvelopeBeforeAdmit");
                return;
            };
            (a.peer.clone(), a.limit)
        };
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
        let (correlation_id, outcome) = match header {
            ChannelHeader::Request { .. } | ChannelHeader::Command { .. } => {
                // The server never starts calls to a client (glossary §8).
                self.metrics
                    .server_initiated_calls
                    .fetch_add(1, Ordering::Relaxed);
                self.metrics.protocol_errors.count("ServerInitiatedCall");
                return;
            }
            ChannelHeader::Response {
                content_type,
                correlation_id,
            } => (
                correlation_id,
                Ok(TypedPayload::new("", content_type, frames[1].clone())),
            ),
            ChannelHeader::Error {
                correlation_id,
                code,
                detail,
            } => {
                let e = CallError::from_status(code, detail.clone())
                    .unwrap_or_else(|| CallError::new(ErrorKind::ProtocolError, detail));
                (correlation_id, Err(e))
            }
        };
        let Ok(n) = correlation_id.parse::<u64>() else {
            self.metrics.late_replies.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let reply = ReplyFields {
            operation_id: OperationId { high: 0, low: n },
            reply_route_id: n,
            correlation_id,
            outcome,
        };
        let delivered = lock(&self.pending).on_reply(reply, &peer);
        match delivered {
            Delivered::Completed(c) => {
                let _ = c.waker.send(c.outcome);
            }
            Delivered::Dropped { .. } => {
                self.metrics.late_replies.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Liveness, hello retries and request deadlines; returns the next wake-up time.
    fn tick(&self) -> u64 {
        let now = self.now();
        let mut next = u64::MAX;
        let mut changed = false;
        {
            let mut st = lock(&self.state);
            let ids: Vec<ConnId> = st.conns.keys().copied().collect();
            let mut dead = Vec::new();
            let mut unanswered = Vec::new();
            for id in ids {
                let Some(c) = st.conns.get_mut(&id) else {
                    continue;
                };
                if let Some(a) = c.admitted.as_mut() {
                    match a.liveness.tick(now) {
                        LivenessAction::Dead => {
                            dead.push(id);
                            continue;
                        }
                        LivenessAction::SendProbe { probe_id } => {
                            let probe = Record::new(CommandBody::LivenessProbe(LivenessProbe {
                                probe_id,
                                connection_generation: a.liveness.generation(),
                            }));
                            next = next.min(a.liveness.next_wakeup());
                            self.send_record(id, &probe);
                        }
                        LivenessAction::None => next = next.min(a.liveness.next_wakeup()),
                    }
                } else if let Some(at) = c.retry_at {
                    if at <= now && c.phase == Phase::HelloSent {
                        unanswered.push(id);
                        continue;
                    }
                    if at <= now {
                        if c.connected {
                            self.send_hello(id, c, now);
                        } else {
                            c.retry_at = None;
                        }
                    }
                    if let Some(at) = c.retry_at {
                        next = next.min(at);
                    }
                }
            }
            // Retiring connections close once their requests are done; one that dies by
            // liveness closes too (its requests fail), and is not redialed.
            let retired: Vec<ConnId> = st
                .conns
                .iter()
                .filter(|(id, c)| {
                    c.retiring
                        && (dead.contains(id)
                            || c.admitted
                                .as_ref()
                                .is_none_or(|a| !lock(&self.pending).has_pending_for(&a.peer)))
                })
                .map(|(id, _)| *id)
                .collect();
            for id in retired {
                dead.retain(|d| *d != id);
                if let Some(mut c) = st.conns.remove(&id) {
                    self.lose(&mut c, "descriptor removed");
                    let _ = self.socket.push(SocketCmd::Close { conn: id });
                    changed = true;
                }
            }
            if changed {
                Self::refresh_candidates(&mut st);
            }
            for id in dead {
                self.metrics.liveness_deaths.fetch_add(1, Ordering::Relaxed);
                self.reopen(&mut st, id, "liveness deadline passed");
                changed = true;
            }
            for id in unanswered {
                self.reopen(&mut st, id, "no answer to hello");
                changed = true;
            }
        }
        let expired = lock(&self.pending).expire(now);
        for c in expired {
            let _ = c.waker.send(c.outcome);
        }
        if let Some(d) = lock(&self.pending).next_deadline() {
            next = next.min(d);
        }
        if changed {
            self.notify_changed();
        }
        next
    }

    /// Reconcile discovered Server descriptors into connections (glossary §6 "Automatic
    /// discovery"): new endpoints are dialed, vanished ones closed, a new lifecycle behind a
    /// known endpoint replaces the expectation (and an admitted stale connection), and a
    /// higher descriptor revision of the admitted lifecycle updates weight and state.
    fn on_discovered(&self, descriptors: Vec<ServerDescriptor>) {
        let now = self.now();
        let mut by_endpoint: HashMap<String, Vec<ServerDescriptor>> = HashMap::new();
        for d in descriptors {
            if d.state != RuntimeState::Stopped {
                by_endpoint.entry(d.endpoint.clone()).or_default().push(d);
            }
        }
        let mut st = lock(&self.state);
        let gone: Vec<ConnId> = st
            .conns
            .iter()
            .filter(|(_, c)| c.discovered && !c.manual && !by_endpoint.contains_key(&c.endpoint))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            // A vanished descriptor only makes the connection unselectable: a gracefully
            // stopping server removes its descriptor after it finished the requests it
            // accepted, and a crashed one is caught by liveness. Requests in flight are not
            // failed because of it (review item 2).
            let busy = st.conns.get(&id).is_some_and(|c| {
                c.admitted
                    .as_ref()
                    .is_some_and(|a| lock(&self.pending).has_pending_for(&a.peer))
            });
            if busy {
                if let Some(c) = st.conns.get_mut(&id) {
                    c.retiring = true;
                    c.discovered = false;
                    c.reason = Some("descriptor removed".into());
                }
            } else if let Some(mut c) = st.conns.remove(&id) {
                self.lose(&mut c, "descriptor removed");
                let _ = self.socket.push(SocketCmd::Close { conn: id });
            }
        }
        let mut stale = Vec::new();
        for (endpoint, ds) in by_endpoint {
            let mut expected: Vec<ExpectedServer> = ds
                .iter()
                .map(|d| ExpectedServer {
                    rid: d.server_rid.clone(),
                    lifecycle_generation: d.lifecycle_generation,
                    security_identity: d.security_identity.clone(),
                })
                .collect();
            expected.sort_by(|a, b| {
                (&a.rid, a.lifecycle_generation, &a.security_identity).cmp(&(
                    &b.rid,
                    b.lifecycle_generation,
                    &b.security_identity,
                ))
            });
            let existing = st
                .conns
                .iter_mut()
                .find(|(_, c)| c.endpoint == endpoint && !c.retiring)
                .map(|(id, c)| (*id, c));
            match existing {
                None => {
                    self.open(&mut st, ServerConn::new(endpoint, false, expected));
                }
                Some((id, c)) => {
                    c.discovered = true;
                    if c.expected != expected {
                        c.expected = expected;
                        // An admitted connection to a server no live descriptor names any more
                        // (or whose security identity changed) is stale (review item 10).
                        let matches = |a: &Admitted, e: &ExpectedServer| {
                            a.server.rid == e.rid
                                && a.server.lifecycle_generation == e.lifecycle_generation
                                && a.security_identity == e.security_identity
                        };
                        match &c.admitted {
                            Some(a) if !c.expected.iter().any(|e| matches(a, e)) => {
                                stale.push(id);
                            }
                            _ => {
                                if c.phase == Phase::Rejected {
                                    c.retry_at = Some(now);
                                }
                            }
                        }
                    }
                    if let Some(a) = c.admitted.as_mut() {
                        for d in &ds {
                            if a.server.rid == d.server_rid
                                && a.server.lifecycle_generation == d.lifecycle_generation
                                && d.descriptor_revision > a.revision
                            {
                                a.weight = d.weight;
                                a.state = d.state;
                                a.revision = d.descriptor_revision;
                                a.revision_bytes = None;
                            }
                        }
                    }
                }
            }
        }
        for id in stale {
            self.reopen(&mut st, id, "server lifecycle changed");
        }
        Self::refresh_candidates(&mut st);
        drop(st);
        self.wake.notify_one();
        self.notify_changed();
    }
}

async fn reactor(inner: Arc<ClientInner>, mut rx: mpsc::Receiver<Vec<SocketEvent>>) {
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

async fn discovery_loop(inner: Arc<ClientInner>) {
    let Some(store) = inner.store.clone() else {
        return;
    };
    let mut poll = tokio::time::interval(inner.config.timings.discovery_poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        poll.tick().await;
        if inner.shutting_down.load(Ordering::Acquire) {
            return;
        }
        match store
            .list_descriptors(
                zlink_store::types::DescriptorKind::ClientServerServer,
                &inner.config.channel_name,
            )
            .await
        {
            Ok(records) => {
                let mut found = Vec::with_capacity(records.len());
                for r in &records {
                    match ServerDescriptor::from_record(r) {
                        Ok(d) => found.push(d),
                        Err(e) => {
                            inner
                                .metrics
                                .malformed_descriptors
                                .fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(error = %e, rid = %r.key.rid, "ignored malformed Server descriptor");
                        }
                    }
                }
                inner.on_discovered(found);
            }
            Err(e) => tracing::warn!(error = %e, "Server descriptor poll failed"),
        }
    }
}
