//! The resolver and its positive route cache against an instrumented Location Store (routing
//! §2.1–§2.2): the memory provider with a manual store clock, wrapped so every store read is
//! counted. The local clock of the cache is injected too, so lifetimes are checked to the
//! millisecond without sleeping.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::watch;
use zlink::routing::resolver::BoxRouteFuture;
use zlink::routing::{CacheConfig, Resolution, Resolver, RouteSource, UnavailableReason};
use zlink_store::clock::ManualClock;
use zlink_store::types::{
    AuthorityKey, DescriptorKey, DescriptorKind, NodeRef, ObjectKind, OwnerToken, Reservation,
    ReserveRequest, RouteRead, TargetFence,
};
use zlink_store::{LocationStore, MemoryStore};

/// A real memory store whose `read_route` calls are counted (and can be slowed down, to hold
/// a read in flight).
struct Counting {
    store: MemoryStore,
    reads: AtomicU64,
    delay_ms: AtomicU64,
}

impl RouteSource for Counting {
    fn read_route<'a>(&'a self, key: &'a AuthorityKey) -> BoxRouteFuture<'a, RouteRead> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            LocationStore::read_route(&self.store, key).await
        })
    }
    fn recovery(&self) -> watch::Receiver<u64> {
        LocationStore::recovery(&self.store)
    }
}

struct World {
    source: Arc<Counting>,
    store_clock: ManualClock,
    local: Arc<Mutex<Instant>>,
    resolver: Resolver,
    owner: OwnerToken,
    node: NodeRef,
}

const LEASE: Duration = Duration::from_secs(10);

impl World {
    async fn new(config: CacheConfig) -> Self {
        let (store, store_clock) = MemoryStore::with_manual_clock();
        let grant = store.claim_lease("host-a", LEASE).await.unwrap();
        let node = NodeRef {
            mesh: "m".into(),
            rid: "node-a".into(),
            lifecycle_generation: 7,
        };
        let dkey = DescriptorKey {
            kind: DescriptorKind::MeshNode,
            scope: "m".into(),
            rid: "node-a".into(),
        };
        store
            .publish_descriptor(&grant.token, &dkey, 7, 1, Bytes::from_static(b"{}"))
            .await
            .unwrap();
        let source = Arc::new(Counting {
            store,
            reads: AtomicU64::new(0),
            delay_ms: AtomicU64::new(0),
        });
        let local = Arc::new(Mutex::new(Instant::now()));
        let l = Arc::clone(&local);
        let resolver = Resolver::with_clock(
            Arc::clone(&source) as Arc<dyn RouteSource>,
            config,
            Arc::new(move || *l.lock().unwrap()),
        );
        Self {
            source,
            store_clock,
            local,
            resolver,
            owner: grant.token,
            node,
        }
    }

    fn reads(&self) -> u64 {
        self.source.reads.load(Ordering::SeqCst)
    }

    fn advance_local(&self, d: Duration) {
        *self.local.lock().unwrap() += d;
    }

    async fn reserve(&self, id: &str) -> (AuthorityKey, Reservation) {
        let key = AuthorityKey::new(ObjectKind::Actor, id).unwrap();
        let res = self
            .source
            .store
            .reserve(&ReserveRequest {
                key: key.clone(),
                reservation_id: format!("r-{id}"),
                object_kind: ObjectKind::Actor,
                stable_type: "player".into(),
                target: TargetFence {
                    node: self.node.clone(),
                    owner: self.owner.clone(),
                },
                capacity_delta: 1,
                content: None,
                payload: Bytes::new(),
            })
            .await
            .unwrap();
        (key, res)
    }

    async fn ready(&self, id: &str) -> AuthorityKey {
        let (key, res) = self.reserve(id).await;
        self.source
            .store
            .commit_ready(&res, Bytes::new())
            .await
            .unwrap();
        key
    }

    /// Resolve and return the result with the number of store reads it cost.
    async fn resolve(&self, key: &AuthorityKey) -> (Resolution, u64) {
        let before = self.reads();
        let r = self.resolver.resolve(key).await;
        (r, self.reads() - before)
    }

    async fn expect_hit(&self, key: &AuthorityKey, what: &str) {
        let (r, reads) = self.resolve(key).await;
        assert!(matches!(r, Resolution::ReadyRoute(_)), "{what}: {r:?}");
        assert_eq!(reads, 0, "{what}: a cache hit must not read the store");
    }

    async fn expect_miss(&self, key: &AuthorityKey, what: &str) {
        let (r, reads) = self.resolve(key).await;
        assert!(matches!(r, Resolution::ReadyRoute(_)), "{what}: {r:?}");
        assert_eq!(reads, 1, "{what}: a miss costs exactly one store read");
    }
}

