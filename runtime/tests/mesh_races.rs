//! Exactly one terminal result per request at the socket level (glossary §3, wire §11): replies
//! racing deadlines, caller cancellation, shutdown and peer death over real ZeroMQ sockets.
//! The pure table is covered over 10,000 seeded schedules in `call::pending`; these tests
//! check the shell keeps its promise under real concurrency. Run 20× before trusting a change.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use zlink::call::error::ErrorKind;
use zlink::mesh::{Handlers, MeshNode};

/// A handler that answers after a delay carried in the request, and counts replies it sent.
fn delayed_echo(handled: Arc<AtomicU64>) -> Handlers {
    let mut h = Handlers::new();
    h.on_request_concurrent(256, move |_, e: Echo| {
        let handled = Arc::clone(&handled);
        async move {
            tokio::time::sleep(Duration::from_micros(e.n)).await;
            handled.fetch_add(1, Ordering::SeqCst);
            Ok(e)
        }
    });
    h
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Spawn `n` echo requests from `a` to node-b, each asking the handler to wait a seeded
/// random number of microseconds below `max_delay_us`; one end-to-end deadline of `WAIT`.
fn spawn_echo_requests(
    a: &Arc<MeshNode>,
    n: usize,
    mut seed: u64,
    max_delay_us: u64,
) -> Vec<tokio::task::JoinHandle<Result<Echo, zlink::call::error::CallError>>> {
    (0..n)
        .map(|_| {
            let delay_us = xorshift(&mut seed) % max_delay_us;
            let a = Arc::clone(a);
            tokio::spawn(async move {
                a.request::<Echo, Echo>(
                    "node-b",
                    &Echo {
                        text: String::new(),
                        n: delay_us,
                    },
                    WAIT,
                )
                .await
            })
        })
        .collect()
}

/// Wait until `b` sent `expected_replies` replies and every one of them either completed its
/// request (first terminal wins) or was counted as a late reply. Bounded by
/// `WAIT`; the caller's assertions fail if that never happens.
async fn settle(a: &MeshNode, b: &MeshNode, expected_replies: u64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = a.request_stats();
        let sent = b.metrics().replies_sent.load(Ordering::SeqCst);
        if (sent >= expected_replies
            && a.pending_requests() == 0
            && s.completed_by_reply + s.late_replies == sent)
            || tokio::time::Instant::now() >= deadline
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_racing_deadlines_complete_each_request_exactly_once() {
    let handled = Arc::new(AtomicU64::new(0));
    let (a, b) = pair(Handlers::new(), delayed_echo(Arc::clone(&handled))).await;
    let a = Arc::new(a);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut tasks = Vec::new();
    const N: u64 = 300;
    for i in 0..N {
        // Handler delays spread around the 20 ms timeout.
        let delay_us = xorshift(&mut seed) % 40_000;
        let a = Arc::clone(&a);
        tasks.push(tokio::spawn(async move {
            a.request::<Echo, Echo>(
                "node-b",
                &Echo {
                    text: i.to_string(),
                    n: delay_us,
                },
                Duration::from_millis(20),
            )
            .await
        }));
    }
    let (mut ok, mut timed_out) = (0u64, 0u64);
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(e) => {
                assert_eq!(e.text, i.to_string(), "a reply completed another request");
                ok += 1;
            }
            Err(e) if e.kind() == ErrorKind::DeadlineExceeded => timed_out += 1,
            Err(e) => panic!("unexpected terminal {e}"),
        }
    }
    assert_eq!(ok + timed_out, N);
    settle(&a, &b, N).await;
    assert_eq!(a.pending_requests(), 0);
    // Every reply the handler sent either completed its request or was counted late.
    let stats = a.request_stats();
    assert_eq!(stats.completed_ok, ok);
    assert_eq!(stats.completed_by(ErrorKind::DeadlineExceeded), timed_out);
    // A request whose deadline passed before the handler ran is answered DeadlineExceeded
    // without running it, so count replies sent rather than handler runs.
    let sent = b.metrics().replies_sent.load(Ordering::SeqCst);
    assert!(sent >= handled.load(Ordering::SeqCst));
    assert_eq!(stats.completed_by_reply + stats.late_replies, sent);
    Arc::try_unwrap(a).ok().unwrap().shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_callers_leave_nothing_pending_and_their_replies_count_late() {
    let handled = Arc::new(AtomicU64::new(0));
    let (a, b) = pair(Handlers::new(), delayed_echo(Arc::clone(&handled))).await;
    let a = Arc::new(a);
    let ok = Arc::new(AtomicU64::new(0));
    let mut seed = 0xD1B5_4A32_D192_ED03u64;
    let mut tasks = Vec::new();
    const N: u64 = 200;
    for _ in 0..N {
        let delay_us = xorshift(&mut seed) % 10_000;
        let (a, ok) = (Arc::clone(&a), Arc::clone(&ok));
        tasks.push((
            xorshift(&mut seed) % 10_000,
            tokio::spawn(async move {
                let r = a
                    .request::<Echo, Echo>(
                        "node-b",
                        &Echo {
                            text: String::new(),
                            n: delay_us,
                        },
                        WAIT,
                    )
                    .await;
                if r.is_ok() {
                    ok.fetch_add(1, Ordering::SeqCst);
                }
            }),
        ));
    }
    // Abort callers at random moments: before send, while waiting, or after completion.
    for (cancel_after_us, t) in &tasks {
        tokio::time::sleep(Duration::from_micros(*cancel_after_us / 50)).await;
        t.abort();
    }
    for (_, t) in tasks {
        let _ = t.await;
    }
    // Some requests never reached the handler (cancelled before the send): wait for the
    // handler to go quiet instead of for a fixed count.
    let mut last = u64::MAX;
    while b.metrics().replies_sent.load(Ordering::SeqCst) != last {
        last = b.metrics().replies_sent.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settle(&a, &b, last).await;
    assert_eq!(
        a.pending_requests(),
        0,
        "a cancelled request stayed pending"
    );
    // A reply may complete a request whose caller was aborted a moment later, so count
    // completions in the table, not observed results.
    let stats = a.request_stats();
    assert!(stats.completed_ok >= ok.load(Ordering::SeqCst));
    assert_eq!(
        stats.completed_by_reply + stats.late_replies,
        b.metrics().replies_sent.load(Ordering::SeqCst)
    );
    Arc::try_unwrap(a).ok().unwrap().shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_racing_replies_ends_every_request_once_with_ok_or_shutting_down() {
    let handled = Arc::new(AtomicU64::new(0));
    let (a, b) = pair(Handlers::new(), delayed_echo(Arc::clone(&handled))).await;
    let a = Arc::new(a);
    let tasks = spawn_echo_requests(&a, 200, 7, 20_000);
    tokio::time::sleep(Duration::from_millis(8)).await;
    a.shutdown().await;
    for t in tasks {
        match tokio::time::timeout(WAIT, t).await.unwrap().unwrap() {
            Ok(_) => {}
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::ShuttingDown | ErrorKind::Unavailable),
                "unexpected terminal {e}"
            ),
        }
    }
    assert_eq!(a.pending_requests(), 0);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_death_racing_replies_ends_every_request_once() {
    let handled = Arc::new(AtomicU64::new(0));
    let (a, b) = pair_timed(
        Handlers::new(),
        delayed_echo(Arc::clone(&handled)),
        liveness_timings(),
    )
    .await;
    let a = Arc::new(a);
    let tasks = spawn_echo_requests(&a, 200, 11, 30_000);
    tokio::time::sleep(Duration::from_millis(10)).await;
    b.set_frozen(true);
    let (mut ok, mut unavailable) = (0, 0);
    for t in tasks {
        match tokio::time::timeout(WAIT, t).await.unwrap().unwrap() {
            Ok(_) => ok += 1,
            Err(e) if e.kind() == ErrorKind::Unavailable => unavailable += 1,
            Err(e) => panic!("unexpected terminal {e}"),
        }
    }
    assert_eq!(ok + unavailable, 200);
    assert_eq!(a.pending_requests(), 0);
    b.set_frozen(false);
    Arc::try_unwrap(a).ok().unwrap().shutdown().await;
    b.shutdown().await;
}
