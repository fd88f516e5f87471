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
