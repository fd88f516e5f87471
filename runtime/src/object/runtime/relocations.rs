//! What one object runtime keeps about the moves it runs (as a source) and receives (as a
//! target): settings, the routing of Prepare answers and relay acknowledgements, the units
//! arriving here, their temporary queues, and counters.

use crate::relocation::capacity::{Need, fits};
// foldhash (seeded, fast for short keys): these maps are touched by every unit of a move.
use foldhash::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use zlink_store::types::{CapacityLimits, CapacityUse};

use tokio::sync::mpsc;
use zlink_store::types::AuthorityKey;

use super::arriving::Arriving;
use super::intake::Intake;
use super::moving::PrepareAnswer;
use crate::config::defaults;

/// Relocation settings of one runtime (issue 17 items 1, 4, 5 and 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelocationSettings {
    /// `RelocationPayloadChunkLimit`: the largest `relocationState` chunk sent (bytes).
    pub chunk_limit: usize,
    /// `RelocationCutoverWaitTimeout`: the target's fallback after Ready and the source's
    /// retransmission window after the cutover.
    pub cutover_wait: Duration,
    /// `relocation.restore_timeout_ms`: how long a target retries its CAS after the Prepare.
    pub restore_timeout: Duration,
    /// `MessageFollowDuration`: how long an old owner follows arrivals to the new one
    /// (`ZERO`: off).
    pub message_follow: Duration,
    /// `RelocationInFlightPayloadBudget`: relocation payload bytes sent to one target and not
    /// yet consumed (bytes; 0: off). A unit seals only when its target's budget has room.
    pub in_flight_budget: u64,
    /// `RelocationNodeInFlightPayloadBudget`: the same over every target of this node (0: off).
    pub node_in_flight_budget: u64,
    /// How long a source waits for the 43 answers to its 42s (issue 19 item 7) before the unit
    /// fails ([`defaults::SESSION_SEAL_ANSWER_WAIT`]; never past the relocation deadline).
    pub session_seal_wait: Duration,
    /// `relocation.terminal_retention_ms`: how long a terminal root of carried requests is
    /// kept in the Relocation Store (a `ForceStopped` one stays that long).
    pub terminal_retention: Duration,
    /// How long a request carried into a unit may take on its new owner, from its capture:
    /// the deadline its proxy on this node keeps, and so the last deadline of the target's
    /// terminal ledger (a minute by default).
    pub carried_request_deadline: Duration,
    /// Fault injection for tests (`None` in production): what the source corrupts in the
    /// transfers it sends.
    #[doc(hidden)]
    pub fault: Option<TransferFault>,
}

/// A corruption a source applies to its transfers (fault injection for tests of the target's
/// checks; see [`RelocationSettings::fault`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferFault {
    /// Declare a CRC-32C other than the payload's.
    WrongChecksum,
    /// Declare one byte more than the payload has.
    WrongLength,
    /// Leave out chunk 0.
    SkipFirstChunk,
    /// Send chunk 0 twice.
    DuplicateFirstChunk,
    /// Lose every `messageFollow` (50) notice this node would send (as the old owner): the
    /// suppression records it as sent, nothing reaches the sender.
    DropFollowNotices,
    /// Lose every `sessionRelocationRoute` (44 `route`) this node would send as a relocation
    /// target: the bound session's seal times out at its owner.
    DropSessionRoutes,
    /// Lose every `sessionRelocationSealed` (43) this node would send to another node as a
    /// session owner (the seal is installed all the same): the relocation source's wait ends
    /// without an answer.
    DropSealAnswers,
    /// Lose every `replyRelay` (33) this node would send as a relocation target: no carried
    /// terminal is ever acknowledged.
    DropReplyRelays,
}

impl Default for RelocationSettings {
    fn default() -> Self {
        Self {
            chunk_limit: usize::try_from(defaults::RELOCATION_PAYLOAD_CHUNK_LIMIT)
                .unwrap_or(256 * 1024),
            cutover_wait: defaults::RELOCATION_CUTOVER_WAIT_TIMEOUT,
            restore_timeout: Duration::from_secs(10),
            message_follow: defaults::MESSAGE_FOLLOW_DURATION,
            in_flight_budget: defaults::RELOCATION_IN_FLIGHT_PAYLOAD_BUDGET,
            node_in_flight_budget: 0,
            session_seal_wait: defaults::SESSION_SEAL_ANSWER_WAIT,
            terminal_retention: defaults::TERMINAL_RETENTION,
            carried_request_deadline: Duration::from_secs(60),
            fault: None,
        }
    }
}

