//! The application's STREAM handlers and what a handler is given: the session context and,
//! for a request, its one-shot reply.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use zlink_protocol::stream::{MAX_PACKET_NAME_BYTES, StreamCodec, StreamKind, StreamPacket};
use zlink_session::{
    ClientReply, CloseReason, ErrorKind, ErrorPayload, RESERVED_PREFIX, Reply, SessionId,
};

use super::StreamError;
use super::bindings::BindingRoute;
use super::router::{SessionRouter, typed_from_packet};
use crate::call::error::{CallError, ErrorKind as CallKind};
use crate::object::actor_ref::ActorRef;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::json::JsonMessage;

/// A handler's future.
pub type HandlerFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
pub(super) type SendFn = Arc<dyn Fn(SessionCtx, StreamPacket) -> HandlerFuture + Send + Sync>;
pub(super) type RequestFn =
    Arc<dyn Fn(SessionCtx, StreamPacket, RequestReply) -> HandlerFuture + Send + Sync>;
pub(super) type ClosedFn = Arc<dyn Fn(SessionId, CloseReason) + Send + Sync>;
/// An authenticator: the session's first packet → the user identity, or why not.
pub type AuthFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'static>>;
pub(super) type AuthFn = Arc<dyn Fn(&StreamPacket) -> AuthFuture + Send + Sync>;
pub(super) type ReplacedFn = Arc<dyn Fn(SessionCtx, String) -> HandlerFuture + Send + Sync>;
pub(super) type LostFn = Arc<dyn Fn(SessionCtx, String, CallKind) -> HandlerFuture + Send + Sync>;

/// The binding callbacks of a StreamNode's sessions (shared, not copied per session).
#[derive(Clone, Default)]
pub(super) struct BindingHooks {
    replaced: Option<ReplacedFn>,
    lost: Option<LostFn>,
}

/// The handlers of a StreamNode, keyed by (kind, packet name) (issue 19 item 2).
///
/// A session runs its handlers **one at a time, in session-sequence order**: the next packet is
/// dispatched when the previous handler's future ended. A handler that wants to answer later
/// moves its [`RequestReply`] into a task of its own. While handlers lag, up to
/// [`DISPATCH_QUEUE`](super::DISPATCH_QUEUE) packets wait, then the session stops reading
/// (TCP backpressure to the client).
#[derive(Clone, Default)]
pub struct SessionHandlers {
    pub(super) sends: HashMap<String, SendFn>,
    pub(super) requests: HashMap<String, RequestFn>,
    pub(super) on_closed: Option<ClosedFn>,
    pub(super) hooks: Arc<BindingHooks>,
    pub(super) authenticator: Option<AuthFn>,
}

impl std::fmt::Debug for SessionHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sends: Vec<_> = self.sends.keys().collect();
        let mut requests: Vec<_> = self.requests.keys().collect();
        sends.sort();
        requests.sort();
        f.debug_struct("SessionHandlers")
            .field("sends", &sends)
            .field("requests", &requests)
            .finish_non_exhaustive()
    }
}

