//! Factory registration per stable type (glossary §1 "Stable type", §4 "Relocation policy",
//! "Preserve-state relocation policy"; issue "Spots and Actors" §1).
//!
//! An application registers, before the runtime starts, one factory per **stable type**: an
//! explicit UTF-8 name of 1..=255 bytes, compared case-sensitively and never derived from a
//! Rust type name (a rename of the Rust type must not change the wire identity). Each
//! registration fixes the object kind, the relocation policy and, for User Spots, the
//! execution mode and relocation coordination mode. Registrations are frozen at start: the
//! policy cannot change per operation or later (glossary §4).
//!
//! A registered type is erased behind [`ObjectType`], so the runtime holds types of different
//! state types in one table; a created instance is a [`LiveObject`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::RelocationPolicy as WirePolicy;
use zlink_protocol::metadata::Metadata;

use super::exec::{
    Binding, ExecMode, ObjectExecutor, ObjectHandlers, ReplyReceiver, SpotGate, new_gate,
};
use crate::call::error::{CallError, ErrorKind};
use crate::mesh::handler::BoxFuture;

/// What an object is (glossary §1). Instance Spots are reserved for cold activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectTypeKind {
    /// An entity with its own state and mailbox, member of exactly one Entry or User Spot.
    Actor,
    /// One per Object Server node lifecycle, created by the runtime.
    EntrySpot,
    /// Created, got-or-created and closed by the application.
    UserSpot,
    /// Activated on first use with Instance intent (cold activation; next issue).
    InstanceSpot,
}

/// How a User Spot and its member Actors share execution (glossary §1 "Execution mode").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpotExecution {
    /// The Spot and its member Actors share one gate; `Yield` is allowed (the default).
    #[default]
    SpotWide,
    /// Each member Actor has its own gate; `Yield` is not allowed.
    PerActor,
}

/// Who decides when a SpotWide User Spot may start to relocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RelocationCoordination {
    /// The framework picks the moment (the default).
    #[default]
    FrameworkManaged,
    /// The application signals a safe turn.
    ApplicationSignaled,
}

/// Captures and restores application state as opaque bytes (the framework never parses
/// them).
///
/// Both run on a tokio worker of the node's runtime (`capture` at the seal, `restore` on the
/// target before the switch). An adapter whose work takes more than a fraction of a millisecond
/// (a large state, a slow decoder) should wrap it in `tokio::task::block_in_place` on a
/// multi-thread runtime, so the tasks queued on that worker — other objects' turns, the node's
/// reactor — move to another thread instead of waiting for it. The framework does not do this
/// itself: the hand-off costs about a millisecond, more than a typical restore.
pub trait StateAdapter<S>: Send + Sync + 'static {
    /// The state at a handler boundary, as bytes.
    ///
    /// # Errors
    /// A typed error; the relocation then fails without moving anything.
    fn capture(&self, state: &S) -> Result<Bytes, CallError>;
    /// The state from captured bytes.
    ///
    /// # Errors
    /// A typed error; the restore fails and the source keeps the object.
    fn restore(&self, bytes: &[u8]) -> Result<S, CallError>;
}

/// A [`StateAdapter`] for serde types, as JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonState;

impl<S: Serialize + DeserializeOwned + Send + 'static> StateAdapter<S> for JsonState {
    fn capture(&self, state: &S) -> Result<Bytes, CallError> {
        serde_json::to_vec(state)
            .map(Bytes::from)
            .map_err(|e| CallError::new(ErrorKind::HandlerFailed, format!("state capture: {e}")))
    }
    fn restore(&self, bytes: &[u8]) -> Result<S, CallError> {
        serde_json::from_slice(bytes)
            .map_err(|e| CallError::new(ErrorKind::HandlerFailed, format!("state restore: {e}")))
    }
}

/// What happens to the state when the object moves to another node (glossary §4).
pub enum Relocation<S> {
    /// The object never moves across nodes.
    Disable,
    /// A fresh instance from the factory on the target; queue and timers still move.
    Recreate,
    /// The state moves as the adapter's bytes, with queue and timers.
    PreserveWith(Arc<dyn StateAdapter<S>>),
}

impl<S> Relocation<S> {
    /// The wire value of the policy.
    pub fn wire(&self) -> WirePolicy {
        match self {
            Self::Disable => WirePolicy::DisableRelocation,
            Self::Recreate => WirePolicy::RecreateOnRelocation,
            Self::PreserveWith(_) => WirePolicy::PreserveState,
        }
    }
}

/// What a factory learns about the object it creates.
#[derive(Debug, Clone)]
pub struct FactoryInput {
    /// Global Spot or Actor ID.
    pub id: String,
    /// Stable type.
    pub stable_type: String,
    /// ObjectGeneration of the new incarnation.
    pub object_generation: u64,
    /// The creation's optional initial payload.
    pub init: Option<TypedPayload>,
}

type Factory<S> = Arc<dyn Fn(FactoryInput) -> BoxFuture<Result<S, CallError>> + Send + Sync>;

