//! The socket pump: one OS thread that owns one ZeroMQ ROUTER socket (plus its monitor socket)
//! and moves records between it and tokio in batches.
//!
//! A ZeroMQ socket is not thread-safe, so nothing but the pump thread touches it. The thread
//! sleeps in `zmq::poll` on three things — the ROUTER socket, the socket monitor, and the read
//! end of a wake-up pipe — and does no busy-spin:
//!
//! * **Outbound**: producers push commands onto a mutex-guarded queue and write one byte to the
//!   wake-up pipe only if the pump has not been woken since it last drained (so the pipe never
//!   fills). The pump drains the whole queue per wake-up and sends each message with
//!   `DONTWAIT` on a `ROUTER_MANDATORY` socket: an unknown routing identity is reported as
//!   [`PumpEvent::Unroutable`] (never a silent drop), and a full peer pipe (`EAGAIN`, the
//!   ZeroMQ high-water mark) parks that peer's messages in a per-peer FIFO that is retried on a
//!   short timer, so one slow peer never blocks the others and per-peer order is kept.
//! * **Inbound**: up to `batch` messages are read per wake-up and handed to tokio as one
//!   `Vec<PumpEvent>` on a bounded channel. When tokio falls behind, the pump blocks on that
//!   channel; the socket then stops being read and ZeroMQ's receive high-water mark and TCP
//!   push back on the senders.
//!
//! Memory is bounded by: the outbound queue byte cap ([`PumpConfig::queue_cap_bytes`], data
//! sends wait for room, control sends may exceed it by their own bounded count), ZeroMQ's
//! per-pipe HWMs, and the inbound channel capacity × batch.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use thiserror::Error;
use tokio::sync::{Notify, mpsc};

use super::header::{Header, MAX_BATCH, Packed, split_batch, write_batch_header};

/// Largest batch the pump builds, in bytes (a larger message is sent on its own).
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// Consecutive messages to one peer, coalesced into one single-frame ZeroMQ message: the
/// first message's buffer, extended by the message parts of the ones that join it.
#[derive(Default)]
struct Batch {
    to: Option<Bytes>,
    buf: Vec<u8>,
    count: usize,
}

impl Batch {
    /// Add a message. Returns the finished batch that must be sent first when this message
    /// could not join it (another peer, or the batch is full).
    fn add(&mut self, to: Bytes, msg: Packed) -> Option<(Bytes, Vec<u8>)> {
        let joins = self.to.as_ref() == Some(&to)
            && self.count < MAX_BATCH
            && self.buf.len() + msg.packed_len() <= MAX_BATCH_BYTES;
        if joins {
            self.buf.extend_from_slice(msg.message_part());
            self.count += 1;
            return None;
        }
        let done = self.take();
        self.to = Some(to);
        self.buf = msg.into_buffer();
        self.count = 1;
        done
    }

    /// The batch as one ZeroMQ frame.
    fn take(&mut self) -> Option<(Bytes, Vec<u8>)> {
        let to = self.to.take()?;
        let mut buf = std::mem::take(&mut self.buf);
        write_batch_header(&mut buf, u8::try_from(self.count).unwrap_or(u8::MAX));
        self.count = 0;
        Some((to, buf))
    }
}

/// Pump settings.
#[derive(Debug, Clone)]
pub struct PumpConfig {
    /// The socket's routing identity (the node's RID).
    pub routing_id: Vec<u8>,
    /// `tcp://host:port` to bind; port 0 binds an ephemeral port.
    pub bind: String,
    /// ZeroMQ send high-water mark per peer pipe, in messages.
    pub send_hwm: i32,
    /// ZeroMQ receive high-water mark per peer pipe, in messages.
    pub recv_hwm: i32,
    /// Messages read or written per batch.
    pub batch: usize,
    /// Byte cap of the outbound command queue for data sends.
    pub queue_cap_bytes: usize,
    /// Capacity of the inbound channel, in batches.
    pub inbound_batches: usize,
    /// ZeroMQ reconnect interval.
    pub reconnect_ivl: Duration,
    /// Largest inbound ZeroMQ message accepted (`ZMQ_MAXMSGSIZE`): a resource guard, so a
    /// peer — admitted or not — cannot make libzmq buffer an arbitrarily large message. A
    /// larger message closes that connection.
    pub max_message_bytes: i64,
}

