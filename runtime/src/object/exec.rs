//! The execution shell of one object incarnation: handler turns on tokio over the pure
//! [`ExecQueue`], timers from [`TimerSet`], `Async` and `Yield` (glossary §3 "Handler turn",
//! "Spot turn", "Async와 Yield"; §5 "Object execution queue").
//!
//! # State and turns
//!
//! The object's state `S` lives behind a `std::sync::Mutex`; a handler reaches it through
//! [`Ctx::state`]. The guard is not `Send`, so a handler future that kept it across an `.await`
//! would not be `Send` and would not compile as a handler: state is borrowed only between
//! awaits, by construction. Turns never overlap (the executor hands out the next item only when
//! the running turn ended), so the lock is never contended by two handlers.
//!
//! - **Async** is a plain `.await` inside a handler: the turn stays with the handler until it
//!   returns, so nothing else of the object runs meanwhile.
//! - **Yield** is [`Ctx::yield_on`]: the turn goes back while the given future runs, other queue
//!   work runs (and may change the state), and the handler continues in a new turn queued
//!   behind the work accepted before its result arrived. Only executors started in
//!   [`ExecMode::Yielding`] (SpotWide User Spots and Instance Spots) allow it; elsewhere it is
//!   `InvalidOperation` and the turn is kept.
//!
//! # Timers
//!
//! [`Ctx::timer_once`] / [`Ctx::timer_every`] arm timers held as data. A due timer becomes a
//! tick on the application lane, so it runs as a turn of its own, never concurrently with a
//! handler, and is delivered to the send handler of its packet name.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::metadata::Metadata;

use zlink_store::types::{AuthorityKey, ObjectKind};

use super::objects::Objects;
use super::queue::{Lane, Picked, ResumeToken};
use super::table::Dispatched;
use super::timers::TimerSet;
use super::work::Work;
use crate::call::error::{CallError, ErrorKind};
use crate::mesh::handler::{BoxFuture, JSON_CONTENT_TYPE, JsonMessage, decode_json, encode_json};

/// Whether handlers of an object may [`Ctx::yield_on`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// Actors, Entry Spots, PerActor User Spots: a turn is held to the end.
    Serial,
    /// SpotWide User Spots and Instance Spots: a turn may be given back with `Yield`.
    Yielding,
}

/// The execution gate a SpotWide User Spot shares with its member Actors (glossary §3
/// "Execution gate"): a turn of the Spot, of any member Actor, or of a timer of either, runs
/// only while it holds the gate. FIFO-fair, so no member starves another.
pub type SpotGate = Arc<tokio::sync::Mutex<()>>;

/// A new, free gate.
pub fn new_gate() -> SpotGate {
    Arc::new(tokio::sync::Mutex::new(()))
}

type GateGuard = tokio::sync::OwnedMutexGuard<()>;

/// What a turn holds of its gate: the gate it took (for a member Actor's `Yield`, which gives it
/// back and takes it again) and the guard while held.
#[derive(Default)]
struct TurnGate {
    gate: Option<SpotGate>,
    guard: Option<GateGuard>,
}

/// The receiving end of a request's single terminal reply (dropped sender: the object closed).
pub type ReplyReceiver = oneshot::Receiver<Result<TypedPayload, CallError>>;

type SendFn<S> =
    Arc<dyn Fn(Ctx<S>, TypedPayload) -> BoxFuture<Result<(), CallError>> + Send + Sync>;
type RequestFn<S> =
    Arc<dyn Fn(Ctx<S>, TypedPayload) -> BoxFuture<Result<TypedPayload, CallError>> + Send + Sync>;

type MemberFn<S> = Arc<dyn Fn(Ctx<S>, String) -> BoxFuture<Result<(), CallError>> + Send + Sync>;

type LifecycleFn<S> = Arc<dyn Fn(Ctx<S>) -> BoxFuture<Result<(), CallError>> + Send + Sync>;

/// The typed handlers of one object type, by packet name.
pub struct ObjectHandlers<S> {
    /// By packet name, looked up once per message: foldhash (seeded per process) rather than
    /// SipHash; the maps hold only the application's own registrations, so no peer can grow them.
    // Keyed by the packet name's bytes: a received name is looked up without a UTF-8 check.
    sends: foldhash::HashMap<Box<[u8]>, SendFn<S>>,
    requests: foldhash::HashMap<Box<[u8]>, RequestFn<S>>,
    joined: Option<MemberFn<S>>,
    left: Option<MemberFn<S>>,
    ready_completed: Option<LifecycleFn<S>>,
}

impl<S> Default for ObjectHandlers<S> {
    fn default() -> Self {
        Self {
            sends: foldhash::HashMap::default(),
            requests: foldhash::HashMap::default(),
            joined: None,
            left: None,
            ready_completed: None,
        }
    }
}

impl<S: Send + 'static> ObjectHandlers<S> {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// One-way handler (also receives timer ticks of `M`'s packet name).
    pub fn on_send<M, F, Fut>(&mut self, f: F) -> &mut Self
    where
        M: JsonMessage,
        F: Fn(Ctx<S>, M) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), CallError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let h: SendFn<S> = Arc::new(move |ctx, p| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let m: M = decode_json(&p)?;
                f(ctx, m).await
            })
        });
        self.sends.insert(M::PACKET_NAME.as_bytes().into(), h);
        self
    }

    /// Request handler answered with `R`.
    pub fn on_request<M, R, F, Fut>(&mut self, f: F) -> &mut Self
    where
        M: JsonMessage,
        R: JsonMessage,
        F: Fn(Ctx<S>, M) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, CallError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let h: RequestFn<S> = Arc::new(move |ctx, p| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let m: M = decode_json(&p)?;
                encode_json(&f(ctx, m).await?)
            })
        });
        self.requests.insert(M::PACKET_NAME.as_bytes().into(), h);
        self
    }

    /// Whether a send handler for `packet_name` is registered.
    pub fn has_send(&self, packet_name: &str) -> bool {
        self.sends.contains_key(packet_name.as_bytes())
    }

    /// Spots: called with the Actor's ID when an Actor became a member (created into this
    /// Spot, or joined it). It runs as a Spot turn on the lifecycle lane, after the membership
    /// was committed; an error is logged, it does not undo the membership.
    pub fn on_member_joined<F, Fut>(&mut self, f: F) -> &mut Self
    where
        F: Fn(Ctx<S>, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), CallError>> + Send + 'static,
    {
        self.joined = Some(Arc::new(move |ctx, a| Box::pin(f(ctx, a))));
        self
    }

    /// Spots: called with the Actor's ID when a member Actor left (joined another Spot, or was
    /// destroyed), like [`ObjectHandlers::on_member_joined`].
    pub fn on_member_left<F, Fut>(&mut self, f: F) -> &mut Self
    where
        F: Fn(Ctx<S>, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), CallError>> + Send + 'static,
    {
        self.left = Some(Arc::new(move |ctx, a| Box::pin(f(ctx, a))));
        self
    }

    /// `ApplicationSignaled` SpotWide User Spots: called on the target after a move that
    /// started at a `ctx.relocation_ready().defer()` boundary, as the Spot's first turn there
    /// (on the lifecycle lane, before the work that moved with it). The default is no
    /// callback. An error is logged; the Spot stays where it arrived.
    pub fn on_relocation_ready_completed<F, Fut>(&mut self, f: F) -> &mut Self
    where
        F: Fn(Ctx<S>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), CallError>> + Send + 'static,
    {
        self.ready_completed = Some(Arc::new(move |ctx| Box::pin(f(ctx))));
        self
    }
}

/// Counters of one executor.
#[derive(Debug, Default)]
pub struct ExecStats {
    /// Turns started (new items and resumed continuations).
    pub turns: AtomicU64,
    /// Timer ticks queued.
    pub ticks: AtomicU64,
    /// Items that found no handler.
    pub no_handler: AtomicU64,
    /// Handlers that panicked (their requests end with `HandlerFailed`).
    pub panics: AtomicU64,
}

enum TurnEnd {
    Complete,
    Yielded,
}

type Ender = oneshot::Sender<TurnEnd>;

/// What a resumed continuation receives: its turn's ender and the gate it holds.
type Grant = (Ender, TurnGate);

/// Where an executor's queue lives: a slot of a node's [`Objects`] table.
#[derive(Clone)]
pub struct Binding {
    objects: Arc<Objects>,
    key: AuthorityKey,
    generation: u64,
    caller: Option<std::sync::Weak<dyn ObjectCaller>>,
}

/// How a handler reaches other objects by ID: the object runtime of its node (held weakly by
/// each object, so objects never keep their runtime alive).
pub trait ObjectCaller: Send + Sync + 'static {
    /// Send (`timeout` `None`) or request a Spot or Actor by global ID; see
    /// `ObjectRuntime::call`.
    ///
    /// `held` is the execution gate the calling turn holds: an `Async` request to an object
    /// that takes the same gate would wait for it until its deadline, so it is refused.
    fn call_object(
        &self,
        kind: ObjectKind,
        id: String,
        payload: TypedPayload,
        timeout: Option<Duration>,
        held: Option<SpotGate>,
    ) -> BoxFuture<Result<Option<TypedPayload>, CallError>>;

    /// The node this object runs on: its RID and node lifecycle generation.
    fn hosting_node(&self) -> (String, u64);

    /// The STREAM session incarnation `generation` of `key` is bound to now (issue 19).
    fn bound_session(
        &self,
        _key: &AuthorityKey,
        _generation: u64,
    ) -> Option<zlink_protocol::generated::SessionRef> {
        None
    }

    /// Push `payload` from incarnation `generation` of `key` to its bound session
    /// (command 36).
    fn push_to_session(
        &self,
        _key: AuthorityKey,
        _generation: u64,
        _payload: TypedPayload,
    ) -> BoxFuture<Result<(), CallError>> {
        Box::pin(async {
            Err(CallError::new(
                ErrorKind::InvalidOperation,
                "this runtime has no STREAM sessions",
            ))
        })
    }
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("key", &self.key)
            .field("generation", &self.generation)
            .finish()
    }
}

