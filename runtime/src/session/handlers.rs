//! The application's STREAM handlers and what a handler is given: the session context and,
//! for a request, its one-shot reply.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use zlink_protocol::stream::{MAX_PACKET_NAME_BYTES, StreamCodec, StreamKind, StreamPacket};
use zlink_session::{
    ClientReply, CloseReason, ErrorKind, ErrorPayload, RESERVED_PREFIX, Reply, SessionId,
};

use super::StreamError;

/// A handler's future.
pub type HandlerFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
pub(super) type SendFn = Arc<dyn Fn(SessionCtx, StreamPacket) -> HandlerFuture + Send + Sync>;
pub(super) type RequestFn =
    Arc<dyn Fn(SessionCtx, StreamPacket, RequestReply) -> HandlerFuture + Send + Sync>;
pub(super) type ClosedFn = Arc<dyn Fn(SessionId, CloseReason) + Send + Sync>;

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
#[derive(Debug, Clone)]
pub struct SessionCtx {
    pub(super) id: SessionId,
    pub(super) local: SocketAddr,
    pub(super) peer: SocketAddr,
    pub(super) control: mpsc::UnboundedSender<Control>,
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
