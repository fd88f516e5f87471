//! Regression tests for defects found in review of the mesh transport.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use zlink::call::error::{CallError, ErrorKind};
use zlink::jobs::JobQueueConfig;
use zlink::mesh::{Handlers, ManualPeer};

/// Each side grants its own receive window; records sized between the two windows' halves
/// must neither be refused as `charge_mismatch` nor trip `credit_exceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_with_different_credit_windows_exchange_large_records_both_ways() {
    let got_b = Arc::new(AtomicU64::new(0));
    let got_a = Arc::new(AtomicU64::new(0));
    let mut hb = Handlers::new();
    {
        let g = Arc::clone(&got_b);
        hb.on_send_raw("bulk", move |_, _| {
            g.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        });
    }
    let mut ha = Handlers::new();
    {
        let g = Arc::clone(&got_a);
        ha.on_send_raw("bulk", move |_, _| {
            g.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        });
    }
    let mut cb = config("m", "node-b");
    cb.flow.window_bytes = 16 * 1024;
    let b = start(cb, hb).await;
    let mut ca = config("m", "node-a");
    ca.flow.window_bytes = 256 * 1024;
    ca.manual_peers.push(ManualPeer {
        endpoint: b.endpoint().to_owned(),
        expected_rid: Some("node-b".into()),
    });
    let a = start(ca, ha).await;
    a.wait_ready("node-b", WAIT).await.unwrap();
    b.wait_ready("node-a", WAIT).await.unwrap();
    for seq in 0..100 {
        a.send_payload("node-b", payload(seq, 30 * 1024), None)
            .await
            .unwrap();
        b.send_payload("node-a", payload(seq, 30 * 1024), None)
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while (got_a.load(Ordering::SeqCst) < 100 || got_b.load(Ordering::SeqCst) < 100)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        (got_a.load(Ordering::SeqCst), got_b.load(Ordering::SeqCst)),
        (100, 100)
    );
    assert!(
        a.metrics().protocol_errors().is_empty(),
        "{:?}",
        a.metrics().protocol_errors()
    );
    assert!(
        b.metrics().protocol_errors().is_empty(),
        "{:?}",
        b.metrics().protocol_errors()
    );
    assert_eq!(a.peer("node-b").unwrap().epochs, 1);
    let ca = a.connection("node-b").unwrap();
    assert_eq!(ca.peer_window(), Some(16 * 1024));
    a.shutdown().await;
    b.shutdown().await;
}

/// A panicking handler answers `HandlerFailed` and its runner keeps serving later records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_fails_its_request_and_keeps_serving() {
    let mut hb = Handlers::new();
    hb.on_request(|_, e: Echo| async move {
        if e.n == 13 {
            panic!("unlucky request");
        }
        Ok::<_, CallError>(e)
    });
    let (a, b) = pair(Handlers::new(), hb).await;
    let err = a
        .request::<Echo, Echo>(
            "node-b",
            &Echo {
                text: String::new(),
                n: 13,
            },
            WAIT,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HandlerFailed);
    for n in 0..5 {
        let r: Echo = a
            .request(
                "node-b",
                &Echo {
                    text: String::new(),
                    n,
                },
                WAIT,
            )
            .await
            .unwrap();
        assert_eq!(r.n, n);
    }
    assert_eq!(b.metrics().handler_panics.load(Ordering::Relaxed), 1);
    a.shutdown().await;
    b.shutdown().await;
}

/// With a single job permit the pause threshold is 1 and the resume threshold 0: an idle
/// node must hold no permit, or it would stay paused and withhold credit for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_one_job_permit_keeps_receiving() {
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut hb = Handlers::new();
    {
        let got = Arc::clone(&got);
        hb.on_send_raw("bulk", move |_, bytes| {
            got.lock().unwrap().push(seq_of(&bytes));
            async { Ok(()) }
        });
    }
    let mut cb = config("m", "node-b");
    cb.jobs = JobQueueConfig::with_permits(1);
    cb.flow.window_bytes = 8 * 1024;
    let (a, b) = pair_with(cb, hb).await;
    const N: u64 = 500;
    for seq in 0..N {
        tokio::time::timeout(WAIT, a.send_payload("node-b", payload(seq, 512), None))
            .await
            .expect("send stalled: credit was never returned")
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while (got.lock().unwrap().len() as u64) < N && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(*got.lock().unwrap(), (0..N).collect::<Vec<_>>());
    a.shutdown().await;
    b.shutdown().await;
}

/// A peer whose connection ends without a liveness verdict (here: its process-side node is
/// dropped, so the TCP connection closes) and does not come back within the liveness deadline
/// counts as dead for its pending requests: they fail `Unavailable` then, not at their own
/// (much later) deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_to_a_peer_that_disconnected_fail_after_the_liveness_deadline() {
    let mut hb = Handlers::new();
    hb.on_request(|_, e: Echo| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok::<_, CallError>(e)
    });
    let (a, b) = pair(Handlers::new(), hb).await;
    let a = Arc::new(a);
    let req = {
        let a = Arc::clone(&a);
        tokio::spawn(async move {
            let t0 = std::time::Instant::now();
            let r = a
                .request::<Echo, Echo>(
                    "node-b",
                    &Echo {
                        text: String::new(),
                        n: 1,
                    },
                    Duration::from_secs(20),
                )
                .await;
            (r, t0.elapsed())
        })
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.pending_requests() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(b);
    let (r, took) = tokio::time::timeout(WAIT, req).await.unwrap().unwrap();
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Unavailable);
    let liveness = fast_timings().liveness_deadline;
    assert!(
        took <= liveness + Duration::from_millis(1_000),
        "failed only after {took:?} (liveness deadline {liveness:?})"
    );
    assert_eq!(a.pending_requests(), 0);
    Arc::try_unwrap(a).ok().unwrap().shutdown().await;
}
