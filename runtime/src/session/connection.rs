//! One accepted connection: the tokio shell around a [`Session`] core.
//!
//! The connection task owns the socket and the core and never awaits anything but the socket,
//! its control channel, the dispatch queue and the core's next deadline, so every handler call
//! (`reply`, `send`, `close`) reaches the core in order. Handlers run on a second task, one
//! packet at a time (see [`SessionHandlers`]).

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zlink_session::{
    ClientReply, CloseReason, ErrorKind, ErrorPayload, Event, Inbound, Reply, Session, SessionId,
};

use super::handlers::{Control, RequestReply, SessionCtx, SessionHandlers};
use super::{DISPATCH_QUEUE, Phase, Shared};

/// Bytes asked of one socket read; with the core's limit this bounds inbound memory to one
/// read plus one partial packet.
const READ_CHUNK: usize = 16 * 1024;
/// After a close that flushes, how long the task keeps writing what was accepted.
const FLUSH_TIMEOUT: Duration = Duration::from_millis(1_000);
/// After closing its side, how long (and how many bytes) the task reads and discards what the
/// client still sends, so the kernel closes with FIN instead of RST and the client reads a
/// clean EOF (a socket closed with unread input sends RST).
const LINGER: Duration = Duration::from_millis(500);
const LINGER_BYTES: usize = 256 * 1024;

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