impl SessionHandlers {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handle Send packets named `name`.
    ///
    /// # Errors
    /// [`StreamError::ReservedPacketName`] for a `zlink.` name,
    /// [`StreamError::PacketNameTooLong`], [`StreamError::DuplicateHandler`].
    pub fn on_send<F, Fut>(&mut self, name: &str, handler: F) -> Result<&mut Self, StreamError>
    where
        F: Fn(SessionCtx, StreamPacket) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        check_name(StreamKind::Send, name, self.sends.contains_key(name))?;
        self.sends.insert(
            name.to_owned(),
            Arc::new(move |ctx, packet| Box::pin(handler(ctx, packet))),
        );
        Ok(self)
    }

    /// Handle Request packets named `name`. The handler answers through its
    /// [`RequestReply`]; dropping it unused answers `HandlerFailed`.
    ///
    /// # Errors
    /// As [`on_send`](Self::on_send).
    pub fn on_request<F, Fut>(&mut self, name: &str, handler: F) -> Result<&mut Self, StreamError>
    where
        F: Fn(SessionCtx, StreamPacket, RequestReply) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        check_name(StreamKind::Request, name, self.requests.contains_key(name))?;
        self.requests.insert(
            name.to_owned(),
            Arc::new(move |ctx, packet, reply| Box::pin(handler(ctx, packet, reply))),
        );
        Ok(self)
    }

    /// Called when another session's bind replaced this session's binding to an Actor
    /// (command 51; issue 19 item 4): with the Actor ID. The session's route to that Actor is
    /// gone already; the session closes (`Replaced`) 100 ms after the callback's future ends.
    pub fn on_binding_replaced<F, Fut>(&mut self, callback: F) -> &mut Self
    where
        F: Fn(SessionCtx, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Arc::make_mut(&mut self.hooks).replaced =
            Some(Arc::new(move |ctx, actor| Box::pin(callback(ctx, actor))));
        self
    }

    /// Called when a relay on a binding route was refused for good and the route dropped
    /// (issue 19 item 5: "a failed relay is never resent; `on_binding_lost` fires"): with the
    /// Actor ID and the refusal's kind. The session stays open; bind again to go on.
    pub fn on_binding_lost<F, Fut>(&mut self, callback: F) -> &mut Self
    where
        F: Fn(SessionCtx, String, CallKind) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Arc::make_mut(&mut self.hooks).lost = Some(Arc::new(move |ctx, actor, kind| {
            Box::pin(callback(ctx, actor, kind))
        }));
        self
    }

    /// Decide who each session is (issue 19 item 10): `authenticator` gets the session's
    /// **first packet** (its handler has not run) and returns the user identity — then
    /// [`SessionCtx::identity`] is it and the packet goes to its handler — or a refusal: a
    /// request is answered `Application` "unauthenticated: …", and the session closes
    /// `Unauthenticated` (counted by reason) without dispatching anything more. The credential
    /// travels in that packet (the reference application's `chat.Login` carries a token).
    pub fn authenticate<F, Fut>(&mut self, authenticator: F) -> &mut Self
    where
        F: Fn(&StreamPacket) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, String>> + Send + 'static,
    {
        self.authenticator = Some(Arc::new(move |p| Box::pin(authenticator(p))));
        self
    }

    /// Called once per session after it closed (with why).
    pub fn on_closed<F>(&mut self, callback: F) -> &mut Self
    where
        F: Fn(SessionId, CloseReason) + Send + Sync + 'static,
    {
        self.on_closed = Some(Arc::new(callback));
        self
    }
}

