//! `zlink-node demo` as a library (issue "node host" §5): a mesh of MeshNodes in one process
//! running the [reference application](crate::refapp), driven through every node by global ID
//! only, with a per-ID exactly-once check at the end.
//!
//! What [`run`] does:
//!
//! 1. Starts `nodes` MeshNodes on 127.0.0.1 (ephemeral ports) sharing one Location Store — the
//!    embedded memory store, or Redis — each with an object runtime, the `lobby` Entry Spot and
//!    the reference application's capabilities, and waits until every node sees every other
//!    one ready and `Serving` (placement only considers `Serving` nodes; glossary §5).
//! 2. Creates the `room` User Spots from the first node (placed by weight across all nodes,
//!    remote create 47) and `players_per_room` `player` Actors in each room from all nodes in
//!    turn (`create_actor_in`: placed on the room's node, member of the room, wire §7), then
//!    joins each player to its room's member list.
//! 3. Drives the traffic of [`plan`]: every node sends numbered `Deliver` messages and
//!    `DeliverRequest`s to players and `Say` lines to rooms, addressing only global IDs (the
//!    route cache resolves owners; routing `000_…` §2), with at most `concurrency` calls in
//!    flight per node. A room broadcasts each line to its members as a numbered message of its
//!    own stream. With [`DemoConfig::relocate_node`] (the default: node 0), once half of the
//!    traffic is done every object of that node moves live to the others (`PlannedMaintenance`;
//!    a room and its players are one unit, committed together) while the traffic goes on.
//! 4. Asks every player and room for its per-source report against the plan's expectation.
//!    One-way sends complete at source-local admission, so the check waits (up to
//!    `settle_timeout`) for the last ones to land before it calls a number missing.
//! 5. Shuts every runtime and node down gracefully and returns a [`DemoReport`]: sent and
//!    delivered counts, request latency p50/p99, route-cache hit rate, per-node object counts,
//!    gaps, duplicates and elapsed time. [`DemoReport::failures`] lists why a run did not pass.
//!
//! Object IDs carry a random run tag (`<tag>-room-3`, `<tag>-room-3-p7`), so runs against one
//! Redis never meet each other's records. Records of a run stay in Redis until their owner's
//! lease lapses (see `docs/architecture.md`, "Owner loss and fenced cleanup").

pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use thiserror::Error;
use zlink::object::ObjectCalls;
use zlink::object::runtime::ObjectStore;
use zlink_store::clock::SystemClock;

use crate::refapp::messages::{
    Ack, Deliver, DeliverRequest, Heard, Join, Joined, PlayerReport, ReportRequest, RoomReport, Say,
};
use crate::refapp::seq::SourceReport;
use crate::refapp::{self, PLAYER, ROOM, RefAppConfig};
use plan::{Op, OpKind, Shape, quantile, source_name};
use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::config::{MeshTimings, RidConfig};
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, MeshNode, MeshNodeConfig, PeerState};
use zlink::object::runtime::ObjectRuntime;
use zlink::routing::CacheConfig;

/// Problem IDs (and error texts) listed in a report at most.
pub const PROBLEM_LIMIT: usize = 16;

/// Which Location Store the demo's nodes share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoStore {
    /// The embedded memory store (the default).
    Memory,
    /// A Redis server.
    Redis {
        /// `redis://host:port[/db]`.
        url: String,
        /// Key namespace (every key is `zl:{<namespace>}:…`).
        namespace: String,
    },
}

/// Settings of one demo run; [`DemoConfig::default`] is the `zlink-node demo` default.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// MeshNodes in the process (1..=16).
    pub nodes: usize,
    /// Room User Spots (≥ 1).
    pub rooms: usize,
    /// Player Actors per room (≥ 1).
    pub players_per_room: usize,
    /// Numbered messages to each player.
    pub messages_per_player: u64,
    /// Lines said in each room (each broadcast to all its members).
    pub lines_per_room: u64,
    /// Every n-th message to a player is a request, the rest one-way sends (0: sends only).
    pub request_every: u64,
    /// Calls in flight per node (≥ 1).
    pub concurrency: usize,
    /// The Location Store.
    pub store: DemoStore,
    /// The MeshName of the demo mesh.
    pub mesh_name: String,
    /// Mesh timings (spec defaults, with a 100 ms discovery poll so the mesh forms fast).
    pub timings: MeshTimings,
    /// Route-cache settings (spec defaults).
    pub cache: CacheConfig,
    /// Reference application settings.
    pub app: RefAppConfig,
    /// Deadline of every request.
    pub request_timeout: Duration,
    /// How long the mesh may take to form.
    pub ready_timeout: Duration,
    /// How long the check waits for one-way sends to land before it reports them missing.
    pub settle_timeout: Duration,
    /// Live relocation mid-run (issue 17): once half of the traffic is done, every object of
    /// this node — its rooms with their players — moves to the other nodes while the traffic
    /// goes on (`PlannedMaintenance`). `None`: nothing moves.
    pub relocate_node: Option<usize>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            rooms: 50,
            players_per_room: 10,
            messages_per_player: 60,
            lines_per_room: 20,
            request_every: 2,
            concurrency: 64,
            store: DemoStore::Memory,
            mesh_name: "demo".into(),
            timings: MeshTimings {
                discovery_poll: Duration::from_millis(100),
                ..MeshTimings::default()
            },
            cache: CacheConfig::default(),
            app: RefAppConfig::default(),
            request_timeout: Duration::from_secs(10),
            ready_timeout: Duration::from_secs(15),
            settle_timeout: Duration::from_secs(10),
            relocate_node: Some(0),
        }
    }
}

