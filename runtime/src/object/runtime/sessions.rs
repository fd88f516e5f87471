//! The object runtime's half of STREAM session binding (issue 19 items 3–5; routing `000_…`
//! §3.1–§3.2): the **session owner** (bind, relay on the stored route, push delivery,
//! disconnect notices) and the **Actor owner** (bind and relay checks, the Actor's one current
//! binding, push on it). The rules are the pure [`BindingTable`] and
//! [`verdict`](crate::session::verdict) functions; this is their shell.
//!
//! Nothing here reads the Location Store: a bind uses the route its [`ActorRef`] names, and
//! relays, pushes and notices use the stored binding route (routing §3.2).

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use zlink_protocol::generated::{
    BoundSessionReplaced, BoundSessionSend, CommandBody, SealOutcome, SessionRef,
    SessionRelocationRoute, SessionRelocationSeal, SessionRelocationSealed, SessionRouteAction,
};
use zlink_protocol::json::JsonMessage;
use zlink_session::{CloseReason, SessionId};

use super::*;
use crate::mesh::handler::BoxFuture;
use crate::object::actor_ref::ActorRef;
use crate::relocation::session_legs::{LegAction, LegEvent, SessionLegs};
use crate::session::SessionCtx;
use crate::session::bindings::{
    BeginError, BindingRoute, BindingTable, Completed, needs_tombstone,
};
use crate::session::router::{SessionRouter, packet_from_typed};
use crate::session::seal::{
    BindingIdentity, Held, Ignored, SealAction, SealEvent, SealMachine, SealState,
};
use crate::session::verdict::{BindFacts, LiveFact, bind_verdict, relay_verdict};

/// How long a bind (command 38) may take end to end by default (**ours**;
/// [`ObjectRuntime::set_bind_timeout`]).
pub const BIND_TIMEOUT: Duration = Duration::from_secs(10);

/// A replaced session closes this long after its `on_binding_replaced` callback ended (wire
/// §3.2, "callback terminal 뒤 100 ms").
pub const REPLACED_CLOSE_DELAY: Duration = Duration::from_millis(100);

/// The notice each bound Actor gets, once, when its session closes (issue 19 item 5): a
/// one-way relay on the binding route, queued work of the Actor like any message (it moves
/// with the Actor). Admitting it ends the Actor's binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disconnected {
    /// The closed session's id on its owner node.
    pub session_id: u64,
    /// Why it closed (a [`CloseReason`] name, e.g. `"ClientClosed"`).
    pub reason: String,
    /// The session owner's RID (session ids are per owner node; empty from an older sender).
    #[serde(default)]
    pub owner_rid: String,
    /// The session owner's lifecycle generation (0 from an older sender).
    #[serde(default)]
    pub owner_lifecycle_generation: u64,
    /// The binding generation the notice ends (0 from an older sender: any).
    #[serde(default)]
    pub binding_generation: u64,
}

impl JsonMessage for Disconnected {
    const PACKET_NAME: &'static str = "zlink.session.Disconnected";
}

/// The notice a bound Actor gets, once, when its session unbinds it
/// ([`SessionCtx::unbind`](crate::session::SessionCtx::unbind)): like [`Disconnected`], a
/// one-way relay on the binding route that is queued work of the Actor; admitting it ends the
/// Actor's binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unbound {
    /// The session's id on its owner node.
    pub session_id: u64,
    /// The session owner's RID.
    #[serde(default)]
    pub owner_rid: String,
    /// The session owner's lifecycle generation.
    #[serde(default)]
    pub owner_lifecycle_generation: u64,
    /// The binding generation the notice ends.
    #[serde(default)]
    pub binding_generation: u64,
}

impl JsonMessage for Unbound {
    const PACKET_NAME: &'static str = "zlink.session.Unbound";
}

/// **(ours)** A rebind's housekeeping (issue 19 item 4; wire v1 has no command for it): the
/// session owner asks the **previous** Actor owner to forget the binding identity a rebind of
/// the same session to another owner or incarnation retired. Sent node-direct (17 → 20) to
/// exactly that owner lifecycle, and acknowledged before the rebind's terminal; the owner
/// removes the Actor incarnation's binding only when it is exactly this identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingTombstone {
    /// The Actor whose binding is retired.
    pub actor_id: String,
    /// The incarnation the retired binding was made on.
    pub object_generation: u64,
    /// The session's id on its owner node (the sender).
    pub session_id: u64,
    /// The retired binding's generation.
    pub binding_generation: u64,
}

impl JsonMessage for BindingTombstone {
    const PACKET_NAME: &'static str = "zlink.session.BindingTombstone";
}

/// The previous Actor owner's answer to a [`BindingTombstone`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingTombstoneAck {
    /// Whether the identity was the incarnation's current binding and is gone now (`false`:
    /// nothing here matched it, e.g. the incarnation ended or another binding replaced it).
    pub removed: bool,
}

impl JsonMessage for BindingTombstoneAck {
    const PACKET_NAME: &'static str = "zlink.session.BindingTombstoneAck";
}

/// How a rebind's tombstone ended, seen from the session owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Burial {
    /// The previous owner answered (or is this node).
    Acked,
    /// The previous owner lifecycle is not admitted here any more: it holds nothing to remove,
    /// which counts as acknowledged.
    OwnerGone,
    /// No answer by the rebind's deadline, or an error: warned and counted; the identity ends
    /// with that incarnation (relays on it are refused by the relay checks).
    Unacked,
}

/// The session identity a `Disconnected` or `Unbound` notice names.
#[derive(Deserialize)]
struct NoticeSession {
    session_id: u64,
    #[serde(default)]
    owner_rid: String,
    #[serde(default)]
    owner_lifecycle_generation: u64,
    #[serde(default)]
    binding_generation: u64,
}

/// Whether notice `n` names binding `b`: its session owner, session and binding generation
/// (a field an older sender left out matches any). A late notice of an earlier binding of the
/// same session leaves a newer one.
fn notice_names(n: &NoticeSession, b: &SessionRef) -> bool {
    b.session_id == n.session_id
        && (n.binding_generation == 0 || b.binding_generation == n.binding_generation)
        && (n.owner_rid.is_empty()
            || (b.owner_node.rid == n.owner_rid
                && b.owner_node.lifecycle_generation == n.owner_lifecycle_generation))
}

/// Whether `payload` is a notice that ends a binding (`Disconnected`, `Unbound`).
fn ends_binding(payload: &TypedPayload) -> bool {
    let name = &*payload.packet_name;
    name == Disconnected::PACKET_NAME || name == Unbound::PACKET_NAME
}

/// Counters of the session half of a runtime (the host exports them on `/metrics`).
#[derive(Debug, Default)]
pub struct SessionStats {
    /// Binds this node accepted as the Actor owner.
    pub binds_accepted: AtomicU64,
    /// Binds this node refused as the Actor owner.
    pub binds_refused: AtomicU64,
    /// Binds of this node's sessions that switched their route.
    pub binds_completed: AtomicU64,
    /// Relays this node's sessions submitted on stored routes.
    pub relays: AtomicU64,
    /// Relays this node refused as the Actor owner (requests answered with the refusal).
    pub relays_refused: AtomicU64,
    /// One-way relays this node dropped as the Actor owner (no one to answer).
    pub relay_drops: AtomicU64,
    /// Binding routes this node's sessions dropped after a refused relay or push.
    pub routes_dropped: AtomicU64,
    /// Pushes (36) handed to a client session here.
    pub pushes: AtomicU64,
    /// Pushes that matched no current binding here (dropped).
    pub push_drops: AtomicU64,
    /// `zlink.session.Disconnected` notices sent to bound Actors.
    pub disconnect_notices: AtomicU64,
    /// `zlink.session.Unbound` notices sent to Actors their session unbound.
    pub unbind_notices: AtomicU64,
    /// Seals (42) this node installed (`sealed` answers, repeats of one relocation included).
    pub seals: AtomicU64,
    /// 42s answered `notCurrent` or `sessionClosed`.
    pub seals_refused: AtomicU64,
    /// Relays held in a seal.
    pub relays_held: AtomicU64,
    /// Held requests that passed their deadline in a seal (ended `DeadlineExceeded`, unsent).
    pub held_expired: AtomicU64,
    /// Route switches (44 `route`) applied.
    pub routes_applied: AtomicU64,
    /// Aborts (44 `abort`) applied.
    pub aborts_applied: AtomicU64,
    /// 44s that changed nothing (late, duplicate or mismatched; warned).
    pub routes_ignored: AtomicU64,
    /// Sessions closed `SealTimeout` (no matching 44 in time).
    pub seal_timeouts: AtomicU64,
    /// Replace notices (51) this node sent as the Actor owner.
    pub replaced_sent: AtomicU64,
    /// Replace notices applied to a session of this node.
    pub replaced_applied: AtomicU64,
    /// Replace notices that matched no current binding or came from another node (dropped).
    pub replaced_ignored: AtomicU64,
    /// Bound Actors that moved away from here with their session sealed (43 `sealed`; this
    /// node as the relocation source).
    pub legs_sealed: AtomicU64,
    /// Bound Actors that moved without a session leg (43 `notCurrent` / `sessionClosed`, or
    /// the session owner unreachable): they arrive unbound.
    pub legs_off: AtomicU64,
    /// Units that failed because a session owner did not answer their 42 in time.
    pub leg_timeouts: AtomicU64,
    /// 44 `abort`s sent (a unit ended before relay-ready with a session sealed).
    pub aborts_sent: AtomicU64,
    /// 44 `route`s sent (this node as the relocation target, dispatch open).
    pub routes_sent: AtomicU64,
    /// 43s that matched no waiting leg (late or repeated).
    pub sealed_unmatched: AtomicU64,
    /// Rebind tombstones this node's sessions sent (or applied here, for a previous owner
    /// that is this node).
    pub tombstones_sent: AtomicU64,
    /// Tombstones whose previous owner answered.
    pub tombstones_acked: AtomicU64,
    /// Tombstones not sent because the previous owner lifecycle is not admitted (counted as
    /// acknowledged).
    pub tombstones_owner_gone: AtomicU64,
    /// Tombstones without an answer by the rebind's deadline (warned).
    pub tombstones_unacked: AtomicU64,
    /// Tombstones this node applied as the previous Actor owner (an exact identity removed).
    pub tombstones_applied: AtomicU64,
    /// Tombstones this node answered without a change (no exactly matching binding).
    pub tombstones_ignored: AtomicU64,
    /// Tombstones refused as malformed (a body that does not decode, an invalid Actor ID).
    pub tombstones_refused: AtomicU64,
}

