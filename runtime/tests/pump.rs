//! The socket pump against real ZeroMQ sockets on 127.0.0.1: unroutable sends are reported,
//! a full peer pipe parks messages without reordering or dropping them, and the pump sleeps
//! when idle.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bytes::Bytes;
use zlink::transport::header::{Packed, for_each_message};
use zlink::transport::pump::{Inbound, Pump, PumpConfig, PumpEvent};

/// The next event, with each batch expanded into one `Message` per message it holds.
async fn next_message(rx: &mut Inbound, buf: &mut Vec<PumpEvent>) -> PumpEvent {
    loop {
        if !buf.is_empty() {
            return buf.remove(0);
        }
        let events = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("pump event within 10 s")
            .expect("pump running");
        for ev in events {
            match ev {
                PumpEvent::Batch {
                    from,
                    frame,
                    messages,
                } => {
                    let before = buf.len();
                    for_each_message(&frame, |frames| {
                        buf.push(PumpEvent::Message {
                            from: from.clone(),
                            frames: frames.to_vec(),
                        });
                    });
                    assert_eq!(buf.len() - before, messages, "batch message count");
                }
                other => buf.push(other),
            }
        }
    }
}

fn pump(ctx: &zmq::Context, id: &str, hwm: i32) -> (Pump, Inbound) {
    let mut c = PumpConfig::new(id.as_bytes().to_vec(), "tcp://127.0.0.1:0".into());
    c.send_hwm = hwm;
    c.recv_hwm = hwm;
    Pump::start(ctx, c).unwrap()
}

/// A pump that hands up one event per batch into a one-batch channel.
fn slow_pump(ctx: &zmq::Context, id: &str, hwm: i32) -> (Pump, Inbound) {
    let mut c = PumpConfig::new(id.as_bytes().to_vec(), "tcp://127.0.0.1:0".into());
    c.send_hwm = hwm;
    c.recv_hwm = hwm;
    c.batch = 1;
    c.inbound_batches = 1;
    Pump::start(ctx, c).unwrap()
}

/// Queue `n` numbered data messages from `a` to peer `b`.
async fn send_numbered(a: &Pump, n: u32) {
    for i in 0..n {
        let slot = a.handle().reserve_data(8).await.unwrap();
        slot.send(
            Bytes::from_static(b"b"),
            Packed::from_frames(&[b"hdr".to_vec(), i.to_be_bytes().to_vec()]).unwrap(),
        );
    }
}

/// Receive the `n` numbered messages of [`send_numbered`] at `rx`, each once and in order.
async fn receive_numbered(rx: &mut Inbound, n: u32) {
    let mut buf = Vec::new();
    let mut next = 0u32;
    while next < n {
        if let PumpEvent::Message { frames, .. } = next_message(rx, &mut buf).await
            && frames.len() == 2
        {
            assert_eq!(&frames[0][..], b"hdr");
            assert_eq!(u32::from_be_bytes(frames[1][..].try_into().unwrap()), next);
            next += 1;
        }
    }
}

