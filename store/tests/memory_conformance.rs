//! The conformance suite against the memory provider, on a manual store clock.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use zlink_store::MemoryStore;
use zlink_store::clock::ManualClock;
use zlink_store::conformance::Harness;

struct MemoryHarness {
    store: MemoryStore,
    clock: ManualClock,
    seq: AtomicU64,
}

impl Harness for MemoryHarness {
    type Store = MemoryStore;

    fn store(&self) -> &MemoryStore {
        &self.store
    }

    async fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    async fn set_counter(&self, name: &'static str, value: u64) {
        self.store.set_counter(name, value);
    }

    async fn begin_outage(&self) {
        self.store.begin_outage();
    }

    async fn end_outage(&self) {
        self.store.end_outage();
    }

    fn unique(&self, what: &str) -> String {
        format!("{what}-{}", self.seq.fetch_add(1, Ordering::Relaxed))
    }
}

async fn harness() -> Arc<MemoryHarness> {
    let (store, clock) = MemoryStore::with_manual_clock();
    Arc::new(MemoryHarness {
        store,
        clock,
        seq: AtomicU64::new(0),
    })
}

zlink_store::conformance_cases!(harness());

/// Reservation IDs are remembered for replay until they expire, and expired ones are swept in
/// bulk: memory stays within twice what is live, and creating n objects does not sweep the
/// whole map n times (a sweep per reserve made that O(n²); the relocation bench's creation
/// baseline spent ~40 % of its CPU there).
#[tokio::test]
async fn expired_reservations_are_swept_and_memory_stays_bounded() {
    use zlink_store::LocationStore;
    use zlink_store::types::{AuthorityKey, ObjectKind, ReserveRequest};
    let h = harness().await;
    let n = zlink_store::conformance::node(&*h, "target").await;
    let reserve = |i: u64, target: zlink_store::types::TargetFence| {
        let h = Arc::clone(&h);
        async move {
            let id = h.unique("spot");
            let req = ReserveRequest {
                key: AuthorityKey::new(ObjectKind::Spot, &id).unwrap(),
                reservation_id: format!("res-{i}-{id}"),
                object_kind: ObjectKind::Spot,
                stable_type: "Room".into(),
                target,
                capacity_delta: 0,
                content: None,
                payload: bytes::Bytes::new(),
            };
            h.store().reserve(&req).await.unwrap();
        }
    };
    for i in 0..300 {
        reserve(i, n.target()).await;
    }
    // Nothing expired yet: every ID is still remembered.
    assert_eq!(h.store().remembered_reservations(), 300);
    h.advance(zlink_store::memory::RESERVATION_REPLAY_RETENTION + Duration::from_secs(1))
        .await;
    // The first node's lease lapsed with the clock: a fresh one takes the new reservations.
    let n = zlink_store::conformance::node(&*h, "target").await;
    // One reserve does not sweep: the 300 expired IDs stay until the map reaches twice what
    // the last sweep kept (a sweep on every reserve would leave 1 here).
    reserve(300, n.target()).await;
    assert_eq!(h.store().remembered_reservations(), 301);
    for i in 301..600 {
        reserve(i, n.target()).await;
    }
    // The first sweep after the expiry dropped all 300 old ones; the new ones are kept.
    assert_eq!(h.store().remembered_reservations(), 300);
    for i in 600..2_000 {
        reserve(i, n.target()).await;
    }
    let kept = h.store().remembered_reservations();
    assert!(
        (1_700..=2 * 1_700).contains(&kept),
        "{kept} remembered for 1,700 live reservations"
    );
}
