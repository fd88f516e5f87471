//! The metric families of `/metrics`, one `prometheus-client` [`Collector`] per concern: the
//! host lifecycle, the mesh node, the object runtime, and the store calls.
//!
//! The values live in the runtime as relaxed atomics and lock-free histograms
//! ([`zlink::mesh::MeshMetrics`], the pump stats, [`zlink::object::runtime::RuntimeStats`],
//! the resolver and its route cache, [`StoreMetrics`]). Mirroring them into library-owned
//! `Counter`s would mean a second write on every hot-path event, and prometheus-client's own
//! `Histogram` takes a mutex per observation; so each collector reads the live values at scrape
//! time and encodes them as constant metrics. Nothing is sampled in between.
//!
//! Names are written here as they are exposed (`zlink_foo_total`): prometheus-client appends
//! `_total` to a counter's name itself, so [`counters`] hands it the name without the suffix.
//! The family list is pinned by `node/tests/host_admin.rs` and documented in
//! `docs/operations.md`, "Metrics".

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::gauge::ConstGauge;
use zlink::call::error::ErrorKind;
use zlink::mesh::peer::PeerState;
use zlink::metrics::HistogramSnapshot;

use super::store::{STORE_OPS, StoreMetrics};
use crate::host::{Host, HostState};

/// The labels of one sample, in exposition order.
type Labels<'a> = &'a [(&'a str, &'a str)];

/// A counter family whose `# HELP`/`# TYPE` lines are written; samples follow.
struct Counters<'e>(MetricEncoder<'e>);

/// A gauge family whose `# HELP`/`# TYPE` lines are written; samples follow.
struct Gauges<'e>(MetricEncoder<'e>);

/// A latency histogram family (seconds) whose `# HELP`/`# TYPE` lines are written.
struct Histograms<'e>(MetricEncoder<'e>);

/// Start the counter family exposed as `name` (which ends in `_total`).
fn counters<'e>(
    enc: &'e mut DescriptorEncoder<'_>,
    name: &'static str,
    help: &str,
) -> Result<Counters<'e>, fmt::Error> {
    // prometheus-client writes `<name>_total` for a counter.
    let base = name.strip_suffix("_total").unwrap_or(name);
    Ok(Counters(enc.encode_descriptor(
        base,
        help,
        None,
        MetricType::Counter,
    )?))
}

fn gauges<'e>(
    enc: &'e mut DescriptorEncoder<'_>,
    name: &'static str,
    help: &str,
) -> Result<Gauges<'e>, fmt::Error> {
    Ok(Gauges(enc.encode_descriptor(
        name,
        help,
        None,
        MetricType::Gauge,
    )?))
}

fn histograms<'e>(
    enc: &'e mut DescriptorEncoder<'_>,
    name: &'static str,
    help: &str,
) -> Result<Histograms<'e>, fmt::Error> {
    Ok(Histograms(enc.encode_descriptor(
        name,
        help,
        None,
        MetricType::Histogram,
    )?))
}

impl Counters<'_> {
    fn sample(&mut self, labels: Labels<'_>, value: u64) -> fmt::Result {
        ConstCounter::new(value).encode(self.0.encode_family(&labels)?)
    }
}

impl Gauges<'_> {
    fn sample(&mut self, labels: Labels<'_>, value: u64) -> fmt::Result {
        ConstGauge::new(value).encode(self.0.encode_family(&labels)?)
    }
}

impl Histograms<'_> {
    /// One histogram: the runtime's microsecond buckets become `le` bounds in seconds.
    fn sample(&mut self, labels: Labels<'_>, h: &HistogramSnapshot) -> fmt::Result {
        let buckets: Vec<(f64, u64)> = h
            .bucket_counts()
            .map(|(bound_us, n)| (seconds(bound_us), n))
            .collect();
        self.0.encode_family(&labels)?.encode_histogram(
            seconds(h.sum_us),
            h.count,
            &buckets,
            None::<&HashMap<usize, Exemplar<NoLabelSet, f64>>>,
        )
    }
}