impl Binding {
    /// The queue of incarnation `generation` of `key` in `objects` (opened by the caller; it
    /// runs once marked Ready).
    pub fn new(objects: Arc<Objects>, key: AuthorityKey, generation: u64) -> Self {
        Self {
            objects,
            key,
            generation,
            caller: None,
        }
    }

    /// Let the object's handlers call other objects through `caller` (its node's runtime).
    #[must_use]
    pub fn with_caller(mut self, caller: std::sync::Weak<dyn ObjectCaller>) -> Self {
        self.caller = Some(caller);
        self
    }

    /// A private table with one Ready slot, for an object outside any runtime (tests, tools).
    pub fn standalone() -> Self {
        let objects = Objects::new();
        let key = AuthorityKey::new(ObjectKind::Actor, "standalone")
            .unwrap_or_else(|_| unreachable!("\"standalone\" is a valid object ID"));
        let _ = objects.open(&key, 1);
        let _ = objects.mark_ready(&key, 1);
        Self::new(objects, key, 1)
    }

    /// The object key.
    pub fn key(&self) -> &AuthorityKey {
        &self.key
    }

    /// The incarnation.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

struct Shared<S> {
    state: Mutex<S>,
    home: Binding,
    /// The gate this object's turns take: a SpotWide User Spot's own, or, for a member Actor
    /// of one, the Spot's. `None`: the queue alone serializes the turns.
    gate: Mutex<Option<SpotGate>>,
    /// No new turns are handed out (capture at the next handler boundary).
    paused: AtomicBool,
    /// An `ApplicationSignaled` SpotWide User Spot: `relocation_ready().defer()` applies.
    app_signaled: AtomicBool,
    /// `ApplicationSignaled` moves: whether one is prepared, and whether a job that called
    /// `defer()` while it was ended normally (the object is then paused at that boundary for
    /// the move). One lock, so a boundary and a withdrawal never cross.
    relocation: Mutex<BoundaryState>,
    boundary: Notify,
    timers: Mutex<TimerSet>,
    resume: Mutex<HashMap<ResumeToken, oneshot::Sender<Grant>>>,
    wake: Arc<Notify>,
    handlers: ObjectHandlers<S>,
    mode: ExecMode,
    epoch: Instant,
    closed: AtomicBool,
    stats: ExecStats,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<S> Shared<S> {
    /// A deferring job ended normally: while a move is prepared, hold the object at this
    /// boundary (no new turn) and tell the mover.
    fn reach_boundary(&self) {
        let mut b = lock(&self.relocation);
        if b.prepared {
            self.paused.store(true, Ordering::Release);
            b.reached = true;
            drop(b);
            self.boundary.notify_waiters();
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn push(&self, work: Work) -> Result<(), CallError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(CallError::new(ErrorKind::Unavailable, "object closed"));
        }
        match self
            .home
            .objects
            .dispatch(&self.home.key, Lane::Application, work)
        {
            Dispatched::Queued(_) | Dispatched::Held | Dispatched::Temporary => Ok(()),
            Dispatched::NotHere(_) => Err(CallError::new(
                ErrorKind::Unavailable,
                "the object's queue is gone",
            )),
        }
    }

    fn with_queue<R>(&self, f: impl FnOnce(&mut super::queue::ExecQueue<Work>) -> R) -> Option<R> {
        self.home.objects.with_queue(&self.home.key, f)
    }

    /// Put captured work back at the front of the queue and re-arm captured timers (with their
    /// remaining time on this executor's clock). Timers are checked first: on an error nothing
    /// changed.
    fn restore(
        &self,
        items: Vec<super::queue::Captured<Work>>,
        timers: &[zlink_protocol::generated::CapturedTimer],
    ) -> Result<(), CallError> {
        let restored = TimerSet::restore(timers, self.now_ms())
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        self.with_queue(|q| q.restore_front(items))
            .ok_or_else(|| CallError::new(ErrorKind::Unavailable, "the object's queue is gone"))?;
        *lock(&self.timers) = restored;
        Ok(())
    }
}

/// What a handler sees: the object's state and its turn.
pub struct Ctx<S> {
    shared: Arc<Shared<S>>,
    /// The turn's own state, one allocation per turn for all three parts.
    turn: Arc<Turn>,
    /// This job called `relocation_ready().defer()` while a move was prepared (`None` unless
    /// the object is an `ApplicationSignaled` SpotWide User Spot: no allocation per turn for
    /// every other object).
    deferred: Option<Arc<AtomicBool>>,
}

impl<S> Clone for Ctx<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            turn: Arc::clone(&self.turn),
            deferred: self.deferred.clone(),
        }
    }
}

/// What one turn's handler and its clones share: who ends the turn, the gate it holds, and the
/// record's metadata.
struct Turn {
    ender: Mutex<Option<Ender>>,
    gate: Mutex<TurnGate>,
    metadata: Metadata,
}

/// An `ApplicationSignaled` move's boundary state (see `Shared::relocation`).
#[derive(Debug, Default, Clone, Copy)]
struct BoundaryState {
    prepared: bool,
    reached: bool,
}

/// See [`Ctx::relocation_ready`].
pub struct RelocationReady<'a, S> {
    ctx: &'a Ctx<S>,
}

impl<S> RelocationReady<'_, S> {
    /// Mark the end of this job as a safe boundary to start a relocation at (glossary §1
    /// "Spot relocation coordination mode", `ApplicationSignaled`). It requests nothing: when
    /// this host has a move of this Spot prepared, the move seals right after this job ends
    /// normally (a job that fails leaves no boundary); otherwise it is a no-op and the Spot
    /// goes on where it is.
    ///
    /// # Errors
    /// `InvalidOperation`, changing nothing, anywhere but in a turn of an `ApplicationSignaled`
    /// SpotWide User Spot (FrameworkManaged, PerActor, Actors, Entry and Instance Spots).
    pub fn defer(self) -> Result<(), CallError> {
        let sh = &self.ctx.shared;
        if !sh.app_signaled.load(Ordering::Acquire) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "relocation_ready().defer() applies only in a turn of an ApplicationSignaled \
                 SpotWide User Spot",
            ));
        }
        if lock(&sh.relocation).prepared
            && let Some(d) = &self.ctx.deferred
        {
            d.store(true, Ordering::Release);
        }
        Ok(())
    }
}