/// A registration refused at start.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegistryError {
    /// The stable type is not 1..=255 bytes (or otherwise invalid).
    #[error("stable type {0:?} is invalid: {1}")]
    InvalidStableType(String, String),
    /// The stable type is registered twice.
    #[error("stable type {0:?} is registered twice")]
    Duplicate(String),
    /// An option that does not apply to the kind (e.g. an execution mode on an Actor).
    #[error("stable type {0:?}: {1}")]
    NotApplicable(String, &'static str),
    /// The same subscription key is registered twice on one type (glossary §4 "Subscription").
    #[error("stable type {0:?} subscribes to {1} twice")]
    DuplicateSubscription(String, String),
    /// A subscription topic is empty, too long, or reserved (a control-character prefix, such
    /// as the classic fanout liveness topic).
    #[error("stable type {0:?}: topic {1:?} cannot be subscribed: {2}")]
    BadTopic(String, String, &'static str),
}

/// One Logical Multicast subscription of a Spot type (glossary §4 "Subscription"): messages
/// published on (`channel`, `topic`) with packet name `packet_name` are delivered, one-way, to
/// every live Spot of the type on a receiving node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subscription {
    /// ChannelName (the node must be a member of it).
    pub channel: String,
    /// Topic.
    pub topic: String,
    /// Packet name of the message (the type's send handler of that name receives it).
    pub packet_name: String,
}

/// Why a topic cannot be used for Logical Multicast (`None`: it can).
pub fn topic_problem(topic: &str) -> Option<&'static str> {
    if topic.is_empty() {
        Some("it is empty")
    } else if topic.len() > 255 {
        Some("it is longer than 255 bytes")
    } else if topic.starts_with(|c: char| c.is_control()) {
        Some("topics starting with a control character are reserved (classic fanout liveness)")
    } else {
        None
    }
}

/// One registered type, erased.
pub trait ObjectType: Send + Sync + 'static {
    /// Its stable type.
    fn stable_type(&self) -> &str;
    /// Its kind.
    fn kind(&self) -> ObjectTypeKind;
    /// Its relocation policy (wire value).
    fn policy(&self) -> WirePolicy;
    /// The execution mode of its instances.
    fn exec_mode(&self) -> ExecMode;
    /// User Spots: how members share execution.
    fn spot_execution(&self) -> SpotExecution;
    /// User Spots: relocation coordination.
    fn coordination(&self) -> RelocationCoordination;
    /// Spots: Logical Multicast subscriptions.
    fn subscriptions(&self) -> &[Subscription];
    /// Whether the type's handlers have a send handler for `packet_name`.
    fn has_send_handler(&self, packet_name: &str) -> bool;
    /// Run the factory and start the instance's executor on the queue `home` (factories may
    /// run more than once for one ID after failures: at-least-once).
    fn create(
        &self,
        input: FactoryInput,
        home: Binding,
    ) -> BoxFuture<Result<Box<dyn LiveObject>, CallError>>;
    /// Restore an instance from captured state bytes (`None`: recreate from the factory) on
    /// the queue `home`.
    fn restore(
        &self,
        input: FactoryInput,
        state: Option<Bytes>,
        home: Binding,
    ) -> BoxFuture<Result<Box<dyn LiveObject>, CallError>>;
    /// Restore an instance a move brought here (the target side, wire §9): its state per the
    /// policy (`None` with `RecreateOnRelocation`: the factory runs), then `moved` ahead of
    /// anything that arrives later and the timers re-armed. Nothing runs before `home` is
    /// Ready.
    fn restore_moved(
        &self,
        input: FactoryInput,
        state: Option<Bytes>,
        home: Binding,
        moved: crate::object::exec::MovedWork,
        timers: Vec<zlink_protocol::generated::CapturedTimer>,
    ) -> BoxFuture<Result<Box<dyn LiveObject>, CallError>>;
}

/// Whether instances of `ty` relocate only at a `relocation_ready().defer()` boundary: an
/// `ApplicationSignaled` SpotWide User Spot (glossary §1 "Spot relocation coordination mode").
pub(crate) fn application_signaled(ty: &dyn ObjectType) -> bool {
    ty.kind() == ObjectTypeKind::UserSpot
        && ty.spot_execution() == SpotExecution::SpotWide
        && ty.coordination() == RelocationCoordination::ApplicationSignaled
}

