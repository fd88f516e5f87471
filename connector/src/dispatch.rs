//! What arrives for the application — server pushes, server → client requests, lifecycle
//! events — and where its callbacks run ([`DispatchMode`]).
//!
//! A push goes to the oldest [`Connector::wait`](crate::Connector::wait)er for its packet name
//! if there is one, else to the `on_send` handler for its name, else it is counted as unhandled
//! and dropped **(ours)**: one consumer per packet, so a line of chat is never shown twice.
//! Waiters are served as packets arrive, in both modes; handlers and event callbacks run in
//! arrival order, inline (`Immediate`) or from `dispatch_pending` (`Manual`).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, mpsc, oneshot};
use zlink_protocol::stream::{StreamCodec, StreamPacket};
use zlink_session::{ErrorKind, ErrorPayload};

use crate::config::DispatchMode;
use crate::core::{ClientAnswer, DisconnectReason};
use crate::error::DecodeError;

/// The connection lifecycle, as the application sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectorEvent {
    /// The first session is up.
    Connected {
        /// Our end of the connection.
        local_addr: SocketAddr,
        /// The StreamNode's end.
        peer_addr: SocketAddr,
    },
    /// A session ended. Its pending requests ended `ConnectionLost`; nothing is resent.
    Disconnected(DisconnectReason),
    /// Reconnect attempt `attempt` (1-based) starts after `delay`.
    Reconnecting {
        /// The attempt number since the disconnect.
        attempt: u32,
        /// The backoff before it.
        delay: Duration,
    },
    /// A new session is up (a new server-side SessionId: nothing of the old one carries over).
    Reconnected {
        /// Our end of the new connection.
        local_addr: SocketAddr,
        /// The StreamNode's end.
        peer_addr: SocketAddr,
    },
    /// The connector stopped for good: closed by the application, or the reconnect policy gave
    /// up. Always the last event.
    Closed,
}

/// A successful answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    packet: StreamPacket,
}

impl Response {
    pub(crate) fn new(packet: StreamPacket) -> Self {
        Self { packet }
    }

    /// The payload as framework-json `R`.
    ///
    /// # Errors
    /// [`DecodeError`] for a raw payload or bytes that are not `R`.
    pub fn json<R: DeserializeOwned>(&self) -> Result<R, DecodeError> {
        decode(&self.packet)
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.packet.payload
    }

    /// The payload codec.
    pub fn codec(&self) -> StreamCodec {
        self.packet.codec
    }

    /// The whole packet (metadata and correlation ID included).
    pub fn packet(&self) -> &StreamPacket {
        &self.packet
    }
}

/// Decode a packet's framework-json payload.
pub(crate) fn decode<R: DeserializeOwned>(packet: &StreamPacket) -> Result<R, DecodeError> {
    if packet.codec != StreamCodec::FrameworkJson {
        return Err(DecodeError::NotJson {
            packet: packet.packet_name.clone(),
        });
    }
    serde_json::from_slice(&packet.payload).map_err(|source| DecodeError::Json {
        packet: packet.packet_name.clone(),
        source,
    })
}

/// An answer from a [`Responder`] to the connector's task.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The session the request came on; an answer for an older session is dropped.
    pub session: u64,
    pub request_seq: u64,
    pub answer: ClientAnswer,
}

/// The one answer to a server → client request. Dropping it unused answers the server
/// `HandlerFailed`, so every server request ends once. An answer given after the session it
/// came on ended is dropped (the server already ended the request `ConnectionLost`).
#[derive(Debug)]
pub struct Responder {
    session: u64,
    request_seq: u64,
    answers: mpsc::UnboundedSender<Answer>,
    answered: bool,
}

impl Responder {
    pub(crate) fn new(
        session: u64,
        request_seq: u64,
        answers: mpsc::UnboundedSender<Answer>,
    ) -> Self {
        Self {
            session,
            request_seq,
            answers,
            answered: false,
        }
    }

    /// Answer with a Response.
    pub fn ok(self, codec: StreamCodec, payload: Vec<u8>) {
        self.finish(ClientAnswer::Response { codec, payload });
    }

    /// Answer with a framework-json Response.
    pub fn json<T: Serialize>(self, value: &T) {
        match serde_json::to_vec(value) {
            Ok(payload) => self.ok(StreamCodec::FrameworkJson, payload),
            Err(e) => self.error(
                ErrorKind::HandlerFailed,
                format!("answer does not serialize: {e}"),
            ),
        }
    }

    /// Answer with an Error `{kind, detail}`.
    pub fn error(self, kind: ErrorKind, detail: impl Into<String>) {
        self.finish(ClientAnswer::Error(ErrorPayload::new(kind, detail)));
    }