impl SessionStats {
    /// Every counter with its name (the host's `zlink_session_events_total{event}`).
    #[must_use]
    pub fn events(&self) -> Vec<(&'static str, u64)> {
        [
            ("binds_accepted", &self.binds_accepted),
            ("binds_refused", &self.binds_refused),
            ("binds_completed", &self.binds_completed),
            ("relays", &self.relays),
            ("relays_refused", &self.relays_refused),
            ("relay_drops", &self.relay_drops),
            ("routes_dropped", &self.routes_dropped),
            ("pushes", &self.pushes),
            ("push_drops", &self.push_drops),
            ("disconnect_notices", &self.disconnect_notices),
            ("unbind_notices", &self.unbind_notices),
            ("seals", &self.seals),
            ("seals_refused", &self.seals_refused),
            ("relays_held", &self.relays_held),
            ("held_expired", &self.held_expired),
            ("routes_applied", &self.routes_applied),
            ("aborts_applied", &self.aborts_applied),
            ("routes_ignored", &self.routes_ignored),
            ("seal_timeouts", &self.seal_timeouts),
            ("replaced_sent", &self.replaced_sent),
            ("replaced_applied", &self.replaced_applied),
            ("replaced_ignored", &self.replaced_ignored),
            ("legs_sealed", &self.legs_sealed),
            ("legs_off", &self.legs_off),
            ("leg_timeouts", &self.leg_timeouts),
            ("aborts_sent", &self.aborts_sent),
            ("routes_sent", &self.routes_sent),
            ("sealed_unmatched", &self.sealed_unmatched),
            ("tombstones_sent", &self.tombstones_sent),
            ("tombstones_acked", &self.tombstones_acked),
            ("tombstones_owner_gone", &self.tombstones_owner_gone),
            ("tombstones_unacked", &self.tombstones_unacked),
            ("tombstones_applied", &self.tombstones_applied),
            ("tombstones_ignored", &self.tombstones_ignored),
            ("tombstones_refused", &self.tombstones_refused),
        ]
        .into_iter()
        .map(|(name, c)| (name, c.load(Ordering::Relaxed)))
        .collect()
    }
}

/// One bound Actor of a unit on the move: a session leg (see
/// [`crate::relocation::session_legs`]).
#[derive(Debug, Clone)]
pub(super) struct LegRef {
    /// The unit's part it is.
    pub(super) part: usize,
    /// The Actor's binding when the move started.
    pub(super) session: SessionRef,
    pub(super) actor_id: String,
    pub(super) object_generation: u64,
}

/// A 42 waiting for its 43: (relocation, session owner RID and lifecycle, session id, binding
/// generation). Session ids and binding generations are per session owner, so the owner is
/// part of the key.
type SealAnswerKey = (
    [u8; 16],
    zlink_protocol::shared_str::SharedStr,
    u64,
    u64,
    u64,
);

/// Where a unit's coordinator hears its legs' 43s: (leg, outcome).
type LegAnswers = mpsc::UnboundedSender<(usize, SealOutcome)>;

/// A relay waiting in a seal, or behind the relays a seal released.
pub(super) struct HeldRelay {
    payload: TypedPayload,
    metadata: Option<Metadata>,
    timeout: Option<Duration>,
    /// A request's deadline, fixed when the session submitted it (a release sends only what is
    /// left of it).
    deadline: Option<std::time::Instant>,
    /// A request's terminal (a one-way relay was accepted when it was held).
    reply: Option<oneshot::Sender<Result<Option<TypedPayload>, CallError>>>,
}

impl HeldRelay {
    fn fail(self, e: CallError) {
        if let Some(r) = self.reply {
            let _ = r.send(Err(e));
        }
    }
}

type BindingKey = (SessionId, String);

/// The session owner's state: the binding table and each open session's context.
#[derive(Default)]
pub(super) struct SessionHub {
    table: BindingTable,
    ctxs: HashMap<SessionId, SessionCtx>,
    /// The relocation seal of each binding a 42 named (issue 19 item 6).
    seals: HashMap<BindingKey, SealMachine<HeldRelay>>,
    /// Bindings whose released relays are still being submitted, in order, by the release task
    /// with that id: later relays of the binding queue behind them.
    releasing: HashMap<BindingKey, (u64, VecDeque<HeldRelay>)>,
    /// Ids of release tasks.
    last_release: u64,
    /// This node's 42s (as a relocation source) waiting for their 43: the leg, and where the
    /// coordinator waits.
    seal_answers: HashMap<SealAnswerKey, (usize, LegAnswers)>,
    /// Relays of each binding taken off its route (or a release queue) and not yet handed to
    /// the connection or the local object: a 43 `sealed` goes out only behind them (wire §9:
    /// "43 is queued behind every relay already submitted to that Actor").
    submitting: HashMap<BindingKey, usize>,
    /// 43s waiting for those submissions, with where each goes.
    deferred_seals: HashMap<BindingKey, Vec<(SealAnswerTo, SessionRelocationSealed)>>,
}

/// Where a 43 goes: the relocation source on another node, or this node's own coordinator
/// (leg `.1` of the waiting unit).
pub(super) enum SealAnswerTo {
    Remote(NodeFence),
    Local(LegAnswers, usize),
}

/// One relay of binding `key` being submitted (see [`SessionHub::submitting`]); dropping it
/// ends the submission and sends the 43s that waited for it.
pub(super) struct Submitting<S: ObjectStore> {
    inner: Arc<Inner<S>>,
    key: BindingKey,
}

impl<S: ObjectStore> Drop for Submitting<S> {
    fn drop(&mut self) {
        let deferred = {
            let mut hub = self.inner.hub();
            match hub.submitting.get_mut(&self.key) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    Vec::new()
                }
                Some(_) => {
                    hub.submitting.remove(&self.key);
                    let mut deferred = hub.deferred_seals.remove(&self.key).unwrap_or_default();
                    // The seal may be gone meanwhile (the relay found the route lost, or the
                    // session closed): then the answer is no longer `sealed`.
                    if !hub.seals.get(&self.key).is_some_and(SealMachine::is_sealed) {
                        let outcome = if hub.table.is_open(self.key.0) {
                            SealOutcome::NotCurrent
                        } else {
                            SealOutcome::SessionClosed
                        };
                        for (_, answer) in &mut deferred {
                            answer.outcome = outcome;
                        }
                    }
                    deferred
                }
                None => Vec::new(),
            }
        };
        for (to, answer) in deferred {
            self.inner.send_seal_answer(to, answer);
        }
    }
}

impl SessionHub {
    /// Forget the seal and any release queue of binding `key` (its route was dropped or
    /// replaced, or its session closed): the relays they held, to fail outside the lock.
    fn forget_seal(&mut self, key: &BindingKey) -> Vec<HeldRelay> {
        let mut out = Vec::new();
        if let Some(mut m) = self.seals.remove(key) {
            for a in m.handle(SealEvent::SessionClosed, std::time::Instant::now()) {
                match a {
                    SealAction::Failed(h) | SealAction::Submit(h) | SealAction::Expired(h) => {
                        out.push(h);
                    }
                    SealAction::Answer(_)
                    | SealAction::SwitchRoute
                    | SealAction::CloseSession
                    | SealAction::Ignored(_) => {}
                }
            }
        }
        if let Some((_, q)) = self.releasing.remove(key) {
            out.extend(q);
        }
        out
    }
}

fn fail_all(relays: Vec<HeldRelay>, why: &str) {
    for r in relays {
        r.fail(CallError::new(ErrorKind::Unavailable, why.to_owned()));
    }
}

/// Errors that mean the route a relay or push used is gone for good (the binding is lost).
fn route_lost(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::StaleRoute
            | ErrorKind::InvalidOperation
            | ErrorKind::NotFound
            | ErrorKind::Unavailable
    )
}