/// A running instance, erased.
pub trait LiveObject: Send + Sync + 'static {
    /// Accept a one-way message (source-local admission).
    ///
    /// # Errors
    /// `Unavailable` after close.
    fn send(&self, payload: TypedPayload, metadata: Option<Metadata>) -> Result<(), CallError>;
    /// Accept a request; the future is its single terminal reply.
    fn request(&self, payload: TypedPayload) -> BoxFuture<Result<TypedPayload, CallError>>;
    /// Accept a request now (queued before this returns, so it keeps its order with sends
    /// accepted after it) and return the receiver of its terminal reply.
    ///
    /// # Errors
    /// `Unavailable` after close.
    fn request_start(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<ReplyReceiver, CallError>;
    /// The state as bytes per the policy: `Some` with `PreserveWith`, `None` otherwise.
    ///
    /// # Errors
    /// The adapter's error; `InvalidOperation` for `DisableRelocation`.
    fn capture_state(&self) -> Result<Option<Bytes>, CallError>;
    /// Relocation source (wire §9): stop new turns at the next handler boundary and take the
    /// not-yet-run work and the timers (see `ObjectExecutor::capture`). The object stays
    /// paused until [`LiveObject::resume_moved`] or close.
    fn capture_move(
        &self,
        route: zlink_protocol::generated::RouteFence,
        source: zlink_protocol::generated::NodeFence,
    ) -> BoxFuture<Result<crate::object::exec::CapturedQueue, CallError>>;
    /// Undo [`LiveObject::capture_move`]: the captured work and timers go back in place and
    /// turns run again.
    fn resume_moved(&self, captured: crate::object::exec::CapturedQueue);
    /// Give up a [`LiveObject::capture_move`] whose future was dropped before it completed:
    /// turns run again. Default: nothing.
    fn cancel_capture(&self) {}
    /// The object was handed over: from now on its arrivals go to `to` (the follow route),
    /// also from a caller that looked the object up before the seal. Default: nothing.
    fn moved_to(&self, _to: Arc<dyn LiveObject>) {}
    /// `ApplicationSignaled` (glossary §1): prepare (or withdraw) a move that waits for a
    /// `relocation_ready().defer()` boundary. Default: nothing.
    fn prepare_relocation(&self, _on: bool) {}
    /// Take the boundary [`LiveObject::relocation_boundary`] reported: no longer prepared,
    /// still held for the capture. Default: nothing.
    fn take_boundary(&self) {}
    /// Resolves once a deferring job ended normally while prepared; the object is held there.
    /// Default: never.
    fn relocation_boundary(&self) -> BoxFuture<()> {
        Box::pin(std::future::pending())
    }
    /// On the target: queue the `on_relocation_ready_completed` callback ahead of the moved
    /// work. Default: nothing.
    ///
    /// # Errors
    /// `Unavailable` after close.
    fn relocation_ready_completed(&self) -> Result<(), CallError> {
        Ok(())
    }
    /// Stop the instance (waiting requests end with `Unavailable`).
    fn close(&self) -> BoxFuture<()>;
    /// The execution gate its turns take: a SpotWide User Spot's own gate (shared with its
    /// member Actors), the Spot's gate for a member Actor of one, otherwise `None`.
    fn gate(&self) -> Option<SpotGate>;
    /// Change the gate of later turns (an Actor joining or leaving a SpotWide User Spot; call
    /// it at a handler boundary of the Actor).
    fn set_gate(&self, gate: Option<SpotGate>);
    /// Spots: queue the membership notification of Actor `actor` (joined or left).
    ///
    /// # Errors
    /// `Unavailable` after close.
    fn notify_member(&self, joined: bool, actor: String) -> Result<(), CallError>;
    /// Work not finished yet: waiting items, the running turn and yielded continuations.
    fn pending(&self) -> usize;
    /// Wait until the object is at a handler boundary and hold it there until the returned
    /// sender is dropped (see `ObjectExecutor::hold`).
    fn hold(&self) -> BoxFuture<Result<tokio::sync::oneshot::Sender<()>, CallError>>;
    /// Instance Spots: put the first message of a cold activation at the queue head; the
    /// receiver gets its terminal result (an empty payload for a finished send).
    ///
    /// # Errors
    /// `Unavailable` after close.
    fn first_message(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        request: bool,
    ) -> Result<ReplyReceiver, CallError>;
    /// Accept a request now (queued before this returns, as [`LiveObject::request_start`]) whose
    /// terminal goes to `reply`, answered exactly once — also when it is refused. Default:
    /// through [`LiveObject::request_start`] and a task that waits for the result.
    // The reply route is the runtime's own: an implementation outside this crate keeps the
    // default.
    #[allow(private_interfaces)]
    fn request_into(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        reply: crate::object::work::Reply,
    ) {
        match self.request_start(payload, metadata) {
            Ok(rx) => {
                tokio::spawn(async move {
                    let r = rx.await.unwrap_or_else(|_| {
                        Err(CallError::new(
                            crate::call::error::ErrorKind::Unavailable,
                            "object closed",
                        ))
                    });
                    let _ = reply.send(r);
                });
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }
    /// The concrete object, for the runtime's own stand-ins (a moving object's intake).
    /// Default: `None` (an application instance).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

struct Typed<S> {
    stable_type: String,
    kind: ObjectTypeKind,
    factory: Factory<S>,
    handlers: Arc<dyn Fn() -> ObjectHandlers<S> + Send + Sync>,
    relocation: Relocation<S>,
    spot_execution: SpotExecution,
    coordination: RelocationCoordination,
    subscriptions: Vec<Subscription>,
}

struct Live<S> {
    exec: Arc<ObjectExecutor<S>>,
    adapter: Option<Arc<dyn StateAdapter<S>>>,
    disabled: bool,
    /// Set once the object was handed over: later arrivals go there (its follow route).
    moved_to: std::sync::OnceLock<Arc<dyn LiveObject>>,
}

impl<S: Send + 'static> LiveObject for Live<S> {
    fn send(&self, payload: TypedPayload, metadata: Option<Metadata>) -> Result<(), CallError> {
        if let Some(to) = self.moved_to.get() {
            return to.send(payload, metadata);
        }
        self.exec.send_with(payload, metadata)
    }
    fn request(&self, payload: TypedPayload) -> BoxFuture<Result<TypedPayload, CallError>> {
        if let Some(to) = self.moved_to.get() {
            return to.request(payload);
        }
        let exec = Arc::clone(&self.exec);
        Box::pin(async move { exec.request_payload(payload).await })
    }
    fn request_start(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<ReplyReceiver, CallError> {
        if let Some(to) = self.moved_to.get() {
            return to.request_start(payload, metadata);
        }
        self.exec.request_start_with(payload, metadata)
    }
    fn request_into(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        reply: crate::object::work::Reply,
    ) {
        if let Some(to) = self.moved_to.get() {
            return to.request_into(payload, metadata, reply);
        }
        self.exec.request_into(payload, metadata, reply);
    }
    fn moved_to(&self, to: Arc<dyn LiveObject>) {
        let _ = self.moved_to.set(to);
    }
    fn cancel_capture(&self) {
        self.exec.cancel_capture();
    }
    fn capture_state(&self) -> Result<Option<Bytes>, CallError> {
        if self.disabled {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "this type is registered with DisableRelocation",
            ));
        }
        match &self.adapter {
            Some(a) => self.exec.with_state(|s| a.capture(s)).map(Some),
            None => Ok(None),
        }
    }
    fn capture_move(
        &self,
        route: zlink_protocol::generated::RouteFence,
        source: zlink_protocol::generated::NodeFence,
    ) -> BoxFuture<Result<crate::object::exec::CapturedQueue, CallError>> {
        let exec = Arc::clone(&self.exec);
        Box::pin(async move { exec.capture(&route, &source).await })
    }
    fn resume_moved(&self, captured: crate::object::exec::CapturedQueue) {
        self.exec.resume_after_capture(captured);
    }
    fn close(&self) -> BoxFuture<()> {
        let exec = Arc::clone(&self.exec);
        Box::pin(async move { exec.close().await })
    }
    fn gate(&self) -> Option<SpotGate> {
        self.exec.gate()
    }
    fn set_gate(&self, gate: Option<SpotGate>) {
        self.exec.set_gate(gate);
    }
    fn notify_member(&self, joined: bool, actor: String) -> Result<(), CallError> {
        self.exec.notify_member(joined, actor)
    }
    fn first_message(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        request: bool,
    ) -> Result<ReplyReceiver, CallError> {
        self.exec.first_message(payload, metadata, request)
    }
    fn pending(&self) -> usize {
        self.exec.pending()
    }
    fn hold(&self) -> BoxFuture<Result<tokio::sync::oneshot::Sender<()>, CallError>> {
        let exec = Arc::clone(&self.exec);
        Box::pin(async move { exec.hold().await })
    }
    fn prepare_relocation(&self, on: bool) {
        self.exec.prepare_relocation(on);
    }
    fn take_boundary(&self) {
        self.exec.take_boundary();
    }
    fn relocation_boundary(&self) -> BoxFuture<()> {
        let exec = Arc::clone(&self.exec);
        Box::pin(async move { exec.relocation_boundary().await })
    }
    fn relocation_ready_completed(&self) -> Result<(), CallError> {
        self.exec.relocation_ready_completed()
    }
}

impl<S: Send + 'static> Typed<S> {
    /// Whether `relocation_ready().defer()` applies to its instances: an `ApplicationSignaled`
    /// SpotWide User Spot.
    fn application_signaled(&self) -> bool {
        self.kind == ObjectTypeKind::UserSpot
            && self.spot_execution == SpotExecution::SpotWide
            && self.coordination == RelocationCoordination::ApplicationSignaled
    }

    fn start(&self, state: S, home: Binding) -> Box<dyn LiveObject> {
        let (adapter, disabled, gate) = self.live_parts();
        let exec =
            ObjectExecutor::start_gated(home, state, (self.handlers)(), self.exec_mode(), gate);
        exec.set_application_signaled(self.application_signaled());
        Box::new(Live {
            exec: Arc::new(exec),
            adapter,
            disabled,
            moved_to: std::sync::OnceLock::new(),
        })
    }

    /// Start an instance a move brought here, with its carried work and timers.
    fn start_moved(
        &self,
        state: S,
        home: Binding,
        moved: crate::object::exec::MovedWork,
        timers: &[zlink_protocol::generated::CapturedTimer],
    ) -> Result<Box<dyn LiveObject>, CallError> {
        let (adapter, disabled, gate) = self.live_parts();
        let exec = ObjectExecutor::start_moved(
            home,
            state,
            (self.handlers)(),
            self.exec_mode(),
            gate,
            moved,
            timers,
        )?;
        exec.set_application_signaled(self.application_signaled());
        Ok(Box::new(Live {
            exec: Arc::new(exec),
            adapter,
            disabled,
            moved_to: std::sync::OnceLock::new(),
        }))
    }

    /// The adapter, the disabled flag and the gate of a new instance (a SpotWide User Spot and
    /// its member Actors share the Spot's gate).
    #[allow(clippy::type_complexity)]
    fn live_parts(&self) -> (Option<Arc<dyn StateAdapter<S>>>, bool, Option<SpotGate>) {
        let (adapter, disabled) = match &self.relocation {
            Relocation::PreserveWith(a) => (Some(Arc::clone(a)), false),
            Relocation::Recreate => (None, false),
            Relocation::Disable => (None, true),
        };
        let gate = (self.kind == ObjectTypeKind::UserSpot
            && self.spot_execution == SpotExecution::SpotWide)
            .then(new_gate);
        (adapter, disabled, gate)
    }

    fn exec_mode(&self) -> ExecMode {
        match (self.kind, self.spot_execution) {
            (ObjectTypeKind::InstanceSpot, _)
            | (ObjectTypeKind::UserSpot, SpotExecution::SpotWide) => ExecMode::Yielding,
            _ => ExecMode::Serial,
        }
    }
}

