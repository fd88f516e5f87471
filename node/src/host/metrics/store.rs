//! Store instrumentation: the host wraps its discovery backend and its Location + Relocation
//! Store so every call is counted per operation and result and timed into a latency
//! histogram (`zlink_store_ops_total`, `zlink_store_op_duration_seconds`,
//! `zlink_lease_renew_failures_total`). Recording a call is one relaxed atomic add for its
//! result and one [`Histogram::observe`]; the exposition reads the counters at scrape time
//! (`super::families`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::metrics::Histogram;
use zlink_store::StoreError;
use zlink_store::types::{
    DescriptorKey, DescriptorKind, DescriptorRecord, LeaseGrant, LeaseRead, OwnerToken,
    PublishOutcome,
};

/// The store operations the host counts: the MeshNode's discovery and lease calls (the first
/// eight) and the object runtime's authority and Relocation Store calls.
pub const STORE_OPS: [&str; 23] = [
    "claim_lease",
    "renew_lease",
    "read_lease",
    "release_lease",
    "claim_routing_id",
    "publish_descriptor",
    "remove_descriptor",
    "list_descriptors",
    "read_authority",
    "read_route",
    "reserve",
    "commit_ready",
    "abort",
    "transfer_owner",
    "preserve",
    "set_state",
    "commit_aggregate",
    "delete_fenced",
    "relocation_put",
    "relocation_read",
    "relocation_renew",
    "relocation_delete",
    "other",
];

/// The index of `op` in [`STORE_OPS`].
pub(super) const fn op(name: &str) -> usize {
    let mut i = 0;
    while i < STORE_OPS.len() {
        if const_eq(STORE_OPS[i], name) {
            return i;
        }
        i += 1;
    }
    STORE_OPS.len() - 1
}

const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Counters of one store operation.
#[derive(Debug, Default)]
pub struct OpMetrics {
    /// Calls that succeeded.
    pub ok: AtomicU64,
    /// Calls that failed.
    pub errors: AtomicU64,
    /// Latency of every call.
    pub latency: Histogram,
}

/// Store operation counters, indexed like [`STORE_OPS`].
#[derive(Debug, Default)]
pub struct StoreMetrics {
    /// Per operation.
    pub ops: [OpMetrics; STORE_OPS.len()],
    /// Owner lease renewals that failed (any error, including a lost lease).
    pub lease_renew_failures: AtomicU64,
}

impl StoreMetrics {
    fn record<T>(&self, op: usize, started: Instant, r: &Result<T, StoreError>) {
        let m = &self.ops[op];
        m.latency.observe(started.elapsed());
        if r.is_ok() {
            m.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            m.errors.fetch_add(1, Ordering::Relaxed);
            if STORE_OPS[op] == "renew_lease" {
                self.lease_renew_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Successful calls of `op` (a [`STORE_OPS`] name; 0 for an unknown one).
    pub fn ok(&self, op: &str) -> u64 {
        STORE_OPS
            .iter()
            .position(|o| *o == op)
            .map_or(0, |i| self.ops[i].ok.load(Ordering::Relaxed))
    }
}

type BoxFut<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A [`DiscoveryBackend`] that forwards to another and counts every call in
/// [`StoreMetrics`].
pub struct InstrumentedBackend {
    inner: Arc<dyn DiscoveryBackend>,
    metrics: Arc<StoreMetrics>,
}

impl InstrumentedBackend {
    /// Wrap `inner`, counting into `metrics`.
    pub fn new(inner: Arc<dyn DiscoveryBackend>, metrics: Arc<StoreMetrics>) -> Self {
        Self { inner, metrics }
    }

    fn timed<'a, T: 'a>(&'a self, op: usize, fut: BoxFut<'a, T>) -> BoxFut<'a, T> {
        Box::pin(async move {
            let started = Instant::now();
            let r = fut.await;
            self.metrics.record(op, started, &r);
            r
        })
    }
}

impl DiscoveryBackend for InstrumentedBackend {
    fn claim_lease<'a>(&'a self, owner_id: &'a str, ttl: Duration) -> BoxFut<'a, LeaseGrant> {
        self.timed(0, self.inner.claim_lease(owner_id, ttl))
    }
    fn renew_lease<'a>(&'a self, token: &'a OwnerToken, ttl: Duration) -> BoxFut<'a, LeaseGrant> {
        self.timed(1, self.inner.renew_lease(token, ttl))
    }
    fn read_lease<'a>(&'a self, owner_id: &'a str) -> BoxFut<'a, LeaseRead> {
        self.timed(2, self.inner.read_lease(owner_id))
    }
    fn release_lease<'a>(&'a self, token: &'a OwnerToken) -> BoxFut<'a, bool> {
        self.timed(3, self.inner.release_lease(token))
    }
    fn claim_routing_id<'a>(
        &'a self,
        owner: &'a OwnerToken,
        mesh: &'a str,
        rid: &'a str,
    ) -> BoxFut<'a, ()> {
        self.timed(4, self.inner.claim_routing_id(owner, mesh, rid))
    }
    fn publish_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> BoxFut<'a, PublishOutcome> {
        self.timed(
            5,
            self.inner
                .publish_descriptor(owner, key, lifecycle_generation, revision, content),
        )
    }
    fn remove_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
    ) -> BoxFut<'a, bool> {
        self.timed(6, self.inner.remove_descriptor(owner, key))
    }
    fn list_descriptors<'a>(
        &'a self,
        kind: DescriptorKind,
        scope: &'a str,
    ) -> BoxFut<'a, Vec<DescriptorRecord>> {
        self.timed(7, self.inner.list_descriptors(kind, scope))
    }
}

