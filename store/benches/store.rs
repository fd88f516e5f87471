//! Location Store benchmark against a real `redis-server` on loopback.
//!
//! Measures ops/s and p50/p99 latency of `read_authority`, `read_route` (one route-cache
//! miss), `reserve` + `commit_ready` and `transfer_owner`, next to plain `GET` / `SET` issued through the same client library
//! (`redis` crate `ConnectionManager`) at the same concurrency in the same run. The ratio is our
//! cost per operation over one raw Redis round trip. Each workload runs `ROUNDS` times and the
//! median round is reported.
//!
//! ```text
//! scripts/bench-store                     # starts redis-server on a free port and runs this
//! ZLINK_BENCH_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p zlink-store --bench store
//! ```
//! Environment: `ZLINK_BENCH_REDIS_URL` (required), `ZLINK_BENCH_OPS` (per round, default
//! 20000), `ZLINK_BENCH_CONCURRENCY` (default 16), `ZLINK_BENCH_ROUNDS` (default 5),
//! `ZLINK_BENCH_ONLY` (`read` to run only the baselines and `read_authority`, for profiling).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // benchmark binary

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::AsyncCommands;
use zlink_store::LocationStore;
use zlink_store::redis::{RedisStore, RedisStoreConfig};
use zlink_store::types::{
    AuthorityKey, DescriptorKey, DescriptorKind, NodeRef, ObjectKind, ReserveRequest, TargetFence,
    TransferOwner,
};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Stats {
    ops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Run `ops` calls of `f` spread over `concurrency` tasks; each task runs its calls one after
/// another. Returns throughput and latency percentiles.
async fn run<F, Fut>(ops: usize, concurrency: usize, f: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let f = Arc::clone(&f);
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= ops {
                    break;
                }
                let t = Instant::now();
                f(i).await;
                lat.push(t.elapsed().as_nanos() as u64);
            }
            lat
        }));
    }
    let mut all = Vec::with_capacity(ops);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed();
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() as f64 - 1.0) * p) as usize] as f64 / 1000.0;
    Stats {
        ops_per_sec: ops as f64 / elapsed.as_secs_f64(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    }
}