    fn finish(mut self, answer: ClientAnswer) {
        self.answered = true;
        // The answer channel is unbounded on purpose: it holds at most one answer per server
        // request in flight, and a callback must not block on the task that runs it.
        let _ = self.answers.send(Answer {
            session: self.session,
            request_seq: self.request_seq,
            answer,
        });
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.answered {
            let _ = self.answers.send(Answer {
                session: self.session,
                request_seq: self.request_seq,
                answer: ClientAnswer::Error(ErrorPayload::new(
                    ErrorKind::HandlerFailed,
                    "the client's handler ended without answering",
                )),
            });
        }
    }
}

type SendFn = Arc<Mutex<dyn FnMut(StreamPacket) + Send>>;
type RequestFn = Arc<Mutex<dyn FnMut(StreamPacket, Responder) + Send>>;
type EventFn = Arc<Mutex<dyn FnMut(&ConnectorEvent) + Send>>;

/// One unit of dispatch work.
#[derive(Debug)]
pub(crate) enum Dispatch {
    Push(StreamPacket),
    Request(StreamPacket, Responder),
    Event(ConnectorEvent),
}

/// Counters of a connector (all sessions).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub sessions: AtomicU64,
    pub reconnect_attempts: AtomicU64,
    pub packets_in: AtomicU64,
    pub packets_out: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub pings: AtomicU64,
    pub unknown_reply_drops: AtomicU64,
    pub unhandled: AtomicU64,
    pub decode_failures: AtomicU64,
    pub handler_panics: AtomicU64,
}

/// A snapshot of a connector's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectorStats {
    /// Sessions established (1 + successful reconnects).
    pub sessions: u64,
    /// Reconnect attempts started.
    pub reconnect_attempts: u64,
    /// Packets from the server (ended sessions and the current one up to its last event).
    pub packets_in: u64,
    /// Packets to the server.
    pub packets_out: u64,
    /// Bytes from the server.
    pub bytes_in: u64,
    /// Bytes to the server.
    pub bytes_out: u64,
    /// Keepalive pings sent.
    pub pings: u64,
    /// Answers matching no pending request (after a local timeout): dropped.
    pub unknown_reply_drops: u64,
    /// Pushes with no waiter and no handler: dropped.
    pub unhandled: u64,
    /// Pushes or requests whose payload a typed handler could not decode: dropped (a request
    /// is answered `HandlerFailed`).
    pub decode_failures: u64,
    /// Callbacks that panicked (the connector carries on).
    pub handler_panics: u64,
}

/// State shared by the connector handles and its task.
pub(crate) struct Shared {
    pub mode: DispatchMode,
    pub capacity: usize,
    sends: Mutex<HashMap<String, SendFn>>,
    requests: Mutex<HashMap<String, RequestFn>>,
    on_event: Mutex<Option<EventFn>>,
    waiters: Mutex<HashMap<String, VecDeque<oneshot::Sender<StreamPacket>>>>,
    queue: Mutex<VecDeque<Dispatch>>,
    /// Signalled when `dispatch_pending` made room in a full queue.
    pub queue_space: Notify,
    pub connected: AtomicBool,
    pub closed: AtomicBool,
    pub stats: Stats,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking callback is caught outside these locks; a poisoned map is still consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("mode", &self.mode)
            .field("queued", &lock(&self.queue).len())
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub fn new(mode: DispatchMode, capacity: usize) -> Self {
        Self {
            mode,
            capacity,
            sends: Mutex::default(),
            requests: Mutex::default(),
            on_event: Mutex::default(),
            waiters: Mutex::default(),
            queue: Mutex::default(),
            queue_space: Notify::new(),
            connected: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            stats: Stats::default(),
        }
    }

    pub fn set_send_handler(&self, name: String, f: SendFn) {
        lock(&self.sends).insert(name, f);
    }

    pub fn set_request_handler(&self, name: String, f: RequestFn) {
        lock(&self.requests).insert(name, f);
    }

    pub fn set_event_handler(&self, f: EventFn) {
        *lock(&self.on_event) = Some(f);
    }

    /// Register a waiter for the next push named `name`; `None` once closed.
    pub fn add_waiter(&self, name: &str) -> Option<oneshot::Receiver<StreamPacket>> {
        let (tx, rx) = oneshot::channel();
        let mut waiters = lock(&self.waiters);
        // Checked under the lock `close_waiters` takes, so no waiter outlives the close.
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        waiters.entry(name.to_owned()).or_default().push_back(tx);
        Some(rx)
    }

    /// Wake every waiter with `Closed` (their senders drop).
    pub fn close_waiters(&self) {
        let mut waiters = lock(&self.waiters);
        self.closed.store(true, Ordering::Release);
        waiters.clear();
    }

    pub fn queued(&self) -> usize {
        lock(&self.queue).len()
    }

    /// Whether the receive task must stop reading until `dispatch_pending` makes room.
    pub fn queue_full(&self) -> bool {
        self.mode == DispatchMode::Manual && self.queued() >= self.capacity
    }

