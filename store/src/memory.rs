//! The embedded memory provider: the reference implementation of the store contracts, used by
//! the demo, single-process hosts and unit tests. All state sits behind one mutex (never held
//! across an `.await`), so every operation is trivially atomic; time comes from a [`Clock`] that
//! tests can turn.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use foldhash::HashMap;

use bytes::Bytes;
use tokio::sync::watch;

use crate::clock::{Clock, ManualClock, SystemClock};
use crate::error::{Result, StaleReason, StoreError};
use crate::location::{LocationStore, RelocationStore};
use crate::types::{
    AggregateOp, Allocation, AllocationState, AuthorityKey, AuthorityRead, AuthoritySnapshot,
    AuthorityState, CapacityLimits, CapacityUse, DescriptorKey, DescriptorKind, DescriptorRecord,
    LeaseGrant, LeaseRead, NodeRef, ObjectKind, OwnerFence, OwnerLeaseState, OwnerToken,
    PendingCreation, PublishOutcome, Reservation, ReserveRequest, RouteRead, StoreTime,
    StoredPayload, TermLease, TransferOwner,
};

/// How long a reservation ID is remembered for replay after it was issued (store time).
pub const RESERVATION_REPLAY_RETENTION: Duration = Duration::from_secs(600);

/// Fewest kept reservations at which [`MemoryStore`] sweeps expired ones.
const RESERVATION_SWEEP_MIN: usize = 64;

/// Largest value any counter may reach (`i64::MAX`).
pub const COUNTER_MAX: u64 = i64::MAX as u64;

/// Names of the store-global counters (shared with the Redis provider's key names).
pub mod counters {
    /// StoreVersion of authority records.
    pub const STORE_VERSION: &str = "storeVersion";
    /// ObjectGeneration.
    pub const OBJECT_GENERATION: &str = "objectGeneration";
    /// AuthorityOwnerGeneration.
    pub const OWNER_GENERATION: &str = "ownerGeneration";
    /// Owner lease generation.
    pub const LEASE_GENERATION: &str = "leaseGeneration";
    /// Reservation versions.
    pub const RESERVATION_VERSION: &str = "reservationVersion";
    /// Every counter name.
    pub const ALL: [&str; 5] = [
        STORE_VERSION,
        OBJECT_GENERATION,
        OWNER_GENERATION,
        LEASE_GENERATION,
        RESERVATION_VERSION,
    ];
}

#[derive(Debug, Clone)]
struct TermRec {
    holder: Option<OwnerToken>,
    term: u64,
    config_epoch: u64,
    expires_at: StoreTime,
}

#[derive(Debug, Clone)]
struct Record {
    state: AuthorityState,
    store_version: u64,
    object_generation: u64,
    authority_owner_generation: u64,
    owner: OwnerToken,
    owner_node: NodeRef,
    allocation: Allocation,
    pending_creation: Option<PendingCreation>,
    payload: Bytes,
}

#[derive(Debug, Default)]
struct State {
    counters: HashMap<&'static str, u64>,
    leases: HashMap<String, (u64, StoreTime)>,
    terms: HashMap<String, TermRec>,
    descriptors: BTreeMap<DescriptorKey, DescriptorRecord>,
    rid_claims: HashMap<(String, String), OwnerToken>,
    limits: HashMap<NodeRef, CapacityLimits>,
    usage: HashMap<NodeRef, CapacityUse>,
    authority: HashMap<AuthorityKey, Record>,
    reservations: HashMap<String, (ReserveRequest, Reservation, StoreTime)>,
    /// Sweep expired reservations once there are this many (twice what the last sweep kept):
    /// a sweep per reserve made creating n objects cost O(n²). Replay reads check the expiry,
    /// so an expired entry left until the next sweep is never used.
    reservations_sweep_at: usize,
    payloads: HashMap<String, (Bytes, StoreTime)>,
    outage: bool,
}

/// The memory provider. Cheap to clone (shared state).
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    recovery: Arc<watch::Sender<u64>>,
    /// Fault injection: aggregate commits parked on purpose (see [`MemoryStore::stall_aggregates_touching`]).
    stalls: Arc<Mutex<Vec<StallRule>>>,
}

/// One stall rule: aggregate commits naming `key` wait until `release` turns true.
struct StallRule {
    key: AuthorityKey,
    parked: watch::Sender<usize>,
    release: watch::Receiver<bool>,
}

