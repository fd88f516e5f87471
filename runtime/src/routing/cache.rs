//! The positive route cache (routing §2.2): a short-lived snapshot of Ready owner routes, kept
//! together with the fences the target's acceptance judgment needs.
//!
//! Pure: no clock, no store. Every call takes `now` (the host's monotonic clock), so tests drive
//! time explicitly and the resolver passes `Instant::now()`.
//!
//! Rules, each with a test below:
//!
//! - Only a [`ReadyRoute`] is ever inserted (the type allows nothing else); `Missing`,
//!   `Creating` and store failures are never cached, so a brief failure never outlives the
//!   call that saw it.
//! - An entry lives until the earliest of: `RouteCacheMaxAge` after insertion (0 = the cache is
//!   off), the owner lease's local admission deadline (lease expiry − fencing margin,
//!   translated from store time to the local clock through the read's `store_now`), and
//!   `MessageFollowDuration` (when positive).
//! - A changed max age applies to entries inserted afterwards only; existing entries keep the
//!   expiry they were given.
//! - Immediate invalidation: a higher StoreVersion observed for the object, a stale-route
//!   result for the cached route, a store recovery event (everything learned before is
//!   dropped), owner-lease invalidation (every entry of that lease), and a `messageFollow`
//!   notification whose source route fences match the entry (a newer route is kept).
//! - An older read that finishes late never replaces a newer entry (lower StoreVersion).
//! - A read in flight across an invalidation of *its key* (or of everything: store recovery,
//!   owner lease) is not cached ([`RouteCache::invalidated_since`]); an invalidation of another
//!   key does not keep it out, so a stream of `messageFollow` notices during a relocation does
//!   not make every concurrent read a second one.

// foldhash (seeded, fast for short keys): looked up on every call by ID.
use foldhash::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zlink_store::types::{AuthorityKey, NodeRef, OwnerToken, StoreTime};

/// A Ready owner route and the fences it was resolved under (routing §2.2, the first row of
/// the table: object ID, ObjectGeneration, AuthorityOwnerGeneration, StoreVersion, owner lease,
/// node lifecycle and route).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyRoute {
    /// Object kind and global ID.
    pub key: AuthorityKey,
    /// Incarnation.
    pub object_generation: u64,
    /// Owner change order within the incarnation.
    pub authority_owner_generation: u64,
    /// Store revision of the authority record read.
    pub store_version: u64,
    /// The owner's host lease token.
    pub owner: OwnerToken,
    /// The owner MeshNode: MeshName, RID and lifecycle generation (the route).
    pub owner_node: NodeRef,
    /// Store-time expiry of the owner lease at the read.
    pub lease_expires_at: StoreTime,
    /// Store time of the read.
    pub store_now: StoreTime,
}

impl ReadyRoute {
    /// How long after the read the owner may still admit work if its lease is not renewed: the
    /// local admission deadline is the lease expiry minus `fencing_margin` (glossary §8).
    pub fn admission_window(&self, fencing_margin: Duration) -> Duration {
        Duration::from_millis(
            self.lease_expires_at
                .minus(fencing_margin)
                .millis()
                .saturating_sub(self.store_now.millis()),
        )
    }

    /// Whether a `messageFollow` source route (or a stale-route answer) names exactly this
    /// route: same incarnation, owner generation, owner node incarnation and owner lease.
    pub fn matches(&self, fence: &RouteFence) -> bool {
        self.key == fence.key
            && self.object_generation == fence.object_generation
            && self.authority_owner_generation == fence.authority_owner_generation
            && self.owner_node.rid == fence.owner_rid
            && self.owner_node.lifecycle_generation == fence.owner_lifecycle_generation
            && self.owner.lease_generation == fence.owner_lease_generation
    }

    /// The route fence of this route.
    pub fn fence(&self) -> RouteFence {
        RouteFence {
            key: self.key.clone(),
            object_generation: self.object_generation,
            authority_owner_generation: self.authority_owner_generation,
            owner_rid: self.owner_node.rid.clone(),
            owner_lifecycle_generation: self.owner_node.lifecycle_generation,
            owner_lease_generation: self.owner.lease_generation,
        }
    }
}