impl<S: ObjectStore> Inner<S> {
    fn hub(&self) -> MutexGuard<'_, SessionHub> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn session_ref(&self, id: SessionId, binding_generation: u64) -> SessionRef {
        SessionRef {
            owner_node: self.mesh.fence(),
            session_id: id.get(),
            binding_generation,
        }
    }

    // ---- Actor owner -------------------------------------------------------------------

    /// What the live table holds for `key`: the handed-over marks and temporary queues are
    /// read before the live lock; the moving mark is read under it (nothing takes the live
    /// lock while holding that mark, so the order cannot invert).
    fn live_fact(&self, key: &AuthorityKey) -> LiveFact {
        let handed = self.relocations.handed();
        let arriving = self.relocations.temporary().contains_key(key);
        let live = self.live();
        match live.get(key) {
            None if arriving => LiveFact::Moving,
            None => LiveFact::NotLive,
            Some(e) => {
                let (g, aog) = (e.generation, e.authority_owner_generation);
                if handed
                    .iter()
                    .any(|(k, hg, ha)| k == key && *hg == g && *ha == aog)
                {
                    LiveFact::HandedOver
                } else if self.relocations.is_moving(key, g, aog) {
                    LiveFact::Moving
                } else {
                    LiveFact::Live {
                        generation: g,
                        authority_owner_generation: aog,
                    }
                }
            }
        }
    }

    /// Accept (or refuse) the bind of `session` to the Actor incarnation `route` names, as its
    /// owner: on success the SessionRef is the Actor's one current binding. Returns the
    /// binding it replaced.
    ///
    /// # Errors
    /// The closed refusals of [`bind_verdict`].
    pub(super) fn bind_here(
        &self,
        session: &SessionRef,
        route: &RouteFence,
        deadline_unix_ms: u64,
    ) -> Result<Option<SessionRef>, CallError> {
        let key = AuthorityKey::new(StoreKind::Actor, &route.object_id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let me = self.mesh.fence();
        let facts = BindFacts {
            shutting_down: self.mesh.is_shutting_down(),
            admission_open: self.mesh.admission_open(),
            me: &me,
            lease_generation: self.mesh.owner_token().map(|t| t.lease_generation),
            now_unix_ms: now_unix_ms(),
            live: self.live_fact(&key),
        };
        let refused = |why: &str, kind| {
            self.session_stats
                .binds_refused
                .fetch_add(1, Ordering::Relaxed);
            CallError::new(
                kind,
                format!(
                    "bind of {} (generation {}) on {}: {why}",
                    route.object_id,
                    route.object_generation,
                    self.mesh.rid()
                ),
            )
        };
        bind_verdict(route, deadline_unix_ms, &facts).map_err(|r| refused(r.why, r.kind))?;
        // Recorded under the live lock, on exactly the incarnation checked.
        let mut live = self.live();
        let Some(e) = live.get_incarnation_mut(&key, route.object_generation) else {
            return Err(refused("the Actor closed meanwhile", ErrorKind::NotFound));
        };
        if e.authority_owner_generation != route.authority_owner_generation {
            return Err(refused("the Actor moved meanwhile", ErrorKind::StaleRoute));
        }
        // A move that started since the verdict reads the binding under this same lock after
        // marking the Actor moving: either it sees this bind, or this bind sees the mark.
        if self
            .relocations
            .is_moving(&key, e.generation, e.authority_owner_generation)
        {
            return Err(refused(
                "the Actor is being moved; bind again with a fresh ActorRef",
                ErrorKind::Unavailable,
            ));
        }
        let previous = e.binding.replace(session.clone());
        let aog = e.authority_owner_generation;
        drop(live);
        self.session_stats
            .binds_accepted
            .fetch_add(1, Ordering::Relaxed);
        if let Some(p) = previous
            .as_ref()
            .filter(|p| (&p.owner_node, p.session_id) != (&session.owner_node, session.session_id))
        {
            // Replace (wire §3.2): another session held the binding. Unawaited; it neither
            // delays nor undoes this bind's terminal.
            let body = BoundSessionReplaced {
                actor_fence: RouteFence {
                    owner_lease_generation: facts.lease_generation.unwrap_or(1),
                    authority_owner_generation: aog,
                    target_node: me.clone(),
                    ..route.clone()
                },
                previous_session: p.clone(),
            };
            self.session_stats
                .replaced_sent
                .fetch_add(1, Ordering::Relaxed);
            if p.owner_node == me {
                self.on_replaced(&me, &body);
            } else if let Err(e) = self
                .mesh
                .session_control(&p.owner_node, CommandBody::BoundSessionReplaced(body))
            {
                tracing::debug!(error = %e, "boundSessionReplaced not sent (its session owner is gone)");
            }
        }
        Ok(previous)
    }

    /// Command 51 from `source`: applied only when `source` is the Actor owner the fence names
    /// and the session's current route for that Actor is exactly the retired binding; the
    /// route is dropped, `on_binding_replaced` runs, and the session closes `Replaced` 100 ms
    /// after it ended.
    pub(super) fn on_replaced(&self, source: &NodeFence, b: &BoundSessionReplaced) {
        let p = &b.previous_session;
        let actor_id = &b.actor_fence.object_id;
        let ctx = SessionId::new(p.session_id)
            .filter(|_| *source == b.actor_fence.target_node && p.owner_node == self.mesh.fence())
            .and_then(|id| {
                let mut hub = self.hub();
                let current = hub.table.route(id, actor_id).is_some_and(|r| {
                    r.binding_generation == p.binding_generation
                        && r.actor.object_generation() == b.actor_fence.object_generation
                });
                if !current {
                    return None;
                }
                hub.table.drop_route(id, actor_id, p.binding_generation);
                let held = hub.forget_seal(&(id, actor_id.clone()));
                hub.ctxs.get(&id).cloned().map(|c| (c, held))
            });
        let Some((ctx, held)) = ctx else {
            self.session_stats
                .replaced_ignored
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(session = p.session_id, actor = %actor_id, "boundSessionReplaced matched no current binding");
            return;
        };
        fail_all(held, "the binding was replaced by another session's");
        self.session_stats
            .replaced_applied
            .fetch_add(1, Ordering::Relaxed);
        let actor_id = actor_id.clone();
        tokio::spawn(async move { ctx.replaced(actor_id, REPLACED_CLOSE_DELAY).await });
    }

    /// A framework node-direct request (`zlink.session.*`) from `source`, answered here.
    ///
    /// # Errors
    /// `NotFound` for a name this runtime does not serve; as [`Inner::on_tombstone`].
    pub(super) fn framework_request(
        &self,
        source: &NodeFence,
        payload: &TypedPayload,
    ) -> Result<TypedPayload, CallError> {
        if &*payload.packet_name != BindingTombstone::PACKET_NAME {
            return Err(CallError::new(
                ErrorKind::NotFound,
                format!(
                    "node {} serves no framework request {:?}",
                    self.mesh.rid(),
                    &*payload.packet_name
                ),
            ));
        }
        let t: BindingTombstone = decode_json(payload).inspect_err(|_| {
            self.session_stats
                .tombstones_refused
                .fetch_add(1, Ordering::Relaxed);
        })?;
        let removed = self.on_tombstone(source, &t)?;
        encode_json(&BindingTombstoneAck { removed })
    }

    /// A rebind tombstone from session owner `source`, as the previous Actor owner: the Actor
    /// incarnation's binding is removed when it is exactly the identity named (that session
    /// owner, session and binding generation); whether it was.
    ///
    /// The identity's session owner is always `source`: a node can retire only its own
    /// sessions' bindings.
    ///
    /// # Errors
    /// `InvalidOperation` (counted, nothing changed) for an invalid Actor ID.
    pub(super) fn on_tombstone(
        &self,
        source: &NodeFence,
        t: &BindingTombstone,
    ) -> Result<bool, CallError> {
        let identity = SessionRef {
            owner_node: source.clone(),
            session_id: t.session_id,
            binding_generation: t.binding_generation,
        };
        let Ok(key) = AuthorityKey::new(StoreKind::Actor, &t.actor_id) else {
            self.session_stats
                .tombstones_refused
                .fetch_add(1, Ordering::Relaxed);
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!("tombstone names no valid Actor ID {:?}", t.actor_id),
            ));
        };
        let removed = {
            let mut live = self.live();
            match live.get_incarnation_mut(&key, t.object_generation) {
                Some(e) if e.binding.as_ref() == Some(&identity) => {
                    e.binding = None;
                    true
                }
                Some(_) | None => false,
            }
        };
        let counter = if removed {
            &self.session_stats.tombstones_applied
        } else {
            &self.session_stats.tombstones_ignored
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(removed)
    }

    /// Target admission of a session relay (24/25 with a bound-session tail): the route is
    /// admitted as any Actor route, then the Actor's live incarnation and current binding must
    /// be the ones the relay names. A `zlink.session.Disconnected` notice that is admitted
    /// ends the binding in the same step.
    ///
    /// # Errors
    /// As [`Inner::admit`]; then [`relay_verdict`]'s refusals.
    pub(super) fn admit_relay(
        &self,
        route: &RouteFence,
        tail: &SessionRef,
        payload: &TypedPayload,
    ) -> Result<Arc<dyn LiveObject>, CallError> {
        let obj = self.admit(route)?;
        let key = AuthorityKey::new(StoreKind::Actor, &route.object_id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let mut live = self.live();
        // The live incarnation, whichever it is: the verdict compares it with the route's.
        let live_generation = live.get(&key).map(|e| e.generation);
        let Some(e) = live_generation.and_then(|g| live.get_incarnation_mut(&key, g)) else {
            return Err(CallError::new(
                ErrorKind::StaleRoute,
                format!("relay to {}: the Actor is not live here", route.object_id),
            ));
        };
        relay_verdict(
            route.object_generation,
            tail,
            e.generation,
            e.binding.as_ref(),
        )
        .map_err(|r| CallError::new(r.kind, format!("relay to {}: {}", route.object_id, r.why)))?;
        if ends_binding(payload) {
            e.binding = None;
        }
        Ok(obj)
    }

    /// A `Disconnected` / `Unbound` notice that reached Actor `actor_id` without its
    /// bound-session tail (relayed by the source of a move, or followed after it): it ends the
    /// Actor's binding here if that binding is the session it names.
    pub(super) fn notice_without_tail(&self, actor_id: &str, payload: &TypedPayload) {
        if !ends_binding(payload) {
            return;
        }
        let Ok(n) = decode_json::<NoticeSession>(payload) else {
            return;
        };
        let Ok(key) = AuthorityKey::new(StoreKind::Actor, actor_id) else {
            return;
        };
        let mut live = self.live();
        let Some(g) = live.get(&key).map(|e| e.generation) else {
            return;
        };
        if let Some(e) = live.get_incarnation_mut(&key, g)
            && e.binding.as_ref().is_some_and(|b| notice_names(&n, b))
        {
            e.binding = None;
        }
    }

    /// Push `payload` from incarnation `generation` of Actor `key` to its bound session
    /// (command 36; no metadata). A session owner that is gone ends the binding.
    ///
    /// # Errors
    /// `InvalidOperation` when the Actor has no binding; `Unavailable` when its session owner
    /// cannot be reached (the binding is dropped); `ShuttingDown`.
    pub(super) async fn push(
        &self,
        key: &AuthorityKey,
        generation: u64,
        payload: TypedPayload,
    ) -> Result<(), CallError> {
        let (actor_id, session) = {
            let live = self.live();
            let session = live
                .get_incarnation(key, generation)
                .and_then(|e| e.binding.clone());
            (
                key_parts(key).map(|(_, id)| id).unwrap_or_default(),
                session,
            )
        };
        let Some(session) = session else {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!("{actor_id} is bound to no session"),
            ));
        };
        let me = self.mesh.fence();
        let out = if session.owner_node == me {
            if self.deliver_push(&session, &actor_id, generation, payload) {
                Ok(())
            } else {
                Err(CallError::new(
                    ErrorKind::Unavailable,
                    format!("session {} is closed", session.session_id),
                ))
            }
        } else {
            let body = BoundSessionSend {
                session: session.clone(),
                actor_id: actor_id.clone(),
                object_generation: generation,
            };
            self.mesh.bound_session_send(body, payload).await
        };
        if let Err(e) = &out
            && e.kind() == ErrorKind::Unavailable
        {
            // The session owner is gone (or the session is): the binding ends here.
            let mut live = self.live();
            if let Some(e) = live.get_incarnation_mut(key, generation)
                && e.binding.as_ref() == Some(&session)
            {
                e.binding = None;
            }
        }
        out
    }

    /// The Actor incarnation's current binding.
    pub(super) fn binding_of(&self, key: &AuthorityKey, generation: u64) -> Option<SessionRef> {
        self.live()
            .get_incarnation(key, generation)
            .and_then(|e| e.binding.clone())
    }

    // ---- Session owner -----------------------------------------------------------------

    /// Hand a push to its client session if it matches the session's current route for that
    /// Actor (the sender node is not compared); whether it was.
    pub(super) fn deliver_push(
        &self,
        session: &SessionRef,
        actor_id: &str,
        object_generation: u64,
        payload: TypedPayload,
    ) -> bool {
        let delivered = session.owner_node == self.mesh.fence()
            && SessionId::new(session.session_id).is_some_and(|id| {
                let hub = self.hub();
                hub.table
                    .accepts_push(id, session.binding_generation, actor_id, object_generation)
                    && hub
                        .ctxs
                        .get(&id)
                        .is_some_and(|ctx| ctx.send_packet(packet_from_typed(&payload)).is_ok())
            });
        let counter = if delivered {
            &self.session_stats.pushes
        } else {
            &self.session_stats.push_drops
        };
        counter.fetch_add(1, Ordering::Relaxed);
        delivered
    }

    /// Bind session `id` to `actor` (see [`SessionRouter::bind`]).
    async fn bind_session(
        &self,
        id: SessionId,
        actor: ActorRef,
    ) -> Result<BindingRoute, CallError> {
        let generation = self
            .hub()
            .table
            .begin(id, actor.actor_id())
            .map_err(|e| match e {
                BeginError::SessionClosed => {
                    CallError::new(ErrorKind::Unavailable, format!("session {id} is closed"))
                }
                BeginError::Exhausted => CallError::new(
                    ErrorKind::GenerationExhausted,
                    "binding generations of this node lifecycle are used up",
                ),
            })?;
        let session = self.session_ref(id, generation);
        let started = std::time::Instant::now();
        let bind_timeout = Duration::from_millis(self.bind_timeout_ms.load(Ordering::Relaxed));
        let result = if *actor.owner() == self.mesh.fence() {
            let deadline = now_unix_ms().saturating_add(millis(bind_timeout));
            self.bind_here(&session, actor.route(), deadline)
                .map(|_| ())
        } else {
            self.mesh
                .session_bind(&session, actor.route(), bind_timeout)
                .await
        };
        if let Err(e) = result {
            self.hub().table.abandon(id, actor.actor_id(), generation);
            if e.kind() == ErrorKind::DeadlineExceeded && *actor.owner() != self.mesh.fence() {
                // Its owner may still take the 38: the tombstone follows it on the same
                // connection and retires that identity behind it.
                self.bury_later(id, actor, generation);
            }
            return Err(e);
        }
        let (done, held) = {
            let mut hub = self.hub();
            let done = hub.table.complete(id, actor.clone(), generation);
            // A seal of the replaced binding no longer applies.
            let held = match &done {
                Completed::Switched { previous: Some(_) } => {
                    hub.forget_seal(&(id, actor.actor_id().to_owned()))
                }
                Completed::Switched { previous: None }
                | Completed::Superseded
                | Completed::SessionClosed => Vec::new(),
            };
            (done, held)
        };
        fail_all(held, "the binding was made again while sealed");
        match done {
            Completed::Switched { previous } => {
                if let Some(p) = previous.filter(|p| needs_tombstone(p, &actor)) {
                    // The previous Actor owner still holds the retired identity: it is told
                    // to forget it before this bind's terminal.
                    let left = bind_timeout.saturating_sub(started.elapsed());
                    self.bury(id, &p, left).await;
                }
                self.session_stats
                    .binds_completed
                    .fetch_add(1, Ordering::Relaxed);
                Ok(BindingRoute {
                    actor,
                    binding_generation: generation,
                })
            }
            Completed::Superseded => {
                let e = CallError::new(
                    ErrorKind::Conflict,
                    format!(
                        "a later bind of {} on session {id} overtook this one",
                        actor.actor_id()
                    ),
                );
                // Its owner recorded this identity; the session never uses it.
                self.bury_later(id, actor, generation);
                Err(e)
            }
            Completed::SessionClosed => {
                // The Actor holds a binding to a session that closed while it was made: it
                // gets the notice the other routes of the session got.
                let route = BindingRoute {
                    actor,
                    binding_generation: generation,
                };
                self.notify_disconnected(id, "Closed", route);
                Err(CallError::new(
                    ErrorKind::Unavailable,
                    format!("session {id} closed while the bind was in flight"),
                ))
            }
        }
    }

    /// [`Inner::bury`] on a task of its own, for a bind that failed or was overtaken: the
    /// identity `generation` it asked `actor`'s owner to record.
    fn bury_later(&self, id: SessionId, actor: ActorRef, generation: u64) {
        let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let p = BindingRoute {
            actor,
            binding_generation: generation,
        };
        tokio::spawn(async move {
            this.bury(id, &p, BIND_TIMEOUT).await;
        });
    }

    /// Tell the previous Actor owner of a rebind of session `id` to forget the retired
    /// binding `p` ([`BindingTombstone`]), waiting at most `timeout` for its answer. An owner
    /// lifecycle that is not admitted holds nothing any more: that counts as acknowledged.
    async fn bury(&self, id: SessionId, p: &BindingRoute, timeout: Duration) {
        let t = BindingTombstone {
            actor_id: p.actor.actor_id().to_owned(),
            object_generation: p.actor.object_generation(),
            session_id: id.get(),
            binding_generation: p.binding_generation,
        };
        let stats = &self.session_stats;
        stats.tombstones_sent.fetch_add(1, Ordering::Relaxed);
        let me = self.mesh.fence();
        let burial = if *p.actor.owner() == me {
            // Infallible for a route this node stored (its Actor ID was valid).
            let _ = self.on_tombstone(&me, &t);
            Burial::Acked
        } else if !self.mesh.is_admitted(p.actor.owner()) {
            Burial::OwnerGone
        } else {
            let answer = match encode_json(&t) {
                Ok(payload) => {
                    self.mesh
                        .request_to_lifecycle(p.actor.owner(), payload, timeout)
                        .await
                }
                Err(e) => Err(e),
            };
            match answer.and_then(|a| decode_json::<BindingTombstoneAck>(&a)) {
                Ok(_) => Burial::Acked,
                Err(e) => {
                    tracing::warn!(
                        session = id.get(),
                        actor = %t.actor_id,
                        owner = %p.actor.owner().rid,
                        error = %e,
                        "the previous Actor owner did not acknowledge a rebind's tombstone; \
                         its stale binding ends with that incarnation"
                    );
                    Burial::Unacked
                }
            }
        };
        let counter = match burial {
            Burial::Acked => &stats.tombstones_acked,
            Burial::OwnerGone => &stats.tombstones_owner_gone,
            Burial::Unacked => &stats.tombstones_unacked,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Submit a relay on `route` with the session's tail (local Actor owner or the mesh).
    async fn relay_on(
        &self,
        id: SessionId,
        route: &BindingRoute,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
        submitted: Option<Submitting<S>>,
    ) -> Result<Option<TypedPayload>, CallError> {
        let tail = self.session_ref(id, route.binding_generation);
        let fence = route.actor.route();
        self.session_stats.relays.fetch_add(1, Ordering::Relaxed);
        if *route.actor.owner() == self.mesh.fence() {
            let obj = match self.admit_relay(fence, &tail, &payload) {
                Ok(o) => o,
                Err(e) => {
                    self.session_stats
                        .relays_refused
                        .fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            };
            // Handed to the object: what is submitted after this goes behind it.
            return match timeout {
                None => {
                    let sent = obj.send(payload, metadata).map(|()| None);
                    drop(submitted);
                    sent
                }
                Some(t) => {
                    let rx = obj.request_start(payload, metadata);
                    drop(submitted);
                    let rx = rx?;
                    match tokio::time::timeout(t, rx).await {
                        Ok(Ok(r)) => r.map(Some),
                        Ok(Err(_)) => Err(CallError::new(ErrorKind::Unavailable, "object closed")),
                        Err(_) => Err(CallError::new(
                            ErrorKind::DeadlineExceeded,
                            format!("no reply from {} within {t:?}", fence.object_id),
                        )),
                    }
                }
            };
        }
        match timeout {
            None => {
                let sent = self
                    .mesh
                    .object_send_bound(fence, payload, metadata, tail)
                    .await
                    .map(|()| None);
                drop(submitted);
                sent
            }
            Some(t) => self
                .mesh
                .object_request_bound(
                    fence,
                    payload,
                    metadata,
                    tail,
                    t,
                    submitted.map(|s| Box::new(move || drop(s)) as Box<dyn FnOnce() + Send>),
                )
                .await
                .map(Some),
        }
    }

    /// Relay on session `id`'s stored route for `actor_id` (see [`SessionRouter::relay`]):
    /// at once, or — while the binding is sealed or its released relays are still going out —
    /// in order behind them (a one-way relay is accepted then; a request waits for its reply).
    async fn relay_session(
        &self,
        id: SessionId,
        actor_id: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        let (reply, waiter) = match timeout {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let now = std::time::Instant::now();
        let deadline = timeout.map(|t| now + t);
        let relay = HeldRelay {
            payload,
            metadata,
            timeout,
            deadline,
            reply,
        };
        let key = (id, actor_id.to_owned());
        enum Path<G> {
            Direct(Box<(BindingRoute, HeldRelay, Option<G>)>),
            Waiting { rearm: bool },
            Refused(Vec<SealAction<HeldRelay>>),
        }
        let path = {
            let mut hub = self.hub();
            let Some(route) = hub.table.route(id, actor_id).cloned() else {
                return Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    format!("session {id} is not bound to {actor_id}"),
                ));
            };
            // A seal (or a seal that timed out: the session is closing) comes first; then the
            // relays a release is still sending; then the route.
            if let Some(m) = hub
                .seals
                .get_mut(&key)
                .filter(|m| !matches!(m.state(), SealState::Open))
            {
                let earlier = deadline.is_some_and(|d| m.poll_timeout().is_some_and(|p| d < p));
                let actions = m.handle(
                    SealEvent::Relay(Held {
                        item: relay,
                        deadline,
                    }),
                    now,
                );
                if actions.is_empty() {
                    self.session_stats
                        .relays_held
                        .fetch_add(1, Ordering::Relaxed);
                    Path::Waiting { rearm: earlier }
                } else {
                    Path::Refused(actions)
                }
            } else if let Some((_, q)) = hub.releasing.get_mut(&key) {
                q.push_back(relay);
                Path::Waiting { rearm: false }
            } else {
                let submitted = self.submitting(&mut hub, &key);
                Path::Direct(Box::new((route, relay, submitted)))
            }
        };
        match (path, waiter) {
            (Path::Direct(direct), _) => {
                let (route, relay, submitted) = *direct;
                self.relay_route(
                    id,
                    &route,
                    relay.payload,
                    relay.metadata,
                    relay.timeout,
                    submitted,
                )
                .await
            }
            (Path::Refused(actions), _) => {
                let why = format!("session {id} is closing (its seal of {actor_id} timed out)");
                for a in actions {
                    if let SealAction::Failed(h) = a {
                        h.fail(CallError::new(ErrorKind::Unavailable, why.clone()));
                    }
                }
                Err(CallError::new(ErrorKind::Unavailable, why))
            }
            (Path::Waiting { rearm }, waiter) => {
                if rearm {
                    // A held request due before the seal's next tick: tick for it too.
                    self.arm_seal_timer(key);
                }
                match waiter {
                    None => Ok(None),
                    Some(rx) => rx.await.unwrap_or_else(|_| {
                        Err(CallError::new(
                            ErrorKind::Unavailable,
                            "the session closed while the relay was held",
                        ))
                    }),
                }
            }
        }
    }

    /// Submit one relay on `route` and drop the route if the owner refused it for good.
    async fn relay_route(
        &self,
        id: SessionId,
        route: &BindingRoute,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
        submitted: Option<Submitting<S>>,
    ) -> Result<Option<TypedPayload>, CallError> {
        let actor_id = route.actor.actor_id();
        let out = self
            .relay_on(id, route, payload, metadata, timeout, submitted)
            .await;
        if let Err(e) = &out
            && route_lost(e.kind())
            && self.drop_binding(id, actor_id, route.binding_generation)
        {
            // Never resent: the route is dropped and the application binds again.
            self.session_stats
                .routes_dropped
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(session = %id, actor = actor_id, error = %e, "binding route lost");
            let ctx = self.hub().ctxs.get(&id).cloned();
            if let Some(ctx) = ctx {
                let (actor, kind) = (actor_id.to_owned(), e.kind());
                tokio::spawn(async move { ctx.binding_lost(actor, kind).await });
            }
        }
        out
    }

    /// Drop session `id`'s route for `actor_id` if it is exactly `binding_generation`, with
    /// its seal and release queue (their relays fail); whether it was dropped.
    fn drop_binding(&self, id: SessionId, actor_id: &str, binding_generation: u64) -> bool {
        let (dropped, held) = {
            let mut hub = self.hub();
            if hub.table.drop_route(id, actor_id, binding_generation) {
                (true, hub.forget_seal(&(id, actor_id.to_owned())))
            } else {
                (false, Vec::new())
            }
        };
        fail_all(
            held,
            &format!("the binding of session {id} to {actor_id} ended"),
        );
        dropped
    }

    // ---- Session relocation (42/43/44) ---------------------------------------------------

    fn seal_timeout(&self) -> Duration {
        Duration::from_millis(self.seal_timeout_ms.load(Ordering::Relaxed))
    }

    /// Command 42 from `source`: seal the binding it names and answer 43 (wire §10: only the
    /// session, binding generation, Actor incarnation and relocation are checked).
    pub(super) fn on_seal(&self, source: &NodeFence, b: &SessionRelocationSeal) {
        self.seal_counted(b, SealAnswerTo::Remote(source.clone()));
    }

    /// Send one 43.
    fn send_seal_answer(&self, to: SealAnswerTo, answer: SessionRelocationSealed) {
        match to {
            SealAnswerTo::Remote(_)
                if self.relocations.settings().fault == Some(TransferFault::DropSealAnswers) =>
            {
                tracing::warn!(
                    session = answer.session_id,
                    "fault injection: sessionRelocationSealed dropped"
                );
            }
            SealAnswerTo::Remote(source) => {
                if let Err(e) = self
                    .mesh
                    .session_control(&source, CommandBody::SessionRelocationSealed(answer))
                {
                    tracing::warn!(error = %e, "sessionRelocationSealed not sent");
                }
            }
            SealAnswerTo::Local(tx, leg) => {
                let _ = tx.send((leg, answer.outcome));
            }
        }
    }

    /// [`Inner::seal`], counted, and its 43 sent to `to` — now, or once the relays of that
    /// binding being submitted were handed on.
    fn seal_counted(&self, b: &SessionRelocationSeal, to: SealAnswerTo) {
        let answer = |outcome| SessionRelocationSealed {
            relocation_id: b.relocation_id,
            session_id: b.session.session_id,
            binding_generation: b.session.binding_generation,
            outcome,
        };
        let (outcome, now) = match self.seal(b, to, &answer) {
            Ok((o, to)) => (o, Some(to)),
            Err(o) => (o, None),
        };
        let counter = if outcome == SealOutcome::Sealed {
            &self.session_stats.seals
        } else {
            &self.session_stats.seals_refused
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(to) = now {
            self.send_seal_answer(to, answer(outcome));
        }
    }

    /// Apply a 42: the outcome and where to answer it now (`Ok`), or the outcome whose answer
    /// waits for the binding's submissions in flight (`Err`, kept in
    /// [`SessionHub::deferred_seals`]).
    fn seal(
        &self,
        b: &SessionRelocationSeal,
        to: SealAnswerTo,
        answer: &dyn Fn(SealOutcome) -> SessionRelocationSealed,
    ) -> Result<(SealOutcome, SealAnswerTo), SealOutcome> {
        let Some(id) = SessionId::new(b.session.session_id)
            .filter(|_| b.session.owner_node == self.mesh.fence())
        else {
            return Ok((SealOutcome::SessionClosed, to));
        };
        let now = std::time::Instant::now();
        let mut hub = self.hub();
        if !hub.table.is_open(id) {
            return Ok((SealOutcome::SessionClosed, to));
        }
        let Some(route) = hub.table.route(id, &b.actor_id).cloned() else {
            return Ok((SealOutcome::NotCurrent, to));
        };
        let current = BindingIdentity {
            binding_generation: route.binding_generation,
            object_generation: route.actor.object_generation(),
        };
        let key = (id, b.actor_id.clone());
        let timeout = self.seal_timeout();
        let m = hub
            .seals
            .entry(key.clone())
            .or_insert_with(|| SealMachine::new(current, timeout));
        if !m.is_sealed() && m.identity() != current {
            // The binding was made again since this machine's last seal.
            *m = SealMachine::new(current, timeout);
        }
        let asked = BindingIdentity {
            binding_generation: b.session.binding_generation,
            object_generation: b.object_generation,
        };
        let was_sealed = m.is_sealed();
        let actions = m.handle(
            SealEvent::Seal {
                relocation_id: b.relocation_id,
                identity: asked,
            },
            now,
        );
        let newly = !was_sealed && m.is_sealed();
        if newly && let Some((_, q)) = hub.releasing.remove(&key) {
            // Relays an earlier release has not sent yet go ahead of the ones held now.
            let early: Vec<Held<HeldRelay>> = q
                .into_iter()
                .map(|r| Held {
                    deadline: r.deadline,
                    item: r,
                })
                .collect();
            if let Some(m) = hub.seals.get_mut(&key) {
                let back = m.hold_front(early);
                debug_assert!(back.is_empty(), "the machine is sealed");
            }
        }
        let outcome = actions
            .into_iter()
            .find_map(|a| match a {
                SealAction::Answer(o) => Some(o),
                SealAction::Submit(_)
                | SealAction::SwitchRoute
                | SealAction::Expired(_)
                | SealAction::Failed(_)
                | SealAction::CloseSession
                | SealAction::Ignored(_) => None,
            })
            .unwrap_or(SealOutcome::NotCurrent);
        // Relays taken off the route before this seal and still being handed on: the 43 goes
        // behind them (in the same critical section as the seal, so none is missed).
        let now_to = if outcome == SealOutcome::Sealed && hub.submitting.contains_key(&key) {
            hub.deferred_seals
                .entry(key.clone())
                .or_default()
                .push((to, answer(outcome)));
            None
        } else {
            Some(to)
        };
        drop(hub);
        if newly {
            self.arm_seal_timer(key);
        }
        match now_to {
            Some(to) => Ok((outcome, to)),
            None => Err(outcome),
        }
    }

    /// Count a relay of binding `key` as being submitted (the caller holds the hub lock and
    /// took it off the route or a release queue in that same critical section).
    fn submitting(&self, hub: &mut SessionHub, key: &BindingKey) -> Option<Submitting<S>> {
        let inner = self.this.get().and_then(std::sync::Weak::upgrade)?;
        *hub.submitting.entry(key.clone()).or_default() += 1;
        Some(Submitting {
            inner,
            key: key.clone(),
        })
    }

    // ---- Relocation hooks (issue 19 item 7) ------------------------------------------------

    /// As the relocation source: seal the session of each of `legs` for relocation
    /// `relocation_id` (42; a session of this node directly) and wait for the answers (43) for
    /// at most `wait`. Returns the machine as it ended: `Proceeding` (its sealed legs move with
    /// their Actors) or `TimedOut` (the unit must fail; every leg that is or may be sealed was
    /// sent a 44 `abort`).
    pub(super) async fn seal_legs(
        &self,
        relocation_id: [u8; 16],
        legs: &[LegRef],
        wait: Duration,
    ) -> SessionLegs {
        let started = std::time::Instant::now();
        let ms = |at: std::time::Instant| millis(at.saturating_duration_since(started));
        let mut machine = SessionLegs::new(legs.len(), 0, millis(wait));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let me = self.mesh.fence();
        let key_of = |l: &LegRef| {
            (
                relocation_id,
                l.session.owner_node.rid.clone(),
                l.session.owner_node.lifecycle_generation,
                l.session.session_id,
                l.session.binding_generation,
            )
        };
        let mut actions = Vec::new();
        for (i, l) in legs.iter().enumerate() {
            let body = SessionRelocationSeal {
                relocation_id,
                session: l.session.clone(),
                actor_id: l.actor_id.clone(),
                object_generation: l.object_generation,
            };
            let event = if l.session.owner_node == me {
                // This node's own session: answered on the same channel (at once, or behind
                // the relays being submitted to the Actor).
                self.seal_counted(&body, SealAnswerTo::Local(tx.clone(), i));
                continue;
            } else {
                self.hub().seal_answers.insert(key_of(l), (i, tx.clone()));
                match self.mesh.session_control(
                    &l.session.owner_node,
                    CommandBody::SessionRelocationSeal(body),
                ) {
                    Ok(()) => continue,
                    Err(e) => {
                        self.hub().seal_answers.remove(&key_of(l));
                        // A peer of that lifecycle that is only reconnecting: its sessions
                        // live on, so the leg stays unanswered and the unit fails at the wait's
                        // end (and may be moved again later). A lifecycle this node no longer
                        // knows is gone with its sessions: the Actor moves unbound.
                        let owner = &l.session.owner_node;
                        let reconnecting = self.mesh.peer(&owner.rid).is_some_and(|p| {
                            p.descriptor.as_ref().is_some_and(|d| {
                                d.node.lifecycle_generation == owner.lifecycle_generation
                            })
                        });
                        if reconnecting {
                            tracing::warn!(error = %e, session = l.session.session_id, actor = %l.actor_id,
                                "sessionRelocationSeal not sent (its owner is reconnecting): the unit will stay");
                            continue;
                        }
                        tracing::warn!(error = %e, session = l.session.session_id, actor = %l.actor_id,
                            "sessionRelocationSeal not sent (its owner is gone): the Actor moves unbound");
                        LegEvent::Unreachable { leg: i }
                    }
                }
            };
            actions.extend(machine.step(event, ms(std::time::Instant::now())));
        }
        while let Some(until) = machine.next_tick_ms() {
            let at = started + Duration::from_millis(until);
            let event = tokio::select! {
                a = rx.recv() => match a {
                    Some((leg, outcome)) => LegEvent::Answered { leg, outcome },
                    None => LegEvent::Tick,
                },
                () = tokio::time::sleep_until(at.into()) => LegEvent::Tick,
            };
            actions.extend(machine.step(event, ms(std::time::Instant::now())));
        }
        {
            let mut hub = self.hub();
            for l in legs {
                hub.seal_answers.remove(&key_of(l));
            }
        }
        for a in actions {
            match a {
                LegAction::Abort(which) => self.abort_legs(relocation_id, legs, &which),
                LegAction::Fail { unanswered } => {
                    self.session_stats
                        .leg_timeouts
                        .fetch_add(1, Ordering::Relaxed);
                    for i in unanswered {
                        if let Some(l) = legs.get(i) {
                            tracing::warn!(session = l.session.session_id, actor = %l.actor_id,
                                owner = %l.session.owner_node.rid,
                                "no sessionRelocationSealed in time: the unit stays");
                        }
                    }
                }
                LegAction::Late(_) => {
                    self.session_stats
                        .sealed_unmatched
                        .fetch_add(1, Ordering::Relaxed);
                }
                LegAction::Proceed => {}
            }
        }
        let sealed = machine.sealed().count() as u64;
        self.session_stats
            .legs_sealed
            .fetch_add(sealed, Ordering::Relaxed);
        if machine.phase() == crate::relocation::session_legs::Phase::Proceeding {
            self.session_stats
                .legs_off
                .fetch_add(legs.len() as u64 - sealed, Ordering::Relaxed);
        }
        machine
    }

    /// A 43 from `source`: to the leg waiting for it, if `source` is that leg's session owner.
    pub(super) fn on_sealed(&self, source: &NodeFence, b: &SessionRelocationSealed) {
        let key = (
            b.relocation_id,
            source.rid.clone(),
            source.lifecycle_generation,
            b.session_id,
            b.binding_generation,
        );
        let waiter = self.hub().seal_answers.remove(&key);
        match waiter {
            Some((leg, tx)) => {
                let _ = tx.send((leg, b.outcome));
            }
            None => {
                self.session_stats
                    .sealed_unmatched
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(session = b.session_id, outcome = ?b.outcome, from = %source.rid,
                    "a sessionRelocationSealed matched no waiting relocation");
            }
        }
    }

    /// As the relocation source: 44 `abort` to legs `which` of `legs` (held relays go to the
    /// source route and only the matching seal is released).
    pub(super) fn abort_legs(&self, relocation_id: [u8; 16], legs: &[LegRef], which: &[usize]) {
        for l in which.iter().filter_map(|&i| legs.get(i)) {
            self.session_stats
                .aborts_sent
                .fetch_add(1, Ordering::Relaxed);
            self.send_session_route(SessionRelocationRoute {
                relocation_id,
                session: l.session.clone(),
                actor_id: l.actor_id.clone(),
                object_generation: l.object_generation,
                action: SessionRouteAction::Abort,
                target_route: None,
            });
        }
    }

    /// As the relocation target, dispatch open: tell `session`'s owner the Actor's new route
    /// `route` (44 `route`). The fault `DropSessionRoutes` loses it instead.
    pub(super) fn route_moved_session(
        &self,
        relocation_id: [u8; 16],
        session: &SessionRef,
        route: RouteFence,
    ) {
        if self.relocations.settings().fault == Some(TransferFault::DropSessionRoutes) {
            tracing::warn!(session = session.session_id, actor = %route.object_id,
                "fault injection: sessionRelocationRoute dropped");
            return;
        }
        self.session_stats
            .routes_sent
            .fetch_add(1, Ordering::Relaxed);
        self.send_session_route(SessionRelocationRoute {
            relocation_id,
            session: session.clone(),
            actor_id: route.object_id.clone(),
            object_generation: route.object_generation,
            action: SessionRouteAction::Route,
            target_route: Some(route),
        });
    }

    /// A 44 to its session owner (this node's own sessions directly).
    fn send_session_route(&self, b: SessionRelocationRoute) {
        if b.session.owner_node == self.mesh.fence() {
            self.on_session_route(&b);
            return;
        }
        let owner = b.session.owner_node.clone();
        if let Err(e) = self
            .mesh
            .session_control(&owner, CommandBody::SessionRelocationRoute(b))
        {
            tracing::warn!(error = %e, owner = %owner.rid, "sessionRelocationRoute not sent");
        }
    }

    /// Tick the seal of `key` at each of its deadlines while it is installed.
    fn arm_seal_timer(&self, key: BindingKey) {
        let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        tokio::spawn(async move {
            loop {
                let next = this
                    .hub()
                    .seals
                    .get(&key)
                    .and_then(SealMachine::poll_timeout);
                let Some(at) = next else { break };
                tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                let (rest, start) = {
                    let mut hub = this.hub();
                    let actions = match hub.seals.get_mut(&key) {
                        Some(m) => m.handle(SealEvent::Tick, std::time::Instant::now()),
                        None => break,
                    };
                    stage(&mut hub, &key, actions, None)
                };
                this.apply_seal_actions(&key, rest, start);
            }
        });
    }

    /// Command 44: switch (`route`) or release (`abort`) the seal it names.
    pub(super) fn on_session_route(&self, b: &SessionRelocationRoute) {
        let ignored = |why: Ignored| {
            self.session_stats
                .routes_ignored
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(session = b.session.session_id, actor = %b.actor_id, ?why,
                "sessionRelocationRoute changed nothing");
        };
        let Some(id) = SessionId::new(b.session.session_id)
            .filter(|_| b.session.owner_node == self.mesh.fence())
        else {
            return ignored(Ignored::Late);
        };
        let identity = BindingIdentity {
            binding_generation: b.session.binding_generation,
            object_generation: b.object_generation,
        };
        let target = match (b.action, &b.target_route) {
            (SessionRouteAction::Route, Some(t))
                if t.object_id == b.actor_id && t.object_generation == b.object_generation =>
            {
                match ActorRef::new(t.clone(), self.mesh.descriptor().mesh_name) {
                    Some(r) => Some((identity.binding_generation, r)),
                    None => return ignored(Ignored::Mismatch),
                }
            }
            (SessionRouteAction::Route, _) => return ignored(Ignored::Mismatch),
            (SessionRouteAction::Abort, _) => None,
        };
        let event = match b.action {
            SessionRouteAction::Route => SealEvent::Route {
                relocation_id: b.relocation_id,
                identity,
            },
            SessionRouteAction::Abort => SealEvent::Abort {
                relocation_id: b.relocation_id,
                identity,
            },
        };
        let key = (id, b.actor_id.clone());
        // The machine's step, the route switch and the queueing of the released relays happen
        // under one lock: a relay submitted meanwhile goes behind them, on the new route.
        let (applied, rest, start) = {
            let mut hub = self.hub();
            let actions = match hub.seals.get_mut(&key) {
                Some(m) => m.handle(event, std::time::Instant::now()),
                None => {
                    drop(hub);
                    return ignored(Ignored::Late);
                }
            };
            let applied = actions
                .iter()
                .all(|a| matches!(a, SealAction::SwitchRoute | SealAction::Submit(_)));
            let (rest, start) = stage(&mut hub, &key, actions, target);
            (applied, rest, start)
        };
        if applied {
            let c = match b.action {
                SessionRouteAction::Route => &self.session_stats.routes_applied,
                SessionRouteAction::Abort => &self.session_stats.aborts_applied,
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.apply_seal_actions(&key, rest, start);
    }

    /// Carry out the actions [`stage`] left for binding `key` — end expired and failed relays,
    /// close the session at the timeout, report ignored 44s — and start the release task when
    /// `start`.
    fn apply_seal_actions(
        &self,
        key: &BindingKey,
        actions: Vec<SealAction<HeldRelay>>,
        start: Option<u64>,
    ) {
        let (id, actor_id) = (key.0, key.1.as_str());
        for a in actions {
            match a {
                SealAction::Expired(h) => {
                    self.session_stats
                        .held_expired
                        .fetch_add(1, Ordering::Relaxed);
                    h.fail(CallError::new(
                        ErrorKind::DeadlineExceeded,
                        format!(
                            "the relay to {actor_id} passed its deadline while sealed; not sent"
                        ),
                    ));
                }
                SealAction::Failed(h) => h.fail(CallError::new(
                    ErrorKind::Unavailable,
                    format!("session {id} closed while the relay to {actor_id} was held"),
                )),
                SealAction::CloseSession => {
                    self.session_stats
                        .seal_timeouts
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(session = %id, actor = actor_id,
                        "no sessionRelocationRoute within the seal timeout: closing the session");
                    let ctx = self.hub().ctxs.get(&id).cloned();
                    if let Some(ctx) = ctx {
                        ctx.close(CloseReason::SealTimeout);
                    }
                }
                SealAction::Ignored(why) => {
                    self.session_stats
                        .routes_ignored
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(session = %id, actor = actor_id, ?why,
                        "sessionRelocationRoute changed nothing");
                }
                // Done by `stage` under the hub lock.
                SealAction::Answer(_) | SealAction::SwitchRoute | SealAction::Submit(_) => {}
            }
        }
        if let Some(task) = start
            && let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade)
        {
            let key = key.clone();
            tokio::spawn(async move { this.release(key, task).await });
        }
    }

    /// Submit the released relays of `key` one after the other on its current route (a
    /// request's reply is awaited before the next, so order holds), then let relays go out
    /// directly again.
    async fn release(&self, key: BindingKey, task: u64) {
        loop {
            let next = {
                let mut hub = self.hub();
                let mine = hub.releasing.get_mut(&key).filter(|(t, _)| *t == task);
                match mine.map(|(_, q)| q.pop_front()) {
                    Some(Some(r)) => {
                        let route = hub.table.route(key.0, &key.1).cloned();
                        let submitted = self.submitting(&mut hub, &key);
                        Some((r, route, submitted))
                    }
                    Some(None) => {
                        hub.releasing.remove(&key);
                        None
                    }
                    // A new seal took the rest back, or another task owns the queue now.
                    None => None,
                }
            };
            let Some((relay, route, submitted)) = next else {
                break;
            };
            let Some(route) = route else {
                relay.fail(CallError::new(
                    ErrorKind::InvalidOperation,
                    format!("session {} is no longer bound to {}", key.0, key.1),
                ));
                continue;
            };
            // A request gets only what is left of its deadline; one past it is not sent.
            let timeout = match (relay.timeout, relay.deadline) {
                (Some(_), Some(d)) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    Some(_) | None => {
                        self.session_stats
                            .held_expired
                            .fetch_add(1, Ordering::Relaxed);
                        relay.fail(CallError::new(
                            ErrorKind::DeadlineExceeded,
                            format!(
                                "the relay to {} passed its deadline while held; not sent",
                                key.1
                            ),
                        ));
                        continue;
                    }
                },
                (t, _) => t,
            };
            let out = self
                .relay_route(
                    key.0,
                    &route,
                    relay.payload,
                    relay.metadata,
                    timeout,
                    submitted,
                )
                .await;
            match relay.reply {
                Some(r) => {
                    let _ = r.send(out);
                }
                None => {
                    if let Err(e) = out {
                        tracing::debug!(session = %key.0, actor = %key.1, error = %e,
                            "a released relay was refused");
                    }
                }
            }
        }
    }

    /// Unbind session `id` from Actor `actor_id` (see [`SessionRouter::unbind`]): the route is
    /// dropped at once (a seal of it fails what it held) and the Actor gets one
    /// `zlink.session.Unbound` notice on it.
    async fn unbind_session(&self, id: SessionId, actor_id: &str) -> Result<(), CallError> {
        let (route, held) = {
            let mut hub = self.hub();
            let Some(route) = hub.table.route(id, actor_id).cloned() else {
                return Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    format!("session {id} is not bound to {actor_id}"),
                ));
            };
            hub.table.drop_route(id, actor_id, route.binding_generation);
            (route, hub.forget_seal(&(id, actor_id.to_owned())))
        };
        fail_all(held, &format!("session {id} unbound {actor_id}"));
        let me = self.mesh.fence();
        let payload = encode_json(&Unbound {
            session_id: id.get(),
            owner_rid: me.rid.into(),
            owner_lifecycle_generation: me.lifecycle_generation,
            binding_generation: route.binding_generation,
        })?;
        self.session_stats
            .unbind_notices
            .fetch_add(1, Ordering::Relaxed);
        // Submitted like any relay; a notice the owner cannot take is only logged (the binding
        // here is gone either way).
        if let Err(e) = self.relay_on(id, &route, payload, None, None, None).await {
            tracing::debug!(session = %id, actor = actor_id, error = %e, "unbind notice not delivered");
        }
        Ok(())
    }

    /// Send the `zlink.session.Disconnected` notice of session `id` on `route` (one-way, on
    /// its own task; a notice that cannot be delivered is only logged).
    fn notify_disconnected(&self, id: SessionId, reason: &str, route: BindingRoute) {
        let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let me = self.mesh.fence();
        let notice = Disconnected {
            session_id: id.get(),
            reason: reason.to_owned(),
            owner_rid: me.rid.into(),
            owner_lifecycle_generation: me.lifecycle_generation,
            binding_generation: route.binding_generation,
        };
        let Ok(payload) = encode_json(&notice) else {
            return;
        };
        self.session_stats
            .disconnect_notices
            .fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Err(e) = this.relay_on(id, &route, payload, None, None, None).await {
                tracing::debug!(session = %id, actor = route.actor.actor_id(), error = %e,
                    "disconnect notice not delivered");
            }
        });
    }
}

