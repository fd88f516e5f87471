//! Select-one benchmark: request/reply throughput of `MeshNode::channel_request_payload` across
//! three Channel Servers, next to node-direct `request_payload` to the same three servers in
//! the same run (the caller spreading its requests round-robin itself), so the ratio is the cost
//! of select-one: the smooth weighted pick under the selector lock and the `channelRequest`
//! record (its Channel name and namespace lookup) instead of `nodeRequest`.
//!
//! ```text
//! scripts/bench-channels                    # = cargo bench -p zlink --bench channels
//! ```
//!
//! One client MeshNode dials three server MeshNodes over 127.0.0.1 (all in this process, one
//! ZeroMQ context). Each server registers the same raw echo handler twice: node-direct and in
//! the `work` Channel namespace, with weight 100 each. Two workloads, 64 B and 1 KiB payloads:
//!
//! * **serial** — one request outstanding at a time (latency-bound).
//! * **in-flight** — `ZLINK_BENCH_IN_FLIGHT` (32) tasks, each issuing requests one after
//!   another (throughput-bound).
//!
//! Rounds interleave node-direct and select-one so both see the same machine load; the ratio
//! (select-one ÷ node-direct throughput) is taken per round and its median reported. A run
//! whose median ratio misses the target (≥ 0.9, issue "Channels") prints the table, names the
//! misses and exits with status 2; a measurement past `ZLINK_BENCH_LIMIT_SECS` (60) aborts with
//! status 1.
//!
//! Environment: `ZLINK_BENCH_ROUNDS` (5), `ZLINK_BENCH_SCALE` (1.0, multiplies every request
//! count), `ZLINK_BENCH_IN_FLIGHT` (32), `ZLINK_BENCH_WORKERS` (2), `ZLINK_BENCH_LIMIT_SECS`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // benchmark binary

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::handler::RAW_CONTENT_TYPE;
use zlink::mesh::{Handlers, ManualPeer, MeshNode, MeshNodeConfig, RidConfig};
use zlink_protocol::envelope::TypedPayload;

const SECRET: &[u8] = b"bench-channel-secret-0123456789";
const CHANNEL: &str = "work";
const ECHO: &str = "bench.Echo";
const SERVERS: [&str; 3] = ["srv-a", "srv-b", "srv-c"];
const SIZES: [usize; 2] = [64, 1024];
/// Target: select-one throughput at least this share of node direct (median of rounds).
const TARGET: f64 = 0.9;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(rid: &str) -> MeshNodeConfig {
    let mut c = MeshNodeConfig::new("bench", MeshSecret::from_bytes(SECRET).unwrap());
    c.rid = RidConfig::Fixed(rid.into());
    c
}

struct Mesh {
    client: MeshNode,
    servers: Vec<MeshNode>,
}

impl Mesh {
    async fn start(in_flight: usize) -> Self {
        let mut servers = Vec::new();
        for rid in SERVERS {
            let mut h = Handlers::new();
            h.on_request_raw(ECHO, in_flight, |_, b| async move { Ok::<_, CallError>(b) });
            h.channel(CHANNEL)
                .on_request_raw(ECHO, in_flight, |_, b| async move { Ok::<_, CallError>(b) });
            let cfg = config(rid).channel_server(CHANNEL, 100);
            servers.push(MeshNode::start(cfg, h, None).await.expect("start server"));
        }
        let mut cfg = config("client").channel_client(CHANNEL);
        for s in &servers {
            cfg.manual_peers.push(ManualPeer {
                endpoint: s.endpoint().to_owned(),
                expected_rid: Some(s.rid().to_owned()),
            });
        }
        let client = MeshNode::start(cfg, Handlers::new(), None)
            .await
            .expect("start client");
        for rid in SERVERS {
            client
                .wait_ready(rid, Duration::from_secs(10))
                .await
                .expect("server ready");
        }
        Self { client, servers }
    }

    async fn shutdown(&self) {
        self.client.shutdown().await;
        for s in &self.servers {
            s.shutdown().await;
        }
    }