/// A demo could not run.
#[derive(Debug, Error)]
pub enum DemoError {
    /// A setting is out of range.
    #[error("demo setting {field}: {reason}")]
    Config {
        /// The field.
        field: &'static str,
        /// What is allowed.
        reason: String,
    },
    /// The Location Store could not be opened.
    #[error("location store: {0}")]
    Store(#[from] zlink_store::StoreError),
    /// A MeshNode did not start.
    #[error("mesh node {index}: {source}")]
    Node {
        /// Which node.
        index: usize,
        /// Why.
        source: zlink::mesh::MeshError,
    },
    /// An object runtime did not start.
    #[error("object runtime {index}: {source}")]
    Runtime {
        /// Which node.
        index: usize,
        /// Why.
        source: zlink::object::runtime::RuntimeError,
    },
    /// The mesh did not form, or a setup call (creation, join, report) failed.
    #[error("{stage}: {source}")]
    Call {
        /// What the demo was doing.
        stage: &'static str,
        /// The error.
        source: CallError,
    },
}

impl DemoConfig {
    /// Check every field's range.
    ///
    /// # Errors
    /// [`DemoError::Config`] naming the first bad field.
    pub fn validate(&self) -> Result<(), DemoError> {
        let bad = |field, reason: &str| {
            Err(DemoError::Config {
                field,
                reason: reason.to_owned(),
            })
        };
        if !(1..=16).contains(&self.nodes) {
            return bad("nodes", "must be 1..=16");
        }
        if self.rooms == 0 {
            return bad("rooms", "must be at least 1");
        }
        if self.players_per_room == 0 {
            return bad("players_per_room", "must be at least 1");
        }
        if self.concurrency == 0 {
            return bad("concurrency", "must be at least 1");
        }
        if self.rooms.saturating_mul(self.players_per_room) > 1_000_000 {
            return bad(
                "rooms × players_per_room",
                "must be at most 1,000,000 objects",
            );
        }
        if self.app.chat_log_limit == 0 {
            return bad("chat_log_limit", "must be at least 1");
        }
        if self.app.room_tick.is_zero() {
            return bad("room_tick", "must be positive");
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout", "must be positive");
        }
        if let Some(k) = self.relocate_node {
            if k >= self.nodes {
                return bad("relocate_node", "must name one of the nodes (0-based)");
            }
            if self.nodes < 2 {
                return bad(
                    "relocate_node",
                    "a relocation needs another node to move to (use at least 2 nodes, or \
                     no relocation)",
                );
            }
        }
        Ok(())
    }

    fn shape(&self) -> Shape {
        Shape {
            nodes: self.nodes,
            rooms: self.rooms,
            players: self.rooms * self.players_per_room,
            messages_per_player: self.messages_per_player,
            lines_per_room: self.lines_per_room,
            request_every: self.request_every,
        }
    }
}

/// The phase a run is in, for progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Starting nodes and forming the mesh.
    Starting,
    /// Creating rooms and players.
    Creating,
    /// Driving numbered traffic.
    Traffic,
    /// Collecting and checking reports.
    Verifying,
    /// Shutting down.
    ShuttingDown,
}

impl Phase {
    /// A short label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Creating => "creating",
            Self::Traffic => "traffic",
            Self::Verifying => "verifying",
            Self::ShuttingDown => "shutdown",
        }
    }
}

/// One progress update: `done` of `total` steps of `phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The phase.
    pub phase: Phase,
    /// Steps done.
    pub done: u64,
    /// Steps in the phase.
    pub total: u64,
}

/// One node's share of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSummary {
    /// The node's RID.
    pub rid: String,
    /// Objects live on it at the end (its Entry Spot included).
    pub objects: usize,
    /// Calls it served without the mesh.
    pub local_calls: u64,
    /// Calls it sent to another owner over the mesh.
    pub remote_calls: u64,
    /// Route-cache hits of its resolver.
    pub cache_hits: u64,
    /// Route-cache misses of its resolver.
    pub cache_misses: u64,
}

