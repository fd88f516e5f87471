//! The intake of an object that is moving (issue 17 items 3–5 and 7): what stands in the live
//! table for it while its executor is captured (the source) or not yet switched in (the
//! target's temporary queue).
//!
//! Every admitted arrival — a one-way message or a request, from the mesh or from a local
//! caller — is taken in order and kept as a [`Carried`] item: the source relays them to the
//! target (`relocationData`, 31) and, after the handover, follows them there (Message Follow);
//! the target puts them behind the staged relays at its switch. When the move is undone the
//! intake redirects to the restored object after handing it what it holds, so the order of
//! arrivals is kept across the hand-back too.
//!
//! After the handover the intake is the object's *follow route* (wire §3.1, issue 17 item 7):
//! [`Intake::forward_as_sent`] switches it to take records from other nodes with their own
//! identity ([`Origin`]: the sender, the route it used, the request header), so they are
//! forwarded as they came and the new owner answers the sender itself. Until then (and for
//! local callers throughout) a request is held with a [`Reply`] this node answers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{Notify, oneshot};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{NodeFence, RequestHeader, RouteFence};
use zlink_protocol::metadata::Metadata;

use crate::call::error::{CallError, ErrorKind};
use crate::mesh::MeshNode;
use crate::mesh::handler::BoxFuture;
use crate::object::exec::{CapturedQueue, ReplyReceiver, SpotGate};
use crate::object::registry::LiveObject;
use crate::object::work::Reply;

/// One arrival taken by an intake.
pub(crate) struct Carried {
    pub(crate) payload: TypedPayload,
    pub(crate) metadata: Option<Metadata>,
    /// A request's terminal, answered by this node; `None` for a one-way message and for a
    /// record that keeps its [`Origin`].
    pub(crate) reply: Option<Reply>,
    /// A record of another node taken by a follow route with its own identity; `None` for
    /// everything else. Never set together with `reply`.
    pub(crate) origin: Option<Origin>,
}

/// A record of another node as [`Intake::take_as_sent`] takes it: where it came from, its
/// payload and metadata.
pub(crate) type AsSent = Box<(Origin, TypedPayload, Option<Metadata>)>;

/// Where a followed record came from, kept so it is forwarded as it came (wire §3.1: the
/// operation ID, reply route and source stay).
pub(crate) struct Origin {
    /// The node that sent it (the new owner answers a request there).
    pub(crate) source: Arc<NodeFence>,
    /// The route the sender used.
    pub(crate) route: RouteFence,
    /// A request's terminal identity; `None` for a one-way message.
    pub(crate) request: Option<RequestHeader>,
    /// The mesh that answers the request here when the record is not forwarded after all.
    pub(crate) mesh: Arc<MeshNode>,
}

impl Carried {
    /// A record that keeps its [`Origin`] turned into one this node answers: a request's
    /// terminal goes to its sender from here, as if the record had been served here.
    pub(crate) fn localize(self) -> Self {
        let Some(origin) = self.origin else {
            return self;
        };
        let reply = origin
            .request
            .map(|header| Reply::mesh(origin.mesh, origin.source, header));
        Self {
            payload: self.payload,
            metadata: self.metadata,
            reply,
            origin: None,
        }
    }

    /// Hand it to `obj` in arrival order (a request's terminal is forwarded to its caller).
    pub(crate) fn deliver_to(self, obj: &Arc<dyn LiveObject>) {
        let this = self.localize();
        this.deliver_localized(obj);
    }

    fn deliver_localized(self, obj: &Arc<dyn LiveObject>) {
        match self.reply {
            None => {
                if let Err(e) = obj.send(self.payload, self.metadata) {
                    tracing::warn!(error = %e, "a held message was refused by the restored object");
                }
            }
            Some(reply) => obj.request_into(self.payload, self.metadata, reply),
        }
    }
}

enum State {
    /// Arrivals wait here in order.
    Holding(VecDeque<Carried>),
    /// Arrivals go straight to this object (the move was undone, or the switch happened).
    Redirect(Arc<dyn LiveObject>),
    /// Arrivals are refused with this error kind (the follow window ended, or the move was
    /// abandoned).
    Closed(ErrorKind, &'static str),
}

/// See the module docs.
pub(crate) struct Intake {
    state: Mutex<State>,
    arrived: Notify,
    gate: Option<SpotGate>,
    /// The follow route takes records of other nodes with their [`Origin`].
    forwarding: AtomicBool,
}

impl Intake {
    /// An intake holding arrivals; `gate` is what the object's turns take (reported to
    /// callers that compare gates, never taken here).
    pub(crate) fn new(gate: Option<SpotGate>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::Holding(VecDeque::new())),
            arrived: Notify::new(),
            gate,
            forwarding: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take everything held so far, in arrival order (empty unless holding).
    pub(crate) fn take(&self) -> Vec<Carried> {
        match &mut *self.lock() {
            State::Holding(q) => q.drain(..).collect(),
            State::Redirect(_) | State::Closed(..) => Vec::new(),
        }
    }

    /// Wait until something arrives (returns at once when something is held already).
    pub(crate) async fn arrived(&self) {
        let notified = self.arrived.notified();
        if matches!(&*self.lock(), State::Holding(q) if !q.is_empty()) {
            return;
        }
        notified.await;
    }

