//! The target side of a move (issue 17 item 5; wire §9 "Relocation manifest와 direct chunk
//! transfer", "Target CAS와 남은 Store 역할", §10 "Commit 뒤 queue와 Ready"), driven by the
//! pure [`Assembly`], [`RelayStaging`] and [`TargetCommit`].
//!
//! - **Prepare (40).** Refused with `relocationFailed` (53): `shuttingDown` when this host does
//!   not serve or relocates itself; `restoreFailed` for a `base` stage; `stale` when the
//!   authority row (Ready, kind, generation, owner node, owner generation, lease) does not match
//!   the Prepare's route; `unknownStableType` when the row's stable type is not registered
//!   here, `stale` when the envelope names another.
//! - **Chunks (52)** are copied on arrival; any assembly failure answers 53. No partial restore.
//! - **Restore** runs no handler: the instance is built from the state (or the factory, for
//!   `RecreateOnRelocation`) with its saved work and timers in its queue, which stays closed.
//!   Then `relocationReady` (30).
//! - **Relays (31)** are staged by ordinal; the **cutover (34)** starts the commit when its
//!   boundary matches, else the fallback does `RelocationCutoverWaitTimeout` after Ready.
//! - **Commit**: the one target-only transfer CAS, retried until the restore deadline; an
//!   ambiguous answer is re-read (self = done, other = stale). On failure everything prepared is
//!   removed and nothing revived.
//! - **Switch**, in one step: the live entry, then the staged relays, then the temporary queue,
//!   then the queue opens (saved work first, then relays, then the rest). Later relays apply once
//!   by ordinal. A carried request's terminal goes back as `replyRelay` (33), resent until its
//!   `replyRelayAck` (46).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::relocation::capacity::{Need, is_limited};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    CommandBody, NodeFence, RelocationCutover, RelocationData, RelocationEnvelopeV1,
    RelocationFailed, RelocationFailureReason, RelocationPolicy, RelocationPrepare,
    RelocationReady, RelocationStage, RelocationState, ReplyRelayAck, RequestHeader, RouteFence,
    RuntimeState, SessionRef,
};
use zlink_protocol::record::{Leg as WireLeg, Record, WireContext};
use zlink_store::StoreError;
use zlink_store::types::{
    AuthorityKey, AuthorityRead, AuthoritySnapshot, AuthorityState, MAX_AGGREGATE_OPS, NodeRef,
    OwnerFence, TargetFence, TransferOwner,
};

use super::intake::Intake;
use super::relocations::TemporaryQueue;
use super::{Inner, LiveEntry, ObjectStore, millis, store_kind};
use crate::call::error::{CallError, ErrorKind};
use crate::mesh::connection::Leg;
use crate::object::exec::{Binding, MovedWork, ObjectCaller};
use crate::object::registry::{FactoryInput, LiveObject, ObjectTypeKind};
use crate::object::work::Work;
use crate::relocation::relay::{Boundary, RelayStaging};
use crate::relocation::target::{
    Abandon, Assembly, CommitAction, CommitEvent, Manifest, Progress, TargetCommit,
};

/// What the unit's driver hears from the records.
enum Signal {
    /// Part `.0`'s payload assembled (or failed to).
    Payload(usize, Result<Vec<u8>, RelocationFailureReason>),
    Cutover(Boundary),
}

/// One object of an arriving unit, as its Prepare named it.
#[derive(Clone)]
struct Part {
    route: RouteFence,
    key: AuthorityKey,
    kind: zlink_store::types::ObjectKind,
    id_str: String,
}

struct Parts {
    /// The unit's objects in Prepare order: a lone object, or a User Spot first and then its
    /// member Actors.
    members: Vec<Part>,
    /// One assembly per member.
    assemblies: Vec<Assembly>,
    /// A chunk arrived: the unit's Prepares are all in (every Prepare goes before any chunk on
    /// the one ordered connection), so no other object joins it.
    closed: bool,
    /// A Prepare of another object arrived after the chunks began: the unit is refused.
    late_prepare: bool,
    staging: RelayStaging,
    /// After the switch: later relays go to whatever holds each object here then.
    switched: bool,
}

impl Parts {
    fn index_of(&self, kind: zlink_store::types::ObjectKind, id: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.kind == kind && m.id_str == id)
    }
}

/// One unit arriving here (see the module docs).
pub(crate) struct Arriving {
    id: [u8; 16],
    attempt: u64,
    source: NodeFence,
    parts: Mutex<Parts>,
    signal: mpsc::UnboundedSender<Signal>,
    /// Ready went to the source: a Prepare resent after a lost epoch is answered again.
    ready: std::sync::atomic::AtomicBool,
}

