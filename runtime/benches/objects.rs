//! Actor request/reply benchmark: a remote Actor on the route-cache hit path and a local Actor,
//! next to node-direct request/reply between the same two MeshNodes in the same run.
//!
//! ```text
//! scripts/bench-objects                     # = cargo bench -p zlink --bench objects
//! ```
//!
//! Two MeshNodes on 127.0.0.1 share an in-process memory Location Store. An echo Actor lives
//! on node `b`. Workloads, one request outstanding at a time (latency) and 32 in flight
//! (throughput), with a 64 B payload:
//!
//! * **node direct** — `a.request_payload("b", …)` to a node-direct echo handler on `b`;
//! * **remote actor** — `a` calls the Actor by ID (`request_to_actor`): resolver cache hit,
//!   `actorRequest` over the mesh, target admission, the Actor's turn, reply;
//! * **local actor** — `b` calls its own Actor by ID (no mesh).
//!
//! Rounds interleave the three; per round the remote actor's p50 latency is divided by node
//! direct's, and the median over rounds is reported.
//!
//! Then a **one-way flood** (issue 21): `a` sends `ZLINK_BENCH_FLOOD` (200,000) one-way 64 B
//! messages as fast as admission lets it, node direct (`send_payload` to a counting raw handler
//! on `b`) and to the remote Actor by ID (`send_to_actor`, counted by the Actor's handler); the
//! time runs until `b` handled the last one. Per round the Actor rate is divided by node direct's,
//! so a regression at either level shows. Target (issue "Spots and Actors"): remote
//! actor hit path ≤ 1.3× node-direct latency; a miss exits with status 2. Every loop is bounded
//! by its request count and `ZLINK_BENCH_LIMIT_SECS` (60).
//!
//! Environment: `ZLINK_BENCH_ROUNDS` (5), `ZLINK_BENCH_SCALE` (1.0), `ZLINK_BENCH_WORKERS` (2),
//! `ZLINK_BENCH_LIMIT_SECS` (60).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // benchmark binary

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{ECHO, Echo, World};
use zlink::mesh::handler::RAW_CONTENT_TYPE;
use zlink::object::ObjectCalls;
use zlink_protocol::envelope::TypedPayload;

const TARGET: f64 = 1.3;
const SIZE: usize = 64;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy)]
enum Path {
    Direct,
    RemoteActor,
    LocalActor,
}

