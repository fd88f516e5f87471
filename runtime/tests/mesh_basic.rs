//! In-process two-node tests on 127.0.0.1 with real ZeroMQ sockets: admission, node direct
//! send/request, typed errors.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::{Handlers, PeerState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_admit_each_other_and_answer_a_request() {
    let (a, b) = pair(Handlers::new(), echo_handlers()).await;
    let reply: Echo = a
        .request(
            "node-b",
            &Echo {
                text: "hi".into(),
                n: 1,
            },
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(
        reply,
        Echo {
            text: "hi".into(),
            n: 2
        }
    );
    let pa = a.peer("node-b").unwrap();
    let pb = b.peer("node-a").unwrap();
    assert_eq!(pa.state, PeerState::Ready);
    assert_eq!(pa.connection_generation, pb.connection_generation);
    assert_eq!(pa.epochs, 1);
    assert_eq!(a.pending_requests(), 0);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_sends_arrive_in_order() {
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut hb = Handlers::new();
    let g = Arc::clone(&got);
    hb.on_send(move |_, n: Note| {
        let g = Arc::clone(&g);
        async move {
            g.lock().unwrap().push(n.seq);
            Ok(())
        }
    });
    let (a, b) = pair(Handlers::new(), hb).await;
    for seq in 0..500 {
        a.send(
            "node-b",
            &Note {
                seq,
                body: "x".into(),
            },
        )
        .await
        .unwrap();
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while got.lock().unwrap().len() < 500 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*got.lock().unwrap(), (0..500).collect::<Vec<_>>());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_errors_and_missing_handlers_come_back_typed() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Boom;
    impl zlink::mesh::JsonMessage for Boom {
        const PACKET_NAME: &'static str = "test.Boom";
    }
    let mut hb = Handlers::new();
    hb.on_request(|_, _: Boom| async {
        Err::<Echo, _>(CallError::new(ErrorKind::Conflict, "busy"))
    });
    let (a, b) = pair(Handlers::new(), hb).await;
    let err = a
        .request::<Boom, Echo>("node-b", &Boom, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.detail(), "busy");
    let err = a
        .request::<Echo, Echo>(
            "node-b",
            &Echo {
                text: String::new(),
                n: 0,
            },
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = a
        .send(
            "node-zzz",
            &Note {
                seq: 0,
                body: String::new(),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    a.shutdown().await;
    b.shutdown().await;
}

/// A handler's reply that the wire cannot carry (here a packet name over the 255 bytes of
/// wire §5) is answered with `InvalidOperation` naming why, instead of never (the reply is
/// encoded straight into the transport message; its error path sends the error reply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_the_wire_cannot_carry_comes_back_as_invalid_operation() {
    #[derive(serde::Serialize, serde::Deserialize, Debug)]
    struct Huge;
    impl zlink::mesh::JsonMessage for Huge {
        const PACKET_NAME: &'static str = concat!(
            "test.Huge.0123456789012345678901234567890123456789012345678901234567890123456789",
            "0123456789012345678901234567890123456789012345678901234567890123456789012345678",
            "0123456789012345678901234567890123456789012345678901234567890123456789012345678",
            "0123456789012345678901234567890123456789"
        );
    }
    assert!(<Huge as zlink::mesh::JsonMessage>::PACKET_NAME.len() > 255);
    let mut hb = Handlers::new();
    hb.on_request(|_, _: Echo| async { Ok::<_, CallError>(Huge) });
    let (a, b) = pair(Handlers::new(), hb).await;
    // Twice: the connection carries on after the first.
    for n in 0..2 {
        let err = a
            .request::<Echo, Huge>(
                "node-b",
                &Echo {
                    text: String::new(),
                    n,
                },
                Duration::from_secs(5),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{err:?}");
        assert!(err.detail().starts_with("reply not encodable"), "{err:?}");
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handler_times_out_once_and_the_late_reply_is_dropped_and_counted() {
    let calls = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&calls);
    let mut hb = Handlers::new();
    hb.on_request(move |_, e: Echo| {
        c.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(e)
        }
    });
    let (a, b) = pair(Handlers::new(), hb).await;
    let err = a
        .request::<Echo, Echo>(
            "node-b",
            &Echo {
                text: String::new(),
                n: 0,
            },
            Duration::from_millis(100),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.late_replies() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(a.late_replies(), 1);
    assert_eq!(a.pending_requests(), 0);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_completes_pending_requests_with_shutting_down() {
    let mut hb = Handlers::new();
    hb.on_request(|_, e: Echo| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(e)
    });
    let (a, b) = pair(Handlers::new(), hb).await;
    let a = Arc::new(a);
    let a2 = Arc::clone(&a);
    let req = tokio::spawn(async move {
        a2.request::<Echo, Echo>(
            "node-b",
            &Echo {
                text: String::new(),
                n: 0,
            },
            Duration::from_secs(20),
        )
        .await
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.pending_requests() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.shutdown().await;
    let err = req.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ShuttingDown);
    let err = a
        .send(
            "node-b",
            &Note {
                seq: 0,
                body: String::new(),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ShuttingDown);
    b.shutdown().await;
}

/// A request handler of concurrency 2 runs at most two requests at once and starts them in the
/// order they were claimed, whether a request starts straight from its claim (a slot free and
/// nothing waiting in the handler's runner: `direct_starts`) or through the runner (issue 21).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_handler_starts_requests_in_claim_order_within_its_limit() {
    let started = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let running = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut hb = Handlers::new();
    {
        let (started, running, peak, gate) = (
            Arc::clone(&started),
            Arc::clone(&running),
            Arc::clone(&peak),
            Arc::clone(&gate),
        );
        hb.on_request_concurrent(2, move |_, e: Echo| {
            let (started, running, peak, gate) = (
                Arc::clone(&started),
                Arc::clone(&running),
                Arc::clone(&peak),
                Arc::clone(&gate),
            );
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                started.lock().unwrap().push(e.n);
                gate.acquire().await.unwrap().forget();
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(e)
            }
        });
    }
    let (a, b) = pair(Handlers::new(), hb).await;
    let a = Arc::new(a);
    let request = |n: u64| {
        let a = Arc::clone(&a);
        tokio::spawn(async move {
            a.request::<Echo, Echo>(
                "node-b",
                &Echo {
                    text: String::new(),
                    n,
                },
                WAIT,
            )
            .await
        })
    };
    let direct = || b.metrics().direct_starts.load(Ordering::SeqCst);
    let claims0 = b.jobs().counters().acquired_total;
    let mut tasks = Vec::new();
    // One at a time, each claimed before the next is sent: the claim order is 1..=5.
    for n in 1..=5u64 {
        tasks.push(request(n));
        eventually("the request is claimed", || {
            b.jobs().counters().acquired_total == claims0 + n
        })
        .await;
    }
    eventually("two requests run", || started.lock().unwrap().len() == 2).await;
    assert_eq!(*started.lock().unwrap(), [1, 2]);
    // Both found a free slot and an empty runner; 3..=5 wait in the runner.
    assert_eq!(direct(), 2);
    for k in 3..=5usize {
        // One running request ends; the oldest waiting one takes its slot.
        gate.add_permits(1);
        eventually("the next request starts", || {
            started.lock().unwrap().len() == k
        })
        .await;
    }
    assert_eq!(*started.lock().unwrap(), [1, 2, 3, 4, 5]);
    gate.add_permits(2);
    for (t, n) in tasks.into_iter().zip(1..=5u64) {
        assert_eq!(t.await.unwrap().unwrap().n, n);
    }
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "never more than the handler's concurrency"
    );
    assert_eq!(direct(), 2, "the waiting ones went through the runner");
    // Idle again: the next request starts straight from its claim.
    gate.add_permits(1);
    assert_eq!(request(6).await.unwrap().unwrap().n, 6);
    assert_eq!(direct(), 3);
    Arc::try_unwrap(a).ok().unwrap().shutdown().await;
    b.shutdown().await;
}