    /// Hand `first` (in order), then everything held, to `obj`, and send later arrivals
    /// straight to it. One step under the intake's lock, so no arrival overtakes another.
    pub(crate) fn redirect(&self, first: Vec<Carried>, obj: Arc<dyn LiveObject>) {
        let mut st = self.lock();
        let held = match std::mem::replace(&mut *st, State::Redirect(Arc::clone(&obj))) {
            State::Holding(q) => q,
            State::Redirect(_) | State::Closed(..) => VecDeque::new(),
        };
        for c in first.into_iter().chain(held) {
            c.deliver_to(&obj);
        }
    }

    /// Refuse later arrivals with `kind`; what is held is ended the same way.
    pub(crate) fn end_with(&self, kind: ErrorKind, why: &'static str) {
        let held = match std::mem::replace(&mut *self.lock(), State::Closed(kind, why)) {
            State::Holding(q) => q,
            State::Redirect(_) | State::Closed(..) => VecDeque::new(),
        };
        for c in held {
            if let Some(reply) = c.localize().reply {
                let _ = reply.send(Err(CallError::new(kind, why)));
            }
        }
        self.arrived.notify_waiters();
    }

    /// From now on take records of other nodes with their [`Origin`] (the handover happened:
    /// nothing taken from here on is ever put back into an object on this node).
    pub(crate) fn forward_as_sent(&self) {
        self.forwarding.store(true, Ordering::Release);
    }

    /// Take `record` (a record of another node, with its [`Origin`]) to be forwarded as it came, if
    /// this is a follow route still holding arrivals; gives it back otherwise (the caller
    /// serves it as any other arrival).
    pub(crate) fn take_as_sent(&self, record: AsSent) -> Result<(), AsSent> {
        if !self.forwarding.load(Ordering::Acquire) {
            return Err(record);
        }
        let mut st = self.lock();
        match &mut *st {
            State::Holding(q) => {
                let (origin, payload, metadata) = *record;
                q.push_back(Carried {
                    payload,
                    metadata,
                    reply: None,
                    origin: Some(origin),
                });
                drop(st);
                self.arrived.notify_one();
                Ok(())
            }
            State::Redirect(_) | State::Closed(..) => Err(record),
        }
    }

    fn admit(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        reply: Option<Reply>,
    ) -> Result<(), CallError> {
        let mut st = self.lock();
        match &mut *st {
            State::Holding(q) => {
                q.push_back(Carried {
                    payload,
                    metadata,
                    reply,
                    origin: None,
                });
                drop(st);
                self.arrived.notify_one();
                Ok(())
            }
            State::Redirect(obj) => {
                let obj = Arc::clone(obj);
                drop(st);
                Carried {
                    payload,
                    metadata,
                    reply,
                    origin: None,
                }
                .deliver_localized(&obj);
                Ok(())
            }
            State::Closed(kind, why) => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(CallError::new(*kind, *why)));
                }
                Err(CallError::new(*kind, *why))
            }
        }
    }
}

impl LiveObject for Intake {
    fn send(&self, payload: TypedPayload, metadata: Option<Metadata>) -> Result<(), CallError> {
        self.admit(payload, metadata, None)
    }
    fn request(&self, payload: TypedPayload) -> BoxFuture<Result<TypedPayload, CallError>> {
        let rx = self.request_start(payload, None);
        Box::pin(async move {
            rx?.await
                .unwrap_or_else(|_| Err(CallError::new(ErrorKind::Unavailable, "object closed")))
        })
    }
    fn request_start(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<ReplyReceiver, CallError> {
        let (tx, rx) = oneshot::channel();
        self.admit(payload, metadata, Some(tx.into()))?;
        Ok(rx)
    }
    fn request_into(&self, payload: TypedPayload, metadata: Option<Metadata>, reply: Reply) {
        // A closed intake answers the reply itself.
        let _ = self.admit(payload, metadata, Some(reply));
    }
    fn capture_state(&self) -> Result<Option<Bytes>, CallError> {
        Err(moving())
    }
    fn capture_move(
        &self,
        _route: zlink_protocol::generated::RouteFence,
        _source: zlink_protocol::generated::NodeFence,
    ) -> BoxFuture<Result<CapturedQueue, CallError>> {
        Box::pin(async { Err(moving()) })
    }
    fn resume_moved(&self, _captured: CapturedQueue) {}
    fn close(&self) -> BoxFuture<()> {
        self.end_with(
            ErrorKind::Unavailable,
            "the object closed while it was moving",
        );
        Box::pin(async {})
    }
    fn gate(&self) -> Option<SpotGate> {
        self.gate.clone()
    }
    fn set_gate(&self, _gate: Option<SpotGate>) {}
    fn notify_member(&self, _joined: bool, _actor: String) -> Result<(), CallError> {
        Err(moving())
    }
    fn pending(&self) -> usize {
        match &*self.lock() {
            State::Holding(q) => q.len(),
            State::Redirect(_) | State::Closed(..) => 0,
        }
    }
    fn hold(&self) -> BoxFuture<Result<oneshot::Sender<()>, CallError>> {
        Box::pin(async { Err(moving()) })
    }
    fn first_message(
        &self,
        _payload: TypedPayload,
        _metadata: Option<Metadata>,
        _request: bool,
    ) -> Result<ReplyReceiver, CallError> {
        Err(moving())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

fn moving() -> CallError {
    CallError::new(
        ErrorKind::Unavailable,
        "the object is moving to another node",
    )
}
