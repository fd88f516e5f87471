//! Live relocation benchmark (issue 17 "Benchmark"): three MeshNodes on 127.0.0.1 sharing an
//! in-process memory Location Store, every ratio against a baseline measured in the same run.
//!
//! ```text
//! scripts/bench-relocation                  # = cargo bench -p zlink --bench relocation
//! ```
//!
//! 1. **Pause** (seal → dispatch on the target, from the runtimes' relocation timelines) of one
//!    Actor with 1 KiB / 64 KiB / 1 MiB of state, moved back and forth between `a` and `b`,
//!    p50 and p99, each ÷ the p50 of a remote-actor request from `c` (64 B). Goal: p99 ≤ 5 ms
//!    at 64 KiB.
//! 2. **Moving 10,000 idle Actors ÷ creating them** (`ZLINK_BENCH_ACTORS`, default 10,000):
//!    the wall time of one `relocate` of `a` against the wall time of creating them on `a`
//!    (64 creations in flight), on fresh nodes per round, both driven from a runtime task (as
//!    a host runs them); the median of the per-round ratios (`ZLINK_BENCH_ROUNDS`, 5) with min
//!    and max. Goal ≤ 2×. Measured on each store of `ZLINK_BENCH_STORE` (`memory,redis`),
//!    each on its own line: the in-process memory store, where the relocation machinery's own
//!    CPU shows, and a real `redis-server` started for it on the same cores, the store a
//!    deployment runs on.
//! 3. **Worst 100 ms throughput ÷ baseline**: `c` runs closed-loop requests (32 in flight) to
//!    200 Actors on `a`; after 1 s `a` relocates all of them to `b`. Completions per 100 ms
//!    window (counted by an OS thread, scaled by each window's real length): the worst window
//!    from the relocation start on ÷ the median window before it; the median of the per-round
//!    ratios (`ZLINK_BENCH_ROUNDS`, 5), each round on fresh nodes in a fresh runtime. Goal ≥ 0.7.
//!
//! Exit status 2 names a missed goal. Every loop is bounded by its count and
//! `ZLINK_BENCH_LIMIT_SECS` (120). Environment: `ZLINK_BENCH_MOVES` (40 moves per size),
//! `ZLINK_BENCH_ACTORS` (10,000), `ZLINK_BENCH_WORKERS` (2), `ZLINK_BENCH_ROUNDS` (5),
//! `ZLINK_BENCH_CONCURRENCY` (256 units in flight in the bulk move), `ZLINK_BENCH_STORE`
//! (`memory,redis`: the bulk phase's stores; `memory` alone when profiling the relocation
//! machinery, or the perf control below covers the redis rounds too), `ZLINK_BENCH_PHASES`
//! (`pause,bulk,throughput`: the parts to run, e.g. `bulk` alone under a profiler).
//! For the throughput phase: `ZLINK_BENCH_MOVE_CONCURRENCY` (8 units at a time),
//! `ZLINK_BENCH_BUSY` (200 Actors), `ZLINK_BENCH_DETAIL=1` (every window, the cores busy in it,
//! the requests slower than 2 ms by start time, the median stage times of a move and the
//! relocation counters of each node) and `ZLINK_BENCH_PERF_CTL=<fifo>` (enables and disables
//! `perf record -D -1 --control fifo:<fifo>` around the move, to profile the move alone (the
//! bulk phase's moves too);
//! `ZLINK_BENCH_PERF_WHAT=before|after` profiles the 500 ms before or after it instead, and
//! `create` the bulk phase's creations),
//! `ZLINK_BENCH_NO_MOVE=1` (the same statistic with nothing moving: its floor),
//! `ZLINK_BENCH_AFTER_MS` (1,000: how long the windows go on after the move) and
//! `ZLINK_BENCH_DISCOVERY_POLL_MS` (the nodes' descriptor poll, 1,000).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // benchmark binary

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, JsonMessage, MeshNode, MeshNodeConfig, RidConfig};
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, JsonState, Registry, Relocation};
use zlink::object::runtime::{ObjectRuntime, ObjectStore, RelocatePlan, TimelineStep};
use zlink::routing::CacheConfig;
use zlink_store::MemoryStore;
use zlink_store::clock::SystemClock;
use zlink_store::redis::{RedisStore, RedisStoreConfig};

const SECRET: &[u8] = b"bench-relocation-secret-012345";

