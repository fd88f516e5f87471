//! The source side of moving one unit to another node (issue 17 items 2–4, 6 and 7; wire §9
//! "Relocation manifest와 direct chunk transfer", §10, §11), driven by the pure
//! [`SourceUnit`](crate::relocation::source::SourceUnit).
//!
//! 1. The unit's live entry is replaced by an [`Intake`]: from here on every arrival, remote or
//!    local, is held in order while the object keeps its state.
//! 2. The executor is captured at its next handler boundary: not-yet-run messages and requests
//!    in run order, timers with their remaining time, and the state through the type's adapter.
//! 3. One `relocation-envelope-v1` (ZRE1) goes to the target as a `relocationPrepare` (40) and
//!    its `relocationState` (52) chunks. A captured request travels with a terminal identity
//!    this node registers (wire §11, ours: the source is the requester of record for what it
//!    carries — its caller keeps waiting here, and the target relays the terminal back as a
//!    `replyRelay`, 33).
//! 4. On `relocationReady` (30) the held arrivals go as `relocationData` (31) with ordinals from
//!    0 (copies kept), then the `relocationCutover` (34) naming that batch. Later arrivals keep
//!    being relayed with the next ordinals (Message Follow).
//! 5. After the window the source reads the authority: the target named → handed over (the
//!    copies are dropped, the old executor closes, the intake follows arrivals to the target for
//!    the Message Follow duration and then refuses them); the target's lease dead and the row
//!    unchanged → everything is put back in order. An explicit 53 before Ready restores at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    ActorRequest, ActorSend, CommandBody, NodeFence, ObjectKind as WireKind, RelocationCutover,
    RelocationData, RelocationDataChunkV1, RelocationEnvelopeV1, RelocationFailureReason,
    RelocationPolicy, RelocationPrepare, RelocationStage, RelocationState, RequestHeader,
    RouteFence, SavedWork, SenderRole, SessionRef, SpotRequest, SpotSend,
};
use zlink_protocol::metadata::Metadata;
use zlink_protocol::record::{Leg as WireLeg, Record, WireContext};
use zlink_store::types::{AuthorityKey, AuthorityRead, AuthoritySnapshot, DescriptorKind};

use super::intake::{Carried, Intake};
use super::sessions::LegRef;
use super::{Inner, ObjectStore, wire_kind};
use crate::call::error::{CallError, ErrorKind};
use crate::call::pending::PendingKey;
use crate::mesh::connection::Leg;
use crate::object::exec::CapturedQueue;
use crate::object::registry::{LiveObject, ObjectType};
use crate::object::work::Reply;
use crate::relocation::host::{StayReason, UnitOutcome};
use crate::relocation::relay::boundary_crc;
use crate::relocation::session_legs::{LegAction, LegEvent, Phase as LegPhase, SessionLegs};
use crate::relocation::source::{
    AuthorityView, SourceAction, SourceEvent, SourceOutcome, SourceTimings, SourceUnit,
};

/// What the target answered a Prepare with (routed here by relocation ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrepareAnswer {
    Ready,
    Failed(RelocationFailureReason),
}

/// A request this node carries into a move: the caller's reply sender, and the pending entry
/// the target's `replyRelay` completes.
struct CarriedRequest {
    key: PendingKey,
    relayed: oneshot::Receiver<Result<TypedPayload, CallError>>,
}

/// One relayed arrival, kept until the unit's outcome is known.
struct RelayCopy {
    /// Which part of the unit it is for.
    part: usize,
    frames: Vec<Bytes>,
    payload: TypedPayload,
    metadata: Option<Metadata>,
    request: Option<(CarriedRequest, Reply)>,
}

/// One object of a unit on the move: its live entry as it was, its route, and the intake that
/// stands in for it from the seal on.
struct Part {
    key: AuthorityKey,
    kind: zlink_store::types::ObjectKind,
    id: String,
    obj: Arc<dyn LiveObject>,
    generation: u64,
    aog: u64,
    ty: Arc<dyn ObjectType>,
    route: RouteFence,
    intake: Arc<Intake>,
    /// Its move history when it arrived here (see `LiveEntry::moves`).
    moves: Vec<u64>,
}

/// A handed-over part while its follow window runs: what the follow route needs of it.
struct Followed {
    key: AuthorityKey,
    kind: zlink_store::types::ObjectKind,
    id: String,
    generation: u64,
    aog: u64,
    route: RouteFence,
    intake: Arc<Intake>,
}

/// One part's transfer: the requests it carries, its Prepare and its chunks.
struct Built {
    carried_requests: Vec<(u64, CarriedRequest)>,
    prepare: RelocationPrepare,
    chunks: Vec<Bytes>,
}

/// The session legs of a unit on the move (issue 19 item 7; see
/// [`crate::relocation::session_legs`]): each sealed leg's SessionRef goes in its part's
/// envelope; dropped before the target's relay-ready was accepted, the sealed legs get a 44
/// `abort`.
struct Legs<S: ObjectStore> {
    inner: Arc<Inner<S>>,
    relocation_id: [u8; 16],
    refs: Vec<LegRef>,
    machine: SessionLegs,
}

impl<S: ObjectStore> Legs<S> {
    /// The binding that moves with part `part` (43 `sealed`).
    fn bound(&self, part: usize) -> Option<SessionRef> {
        self.machine
            .sealed()
            .filter_map(|i| self.refs.get(i))
            .find(|l| l.part == part)
            .map(|l| l.session.clone())
    }

    /// The target's relay-ready was accepted: the route update is the target's now.
    fn ready(&mut self) {
        let _ = self.machine.step(LegEvent::Ready, 0);
    }
}

impl<S: ObjectStore> Drop for Legs<S> {
    fn drop(&mut self) {
        for a in self.machine.step(LegEvent::GaveUp, 0) {
            match a {
                LegAction::Abort(which) => {
                    self.inner
                        .abort_legs(self.relocation_id, &self.refs, &which);
                }
                LegAction::Proceed | LegAction::Fail { .. } | LegAction::Late(_) => {}
            }
        }
    }
}

/// A fresh non-zero relocation ID (wire §10 "RelocationId").
fn new_relocation_id() -> Option<[u8; 16]> {
    crate::mesh::auth::random_bytes::<16>().ok().map(|mut id| {
        if id.iter().all(|b| *b == 0) {
            id[15] = 1;
        }
        id
    })
}

/// A unit's result as the relocation sees it: the outcome, and for a handover the moment its
/// Message Follow window ends (this node's clock).
#[derive(Debug, Clone)]
pub(crate) struct Moved {
    pub(crate) outcome: UnitOutcome,
    pub(crate) follow_until: Option<Instant>,
}

/// The service record one carried item travels as (wire §9: requests with their terminal
/// identity, one-way messages as sends), from `source` on the object's own route.
fn carried_record(
    route: &RouteFence,
    source: &NodeFence,
    request: Option<RequestHeader>,
    payload: TypedPayload,
    metadata: Option<Metadata>,
) -> Result<Vec<Bytes>, CallError> {
    let (body, leg) = match (route.object_kind, request) {
        (WireKind::Actor, None) => (
            CommandBody::ActorSend(ActorSend {
                route: route.clone(),
                source: source.clone(),
            }),
            WireLeg::Send,
        ),
        (WireKind::Spot, None) => (
            CommandBody::SpotSend(SpotSend {
                route: route.clone(),
                source: source.clone(),
            }),
            WireLeg::Send,
        ),
        (WireKind::Actor, Some(request)) => (
            CommandBody::ActorRequest(ActorRequest {
                request,
                route: route.clone(),
                source: source.clone(),
            }),
            WireLeg::Request,
        ),
        (WireKind::Spot, Some(request)) => (
            CommandBody::SpotRequest(SpotRequest {
                request,
                route: route.clone(),
                source: source.clone(),
            }),
            WireLeg::Request,
        ),
    };
    let mut record = Record::new(body).with_payload(payload);
    record.metadata = metadata;
    record
        .encode(WireContext::route_mesh(leg))
        .map(|f| f.into_iter().map(Bytes::from).collect())
        .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))
}