impl<S: Send + 'static> Ctx<S> {
    /// The node this turn runs on — its RID and node lifecycle generation — or `None` outside
    /// an object runtime. A reply can carry it so a caller (the load generator's history
    /// checker, issue 20) sees which owner served each call.
    pub fn node(&self) -> Option<(String, u64)> {
        self.shared
            .home
            .caller
            .as_ref()
            .and_then(std::sync::Weak::upgrade)
            .map(|c| c.hosting_node())
    }

    /// The STREAM session this Actor is bound to now (issue 19 item 5; routing §3.2): its
    /// owner node, session id and binding generation. `None` when unbound (never bound, its
    /// session disconnected or was replaced, or its owner is gone) and outside a runtime.
    pub fn session(&self) -> Option<zlink_protocol::generated::SessionRef> {
        let home = &self.shared.home;
        home.caller
            .as_ref()
            .and_then(std::sync::Weak::upgrade)?
            .bound_session(&home.key, home.generation)
    }

    /// Push `msg` to the bound session (command 36, no metadata): its client gets a Send
    /// packet named `M::PACKET_NAME`. Completes at submission toward the session owner.
    ///
    /// # Errors
    /// `InvalidOperation` when unbound (or outside a runtime); `Unavailable` when the session
    /// owner cannot be reached, which also ends the binding; encoding errors.
    pub async fn push<M: JsonMessage>(&self, msg: &M) -> Result<(), CallError> {
        let payload = encode_json(msg)?;
        self.push_payload(payload).await
    }

    /// Push a typed payload to the bound session (see [`Ctx::push`]).
    ///
    /// # Errors
    /// As [`Ctx::push`].
    pub async fn push_payload(&self, payload: TypedPayload) -> Result<(), CallError> {
        let home = &self.shared.home;
        let caller = home
            .caller
            .as_ref()
            .and_then(std::sync::Weak::upgrade)
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::InvalidOperation,
                    "this object runs outside a runtime: it has no session",
                )
            })?;
        caller
            .push_to_session(home.key.clone(), home.generation, payload)
            .await
    }

    /// The immutable metadata snapshot of the message this turn handles (empty for timer
    /// ticks and messages sent without metadata). The same contract holds for a local and a
    /// remote owner.
    pub fn metadata(&self) -> &Metadata {
        &self.turn.metadata
    }

    /// The relocation boundary of an `ApplicationSignaled` SpotWide User Spot:
    /// `ctx.relocation_ready().defer()` (see [`RelocationReady::defer`]).
    pub fn relocation_ready(&self) -> RelocationReady<'_, S> {
        RelocationReady { ctx: self }
    }

    /// The object's state, for the current turn. Drop the guard before the next `.await` (the
    /// compiler insists: a handler future holding it is not `Send`).
    ///
    /// # Panics
    /// When called without the turn: inside the future given to [`Ctx::yield_on`] (the turn is
    /// given back then) or from a task that outlived its handler. Turns never overlap, so the
    /// state is never touched by two of them; a handler panic ends as `HandlerFailed`.
    pub fn state(&self) -> MutexGuard<'_, S> {
        assert!(
            lock(&self.turn.ender).is_some(),
            "object state used outside the object's turn (inside yield_on, or after the handler \
             returned)"
        );
        lock(&self.shared.state)
    }

    /// `Yield`: give the turn back while `fut` runs, then continue in a new turn.
    ///
    /// - In a SpotWide User Spot or an Instance Spot the shared Spot turn goes back: other
    ///   queue work of the Spot (and of its member Actors) runs meanwhile, and the handler
    ///   continues in a new turn queued behind the work accepted before its result arrived.
    /// - In a member Actor of a SpotWide User Spot only the Spot's gate goes back: the Spot and
    ///   the other members run meanwhile, but this Actor keeps its queue claim (glossary §5
    ///   "Actor queue claim"), so its next message waits for this job to finish. The handler
    ///   continues once it has the gate again.
    ///
    /// # Errors
    /// `InvalidOperation` anywhere else (the turn is kept; `fut` is not polled).
    pub async fn yield_on<F: Future>(&self, fut: F) -> Result<F::Output, CallError> {
        if lock(&self.turn.ender).is_none() {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "Yield needs the handler's turn (not inside another Yield, nor after the handler \
                 returned)",
            ));
        }
        if self.shared.mode != ExecMode::Yielding {
            let (gate, guard) = {
                let mut g = lock(&self.turn.gate);
                (g.gate.clone(), g.guard.take())
            };
            let (Some(gate), Some(guard)) = (gate, guard) else {
                return Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    "Yield is allowed only in SpotWide User Spots (and their member Actors, \
                     while they hold the Spot's gate) and Instance Spots",
                ));
            };
            // A member Actor: give the Spot's gate back, keep the Actor's queue claim.
            drop(guard);
            let out = fut.await;
            let guard = gate.lock_owned().await;
            lock(&self.turn.gate).guard = Some(guard);
            return Ok(out);
        }
        let token = self
            .shared
            .with_queue(|q| q.yield_turn())
            .ok_or_else(|| CallError::new(ErrorKind::Unavailable, "the object's queue is gone"))?
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let (grant_tx, grant_rx) = oneshot::channel::<Grant>();
        lock(&self.shared.resume).insert(token, grant_tx);
        // If this future is dropped or panics before it has its turn back, the continuation is
        // forgotten, so the object still reaches a handler boundary (capture) afterwards.
        let mut guard = YieldGuard {
            shared: &self.shared,
            token,
            armed: true,
        };
        self.end_turn(TurnEnd::Yielded);
        let out = fut.await;
        // Queue the continuation behind what was accepted meanwhile, then wait for its turn.
        let queued = self.shared.with_queue(|q| q.resume(token).is_ok());
        if queued != Some(true) {
            return Err(CallError::new(ErrorKind::ShuttingDown, "object closed"));
        }
        self.shared.wake.notify_one();
        let (ender, gate) = grant_rx
            .await
            .map_err(|_| CallError::new(ErrorKind::ShuttingDown, "object closed"))?;
        guard.armed = false;
        *lock(&self.turn.gate) = gate;
        *lock(&self.turn.ender) = Some(ender);
        Ok(out)
    }

    /// Arm one-shot timer `id`: `msg` is delivered to its send handler after `delay`.
    ///
    /// # Errors
    /// `InvalidOperation` for ID 0, an ID already armed, or a message that does not encode.
    pub fn timer_once<M: JsonMessage>(
        &self,
        id: u64,
        delay: Duration,
        msg: &M,
    ) -> Result<(), CallError> {
        let p = encode_json(msg)?;
        let due = self.shared.now_ms().saturating_add(millis(delay));
        lock(&self.shared.timers)
            .once(id, due, M::PACKET_NAME, p.payload)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Arm periodic timer `id`: `msg` every `period`, the first after one period.
    ///
    /// # Errors
    /// As [`Ctx::timer_once`]; a zero period too.
    pub fn timer_every<M: JsonMessage>(
        &self,
        id: u64,
        period: Duration,
        msg: &M,
    ) -> Result<(), CallError> {
        let p = encode_json(msg)?;
        let period_ms = millis(period);
        let due = self.shared.now_ms().saturating_add(period_ms);
        lock(&self.shared.timers)
            .periodic(id, due, period_ms, M::PACKET_NAME, p.payload)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Cancel timer `id`; `true` if it was armed.
    pub fn cancel_timer(&self, id: u64) -> bool {
        lock(&self.shared.timers).cancel(id)
    }

    fn end_turn(&self, how: TurnEnd) {
        // The gate goes back first, so the next turn (or another member) can take it.
        {
            let mut g = lock(&self.turn.gate);
            drop(g.guard.take());
            g.gate = None;
        }
        if let Some(tx) = lock(&self.turn.ender).take() {
            let _ = tx.send(how);
        }
    }
}

/// A handler calls other objects by ID through the runtime it runs in (the same path as
/// [`ObjectRuntime`](crate::object::runtime::ObjectRuntime)). An `Async` request to an object
/// of this turn's own SpotWide group (its Spot or a fellow member) is refused at once with
/// `InvalidOperation`. One to this same object, or a cycle (A → B → A) of `Async` requests,
/// waits for a turn its own caller holds and ends only at its deadline: use `Yield` or a
/// one-way send for such patterns. Outside a runtime every call is `InvalidOperation`.
impl<S: Send + 'static> crate::object::ObjectCalls for Ctx<S> {
    fn call_payload(
        &self,
        kind: ObjectKind,
        id: &str,
        payload: TypedPayload,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Option<TypedPayload>, CallError>> + Send {
        let caller = self
            .shared
            .home
            .caller
            .as_ref()
            .and_then(std::sync::Weak::upgrade);
        let turn = Arc::clone(&self.turn);
        let id = id.to_owned();
        async move {
            let caller = caller.ok_or_else(|| {
                CallError::new(
                    ErrorKind::InvalidOperation,
                    "this object runs outside an object runtime and cannot call other objects",
                )
            })?;
            // Read when first polled, not when built: a call wrapped in `yield_on` runs after
            // the turn gave its gate back.
            let held = {
                let g = lock(&turn.gate);
                g.guard.as_ref().and(g.gate.clone())
            };
            caller.call_object(kind, id, payload, timeout, held).await
        }
    }
}

/// A queue and its timers captured at a handler boundary (glossary §5 "Object execution
/// queue"; wire §9), in the durable forms of `relocation-envelope-v1`.
#[derive(Debug)]
pub struct CapturedQueue {
    /// Not-yet-run application work in run order: each one-way message (and each timer tick
    /// that was due and queued already, as a send to the tick's handler) as the original
    /// service record it would travel as, with its queue sequence.
    pub saved: Vec<zlink_protocol::generated::SavedWork>,
    /// Timers not yet due, with their remaining time.
    pub timers: Vec<zlink_protocol::generated::CapturedTimer>,
    /// Connection-bound work that no envelope can carry: requests whose caller waits in this
    /// process, and membership notifications. The caller of the capture decides their fate
    /// ([`BoundWork::fail`], or put them back with [`ObjectExecutor::resume_after_capture`]).
    pub bound: Vec<BoundWork>,
    /// The captured one-way messages as queue items, for an abort (never re-decoded).
    kept: Vec<BoundWork>,
}

/// Split captured queue items: one-way messages (and current ticks, as sends to their
/// handler) are kept for saving; requests and notifications are bound. The timers leave with
/// the capture: none of them fires here any more.
fn take_captured(
    timers: &mut TimerSet,
    now_ms: u64,
    items: Vec<super::queue::Captured<Work>>,
) -> CapturedQueue {
    let mut out = CapturedQueue {
        saved: Vec::new(),
        timers: timers.capture(now_ms),
        bound: Vec::new(),
        kept: Vec::new(),
    };
    for c in items {
        let (seq, lane) = (c.seq, c.lane);
        match c.item {
            Work::Send(p, m) => out.kept.push(BoundWork {
                seq,
                lane,
                work: Work::Send(p, m),
            }),
            Work::Tick(t) => {
                // A due tick keeps its place among the messages, as a send to its handler; a
                // stale one would not have run, so it is not carried.
                if !timers.is_current(&t) {
                    continue;
                }
                timers.consumed(&t);
                let p = TypedPayload::new(
                    t.timer.packet_name.clone(),
                    JSON_CONTENT_TYPE,
                    t.timer.payload.clone(),
                );
                out.kept.push(BoundWork {
                    seq,
                    lane,
                    work: Work::Send(p, None),
                });
            }
            work @ (Work::Request(..)
            | Work::SendNotify(..)
            | Work::Member { .. }
            | Work::Hold { .. }
            | Work::RelocationReadyCompleted) => {
                out.bound.push(BoundWork { seq, lane, work });
            }
        }
    }
    *timers = TimerSet::new();
    out
}

/// One not-yet-run application item of a capture, by reference, in run order: what a move
/// carries to the target (see [`CapturedQueue::carried`]).
pub(crate) struct CarriedRef<'a> {
    /// Its queue sequence.
    pub(crate) seq: u64,
    /// The payload.
    pub(crate) payload: &'a TypedPayload,
    /// Its metadata snapshot.
    pub(crate) metadata: Option<&'a Metadata>,
    /// A request (its terminal is relayed back); otherwise a one-way message.
    pub(crate) request: bool,
}