#[tokio::test]
async fn a_cache_hit_reads_the_store_zero_times_and_a_miss_exactly_once() {
    let w = World::new(CacheConfig::default()).await;
    let key = w.ready("player-1").await;
    let (r, reads) = w.resolve(&key).await;
    assert_eq!(reads, 1);
    let Resolution::ReadyRoute(route) = r else {
        panic!("{r:?}")
    };
    assert_eq!(route.owner, w.owner);
    assert_eq!(route.owner_node, w.node);
    assert_eq!(route.key, key);
    for _ in 0..100 {
        w.expect_hit(&key, "repeat").await;
    }
    let stats = w.resolver.cache().stats();
    assert_eq!((stats.hits, stats.misses), (100, 1));
    assert_eq!(w.resolver.stats().store_reads.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn missing_creating_unavailable_and_store_failure_are_never_cached() {
    let w = World::new(CacheConfig::default()).await;
    let missing = AuthorityKey::new(ObjectKind::Actor, "nobody").unwrap();
    let (creating, _res) = w.reserve("half-made").await;
    for round in 0..3 {
        let (r, reads) = w.resolve(&missing).await;
        assert!(matches!(r, Resolution::Missing), "{r:?}");
        assert_eq!(reads, 1, "Missing read again (round {round})");
        let (r, reads) = w.resolve(&creating).await;
        assert!(
            matches!(
                r,
                Resolution::Unavailable {
                    reason: UnavailableReason::Creating,
                    ..
                }
            ),
            "{r:?}"
        );
        assert_eq!(reads, 1, "Creating read again (round {round})");
    }
    // A store outage: StoreFailure every time, nothing cached, and nothing served from before.
    let ready = w.ready("player-2").await;
    w.expect_miss(&ready, "first").await;
    w.source.store.begin_outage();
    // The cached route still answers (the cache does not read the store)…
    w.expect_hit(&ready, "during outage, cached").await;
    for _ in 0..3 {
        let (r, reads) = w.resolve(&missing).await;
        assert!(matches!(r, Resolution::StoreFailure(_)), "{r:?}");
        assert_eq!(reads, 1);
    }
    // …and recovery drops everything learned before it.
    w.source.store.end_outage();
    w.expect_miss(&ready, "after store recovery").await;
    w.expect_hit(&ready, "cached again").await;
    // An owner whose lease lapsed: Unavailable, never cached.
    w.store_clock.advance(LEASE + Duration::from_secs(1));
    let (r, _) = w.resolve(&missing).await;
    assert!(matches!(r, Resolution::Missing));
    w.advance_local(Duration::from_secs(20));
    for _ in 0..2 {
        let (r, reads) = w.resolve(&ready).await;
        assert!(
            matches!(
                r,
                Resolution::Unavailable {
                    reason: UnavailableReason::OwnerLeaseLost,
                    ..
                }
            ),
            "{r:?}"
        );
        assert_eq!(reads, 1);
    }
}

#[tokio::test]
async fn each_invalidation_trigger_removes_the_entry() {
    let w = World::new(CacheConfig::default()).await;
    let key = w.ready("player-3").await;
    let route = |r: Resolution| match r {
        Resolution::ReadyRoute(r) => r,
        other => panic!("{other:?}"),
    };
    let cached = route(w.resolve(&key).await.0);
    w.expect_hit(&key, "cached").await;

    // A higher StoreVersion observed (the same one keeps the entry).
    w.resolver
        .cache()
        .observe_store_version(&key, cached.store_version);
    w.expect_hit(&key, "same store version").await;
    w.resolver
        .cache()
        .observe_store_version(&key, cached.store_version + 1);
    w.expect_miss(&key, "after a newer StoreVersion").await;

    // A stale-route answer for the cached route.
    assert!(w.resolver.cache().stale_route(&cached.fence()));
    w.expect_miss(&key, "after a stale route").await;

    // The store-recovery signal.
    w.source.store.begin_outage();
    w.source.store.end_outage();
    w.expect_miss(&key, "after store recovery").await;

    // Owner-lease invalidation.
    assert_eq!(w.resolver.cache().owner_lease_invalid(&w.owner), 1);
    w.expect_miss(&key, "after lease invalidation").await;

    // A messageFollow notification whose fences match (one for another route does nothing).
    let mut other = cached.fence();
    other.authority_owner_generation += 1;
    assert!(!w.resolver.cache().message_follow(&other));
    w.expect_hit(&key, "unrelated follow").await;
    assert!(w.resolver.cache().message_follow(&cached.fence()));
    w.expect_miss(&key, "after message follow").await;
    w.expect_hit(&key, "cached again").await;
}

#[tokio::test]
async fn a_cache_entry_never_outlives_the_owner_lease_admission_deadline() {
    // Max age 15 s, lease 10 s, fencing margin 2 s: the entry lives 8 s from the read.
    let w = World::new(CacheConfig {
        max_age: Duration::from_secs(15),
        message_follow: Duration::from_secs(30),
        fencing_margin: Duration::from_secs(2),
    })
    .await;
    let key = w.ready("player-4").await;
    // Half the lease gone by store time before the read: 5 s left, 3 s after the margin.
    w.store_clock.advance(Duration::from_secs(5));
    w.expect_miss(&key, "first").await;
    w.advance_local(Duration::from_millis(2_999));
    w.expect_hit(&key, "just inside the admission window").await;
    w.advance_local(Duration::from_millis(1));
    w.expect_miss(&key, "at the admission deadline").await;
    // The new entry got a fresh window from the new read (store time unchanged: 3 s again).
    w.advance_local(Duration::from_millis(2_999));
    w.expect_hit(&key, "second entry").await;

    // Max age 0 switches the cache off: every call reads.
    w.resolver.set_cache_config(CacheConfig {
        max_age: Duration::ZERO,
        ..CacheConfig::default()
    });
    w.advance_local(Duration::from_secs(10));
    w.expect_miss(&key, "cache off").await;
    w.expect_miss(&key, "cache off, again").await;
}

/// Concurrent cache misses of one key share one store read: 32 callers at once, one read, all
/// `ReadyRoute` (31 of them coalesced), and the cache counts 32 misses, no hit. A Missing key
/// is shared the same way (never cached: the next call reads again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_of_one_key_share_one_store_read() {
    let w = World::new(CacheConfig::default()).await;
    let key = w.ready("p-many").await;
    w.source.delay_ms.store(50, Ordering::SeqCst);
    let before = w.reads();
    let all = futures::future::join_all((0..32).map(|_| w.resolver.resolve(&key))).await;
    assert!(all.iter().all(|r| matches!(r, Resolution::ReadyRoute(_))));
    assert_eq!(w.reads() - before, 1, "one read for 32 concurrent misses");
    assert_eq!(w.resolver.stats().coalesced.load(Ordering::Relaxed), 31);
    let stats = w.resolver.cache().stats();
    assert_eq!((stats.hits, stats.misses), (0, 32), "{stats:?}");

    let missing = AuthorityKey::new(ObjectKind::Actor, "p-none").unwrap();
    let before = w.reads();
    let all = futures::future::join_all((0..4).map(|_| w.resolver.resolve(&missing))).await;
    assert!(all.iter().all(|r| matches!(r, Resolution::Missing)));
    assert_eq!(
        w.reads() - before,
        1,
        "concurrent Missing answers are shared too"
    );
    let (r, reads) = w.resolve(&missing).await;
    assert!(matches!(r, Resolution::Missing));
    assert_eq!(
        reads, 1,
        "Missing is never cached: a later call reads again"
    );
}

/// A read in flight across an invalidation is not cached only when the invalidation is of its
/// own key (routing §2.5: a `messageFollow` for another object says nothing of this one). A
/// relocation sends a stream of notices; before, any of them kept every concurrent read out of
/// the cache, so the next call read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_in_flight_is_kept_out_only_by_an_invalidation_of_its_own_key() {
    let w = World::new(CacheConfig::default()).await;
    let (a, b) = (w.ready("p-a").await, w.ready("p-b").await);
    let route = |r: Resolution| match r {
        Resolution::ReadyRoute(r) => r,
        other => panic!("{other:?}"),
    };
    let b_route = route(w.resolve(&b).await.0);
    // Hold the read of `a` in flight and invalidate `b` meanwhile (the read has started once
    // the source counted it).
    w.source.delay_ms.store(100, Ordering::SeqCst);
    let before = w.reads();
    let (read, ()) = tokio::join!(w.resolver.resolve(&a), async {
        while w.reads() == before {
            tokio::task::yield_now().await;
        }
        assert!(w.resolver.cache().message_follow(&b_route.fence()));
    });
    let a_route = route(read);
    w.source.delay_ms.store(0, Ordering::SeqCst);
    w.expect_hit(&a, "another key's notice left the read of a cached")
        .await;
    w.expect_miss(&b, "b's own notice removed it").await;
    // The same with a's own route: the read in flight must not bring it back.
    assert!(w.resolver.cache().message_follow(&a_route.fence()));
    w.source.delay_ms.store(100, Ordering::SeqCst);
    let before = w.reads();
    let (read, ()) = tokio::join!(w.resolver.resolve(&a), async {
        while w.reads() == before {
            tokio::task::yield_now().await;
        }
        w.resolver.cache().message_follow(&a_route.fence());
    });
    route(read);
    w.source.delay_ms.store(0, Ordering::SeqCst);
    w.expect_miss(&a, "a notice of its own key during the read kept it out")
        .await;
}