/// The fences that identify one route (what a `messageFollow` notification's source route and a
/// stale-route answer carry).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteFence {
    /// Object kind and global ID.
    pub key: AuthorityKey,
    /// Incarnation.
    pub object_generation: u64,
    /// Owner change order.
    pub authority_owner_generation: u64,
    /// Owner node RID.
    pub owner_rid: String,
    /// Owner node lifecycle generation.
    pub owner_lifecycle_generation: u64,
    /// Owner lease generation.
    pub owner_lease_generation: u64,
}

/// Why an entry left the cache (metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invalidation {
    /// Its lifetime ended (max age, lease admission deadline or Message Follow duration).
    Expired,
    /// A higher StoreVersion was observed for the object.
    NewerStoreVersion,
    /// A send on the route was answered as stale.
    StaleRoute,
    /// The store signalled recovery.
    StoreRecovery,
    /// The owner lease was invalidated.
    OwnerLease,
    /// A matching `messageFollow` notification.
    MessageFollow,
}

impl Invalidation {
    /// Stable label.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::NewerStoreVersion => "newer_store_version",
            Self::StaleRoute => "stale_route",
            Self::StoreRecovery => "store_recovery",
            Self::OwnerLease => "owner_lease",
            Self::MessageFollow => "message_follow",
        }
    }

    const ALL: [Self; 6] = [
        Self::Expired,
        Self::NewerStoreVersion,
        Self::StaleRoute,
        Self::StoreRecovery,
        Self::OwnerLease,
        Self::MessageFollow,
    ];
}

/// Lifetime settings of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// `RouteCacheMaxAge` (default 15 s); zero switches the cache off.
    pub max_age: Duration,
    /// `MessageFollowDuration` (default 30 s); zero = Message Follow off (no bound from it).
    pub message_follow: Duration,
    /// Fencing margin subtracted from the owner lease expiry.
    pub fencing_margin: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        use crate::config::defaults::{
            FENCING_MARGIN, MESSAGE_FOLLOW_DURATION, ROUTE_CACHE_MAX_AGE,
        };
        Self {
            max_age: ROUTE_CACHE_MAX_AGE,
            message_follow: MESSAGE_FOLLOW_DURATION,
            fencing_margin: FENCING_MARGIN,
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    /// Shared with every caller of [`RouteCache::get`]: a hit clones a pointer, not the route's
    /// strings (runtime/tests/allocations.rs counts them).
    route: Arc<ReadyRoute>,
    expires: Instant,
}

/// Counters of one cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that found no usable entry.
    pub misses: u64,
    /// Entries removed, by reason.
    pub invalidations: [(Invalidation, u64); 6],
}

/// The positive route cache. Not synchronized: the resolver wraps it in a lock.
#[derive(Debug)]
pub struct RouteCache {
    config: CacheConfig,
    /// Looked up on every call by ID (foldhash: seeded, fast for short keys).
    entries: HashMap<AuthorityKey, Entry>,
    hits: u64,
    misses: u64,
    removed: [u64; 6],
    /// Increases with every invalidation of everything (store recovery, owner lease), so a
    /// read that was in flight across one can tell (see [`RouteCache::invalidated_since`]).
    epoch: u64,
    /// Increases with every invalidation of one key; `key_seq` keeps the latest per key.
    seq: u64,
    /// The `seq` of the latest invalidation of each key, for reads in flight. Bounded: past
    /// [`KEY_SEQ_MAX`] keys it is cleared and `epoch` moves on instead (every read in flight is
    /// then kept out, which errs on the safe side).
    key_seq: HashMap<AuthorityKey, u64>,
    inserts: u64,
}

/// Where the cache's invalidations stood when a store read was sent (see
/// [`RouteCache::invalidation_mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidationMark {
    epoch: u64,
    seq: u64,
}

/// Most keys whose latest invalidation is remembered for reads in flight.
const KEY_SEQ_MAX: usize = 4096;

/// Expired entries are swept once per this many inserts, so IDs looked up once do not pile up.
const SWEEP_EVERY: u64 = 1024;