/// Counters of the moves of one runtime.
#[derive(Debug, Default)]
pub struct RelocationStats {
    /// Units this node refused at Prepare for want of capacity (target).
    pub capacity_refusals: AtomicU64,
    /// Carried requests taken into a unit's queue here (target).
    pub carried_accepted: AtomicU64,
    /// Terminal roots of carried requests written, verified and linked (target).
    pub terminal_roots_published: AtomicU64,
    /// Units whose carried requests all ended and were acknowledged; root released (target).
    pub terminals_completed: AtomicU64,
    /// Units with terminals unacknowledged at their last deadline; root kept (target).
    pub terminals_force_stopped: AtomicU64,
    /// Units whose published terminal root was missing or corrupt: `RelocationDataLost`.
    pub terminals_data_lost: AtomicU64,
    /// Units whose carried requests met a unit that did not commit here (nothing kept).
    pub terminals_abandoned: AtomicU64,
    /// Kept (`ForceStopped`) terminal roots unlinked and deleted at the end of their retention.
    pub terminal_roots_expired: AtomicU64,
    /// Units whose transfer was sent (this node as source).
    pub moves_started: AtomicU64,
    /// Not-yet-run items carried in envelopes (source).
    pub saved_work: AtomicU64,
    /// Held arrivals relayed before and at the cutover (source).
    pub relayed: AtomicU64,
    /// Objects handed over (source; a User Spot's members count one each).
    pub handed_over: AtomicU64,
    /// Units put back after a failed or abandoned move (source).
    pub restored: AtomicU64,
    /// Records followed to a new owner after a handover (source).
    pub followed: AtomicU64,
    /// Of those, records of other nodes forwarded as they came — their sender, operation ID
    /// and reply route kept; the new owner answers the sender (source; wire §3.1).
    pub followed_as_sent: AtomicU64,
    /// Followed requests of another node than the unit's source, answered here to their sender
    /// directly (target; wire §3.1).
    pub followed_answered: AtomicU64,
    /// Followed one-way records of another node than the unit's source, delivered here as
    /// that node sent them (target; wire §3.1).
    pub followed_delivered: AtomicU64,
    /// Followed records that could not be relayed (source).
    pub follow_drops: AtomicU64,
    /// Work that reached an executor after its capture (a caller that looked the object up
    /// just before the seal) and was followed on at the handover (source).
    pub late_followed: AtomicU64,
    /// Units committed and switched in here (target).
    pub arrived: AtomicU64,
    /// Prepares answered with `relocationFailed` (target).
    pub refused: AtomicU64,
    /// Units given up after Ready: stale or `location_update_failed` (target).
    pub abandoned: AtomicU64,
    /// Commits started by the cutover fallback (target).
    pub cutover_timeouts: AtomicU64,
    /// Cutovers that arrived after the commit started (target).
    pub late_cutovers: AtomicU64,
    /// Relocation records naming no known relocation (dropped).
    pub unknown_records: AtomicU64,
    /// `messageFollow` notices sent to senders on an old route (source).
    pub follow_notices_sent: AtomicU64,
    /// Of those, the ones sent at a handover to a peer notified lately, before any record of
    /// it was followed (source).
    pub follow_notices_at_handover: AtomicU64,
    /// `messageFollow` notices received that removed a cached route here.
    pub follow_notices_applied: AtomicU64,
    /// The hop counts of the `messageFollow` notices received, summed (each is how many moves
    /// the sender's route was behind: 1..=8).
    pub follow_notice_hops: AtomicU64,
    /// The queue counts of the `messageFollow` notices received, summed.
    pub follow_notice_queued: AtomicU64,
    /// Terminals relayed back to a source (target).
    pub reply_relays_sent: AtomicU64,
    /// Units that waited for room in an in-flight payload budget before their seal (source).
    pub budget_waits: AtomicU64,
    /// Reads of a unit's authority row to resolve it: the peeks while its cutover window runs
    /// and the reads after it (source).
    pub authority_reads: AtomicU64,
    /// Descriptor listings to learn whether a unit's target still holds its lease: only when a
    /// read after the window found the row unchanged (source).
    pub target_liveness_checks: AtomicU64,
    /// New connection epochs to a unit's target while it moved: its transfer or its relays
    /// and cutover were sent again under the same identity (source).
    pub epochs_lost: AtomicU64,
    /// The most relocation payload bytes in flight to one target at once (source).
    pub in_flight_high_water: AtomicU64,
    /// The largest relocation chunk received (target).
    pub largest_chunk_received: AtomicU64,
}