impl CapturedQueue {
    /// Every captured application item in run order — the one-way messages (due ticks
    /// included) and the requests — for a move.
    ///
    /// # Errors
    /// `Unavailable` when the capture holds work no move can carry yet: a membership
    /// notification, a queue hold or the first message of a cold activation (the object is
    /// not idle; wire §9 "Retiring seal").
    pub(crate) fn carried(&self) -> Result<Vec<CarriedRef<'_>>, CallError> {
        let mut out = Vec::with_capacity(self.kept.len() + self.bound.len());
        for b in self.kept.iter().chain(&self.bound) {
            match &b.work {
                Work::Send(p, m) => out.push(CarriedRef {
                    seq: b.seq,
                    payload: p,
                    metadata: m.as_ref(),
                    request: false,
                }),
                Work::Request(p, m, _) => out.push(CarriedRef {
                    seq: b.seq,
                    payload: p,
                    metadata: m.as_ref(),
                    request: true,
                }),
                Work::SendNotify(..)
                | Work::Member { .. }
                | Work::Hold { .. }
                | Work::RelocationReadyCompleted
                | Work::Tick(_) => {
                    return Err(CallError::new(
                        ErrorKind::Unavailable,
                        "the object is not idle (a notification, hold or first message is queued)",
                    ));
                }
            }
        }
        out.sort_by_key(|c| c.seq);
        Ok(out)
    }

    /// Every captured item as data to carry on (payload, metadata, a request's reply sender),
    /// in run order, consuming the capture: what reached the executor after an earlier capture
    /// of a move, to follow to the new owner. Work no move can carry (notifications, holds,
    /// first messages) ends with `Unavailable`.
    pub(crate) fn into_carried(
        self,
    ) -> Vec<(TypedPayload, Option<Metadata>, Option<super::work::Reply>)> {
        let mut items: Vec<BoundWork> = self.kept.into_iter().chain(self.bound).collect();
        items.sort_by_key(|b| b.seq);
        let mut out = Vec::with_capacity(items.len());
        for b in items {
            match b.work {
                Work::Send(p, m) => out.push((p, m, None)),
                Work::Request(p, m, reply) => out.push((p, m, Some(reply))),
                work @ (Work::SendNotify(..)
                | Work::Member { .. }
                | Work::Hold { .. }
                | Work::RelocationReadyCompleted
                | Work::Tick(_)) => BoundWork {
                    seq: b.seq,
                    lane: b.lane,
                    work,
                }
                .fail(CallError::new(
                    ErrorKind::Unavailable,
                    "the object moved to another node",
                )),
            }
        }
        out
    }

    /// The captured requests' reply senders by queue sequence, consuming the capture (the
    /// move handed the object over: their terminals come back relayed).
    pub(crate) fn into_replies(self) -> Vec<(u64, super::work::Reply)> {
        self.bound
            .into_iter()
            .filter_map(|b| match b.work {
                Work::Request(_, _, reply) => Some((b.seq, reply)),
                Work::Send(..)
                | Work::SendNotify(..)
                | Work::Member { .. }
                | Work::Hold { .. }
                | Work::RelocationReadyCompleted
                | Work::Tick(_) => None,
            })
            .collect()
    }
}

/// Work a move carried to this node, decoded, in run order (see
/// [`crate::object::registry::ObjectType::restore_moved`]).
pub struct MovedWork(pub(crate) Vec<super::queue::Captured<Work>>);

impl std::fmt::Debug for MovedWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MovedWork")
            .field("items", &self.0.len())
            .finish()
    }
}

impl MovedWork {
    /// Wrap decoded items (run order).
    pub(crate) fn new(items: Vec<(u64, Work)>) -> Self {
        Self(
            items
                .into_iter()
                .map(|(seq, item)| super::queue::Captured {
                    seq,
                    lane: Lane::Application,
                    item,
                })
                .collect(),
        )
    }
}

/// One connection-bound queue item left out of a capture (see [`CapturedQueue::bound`]).
pub struct BoundWork {
    seq: u64,
    lane: Lane,
    work: Work,
}

impl std::fmt::Debug for BoundWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundWork").field("seq", &self.seq).finish()
    }
}

impl BoundWork {
    /// End it: a request gets `err` as its single terminal result.
    pub fn fail(self, err: CallError) {
        if let Work::Request(_, _, reply) | Work::SendNotify(_, _, reply) = self.work {
            let _ = reply.send(Err(err));
        }
    }
}

/// The service record a saved one-way message travels as: `spotSend` (21) or `actorSend`
/// (24) on the object's own route, from `source`.
fn saved_record(
    seq: u64,
    route: &zlink_protocol::generated::RouteFence,
    source: &zlink_protocol::generated::NodeFence,
    payload: TypedPayload,
    metadata: Option<Metadata>,
) -> Result<zlink_protocol::generated::SavedWork, CallError> {
    use zlink_protocol::generated::{ActorSend, CommandBody, Leg, ObjectKind as Wk, SpotSend};
    use zlink_protocol::record::{Record, WireContext};
    let body = match route.object_kind {
        Wk::Actor => CommandBody::ActorSend(ActorSend {
            route: route.clone(),
            source: source.clone(),
        }),
        Wk::Spot => CommandBody::SpotSend(SpotSend {
            route: route.clone(),
            source: source.clone(),
        }),
    };
    let mut record = Record::new(body).with_payload(payload);
    record.metadata = metadata;
    let frames = record
        .encode(WireContext::route_mesh(Leg::Send))
        .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(zlink_protocol::generated::SavedWork {
        sequence: seq,
        frames: frames.into_iter().map(bytes::Bytes::from).collect(),
    })
}

/// Decode saved work back into queue items (typed errors for anything that is not a saved
/// one-way Spot / Actor record of object `key`).
fn restore_saved(
    key: &AuthorityKey,
    saved: &[zlink_protocol::generated::SavedWork],
) -> Result<Vec<super::queue::Captured<Work>>, CallError> {
    use zlink_protocol::generated::{CommandBody, Leg};
    use zlink_protocol::record::{Record, WireContext};
    let bad = |why: String| CallError::new(ErrorKind::InvalidOperation, why);
    saved
        .iter()
        .map(|w| {
            let record = Record::decode_shared(&w.frames, WireContext::route_mesh(Leg::Send))
                .map_err(|e| bad(format!("saved work {}: {e}", w.sequence)))?;
            let route = match &record.body {
                CommandBody::ActorSend(a) => &a.route,
                CommandBody::SpotSend(s) => &s.route,
                other => {
                    return Err(bad(format!(
                        "saved work {} is a {:?} record, not a one-way Spot / Actor message",
                        w.sequence,
                        other.command()
                    )));
                }
            };
            let named = AuthorityKey::new(
                match route.object_kind {
                    zlink_protocol::generated::ObjectKind::Actor => ObjectKind::Actor,
                    zlink_protocol::generated::ObjectKind::Spot => ObjectKind::Spot,
                },
                &route.object_id,
            )
            .map_err(|e| bad(e.to_string()))?;
            if &named != key {
                return Err(bad(format!(
                    "saved work {} names {}, not this object",
                    w.sequence, route.object_id
                )));
            }
            let payload = record
                .payload
                .ok_or_else(|| bad(format!("saved work {} has no payload", w.sequence)))?;
            Ok(super::queue::Captured {
                seq: w.sequence,
                lane: Lane::Application,
                item: Work::Send(payload, record.metadata),
            })
        })
        .collect()
}

/// Forgets a yielded continuation that never got its turn back (see [`Ctx::yield_on`]).
struct YieldGuard<'a, S> {
    shared: &'a Shared<S>,
    token: ResumeToken,
    armed: bool,
}

impl<S> Drop for YieldGuard<'_, S> {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.shared.resume).remove(&self.token);
            let _ = self.shared.with_queue(|q| q.forget(self.token));
            self.shared.wake.notify_one();
        }
    }
}

use crate::millis;

/// One running object incarnation: its queue, timers and the task that hands out turns.
pub struct ObjectExecutor<S> {
    shared: Arc<Shared<S>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl<S: Send + 'static> ObjectExecutor<S> {
    /// Start an executor over `state` with a private queue (must be called inside a tokio
    /// runtime).
    pub fn start(state: S, handlers: ObjectHandlers<S>, mode: ExecMode) -> Self {
        Self::start_bound(Binding::standalone(), state, handlers, mode)
    }

    /// Start an executor whose queue is `home`'s slot in a node's [`Objects`] table: it hands
    /// out turns once the slot is Ready.
    pub fn start_bound(
        home: Binding,
        state: S,
        handlers: ObjectHandlers<S>,
        mode: ExecMode,
    ) -> Self {
        Self::start_gated(home, state, handlers, mode, None)
    }

    /// Start an executor restored from a capture (the target side of a move, or a fresh
    /// runtime): the saved work goes into the queue ahead of anything that arrived since
    /// (e.g. through a temporary queue), in its captured order, and the timers are re-armed
    /// with their remaining time on this executor's clock. It runs once `home` is Ready.
    ///
    /// # Errors
    /// `InvalidOperation` for saved work that does not decode as a one-way message to this
    /// object, or inconsistent timers; `Unavailable` when `home`'s queue is not open.
    pub fn start_restored(
        home: Binding,
        state: S,
        handlers: ObjectHandlers<S>,
        mode: ExecMode,
        gate: Option<SpotGate>,
        saved: &[zlink_protocol::generated::SavedWork],
        timers: &[zlink_protocol::generated::CapturedTimer],
    ) -> Result<Self, CallError> {
        let items = restore_saved(&home.key, saved)?;
        let exec = Self::start_gated(home, state, handlers, mode, gate);
        exec.shared.restore(items, timers)?;
        exec.shared.wake.notify_one();
        Ok(exec)
    }

