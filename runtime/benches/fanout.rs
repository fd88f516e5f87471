//! Classic fanout benchmark: publish throughput from one zlink `Publisher` to 1 and to 3
//! `Subscriber`s over 127.0.0.1, next to the same traffic on raw ZeroMQ PUB/SUB sockets,
//! measured in the same run (the baseline `docs/benchmarks.md` reports ratios against).
//!
//! ```text
//! scripts/bench-fanout                      # = cargo bench -p zlink --bench fanout
//! ```
//!
//! For each payload size (64 B, 1 KiB) and subscriber count (1, 3) one measurement publishes
//! N events back to back; the clock runs from the first publish until **every** subscriber has
//! counted all N (counted at the subscriber: the raw SUB receive loop, or the zlink raw event
//! handler). Throughput = N ÷ that time, i.e. events/s delivered to every subscriber.
//!
//! * **raw** — a `PUB` socket on the bench thread, one `SUB` thread per subscriber with
//!   `recv_multipart`; records are `[topic, payload]`.
//! * **zlink** — `Publisher::publish_payload` (topic check, typed payload envelope, queue to
//!   the socket thread) to subscribers whose raw handler counts (socket thread → batch → tokio
//!   dispatcher → handler).
//!
//! Both sides wait until every subscriber is connected before the clock starts (raw: a warm-up
//! record reached each SUB; zlink: each subscriber reports the publisher ready), and both use a
//! send and receive high-water mark of 1,000,000 messages, above N, so PUB does not drop. Drops
//! are still measured honestly: a subscriber that makes no progress for 2 s ends the
//! measurement, and the table reports `received < N` as drops. Rounds interleave raw and zlink;
//! the ratio is taken per round (zlink ÷ raw), then its median is reported.
//!
//! Every loop is bounded by its event count and every wait by a timeout; a measurement that
//! exceeds `ZLINK_BENCH_LIMIT_SECS` (60) aborts the run with status 1.
//!
//! Environment: `ZLINK_BENCH_ROUNDS` (5), `ZLINK_BENCH_SCALE` (1.0, multiplies N: 200,000 events
//! of 64 B, 100,000 of 1 KiB), `ZLINK_BENCH_WORKERS` (2 tokio workers),
//! `ZLINK_BENCH_LIMIT_SECS` (60).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // benchmark binary

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;
use zlink::fanout::{FanoutHandlers, Publisher, PublisherConfig, Subscriber, SubscriberConfig};
use zlink::mesh::handler::RAW_CONTENT_TYPE;
use zlink_protocol::envelope::TypedPayload;

const SIZES: [usize; 2] = [64, 1024];
const SUBSCRIBERS: [usize; 2] = [1, 3];
const HWM: i32 = 1_000_000;
/// A subscriber that makes no progress for this long ends the measurement (drops).
const IDLE: Duration = Duration::from_secs(2);
const TOPIC: &str = "bench";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Clone, Copy)]
struct Outcome {
    events_per_sec: f64,
    /// Events not counted at the subscribers (sum over subscribers).
    drops: u64,
}

fn events_for(size: usize, scale: f64) -> u64 {
    let base = if size <= 64 { 200_000.0 } else { 100_000.0 };
    ((base * scale) as u64).max(1_000)
}