#[derive(serde::Serialize, serde::Deserialize)]
struct Echo {
    b: String,
}
impl JsonMessage for Echo {
    const PACKET_NAME: &'static str = "bench.Echo";
}

/// Grow the Actor's state to `n` bytes.
#[derive(serde::Serialize, serde::Deserialize)]
struct Fill {
    n: usize,
}
impl JsonMessage for Fill {
    const PACKET_NAME: &'static str = "bench.Fill";
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    blob: String,
    calls: u64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.actor(
        "mover",
        |_: FactoryInput| async { Ok(State::default()) },
        || {
            let mut h: ObjectHandlers<State> = ObjectHandlers::new();
            h.on_request(|ctx, e: Echo| async move {
                ctx.state().calls += 1;
                Ok::<_, CallError>(e)
            });
            h.on_request(|ctx, f: Fill| async move {
                ctx.state().blob = "x".repeat(f.n);
                Ok::<_, CallError>(Fill { n: f.n })
            });
            h
        },
    )
    .relocation(Relocation::PreserveWith(Arc::new(JsonState)))
    .register();
    r.entry_spot(
        "entry",
        |_: FactoryInput| async { Ok(()) },
        ObjectHandlers::new,
    )
    .register();
    r
}

async fn node(rid: &str, store: Arc<dyn DiscoveryBackend>, weight: u16) -> Arc<MeshNode> {
    let mut c = MeshNodeConfig::new("bench", MeshSecret::from_bytes(SECRET).unwrap());
    c.rid = RidConfig::Fixed(rid.into());
    c.object_capabilities = registry().capabilities();
    c.entry_spot_prefix = Some(rid.into());
    c.placement_weight = weight;
    if let Ok(ms) = std::env::var("ZLINK_BENCH_DISCOVERY_POLL_MS") {
        c.timings.discovery_poll = Duration::from_millis(ms.parse().unwrap());
    }
    Arc::new(
        MeshNode::start(c, Handlers::new(), Some(store))
            .await
            .unwrap(),
    )
}

struct World<S: ObjectStore = MemoryStore> {
    nodes: Vec<Arc<MeshNode>>,
    rts: Vec<ObjectRuntime<S>>,
}

impl World {
    /// Nodes a, b, c on one in-process memory store: objects are created on `a` (the others
    /// weigh 0 until `open`).
    async fn start() -> Self {
        World::start_on(Arc::new(MemoryStore::new(SystemClock))).await
    }
}

impl<S: ObjectStore + DiscoveryBackend> World<S> {
    /// [`World::start`] on `store`.
    async fn start_on(store: Arc<S>) -> Self {
        let mut nodes = Vec::new();
        for (rid, w) in [("bench-a", 100), ("bench-b", 0), ("bench-c", 0)] {
            nodes.push(node(rid, Arc::clone(&store) as Arc<dyn DiscoveryBackend>, w).await);
        }
        for x in &nodes {
            for y in &nodes {
                if x.rid() != y.rid() {
                    x.wait_ready(y.rid(), Duration::from_secs(10))
                        .await
                        .unwrap();
                }
            }
        }
        let mut rts = Vec::new();
        for n in &nodes {
            rts.push(
                ObjectRuntime::start(
                    Arc::clone(n),
                    Arc::clone(&store),
                    registry(),
                    CacheConfig::default(),
                )
                .await
                .unwrap(),
            );
        }
        Self { nodes, rts }
    }

