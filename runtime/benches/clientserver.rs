//! ClientServer benchmark: request/reply between an in-process `ClientServerClient` and
//! `ClientServerServer` over 127.0.0.1, next to a raw DEALER → ROUTER echo written directly
//! against the `zmq` crate in the same run (the baseline `docs/benchmarks.md` reports ratios
//! against).
//!
//! ```text
//! cargo bench -p zlink --bench clientserver
//! ```
//!
//! Two workloads with a 64 B payload:
//!
//! * **serial** — one request outstanding at a time. Raw: a DEALER ping-pong against a ROUTER
//!   echo thread. zlink: `request` to a raw echo handler.
//! * **in-flight** — 32 requests outstanding. Raw: one DEALER thread keeps 32 echoes in flight.
//!   zlink: 32 tasks each issuing requests one after another, echo handler concurrency 32.
//!
//! Rounds interleave raw and zlink; the ratio (zlink ÷ raw requests per second) is taken per
//! round and its median reported. Environment: `ZLINK_BENCH_ROUNDS` (3), `ZLINK_BENCH_REQUESTS`
//! (20000).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // benchmark binary

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink::call::error::CallError;
use zlink::clientserver::{ClientConfig, ClientServerClient, ClientServerServer, ServerConfig};
use zlink::mesh::Handlers;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::handler::RAW_CONTENT_TYPE;
use zlink_protocol::envelope::TypedPayload;

const IN_FLIGHT: usize = 32;
const SIZE: usize = 64;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Requests per second of a raw DEALER/ROUTER echo with `window` requests outstanding.
fn raw(requests: usize, window: usize) -> f64 {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER).unwrap();
    router.set_linger(0).unwrap();
    router.set_rcvtimeo(5_000).unwrap();
    router.bind("tcp://127.0.0.1:*").unwrap();
    let endpoint = router.get_last_endpoint().unwrap().unwrap();
    let echo = std::thread::spawn(move || {
        for _ in 0..requests {
            let m = router.recv_multipart(0).unwrap();
            router.send_multipart(m, 0).unwrap();
        }
    });
    let dealer = ctx.socket(zmq::DEALER).unwrap();
    dealer.set_linger(0).unwrap();
    dealer.set_rcvtimeo(5_000).unwrap();
    dealer.connect(&endpoint).unwrap();
    let payload = vec![7u8; SIZE];
    let header =
        b"\xf2{\"kind\":\"request\",\"packetName\":\"echo\",\"correlationId\":\"1\"}".to_vec();
    let start = Instant::now();
    let mut sent = 0;
    let mut received = 0;
    while received < requests {
        while sent < requests && sent - received < window {
            dealer
                .send_multipart([header.as_slice(), payload.as_slice()], 0)
                .unwrap();
            sent += 1;
        }
        dealer.recv_multipart(0).unwrap();
        received += 1;
    }
    let rate = requests as f64 / start.elapsed().as_secs_f64();
    echo.join().unwrap();
    rate
}

async fn zlink(client: &Arc<ClientServerClient>, requests: usize, window: usize) -> f64 {
    let payload = TypedPayload::new("echo", RAW_CONTENT_TYPE, Bytes::from(vec![7u8; SIZE]));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..window {
        let client = Arc::clone(client);
        let payload = payload.clone();
        let n = requests / window + usize::from(w < requests % window);
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                client
                    .request(payload.clone(), Some(Duration::from_secs(5)))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    requests as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = env_or("ZLINK_BENCH_ROUNDS", 3);
    let requests: usize = env_or("ZLINK_BENCH_REQUESTS", 20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let secret = MeshSecret::from_bytes(b"bench-secret-0123456789").unwrap();
        let mut h = Handlers::new();
        h.on_request_raw(
            "echo",
            IN_FLIGHT,
            |_, b| async move { Ok::<_, CallError>(b) },
        );
        let server = ClientServerServer::start(ServerConfig::new("bench", secret.clone()), h, None)
            .await
            .unwrap();
        let mut cc = ClientConfig::new("bench", secret);
        cc.manual_endpoints.push(server.endpoint().to_owned());
        let client = Arc::new(ClientServerClient::start(cc, None).await.unwrap());
        assert!(client.wait_selectable(1, Duration::from_secs(10)).await);
        zlink(&client, 1_000, IN_FLIGHT).await; // warm-up
        println!("workload   raw req/s   zlink req/s   ratio (median of {rounds} rounds)");
        for (name, window) in [("serial", 1), ("in-flight", IN_FLIGHT)] {
            let mut raws = Vec::new();
            let mut zs = Vec::new();
            let mut ratios = Vec::new();
            for _ in 0..rounds {
                let r = tokio::task::spawn_blocking(move || raw(requests, window))
                    .await
                    .unwrap();
                let z = zlink(&client, requests, window).await;
                raws.push(r);
                zs.push(z);
                ratios.push(z / r);
            }
            println!(
                "{name:<10} {:>9.0}   {:>11.0}   {:.2}",
                median(raws),
                median(zs),
                median(ratios)
            );
        }
        client.shutdown().await;
        server.shutdown().await;
    });
}
