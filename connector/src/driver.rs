//! The connector's task: owns the socket and the [`ClientSession`] core, runs sessions one
//! after another (reconnecting with [`Backoff`]), and moves commands, answers and callbacks
//! between the application and the core.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zlink_protocol::ProtocolError;
use zlink_protocol::stream::{StreamKind, StreamPacket};
use zlink_session::ErrorPayload;

use crate::backoff::Backoff;
use crate::config::ConnectorConfig;
use crate::core::{
    ClientSession, CoreConfig, CoreError, CoreEvent, DisconnectReason, RequestFailure,
};
use crate::dispatch::{Answer, ConnectorEvent, Dispatch, Responder, Response, Shared};
use crate::error::{ConnectError, RequestError, SendError};

/// Bytes read per socket read.
const READ_CHUNK: usize = 64 * 1024;

/// **(ours)** How long a close by the application may spend writing what it queued before.
const CLOSE_FLUSH: Duration = Duration::from_secs(1);

/// What a handle asks of the task.
#[derive(Debug)]
pub(crate) enum Command {
    Send {
        packet: StreamPacket,
        done: oneshot::Sender<Result<(), SendError>>,
    },
    Request {
        packet: StreamPacket,
        timeout: Duration,
        done: oneshot::Sender<Result<Response, RequestError>>,
    },
}

/// Connect once within `connect_timeout`.
pub(crate) async fn connect(config: &ConnectorConfig) -> Result<TcpStream, ConnectError> {
    let addr = config.addr.clone();
    let attempt = async {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&addr)
            .await
            .map_err(|source| ConnectError::Resolve {
                addr: addr.clone(),
                source,
            })?
            .collect();
        let mut last = None;
        for a in addrs {
            match TcpStream::connect(a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(ConnectError::Io {
            addr: addr.clone(),
            source: last.unwrap_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "no address resolved")
            }),
        })
    };
    let stream = tokio::time::timeout(config.connect_timeout, attempt)
        .await
        .map_err(|_| ConnectError::Timeout {
            addr: config.addr.clone(),
            after: config.connect_timeout,
        })??;
    // Small packets are the norm (game input, chat lines): no Nagle delay.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

pub(crate) struct Driver {
    pub config: ConnectorConfig,
    pub shared: Arc<Shared>,
    pub commands: mpsc::Receiver<Command>,
    pub answers: mpsc::UnboundedReceiver<Answer>,
    pub answer_tx: mpsc::UnboundedSender<Answer>,
    pub close: watch::Receiver<bool>,
    pub backoff: Backoff,
    /// The current session's number (1 for the first).
    pub session: u64,
}

/// A request waiting for its answer.
struct Waiting {
    timeout: Duration,
    done: oneshot::Sender<Result<Response, RequestError>>,
}

impl Driver {
    /// Run sessions until the application closes the connector or the policy gives up.
    pub async fn run(mut self, first: TcpStream) {
        let mut stream = first;
        loop {
            let reason = self.run_session(stream).await;
            self.emit(ConnectorEvent::Disconnected(reason));
            if reason == DisconnectReason::ClientClosed {
                break;
            }
            match self.reconnect().await {
                Some(s) => stream = s,
                None => break,
            }
        }
        self.shared.connected.store(false, Ordering::Release);
        self.shared.close_waiters();
        self.commands.close();
        while let Ok(cmd) = self.commands.try_recv() {
            refuse(cmd, Refusal::Closed);
        }
        self.emit(ConnectorEvent::Closed);
    }

    fn emit(&self, event: ConnectorEvent) {
        tracing::debug!(?event, "connector");
        self.shared.deliver(Dispatch::Event(event));
    }

    fn closing(&self) -> bool {
        *self.close.borrow()
    }