/// The mid-run relocation (see [`DemoConfig::relocate_node`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelocationSummary {
    /// The node whose objects moved (0-based).
    pub node: usize,
    /// Traffic operations done when it started.
    pub started_after_ops: u64,
    /// Units it moved or tried to (a room with its players is one).
    pub units: usize,
    /// Objects in those units.
    pub objects: usize,
    /// Units handed over to another node.
    pub handed_over: usize,
    /// The first units that did not move, as `<id>: <outcome> <detail>`.
    pub not_moved: Vec<String>,
    /// From its start until every unit's outcome was known.
    pub elapsed: Duration,
}

/// What a run did and found.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    /// Per node, in start order.
    pub nodes: Vec<NodeSummary>,
    /// Rooms created.
    pub rooms: usize,
    /// Players created.
    pub players: usize,
    /// Objects there should be: rooms + players + one Entry Spot per node.
    pub expected_objects: usize,
    /// Messages the load generator sent successfully (sends, requests, lines).
    pub driver_sent: u64,
    /// Messages the rooms broadcast to their members.
    pub broadcasts: u64,
    /// Load-generator calls that failed (each is a failure of the run).
    pub failed_calls: u64,
    /// The first failures' texts.
    pub errors: Vec<String>,
    /// Distinct numbered messages the receivers recorded.
    pub delivered: u64,
    /// Messages never received, over all IDs and sources.
    pub gaps: u64,
    /// Duplicate arrivals, over all IDs and sources.
    pub duplicates: u64,
    /// Received numbers nobody sent (as far as the plan knows).
    pub unexpected: u64,
    /// The first IDs whose report was not clean, with their dirty source reports.
    pub problems: Vec<(String, Vec<SourceReport>)>,
    /// Requests timed (player requests and room lines).
    pub requests: u64,
    /// Request latency, median.
    pub latency_p50: Duration,
    /// Request latency, 99th percentile.
    pub latency_p99: Duration,
    /// Request latency, maximum.
    pub latency_max: Duration,
    /// Housekeeping ticks over all rooms.
    pub room_ticks: u64,
    /// The whole run, start to shutdown.
    pub elapsed: Duration,
    /// The traffic phase alone.
    pub traffic_elapsed: Duration,
    /// The mid-run relocation, when one ran.
    pub relocation: Option<RelocationSummary>,
}

impl DemoReport {
    /// Messages sent: the load generator's plus the rooms' broadcasts.
    pub fn sent(&self) -> u64 {
        self.driver_sent + self.broadcasts
    }

    /// Route-cache hits over all nodes.
    pub fn cache_hits(&self) -> u64 {
        self.nodes.iter().map(|n| n.cache_hits).sum()
    }

    /// Route-cache lookups over all nodes.
    pub fn cache_lookups(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.cache_hits + n.cache_misses)
            .sum()
    }

    /// Hits / lookups (0 without lookups).
    pub fn cache_hit_rate(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        match self.cache_lookups() {
            0 => 0.0,
            n => self.cache_hits() as f64 / n as f64,
        }
    }

    /// Objects live over all nodes.
    pub fn live_objects(&self) -> usize {
        self.nodes.iter().map(|n| n.objects).sum()
    }

    /// Why the run did not pass (empty: it passed).
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.failed_calls > 0 {
            out.push(format!(
                "{} load-generator call(s) failed",
                self.failed_calls
            ));
        }
        if self.gaps > 0 {
            out.push(format!("{} message(s) missing (per-ID gaps)", self.gaps));
        }
        if self.duplicates > 0 {
            out.push(format!("{} duplicate delivery(ies)", self.duplicates));
        }
        if self.unexpected > 0 {
            out.push(format!(
                "{} message(s) received that were never sent",
                self.unexpected
            ));
        }
        if self.sent() != self.delivered {
            out.push(format!(
                "sent {} but delivered {}",
                self.sent(),
                self.delivered
            ));
        }
        if let Some(r) = &self.relocation
            && r.handed_over < r.units
        {
            out.push(format!(
                "relocation of node {}: {} of {} unit(s) did not move ({})",
                r.node,
                r.units - r.handed_over,
                r.units,
                r.not_moved.join("; ")
            ));
        }
        if self.live_objects() != self.expected_objects {
            out.push(format!(
                "{} objects live over all nodes, expected {}",
                self.live_objects(),
                self.expected_objects
            ));
        }
        out
    }

    /// No failure.
    pub fn passed(&self) -> bool {
        self.failures().is_empty()
    }
}