/// A Location + Relocation Store that forwards to another and counts every call in
/// [`StoreMetrics`]: what the host gives its object runtime, so authority, routing, creation
/// and activation traffic shows in `zlink_store_ops_total` and its latency histogram.
pub struct InstrumentedStore<S> {
    inner: Arc<S>,
    metrics: Arc<StoreMetrics>,
}

impl<S> InstrumentedStore<S> {
    /// Wrap `inner`, counting into `metrics`.
    pub fn new(inner: Arc<S>, metrics: Arc<StoreMetrics>) -> Self {
        Self { inner, metrics }
    }

    async fn timed<T>(
        &self,
        op: usize,
        fut: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let r = fut.await;
        self.metrics.record(op, started, &r);
        r
    }
}

mod instrumented_impl {
    use std::future::Future;
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::sync::watch;
    use zlink_store::types::{
        AggregateOp, AuthorityKey, AuthorityRead, AuthoritySnapshot, AuthorityState,
        CapacityLimits, CapacityUse, DescriptorKey, DescriptorKind, DescriptorRecord, LeaseGrant,
        LeaseRead, NodeRef, OwnerFence, OwnerToken, PublishOutcome, Reservation, ReserveRequest,
        RouteRead, StoreTime, StoredPayload, TermLease, TransferOwner,
    };
    use zlink_store::{LocationStore, RelocationStore, StoreError};

    use super::{InstrumentedStore, op};

    type R<T> = Result<T, StoreError>;