impl PumpConfig {
    /// Defaults for a socket with this identity and bind address.
    pub fn new(routing_id: Vec<u8>, bind: String) -> Self {
        Self {
            routing_id,
            bind,
            send_hwm: 100_000,
            recv_hwm: 100_000,
            batch: 256,
            queue_cap_bytes: 8 * 1024 * 1024,
            inbound_batches: 64,
            reconnect_ivl: Duration::from_millis(100),
            max_message_bytes: 64 * 1024 * 1024,
        }
    }
}

/// A pump failed to start.
#[derive(Debug, Error)]
pub enum PumpError {
    /// ZeroMQ refused a socket operation.
    #[error("zeromq {op}: {source}")]
    Zmq {
        /// The operation.
        op: &'static str,
        /// The libzmq error.
        #[source]
        source: zmq::Error,
    },
    /// The wake-up pipe could not be created.
    #[error("wake-up pipe: {0}")]
    Pipe(#[from] std::io::Error),
    /// The bound endpoint could not be read back.
    #[error("bound endpoint unreadable")]
    Endpoint,
    /// A message of more than 255 frames or a frame over `u32::MAX` bytes (the batch layout
    /// cannot carry it).
    #[error("message not sendable: more than 255 frames or a frame over 4 GiB")]
    Unsendable,
    /// The pump has stopped.
    #[error("pump stopped")]
    Stopped,
}

fn zerr(op: &'static str) -> impl FnOnce(zmq::Error) -> PumpError {
    move |source| PumpError::Zmq { op, source }
}

/// A socket monitor event the mesh layer cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorKind {
    /// A dialed connection finished the ZMTP handshake.
    HandshakeSucceeded,
    /// A connection closed (either side).
    Disconnected,
    /// The socket closed an endpoint (after `disconnect`).
    Closed,
    /// A dial attempt failed and will be retried.
    ConnectRetried,
    /// An inbound connection was accepted.
    Accepted,
    /// ZMTP handshake failed.
    HandshakeFailed,
}

/// What the pump hands to tokio.
#[derive(Debug)]
pub enum PumpEvent {
    /// A message from the peer with this routing identity.
    Message {
        /// The peer's routing identity.
        from: Bytes,
        /// The message frames after the routing identity.
        frames: Vec<Bytes>,
    },
    /// A message could not be routed: no peer with that identity is connected.
    Unroutable {
        /// The routing identity it was addressed to.
        to: Bytes,
    },
    /// A socket monitor event.
    Monitor {
        /// Event.
        kind: MonitorKind,
        /// The endpoint it concerns (the dialed endpoint for outbound connections).
        endpoint: String,
    },
}

enum Command {
    Send {
        to: Bytes,
        msg: Packed,
    },
    /// Data-queue bytes of the preceding send, released once it reached the socket.
    Release(usize),
    Connect(String),
    Disconnect(String),
    Stop,
}

struct Queue {
    commands: VecDeque<Command>,
    data_bytes: usize,
}

struct Shared {
    queue: Mutex<Queue>,
    woken: AtomicBool,
    wake_tx: Mutex<std::io::PipeWriter>,
    room: Notify,
    stopped: AtomicBool,
    stats: PumpStats,
    cap: usize,
}

/// Counters of one pump.
#[derive(Debug, Default)]
pub struct PumpStats {
    /// Messages written to the socket.
    pub sent: AtomicU64,
    /// Messages read from the socket.
    pub received: AtomicU64,
    /// Sends refused as unroutable.
    pub unroutable: AtomicU64,
    /// Times a peer pipe was full (`EAGAIN`) and its messages were parked.
    pub hwm_stalls: AtomicU64,
    /// Times a producer waited for queue room.
    pub queue_waits: AtomicU64,
    /// Wake-ups of the pump thread.
    pub wakeups: AtomicU64,
}

/// The tokio-side handle of a running pump. Cheap to clone.
#[derive(Clone)]
pub struct PumpHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PumpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PumpHandle")
            .field("stopped", &self.shared.stopped.load(Ordering::Relaxed))
            .finish()
    }
}

