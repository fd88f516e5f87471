//! `zlink-node load`: a load generator that joins a running mesh as an Object Client node and
//! sends sequence-numbered `Add` messages to many `counter` Instance Spots through the mesh
//! (issue 8 item 6). The first message to each ID cold-activates the counter on a host chosen
//! from the descriptors (wire §8). The report is per ID, not only totals: how many numbered
//! messages each counter applied, how many are missing and how many arrived twice.
//!
//! The traffic shape is [`crate::demo::plan::Shape`] with one sending node and no rooms: in
//! rounds (message `j` to every ID, then `j + 1`), every `request_every`-th message a request
//! (its latency measured), the others one-way sends. Counters rather than players: an Object
//! Client can reach a counter that does not exist yet (Instance intent activates it), while a
//! player must be created on its host.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use thiserror::Error;
use zlink_protocol::generated::{ObjectRole, RuntimeState};
use zlink_store::redis::RedisStore;

use super::HostConfig;
use crate::demo::plan::Op;
use crate::demo::plan::{OpKind, quantile};
use crate::refapp::counter::{Add, ReadSource, Total};
use crate::refapp::messages::{
    Ack, Deliver, DeliverRequest, Heard, Join, Joined, PlayerReport, ReportRequest, RoomReport, Say,
};
use crate::refapp::seq::SourceReport;
use crate::refapp::{COUNTER, PLAYER, ROOM, RefAppConfig};
use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::peer::PeerState;
use zlink::mesh::{Handlers, MeshNode};
use zlink::object::ObjectCalls;
use zlink::object::runtime::ObjectRuntime;
use zlink::routing::CacheConfig;

/// Settings of one load run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadConfig {
    /// Counter IDs addressed (`<id_prefix>-<i>`).
    pub counters: usize,
    /// Numbered messages to each counter.
    pub messages_per_counter: u64,
    /// Every n-th message is a request (0: one-way sends only).
    pub request_every: u64,
    /// Calls in flight.
    pub concurrency: usize,
    /// Deadline of each request.
    pub request_timeout: Duration,
    /// How long the check waits for one-way messages to be applied.
    pub settle_timeout: Duration,
    /// How long to wait for a ready, serving Object Server peer.
    pub ready_timeout: Duration,
    /// Prefix of the counter IDs (unique per run, so earlier runs do not count).
    pub id_prefix: String,
    /// The sending stream's name in the counters' sequence trackers.
    pub source: String,
    /// Continuous mode: rounds (message `j` to every ID, then `j + 1`) until this much time
    /// passed, instead of `messages_per_counter` rounds; then the usual per-ID check.
    pub duration: Option<Duration>,
    /// Write every call's outcome and every final read as JSON lines here ([`HistoryLine`]),
    /// for a history checker (issue 20's chaos run).
    pub history: Option<std::path::PathBuf>,
    /// Rooms and players instead of counters (`None`: counters).
    pub rooms: Option<RoomsConfig>,
    /// Closed loop: every call is a request and each ID has one call in flight at a time, in
    /// number order, so its arrivals must be strictly in order. Otherwise pipelined: up to
    /// `concurrency` calls in flight over all IDs, one-way sends among them (their order across
    /// a relocation is reported, not required: wire §10).
    pub closed_loop: bool,
}

/// The rooms-and-players workload (issue 17 "Soak"): `rooms` `room` User Spots with
/// `players_per_room` `player` Actors each, created by the load through the mesh before the
/// traffic (placed on the servers by weighted selection; each player on its room's node) and
/// joined to their room. Every round sends message `j` to every player (`Deliver`, or
/// `DeliverRequest` on request rounds) and says line `j` in every room (`Say`, a request the
/// room broadcasts to its members as numbered one-way `Deliver`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomsConfig {
    /// Rooms created.
    pub rooms: usize,
    /// Players created in each room.
    pub players_per_room: usize,
}

impl Default for LoadConfig {
    fn default() -> Self {
        Self {
            counters: 100,
            messages_per_counter: 20,
            request_every: 4,
            concurrency: 32,
            request_timeout: Duration::from_secs(10),
            settle_timeout: Duration::from_secs(10),
            ready_timeout: Duration::from_secs(15),
            id_prefix: "load".into(),
            source: "load".into(),
            duration: None,
            history: None,
            rooms: None,
            closed_loop: false,
        }
    }
}