/// A stall of aggregate commits that name one key (fault injection for tests and chaos
/// drills: a store call that does not answer). Releasing it — or dropping it — lets the parked
/// calls and every later one through.
#[derive(Debug)]
pub struct Stall {
    parked: watch::Receiver<usize>,
    release: watch::Sender<bool>,
}

impl Stall {
    /// Wait until at least `n` calls are parked on this stall (a marker, not a sleep).
    pub async fn parked(&mut self, n: usize) {
        let _ = self.parked.wait_for(|p| *p >= n).await;
    }

    /// Let the parked calls (and every later one) through.
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        let _ = self.release.send(true);
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(SystemClock)
    }
}

impl MemoryStore {
    /// A store on the given clock.
    pub fn new(clock: impl Clock) -> Self {
        let (tx, _rx) = watch::channel(0);
        Self {
            state: Arc::new(Mutex::new(State::default())),
            clock: Arc::new(clock),
            recovery: Arc::new(tx),
            stalls: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Fault injection: every `commit_aggregate` whose operations name `key` waits, before it
    /// looks at the store, until the returned [`Stall`] is released or dropped. Other calls —
    /// including aggregate commits of other keys — are not held up.
    pub fn stall_aggregates_touching(&self, key: AuthorityKey) -> Stall {
        let (parked_tx, parked_rx) = watch::channel(0);
        let (release_tx, release_rx) = watch::channel(false);
        let mut stalls = self
            .stalls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stalls.retain(|r| !*r.release.borrow());
        stalls.push(StallRule {
            key,
            parked: parked_tx,
            release: release_rx,
        });
        Stall {
            parked: parked_rx,
            release: release_tx,
        }
    }

    /// Park here while a stall rule names one of `ops`' keys.
    async fn wait_out_stalls(&self, ops: &[AggregateOp]) {
        let waits: Vec<watch::Receiver<bool>> = {
            let stalls = self
                .stalls
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            stalls
                .iter()
                .filter(|r| !*r.release.borrow() && ops.iter().any(|op| op.key() == &r.key))
                .map(|r| {
                    r.parked.send_modify(|p| *p += 1);
                    r.release.clone()
                })
                .collect()
        };
        for mut w in waits {
            let _ = w.wait_for(|released| *released).await;
        }
    }

    /// A store on a manual clock, and the clock.
    pub fn with_manual_clock() -> (Self, ManualClock) {
        let clock = ManualClock::default();
        (Self::new(clock.clone()), clock)
    }

    /// How many reservation IDs are remembered for replay now (expired ones included until
    /// the next sweep, which runs once twice as many as the last sweep kept are held).
    pub fn remembered_reservations(&self) -> usize {
        self.lock_raw().reservations.len()
    }

    /// Test hook: every operation fails with `StoreFailure` until [`MemoryStore::end_outage`].
    pub fn begin_outage(&self) {
        self.lock_raw().outage = true;
    }

    /// Test hook: end an outage; the recovery epoch increases.
    pub fn end_outage(&self) {
        let was = std::mem::replace(&mut self.lock_raw().outage, false);
        if was {
            self.recovery.send_modify(|e| *e += 1);
        }
    }

    /// Test hook: set a counter (e.g. near `i64::MAX` to test exhaustion).
    pub fn set_counter(&self, name: &str, value: u64) {
        if let Some(n) = counters::ALL.iter().find(|n| **n == name) {
            self.lock_raw().counters.insert(n, value);
        }
    }

    fn lock_raw(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a panic in this module's own code while holding it; the data is
        // still consistent because every operation validates before it mutates.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock(&self) -> Result<(MutexGuard<'_, State>, StoreTime)> {
        let st = self.lock_raw();
        if st.outage {
            return Err(StoreError::StoreFailure {
                message: "memory store outage (test hook)".into(),
                ambiguous: false,
            });
        }
        Ok((st, self.clock.now()))
    }
}

impl State {
    fn next(&mut self, name: &'static str) -> Result<u64> {
        let c = self.counters.entry(name).or_insert(0);
        if *c >= COUNTER_MAX {
            return Err(StoreError::GenerationExhausted(name.into()));
        }
        *c += 1;
        Ok(*c)
    }

    /// Check that all named counters can be incremented, before any mutation.
    fn ensure_counters(&self, names: &[&'static str]) -> Result<()> {
        for n in names {
            let count = names.iter().filter(|x| *x == n).count() as u64;
            let cur = self.counters.get(n).copied().unwrap_or(0);
            if cur.saturating_add(count) > COUNTER_MAX {
                return Err(StoreError::GenerationExhausted((*n).into()));
            }
        }
        Ok(())
    }

    fn lease_live(&self, token: &OwnerToken, now: StoreTime) -> bool {
        matches!(self.leases.get(&token.owner_id), Some((g, exp)) if *g == token.lease_generation && *exp > now)
    }

    fn require_live(&self, token: &OwnerToken, now: StoreTime) -> Result<()> {
        if self.lease_live(token, now) {
            Ok(())
        } else {
            Err(StoreError::stale(
                StaleReason::LeaseNotLive,
                format!("owner {} lease {}", token.owner_id, token.lease_generation),
            ))
        }
    }

    fn snapshot(key: &AuthorityKey, r: &Record, now: StoreTime) -> AuthoritySnapshot {
        AuthoritySnapshot {
            key: key.clone(),
            state: r.state,
            store_version: r.store_version,
            object_generation: r.object_generation,
            authority_owner_generation: r.authority_owner_generation,
            owner: r.owner.clone(),
            owner_node: r.owner_node.clone(),
            allocation: r.allocation.clone(),
            pending_creation: r.pending_creation.clone(),
            payload: r.payload.clone(),
            store_now: now,
        }
    }

    fn charge(&mut self, node: &NodeRef, kind: ObjectKind, units: i64) {
        // The node's entry exists after its first charge: no key clone for the others.
        if !self.usage.contains_key(node) {
            self.usage.insert(node.clone(), CapacityUse::default());
        }
        let Some(u) = self.usage.get_mut(node) else {
            return;
        };
        let slot = match kind {
            ObjectKind::Actor => &mut u.actors,
            ObjectKind::Spot => &mut u.spots,
        };
        *slot = if units >= 0 {
            slot.saturating_add(units.unsigned_abs())
        } else {
            slot.saturating_sub(units.unsigned_abs())
        };
    }

    fn check_fence(&self, fence: &OwnerFence) -> Result<&Record> {
        let r = self
            .authority
            .get(&fence.key)
            .ok_or_else(|| StoreError::Missing(fence.key.as_str().to_owned()))?;
        let detail = || fence.key.as_str().to_owned();
        if r.store_version != fence.store_version {
            return Err(StoreError::stale(StaleReason::StoreVersion, detail()));
        }
        if r.object_generation != fence.object_generation {
            return Err(StoreError::stale(StaleReason::ObjectGeneration, detail()));
        }
        if r.authority_owner_generation != fence.authority_owner_generation {
            return Err(StoreError::stale(StaleReason::OwnerGeneration, detail()));
        }
        if r.owner != fence.owner {
            return Err(StoreError::stale(StaleReason::Owner, detail()));
        }
        Ok(r)
    }

    fn check_reservation(&self, res: &Reservation) -> Result<&Record> {
        let r = self
            .authority
            .get(&res.key)
            .ok_or_else(|| StoreError::Missing(res.key.as_str().to_owned()))?;
        let detail = || res.key.as_str().to_owned();
        let pending_ok = r.state == AuthorityState::Creating
            && r.pending_creation.as_ref().is_some_and(|p| {
                p.reservation_id == res.reservation_id
                    && p.reservation_version == res.reservation_version
            });
        if !pending_ok {
            return Err(StoreError::stale(StaleReason::Reservation, detail()));
        }
        if r.store_version != res.store_version {
            return Err(StoreError::stale(StaleReason::StoreVersion, detail()));
        }
        if r.object_generation != res.object_generation
            || r.authority_owner_generation != res.authority_owner_generation
        {
            return Err(StoreError::stale(StaleReason::ObjectGeneration, detail()));
        }
        Ok(r)
    }

    /// The target publishes its MeshNode descriptor under its lease and node lifecycle.
    fn require_descriptor(&self, target: &crate::types::TargetFence) -> Result<()> {
        let dkey = DescriptorKey {
            kind: DescriptorKind::MeshNode,
            scope: target.node.mesh.clone(),
            rid: target.node.rid.clone(),
        };
        let ok = self.descriptors.get(&dkey).is_some_and(|d| {
            d.lifecycle_generation == target.node.lifecycle_generation && d.owner == target.owner
        });
        if ok {
            Ok(())
        } else {
            Err(StoreError::stale(
                StaleReason::Descriptor,
                format!("{}/{}", dkey.scope, dkey.rid),
            ))
        }
    }

    /// Validate one aggregate member without changing anything.
    fn check_op(&self, op: &AggregateOp, now: StoreTime) -> Result<()> {
        match op {
            AggregateOp::Transfer(t) => {
                let r = self.check_fence(&t.source)?;
                if !matches!(r.state, AuthorityState::Ready | AuthorityState::Relocating) {
                    return Err(StoreError::stale(StaleReason::State, t.source.key.as_str()));
                }
                self.require_live(&t.target.owner, now)?;
                self.require_descriptor(&t.target)
            }
            AggregateOp::Preserve { fence, .. } => {
                let r = self.check_fence(fence)?;
                if r.state == AuthorityState::Creating {
                    return Err(StoreError::stale(StaleReason::State, fence.key.as_str()));
                }
                self.require_live(&fence.owner, now)
            }
            AggregateOp::Check(fence) => self.check_fence(fence).map(|_| ()),
        }
    }

    /// Apply one validated aggregate member.
    fn apply_op(&mut self, op: &AggregateOp, now: StoreTime) -> Result<AuthoritySnapshot> {
        match op {
            AggregateOp::Transfer(t) => {
                let store_version = self.next(counters::STORE_VERSION)?;
                let owner_gen = self.next(counters::OWNER_GENERATION)?;
                let (kind, units, source_node) = {
                    let r = self
                        .authority
                        .get(&t.source.key)
                        .ok_or_else(|| StoreError::Missing(t.source.key.as_str().into()))?;
                    (
                        r.allocation.object_kind,
                        i64::from(r.allocation.units),
                        r.owner_node.clone(),
                    )
                };
                self.charge(&source_node, kind, -units);
                self.charge(&t.target.node, kind, units);
                let r = self
                    .authority
                    .get_mut(&t.source.key)
                    .ok_or_else(|| StoreError::Missing(t.source.key.as_str().into()))?;
                r.store_version = store_version;
                r.authority_owner_generation = owner_gen;
                r.owner = t.target.owner.clone();
                r.owner_node = t.target.node.clone();
                r.state = AuthorityState::Ready;
                if let Some(p) = &t.payload {
                    r.payload = p.clone();
                }
                Ok(State::snapshot(&t.source.key, r, now))
            }
            AggregateOp::Preserve { fence, payload } => {
                let store_version = self.next(counters::STORE_VERSION)?;
                let r = self
                    .authority
                    .get_mut(&fence.key)
                    .ok_or_else(|| StoreError::Missing(fence.key.as_str().into()))?;
                r.store_version = store_version;
                r.payload = payload.clone();
                Ok(State::snapshot(&fence.key, r, now))
            }
            AggregateOp::Check(fence) => {
                let r = self
                    .authority
                    .get(&fence.key)
                    .ok_or_else(|| StoreError::Missing(fence.key.as_str().into()))?;
                Ok(State::snapshot(&fence.key, r, now))
            }
        }
    }

    fn counters_for(op: &AggregateOp) -> &'static [&'static str] {
        match op {
            AggregateOp::Transfer(_) => &[counters::STORE_VERSION, counters::OWNER_GENERATION],
            AggregateOp::Preserve { .. } => &[counters::STORE_VERSION],
            AggregateOp::Check(_) => &[],
        }
    }

    fn purge_owner(&mut self, owner_id: &str) {
        self.descriptors.retain(|_, d| d.owner.owner_id != owner_id);
        self.rid_claims.retain(|_, t| t.owner_id != owner_id);
    }
}

impl LocationStore for MemoryStore {
    async fn store_now(&self) -> Result<StoreTime> {
        Ok(self.lock()?.1)
    }

    async fn claim_lease(&self, owner_id: &str, ttl: Duration) -> Result<LeaseGrant> {
        crate::validate::ttl(ttl)?;
        crate::validate::non_empty(owner_id, "owner id")?;
        let (mut st, now) = self.lock()?;
        let generation = st.next(counters::LEASE_GENERATION)?;
        let expires = now.plus(ttl);
        // A new lease generation replaces the old one: the old token's descriptors and claims go.
        st.purge_owner(owner_id);
        st.leases.insert(owner_id.to_owned(), (generation, expires));
        Ok(LeaseGrant {
            token: OwnerToken {
                owner_id: owner_id.to_owned(),
                lease_generation: generation,
            },
            lease_expires_at: expires,
            store_now: now,
        })
    }

    async fn renew_lease(&self, token: &OwnerToken, ttl: Duration) -> Result<LeaseGrant> {
        crate::validate::ttl(ttl)?;
        let (mut st, now) = self.lock()?;
        st.require_live(token, now)?;
        let expires = now.plus(ttl);
        st.leases
            .insert(token.owner_id.clone(), (token.lease_generation, expires));
        Ok(LeaseGrant {
            token: token.clone(),
            lease_expires_at: expires,
            store_now: now,
        })
    }

    async fn read_lease(&self, owner_id: &str) -> Result<LeaseRead> {
        let (st, now) = self.lock()?;
        Ok(match st.leases.get(owner_id) {
            Some((g, exp)) if *exp > now => LeaseRead::Found {
                token: OwnerToken {
                    owner_id: owner_id.to_owned(),
                    lease_generation: *g,
                },
                lease_expires_at: *exp,
                store_now: now,
            },
            _ => LeaseRead::Missing { store_now: now },
        })
    }

    async fn release_lease(&self, token: &OwnerToken) -> Result<bool> {
        let (mut st, _now) = self.lock()?;
        match st.leases.get(&token.owner_id) {
            Some((g, _)) if *g == token.lease_generation => {
                st.leases.remove(&token.owner_id);
                st.purge_owner(&token.owner_id);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn acquire_term_lease(
        &self,
        name: &str,
        holder: &OwnerToken,
        config_epoch: u64,
        ttl: Duration,
    ) -> Result<TermLease> {
        crate::validate::ttl(ttl)?;
        let (mut st, now) = self.lock()?;
        st.require_live(holder, now)?;
        let rec = st.terms.get(name).cloned();
        let expires = now.plus(ttl);
        let term = match rec {
            Some(TermRec {
                holder: Some(h),
                term,
                expires_at,
                ..
            }) if expires_at > now => {
                if &h != holder {
                    return Err(StoreError::stale(
                        StaleReason::LeaseNotLive,
                        format!("term lease {name} held by {}", h.owner_id),
                    ));
                }
                term
            }
            Some(TermRec { term, .. }) => {
                if term >= COUNTER_MAX {
                    return Err(StoreError::GenerationExhausted(format!("term:{name}")));
                }
                term + 1
            }
            None => 1,
        };
        st.terms.insert(
            name.to_owned(),
            TermRec {
                holder: Some(holder.clone()),
                term,
                config_epoch,
                expires_at: expires,
            },
        );
        Ok(TermLease {
            name: name.to_owned(),
            holder: holder.clone(),
            term,
            config_epoch,
            expires_at: expires,
            store_now: now,
        })
    }

    async fn read_term_lease(&self, name: &str) -> Result<Option<TermLease>> {
        let (st, now) = self.lock()?;
        Ok(match st.terms.get(name) {
            Some(TermRec {
                holder: Some(h),
                term,
                config_epoch,
                expires_at,
            }) if *expires_at > now => Some(TermLease {
                name: name.to_owned(),
                holder: h.clone(),
                term: *term,
                config_epoch: *config_epoch,
                expires_at: *expires_at,
                store_now: now,
            }),
            _ => None,
        })
    }

    async fn release_term_lease(&self, name: &str, holder: &OwnerToken, term: u64) -> Result<bool> {
        let (mut st, _now) = self.lock()?;
        match st.terms.get_mut(name) {
            Some(rec) if rec.holder.as_ref() == Some(holder) && rec.term == term => {
                rec.holder = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn publish_descriptor(
        &self,
        owner: &OwnerToken,
        key: &DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> Result<PublishOutcome> {
        crate::validate::descriptor(lifecycle_generation, revision)?;
        let (mut st, now) = self.lock()?;
        st.require_live(owner, now)?;
        if let Some(existing) = st.descriptors.get(key) {
            let same_life = existing.lifecycle_generation == lifecycle_generation
                && st.lease_live(&existing.owner, now);
            if same_life {
                if revision < existing.revision {
                    return Err(StoreError::Conflict(format!(
                        "descriptor revision {revision} < {}",
                        existing.revision
                    )));
                }
                if revision == existing.revision {
                    return if existing.content == content && existing.owner == *owner {
                        Ok(PublishOutcome::Unchanged)
                    } else {
                        Err(StoreError::Conflict(format!(
                            "descriptor revision {revision} reused with other content"
                        )))
                    };
                }
            }
        }
        st.descriptors.insert(
            key.clone(),
            DescriptorRecord {
                key: key.clone(),
                owner: owner.clone(),
                lifecycle_generation,
                revision,
                content,
                updated_at: now,
            },
        );
        Ok(PublishOutcome::Published)
    }

    async fn list_descriptors(
        &self,
        kind: DescriptorKind,
        scope: &str,
    ) -> Result<Vec<DescriptorRecord>> {
        let (st, now) = self.lock()?;
        Ok(st
            .descriptors
            .values()
            .filter(|d| d.key.kind == kind && d.key.scope == scope && st.lease_live(&d.owner, now))
            .cloned()
            .collect())
    }

    async fn remove_descriptor(&self, owner: &OwnerToken, key: &DescriptorKey) -> Result<bool> {
        let (mut st, _now) = self.lock()?;
        match st.descriptors.get(key) {
            Some(d) if d.owner == *owner => {
                st.descriptors.remove(key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn claim_routing_id(&self, owner: &OwnerToken, mesh: &str, rid: &str) -> Result<()> {
        let (mut st, now) = self.lock()?;
        st.require_live(owner, now)?;
        let k = (mesh.to_owned(), rid.to_owned());
        if let Some(holder) = st.rid_claims.get(&k)
            && holder != owner
            && st.lease_live(holder, now)
        {
            return Err(StoreError::RoutingIdConflict(format!(
                "{mesh}/{rid} held by {}",
                holder.owner_id
            )));
        }
        st.rid_claims.insert(k, owner.clone());
        Ok(())
    }

    async fn set_capacity_limits(
        &self,
        owner: &OwnerToken,
        node: &NodeRef,
        limits: CapacityLimits,
    ) -> Result<()> {
        let (mut st, now) = self.lock()?;
        st.require_live(owner, now)?;
        st.limits.insert(node.clone(), limits);
        Ok(())
    }

    async fn capacity_use(&self, node: &NodeRef) -> Result<CapacityUse> {
        let (st, _now) = self.lock()?;
        Ok(st.usage.get(node).copied().unwrap_or_default())
    }

    async fn read_authority(&self, key: &AuthorityKey) -> Result<AuthorityRead> {
        let (st, now) = self.lock()?;
        Ok(match st.authority.get(key) {
            Some(r) => AuthorityRead::Found(Box::new(State::snapshot(key, r, now))),
            None => AuthorityRead::Missing { store_now: now },
        })
    }

    async fn read_route(&self, key: &AuthorityKey) -> Result<RouteRead> {
        let (st, now) = self.lock()?;
        let Some(r) = st.authority.get(key) else {
            return Ok(RouteRead {
                authority: AuthorityRead::Missing { store_now: now },
                owner_lease: None,
            });
        };
        let snapshot = State::snapshot(key, r, now);
        let owner_lease = match st.leases.get(&snapshot.owner.owner_id) {
            Some((g, exp)) if *exp > now => Some(OwnerLeaseState {
                token: OwnerToken {
                    owner_id: snapshot.owner.owner_id.clone(),
                    lease_generation: *g,
                },
                lease_expires_at: *exp,
            }),
            _ => None,
        };
        Ok(RouteRead {
            authority: AuthorityRead::Found(Box::new(snapshot)),
            owner_lease,
        })
    }

    async fn reserve(&self, req: &ReserveRequest) -> Result<Reservation> {
        crate::validate::reservation(&req.reservation_id, &req.stable_type)?;
        let (mut st, now) = self.lock()?;
        // (1) replay
        if let Some((prev_req, prev, expires)) = st.reservations.get(&req.reservation_id)
            && *expires > now
        {
            return if prev_req == req {
                Ok(prev.clone())
            } else {
                Err(StoreError::Conflict(format!(
                    "reservation id {} reused with another request",
                    req.reservation_id
                )))
            };
        }
        // (2) existing record
        if let Some(r) = st.authority.get(&req.key) {
            return if r.allocation.object_kind == req.object_kind
                && r.allocation.stable_type == req.stable_type
            {
                Err(StoreError::AlreadyExists(Box::new(State::snapshot(
                    &req.key, r, now,
                ))))
            } else {
                Err(StoreError::SpotIdConflict(req.key.as_str().to_owned()))
            };
        }
        // (3) target lease and descriptor
        st.require_live(&req.target.owner, now)?;
        st.require_descriptor(&req.target)?;
        // (4) capacity
        let limits = st.limits.get(&req.target.node).copied().unwrap_or_default();
        let usage = st.usage.get(&req.target.node).copied().unwrap_or_default();
        let (used, limit) = match req.object_kind {
            ObjectKind::Actor => (usage.actors, limits.actors),
            ObjectKind::Spot => (usage.spots, limits.spots),
        };
        if limit > 0 && used.saturating_add(u64::from(req.capacity_delta)) > u64::from(limit) {
            return Err(StoreError::CapacityExhausted(format!(
                "{}/{}",
                req.target.node.mesh, req.target.node.rid
            )));
        }
        st.ensure_counters(&[
            counters::OBJECT_GENERATION,
            counters::OWNER_GENERATION,
            counters::RESERVATION_VERSION,
            counters::STORE_VERSION,
        ])?;
        let object_generation = st.next(counters::OBJECT_GENERATION)?;
        let authority_owner_generation = st.next(counters::OWNER_GENERATION)?;
        let reservation_version = st.next(counters::RESERVATION_VERSION)?;
        let store_version = st.next(counters::STORE_VERSION)?;
        st.charge(
            &req.target.node,
            req.object_kind,
            i64::from(req.capacity_delta),
        );
        st.authority.insert(
            req.key.clone(),
            Record {
                state: AuthorityState::Creating,
                store_version,
                object_generation,
                authority_owner_generation,
                owner: req.target.owner.clone(),
                owner_node: req.target.node.clone(),
                allocation: Allocation {
                    state: AllocationState::Pending,
                    object_kind: req.object_kind,
                    stable_type: req.stable_type.clone(),
                    units: req.capacity_delta,
                },
                pending_creation: Some(PendingCreation {
                    reservation_id: req.reservation_id.clone(),
                    reservation_version,
                    target: req.target.clone(),
                    capacity_delta: req.capacity_delta,
                    content: req.content.clone(),
                }),
                payload: req.payload.clone(),
            },
        );
        let reservation = Reservation {
            key: req.key.clone(),
            reservation_id: req.reservation_id.clone(),
            store_version,
            object_generation,
            authority_owner_generation,
            reservation_version,
            target: req.target.clone(),
        };
        st.reservations.insert(
            req.reservation_id.clone(),
            (
                req.clone(),
                reservation.clone(),
                now.plus(RESERVATION_REPLAY_RETENTION),
            ),
        );
        if st.reservations.len() >= st.reservations_sweep_at.max(RESERVATION_SWEEP_MIN) {
            st.reservations.retain(|_, (_, _, exp)| *exp > now);
            st.reservations_sweep_at = st.reservations.len() * 2;
        }
        Ok(reservation)
    }

    async fn commit_ready(&self, res: &Reservation, payload: Bytes) -> Result<AuthoritySnapshot> {
        let (mut st, now) = self.lock()?;
        st.check_reservation(res)?;
        st.require_live(&res.target.owner, now)?;
        let store_version = st.next(counters::STORE_VERSION)?;
        let r = st
            .authority
            .get_mut(&res.key)
            .ok_or_else(|| StoreError::Missing(res.key.as_str().into()))?;
        r.state = AuthorityState::Ready;
        r.store_version = store_version;
        r.allocation.state = AllocationState::Active;
        r.pending_creation = None;
        r.payload = payload;
        Ok(State::snapshot(&res.key, r, now))
    }

    async fn abort(&self, res: &Reservation) -> Result<()> {
        let (mut st, _now) = self.lock()?;
        let (node, kind, units) = {
            let r = st.check_reservation(res)?;
            (
                r.owner_node.clone(),
                r.allocation.object_kind,
                i64::from(r.allocation.units),
            )
        };
        st.authority.remove(&res.key);
        st.charge(&node, kind, -units);
        Ok(())
    }

    async fn transfer_owner(&self, transfer: &TransferOwner) -> Result<AuthoritySnapshot> {
        let op = AggregateOp::Transfer(transfer.clone());
        let (mut st, now) = self.lock()?;
        st.check_op(&op, now)?;
        st.ensure_counters(State::counters_for(&op))?;
        st.apply_op(&op, now)
    }

    async fn preserve(&self, fence: &OwnerFence, payload: Bytes) -> Result<AuthoritySnapshot> {
        let op = AggregateOp::Preserve {
            fence: fence.clone(),
            payload,
        };
        let (mut st, now) = self.lock()?;
        st.check_op(&op, now)?;
        st.ensure_counters(State::counters_for(&op))?;
        st.apply_op(&op, now)
    }

    async fn set_state(
        &self,
        fence: &OwnerFence,
        from: AuthorityState,
        to: AuthorityState,
    ) -> Result<AuthoritySnapshot> {
        crate::validate::transition(from, to)?;
        let (mut st, now) = self.lock()?;
        let state = st.check_fence(fence)?.state;
        if state != from {
            return Err(StoreError::stale(StaleReason::State, fence.key.as_str()));
        }
        st.require_live(&fence.owner, now)?;
        let store_version = st.next(counters::STORE_VERSION)?;
        let r = st
            .authority
            .get_mut(&fence.key)
            .ok_or_else(|| StoreError::Missing(fence.key.as_str().into()))?;
        r.state = to;
        r.store_version = store_version;
        Ok(State::snapshot(&fence.key, r, now))
    }

    async fn commit_aggregate(&self, ops: &[AggregateOp]) -> Result<Vec<AuthoritySnapshot>> {
        crate::validate::aggregate(ops)?;
        self.wait_out_stalls(ops).await;
        let (mut st, now) = self.lock()?;
        for op in ops {
            st.check_op(op, now)?;
        }
        let needed: Vec<&'static str> = ops
            .iter()
            .flat_map(|op| State::counters_for(op).iter().copied())
            .collect();
        st.ensure_counters(&needed)?;
        ops.iter().map(|op| st.apply_op(op, now)).collect()
    }

    async fn delete_fenced(&self, fence: &OwnerFence) -> Result<()> {
        let (mut st, _now) = self.lock()?;
        let (node, kind, units, state) = {
            let r = st.check_fence(fence)?;
            (
                r.owner_node.clone(),
                r.allocation.object_kind,
                i64::from(r.allocation.units),
                r.state,
            )
        };
        if state == AuthorityState::Creating {
            return Err(StoreError::stale(StaleReason::State, fence.key.as_str()));
        }
        st.authority.remove(&fence.key);
        st.charge(&node, kind, -units);
        Ok(())
    }

    fn recovery(&self) -> watch::Receiver<u64> {
        self.recovery.subscribe()
    }
}

impl RelocationStore for MemoryStore {
    async fn put(&self, reference: &str, bytes: Bytes, retention: Duration) -> Result<StoreTime> {
        crate::validate::ttl(retention)?;
        crate::validate::non_empty(reference, "reference")?;
        let (mut st, now) = self.lock()?;
        let expires = now.plus(retention);
        match st.payloads.get_mut(reference) {
            Some((existing, exp)) if *exp > now => {
                if *existing != bytes {
                    return Err(StoreError::Conflict(format!(
                        "relocation payload {reference} is immutable"
                    )));
                }
                *exp = (*exp).max(expires);
                Ok(*exp)
            }
            _ => {
                st.payloads.insert(reference.to_owned(), (bytes, expires));
                Ok(expires)
            }
        }
    }

    async fn read(&self, reference: &str) -> Result<Option<StoredPayload>> {
        let (st, now) = self.lock()?;
        Ok(match st.payloads.get(reference) {
            Some((b, exp)) if *exp > now => Some(StoredPayload {
                bytes: b.clone(),
                expires_at: *exp,
                store_now: now,
            }),
            _ => None,
        })
    }

    async fn renew(&self, reference: &str, retention: Duration) -> Result<StoreTime> {
        crate::validate::ttl(retention)?;
        let (mut st, now) = self.lock()?;
        match st.payloads.get_mut(reference) {
            Some((_, exp)) if *exp > now => {
                *exp = now.plus(retention);
                Ok(*exp)
            }
            _ => Err(StoreError::Missing(reference.to_owned())),
        }
    }

    async fn delete(&self, reference: &str) -> Result<bool> {
        let (mut st, now) = self.lock()?;
        Ok(matches!(st.payloads.remove(reference), Some((_, exp)) if exp > now))
    }
}