/// The deadline a carried request keeps on this node: `carried` from now
/// ([`RelocationSettings::carried_request_deadline`](super::RelocationSettings), a minute by
/// default).
fn carried_deadline_unix_ms(carried: Duration) -> u64 {
    super::now_unix_ms().saturating_add(super::millis(carried))
}

impl<S: ObjectStore> Inner<S> {
    /// Move the live unit `keys` (one object, or a User Spot first and then its member Actors,
    /// committed together) to node `target` (see the module docs). Returns when the outcome is
    /// known — or, still pending at `deadline`, as `Unresolved` while resolution goes on in the
    /// background.
    pub(super) async fn move_unit(
        self: &Arc<Self>,
        keys: Vec<AuthorityKey>,
        target: NodeFence,
        deadline: Instant,
    ) -> Moved {
        let (tx, rx) = oneshot::channel();
        let this = Arc::clone(self);
        tokio::spawn(async move { this.run_move(keys, target, deadline, tx).await });
        rx.await.unwrap_or(Moved {
            outcome: UnitOutcome::Unresolved,
            follow_until: None,
        })
    }

    /// Put every sealed part back: `firsts[i]` (in order), then what its intake holds, go to
    /// part `i`'s object, which takes the live entry again.
    fn unseal(&self, parts: &[Part], mut firsts: Vec<Vec<Carried>>) {
        firsts.resize_with(parts.len(), Vec::new);
        for (p, first) in parts.iter().zip(firsts) {
            p.intake.redirect(first, Arc::clone(&p.obj));
            if let Some(e) = self.live().get_incarnation_mut(&p.key, p.generation) {
                e.obj = Arc::clone(&p.obj);
            }
        }
    }