/// Run the demo: see the module docs. `progress` is called on phase changes and as steps
/// complete (from several tasks; keep it cheap).
///
/// # Errors
/// [`DemoError`] when the run could not be set up (bad settings, store, a node or runtime that
/// did not start, the mesh not forming, a creation that failed). Problems found by the traffic
/// and the check are not errors: they are in the report ([`DemoReport::failures`]).
pub async fn run(
    cfg: DemoConfig,
    progress: impl Fn(Progress) + Send + Sync + 'static,
) -> Result<DemoReport, DemoError> {
    cfg.validate()?;
    let progress: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(progress);
    match cfg.store.clone() {
        DemoStore::Memory => {
            let store = Arc::new(zlink_store::MemoryStore::new(SystemClock));
            run_on(cfg, store, progress).await
        }
        DemoStore::Redis { url, namespace } => {
            let store = zlink_store::redis::RedisStore::connect(
                &url,
                zlink_store::redis::RedisStoreConfig {
                    namespace,
                    ..zlink_store::redis::RedisStoreConfig::default()
                },
            )
            .await?;
            run_on(cfg, Arc::new(store), progress).await
        }
    }
}

type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

struct Mesh<S: ObjectStore> {
    nodes: Vec<Arc<MeshNode>>,
    rts: Vec<Arc<ObjectRuntime<S>>>,
}

impl<S: ObjectStore> Mesh<S> {
    async fn shutdown(&self) {
        for rt in &self.rts {
            rt.shutdown().await;
        }
        for n in &self.nodes {
            n.shutdown().await;
        }
    }
}