/// The part of a seal's actions that must happen in the same critical section as the
/// machine's step (the caller holds the hub lock): the route switch to `target` and the
/// queueing of released relays behind any still going out. Returns the other actions and
/// whether a release task must start.
fn stage(
    hub: &mut SessionHub,
    key: &BindingKey,
    actions: Vec<SealAction<HeldRelay>>,
    target: Option<(u64, ActorRef)>,
) -> (Vec<SealAction<HeldRelay>>, Option<u64>) {
    let (id, actor_id) = (key.0, key.1.as_str());
    let mut rest = Vec::new();
    let mut release = Vec::new();
    for a in actions {
        match a {
            SealAction::SwitchRoute => {
                // The binding generation the 44 named and the seal matched.
                if let Some((g, t)) = target.clone()
                    && !hub.table.switch_route(id, g, t)
                {
                    tracing::warn!(session = %id, actor = actor_id,
                        "the sealed binding is gone: route switch not applied");
                }
            }
            SealAction::Submit(h) => release.push(h),
            other @ (SealAction::Answer(_)
            | SealAction::Expired(_)
            | SealAction::Failed(_)
            | SealAction::CloseSession
            | SealAction::Ignored(_)) => rest.push(other),
        }
    }
    if release.is_empty() {
        return (rest, None);
    }
    match hub.releasing.get_mut(key) {
        Some((_, q)) => {
            q.extend(release);
            (rest, None)
        }
        None => {
            hub.last_release += 1;
            let task = hub.last_release;
            hub.releasing.insert(key.clone(), (task, release.into()));
            (rest, Some(task))
        }
    }
}

