//! Instance Spot cold activation with a durable activation inbox (issue "Instance Spot cold
//! activation"; wire §8; glossary §2 "Instance intent", "Cold activation", "Activation
//! envelope", "Activation barrier", "Durable activation inbox", "Replay cursor", "Activation
//! recovery pointer", "Recovery receipt").
//!
//! The **target** owns storage and reservation. For a call with Instance intent to a Missing
//! Spot, the source picks a target from descriptors and sends command 39 with route kind 2
//! (carrying the first message). The target then:
//!
//! 1. validates kind 2 against its own identity and the operation (a mismatch is a protocol
//!    error, before any reservation);
//! 2. builds the `instance-activation-recovery-v1` envelope (ZLIA) and stores it in the
//!    Relocation Store — the recovery **root**;
//! 3. reserves the authority with the root's receipt (reference, SHA-256, size) linked in the
//!    same store request;
//! 4. runs the factory, with the queue open but closed for handlers (the activation barrier);
//! 5. commits the durable inbox's first record (`<root>/inbox/1`);
//! 6. commits Ready keeping the recovery pointer and replay cursor 0 in the authority's
//!    framework payload;
//! 7. restores the first message at the queue head and opens the barrier;
//! 8. records the first handler's terminal completion durably (`<root>/inbox/1/done`), answers
//!    the caller, advances the replay cursor to 1 and removes the pointer with Preserve CASes.
//!
//! A target that loses the reservation race (another activation of the ID is under way or
//! done) waits for the winner's Ready and delivers the message there like any Spot call (the
//! "kind 1 once Ready" path), so concurrent first calls produce one activation and every
//! caller one result.
//!
//! **Recovery** resumes an unfinished first operation only on the node lifecycle that started
//! it: every activation is registered here with a local barrier; the background scan takes the
//! barrier of an activation whose task is gone and resumes it from the store's state. A new
//! process lifecycle can never match an earlier one's authority, so its startup scan finds
//! nothing to resume: a dead target's activations end through fenced cleanup instead.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    InstanceActivationRecoveryV1, InstanceRoute, InstanceRouteMissing, NodeFence, OperationKind,
    RequestHeader, TerminalStatus,
};
use zlink_protocol::metadata::Metadata;
use zlink_store::types::{
    AuthorityKey, AuthorityRead, AuthoritySnapshot, AuthorityState, ContentReceipt,
    ObjectKind as StoreKind,
};

use super::remote::{InstanceCall, RemoteMessage};
use super::{
    ACTIVATION_SCAN_BATCH, CREATE_TIMEOUT, GiveBack, Inner, LiveEntry, ObjectRuntime, ObjectStore,
    Resolution, UnavailableReason, now_unix_ms, store_error,
};
use crate::call::error::{CallError, ErrorKind};
use crate::mesh::handler::{JsonMessage, decode_json, encode_json};
use crate::object::exec::Binding;
use crate::object::registry::{FactoryInput, LiveObject, ObjectTypeKind};

/// How long the recovery root and inbox records are kept in the Relocation Store (they are
/// deleted as soon as the first operation is done; this bounds what a crash leaves behind).
pub const ACTIVATION_RETENTION: Duration = Duration::from_secs(600);

/// A fault to inject in the activation path (tests and chaos drills): what happens right after
/// the Ready commit — the inbox first record is durable, the first handler has not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationFault {
    /// The activation task ends there (as if it died): the recovery scan must finish it.
    AbortTask,
    /// The process exits there with status 86 (process-death tests).
    ExitProcess,
}

/// How long a first call that lost its activation race waits for a connection to the winner's
/// node (one this node has not discovered yet, e.g. a host that just started; discovery polls
/// every second by default) before it fails `Unavailable`.
const OWNER_WAIT: Duration = Duration::from_secs(5);

/// Rounds of reserve-or-deliver one first call may take (see `activate`).
const ACTIVATION_ROUNDS: usize = 3;

/// How `begin` ended.
enum Begun {
    /// Reserved and Ready: the first message is to be run.
    Started(Arc<Activation>, tokio::sync::OwnedMutexGuard<()>),
    /// The call was answered (a failure).
    Answered,
    /// Another activation holds the ID: deliver to it once Ready.
    Lost(ReplySink),
}

/// Where the first operation's single terminal result goes.
pub(super) enum ReplySink {
    /// A caller on another node: the reply travels on the request's reply route.
    Remote {
        source: NodeFence,
        header: RequestHeader,
    },
    /// A caller in this process.
    Local(oneshot::Sender<Result<TypedPayload, CallError>>),
    /// A one-way send: nobody to answer (a failure is a counted drop event).
    None,
}

/// The recovery pointer kept in a Ready Instance Spot's framework payload until its first
/// operation is done (glossary §2 "Activation recovery pointer").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pointer {
    root: String,
    sha256: String,
    size: u64,
    cursor: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Framework {
    v: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recovery: Option<Pointer>,
}

/// The durable record of the first handler's terminal completion.
#[derive(Debug, Serialize, Deserialize)]
struct Completion {
    status: TerminalStatus,
    detail: String,
    reply: Option<TypedPayload>,
}

impl Completion {
    fn of(result: &Result<TypedPayload, CallError>) -> Self {
        match result {
            Ok(p) => Self {
                status: TerminalStatus::Ok,
                detail: String::new(),
                reply: Some(p.clone()),
            },
            Err(e) => Self {
                status: e.status(),
                detail: e.detail().to_owned(),
                reply: None,
            },
        }
    }

    fn into_result(self) -> Result<TypedPayload, CallError> {
        match CallError::from_status(self.status, self.detail) {
            None => Ok(self.reply.unwrap_or_default()),
            Some(e) => Err(e),
        }
    }
}

/// The durable inbox's first record (the envelope itself is the root).
#[derive(Debug, Serialize, Deserialize)]
struct InboxRecord {
    seq: u64,
    root: String,
    sha256: String,
}

fn framework_bytes(recovery: Option<Pointer>) -> Bytes {
    Bytes::from(serde_json::to_vec(&Framework { v: 1, recovery }).unwrap_or_default())
}

/// What the store says of an unfinished activation's record, as far as recovery cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordSeen {
    /// The store could not be read (retried on the next pass).
    Unreadable,
    /// No record.
    Missing,
    /// A record, with its state, whether it is this activation's incarnation on this node
    /// lifecycle, and whether its recovery pointer still names this activation's envelope.
    Found {
        state: AuthorityState,
        ours: bool,
        pointer_is_ours: bool,
    },
}

