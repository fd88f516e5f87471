//! Backpressure end to end (glossary §3 "Backpressure"): a slow consumer makes senders wait
//! with bounded bytes in flight and zero loss or duplication. (The job-queue pressure test is
//! in `mesh_pressure.rs`, alone in its binary because it measures process CPU time.)
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use zlink::jobs::JobQueueConfig;
use zlink::mesh::Handlers;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_makes_senders_wait_with_bounded_bytes_in_flight_and_no_loss() {
    const N: u64 = 1_500;
    const SIZE: usize = 1_024;
    const WINDOW: u32 = 16 * 1024;
    const PERMITS: usize = 32;
    let got = Arc::new(Mutex::new(Vec::with_capacity(N as usize)));
    let mut hb = Handlers::new();
    let g = Arc::clone(&got);
    hb.on_send_raw("bulk", move |_, bytes| {
        let g = Arc::clone(&g);
        async move {
            g.lock().unwrap().push(seq_of(&bytes));
            // A slow consumer: ~0.5 ms per message.
            tokio::time::sleep(Duration::from_micros(500)).await;
            Ok(())
        }
    });
    let mut cb = config("m", "node-b");
    cb.flow.window_bytes = WINDOW;
    cb.jobs = JobQueueConfig::with_permits(PERMITS);
    let (a, b) = pair_with(cb, hb).await;
    let a = Arc::new(a);
    let conn = a.connection("node-b").unwrap();
    let max_in_flight = Arc::new(AtomicU64::new(0));
    let max_queued = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (a, conn) = (Arc::clone(&a), Arc::clone(&conn));
        let (max, maxq) = (Arc::clone(&max_in_flight), Arc::clone(&max_queued));
        tokio::spawn(async move {
            loop {
                max.fetch_max(conn.bytes_in_flight(), Ordering::Relaxed);
                maxq.fetch_max(a.queued_data_bytes() as u64, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        })
    };
    for seq in 0..N {
        a.send_payload("node-b", payload(seq, SIZE), None)
            .await
            .unwrap();
    }
    // The sender finished only because the consumer kept up: what is not consumed yet is at
    // most one credit window plus the jobs claimed under job-queue permits.
    let record = SIZE as u64 + 200;
    let consumed_when_done = got.lock().unwrap().len() as u64;
    assert!(
        consumed_when_done + u64::from(WINDOW) / (SIZE as u64) + PERMITS as u64 + 2 >= N,
        "sender ran ahead: {consumed_when_done} of {N} consumed when the last send returned"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while (got.lock().unwrap().len() as u64) < N && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sampler.abort();
    let _ = sampler.await;
    let got = got.lock().unwrap().clone();
    assert_eq!(
        got,
        (0..N).collect::<Vec<_>>(),
        "loss, duplication or reordering"
    );
    let max = max_in_flight.load(Ordering::Relaxed);
    let max_q = max_queued.load(Ordering::Relaxed);
    // Credit bounds everything in flight (the pump queue, ZeroMQ pipes, kernel buffers, the
    // receiver's unclaimed records) to the window, the HWM of this connection; the pump
    // queue is part of it and stays within the window plus one record.
    assert!(
        max <= u64::from(WINDOW),
        "bytes in flight reached {max}, HWM {WINDOW}"
    );
    assert!(
        max_q <= u64::from(WINDOW) + record,
        "bytes queued in the transport reached {max_q}, HWM {WINDOW}"
    );
    assert!(
        max >= u64::from(WINDOW) / 2,
        "the window was never used ({max} bytes)"
    );
    assert_eq!(
        conn.generation(),
        a.peer("node-b").unwrap().connection_generation.unwrap()
    );
    Arc::try_unwrap(a).ok().unwrap().shutdown().await;
    b.shutdown().await;
}