/// One step of a move on this node's clock, for pause measurements (benchmarks, diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineEvent {
    /// The relocation.
    pub relocation_id: [u8; 16],
    /// What happened.
    pub step: TimelineStep,
    /// When.
    pub at: std::time::Instant,
}

/// The steps a [`TimelineEvent`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimelineStep {
    /// Source: the unit's arrivals are held from here on (the seal).
    Sealed,
    /// Source: the Prepare and its chunks were submitted.
    Transferred,
    /// Target: `relocationReady` was sent (restored, waiting for the cutover).
    Ready,
    /// Source: the first `relocationReady` reached the unit (its relays and cutover go next).
    ReadySeen,
    /// Target: the `relocationCutover` reached this node.
    CutoverSeen,
    /// Target: the commit landed in the store.
    Committed,
    /// Target: the unit's dispatch opened (the switch).
    Switched,
}

/// A handed-over unit's routes while this node follows it: the one senders may still use, and
/// the new owner's.
#[derive(Debug, Clone)]
pub(super) struct FollowNotice {
    pub(super) new_route: zlink_protocol::generated::RouteFence,
    pub(super) until: std::time::Instant,
    /// Records and payload bytes that arrived on an old route of the object since the handover
    /// (the `messageFollow` queue snapshot, wire §3.1: "relay 시점의 queue count·byte").
    pub(super) arrived: Arc<[AtomicU64; 2]>,
}

/// Most timeline events kept (the oldest are dropped).
const TIMELINE_CAP: usize = 4_096;

/// A temporary queue of a unit arriving here: arrivals on a route naming this node, this lease
/// and an owner generation above the source's join it instead of being refused (wire §9 "CAS
/// reply in flight").
pub(super) struct TemporaryQueue {
    pub(super) intake: Arc<Intake>,
    pub(super) source_owner_generation: u64,
    pub(super) lease_generation: u64,
}

/// A unit's payload in the in-flight budgets (see [`Relocations::hold_payload`]): released
/// when the target answered its Prepares, or on drop.
pub(super) struct BudgetHold<'a> {
    relocations: &'a Relocations,
    rid: String,
    bytes: u64,
}

impl BudgetHold<'_> {
    /// The target consumed the payload.
    pub(super) fn release(&mut self) {
        self.relocations
            .release_payload(&self.rid, std::mem::take(&mut self.bytes));
    }
}