/// Why a load run could not run.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The Location Store could not be reached.
    #[error("location store: {0}")]
    Store(#[from] zlink_store::StoreError),
    /// The MeshNode did not start.
    #[error("mesh node: {0}")]
    Mesh(#[from] zlink::mesh::MeshError),
    /// The object runtime did not start.
    #[error("object runtime: {0}")]
    Runtime(#[from] zlink::object::runtime::RuntimeError),
    /// No Object Server became ready and serving in time.
    #[error("no ready, serving Object Server in mesh {mesh} within {waited:?}")]
    NoServers {
        /// The mesh.
        mesh: String,
        /// How long it waited.
        waited: Duration,
    },
    /// A setting is out of range.
    #[error("{field}: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

/// One line of a load run's history file (`--history`): a call's outcome, or a final read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HistoryLine {
    /// When the call ended (or the read answered), Unix milliseconds (so a checker can line
    /// it up with faults injected by another process).
    pub t_ms: u64,
    /// When the call was issued, Unix milliseconds.
    #[serde(default)]
    pub start_ms: u64,
    /// The counter ID.
    pub id: String,
    /// `send`, `request` or `read`.
    pub kind: String,
    /// The message's number (`read`: none).
    #[serde(default)]
    pub seq: Option<u64>,
    /// The call's error kind, if it failed (`StoreFailure`, `Timeout`, …).
    #[serde(default)]
    pub error: Option<String>,
    /// The serving node's RID (requests and reads that succeeded).
    #[serde(default)]
    pub rid: String,
    /// The serving node's lifecycle generation.
    #[serde(default)]
    pub lifecycle: u64,
    /// The counter's applied count after this call (requests and reads).
    #[serde(default)]
    pub adds: u64,
    /// Numbers the counter had received twice by then (requests and reads; never expected).
    #[serde(default)]
    pub duplicates: u64,
    /// For a read: one past the highest number applied, and the missing ranges below it.
    #[serde(default)]
    pub end: u64,
    /// For a read: missing ranges `[first, last]`.
    #[serde(default)]
    pub holes: Vec<(u64, u64)>,
}

/// What one counter received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdReport {
    /// The counter ID.
    pub id: String,
    /// Numbered messages sent to it.
    pub sent: u64,
    /// Distinct numbers it applied.
    pub applied: u64,
    /// Messages whose call succeeded (a request answered, a one-way send accepted) and that
    /// were never applied: lost. A message whose call failed may or may not have been applied
    /// (a request that timed out may have run) and is never counted here.
    pub missing: u64,
    /// Calls to this ID that ended with an error.
    pub failed: u64,
    /// Numbers it received more than once (applied once).
    pub duplicates: u64,
    /// Applied numbers that were never sent (never expected).
    pub unexpected: u64,
    /// Numbers that arrived ahead of a lower one (reported only: pipelined one-way traffic may
    /// reorder across a relocation, wire §10; closed-loop traffic never does).
    pub out_of_order: u64,
}

/// The outcome of a load run.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// The load node's RID.
    pub rid: String,
    /// Messages sent (calls that completed without error).
    pub sent: u64,
    /// Of those, requests.
    pub requests: u64,
    /// Calls that ended in an error.
    pub failed_calls: u64,
    /// The first few call errors.
    pub errors: Vec<String>,
    /// Failed calls by error kind (`StoreFailure`, `Unavailable`, …).
    pub error_kinds: std::collections::BTreeMap<String, u64>,
    /// Per counter, in ID order.
    pub ids: Vec<IdReport>,
    /// Request latency p50.
    pub p50: Duration,
    /// Request latency p99.
    pub p99: Duration,
    /// Request latency max.
    pub max: Duration,
    /// Wall time of the traffic phase.
    pub traffic_time: Duration,
    /// A closed-loop run: any out-of-order arrival is a failure.
    pub closed_loop: bool,
}

impl LoadReport {
    /// The final read of `id` failed for good: a failed call, counted by kind.
    fn read_failed(&mut self, id: &str, e: &CallError) {
        self.failed_calls += 1;
        *self
            .error_kinds
            .entry(format!("{:?}", e.kind()))
            .or_default() += 1;
        if self.errors.len() < 5 {
            self.errors.push(format!("read {id}: {e}"));
        }
    }