    /// The envelope of part `p` (saved work in run order, a request with a terminal identity
    /// this node registers), split into chunks, and its Prepare. On an error every terminal
    /// identity registered here is given up again.
    #[allow(clippy::too_many_arguments)]
    fn build_part(
        &self,
        p: &Part,
        captured: &CapturedQueue,
        state: Option<Bytes>,
        relocation_id: [u8; 16],
        coordinator_fence: u64,
        target: &NodeFence,
        me: &NodeFence,
        settings: &super::RelocationSettings,
        chunk_limit: usize,
        bound_session: Option<SessionRef>,
    ) -> Result<Built, CallError> {
        let mut carried_requests: Vec<(u64, CarriedRequest)> = Vec::new();
        let undo = |reqs: &mut Vec<(u64, CarriedRequest)>| {
            for (_, c) in reqs.drain(..) {
                let _ = self.mesh.uncarry(&c.key);
            }
        };
        let mut saved_queue = Vec::new();
        // The idle check passed on this same capture.
        let items = captured.carried().unwrap_or_default();
        // The capture encoded every one-way item already, as the record it travels as (this
        // object's route, from this node): only requests still need their record.
        let mut encoded: std::collections::HashMap<u64, Vec<Bytes>> = captured
            .saved
            .iter()
            .map(|w| (w.sequence, w.frames.clone()))
            .collect();
        for item in items {
            if !item.request {
                if let Some(frames) = encoded.remove(&item.seq) {
                    saved_queue.push(SavedWork {
                        sequence: item.seq,
                        frames,
                    });
                    continue;
                }
                undo(&mut carried_requests);
                return Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    format!("queued item {} was not encoded by the capture", item.seq),
                ));
            }
            let (ptx, prx) = oneshot::channel();
            let header = match self.mesh.carry_request(
                target,
                ptx,
                carried_deadline_unix_ms(self.relocations.settings().carried_request_deadline),
            ) {
                Ok((h, k)) => {
                    carried_requests.push((
                        item.seq,
                        CarriedRequest {
                            key: k,
                            relayed: prx,
                        },
                    ));
                    h
                }
                Err(e) => {
                    undo(&mut carried_requests);
                    return Err(e);
                }
            };
            match carried_record(
                &p.route,
                me,
                Some(header),
                item.payload.clone(),
                item.metadata.cloned(),
            ) {
                Ok(frames) => saved_queue.push(SavedWork {
                    sequence: item.seq,
                    frames,
                }),
                Err(e) => {
                    undo(&mut carried_requests);
                    return Err(e);
                }
            }
        }
        self.relocations.saved_work.fetch_add(
            saved_queue.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let envelope = RelocationEnvelopeV1 {
            relocation_id,
            object_kind: wire_kind(p.kind),
            object_id: p.id.clone(),
            stable_type: p.ty.stable_type().to_owned(),
            object_generation: p.generation,
            relocation_policy: p.ty.policy(),
            application_state: state.unwrap_or_default(),
            saved_queue,
            timers: captured.timers.clone(),
            // Issue 19 item 7 (ours: the SessionRef travels in the envelope).
            bound_session_present: bound_session.is_some(),
            bound_session,
        };
        let bytes = match envelope.encode() {
            Ok(b) => b,
            Err(e) => {
                undo(&mut carried_requests);
                return Err(CallError::new(ErrorKind::InvalidOperation, e.to_string()));
            }
        };
        let chunks: Vec<Bytes> = bytes
            .chunks(chunk_limit.max(1))
            .map(Bytes::copy_from_slice)
            .collect();
        let prepare = RelocationPrepare {
            relocation_id,
            target_attempt_generation: 1,
            coordinator_fence,
            object_route: p.route.clone(),
            source: me.clone(),
            stage: RelocationStage::Final,
            payload_total_length: bytes.len() as u64
                + u64::from(settings.fault == Some(super::TransferFault::WrongLength)),
            payload_chunk_count: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
            payload_checksum_crc32c: zlink_protocol::crc::crc32c(&bytes)
                ^ u32::from(settings.fault == Some(super::TransferFault::WrongChecksum)),
        };
        Ok(Built {
            carried_requests,
            prepare,
            chunks,
        })
    }

    #[allow(clippy::too_many_lines)]
    async fn run_move(
        self: Arc<Self>,
        keys: Vec<AuthorityKey>,
        target: NodeFence,
        deadline: Instant,
        report: oneshot::Sender<Moved>,
    ) {
        let stayed = |r| Moved {
            outcome: UnitOutcome::Stayed(r),
            follow_until: None,
        };
        let failed = |why: String| Moved {
            outcome: UnitOutcome::Failed(why),
            follow_until: None,
        };
        let Some(lease) = self.mesh.owner_token() else {
            let _ = report.send(failed("this host holds no owner lease".into()));
            return;
        };
        let me = self.mesh.fence();
        // A unit of several objects: a User Spot first, then its members.
        let group = keys.len() > 1;
        let mut parts: Vec<Part> = Vec::with_capacity(keys.len());
        for key in &keys {
            let Some((obj, generation, aog, ty, moves)) = self.live().get(key).map(|e| {
                (
                    Arc::clone(&e.obj),
                    e.generation,
                    e.authority_owner_generation,
                    Arc::clone(&e.ty),
                    e.moves.clone(),
                )
            }) else {
                let _ = report.send(failed(format!(
                    "{} is no longer live here",
                    super::key_parts(key).map_or_else(String::new, |(_, id)| id)
                )));
                return;
            };
            if ty.policy() == RelocationPolicy::DisableRelocation {
                let _ = report.send(stayed(StayReason::Disabled));
                return;
            }
            let Some((kind, id)) = super::key_parts(key) else {
                let _ = report.send(failed("not an object key".into()));
                return;
            };
            let route = RouteFence {
                object_kind: wire_kind(kind),
                object_id: id.clone(),
                object_generation: generation,
                target_node: me.clone(),
                authority_owner_generation: aog,
                owner_lease_generation: lease.lease_generation,
            };
            parts.push(Part {
                key: key.clone(),
                kind,
                id,
                intake: Intake::new(obj.gate()),
                obj,
                generation,
                aog,
                ty,
                route,
                moves,
            });
        }
        // An object whose cold activation has not dispatched its first message yet is not idle
        // (issue 17 item 3): sealing now would put the first message behind the intake, which
        // cannot take it (a one-way first message would be lost). Wait for the activation.
        for p in &parts {
            while self.objects.is_creating(&p.key, p.generation) {
                if Instant::now() >= deadline {
                    let _ = report.send(stayed(StayReason::Deadline));
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        // The chain bound (routing §2.5, issue 17 item 7): an object moved
        // `MAX_FOLLOW_HOPS` times within the follow window stays, so a sender's route is never
        // more than that many follows behind. The unit commits together: its lead's history
        // (as its payload recorded it when it arrived here) tells.
        let settings = self.relocations.settings();
        if !settings.message_follow.is_zero()
            && !crate::relocation::follow::chain_has_room(
                &parts[0].moves,
                super::now_unix_ms(),
                super::millis(settings.message_follow + settings.cutover_wait),
            )
        {
            let _ = report.send(stayed(StayReason::FollowChainFull));
            return;
        }
        // Room in the in-flight payload budgets first (issue 17 item 3): the objects keep
        // serving meanwhile.
        if !self
            .relocations
            .wait_for_budget(&target.rid, deadline)
            .await
        {
            let _ = report.send(stayed(StayReason::Deadline));
            return;
        }
        // Joins, leaves, closes and destroys of these objects wait until the move ends (they
        // would write an authority, which only the target may change now); they then find it
        // moved (stale) or back.
        let key_refs: Vec<&AuthorityKey> = keys.iter().collect();
        let _changes = self.changes.lock_all(&key_refs).await;
        let marks: Vec<(AuthorityKey, u64, u64)> = parts
            .iter()
            .map(|p| (p.key.clone(), p.generation, p.aog))
            .collect();
        for (i, (key, g, aog)) in marks.iter().enumerate() {
            if !self.relocations.start_moving(key, *g, *aog) {
                for (k, g, a) in &marks[..i] {
                    self.relocations.stop_moving(k, *g, *a);
                }
                let _ = report.send(failed("the object is moving already".into()));
                return;
            }
        }
        let this = Arc::clone(&self);
        let moving_marks = marks.clone();
        // Every early return below puts the unit back: it is not moving any more then.
        let not_moving = scopeguard(move || {
            for (k, g, a) in &moving_marks {
                this.relocations.stop_moving(k, *g, *a);
            }
        });
        // ApplicationSignaled (glossary §1): the unit seals only at a boundary its Spot's
        // application marked with `relocation_ready().defer()`; the Spot is held there.
        let signaled = crate::object::registry::application_signaled(parts[0].ty.as_ref());
        if signaled && !wait_boundary(&parts[0], deadline).await {
            let _ = report.send(stayed(StayReason::NotSignaled));
            return;
        }
        // The move's identity: its session seals (42) name it already.
        let Some(relocation_id) = new_relocation_id() else {
            if signaled {
                parts[0].obj.cancel_capture();
            }
            let _ = report.send(failed(
                "CaptureFailed: no randomness for a relocation ID".into(),
            ));
            return;
        };
        // 0. The bound sessions of the unit's Actors are sealed first (issue 19 item 7; routing
        // §3.3 step 1, wire §9 "Session seal과 source relay"): a session owner answers 43
        // behind every relay it submitted to the Actor on that connection, so what the
        // session sent before is in the Actor's queue (or this node's intake) by then, and
        // what it sends later waits at the session owner for the new route. Binds are refused
        // while the unit is marked moving, so the binding read here is the one that moves.
        let leg_refs: Vec<LegRef> = {
            let live = self.live();
            parts
                .iter()
                .enumerate()
                .filter(|(_, p)| p.kind == zlink_store::types::ObjectKind::Actor)
                .filter_map(|(i, p)| {
                    let session = live
                        .get_incarnation(&p.key, p.generation)?
                        .binding
                        .clone()?;
                    Some(LegRef {
                        part: i,
                        session,
                        actor_id: p.id.clone(),
                        object_generation: p.generation,
                    })
                })
                .collect()
        };
        let mut legs: Option<Legs<S>> = None;
        if !leg_refs.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                if signaled {
                    parts[0].obj.cancel_capture();
                }
                let _ = report.send(stayed(StayReason::Deadline));
                return;
            }
            let wait = settings.session_seal_wait.min(left);
            let machine = self.seal_legs(relocation_id, &leg_refs, wait).await;
            if machine.phase() != LegPhase::Proceeding {
                // No 43 in time: an explicit failure before relay-ready (its legs were
                // aborted); the unit stays where it is.
                if signaled {
                    parts[0].obj.cancel_capture();
                }
                let _ = report.send(failed(
                    "SessionSealTimeout: a bound session's owner did not answer the seal".into(),
                ));
                return;
            }
            legs = Some(Legs {
                inner: Arc::clone(&self),
                relocation_id,
                refs: leg_refs,
                machine,
            });
        }
        // 1. Arrivals are held from here on.
        let sealed_at = Instant::now();
        {
            let mut live = self.live();
            let mut sealed = 0;
            for p in &parts {
                match live.get_incarnation_mut(&p.key, p.generation) {
                    Some(e) => {
                        e.obj = Arc::clone(&p.intake) as Arc<dyn LiveObject>;
                        sealed += 1;
                    }
                    None => break,
                }
            }
            if sealed < parts.len() {
                drop(live);
                if signaled {
                    // Held at its boundary, never captured: let it run on.
                    parts[0].obj.cancel_capture();
                }
                self.unseal(&parts[..sealed], Vec::new());
                let _ = report.send(failed(
                    "an object of the unit is no longer live here".into(),
                ));
                return;
            }
        }
        // With a session sealed, the capture gets what is left of the session owner's seal
        // timeout (less a second for the transfer and the switch) rather than the whole
        // relocation deadline: past it the session would close (`SealTimeout`) although the
        // unit stays. It then stays `Deadline`, and its legs are aborted.
        let capture_deadline = if legs.is_some() {
            deadline.min(
                Instant::now()
                    + crate::config::defaults::SESSION_RELOCATION_SEAL_TIMEOUT
                        .saturating_sub(Duration::from_secs(1)),
            )
        } else {
            deadline
        };
        // 2. Capture at the next idle handler boundary (retried until the deadline). Every
        // object of the unit is paused at once, so no new turn of any of them starts: a
        // SpotWide group stops at one boundary of the gate it shares (only turns already
        // running finish).
        let resume = |caps: &mut Vec<(CapturedQueue, Option<Bytes>)>| {
            for (p, (c, _)) in parts.iter().zip(caps.drain(..)) {
                p.obj.resume_moved(c);
            }
        };
        let mut caps: Vec<(CapturedQueue, Option<Bytes>)> = loop {
            // Bounded by the relocation deadline: a turn that never reaches a boundary (or
            // waits for a change of this same object, which waits for the move) leaves the
            // unit where it is instead of hanging the relocation.
            let captures = futures::future::join_all(parts.iter().map(|p| {
                tokio::time::timeout_at(
                    capture_deadline.into(),
                    p.obj.capture_move(p.route.clone(), me.clone()),
                )
            }))
            .await;
            let mut outcome: Option<Moved> = None;
            let mut idle = true;
            let mut taken = Vec::with_capacity(parts.len());
            for (p, c) in parts.iter().zip(captures) {
                match c {
                    Ok(Ok(c)) => {
                        idle &= c.carried().is_ok();
                        taken.push(Some(c));
                    }
                    Ok(Err(e)) => {
                        outcome.get_or_insert(failed(format!("CaptureFailed: {}", e.detail())));
                        taken.push(None);
                    }
                    Err(_) => {
                        p.obj.cancel_capture();
                        outcome.get_or_insert(stayed(StayReason::Deadline));
                        taken.push(None);
                    }
                }
            }
            if outcome.is_none() && idle {
                let mut states = Vec::with_capacity(parts.len());
                for p in &parts {
                    match p.obj.capture_state() {
                        Ok(s) => states.push(s),
                        Err(e) => {
                            outcome = Some(failed(format!("CaptureFailed: {}", e.detail())));
                            break;
                        }
                    }
                }
                if outcome.is_none() {
                    break taken.into_iter().flatten().zip(states).collect();
                }
            }
            // Not idle (a notification, hold or first message is queued), or it failed: put
            // every capture back; retry the idle case until the deadline.
            for (p, c) in parts.iter().zip(taken) {
                if let Some(c) = c {
                    p.obj.resume_moved(c);
                }
            }
            if outcome.is_none() && Instant::now() >= capture_deadline {
                outcome = Some(stayed(StayReason::Deadline));
            }
            if let Some(moved) = outcome {
                self.unseal(&parts, Vec::new());
                let _ = report.send(moved);
                return;
            }
            if signaled {
                // The boundary was not idle and is gone (the Spot runs on): wait for the next.
                if !wait_boundary(&parts[0], capture_deadline).await {
                    self.unseal(&parts, Vec::new());
                    let _ = report.send(stayed(StayReason::NotSignaled));
                    return;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        // 3. The envelopes, one per object, under one relocation ID.
        let chunk_limit =
            effective_chunk_limit(&settings, self.mesh.peer_receive_chunk_limit(&target.rid));
        let mut built: Vec<Built> = Vec::with_capacity(parts.len());
        for (i, (p, (captured, state))) in parts.iter().zip(caps.iter_mut()).enumerate() {
            match self.build_part(
                p,
                captured,
                state.take(),
                relocation_id,
                lease.lease_generation,
                &target,
                &me,
                &settings,
                chunk_limit,
                legs.as_ref().and_then(|l| l.bound(i)),
            ) {
                Ok(b) => built.push(b),
                Err(e) => {
                    for b in &mut built {
                        for (_, c) in b.carried_requests.drain(..) {
                            let _ = self.mesh.uncarry(&c.key);
                        }
                    }
                    resume(&mut caps);
                    self.unseal(&parts, Vec::new());
                    let _ = report.send(failed(format!("CaptureFailed: {}", e.detail())));
                    return;
                }
            }
        }
        let undo_carried = |built: &mut Vec<Built>| {
            for b in built.iter_mut() {
                for (_, c) in b.carried_requests.drain(..) {
                    let _ = self.mesh.uncarry(&c.key);
                }
            }
        };
        // Every Prepare first, then the chunks (wire §9), on the one ordered connection.
        let send_transfer = |built: &Vec<Built>| -> Result<(), CallError> {
            for b in built {
                self.mesh.relocation_record(
                    &target,
                    Leg::Request,
                    CommandBody::RelocationPrepare(b.prepare.clone()),
                    None,
                )?;
            }
            for (p, b) in parts.iter().zip(built) {
                let order: Vec<usize> = match settings.fault {
                    Some(super::TransferFault::SkipFirstChunk) => (1..b.chunks.len()).collect(),
                    Some(super::TransferFault::DuplicateFirstChunk) => {
                        std::iter::once(0).chain(0..b.chunks.len()).collect()
                    }
                    Some(
                        super::TransferFault::WrongChecksum
                        | super::TransferFault::WrongLength
                        | super::TransferFault::DropFollowNotices
                        | super::TransferFault::DropSessionRoutes
                        | super::TransferFault::DropSealAnswers
                        | super::TransferFault::DropReplyRelays,
                    )
                    | None => (0..b.chunks.len()).collect(),
                };
                for i in order {
                    self.mesh.relocation_record(
                        &target,
                        Leg::Send,
                        CommandBody::RelocationState(RelocationState {
                            relocation_id,
                            target_attempt_generation: 1,
                            coordinator_fence: lease.lease_generation,
                            object_kind: wire_kind(p.kind),
                            object_id: p.id.clone(),
                            object_generation: p.generation,
                            sender_role: SenderRole::Source,
                            chunk: RelocationDataChunkV1 {
                                chunk_ordinal: u32::try_from(i).unwrap_or(u32::MAX),
                                data: b.chunks[i].clone(),
                            },
                        }),
                        None,
                    )?;
                }
            }
            Ok(())
        };
        let (answer_tx, mut answers) = mpsc::unbounded_channel();
        self.relocations.expect_answers(relocation_id, answer_tx);
        let transfer_at = Instant::now();
        self.relocations
            .mark(relocation_id, super::TimelineStep::Sealed, sealed_at);
        self.relocations
            .mark(relocation_id, super::TimelineStep::Transferred, transfer_at);
        // The payload stays budgeted until the target answers the Prepares (it consumed every
        // chunk by then) or the move ends.
        let payload_bytes: u64 = built
            .iter()
            .flat_map(|b| &b.chunks)
            .map(|c| c.len() as u64)
            .sum();
        let mut budget = self.relocations.hold_payload(&target.rid, payload_bytes);
        if let Err(e) = send_transfer(&built) {
            // Nothing reached the target that it could restore from: put everything back.
            budget.release();
            self.relocations.forget_answers(&relocation_id);
            undo_carried(&mut built);
            resume(&mut caps);
            self.unseal(&parts, Vec::new());
            let _ = report.send(stayed_or_failed(&e));
            return;
        }
        self.relocations
            .moves_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // 4.–5. The machine.
        let ms = |at: Instant| {
            u64::try_from(at.duration_since(transfer_at).as_millis()).unwrap_or(u64::MAX)
        };
        let deadline_ms = ms(deadline.max(transfer_at));
        let timings = SourceTimings {
            prepare_timeout_ms: super::millis(settings.restore_timeout + settings.cutover_wait),
            cutover_wait_ms: super::millis(settings.cutover_wait),
            deadline_ms,
        };
        let mut unit = SourceUnit::new(0);
        // The lead's row as the read that found the handover saw it.
        let mut lead_row: Option<Box<AuthoritySnapshot>> = None;
        let mut copies: Vec<RelayCopy> = Vec::new();
        let mut cutover_sent = false;
        let mut report = Some(report);
        let send_relay = |ordinal: u64, frames: Vec<Bytes>| {
            let _ = self.send_relay_record(&target, relocation_id, ordinal, frames);
        };
        // The unit's relays share one ordinal sequence; each record names its own object.
        let relay = |copies: &mut Vec<RelayCopy>, part: usize, c: Carried| {
            let ordinal = copies.len() as u64;
            let (header, request) = match c.reply {
                None => (None, None),
                Some(reply) => {
                    let (ptx, prx) = oneshot::channel();
                    match self.mesh.carry_request(
                        &target,
                        ptx,
                        carried_deadline_unix_ms(
                            self.relocations.settings().carried_request_deadline,
                        ),
                    ) {
                        Ok((h, k)) => (
                            Some(h),
                            Some((
                                CarriedRequest {
                                    key: k,
                                    relayed: prx,
                                },
                                reply,
                            )),
                        ),
                        Err(e) => {
                            let _ = reply.send(Err(e));
                            return;
                        }
                    }
                }
            };
            let frames = match carried_record(
                &parts[part].route,
                &me,
                header,
                c.payload.clone(),
                c.metadata.clone(),
            ) {
                Ok(f) => f,
                Err(e) => {
                    if let Some((cr, reply)) = request {
                        let _ = self.mesh.uncarry(&cr.key);
                        let _ = reply.send(Err(e));
                    }
                    return;
                }
            };
            send_relay(ordinal, frames.clone());
            self.relocations
                .relayed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            copies.push(RelayCopy {
                part,
                frames,
                payload: c.payload,
                metadata: c.metadata,
                request,
            });
        };
        let relay_held = |copies: &mut Vec<RelayCopy>| {
            for (i, p) in parts.iter().enumerate() {
                // Before the handover nothing is taken as sent (`forward_as_sent` comes after
                // it); `localize` keeps that so even if it were.
                for c in p.intake.take() {
                    relay(copies, i, c.localize());
                }
            }
        };
        let send_cutover = |copies: &Vec<RelayCopy>| {
            let _ = self.mesh.relocation_record(
                &target,
                Leg::Send,
                CommandBody::RelocationCutover(RelocationCutover {
                    relocation_id,
                    target_attempt_generation: 1,
                    coordinator_fence: lease.lease_generation,
                    boundary_record_count: copies.len() as u64,
                    boundary_checksum_crc32c: boundary_crc(
                        copies.iter().map(|c| c.frames.as_slice()),
                    ),
                }),
                None,
            );
        };
        let intakes: Vec<Arc<Intake>> = parts.iter().map(|p| Arc::clone(&p.intake)).collect();
        // The connection epoch to the target: a new one means what the old one carried may be
        // lost (wire §9: resend under the same identity).
        let mut peer_changes = self.mesh.subscribe_peer_changes();
        let mut watching = true;
        let mut epoch = self.mesh.peer_connection_generation(&target.rid);
        // One timer for the unit's ticks, moved to each next tick (a new one on every turn of
        // the loop cost a registration in tokio's timer wheel and its removal per turn).
        let tick = tokio::time::sleep_until(transfer_at.into());
        tokio::pin!(tick);
        let outcome = loop {
            let next = unit
                .next_tick_ms(&timings)
                .map(|t| transfer_at + Duration::from_millis(t));
            if let Some(at) = next
                && tick.deadline() != at.into()
            {
                tick.as_mut().reset(at.into());
            }
            let event = tokio::select! {
                a = answers.recv() => match a.inspect(|_| budget.release()) {
                    // The target answers every Prepare of the unit alike, once all of them
                    // are restored (or with a 53 to all): the first answer decides.
                    Some(PrepareAnswer::Ready) => {
                        if matches!(unit, SourceUnit::Preparing { .. }) {
                            self.relocations.mark(
                                relocation_id,
                                super::TimelineStep::ReadySeen,
                                Instant::now(),
                            );
                        }
                        // Relay-ready accepted: no session leg is aborted from here on.
                        if let Some(l) = legs.as_mut() {
                            l.ready();
                        }
                        SourceEvent::Ready
                    }
                    // A 53 before Ready refuses the move; after it, the target declares it
                    // gave the move up for good.
                    Some(PrepareAnswer::Failed(r)) => match unit {
                        SourceUnit::Preparing { .. } => SourceEvent::Failed(r),
                        SourceUnit::CutoverSent { .. }
                        | SourceUnit::Resolving { .. }
                        | SourceUnit::Done(_) => SourceEvent::Abandoned(r),
                    },
                    None => SourceEvent::Tick,
                },
                () = any_arrived(&intakes), if cutover_sent => {
                    relay_held(&mut copies);
                    continue;
                }
                changed = peer_changes.changed(), if watching => {
                    if changed.is_err() {
                        watching = false;
                        continue;
                    }
                    let now_epoch = self.mesh.peer_connection_generation(&target.rid);
                    // Disconnected: wait for the next epoch before resending.
                    if now_epoch.is_none() || now_epoch == epoch {
                        continue;
                    }
                    epoch = now_epoch;
                    self.relocations
                        .epochs_lost
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    SourceEvent::EpochLost
                }
                () = &mut tick, if next.is_some() => SourceEvent::Tick,
            };
            let now = ms(Instant::now());
            let mut actions = unit.step(event, now, &timings);
            let mut i = 0;
            while i < actions.len() {
                match actions[i] {
                    SourceAction::SendCutover => {
                        relay_held(&mut copies);
                        send_cutover(&copies);
                        cutover_sent = true;
                    }
                    SourceAction::ResendPrepare => {
                        let _ = send_transfer(&built);
                    }
                    SourceAction::ResendRelaysAndCutover => {
                        for (ordinal, c) in copies.iter().enumerate() {
                            send_relay(ordinal as u64, c.frames.clone());
                        }
                        send_cutover(&copies);
                    }
                    SourceAction::ReadAuthority => {
                        // The unit commits in one aggregate: its first object's row tells.
                        let lead = &parts[0];
                        // A peek while the cutover window runs only asks whether the target
                        // committed: the machine ignores an unchanged row's target liveness
                        // there, and listing descriptors for it on every peek cost more than
                        // the read (issue 17, bulk moves).
                        let liveness = !matches!(unit, SourceUnit::CutoverSent { .. });
                        let view = self
                            .authority_view(
                                &lead.key,
                                lead.generation,
                                lead.aog,
                                &target,
                                &mut lead_row,
                                liveness,
                            )
                            .await;
                        let now = ms(Instant::now());
                        actions.extend(unit.step(SourceEvent::Authority(view), now, &timings));
                    }
                    SourceAction::ReportUnresolved => {
                        if let Some(r) = report.take() {
                            let _ = r.send(Moved {
                                outcome: UnitOutcome::Unresolved,
                                follow_until: None,
                            });
                        }
                    }
                    SourceAction::Restore | SourceAction::DropCopies => {}
                }
                i += 1;
            }
            if let Some(o) = unit.outcome() {
                break o;
            }
        };
        self.relocations.forget_answers(&relocation_id);
        budget.release();
        if matches!(outcome, SourceOutcome::HandedOver)
            && let Some(l) = legs.as_mut()
        {
            // Handed over without a Ready seen here (lost with an epoch; the authority named
            // the target): relay-ready was accepted all the same, and the route update is the
            // target's — no abort.
            l.ready();
        }
        let moved = match outcome {
            SourceOutcome::HandedOver => {
                // Still moving until the follow window ends (the follow task clears it).
                not_moving.disarm();
                // Followed records continue the relay ordinals.
                let mut next_ordinal = copies.len() as u64;
                // The terminals of carried requests come back relayed: forward them.
                for ((captured, _), b) in caps.into_iter().zip(built) {
                    let mut replies: std::collections::HashMap<u64, Reply> =
                        captured.into_replies().into_iter().collect();
                    for (seq, c) in b.carried_requests {
                        if let Some(reply) = replies.remove(&seq) {
                            forward(c.relayed, reply);
                        }
                    }
                }
                for c in copies.drain(..) {
                    if let Some((cr, reply)) = c.request {
                        forward(cr.relayed, reply);
                    }
                }
                // A caller that looked an object up just before the seal may put work into
                // its executor after the capture: from now on that goes to the follow route,
                // and what got in before is taken and followed on too.
                for p in &parts {
                    // From here on the intake is the follow route: records of other nodes are
                    // forwarded as they came (issue 17 item 7).
                    p.intake.forward_as_sent();
                    p.obj.moved_to(Arc::clone(&p.intake) as Arc<dyn LiveObject>);
                    if let Ok(late) = p.obj.capture_move(p.route.clone(), me.clone()).await {
                        let late = late.into_carried();
                        self.relocations
                            .late_followed
                            .fetch_add(late.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        for (payload, metadata, reply) in late {
                            self.follow_one(
                                &p.route,
                                &me,
                                &target,
                                relocation_id,
                                next_ordinal,
                                Carried {
                                    payload,
                                    metadata,
                                    reply,
                                    origin: None,
                                },
                            );
                            next_ordinal += 1;
                        }
                    }
                }
                for p in &parts {
                    self.relocations.mark_handed(&p.key, p.generation, p.aog);
                    p.obj.close().await;
                    let _ = self.objects.remove(&p.key, p.generation);
                }
                // Membership bookkeeping: an Actor left this node's Entry Spot (it is a member
                // of the target's now) — or moved with its User Spot, which it never left; a
                // Spot takes no members here any more.
                for p in parts
                    .iter()
                    .filter(|p| p.kind == zlink_store::types::ObjectKind::Actor)
                {
                    let left = self.live().forget_member(&p.id);
                    if let (Some(spot), false) = (left, group) {
                        self.notify_member(&spot, false, &p.id);
                    }
                }
                for p in parts
                    .iter()
                    .filter(|p| p.kind == zlink_store::types::ObjectKind::Spot)
                {
                    let _ = self.live().close_spot(&p.id);
                }
                self.relocations
                    .handed_over
                    .fetch_add(parts.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let follow_until = Instant::now() + settings.message_follow + settings.cutover_wait;
                // The new owners' routes, for the `messageFollow` notices to senders that still
                // use the old ones.
                // The lead's row was read already (the handover was seen in it).
                for (i, p) in parts.iter().enumerate() {
                    let row = match lead_row.take().filter(|_| i == 0) {
                        Some(a) => Some(a),
                        None => match self.store.read_authority(&p.key).await {
                            Ok(AuthorityRead::Found(a)) => Some(a),
                            Ok(AuthorityRead::Missing { .. }) | Err(_) => None,
                        },
                    };
                    if let Some(a) = row {
                        self.relocations.add_follow(
                            p.key.clone(),
                            super::relocations::FollowNotice {
                                new_route: RouteFence {
                                    object_kind: wire_kind(p.kind),
                                    object_id: p.id.clone(),
                                    object_generation: a.object_generation,
                                    target_node: NodeFence {
                                        rid: zlink_protocol::shared_str::SharedStr::intern(
                                            &a.owner_node.rid,
                                        ),
                                        lifecycle_generation: a.owner_node.lifecycle_generation,
                                    },
                                    authority_owner_generation: a.authority_owner_generation,
                                    owner_lease_generation: a.owner.lease_generation,
                                },
                                until: follow_until,
                                arrived: Arc::default(),
                            },
                        );
                    }
                }
                self.notice_at_handover(
                    &parts
                        .iter()
                        .map(|p| (p.key.clone(), p.route.clone()))
                        .collect::<Vec<_>>(),
                );
                // Message Follow: arrivals on the old routes keep going to the target.
                let this = Arc::clone(&self);
                // Only what the follow route needs stays for the window: the handed-over
                // instances (their state, queue and executor) are freed now, not when the window
                // ends 30 s later.
                let follow: Vec<Followed> = parts
                    .into_iter()
                    .map(|p| Followed {
                        key: p.key,
                        kind: p.kind,
                        id: p.id,
                        generation: p.generation,
                        aog: p.aog,
                        route: p.route,
                        intake: p.intake,
                    })
                    .collect();
                let (follow_target, follow_me) = (target.clone(), me.clone());
                tokio::spawn(async move {
                    let intakes: Vec<Arc<Intake>> =
                        follow.iter().map(|p| Arc::clone(&p.intake)).collect();
                    loop {
                        tokio::select! {
                            () = any_arrived(&intakes) => {}
                            () = tokio::time::sleep_until(follow_until.into()) => break,
                        }
                        for p in &follow {
                            for c in p.intake.take() {
                                this.follow_one(
                                    &p.route,
                                    &follow_me,
                                    &follow_target,
                                    relocation_id,
                                    next_ordinal,
                                    c,
                                );
                                next_ordinal += 1;
                            }
                        }
                    }
                    for p in &follow {
                        // A move back here (or a new incarnation) may have replaced the follow
                        // route meanwhile: only this move's route and mark end here.
                        this.relocations.stop_moving(&p.key, p.generation, p.aog);
                        this.relocations.unmark_handed(&p.key, p.generation, p.aog);
                        if this.live().forget_owned(&p.key, p.generation, p.aog) {
                            this.relocations.forget_aliases(&p.key);
                            this.relocations.remove_follow(&p.key);
                            this.relocations
                                .suppression_lock()
                                .route_replaced(wire_kind(p.kind), &p.id);
                        }
                        // Item 7: an expired follow route answers Unavailable (the caller's
                        // cache entry goes with it); a one-way message is a counted drop.
                        p.intake.end_with(
                            ErrorKind::Unavailable,
                            "the object moved to another node and its follow window ended",
                        );
                    }
                });
                Moved {
                    outcome: UnitOutcome::HandedOver,
                    follow_until: Some(follow_until),
                }
            }
            SourceOutcome::Failed(_) | SourceOutcome::RestoredTargetGone => {
                undo_carried(&mut built);
                resume(&mut caps);
                let mut back: Vec<Vec<Carried>> = (0..parts.len()).map(|_| Vec::new()).collect();
                for c in copies {
                    back[c.part].push(Carried {
                        payload: c.payload,
                        metadata: c.metadata,
                        reply: c.request.map(|(cr, reply)| {
                            let _ = self.mesh.uncarry(&cr.key);
                            reply
                        }),
                        origin: None,
                    });
                }
                self.unseal(&parts, back);
                self.relocations
                    .restored
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Moved {
                    outcome: match outcome {
                        SourceOutcome::Failed(r) => UnitOutcome::Failed(r.name().to_owned()),
                        SourceOutcome::RestoredTargetGone | SourceOutcome::HandedOver => {
                            UnitOutcome::RestoredTargetGone
                        }
                    },
                    follow_until: None,
                }
            }
        };
        if let Some(r) = report.take() {
            let _ = r.send(moved);
        }
    }

    /// A Ready (30) or Failed (53) answer to one of this node's Prepares.
    pub(super) fn on_prepare_answer(&self, from: &NodeFence, id: [u8; 16], answer: PrepareAnswer) {
        if !self.relocations.answer(&id, answer) {
            self.relocations
                .unknown_records
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(from = %from.rid, ?answer, "an answer to an unknown relocation was dropped");
        }
    }

    /// Relay one arrival on the old route after the handover (Message Follow, wire §3.1), with
    /// the ordinal after the last one. A record of another node goes as it came — its sender,
    /// route, operation ID and reply route — and the new owner answers its sender; a local
    /// caller's request (or one taken before the handover) goes under a terminal identity of
    /// this node, and its terminal comes back relayed.
    fn follow_one(
        &self,
        route: &RouteFence,
        me: &NodeFence,
        target: &NodeFence,
        relocation_id: [u8; 16],
        ordinal: u64,
        c: Carried,
    ) {
        // The record the 31 carries, whether it goes as it came, and who is told when it
        // cannot be relayed (a request of another node: its sender, from here).
        let (frames, as_sent, on_failure) = if let Some(o) = c.origin {
            let on_failure = o.request.clone().map(|h| (Arc::clone(&o.source), h));
            let frames = carried_record(&o.route, &o.source, o.request, c.payload, c.metadata);
            (frames, true, on_failure)
        } else {
            let header = match c.reply {
                None => None,
                Some(reply) => {
                    let (ptx, prx) = oneshot::channel();
                    let deadline = carried_deadline_unix_ms(
                        self.relocations.settings().carried_request_deadline,
                    );
                    match self.mesh.carry_request(target, ptx, deadline) {
                        Ok((h, _)) => {
                            forward(prx, reply);
                            Some(h)
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e));
                            return;
                        }
                    }
                }
            };
            let frames = carried_record(route, me, header, c.payload, c.metadata);
            (frames, false, None)
        };
        let sent = frames
            .and_then(|frames| self.send_relay_record(target, relocation_id, ordinal, frames));
        let count = |c: &std::sync::atomic::AtomicU64| {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        match sent {
            Ok(()) => {
                count(&self.relocations.followed);
                if as_sent {
                    count(&self.relocations.followed_as_sent);
                }
            }
            Err(e) => {
                count(&self.relocations.follow_drops);
                tracing::warn!(error = %e, object = %route.object_id, "a followed record could not be relayed");
                if let Some((source, h)) = on_failure {
                    self.mesh.reply_to(&source, &h, Err(e));
                }
            }
        }
    }

    /// Send one held or followed record (`relocationData`, 31) to `target`.
    fn send_relay_record(
        &self,
        target: &NodeFence,
        relocation_id: [u8; 16],
        ordinal: u64,
        frames: Vec<Bytes>,
    ) -> Result<(), CallError> {
        self.mesh.relocation_record(
            target,
            Leg::Send,
            CommandBody::RelocationData(RelocationData {
                relocation_id,
                target_attempt_generation: 1,
                relay_ordinal: ordinal,
                frames,
            }),
            None,
        )
    }

    /// A record on route `route` from `source` reached an object this node follows to its new
    /// owner: tell the sender its cached route is stale (`messageFollow`, 50; wire §3.1), once
    /// per stale route and sender until the follow window ends. A local sender's own cache
    /// entry is dropped directly.
    pub(super) fn notice_follow(
        &self,
        route: &RouteFence,
        source: &NodeFence,
        request: Option<&RequestHeader>,
        payload_len: usize,
    ) {
        if !self.relocations.follows_any() {
            return;
        }
        let Ok(key) = AuthorityKey::new(super::store_kind(route.object_kind), &route.object_id)
        else {
            return;
        };
        let Some(f) = self.relocations.follows_lock().get(&key).cloned() else {
            return;
        };
        if *route == f.new_route {
            return;
        }
        // The queue snapshot counts every arrival on an old route, this one included.
        let queue_count = f.arrived[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let queue_bytes = f.arrived[1]
            .fetch_add(payload_len as u64, std::sync::atomic::Ordering::Relaxed)
            + payload_len as u64;
        if *source == self.mesh.fence() {
            self.resolver
                .cache()
                .message_follow(&cache_fence(key, route));
            return;
        }
        self.send_follow_notice(route, source, &f, request, queue_count, queue_bytes);
    }

    /// Send `recipient` a `messageFollow` that `route` is replaced by `f`'s new route, unless
    /// the suppression table says one went already; a sent one notes the recipient as recent.
    fn send_follow_notice(
        &self,
        route: &RouteFence,
        recipient: &NodeFence,
        f: &super::relocations::FollowNotice,
        request: Option<&RequestHeader>,
        queue_count: u64,
        queue_bytes: u64,
    ) -> bool {
        let now = Instant::now();
        let now_ms = u64::try_from(now.duration_since(self.relocations.epoch()).as_millis())
            .unwrap_or(u64::MAX);
        let nk = crate::relocation::notify::NotifyKey::new(recipient, route, &f.new_route);
        let decision = self
            .relocations
            .suppression_lock()
            .followed(nk.clone(), now_ms);
        if decision == crate::relocation::notify::Decision::Suppress {
            return false;
        }
        let (operation_id, reply_route_id) = match request {
            Some(h) => (h.operation_id.clone(), h.reply_route_id),
            None => match self.mesh.request_identity() {
                Ok((o, r, _)) => (o, r),
                Err(_) => {
                    // Nothing went: the key must not stay in flight.
                    self.relocations
                        .suppression_lock()
                        .submitted(&nk, false, now_ms);
                    return false;
                }
            },
        };
        let body = zlink_protocol::generated::MessageFollow {
            follow: zlink_protocol::generated::MessageFollowBody {
                source_route: route.clone(),
                target_route: f.new_route.clone(),
                // Every move raises the owner generation by one: how many moves the sender's
                // route is behind (1..=8, the chain bound).
                hop_count: u8::try_from(
                    f.new_route
                        .authority_owner_generation
                        .saturating_sub(route.authority_owner_generation)
                        .clamp(1, crate::relocation::follow::MAX_FOLLOW_HOPS as u64),
                )
                .unwrap_or(1),
                // Saturating u32 diagnostics (wire §3.1).
                queue_count: u32::try_from(queue_count).unwrap_or(u32::MAX),
                queue_bytes: u32::try_from(queue_bytes).unwrap_or(u32::MAX),
                operation_id,
                reply_route_id,
            },
        };
        // Fault injection: the notice is lost on its way (the suppression takes it as sent).
        let lost =
            self.relocations.settings().fault == Some(super::TransferFault::DropFollowNotices);
        let ok = lost
            || self
                .mesh
                .relocation_record(recipient, Leg::Send, CommandBody::MessageFollow(body), None)
                .is_ok();
        if ok && !lost {
            self.relocations
                .follow_notices_sent
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if ok {
            self.relocations
                .recent_recipients_lock()
                .noted(recipient, now_ms);
        }
        let until_ms = u64::try_from(
            f.until
                .saturating_duration_since(self.relocations.epoch())
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        self.relocations
            .suppression_lock()
            .submitted(&nk, ok, until_ms);
        ok && !lost
    }

    /// A unit was just handed over: the peers sent a `messageFollow` lately (for other
    /// objects) get one for each of its objects now, and this node's own cached routes to them
    /// go, instead of each waiting for its first followed record (see
    /// [`RecentRecipients`](crate::relocation::notify::RecentRecipients)). The suppression
    /// table keeps a later followed record from notifying the same peer again.
    fn notice_at_handover(&self, routes: &[(AuthorityKey, RouteFence)]) {
        let now_ms = u64::try_from(
            Instant::now()
                .duration_since(self.relocations.epoch())
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        let window = super::millis(self.relocations.settings().message_follow);
        let peers = self
            .relocations
            .recent_recipients_lock()
            .within(now_ms, window);
        let me = self.mesh.fence();
        for (key, route) in routes {
            let Some(f) = self.relocations.follows_lock().get(key).cloned() else {
                continue;
            };
            self.resolver
                .cache()
                .message_follow(&cache_fence(key.clone(), route));
            for peer in peers.iter().filter(|p| **p != me) {
                if self.send_follow_notice(route, peer, &f, None, 0, 0) {
                    self.relocations
                        .follow_notices_at_handover
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }

    /// A `messageFollow` (50) from the old owner its source route names (checked by the
    /// reactor): drop this node's cached route if it is exactly that one (a newer one stays).
    pub(super) fn on_message_follow(&self, m: &zlink_protocol::generated::MessageFollowBody) {
        self.relocations
            .follow_notice_hops
            .fetch_add(u64::from(m.hop_count), std::sync::atomic::Ordering::Relaxed);
        self.relocations.follow_notice_queued.fetch_add(
            u64::from(m.queue_count),
            std::sync::atomic::Ordering::Relaxed,
        );
        let r = &m.source_route;
        let Ok(key) = AuthorityKey::new(super::store_kind(r.object_kind), &r.object_id) else {
            return;
        };
        if self.resolver.cache().message_follow(&cache_fence(key, r)) {
            self.relocations
                .follow_notices_applied
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// What the authority of a moving unit says (the source's only store access: a read). A
    /// row that names the target is kept in `target_row` (the follow notice's new route).
    async fn authority_view(
        &self,
        key: &AuthorityKey,
        generation: u64,
        aog: u64,
        target: &NodeFence,
        target_row: &mut Option<Box<AuthoritySnapshot>>,
        liveness: bool,
    ) -> AuthorityView {
        let me = self.mesh.fence();
        self.relocations
            .stats
            .authority_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.store.read_authority(key).await {
            Ok(AuthorityRead::Found(a)) => {
                if a.owner_node.rid == target.rid
                    && a.owner_node.lifecycle_generation == target.lifecycle_generation
                {
                    *target_row = Some(a);
                    AuthorityView::Target
                } else if a.owner_node.rid == me.rid
                    && a.owner_node.lifecycle_generation == me.lifecycle_generation
                    && a.object_generation == generation
                    && a.authority_owner_generation == aog
                {
                    AuthorityView::Unchanged {
                        // Not asked: reported live, which the caller's state ignores.
                        target_lease_live: !liveness || self.node_is_live(target).await,
                    }
                } else {
                    AuthorityView::Other
                }
            }
            Ok(AuthorityRead::Missing { .. }) => AuthorityView::Other,
            Err(_) => AuthorityView::ReadFailed,
        }
    }

    /// Whether node lifecycle `node` still publishes its descriptor (descriptors disappear
    /// with their host's lease). A store that does not answer counts as live: a dead target
    /// must be proven.
    async fn node_is_live(&self, node: &NodeFence) -> bool {
        self.relocations
            .stats
            .target_liveness_checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mesh = self.mesh.with_descriptor(|d| d.mesh_name.clone());
        match self
            .store
            .list_descriptors(DescriptorKind::MeshNode, &mesh)
            .await
        {
            Ok(list) => list.iter().any(|d| {
                d.key.rid == node.rid && d.lifecycle_generation == node.lifecycle_generation
            }),
            Err(_) => true,
        }
    }
}

/// Forward a relayed terminal to the caller that waits for it here.
fn forward(relayed: oneshot::Receiver<Result<TypedPayload, CallError>>, reply: Reply) {
    tokio::spawn(async move {
        let r = relayed.await.unwrap_or_else(|_| {
            Err(CallError::new(
                ErrorKind::Unavailable,
                "the relayed terminal of a moved request was lost",
            ))
        });
        let _ = reply.send(r);
    });
}

fn stayed_or_failed(e: &CallError) -> Moved {
    Moved {
        outcome: match e.kind() {
            ErrorKind::Unavailable => UnitOutcome::Stayed(StayReason::NoTarget),
            _ => UnitOutcome::Failed(format!("CaptureFailed: {}", e.detail())),
        },
        follow_until: None,
    }
}

/// Runs `f` on drop unless disarmed.
struct Guard<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Guard<F> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for Guard<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

fn scopeguard<F: FnOnce()>(f: F) -> Guard<F> {
    Guard(Some(f))
}

/// The largest chunk to send (wire §9 "Relocation state chunk"): the smallest of
/// `RelocationPayloadChunkLimit`, the target's admitted receive limit and the in-flight budgets
/// that are on. A target that dialed this node announced no limit (only an `admit` carries
/// one): ours, it is taken to receive the default 256 KiB, which every zlink node admits.
fn effective_chunk_limit(s: &super::RelocationSettings, peer: Option<u32>) -> usize {
    let peer = peer.map_or(
        crate::config::defaults::RELOCATION_PAYLOAD_CHUNK_LIMIT,
        u64::from,
    );
    let mut limit = (s.chunk_limit as u64).min(peer);
    for budget in [s.in_flight_budget, s.node_in_flight_budget] {
        if budget > 0 {
            limit = limit.min(budget);
        }
    }
    usize::try_from(limit.max(1)).unwrap_or(usize::MAX)
}

/// ApplicationSignaled: prepare the move of `p` and wait until a job of it that called
/// `relocation_ready().defer()` ended normally (it is held there, and the boundary is taken);
/// `false` at the deadline (the move is withdrawn, and a boundary reached just then released).
async fn wait_boundary(p: &Part, deadline: Instant) -> bool {
    p.obj.prepare_relocation(true);
    if tokio::time::timeout_at(deadline.into(), p.obj.relocation_boundary())
        .await
        .is_ok()
    {
        p.obj.take_boundary();
        true
    } else {
        p.obj.prepare_relocation(false);
        false
    }
}

/// Wait until any of `intakes` holds something.
async fn any_arrived(intakes: &[Arc<Intake>]) {
    match intakes {
        [] => std::future::pending().await,
        // The common unit (one object): no boxes and no vector for each loop turn that
        // rebuilds this future.
        [one] => one.arrived().await,
        _ => {
            let _ =
                futures::future::select_all(intakes.iter().map(|i| Box::pin(i.arrived()))).await;
        }
    }
}

/// The route cache's fence of `key` for the wire route `r` (what a `messageFollow` drops).
fn cache_fence(key: AuthorityKey, r: &RouteFence) -> crate::routing::RouteFence {
    crate::routing::RouteFence {
        key,
        object_generation: r.object_generation,
        authority_owner_generation: r.authority_owner_generation,
        owner_rid: r.target_node.rid.to_string(),
        owner_lifecycle_generation: r.target_node.lifecycle_generation,
        owner_lease_generation: r.owner_lease_generation,
    }
}