    impl<S: LocationStore> LocationStore for InstrumentedStore<S> {
        fn store_now(&self) -> impl Future<Output = R<StoreTime>> + Send {
            self.timed(op("other"), self.inner.store_now())
        }
        fn claim_lease(
            &self,
            owner_id: &str,
            ttl: Duration,
        ) -> impl Future<Output = R<LeaseGrant>> + Send {
            self.timed(op("claim_lease"), self.inner.claim_lease(owner_id, ttl))
        }
        fn renew_lease(
            &self,
            token: &OwnerToken,
            ttl: Duration,
        ) -> impl Future<Output = R<LeaseGrant>> + Send {
            self.timed(op("renew_lease"), self.inner.renew_lease(token, ttl))
        }
        fn read_lease(&self, owner_id: &str) -> impl Future<Output = R<LeaseRead>> + Send {
            self.timed(op("read_lease"), self.inner.read_lease(owner_id))
        }
        fn release_lease(&self, token: &OwnerToken) -> impl Future<Output = R<bool>> + Send {
            self.timed(op("release_lease"), self.inner.release_lease(token))
        }
        fn acquire_term_lease(
            &self,
            name: &str,
            holder: &OwnerToken,
            config_epoch: u64,
            ttl: Duration,
        ) -> impl Future<Output = R<TermLease>> + Send {
            self.timed(
                op("other"),
                self.inner
                    .acquire_term_lease(name, holder, config_epoch, ttl),
            )
        }
        fn read_term_lease(&self, name: &str) -> impl Future<Output = R<Option<TermLease>>> + Send {
            self.timed(op("other"), self.inner.read_term_lease(name))
        }
        fn release_term_lease(
            &self,
            name: &str,
            holder: &OwnerToken,
            term: u64,
        ) -> impl Future<Output = R<bool>> + Send {
            self.timed(
                op("other"),
                self.inner.release_term_lease(name, holder, term),
            )
        }
        fn publish_descriptor(
            &self,
            owner: &OwnerToken,
            key: &DescriptorKey,
            lifecycle_generation: u64,
            revision: u64,
            content: Bytes,
        ) -> impl Future<Output = R<PublishOutcome>> + Send {
            self.timed(
                op("publish_descriptor"),
                self.inner
                    .publish_descriptor(owner, key, lifecycle_generation, revision, content),
            )
        }
        fn list_descriptors(
            &self,
            kind: DescriptorKind,
            scope: &str,
        ) -> impl Future<Output = R<Vec<DescriptorRecord>>> + Send {
            self.timed(
                op("list_descriptors"),
                self.inner.list_descriptors(kind, scope),
            )
        }
        fn remove_descriptor(
            &self,
            owner: &OwnerToken,
            key: &DescriptorKey,
        ) -> impl Future<Output = R<bool>> + Send {
            self.timed(
                op("remove_descriptor"),
                self.inner.remove_descriptor(owner, key),
            )
        }
        fn claim_routing_id(
            &self,
            owner: &OwnerToken,
            mesh: &str,
            rid: &str,
        ) -> impl Future<Output = R<()>> + Send {
            self.timed(
                op("claim_routing_id"),
                self.inner.claim_routing_id(owner, mesh, rid),
            )
        }
        fn set_capacity_limits(
            &self,
            owner: &OwnerToken,
            node: &NodeRef,
            limits: CapacityLimits,
        ) -> impl Future<Output = R<()>> + Send {
            self.timed(
                op("other"),
                self.inner.set_capacity_limits(owner, node, limits),
            )
        }
        fn capacity_use(&self, node: &NodeRef) -> impl Future<Output = R<CapacityUse>> + Send {
            self.timed(op("other"), self.inner.capacity_use(node))
        }
        fn read_authority(
            &self,
            key: &AuthorityKey,
        ) -> impl Future<Output = R<AuthorityRead>> + Send {
            self.timed(op("read_authority"), self.inner.read_authority(key))
        }
        fn read_route(&self, key: &AuthorityKey) -> impl Future<Output = R<RouteRead>> + Send {
            self.timed(op("read_route"), self.inner.read_route(key))
        }
        fn reserve(&self, request: &ReserveRequest) -> impl Future<Output = R<Reservation>> + Send {
            self.timed(op("reserve"), self.inner.reserve(request))
        }
        fn commit_ready(
            &self,
            reservation: &Reservation,
            payload: Bytes,
        ) -> impl Future<Output = R<AuthoritySnapshot>> + Send {
            self.timed(
                op("commit_ready"),
                self.inner.commit_ready(reservation, payload),
            )
        }
        fn abort(&self, reservation: &Reservation) -> impl Future<Output = R<()>> + Send {
            self.timed(op("abort"), self.inner.abort(reservation))
        }
        fn transfer_owner(
            &self,
            transfer: &TransferOwner,
        ) -> impl Future<Output = R<AuthoritySnapshot>> + Send {
            self.timed(op("transfer_owner"), self.inner.transfer_owner(transfer))
        }
        fn preserve(
            &self,
            fence: &OwnerFence,
            payload: Bytes,
        ) -> impl Future<Output = R<AuthoritySnapshot>> + Send {
            self.timed(op("preserve"), self.inner.preserve(fence, payload))
        }
        fn set_state(
            &self,
            fence: &OwnerFence,
            from: AuthorityState,
            to: AuthorityState,
        ) -> impl Future<Output = R<AuthoritySnapshot>> + Send {
            self.timed(op("set_state"), self.inner.set_state(fence, from, to))
        }
        fn commit_aggregate(
            &self,
            ops: &[AggregateOp],
        ) -> impl Future<Output = R<Vec<AuthoritySnapshot>>> + Send {
            self.timed(op("commit_aggregate"), self.inner.commit_aggregate(ops))
        }
        fn delete_fenced(&self, fence: &OwnerFence) -> impl Future<Output = R<()>> + Send {
            self.timed(op("delete_fenced"), self.inner.delete_fenced(fence))
        }
        fn recovery(&self) -> watch::Receiver<u64> {
            self.inner.recovery()
        }
    }

    impl<S: RelocationStore> RelocationStore for InstrumentedStore<S> {
        fn put(
            &self,
            reference: &str,
            bytes: Bytes,
            retention: Duration,
        ) -> impl Future<Output = R<StoreTime>> + Send {
            self.timed(
                op("relocation_put"),
                self.inner.put(reference, bytes, retention),
            )
        }
        fn read(&self, reference: &str) -> impl Future<Output = R<Option<StoredPayload>>> + Send {
            self.timed(op("relocation_read"), self.inner.read(reference))
        }
        fn renew(
            &self,
            reference: &str,
            retention: Duration,
        ) -> impl Future<Output = R<StoreTime>> + Send {
            self.timed(
                op("relocation_renew"),
                self.inner.renew(reference, retention),
            )
        }
        fn delete(&self, reference: &str) -> impl Future<Output = R<bool>> + Send {
            self.timed(op("relocation_delete"), self.inner.delete(reference))
        }
    }
}