pub(super) async fn serve(
    stream: TcpStream,
    id: SessionId,
    shared: Arc<Shared>,
    mut phase: watch::Receiver<Phase>,
) {
    let (local, peer) = match (stream.local_addr(), stream.peer_addr()) {
        (Ok(l), Ok(p)) => (l, p),
        _ => return,
    };
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let (control_tx, mut control) = mpsc::unbounded_channel();
    let (work_tx, work_rx) = mpsc::channel::<Inbound>(DISPATCH_QUEUE);
    let ctx = SessionCtx {
        id,
        local,
        peer,
        control: control_tx.clone(),
        router: shared.router.clone(),
        hooks: Arc::clone(&shared.handlers.hooks),
        identity: Arc::default(),
    };
    if let Some(router) = &shared.router {
        router.opened(ctx.clone());
    }
    let dispatcher = tokio::spawn(dispatch(
        work_rx,
        shared.handlers.clone(),
        ctx,
        control_tx,
        Arc::clone(&shared),
    ));

    let mut core = Session::new(id, shared.config.session, now());
    if let Phase::Draining { deadline } = *phase.borrow_and_update() {
        core.drain(deadline.into_std());
    }
    let mut rbuf = vec![0u8; READ_CHUNK];
    let mut wbuf: Vec<u8> = Vec::new();
    let mut wpos = 0usize;
    let mut held: VecDeque<Inbound> = VecDeque::new();
    let mut waiters: HashMap<u64, oneshot::Sender<Result<ClientReply, ErrorKind>>> = HashMap::new();
    let reason = loop {
        while let Some(event) = core.poll_event() {
            match event {
                Event::Dispatch(inbound) => held.push_back(inbound),
                Event::ClientReplied { request_seq, reply } => {
                    if let Some(w) = waiters.remove(&request_seq) {
                        let _ = w.send(Ok(reply));
                    }
                }
                Event::ServerRequestFailed { request_seq, kind } => {
                    if let Some(w) = waiters.remove(&request_seq) {
                        let _ = w.send(Err(kind));
                    }
                }
                Event::Closed(_) => {}
            }
        }
        while !held.is_empty() {
            match work_tx.try_reserve() {
                Ok(permit) => {
                    if let Some(inbound) = held.pop_front() {
                        permit.send(inbound);
                    }
                }
                Err(_) => break,
            }
        }
        if let Some(reason) = core.close_reason() {
            break reason;
        }
        if wpos == wbuf.len()
            && let Some(bytes) = core.transmit()
        {
            wbuf = bytes;
            wpos = 0;
        }
        let can_read = core.wants_read() && held.is_empty();
        let deadline = core.poll_timeout().map(Instant::from_std);
        tokio::select! {
            read = rd.read(&mut rbuf), if can_read => match read {
                Ok(0) | Err(_) => {
                    // What the handlers queued before the client went away is applied first:
                    // a refusal queues its error reply and then `Close(Unauthenticated)`, and
                    // a client that read the reply and hung up must not turn that close into
                    // `ClientClosed` (the first close names the session's end).
                    while let Ok(c) = control.try_recv() {
                        apply(&mut core, c, &mut waiters, &shared);
                    }
                    core.handle_eof();
                }
                Ok(n) => core.handle_read(&rbuf[..n], now()),
            },
            written = wr.write(&wbuf[wpos..]), if wpos < wbuf.len() => match written {
                Ok(n) if n > 0 => {
                    wpos += n;
                    core.handle_written(n);
                }
                Ok(_) | Err(_) => core.handle_eof(),
            },
            Some(c) = control.recv() => apply(&mut core, c, &mut waiters, &shared),
            permit = work_tx.reserve(), if !held.is_empty() => {
                if let (Ok(permit), Some(inbound)) = (permit, held.pop_front()) {
                    permit.send(inbound);
                }
            },
            () = sleep_until(deadline) => core.handle_timeout(now()),
            changed = phase.changed() => match (changed, *phase.borrow_and_update()) {
                (Ok(()), Phase::Running) => {}
                (Ok(()), Phase::Draining { deadline }) => core.drain(deadline.into_std()),
                (Ok(()), Phase::Stopping) | (Err(_), _) => core.close(CloseReason::ServerClosed),
            },
        }
    };
    drop(work_tx);
    // From here every handler call fails with `SessionClosed` at once (a flooding handler
    // stops instead of filling the channel while the task flushes and lingers).
    control.close();
    while control.try_recv().is_ok() {}
    for (_, w) in waiters.drain() {
        let _ = w.send(Err(ErrorKind::ConnectionLost));
    }
    if reason.flushes_output() {
        let rest = wbuf.get(wpos..).unwrap_or_default().to_vec();
        let _ = tokio::time::timeout(FLUSH_TIMEOUT, flush(&mut wr, rest, &mut core)).await;
    }
    record_close(&shared, &core, reason);
    let _ = wr.shutdown().await;
    linger(&mut rd).await;
    // The dispatcher finishes the handler it is running and the packets it had taken; its
    // replies find the session closed. With a router, the bound Actors' disconnect notices go
    // after those handlers' relays (so no accepted relay is overtaken by its notice), within
    // a bound.
    match &shared.router {
        Some(router) => {
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, dispatcher).await;
            router.closed(id, reason);
        }
        None => drop(dispatcher),
    }
    if let Some(on_closed) = &shared.handlers.on_closed {
        on_closed(id, reason);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn flush(wr: &mut OwnedWriteHalf, rest: Vec<u8>, core: &mut Session) {
    if wr.write_all(&rest).await.is_err() {
        return;
    }
    core.handle_written(rest.len());
    while let Some(bytes) = core.transmit() {
        if wr.write_all(&bytes).await.is_err() {
            return;
        }
        core.handle_written(bytes.len());
    }
}

async fn linger(rd: &mut tokio::net::tcp::OwnedReadHalf) {
    let mut sink = [0u8; 4096];
    let mut left = LINGER_BYTES;
    let _ = tokio::time::timeout(LINGER, async {
        while left > 0 {
            match rd.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

fn apply(
    core: &mut Session,
    control: Control,
    waiters: &mut HashMap<u64, oneshot::Sender<Result<ClientReply, ErrorKind>>>,
    shared: &Shared,
) {
    match control {
        Control::Reply { request_seq, reply } => {
            let _ = core.reply(request_seq, reply);
        }
        Control::ReplyDropped { request_seq } => {
            shared
                .metrics
                .handler_failed
                .fetch_add(1, Ordering::Relaxed);
            let error = ErrorPayload::new(
                ErrorKind::HandlerFailed,
                "the handler ended without replying",
            );
            let _ = core.reply(request_seq, Reply::Error(error));
        }
        Control::Send(packet) => {
            if let Err(zlink_session::SendError::Invalid(e)) = core.send(packet) {
                shared
                    .metrics
                    .invalid_pushes
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(session = %core.id(), error = %e, "STREAM push does not encode; dropped");
            }
        }
        Control::Request { packet, done } => match core.request(packet, now()) {
            Ok(seq) => {
                waiters.insert(seq, done);
            }
            Err(zlink_session::SendError::Closed(_)) => {
                let _ = done.send(Err(ErrorKind::ConnectionLost));
            }
            Err(
                zlink_session::SendError::Invalid(_) | zlink_session::SendError::WrongKind { .. },
            ) => {
                let _ = done.send(Err(ErrorKind::InvalidOperation));
            }
        },
        Control::Close(reason) => core.close(reason),
    }
}

fn record_close(shared: &Shared, core: &Session, reason: CloseReason) {
    let m = &shared.metrics;
    let c = core.counters();
    m.closed[reason as usize].fetch_add(1, Ordering::Relaxed);
    m.packets_in.fetch_add(c.packets_in, Ordering::Relaxed);
    m.packets_out.fetch_add(c.packets_out, Ordering::Relaxed);
    m.bytes_in.fetch_add(c.bytes_in, Ordering::Relaxed);
    m.bytes_out.fetch_add(c.bytes_out, Ordering::Relaxed);
    m.unknown_reply_drops
        .fetch_add(c.unknown_reply_drops, Ordering::Relaxed);
    m.reserved_send_drops
        .fetch_add(c.reserved_send_drops, Ordering::Relaxed);
    m.late_replies.fetch_add(c.late_replies, Ordering::Relaxed);
    m.request_deadlines
        .fetch_add(c.request_deadlines, Ordering::Relaxed);
    match reason {
        CloseReason::MessageTooLarge => tracing::warn!(
            session = %core.id(),
            limit = shared.config.session.max_message_size.configured(),
            "EMSGSIZE: a STREAM packet over MaxMessageSize; session closed"
        ),
        CloseReason::ProtocolError | CloseReason::SlowConsumer => {
            tracing::warn!(session = %core.id(), %reason, "STREAM session closed")
        }
        CloseReason::ClientClosed
        | CloseReason::Idle
        | CloseReason::Replaced
        | CloseReason::SealTimeout
        | CloseReason::Draining
        | CloseReason::ServerClosed
        | CloseReason::Unauthenticated => {
            tracing::debug!(session = %core.id(), %reason, "STREAM session closed")
        }
    }
}

/// The handler task of one session: one packet at a time, in order.
async fn dispatch(
    mut work: mpsc::Receiver<Inbound>,
    handlers: SessionHandlers,
    ctx: SessionCtx,
    control: mpsc::UnboundedSender<Control>,
    shared: Arc<Shared>,
) {
    while let Some(inbound) = work.recv().await {
        if let Some(auth) = &handlers.authenticator
            && ctx.identity().is_none()
        {
            let packet = match &inbound {
                Inbound::Send { packet, .. } | Inbound::Request { packet, .. } => packet,
            };
            // A panicking authenticator refuses (the session does not stay open unserved).
            let verdict = AssertUnwindSafe(auth(packet))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err("the authenticator failed".to_owned()));
            match verdict {
                Ok(who) => {
                    let _ = ctx.identity.set(who);
                }
                Err(why) => {
                    if let Inbound::Request { request_seq, .. } = &inbound {
                        RequestReply::new(*request_seq, control.clone())
                            .error(ErrorKind::Application, format!("unauthenticated: {why}"));
                    }
                    tracing::info!(session = %ctx.id, reason = %why, "session refused by the authenticator");
                    ctx.close(CloseReason::Unauthenticated);
                    return;
                }
            }
        }
        let future = match inbound {
            Inbound::Send { packet, .. } => match handlers.sends.get(&packet.packet_name) {
                Some(handler) => {
                    let handler = Arc::clone(handler);
                    let ctx = ctx.clone();
                    std::panic::catch_unwind(AssertUnwindSafe(move || handler(ctx, packet)))
                }
                None => {
                    shared
                        .metrics
                        .unknown_packets
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            },
            Inbound::Request {
                request_seq,
                packet,
                ..
            } => {
                let reply = RequestReply::new(request_seq, control.clone());
                match handlers.requests.get(&packet.packet_name) {
                    Some(handler) => {
                        let handler = Arc::clone(handler);
                        let ctx = ctx.clone();
                        std::panic::catch_unwind(AssertUnwindSafe(move || {
                            handler(ctx, packet, reply)
                        }))
                    }
                    None => {
                        shared
                            .metrics
                            .unknown_packets
                            .fetch_add(1, Ordering::Relaxed);
                        let detail = format!("no handler for request {:?}", packet.packet_name);
                        reply.error(ErrorKind::UnknownPacket, detail);
                        continue;
                    }
                }
            }
        };
        let ended = match future {
            Ok(future) => AssertUnwindSafe(future).catch_unwind().await.is_ok(),
            Err(_) => false,
        };
        if !ended {
            shared
                .metrics
                .handler_panics
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}