    /// Start an executor restored by a move (the target side): `moved` goes into the queue
    /// ahead of anything that arrives later, in its order, and the timers are re-armed with
    /// their remaining time. It runs once `home` is Ready.
    ///
    /// # Errors
    /// `InvalidOperation` for inconsistent timers; `Unavailable` when `home`'s queue is not
    /// open.
    pub fn start_moved(
        home: Binding,
        state: S,
        handlers: ObjectHandlers<S>,
        mode: ExecMode,
        gate: Option<SpotGate>,
        moved: MovedWork,
        timers: &[zlink_protocol::generated::CapturedTimer],
    ) -> Result<Self, CallError> {
        let exec = Self::start_gated(home, state, handlers, mode, gate);
        exec.shared.restore(moved.0, timers)?;
        exec.shared.wake.notify_one();
        Ok(exec)
    }

    /// [`ObjectExecutor::start_bound`] with the execution gate its turns take (a SpotWide User
    /// Spot's own gate, or the gate of the SpotWide Spot an Actor is a member of).
    pub fn start_gated(
        home: Binding,
        state: S,
        handlers: ObjectHandlers<S>,
        mode: ExecMode,
        gate: Option<SpotGate>,
    ) -> Self {
        let wake = Arc::new(Notify::new());
        home.objects.set_waker(&home.key, Arc::clone(&wake));
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            home,
            gate: Mutex::new(gate),
            paused: AtomicBool::new(false),
            app_signaled: AtomicBool::new(false),
            relocation: Mutex::new(BoundaryState::default()),
            boundary: Notify::new(),
            timers: Mutex::new(TimerSet::new()),
            resume: Mutex::new(HashMap::new()),
            wake,
            handlers,
            mode,
            epoch: Instant::now(),
            closed: AtomicBool::new(false),
            stats: ExecStats::default(),
        });
        let task = tokio::spawn(run(Arc::clone(&shared)));
        Self {
            shared,
            task: Mutex::new(Some(task)),
        }
    }

    /// Accept one-way message `msg` into the queue (source-local admission).
    ///
    /// # Errors
    /// `Unavailable` after close; `InvalidOperation` when `msg` does not encode.
    pub fn send<M: JsonMessage>(&self, msg: &M) -> Result<(), CallError> {
        self.shared.push(Work::Send(encode_json(msg)?, None))
    }

    /// Accept request `msg` and wait for its single terminal reply.
    ///
    /// # Errors
    /// The handler's error; `NotFound` without a handler; `Unavailable` when the object closed
    /// before the request ran; `HandlerFailed` when the handler panicked.
    pub async fn request<M: JsonMessage, R: JsonMessage>(&self, msg: &M) -> Result<R, CallError> {
        let reply = self.request_payload(encode_json(msg)?).await?;
        decode_json(&reply)
    }

    /// Accept a one-way typed payload.
    ///
    /// # Errors
    /// `Unavailable` after close.
    pub fn send_payload(&self, payload: TypedPayload) -> Result<(), CallError> {
        self.send_with(payload, None)
    }

    /// Accept a one-way typed payload with its metadata snapshot.
    ///
    /// # Errors
    /// `Unavailable` after close.
    pub fn send_with(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<(), CallError> {
        self.shared.push(Work::Send(payload, metadata))
    }

    /// Accept a request as a typed payload and wait for its single terminal reply.
    ///
    /// # Errors
    /// As [`ObjectExecutor::request`].
    pub async fn request_payload(&self, payload: TypedPayload) -> Result<TypedPayload, CallError> {
        self.request_start(payload)?
            .await
            .map_err(|_| CallError::new(ErrorKind::Unavailable, "object closed"))?
    }

    /// Accept a request now (it takes its place in the queue before this returns) and return
    /// the receiver of its single terminal reply.
    ///
    /// # Errors
    /// `Unavailable` after close.
    pub fn request_start(&self, payload: TypedPayload) -> Result<ReplyReceiver, CallError> {
        self.request_start_with(payload, None)
    }

    /// [`ObjectExecutor::request_start`] with the request's metadata snapshot.
    ///
    /// # Errors
    /// `Unavailable` after close.
    pub fn request_start_with(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<ReplyReceiver, CallError> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .push(Work::Request(payload, metadata, tx.into()))?;
        Ok(rx)
    }

    /// Queue a request whose terminal goes to `reply`, answered exactly once (`Unavailable`
    /// when the object closed: the dropped reply answers so).
    pub(crate) fn request_into(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        reply: super::work::Reply,
    ) {
        let _ = self.shared.push(Work::Request(payload, metadata, reply));
    }

    /// Capture the queue at the next handler boundary: stop handing out new turns, let the
    /// running turn and every yielded continuation finish, then take the not-yet-run work and
    /// the armed timers as durable data (`route` names this object and, with `source`, the
    /// records saved work travels as). The executor stays paused: new arrivals wait in its
    /// queue (seal admission first to hold them elsewhere) until
    /// [`ObjectExecutor::resume_after_capture`] or close.
    ///
    /// # Errors
    /// `InvalidOperation` when `route` names another object, or a message cannot be encoded
    /// (nothing is captured then, and the object runs on); `Unavailable` when the object
    /// closed meanwhile.
    pub async fn capture(
        &self,
        route: &zlink_protocol::generated::RouteFence,
        source: &zlink_protocol::generated::NodeFence,
    ) -> Result<CapturedQueue, CallError> {
        let sh = &self.shared;
        let named = AuthorityKey::new(
            match route.object_kind {
                zlink_protocol::generated::ObjectKind::Actor => ObjectKind::Actor,
                zlink_protocol::generated::ObjectKind::Spot => ObjectKind::Spot,
            },
            &route.object_id,
        )
        .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        if named != sh.home.key {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "the capture route names {}, not this object",
                    route.object_id
                ),
            ));
        }
        sh.paused.store(true, Ordering::Release);
        sh.wake.notify_one();
        let mut out = loop {
            if sh.closed.load(Ordering::Acquire) {
                return Err(CallError::new(ErrorKind::Unavailable, "object closed"));
            }
            let taken = {
                // Timers first (the run loop queues due ticks under this lock too).
                let mut timers = lock(&sh.timers);
                match sh.with_queue(super::queue::ExecQueue::capture) {
                    Some(Ok(items)) => Some(Ok(take_captured(&mut timers, sh.now_ms(), items))),
                    Some(Err(_)) => None,
                    None => Some(Err(CallError::new(
                        ErrorKind::Unavailable,
                        "the object's queue is gone",
                    ))),
                }
            };
            match taken {
                Some(r) => break r?,
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        };
        for k in &out.kept {
            let Work::Send(p, m) = &k.work else {
                continue;
            };
            match saved_record(k.seq, route, source, p.clone(), m.clone()) {
                Ok(w) => out.saved.push(w),
                Err(e) => {
                    // Nothing is lost: put everything back and run on.
                    self.resume_after_capture(out);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Give up a capture that has not completed (its future was dropped, e.g. at a
    /// deadline): turns run again; nothing was taken.
    pub fn cancel_capture(&self) {
        self.shared.paused.store(false, Ordering::Release);
        self.shared.wake.notify_one();
    }

    /// Undo a capture (the move was aborted): the captured work, the bound work and the timers
    /// go back ahead of anything that arrived meanwhile, and turns run again. Nothing is lost:
    /// the original items are put back, not decoded from their saved form.
    pub fn resume_after_capture(&self, captured: CapturedQueue) {
        let sh = &self.shared;
        let mut items: Vec<super::queue::Captured<Work>> = captured
            .kept
            .into_iter()
            .chain(captured.bound)
            .map(|b| super::queue::Captured {
                seq: b.seq,
                lane: b.lane,
                item: b.work,
            })
            .collect();
        items.sort_by_key(|c| c.seq);
        if let Err(e) = sh.restore(items, &captured.timers) {
            // Only a queue that is gone (the object closed) gets here: its work was ended.
            tracing::warn!(error = %e, "an aborted capture found the object closed");
        }
        sh.paused.store(false, Ordering::Release);
        sh.wake.notify_one();
    }

    /// Put the first message of a cold activation at the head of the queue, ahead of anything
    /// accepted since (the activation barrier keeps the queue closed until the caller marks it
    /// Ready). The receiver gets the request's reply, or an empty payload when a send's handler
    /// has finished.
    ///
    /// # Errors
    /// `Unavailable` after close.
    pub fn first_message(
        &self,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        request: bool,
    ) -> Result<ReplyReceiver, CallError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(CallError::new(ErrorKind::Unavailable, "object closed"));
        }
        let (tx, rx) = oneshot::channel();
        let item = if request {
            Work::Request(payload, metadata, tx.into())
        } else {
            Work::SendNotify(payload, metadata, tx.into())
        };
        self.shared
            .with_queue(|q| {
                q.restore_front(vec![super::queue::Captured {
                    seq: 0,
                    lane: Lane::Application,
                    item,
                }]);
            })
            .ok_or_else(|| CallError::new(ErrorKind::Unavailable, "the object's queue is gone"))?;
        self.shared.wake.notify_one();
        Ok(rx)
    }

    /// Wait until this object is at a handler boundary and hold it there: a control claim on
    /// the lifecycle lane (served before application work) whose turn lasts until the returned
    /// sender is dropped or used. Nothing of the object runs meanwhile — no handler, no
    /// continuation of a member's `Yield` (its job keeps the queue claim until it finishes).
    ///
    /// # Errors
    /// `Unavailable` when the object closed (before or while waiting).
    pub async fn hold(&self) -> Result<oneshot::Sender<()>, CallError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(CallError::new(ErrorKind::Unavailable, "object closed"));
        }
        let (at_tx, at_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        match self.shared.home.objects.dispatch(
            &self.shared.home.key,
            Lane::Lifecycle,
            Work::Hold {
                at_boundary: at_tx,
                release: release_rx,
            },
        ) {
            Dispatched::NotHere(_) => {
                return Err(CallError::new(
                    ErrorKind::Unavailable,
                    "the object's queue is gone",
                ));
            }
            _ => self.shared.wake.notify_one(),
        }
        at_rx
            .await
            .map_err(|_| CallError::new(ErrorKind::Unavailable, "object closed"))?;
        Ok(release_tx)
    }

    /// Queue a membership notification (a Spot control claim on the lifecycle lane).
    ///
    /// # Errors
    /// `Unavailable` after close.
    pub fn notify_member(&self, joined: bool, actor: String) -> Result<(), CallError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(CallError::new(ErrorKind::Unavailable, "object closed"));
        }
        let h = &self.shared.handlers;
        if (joined && h.joined.is_none()) || (!joined && h.left.is_none()) {
            // No callback: no turn to spend.
            return Ok(());
        }
        match self.shared.home.objects.dispatch(
            &self.shared.home.key,
            Lane::Lifecycle,
            Work::Member { joined, actor },
        ) {
            Dispatched::NotHere(_) => Err(CallError::new(
                ErrorKind::Unavailable,
                "the object's queue is gone",
            )),
            _ => Ok(()),
        }
    }

    /// Make `relocation_ready().defer()` apply to this object (an `ApplicationSignaled`
    /// SpotWide User Spot).
    pub fn set_application_signaled(&self, on: bool) {
        self.shared.app_signaled.store(on, Ordering::Release);
    }

    /// Prepare a move that waits for a `defer()` boundary (`on`), or withdraw it: a Spot
    /// already held at a boundary runs on.
    pub fn prepare_relocation(&self, on: bool) {
        let sh = &self.shared;
        let mut b = lock(&sh.relocation);
        let held = std::mem::take(&mut b.reached);
        b.prepared = on;
        drop(b);
        if held && !on {
            sh.paused.store(false, Ordering::Release);
            sh.wake.notify_one();
        }
    }

    /// The mover takes the boundary it waited for: the move is no longer prepared, and the
    /// object stays paused there for its capture (which ends the pause, or a
    /// `cancel_capture`).
    pub fn take_boundary(&self) {
        *lock(&self.shared.relocation) = BoundaryState::default();
    }

    /// Wait until a job that called `defer()` while prepared ended normally; the object is
    /// then held there (no new turn) until captured or the move is withdrawn.
    pub async fn relocation_boundary(&self) {
        let sh = &self.shared;
        loop {
            let notified = sh.boundary.notified();
            if lock(&sh.relocation).reached {
                return;
            }
            notified.await;
        }
    }

    /// Queue the `on_relocation_ready_completed` callback (if there is one) as a lifecycle
    /// claim, ahead of the work that moved with this object.
    ///
    /// # Errors
    /// `Unavailable` after close.
    pub fn relocation_ready_completed(&self) -> Result<(), CallError> {
        if self.shared.handlers.ready_completed.is_none() {
            return Ok(());
        }
        match self.shared.home.objects.dispatch(
            &self.shared.home.key,
            Lane::Lifecycle,
            Work::RelocationReadyCompleted,
        ) {
            Dispatched::NotHere(_) => Err(CallError::new(
                ErrorKind::Unavailable,
                "the object's queue is gone",
            )),
            _ => Ok(()),
        }
    }

    /// The gate this object's turns take (see [`SpotGate`]).
    pub fn gate(&self) -> Option<SpotGate> {
        lock(&self.shared.gate).clone()
    }

    /// Change the gate later turns take (a member Actor joining or leaving a SpotWide Spot).
    /// Call it at a handler boundary of this object: a turn already running keeps the gate it
    /// took.
    pub fn set_gate(&self, gate: Option<SpotGate>) {
        *lock(&self.shared.gate) = gate;
    }

    /// Read the state outside any handler (inspection, tests).
    pub fn with_state<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&lock(&self.shared.state))
    }

    /// Counters.
    pub fn stats(&self) -> &ExecStats {
        &self.shared.stats
    }

    /// Work not finished yet: waiting items, the running turn and yielded continuations.
    pub fn pending(&self) -> usize {
        self.shared.with_queue(|q| q.pending()).unwrap_or(0)
    }

    /// Items waiting in the queue.
    pub fn queued(&self) -> usize {
        self.shared.with_queue(|q| q.len()).unwrap_or(0)
    }

    /// Where the queue lives.
    pub fn binding(&self) -> &Binding {
        &self.shared.home
    }

    /// Stop: no new work is accepted; waiting requests end with `Unavailable`. A turn that is
    /// running is not interrupted.
    pub async fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        let task = lock(&self.task).take();
        if let Some(t) = task {
            let _ = t.await;
        }
        // Continuations waiting for a turn end with ShuttingDown (their grant senders drop).
        lock(&self.shared.resume).clear();
        let home = &self.shared.home;
        let left = home
            .objects
            .remove(&home.key, home.generation)
            .unwrap_or_default();
        for w in left {
            if let Work::Request(_, _, reply) | Work::SendNotify(_, _, reply) = w {
                let _ = reply.send(Err(CallError::new(ErrorKind::Unavailable, "object closed")));
            }
        }
    }
}