impl Drop for BudgetHold<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// See the module docs.
#[derive(Default)]
pub(super) struct Relocations {
    settings: Mutex<RelocationSettings>,
    answers: Mutex<HashMap<[u8; 16], mpsc::UnboundedSender<PrepareAnswer>>>,
    pub(super) arriving: Mutex<HashMap<[u8; 16], Arc<Arriving>>>,
    pub(super) temporary: Mutex<HashMap<AuthorityKey, TemporaryQueue>>,
    /// This host relocates (or relocated): it takes no unit and no new object.
    relocating: AtomicBool,
    /// Units moving away from here, or followed after their handover: not units of a new
    /// relocation.
    moving: Mutex<HashMap<AuthorityKey, (u64, u64)>>,
    /// Of those, the ones handed over (followed until their window ends): live entries here
    /// that are not objects of this node any more.
    handed: Mutex<HashMap<AuthorityKey, (u64, u64)>>,
    /// Objects that moved away and came back: the owner generations their earlier routes to
    /// this node named (a sender's cache may still hold one); admitted to the object here.
    aliases: Mutex<HashMap<AuthorityKey, Vec<u64>>>,
    epoch: std::sync::OnceLock<std::time::Instant>,
    /// Relocation payload bytes sent and not yet consumed: per target RID, and in all.
    in_flight: Mutex<(HashMap<String, u64>, u64)>,
    in_flight_freed: tokio::sync::Notify,
    /// Units this node follows, with the new owner's route (`messageFollow` notices).
    follows: Mutex<HashMap<AuthorityKey, FollowNotice>>,
    follows_len: std::sync::atomic::AtomicUsize,
    /// One `messageFollow` per recipient and stale route (wire §3.1).
    pub(super) suppression: Mutex<crate::relocation::notify::Suppression>,
    /// The peers sent a `messageFollow` lately: notified at once of later handovers.
    recent_recipients: Mutex<crate::relocation::notify::RecentRecipients>,
    /// This node's Entry Spot fence, as last read (the Check of an Actor's commit).
    entry_fence: Mutex<Option<zlink_store::types::OwnerFence>>,
    pub(super) stats: RelocationStats,
    timeline: Mutex<std::collections::VecDeque<TimelineEvent>>,
    /// This node's capacity limits (0 = unlimited) and the capacity of the units arriving
    /// here and not committed yet (the target's check at Prepare).
    capacity: Mutex<(CapacityLimits, CapacityUse)>,
    /// The open terminal ledgers of units that carried requests here, by RelocationId.
    terminals: Mutex<HashMap<[u8; 16], Arc<super::terminals::UnitTerminals>>>,
}

/// Capacity held for one arriving unit until its commit ended (either way); released on drop.
pub(super) struct CapacityHold<'a> {
    relocations: &'a Relocations,
    need: Need,
}

