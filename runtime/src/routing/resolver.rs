//! The resolver (routing §2.1–§2.2): global object ID → exactly one of four closed results.
//!
//! A cache hit answers without touching the store. A miss costs exactly one store round trip
//! ([`LocationStore::read_route`]: the authority record plus its owner's live lease). Only a
//! [`Resolution::ReadyRoute`] enters the positive route cache; `Missing`, `Unavailable` (a
//! Creating or Closing record, or an owner whose lease is gone) and `StoreFailure` are returned
//! and forgotten, so the next call reads the store again.
//!
//! Who receives which result (routing §2.2 table): `ReadyRoute` goes to route admission,
//! `Missing` only to the creation coordinator (or becomes `NotFound`), `Unavailable` only to the
//! terminal mapper, `StoreFailure` to store retry and reconciliation. The resolver itself never
//! resubmits anything anywhere.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::watch;
use zlink_store::types::{
    AuthorityKey, AuthorityRead, AuthoritySnapshot, AuthorityState, RouteRead,
};
use zlink_store::{LocationStore, StoreError};

use super::cache::{CacheConfig, ReadyRoute, RouteCache};

/// The boxed future a [`RouteSource`] returns.
pub type BoxRouteFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The store reads the resolver makes, object-safe. Every [`LocationStore`] is one; tests wrap
/// a real store to count reads.
pub trait RouteSource: Send + Sync + 'static {
    /// See [`LocationStore::read_route`].
    fn read_route<'a>(&'a self, key: &'a AuthorityKey) -> BoxRouteFuture<'a, RouteRead>;
    /// See [`LocationStore::recovery`].
    fn recovery(&self) -> watch::Receiver<u64>;
}

impl<S: LocationStore> RouteSource for S {
    fn read_route<'a>(&'a self, key: &'a AuthorityKey) -> BoxRouteFuture<'a, RouteRead> {
        Box::pin(LocationStore::read_route(self, key))
    }
    fn recovery(&self) -> watch::Receiver<u64> {
        LocationStore::recovery(self)
    }
}

/// Why an existing authority cannot be used as a route now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnavailableReason {
    /// A creation reservation holds the ID; it is not routable until Ready.
    Creating,
    /// The owner is closing the object.
    Closing,
    /// The record names an owner lease that is no longer live (expired by store time, released,
    /// or replaced by a new lease generation of the same host).
    OwnerLeaseLost,
}

/// The four closed results of a resolution (routing §2.2). Never collapsed into an `Option`.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// A Ready owner route with its authority and owner-lease fences.
    ReadyRoute(Arc<ReadyRoute>),
    /// No authority record exists.
    Missing,
    /// Authority exists, but its owner cannot be used now.
    Unavailable {
        /// Why.
        reason: UnavailableReason,
        /// The record read (for the creation coordinator and diagnostics).
        authority: Box<AuthoritySnapshot>,
    },
    /// Whether authority exists could not be determined.
    StoreFailure(StoreError),
}

impl Resolution {
    /// Stable label for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ReadyRoute(_) => "ready_route",
            Self::Missing => "missing",
            Self::Unavailable { .. } => "unavailable",
            Self::StoreFailure(_) => "store_failure",
        }
    }
}

/// Classify one store read (pure).
pub fn classify(read: RouteRead) -> Resolution {
    let snapshot = match read.authority {
        AuthorityRead::Missing { .. } => return Resolution::Missing,
        AuthorityRead::Found(s) => s,
    };
    let unavailable = |reason, authority| Resolution::Unavailable { reason, authority };
    match snapshot.state {
        AuthorityState::Creating => unavailable(UnavailableReason::Creating, snapshot),
        AuthorityState::Closing => unavailable(UnavailableReason::Closing, snapshot),
        // A Relocating record is still owned (and admitted) by its source, which holds or
        // relays what arrives (routing §2.5).
        AuthorityState::Ready | AuthorityState::Relocating => match read.owner_lease {
            Some(lease) if lease.token == snapshot.owner => {
                Resolution::ReadyRoute(Arc::new(ReadyRoute {
                    key: snapshot.key.clone(),
                    object_generation: snapshot.object_generation,
                    authority_owner_generation: snapshot.authority_owner_generation,
                    store_version: snapshot.store_version,
                    owner: snapshot.owner.clone(),
                    owner_node: snapshot.owner_node.clone(),
                    lease_expires_at: lease.lease_expires_at,
                    store_now: snapshot.store_now,
                }))
            }
            _ => unavailable(UnavailableReason::OwnerLeaseLost, snapshot),
        },
    }
}

