//! The object execution shell (issue "Spots and Actors" §2; glossary §3 "Handler turn",
//! "Async와 Yield", §5 "Object execution queue"): turns never overlap, send order is run order,
//! `Yield` lets other queue work run and resumes in a new turn, timers run on the queue.
//!
//! Timer tests run on tokio's paused clock, so periods are exact and nothing sleeps for real.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::JsonMessage;
use zlink::object::exec::{ExecMode, ObjectExecutor, ObjectHandlers};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Push {
    n: u64,
}
impl JsonMessage for Push {
    const PACKET_NAME: &'static str = "t.Push";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Get;
impl JsonMessage for Get {
    const PACKET_NAME: &'static str = "t.Get";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Log {
    entries: Vec<String>,
}
impl JsonMessage for Log {
    const PACKET_NAME: &'static str = "t.Log";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Slow {
    tag: String,
}
impl JsonMessage for Slow {
    const PACKET_NAME: &'static str = "t.Slow";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Tick {
    timer: u64,
}
impl JsonMessage for Tick {
    const PACKET_NAME: &'static str = "t.Tick";
}

/// Object state: a log, and a guard that notices two turns inside the object at once.
#[derive(Default)]
struct Obj {
    log: Vec<String>,
}

/// Counts handlers inside the object; a second one entering is a violation.
#[derive(Default)]
struct Overlap {
    inside: AtomicUsize,
    violated: AtomicBool,
}

impl Overlap {
    fn enter(&self) {
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.violated.store(true, Ordering::SeqCst);
        }
    }
    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

fn handlers(overlap: &Arc<Overlap>, gate: &Arc<Notify>) -> ObjectHandlers<Obj> {
    let mut h: ObjectHandlers<Obj> = ObjectHandlers::new();
    let o = Arc::clone(overlap);
    h.on_send(move |ctx, p: Push| {
        let o = Arc::clone(&o);
        async move {
            o.enter();
            // Awaits inside the turn (Async): nothing else of the object may run meanwhile.
            tokio::task::yield_now().await;
            ctx.state().log.push(format!("push {}", p.n));
            tokio::task::yield_now().await;
            o.leave();
            Ok(())
        }
    });
    h.on_request(|ctx, _: Get| async move {
        Ok::<_, CallError>(Log {
            entries: ctx.state().log.clone(),
        })
    });
    let (o, g) = (Arc::clone(overlap), Arc::clone(gate));
    h.on_request(move |ctx, s: Slow| {
        let (o, g) = (Arc::clone(&o), Arc::clone(&g));
        async move {
            o.enter();
            ctx.state().log.push(format!("{} start", s.tag));
            o.leave();
            // Yield: the turn goes back while we wait for the gate.
            let waited = ctx.yield_on(g.notified()).await;
            o.enter();
            let out = match waited {
                Ok(()) => {
                    ctx.state().log.push(format!("{} resumed", s.tag));
                    Ok(Log {
                        entries: ctx.state().log.clone(),
                    })
                }
                Err(e) => Err(e),
            };
            o.leave();
            out
        }
    });
    let o = Arc::clone(overlap);
    h.on_send(move |ctx, t: Tick| {
        let o = Arc::clone(&o);
        async move {
            o.enter();
            tokio::task::yield_now().await;
            ctx.state().log.push(format!("tick {}", t.timer));
            o.leave();
            Ok(())
        }
    });
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_run_in_send_order_and_turns_never_overlap() {
    let overlap = Arc::new(Overlap::default());
    let exec = ObjectExecutor::start(
        Obj::default(),
        handlers(&overlap, &Arc::new(Notify::new())),
        ExecMode::Serial,
    );
    for n in 0..2_000 {
        exec.send(&Push { n }).unwrap();
    }
    let log: Log = exec.request(&Get).await.unwrap();
    let expected: Vec<String> = (0..2_000).map(|n| format!("push {n}")).collect();
    assert_eq!(log.entries, expected);
    assert!(
        !overlap.violated.load(Ordering::SeqCst),
        "two turns overlapped"
    );
    assert_eq!(exec.stats().turns.load(Ordering::Relaxed), 2_001);
    exec.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yield_lets_other_queue_work_run_and_resumes_in_a_new_turn() {
    let overlap = Arc::new(Overlap::default());
    let gate = Arc::new(Notify::new());
    let exec = Arc::new(ObjectExecutor::start(
        Obj::default(),
        handlers(&overlap, &gate),
        ExecMode::Yielding,
    ));
    let e = Arc::clone(&exec);
    let slow =
        tokio::spawn(async move { e.request::<Slow, Log>(&Slow { tag: "slow".into() }).await });
    // Wait until `slow` holds its first turn (bounded).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !exec.with_state(|o| o.log.iter().any(|e| e == "slow start")) {
        assert!(tokio::time::Instant::now() < deadline, "slow never started");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // While `slow` waits, the object keeps running other work.
    for n in 0..3 {
        exec.send(&Push { n }).unwrap();
    }
    let seen: Log = exec.request(&Get).await.unwrap();
    assert_eq!(
        seen.entries,
        vec!["slow start", "push 0", "push 1", "push 2"],
        "work queued behind a yielded turn ran while it waited"
    );
    assert!(!slow.is_finished());
    // The continuation resumes in a new turn, behind work accepted before the gate opened.
    exec.send(&Push { n: 3 }).unwrap();
    gate.notify_one();
    let done = slow.await.unwrap().unwrap();
    assert_eq!(done.entries.last().unwrap(), "slow resumed");
    let log: Log = exec.request(&Get).await.unwrap();
    let i3 = log.entries.iter().position(|e| e == "push 3").unwrap();
    let ir = log
        .entries
        .iter()
        .position(|e| e == "slow resumed")
        .unwrap();
    assert!(i3 < ir, "{:?}", log.entries);
    assert!(!overlap.violated.load(Ordering::SeqCst));
    exec.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yield_is_invalid_in_a_serial_object_and_the_turn_is_kept() {
    let overlap = Arc::new(Overlap::default());
    let gate = Arc::new(Notify::new());
    let exec = ObjectExecutor::start(Obj::default(), handlers(&overlap, &gate), ExecMode::Serial);
    let err = exec
        .request::<Slow, Log>(&Slow { tag: "s".into() })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation);
    // The object is still usable, and nothing ran out of turn.
    exec.send(&Push { n: 1 }).unwrap();
    let log: Log = exec.request(&Get).await.unwrap();
    assert_eq!(log.entries, vec!["s start", "push 1"]);
    exec.close().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn timers_fire_on_the_queue_between_messages_never_concurrently() {
    let overlap = Arc::new(Overlap::default());
    let mut h = handlers(&overlap, &Arc::new(Notify::new()));
    // A request that arms the timers from inside a turn.
    h.on_request(|ctx, p: Push| async move {
        ctx.timer_every(1, Duration::from_millis(10), &Tick { timer: 1 })?;
        ctx.timer_once(2, Duration::from_millis(25), &Tick { timer: 2 })?;
        assert_eq!(
            ctx.timer_once(2, Duration::from_millis(1), &Tick { timer: 2 })
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidOperation,
            "an armed ID is refused"
        );
        Ok::<_, CallError>(p)
    });
    let exec = ObjectExecutor::start(Obj::default(), h, ExecMode::Serial);
    let _: Push = exec.request(&Push { n: 0 }).await.unwrap();
    // Paused clock: sleeping advances time exactly; messages sent between the ticks.
    tokio::time::sleep(Duration::from_millis(15)).await;
    exec.send(&Push { n: 100 }).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    exec.send(&Push { n: 200 }).unwrap();
    let log: Log = exec.request(&Get).await.unwrap();
    assert_eq!(
        log.entries,
        vec![
            "tick 1", "push 100", "tick 1", "tick 2", "tick 1", "push 200"
        ],
        "ticks at 10, 20, 25, 30 ms interleave with the messages sent at 15 and 35 ms"
    );
    assert_eq!(exec.stats().ticks.load(Ordering::Relaxed), 4);
    assert!(!overlap.violated.load(Ordering::SeqCst));
    exec.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_handlers_panics_and_close_end_requests_with_one_typed_error() {
    let mut h: ObjectHandlers<Obj> = ObjectHandlers::new();
    h.on_request(|_, _: Get| async move {
        if true {
            panic!("handler bug");
        }
        Ok::<_, CallError>(Log { entries: vec![] })
    });
    let exec = ObjectExecutor::start(Obj::default(), h, ExecMode::Serial);
    assert_eq!(
        exec.request::<Get, Log>(&Get).await.unwrap_err().kind(),
        ErrorKind::HandlerFailed
    );
    assert_eq!(
        exec.request::<Push, Log>(&Push { n: 1 })
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(exec.stats().panics.load(Ordering::Relaxed), 1);
    exec.close().await;
    assert_eq!(
        exec.send(&Push { n: 2 }).unwrap_err().kind(),
        ErrorKind::Unavailable
    );
}

/// Closing an object while a handler is yielded ends that request with one typed error instead
/// of leaving it waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_an_object_ends_a_yielded_request_instead_of_hanging() {
    let overlap = Arc::new(Overlap::default());
    let gate = Arc::new(Notify::new());
    let exec = Arc::new(ObjectExecutor::start(
        Obj::default(),
        handlers(&overlap, &gate),
        ExecMode::Yielding,
    ));
    let e = Arc::clone(&exec);
    let slow = tokio::spawn(async move { e.request::<Slow, Log>(&Slow { tag: "s".into() }).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !exec.with_state(|o| o.log.iter().any(|e| e == "s start")) {
        assert!(tokio::time::Instant::now() < deadline, "slow never started");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    exec.close().await;
    // The gate opens after the close: the continuation finds the object gone.
    gate.notify_one();
    let out = tokio::time::timeout(Duration::from_secs(10), slow)
        .await
        .expect("the yielded request must end")
        .unwrap();
    let err = out.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::ShuttingDown | ErrorKind::Unavailable),
        "{err}"
    );
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Nap {
    ms: u64,
}
impl JsonMessage for Nap {
    const PACKET_NAME: &'static str = "t.Nap";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CancelTimer {
    id: u64,
}
impl JsonMessage for CancelTimer {
    const PACKET_NAME: &'static str = "t.CancelTimer";
}

/// A tick that came due while another turn ran waits in the queue; a turn before it that
/// cancels the timer makes it stale, and it does not run.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_tick_queued_before_its_timer_was_cancelled_does_not_run() {
    let overlap = Arc::new(Overlap::default());
    let mut h = handlers(&overlap, &Arc::new(Notify::new()));
    h.on_request(|ctx, p: Push| async move {
        ctx.timer_once(7, Duration::from_millis(10), &Tick { timer: 7 })?;
        Ok::<_, CallError>(p)
    });
    h.on_send(|_, n: Nap| async move {
        // Async: the turn is held while the timer comes due.
        tokio::time::sleep(Duration::from_millis(n.ms)).await;
        Ok(())
    });
    h.on_send(|ctx, c: CancelTimer| async move {
        assert!(
            ctx.cancel_timer(c.id),
            "the queued tick still counts as armed"
        );
        ctx.state().log.push(format!("cancelled {}", c.id));
        Ok(())
    });
    let exec = ObjectExecutor::start(Obj::default(), h, ExecMode::Serial);
    let _: Push = exec.request(&Push { n: 0 }).await.unwrap();
    exec.send(&Nap { ms: 30 }).unwrap();
    exec.send(&CancelTimer { id: 7 }).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log: Log = exec.request(&Get).await.unwrap();
    assert_eq!(log.entries, vec!["cancelled 7"], "the stale tick ran");
    exec.close().await;
}