impl<S: Send + 'static> ObjectType for Typed<S> {
    fn stable_type(&self) -> &str {
        &self.stable_type
    }
    fn kind(&self) -> ObjectTypeKind {
        self.kind
    }
    fn policy(&self) -> WirePolicy {
        self.relocation.wire()
    }
    fn exec_mode(&self) -> ExecMode {
        Typed::exec_mode(self)
    }
    fn spot_execution(&self) -> SpotExecution {
        self.spot_execution
    }
    fn coordination(&self) -> RelocationCoordination {
        self.coordination
    }
    fn subscriptions(&self) -> &[Subscription] {
        &self.subscriptions
    }
    fn has_send_handler(&self, packet_name: &str) -> bool {
        (self.handlers)().has_send(packet_name)
    }
    fn create(
        &self,
        input: FactoryInput,
        home: Binding,
    ) -> BoxFuture<Result<Box<dyn LiveObject>, CallError>> {
        let fut = (self.factory)(input);
        let this = self.clone_parts();
        Box::pin(async move {
            let state = fut.await?;
            Ok(this.start(state, home))
        })
    }
    fn restore(
        &self,
        input: FactoryInput,
        state: Option<Bytes>,
        home: Binding,
    ) -> BoxFuture<Result<Box<dyn LiveObject>, CallError>> {
        match (&self.relocation, state) {
            (Relocation::PreserveWith(a), Some(bytes)) => {
                let restored = a.restore(&bytes);
                let this = self.clone_parts();
                Box::pin(async move { Ok(this.start(restored?, home)) })
            }
            (Relocation::Recreate, None) => self.create(input, home),
            (Relocation::Disable, _) => Box::pin(async {
                Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    "this type is registered with DisableRelocation",
                ))
            }),
            _ => Box::pin(async {
                Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    "captured state does not match the relocation policy",
                ))
            }),
        }
    }
    fn restore_moved(
        &self,
        input: FactoryInput,
        state: Option<Bytes>,
        home: Binding,
        moved: crate::object::exec::MovedWork,
        timers: Vec<zlink_protocol::generated::CapturedTimer>,
    ) -> BoxFuture<Result<Box<dyn LiveObject>, CallError>> {
        let this = self.clone_parts();
        match (&self.relocation, state) {
            (Relocation::PreserveWith(a), Some(bytes)) => {
                let restored = a.restore(&bytes);
                Box::pin(async move { this.start_moved(restored?, home, moved, &timers) })
            }
            (Relocation::Recreate, None) => {
                let fut = (self.factory)(input);
                Box::pin(async move {
                    let state = fut.await?;
                    this.start_moved(state, home, moved, &timers)
                })
            }
            (Relocation::Disable, _) => Box::pin(async {
                Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    "this type is registered with DisableRelocation",
                ))
            }),
            _ => Box::pin(async {
                Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    "the moved state does not match the relocation policy",
                ))
            }),
        }
    }
}