async fn run_on<S: ObjectStore>(
    cfg: DemoConfig,
    store: Arc<S>,
    progress: ProgressFn,
) -> Result<DemoReport, DemoError> {
    let started = Instant::now();
    progress(Progress {
        phase: Phase::Starting,
        done: 0,
        total: cfg.nodes as u64,
    });
    let mut mesh = Mesh {
        nodes: Vec::new(),
        rts: Vec::new(),
    };
    let formed = form(&cfg, &store, &mut mesh, &progress).await;
    let outcome = match formed {
        Ok(()) => drive(&cfg, &mesh, &progress).await,
        Err(e) => Err(e),
    };
    // Counted before shutdown closes the objects.
    let nodes: Vec<NodeSummary> = mesh
        .nodes
        .iter()
        .zip(&mesh.rts)
        .map(|(n, rt)| {
            let cache = rt.resolver().cache().stats();
            NodeSummary {
                rid: n.rid().to_owned(),
                objects: rt.live_count(),
                local_calls: rt.stats().local_calls.load(Ordering::Relaxed),
                remote_calls: rt.stats().remote_calls.load(Ordering::Relaxed),
                cache_hits: cache.hits,
                cache_misses: cache.misses,
            }
        })
        .collect();
    progress(Progress {
        phase: Phase::ShuttingDown,
        done: 0,
        total: 1,
    });
    mesh.shutdown().await;
    progress(Progress {
        phase: Phase::ShuttingDown,
        done: 1,
        total: 1,
    });
    let mut report = outcome?;
    report.nodes = nodes;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Start the nodes and runtimes into `mesh` (so a failure half-way still shuts down what
/// started) and wait until every node sees every other one ready and Serving.
async fn form<S: ObjectStore>(
    cfg: &DemoConfig,
    store: &Arc<S>,
    mesh: &mut Mesh<S>,
    progress: &ProgressFn,
) -> Result<(), DemoError> {
    // A fresh secret per run: the demo mesh admits only its own nodes.
    let random = zlink::mesh::auth::random_bytes::<32>().map_err(|_| DemoError::Config {
        field: "mesh secret",
        reason: "no randomness available".into(),
    })?;
    let secret = MeshSecret::from_bytes(zlink_protocol::codec::hex::encode(&random).as_bytes())
        .map_err(|e| DemoError::Config {
            field: "mesh secret",
            reason: e.to_string(),
        })?;
    let capabilities = refapp::registry(&cfg.app).capabilities();
    for index in 0..cfg.nodes {
        let mut c = MeshNodeConfig::new(cfg.mesh_name.clone(), secret.clone());
        c.rid = RidConfig::Automatic {
            prefix: format!("demo{index}"),
        };
        c.timings = cfg.timings.clone();
        c.object_capabilities.clone_from(&capabilities);
        c.entry_spot_prefix = Some(format!("demo{index}"));
        let backend = Arc::clone(store) as Arc<dyn DiscoveryBackend>;
        let node = MeshNode::start(c, Handlers::new(), Some(backend))
            .await
            .map_err(|source| DemoError::Node { index, source })?;
        let node = Arc::new(node);
        mesh.nodes.push(Arc::clone(&node));
        let rt = ObjectRuntime::start(
            node,
            Arc::clone(store),
            refapp::registry(&cfg.app),
            cfg.cache,
        )
        .await
        .map_err(|source| DemoError::Runtime { index, source })?;
        mesh.rts.push(Arc::new(rt));
        progress(Progress {
            phase: Phase::Starting,
            done: index as u64 + 1,
            total: cfg.nodes as u64,
        });
    }
    for a in &mesh.nodes {
        for b in &mesh.nodes {
            if a.rid() == b.rid() {
                continue;
            }
            a.wait_peer(b.rid(), cfg.ready_timeout, |s| {
                s.state == PeerState::Ready
                    && s.descriptor.as_ref().is_some_and(|d| {
                        d.state == zlink_protocol::generated::RuntimeState::Serving
                    })
            })
            .await
            .map_err(|source| DemoError::Call {
                stage: "forming the mesh",
                source,
            })?;
        }
    }
    Ok(())
}

fn room_id(tag: &str, r: usize) -> String {
    format!("{tag}-room-{r}")
}

fn player_id(tag: &str, players_per_room: usize, p: usize) -> String {
    format!(
        "{tag}-room-{}-p{}",
        p / players_per_room,
        p % players_per_room
    )
}

/// Counts of the traffic phase, shared by the per-node tasks.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    failed: AtomicU64,
    done: AtomicU64,
    /// Acknowledged lines per room.
    lines: std::sync::Mutex<BTreeMap<usize, u64>>,
    errors: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn fail(&self, what: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut e = self
            .errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if e.len() < PROBLEM_LIMIT {
            e.push(what);
        }
    }
}

async fn drive<S: ObjectStore>(
    cfg: &DemoConfig,
    mesh: &Mesh<S>,
    progress: &ProgressFn,
) -> Result<DemoReport, DemoError> {
    let tag = run_tag()?;
    let shape = cfg.shape();
    let ppr = cfg.players_per_room;
    let n = mesh.rts.len();
    let rooms: Vec<String> = (0..cfg.rooms).map(|r| room_id(&tag, r)).collect();
    let players: Vec<String> = (0..shape.players)
        .map(|p| player_id(&tag, ppr, p))
        .collect();
    let setup_total = (rooms.len() + 2 * players.len()) as u64;
    let step = AtomicU64::new(0);
    let tick = |phase, total| {
        let done = step.fetch_add(1, Ordering::Relaxed) + 1;
        progress(Progress { phase, done, total });
    };
    progress(Progress {
        phase: Phase::Creating,
        done: 0,
        total: setup_total,
    });
    // Rooms from the first node: its weighted selector rotates over every Serving node, so
    // the rooms spread evenly (each node's selector starts at the same candidate, so rooms
    // created from every node in turn would pile up on one node in a small run). Then the
    // players from every node in turn (each placed on its room's node), then the joins.
    let limit = cfg.concurrency * n;
    stage(
        "creating rooms",
        rooms.iter().map(|id| {
            let rt = &mesh.rts[0];
            async move { rt.create_user_spot(ROOM, id, None).await.map(drop) }
        }),
        limit,
        || tick(Phase::Creating, setup_total),
    )
    .await?;
    stage(
        "creating players",
        players.iter().enumerate().map(|(p, id)| {
            let rt = &mesh.rts[p % n];
            let room = &rooms[p / ppr];
            async move { rt.create_actor_in(PLAYER, id, room, None).await.map(drop) }
        }),
        limit,
        || tick(Phase::Creating, setup_total),
    )
    .await?;
    stage(
        "joining rooms",
        players.iter().enumerate().map(|(p, id)| {
            let rt = &mesh.rts[p % n];
            let room = &rooms[p / ppr];
            let join = Join { player: id.clone() };
            async move {
                rt.request_to_spot::<_, Joined>(room, &join, cfg.request_timeout)
                    .await
                    .map(drop)
            }
        }),
        limit,
        || tick(Phase::Creating, setup_total),
    )
    .await?;

    // Traffic: one task per node, each with at most `concurrency` calls in flight.
    let total = shape.total_ops();
    progress(Progress {
        phase: Phase::Traffic,
        done: 0,
        total,
    });
    let tally = Arc::new(Tally::default());
    let rooms = Arc::new(rooms);
    let players = Arc::new(players);
    let traffic_started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, ops) in shape.ops().into_iter().enumerate() {
        let rt = Arc::clone(&mesh.rts[i]);
        let tally = Arc::clone(&tally);
        let rooms = Arc::clone(&rooms);
        let players = Arc::clone(&players);
        let progress = Arc::clone(progress);
        let (timeout, concurrency) = (cfg.request_timeout, cfg.concurrency);
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut calls = futures::stream::iter(ops)
                .map(|op| {
                    let rt = &rt;
                    let target = match op.kind {
                        OpKind::Say => rooms[op.target].clone(),
                        OpKind::Send | OpKind::Request => players[op.target].clone(),
                    };
                    async move {
                        let t = Instant::now();
                        let r = one_op(rt, &target, op, timeout).await;
                        (op, target, r, t.elapsed())
                    }
                })
                .buffer_unordered(concurrency);
            while let Some((op, target, r, took)) = calls.next().await {
                match r {
                    Ok(timed) => {
                        tally.sent.fetch_add(1, Ordering::Relaxed);
                        if timed {
                            latencies.push(took);
                        }
                        if op.kind == OpKind::Say {
                            *tally
                                .lines
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .entry(op.target)
                                .or_insert(0) += 1;
                        }
                    }
                    Err(e) => tally.fail(format!(
                        "{:?} #{} from {} to {target}: {e}",
                        op.kind,
                        op.seq,
                        source_name(op.node)
                    )),
                }
                let done = tally.done.fetch_add(1, Ordering::Relaxed) + 1;
                progress(Progress {
                    phase: Phase::Traffic,
                    done,
                    total,
                });
            }
            latencies
        });
    }
    // Live relocation mid-run: once half of the traffic is done, every object of one node
    // moves to the others while the traffic goes on.
    let relocation = cfg.relocate_node.map(|k| {
        let rt = Arc::clone(&mesh.rts[k]);
        let tally = Arc::clone(&tally);
        tokio::spawn(async move {
            while tally.done.load(Ordering::Relaxed) < total / 2 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let started_after_ops = tally.done.load(Ordering::Relaxed);
            let t = Instant::now();
            rt.set_relocating(true);
            let reports = rt
                .relocate(&zlink::object::runtime::RelocatePlan::default())
                .await;
            let handed_over = reports
                .iter()
                .filter(|u| u.outcome == zlink::relocation::host::UnitOutcome::HandedOver)
                .count();
            let not_moved = reports
                .iter()
                .filter(|u| u.outcome != zlink::relocation::host::UnitOutcome::HandedOver)
                .take(PROBLEM_LIMIT)
                .map(|u| match &u.outcome {
                    zlink::relocation::host::UnitOutcome::Failed(why) => {
                        format!("{}: failed {why}", u.id)
                    }
                    o => format!("{}: {}", u.id, o.name()),
                })
                .collect();
            RelocationSummary {
                node: k,
                started_after_ops,
                units: reports.len(),
                objects: reports.iter().map(|u| 1 + u.members.len()).sum(),
                handed_over,
                not_moved,
                elapsed: t.elapsed(),
            }
        })
    });
    let mut latencies = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(l) => latencies.extend(l),
            Err(e) => tally.fail(format!("a traffic task ended abnormally: {e}")),
        }
    }
    let traffic_elapsed = traffic_started.elapsed();
    latencies.sort_unstable();
    let relocation = match relocation {
        Some(task) => match task.await {
            Ok(r) => Some(r),
            Err(e) => {
                tally.fail(format!("the relocation task ended abnormally: {e}"));
                None
            }
        },
        None => None,
    };

    // The check: every player and room against the plan.
    let lines = tally
        .lines
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let check = Check {
        cfg,
        mesh,
        shape: &shape,
        rooms: &rooms,
        players: &players,
        lines: &lines,
        progress,
    };
    let verified = check.run().await?;
    let errors = tally
        .errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    Ok(DemoReport {
        nodes: Vec::new(),
        rooms: rooms.len(),
        players: players.len(),
        expected_objects: rooms.len() + players.len() + n,
        driver_sent: tally.sent.load(Ordering::Relaxed),
        broadcasts: verified.broadcasts,
        failed_calls: tally.failed.load(Ordering::Relaxed),
        errors,
        delivered: verified.delivered,
        gaps: verified.gaps,
        duplicates: verified.duplicates,
        unexpected: verified.unexpected,
        problems: verified.problems,
        requests: latencies.len() as u64,
        latency_p50: quantile(&latencies, 0.50),
        latency_p99: quantile(&latencies, 0.99),
        latency_max: latencies.last().copied().unwrap_or_default(),
        room_ticks: verified.ticks,
        elapsed: Duration::ZERO,
        traffic_elapsed,
        relocation,
    })
}