impl RouteCache {
    /// An empty cache.
    pub fn new(config: CacheConfig) -> Self {
        Self {
            config,
            entries: HashMap::default(),
            hits: 0,
            misses: 0,
            removed: [0; 6],
            epoch: 0,
            seq: 0,
            key_seq: HashMap::default(),
            inserts: 0,
        }
    }

    /// Where the invalidations stand now. A resolver takes the mark before a store read and
    /// inserts the result only if [`RouteCache::invalidated_since`] is false afterwards: an
    /// invalidation that landed while the read was in flight must not be undone by the older
    /// read.
    pub fn invalidation_mark(&self) -> InvalidationMark {
        InvalidationMark {
            epoch: self.epoch,
            seq: self.seq,
        }
    }

    /// Whether `key` (alone, or with everything) was invalidated after `mark` was taken.
    pub fn invalidated_since(&self, key: &AuthorityKey, mark: InvalidationMark) -> bool {
        self.epoch != mark.epoch || self.key_seq.get(key).is_some_and(|s| *s > mark.seq)
    }

    /// Remember an invalidation of `key` for the reads in flight.
    fn invalidated(&mut self, key: &AuthorityKey) {
        self.seq += 1;
        if self.key_seq.len() >= KEY_SEQ_MAX && !self.key_seq.contains_key(key) {
            self.key_seq.clear();
            self.epoch += 1;
        }
        self.key_seq.insert(key.clone(), self.seq);
    }

    /// Change the lifetime settings; entries already cached keep their expiry (routing §2.2
    /// "Runtime setting change").
    pub fn set_config(&mut self, config: CacheConfig) {
        self.config = config;
    }

    /// The current settings.
    pub fn config(&self) -> CacheConfig {
        self.config
    }

    /// The usable route of `key`, without counting a hit or a miss (a second look by the
    /// resolver within one lookup).
    pub fn peek<Q>(&self, key: &Q, now: Instant) -> Option<Arc<ReadyRoute>>
    where
        Q: std::hash::Hash + Eq + ?Sized,
        AuthorityKey: std::borrow::Borrow<Q>,
    {
        self.entries
            .get(key)
            .filter(|e| e.expires > now)
            .map(|e| Arc::clone(&e.route))
    }

    /// The usable route of `key`, counting a hit; nothing counted or removed when there is
    /// none (the caller's [`RouteCache::get`] follows and counts the miss).
    pub fn hit<Q>(&mut self, key: &Q, now: Instant) -> Option<Arc<ReadyRoute>>
    where
        Q: std::hash::Hash + Eq + ?Sized,
        AuthorityKey: std::borrow::Borrow<Q>,
    {
        let route = self.peek(key, now)?;
        self.hits += 1;
        Some(route)
    }