impl Drop for CapacityHold<'_> {
    fn drop(&mut self) {
        let mut c = lock(&self.relocations.capacity);
        c.1 = self.need.remove_from(c.1);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::ops::Deref for Relocations {
    type Target = RelocationStats;
    fn deref(&self) -> &RelocationStats {
        &self.stats
    }
}

impl Relocations {
    pub(super) fn settings(&self) -> RelocationSettings {
        *lock(&self.settings)
    }

    pub(super) fn set_settings(&self, s: RelocationSettings) {
        *lock(&self.settings) = s;
    }

    pub(super) fn terminals(
        &self,
    ) -> MutexGuard<'_, HashMap<[u8; 16], Arc<super::terminals::UnitTerminals>>> {
        lock(&self.terminals)
    }

    /// This node's capacity limits.
    pub(super) fn capacity_limits(&self) -> CapacityLimits {
        lock(&self.capacity).0
    }

    pub(super) fn set_capacity_limits(&self, limits: CapacityLimits) {
        lock(&self.capacity).0 = limits;
    }

    /// Hold `need` for an arriving unit when it fits beside `stored` (this node's use as the
    /// store counts it) and the units already arriving; `Err` with the use it would exceed.
    pub(super) fn hold_capacity(
        &self,
        stored: CapacityUse,
        need: Need,
    ) -> Result<CapacityHold<'_>, (CapacityLimits, CapacityUse)> {
        let mut c = lock(&self.capacity);
        let used = CapacityUse {
            actors: stored.actors.saturating_add(c.1.actors),
            spots: stored.spots.saturating_add(c.1.spots),
        };
        if !fits(c.0, used, need) {
            return Err((c.0, used));
        }
        c.1 = need.add_to(c.1);
        Ok(CapacityHold {
            relocations: self,
            need,
        })
    }

    pub(super) fn set_relocating(&self, on: bool) {
        self.relocating.store(on, Ordering::Release);
    }

    pub(super) fn relocating(&self) -> bool {
        self.relocating.load(Ordering::Acquire)
    }

    pub(super) fn expect_answers(&self, id: [u8; 16], tx: mpsc::UnboundedSender<PrepareAnswer>) {
        lock(&self.answers).insert(id, tx);
    }

    pub(super) fn forget_answers(&self, id: &[u8; 16]) {
        lock(&self.answers).remove(id);
    }

    /// Route a Ready / Failed answer to its move; `false` for an unknown relocation.
    pub(super) fn answer(&self, id: &[u8; 16], a: PrepareAnswer) -> bool {
        match lock(&self.answers).get(id) {
            Some(tx) => tx.send(a).is_ok(),
            None => false,
        }
    }

    pub(super) fn arriving(&self, id: &[u8; 16]) -> Option<Arc<Arriving>> {
        lock(&self.arriving).get(id).cloned()
    }

    pub(super) fn temporary(&self) -> MutexGuard<'_, HashMap<AuthorityKey, TemporaryQueue>> {
        lock(&self.temporary)
    }

    pub(super) fn mark(&self, relocation_id: [u8; 16], step: TimelineStep, at: std::time::Instant) {
        let mut t = lock(&self.timeline);
        if t.len() >= TIMELINE_CAP {
            t.pop_front();
        }
        t.push_back(TimelineEvent {
            relocation_id,
            step,
            at,
        });
    }

    pub(super) fn timeline(&self) -> Vec<TimelineEvent> {
        lock(&self.timeline).iter().copied().collect()
    }

    /// Mark incarnation `generation` of `key` under owner generation `aog` as moving (`false`
    /// when exactly it is already). A mark names the incarnation, so an object that replaced a
    /// followed one (created or activated anew here) is not taken for it.
    pub(super) fn start_moving(&self, key: &AuthorityKey, generation: u64, aog: u64) -> bool {
        let mut m = lock(&self.moving);
        if m.get(key) == Some(&(generation, aog)) {
            return false;
        }
        m.insert(key.clone(), (generation, aog));
        true
    }

    /// Clear the mark of that incarnation (another incarnation's mark stays).
    pub(super) fn stop_moving(&self, key: &AuthorityKey, generation: u64, aog: u64) {
        let mut m = lock(&self.moving);
        if m.get(key) == Some(&(generation, aog)) {
            m.remove(key);
        }
    }

    /// The object is live here again (a move back): no mark for it stays.
    /// That incarnation was handed over: its live entry only follows arrivals now.
    pub(super) fn mark_handed(&self, key: &AuthorityKey, generation: u64, aog: u64) {
        lock(&self.handed).insert(key.clone(), (generation, aog));
    }

    /// Its follow window ended (another incarnation's mark stays).
    pub(super) fn unmark_handed(&self, key: &AuthorityKey, generation: u64, aog: u64) {
        let mut h = lock(&self.handed);
        if h.get(key) == Some(&(generation, aog)) {
            h.remove(key);
        }
    }

    /// The handed-over incarnations (key, generation, owner generation).
    pub(super) fn handed(&self) -> Vec<(AuthorityKey, u64, u64)> {
        lock(&self.handed)
            .iter()
            .map(|(k, (g, a))| (k.clone(), *g, *a))
            .collect()
    }

    /// Wait until the budgets toward `rid` have room — less than the per-target budget in
    /// flight to it, less than the node budget in all (0 = off) — or `deadline`: whether they
    /// have. Units that start together may each find room: the overshoot is bounded by the
    /// relocation's concurrency (see `docs/architecture.md`).
    pub(super) async fn wait_for_budget(&self, rid: &str, deadline: std::time::Instant) -> bool {
        let mut waited = false;
        loop {
            let freed = self.in_flight_freed.notified();
            let room = {
                let st = self.settings();
                let f = lock(&self.in_flight);
                let to = f.0.get(rid).copied().unwrap_or(0);
                (st.in_flight_budget == 0 || to < st.in_flight_budget)
                    && (st.node_in_flight_budget == 0 || f.1 < st.node_in_flight_budget)
            };
            if room {
                if waited {
                    self.stats.budget_waits.fetch_add(1, Ordering::Relaxed);
                }
                return true;
            }
            waited = true;
            if tokio::time::timeout_at(deadline.into(), freed)
                .await
                .is_err()
            {
                return false;
            }
        }
    }

    /// A unit's `bytes` of payload go to `rid`: budgeted until the hold is released (or
    /// dropped).
    pub(super) fn hold_payload(&self, rid: &str, bytes: u64) -> BudgetHold<'_> {
        self.charge_payload(rid, bytes);
        BudgetHold {
            relocations: self,
            rid: rid.to_owned(),
            bytes,
        }
    }

    /// `bytes` of payload go to `rid` (kept until [`Relocations::release_payload`]).
    fn charge_payload(&self, rid: &str, bytes: u64) {
        let mut f = lock(&self.in_flight);
        let to = f.0.entry(rid.to_owned()).or_insert(0);
        *to = to.saturating_add(bytes);
        let high = *to;
        f.1 = f.1.saturating_add(bytes);
        drop(f);
        self.stats
            .in_flight_high_water
            .fetch_max(high, Ordering::Relaxed);
    }

    /// `bytes` to `rid` were consumed (the target answered the unit's Prepares).
    fn release_payload(&self, rid: &str, bytes: u64) {
        let mut f = lock(&self.in_flight);
        if let Some(to) = f.0.get_mut(rid) {
            *to = to.saturating_sub(bytes);
            if *to == 0 {
                f.0.remove(rid);
            }
        }
        f.1 = f.1.saturating_sub(bytes);
        drop(f);
        self.in_flight_freed.notify_waiters();
    }

    pub(super) fn clear_moving(&self, key: &AuthorityKey) {
        lock(&self.handed).remove(key);
        lock(&self.moving).remove(key);
    }

    /// Whether exactly that incarnation is moving or followed.
    pub(super) fn is_moving(&self, key: &AuthorityKey, generation: u64, aog: u64) -> bool {
        lock(&self.moving).get(key) == Some(&(generation, aog))
    }

    pub(super) fn follows_lock(&self) -> MutexGuard<'_, HashMap<AuthorityKey, FollowNotice>> {
        lock(&self.follows)
    }

    /// Record the follow notice of `key` (see [`Relocations::follows_any`]).
    pub(super) fn add_follow(&self, key: AuthorityKey, notice: FollowNotice) {
        let mut f = lock(&self.follows);
        f.insert(key, notice);
        self.follows_len.store(f.len(), Ordering::Release);
    }

    /// Forget the follow notice of `key`.
    pub(super) fn remove_follow(&self, key: &AuthorityKey) {
        let mut f = lock(&self.follows);
        f.remove(key);
        self.follows_len.store(f.len(), Ordering::Release);
    }

    /// Whether any unit is followed (a lock-free check on every delivery's hot path).
    pub(super) fn follows_any(&self) -> bool {
        self.follows_len.load(Ordering::Acquire) > 0
    }

    pub(super) fn suppression_lock(
        &self,
    ) -> MutexGuard<'_, crate::relocation::notify::Suppression> {
        lock(&self.suppression)
    }

    pub(super) fn recent_recipients_lock(
        &self,
    ) -> MutexGuard<'_, crate::relocation::notify::RecentRecipients> {
        lock(&self.recent_recipients)
    }

    /// The time base of the suppression table's milliseconds.
    pub(super) fn epoch(&self) -> std::time::Instant {
        *self.epoch.get_or_init(std::time::Instant::now)
    }

    pub(super) fn entry_fence(&self, key: &AuthorityKey) -> Option<zlink_store::types::OwnerFence> {
        lock(&self.entry_fence).clone().filter(|f| f.key == *key)
    }

    pub(super) fn set_entry_fence(&self, f: Option<zlink_store::types::OwnerFence>) {
        *lock(&self.entry_fence) = f;
    }

    /// Remember that routes naming owner generation `aog` of `key` on this node now reach the
    /// object here again (at most 8: the longest follow chain).
    pub(super) fn add_alias(&self, key: &AuthorityKey, aog: u64) {
        let mut a = lock(&self.aliases);
        let v = a.entry(key.clone()).or_default();
        if !v.contains(&aog) {
            v.push(aog);
            if v.len() > 8 {
                v.remove(0);
            }
        }
    }

    pub(super) fn has_alias(&self, key: &AuthorityKey, aog: u64) -> bool {
        lock(&self.aliases)
            .get(key)
            .is_some_and(|v| v.contains(&aog))
    }

    pub(super) fn forget_aliases(&self, key: &AuthorityKey) {
        lock(&self.aliases).remove(key);
    }

    pub(super) fn arriving_map(&self) -> MutexGuard<'_, HashMap<[u8; 16], Arc<Arriving>>> {
        lock(&self.arriving)
    }
}
