//! The zlink side of `scripts/bench-peers` (issue 21): Proto.Actor Go's published remote
//! benchmark, in zlink — two OS processes on 127.0.0.1, an Actor on each, addressed by global ID.
//!
//! ```text
//! cargo bench -p zlink --bench peers                      # run by scripts/bench-peers
//! ZLINK_BENCH_MESSAGES=200000 cargo bench -p zlink --bench peers   # quick look
//! ```
//!
//! This binary is both processes. Started without `ZLINK_PEERS_ROLE` it is the **driver**: it
//! starts a `redis-server` on a free loopback port (the shared Location Store; one store round
//! trip per route, none per message once the route is cached), starts itself again as the
//! **echo** process (`ZLINK_PEERS_ROLE=echo`), and hosts node `peer-driver` with Actor
//! `pinger-1`; the echo process hosts node `peer-echo` with Actor `echo-1`. Workloads, each
//! after a warm-up, each round on the same two processes:
//!
//! * **flood** — the driver sends `ZLINK_BENCH_MESSAGES` (1,000,000) one-way `Ping`s to
//!   `echo-1` by ID; the echo Actor answers each with one one-way `Pong` to `pinger-1` by ID;
//!   the time runs until `pinger-1` has handled every `Pong`. Rate = 2 × messages ÷ elapsed
//!   (both directions counted, as the published benchmark does).
//! * **request** — Actor requests to `echo-1` answered by its reply, at 1 in flight
//!   (`ZLINK_BENCH_REQUESTS_SERIAL`, 20,000) and 32 in flight (`ZLINK_BENCH_REQUESTS`,
//!   200,000): requests/s, p50 and p99 latency.
//!
//! Every round prints one JSON line per workload on stdout (`{"side":"zlink",...}`, the format
//! of the Go harness in `bench/peers/protoactor/`), which `scripts/bench-peers` tabulates next
//! to Proto.Actor's. Messages are JSON (the framework-json-v1 profile) with the packet name as
//! the type; Proto.Actor's are protobuf. Every loop is bounded by its count and by
//! `ZLINK_BENCH_LIMIT_SECS` (120 per workload); exit status 1 on any failure.
//!
//! Environment: `ZLINK_BENCH_ROUNDS` (5), `ZLINK_BENCH_MESSAGES`, `ZLINK_BENCH_REQUESTS`,
//! `ZLINK_BENCH_REQUESTS_SERIAL`, `ZLINK_BENCH_IN_FLIGHT` (32), `ZLINK_BENCH_WORKERS` (tokio
//! worker threads per process, 2), `ZLINK_BENCH_ONLY` (`flood` or `request`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // benchmark binary

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, JsonMessage, MeshNode, MeshNodeConfig, RidConfig};
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry};
use zlink::object::runtime::ObjectRuntime;
use zlink::routing::CacheConfig;
use zlink_store::redis::{RedisStore, RedisStoreConfig};

const ROLE_ENV: &str = "ZLINK_PEERS_ROLE";
const REDIS_ENV: &str = "ZLINK_PEERS_REDIS";
const SECRET: &[u8] = b"bench-peers-secret-0123456789abcdef";
const MESH: &str = "peers";
const DRIVER: &str = "peer-driver";
const ECHO_NODE: &str = "peer-echo";
const ECHO_ID: &str = "echo-1";
const PINGER_ID: &str = "pinger-1";