impl<S> Drop for ObjectExecutor<S> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        if let Some(t) = lock(&self.task).take() {
            t.abort();
        }
    }
}

/// Hand out turns until closed.
async fn run<S: Send + 'static>(sh: Arc<Shared<S>>) {
    loop {
        if sh.closed.load(Ordering::Acquire) {
            return;
        }
        // Paused for a capture: only continuations run (they must finish for the boundary);
        // new work waits in the queue, and due timers stay timers (captured as such).
        let paused = sh.paused.load(Ordering::Acquire);
        if !paused {
            // Under the timers lock, so a capture (which takes it first) sees each due timer
            // either still armed or already queued as a tick, never in between.
            let mut timers = lock(&sh.timers);
            for t in timers.take_due(sh.now_ms()) {
                sh.stats.ticks.fetch_add(1, Ordering::Relaxed);
                let _ = sh
                    .home
                    .objects
                    .dispatch(&sh.home.key, Lane::Application, Work::Tick(t));
            }
        }
        let picked = sh
            .home
            .objects
            .with_ready_queue(&sh.home.key, |q| {
                if paused {
                    q.next_resume().map(Picked::Resume)
                } else {
                    q.next_turn()
                }
            })
            .flatten();
        match picked {
            None => {
                let next_due = lock(&sh.timers).next_due();
                match next_due {
                    Some(due) => {
                        let at = sh.epoch + Duration::from_millis(due);
                        tokio::select! {
                            () = sh.wake.notified() => {}
                            () = tokio::time::sleep_until(at) => {}
                        }
                    }
                    None => sh.wake.notified().await,
                }
            }
            Some(Picked::Work { item, .. }) => {
                let gate = if matches!(item, Work::Hold { .. }) {
                    // A framework hold touches no application state: it needs no gate.
                    Some(TurnGate::default())
                } else {
                    take_gate(&sh).await
                };
                let Some(gate) = gate else {
                    // Closed while waiting for the gate: a request's reply sender drops here,
                    // so its caller sees the object closed.
                    return;
                };
                let (tx, rx) = oneshot::channel();
                let ctx = Ctx {
                    shared: Arc::clone(&sh),
                    turn: Arc::new(Turn {
                        ender: Mutex::new(Some(tx)),
                        gate: Mutex::new(gate),
                        metadata: item.metadata().cloned().unwrap_or_else(Metadata::empty),
                    }),
                    deferred: sh
                        .app_signaled
                        .load(Ordering::Acquire)
                        .then(|| Arc::new(AtomicBool::new(false))),
                };
                let held = Arc::clone(&ctx.turn);
                sh.stats.turns.fetch_add(1, Ordering::Relaxed);
                run_turn(&sh, &held, ctx, item, rx).await;
                // A handler that ended without ending its turn still gives the gate back.
                drop(lock(&held.gate).guard.take());
            }
            Some(Picked::Resume(token)) => {
                let Some(gate) = take_gate(&sh).await else {
                    return;
                };
                let (tx, rx) = oneshot::channel();
                let grant = lock(&sh.resume).remove(&token);
                sh.stats.turns.fetch_add(1, Ordering::Relaxed);
                let granted = grant.is_some_and(|g| g.send((tx, gate)).is_ok());
                if granted {
                    wait_turn(&sh, rx).await;
                } else {
                    // The continuation is gone (its task ended): nothing holds the turn.
                    let _ = sh.with_queue(|q| q.complete());
                }
            }
        }
    }
}

/// Take the object's gate for the turn about to start (`Some(empty)` without a gate); `None`
/// when the object closed while waiting.
async fn take_gate<S>(sh: &Shared<S>) -> Option<TurnGate> {
    let gate = lock(&sh.gate).clone();
    let Some(gate) = gate else {
        return Some(TurnGate::default());
    };
    let acquire = Arc::clone(&gate).lock_owned();
    tokio::pin!(acquire);
    loop {
        tokio::select! {
            guard = &mut acquire => {
                return Some(TurnGate { gate: Some(gate), guard: Some(guard) });
            }
            () = sh.wake.notified() => {
                if sh.closed.load(Ordering::Acquire) {
                    return None;
                }
            }
        }
    }
}