impl Arriving {
    fn parts(&self) -> std::sync::MutexGuard<'_, Parts> {
        self.parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A decoded relayed or saved record: a one-way message, or a request whose terminal goes
/// back to `source` as a `replyRelay`.
struct CarriedIn {
    payload: TypedPayload,
    metadata: Option<zlink_protocol::metadata::Metadata>,
    request: Option<(RequestHeader, NodeFence, u64)>,
    /// The route the record names.
    route: RouteFence,
    /// The node the record names as its sender.
    source: NodeFence,
}

/// Decode one carried record (a Spot / Actor send or request): the object it names, and the
/// record.
fn decode_carried(
    frames: &[Bytes],
) -> Result<(zlink_store::types::ObjectKind, String, CarriedIn), String> {
    let record = Record::decode_shared(frames, WireContext::route_mesh(WireLeg::Send))
        .or_else(|_| Record::decode_shared(frames, WireContext::route_mesh(WireLeg::Request)))
        .map_err(|e| format!("a carried record does not decode: {e}"))?;
    let (route, request, source): (RouteFence, _, NodeFence) = match record.body {
        CommandBody::SpotSend(b) => (b.route, None, b.source),
        CommandBody::ActorSend(b) => (b.route, None, b.source),
        CommandBody::SpotRequest(b) => (b.route, Some(b.request), b.source),
        CommandBody::ActorRequest(b) => (b.route, Some(b.request), b.source),
        other => {
            return Err(format!(
                "a carried record is a {:?}, not a Spot / Actor message",
                other.command()
            ));
        }
    };
    Ok((
        store_kind(route.object_kind),
        route.object_id.clone(),
        CarriedIn {
            payload: record.payload.unwrap_or_default(),
            metadata: record.metadata,
            request: request.map(|h| (h, source.clone(), route.owner_lease_generation)),
            route,
            source,
        },
    ))
}

/// Decode one carried record that must name object `kind` / `id`.
fn decode_carried_for(
    kind: zlink_store::types::ObjectKind,
    id: &str,
    frames: &[Bytes],
) -> Result<CarriedIn, String> {
    let (k, named, c) = decode_carried(frames)?;
    if k != kind || named != id {
        return Err(format!("a carried record names {named}, not {id}"));
    }
    Ok(c)
}

/// One restored object of the unit, waiting for the commit.
struct Restored {
    obj: Arc<dyn LiveObject>,
    ty: Arc<dyn crate::object::registry::ObjectType>,
    row: AuthoritySnapshot,
    temp: Arc<Intake>,
    /// The STREAM session binding that moves with it (issue 19 item 7; the envelope's
    /// `boundSession`): the Actor's binding here, and the session owner gets the 44 `route`
    /// once dispatch opens.
    session: Option<SessionRef>,
}

impl<S: ObjectStore> Inner<S> {
    /// A `relocationPrepare` (40) from `source` (the reactor checked that the body names the
    /// connection's peer). Prepares with one relocation ID make one unit (its objects commit
    /// together); they all come before the unit's first chunk.
    pub(super) fn on_prepare(self: &Arc<Self>, p: RelocationPrepare) {
        let refuse = |reason: RelocationFailureReason, detail: String| {
            self.relocations.refused.fetch_add(1, Ordering::Relaxed);
            self.answer_failed_n(
                &p.source,
                p.relocation_id,
                p.target_attempt_generation,
                reason,
                detail,
                1,
            );
        };
        let state = self.mesh.with_descriptor(|d| d.state);
        if state != RuntimeState::Serving || self.relocations.relocating() {
            return refuse(
                RelocationFailureReason::ShuttingDown,
                format!("{} is {} and takes no unit", self.mesh.rid(), state.name()),
            );
        }
        if p.stage == RelocationStage::Base {
            return refuse(
                RelocationFailureReason::RestoreFailed,
                "base-stage pre-copy is not supported".into(),
            );
        }
        let key = match AuthorityKey::new(
            store_kind(p.object_route.object_kind),
            &p.object_route.object_id,
        ) {
            Ok(k) => k,
            Err(e) => return refuse(RelocationFailureReason::Stale, e.to_string()),
        };
        let assembly = match Assembly::new(Manifest {
            total_length: p.payload_total_length,
            chunk_count: p.payload_chunk_count,
            crc32c: p.payload_checksum_crc32c,
        }) {
            Ok(a) => a,
            Err(r) => return refuse(r, "the manifest cannot be met".into()),
        };
        let kind = store_kind(p.object_route.object_kind);
        let part = Part {
            route: p.object_route.clone(),
            key,
            kind,
            id_str: p.object_route.object_id.clone(),
        };
        if let Some(existing) = self.relocations.arriving(&p.relocation_id) {
            if existing.attempt != p.target_attempt_generation {
                return;
            }
            let mut parts = existing.parts();
            match parts.index_of(kind, &part.id_str) {
                // The same identity again: a resend after a lost epoch replaces a transfer
                // that is still assembling, and is ignored once the payload is complete.
                Some(i) => {
                    if !parts.assemblies[i].is_finished() {
                        parts.assemblies[i] = assembly;
                    } else if existing.ready.load(Ordering::Acquire) {
                        // Its Ready may have been lost with the old epoch: answer again.
                        drop(parts);
                        self.send_ready(&existing);
                    }
                }
                // Another object of the same unit.
                None if !parts.closed => {
                    parts.members.push(part);
                    parts.assemblies.push(assembly);
                }
                None => {
                    parts.late_prepare = true;
                    drop(parts);
                    let _ = existing.signal.send(Signal::Payload(
                        usize::MAX,
                        Err(RelocationFailureReason::ChunkOrdinal),
                    ));
                }
            }
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let unit = Arc::new(Arriving {
            id: p.relocation_id,
            attempt: p.target_attempt_generation,
            source: p.source.clone(),
            parts: Mutex::new(Parts {
                members: vec![part],
                assemblies: vec![assembly],
                closed: false,
                late_prepare: false,
                staging: RelayStaging::new(),
                switched: false,
            }),
            signal: tx,
            ready: std::sync::atomic::AtomicBool::new(false),
        });
        self.relocations
            .arriving_map()
            .insert(p.relocation_id, Arc::clone(&unit));
        let this = Arc::clone(self);
        tokio::spawn(async move { this.run_arrival(unit, rx).await });
    }

    /// A `relocationState` (52) chunk.
    pub(super) fn on_chunk(&self, c: RelocationState) {
        let Some(unit) = self.relocations.arriving(&c.relocation_id) else {
            self.relocations
                .unknown_records
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        let progress = {
            let mut parts = unit.parts();
            let i = parts
                .index_of(store_kind(c.object_kind), &c.object_id)
                .filter(|i| parts.members[*i].route.object_generation == c.object_generation);
            let Some(i) = i.filter(|_| unit.attempt == c.target_attempt_generation) else {
                drop(parts);
                self.relocations
                    .unknown_records
                    .fetch_add(1, Ordering::Relaxed);
                return;
            };
            parts.closed = true;
            self.relocations
                .largest_chunk_received
                .fetch_max(c.chunk.data.len() as u64, Ordering::Relaxed);
            (
                i,
                parts.assemblies[i].push(c.chunk.chunk_ordinal, &c.chunk.data),
            )
        };
        match progress {
            (_, Ok(Progress::More)) => {}
            (i, Ok(Progress::Complete(bytes))) => {
                let _ = unit.signal.send(Signal::Payload(i, Ok(bytes)));
            }
            (i, Err(r)) => {
                let _ = unit.signal.send(Signal::Payload(i, Err(r)));
            }
        }
    }

    /// A `relocationData` (31): staged before the switch, applied once in order after it.
    pub(super) fn on_relay(&self, d: RelocationData) {
        let Some(unit) = self.relocations.arriving(&d.relocation_id) else {
            self.relocations
                .unknown_records
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        if unit.attempt != d.target_attempt_generation {
            self.relocations
                .unknown_records
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (ready, switched) = {
            let mut parts = unit.parts();
            let ready = parts.staging.accept(d.relay_ordinal, d.frames);
            (ready, parts.switched)
        };
        if switched {
            for frames in ready {
                self.apply_followed(&unit, &frames);
            }
        }
    }

    /// A relayed record after the switch, through whatever holds its object here now: itself,
    /// or the follow route of a later move onwards (so a chain of moves stays in order).
    fn apply_followed(&self, unit: &Arriving, frames: &[Bytes]) {
        let named = match decode_carried(frames) {
            Ok((kind, id, _)) => {
                let parts = unit.parts();
                parts
                    .index_of(kind, &id)
                    .map(|i| parts.members[i].key.clone())
            }
            Err(_) => None,
        };
        let current = named
            .as_ref()
            .and_then(|k| self.live().get(k).map(|e| Arc::clone(&e.obj)));
        match current {
            Some(obj) => self.apply_carried(unit.id, &unit.source, &obj, frames),
            None => {
                self.relocations
                    .follow_drops
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    object = ?named,
                    "a followed record arrived for an object that is gone here (or not of its unit)"
                );
            }
        }
    }

    /// A `relocationCutover` (34).
    pub(super) fn on_cutover(&self, c: RelocationCutover) {
        let Some(unit) = self.relocations.arriving(&c.relocation_id) else {
            self.relocations
                .unknown_records
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        if unit.attempt != c.target_attempt_generation {
            self.relocations
                .unknown_records
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.relocations
            .mark(unit.id, super::TimelineStep::CutoverSeen, Instant::now());
        let boundary = unit
            .parts()
            .staging
            .boundary(c.boundary_record_count, c.boundary_checksum_crc32c);
        let _ = unit.signal.send(Signal::Cutover(boundary));
    }

    /// A `replyRelayAck` (46): the relayed terminal arrived.
    pub(super) fn on_reply_relay_ack(&self, a: ReplyRelayAck) {
        let known = self.carried_acked(
            a.relocation_id,
            (a.operation_id.high, a.operation_id.low, a.reply_route_id),
        );
        if !known {
            self.relocations
                .unknown_records
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A `relocationFailed` (53) to each of a unit's `answers` Prepares.
    fn answer_failed_n(
        &self,
        source: &NodeFence,
        id: [u8; 16],
        attempt: u64,
        reason: RelocationFailureReason,
        detail: String,
        answers: usize,
    ) {
        tracing::warn!(reason = reason.name(), %detail, "relocation refused");
        let detail: String = detail.chars().take(1024).collect();
        for _ in 0..answers.max(1) {
            let _ = self.mesh.relocation_record(
                source,
                Leg::Reply,
                CommandBody::RelocationFailed(RelocationFailed {
                    relocation_id: id,
                    target_attempt_generation: attempt,
                    reason,
                    detail: detail.clone(),
                }),
                None,
            );
        }
    }

    /// Put one carried record into `obj`'s queue. A request the unit's source carried (it names
    /// the source as its sender) has its terminal relayed back through the ledger; a record the
    /// source followed as it came (it names another sender: wire §3.1, issue 17 item 7) is
    /// served as if it had come here directly — a request is answered to its sender, under its
    /// own operation ID and reply route.
    fn apply_carried(
        &self,
        relocation_id: [u8; 16],
        unit_source: &NodeFence,
        obj: &Arc<dyn LiveObject>,
        frames: &[Bytes],
    ) {
        match decode_carried(frames) {
            Ok((kind, id, c)) if c.source != *unit_source => {
                if c.request.is_some() {
                    self.relocations
                        .followed_answered
                        .fetch_add(1, Ordering::Relaxed);
                } else {
                    self.relocations
                        .followed_delivered
                        .fetch_add(1, Ordering::Relaxed);
                    if kind == zlink_store::types::ObjectKind::Actor {
                        self.notice_without_tail(&id, &c.payload);
                    }
                }
                self.serve_admitted(
                    obj,
                    super::remote::RemoteMessage {
                        source: Arc::new(c.source),
                        route: c.route,
                        request: c.request.map(|(h, _, _)| h),
                        metadata: c.metadata,
                        payload: c.payload,
                        session: None,
                    },
                );
            }
            Ok((kind, id, c)) => match c.request {
                None => {
                    if kind == zlink_store::types::ObjectKind::Actor {
                        // A session notice relayed without its tail ends the moved binding.
                        self.notice_without_tail(&id, &c.payload);
                    }
                    if let Err(e) = obj.send(c.payload, c.metadata) {
                        tracing::warn!(error = %e, "a relayed message was refused");
                    }
                }
                Some((header, source, lease)) => {
                    let lead = (kind, id, c.route.object_generation);
                    match obj.request_start(c.payload, c.metadata) {
                        Ok(rx) => {
                            self.relay_terminal(relocation_id, lead, header, source, lease, rx)
                        }
                        Err(e) => {
                            let (tx, rx) = oneshot::channel();
                            let _ = tx.send(Err(e));
                            self.relay_terminal(relocation_id, lead, header, source, lease, rx);
                        }
                    }
                }
            },
            Err(why) => {
                self.relocations
                    .unknown_records
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%why, "a relayed record was dropped");
            }
        }
    }

    /// A carried request entered `relocation_id`'s unit (object `lead`): its terminal, once
    /// `rx` has it, goes through the unit's terminal ledger — durable in a published root
    /// first, then relayed (33) until acknowledged (46); see [`super::terminals`].
    fn relay_terminal(
        &self,
        relocation_id: [u8; 16],
        lead: (zlink_store::types::ObjectKind, String, u64),
        header: RequestHeader,
        source: NodeFence,
        lease_generation: u64,
        rx: oneshot::Receiver<Result<TypedPayload, CallError>>,
    ) {
        let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let Some(unit) = self.carried_accepted(relocation_id, lead, header.deadline_unix_ms) else {
            return;
        };
        tokio::spawn(async move {
            let result = rx
                .await
                .unwrap_or_else(|_| Err(CallError::new(ErrorKind::Unavailable, "object closed")));
            this.carried_terminal(&unit, &header, source, lease_generation, result);
        });
    }

    /// The authority row must be exactly the one the Prepare's route names.
    fn row_matches(&self, a: &AuthoritySnapshot, route: &RouteFence) -> bool {
        a.state == AuthorityState::Ready
            && a.allocation.object_kind == store_kind(route.object_kind)
            && a.object_generation == route.object_generation
            && a.owner_node.rid == route.target_node.rid
            && a.owner_node.lifecycle_generation == route.target_node.lifecycle_generation
            && a.authority_owner_generation == route.authority_owner_generation
            && a.owner.lease_generation == route.owner_lease_generation
    }

    /// A `relocationReady` (30) for `unit`.
    fn send_ready(&self, unit: &Arriving) {
        let _ = self.mesh.relocation_record(
            &unit.source,
            Leg::Reply,
            CommandBody::RelocationReady(RelocationReady {
                relocation_id: unit.id,
                target_attempt_generation: unit.attempt,
                target: self.mesh.fence(),
                receive_chunk_limit_bytes: u32::try_from(self.relocations.settings().chunk_limit)
                    .unwrap_or(u32::MAX),
            }),
            None,
        );
    }

    /// Close and forget what was restored of a unit that will not switch in.
    async fn drop_restored(&self, members: &[Part], restored: Vec<Restored>) {
        for (m, r) in members.iter().zip(restored) {
            self.relocations.temporary().remove(&m.key);
            r.temp
                .end_with(ErrorKind::Unavailable, "the relocation was given up");
            r.obj.close().await;
            let _ = self.objects.remove(&m.key, m.route.object_generation);
        }
    }

    /// Restore part `m` from its envelope `bytes` (no handler runs; its queue stays closed),
    /// with the session binding the envelope carries.
    async fn restore_part(
        &self,
        unit: &Arriving,
        m: &Part,
        row: &AuthoritySnapshot,
        ty: &Arc<dyn crate::object::registry::ObjectType>,
        bytes: &[u8],
    ) -> Result<(Arc<dyn LiveObject>, Option<SessionRef>), (RelocationFailureReason, String)> {
        let env = RelocationEnvelopeV1::decode(bytes).map_err(|e| {
            (
                RelocationFailureReason::RestoreFailed,
                format!("the envelope of {} does not decode: {e}", m.id_str),
            )
        })?;
        if env.stable_type != row.allocation.stable_type
            || env.object_id != m.id_str
            || store_kind(env.object_kind) != m.kind
            || env.object_generation != m.route.object_generation
            || env.relocation_id != unit.id
        {
            return Err((
                RelocationFailureReason::Stale,
                "the envelope names another object, type or relocation".into(),
            ));
        }
        let mut moved = Vec::with_capacity(env.saved_queue.len());
        for w in &env.saved_queue {
            let c = decode_carried_for(m.kind, &m.id_str, &w.frames)
                .map_err(|why| (RelocationFailureReason::RestoreFailed, why))?;
            let item = match c.request {
                None => Work::Send(c.payload, c.metadata),
                Some((header, source, lease)) => {
                    let (tx, rx) = oneshot::channel();
                    let lead = (m.kind, m.id_str.clone(), m.route.object_generation);
                    self.relay_terminal(unit.id, lead, header, source, lease, rx);
                    Work::Request(c.payload, c.metadata, tx.into())
                }
            };
            moved.push((w.sequence, item));
        }
        let generation = m.route.object_generation;
        self.objects.open(&m.key, generation).map_err(|e| {
            (
                RelocationFailureReason::RestoreFailed,
                format!("the queue of {} could not open: {e}", m.id_str),
            )
        })?;
        let caller = self
            .this
            .get()
            .cloned()
            .map(|w| w as std::sync::Weak<dyn ObjectCaller>);
        let mut home = Binding::new(Arc::clone(&self.objects), m.key.clone(), generation);
        if let Some(c) = caller {
            home = home.with_caller(c);
        }
        let state = (env.relocation_policy == RelocationPolicy::PreserveState)
            .then(|| env.application_state.clone());
        let restored =
            futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(ty.restore_moved(
                FactoryInput {
                    id: m.id_str.clone(),
                    stable_type: ty.stable_type().to_owned(),
                    object_generation: generation,
                    init: None,
                },
                state,
                home,
                MovedWork::new(moved),
                env.timers.clone(),
            )))
            .await
            .unwrap_or_else(|_| {
                Err(CallError::new(
                    ErrorKind::HandlerFailed,
                    "the restore panicked",
                ))
            });
        // Only an Actor is bound to a session; a `boundSession` on anything else is ignored.
        let session = env.bound_session.filter(|_| {
            env.bound_session_present && m.kind == zlink_store::types::ObjectKind::Actor
        });
        match restored {
            Ok(o) => Ok((Arc::from(o), session)),
            Err(e) => {
                let _ = self.objects.remove(&m.key, generation);
                let reason = if env.relocation_policy == RelocationPolicy::RecreateOnRelocation {
                    RelocationFailureReason::FactoryFailed
                } else {
                    RelocationFailureReason::RestoreFailed
                };
                Err((
                    reason,
                    format!("the restore of {} failed: {}", m.id_str, e.detail()),
                ))
            }
        }
    }

    /// Every object of the unit now owned here after a re-read found the lead one so: their
    /// AuthorityOwnerGenerations (`None` when a read fails or one is not ours, which an
    /// all-or-nothing commit rules out).
    async fn owned_generations(&self, members: &[Part], lease: u64) -> Option<Vec<u64>> {
        let me = self.mesh.fence();
        let mut out = Vec::with_capacity(members.len());
        for m in members {
            match self.store.read_authority(&m.key).await {
                Ok(AuthorityRead::Found(a))
                    if a.owner_node.rid == me.rid
                        && a.owner_node.lifecycle_generation == me.lifecycle_generation
                        && a.owner.lease_generation == lease =>
                {
                    out.push(a.authority_owner_generation);
                }
                _ => return None,
            }
        }
        Some(out)
    }

    #[allow(clippy::too_many_lines)]
    async fn run_arrival(
        self: Arc<Self>,
        unit: Arc<Arriving>,
        mut signals: mpsc::UnboundedReceiver<Signal>,
    ) {
        let started = Instant::now();
        let settings = self.relocations.settings();
        let restore_deadline = started + settings.restore_timeout;
        let fail = |reason: RelocationFailureReason, detail: String| {
            let answers = unit.parts().members.len();
            self.relocations.arriving_map().remove(&unit.id);
            self.relocations.refused.fetch_add(1, Ordering::Relaxed);
            self.answer_failed_n(&unit.source, unit.id, unit.attempt, reason, detail, answers);
        };
        // The payloads: every Prepare of the unit is in once a chunk arrived. The first
        // object's authority row is read meanwhile (a lone object's move waits for no extra
        // store round trip after its payload).
        let first_key = unit.parts().members[0].key.clone();
        let payloads = async {
            let mut payloads: Vec<Option<Vec<u8>>> = Vec::new();
            loop {
                {
                    let parts = unit.parts();
                    if parts.late_prepare {
                        drop(parts);
                        return Err((
                            RelocationFailureReason::ChunkOrdinal,
                            "a Prepare of another object arrived after the unit's chunks began"
                                .into(),
                        ));
                    }
                    payloads.resize(parts.members.len().max(payloads.len()), None);
                    if parts.closed && payloads.iter().all(Option::is_some) {
                        return Ok(payloads);
                    }
                }
                let sig = tokio::select! {
                    s = signals.recv() => s,
                    () = tokio::time::sleep_until(restore_deadline.into()) => None,
                };
                match sig {
                    Some(Signal::Payload(i, Ok(b))) => {
                        if payloads.len() <= i {
                            payloads.resize(i + 1, None);
                        }
                        payloads[i] = Some(b);
                    }
                    // A resent chunk of a payload that is complete already changes nothing.
                    Some(Signal::Payload(i, Err(_)))
                        if payloads.get(i).is_some_and(Option::is_some) => {}
                    Some(Signal::Payload(i, Err(r))) => {
                        let name = unit
                            .parts()
                            .members
                            .get(i)
                            .map(|m| m.id_str.clone())
                            .unwrap_or_default();
                        return Err((r, format!("the payload of {name} did not assemble")));
                    }
                    Some(Signal::Cutover(_)) => {}
                    None => {
                        return Err((
                            RelocationFailureReason::ChunkOrdinal,
                            "the payload did not arrive by the restore deadline".into(),
                        ));
                    }
                }
            }
        };
        let (first_row, payloads) = tokio::join!(self.store.read_authority(&first_key), payloads);
        let mut payloads = match payloads {
            Ok(p) => p,
            Err((reason, detail)) => return fail(reason, detail),
        };
        let mut first_row = Some(first_row);
        let members: Vec<Part> = unit.parts().members.clone();
        let n = members.len();
        if n > MAX_AGGREGATE_OPS {
            return fail(
                RelocationFailureReason::RestoreFailed,
                format!(
                    "a unit of {n} objects is more than one aggregate commit moves \
                     ({MAX_AGGREGATE_OPS})"
                ),
            );
        }
        // The authority rows and the types they name.
        let mut rows: Vec<AuthoritySnapshot> = Vec::with_capacity(n);
        let mut types = Vec::with_capacity(n);
        for m in &members {
            let read = match first_row.take() {
                Some(r) if m.key == first_key => r,
                _ => self.store.read_authority(&m.key).await,
            };
            let row = match read {
                Ok(AuthorityRead::Found(a)) if self.row_matches(&a, &m.route) => *a,
                Ok(_) => {
                    return fail(
                        RelocationFailureReason::Stale,
                        format!(
                            "the authority of {} does not match the Prepare's route",
                            m.id_str
                        ),
                    );
                }
                Err(e) => {
                    return fail(
                        RelocationFailureReason::RestoreFailed,
                        format!("the authority of {} could not be read: {e}", m.id_str),
                    );
                }
            };
            let Some(ty) = self.types.get(&row.allocation.stable_type).cloned() else {
                return fail(
                    RelocationFailureReason::UnknownStableType,
                    format!(
                        "stable type {:?} is not registered here",
                        row.allocation.stable_type
                    ),
                );
            };
            rows.push(row);
            types.push(ty);
        }
        // A unit of several objects is a User Spot and its members (they keep their
        // membership); a lone Actor comes from the source's Entry Spot and joins this node's
        // in the commit.
        let group_spot = if n > 1 {
            if members[0].kind != zlink_store::types::ObjectKind::Spot
                || types[0].kind() != ObjectTypeKind::UserSpot
            {
                return fail(
                    RelocationFailureReason::RestoreFailed,
                    "a unit of several objects must be a User Spot and its members".into(),
                );
            }
            for (m, row) in members[1..].iter().zip(&rows[1..]) {
                if m.kind != zlink_store::types::ObjectKind::Actor
                    || super::membership_of(&row.payload).as_deref()
                        != Some(members[0].id_str.as_str())
                {
                    return fail(
                        RelocationFailureReason::RestoreFailed,
                        format!("{} is not a member of {}", m.id_str, members[0].id_str),
                    );
                }
            }
            Some(members[0].id_str.clone())
        } else {
            None
        };
        let entry = match (n, members[0].kind) {
            (1, zlink_store::types::ObjectKind::Actor) => {
                let mine = self.mesh.with_descriptor(|d| d.entry_spot_id.clone());
                let theirs = self
                    .mesh
                    .with_peer_descriptor(&unit.source.rid, |d| d.entry_spot_id.clone())
                    .unwrap_or_default();
                let member_of = super::membership_of(&rows[0].payload).unwrap_or_default();
                if mine.is_empty() || !self.live().spot_is_open(&mine) {
                    return fail(
                        RelocationFailureReason::RestoreFailed,
                        "this node has no open Entry Spot for the Actor".into(),
                    );
                }
                if theirs.is_empty() || member_of != theirs {
                    return fail(
                        RelocationFailureReason::RestoreFailed,
                        format!(
                            "{} is a member of {member_of:?}, not of the source's Entry Spot: it \
                             moves with its Spot",
                            members[0].id_str
                        ),
                    );
                }
                Some(mine)
            }
            _ => None,
        };
        // Capacity (item 5): the owner CAS moves capacity without checking it, so a unit that
        // does not fit beside this node's objects and the units already arriving is refused
        // here; the hold lasts until this arrival ends (after its commit the store counts it).
        let limits = self.relocations.capacity_limits();
        let _capacity = if is_limited(limits) {
            let need = Need::of(members.iter().map(|m| super::wire_kind(m.kind)));
            let me = self.mesh.fence();
            let here = NodeRef {
                mesh: self.mesh.with_descriptor(|d| d.mesh_name.clone()),
                rid: me.rid.into(),
                lifecycle_generation: me.lifecycle_generation,
            };
            let stored = match self.store.capacity_use(&here).await {
                Ok(u) => u,
                Err(e) => {
                    return fail(
                        RelocationFailureReason::RestoreFailed,
                        format!("this node's capacity use could not be read: {e}"),
                    );
                }
            };
            match self.relocations.hold_capacity(stored, need) {
                Ok(hold) => Some(hold),
                Err((l, used)) => {
                    self.relocations
                        .capacity_refusals
                        .fetch_add(1, Ordering::Relaxed);
                    return fail(
                        RelocationFailureReason::RestoreFailed,
                        format!(
                            "no capacity here for {} Actors and {} Spots: {} / {} Actors and \
                             {} / {} Spots in use or arriving (0 = unlimited)",
                            need.actors, need.spots, used.actors, l.actors, used.spots, l.spots
                        ),
                    );
                }
            }
        } else {
            None
        };
        // Restore, the Spot first: its members take its gate (a SpotWide Spot shares one).
        let Some(my_lease) = self.mesh.owner_token() else {
            return fail(
                RelocationFailureReason::ShuttingDown,
                "this host holds no owner lease".into(),
            );
        };
        let mut restored: Vec<Restored> = Vec::with_capacity(n);
        for (i, m) in members.iter().enumerate() {
            let bytes = payloads[i].take().unwrap_or_default();
            match self
                .restore_part(&unit, m, &rows[i], &types[i], &bytes)
                .await
            {
                Ok((obj, session)) => {
                    if group_spot.is_some() && i > 0 {
                        obj.set_gate(restored[0].obj.gate());
                    }
                    // An ApplicationSignaled Spot moved at a `defer()` boundary: its
                    // `on_relocation_ready_completed` is its first turn here (lifecycle lane,
                    // ahead of the moved work).
                    if crate::object::registry::application_signaled(types[i].as_ref())
                        && let Err(e) = obj.relocation_ready_completed()
                    {
                        tracing::warn!(error = %e, object = %m.id_str, "on_relocation_ready_completed could not be queued");
                    }
                    // The temporary queue: arrivals on the committed route before the switch.
                    let temp = Intake::new(obj.gate());
                    restored.push(Restored {
                        obj,
                        ty: Arc::clone(&types[i]),
                        row: rows[i].clone(),
                        temp,
                        session,
                    });
                }
                Err((reason, detail)) => {
                    self.drop_restored(&members, restored).await;
                    return fail(reason, detail);
                }
            }
        }
        for (m, r) in members.iter().zip(&restored) {
            self.relocations.temporary().insert(
                m.key.clone(),
                TemporaryQueue {
                    intake: Arc::clone(&r.temp),
                    source_owner_generation: r.row.authority_owner_generation,
                    lease_generation: my_lease.lease_generation,
                },
            );
        }
        let me = self.mesh.fence();
        // Ready to every Prepare of the unit.
        unit.ready.store(true, Ordering::Release);
        for _ in 0..n {
            self.send_ready(&unit);
        }
        // The commit.
        let ready_at = Instant::now();
        self.relocations
            .mark(unit.id, super::TimelineStep::Ready, ready_at);
        let ms = |at: Instant| millis(at.saturating_duration_since(ready_at));
        let wait_ms = millis(settings.cutover_wait);
        let deadline_ms =
            ms(restore_deadline.max(ready_at + settings.cutover_wait + Duration::from_millis(1)));
        let mut commit = TargetCommit::new(0);
        let node = NodeRef {
            mesh: self.mesh.with_descriptor(|d| d.mesh_name.clone()),
            rid: me.rid.to_string(),
            lifecycle_generation: me.lifecycle_generation,
        };
        // Each payload logs this move (the chain bound of routing §2.5); a lone Actor's names
        // this node's Entry Spot too.
        let now_unix = super::now_unix_ms();
        let window_ms = millis(settings.message_follow + settings.cutover_wait);
        // The move history each object keeps here: the one its new payload records.
        let mut histories: Vec<Vec<u64>> = Vec::with_capacity(members.len());
        let transfers: Vec<TransferOwner> = members
            .iter()
            .zip(&rows)
            .map(|(m, row)| {
                let payload =
                    match super::moved_payload(&row.payload, entry.as_deref(), now_unix, window_ms)
                    {
                        Some((payload, moves)) => {
                            histories.push(moves);
                            Some(payload)
                        }
                        // Not a framework JSON object (kept as it is): it records no history.
                        None => {
                            histories.push(Vec::new());
                            None
                        }
                    };
                (m, row, payload)
            })
            .map(|(m, row, payload)| TransferOwner {
                source: OwnerFence {
                    key: m.key.clone(),
                    store_version: row.store_version,
                    object_generation: row.object_generation,
                    authority_owner_generation: row.authority_owner_generation,
                    owner: row.owner.clone(),
                },
                target: TargetFence {
                    node: node.clone(),
                    owner: my_lease.clone(),
                },
                payload,
            })
            .collect();
        let lead = &members[0];
        let mut new_owner_generations: Option<Vec<u64>> = None;
        // Whether some attempt may have landed unseen (a store that did not answer): then no
        // abandonment is declared to the source.
        let mut ambiguous_seen = false;
        let mut pending: Vec<CommitEvent> = Vec::new();
        let end = loop {
            let event = if let Some(e) = pending.pop() {
                e
            } else {
                let next = commit
                    .next_tick_ms(wait_ms)
                    .map(|t| ready_at + Duration::from_millis(t));
                tokio::select! {
                    s = signals.recv() => match s {
                        Some(Signal::Cutover(b)) => CommitEvent::Cutover(b),
                        Some(Signal::Payload(..)) | None => CommitEvent::Tick,
                    },
                    () = async {
                        match next {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => std::future::pending().await,
                        }
                    } => CommitEvent::Tick,
                }
            };
            let now = ms(Instant::now());
            let mut done = None;
            for action in commit.step(event, now, wait_ms, deadline_ms) {
                match action {
                    CommitAction::StartCas => {
                        // One attempt waits at most until the deadline (2 s at most): a store
                        // that does not answer is an ambiguous attempt, re-read to decide.
                        let left = restore_deadline
                            .saturating_duration_since(Instant::now())
                            .clamp(Duration::from_millis(100), Duration::from_secs(2));
                        let attempt = tokio::time::timeout(
                            left,
                            self.commit_transfer(&transfers, entry.as_deref()),
                        )
                        .await;
                        match attempt {
                            Ok(Ok(a)) => {
                                self.relocations.mark(
                                    unit.id,
                                    super::TimelineStep::Committed,
                                    Instant::now(),
                                );
                                new_owner_generations = Some(a);
                                pending.push(CommitEvent::CasOk);
                            }
                            Ok(Err(StoreError::StoreFailure {
                                ambiguous: true, ..
                            }))
                            | Err(_) => {
                                ambiguous_seen = true;
                                pending.push(CommitEvent::CasAmbiguous);
                            }
                            Ok(Err(StoreError::StoreFailure { .. })) => {
                                pending.push(CommitEvent::CasRetryable);
                            }
                            Ok(Err(e)) => {
                                // A refusal: re-read to tell an earlier attempt of ours that
                                // landed (self) from another writer (stale).
                                tracing::warn!(error = %e, object = %lead.id_str, "the relocation CAS was refused; re-reading");
                                pending.push(CommitEvent::CasAmbiguous);
                            }
                        }
                    }
                    // The unit commits all or nothing: its lead object's row tells.
                    CommitAction::Reread => match self.store.read_authority(&lead.key).await {
                        Ok(AuthorityRead::Found(a))
                            if a.owner_node.rid == me.rid
                                && a.owner_node.lifecycle_generation == me.lifecycle_generation
                                && a.owner.lease_generation == my_lease.lease_generation =>
                        {
                            let all = if n == 1 {
                                Some(vec![a.authority_owner_generation])
                            } else {
                                self.owned_generations(&members, my_lease.lease_generation)
                                    .await
                            };
                            match all {
                                Some(v) => {
                                    new_owner_generations = Some(v);
                                    pending.push(CommitEvent::ReadSelf);
                                }
                                None => pending.push(CommitEvent::ReadFailed),
                            }
                        }
                        // Still exactly the source's row: nothing happened yet, try again.
                        Ok(AuthorityRead::Found(a)) if a.fence() == transfers[0].source => {
                            pending.push(CommitEvent::CasRetryable);
                        }
                        Ok(_) => pending.push(CommitEvent::ReadOther),
                        Err(_) => pending.push(CommitEvent::ReadFailed),
                    },
                    CommitAction::Switch => done = Some(Ok(())),
                    CommitAction::Remove(why) => done = Some(Err(why)),
                    CommitAction::WarnCutoverTimeout => {
                        self.relocations
                            .cutover_timeouts
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(object = %lead.id_str, "cutover_timeout: committing without a cutover");
                    }
                    CommitAction::WarnLateCutover => {
                        self.relocations
                            .late_cutovers
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(object = %lead.id_str, "late_cutover");
                    }
                    CommitAction::WarnBoundaryMismatch => {
                        tracing::warn!(object = %lead.id_str, "a cutover whose boundary does not match the relays: waiting");
                    }
                }
            }
            if let Some(d) = done {
                break d;
            }
        };
        match (end, new_owner_generations) {
            (Ok(()), Some(aogs)) if aogs.len() == n => {
                // The switch, in one step per queue: membership, live entries, staged relays,
                // temporary queues, then dispatch opens.
                for m in &members {
                    // The object moved away from here earlier and is back: routes to its old
                    // follow route here reach it directly.
                    let previous = self
                        .live()
                        .get_incarnation(&m.key, m.route.object_generation)
                        .map(|e| e.authority_owner_generation);
                    if let Some(old) = previous {
                        self.relocations.add_alias(&m.key, old);
                        // It is a live object here again, no longer one being followed away.
                        self.relocations.clear_moving(&m.key);
                        self.relocations.remove_follow(&m.key);
                        self.relocations
                            .suppression_lock()
                            .route_replaced(m.route.object_kind, &m.id_str);
                    }
                }
                match (&entry, &group_spot) {
                    (Some(spot), _) => {
                        self.live().enrol(&lead.id_str, spot);
                        if let Some(gate) = self.spot_gate(spot) {
                            restored[0].obj.set_gate(Some(gate));
                        }
                    }
                    (None, Some(spot)) => {
                        let mut live = self.live();
                        live.open_spot(spot);
                        for m in &members[1..] {
                            live.enrol(&m.id_str, spot);
                        }
                    }
                    (None, None) => {
                        if lead.kind == zlink_store::types::ObjectKind::Spot {
                            self.live().open_spot(&lead.id_str);
                        }
                    }
                }
                {
                    let mut live = self.live();
                    for (((m, r), aog), moves) in members
                        .iter()
                        .zip(&restored)
                        .zip(&aogs)
                        .zip(histories.drain(..))
                    {
                        live.insert(
                            m.key.clone(),
                            LiveEntry {
                                generation: m.route.object_generation,
                                authority_owner_generation: *aog,
                                obj: Arc::clone(&r.obj),
                                ty: Arc::clone(&r.ty),
                                moves,
                                binding: r.session.clone(),
                            },
                        );
                    }
                }
                let staged = {
                    let mut parts = unit.parts();
                    parts.switched = true;
                    parts.staging.switch()
                };
                for frames in staged {
                    let at = decode_carried(&frames).ok().and_then(|(kind, id, _)| {
                        members
                            .iter()
                            .position(|m| m.kind == kind && m.id_str == id)
                    });
                    match at {
                        Some(i) => {
                            self.apply_carried(unit.id, &unit.source, &restored[i].obj, &frames)
                        }
                        None => {
                            self.relocations
                                .unknown_records
                                .fetch_add(1, Ordering::Relaxed);
                            tracing::warn!("a relayed record names no object of its unit: dropped");
                        }
                    }
                }
                for (m, r) in members.iter().zip(&restored) {
                    r.temp.redirect(Vec::new(), Arc::clone(&r.obj));
                    self.relocations.temporary().remove(&m.key);
                }
                for m in &members {
                    let _ = self.objects.mark_ready(&m.key, m.route.object_generation);
                }
                // Dispatch is open: each bound session learns the Actor's new route (44
                // `route`; routing §3.3 step 7, wire §10 "Commit 뒤 queue와 Ready").
                for ((m, r), aog) in members.iter().zip(&restored).zip(&aogs) {
                    if let Some(session) = &r.session {
                        self.route_moved_session(
                            unit.id,
                            session,
                            RouteFence {
                                target_node: me.clone(),
                                authority_owner_generation: *aog,
                                owner_lease_generation: my_lease.lease_generation,
                                ..m.route.clone()
                            },
                        );
                    }
                }
                self.relocations
                    .mark(unit.id, super::TimelineStep::Switched, Instant::now());
                if let Some(spot) = &entry {
                    self.notify_member(spot, true, &lead.id_str);
                }
                self.relocations
                    .arrived
                    .fetch_add(n as u64, Ordering::Relaxed);
                tracing::info!(object = %lead.id_str, members = n - 1, from = %unit.source.rid, "relocated here");
                // Later relays (Message Follow) apply by ordinal until the source's window ends.
                let keep =
                    settings.message_follow + settings.cutover_wait * 2 + Duration::from_secs(5);
                tokio::time::sleep(keep).await;
                self.relocations.arriving_map().remove(&unit.id);
            }
            (end, _) => {
                let why = match end {
                    Err(Abandon::Stale) => "stale",
                    Err(Abandon::LocationUpdateFailed) | Ok(()) => "location_update_failed",
                };
                self.relocations.abandoned.fetch_add(1, Ordering::Relaxed);
                if !ambiguous_seen {
                    // Ours: no attempt can land later, so tell the source it may put the unit
                    // back (a 53 after Ready; see docs/architecture.md, "The mover").
                    let (reason, detail) = match end {
                        Err(Abandon::Stale) => (
                            RelocationFailureReason::Stale,
                            "the authority changed before the commit".to_owned(),
                        ),
                        Err(Abandon::LocationUpdateFailed) | Ok(()) => (
                            RelocationFailureReason::RestoreFailed,
                            "location_update_failed".to_owned(),
                        ),
                    };
                    self.answer_failed_n(&unit.source, unit.id, unit.attempt, reason, detail, n);
                }
                tracing::error!(object = %lead.id_str, reason = why, "a relocation was given up after Ready; everything prepared is removed");
                self.drop_restored(&members, restored).await;
                self.relocations.arriving_map().remove(&unit.id);
            }
        }
    }

    /// The target-only commit (wire §9 "Target CAS"): one aggregate of every owner transfer of
    /// the unit; for a lone Actor (whose transfer's payload names this node's Entry Spot
    /// `entry`) that Entry Spot is checked in the same aggregate. Returns the new AuthorityOwnerGenerations in order.
    async fn commit_transfer(
        &self,
        transfers: &[TransferOwner],
        entry: Option<&str>,
    ) -> Result<Vec<u64>, StoreError> {
        let generations = |out: Vec<AuthoritySnapshot>| {
            if out.len() < transfers.len() {
                return Err(StoreError::InvalidArgument(
                    "a short aggregate result".into(),
                ));
            }
            Ok(out[..transfers.len()]
                .iter()
                .map(|a| a.authority_owner_generation)
                .collect())
        };
        let Some(spot) = entry else {
            let ops: Vec<zlink_store::types::AggregateOp> = transfers
                .iter()
                .cloned()
                .map(zlink_store::types::AggregateOp::Transfer)
                .collect();
            return generations(self.store.commit_aggregate(&ops).await?);
        };
        let spot_key = AuthorityKey::new(zlink_store::types::ObjectKind::Spot, spot)
            .map_err(|e| StoreError::InvalidArgument(e.to_string()))?;
        // The Entry Spot's fence changes only with its own record: read once, kept, and read
        // again after a refusal (which may be the Check failing on an outdated copy).
        let cached = self.relocations.entry_fence(&spot_key);
        let spot_fence = match cached {
            Some(f) => f,
            None => match self.store.read_authority(&spot_key).await? {
                AuthorityRead::Found(a) => {
                    self.relocations.set_entry_fence(Some(a.fence()));
                    a.fence()
                }
                AuthorityRead::Missing { .. } => {
                    return Err(StoreError::Missing(format!("Entry Spot {spot}")));
                }
            },
        };
        let Some(first) = transfers.first() else {
            return Err(StoreError::InvalidArgument("an empty unit".into()));
        };
        // The payload names this node's Entry Spot already (set by the caller).
        let t = first.clone();
        let out = self
            .store
            .commit_aggregate(&[
                zlink_store::types::AggregateOp::Transfer(t),
                zlink_store::types::AggregateOp::Check(spot_fence),
            ])
            .await
            .inspect_err(|_| self.relocations.set_entry_fence(None))?;
        out.first()
            .map(|a| vec![a.authority_owner_generation])
            .ok_or_else(|| StoreError::InvalidArgument("an empty aggregate result".into()))
    }

    /// Admission of a route that names this node for a unit still arriving (wire §9 "CAS
    /// reply in flight"): its temporary queue, when the route names this lease and an owner
    /// generation above the source's.
    pub(super) fn temporary_admit(
        &self,
        key: &AuthorityKey,
        route: &RouteFence,
    ) -> Option<Arc<dyn LiveObject>> {
        if route.owner_lease_generation == self.mesh.owner_token().map_or(0, |t| t.lease_generation)
            && self
                .relocations
                .has_alias(key, route.authority_owner_generation)
        {
            return self
                .live()
                .get_incarnation(key, route.object_generation)
                .map(|e| Arc::clone(&e.obj));
        }
        let temp = self.relocations.temporary();
        let t = temp.get(key)?;
        (route.owner_lease_generation == t.lease_generation
            && route.authority_owner_generation > t.source_owner_generation)
            .then(|| Arc::clone(&t.intake) as Arc<dyn LiveObject>)
    }
}