#[derive(serde::Serialize, serde::Deserialize)]
struct Ping {}
impl JsonMessage for Ping {
    const PACKET_NAME: &'static str = "peers.Ping";
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Pong {}
impl JsonMessage for Pong {
    const PACKET_NAME: &'static str = "peers.Pong";
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Request {}
impl JsonMessage for Request {
    const PACKET_NAME: &'static str = "peers.Request";
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Response {}
impl JsonMessage for Response {
    const PACKET_NAME: &'static str = "peers.Response";
}

/// `Pong`s handled by `pinger-1` (driver process).
static PONGS: AtomicU64 = AtomicU64::new(0);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.actor(
        "echo",
        |_: FactoryInput| async { Ok(()) },
        || {
            let mut h: ObjectHandlers<()> = ObjectHandlers::new();
            h.on_send(|ctx, _: Ping| async move { ctx.send_to_actor(PINGER_ID, &Pong {}).await });
            h.on_request(|_, _: Request| async { Ok::<_, CallError>(Response {}) });
            h
        },
    )
    .register();
    r.actor(
        "pinger",
        |_: FactoryInput| async { Ok(()) },
        || {
            let mut h: ObjectHandlers<()> = ObjectHandlers::new();
            h.on_send(|_, _: Pong| async {
                PONGS.fetch_add(1, Ordering::Relaxed);
                Ok::<_, CallError>(())
            });
            h
        },
    )
    .register();
    r.entry_spot(
        "entry",
        |_: FactoryInput| async { Ok(()) },
        ObjectHandlers::new,
    )
    .register();
    r
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("ZLINK_BENCH_WORKERS", 2usize).max(1))
        .enable_all()
        .build()
        .unwrap()
}

/// One process's node and object runtime on the shared Redis store.
async fn start_node(
    rid: &str,
    redis_url: &str,
) -> Result<(Arc<MeshNode>, ObjectRuntime<RedisStore>), String> {
    let store = RedisStore::connect(
        redis_url,
        RedisStoreConfig {
            namespace: "bench-peers".into(),
            ..RedisStoreConfig::default()
        },
    )
    .await
    .map_err(|e| format!("redis at {redis_url}: {e}"))?;
    let store = Arc::new(store);
    let mut c = MeshNodeConfig::new(MESH, MeshSecret::from_bytes(SECRET).unwrap());
    c.rid = RidConfig::Fixed(rid.into());
    c.object_capabilities = registry().capabilities();
    c.entry_spot_prefix = Some(rid.into());
    let node = MeshNode::start(
        c,
        Handlers::new(),
        Some(Arc::clone(&store) as Arc<dyn DiscoveryBackend>),
    )
    .await
    .map_err(|e| format!("mesh node {rid}: {e}"))?;
    let node = Arc::new(node);
    let rt = ObjectRuntime::start(Arc::clone(&node), store, registry(), CacheConfig::default())
        .await
        .map_err(|e| format!("object runtime {rid}: {e}"))?;
    Ok((node, rt))
}

/// The echo process: hosts `echo-1`, prints `ready`, runs until its standard input closes.
fn echo_main() {
    let url = std::env::var(REDIS_ENV).expect("ZLINK_PEERS_REDIS names the Redis URL");
    let rt = runtime();
    let (node, objects) = rt.block_on(async {
        let (node, objects) = start_node(ECHO_NODE, &url).await.unwrap_or_else(|e| {
            eprintln!("bench-peers echo: {e}");
            std::process::exit(1)
        });
        if let Err(e) = objects.create_actor("echo", ECHO_ID, None).await {
            eprintln!("bench-peers echo: create {ECHO_ID}: {e}");
            std::process::exit(1);
        }
        (node, objects)
    });
    println!("ready");
    std::io::stdout().flush().unwrap();
    // The driver holds our stdin open; EOF (the driver finished or died) ends this process.
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {
        sink.clear();
    }
    rt.block_on(async {
        drop(objects);
        node.shutdown().await;
    });
}

/// The echo child process, killed when dropped.
struct EchoProcess(Child);

impl EchoProcess {
    fn start(redis_url: &str) -> Self {
        let exe = std::env::current_exe().expect("the bench binary's own path");
        let mut child = Command::new(exe)
            .env(ROLE_ENV, "echo")
            .env(REDIS_ENV, redis_url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the echo process");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let ok = BufReader::new(out).read_line(&mut line).is_ok() && line.trim() == "ready";
            let _ = tx.send(ok);
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(true) => Self(child),
            _ => {
                let _ = child.kill();
                eprintln!("bench-peers: the echo process did not get ready within 30 s");
                std::process::exit(1);
            }
        }
    }
}

impl Drop for EchoProcess {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `n` Pings and waits until `pinger-1` handled `n` more Pongs; returns the elapsed time.
async fn flood(rt: &ObjectRuntime<RedisStore>, n: u64) -> Result<Duration, String> {
    let start_count = PONGS.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for _ in 0..n {
        rt.send_to_actor(ECHO_ID, &Ping {})
            .await
            .map_err(|e| format!("ping: {e}"))?;
    }
    while PONGS.load(Ordering::Relaxed) < start_count + n {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let elapsed = t0.elapsed();
    let got = PONGS.load(Ordering::Relaxed) - start_count;
    if got != n {
        return Err(format!("{got} pongs for {n} pings"));
    }
    Ok(elapsed)
}

/// `flight` tasks issue requests until `n` are done; returns (elapsed, sorted latencies in ns).
async fn requests(
    rt: &ObjectRuntime<RedisStore>,
    n: usize,
    flight: usize,
) -> Result<(Duration, Vec<u64>), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..flight {
        let (rt, next) = (rt.clone(), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let t = Instant::now();
                let _: Response = rt
                    .request_to_actor(ECHO_ID, &Request {}, Duration::from_secs(10))
                    .await
                    .map_err(|e| format!("request: {e}"))?;
                lat.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
            }
            Ok::<_, String>(lat)
        }));
    }
    let mut all = Vec::with_capacity(n);
    for t in tasks {
        all.extend(t.await.map_err(|e| e.to_string())??);
    }
    let elapsed = t0.elapsed();
    all.sort_unstable();
    Ok((elapsed, all))
}