/// A running pump: the handle, the bound endpoint and the thread.
pub struct Pump {
    handle: PumpHandle,
    endpoint: String,
    thread: Option<JoinHandle<()>>,
}

fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // A panic while holding this lock cannot leave the queue half-updated (single push/pop),
    // so recover the guard instead of propagating the poison.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Pump {
    /// Create the socket, bind it, and start the pump thread. Inbound events arrive on the
    /// returned receiver.
    ///
    /// # Errors
    /// [`PumpError`] when the socket cannot be created, configured or bound.
    pub fn start(
        ctx: &zmq::Context,
        config: PumpConfig,
    ) -> Result<(Self, mpsc::Receiver<Vec<PumpEvent>>), PumpError> {
        let socket = ctx.socket(zmq::ROUTER).map_err(zerr("socket"))?;
        socket
            .set_identity(&config.routing_id)
            .map_err(zerr("routing id"))?;
        socket
            .set_router_mandatory(true)
            .map_err(zerr("router mandatory"))?;
        // A dialer that reconnects (or a node restarted with a fixed RID) takes over its
        // identity; the connection generation and sequence numbers fence what was in flight.
        socket
            .set_router_handover(true)
            .map_err(zerr("router handover"))?;
        // A dialer announces itself as soon as the connection is up, so the acceptor can greet.
        socket
            .set_probe_router(true)
            .map_err(zerr("probe router"))?;
        socket.set_sndhwm(config.send_hwm).map_err(zerr("sndhwm"))?;
        socket.set_rcvhwm(config.recv_hwm).map_err(zerr("rcvhwm"))?;
        socket.set_linger(0).map_err(zerr("linger"))?;
        socket
            .set_maxmsgsize(config.max_message_bytes)
            .map_err(zerr("maxmsgsize"))?;
        let ivl = i32::try_from(config.reconnect_ivl.as_millis()).unwrap_or(i32::MAX);
        socket
            .set_reconnect_ivl(ivl)
            .map_err(zerr("reconnect ivl"))?;
        socket
            .set_reconnect_ivl_max(ivl.saturating_mul(10))
            .map_err(zerr("reconnect ivl max"))?;
        socket.bind(&config.bind).map_err(zerr("bind"))?;
        let endpoint = socket
            .get_last_endpoint()
            .map_err(zerr("last endpoint"))?
            .map_err(|_| PumpError::Endpoint)?;

        static MONITOR_SEQ: AtomicU64 = AtomicU64::new(0);
        let monitor_addr = format!(
            "inproc://zlink-monitor-{}-{}",
            std::process::id(),
            MONITOR_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let events = zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw()
            | zmq::SocketEvent::DISCONNECTED.to_raw()
            | zmq::SocketEvent::CLOSED.to_raw()
            | zmq::SocketEvent::CONNECT_RETRIED.to_raw()
            | zmq::SocketEvent::ACCEPTED.to_raw()
            | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL.to_raw()
            | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL.to_raw();
        socket
            .monitor(&monitor_addr, i32::from(events))
            .map_err(zerr("monitor"))?;
        let monitor = ctx.socket(zmq::PAIR).map_err(zerr("monitor socket"))?;
        monitor
            .connect(&monitor_addr)
            .map_err(zerr("monitor connect"))?;

        let (wake_rx, wake_tx) = std::io::pipe()?;
        let (tx, rx) = mpsc::channel(config.inbound_batches.max(1));
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                commands: VecDeque::new(),
                data_bytes: 0,
            }),
            woken: AtomicBool::new(false),
            wake_tx: Mutex::new(wake_tx),
            room: Notify::new(),
            stopped: AtomicBool::new(false),
            stats: PumpStats::default(),
            cap: config.queue_cap_bytes.max(1),
        });
        let thread_shared = Arc::clone(&shared);
        let batch = config.batch.max(1);
        let thread = std::thread::Builder::new()
            .name("zlink-pump".into())
            .spawn(move || {
                let mut pump = PumpThread {
                    socket,
                    monitor,
                    wake_rx,
                    shared: thread_shared,
                    tx,
                    batch,
                    parked: HashMap::new(),
                    parked_order: VecDeque::new(),
                    rx_msg: zmq::Message::new(),
                    rx_buf: BytesMut::with_capacity(RX_CHUNK),
                };
                pump.run();
                pump.close();
            })?;
        Ok((
            Self {
                handle: PumpHandle { shared },
                endpoint,
                thread: Some(thread),
            },
            rx,
        ))
    }

    /// The bound endpoint (`tcp://ip:port`, with the actual port).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A handle for producers.
    pub fn handle(&self) -> PumpHandle {
        self.handle.clone()
    }

    /// Stop the thread, close the socket and wait for both. Call it once the receiver of
    /// inbound batches is being drained or is dropped: a pump blocked on a full inbound
    /// channel stops only when the channel moves.
    pub fn stop(&mut self) {
        self.handle.push(Command::Stop, 0);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Pump {
    /// Signal the thread to stop without waiting for it: a drop may run on a runtime thread
    /// that the pump is waiting for (full inbound channel), so joining here could deadlock. The
    /// thread exits at its next wake-up or when the inbound receiver is dropped.
    fn drop(&mut self) {
        if self.thread.take().is_some() {
            self.handle.push(Command::Stop, 0);
        }
    }
}

impl PumpHandle {
    fn push(&self, cmd: Command, data_bytes: usize) {
        {
            let mut q = lock(&self.shared.queue);
            q.data_bytes += data_bytes;
            q.commands.push_back(cmd);
        }
        self.wake();
    }

    fn wake(&self) {
        if !self.shared.woken.swap(true, Ordering::AcqRel) {
            let mut w = self
                .shared
                .wake_tx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // The pipe holds at most one unread byte (guarded by `woken`), so this cannot block.
            let _ = w.write_all(&[1]);
        }
    }

    /// Queue a control message (admission, liveness, credit, reply). Never waits: control
    /// traffic is bounded by the protocol (one answer per inbound record, one probe per
    /// interval), and must not wait behind data.
    ///
    /// # Errors
    /// [`PumpError::Stopped`] after the pump stopped.
    pub fn send_control(&self, to: Bytes, frames: Vec<Vec<u8>>) -> Result<(), PumpError> {
        let msg = Packed::from_frames(&frames).ok_or(PumpError::Unsendable)?;
        self.send_control_packed(to, msg)
    }

    /// [`PumpHandle::send_control`] of a message already in the batch layout.
    ///
    /// # Errors
    /// [`PumpError::Stopped`] after the pump stopped.
    pub fn send_control_packed(&self, to: Bytes, msg: Packed) -> Result<(), PumpError> {
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(PumpError::Stopped);
        }
        self.push(Command::Send { to, msg }, 0);
        Ok(())
    }

    /// Bytes of data sends queued and not yet written to the socket.
    pub fn queued_data_bytes(&self) -> usize {
        lock(&self.shared.queue).data_bytes
    }

    /// Wait until the data queue has room for `bytes` (a message larger than the cap is let
    /// through when the queue is empty), then reserve it. Cancel-safe: nothing is reserved
    /// until the future returns.
    ///
    /// # Errors
    /// [`PumpError::Stopped`] after the pump stopped.
    pub async fn reserve_data(&self, bytes: usize) -> Result<DataSlot, PumpError> {
        loop {
            let notified = self.shared.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shared.stopped.load(Ordering::Acquire) {
                return Err(PumpError::Stopped);
            }
            {
                let mut q = lock(&self.shared.queue);
                if q.data_bytes == 0 || q.data_bytes + bytes <= self.shared.cap {
                    q.data_bytes += bytes;
                    return Ok(DataSlot {
                        handle: self.clone(),
                        bytes,
                        used: false,
                    });
                }
            }
            self.shared
                .stats
                .queue_waits
                .fetch_add(1, Ordering::Relaxed);
            notified.await;
        }
    }

    /// Ask the socket to dial `endpoint`.
    pub fn connect(&self, endpoint: String) {
        self.push(Command::Connect(endpoint), 0);
    }

    /// Ask the socket to drop its connection to `endpoint`.
    pub fn disconnect(&self, endpoint: String) {
        self.push(Command::Disconnect(endpoint), 0);
    }

    /// Counters.
    pub fn stats(&self) -> &PumpStats {
        &self.shared.stats
    }
}