fn raw(ctx: &zmq::Context, size: usize, subs: usize, n: u64) -> Outcome {
    let publisher = ctx.socket(zmq::PUB).unwrap();
    publisher.set_sndhwm(HWM).unwrap();
    publisher.set_linger(0).unwrap();
    publisher.bind("tcp://127.0.0.1:0").unwrap();
    let ep = publisher.get_last_endpoint().unwrap().unwrap();
    let joined = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for _ in 0..subs {
        let s = ctx.socket(zmq::SUB).unwrap();
        s.set_rcvhwm(HWM).unwrap();
        s.set_rcvtimeo(i32::try_from(IDLE.as_millis()).unwrap())
            .unwrap();
        s.set_subscribe(TOPIC.as_bytes()).unwrap();
        s.connect(&ep).unwrap();
        let joined = Arc::clone(&joined);
        threads.push(std::thread::spawn(move || {
            let mut warm = false;
            let mut count = 0u64;
            while count < n {
                match s.recv_multipart(0) {
                    Ok(m) if m[1].is_empty() => {
                        if !warm {
                            warm = true;
                            joined.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                    Ok(_) => count += 1,
                    Err(_) => break, // idle: the rest was dropped
                }
            }
            (Instant::now(), count)
        }));
    }
    // Warm-up records until every SUB is connected and subscribed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while joined.load(Ordering::Acquire) < subs {
        assert!(Instant::now() < deadline, "raw SUB sockets did not connect");
        publisher
            .send_multipart([TOPIC.as_bytes(), &[]], 0)
            .unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let payload = vec![0xA5u8; size];
    let start = Instant::now();
    for _ in 0..n {
        publisher
            .send_multipart([TOPIC.as_bytes(), &payload[..]], 0)
            .unwrap();
    }
    let mut end = start;
    let mut drops = 0;
    for t in threads {
        let (at, count) = t.join().unwrap();
        end = end.max(at);
        drops += n - count;
    }
    Outcome {
        events_per_sec: n as f64 / (end - start).as_secs_f64(),
        drops,
    }
}

struct Counter {
    count: AtomicU64,
    target: u64,
    done: Notify,
}

async fn zlink(size: usize, subs: usize, n: u64) -> Outcome {
    let mut pc = PublisherConfig::new("bench");
    pc.beacon_interval = Duration::from_millis(10);
    pc.send_hwm = HWM;
    let publisher = Publisher::start(pc, None).await.unwrap();
    let mut subscribers = Vec::new();
    let mut counters = Vec::new();
    for _ in 0..subs {
        let counter = Arc::new(Counter {
            count: AtomicU64::new(0),
            target: n,
            done: Notify::new(),
        });
        let c = Arc::clone(&counter);
        let mut h = FanoutHandlers::new();
        h.on_event_raw(TOPIC, "bench", move |_, _| {
            if c.count.fetch_add(1, Ordering::Relaxed) + 1 == c.target {
                c.done.notify_one();
            }
            std::future::ready(Ok(()))
        });
        let mut sc = SubscriberConfig::new("bench");
        sc.manual_endpoints = vec![publisher.endpoint().to_owned()];
        sc.recv_hwm = HWM;
        let s = Subscriber::start(sc, h, None).unwrap();
        s.wait_all_ready(1, Duration::from_secs(10))
            .await
            .expect("subscriber ready");
        subscribers.push(s);
        counters.push(counter);
    }
    let payload = TypedPayload::new("bench", RAW_CONTENT_TYPE, Bytes::from(vec![0xA5u8; size]));
    let start = Instant::now();
    for _ in 0..n {
        publisher
            .publish_payload(TOPIC, &payload, None)
            .await
            .unwrap();
    }
    let mut drops = 0;
    for c in &counters {
        // Wait for the last event, giving up after IDLE without progress.
        loop {
            let before = c.count.load(Ordering::Acquire);
            if before >= n {
                break;
            }
            if tokio::time::timeout(IDLE, c.done.notified()).await.is_ok() {
                break;
            }
            if c.count.load(Ordering::Acquire) == before {
                drops += n - before;
                break;
            }
        }
    }
    let elapsed = start.elapsed();
    for s in &subscribers {
        s.shutdown().await;
    }
    publisher.shutdown().await;
    Outcome {
        events_per_sec: n as f64 / elapsed.as_secs_f64(),
        drops,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes no other arguments.
    let rounds: usize = env_or("ZLINK_BENCH_ROUNDS", 5).max(1);
    let scale: f64 = env_or("ZLINK_BENCH_SCALE", 1.0);
    let workers: usize = env_or("ZLINK_BENCH_WORKERS", 2).max(1);
    let limit = Duration::from_secs(env_or("ZLINK_BENCH_LIMIT_SECS", 60));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let ctx = zmq::Context::new();
    let cases: Vec<(usize, usize)> = SIZES
        .iter()
        .flat_map(|&size| SUBSCRIBERS.iter().map(move |&subs| (size, subs)))
        .collect();
    // results[case] = (raw, zlink) per round
    let mut results: Vec<Vec<(Outcome, Outcome)>> = vec![Vec::new(); cases.len()];
    println!("fanout bench: {rounds} rounds, scale {scale}, {workers} tokio workers, HWM {HWM}");
    for round in 1..=rounds {
        for (i, &(size, subs)) in cases.iter().enumerate() {
            let n = events_for(size, scale);
            let t = Instant::now();
            let r = raw(&ctx, size, subs, n);
            let z = rt.block_on(async { tokio::time::timeout(limit, zlink(size, subs, n)).await });
            let Ok(z) = z else {
                eprintln!("fanout bench: zlink {size} B × {subs} subscribers exceeded {limit:?}");
                std::process::exit(1);
            };
            if t.elapsed() > limit * 2 {
                eprintln!("fanout bench: {size} B × {subs} subscribers exceeded {limit:?}");
                std::process::exit(1);
            }
            println!(
                "round {round}: {size:>5} B × {subs} sub  raw {:>10.0} ev/s  zlink {:>10.0} ev/s  ratio {:.2}  drops raw {} zlink {}",
                r.events_per_sec,
                z.events_per_sec,
                z.events_per_sec / r.events_per_sec,
                r.drops,
                z.drops
            );
            results[i].push((r, z));
        }
    }
    println!();
    println!(
        "| payload | subscribers | events | raw ev/s median | zlink ev/s median | zlink ÷ raw median (min–max) | drops raw / zlink (all rounds) |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (i, &(size, subs)) in cases.iter().enumerate() {
        let rs = &results[i];
        let mut raw_v: Vec<f64> = rs.iter().map(|(r, _)| r.events_per_sec).collect();
        let mut z_v: Vec<f64> = rs.iter().map(|(_, z)| z.events_per_sec).collect();
        let mut ratio: Vec<f64> = rs
            .iter()
            .map(|(r, z)| z.events_per_sec / r.events_per_sec)
            .collect();
        let (min, max) = (
            ratio.iter().copied().fold(f64::INFINITY, f64::min),
            ratio.iter().copied().fold(0.0, f64::max),
        );
        let drops_raw: u64 = rs.iter().map(|(r, _)| r.drops).sum();
        let drops_z: u64 = rs.iter().map(|(_, z)| z.drops).sum();
        println!(
            "| {size} B | {subs} | {} | {:.0} | {:.0} | {:.2} ({min:.2}–{max:.2}) | {drops_raw} / {drops_z} |",
            events_for(size, scale),
            median(&mut raw_v),
            median(&mut z_v),
            median(&mut ratio),
        );
    }
}