fn pct_us(sorted: &[u64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q) as usize] as f64 / 1000.0
}

async fn bounded<T>(limit: Duration, what: &str, f: impl Future<Output = Result<T, String>>) -> T {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            eprintln!("bench-peers: {what}: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("bench-peers: {what}: over the {limit:?} limit");
            std::process::exit(1);
        }
    }
}

fn driver_main() {
    let rounds = env_or("ZLINK_BENCH_ROUNDS", 5usize).max(1);
    let messages = env_or("ZLINK_BENCH_MESSAGES", 1_000_000u64).max(1);
    let reqs = env_or("ZLINK_BENCH_REQUESTS", 200_000usize).max(1);
    let reqs_serial = env_or("ZLINK_BENCH_REQUESTS_SERIAL", 20_000usize).max(1);
    let in_flight = env_or("ZLINK_BENCH_IN_FLIGHT", 32usize).max(1);
    let limit = Duration::from_secs(env_or("ZLINK_BENCH_LIMIT_SECS", 120u64));
    let only = std::env::var("ZLINK_BENCH_ONLY").unwrap_or_default();
    let rt = runtime();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let echo = EchoProcess::start(&redis.url());
    let (node, objects) = rt.block_on(async {
        let (node, objects) = bounded(limit, "start", start_node(DRIVER, &redis.url())).await;
        objects
            .create_actor("pinger", PINGER_ID, None)
            .await
            .unwrap_or_else(|e| {
                eprintln!("bench-peers: create {PINGER_ID}: {e}");
                std::process::exit(1)
            });
        bounded(limit, "wait for the echo node", async {
            node.wait_ready(ECHO_NODE, limit)
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        (node, objects)
    });
    eprintln!(
        "bench-peers (zlink): {rounds} rounds; flood {messages} pings; requests {reqs_serial} at 1 \
         in flight, {reqs} at {in_flight}"
    );
    let flood_on = only.is_empty() || only == "flood";
    let request_on = only.is_empty() || only == "request";
    rt.block_on(async {
        // Warm-up: connections, route caches, pools.
        if flood_on {
            bounded(limit, "warm-up flood", flood(&objects, 10_000)).await;
        }
        if request_on {
            bounded(limit, "warm-up requests", requests(&objects, 5_000, in_flight)).await;
        }
        for round in 1..=rounds {
            if flood_on {
                let stats = node.pump_stats();
                let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
                let before = [load(&stats.sent), load(&stats.received), load(&stats.wakeups), load(&stats.direct_sends)];
                let e = bounded(limit, "flood", flood(&objects, messages)).await;
                let after = [load(&stats.sent), load(&stats.received), load(&stats.wakeups), load(&stats.direct_sends)];
                let per = |i: usize| (after[i] - before[i]) as f64 / messages as f64;
                eprintln!(
                    "bench-peers (zlink) flood, driver's pump per ping: {:.3} ZeroMQ messages sent, {:.3} received, {:.3} wake-ups, {:.3} direct sends",
                    per(0),
                    per(1),
                    per(2),
                    per(3)
                );
                let secs = e.as_secs_f64();
                println!(
                    "{{\"side\":\"zlink\",\"workload\":\"flood\",\"round\":{round},\"messages\":{messages},\"elapsed_s\":{secs:.6},\"rate\":{:.1}}}",
                    2.0 * messages as f64 / secs
                );
            }
            if request_on {
                for (n, flight) in [(reqs_serial, 1usize), (reqs, in_flight)] {
                    let (e, lat) = bounded(limit, "requests", requests(&objects, n, flight)).await;
                    let secs = e.as_secs_f64();
                    println!(
                        "{{\"side\":\"zlink\",\"workload\":\"request\",\"round\":{round},\"in_flight\":{flight},\"requests\":{n},\"elapsed_s\":{secs:.6},\"rate\":{:.1},\"p50_us\":{:.1},\"p99_us\":{:.1}}}",
                        n as f64 / secs,
                        pct_us(&lat, 0.5),
                        pct_us(&lat, 0.99)
                    );
                }
            }
            std::io::stdout().flush().unwrap();
        }
        drop(objects);
        node.shutdown().await;
    });
    drop(echo);
    drop(redis);
}

fn main() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("echo") {
        echo_main();
    } else {
        driver_main();
    }
}