    /// Give `b` weight (a target needs it) and wait until `a` sees it.
    async fn open(&self) {
        self.nodes[1].set_placement_weight(100).unwrap();
        let t0 = Instant::now();
        while self.nodes[0]
            .peer("bench-b")
            .and_then(|p| p.descriptor)
            .is_none_or(|d| d.placement_weight != 100)
        {
            assert!(t0.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn shutdown(self) {
        for rt in &self.rts {
            rt.shutdown().await;
        }
        for n in &self.nodes {
            n.shutdown().await;
        }
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// p50 (µs) of `n` sequential remote-actor requests from `c` to `id`.
async fn request_p50(w: &World, id: &str, n: usize) -> f64 {
    let mut lat = Vec::with_capacity(n);
    let body = "x".repeat(64);
    for _ in 0..n {
        let t = Instant::now();
        let _: Echo = w.rts[2]
            .request_to_actor(id, &Echo { b: body.clone() }, Duration::from_secs(10))
            .await
            .unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    lat.sort_by(f64::total_cmp);
    quantile(&lat, 0.5)
}

/// Seal → switch of every move in the runtimes' timelines, in µs.
fn pauses(w: &World) -> Vec<f64> {
    let mut sealed: HashMap<[u8; 16], Instant> = HashMap::new();
    let mut switched: HashMap<[u8; 16], Instant> = HashMap::new();
    for rt in &w.rts {
        for e in rt.relocation_timeline() {
            match e.step {
                TimelineStep::Sealed => {
                    sealed.insert(e.relocation_id, e.at);
                }
                TimelineStep::Switched => {
                    switched.insert(e.relocation_id, e.at);
                }
                TimelineStep::Transferred
                | TimelineStep::Ready
                | TimelineStep::ReadySeen
                | TimelineStep::CutoverSeen
                | TimelineStep::Committed => {}
            }
        }
    }
    let mut out: Vec<f64> = sealed
        .iter()
        .filter_map(|(id, s)| {
            switched
                .get(id)
                .map(|d| d.duration_since(*s).as_secs_f64() * 1e6)
        })
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// Nanoseconds on a CPU of all this process's threads so far (Linux schedstat; 0 elsewhere).
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Median µs of sealed → transferred → ready → switched over every move in the timelines.
fn stages(w: &World) -> [f64; 6] {
    let mut at: HashMap<[u8; 16], [Option<Instant>; 7]> = HashMap::new();
    for rt in &w.rts {
        for e in rt.relocation_timeline() {
            let i = match e.step {
                TimelineStep::Sealed => 0,
                TimelineStep::Transferred => 1,
                TimelineStep::Ready => 2,
                TimelineStep::ReadySeen => 3,
                TimelineStep::CutoverSeen => 4,
                TimelineStep::Committed => 5,
                TimelineStep::Switched => 6,
            };
            at.entry(e.relocation_id).or_default()[i] = Some(e.at);
        }
    }
    let mut out = [0.0; 6];
    for (k, o) in out.iter_mut().enumerate() {
        let mut v: Vec<f64> = at
            .values()
            .filter_map(|t| Some(t[k + 1]?.duration_since(t[k]?).as_secs_f64() * 1e6))
            .collect();
        v.sort_by(f64::total_cmp);
        *o = quantile(&v, 0.5);
    }
    out
}

struct Outcome {
    lines: Vec<String>,
    missed: Vec<String>,
}

async fn pause_bench(out: &mut Outcome, moves: usize) {
    for (label, size) in [
        ("1 KiB", 1024),
        ("64 KiB", 64 * 1024),
        ("1 MiB", 1024 * 1024),
    ] {
        // A fresh world per size, so the samples of one size stay apart. Each move takes
        // another Actor (one object moved 8 times within the follow window stays
        // `FollowChainFull`, routing §2.5), chosen as its own unit.
        let w = World::start().await;
        let n = if size >= 1024 * 1024 {
            moves / 2
        } else {
            moves
        }
        .max(2);
        let ids: Vec<String> = (0..n).map(|i| format!("m-{size}-{i}")).collect();
        for id in &ids {
            w.rts[0].create_actor("mover", id, None).await.unwrap();
        }
        w.open().await;
        // The baseline: a remote-actor request from c (64 B), in the same world.
        let _ = request_p50(&w, &ids[0], 200).await;
        let base = request_p50(&w, &ids[0], 1_000).await;
        for id in &ids {
            let _: Fill = w.rts[2]
                .request_to_actor(id, &Fill { n: size }, Duration::from_secs(10))
                .await
                .unwrap();
        }
        let units = w.rts[0].relocation_units();
        let plan = RelocatePlan {
            target_rids: vec!["bench-b".into()],
            ..RelocatePlan::default()
        };
        for (i, id) in ids.iter().enumerate() {
            let unit: Vec<_> = units.iter().filter(|u| u.id == *id).cloned().collect();
            let reports = w.rts[0].relocate_units(&unit, &plan, |_, _| {}).await;
            assert!(
                reports.len() == 1
                    && reports[0].outcome == zlink::relocation::host::UnitOutcome::HandedOver,
                "move {i} of {id}: {reports:?}"
            );
            // A call between moves (the object serves in between).
            let _: Echo = w.rts[2]
                .request_to_actor(id, &Echo { b: String::new() }, Duration::from_secs(10))
                .await
                .unwrap();
        }
        let mine = pauses(&w);
        let (p50, p99) = (quantile(&mine, 0.5), quantile(&mine, 0.99));
        out.lines.push(format!(
            "pause {label}: p50 {p50:.0} µs ({:.1}× request p50 {base:.0} µs), p99 {p99:.0} µs ({:.1}×), {} moves",
            p50 / base,
            p99 / base,
            mine.len()
        ));
        if size == 64 * 1024 && p99 > 5_000.0 {
            out.missed
                .push(format!("pause p99 at 64 KiB is {p99:.0} µs > 5 ms"));
        }
        w.shutdown().await;
    }
}

/// One round of the bulk bench on fresh nodes: (seconds to create `actors` on `a`, seconds
/// for one `relocate` of `a` to move them all).
async fn bulk_round(actors: usize, redis: Option<String>) -> (f64, f64) {
    match redis {
        None => bulk_round_on(World::start().await, actors).await,
        Some(url) => {
            // A namespace of its own per round: no round sees another's records.
            static ROUND: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let round = ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let store = RedisStore::connect(
                &url,
                RedisStoreConfig {
                    namespace: format!("bulk-{}-{round}", std::process::id()),
                    response_timeout: Duration::from_secs(5),
                    connection_timeout: Duration::from_secs(2),
                    reconnect_retries: 3,
                },
            )
            .await
            .unwrap();
            bulk_round_on(World::start_on(Arc::new(store)).await, actors).await
        }
    }
}

async fn bulk_round_on<S: ObjectStore + DiscoveryBackend>(
    w: World<S>,
    actors: usize,
) -> (f64, f64) {
    // `perf record -D -1 --control fifo:$ZLINK_BENCH_PERF_CTL` profiles the moves alone here
    // too (`ZLINK_BENCH_PHASES=bulk`); with `ZLINK_BENCH_PERF_WHAT=create`, the creations
    // instead (the baseline's own profile).
    let perf = std::env::var("ZLINK_BENCH_PERF_CTL").ok();
    let creation = std::env::var("ZLINK_BENCH_PERF_WHAT").is_ok_and(|w| w == "create");
    let perf_ctl = |cmd: &str, on_create: bool| {
        if let Some(p) = &perf
            && on_create == creation
        {
            std::fs::write(p, format!("{cmd}\n")).unwrap();
        }
    };
    perf_ctl("enable", true);
    let t0 = Instant::now();
    let made: Vec<Result<_, CallError>> = futures::stream::iter(0..actors)
        .map(|i| {
            let rt = &w.rts[0];
            async move { rt.create_actor("mover", &format!("idle-{i}"), None).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let create = t0.elapsed();
    perf_ctl("disable", true);
    assert!(made.iter().all(Result::is_ok));
    w.open().await;
    let plan = RelocatePlan {
        concurrency: env_or("ZLINK_BENCH_CONCURRENCY", 256usize),
        ..RelocatePlan::default()
    };
    perf_ctl("enable", false);
    let t1 = Instant::now();
    let reports = w.rts[0].relocate(&plan).await;
    let moved = t1.elapsed();
    perf_ctl("disable", false);
    let handed = reports
        .iter()
        .filter(|r| r.outcome == zlink::relocation::host::UnitOutcome::HandedOver)
        .count();
    assert_eq!(handed, actors, "every idle Actor moves");
    let reads = w.rts[0]
        .relocation_stats()
        .authority_reads
        .load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "  bulk round: {:.2} authority reads per unit on the source",
        reads as f64 / actors as f64
    );
    w.shutdown().await;
    (create.as_secs_f64(), moved.as_secs_f64())
}

/// The bulk bench: each round on fresh nodes in a fresh tokio runtime (a round's follow windows
/// and arrival bookkeeping live on for 30 s and more; dropping the runtime ends them, so no round
/// pays for the one before).
/// Returns false when the run's `end` came first.
fn bulk_bench(
    out: &mut Outcome,
    actors: usize,
    rounds: usize,
    workers: usize,
    end: Instant,
) -> bool {
    // `ZLINK_BENCH_STORE` (`memory,redis`): the stores to run the bulk phase on, each with its
    // own rounds and its own line: the in-process memory store (the relocation machinery's own
    // cost shows), then a real redis-server, started here on the same cores (the store a
    // deployment uses).
    let stores = std::env::var("ZLINK_BENCH_STORE").unwrap_or_else(|_| "memory,redis".into());
    for store in stores.split(',').map(str::trim) {
        let on_redis = match store {
            "memory" => false,
            "redis" => true,
            other => panic!("ZLINK_BENCH_STORE names an unknown store {other:?}"),
        };
        if !bulk_bench_on(out, actors, rounds, workers, end, on_redis) {
            return false;
        }
    }
    true
}

/// [`bulk_bench`] on one store. Returns false when the run's `end` came first.
fn bulk_bench_on(
    out: &mut Outcome,
    actors: usize,
    rounds: usize,
    workers: usize,
    end: Instant,
    on_redis: bool,
) -> bool {
    let mut ratios = Vec::with_capacity(rounds);
    let (mut creates, mut moves) = (Vec::new(), Vec::new());
    // The redis-server (and the runtime that starts it) only for the redis rounds.
    let server_rt = on_redis.then(|| runtime(1));
    let server = server_rt
        .as_ref()
        .map(|rt| rt.block_on(redis_server::RedisServer::start()));
    let url = server.as_ref().map(redis_server::RedisServer::url);
    for _ in 0..rounds.max(1) {
        let rt = runtime(workers);
        let url = url.clone();
        // On a runtime task, as the host runs a relocate (its admin handler) and creations:
        // driven from `block_on`, both phases had the main thread as a third worker, and every
        // unit's report woke it across threads.
        let Ok(Ok((create, moved))) = rt.block_on(async {
            tokio::time::timeout_at(end.into(), tokio::spawn(bulk_round(actors, url))).await
        }) else {
            return false;
        };
        rt.shutdown_background();
        eprintln!("  bulk round: create {create:.2} s, move {moved:.2} s");
        ratios.push(moved / create);
        creates.push(create);
        moves.push(moved);
    }
    for v in [&mut ratios, &mut creates, &mut moves] {
        v.sort_by(f64::total_cmp);
    }
    let ratio = quantile(&ratios, 0.5);
    drop(server);
    out.lines.push(format!(
        "move {actors} idle Actors{}: {:.2} s (median of {}); create them: {:.2} s; ratio \
         {ratio:.2}× (per-round median; min {:.2}×, max {:.2}×; goal ≤ 2×)",
        if on_redis { " on redis" } else { "" },
        quantile(&moves, 0.5),
        ratios.len(),
        quantile(&creates, 0.5),
        ratios[0],
        ratios[ratios.len() - 1],
    ));
    if ratio > 2.0 {
        out.missed.push(format!(
            "moving {actors} idle Actors{} took {ratio:.2}× creating them",
            if on_redis { " on redis" } else { "" },
        ));
    }
    true
}

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// One round of the throughput bench: the worst window's ratio, and its detail lines.
async fn throughput_round() -> (f64, Vec<String>) {
    let mut lines = Vec::new();
    let w = Arc::new(World::start().await);
    let busy = env_or("ZLINK_BENCH_BUSY", 200usize);
    let ids: Vec<String> = (0..busy).map(|i| format!("busy-{i}")).collect();
    for id in &ids {
        w.rts[0].create_actor("mover", id, None).await.unwrap();
    }
    w.open().await;
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for k in 0..32 {
        let (w, done, stop, ids) = (
            Arc::clone(&w),
            Arc::clone(&done),
            Arc::clone(&stop),
            ids.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = k;
            // Requests slower than 2 ms: (start, took, id index), for the diagnostics.
            let mut slow = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let id = &ids[i % ids.len()];
                let t = Instant::now();
                let _: Echo = w.rts[2]
                    .request_to_actor(id, &Echo { b: String::new() }, Duration::from_secs(10))
                    .await
                    .unwrap();
                let took = t.elapsed();
                if took > Duration::from_millis(2) {
                    slow.push((t, took, i % ids.len()));
                }
                done.fetch_add(1, Ordering::Relaxed);
                i += 32;
            }
            slow
        }));
    }
    // The sampler is an OS thread, not a task: a task's tick waits for a busy runtime (and a
    // late tick then makes a long window and a short one after it), so each window is its
    // completions scaled by the time it really lasted.
    let sampler = {
        let (done, stop) = (Arc::clone(&done), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut windows, mut cpu) = (Vec::new(), Vec::new());
            let mut last_cpu = cpu_ns();
            let (mut last, mut at) = (done.load(Ordering::Relaxed), Instant::now());
            let mut next = at;
            while !stop.load(Ordering::Relaxed) {
                next += Duration::from_millis(100);
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                let (now, t) = (done.load(Ordering::Relaxed), Instant::now());
                windows.push((now - last) as f64 * 0.1 / (t - at).as_secs_f64());
                let c = cpu_ns();
                cpu.push((c - last_cpu) as f64 / (t - at).as_nanos() as f64);
                (last, at, last_cpu) = (now, t, c);
            }
            (windows, cpu)
        })
    };
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // A gentle relocation: few units at a time, so the callers keep most of the machine.
    let plan = RelocatePlan {
        concurrency: env_or("ZLINK_BENCH_MOVE_CONCURRENCY", 8usize),
        ..RelocatePlan::default()
    };
    // `perf record -D -1 --control fifo:$ZLINK_BENCH_PERF_CTL` profiles the move alone.
    let perf = std::env::var("ZLINK_BENCH_PERF_CTL").ok();
    let perf_ctl = |cmd: &str| {
        if let Some(p) = &perf {
            std::fs::write(p, format!("{cmd}\n")).unwrap();
        }
    };
    // What to profile: the move (default), or the 500 ms `before` or `after` it.
    let what = std::env::var("ZLINK_BENCH_PERF_WHAT").unwrap_or_default();
    if what == "before" {
        perf_ctl("enable");
        tokio::time::sleep(Duration::from_millis(500)).await;
        perf_ctl("disable");
    }
    if what.is_empty() || what == "move" {
        perf_ctl("enable");
    }
    let t0 = Instant::now();
    // `ZLINK_BENCH_NO_MOVE=1`: the same windows with nothing moving (100 ms in place of the
    // move), the statistic's floor on this machine.
    let reports = if std::env::var_os("ZLINK_BENCH_NO_MOVE").is_some() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Vec::new()
    } else {
        w.rts[0].relocate(&plan).await
    };
    let took = t0.elapsed();
    perf_ctl("disable");
    if what == "after" {
        perf_ctl("enable");
        tokio::time::sleep(Duration::from_millis(500)).await;
        perf_ctl("disable");
        tokio::time::sleep(Duration::from_millis(500)).await;
    } else {
        tokio::time::sleep(Duration::from_millis(env_or(
            "ZLINK_BENCH_AFTER_MS",
            1_000u64,
        )))
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut slow = Vec::new();
    for t in tasks {
        slow.extend(t.await.unwrap());
    }
    let (windows, cpu) = sampler.join().unwrap();
    assert!(
        reports
            .iter()
            .all(|r| r.outcome == zlink::relocation::host::UnitOutcome::HandedOver)
    );
    let mut before: Vec<f64> = windows[..9.min(windows.len())].to_vec();
    before.sort_by(f64::total_cmp);
    let base = quantile(&before, 0.5);
    let during_end = (10 + (took.as_millis() as usize).div_ceil(100) + 1).min(windows.len());
    let worst = windows[10.min(windows.len())..during_end]
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let ratio = worst / base;
    if std::env::var_os("ZLINK_BENCH_DETAIL").is_some() {
        lines.push(format!(
            "windows (completions per 100 ms, the move starts at 10): {:?}",
            windows.iter().map(|v| v.round()).collect::<Vec<_>>()
        ));
        slow.sort_by_key(|x| x.0);
        let mut buckets: std::collections::BTreeMap<i64, (usize, f64, usize)> = Default::default();
        for (t, took, _) in &slow {
            let ms = if *t >= t0 {
                t.duration_since(t0).as_secs_f64() * 1e3
            } else {
                -(t0.duration_since(*t).as_secs_f64() * 1e3)
            };
            let b = buckets.entry((ms / 5.0).floor() as i64 * 5).or_default();
            b.0 += 1;
            b.1 = b.1.max(took.as_secs_f64() * 1e3);
            if *took > Duration::from_millis(4) {
                b.2 += 1;
            }
        }
        for (b, (n, max, over4)) in buckets.range(-50..200) {
            lines.push(format!(
                "slow: starting at {b:+} ms: {n} (> 4 ms: {over4}), max {max:.1} ms"
            ));
        }
        lines.push(format!("slow (> 2 ms) requests: {}", slow.len()));
        lines.push(format!(
            "cores busy per window: {:?}",
            cpu.iter()
                .map(|c| (c * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        ));
        let [t, r, rs, cs, c, s] = stages(&w);
        lines.push(format!(
            "median µs per step: seal → transfer {t:.0}, transfer → ready {r:.0}, ready → seen by the source {rs:.0}, → cutover seen by the target {cs:.0}, → committed {c:.0}, → switched {s:.0}"
        ));
        for (i, rt) in w.rts.iter().enumerate() {
            let r = rt.relocation_stats();
            let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
            lines.push(format!(
                "node {i}: relayed {} saved {} carried {} reply_relays {} followed {} late_followed {} notices sent {} (at handover {}) applied {} stale_routes {} store_reads {} budget_waits {}",
                g(&r.relayed), g(&r.saved_work), g(&r.carried_accepted), g(&r.reply_relays_sent),
                g(&r.followed), g(&r.late_followed), g(&r.follow_notices_sent), g(&r.follow_notices_at_handover), g(&r.follow_notices_applied),
                g(&rt.stats().stale_routes), g(&rt.resolver().stats().store_reads), g(&r.budget_waits),
            ));
        }
    }
    eprintln!(
        "  throughput round: {:.0} req/s before; worst 100 ms window while {busy} Actors move ({} ms): {ratio:.2}×",
        base * 10.0,
        took.as_millis(),
    );
    match Arc::try_unwrap(w) {
        Ok(w) => w.shutdown().await,
        Err(_) => panic!("the world is still shared"),
    }
    (ratio, lines)
}

/// The throughput bench: `rounds` rounds, each on fresh nodes in a fresh tokio runtime (as the
/// bulk bench, and for the same reason), and the median of the per-round ratios: one window's
/// throughput on a shared 2-core machine swings ±25 % between neighbouring windows even with
/// nothing moving, so one round's worst window says little on its own.
/// Returns false when the run's `end` came first.
fn throughput_bench(out: &mut Outcome, rounds: usize, workers: usize, end: Instant) -> bool {
    let mut ratios = Vec::with_capacity(rounds);
    for _ in 0..rounds.max(1) {
        let rt = runtime(workers);
        // On a runtime task, as a host runs a relocate (see `bulk_bench`).
        let Ok(Ok((ratio, lines))) = rt.block_on(async {
            tokio::time::timeout_at(end.into(), tokio::spawn(throughput_round())).await
        }) else {
            return false;
        };
        out.lines.extend(lines);
        rt.shutdown_background();
        ratios.push(ratio);
    }
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    ratios.sort_by(f64::total_cmp);
    let ratio = quantile(&ratios, 0.5);
    out.lines.push(format!(
        "worst 100 ms throughput while Actors move ÷ the median window before: {ratio:.2}× \
         (per-round median of {}; rounds {}; goal ≥ 0.7)",
        ratios.len(),
        shown.join(", "),
    ));
    if ratio < 0.7 {
        out.missed
            .push(format!("worst 100 ms throughput {ratio:.2}× < 0.7"));
    }
    true
}

fn main() {
    let workers = env_or("ZLINK_BENCH_WORKERS", 2usize);
    let limit = Duration::from_secs(env_or("ZLINK_BENCH_LIMIT_SECS", 120u64));
    let moves = env_or("ZLINK_BENCH_MOVES", 40usize);
    let actors = env_or("ZLINK_BENCH_ACTORS", 10_000usize);
    let rounds = env_or("ZLINK_BENCH_ROUNDS", 5usize);
    let phases = env_or("ZLINK_BENCH_PHASES", "pause,bulk,throughput".to_owned());
    let rt = runtime(workers);
    let mut out = Outcome {
        lines: Vec::new(),
        missed: Vec::new(),
    };
    // One limit for the whole run, whatever its phases and rounds.
    let end = Instant::now() + limit;
    let mut in_time = !phases.contains("pause")
        || rt.block_on(async {
            tokio::time::timeout_at(end.into(), pause_bench(&mut out, moves))
                .await
                .is_ok()
        });
    if in_time && phases.contains("bulk") {
        in_time = bulk_bench(&mut out, actors, rounds, workers, end);
    }
    if in_time && phases.contains("throughput") {
        in_time = throughput_bench(&mut out, rounds, workers, end);
    }
    for l in &out.lines {
        println!("{l}");
    }
    if !in_time {
        println!("stopped at the {limit:?} limit");
        std::process::exit(2);
    }
    if !out.missed.is_empty() {
        for m in &out.missed {
            println!("missed: {m}");
        }
        std::process::exit(2);
    }
}