/// Run one turn's work on the run loop's own task until the turn ends. The common turn — a
/// handler that returns, or awaits an `Async` call — costs no task spawn and no wake-up of a
/// second task (issue 21: one spawn and two task switches per message before). When the turn
/// ends while the work goes on (a `Yield` hands the turn back while the handler waits for its
/// call; a request's reply is sent just after its turn completed), the rest of the work moves to
/// a task of its own and the loop goes on with the next turn, as when every turn was spawned.
/// A panic outside the handlers' own `catch_unwind` (the synchronous part of a membership or
/// relocation callback) ends only this work, and the turn it never ended is completed here:
/// the loop holds the turn's state (`turn`) itself, so the ender must be dropped by hand.
/// `close` waits for the loop, so for the
/// turn in progress; an executor dropped without `close` aborts the loop and with it a handler
/// still inside its turn (every runtime path closes its objects; the drop is the fallback).
async fn run_turn<S: Send + 'static>(
    sh: &Shared<S>,
    turn: &Turn,
    ctx: Ctx<S>,
    item: Work,
    mut ended: oneshot::Receiver<TurnEnd>,
) {
    let mut work = Box::pin(AssertUnwindSafe(run_work(ctx, item)).catch_unwind());
    tokio::select! {
        biased;
        _ = &mut work => {
            // The work is over. A turn it did not end (it panicked before `end_turn`) ends
            // now: its ender, still in `turn`, is dropped, and the receiver sees the turn gone.
            drop(lock(&turn.ender).take());
            wait_turn(sh, ended).await;
        }
        end = &mut ended => {
            tokio::spawn(work);
            turn_ended(sh, end);
        }
    }
}

/// Wait until the running turn completes (free the queue) or yields (already freed).
async fn wait_turn<S>(sh: &Shared<S>, rx: oneshot::Receiver<TurnEnd>) {
    turn_ended(sh, rx.await);
}

/// A turn ended: completed, or its ender dropped (free the queue), or yielded (already freed).
fn turn_ended<S>(sh: &Shared<S>, end: Result<TurnEnd, oneshot::error::RecvError>) {
    match end {
        Ok(TurnEnd::Yielded) => {}
        Ok(TurnEnd::Complete) | Err(_) => {
            let _ = sh.with_queue(|q| q.complete());
        }
    }
}

async fn run_work<S: Send + 'static>(ctx: Ctx<S>, work: Work) {
    let sh = Arc::clone(&ctx.shared);
    let panicked = || {
        sh.stats.panics.fetch_add(1, Ordering::Relaxed);
        CallError::new(ErrorKind::HandlerFailed, "the handler panicked")
    };
    let end = ctx.clone();
    let deferred = ctx.deferred.clone();
    // A job that called `defer()` while a move was prepared and ended normally is the
    // boundary: pause before the turn ends, so no other turn starts first.
    let boundary = |ok: bool| {
        if ok && deferred.as_ref().is_some_and(|d| d.load(Ordering::Acquire)) {
            sh.reach_boundary();
        }
    };
    match work {
        Work::Send(p, _) => {
            boundary(run_send(&sh, ctx, p, &panicked).await);
        }
        Work::SendNotify(p, _, done) => {
            boundary(run_send(&sh, ctx, p, &panicked).await);
            end.end_turn(TurnEnd::Complete);
            let _ = done.send(Ok(TypedPayload::default()));
            return;
        }
        Work::Tick(t) => {
            // A tick of a timer cancelled or re-armed after it was queued does not run.
            let current = {
                let mut timers = lock(&sh.timers);
                let current = timers.is_current(&t);
                timers.consumed(&t);
                current
            };
            if !current {
                end.end_turn(TurnEnd::Complete);
                return;
            }
            let p = TypedPayload::new(
                t.timer.packet_name.clone(),
                JSON_CONTENT_TYPE,
                t.timer.payload.clone(),
            );
            boundary(run_send(&sh, ctx, p, &panicked).await);
        }
        Work::Hold {
            at_boundary,
            release,
        } => {
            if at_boundary.send(()).is_ok() {
                let _ = release.await;
            }
        }
        Work::Member { joined, actor } => {
            let handler = if joined {
                sh.handlers.joined.clone()
            } else {
                sh.handlers.left.clone()
            };
            if let Some(h) = handler {
                let outcome = AssertUnwindSafe(h(ctx, actor))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(panicked()));
                match outcome {
                    Ok(()) => boundary(true),
                    Err(e) => tracing::warn!(error = %e, "a membership callback failed"),
                }
            }
        }
        Work::RelocationReadyCompleted => {
            if let Some(h) = sh.handlers.ready_completed.clone() {
                let outcome = AssertUnwindSafe(h(ctx))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(panicked()));
                match outcome {
                    Ok(()) => boundary(true),
                    Err(e) => {
                        tracing::warn!(error = %e, "on_relocation_ready_completed failed");
                    }
                }
            }
        }
        Work::Request(p, _, reply) => {
            let handler = sh.handlers.requests.get(p.packet_name.as_bytes()).cloned();
            let result = match handler {
                Some(h) => AssertUnwindSafe(h(ctx, p))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(panicked())),
                None => {
                    sh.stats.no_handler.fetch_add(1, Ordering::Relaxed);
                    Err(CallError::new(
                        ErrorKind::NotFound,
                        format!("no request handler for {:?}", p.packet_name),
                    ))
                }
            };
            boundary(result.is_ok());
            end.end_turn(TurnEnd::Complete);
            let _ = reply.send(result);
            return;
        }
    }
    end.end_turn(TurnEnd::Complete);
}