/// Connect `a` to `b` and wait until `a` saw `b`'s probe (the pipe is up).
async fn connect(a: &Pump, arx: &mut Inbound, b: &Pump) {
    a.handle().connect(b.endpoint().to_owned());
    let mut buf = Vec::new();
    loop {
        if let PumpEvent::Message { frames, .. } = next_message(arx, &mut buf).await
            && frames.len() == 1
            && frames[0].is_empty()
        {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_send_is_reported_not_dropped_silently() {
    let ctx = zmq::Context::new();
    let (a, mut arx) = pump(&ctx, "a", 1000);
    a.handle()
        .send_control(Bytes::from_static(b"nobody"), vec![b"x".to_vec()])
        .unwrap();
    let mut buf = Vec::new();
    loop {
        match next_message(&mut arx, &mut buf).await {
            PumpEvent::Unroutable { to } => {
                assert_eq!(&to[..], b"nobody");
                break;
            }
            PumpEvent::Message { .. } | PumpEvent::Batch { .. } | PumpEvent::Monitor { .. } => {}
        }
    }
    assert_eq!(
        a.handle()
            .stats()
            .unroutable
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_peer_pipe_parks_messages_without_loss_or_reordering() {
    let ctx = zmq::Context::new();
    let (a, mut arx) = pump(&ctx, "a", 10);
    let (b, mut brx) = slow_pump(&ctx, "b", 10);
    connect(&a, &mut arx, &b).await;
    // Messages too large to be coalesced into one batch (64 KiB), so each is one ZeroMQ
    // message; b hands up one event at a time into a one-batch channel, so its socket stops
    // being read at once and the pipes and TCP buffers fill.
    const N: u32 = 600;
    const SIZE: usize = 65 * 1024 + 4;
    for i in 0..N {
        let slot = a.handle().reserve_data(SIZE).await.unwrap();
        let mut body = vec![0u8; SIZE];
        body[..4].copy_from_slice(&i.to_be_bytes());
        slot.send(
            Bytes::from_static(b"b"),
            Packed::from_frames(&[body]).unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut buf = Vec::new();
    let mut next = 0u32;
    while next < N {
        if let PumpEvent::Message { from, frames } = next_message(&mut brx, &mut buf).await
            && frames.len() == 1
            && frames[0].len() == SIZE
        {
            assert_eq!(&from[..], b"a");
            assert_eq!(u32::from_be_bytes(frames[0][..4].try_into().unwrap()), next);
            next += 1;
        }
    }
    let stalls = a
        .handle()
        .stats()
        .hwm_stalls
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(stalls > 0, "the pipe never reached its high-water mark");
    assert_eq!(a.handle().queued_data_bytes(), 0);
}

/// A connection comes up while the accepting side's [`Inbound`] is never read: the new pipe
/// reaches b's socket as a command that only a call on that socket processes (and with it b's
/// probe to a goes out), posted just before b's `HANDSHAKE_SUCCEEDED` monitor event. b's pump
/// thread must touch the socket after the last monitor event it read; when it read the monitor
/// after the socket, a wake-up for `ACCEPTED` that also took `HANDSHAKE_SUCCEEDED` left the
/// command unprocessed and a waited for the probe forever (a rare flake of the tests that
/// [`connect`] before reading b). The race is a matter of thread timing, so the test gives it
/// many chances: fresh pairs, one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_comes_up_while_the_accepting_side_reads_nothing() {
    for round in 0..60 {
        let ctx = zmq::Context::new();
        let (mut a, mut arx) = pump(&ctx, "a", 1000);
        let (mut b, brx) = pump(&ctx, "b", 1000);
        tokio::time::timeout(Duration::from_secs(8), connect(&a, &mut arx, &b))
            .await
            .unwrap_or_else(|_| panic!("round {round}: no probe from the accepting side"));
        drop((arx, brx));
        a.stop();
        b.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pump_sleeps() {
    let ctx = zmq::Context::new();
    let (a, _arx) = pump(&ctx, "a", 1000);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let w0 = a
        .handle()
        .stats()
        .wakeups
        .load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let w1 = a
        .handle()
        .stats()
        .wakeups
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(w1 - w0 <= 2, "idle pump woke {} times in 500 ms", w1 - w0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_messages_to_one_peer_travel_in_batches_and_arrive_in_order() {
    let ctx = zmq::Context::new();
    let (a, mut arx) = pump(&ctx, "a", 100_000);
    let (b, mut brx) = pump(&ctx, "b", 100_000);
    connect(&a, &mut arx, &b).await;
    const N: u32 = 20_000;
    send_numbered(&a, N).await;
    receive_numbered(&mut brx, N).await;
    let zmq_messages = b
        .handle()
        .stats()
        .received
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        zmq_messages < u64::from(N),
        "{zmq_messages} ZeroMQ messages for {N} records: nothing was batched"
    );
}

/// Direct sends (a producer writing to the socket itself while the pump sleeps) in a
/// ping-pong: nearly every send goes direct, every message is answered, in order, and no round
/// stalls (a stalled round fails
/// at the 10 s receive timeout). A stress check of the hand-over between producers and the
/// pump thread: the socket's `ZMQ_FD` only signals changes, so a producer whose send consumed
/// the signal of an arriving message must wake the pump. libzmq processes its command mailbox
/// on a send only now and then, so that interleaving cannot be forced from here; 2,000 rounds
/// give it many chances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_over_direct_sends_keeps_order_and_never_stalls() {
    use std::sync::atomic::Ordering::Relaxed;
    const ROUNDS: u32 = 2_000;
    let ctx = zmq::Context::new();
    let (a, mut arx) = pump(&ctx, "a", 1000);
    let (b, mut brx) = pump(&ctx, "b", 1000);
    connect(&a, &mut arx, &b).await;
    let bh = b.handle();
    let echo = tokio::spawn(async move {
        let mut buf = Vec::new();
        let mut answered = 0;
        while answered < ROUNDS {
            if let PumpEvent::Message { from, frames } = next_message(&mut brx, &mut buf).await
                && frames.len() == 1
                && frames[0].len() == 4
            {
                bh.send_control(from, vec![frames[0].to_vec()]).unwrap();
                answered += 1;
            }
        }
    });
    let mut buf = Vec::new();
    for i in 0..ROUNDS {
        a.handle()
            .send_control(Bytes::from_static(b"b"), vec![i.to_be_bytes().to_vec()])
            .unwrap();
        loop {
            if let PumpEvent::Message { frames, .. } = next_message(&mut arx, &mut buf).await
                && frames.len() == 1
                && frames[0].len() == 4
            {
                assert_eq!(u32::from_be_bytes(frames[0][..].try_into().unwrap()), i);
                break;
            }
        }
    }
    echo.await.unwrap();
    let direct = a.handle().stats().direct_sends.load(Relaxed)
        + b.handle().stats().direct_sends.load(Relaxed);
    // Each side sends once per round trip (tens of microseconds at least), further apart than
    // the pump's direct-send gap: nearly every send goes direct, not one per pump sleep (which
    // made it every other one: the second send of a sleep woke the pump).
    assert!(
        direct > u64::from(ROUNDS) * 2 * 3 / 4,
        "{direct} of {} sends took the direct path",
        ROUNDS * 2
    );
}

/// A burst of queued messages from producers on a multi-thread runtime, drained by the flush
/// task on the runtime's threads: all arrive, in order, batched, and the pump thread is not
/// woken for them (it was, once per drain, before the flush task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_multi_thread_runtime_queued_messages_leave_without_waking_the_pump_thread() {
    use std::sync::atomic::Ordering::Relaxed;
    let ctx = zmq::Context::new();
    let (a, mut arx) = pump(&ctx, "a", 100_000);
    let (b, mut brx) = pump(&ctx, "b", 100_000);
    connect(&a, &mut arx, &b).await;
    // Let the connect's wake-ups and monitor events settle.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stats = a.handle();
    let (w0, f0) = (
        stats.stats().wakeups.load(Relaxed),
        stats.stats().flushes.load(Relaxed),
    );
    const N: u32 = 20_000;
    send_numbered(&a, N).await;
    receive_numbered(&mut brx, N).await;
    let flushes = stats.stats().flushes.load(Relaxed) - f0;
    let direct = stats.stats().direct_sends.load(Relaxed);
    assert!(flushes > 0, "nothing went through the flush task");
    assert!(
        flushes + direct < u64::from(N),
        "{flushes} drains and {direct} direct sends for {N} messages: nothing was batched"
    );
    assert_eq!(
        stats.stats().wakeups.load(Relaxed) - w0,
        0,
        "the pump thread was woken for queued messages"
    );
}

/// On a current-thread runtime (where a producer that blocks its only thread would hold a
/// flush task's drains for good) queued messages still go through the pump thread.
#[tokio::test(flavor = "current_thread")]
async fn on_a_current_thread_runtime_the_pump_thread_drains() {
    use std::sync::atomic::Ordering::Relaxed;
    let ctx = zmq::Context::new();
    let (a, mut arx) = pump(&ctx, "a", 100_000);
    let (b, mut brx) = pump(&ctx, "b", 100_000);
    connect(&a, &mut arx, &b).await;
    let w0 = a.handle().stats().wakeups.load(Relaxed);
    const N: u32 = 2_000;
    send_numbered(&a, N).await;
    receive_numbered(&mut brx, N).await;
    assert_eq!(a.handle().stats().flushes.load(Relaxed), 0);
    assert!(
        a.handle().stats().wakeups.load(Relaxed) > w0,
        "the pump thread drained the queue"
    );
}