impl World {
    /// `flight` tasks issue requests until `n` are done; returns (req/s, p50 µs, p99 µs).
    async fn run(
        self: &Arc<Self>,
        path: Path,
        n: usize,
        flight: usize,
    ) -> Result<(f64, f64, f64), String> {
        let body = "x".repeat(SIZE);
        let next = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..flight {
            let (w, next, body) = (Arc::clone(self), Arc::clone(&next), body.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let t = Instant::now();
                    let timeout = Duration::from_secs(10);
                    match path {
                        Path::Direct => {
                            let p = TypedPayload::new(
                                ECHO,
                                RAW_CONTENT_TYPE,
                                Bytes::from(body.clone()),
                            );
                            w.a.request_payload("bench-b", p, None, timeout)
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        Path::RemoteActor => {
                            let _: Echo = w
                                .rt_a
                                .request_to_actor("echo-1", &Echo { b: body.clone() }, timeout)
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        Path::LocalActor => {
                            let _: Echo = w
                                .rt_b
                                .request_to_actor("echo-1", &Echo { b: body.clone() }, timeout)
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                    }
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                Ok::<_, String>(lat)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.map_err(|e| e.to_string())??);
        }
        let secs = t0.elapsed().as_secs_f64();
        all.sort_unstable();
        let pct = |q: f64| all[((all.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        Ok((n as f64 / secs, pct(0.5), pct(0.99)))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds = env_or("ZLINK_BENCH_ROUNDS", 5usize).max(1);
    let scale = env_or("ZLINK_BENCH_SCALE", 1.0f64).max(0.001);
    let workers = env_or("ZLINK_BENCH_WORKERS", 2usize).max(1);
    let limit = Duration::from_secs(env_or("ZLINK_BENCH_LIMIT_SECS", 60u64));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let w = Arc::new(rt.block_on(World::start()));
    println!("Actor request/reply vs node direct, {SIZE} B payload, {rounds} rounds (medians)");
    println!("| workload | path | req/s | p50 µs | p99 µs |");
    println!("| --- | --- | --- | --- | --- |");
    let mut ratio_serial = Vec::new();
    for (name, flight, base) in [("serial", 1usize, 4_000usize), ("in-flight 32", 32, 40_000)] {
        let n = ((base as f64) * scale).max(10.0) as usize;
        for p in [Path::Direct, Path::RemoteActor, Path::LocalActor] {
            rt.block_on(w.run(p, n / 10 + 1, flight)).expect("warm-up");
        }
        let mut rows: [Vec<(f64, f64, f64)>; 3] = Default::default();
        for _ in 0..rounds {
            for (i, p) in [Path::Direct, Path::RemoteActor, Path::LocalActor]
                .into_iter()
                .enumerate()
            {
                let out =
                    rt.block_on(async { tokio::time::timeout(limit, w.run(p, n, flight)).await });
                match out {
                    Ok(Ok(v)) => rows[i].push(v),
                    Ok(Err(e)) => {
                        eprintln!("{name}: {e}");
                        std::process::exit(1);
                    }
                    Err(_) => {
                        eprintln!("{name}: over the {limit:?} limit");
                        std::process::exit(1);
                    }
                }
            }
            if flight == 1 {
                let (d, r) = (rows[0].last().unwrap().1, rows[1].last().unwrap().1);
                ratio_serial.push(r / d);
            }
        }
        for (i, label) in ["node direct", "remote actor (cache hit)", "local actor"]
            .iter()
            .enumerate()
        {
            let m = |f: fn(&(f64, f64, f64)) -> f64| median(rows[i].iter().map(f).collect());
            println!(
                "| {name} | {label} | {:.0} | {:.0} | {:.0} |",
                m(|v| v.0),
                m(|v| v.1),
                m(|v| v.2)
            );
        }
    }
    let flood_n = env_or("ZLINK_BENCH_FLOOD", 200_000usize).max(10);
    for actor in [false, true] {
        w.flood_or_exit(&rt, actor, flood_n / 10, SIZE, limit);
    }
    let (mut direct, mut actor, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let d = w.flood_or_exit(&rt, false, flood_n, SIZE, limit);
        let a = w.flood_or_exit(&rt, true, flood_n, SIZE, limit);
        direct.push(d);
        actor.push(a);
        ratio.push(a / d);
    }
    let spread = |v: &Vec<f64>| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
        (median(v.clone()), lo, hi)
    };
    let (d, dl, dh) = spread(&direct);
    let (a, al, ah) = spread(&actor);
    let (r, rl, rh) = spread(&ratio);
    println!("\none-way flood of {flood_n} × {SIZE} B, medians of {rounds} rounds (min–max)");
    println!("| path | msg/s |");
    println!("| --- | --- |");
    println!("| node direct | {d:.0} ({dl:.0}–{dh:.0}) |");
    println!("| remote actor | {a:.0} ({al:.0}–{ah:.0}) |");
    println!("remote actor ÷ node direct (one-way flood): {r:.2} ({rl:.2}–{rh:.2})");

    let r = median(ratio_serial);
    println!("\nremote actor p50 ÷ node direct p50 (serial): {r:.2} (target ≤ {TARGET})");
    let reads = w
        .rt_a
        .resolver()
        .stats()
        .store_reads
        .load(Ordering::Relaxed);
    println!("store reads by the caller during the run: {reads}");
    rt.block_on(async {
        w.a.shutdown().await;
        w.b.shutdown().await;
    });
    if r > TARGET {
        eprintln!("target missed: remote actor p50 {r:.2}× node direct > {TARGET}×");
        std::process::exit(2);
    }
}