    /// Hand `item` to a waiter, or run it now (`Immediate`), or queue it (`Manual`).
    pub fn deliver(&self, item: Dispatch) {
        let item = match item {
            Dispatch::Push(packet) => match self.serve_waiter(packet) {
                Some(packet) => Dispatch::Push(packet),
                None => return,
            },
            other => other,
        };
        match self.mode {
            DispatchMode::Immediate => self.run(item),
            DispatchMode::Manual => lock(&self.queue).push_back(item),
        }
    }

    /// Run up to `max` queued callbacks here, in arrival order; how many ran.
    pub fn dispatch_pending(&self, max: usize) -> usize {
        let mut ran = 0;
        while ran < max {
            let Some(item) = lock(&self.queue).pop_front() else {
                break;
            };
            self.run(item);
            ran += 1;
        }
        if ran > 0 {
            // A stored permit if the task is not waiting yet: it rechecks the queue either way.
            self.queue_space.notify_one();
        }
        ran
    }

    /// The packet back when no live waiter took it.
    fn serve_waiter(&self, packet: StreamPacket) -> Option<StreamPacket> {
        let mut waiters = lock(&self.waiters);
        let Some(queue) = waiters.get_mut(&packet.packet_name) else {
            return Some(packet);
        };
        let mut packet = packet;
        while let Some(tx) = queue.pop_front() {
            match tx.send(packet) {
                Ok(()) => return None,
                // That waiter timed out or was dropped: try the next.
                Err(back) => packet = back,
            }
        }
        waiters.remove(&packet.packet_name);
        Some(packet)
    }

    fn run(&self, item: Dispatch) {
        match item {
            Dispatch::Push(packet) => {
                let handler = lock(&self.sends).get(&packet.packet_name).cloned();
                let Some(handler) = handler else {
                    self.stats.unhandled.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(packet = %packet.packet_name, "push without a handler dropped");
                    return;
                };
                self.guarded(|| (lock(&handler))(packet));
            }
            Dispatch::Request(packet, responder) => {
                let handler = lock(&self.requests).get(&packet.packet_name).cloned();
                let Some(handler) = handler else {
                    let detail = format!("no client handler for {:?}", packet.packet_name);
                    responder.error(ErrorKind::UnknownPacket, detail);
                    return;
                };
                // A panic drops the responder inside the callback: the server gets
                // HandlerFailed.
                self.guarded(|| (lock(&handler))(packet, responder));
            }
            Dispatch::Event(event) => {
                let handler = lock(&self.on_event).clone();
                if let Some(handler) = handler {
                    self.guarded(|| (lock(&handler))(&event));
                }
            }
        }
    }

    fn guarded(&self, f: impl FnOnce()) {
        if catch_unwind(AssertUnwindSafe(f)).is_err() {
            self.stats.handler_panics.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("a connector callback panicked");
        }
    }

    pub fn snapshot(&self) -> ConnectorStats {
        let s = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ConnectorStats {
            sessions: get(&s.sessions),
            reconnect_attempts: get(&s.reconnect_attempts),
            packets_in: get(&s.packets_in),
            packets_out: get(&s.packets_out),
            bytes_in: get(&s.bytes_in),
            bytes_out: get(&s.bytes_out),
            pings: get(&s.pings),
            unknown_reply_drops: get(&s.unknown_reply_drops),
            unhandled: get(&s.unhandled),
            decode_failures: get(&s.decode_failures),
            handler_panics: get(&s.handler_panics),
        }
    }
}

/// A typed push handler: decode, count failures.
pub(crate) fn typed_send<M, F>(shared: &Arc<Shared>, mut f: F) -> SendFn
where
    M: DeserializeOwned + 'static,
    F: FnMut(M) + Send + 'static,
{
    let shared = Arc::downgrade(shared);
    Arc::new(Mutex::new(move |packet: StreamPacket| {
        match decode::<M>(&packet) {
            Ok(msg) => f(msg),
            Err(e) => {
                if let Some(s) = shared.upgrade() {
                    s.stats.decode_failures.fetch_add(1, Ordering::Relaxed);
                }
                tracing::warn!(error = %e, "push dropped");
            }
        }
    }))
}

/// A typed request handler: decode, answer `HandlerFailed` on a bad payload.
pub(crate) fn typed_request<M, F>(shared: &Arc<Shared>, mut f: F) -> RequestFn
where
    M: DeserializeOwned + 'static,
    F: FnMut(M, Responder) + Send + 'static,
{
    let shared = Arc::downgrade(shared);
    Arc::new(Mutex::new(
        move |packet: StreamPacket, responder: Responder| match decode::<M>(&packet) {
            Ok(msg) => f(msg, responder),
            Err(e) => {
                if let Some(s) = shared.upgrade() {
                    s.stats.decode_failures.fetch_add(1, Ordering::Relaxed);
                }
                responder.error(ErrorKind::HandlerFailed, e.to_string());
            }
        },
    ))
}