/// A random tag that keeps the IDs of one run apart from any other run's.
fn run_tag() -> Result<String, DemoError> {
    let b = zlink::mesh::auth::random_bytes::<4>().map_err(|_| DemoError::Config {
        field: "run tag",
        reason: "no randomness available".into(),
    })?;
    Ok(format!("d{}", zlink_protocol::codec::hex::encode(&b)))
}

/// Run setup calls with at most `limit` in flight; the first failure ends the stage.
async fn stage<F>(
    name: &'static str,
    calls: impl Iterator<Item = F>,
    limit: usize,
    on_done: impl Fn(),
) -> Result<(), DemoError>
where
    F: std::future::Future<Output = Result<(), CallError>>,
{
    let mut s = futures::stream::iter(calls).buffer_unordered(limit.max(1));
    while let Some(r) = s.next().await {
        r.map_err(|source| DemoError::Call {
            stage: name,
            source,
        })?;
        on_done();
    }
    Ok(())
}

/// One planned call; `Ok(true)` when it was a timed request.
async fn one_op<S: ObjectStore>(
    rt: &ObjectRuntime<S>,
    target: &str,
    op: Op,
    timeout: Duration,
) -> Result<bool, CallError> {
    let source = source_name(op.node);
    let item = Some(format!("item-{}", op.seq % 5));
    match op.kind {
        OpKind::Send => {
            rt.send_to_actor(
                target,
                &Deliver {
                    source,
                    seq: op.seq,
                    item,
                },
            )
            .await?;
            Ok(false)
        }
        OpKind::Request => {
            let ack: Ack = rt
                .request_to_actor(
                    target,
                    &DeliverRequest {
                        source,
                        seq: op.seq,
                        item,
                    },
                    timeout,
                )
                .await?;
            duplicate_is_an_error(ack.duplicate, target, op)?;
            Ok(true)
        }
        OpKind::Say => {
            let heard: Heard = rt
                .request_to_spot(
                    target,
                    &Say {
                        source,
                        seq: op.seq,
                        text: format!("line {}", op.seq),
                    },
                    timeout,
                )
                .await?;
            duplicate_is_an_error(heard.duplicate, target, op)?;
            Ok(true)
        }
    }
}