/// The next step of the recovery scan for one unfinished activation whose task is gone (wire
/// §8: recovery happens on the node lifecycle that started it, never elsewhere). The table it
/// implements is in `docs/architecture.md`, "Instance Spots".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecoveryStep {
    /// The node is fenced: nothing runs here any more; the caller gets `Unavailable` once.
    FailFenced,
    /// The handler ran but its completion is not durable yet: record it, then finish.
    RecordCompletion,
    /// Ready under this lifecycle with the pointer in place: finish the first operation
    /// (answered from the durable completion, or run once if it never was).
    FinishFirst,
    /// Ready but the pointer is gone: the first operation finished; forget the activation.
    Forget,
    /// Still Creating under this lifecycle: give the reservation back under its fence and fail
    /// once.
    GiveBackAndFail,
    /// The record names another incarnation or owner: fail once, touch nothing.
    FailChanged,
    /// The record is gone: fail once.
    FailGone,
    /// The store cannot tell now: try again on the next pass.
    Retry,
}

impl RecoveryStep {
    /// Decide from what the node knows (`fenced`, `completion_known`) and, when the decision
    /// needs it, what the store says (`seen`; `None` when not read).
    fn decide(fenced: bool, completion_known: bool, seen: Option<RecordSeen>) -> Self {
        if fenced {
            return Self::FailFenced;
        }
        if completion_known {
            return Self::RecordCompletion;
        }
        match seen {
            None | Some(RecordSeen::Unreadable) => Self::Retry,
            Some(RecordSeen::Missing) => Self::FailGone,
            Some(RecordSeen::Found {
                state,
                ours,
                pointer_is_ours,
            }) => match (state, ours) {
                (AuthorityState::Ready, true) if pointer_is_ours => Self::FinishFirst,
                (AuthorityState::Ready, true) => Self::Forget,
                (AuthorityState::Creating, true) => Self::GiveBackAndFail,
                (AuthorityState::Ready | AuthorityState::Creating, false)
                | (AuthorityState::Closing | AuthorityState::Relocating, _) => Self::FailChanged,
            },
        }
    }

    /// Whether the step needs the store's record.
    fn needs_record(fenced: bool, completion_known: bool) -> bool {
        !fenced && !completion_known
    }
}

fn pointer_of(payload: &[u8]) -> Option<Pointer> {
    serde_json::from_slice::<Framework>(payload)
        .ok()
        .and_then(|f| f.recovery)
}

fn inbox_ref(root: &str) -> String {
    format!("{root}/inbox/1")
}

fn done_ref(root: &str) -> String {
    format!("{root}/inbox/1/done")
}

fn hex(bytes: &[u8]) -> String {
    zlink_protocol::codec::hex::encode(bytes)
}

/// One cold activation this node lifecycle started, until its first operation is done.
pub(super) struct Activation {
    key: AuthorityKey,
    envelope: InstanceActivationRecoveryV1,
    receipt: ContentReceipt,
    object_generation: std::sync::Mutex<u64>,
    sink: std::sync::Mutex<Option<ReplySink>>,
    /// The local barrier: held by the task working on it; the scan resumes only when it is
    /// free (the task is gone).
    barrier: Arc<tokio::sync::Mutex<()>>,
    /// A handler result whose durable record failed (the scan records it; never reruns).
    unrecorded: std::sync::Mutex<Option<Result<TypedPayload, CallError>>>,
    /// The first message was handed to the queue (it must never be handed over again).
    dispatched: std::sync::atomic::AtomicBool,
}

