//! `/metrics`: the host's counters in the Prometheus text exposition format (version 0.0.4),
//! and the instrumented Location Store wrapper that counts store operations, their latency
//! and lease renewal failures (issue 8 item 4; metric names in `docs/operations.md`).
//!
//! Everything is read from the live counters at scrape time ([`zlink::mesh::MeshMetrics`],
//! the socket pump, the job queue, [`zlink::object::runtime::RuntimeStats`], the resolver and
//! its route cache); nothing is sampled in between.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_store::StoreError;
use zlink_store::types::{
    DescriptorKey, DescriptorKind, DescriptorRecord, LeaseGrant, LeaseRead, OwnerToken,
    PublishOutcome,
};

use super::{Host, HostState};
use zlink::call::error::ErrorKind;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::peer::PeerState;
use zlink::metrics::{Histogram, HistogramSnapshot};

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
const fn op(name: &str) -> usize {
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

/// Escape a label value (backslash, double quote, newline).
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A Prometheus text exposition under construction: one `# HELP` / `# TYPE` per family.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Start a family.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self
    }

    /// One sample with labels.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) -> &mut Self {
        self.sample_f(name, labels, &value.to_string())
    }

    fn sample_f(&mut self, name: &str, labels: &[(&str, &str)], value: &str) -> &mut Self {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
        self
    }

    /// A counter family with one sample per `(labels, value)`.
    pub fn counter(&mut self, name: &str, help: &str, samples: &[(&[(&str, &str)], u64)]) {
        self.family(name, "counter", help);
        for (labels, v) in samples {
            self.sample(name, labels, *v);
        }
    }

    /// A gauge family with one sample per `(labels, value)`.
    pub fn gauge(&mut self, name: &str, help: &str, samples: &[(&[(&str, &str)], u64)]) {
        self.family(name, "gauge", help);
        for (labels, v) in samples {
            self.sample(name, labels, *v);
        }
    }

    /// The samples of one histogram (seconds) with extra labels; call [`Exposition::family`]
    /// with type `histogram` first.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        let bucket = format!("{name}_bucket");
        for (bound_us, n) in &h.cumulative {
            let le = format!("{}", *bound_us as f64 / 1e6);
            let mut l = labels.to_vec();
            l.push(("le", &le));
            self.sample(&bucket, &l, *n);
        }
        let mut l = labels.to_vec();
        l.push(("le", "+Inf"));
        self.sample(&bucket, &l, h.count);
        self.sample_f(
            &format!("{name}_sum"),
            labels,
            &format!("{}", h.sum_us as f64 / 1e6),
        );
        self.sample(&format!("{name}_count"), labels, h.count);
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Render every metric of `host`.
#[allow(clippy::too_many_lines)]
pub fn render(host: &Host) -> String {
    let mut e = Exposition::default();
    let state = host.state();
    e.family(
        "zlink_host_state",
        "gauge",
        "Host lifecycle state: 1 for the current state, 0 for the others.",
    );
    for s in HostState::ALL {
        e.sample(
            "zlink_host_state",
            &[("state", s.name())],
            u64::from(s == state),
        );
    }
    let version = host.config.application_version.to_string();
    let rid = host.node().map(|n| n.rid().to_owned()).unwrap_or_default();
    e.gauge(
        "zlink_host_info",
        "Constant 1 with the host's identity as labels.",
        &[(
            &[
                ("rid", rid.as_str()),
                ("mesh", host.config.mesh.name.as_str()),
                ("application_version", version.as_str()),
            ],
            1,
        )],
    );
    e.gauge(
        "zlink_host_ready",
        "1 when /readyz answers ready (Serving and admitting work).",
        &[(&[], u64::from(host.ready()))],
    );
    e.gauge(
        "zlink_host_in_flight",
        "Accepted work in flight (queued jobs, outstanding requests, unfinished activations).",
        &[(&[], host.in_flight())],
    );
    e.counter(
        "zlink_host_drain_cut_total",
        "Work units cut because the drain deadline passed.",
        &[(&[], host.cut())],
    );
    e.counter(
        "zlink_admin_auth_failures_total",
        "Admin gRPC calls rejected for a missing or wrong bearer token.",
        &[(&[], host.auth_failures())],
    );

    if let Some(n) = host.node() {
        let m = n.metrics();
        let p = n.pump_stats();
        e.counter(
            "zlink_mesh_records_total",
            "Mesh transport records received (in) and sent (out) by the socket pump.",
            &[
                (&[("direction", "in")], load(&p.received)),
                (&[("direction", "out")], load(&p.sent)),
            ],
        );
        e.counter(
            "zlink_mesh_messages_total",
            "Application records by outcome kind.",
            &[
                (&[("kind", "delivered")], load(&m.delivered)),
                (&[("kind", "no_handler")], load(&m.no_handler)),
                (&[("kind", "handler_panic")], load(&m.handler_panics)),
                (&[("kind", "reply_sent")], load(&m.replies_sent)),
                (&[("kind", "reply_unroutable")], load(&m.reply_unroutable)),
                (&[("kind", "unserved_command")], load(&m.unserved_commands)),
                (&[("kind", "stale_generation")], load(&m.stale_generation)),
                (&[("kind", "unadmitted")], load(&m.unadmitted)),
                (
                    &[("kind", "stale_object_route")],
                    load(&m.stale_object_routes),
                ),
                (&[("kind", "update_applied")], load(&m.updates_applied)),
            ],
        );
        e.counter(
            "zlink_mesh_admissions_total",
            "Peer admissions by result.",
            &[
                (&[("result", "admitted")], load(&m.admitted)),
                (&[("result", "rejected")], load(&m.rejected)),
                (&[("result", "idempotent")], load(&m.idempotent_admissions)),
            ],
        );
        e.counter(
            "zlink_mesh_liveness_deaths_total",
            "Peers declared dead by liveness.",
            &[(&[], load(&m.liveness_deaths))],
        );
        e.counter(
            "zlink_mesh_sequence_gaps_total",
            "Connections torn down for a sequence gap.",
            &[(&[], load(&m.sequence_gaps))],
        );
        let errors = m.protocol_errors();
        e.family(
            "zlink_mesh_protocol_errors_total",
            "counter",
            "Malformed or invalid records, by error kind (never reach a handler).",
        );
        for (kind, v) in &errors {
            e.sample("zlink_mesh_protocol_errors_total", &[("kind", kind)], *v);
        }
        let rs = n.request_stats();
        e.family(
            "zlink_requests_completed_total",
            "counter",
            "Requests this node issued, by terminal result.",
        );
        e.sample(
            "zlink_requests_completed_total",
            &[("result", "ok")],
            rs.completed_ok,
        );
        for k in ErrorKind::ALL {
            e.sample(
                "zlink_requests_completed_total",
                &[("result", k.spec_name())],
                rs.completed_by(k),
            );
        }
        e.counter(
            "zlink_late_replies_total",
            "Replies that matched no pending request.",
            &[(&[], rs.late_replies)],
        );
        e.family(
            "zlink_request_latency_seconds",
            "histogram",
            "Round-trip latency of requests this node issued (node direct, select-one, object).",
        );
        e.histogram(
            "zlink_request_latency_seconds",
            &[],
            &m.request_latency.snapshot(),
        );
        e.gauge(
            "zlink_pending_requests",
            "Requests waiting for their terminal result.",
            &[(&[], n.pending_requests() as u64)],
        );
        let jobs = n.jobs();
        e.gauge(
            "zlink_queue_depth",
            "Queue depths: application job permits in use, transport data bytes queued.",
            &[
                (&[("queue", "jobs")], jobs.in_use() as u64),
                (
                    &[("queue", "transport_bytes")],
                    n.queued_data_bytes() as u64,
                ),
            ],
        );
        e.gauge(
            "zlink_job_permits",
            "Application job queue size (permits).",
            &[(&[], jobs.permits() as u64)],
        );
        e.counter(
            "zlink_transport_hwm_stalls_total",
            "Sends that found a ZeroMQ high-water mark.",
            &[(&[], load(&p.hwm_stalls))],
        );
        let (mut ready, mut not_ready) = (0u64, 0u64);
        for peer in n.peers() {
            match peer.state {
                PeerState::Ready => ready += 1,
                PeerState::NotRequired => {}
                _ => not_ready += 1,
            }
        }
        e.gauge(
            "zlink_peers",
            "Mesh peers by readiness (peers that need no connection are not counted).",
            &[
                (&[("state", "ready")], ready),
                (&[("state", "not_ready")], not_ready),
            ],
        );
    }

    if let Some(o) = host.objects() {
        let (actors, spots) = o.live_by_kind();
        e.gauge(
            "zlink_objects_live",
            "Objects live on this host, by kind.",
            &[
                (&[("kind", "actor")], actors as u64),
                (&[("kind", "spot")], spots as u64),
            ],
        );
        let s = o.stats();
        e.counter(
            "zlink_object_calls_total",
            "Object calls by path (local: hosted here; remote: through the mesh).",
            &[
                (&[("path", "local")], load(&s.local_calls)),
                (&[("path", "remote")], load(&s.remote_calls)),
            ],
        );
        e.counter(
            "zlink_objects_created_total",
            "Objects created on this host (local and by remote request).",
            &[
                (&[("origin", "local")], load(&s.created)),
                (&[("origin", "remote")], load(&s.created_remotely)),
            ],
        );
        e.counter(
            "zlink_object_activations_total",
            "Instance Spot cold activations by outcome.",
            &[
                (&[("outcome", "activated")], load(&s.activations)),
                (&[("outcome", "forwarded")], load(&s.activation_forwards)),
                (&[("outcome", "recovered")], load(&s.activation_recoveries)),
                (&[("outcome", "dropped")], load(&s.activation_drops)),
            ],
        );
        e.counter(
            "zlink_object_stale_routes_total",
            "Object calls answered StaleRoute.",
            &[(&[], load(&s.stale_routes))],
        );
        let resolver = o.resolver();
        let cache = resolver.cache().stats();
        e.counter(
            "zlink_route_cache_hits_total",
            "Positive route cache hits.",
            &[(&[], cache.hits)],
        );
        e.counter(
            "zlink_route_cache_misses_total",
            "Positive route cache misses.",
            &[(&[], cache.misses)],
        );
        e.family(
            "zlink_route_cache_invalidations_total",
            "counter",
            "Route cache entries removed, by reason.",
        );
        for (reason, v) in cache.invalidations {
            e.sample(
                "zlink_route_cache_invalidations_total",
                &[("reason", reason.name())],
                v,
            );
        }
        let rstats = resolver.stats();
        e.family(
            "zlink_route_resolutions_total",
            "counter",
            "Route resolutions (store reads) by result.",
        );
        for (i, name) in ["ready_route", "missing", "unavailable", "store_failure"]
            .iter()
            .enumerate()
        {
            e.sample(
                "zlink_route_resolutions_total",
                &[("result", name)],
                load(&rstats.results[i]),
            );
        }
    }

    let sm = host.store_metrics();
    e.family(
        "zlink_store_ops_total",
        "counter",
        "Location and Relocation Store operations (mesh node and object runtime), by operation and result.",
    );
    for (i, op) in STORE_OPS.iter().enumerate() {
        e.sample(
            "zlink_store_ops_total",
            &[("op", op), ("result", "ok")],
            load(&sm.ops[i].ok),
        );
        e.sample(
            "zlink_store_ops_total",
            &[("op", op), ("result", "error")],
            load(&sm.ops[i].errors),
        );
    }
    e.family(
        "zlink_store_op_duration_seconds",
        "histogram",
        "Latency of Location Store operations of the mesh node.",
    );
    for (i, op) in STORE_OPS.iter().enumerate() {
        e.histogram(
            "zlink_store_op_duration_seconds",
            &[("op", op)],
            &sm.ops[i].latency.snapshot(),
        );
    }
    e.counter(
        "zlink_lease_renew_failures_total",
        "Owner lease renewals that failed.",
        &[(&[], load(&sm.lease_renew_failures))],
    );
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn a_histogram_renders_cumulative_buckets_an_inf_bucket_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_millis(2));
        let mut e = Exposition::default();
        e.family("x_seconds", "histogram", "help");
        e.histogram("x_seconds", &[("op", "o")], &h.snapshot());
        let text = e.finish();
        assert!(
            text.contains("x_seconds_bucket{op=\"o\",le=\"0.001\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_bucket{op=\"o\",le=\"0.0025\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_bucket{op=\"o\",le=\"+Inf\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("x_seconds_sum{op=\"o\"} 0.002\n"), "{text}");
        assert!(text.contains("x_seconds_count{op=\"o\"} 1\n"), "{text}");
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