fn duplicate_is_an_error(duplicate: bool, target: &str, op: Op) -> Result<(), CallError> {
    if duplicate {
        // The receiver's report counts it too; this makes the call itself visible.
        return Err(CallError::new(
            zlink::call::error::ErrorKind::Conflict,
            format!("{target} had already seen #{} of this source", op.seq),
        ));
    }
    Ok(())
}

struct Check<'a, S: ObjectStore> {
    cfg: &'a DemoConfig,
    mesh: &'a Mesh<S>,
    shape: &'a Shape,
    rooms: &'a [String],
    players: &'a [String],
    lines: &'a BTreeMap<usize, u64>,
    progress: &'a ProgressFn,
}

#[derive(Default)]
struct Verified {
    delivered: u64,
    broadcasts: u64,
    gaps: u64,
    duplicates: u64,
    unexpected: u64,
    ticks: u64,
    problems: Vec<(String, Vec<SourceReport>)>,
}

impl<S: ObjectStore> Check<'_, S> {
    /// What player `p` must have received: each node's stream, and its room's broadcasts (one
    /// per acknowledged line).
    fn player_expected(&self, p: usize) -> BTreeMap<String, u64> {
        let mut e = self
            .shape
            .expected_from_nodes(p, self.shape.messages_per_player);
        let r = p / self.cfg.players_per_room;
        let lines = self.lines.get(&r).copied().unwrap_or(0);
        if lines > 0 {
            e.insert(self.rooms[r].clone(), lines);
        }
        e
    }

    async fn run(&self) -> Result<Verified, DemoError> {
        let n = self.mesh.rts.len();
        let total = (self.rooms.len() + self.players.len()) as u64;
        let done = AtomicU64::new(0);
        let mut v = Verified::default();
        let limit = self.cfg.concurrency * n;
        (self.progress)(Progress {
            phase: Phase::Verifying,
            done: 0,
            total,
        });
        // Rooms: every line is acknowledged after its broadcast, so their reports are final.
        let mut reports = futures::stream::iter(self.rooms.iter().enumerate())
            .map(|(r, id)| {
                let rt = &self.mesh.rts[r % n];
                let expected = self.shape.expected_from_nodes(r, self.shape.lines_per_room);
                async move {
                    rt.request_to_spot::<_, RoomReport>(
                        id,
                        &ReportRequest {
                            expected: Some(expected),
                        },
                        self.cfg.request_timeout,
                    )
                    .await
                }
            })
            .buffer_unordered(limit);
        while let Some(r) = reports.next().await {
            let r = r.map_err(|source| DemoError::Call {
                stage: "room report",
                source,
            })?;
            v.broadcasts += r.broadcasts;
            v.ticks += r.ticks;
            v.add(&r.room, r.sources);
            (self.progress)(Progress {
                phase: Phase::Verifying,
                done: done.fetch_add(1, Ordering::Relaxed) + 1,
                total,
            });
        }
        drop(reports);
        // Players: one-way sends may still be landing; ask again until clean or settled.
        let settle = tokio::time::Instant::now() + self.cfg.settle_timeout;
        let mut pending: Vec<usize> = (0..self.players.len()).collect();
        let mut last: BTreeMap<usize, PlayerReport> = BTreeMap::new();
        loop {
            let mut asked = futures::stream::iter(pending.iter().copied())
                .map(|p| {
                    let rt = &self.mesh.rts[p % n];
                    let expected = self.player_expected(p);
                    async move {
                        let r = rt
                            .request_to_actor::<_, PlayerReport>(
                                &self.players[p],
                                &ReportRequest {
                                    expected: Some(expected),
                                },
                                self.cfg.request_timeout,
                            )
                            .await;
                        (p, r)
                    }
                })
                .buffer_unordered(limit);
            let mut still = Vec::new();
            while let Some((p, r)) = asked.next().await {
                let r = r.map_err(|source| DemoError::Call {
                    stage: "player report",
                    source,
                })?;
                // Only missing numbers can still change by waiting.
                if r.sources.iter().any(|s| s.missing > 0) {
                    still.push(p);
                } else {
                    (self.progress)(Progress {
                        phase: Phase::Verifying,
                        done: done.fetch_add(1, Ordering::Relaxed) + 1,
                        total,
                    });
                }
                last.insert(p, r);
            }
            drop(asked);
            if still.is_empty() || tokio::time::Instant::now() >= settle {
                break;
            }
            still.sort_unstable();
            pending = still;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for r in last.into_values() {
            v.add(&r.player, r.sources);
        }
        Ok(v)
    }
}