impl<S: Send + 'static> Typed<S> {
    /// A cheap copy of the parts a started instance needs (everything is shared).
    fn clone_parts(&self) -> Arc<Self> {
        Arc::new(Self {
            stable_type: self.stable_type.clone(),
            kind: self.kind,
            factory: Arc::clone(&self.factory),
            handlers: Arc::clone(&self.handlers),
            relocation: match &self.relocation {
                Relocation::Disable => Relocation::Disable,
                Relocation::Recreate => Relocation::Recreate,
                Relocation::PreserveWith(a) => Relocation::PreserveWith(Arc::clone(a)),
            },
            spot_execution: self.spot_execution,
            coordination: self.coordination,
            subscriptions: self.subscriptions.clone(),
        })
    }
}

/// The builder of one registration; see [`Registry::actor`] and friends.
pub struct TypeBuilder<'r, S> {
    registry: &'r mut Registry,
    typed: Option<Typed<S>>,
}

impl<S: Send + 'static> TypeBuilder<'_, S> {
    /// The relocation policy (default [`Relocation::Recreate`]).
    #[must_use]
    pub fn relocation(mut self, policy: Relocation<S>) -> Self {
        if let Some(t) = &mut self.typed {
            t.relocation = policy;
        }
        self
    }

    /// Shorthand for `relocation(Relocation::PreserveWith(adapter))`.
    #[must_use]
    pub fn preserve_state_with(self, adapter: impl StateAdapter<S>) -> Self {
        self.relocation(Relocation::PreserveWith(Arc::new(adapter)))
    }