impl Activation {
    fn take_sink(&self) -> Option<ReplySink> {
        self.sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn generation(&self) -> u64 {
        *self
            .object_generation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What the first call with Instance intent carries to the target.
pub(super) struct FirstCall {
    pub(super) source: NodeFence,
    pub(super) source_spot_id: String,
    pub(super) request: Option<RequestHeader>,
    pub(super) operation_id: zlink_protocol::generated::OperationId,
    pub(super) deadline_unix_ms: u64,
    pub(super) route: InstanceRouteMissing,
    pub(super) metadata: Option<Metadata>,
    pub(super) payload: TypedPayload,
}

impl<S: ObjectStore> Inner<S> {
    /// Deliver the single terminal result of a first operation.
    fn answer(&self, sink: Option<ReplySink>, result: Result<TypedPayload, CallError>) {
        match sink {
            Some(ReplySink::Remote { source, header }) => {
                self.mesh.reply_to(&source, &header, result);
            }
            Some(ReplySink::Local(tx)) => {
                let _ = tx.send(result);
            }
            Some(ReplySink::None) => {
                if let Err(e) = result {
                    self.stats.activation_drops.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "a one-way first message of a cold activation was dropped");
                }
            }
            None => {}
        }
    }

    /// Serve command 39 from another node.
    pub(super) fn instance_delivery(self: &Arc<Self>, d: InstanceCall) {
        let sink = match &d.request {
            Some(header) => ReplySink::Remote {
                source: (*d.source).clone(),
                header: header.clone(),
            },
            None => ReplySink::None,
        };
        match d.route {
            InstanceRoute::Missing(route) => {
                let call = FirstCall {
                    source: (*d.source).clone(),
                    source_spot_id: d.source_spot_id,
                    request: d.request,
                    operation_id: d.operation_id,
                    deadline_unix_ms: d.deadline_unix_ms,
                    route,
                    metadata: d.metadata,
                    payload: d.payload,
                };
                let this = Arc::clone(self);
                tokio::spawn(async move { this.activate(call, sink).await });
            }
            InstanceRoute::Ready(r) => {
                // Kind 1: an ordinary Spot delivery on an existing Ready authority.
                self.deliver(RemoteMessage {
                    source: d.source,
                    route: r.route,
                    request: d.request,
                    metadata: d.metadata,
                    payload: d.payload,
                    session: None,
                });
            }
        }
    }

    /// Wire §8 "Command 39 route kind": kind 2 must name this node's mesh, RID and lifecycle,
    /// a descriptor version it has published, the operation's own deadline, and an Instance
    /// Spot type registered here.
    fn check_kind2(&self, call: &FirstCall) -> Result<(), CallError> {
        let me = self.mesh.descriptor();
        let r = &call.route;
        let bad = |why: String| CallError::new(ErrorKind::ProtocolError, why);
        if r.target_mesh != me.mesh_name || r.target_node != me.node {
            return Err(bad(format!(
                "the kind-2 route names {}/{}#{}, not this node lifecycle",
                r.target_mesh, r.target_node.rid, r.target_node.lifecycle_generation
            )));
        }
        if r.descriptor_version > me.descriptor_revision {
            return Err(bad(format!(
                "the kind-2 route names descriptor version {} that this node never published",
                r.descriptor_version
            )));
        }
        if r.deadline_unix_ms != call.deadline_unix_ms {
            return Err(bad(
                "the kind-2 route's deadline differs from the operation's".to_owned(),
            ));
        }
        if r.spot_id.is_empty() {
            return Err(bad("the kind-2 route names no Spot".to_owned()));
        }
        self.instance_type(&r.stable_type).map(|_| ())
    }

    /// The registered Instance Spot type `stable_type` (`Rejected` otherwise: this node cannot
    /// activate it).
    fn instance_type(
        &self,
        stable_type: &str,
    ) -> Result<Arc<dyn crate::object::registry::ObjectType>, CallError> {
        match self.types.get(stable_type) {
            Some(t) if t.kind() == ObjectTypeKind::InstanceSpot => Ok(Arc::clone(t)),
            _ => Err(CallError::new(
                ErrorKind::Rejected,
                format!("this node has no Instance Spot type {stable_type:?}"),
            )),
        }
    }

    /// The target side of a cold activation (see the module docs). Answers `sink` exactly
    /// once: here, or through the recovery scan if this task ends early.
    pub(super) async fn activate(self: Arc<Self>, call: FirstCall, sink: ReplySink) {
        if let Err(e) = self.check_kind2(&call) {
            if e.kind() == ErrorKind::ProtocolError {
                self.stats
                    .activation_route_mismatches
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.answer(Some(sink), Err(e));
            return;
        }
        if call.deadline_unix_ms <= now_unix_ms() {
            self.answer(
                Some(sink),
                Err(CallError::new(
                    ErrorKind::DeadlineExceeded,
                    "the operation's deadline passed before the activation",
                )),
            );
            return;
        }
        let key = match AuthorityKey::new(StoreKind::Spot, &call.route.spot_id) {
            Ok(k) => k,
            Err(e) => {
                self.answer(
                    Some(sink),
                    Err(CallError::new(ErrorKind::InvalidOperation, e.to_string())),
                );
                return;
            }
        };
        let mut sink = sink;
        // A few rounds: a race lost to an activation that then failed leaves the ID Missing
        // again, and the next round may activate it here.
        for _ in 0..ACTIVATION_ROUNDS {
            // One activation of an ID at a time on this node.
            let outcome = {
                let _one_at_a_time = self.creating.lock_all(&[&key]).await;
                self.begin(&key, &call, sink).await
            };
            match outcome {
                Begun::Started(act, barrier) => {
                    self.finish_first(&act, barrier).await;
                    return;
                }
                Begun::Answered => return,
                // Delivered to the winner outside the per-ID gate, so later first calls do not
                // queue behind this one.
                Begun::Lost(s) => match self.forward_when_ready(&call, s).await {
                    None => return,
                    Some(back) => sink = back,
                },
            }
        }
        self.answer(
            Some(sink),
            Err(CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "{} kept failing to activate ({ACTIVATION_ROUNDS} rounds)",
                    call.route.spot_id
                ),
            )),
        );
    }

    /// Steps 2–6 (and the fault point); `None` when the call was answered already (failure,
    /// or delivered to another activation's Spot).
    async fn begin(
        self: &Arc<Self>,
        key: &AuthorityKey,
        call: &FirstCall,
        sink: ReplySink,
    ) -> Begun {
        let r = &call.route;
        // A failed creation of this ID on this node whose abort is not confirmed blocks new
        // ones until it is (wire §7).
        if let Err(e) = self.failed_barrier_open(key).await {
            self.answer(Some(sink), Err(e));
            return Begun::Answered;
        }
        // Known Ready or in creation: no root to store, deliver to it.
        if !matches!(self.resolver.resolve_fresh(key).await, Resolution::Missing) {
            self.stats
                .activation_forwards
                .fetch_add(1, Ordering::Relaxed);
            return Begun::Lost(sink);
        }
        let envelope = InstanceActivationRecoveryV1 {
            operation_kind: if call.request.is_some() {
                OperationKind::Request
            } else {
                OperationKind::Send
            },
            operation_id: call.operation_id.clone(),
            reply_route_id: call.request.as_ref().map(|h| h.reply_route_id),
            correlation_id: call.request.as_ref().map(|h| h.correlation_id.clone()),
            deadline_unix_ms: call.deadline_unix_ms,
            source: call.source.clone(),
            source_spot_id: call.source_spot_id.clone(),
            target_mesh: r.target_mesh.clone(),
            target_node: r.target_node.clone(),
            spot_id: r.spot_id.clone(),
            stable_type: r.stable_type.clone(),
            descriptor_version: r.descriptor_version,
            metadata_present: call.metadata.is_some(),
            metadata: call.metadata.as_ref().map(|m| Bytes::from(m.encode())),
            packet_name: call.payload.packet_name.as_str().to_owned(),
            content_type: call.payload.content_type.as_str().to_owned(),
            payload: call.payload.payload.clone(),
        };
        let bytes = match envelope.encode() {
            Ok(b) => b,
            Err(e) => {
                self.answer(
                    Some(sink),
                    Err(CallError::new(ErrorKind::InvalidOperation, e.to_string())),
                );
                return Begun::Answered;
            }
        };
        let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(digest.as_ref());
        let reference = match self.new_reservation_id() {
            Ok(id) => format!("activation/{id}"),
            Err(e) => {
                self.answer(Some(sink), Err(e));
                return Begun::Answered;
            }
        };
        let receipt = ContentReceipt {
            reference: reference.clone(),
            sha256,
            size: bytes.len() as u64,
        };
        if let Err(e) = self
            .store
            .put(&reference, Bytes::from(bytes), ACTIVATION_RETENTION)
            .await
        {
            self.answer(Some(sink), Err(store_error(e)));
            return Begun::Answered;
        }
        let owner = match self.owner() {
            Ok(o) => o,
            Err(e) => {
                let _ = self.store.delete(&reference).await;
                self.answer(Some(sink), Err(e));
                return Begun::Answered;
            }
        };
        let me = self.mesh.fence();
        let reservation = match self
            .reserve(
                key,
                StoreKind::Spot,
                &r.stable_type,
                &me,
                owner,
                Some(receipt.clone()),
            )
            .await
        {
            Ok(res) => res,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                // Another activation of this ID is under way or done: deliver to it once it
                // is Ready (kind 1), never a second activation.
                let _ = self.store.delete(&reference).await;
                self.stats
                    .activation_forwards
                    .fetch_add(1, Ordering::Relaxed);
                return Begun::Lost(sink);
            }
            Err(e) => {
                let _ = self.store.delete(&reference).await;
                self.answer(Some(sink), Err(e));
                return Begun::Answered;
            }
        };
        let act = Arc::new(Activation {
            key: key.clone(),
            envelope,
            receipt: receipt.clone(),
            object_generation: std::sync::Mutex::new(reservation.object_generation),
            sink: std::sync::Mutex::new(Some(sink)),
            barrier: Arc::new(tokio::sync::Mutex::new(())),
            unrecorded: std::sync::Mutex::new(None),
            dispatched: std::sync::atomic::AtomicBool::new(false),
        });
        let Ok(barrier) = Arc::clone(&act.barrier).try_lock_owned() else {
            return Begun::Answered;
        };
        self.activations
            .lock()
            .insert(key.clone(), Arc::clone(&act));
        self.stats.activations.fetch_add(1, Ordering::Relaxed);
        match self.prepare(&act, reservation).await {
            Ok(()) => {}
            Err(e) => {
                self.fail(&act, e).await;
                return Begun::Answered;
            }
        }
        match self.fault() {
            Some(ActivationFault::AbortTask) => {
                tracing::warn!(
                    key = key.as_str(),
                    "fault injected: the activation task ends after the Ready commit"
                );
                return Begun::Answered;
            }
            Some(ActivationFault::ExitProcess) => {
                tracing::warn!(
                    key = key.as_str(),
                    "fault injected: the process exits after the Ready commit"
                );
                std::process::exit(86);
            }
            None => {}
        }
        Begun::Started(act, barrier)
    }