/// Counters of a resolver (the cache keeps its own hit / miss / invalidation counts).
#[derive(Debug, Default)]
pub struct ResolverStats {
    /// Store reads made.
    pub store_reads: AtomicU64,
    /// Cache misses that waited for another caller's read of the same key instead of reading.
    pub coalesced: AtomicU64,
    /// Results by kind: ready_route, missing, unavailable, store_failure.
    pub results: [AtomicU64; 4],
}

/// A resolver with its positive route cache.
pub struct Resolver {
    source: Arc<dyn RouteSource>,
    cache: Mutex<RouteCache>,
    recovery: watch::Receiver<u64>,
    recovery_seen: AtomicU64,
    clock: Arc<dyn Fn() -> Instant + Send + Sync>,
    stats: ResolverStats,
    /// Reads in flight after a cache miss, by key: concurrent misses of one key wait for the
    /// first one's read instead of each reading the store.
    inflight: Mutex<std::collections::HashMap<AuthorityKey, watch::Receiver<FlightState>>>,
}

/// The state of one shared read.
#[derive(Debug, Clone)]
enum FlightState {
    Pending,
    Done(Box<Resolution>),
    /// The reader's future was dropped before its read ended.
    Abandoned,
}

/// Ends an in-flight read: hands its result to the waiters (or tells them it was abandoned)
/// and forgets the key, also if the reader's future is dropped.
struct Flight<'a> {
    resolver: &'a Resolver,
    key: &'a AuthorityKey,
    done: watch::Sender<FlightState>,
    result: Option<Resolution>,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.resolver
            .inflight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(self.key);
        let state = match self.result.take() {
            Some(r) => FlightState::Done(Box::new(r)),
            None => FlightState::Abandoned,
        };
        let _ = self.done.send(state);
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("cached", &self.cache().len())
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// A resolver reading `source`, on the monotonic clock.
    pub fn new(source: Arc<dyn RouteSource>, config: CacheConfig) -> Self {
        Self::with_clock(source, config, Arc::new(Instant::now))
    }

    /// A resolver with an injected clock (tests turn it instead of sleeping).
    pub fn with_clock(
        source: Arc<dyn RouteSource>,
        config: CacheConfig,
        clock: Arc<dyn Fn() -> Instant + Send + Sync>,
    ) -> Self {
        let recovery = source.recovery();
        let seen = *recovery.borrow();
        Self {
            source,
            cache: Mutex::new(RouteCache::new(config)),
            recovery,
            recovery_seen: AtomicU64::new(seen),
            clock,
            stats: ResolverStats::default(),
            inflight: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Resolve `key`: from the cache when a usable route is cached (no store read), else by
    /// at most one store read. Concurrent misses of one key share the first caller's read:
    /// the others wait for it and get the same closed result, as if they had read at the same
    /// moment (counted as `coalesced`); a reader whose future is dropped leaves its waiters to
    /// read for themselves.
    pub async fn resolve(&self, key: &AuthorityKey) -> Resolution {
        self.check_recovery();
        if let Some(route) = self.cache().get(key, (self.clock)()) {
            self.count(0);
            return Resolution::ReadyRoute(route);
        }
        // Lead the read of this key, or join the one in flight. Decided under the lock, after
        // one more cache look (a read may have ended since the miss); no guard lives across an
        // await.
        let (lead, joined) = {
            let mut inflight = self
                .inflight
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match inflight.get(key) {
                Some(rx) => (None, Some(rx.clone())),
                None => {
                    let cached = self.cache().peek(key, (self.clock)());
                    if let Some(route) = cached {
                        drop(inflight);
                        self.count(0);
                        return Resolution::ReadyRoute(route);
                    }
                    let (tx, rx) = watch::channel(FlightState::Pending);
                    inflight.insert(key.clone(), rx);
                    (Some(tx), None)
                }
            }
        };
        if let Some(done) = lead {
            let mut flight = Flight {
                resolver: self,
                key,
                done,
                result: None,
            };
            let out = self.resolve_fresh(key).await;
            flight.result = Some(out.clone());
            return out;
        }
        if let Some(mut rx) = joined {
            let state = rx
                .wait_for(|s| !matches!(s, FlightState::Pending))
                .await
                .map(|s| s.clone());
            if let Ok(FlightState::Done(out)) = state {
                self.stats.coalesced.fetch_add(1, Ordering::Relaxed);
                self.count_result(&out);
                return *out;
            }
        }
        self.resolve_fresh(key).await
    }

    /// The cached route of `key` when there is one (counted as a hit, as by
    /// [`Resolver::resolve`]); `None` — nothing counted — otherwise, and the caller resolves.
    pub fn cached<Q>(&self, key: &Q) -> Option<Arc<ReadyRoute>>
    where
        Q: std::hash::Hash + Eq + ?Sized,
        AuthorityKey: std::borrow::Borrow<Q>,
    {
        self.check_recovery();
        let route = self.cache().hit(key, (self.clock)())?;
        self.count(0);
        Some(route)
    }

    /// Resolve `key` from the store, skipping the cache lookup (the creation coordinator needs
    /// the store's current answer, not a cached route). A Ready result is cached as usual.
    pub async fn resolve_fresh(&self, key: &AuthorityKey) -> Resolution {
        self.check_recovery();
        let mark = self.cache().invalidation_mark();
        let read_at = (self.clock)();
        self.stats.store_reads.fetch_add(1, Ordering::Relaxed);
        let out = match self.source.read_route(key).await {
            Ok(read) => classify(read),
            Err(e) => Resolution::StoreFailure(e),
        };
        if let Resolution::ReadyRoute(route) = &out {
            // An invalidation (or a store recovery) that landed while the read was in flight
            // wins: the result is returned but not cached.
            self.check_recovery();
            let mut cache = self.cache();
            if !cache.invalidated_since(&route.key, mark) {
                cache.insert(route.clone(), read_at);
            }
        }
        self.count_result(&out);
        out
    }

    /// The cache, for the invalidation triggers (stale route, owner lease, Message Follow,
    /// observed StoreVersions) and its counters.
    pub fn cache(&self) -> MutexGuard<'_, RouteCache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Change `RouteCacheMaxAge` and the other lifetime settings for entries cached from now on.
    pub fn set_cache_config(&self, config: CacheConfig) {
        self.cache().set_config(config);
    }

    /// Counters.
    pub fn stats(&self) -> &ResolverStats {
        &self.stats
    }

    /// Drop the whole cache when the store signalled recovery since the last look.
    fn check_recovery(&self) {
        let epoch = *self.recovery.borrow();
        if self.recovery_seen.swap(epoch, Ordering::AcqRel) != epoch {
            self.cache().store_recovered();
        }
    }

    fn count_result(&self, r: &Resolution) {
        self.count(match r {
            Resolution::ReadyRoute(_) => 0,
            Resolution::Missing => 1,
            Resolution::Unavailable { .. } => 2,
            Resolution::StoreFailure(_) => 3,
        });
    }

    fn count(&self, i: usize) {
        self.stats.results[i].fetch_add(1, Ordering::Relaxed);
    }
}