/// Run a one-way handler; whether it ended normally.
async fn run_send<S: Send + 'static>(
    sh: &Shared<S>,
    ctx: Ctx<S>,
    p: TypedPayload,
    panicked: &impl Fn() -> CallError,
) -> bool {
    let Some(h) = sh.handlers.sends.get(p.packet_name.as_bytes()).cloned() else {
        sh.stats.no_handler.fetch_add(1, Ordering::Relaxed);
        return false;
    };
    let outcome = AssertUnwindSafe(h(ctx, p))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(panicked()));
    match outcome {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(error = %e, "one-way object handler failed");
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! The relocation hooks of the dispatch table, exercised through real executors: the
    //! executor runs exactly the queue that dispatch filled.
    use super::*;
    use crate::object::queue::Captured;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    struct Note {
        s: String,
    }
    impl JsonMessage for Note {
        const PACKET_NAME: &'static str = "t.Note";
    }
    #[derive(Debug, Serialize, Deserialize)]
    struct Read;
    impl JsonMessage for Read {
        const PACKET_NAME: &'static str = "t.Read";
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Seen {
        log: Vec<String>,
    }
    impl JsonMessage for Seen {
        const PACKET_NAME: &'static str = "t.Seen";
    }

    fn handlers() -> ObjectHandlers<Vec<String>> {
        let mut h: ObjectHandlers<Vec<String>> = ObjectHandlers::new();
        h.on_send(|ctx, n: Note| async move {
            ctx.state().push(n.s);
            Ok(())
        });
        h.on_request(|ctx, _: Read| async move {
            Ok::<_, CallError>(Seen {
                log: ctx.state().clone(),
            })
        });
        h
    }

    fn note(s: &str) -> Work {
        Work::Send(encode_json(&Note { s: s.into() }).unwrap(), None)
    }

    fn key(id: &str) -> AuthorityKey {
        AuthorityKey::new(ObjectKind::Actor, id).unwrap()
    }

    async fn log_of(exec: &ObjectExecutor<Vec<String>>) -> Vec<String> {
        exec.request::<Read, Seen>(&Read).await.unwrap().log
    }

    fn route_of(k: &str) -> zlink_protocol::generated::RouteFence {
        zlink_protocol::generated::RouteFence {
            object_kind: zlink_protocol::generated::ObjectKind::Actor,
            object_id: k.into(),
            object_generation: 3,
            target_node: zlink_protocol::generated::NodeFence {
                rid: "node-a".into(),
                lifecycle_generation: 9,
            },
            authority_owner_generation: 1,
            owner_lease_generation: 1,
        }
    }

    /// Issue "Spots and Actors" acceptance: a queue with pending messages, a due tick already
    /// queued among them, armed timers and a waiting request is captured at a handler boundary,
    /// encoded as `relocation-envelope-v1` (generated codec), decoded, and restored into a
    /// fresh table and executor. The saved work runs first in its captured order (the tick
    /// keeps its place between the messages), then work that arrived meanwhile; the armed
    /// timers fire with their remaining time and in the same order; the connection-bound
    /// request is handed back to the caller, not encoded.
    #[tokio::test]
    async fn a_captured_queue_round_trips_through_its_durable_encoding_in_order() {
        let source_objects = Objects::new();
        let k = key("cap-1");
        source_objects.open(&k, 3).unwrap();
        let exec = ObjectExecutor::start_bound(
            Binding::new(Arc::clone(&source_objects), k.clone(), 3),
            vec![],
            handlers(),
            ExecMode::Serial,
        );
        // Creating: nothing runs, so the queue is exactly what is built here.
        exec.send(&Note { s: "m1".into() }).unwrap();
        let tick_payload = encode_json(&Note {
            s: "tick-due".into(),
        })
        .unwrap()
        .payload;
        let now = exec.shared.now_ms();
        {
            let mut t = lock(&exec.shared.timers);
            t.once(1, now, Note::PACKET_NAME, tick_payload).unwrap();
            let due = t.take_due(now);
            assert_eq!(due.len(), 1);
            for tick in due {
                assert!(matches!(
                    source_objects.dispatch(&k, Lane::Application, Work::Tick(tick)),
                    Dispatched::Queued(_)
                ));
            }
            let late = |s: &str| encode_json(&Note { s: s.into() }).unwrap().payload;
            t.once(2, now + 150, Note::PACKET_NAME, late("late-150"))
                .unwrap();
            t.once(3, now + 250, Note::PACKET_NAME, late("late-250"))
                .unwrap();
        }
        let _waiting = exec.request_start(encode_json(&Read).unwrap()).unwrap();
        exec.send(&Note { s: "m2".into() }).unwrap();

        let captured = exec
            .capture(&route_of("cap-1"), &route_of("cap-1").target_node)
            .await
            .unwrap();
        assert_eq!(captured.saved.len(), 3, "m1, the due tick, m2");
        assert_eq!(captured.timers.len(), 2);
        assert_eq!(
            captured.bound.len(),
            1,
            "the local request is connection-bound"
        );
        for b in captured.bound {
            b.fail(CallError::new(ErrorKind::Unavailable, "moved"));
        }
        let env = zlink_protocol::generated::RelocationEnvelopeV1 {
            relocation_id: [1; 16],
            object_kind: zlink_protocol::generated::ObjectKind::Actor,
            object_id: "cap-1".into(),
            stable_type: "t".into(),
            object_generation: 3,
            relocation_policy: zlink_protocol::generated::RelocationPolicy::PreserveState,
            application_state: bytes::Bytes::new(),
            saved_queue: captured.saved,
            timers: captured.timers,
            bound_session_present: false,
            bound_session: None,
        };
        let bytes = env.encode().unwrap();
        exec.close().await;

        // A fresh table and executor, on a clock that started later.
        let back = zlink_protocol::generated::RelocationEnvelopeV1::decode(&bytes).unwrap();
        let objects = Objects::new();
        objects.open(&k, 3).unwrap();
        let restored = ObjectExecutor::start_restored(
            Binding::new(Arc::clone(&objects), k.clone(), 3),
            vec![],
            handlers(),
            ExecMode::Serial,
            None,
            &back.saved_queue,
            &back.timers,
        )
        .unwrap();
        // Arrived at the target while it was restoring: runs after the saved work.
        restored.send(&Note { s: "new".into() }).unwrap();
        objects.mark_ready(&k, 3).unwrap();
        assert_eq!(
            log_of(&restored).await,
            vec!["m1", "tick-due", "m2", "new"],
            "saved work first, in captured order, the tick in its place"
        );
        let started = Instant::now();
        loop {
            let log = log_of(&restored).await;
            if log.len() == 6 {
                assert_eq!(&log[4..], ["late-150", "late-250"]);
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "{log:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "the timers kept their remaining time"
        );

        // Saved work that names another object is refused before anything runs.
        let objects2 = Objects::new();
        objects2.open(&key("other"), 1).unwrap();
        let err = ObjectExecutor::start_restored(
            Binding::new(Arc::clone(&objects2), key("other"), 1),
            vec![],
            handlers(),
            ExecMode::Serial,
            None,
            &back.saved_queue,
            &[],
        )
        .err()
        .unwrap();
        assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{err}");
        restored.close().await;
    }

    /// An aborted capture puts everything back: the saved work, the bound request and the
    /// timers, ahead of what arrived meanwhile, and the object runs on.
    #[tokio::test]
    async fn an_aborted_capture_resumes_with_nothing_lost() {
        let objects = Objects::new();
        let k = key("cap-2");
        objects.open(&k, 1).unwrap();
        let exec = ObjectExecutor::start_bound(
            Binding::new(Arc::clone(&objects), k.clone(), 1),
            vec![],
            handlers(),
            ExecMode::Serial,
        );
        exec.send(&Note { s: "a".into() }).unwrap();
        let first_read = exec.request_start(encode_json(&Read).unwrap()).unwrap();
        let captured = exec
            .capture(&route_of("cap-2"), &route_of("cap-2").target_node)
            .await
            .unwrap();
        assert_eq!((captured.saved.len(), captured.bound.len()), (1, 1));
        // Captured: new work waits, nothing runs.
        objects.mark_ready(&k, 1).unwrap();
        exec.send(&Note { s: "b".into() }).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(exec.with_state(Vec::len), 0, "nothing runs while captured");
        exec.resume_after_capture(captured);
        let seen: Seen = decode_json(&first_read.await.unwrap().unwrap()).unwrap();
        assert_eq!(seen.log, vec!["a"], "the captured request kept its place");
        assert_eq!(log_of(&exec).await, vec!["a", "b"]);
        exec.close().await;
    }

    /// Review finding (issue 21, inline turns): a membership callback that panics in its
    /// synchronous part — outside the handlers' `catch_unwind` — ends its turn; the object
    /// keeps serving, in order, and closes.
    #[tokio::test]
    async fn a_callback_that_panics_before_its_future_exists_does_not_stop_the_object() {
        let objects = Objects::new();
        let k = key("panicky");
        objects.open(&k, 1).unwrap();
        objects.mark_ready(&k, 1).unwrap();
        let mut h = handlers();
        h.on_member_joined(|_ctx, actor: String| {
            assert!(actor != "boom", "the callback refuses {actor}");
            async { Ok(()) }
        });
        let exec = ObjectExecutor::start_bound(
            Binding::new(Arc::clone(&objects), k.clone(), 1),
            vec![],
            h,
            ExecMode::Serial,
        );
        exec.send(&Note { s: "before".into() }).unwrap();
        exec.notify_member(true, "boom".into()).unwrap();
        exec.send(&Note { s: "after".into() }).unwrap();
        let log = tokio::time::timeout(Duration::from_secs(5), log_of(&exec))
            .await
            .expect("the object still serves after the panicking callback");
        assert_eq!(log, vec!["before", "after"]);
        tokio::time::timeout(Duration::from_secs(5), exec.close())
            .await
            .expect("close returns");
    }

    #[tokio::test]
    async fn work_queued_before_the_instance_is_ready_runs_after_it_in_order() {
        let objects = Objects::new();
        let k = key("pre");
        objects.open(&k, 4).unwrap();
        let exec = ObjectExecutor::start_bound(
            Binding::new(Arc::clone(&objects), k.clone(), 4),
            vec![],
            handlers(),
            ExecMode::Serial,
        );
        // Creating: accepted, not run.
        exec.send(&Note {
            s: "early-1".into(),
        })
        .unwrap();
        assert!(matches!(
            objects.dispatch(&k, Lane::Application, note("early-2")),
            Dispatched::Queued(_)
        ));
        tokio::task::yield_now().await;
        assert_eq!(exec.with_state(Vec::len), 0, "ran before Ready");
        assert_eq!(exec.queued(), 2);
        objects.mark_ready(&k, 4).unwrap();
        assert_eq!(log_of(&exec).await, vec!["early-1", "early-2"]);
        exec.close().await;
        assert!(objects.is_empty(), "close removes the queue");
    }

    #[tokio::test]
    async fn a_sealed_object_holds_arrivals_until_unsealed_or_relayed() {
        let objects = Objects::new();
        let k = key("sealed");
        objects.open(&k, 1).unwrap();
        objects.mark_ready(&k, 1).unwrap();
        let exec = ObjectExecutor::start_bound(
            Binding::new(Arc::clone(&objects), k.clone(), 1),
            vec![],
            handlers(),
            ExecMode::Serial,
        );
        exec.send(&Note { s: "a".into() }).unwrap();
        assert_eq!(log_of(&exec).await, vec!["a"]);
        objects.seal(&k, 1).unwrap();
        exec.send(&Note { s: "held-1".into() }).unwrap();
        exec.send(&Note { s: "held-2".into() }).unwrap();
        // Relay takes what was held so far, in order; nothing of it ran here.
        let held = objects.take_held(&k, 1).unwrap();
        assert_eq!(held.len(), 2);
        assert_eq!(exec.with_state(Vec::len), 1);
        exec.send(&Note { s: "held-3".into() }).unwrap();
        // An aborted relocation unseals: the rest runs.
        assert_eq!(objects.unseal(&k, 1).unwrap(), 1);
        assert_eq!(log_of(&exec).await, vec!["a", "held-3"]);
        exec.close().await;
    }

    #[tokio::test]
    async fn the_temporary_queue_takes_arrivals_and_the_switch_puts_saved_work_first() {
        let objects = Objects::new();
        let k = key("moving");
        let rel = [5u8; 16];
        objects.register_temporary(&k, rel, 1, 9).unwrap();
        // Relayed and direct arrivals during restore, before any instance exists.
        for s in ["relayed-1", "direct-2"] {
            assert!(matches!(
                objects.dispatch(&k, Lane::Application, note(s)),
                Dispatched::Temporary
            ));
        }
        let saved = vec![
            Captured {
                seq: 41,
                lane: Lane::Application,
                item: note("saved-41"),
            },
            Captured {
                seq: 42,
                lane: Lane::Application,
                item: note("saved-42"),
            },
        ];
        objects.switch_to_real(&k, rel, 1, saved).unwrap();
        // After the switch, arrivals go to the real queue directly, behind everything moved.
        assert!(matches!(
            objects.dispatch(&k, Lane::Application, note("after")),
            Dispatched::Queued(_)
        ));
        let exec = ObjectExecutor::start_bound(
            Binding::new(Arc::clone(&objects), k.clone(), 9),
            vec![],
            handlers(),
            ExecMode::Serial,
        );
        assert_eq!(
            log_of(&exec).await,
            vec!["saved-41", "saved-42", "relayed-1", "direct-2", "after"]
        );
        exec.close().await;
    }
}