    /// Factory with the barrier closed, inbox first record, Ready commit with the pointer.
    async fn prepare(
        &self,
        act: &Arc<Activation>,
        reservation: zlink_store::types::Reservation,
    ) -> Result<(), CallError> {
        let key = &act.key;
        let generation = reservation.object_generation;
        let ty = self.instance_type(&act.envelope.stable_type)?;
        if let Err(e) = self.objects.open(key, generation) {
            let _ = self.give_back(&reservation).await;
            return Err(CallError::new(ErrorKind::Conflict, e.to_string()));
        }
        let obj = match self.instantiate(&ty, act, generation).await {
            Ok(o) => o,
            Err(e) => {
                let _ = self.objects.remove(key, generation);
                self.give_back_or_delete(&reservation).await;
                return Err(e);
            }
        };
        // Admissible before the Ready commit is visible (callers that see Ready at once find
        // it); the activation barrier keeps the queue closed to handlers until the first
        // message is at its head.
        self.live().insert(
            key.clone(),
            LiveEntry {
                generation,
                authority_owner_generation: reservation.authority_owner_generation,
                obj: Arc::clone(&obj),
                ty,
                moves: Vec::new(),
                binding: None,
            },
        );
        let root = &act.receipt;
        let inbox = InboxRecord {
            seq: 1,
            root: root.reference.clone(),
            sha256: hex(&root.sha256),
        };
        let committed = async {
            self.store
                .put(
                    &inbox_ref(&root.reference),
                    Bytes::from(serde_json::to_vec(&inbox).unwrap_or_default()),
                    ACTIVATION_RETENTION,
                )
                .await
                .map_err(store_error)?;
            let pointer = Pointer {
                root: root.reference.clone(),
                sha256: hex(&root.sha256),
                size: root.size,
                cursor: 0,
            };
            match self
                .store
                .commit_ready(&reservation, framework_bytes(Some(pointer)))
                .await
            {
                Ok(s) => Ok(s),
                // The commit may have landed (a lost reply): a read decides.
                Err(e) => {
                    let read = self.store.read_authority(key).await;
                    super::creation::ready_commit_landed(
                        &read,
                        generation,
                        &reservation.target.owner,
                    )
                    .cloned()
                    .ok_or_else(|| store_error(e))
                }
            }
        }
        .await;
        let snapshot = match committed {
            Ok(s) => s,
            Err(e) => {
                self.forget_live(key, generation);
                obj.close().await;
                let _ = self.objects.remove(key, generation);
                self.give_back_or_delete(&reservation).await;
                return Err(e);
            }
        };
        {
            let mut live = self.live();
            live.set_owner_generation(key, generation, snapshot.authority_owner_generation);
            live.open_spot(&act.envelope.spot_id);
        }
        // Ready is visible and the instance live: waiters of this ID read again now.
        self.activations.settle();
        self.stats.created.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Run the factory and start the instance on the (not yet Ready) queue.
    async fn instantiate(
        &self,
        ty: &Arc<dyn crate::object::registry::ObjectType>,
        act: &Activation,
        generation: u64,
    ) -> Result<Arc<dyn LiveObject>, CallError> {
        self.stats.factory_runs.fetch_add(1, Ordering::Relaxed);
        let mut home = Binding::new(Arc::clone(&self.objects), act.key.clone(), generation);
        if let Some(c) = self.this.get().cloned() {
            home = home.with_caller(c as std::sync::Weak<dyn crate::object::exec::ObjectCaller>);
        }
        let made = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(ty.create(
            FactoryInput {
                id: act.envelope.spot_id.clone(),
                stable_type: act.envelope.stable_type.clone(),
                object_generation: generation,
                init: None,
            },
            home,
        )))
        .await
        .unwrap_or_else(|_| {
            Err(CallError::new(
                ErrorKind::HandlerFailed,
                "the factory panicked",
            ))
        });
        made.map(Arc::from).map_err(|e| {
            CallError::new(
                ErrorKind::HandlerFailed,
                format!(
                    "factory of {:?} failed for {}: {}",
                    act.envelope.stable_type,
                    act.envelope.spot_id,
                    e.detail()
                ),
            )
        })
    }

    /// Give a reservation back; a commit that landed after all is deleted under its fence.
    async fn give_back_or_delete(&self, reservation: &zlink_store::types::Reservation) {
        if let GiveBack::Committed(a) = self.give_back(reservation).await {
            let _ = self.store.delete_fenced(&a.fence()).await;
        }
    }

    /// The failure path (wire §8 "Cold activation recovery 실패 처리"): the barrier stays
    /// sealed, the caller gets one terminal result, a one-way message is a drop event; the
    /// records were removed under their fence by the step that failed.
    async fn fail(&self, act: &Arc<Activation>, e: CallError) {
        self.forget_activation(act);
        let _ = self.store.delete(&inbox_ref(&act.receipt.reference)).await;
        let _ = self.store.delete(&act.receipt.reference).await;
        self.answer(act.take_sink(), Err(e));
    }