    /// User Spots: the execution mode (default SpotWide).
    #[must_use]
    pub fn execution(mut self, mode: SpotExecution) -> Self {
        if let Some(t) = &mut self.typed {
            if t.kind == ObjectTypeKind::UserSpot {
                t.spot_execution = mode;
            } else {
                self.registry.errors.push(RegistryError::NotApplicable(
                    t.stable_type.clone(),
                    "an execution mode applies to User Spots only",
                ));
            }
        }
        self
    }

    /// User Spots: the relocation coordination mode (default FrameworkManaged).
    #[must_use]
    pub fn coordination(mut self, mode: RelocationCoordination) -> Self {
        if let Some(t) = &mut self.typed {
            if t.kind == ObjectTypeKind::UserSpot {
                t.coordination = mode;
            } else {
                self.registry.errors.push(RegistryError::NotApplicable(
                    t.stable_type.clone(),
                    "a relocation coordination mode applies to User Spots only",
                ));
            }
        }
        self
    }

    /// Spots: subscribe to Logical Multicast messages `M` published on (`channel`, `topic`):
    /// each is delivered, one-way, to every live Spot of this type on a receiving node, to the
    /// send handler of `M`'s packet name (glossary §4 "Subscription"). Checked at start: the
    /// node must be a member of `channel` and the type must have that send handler.
    #[must_use]
    pub fn subscribe<M: crate::mesh::JsonMessage>(mut self, channel: &str, topic: &str) -> Self {
        if let Some(t) = &mut self.typed {
            if t.kind == ObjectTypeKind::Actor {
                self.registry.errors.push(RegistryError::NotApplicable(
                    t.stable_type.clone(),
                    "Logical Multicast subscriptions belong to Spots",
                ));
            } else if let Some(why) = topic_problem(topic) {
                self.registry.errors.push(RegistryError::BadTopic(
                    t.stable_type.clone(),
                    topic.to_owned(),
                    why,
                ));
            } else {
                let sub = Subscription {
                    channel: channel.to_owned(),
                    topic: topic.to_owned(),
                    packet_name: M::PACKET_NAME.to_owned(),
                };
                if t.subscriptions.contains(&sub) {
                    self.registry
                        .errors
                        .push(RegistryError::DuplicateSubscription(
                            t.stable_type.clone(),
                            format!("({channel}, {topic}, {})", M::PACKET_NAME),
                        ));
                } else {
                    t.subscriptions.push(sub);
                }
            }
        }
        self
    }

    /// Finish the registration.
    pub fn register(mut self) {
        if let Some(t) = self.typed.take() {
            let name = t.stable_type.clone();
            match self.registry.types.entry(name) {
                std::collections::btree_map::Entry::Occupied(o) => {
                    let name = o.key().clone();
                    self.registry.errors.push(RegistryError::Duplicate(name));
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(Arc::new(t));
                }
            }
        }
    }
}

/// Every registered type of a runtime, frozen by [`Registry::build`]. Cloning is cheap (the
/// types are shared): a host that rejoins as a new lifecycle starts its new runtime from a
/// clone.
#[derive(Default, Clone)]
pub struct Registry {
    types: BTreeMap<String, Arc<dyn ObjectType>>,
    errors: Vec<RegistryError>,
    /// The application's client STREAM handlers, served by the host's StreamNode when
    /// `stream.listen` is set.
    stream: crate::session::SessionHandlers,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("types", &self.types.keys().collect::<Vec<_>>())
            .field("errors", &self.errors)
            .field("stream", &self.stream)
            .finish()
    }
}