    /// `in_flight` tasks issue requests until `n` are done; returns requests per second.
    async fn run(
        self: &Arc<Self>,
        select_one: bool,
        n: usize,
        in_flight: usize,
        size: usize,
    ) -> Result<f64, String> {
        let payload = Bytes::from(vec![0xa5u8; size]);
        let next = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..in_flight {
            let (mesh, next, payload) = (Arc::clone(self), Arc::clone(&next), payload.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, String>(());
                    }
                    let p = TypedPayload::new(ECHO, RAW_CONTENT_TYPE, payload.clone());
                    let t = Duration::from_secs(10);
                    let reply = if select_one {
                        mesh.client
                            .channel_request_payload(CHANNEL, p, None, t)
                            .await
                    } else {
                        let rid = SERVERS[i % SERVERS.len()];
                        mesh.client.request_payload(rid, p, None, t).await
                    }
                    .map_err(|e| format!("request: {e}"))?;
                    if reply.payload.len() != size {
                        return Err(format!("reply of {} bytes", reply.payload.len()));
                    }
                }
            }));
        }
        for t in tasks {
            t.await.map_err(|e| format!("task: {e}"))??;
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let rounds = env_or("ZLINK_BENCH_ROUNDS", 5usize).max(1);
    let scale = env_or("ZLINK_BENCH_SCALE", 1.0f64).max(0.001);
    let in_flight = env_or("ZLINK_BENCH_IN_FLIGHT", 32usize).max(2);
    let workers = env_or("ZLINK_BENCH_WORKERS", 2usize).max(1);
    let limit = Duration::from_secs(env_or("ZLINK_BENCH_LIMIT_SECS", 60u64));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let mesh = Arc::new(rt.block_on(Mesh::start(in_flight)));
    println!(
        "select-one across {} Servers vs node direct to the same Servers; {rounds} rounds, \
         {in_flight} in flight for the in-flight workload",
        SERVERS.len()
    );
    println!(
        "| workload | size | node direct req/s (median) | select-one req/s (median) | ratio median (min–max) |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let mut misses = Vec::new();
    for (name, flight, base_n) in [
        ("serial", 1usize, 4_000usize),
        ("in-flight", in_flight, 40_000),
    ] {
        for size in SIZES {
            let n = ((base_n as f64) * scale).max(10.0) as usize;
            // Warm-up of both paths (connections, buffers, selector).
            for select_one in [false, true] {
                let m = Arc::clone(&mesh);
                rt.block_on(m.run(select_one, n / 10 + 1, flight, size))
                    .expect("warm-up");
            }
            let (mut direct, mut select, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..rounds {
                let one = |select_one: bool| -> f64 {
                    let m = Arc::clone(&mesh);
                    match rt.block_on(async {
                        tokio::time::timeout(limit, m.run(select_one, n, flight, size)).await
                    }) {
                        Ok(Ok(v)) => v,
                        Ok(Err(e)) => {
                            eprintln!("{name} {size} B: {e}");
                            std::process::exit(1);
                        }
                        Err(_) => {
                            eprintln!("{name} {size} B: over the {limit:?} limit");
                            std::process::exit(1);
                        }
                    }
                };
                let d = one(false);
                let s = one(true);
                direct.push(d);
                select.push(s);
                ratios.push(s / d);
            }
            let (rm, rmin, rmax) = median(ratios);
            println!(
                "| {name} | {size} B | {:.0} | {:.0} | {rm:.2} ({rmin:.2}–{rmax:.2}) |",
                median(direct).0,
                median(select).0
            );
            if rm < TARGET {
                misses.push(format!(
                    "{name} {size} B: select-one {rm:.2} of node direct < {TARGET}"
                ));
            }
        }
    }
    rt.block_on(mesh.shutdown());
    if !misses.is_empty() {
        for m in &misses {
            eprintln!("target missed: {m}");
        }
        std::process::exit(2);
    }
}