    /// Steps 7–8: restore the first message at the queue head, open the barrier, record the
    /// terminal completion, answer, advance the cursor, remove the pointer.
    async fn finish_first(&self, act: &Arc<Activation>, barrier: tokio::sync::OwnedMutexGuard<()>) {
        let key = &act.key;
        let generation = act.generation();
        // A completion recorded already (a task that died after it) is answered from the
        // store: the handler never runs twice.
        let recorded = match self.store.read(&done_ref(&act.receipt.reference)).await {
            Ok(Some(p)) => serde_json::from_slice::<Completion>(&p.bytes).ok(),
            Ok(None) => None,
            Err(e) => {
                // Not known: leave it to the next scan.
                tracing::debug!(error = %e, "activation completion unreadable; retried by the scan");
                drop(barrier);
                return;
            }
        };
        let result = match recorded {
            Some(c) => c.into_result(),
            None => {
                let obj = self
                    .live()
                    .get_incarnation(key, generation)
                    .map(|e| Arc::clone(&e.obj));
                let Some(obj) = obj else {
                    // The instance is gone (removed meanwhile): the first operation cannot
                    // run; its caller gets one result.
                    self.answer(
                        act.take_sink(),
                        Err(CallError::new(
                            ErrorKind::Unavailable,
                            "the activated Spot is no longer live on its target",
                        )),
                    );
                    self.forget_activation(act);
                    return;
                };
                if act.dispatched.swap(true, Ordering::AcqRel) {
                    // Handed to the queue by a task that ended before recording the result:
                    // the handler may have run. It is never run twice; the caller gets one
                    // `Unavailable`.
                    self.answer(
                        act.take_sink(),
                        Err(CallError::new(
                            ErrorKind::Unavailable,
                            "the first operation's outcome is unknown (its task ended)",
                        )),
                    );
                    self.forget_activation(act);
                    return;
                }
                let env = &act.envelope;
                let payload = TypedPayload::new(
                    env.packet_name.clone(),
                    env.content_type.clone(),
                    env.payload.clone(),
                );
                let metadata = env
                    .metadata
                    .as_ref()
                    .and_then(|m| Metadata::decode(&m[..]).ok());
                let request = env.operation_kind == OperationKind::Request;
                let rx = match obj.first_message(payload, metadata, request) {
                    Ok(rx) => rx,
                    Err(e) => {
                        self.answer(act.take_sink(), Err(e));
                        self.forget_activation(act);
                        return;
                    }
                };
                // The activation barrier opens: the first message is at the head.
                let _ = self.objects.mark_ready(key, generation);
                let result = rx.await.unwrap_or_else(|_| {
                    Err(CallError::new(ErrorKind::Unavailable, "object closed"))
                });
                let completion = Completion::of(&result);
                if let Err(e) = self
                    .store
                    .put(
                        &done_ref(&act.receipt.reference),
                        Bytes::from(serde_json::to_vec(&completion).unwrap_or_default()),
                        ACTIVATION_RETENTION,
                    )
                    .await
                {
                    // The handler ran but its completion is not durable: the scan retries the
                    // record (it finds the handler done through `completed`).
                    tracing::warn!(error = %e, "activation completion not recorded yet");
                    act.completed_unrecorded(result);
                    drop(barrier);
                    return;
                }
                result
            }
        };
        // Durable now: answer, then move the cursor and drop the pointer.
        self.answer(act.take_sink(), result);
        if self.release_pointer(act).await.is_ok() {
            self.forget_activation(act);
            let _ = self.store.delete(&done_ref(&act.receipt.reference)).await;
            let _ = self.store.delete(&inbox_ref(&act.receipt.reference)).await;
            let _ = self.store.delete(&act.receipt.reference).await;
        }
        drop(barrier);
    }

    /// Advance the replay cursor to 1, then remove the pointer (two Preserve CASes); a
    /// pointer already advanced or gone is fine.
    async fn release_pointer(&self, act: &Activation) -> Result<(), CallError> {
        let read = self
            .store
            .read_authority(&act.key)
            .await
            .map_err(store_error)?;
        let AuthorityRead::Found(a) = read else {
            return Ok(());
        };
        let mut a = *a;
        if a.object_generation != act.generation() {
            return Ok(());
        }
        match pointer_of(&a.payload) {
            Some(p) if p.root == act.receipt.reference && p.cursor == 0 => {
                let advanced = Pointer { cursor: 1, ..p };
                a = self
                    .store
                    .preserve(&a.fence(), framework_bytes(Some(advanced)))
                    .await
                    .map_err(store_error)?;
            }
            Some(p) if p.root == act.receipt.reference => {}
            _ => return Ok(()),
        }
        self.store
            .preserve(&a.fence(), framework_bytes(None))
            .await
            .map_err(store_error)?;
        Ok(())
    }

    /// Deliver a first call whose activation another node or task won: wait (bounded by the
    /// deadline) for the Ready authority, then call it like any Spot.
    async fn forward_when_ready(&self, call: &FirstCall, sink: ReplySink) -> Option<ReplySink> {
        let deadline = call.deadline_unix_ms;
        let mut missing_since: Option<tokio::time::Instant> = None;
        let mut ready = self.activations.ready_wait();
        let mut peers = self.mesh.subscribe_peer_changes();
        let mut unreachable_since: Option<tokio::time::Instant> = None;
        let result = async {
            let key = AuthorityKey::new(StoreKind::Spot, &call.route.spot_id)
                .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
            loop {
                let now = now_unix_ms();
                if now >= deadline {
                    return Err(CallError::new(
                        ErrorKind::DeadlineExceeded,
                        format!(
                            "{} did not become Ready before the deadline",
                            call.route.spot_id
                        ),
                    ));
                }
                match self.resolver.resolve_fresh(&key).await {
                    // The winner may be a node this one has no connection to yet (a host that
                    // just started and is not discovered here): the first call was accepted
                    // here, so it waits for that connection (bounded by its deadline) instead
                    // of failing — a one-way one would be lost.
                    Resolution::ReadyRoute(r) if self.owner_reachable(&r.owner_node) => break,
                    Resolution::ReadyRoute(r) => {
                        let since = *unreachable_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= OWNER_WAIT {
                            return Err(CallError::new(
                                ErrorKind::Unavailable,
                                format!(
                                    "{} is Ready on {}, which this node has not reached within {OWNER_WAIT:?}",
                                    call.route.spot_id, r.owner_node.rid
                                ),
                            ));
                        }
                        self.stats
                            .activation_owner_waits
                            .fetch_add(1, Ordering::Relaxed);
                        let until = tokio::time::Instant::now()
                            + Duration::from_millis(deadline.saturating_sub(now_unix_ms()))
                                .min(Duration::from_millis(100));
                        let _ = tokio::time::timeout_at(until, peers.changed()).await;
                        continue;
                    }
                    Resolution::Unavailable {
                        reason: UnavailableReason::Creating,
                        ..
                    } => missing_since = None,
                    Resolution::Missing => {
                        // The winner failed: Missing for a while means this call may activate
                        // the ID after all (another round of `activate`).
                        let since = *missing_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= Duration::from_millis(50) {
                            return Ok(None);
                        }
                    }
                    Resolution::Unavailable {
                        reason: UnavailableReason::OwnerLeaseLost,
                        authority,
                    } => {
                        self.cleanup_if_owner_gone(&authority).await?;
                    }
                    Resolution::Unavailable { reason, .. } => {
                        return Err(CallError::new(
                            ErrorKind::Unavailable,
                            format!("{} cannot be used now ({reason:?})", call.route.spot_id),
                        ));
                    }
                    Resolution::StoreFailure(e) => return Err(store_error(e)),
                }
                let until = tokio::time::Instant::now()
                    + Duration::from_millis(deadline.saturating_sub(now_unix_ms()));
                let _ = ready.wait(until).await;
            }
            let left = Duration::from_millis(deadline.saturating_sub(now_unix_ms()));
            let delivered = self
                .call(
                    StoreKind::Spot,
                    &call.route.spot_id,
                    call.payload.clone(),
                    call.metadata.clone(),
                    call.request.as_ref().map(|_| left),
                )
                .await;
            delivered.map(|r| Some(r.unwrap_or_default()))
        }
        .await;
        match result {
            Ok(None) => Some(sink),
            Ok(Some(reply)) => {
                self.answer(Some(sink), Ok(reply));
                None
            }
            Err(e) => {
                self.answer(Some(sink), Err(e));
                None
            }
        }
    }