/// Microseconds as seconds (exact for every bucket bound; a sum above 2^53 µs, 285 years,
/// loses its last digits).
fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

/// A counter family with one sample per `(labels, value)`.
fn counter(
    enc: &mut DescriptorEncoder<'_>,
    name: &'static str,
    help: &str,
    samples: &[(Labels<'_>, u64)],
) -> fmt::Result {
    let mut family = counters(enc, name, help)?;
    for (labels, v) in samples {
        family.sample(labels, *v)?;
    }
    Ok(())
}

/// A gauge family with one sample per `(labels, value)`.
fn gauge(
    enc: &mut DescriptorEncoder<'_>,
    name: &'static str,
    help: &str,
    samples: &[(Labels<'_>, u64)],
) -> fmt::Result {
    let mut family = gauges(enc, name, help)?;
    for (labels, v) in samples {
        family.sample(labels, *v)?;
    }
    Ok(())
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The host lifecycle: state, identity, readiness, work in flight, drain cuts, admin auth.
#[derive(Debug)]
pub(super) struct HostFamilies(pub(super) Arc<Host>);

impl Collector for HostFamilies {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let host = &self.0;
        let state = host.state();
        let mut states = gauges(
            &mut enc,
            "zlink_host_state",
            "Host lifecycle state: 1 for the current state, 0 for the others.",
        )?;
        for s in HostState::ALL {
            states.sample(&[("state", s.name())], u64::from(s == state))?;
        }
        let version = host.config.application_version.to_string();
        let rid = host.node().map(|n| n.rid().to_owned()).unwrap_or_default();
        gauge(
            &mut enc,
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
        )?;
        gauge(
            &mut enc,
            "zlink_host_ready",
            "1 when /readyz answers ready (Serving and admitting work).",
            &[(&[], u64::from(host.ready()))],
        )?;
        gauge(
            &mut enc,
            "zlink_host_in_flight",
            "Accepted work in flight (queued jobs, outstanding requests, unfinished activations).",
            &[(&[], host.in_flight())],
        )?;
        counter(
            &mut enc,
            "zlink_host_drain_cut_total",
            "Work units cut because the drain deadline passed.",
            &[(&[], host.cut())],
        )?;
        counter(
            &mut enc,
            "zlink_admin_auth_failures_total",
            "Admin gRPC calls rejected for a missing or wrong bearer token.",
            &[(&[], host.auth_failures())],
        )?;
        let lease = host.lease_stats();
        counter(
            &mut enc,
            "zlink_lease_renew_attempts_total",
            "Owner lease renewal attempts, every node lifecycle of this process (a failed renewal is retried after 50 ms, doubling).",
            &[(&[], lease.attempts)],
        )?;
        let mut fenced = counters(
            &mut enc,
            "zlink_host_fenced_seconds_total",
            "Time this host spent fenced (admitting no new object work because its owner lease was not confirmed).",
        )?;
        let no_labels: Labels<'_> = &[];
        ConstCounter::new(lease.fenced.as_secs_f64())
            .encode(fenced.0.encode_family(&no_labels)?)?;
        counter(
            &mut enc,
            "zlink_host_objects_dropped_total",
            "Objects dropped because their node lifecycle lost its owner lease (another node may own them).",
            &[(&[], host.objects_dropped())],
        )?;
        counter(
            &mut enc,
            "zlink_host_rejoins_total",
            "Times the host rejoined the mesh as a new node lifecycle after a lost owner lease.",
            &[(&[], host.rejoins())],
        )
    }
}

/// The mesh node: transport records, application outcomes, admissions, liveness, protocol
/// errors, requests and their latency, queues and peers. Nothing before the node started.
#[derive(Debug)]
pub(super) struct MeshFamilies(pub(super) Arc<Host>);

impl Collector for MeshFamilies {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let Some(n) = self.0.node() else {
            return Ok(());
        };
        let m = n.metrics();
        let p = n.pump_stats();
        counter(
            &mut enc,
            "zlink_mesh_records_total",
            "Mesh transport records received (in) and sent (out) by the socket pump.",
            &[
                (&[("direction", "in")], load(&p.received)),
                (&[("direction", "out")], load(&p.sent)),
            ],
        )?;
        counter(
            &mut enc,
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
        )?;
        counter(
            &mut enc,
            "zlink_mesh_admissions_total",
            "Peer admissions by result.",
            &[
                (&[("result", "admitted")], load(&m.admitted)),
                (&[("result", "rejected")], load(&m.rejected)),
                (&[("result", "idempotent")], load(&m.idempotent_admissions)),
            ],
        )?;
        counter(
            &mut enc,
            "zlink_mesh_liveness_deaths_total",
            "Peers declared dead by liveness.",
            &[(&[], load(&m.liveness_deaths))],
        )?;
        counter(
            &mut enc,
            "zlink_mesh_sequence_gaps_total",
            "Connections torn down for a sequence gap.",
            &[(&[], load(&m.sequence_gaps))],
        )?;
        // One sample per error kind seen so far (the runtime keeps them in a map).
        let mut errors = counters(
            &mut enc,
            "zlink_mesh_protocol_errors_total",
            "Malformed or invalid records, by error kind (never reach a handler).",
        )?;
        for (kind, v) in &m.protocol_errors() {
            errors.sample(&[("kind", kind)], *v)?;
        }
        let rs = n.request_stats();
        let mut completed = counters(
            &mut enc,
            "zlink_requests_completed_total",
            "Requests this node issued, by terminal result.",
        )?;
        completed.sample(&[("result", "ok")], rs.completed_ok)?;
        for k in ErrorKind::ALL {
            completed.sample(&[("result", k.spec_name())], rs.completed_by(k))?;
        }
        counter(
            &mut enc,
            "zlink_late_replies_total",
            "Replies that matched no pending request.",
            &[(&[], rs.late_replies)],
        )?;
        histograms(
            &mut enc,
            "zlink_request_latency_seconds",
            "Round-trip latency of requests this node issued (node direct, select-one, object).",
        )?
        .sample(&[], &m.request_latency.snapshot())?;
        gauge(
            &mut enc,
            "zlink_pending_requests",
            "Requests waiting for their terminal result.",
            &[(&[], len(n.pending_requests()))],
        )?;
        let jobs = n.jobs();
        gauge(
            &mut enc,
            "zlink_queue_depth",
            "Queue depths: application job permits in use, transport data bytes queued.",
            &[
                (&[("queue", "jobs")], len(jobs.in_use())),
                (&[("queue", "transport_bytes")], len(n.queued_data_bytes())),
            ],
        )?;
        gauge(
            &mut enc,
            "zlink_job_permits",
            "Application job queue size (permits).",
            &[(&[], len(jobs.permits()))],
        )?;
        counter(
            &mut enc,
            "zlink_transport_hwm_stalls_total",
            "Sends that found a ZeroMQ high-water mark.",
            &[(&[], load(&p.hwm_stalls))],
        )?;
        let (mut ready, mut not_ready) = (0u64, 0u64);
        for peer in n.peers() {
            match peer.state {
                PeerState::Ready => ready += 1,
                PeerState::NotRequired => {}
                _ => not_ready += 1,
            }
        }
        gauge(
            &mut enc,
            "zlink_peers",
            "Mesh peers by readiness (peers that need no connection are not counted).",
            &[
                (&[("state", "ready")], ready),
                (&[("state", "not_ready")], not_ready),
            ],
        )
    }
}

/// Every unit outcome name, each always exposed (0 until it happens).
const RELOCATION_OUTCOMES: [&str; 10] = [
    "handed_over",
    "stayed_disabled",
    "stayed_no_target",
    "stayed_not_signaled",
    "stayed_deadline",
    "stayed_follow_chain_full",
    "stayed_too_many_participants",
    "failed",
    "restored_target_gone",
    "unresolved",
];

/// The object runtime: live objects, calls, creations, activations, stale routes, the route
/// cache and the resolver. Nothing on a host without an object runtime.
#[derive(Debug)]
pub(super) struct ObjectFamilies(pub(super) Arc<Host>);

impl Collector for ObjectFamilies {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let Some(o) = self.0.objects() else {
            return Ok(());
        };
        let (actors, spots) = o.live_by_kind();
        gauge(
            &mut enc,
            "zlink_objects_live",
            "Objects live on this host, by kind.",
            &[
                (&[("kind", "actor")], len(actors)),
                (&[("kind", "spot")], len(spots)),
            ],
        )?;
        let s = o.stats();
        counter(
            &mut enc,
            "zlink_object_calls_total",
            "Object calls by path (local: hosted here; remote: through the mesh).",
            &[
                (&[("path", "local")], load(&s.local_calls)),
                (&[("path", "remote")], load(&s.remote_calls)),
            ],
        )?;
        counter(
            &mut enc,
            "zlink_objects_created_total",
            "Objects created on this host (local and by remote request).",
            &[
                (&[("origin", "local")], load(&s.created)),
                (&[("origin", "remote")], load(&s.created_remotely)),
            ],
        )?;
        counter(
            &mut enc,
            "zlink_object_activations_total",
            "Instance Spot cold activations by outcome.",
            &[
                (&[("outcome", "activated")], load(&s.activations)),
                (&[("outcome", "forwarded")], load(&s.activation_forwards)),
                (
                    &[("outcome", "owner_wait")],
                    load(&s.activation_owner_waits),
                ),
                (&[("outcome", "recovered")], load(&s.activation_recoveries)),
                (&[("outcome", "dropped")], load(&s.activation_drops)),
            ],
        )?;
        counter(
            &mut enc,
            "zlink_object_stale_routes_total",
            "Object calls answered StaleRoute.",
            &[(&[], load(&s.stale_routes))],
        )?;
        let r = o.relocation_stats();
        counter(
            &mut enc,
            "zlink_relocation_events_total",
            "Relocation events of this host as source (moves_started, saved_work, relayed, handed_over, restored, followed (of those followed_as_sent: records of other nodes forwarded with their own identity), follow_drops, late_followed, budget_waits: units that waited for room in an in-flight payload budget, epochs_lost: new connection epochs to a unit's target mid-move, authority_reads: reads of a unit's authority row to resolve it, target_liveness_checks: descriptor listings for a target's lease after an unchanged row) and as target (arrived, refused, capacity_refusals: Prepares refused for want of capacity, carried_accepted / terminal_roots_published / terminals_completed / terminals_force_stopped / terminals_data_lost / terminals_abandoned / terminal_roots_expired: the durable terminal roots of carried requests and how their units ended, abandoned, cutover_timeouts, late_cutovers, reply_relays_sent, followed_answered: followed requests of other nodes answered to their sender directly, followed_delivered: followed one-way records of other nodes delivered as they sent them), records naming no known relocation (unknown_records), and messageFollow notices sent to senders on an old route (follow_notices_sent; of those follow_notices_at_handover: sent at a handover to a peer notified lately) and received that dropped a cached route (follow_notices_applied).",
            &[
                (&[("event", "moves_started")], load(&r.moves_started)),
                (&[("event", "saved_work")], load(&r.saved_work)),
                (&[("event", "relayed")], load(&r.relayed)),
                (&[("event", "handed_over")], load(&r.handed_over)),
                (&[("event", "restored")], load(&r.restored)),
                (&[("event", "followed")], load(&r.followed)),
                (&[("event", "followed_as_sent")], load(&r.followed_as_sent)),
                (
                    &[("event", "followed_answered")],
                    load(&r.followed_answered),
                ),
                (
                    &[("event", "followed_delivered")],
                    load(&r.followed_delivered),
                ),
                (&[("event", "follow_drops")], load(&r.follow_drops)),
                (&[("event", "late_followed")], load(&r.late_followed)),
                (&[("event", "budget_waits")], load(&r.budget_waits)),
                (&[("event", "epochs_lost")], load(&r.epochs_lost)),
                (&[("event", "authority_reads")], load(&r.authority_reads)),
                (
                    &[("event", "target_liveness_checks")],
                    load(&r.target_liveness_checks),
                ),
                (&[("event", "arrived")], load(&r.arrived)),
                (&[("event", "refused")], load(&r.refused)),
                (
                    &[("event", "capacity_refusals")],
                    load(&r.capacity_refusals),
                ),
                (&[("event", "carried_accepted")], load(&r.carried_accepted)),
                (
                    &[("event", "terminal_roots_published")],
                    load(&r.terminal_roots_published),
                ),
                (
                    &[("event", "terminals_completed")],
                    load(&r.terminals_completed),
                ),
                (
                    &[("event", "terminals_force_stopped")],
                    load(&r.terminals_force_stopped),
                ),
                (
                    &[("event", "terminals_data_lost")],
                    load(&r.terminals_data_lost),
                ),
                (
                    &[("event", "terminals_abandoned")],
                    load(&r.terminals_abandoned),
                ),
                (
                    &[("event", "terminal_roots_expired")],
                    load(&r.terminal_roots_expired),
                ),
                (&[("event", "abandoned")], load(&r.abandoned)),
                (&[("event", "cutover_timeouts")], load(&r.cutover_timeouts)),
                (&[("event", "late_cutovers")], load(&r.late_cutovers)),
                (&[("event", "unknown_records")], load(&r.unknown_records)),
                (
                    &[("event", "follow_notices_sent")],
                    load(&r.follow_notices_sent),
                ),
                (
                    &[("event", "follow_notices_at_handover")],
                    load(&r.follow_notices_at_handover),
                ),
                (
                    &[("event", "follow_notices_applied")],
                    load(&r.follow_notices_applied),
                ),
                (
                    &[("event", "reply_relays_sent")],
                    load(&r.reply_relays_sent),
                ),
            ],
        )?;
        {
            let mut sessions = counters(
                &mut enc,
                "zlink_session_events_total",
                "Session binding and session relocation events of this host's object runtime (as session owner, Actor owner, relocation source and target; see docs/operations.md).",
            )?;
            for (event, v) in o.session_stats().events() {
                sessions.sample(&[("event", event)], v)?;
            }
        }
        let totals = self.0.relocation_outcome_totals();
        {
            let mut units = counters(
                &mut enc,
                "zlink_relocation_units_total",
                "Relocation units of this host by outcome, over every relocation.",
            )?;
            for outcome in RELOCATION_OUTCOMES {
                let v = totals
                    .iter()
                    .find(|(k, _)| *k == outcome)
                    .map_or(0, |(_, v)| *v);
                units.sample(&[("outcome", outcome)], v)?;
            }
        }
        let resolver = o.resolver();
        let cache = resolver.cache().stats();
        counter(
            &mut enc,
            "zlink_route_cache_hits_total",
            "Positive route cache hits.",
            &[(&[], cache.hits)],
        )?;
        counter(
            &mut enc,
            "zlink_route_cache_misses_total",
            "Positive route cache misses.",
            &[(&[], cache.misses)],
        )?;
        let mut invalidations = counters(
            &mut enc,
            "zlink_route_cache_invalidations_total",
            "Route cache entries removed, by reason.",
        )?;
        for (reason, v) in cache.invalidations {
            invalidations.sample(&[("reason", reason.name())], v)?;
        }
        let rstats = resolver.stats();
        let mut resolutions = counters(
            &mut enc,
            "zlink_route_resolutions_total",
            "Route resolutions (store reads) by result.",
        )?;
        for (name, v) in ["ready_route", "missing", "unavailable", "store_failure"]
            .iter()
            .zip(&rstats.results)
        {
            resolutions.sample(&[("result", name)], load(v))?;
        }
        Ok(())
    }
}

/// Location and Relocation Store calls of the mesh node and the object runtime.
#[derive(Debug)]
pub(super) struct StoreFamilies(pub(super) Arc<StoreMetrics>);

impl Collector for StoreFamilies {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let sm = &self.0;
        let mut ops = counters(
            &mut enc,
            "zlink_store_ops_total",
            "Location and Relocation Store operations (mesh node and object runtime), by operation and result.",
        )?;
        for (op, m) in STORE_OPS.iter().zip(&sm.ops) {
            ops.sample(&[("op", op), ("result", "ok")], load(&m.ok))?;
            ops.sample(&[("op", op), ("result", "error")], load(&m.errors))?;
        }
        let mut latency = histograms(
            &mut enc,
            "zlink_store_op_duration_seconds",
            "Latency of Location and Relocation Store operations (mesh node and object runtime), by operation.",
        )?;
        for (op, m) in STORE_OPS.iter().zip(&sm.ops) {
            latency.sample(&[("op", op)], &m.latency.snapshot())?;
        }
        counter(
            &mut enc,
            "zlink_lease_renew_failures_total",
            "Owner lease renewals that failed.",
            &[(&[], load(&sm.lease_renew_failures))],
        )
    }
}

/// Client STREAM sessions (issue 19): zeros while `stream.listen` is not set, so the family
/// list does not depend on the configuration.
#[derive(Debug)]
pub(super) struct StreamFamilies(pub(super) Arc<Host>);

impl Collector for StreamFamilies {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let none = zlink::session::StreamMetrics::default();
        let m = self.0.stream_metrics.get().map_or(&none, |m| &**m);
        gauge(
            &mut enc,
            "zlink_stream_sessions",
            "STREAM sessions open now.",
            &[(&[], load(&m.active))],
        )?;
        counter(
            &mut enc,
            "zlink_stream_sessions_accepted_total",
            "STREAM connections accepted as sessions.",
            &[(&[], load(&m.accepted))],
        )?;
        counter(
            &mut enc,
            "zlink_stream_connections_rejected_total",
            "STREAM connections closed at once because stream.max_connections sessions were open.",
            &[(&[], load(&m.rejected_connections))],
        )?;
        let mut closed = counters(
            &mut enc,
            "zlink_stream_sessions_closed_total",
            "STREAM sessions closed, by reason (MessageTooLarge is the EMSGSIZE count).",
        )?;
        for reason in zlink::session::CloseReason::ALL {
            closed.sample(&[("reason", reason.as_str())], m.closed(reason))?;
        }
        counter(
            &mut enc,
            "zlink_stream_packets_total",
            "STREAM packets of closed sessions, by direction (in: decoded from clients; out: queued to them).",
            &[
                (&[("direction", "in")], load(&m.packets_in)),
                (&[("direction", "out")], load(&m.packets_out)),
            ],
        )?;
        counter(
            &mut enc,
            "zlink_stream_bytes_total",
            "STREAM bytes of closed sessions, by direction.",
            &[
                (&[("direction", "in")], load(&m.bytes_in)),
                (&[("direction", "out")], load(&m.bytes_out)),
            ],
        )?;
        counter(
            &mut enc,
            "zlink_stream_dropped_total",
            "STREAM packets dropped without a handler or reply, by reason.",
            &[
                (&[("reason", "unknown_packet")], load(&m.unknown_packets)),
                (&[("reason", "unknown_reply")], load(&m.unknown_reply_drops)),
                (&[("reason", "reserved_send")], load(&m.reserved_send_drops)),
                (&[("reason", "late_reply")], load(&m.late_replies)),
                (&[("reason", "invalid_push")], load(&m.invalid_pushes)),
            ],
        )?;
        counter(
            &mut enc,
            "zlink_stream_request_failures_total",
            "STREAM client requests answered by the framework, by kind (deadline: DeadlineExceeded; dropped_reply and panic: HandlerFailed).",
            &[
                (&[("kind", "deadline")], load(&m.request_deadlines)),
                (&[("kind", "dropped_reply")], load(&m.handler_failed)),
                (&[("kind", "panic")], load(&m.handler_panics)),
            ],
        )
    }
}