    /// Attempts after a disconnect; `None` when closed or the policy gave up.
    async fn reconnect(&mut self) -> Option<TcpStream> {
        loop {
            if self.closing() {
                return None;
            }
            let delay = self.backoff.next_delay()?;
            let attempt = self.backoff.attempts();
            self.shared
                .stats
                .reconnect_attempts
                .fetch_add(1, Ordering::Relaxed);
            self.emit(ConnectorEvent::Reconnecting { attempt, delay });
            let until = Instant::now() + delay;
            // Wait out the delay refusing commands (nothing is queued for a later session).
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => break,
                    changed = self.close.changed() => {
                        if changed.is_err() || self.closing() {
                            return None;
                        }
                    }
                    cmd = self.commands.recv() => match cmd {
                        Some(cmd) => refuse(cmd, Refusal::NotConnected),
                        None => return None,
                    },
                }
            }
            let attempt_connect = connect(&self.config);
            tokio::pin!(attempt_connect);
            let result = loop {
                tokio::select! {
                    r = &mut attempt_connect => break r,
                    changed = self.close.changed() => {
                        if changed.is_err() || self.closing() {
                            return None;
                        }
                    }
                    cmd = self.commands.recv() => match cmd {
                        Some(cmd) => refuse(cmd, Refusal::NotConnected),
                        None => return None,
                    },
                }
            };
            match result {
                Ok(stream) => {
                    self.backoff.reset();
                    return Some(stream);
                }
                Err(e) => tracing::debug!(error = %e, attempt, "reconnect attempt failed"),
            }
        }
    }

    /// One session on `stream`, until it closes; why it closed.
    async fn run_session(&mut self, stream: TcpStream) -> DisconnectReason {
        let local_addr = stream.local_addr().ok();
        let peer_addr = stream.peer_addr().ok();
        self.shared.stats.sessions.fetch_add(1, Ordering::Relaxed);
        self.shared.connected.store(true, Ordering::Release);
        if let (Some(local_addr), Some(peer_addr)) = (local_addr, peer_addr) {
            self.emit(if self.session == 0 {
                ConnectorEvent::Connected {
                    local_addr,
                    peer_addr,
                }
            } else {
                ConnectorEvent::Reconnected {
                    local_addr,
                    peer_addr,
                }
            });
        }
        self.session += 1;
        // Answers left from an older session are for requests that session already lost.
        while self.answers.try_recv().is_ok() {}
        let core_config = CoreConfig {
            max_inbound_message_size: self.config.max_inbound_message_size,
            ping_interval: self.config.ping_interval,
            ping_timeout: self.config.ping_timeout,
        };
        let mut core = ClientSession::new(core_config, Instant::now().into_std());
        let mut waiting: HashMap<u64, Waiting> = HashMap::new();
        let (mut rd, mut wr) = stream.into_split();
        let mut buf = vec![0u8; READ_CHUNK];
        let mut writing: Option<(Vec<u8>, usize)> = None;
        let mut reported = core.counters();
        loop {
            let mut closed = None;
            while let Some(event) = core.poll_event() {
                if let Some(reason) = self.on_core_event(event, &mut waiting) {
                    closed = Some(reason);
                }
            }
            reported = self.report(&core, reported);
            if let Some(reason) = closed {
                self.shared.connected.store(false, Ordering::Release);
                if reason == DisconnectReason::ClientClosed {
                    let _ = tokio::time::timeout(CLOSE_FLUSH, async {
                        flush(&mut wr, &mut writing, &mut core).await
                    })
                    .await;
                }
                let _ = wr.shutdown().await;
                break reason;
            }
            if writing.is_none() {
                writing = core.transmit().map(|bytes| (bytes, 0));
            }
            let can_read = !self.shared.queue_full();
            let can_take = core.waiting_output() < self.config.outbound_buffer_bytes;
            let deadline = core.poll_timeout().map(Instant::from_std);
            // Not `biased`: with reads polled before commands, a constant
            // inbound flood would starve the caller's sends and replies.
            tokio::select! {
                changed = self.close.changed() => {
                    if changed.is_err() || self.closing() {
                        core.close(DisconnectReason::ClientClosed);
                    }
                }
                () = sleep_until(deadline) => core.handle_timeout(Instant::now().into_std()),
                r = write_some(&mut wr, writing.as_ref()) => match r {
                    Ok(0) => core.close(DisconnectReason::Io(std::io::ErrorKind::WriteZero)),
                    Ok(n) => {
                        core.handle_written(n);
                        if let Some((bytes, offset)) = writing.as_mut() {
                            *offset += n;
                            if *offset >= bytes.len() {
                                writing = None;
                            }
                        }
                    }
                    Err(e) => core.close(DisconnectReason::Io(e.kind())),
                },
                r = rd.read(&mut buf), if can_read => match r {
                    Ok(0) => core.handle_eof(),
                    Ok(n) => core.handle_read(&buf[..n]),
                    Err(e) => core.close(DisconnectReason::Io(e.kind())),
                },
                () = self.shared.queue_space.notified(), if !can_read => {}
                answer = self.answers.recv() => {
                    if let Some(a) = answer
                        && a.session == self.session
                        && let Err(e) = core.reply(a.request_seq, a.answer)
                    {
                        tracing::debug!(error = %e, "answer to a server request dropped");
                    }
                }
                cmd = self.commands.recv(), if can_take => match cmd {
                    Some(cmd) => self.on_command(cmd, &mut core, &mut waiting),
                    // Every handle dropped: close as the application would.
                    None => core.close(DisconnectReason::ClientClosed),
                },
            }
        }
    }

    /// Act on one core event; the close reason for `Closed`.
    fn on_core_event(
        &mut self,
        event: CoreEvent,
        waiting: &mut HashMap<u64, Waiting>,
    ) -> Option<DisconnectReason> {
        match event {
            CoreEvent::Push(packet) => self.shared.deliver(Dispatch::Push(packet)),
            CoreEvent::ServerRequest {
                request_seq,
                packet,
            } => {
                let responder = Responder::new(self.session, request_seq, self.answer_tx.clone());
                self.shared.deliver(Dispatch::Request(packet, responder));
            }
            CoreEvent::Replied {
                request_seq,
                packet,
            } => {
                if let Some(w) = waiting.remove(&request_seq) {
                    let result = if packet.kind == StreamKind::Response {
                        Ok(Response::new(packet))
                    } else {
                        Err(match ErrorPayload::from_json(&packet.payload) {
                            Ok(e) => RequestError::Remote(e),
                            Err(_) => RequestError::MalformedError(packet.payload),
                        })
                    };
                    let _ = w.done.send(result);
                }
            }
            CoreEvent::RequestFailed {
                request_seq,
                failure,
            } => {
                if let Some(w) = waiting.remove(&request_seq) {
                    let error = match failure {
                        RequestFailure::TimedOut => RequestError::TimedOut { after: w.timeout },
                        RequestFailure::ConnectionLost => RequestError::ConnectionLost,
                    };
                    let _ = w.done.send(Err(error));
                }
            }
            CoreEvent::GoAway => tracing::info!("server is draining (zlink.GoAway)"),
            CoreEvent::Closed(reason) => return Some(reason),
        }
        None
    }

    fn on_command(
        &mut self,
        cmd: Command,
        core: &mut ClientSession,
        waiting: &mut HashMap<u64, Waiting>,
    ) {
        match cmd {
            Command::Send { packet, done } => {
                let _ = done.send(core.send(&packet).map_err(send_error));
            }
            Command::Request {
                packet,
                timeout,
                done,
            } => match core.request(packet, timeout, Instant::now().into_std()) {
                Ok(seq) => {
                    waiting.insert(seq, Waiting { timeout, done });
                }
                Err(e) => {
                    let _ = done.send(Err(send_error(e).into()));
                }
            },
        }
    }

    /// Add what the core counted since `last` to the connector's totals.
    fn report(
        &self,
        core: &ClientSession,
        last: crate::core::CoreCounters,
    ) -> crate::core::CoreCounters {
        let now = core.counters();
        let s = &self.shared.stats;
        let add = |a: &std::sync::atomic::AtomicU64, new: u64, old: u64| {
            if new > old {
                a.fetch_add(new - old, Ordering::Relaxed);
            }
        };
        add(&s.packets_in, now.packets_in, last.packets_in);
        add(&s.packets_out, now.packets_out, last.packets_out);
        add(&s.bytes_in, now.bytes_in, last.bytes_in);
        add(&s.bytes_out, now.bytes_out, last.bytes_out);
        add(&s.pings, now.pings, last.pings);
        add(
            &s.unknown_reply_drops,
            now.unknown_reply_drops,
            last.unknown_reply_drops,
        );
        now
    }
}