/// The four registration methods differ only by the kind they register: one definition makes
/// all of them (each a call of `Registry::typed` with its kind).
macro_rules! register_by_kind {
    ($($(#[$doc:meta])* $name:ident => $kind:ident;)+) => {
        $(
            $(#[$doc])*
            pub fn $name<S, F, Fut, H>(
                &mut self,
                stable_type: &str,
                factory: F,
                handlers: H,
            ) -> TypeBuilder<'_, S>
            where
                S: Send + 'static,
                F: Fn(FactoryInput) -> Fut + Send + Sync + 'static,
                Fut: Future<Output = Result<S, CallError>> + Send + 'static,
                H: Fn() -> ObjectHandlers<S> + Send + Sync + 'static,
            {
                self.typed(ObjectTypeKind::$kind, stable_type, factory, handlers)
            }
        )+
    };
}

impl Registry {
    /// Nothing registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// The application's client STREAM handlers, to register more
    /// ([`SessionHandlers::on_send`](crate::session::SessionHandlers::on_send) /
    /// [`on_request`](crate::session::SessionHandlers::on_request)).
    pub fn stream_handlers_mut(&mut self) -> &mut crate::session::SessionHandlers {
        &mut self.stream
    }

    /// The application's client STREAM handlers.
    pub fn stream_handlers(&self) -> &crate::session::SessionHandlers {
        &self.stream
    }

    register_by_kind! {
        /// Register an Actor type: `factory` makes its state, `handlers` its typed handlers.
        actor => Actor;
        /// Register a User Spot type.
        user_spot => UserSpot;
        /// Register the Entry Spot type of this node (at most one per node lifecycle is
        /// created).
        entry_spot => EntrySpot;
        /// Register an Instance Spot type (activated by its first call with Instance intent,
        /// wire §8).
        instance_spot => InstanceSpot;
    }

    fn typed<S, F, Fut, H>(
        &mut self,
        kind: ObjectTypeKind,
        stable_type: &str,
        factory: F,
        handlers: H,
    ) -> TypeBuilder<'_, S>
    where
        S: Send + 'static,
        F: Fn(FactoryInput) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<S, CallError>> + Send + 'static,
        H: Fn() -> ObjectHandlers<S> + Send + Sync + 'static,
    {
        let typed = match zlink_protocol::ids::validate_stable_type(stable_type) {
            Ok(()) => Some(Typed {
                stable_type: stable_type.to_owned(),
                kind,
                factory: Arc::new(move |input| Box::pin(factory(input))),
                handlers: Arc::new(handlers),
                relocation: Relocation::Recreate,
                spot_execution: SpotExecution::SpotWide,
                coordination: RelocationCoordination::FrameworkManaged,
                subscriptions: Vec::new(),
            }),
            Err(e) => {
                self.errors.push(RegistryError::InvalidStableType(
                    stable_type.to_owned(),
                    e.to_string(),
                ));
                None
            }
        };
        TypeBuilder {
            registry: self,
            typed,
        }
    }

    /// Whether an Entry Spot type is registered (a node creates its lifecycle's Entry Spot only
    /// then: `MeshNodeConfig::entry_spot_prefix` needs one).
    pub fn has_entry_spot(&self) -> bool {
        self.types
            .values()
            .any(|t| t.kind() == ObjectTypeKind::EntrySpot)
    }

    /// What this registry lets a node host, for its descriptor
    /// (`MeshNodeConfig::object_capabilities`): Actors and User / Instance Spots by stable type
    /// with their relocation policy; capacity unlimited (`0`). Entry Spots are never placed.
    pub fn capabilities(&self) -> Vec<zlink_protocol::generated::ObjectCapability> {
        use zlink_protocol::generated::{ObjectCapability, ObjectKind};
        self.types
            .values()
            .filter_map(|t| {
                let kind = match t.kind() {
                    ObjectTypeKind::Actor => ObjectKind::Actor,
                    ObjectTypeKind::UserSpot | ObjectTypeKind::InstanceSpot => ObjectKind::Spot,
                    ObjectTypeKind::EntrySpot => return None,
                };
                Some(ObjectCapability {
                    object_kind: kind,
                    stable_type: t.stable_type().to_owned(),
                    relocation_policy: t.policy(),
                    capacity_limit: 0,
                })
            })
            .collect()
    }

    /// Freeze: the first registration error, or the type table.
    ///
    /// # Errors
    /// The first [`RegistryError`].
    pub fn build(self) -> Result<BTreeMap<String, Arc<dyn ObjectType>>, RegistryError> {
        match self.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(self.types),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::mesh::JsonMessage;
    use crate::mesh::handler::{decode_json, encode_json};
    use serde::Deserialize;

    #[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
    struct Player {
        id: String,
        coins: u64,
    }

    #[derive(Debug, Serialize, Deserialize)]
    struct Earn {
        coins: u64,
    }
    impl JsonMessage for Earn {
        const PACKET_NAME: &'static str = "player.Earn";
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Balance {
        coins: u64,
    }
    impl JsonMessage for Balance {
        const PACKET_NAME: &'static str = "player.Balance";
    }

    fn player_handlers() -> ObjectHandlers<Player> {
        let mut h: ObjectHandlers<Player> = ObjectHandlers::new();
        h.on_request(|ctx, e: Earn| async move {
            let mut p = ctx.state();
            p.coins += e.coins;
            Ok::<_, CallError>(Balance { coins: p.coins })
        });
        h
    }

    async fn factory(input: FactoryInput) -> Result<Player, CallError> {
        Ok(Player {
            id: input.id,
            coins: 0,
        })
    }

    fn input(id: &str) -> FactoryInput {
        FactoryInput {
            id: id.into(),
            stable_type: "player".into(),
            object_generation: 1,
            init: None,
        }
    }

    async fn earn(obj: &dyn LiveObject, coins: u64) -> u64 {
        let reply = obj
            .request(encode_json(&Earn { coins }).unwrap())
            .await
            .unwrap();
        decode_json::<Balance>(&reply).unwrap().coins
    }

    #[test]
    fn stable_types_are_explicit_unique_and_valid() {
        let mut r = Registry::new();
        r.actor("player", factory, player_handlers).register();
        r.actor("Player", factory, player_handlers).register();
        assert_eq!(r.types.len(), 2, "case-sensitive");
        r.actor("player", factory, player_handlers).register();
        assert_eq!(
            r.build().err().unwrap(),
            RegistryError::Duplicate("player".into())
        );
        let mut r = Registry::new();
        r.actor("", factory, player_handlers).register();
        assert!(matches!(
            r.build().err().unwrap(),
            RegistryError::InvalidStableType(..)
        ));
        let mut r = Registry::new();
        r.actor(&"x".repeat(256), factory, player_handlers)
            .register();
        assert!(r.build().is_err());
        let mut r = Registry::new();
        r.actor("p", factory, player_handlers)
            .execution(SpotExecution::PerActor)
            .register();
        assert!(matches!(
            r.build().err().unwrap(),
            RegistryError::NotApplicable(..)
        ));
    }

    #[test]
    fn kinds_and_modes_decide_the_execution_mode() {
        let mut r = Registry::new();
        r.actor("a", factory, player_handlers).register();
        r.user_spot("wide", factory, player_handlers).register();
        r.user_spot("per", factory, player_handlers)
            .execution(SpotExecution::PerActor)
            .coordination(RelocationCoordination::ApplicationSignaled)
            .register();
        r.instance_spot("inst", factory, player_handlers).register();
        r.entry_spot("entry", factory, player_handlers).register();
        let caps = r.capabilities();
        assert_eq!(
            caps.iter()
                .map(|c| c.stable_type.as_str())
                .collect::<Vec<_>>(),
            vec!["a", "inst", "per", "wide"],
            "Entry Spots are not placeable"
        );
        let t = r.build().unwrap();
        let mode = |n: &str| t[n].exec_mode();
        assert_eq!(mode("a"), ExecMode::Serial);
        assert_eq!(mode("wide"), ExecMode::Yielding);
        assert_eq!(mode("per"), ExecMode::Serial);
        assert_eq!(mode("inst"), ExecMode::Yielding);
        assert_eq!(mode("entry"), ExecMode::Serial);
        assert_eq!(
            t["per"].coordination(),
            RelocationCoordination::ApplicationSignaled
        );
        assert_eq!(t["wide"].spot_execution(), SpotExecution::SpotWide);
        assert_eq!(t["a"].kind(), ObjectTypeKind::Actor);
    }

    #[tokio::test]
    async fn preserve_state_captures_bytes_and_restores_an_equal_instance() {
        let mut r = Registry::new();
        r.actor("player", factory, player_handlers)
            .preserve_state_with(JsonState)
            .register();
        let t = r.build().unwrap();
        let ty = &t["player"];
        assert_eq!(ty.policy(), WirePolicy::PreserveState);
        let obj = ty
            .create(input("p-1"), Binding::standalone())
            .await
            .unwrap();
        assert_eq!(earn(obj.as_ref(), 5).await, 5);
        let bytes = obj.capture_state().unwrap().unwrap();
        obj.close().await;
        let back = ty
            .restore(input("p-1"), Some(bytes), Binding::standalone())
            .await
            .unwrap();
        assert_eq!(earn(back.as_ref(), 1).await, 6, "state survived");
        // Bytes that do not decode are a typed failure, not a panic.
        let err = ty
            .restore(
                input("p-1"),
                Some(Bytes::from_static(b"{not json")),
                Binding::standalone(),
            )
            .await
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::HandlerFailed);
        back.close().await;
    }

    #[tokio::test]
    async fn recreate_starts_fresh_and_disable_refuses_to_move() {
        let mut r = Registry::new();
        r.actor("re", factory, player_handlers).register();
        r.actor("fixed", factory, player_handlers)
            .relocation(Relocation::Disable)
            .register();
        let t = r.build().unwrap();
        let re = t["re"]
            .create(input("p-2"), Binding::standalone())
            .await
            .unwrap();
        earn(re.as_ref(), 9).await;
        assert_eq!(re.capture_state().unwrap(), None);
        let fresh = t["re"]
            .restore(input("p-2"), None, Binding::standalone())
            .await
            .unwrap();
        assert_eq!(
            earn(fresh.as_ref(), 1).await,
            1,
            "recreated from the factory"
        );
        let fixed = t["fixed"]
            .create(input("p-3"), Binding::standalone())
            .await
            .unwrap();
        assert_eq!(
            fixed.capture_state().unwrap_err().kind(),
            ErrorKind::InvalidOperation
        );
        assert!(
            t["fixed"]
                .restore(input("p-3"), None, Binding::standalone())
                .await
                .is_err()
        );
        for o in [re, fresh, fixed] {
            o.close().await;
        }
    }
}