/// The [`SessionRouter`] of a runtime: a weak handle, so a StreamNode does not keep a stopped
/// runtime alive.
pub(super) struct RouterRef<S: ObjectStore> {
    pub(super) inner: std::sync::Weak<Inner<S>>,
}

fn stopped() -> CallError {
    CallError::new(ErrorKind::ShuttingDown, "the object runtime stopped")
}

impl<S: ObjectStore> SessionRouter for RouterRef<S> {
    fn opened(&self, ctx: SessionCtx) {
        if let Some(inner) = self.inner.upgrade() {
            let mut hub = inner.hub();
            hub.table.open(ctx.id());
            hub.ctxs.insert(ctx.id(), ctx);
        }
    }

    fn closed(&self, id: SessionId, reason: CloseReason) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        // One critical section: no 42 or relay finds the session half closed.
        let (routes, held) = {
            let mut hub = inner.hub();
            hub.ctxs.remove(&id);
            let keys: Vec<BindingKey> = hub
                .seals
                .keys()
                .chain(hub.releasing.keys())
                .filter(|k| k.0 == id)
                .cloned()
                .collect();
            let held: Vec<HeldRelay> = keys.iter().flat_map(|k| hub.forget_seal(k)).collect();
            (hub.table.close(id), held)
        };
        fail_all(
            held,
            &format!("session {id} closed before the relay was sent"),
        );
        for route in routes {
            inner.notify_disconnected(id, reason.as_str(), route);
        }
    }

    fn unbind(&self, id: SessionId, actor_id: String) -> BoxFuture<Result<(), CallError>> {
        let inner = self.inner.upgrade();
        Box::pin(async move {
            match inner {
                Some(inner) => inner.unbind_session(id, &actor_id).await,
                None => Err(stopped()),
            }
        })
    }

    fn bind(&self, id: SessionId, actor: ActorRef) -> BoxFuture<Result<BindingRoute, CallError>> {
        let inner = self.inner.upgrade();
        Box::pin(async move {
            match inner {
                Some(inner) => inner.bind_session(id, actor).await,
                None => Err(stopped()),
            }
        })
    }

    fn relay(
        &self,
        id: SessionId,
        actor_id: String,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> BoxFuture<Result<Option<TypedPayload>, CallError>> {
        let inner = self.inner.upgrade();
        Box::pin(async move {
            match inner {
                Some(inner) => {
                    inner
                        .relay_session(id, &actor_id, payload, metadata, timeout)
                        .await
                }
                None => Err(stopped()),
            }
        })
    }

    fn binding(&self, id: SessionId, actor_id: &str) -> Option<BindingRoute> {
        let inner = self.inner.upgrade()?;
        let hub = inner.hub();
        hub.table.route(id, actor_id).cloned()
    }

    fn bindings(&self, id: SessionId) -> Vec<BindingRoute> {
        match self.inner.upgrade() {
            Some(inner) => inner.hub().table.routes_of(id),
            None => Vec::new(),
        }
    }

    fn ensure_spot(&self, stable_type: String, id: String) -> BoxFuture<Result<(), CallError>> {
        self.ensure(stable_type, id)
    }

    fn actor_ref(
        &self,
        id: String,
        create_as: Option<String>,
    ) -> BoxFuture<Result<ActorRef, CallError>> {
        let inner = self.inner.upgrade();
        Box::pin(async move {
            let rt = ObjectRuntime {
                inner: inner.ok_or_else(stopped)?,
            };
            match create_as {
                None => rt.actor_ref(&id).await,
                Some(ty) => {
                    let (made, _) = rt.get_or_create_actor(&ty, &id, None, BIND_TIMEOUT).await?;
                    made.actor_ref()
                        .ok_or_else(|| CallError::new(ErrorKind::InvalidOperation, "not an Actor"))
                }
            }
        })
    }
}