    /// Whether a call to node lifecycle `owner` can be submitted now: it is this node, or a
    /// peer with a ready connection of that lifecycle.
    fn owner_reachable(&self, owner: &zlink_store::types::NodeRef) -> bool {
        let me = self.mesh.fence();
        (owner.rid == me.rid && owner.lifecycle_generation == me.lifecycle_generation)
            || self
                .mesh
                .connection(&owner.rid)
                .is_some_and(|c| c.peer().lifecycle_generation == owner.lifecycle_generation)
    }

    /// One pass of the recovery scan over this lifecycle's unfinished activations (at most
    /// `batch`): each one whose task is gone is resumed from the store's state. Returns how
    /// many were resumed or ended.
    pub(super) async fn recover_activations(self: &Arc<Self>, batch: usize) -> usize {
        let all: Vec<Arc<Activation>> = self.activations.lock().values().cloned().collect();
        let mut handled = 0;
        for act in all {
            if handled >= batch {
                break;
            }
            let Ok(barrier) = Arc::clone(&act.barrier).try_lock_owned() else {
                continue; // its task is alive
            };
            let fenced = !self.mesh.admission_open();
            let completed = act.take_completed_unrecorded();
            let (seen, record) = if RecoveryStep::needs_record(fenced, completed.is_some()) {
                match self.store.read_authority(&act.key).await {
                    Ok(AuthorityRead::Found(a)) => (Some(self.record_seen(&act, &a)), Some(a)),
                    Ok(AuthorityRead::Missing { .. }) => (Some(RecordSeen::Missing), None),
                    Err(e) => {
                        tracing::debug!(error = %e, "activation scan: store unavailable; retried");
                        (Some(RecordSeen::Unreadable), None)
                    }
                }
            } else {
                (None, None)
            };
            let step = RecoveryStep::decide(fenced, completed.is_some(), seen);
            if step != RecoveryStep::FailFenced {
                handled += 1;
            }
            self.recover_step(&act, barrier, step, record.as_deref(), completed)
                .await;
        }
        handled
    }

    /// How `a` relates to `act` (see [`RecordSeen`]).
    fn record_seen(&self, act: &Activation, a: &AuthoritySnapshot) -> RecordSeen {
        let me = self.mesh.fence();
        RecordSeen::Found {
            state: a.state,
            ours: a.object_generation == act.generation()
                && a.owner_node.rid == me.rid
                && a.owner_node.lifecycle_generation == me.lifecycle_generation,
            pointer_is_ours: pointer_of(&a.payload)
                .is_some_and(|p| p.root == act.receipt.reference),
        }
    }

    /// Carry out one [`RecoveryStep`] (the I/O of the pure decision).
    async fn recover_step(
        &self,
        act: &Arc<Activation>,
        barrier: tokio::sync::OwnedMutexGuard<()>,
        step: RecoveryStep,
        record: Option<&AuthoritySnapshot>,
        completed: Option<Result<TypedPayload, CallError>>,
    ) {
        if step != RecoveryStep::FailFenced && step != RecoveryStep::Retry {
            self.stats
                .activation_recoveries
                .fetch_add(1, Ordering::Relaxed);
        }
        let fail_once = |why: &'static str| {
            self.forget_activation(act);
            self.answer(
                act.take_sink(),
                Err(CallError::new(ErrorKind::Unavailable, why)),
            );
        };
        match step {
            RecoveryStep::FailFenced => {
                // Fenced (glossary §8): fenced cleanup elsewhere ends the ID.
                fail_once(
                    "the target's owner lease could not be renewed before its fencing deadline",
                );
                drop(barrier);
            }
            RecoveryStep::RecordCompletion => match completed {
                Some(result) => self.record_and_finish(act, barrier, result).await,
                None => drop(barrier),
            },
            RecoveryStep::FinishFirst => self.finish_first(act, barrier).await,
            RecoveryStep::Forget => self.forget_activation(act),
            RecoveryStep::GiveBackAndFail => {
                if let Some(a) = record
                    && let Some(p) = &a.pending_creation
                {
                    self.give_back_or_delete(&super::pending_reservation(a, p))
                        .await;
                }
                let _ = self.objects.remove(&act.key, act.generation());
                self.fail(
                    act,
                    CallError::new(ErrorKind::Unavailable, "the activation did not complete"),
                )
                .await;
                drop(barrier);
            }
            RecoveryStep::FailChanged => fail_once("the activation's authority changed"),
            RecoveryStep::FailGone => fail_once("the activation's authority is gone"),
            RecoveryStep::Retry => drop(barrier),
        }
    }

    async fn record_and_finish(
        &self,
        act: &Arc<Activation>,
        barrier: tokio::sync::OwnedMutexGuard<()>,
        result: Result<TypedPayload, CallError>,
    ) {
        let completion = Completion::of(&result);
        if self
            .store
            .put(
                &done_ref(&act.receipt.reference),
                Bytes::from(serde_json::to_vec(&completion).unwrap_or_default()),
                ACTIVATION_RETENTION,
            )
            .await
            .is_err()
        {
            act.completed_unrecorded(result);
            return;
        }
        // `finish_first` now finds the durable completion and never reruns the handler.
        self.finish_first(act, barrier).await;
    }

    /// End every pending first operation with `ShuttingDown` (runtime shutdown).
    pub(super) fn fail_pending_activations(&self) {
        let all: Vec<Arc<Activation>> = self.activations.lock().drain().map(|(_, a)| a).collect();
        for act in all {
            self.answer(
                act.take_sink(),
                Err(CallError::new(
                    ErrorKind::ShuttingDown,
                    "the target's object runtime shut down",
                )),
            );
        }
    }

    /// Deregister `act`, and only it (a newer activation of the same ID stays).
    fn forget_activation(&self, act: &Arc<Activation>) {
        {
            let mut acts = self.activations.lock();
            if acts.get(&act.key).is_some_and(|a| Arc::ptr_eq(a, act)) {
                acts.remove(&act.key);
            }
        }
        self.activations.settle();
    }

    fn fault(&self) -> Option<ActivationFault> {
        *self
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The source side of a call with Instance intent (issue §1): a Ready Spot is called as
    /// usual; a Missing one is activated on a target chosen from descriptors (command 39, kind
    /// 2, or in-process when the target is this node). `timeout` `None` is a one-way send.
    pub(super) async fn call_instance(
        self: &Arc<Self>,
        stable_type: &str,
        id: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        let key = AuthorityKey::new(StoreKind::Spot, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let budget = timeout.unwrap_or(CREATE_TIMEOUT);
        let deadline = tokio::time::Instant::now() + budget;
        let deadline_unix_ms =
            now_unix_ms().saturating_add(u64::try_from(budget.as_millis()).unwrap_or(u64::MAX));
        let mut ready = self.activations.ready_wait();
        loop {
            match self.resolver.resolve(&key).await {
                Resolution::ReadyRoute(_) => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    return self
                        .call(
                            StoreKind::Spot,
                            id,
                            payload,
                            metadata,
                            timeout.map(|_| left),
                        )
                        .await;
                }
                Resolution::Missing => break,
                Resolution::Unavailable {
                    reason: UnavailableReason::Creating,
                    ..
                } => {}
                Resolution::Unavailable {
                    reason: UnavailableReason::OwnerLeaseLost,
                    authority,
                } => {
                    // A dead owner's Spot is not reactivated in place; its record is removed
                    // under its fence (fenced cleanup) and the ID activates anew.
                    self.cleanup_if_owner_gone(&authority).await?;
                }
                Resolution::Unavailable { reason, .. } => {
                    return Err(CallError::new(
                        ErrorKind::Unavailable,
                        format!("{id} cannot be used now ({reason:?})"),
                    ));
                }
                Resolution::StoreFailure(e) => return Err(store_error(e)),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(CallError::new(
                    ErrorKind::DeadlineExceeded,
                    format!("{id} did not become Ready within {budget:?}"),
                ));
            }
            let _ = ready.wait(deadline).await;
        }
        let target = self.choose_descriptor(StoreKind::Spot, stable_type)?;
        let route = InstanceRouteMissing {
            target_mesh: target.mesh_name.clone(),
            target_node: target.node.clone(),
            spot_id: id.to_owned(),
            stable_type: stable_type.to_owned(),
            descriptor_version: target.descriptor_revision,
            deadline_unix_ms,
        };
        if target.node != self.mesh.fence() {
            self.stats.remote_calls.fetch_add(1, Ordering::Relaxed);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            return self
                .mesh
                .instance_spot(
                    &target.node,
                    InstanceRoute::Missing(route),
                    payload,
                    metadata,
                    timeout.map(|_| left),
                )
                .await;
        }
        self.stats.local_calls.fetch_add(1, Ordering::Relaxed);
        // An in-process caller has no reply route: its identity only fills the envelope.
        let random = crate::mesh::auth::random_bytes::<16>()
            .map_err(|_| CallError::new(ErrorKind::Unavailable, "no randomness"))?;
        let word = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
        let operation_id = zlink_protocol::generated::OperationId {
            high: word(&random[..8]),
            low: word(&random[8..]).max(1),
        };
        let (tx, rx) = oneshot::channel();
        let sink = if timeout.is_some() {
            ReplySink::Local(tx)
        } else {
            ReplySink::None
        };
        let request = timeout.map(|_| RequestHeader {
            operation_id: operation_id.clone(),
            reply_route_id: 1,
            correlation_id: "local".to_owned(),
            deadline_unix_ms,
        });
        let call = FirstCall {
            source: self.mesh.fence(),
            source_spot_id: String::new(),
            request,
            operation_id,
            deadline_unix_ms,
            route,
            metadata,
            payload,
        };
        let this = Arc::clone(self);
        let task = tokio::spawn(async move { this.activate(call, sink).await });
        if timeout.is_none() {
            // One-way: complete at source-local admission (the activation goes on).
            drop(task);
            return Ok(None);
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r.map(Some),
            Ok(Err(_)) => Err(CallError::new(
                ErrorKind::Unavailable,
                "the activation ended without a result",
            )),
            Err(_) => Err(CallError::new(
                ErrorKind::DeadlineExceeded,
                format!("no reply from {id} within {budget:?}"),
            )),
        }
    }
}