fn send_error(e: CoreError) -> SendError {
    match e {
        CoreError::Closed(_) => SendError::NotConnected,
        CoreError::ReservedName(name) => SendError::ReservedName(name),
        CoreError::Invalid(e) => SendError::Invalid(e),
        // The handles build packets of the right kind and never answer through here.
        CoreError::WrongKind { .. } | CoreError::NotPending(_) => {
            SendError::Invalid(ProtocolError::ConstraintViolated {
                constraint: "connector: packet of the wrong kind",
            })
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Refusal {
    NotConnected,
    Closed,
}

fn refuse(cmd: Command, why: Refusal) {
    match cmd {
        Command::Send { done, .. } => {
            let _ = done.send(Err(match why {
                Refusal::NotConnected => SendError::NotConnected,
                Refusal::Closed => SendError::Closed,
            }));
        }
        Command::Request { done, .. } => {
            let _ = done.send(Err(match why {
                Refusal::NotConnected => RequestError::NotConnected,
                Refusal::Closed => RequestError::Closed,
            }));
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn write_some(
    wr: &mut OwnedWriteHalf,
    writing: Option<&(Vec<u8>, usize)>,
) -> std::io::Result<usize> {
    match writing {
        Some((bytes, offset)) => wr.write(&bytes[*offset..]).await,
        None => std::future::pending().await,
    }
}

/// Write everything queued (a close by the application).
async fn flush(
    wr: &mut OwnedWriteHalf,
    writing: &mut Option<(Vec<u8>, usize)>,
    core: &mut ClientSession,
) {
    loop {
        if writing.is_none() {
            *writing = core.transmit().map(|bytes| (bytes, 0));
        }
        let Some((bytes, offset)) = writing.as_mut() else {
            return;
        };
        match wr.write(&bytes[*offset..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                core.handle_written(n);
                *offset += n;
                if *offset >= bytes.len() {
                    *writing = None;
                }
            }
        }
    }
}