impl<S: ObjectStore> RouterRef<S> {
    fn ensure(&self, stable_type: String, id: String) -> BoxFuture<Result<(), CallError>> {
        let inner = self.inner.upgrade();
        Box::pin(async move {
            let rt = ObjectRuntime {
                inner: inner.ok_or_else(stopped)?,
            };
            rt.get_or_create_user_spot(&stable_type, &id, None, BIND_TIMEOUT)
                .await
                .map(|_| ())
        })
    }
}

impl<S: ObjectStore> ObjectRuntime<S> {
    /// The handle a StreamNode binds and relays through (see
    /// [`StreamNode::serve_routed`](crate::session::StreamNode::serve_routed)).
    pub fn session_router(&self) -> Arc<dyn SessionRouter> {
        Arc::new(RouterRef {
            inner: Arc::downgrade(&self.inner),
        })
    }

    /// Counters of binding, relay, push and session relocation.
    pub fn session_stats(&self) -> &SessionStats {
        &self.inner.session_stats
    }

    /// Set how long a bind may take end to end ([`BIND_TIMEOUT`] by default) for binds started
    /// from now on.
    pub fn set_bind_timeout(&self, timeout: Duration) {
        self.inner
            .bind_timeout_ms
            .store(millis(timeout).max(1), Ordering::Relaxed);
    }

