//! Job-queue pressure end to end (glossary §3 "Application job queue"): a blocked handler
//! holds permits at the pause threshold, the sender waits for credit, waiting uses ~no CPU,
//! and delivery resumes — complete, once, in order — when the handler moves on. Alone in its
//! test binary because it measures this process's CPU time.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use zlink::jobs::{JobQueueConfig, PressureState};
use zlink::mesh::Handlers;

/// CPU time (user + system) of this process, from /proc/self/stat, in clock ticks (10 ms).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_handler_holds_permits_at_the_pause_threshold_and_delivery_resumes() {
    const N: u64 = 200;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut hb = Handlers::new();
    {
        let (gate, got) = (Arc::clone(&gate), Arc::clone(&got));
        hb.on_send_raw("bulk", move |_, bytes| {
            let (gate, got) = (Arc::clone(&gate), Arc::clone(&got));
            async move {
                let seq = seq_of(&bytes);
                if seq == 0 {
                    // The first message blocks its (serialized) handler until released.
                    gate.acquire().await.unwrap().forget();
                }
                got.lock().unwrap().push(seq);
                Ok(())
            }
        });
    }
    let mut cb = config("m", "node-b");
    cb.jobs = JobQueueConfig::with_permits(10);
    cb.flow.window_bytes = 8 * 1024;
    let (a, b) = pair_with(cb, hb).await;
    let mut pressure = b.jobs().subscribe();
    let transitions = Arc::new(Mutex::new(Vec::new()));
    let recorder = {
        let t = Arc::clone(&transitions);
        let jobs = b.jobs().clone();
        tokio::spawn(async move {
            while pressure.changed().await.is_ok() {
                let s = *pressure.borrow_and_update();
                t.lock().unwrap().push((s, jobs.in_use()));
            }
        })
    };
    let a = Arc::new(a);
    let sender = {
        let a = Arc::clone(&a);
        tokio::spawn(async move {
            for seq in 0..N {
                a.send_payload("node-b", payload(seq, 256), None)
                    .await
                    .unwrap();
            }
        })
    };
    // All permits end up held by jobs queued behind the blocked handler.
    let deadline = tokio::time::Instant::now() + WAIT;
    while b.jobs().in_use() < 10 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(b.jobs().in_use(), 10);
    assert_eq!(b.jobs().pressure(), PressureState::Paused);
    // Nothing moves and nothing spins while blocked: the sender waits for credit, the
    // dispatcher for a permit.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let delivered_before = got.lock().unwrap().len();
    let cpu0 = cpu_ticks();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let cpu = cpu_ticks() - cpu0;
    assert!(
        cpu <= 15,
        "waiting used {cpu} ticks (10 ms each) of CPU in 1 s"
    );
    assert_eq!(got.lock().unwrap().len(), delivered_before);
    assert!(
        !sender.is_finished(),
        "the sender should be waiting for credit"
    );
    let in_flight = a.connection("node-b").unwrap().bytes_in_flight();
    assert!(
        in_flight > 0 && in_flight <= 8 * 1024,
        "in flight {in_flight}"
    );
    // Release: everything is delivered, once, in order, and pressure returns to Running.
    gate.add_permits(1);
    sender.await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while (got.lock().unwrap().len() as u64) < N && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(*got.lock().unwrap(), (0..N).collect::<Vec<_>>());
    let deadline = tokio::time::Instant::now() + WAIT;
    while b.jobs().pressure() != PressureState::Running && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(b.jobs().pressure(), PressureState::Running);
    recorder.abort();
    let t = transitions.lock().unwrap().clone();
    assert!(
        t.iter()
            .any(|(s, n)| *s == PressureState::Paused && *n >= 8),
        "{t:?}"
    );
    // The hysteresis itself (pause at ≥ 8 of 10, resume at ≤ 6, no change at 7) is checked
    // exactly by the pure tests in `jobs.rs`; `in_use` read here may already have moved on.
    assert_eq!(
        t.last().map(|(s, _)| *s),
        Some(PressureState::Running),
        "{t:?}"
    );
    assert_eq!(a.metrics().liveness_deaths.load(Ordering::Relaxed), 0);
    Arc::try_unwrap(a).ok().unwrap().shutdown().await;
    b.shutdown().await;
}