fn median(mut v: Vec<Stats>) -> Stats {
    v.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    v.swap_remove(v.len() / 2)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Ok(url) = std::env::var("ZLINK_BENCH_REDIS_URL") else {
        eprintln!("store bench: set ZLINK_BENCH_REDIS_URL (or run scripts/bench-store); skipping");
        return;
    };
    let ops = env_usize("ZLINK_BENCH_OPS", 20_000);
    let concurrency = env_usize("ZLINK_BENCH_CONCURRENCY", 16);
    let rounds = env_usize("ZLINK_BENCH_ROUNDS", 5).max(1);
    let ns = format!("bench-{}", std::process::id());
    let store = RedisStore::connect(
        &url,
        RedisStoreConfig {
            namespace: ns.clone(),
            ..RedisStoreConfig::default()
        },
    )
    .await
    .expect("connect store");
    let client = redis::Client::open(url.as_str()).expect("client");
    let raw = redis::aio::ConnectionManager::new(client)
        .await
        .expect("raw connection");

    // Two nodes with live leases and descriptors.
    let mut nodes = Vec::new();
    for name in ["bench-a", "bench-b"] {
        let grant = store
            .claim_lease(name, Duration::from_secs(3600))
            .await
            .expect("lease");
        let node = NodeRef {
            mesh: "bench".into(),
            rid: format!("{name}-rid"),
            lifecycle_generation: 1,
        };
        let key = DescriptorKey {
            kind: DescriptorKind::MeshNode,
            scope: node.mesh.clone(),
            rid: node.rid.clone(),
        };
        store
            .publish_descriptor(&grant.token, &key, 1, 1, Bytes::from_static(b"{}"))
            .await
            .expect("descriptor");
        nodes.push(TargetFence {
            node,
            owner: grant.token,
        });
    }
    let nodes = Arc::new(nodes);

    println!("store benchmark: {rounds} rounds x {ops} ops, concurrency {concurrency}, {url}");
    let mut rows: Vec<(&str, Stats)> = Vec::new();

    // Raw GET / SET baselines.
    {
        let mut c = raw.clone();
        let _: () = c.set(format!("{ns}:raw:k"), "v").await.unwrap();
        let mut get = Vec::new();
        let mut set = Vec::new();
        for _ in 0..rounds {
            let c = raw.clone();
            let key = format!("{ns}:raw:k");
            get.push(
                run(ops, concurrency, move |_| {
                    let mut c = c.clone();
                    let key = key.clone();
                    async move {
                        let _: Option<String> = c.get(key).await.unwrap();
                    }
                })
                .await,
            );
            let c = raw.clone();
            let prefix = format!("{ns}:raw:");
            set.push(
                run(ops, concurrency, move |i| {
                    let mut c = c.clone();
                    let key = format!("{prefix}{}", i % 1024);
                    async move {
                        let _: () = c.set(key, "value").await.unwrap();
                    }
                })
                .await,
            );
        }
        rows.push(("raw GET (baseline)", median(get)));
        rows.push(("raw SET (baseline)", median(set)));
    }

    // read_authority of a Ready object.
    let store = Arc::new(store);
    let key = AuthorityKey::new(ObjectKind::Spot, "bench-room").unwrap();
    let req = ReserveRequest {
        key: key.clone(),
        reservation_id: "bench-room-r".into(),
        object_kind: ObjectKind::Spot,
        stable_type: "Room".into(),
        target: nodes[0].clone(),
        capacity_delta: 1,
        content: None,
        payload: Bytes::from_static(b"p"),
    };
    let res = store.reserve(&req).await.expect("reserve");
    store
        .commit_ready(&res, Bytes::from_static(b"p"))
        .await
        .expect("commit");
    let mut reads = Vec::new();
    for _ in 0..rounds {
        let s = Arc::clone(&store);
        let key = key.clone();
        reads.push(
            run(ops, concurrency, move |_| {
                let s = Arc::clone(&s);
                let key = key.clone();
                async move {
                    s.read_authority(&key).await.unwrap();
                }
            })
            .await,
        );
    }
    rows.push(("read_authority", median(reads)));

    // read_route: the resolver's only read, i.e. the cost of one route-cache miss
    // (authority record + the owner's live lease in one script).
    let mut routes = Vec::new();
    for _ in 0..rounds {
        let s = Arc::clone(&store);
        let key = key.clone();
        routes.push(
            run(ops, concurrency, move |_| {
                let s = Arc::clone(&s);
                let key = key.clone();
                async move {
                    let r = s.read_route(&key).await.unwrap();
                    assert!(r.owner_lease.is_some(), "the bench owner's lease is live");
                }
            })
            .await,
        );
    }
    rows.push(("read_route (route-cache miss)", median(routes)));

    if std::env::var("ZLINK_BENCH_ONLY").as_deref() == Ok("read") {
        print_rows(&rows);
        return;
    }

    // reserve + commit_ready of fresh objects (two store calls per op).
    let mut creates = Vec::new();
    for round in 0..rounds {
        let s = Arc::clone(&store);
        let nodes = Arc::clone(&nodes);
        creates.push(
            run(ops, concurrency, move |i| {
                let s = Arc::clone(&s);
                let target = nodes[0].clone();
                async move {
                    let id = format!("obj-{round}-{i}");
                    let req = ReserveRequest {
                        key: AuthorityKey::new(ObjectKind::Actor, &id).unwrap(),
                        reservation_id: id,
                        object_kind: ObjectKind::Actor,
                        stable_type: "Player".into(),
                        target,
                        capacity_delta: 1,
                        content: None,
                        payload: Bytes::from_static(b"p"),
                    };
                    let res = s.reserve(&req).await.unwrap();
                    s.commit_ready(&res, Bytes::from_static(b"p"))
                        .await
                        .unwrap();
                }
            })
            .await,
        );
    }
    rows.push(("reserve + commit_ready (2 calls)", median(creates)));

    // transfer_owner: each task moves its own object back and forth.
    let mut snaps = Vec::new();
    for t in 0..concurrency {
        let id = format!("mover-{t}");
        let req = ReserveRequest {
            key: AuthorityKey::new(ObjectKind::Actor, &id).unwrap(),
            reservation_id: id,
            object_kind: ObjectKind::Actor,
            stable_type: "Player".into(),
            target: nodes[0].clone(),
            capacity_delta: 1,
            content: None,
            payload: Bytes::from_static(b"p"),
        };
        let res = store.reserve(&req).await.unwrap();
        snaps.push(tokio::sync::Mutex::new(
            store
                .commit_ready(&res, Bytes::from_static(b"p"))
                .await
                .unwrap(),
        ));
    }
    let snaps = Arc::new(snaps);
    let mut transfers = Vec::new();
    for _ in 0..rounds {
        let s = Arc::clone(&store);
        let nodes = Arc::clone(&nodes);
        let snaps = Arc::clone(&snaps);
        transfers.push(
            run(ops, concurrency, move |i| {
                let s = Arc::clone(&s);
                let nodes = Arc::clone(&nodes);
                let snaps = Arc::clone(&snaps);
                async move {
                    // Ops are spread over the per-task objects; the lock only orders a slot's
                    // transfers (each holds its current fence).
                    let mut snap = snaps[i % snaps.len()].lock().await;
                    let to = if snap.owner == nodes[0].owner {
                        &nodes[1]
                    } else {
                        &nodes[0]
                    };
                    *snap = s
                        .transfer_owner(&TransferOwner {
                            source: snap.fence(),
                            target: to.clone(),
                            payload: None,
                        })
                        .await
                        .unwrap();
                }
            })
            .await,
        );
    }
    rows.push(("transfer_owner", median(transfers)));
    print_rows(&rows);
}

fn print_rows(rows: &[(&str, Stats)]) {
    let get_p50 = rows[0].1.p50_us;
    let set_p50 = rows[1].1.p50_us;
    let get_ops = rows[0].1.ops_per_sec;
    println!(
        "| operation | ops/s | p50 µs | p99 µs | p50 vs raw GET | p50 vs raw SET | ops/s vs raw GET |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, s) in rows {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x | {:.2}x |",
            s.ops_per_sec,
            s.p50_us,
            s.p99_us,
            s.p50_us / get_p50,
            s.p50_us / set_p50,
            get_ops / s.ops_per_sec
        );
    }
}