    /// Set `SessionRelocationSealTimeout` (wire §10; default 3,000 ms) for seals installed
    /// from now on.
    pub fn set_session_seal_timeout(&self, timeout: Duration) {
        self.inner
            .seal_timeout_ms
            .store(millis(timeout).max(1), Ordering::Relaxed);
    }

    /// The current ActorRef of Actor `id`, from the store's current authority (one read;
    /// the route cache is not used, so a bind never starts from a stale cached route).
    ///
    /// # Errors
    /// `NotFound` (Missing), `Unavailable` (not Ready, or its owner lease is gone),
    /// `StoreFailure`, `InvalidOperation` (bad ID).
    pub async fn actor_ref(&self, id: &str) -> Result<ActorRef, CallError> {
        let route = self.ready_route(StoreKind::Actor, id).await?;
        let mesh_name = self.inner.mesh.descriptor().mesh_name;
        ActorRef::from_route(route, mesh_name)
            .ok_or_else(|| CallError::new(ErrorKind::InvalidOperation, "not an Actor"))
    }

    /// The SessionRef Actor `id` is bound to on this node, if it lives here and is bound.
    pub fn bound_session(&self, id: &str) -> Option<SessionRef> {
        let key = AuthorityKey::new(StoreKind::Actor, id).ok()?;
        let generation = self.inner.live().get(&key).map(|e| e.generation)?;
        self.inner.binding_of(&key, generation)
    }
}