    /// Everything that makes the run fail (empty: every message reached its ID exactly once).
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.failed_calls > 0 {
            out.push(format!(
                "{} calls failed, first: {:?}",
                self.failed_calls, self.errors
            ));
        }
        let gaps: Vec<&IdReport> = self.ids.iter().filter(|r| r.missing > 0).collect();
        if !gaps.is_empty() {
            out.push(format!(
                "{} IDs with gaps, first: {}",
                gaps.len(),
                gaps.iter()
                    .take(5)
                    .map(|r| format!("{} missing {}", r.id, r.missing))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let dups: Vec<&IdReport> = self
            .ids
            .iter()
            .filter(|r| r.duplicates > 0 || r.unexpected > 0)
            .collect();
        if !dups.is_empty() {
            out.push(format!(
                "{} IDs with duplicates or unexpected numbers, first: {}",
                dups.len(),
                dups.iter()
                    .take(5)
                    .map(|r| format!(
                        "{} duplicates {} unexpected {}",
                        r.id, r.duplicates, r.unexpected
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let reordered: Vec<&IdReport> = self.ids.iter().filter(|r| r.out_of_order > 0).collect();
        if self.closed_loop && !reordered.is_empty() {
            out.push(format!(
                "{} IDs received numbers out of order in a closed loop, first: {}",
                reordered.len(),
                reordered
                    .iter()
                    .take(5)
                    .map(|r| format!("{} out of order {}", r.id, r.out_of_order))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out
    }
}

/// Join the mesh described by `host` (mesh, Redis, timings, bind/advertise host) as an Object
/// Client with `secret`, run the traffic of `cfg` and check every counter.
///
/// # Errors
/// [`LoadError`] when the node cannot start or no server is ready; call failures, gaps and
/// duplicates are in the report ([`LoadReport::failures`]).
pub async fn run(
    host: &HostConfig,
    secret: MeshSecret,
    cfg: &LoadConfig,
) -> Result<LoadReport, LoadError> {
    if cfg.concurrency == 0 {
        return Err(LoadError::Config {
            field: "concurrency",
            reason: "must be at least 1".into(),
        });
    }
    if cfg
        .rooms
        .is_some_and(|r| r.rooms == 0 || r.players_per_room == 0)
    {
        return Err(LoadError::Config {
            field: "rooms",
            reason: "rooms and players per room must be at least 1".into(),
        });
    }
    let mut hc = host.clone();
    hc.objects.role = "client".into();
    hc.mesh.channels.clear();
    hc.mesh.rid = None;
    hc.mesh.rid_prefix = "load".into();
    hc.mesh.port = 0;
    let store = Arc::new(RedisStore::connect(&hc.redis.url, super::redis_config(&hc)).await?);
    let mut mc = hc.mesh_node_config(secret);
    mc.object_role = ObjectRole::Client;
    let fencing_margin = mc.timings.fencing_margin;
    let backend = Arc::clone(&store) as Arc<dyn DiscoveryBackend>;
    let node = Arc::new(MeshNode::start(mc, Handlers::new(), Some(backend)).await?);
    let rt = match ObjectRuntime::start(
        Arc::clone(&node),
        store,
        crate::refapp::registry(&RefAppConfig::default()),
        CacheConfig {
            fencing_margin,
            max_age: Duration::from_millis(hc.relocation.route_cache_max_age_ms),
            message_follow: Duration::from_millis(hc.relocation.message_follow_ms),
        },
    )
    .await
    {
        Ok(rt) => rt,
        Err(e) => {
            node.shutdown().await;
            return Err(e.into());
        }
    };
    let result = drive(&node, &rt, &hc.mesh.name, cfg).await;
    rt.shutdown().await;
    node.shutdown().await;
    result
}

/// Wait for a ready, serving Object Server; then, for up to [`SPREAD_WAIT`] more, for every
/// Object Server this node discovered to be ready too, so the first messages (which place the
/// counters) spread over all of them instead of landing on whichever connected first.
async fn wait_for_server(node: &MeshNode, mesh: &str, within: Duration) -> Result<(), LoadError> {
    let t0 = Instant::now();
    let mut changes = node.subscribe_peer_changes();
    let mut first_ready: Option<Instant> = None;
    loop {
        let peers = node.peers();
        let ready_server = peers.iter().any(|p| {
            p.state == PeerState::Ready
                && p.descriptor.as_ref().is_some_and(|d| {
                    d.object_role == ObjectRole::Server && d.state == RuntimeState::Serving
                })
        });
        // A discovered peer not admitted yet (its descriptor is known once it is) is most
        // likely another server: wait for it a little.
        let pending = peers
            .iter()
            .any(|p| !matches!(p.state, PeerState::Ready | PeerState::NotRequired));
        if ready_server {
            let since = *first_ready.get_or_insert_with(Instant::now);
            if !pending || since.elapsed() >= SPREAD_WAIT {
                return Ok(());
            }
        }
        let left = within.saturating_sub(t0.elapsed());
        if left.is_zero() {
            return Err(LoadError::NoServers {
                mesh: mesh.to_owned(),
                waited: within,
            });
        }
        let _ = tokio::time::timeout(left.min(Duration::from_millis(100)), changes.changed()).await;
    }
}

/// How long the load waits for the other discovered servers once one is ready.
const SPREAD_WAIT: Duration = Duration::from_secs(3);

/// The IDs a load run addresses, by index: counters `0..counters`; or players `0..P` then
/// rooms `P..P + R`.
#[derive(Debug, Clone)]
struct Targets {
    prefix: String,
    counters: usize,
    rooms: Option<RoomsConfig>,
}

/// What the ID with an index is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Counter,
    /// A player, member of room `room` (a room index).
    Player {
        room: usize,
    },
    Room,
}

impl Targets {
    fn len(&self) -> usize {
        match self.rooms {
            None => self.counters,
            Some(r) => r.rooms * r.players_per_room + r.rooms,
        }
    }

    fn players(&self) -> usize {
        self.rooms.map_or(0, |r| r.rooms * r.players_per_room)
    }

    fn kind(&self, i: usize) -> Target {
        match self.rooms {
            None => Target::Counter,
            Some(r) if i < self.players() => Target::Player {
                room: i / r.players_per_room,
            },
            Some(_) => Target::Room,
        }
    }

    fn id(&self, i: usize) -> String {
        match self.kind(i) {
            Target::Counter => format!("{}-{i}", self.prefix),
            Target::Player { .. } => format!("{}-p{i}", self.prefix),
            Target::Room => self.room_id(i - self.players()),
        }
    }

    fn room_id(&self, r: usize) -> String {
        format!("{}-r{r}", self.prefix)
    }

    /// The operation of round `j` for ID `i`.
    fn op(&self, i: usize, j: u64, request_every: u64, closed_loop: bool) -> Op {
        let request = closed_loop || (request_every > 0 && (j + 1).is_multiple_of(request_every));
        Op {
            node: 0,
            target: i,
            seq: j,
            kind: match self.kind(i) {
                Target::Room => OpKind::Say,
                Target::Counter | Target::Player { .. } if request => OpKind::Request,
                Target::Counter | Target::Player { .. } => OpKind::Send,
            },
        }
    }
}

/// Create the rooms and players of `targets` through the mesh and join every player to its
/// room (a rooms run), before the traffic.
async fn populate(
    rt: &ObjectRuntime<RedisStore>,
    targets: &Targets,
    cfg: &LoadConfig,
) -> Result<(), LoadError> {
    let Some(r) = targets.rooms else {
        return Ok(());
    };
    let setup = |what: &'static str| {
        move |e: CallError| LoadError::Config {
            field: "rooms",
            reason: format!("{what}: {e}"),
        }
    };
    futures::stream::iter((0..r.rooms).map(|room| {
        let id = targets.room_id(room);
        async move { rt.create_user_spot(ROOM, &id, None).await.map(drop) }
    }))
    .buffer_unordered(cfg.concurrency)
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .collect::<Result<(), _>>()
    .map_err(setup("creating rooms"))?;
    let players = targets.players();
    futures::stream::iter((0..players).map(|p| {
        let (id, room) = (targets.id(p), targets.room_id(p / r.players_per_room));
        async move {
            rt.create_actor_in(PLAYER, &id, &room, None).await?;
            rt.request_to_spot::<Join, Joined>(&room, &Join { player: id }, cfg.request_timeout)
                .await
                .map(drop)
        }
    }))
    .buffer_unordered(cfg.concurrency)
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .collect::<Result<(), _>>()
    .map_err(setup("creating and joining players"))
}

/// Run one operation.
async fn call(
    rt: &ObjectRuntime<RedisStore>,
    targets: &Targets,
    cfg: &LoadConfig,
    op: Op,
    t0: Instant,
) -> Outcome {
    let id = targets.id(op.target);
    let start = Instant::now();
    let source = cfg.source.clone();
    let add = || Add {
        source: cfg.source.clone(),
        seq: op.seq,
        by: 1,
    };
    let result = match (targets.kind(op.target), op.kind) {
        (Target::Counter, OpKind::Request) => rt
            .request_to_instance_spot::<Add, Total>(COUNTER, &id, &add(), cfg.request_timeout)
            .await
            .map(Some),
        (Target::Counter, _) => rt
            .send_to_instance_spot(COUNTER, &id, &add())
            .await
            .map(|()| None),
        (Target::Player { .. }, OpKind::Request) => rt
            .request_to_actor::<DeliverRequest, Ack>(
                &id,
                &DeliverRequest {
                    source,
                    seq: op.seq,
                    item: None,
                },
                cfg.request_timeout,
            )
            .await
            .map(|_| None),
        (Target::Player { .. }, _) => rt
            .send_to_actor(
                &id,
                &Deliver {
                    source,
                    seq: op.seq,
                    item: None,
                },
            )
            .await
            .map(|()| None),
        (Target::Room, _) => rt
            .request_to_spot::<Say, Heard>(
                &id,
                &Say {
                    source,
                    seq: op.seq,
                    text: format!("line {}", op.seq),
                },
                cfg.request_timeout,
            )
            .await
            .map(|_| None),
    };
    Outcome {
        target: op.target,
        seq: op.seq,
        kind: op.kind,
        start: start.duration_since(t0),
        end: t0.elapsed(),
        result,
    }
}

async fn drive(
    node: &MeshNode,
    rt: &ObjectRuntime<RedisStore>,
    mesh: &str,
    cfg: &LoadConfig,
) -> Result<LoadReport, LoadError> {
    wait_for_server(node, mesh, cfg.ready_timeout).await?;
    let targets = Targets {
        prefix: cfg.id_prefix.clone(),
        counters: cfg.counters,
        rooms: cfg.rooms,
    };
    populate(rt, &targets, cfg).await?;
    let n = targets.len();
    let t0 = Instant::now();
    // Numbered messages issued per ID (the check's expectation).
    let issued: Vec<std::sync::atomic::AtomicU64> = (0..n)
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    // Another round starts only while this holds.
    let more_rounds = |j: u64| match cfg.duration {
        None => j < cfg.messages_per_counter,
        Some(d) => t0.elapsed() < d,
    };
    let (targets_ref, issued_ref) = (&targets, &issued);
    let issue = |op: Op| {
        issued_ref[op.target].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        call(rt, targets_ref, cfg, op, t0)
    };
    let outcomes: Vec<Outcome> = if cfg.closed_loop {
        // One worker per `concurrency` slice of the IDs: each ID's calls one at a time, in
        // number order, round after round.
        let workers = (0..cfg.concurrency.min(n.max(1))).map(|w| async move {
            let mut out = Vec::new();
            let mut j = 0u64;
            while more_rounds(j) {
                for i in (w..n).step_by(cfg.concurrency) {
                    out.push(issue(targets_ref.op(i, j, cfg.request_every, true)).await);
                }
                j += 1;
            }
            out
        });
        futures::future::join_all(workers)
            .await
            .into_iter()
            .flatten()
            .collect()
    } else {
        // The same round order, round after round (message `j` to every ID, then `j + 1`).
        let ops = (0u64..)
            .take_while(|&j| cfg.duration.is_some() || j < cfg.messages_per_counter)
            .flat_map(move |j| (0..n).map(move |i| targets_ref.op(i, j, cfg.request_every, false)))
            .take_while(move |op| op.target != 0 || more_rounds(op.seq));
        futures::stream::iter(ops)
            .map(issue)
            .buffer_unordered(cfg.concurrency)
            .collect()
            .await
    };
    let traffic_time = t0.elapsed();
    let mut report = LoadReport {
        rid: node.rid().to_owned(),
        sent: 0,
        requests: 0,
        failed_calls: 0,
        errors: Vec::new(),
        error_kinds: std::collections::BTreeMap::new(),
        ids: Vec::new(),
        p50: Duration::ZERO,
        p99: Duration::ZERO,
        max: Duration::ZERO,
        traffic_time,
        closed_loop: cfg.closed_loop,
    };
    let mut history = Vec::new();
    // Unix milliseconds of the traffic start: history times are wall clock.
    let base_ms = millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(t0.elapsed()),
    );
    // Per ID: the numbers whose call succeeded (must be applied) and those whose call failed.
    let mut acked: Vec<Vec<u64>> = vec![Vec::new(); n];
    let mut failed: Vec<u64> = vec![0; n];
    let mut latencies = Vec::new();
    for o in outcomes {
        let mut line = HistoryLine {
            t_ms: base_ms + millis(o.end),
            start_ms: base_ms + millis(o.start),
            id: targets.id(o.target),
            kind: match o.kind {
                OpKind::Request => "request",
                OpKind::Say => "say",
                OpKind::Send => "send",
            }
            .into(),
            seq: Some(o.seq),
            error: None,
            rid: String::new(),
            lifecycle: 0,
            adds: 0,
            duplicates: 0,
            end: 0,
            holes: Vec::new(),
        };
        match o.result {
            Ok(total) => {
                report.sent += 1;
                acked[o.target].push(o.seq);
                if o.kind != OpKind::Send {
                    report.requests += 1;
                    latencies.push(o.end.saturating_sub(o.start));
                }
                if let Some(t) = total {
                    line.rid = t.rid;
                    line.lifecycle = t.lifecycle;
                    line.adds = t.adds;
                    line.duplicates = t.duplicates;
                }
            }
            Err(e) => {
                report.failed_calls += 1;
                failed[o.target] += 1;
                let kind = format!("{:?}", e.kind());
                *report.error_kinds.entry(kind.clone()).or_default() += 1;
                line.error = Some(kind);
                if report.errors.len() < 5 {
                    report.errors.push(e.to_string());
                }
            }
        }
        if cfg.history.is_some() {
            history.push(line);
        }
    }
    latencies.sort_unstable();
    report.p50 = quantile(&latencies, 0.5);
    report.p99 = quantile(&latencies, 0.99);
    report.max = latencies.last().copied().unwrap_or_default();

    // The check: read every counter's applied set until every acknowledged message is in it
    // or the settle time passed.
    let settle_until = Instant::now() + cfg.settle_timeout;
    let read = ReadSource {
        source: cfg.source.clone(),
    };
    for (i, issued) in issued.iter().enumerate() {
        if targets.kind(i) != Target::Counter {
            continue;
        }
        let id = targets.id(i);
        let sent = issued.load(std::sync::atomic::Ordering::Relaxed);
        acked[i].sort_unstable();
        let lost = |t: &Total| acked[i].iter().filter(|&&n| !applied(t, n)).count() as u64;
        let total = loop {
            let t = rt
                .request_to_instance_spot::<ReadSource, Total>(
                    COUNTER,
                    &id,
                    &read,
                    cfg.request_timeout,
                )
                .await;
            match t {
                Ok(t) if lost(&t) == 0 || Instant::now() >= settle_until => break Some(t),
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) if Instant::now() >= settle_until => {
                    report.read_failed(&id, &e);
                    break None;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        if let (Some(t), true) = (&total, cfg.history.is_some()) {
            history.push(HistoryLine {
                t_ms: base_ms + millis(t0.elapsed()),
                start_ms: base_ms + millis(t0.elapsed()),
                id: id.clone(),
                kind: "read".into(),
                seq: None,
                error: None,
                rid: t.rid.clone(),
                lifecycle: t.lifecycle,
                adds: t.adds,
                duplicates: t.duplicates,
                end: t.end,
                holes: t.holes.iter().map(|r| (r.first, r.last)).collect(),
            });
        }
        let (applied_n, duplicates, out_of_order, missing) = total
            .as_ref()
            .map_or((0, 0, 0, acked[i].len() as u64), |t| {
                (t.adds, t.duplicates, t.out_of_order, lost(t))
            });
        report.ids.push(IdReport {
            id,
            sent,
            applied: applied_n,
            missing,
            failed: failed[i],
            duplicates,
            // Numbers are issued 0..sent per ID: anything applied at or above is unexpected.
            unexpected: total.as_ref().map_or(0, |t| t.end.saturating_sub(sent)),
            out_of_order,
        });
    }
    if targets.rooms.is_some() {
        let sent: Vec<u64> = issued
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .collect();
        check_rooms(rt, &targets, cfg, &sent, &failed, settle_until, &mut report).await;
    }
    if let Some(path) = &cfg.history {
        write_history(path, &history).map_err(|e| LoadError::Config {
            field: "history",
            reason: format!("cannot write {}: {e}", path.display()),
        })?;
    }
    Ok(report)
}

/// Read a report until `done` holds or `until` passed (the last read, or the last error).
async fn settle<R, F, Fut>(
    read: F,
    done: impl Fn(&R) -> bool,
    until: Instant,
) -> Result<R, CallError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<R, CallError>>,
{
    loop {
        match read().await {
            Ok(r) if done(&r) || Instant::now() >= until => return Ok(r),
            Err(e) if Instant::now() >= until => return Err(e),
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Source `name`'s report (an empty one when the check listed none).
fn source_report(sources: &[SourceReport], name: &str) -> SourceReport {
    sources
        .iter()
        .find(|s| s.source == name)
        .cloned()
        .unwrap_or(SourceReport {
            source: name.to_owned(),
            distinct: 0,
            expected: None,
            missing: 0,
            gaps: Vec::new(),
            duplicates: 0,
            duplicate_samples: Vec::new(),
            unexpected: 0,
            out_of_order: 0,
        })
}

/// The check of a rooms run: every room's lines from the load (rooms first: how many lines
/// each heard is what every member must have been broadcast), then every player's messages
/// from the load and the broadcasts of its room. A number whose call failed may be missing;
/// any other gap is a loss.
async fn check_rooms(
    rt: &ObjectRuntime<RedisStore>,
    targets: &Targets,
    cfg: &LoadConfig,
    sent: &[u64],
    failed: &[u64],
    settle_until: Instant,
    report: &mut LoadReport,
) {
    let players = targets.players();
    let mut lines = vec![0u64; sent.len().saturating_sub(players)];
    for (r, heard) in lines.iter_mut().enumerate() {
        let i = players + r;
        let id = targets.id(i);
        let ask = ReportRequest {
            expected: Some([(cfg.source.clone(), sent[i])].into_iter().collect()),
        };
        let read = settle(
            || rt.request_to_spot::<ReportRequest, RoomReport>(&id, &ask, cfg.request_timeout),
            |rep: &RoomReport| source_report(&rep.sources, &cfg.source).missing <= failed[i],
            settle_until,
        )
        .await;
        let line = match read {
            Ok(rep) => {
                *heard = rep.lines;
                let sr = source_report(&rep.sources, &cfg.source);
                IdReport {
                    id: id.clone(),
                    sent: sent[i],
                    applied: sr.distinct,
                    missing: sr.missing.saturating_sub(failed[i]),
                    failed: failed[i],
                    duplicates: sr.duplicates,
                    unexpected: sr.unexpected,
                    out_of_order: sr.out_of_order,
                }
            }
            Err(e) => {
                report.read_failed(&id, &e);
                unread(id, sent[i], failed[i])
            }
        };
        report.ids.push(line);
    }
    for i in 0..players {
        let id = targets.id(i);
        let Target::Player { room } = targets.kind(i) else {
            continue;
        };
        let room_id = targets.room_id(room);
        let ask = ReportRequest {
            expected: Some(
                [
                    (cfg.source.clone(), sent[i]),
                    (room_id.clone(), lines[room]),
                ]
                .into_iter()
                .collect(),
            ),
        };
        let read = settle(
            || rt.request_to_actor::<ReportRequest, PlayerReport>(&id, &ask, cfg.request_timeout),
            |rep: &PlayerReport| {
                source_report(&rep.sources, &cfg.source).missing <= failed[i]
                    && source_report(&rep.sources, &room_id).missing == 0
            },
            settle_until,
        )
        .await;
        let line = match read {
            Ok(rep) => {
                let own = source_report(&rep.sources, &cfg.source);
                let broadcast = source_report(&rep.sources, &room_id);
                IdReport {
                    id: id.clone(),
                    sent: sent[i],
                    applied: own.distinct,
                    missing: own.missing.saturating_sub(failed[i]) + broadcast.missing,
                    failed: failed[i],
                    duplicates: own.duplicates + broadcast.duplicates,
                    unexpected: own.unexpected + broadcast.unexpected,
                    out_of_order: own.out_of_order,
                }
            }
            Err(e) => {
                report.read_failed(&id, &e);
                unread(id, sent[i], failed[i])
            }
        };
        report.ids.push(line);
    }
}

/// The report of an ID whose final read failed: everything acknowledged counts as missing.
fn unread(id: String, sent: u64, failed: u64) -> IdReport {
    IdReport {
        id,
        sent,
        applied: 0,
        missing: sent.saturating_sub(failed),
        failed,
        duplicates: 0,
        unexpected: 0,
        out_of_order: 0,
    }
}

/// One call's outcome.
struct Outcome {
    target: usize,
    seq: u64,
    kind: OpKind,
    start: Duration,
    end: Duration,
    result: Result<Option<Total>, CallError>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether the counter's source read `t` shows number `n` applied.
fn applied(t: &Total, n: u64) -> bool {
    n < t.end && !t.holes.iter().any(|r| (r.first..=r.last).contains(&n))
}

fn write_history(path: &std::path::Path, lines: &[HistoryLine]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for l in lines {
        serde_json::to_writer(&mut out, l)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ids: Vec<IdReport>, failed: u64) -> LoadReport {
        LoadReport {
            rid: "r".into(),
            sent: 0,
            requests: 0,
            failed_calls: failed,
            errors: vec![],
            error_kinds: std::collections::BTreeMap::new(),
            ids,
            p50: Duration::ZERO,
            p99: Duration::ZERO,
            max: Duration::ZERO,
            traffic_time: Duration::ZERO,
            closed_loop: false,
        }
    }

    fn id(name: &str, sent: u64, applied: u64, duplicates: u64) -> IdReport {
        IdReport {
            id: name.into(),
            sent,
            applied,
            missing: sent.saturating_sub(applied),
            failed: 0,
            duplicates,
            unexpected: applied.saturating_sub(sent),
            out_of_order: 0,
        }
    }

    fn total(end: u64, holes: &[(u64, u64)]) -> Total {
        Total {
            id: "c".into(),
            value: 0,
            adds: 0,
            duplicates: 0,
            out_of_order: 0,
            rid: String::new(),
            lifecycle: 0,
            end,
            holes: holes
                .iter()
                .map(|&(first, last)| crate::refapp::seq::SeqRange { first, last })
                .collect(),
        }
    }

    #[test]
    fn a_rooms_run_addresses_players_then_rooms_and_says_in_rooms_only() {
        let t = Targets {
            prefix: "x".into(),
            counters: 0,
            rooms: Some(RoomsConfig {
                rooms: 2,
                players_per_room: 3,
            }),
        };
        assert_eq!(t.len(), 8);
        let ids: Vec<String> = (0..t.len()).map(|i| t.id(i)).collect();
        assert_eq!(
            ids,
            [
                "x-p0", "x-p1", "x-p2", "x-p3", "x-p4", "x-p5", "x-r0", "x-r1"
            ]
        );
        assert_eq!(t.kind(4), Target::Player { room: 1 });
        assert_eq!(t.kind(6), Target::Room);
        // Pipelined: every third message a request; closed loop: all requests; rooms: Say.
        let kinds = |closed| {
            (0..3)
                .map(|j| t.op(0, j, 3, closed).kind)
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(false), [OpKind::Send, OpKind::Send, OpKind::Request]);
        assert_eq!(kinds(true), [OpKind::Request; 3]);
        assert_eq!(t.op(7, 0, 3, false).kind, OpKind::Say);
        let counters = Targets {
            rooms: None,
            counters: 2,
            ..t
        };
        assert_eq!((counters.len(), counters.id(1)), (2, "x-1".to_owned()));
    }

    #[test]
    fn a_number_is_applied_when_below_the_end_and_in_no_hole() {
        let t = total(10, &[(2, 3), (7, 7)]);
        let got: Vec<u64> = (0..12).filter(|&n| applied(&t, n)).collect();
        assert_eq!(got, vec![0, 1, 4, 5, 6, 8, 9]);
        assert!(!applied(&total(0, &[]), 0));
    }

    #[test]
    fn a_clean_run_has_no_failures_and_each_defect_is_named_per_id() {
        assert!(report(vec![id("a", 5, 5, 0)], 0).failures().is_empty());
        let f = report(vec![id("a", 5, 4, 0), id("b", 5, 5, 1)], 0).failures();
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("a missing 1"), "{f:?}");
        assert!(f[1].contains("b duplicates 1"), "{f:?}");
        assert_eq!(report(vec![], 2).failures().len(), 1);
        let f = report(vec![id("c", 3, 4, 0)], 0).failures();
        assert!(f[0].contains("c duplicates 0 unexpected 1"), "{f:?}");
        // Out of order: reported for a pipelined run, a failure in a closed loop.
        let mut reordered = id("d", 5, 5, 0);
        reordered.out_of_order = 2;
        let mut r = report(vec![reordered], 0);
        assert!(r.failures().is_empty());
        r.closed_loop = true;
        let f = r.failures();
        assert!(f.len() == 1 && f[0].contains("d out of order 2"), "{f:?}");
    }
}