    /// The usable route of `key` (an expired entry is removed), counting a hit or a miss.
    pub fn get(&mut self, key: &AuthorityKey, now: Instant) -> Option<Arc<ReadyRoute>> {
        match self.entries.get(key) {
            Some(e) if e.expires > now => {
                self.hits += 1;
                Some(Arc::clone(&e.route))
            }
            Some(_) => {
                self.remove(key, Invalidation::Expired);
                self.misses += 1;
                None
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Cache `route`, read at `read_at` (the local instant the store read was sent: the lease
    /// window is measured from there, which errs on the safe side). Returns the entry's expiry,
    /// or `None` when it is not cached: the cache is off, the admission window is already
    /// closed, or a newer route (higher StoreVersion) is cached.
    pub fn insert(
        &mut self,
        route: impl Into<Arc<ReadyRoute>>,
        read_at: Instant,
    ) -> Option<Instant> {
        let route = route.into();
        if self.config.max_age.is_zero() {
            return None;
        }
        let mut life = self
            .config
            .max_age
            .min(route.admission_window(self.config.fencing_margin));
        if !self.config.message_follow.is_zero() {
            life = life.min(self.config.message_follow);
        }
        if life.is_zero() {
            return None;
        }
        if let Some(old) = self.entries.get(&route.key)
            && old.route.store_version > route.store_version
        {
            return None;
        }
        let expires = read_at + life;
        self.entries
            .insert(route.key.clone(), Entry { route, expires });
        self.inserts += 1;
        if self.inserts.is_multiple_of(SWEEP_EVERY) {
            let before = self.entries.len();
            self.entries.retain(|_, e| e.expires > read_at);
            self.removed[Invalidation::Expired as usize] += (before - self.entries.len()) as u64;
        }
        Some(expires)
    }

    /// A StoreVersion of `key` was observed (e.g. in a reply or a write); an entry with a lower
    /// one is removed.
    pub fn observe_store_version(&mut self, key: &AuthorityKey, store_version: u64) -> bool {
        self.invalidated(key);
        if self
            .entries
            .get(key)
            .is_some_and(|e| e.route.store_version < store_version)
        {
            self.remove(key, Invalidation::NewerStoreVersion);
            return true;
        }
        false
    }

    /// A send on `route` was answered as stale: remove the entry if it is still that route.
    pub fn stale_route(&mut self, fence: &RouteFence) -> bool {
        self.remove_matching(fence, Invalidation::StaleRoute)
    }

    /// A `messageFollow` notification whose source route is `fence`: remove the entry only if
    /// its fences match (a newer route cached meanwhile stays; routing §2.5).
    pub fn message_follow(&mut self, fence: &RouteFence) -> bool {
        self.remove_matching(fence, Invalidation::MessageFollow)
    }

    /// The store recovered from a failure: drop everything learned before.
    pub fn store_recovered(&mut self) -> usize {
        let n = self.entries.len();
        self.entries.clear();
        self.epoch += 1;
        self.removed[Invalidation::StoreRecovery as usize] += n as u64;
        n
    }

    /// The owner lease `token` is no longer valid: drop every route through it.
    pub fn owner_lease_invalid(&mut self, token: &OwnerToken) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| e.route.owner != *token);
        let n = before - self.entries.len();
        self.removed[Invalidation::OwnerLease as usize] += n as u64;
        self.epoch += 1;
        n
    }

    /// Number of entries (expired ones included until looked up).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Hit, miss and invalidation counters.
    pub fn stats(&self) -> CacheStats {
        let mut invalidations = [(Invalidation::Expired, 0); 6];
        for (i, reason) in Invalidation::ALL.iter().enumerate() {
            invalidations[i] = (*reason, self.removed[*reason as usize]);
        }
        CacheStats {
            hits: self.hits,
            misses: self.misses,
            invalidations,
        }
    }

    fn remove_matching(&mut self, fence: &RouteFence, why: Invalidation) -> bool {
        // Even when nothing is cached yet: a read in flight for this route must not insert it.
        self.invalidated(&fence.key);
        if self
            .entries
            .get(&fence.key)
            .is_some_and(|e| e.route.matches(fence))
        {
            self.remove(&fence.key, why);
            return true;
        }
        false
    }

    fn remove(&mut self, key: &AuthorityKey, why: Invalidation) {
        if self.entries.remove(key).is_some() {
            self.removed[why as usize] += 1;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use zlink_store::types::ObjectKind;

    const T0: u64 = 1_000_000;

    fn route(id: &str, store_version: u64, lease_ms: u64) -> ReadyRoute {
        ReadyRoute {
            key: AuthorityKey::new(ObjectKind::Actor, id).unwrap(),
            object_generation: 3,
            authority_owner_generation: 1,
            store_version,
            owner: OwnerToken {
                owner_id: "host-a".into(),
                lease_generation: 9,
            },
            owner_node: NodeRef {
                mesh: "m".into(),
                rid: "node-a".into(),
                lifecycle_generation: 5,
            },
            lease_expires_at: StoreTime(T0 + lease_ms),
            store_now: StoreTime(T0),
        }
    }

    fn config(max_age_s: u64) -> CacheConfig {
        CacheConfig {
            max_age: Duration::from_secs(max_age_s),
            message_follow: Duration::from_secs(30),
            fencing_margin: Duration::from_secs(2),
        }
    }

    /// A read in flight is kept out of the cache by an invalidation of its own key or of
    /// everything, never by one of another key (a relocation's stream of `messageFollow`
    /// notices used to keep every concurrent read out, so each was read twice).
    #[test]
    fn only_an_invalidation_of_its_key_or_of_everything_keeps_a_read_in_flight_out() {
        let mut c = RouteCache::new(config(15));
        let (a, b) = (route("a", 1, 60_000), route("b", 1, 60_000));
        let mark = c.invalidation_mark();
        assert!(!c.invalidated_since(&a.key, mark));
        c.message_follow(&b.fence());
        assert!(
            !c.invalidated_since(&a.key, mark),
            "another key's notice keeps nothing out"
        );
        assert!(
            c.invalidated_since(&b.key, mark),
            "its own key's notice does"
        );
        let mark = c.invalidation_mark();
        c.stale_route(&a.fence());
        assert!(c.invalidated_since(&a.key, mark));
        assert!(!c.invalidated_since(&b.key, mark));
        let mark = c.invalidation_mark();
        c.observe_store_version(&b.key, 7);
        assert!(c.invalidated_since(&b.key, mark));
        assert!(!c.invalidated_since(&a.key, mark));
        let mark = c.invalidation_mark();
        c.store_recovered();
        assert!(
            c.invalidated_since(&a.key, mark),
            "a recovery keeps everything out"
        );
        let mark = c.invalidation_mark();
        c.owner_lease_invalid(&a.owner);
        assert!(c.invalidated_since(&b.key, mark), "so does an owner lease");
    }

    /// Past `KEY_SEQ_MAX` remembered keys the table is cleared and every read in flight is
    /// kept out — the memory stays bounded and no invalidation is forgotten.
    #[test]
    fn the_per_key_table_is_bounded_and_forgets_nothing_when_it_overflows() {
        let mut c = RouteCache::new(config(15));
        let first = route("first", 1, 60_000);
        let other = route("other", 1, 60_000);
        c.message_follow(&first.fence());
        let mark = c.invalidation_mark();
        for i in 0..KEY_SEQ_MAX {
            c.message_follow(&route(&format!("k{i}"), 1, 60_000).fence());
        }
        assert!(c.key_seq.len() <= KEY_SEQ_MAX);
        assert!(
            c.invalidated_since(&other.key, mark),
            "after an overflow every read in flight is kept out"
        );
        let mark = c.invalidation_mark();
        c.message_follow(&first.fence());
        assert!(c.invalidated_since(&first.key, mark));
        assert!(!c.invalidated_since(&other.key, mark));
    }

    #[test]
    fn an_entry_lives_until_the_earliest_of_max_age_and_the_lease_admission_deadline() {
        let now = Instant::now();
        let mut c = RouteCache::new(config(15));
        // Lease 60 s ahead: max age (15 s) bounds the entry.
        let long = route("a", 1, 60_000);
        assert_eq!(
            c.insert(long.clone(), now),
            Some(now + Duration::from_secs(15))
        );
        assert_eq!(
            c.get(&long.key, now + Duration::from_millis(14_999)),
            Some(Arc::new(long.clone()))
        );
        assert_eq!(c.get(&long.key, now + Duration::from_secs(15)), None);
        // Lease 7 s ahead, margin 2 s: the entry ends 5 s after the read, never later.
        let short = route("b", 1, 7_000);
        assert_eq!(
            c.insert(short.clone(), now),
            Some(now + Duration::from_secs(5))
        );
        assert!(
            c.get(&short.key, now + Duration::from_millis(4_999))
                .is_some()
        );
        assert_eq!(c.get(&short.key, now + Duration::from_secs(5)), None);
        // Inside the margin already: not cached at all.
        let closing = route("c", 1, 1_500);
        assert_eq!(c.insert(closing.clone(), now), None);
        assert_eq!(c.get(&closing.key, now), None);
        // Message Follow shorter than max age (only possible with the rule off): it bounds too.
        c.set_config(CacheConfig {
            max_age: Duration::from_secs(15),
            message_follow: Duration::from_secs(3),
            fencing_margin: Duration::from_secs(2),
        });
        assert_eq!(
            c.insert(route("d", 1, 60_000), now),
            Some(now + Duration::from_secs(3))
        );
        let stats = c.stats();
        assert_eq!((stats.hits, stats.misses), (2, 3));
        assert_eq!(stats.invalidations[0], (Invalidation::Expired, 2));
    }

    #[test]
    fn max_age_zero_caches_nothing_and_a_changed_max_age_applies_to_new_entries_only() {
        let now = Instant::now();
        let mut c = RouteCache::new(config(0));
        assert_eq!(c.insert(route("a", 1, 60_000), now), None);
        assert!(c.is_empty());
        c.set_config(config(15));
        let a = route("a", 1, 60_000);
        c.insert(a.clone(), now);
        c.set_config(config(1));
        // The existing entry keeps its 15 s; a new one gets 1 s.
        assert!(c.get(&a.key, now + Duration::from_secs(10)).is_some());
        let b = route("b", 1, 60_000);
        assert_eq!(c.insert(b.clone(), now), Some(now + Duration::from_secs(1)));
        assert_eq!(c.get(&b.key, now + Duration::from_secs(2)), None);
        // Raising it again does not extend the 1 s entry either.
        c.insert(b.clone(), now);
        c.set_config(config(15));
        assert_eq!(c.get(&b.key, now + Duration::from_secs(2)), None);
    }

    #[test]
    fn each_invalidation_trigger_removes_the_entry() {
        let now = Instant::now();
        let mut c = RouteCache::new(config(15));
        let r = route("a", 4, 60_000);

        c.insert(r.clone(), now);
        assert!(!c.observe_store_version(&r.key, 4), "same version keeps it");
        assert!(c.observe_store_version(&r.key, 5));
        assert_eq!(c.get(&r.key, now), None);

        c.insert(r.clone(), now);
        assert!(c.stale_route(&r.fence()));
        assert_eq!(c.get(&r.key, now), None);

        c.insert(r.clone(), now);
        c.insert(route("b", 1, 60_000), now);
        assert_eq!(c.store_recovered(), 2);
        assert!(c.is_empty());

        c.insert(r.clone(), now);
        let mut other = route("b", 1, 60_000);
        other.owner.lease_generation = 10;
        c.insert(other.clone(), now);
        assert_eq!(c.owner_lease_invalid(&r.owner), 1);
        assert_eq!(c.get(&r.key, now), None);
        assert!(
            c.get(&other.key, now).is_some(),
            "another lease's route stays"
        );

        c.insert(r.clone(), now);
        assert!(c.message_follow(&r.fence()));
        assert_eq!(c.get(&r.key, now), None);

        let counts: Vec<u64> = c.stats().invalidations.iter().map(|(_, n)| *n).collect();
        assert_eq!(counts, vec![0, 1, 1, 2, 1, 1]);
    }

    #[test]
    fn a_notification_or_stale_answer_for_another_route_keeps_the_newer_entry() {
        let now = Instant::now();
        let mut c = RouteCache::new(config(15));
        let old = route("a", 4, 60_000);
        let mut newer = route("a", 6, 60_000);
        newer.authority_owner_generation = 2;
        newer.owner_node.rid = "node-b".into();
        c.insert(newer.clone(), now);
        // Every fence field takes part in the match.
        let mut fences = vec![old.fence()];
        for i in 0..6 {
            let mut f = newer.fence();
            match i {
                0 => f.object_generation += 1,
                1 => f.authority_owner_generation += 1,
                2 => f.owner_rid.push('x'),
                3 => f.owner_lifecycle_generation += 1,
                4 => f.owner_lease_generation += 1,
                _ => f.key = AuthorityKey::new(ObjectKind::Spot, "a").unwrap(),
            }
            fences.push(f);
        }
        for f in &fences {
            assert!(!c.message_follow(f), "{f:?}");
            assert!(!c.stale_route(f), "{f:?}");
        }
        assert_eq!(c.get(&newer.key, now).as_deref(), Some(&newer));
        // A late read of the older version does not replace the newer entry.
        assert_eq!(c.insert(old, now), None);
        assert_eq!(c.get(&newer.key, now).as_deref(), Some(&newer));
    }
}