#[cfg(test)]
mod notice_tests {
    use super::*;

    #[test]
    fn a_notice_ends_exactly_the_binding_it_names() {
        let b = SessionRef {
            owner_node: NodeFence {
                rid: "gw".into(),
                lifecycle_generation: 4,
            },
            session_id: 7,
            binding_generation: 2,
        };
        let n = |session_id, rid: &str, lifecycle, binding_generation| NoticeSession {
            session_id,
            owner_rid: rid.into(),
            owner_lifecycle_generation: lifecycle,
            binding_generation,
        };
        // (notice, names the binding)
        let table = [
            (n(7, "gw", 4, 2), true),
            // An older sender: no owner, no generation.
            (n(7, "", 0, 0), true),
            (n(7, "gw", 4, 0), true),
            // Another session, another owner, another lifecycle of it.
            (n(8, "gw", 4, 2), false),
            (n(7, "other", 4, 2), false),
            (n(7, "gw", 5, 2), false),
            // A late notice of the session's earlier binding.
            (n(7, "gw", 4, 1), false),
        ];
        for (notice, want) in table {
            assert_eq!(
                notice_names(&notice, &b),
                want,
                "session {} owner {}#{} binding {}",
                notice.session_id,
                notice.owner_rid,
                notice.owner_lifecycle_generation,
                notice.binding_generation
            );
        }
    }
}