impl Activation {
    fn completed_unrecorded(&self, result: Result<TypedPayload, CallError>) {
        *self
            .unrecorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
    }

    fn take_completed_unrecorded(&self) -> Option<Result<TypedPayload, CallError>> {
        self.unrecorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// This lifecycle's unfinished cold activations (first operation not done yet), and the event
/// a wait for an ID that is `Creating` wakes on.
pub(super) struct Activations {
    table: std::sync::Mutex<std::collections::HashMap<AuthorityKey, Arc<Activation>>>,
    /// Bumped whenever an activation on this node settles: its Ready commit is visible and its
    /// instance live, or it ended without one (records given back or deleted).
    settled: tokio::sync::watch::Sender<u64>,
}

impl Default for Activations {
    fn default() -> Self {
        Self {
            table: std::sync::Mutex::new(std::collections::HashMap::new()),
            settled: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Activations {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<AuthorityKey, Arc<Activation>>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Unfinished activations.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// An activation on this node settled: wake every [`ReadyWait`].
    fn settle(&self) {
        self.settled.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A wait for an ID that is `Creating` (see [`ReadyWait`]).
    fn ready_wait(&self) -> ReadyWait {
        ReadyWait::new(
            self.settled.subscribe(),
            READY_WAIT_FIRST_BACKOFF,
            READY_WAIT_MAX_BACKOFF,
        )
    }
}

/// First wait between reads of an ID another node is activating.
const READY_WAIT_FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// Longest wait between reads of an ID another node is activating.
const READY_WAIT_MAX_BACKOFF: Duration = Duration::from_millis(100);

/// How a [`ReadyWait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Woke {
    /// An activation on this node settled (its Ready commit, or its end without one).
    Settled,
    /// The backoff ran out (an activation elsewhere is noticed by reading again).
    Backoff,
    /// The deadline passed.
    Deadline,
}

/// The wait between reads of a Spot that is `Creating` (a cold activation in progress): woken
/// at once by an activation on this node that settles; an activation on another node (which no
/// event of ours announces) is noticed on the next read, after a backoff that doubles from
/// `first` to `max` — a bounded number of store reads per wait, not a fixed-interval poll.
#[derive(Debug)]
pub(super) struct ReadyWait {
    settled: tokio::sync::watch::Receiver<u64>,
    next: Duration,
    max: Duration,
}

impl ReadyWait {
    fn new(mut settled: tokio::sync::watch::Receiver<u64>, first: Duration, max: Duration) -> Self {
        // Only settlements after the wait began count.
        settled.mark_unchanged();
        Self {
            settled,
            next: first,
            max,
        }
    }

    /// Wait for the next reason to read again, at most until `deadline`.
    pub(super) async fn wait(&mut self, deadline: tokio::time::Instant) -> Woke {
        let backoff = tokio::time::Instant::now() + self.next;
        self.next = (self.next * 2).min(self.max);
        tokio::select! {
            changed = self.settled.changed() => match changed {
                Ok(()) => Woke::Settled,
                // The runtime is gone: nothing will announce anything; read once more.
                Err(_) => Woke::Backoff,
            },
            () = tokio::time::sleep_until(backoff.min(deadline)) => {
                if backoff <= deadline { Woke::Backoff } else { Woke::Deadline }
            }
        }
    }
}

impl<S: ObjectStore> ObjectRuntime<S> {
    /// Request Spot `id` **with Instance intent** for stable type `stable_type` (valid for this
    /// call only): a Missing Spot is cold-activated on a node chosen from descriptors and this
    /// message is its first; a Ready one is called as usual. Concurrent first calls to one ID
    /// produce one activation, and every caller gets one reply.
    ///
    /// # Errors
    /// As [`ObjectCalls::request_to_spot`](crate::object::ObjectCalls::request_to_spot); `Rejected` when no node can host the type;
    /// `Unavailable` when the activation failed (its records were removed under their fence).
    pub async fn request_to_instance_spot<M: JsonMessage, R: JsonMessage>(
        &self,
        stable_type: &str,
        id: &str,
        msg: &M,
        timeout: Duration,
    ) -> Result<R, CallError> {
        let reply = self
            .inner
            .call_instance(stable_type, id, encode_json(msg)?, None, Some(timeout))
            .await?;
        decode_json(&reply.unwrap_or_default())
    }
    /// One-way message to Spot `id` with Instance intent (see
    /// [`ObjectRuntime::request_to_instance_spot`]); completes at source-local admission.
    ///
    /// # Errors
    /// As [`ObjectCalls::send_to_spot`](crate::object::ObjectCalls::send_to_spot).
    pub async fn send_to_instance_spot<M: JsonMessage>(
        &self,
        stable_type: &str,
        id: &str,
        msg: &M,
    ) -> Result<(), CallError> {
        self.inner
            .call_instance(stable_type, id, encode_json(msg)?, None, None)
            .await
            .map(|_| ())
    }
    /// Inject (or clear) a fault in the activation path (tests and chaos drills).
    pub fn set_activation_fault(&self, fault: Option<ActivationFault>) {
        *self
            .inner
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fault;
    }
    /// Period of the background activation recovery scan (default 1 s).
    pub fn set_activation_scan_interval(&self, every: Duration) {
        self.inner.scan_interval_ms.store(
            u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1),
            Ordering::Relaxed,
        );
    }
    /// Run one pass of the activation recovery scan now; returns how many unfinished
    /// activations it resumed or ended.
    pub async fn recover_activations(&self) -> usize {
        self.inner.recover_activations(ACTIVATION_SCAN_BATCH).await
    }
    /// Cold activations of this lifecycle whose first operation is not done yet.
    pub fn unfinished_activations(&self) -> usize {
        self.inner.activations.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod ready_wait_tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{ReadyWait, Woke};

    const HOUR: Duration = Duration::from_secs(3600);

    /// The clock is paused and auto-advances only when every task is idle: a waiter that slept
    /// out its backoff would show an hour passing. Woken by the event, no time passes.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_wakes_on_the_settle_event_not_on_its_backoff() {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let mut wait = ReadyWait::new(rx, HOUR, HOUR);
        let t0 = Instant::now();
        let waiter = tokio::spawn(async move { wait.wait(t0 + 10 * HOUR).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "nothing settled yet");
        tx.send_modify(|n| *n += 1);
        assert_eq!(waiter.await.unwrap(), Woke::Settled);
        assert_eq!(
            t0.elapsed(),
            Duration::ZERO,
            "woken by the event, not the timer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_settlement_before_the_wait_began_does_not_count() {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        tx.send_modify(|n| *n += 1);
        let mut wait = ReadyWait::new(rx, Duration::from_secs(1), Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(wait.wait(t0 + HOUR).await, Woke::Backoff);
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn without_events_the_backoff_doubles_to_its_cap_and_stops_at_the_deadline() {
        let (_tx, rx) = tokio::sync::watch::channel(0u64);
        let mut wait = ReadyWait::new(rx, Duration::from_millis(5), Duration::from_millis(40));
        let t0 = Instant::now();
        let mut ends = Vec::new();
        for _ in 0..6 {
            assert_eq!(wait.wait(t0 + HOUR).await, Woke::Backoff);
            ends.push(t0.elapsed().as_millis());
        }
        // 5, 10, 20, 40, 40, 40 ms apart: a bounded number of reads, not a fixed 5 ms poll.
        assert_eq!(ends, [5, 15, 35, 75, 115, 155]);
        let deadline = Instant::now() + Duration::from_millis(10);
        assert_eq!(wait.wait(deadline).await, Woke::Deadline);
        assert_eq!(Instant::now(), deadline);
    }
}

#[cfg(test)]
mod recovery_tests {
    use super::{RecordSeen, RecoveryStep};
    use zlink_store::types::AuthorityState;

    fn found(state: AuthorityState, ours: bool, pointer_is_ours: bool) -> Option<RecordSeen> {
        Some(RecordSeen::Found {
            state,
            ours,
            pointer_is_ours,
        })
    }

    /// Every row of the recovery table (docs/architecture.md, "Instance Spots"; wire §8).
    #[test]
    fn the_recovery_scan_takes_one_step_per_row_of_the_table() {
        use AuthorityState::{Creating, Ready};
        use RecoveryStep::*;
        // ((fenced, completion known, record seen), step)
        type Row = ((bool, bool, Option<RecordSeen>), RecoveryStep);
        let rows: [Row; 14] = [
            ((true, true, found(Ready, true, true)), FailFenced),
            ((true, false, None), FailFenced),
            ((false, true, None), RecordCompletion),
            ((false, true, Some(RecordSeen::Missing)), RecordCompletion),
            ((false, false, found(Ready, true, true)), FinishFirst),
            ((false, false, found(Ready, true, false)), Forget),
            (
                (false, false, found(Creating, true, false)),
                GiveBackAndFail,
            ),
            ((false, false, found(Creating, true, true)), GiveBackAndFail),
            ((false, false, found(Ready, false, true)), FailChanged),
            ((false, false, found(Creating, false, false)), FailChanged),
            ((false, false, Some(RecordSeen::Missing)), FailGone),
            ((false, false, Some(RecordSeen::Unreadable)), Retry),
            (
                (false, false, found(AuthorityState::Closing, true, true)),
                FailChanged,
            ),
            (
                (false, false, found(AuthorityState::Relocating, true, true)),
                FailChanged,
            ),
        ];
        for ((fenced, known, seen), want) in rows {
            assert_eq!(
                RecoveryStep::decide(fenced, known, seen),
                want,
                "fenced={fenced} completion_known={known} seen={seen:?}"
            );
        }
        assert_eq!(RecoveryStep::decide(false, false, None), Retry);
        assert!(RecoveryStep::needs_record(false, false));
        assert!(!RecoveryStep::needs_record(true, false));
        assert!(!RecoveryStep::needs_record(false, true));
    }
}