/// Room reserved in the data queue by [`PumpHandle::reserve_data`]; spend it with
/// [`DataSlot::send`] or drop it to give the room back.
pub struct DataSlot {
    handle: PumpHandle,
    bytes: usize,
    used: bool,
}

impl DataSlot {
    /// Queue the message in the reserved room. Ordering between messages is the order of the
    /// `send` calls.
    pub fn send(mut self, to: Bytes, msg: Packed) {
        self.used = true;
        {
            let mut q = lock(&self.handle.shared.queue);
            q.commands.push_back(Command::Send { to, msg });
            // The reservation already counted the bytes; remember them on the message side so
            // the pump can release exactly this amount.
            q.commands.push_back(Command::Release(self.bytes));
        }
        self.handle.wake();
    }
}

impl Drop for DataSlot {
    fn drop(&mut self) {
        if !self.used {
            let mut q = lock(&self.handle.shared.queue);
            q.data_bytes = q.data_bytes.saturating_sub(self.bytes);
            drop(q);
            self.handle.shared.room.notify_waiters();
        }
    }
}

struct PumpThread {
    socket: zmq::Socket,
    monitor: zmq::Socket,
    wake_rx: std::io::PipeReader,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Vec<PumpEvent>>,
    batch: usize,
    /// Messages for peers whose pipe was full, per routing identity, in order.
    parked: HashMap<Bytes, VecDeque<Vec<u8>>>,
    parked_order: VecDeque<Bytes>,
    rx_msg: zmq::Message,
    rx_buf: BytesMut,
}