fn check_name(kind: StreamKind, name: &str, taken: bool) -> Result<(), StreamError> {
    if name.starts_with(RESERVED_PREFIX) {
        return Err(StreamError::ReservedPacketName {
            name: name.to_owned(),
        });
    }
    if name.len() > MAX_PACKET_NAME_BYTES {
        return Err(StreamError::PacketNameTooLong {
            name: name.to_owned(),
        });
    }
    if taken {
        return Err(StreamError::DuplicateHandler {
            kind,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// What a handler asks of its connection task.
#[derive(Debug)]
pub(super) enum Control {
    Reply {
        request_seq: u64,
        reply: Reply,
    },
    ReplyDropped {
        request_seq: u64,
    },
    Send(StreamPacket),
    Request {
        packet: StreamPacket,
        done: oneshot::Sender<Result<ClientReply, ErrorKind>>,
    },
    Close(CloseReason),
}

/// The session closed: the packet was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the session is closed")]
pub struct SessionClosed;

/// What a handler knows of its session (glossary §10 "STREAM session": id, addresses, the
/// outbound client).
///
/// Its calls hand work to the session's connection task, which applies them in order; the
/// channel between them holds only what that task has not yet moved into the session's
/// bounded output (`SlowConsumer` closes a session whose client stops reading).
#[derive(Clone)]
pub struct SessionCtx {
    pub(super) id: SessionId,
    pub(super) local: SocketAddr,
    pub(super) peer: SocketAddr,
    pub(super) control: mpsc::UnboundedSender<Control>,
    pub(super) router: Option<Arc<dyn SessionRouter>>,
    pub(super) hooks: Arc<BindingHooks>,
    pub(super) identity: Arc<std::sync::OnceLock<String>>,
}

impl std::fmt::Debug for SessionCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCtx")
            .field("id", &self.id)
            .field("local", &self.local)
            .field("peer", &self.peer)
            .field("routed", &self.router.is_some())
            .finish()
    }
}

/// The error kind a client gets for a runtime error (a relayed request's failure).
pub fn client_kind(kind: CallKind) -> ErrorKind {
    match kind {
        CallKind::NotFound => ErrorKind::NotFound,
        CallKind::DeadlineExceeded | CallKind::Cancelled => ErrorKind::DeadlineExceeded,
        CallKind::ShuttingDown => ErrorKind::ShuttingDown,
        CallKind::InvalidOperation
        | CallKind::AlreadyExists
        | CallKind::Configuration
        | CallKind::GenerationExhausted
        | CallKind::ProtocolError => ErrorKind::InvalidOperation,
        CallKind::StaleRoute => ErrorKind::StaleRoute,
        CallKind::HandlerFailed => ErrorKind::HandlerFailed,
        CallKind::Rejected => ErrorKind::Application,
        CallKind::Unavailable
        | CallKind::Conflict
        | CallKind::StoreFailure
        | CallKind::Backpressured => ErrorKind::Unavailable,
    }
}

impl SessionCtx {
    /// The session's identity.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The StreamNode address the client connected to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Who the session is, as the StreamNode's authenticator decided (`None` without one).
    pub fn identity(&self) -> Option<&str> {
        self.identity.get().map(String::as_str)
    }

    /// Whether the session has ended (its connection task is gone).
    pub fn is_closed(&self) -> bool {
        self.control.is_closed()
    }

    /// Push a Send packet to the client.
    ///
    /// # Errors
    /// [`SessionClosed`].
    pub fn send(
        &self,
        name: &str,
        codec: StreamCodec,
        payload: Vec<u8>,
    ) -> Result<(), SessionClosed> {
        self.send_packet(StreamPacket::send(codec, name, payload))
    }

    /// Push a Send packet with a framework-json payload.
    ///
    /// # Errors
    /// [`SessionClosed`].
    pub fn send_json<T: Serialize>(&self, name: &str, value: &T) -> Result<(), SessionClosed> {
        let payload = serde_json::to_vec(value).map_err(|_| SessionClosed)?;
        self.send(name, StreamCodec::FrameworkJson, payload)
    }

    /// Push a prepared Send packet (metadata, flow and correlation kept). A packet that does not
    /// encode is dropped and counted.
    ///
    /// # Errors
    /// [`SessionClosed`].
    pub fn send_packet(&self, packet: StreamPacket) -> Result<(), SessionClosed> {
        self.control
            .send(Control::Send(packet))
            .map_err(|_| SessionClosed)
    }

    /// Ask the client: a server → client Request with its own sequence. Ends with the client's
    /// answer, or `DeadlineExceeded` at `request_timeout`, or `ConnectionLost` at close.
    ///
    /// # Errors
    /// The [`ErrorKind`] the request ended with.
    pub async fn request(
        &self,
        name: &str,
        codec: StreamCodec,
        payload: Vec<u8>,
    ) -> Result<ClientReply, ErrorKind> {
        let (done, answer) = oneshot::channel();
        // The core assigns the sequence; 1 only makes the packet well-formed until then.
        let packet = StreamPacket::request(codec, 1, name, payload);
        self.control
            .send(Control::Request { packet, done })
            .map_err(|_| ErrorKind::ConnectionLost)?;
        answer.await.unwrap_or(Err(ErrorKind::ConnectionLost))
    }

    /// Close the session (output accepted so far is still flushed unless the reason drops it).
    pub fn close(&self, reason: CloseReason) {
        let _ = self.control.send(Control::Close(reason));
    }

    /// Run the `on_binding_replaced` callback (if any) for `actor_id`, then close this session
    /// `Replaced` after `linger` (the runtime's half of command 51).
    pub(crate) async fn replaced(&self, actor_id: String, linger: Duration) {
        if let Some(f) = self.hooks.replaced.clone() {
            let run = AssertUnwindSafe(f(self.clone(), actor_id));
            if futures::FutureExt::catch_unwind(run).await.is_err() {
                tracing::warn!(session = %self.id, "on_binding_replaced panicked");
            }
        }
        tokio::time::sleep(linger).await;
        self.close(CloseReason::Replaced);
    }

    /// Run the `on_binding_lost` callback (if any).
    pub(crate) async fn binding_lost(&self, actor_id: String, kind: CallKind) {
        if let Some(f) = self.hooks.lost.clone() {
            let run = AssertUnwindSafe(f(self.clone(), actor_id, kind));
            if futures::FutureExt::catch_unwind(run).await.is_err() {
                tracing::warn!(session = %self.id, "on_binding_lost panicked");
            }
        }
    }

    fn router(&self) -> Result<&Arc<dyn SessionRouter>, CallError> {
        self.router.as_ref().ok_or_else(|| {
            CallError::new(
                CallKind::InvalidOperation,
                "this StreamNode runs without an object runtime: its sessions cannot bind",
            )
        })
    }

    /// Bind this session to the Actor incarnation `actor` names (issue 19 item 4; routing
    /// §3.1): its owner checks the ActorRef's fences and records this session as the Actor's
    /// one current binding; then this session's route for that Actor switches to it. Until
    /// then, relays use the route in use before. Only an [`ActorRef`] is taken: nothing here
    /// reads the Location Store.
    ///
    /// # Errors
    /// The owner's refusal — `StaleRoute` (the ActorRef's node lifecycle, owner or lease is
    /// not current), `InvalidOperation` (a new incarnation exists: bind its ActorRef),
    /// `NotFound`, `Unavailable`, `ShuttingDown`, `DeadlineExceeded` — or `Unavailable` when
    /// this session closed.
    pub async fn bind(&self, actor: &ActorRef) -> Result<BindingRoute, CallError> {
        self.router()?.bind(self.id, actor.clone()).await
    }

    /// Unbind this session from Actor `actor_id`: relays to it end at once, and the Actor gets
    /// one `zlink.session.Unbound` notice (its binding ends when it is admitted).
    ///
    /// # Errors
    /// `InvalidOperation` when this session is not bound to it; `Unavailable` when this
    /// session closed.
    pub async fn unbind(&self, actor_id: &str) -> Result<(), CallError> {
        self.router()?.unbind(self.id, actor_id.to_owned()).await
    }

    /// This session's route for Actor `actor_id`, if it is bound to it.
    pub fn binding(&self, actor_id: &str) -> Option<BindingRoute> {
        self.router.as_ref()?.binding(self.id, actor_id)
    }

    /// Every binding route of this session (sorted by Actor ID).
    pub fn bindings(&self) -> Vec<BindingRoute> {
        self.router
            .as_ref()
            .map(|r| r.bindings(self.id))
            .unwrap_or_default()
    }

    /// The current ActorRef of Actor `id`: one read of its authority from the store (the
    /// explicit lookup a bind starts from; relays never read the store).
    ///
    /// # Errors
    /// `NotFound`, `Unavailable`, `StoreFailure`, `InvalidOperation`.
    pub async fn actor_ref(&self, id: &str) -> Result<ActorRef, CallError> {
        self.router()?.actor_ref(id.to_owned(), None).await
    }

    /// Make sure User Spot `id` of `stable_type` exists, creating it (placed by the runtime)
    /// if it is Missing.
    ///
    /// # Errors
    /// As `ObjectRuntime::get_or_create_user_spot`.
    pub async fn get_or_create_spot(&self, stable_type: &str, id: &str) -> Result<(), CallError> {
        self.router()?
            .ensure_spot(stable_type.to_owned(), id.to_owned())
            .await
    }

    /// The ActorRef of Actor `id` of `stable_type`, created (placed by the runtime) if it is
    /// Missing.
    ///
    /// # Errors
    /// As `ObjectRuntime::get_or_create_actor`.
    pub async fn get_or_create_actor(
        &self,
        stable_type: &str,
        id: &str,
    ) -> Result<ActorRef, CallError> {
        self.router()?
            .actor_ref(id.to_owned(), Some(stable_type.to_owned()))
            .await
    }

    /// Relay a client packet one-way to bound Actor `actor_id` (command 24 with the
    /// bound-session tail; its name and codec become the typed payload, its metadata is kept).
    /// Completes at submission; handlers run one packet at a time, so relays keep session
    /// order. Never resent: a route the owner refuses is dropped.
    ///
    /// # Errors
    /// `InvalidOperation` when not bound to `actor_id`; the submission's error.
    pub async fn relay(&self, actor_id: &str, packet: &StreamPacket) -> Result<(), CallError> {
        self.router()?
            .relay(
                self.id,
                actor_id.to_owned(),
                typed_from_packet(packet),
                packet.metadata.clone(),
                None,
            )
            .await
            .map(|_| ())
    }

    /// Relay `msg` one-way to bound Actor `actor_id` (see [`SessionCtx::relay`]).
    ///
    /// # Errors
    /// As [`SessionCtx::relay`]; `InvalidOperation` when `msg` does not serialize.
    pub async fn relay_json<M: JsonMessage>(
        &self,
        actor_id: &str,
        msg: &M,
    ) -> Result<(), CallError> {
        let payload = crate::mesh::handler::encode_json(msg)?;
        self.router()?
            .relay(self.id, actor_id.to_owned(), payload, None, None)
            .await
            .map(|_| ())
    }

    /// Relay a client packet as a request to bound Actor `actor_id` (command 25 with the
    /// bound-session tail) and wait up to `timeout` for its reply.
    ///
    /// # Errors
    /// As [`SessionCtx::relay`]; the Actor's error; `DeadlineExceeded`.
    pub async fn relay_request(
        &self,
        actor_id: &str,
        packet: &StreamPacket,
        timeout: Duration,
    ) -> Result<TypedPayload, CallError> {
        self.router()?
            .relay(
                self.id,
                actor_id.to_owned(),
                typed_from_packet(packet),
                packet.metadata.clone(),
                Some(timeout),
            )
            .await
            .map(Option::unwrap_or_default)
    }
}

/// The one terminal of a client request (issue 19 item 2: "a one-shot `ctx.reply` /
/// `ctx.error`"). Dropping it unused — the handler returned, failed or panicked without
/// answering — answers the client `HandlerFailed`.
#[derive(Debug)]
pub struct RequestReply {
    request_seq: u64,
    control: mpsc::UnboundedSender<Control>,
    answered: bool,
}

impl RequestReply {
    pub(super) fn new(request_seq: u64, control: mpsc::UnboundedSender<Control>) -> Self {
        Self {
            request_seq,
            control,
            answered: false,
        }
    }

    /// The client's request sequence this answers.
    pub fn request_seq(&self) -> u64 {
        self.request_seq
    }

    /// Answer with a Response.
    pub fn ok(self, codec: StreamCodec, payload: Vec<u8>) {
        self.finish(Reply::Response { codec, payload });
    }

    /// Answer with a framework-json Response.
    pub fn json<T: Serialize>(self, value: &T) {
        match serde_json::to_vec(value) {
            Ok(payload) => self.ok(StreamCodec::FrameworkJson, payload),
            Err(e) => self.error(
                ErrorKind::HandlerFailed,
                format!("reply does not serialize: {e}"),
            ),
        }
    }

    /// Answer with an Error `{kind, detail}`.
    pub fn error(self, kind: ErrorKind, detail: impl Into<String>) {
        self.finish(Reply::Error(ErrorPayload::new(kind, detail)));
    }

    /// Answer with a runtime error (its kind as the client's kind, see [`client_kind`]).
    pub fn call_error(self, e: &CallError) {
        self.error(client_kind(e.kind()), e.detail());
    }

    /// Answer with a relayed result: a reply payload as a Response (framework-json content
    /// type → that codec, any other → raw), an error as [`RequestReply::call_error`].
    pub fn answer(self, result: Result<TypedPayload, CallError>) {
        match result {
            Ok(p) => {
                let packet = super::router::packet_from_typed(&p);
                self.ok(packet.codec, packet.payload);
            }
            Err(e) => self.call_error(&e),
        }
    }

    fn finish(mut self, reply: Reply) {
        self.answered = true;
        let _ = self.control.send(Control::Reply {
            request_seq: self.request_seq,
            reply,
        });
    }
}

impl Drop for RequestReply {
    fn drop(&mut self) {
        if !self.answered {
            let _ = self.control.send(Control::ReplyDropped {
                request_seq: self.request_seq,
            });
        }
    }
}