impl Verified {
    fn add(&mut self, id: &str, sources: Vec<SourceReport>) {
        let mut dirty = Vec::new();
        for s in sources {
            self.delivered += s.distinct.saturating_sub(s.unexpected);
            self.gaps += s.missing;
            self.duplicates += s.duplicates;
            self.unexpected += s.unexpected;
            if !s.is_clean() {
                dirty.push(s);
            }
        }
        if !dirty.is_empty() && self.problems.len() < PROBLEM_LIMIT {
            self.problems.push((id.to_owned(), dirty));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean() -> DemoReport {
        DemoReport {
            nodes: vec![NodeSummary {
                rid: "n".into(),
                objects: 4,
                local_calls: 1,
                remote_calls: 1,
                cache_hits: 3,
                cache_misses: 1,
            }],
            rooms: 1,
            players: 2,
            expected_objects: 4,
            driver_sent: 10,
            broadcasts: 4,
            failed_calls: 0,
            errors: vec![],
            delivered: 14,
            gaps: 0,
            duplicates: 0,
            unexpected: 0,
            problems: vec![],
            requests: 5,
            latency_p50: Duration::from_millis(1),
            latency_p99: Duration::from_millis(2),
            latency_max: Duration::from_millis(3),
            room_ticks: 0,
            elapsed: Duration::from_secs(1),
            traffic_elapsed: Duration::from_millis(500),
            relocation: Some(RelocationSummary {
                node: 0,
                started_after_ops: 5,
                units: 1,
                objects: 3,
                handed_over: 1,
                not_moved: vec![],
                elapsed: Duration::from_millis(20),
            }),
        }
    }

    /// The exit status of `zlink-node demo` rests on this: each kind of problem alone fails
    /// the run and is named.
    #[test]
    fn any_gap_duplicate_loss_or_miscount_fails_the_run() {
        assert!(clean().passed());
        assert!((clean().cache_hit_rate() - 0.75).abs() < 1e-9);
        let cases: Vec<(DemoReport, &str)> = vec![
            (
                DemoReport {
                    gaps: 1,
                    delivered: 13,
                    ..clean()
                },
                "missing",
            ),
            (
                DemoReport {
                    duplicates: 1,
                    ..clean()
                },
                "duplicate",
            ),
            (
                DemoReport {
                    unexpected: 1,
                    ..clean()
                },
                "never sent",
            ),
            (
                DemoReport {
                    failed_calls: 1,
                    ..clean()
                },
                "failed",
            ),
            (
                DemoReport {
                    delivered: 13,
                    ..clean()
                },
                "delivered 13",
            ),
            (
                DemoReport {
                    expected_objects: 5,
                    ..clean()
                },
                "objects",
            ),
            (
                DemoReport {
                    relocation: Some(RelocationSummary {
                        handed_over: 0,
                        not_moved: vec!["room-1: stayed_no_target".into()],
                        ..clean().relocation.unwrap()
                    }),
                    ..clean()
                },
                "did not move",
            ),
        ];
        for (r, word) in cases {
            let f = r.failures();
            assert!(!r.passed());
            assert!(f.iter().any(|x| x.contains(word)), "{word}: {f:?}");
        }
    }

    #[test]
    fn settings_out_of_range_name_their_field() {
        assert!(DemoConfig::default().validate().is_ok());
        let field = |c: DemoConfig| match c.validate() {
            Err(DemoError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(DemoConfig {
                nodes: 17,
                ..DemoConfig::default()
            }),
            "nodes"
        );
        assert_eq!(
            field(DemoConfig {
                players_per_room: 0,
                ..DemoConfig::default()
            }),
            "players_per_room"
        );
        assert_eq!(
            field(DemoConfig {
                request_timeout: Duration::ZERO,
                ..DemoConfig::default()
            }),
            "request_timeout"
        );
        for (nodes, k) in [(3, 3), (1, 0)] {
            assert_eq!(
                field(DemoConfig {
                    nodes,
                    relocate_node: Some(k),
                    ..DemoConfig::default()
                }),
                "relocate_node"
            );
        }
        assert!(
            DemoConfig {
                nodes: 1,
                relocate_node: None,
                ..DemoConfig::default()
            }
            .validate()
            .is_ok()
        );
    }
}