/// Receive buffer chunk.
const RX_CHUNK: usize = 64 * 1024;

/// Messages parked for one peer whose pipe is full before the pump gives the peer up. Flow
/// control keeps application data far below this; it bounds what control traffic to a peer
/// that stopped reading can pile up.
const MAX_PARKED_PER_PEER: usize = 10_000;

enum SendOutcome {
    Sent,
    Full(Vec<u8>),
    Unroutable,
}

impl PumpThread {
    /// Stop monitoring before the socket closes. libzmq sends monitor events with a blocking
    /// send from its I/O and reaper threads; events of the closing socket sent to a monitor
    /// pipe whose reader is already gone would block those threads for good (and with them
    /// every socket of the context). Re-targeting the monitor at a fresh endpoint with no
    /// events stops the old one and sends nothing more.
    fn close(&mut self) {
        static OFF_SEQ: AtomicU64 = AtomicU64::new(0);
        let off = format!(
            "inproc://zlink-monitor-off-{}-{}",
            std::process::id(),
            OFF_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let _ = self.socket.monitor(&off, 0);
        // Drain what the old monitor had queued; the reader closes after the socket.
        while self.monitor.recv_multipart(zmq::DONTWAIT).is_ok() {}
    }

    fn run(&mut self) {
        let mut backoff_ms: i64 = 1;
        loop {
            let timeout = if self.parked.is_empty() {
                -1
            } else {
                backoff_ms
            };
            let (sock_in, mon_in, wake_in) = {
                let mut items = [
                    self.socket.as_poll_item(zmq::POLLIN),
                    self.monitor.as_poll_item(zmq::POLLIN),
                    zmq::PollItem::from_fd(self.wake_rx.as_raw_fd(), zmq::POLLIN),
                ];
                if zmq::poll(&mut items, timeout).is_err() {
                    // EINTR: poll again.
                    continue;
                }
                (
                    items[0].is_readable(),
                    items[1].is_readable(),
                    items[2].is_readable(),
                )
            };
            self.shared.stats.wakeups.fetch_add(1, Ordering::Relaxed);
            let mut events = Vec::new();
            if wake_in {
                let mut buf = [0u8; 64];
                let _ = self.wake_rx.read(&mut buf);
            }
            // Clear before draining so a producer that pushes after the drain wakes us again.
            self.shared.woken.store(false, Ordering::Release);
            if !self.parked.is_empty() {
                if self.retry_parked(&mut events) {
                    backoff_ms = 1;
                } else {
                    backoff_ms = (backoff_ms * 2).min(10);
                }
            }
            if self.drain_commands(&mut events) {
                self.shared.stopped.store(true, Ordering::Release);
                self.shared.room.notify_waiters();
                return;
            }
            if mon_in {
                self.read_monitor(&mut events);
            }
            if sock_in {
                self.read_socket(&mut events);
            }
            if !events.is_empty() && self.tx.blocking_send(events).is_err() {
                // Receiver gone: the node is shutting down.
                self.shared.stopped.store(true, Ordering::Release);
                self.shared.room.notify_waiters();
                return;
            }
        }
    }

    /// Returns true on Stop.
    fn drain_commands(&mut self, events: &mut Vec<PumpEvent>) -> bool {
        loop {
            let cmds: VecDeque<Command> = {
                let mut q = lock(&self.shared.queue);
                std::mem::take(&mut q.commands)
            };
            if cmds.is_empty() {
                return false;
            }
            let mut released = 0usize;
            let mut batch = Batch::default();
            for cmd in cmds {
                match cmd {
                    Command::Send { to, msg } => {
                        if let Some((to, frame)) = batch.add(to, msg) {
                            self.send_or_park(to, frame, events);
                        }
                    }
                    Command::Release(n) => released += n,
                    Command::Connect(ep) => {
                        self.flush_batch(&mut batch, events);
                        if let Err(e) = self.socket.connect(&ep) {
                            tracing::warn!(endpoint = %ep, error = %e, "connect refused");
                        }
                    }
                    Command::Disconnect(ep) => {
                        self.flush_batch(&mut batch, events);
                        let _ = self.socket.disconnect(&ep);
                    }
                    Command::Stop => return true,
                }
            }
            self.flush_batch(&mut batch, events);
            if released > 0 {
                let mut q = lock(&self.shared.queue);
                q.data_bytes = q.data_bytes.saturating_sub(released);
                drop(q);
                self.shared.room.notify_waiters();
            }
        }
    }

    fn flush_batch(&mut self, batch: &mut Batch, events: &mut Vec<PumpEvent>) {
        if let Some((to, frame)) = batch.take() {
            self.send_or_park(to, frame, events);
        }
    }

    fn send_or_park(&mut self, to: Bytes, frame: Vec<u8>, events: &mut Vec<PumpEvent>) {
        if let Some(q) = self.parked.get_mut(&to) {
            if q.len() >= MAX_PARKED_PER_PEER {
                // The peer stopped reading long ago (its pipe has been full for this many
                // messages): give its connection up instead of growing without bound. The
                // mesh layer ends the epoch, so senders see it closed.
                self.parked.remove(&to);
                self.shared.stats.unroutable.fetch_add(1, Ordering::Relaxed);
                events.push(PumpEvent::Unroutable { to });
                return;
            }
            q.push_back(frame);
            return;
        }
        match self.try_send(&to, frame) {
            SendOutcome::Sent => {}
            SendOutcome::Full(frame) => {
                self.shared.stats.hwm_stalls.fetch_add(1, Ordering::Relaxed);
                self.parked.entry(to.clone()).or_default().push_back(frame);
                self.parked_order.push_back(to);
            }
            SendOutcome::Unroutable => events.push(PumpEvent::Unroutable { to }),
        }
    }

    fn try_send(&self, to: &Bytes, frame: Vec<u8>) -> SendOutcome {
        match self.socket.send(&to[..], zmq::SNDMORE | zmq::DONTWAIT) {
            Ok(()) => {}
            Err(zmq::Error::EAGAIN) => return SendOutcome::Full(frame),
            Err(_) => {
                self.shared.stats.unroutable.fetch_add(1, Ordering::Relaxed);
                return SendOutcome::Unroutable;
            }
        }
        // After the routing frame was accepted the rest of the message cannot fail for lack
        // of room (libzmq checks the pipe for the whole message up front). The buffer is
        // handed to libzmq without a copy.
        let _ = self.socket.send(zmq::Message::from(frame), 0);
        self.shared.stats.sent.fetch_add(1, Ordering::Relaxed);
        SendOutcome::Sent
    }

    /// Returns true when anything moved.
    fn retry_parked(&mut self, events: &mut Vec<PumpEvent>) -> bool {
        let mut progressed = false;
        let peers: Vec<Bytes> = self.parked_order.drain(..).collect();
        for to in peers {
            let Some(mut q) = self.parked.remove(&to) else {
                continue;
            };
            let mut unroutable = false;
            while let Some(frame) = q.pop_front() {
                match self.try_send(&to, frame) {
                    SendOutcome::Sent => progressed = true,
                    SendOutcome::Full(frame) => {
                        q.push_front(frame);
                        break;
                    }
                    SendOutcome::Unroutable => {
                        unroutable = true;
                        break;
                    }
                }
            }
            if unroutable {
                events.push(PumpEvent::Unroutable { to });
            } else if !q.is_empty() {
                self.parked.insert(to.clone(), q);
                self.parked_order.push_back(to);
            }
        }
        progressed
    }

    /// Receive one multipart message into the shared receive buffer: one copy per frame and
    /// one allocation per 64 KiB of traffic (frames are slices of the frozen buffer), instead
    /// of an allocation per frame. `None` when nothing is waiting.
    fn recv_message(&mut self) -> Option<Vec<Bytes>> {
        let mut bounds = Vec::with_capacity(4);
        let start = self.rx_buf.len();
        loop {
            let flags = if bounds.is_empty() { zmq::DONTWAIT } else { 0 };
            if self.socket.recv(&mut self.rx_msg, flags).is_err() {
                if bounds.is_empty() {
                    return None;
                }
                // A multipart message arrives whole; an error mid-way ends it here.
                break;
            }
            self.rx_buf.extend_from_slice(&self.rx_msg);
            bounds.push(self.rx_buf.len() - start);
            if !self.rx_msg.get_more() {
                break;
            }
        }
        let all = self.rx_buf.split_to(self.rx_buf.len()).freeze();
        if self.rx_buf.capacity() < RX_CHUNK / 4 {
            self.rx_buf.reserve(RX_CHUNK);
        }
        let mut frames = Vec::with_capacity(bounds.len());
        let mut from = 0;
        for end in bounds {
            frames.push(all.slice(from..end));
            from = end;
        }
        Some(frames)
    }

    fn read_socket(&mut self, events: &mut Vec<PumpEvent>) {
        // Bounded by records handed up, not ZeroMQ messages: a batch holds up to 255 records.
        while events.len() < self.batch {
            let Some(mut frames) = self.recv_message() else {
                break;
            };
            if frames.is_empty() {
                continue;
            }
            let from = frames.remove(0);
            self.shared.stats.received.fetch_add(1, Ordering::Relaxed);
            let is_batch = frames
                .first()
                .is_some_and(|f| matches!(Header::decode(f), Ok(Header::Batch { .. })));
            if !is_batch {
                events.push(PumpEvent::Message { from, frames });
                continue;
            }
            // `Bytes` clones share the buffer: keeping the frames for the error case is cheap.
            match split_batch(frames.clone()) {
                Ok(messages) => {
                    for frames in messages {
                        events.push(PumpEvent::Message {
                            from: from.clone(),
                            frames,
                        });
                    }
                }
                // Handed up whole: the reactor counts the malformed batch header.
                Err(_) => events.push(PumpEvent::Message { from, frames }),
            }
        }
    }

    fn read_monitor(&mut self, events: &mut Vec<PumpEvent>) {
        while let Ok(parts) = self.monitor.recv_multipart(zmq::DONTWAIT) {
            let [head, addr] = parts.as_slice() else {
                continue;
            };
            let Some(raw) = head.get(0..2) else { continue };
            let id = u16::from_le_bytes([raw[0], raw[1]]);
            let kind = if id == zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw() {
                MonitorKind::HandshakeSucceeded
            } else if id == zmq::SocketEvent::DISCONNECTED.to_raw() {
                MonitorKind::Disconnected
            } else if id == zmq::SocketEvent::CLOSED.to_raw() {
                MonitorKind::Closed
            } else if id == zmq::SocketEvent::CONNECT_RETRIED.to_raw() {
                MonitorKind::ConnectRetried
            } else if id == zmq::SocketEvent::ACCEPTED.to_raw() {
                MonitorKind::Accepted
            } else if id == zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL.to_raw()
                || id == zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL.to_raw()
            {
                MonitorKind::HandshakeFailed
            } else {
                continue;
            };
            events.push(PumpEvent::Monitor {
                kind,
                endpoint: String::from_utf8_lossy(addr).into_owned(),
            });
        }
    }
}
