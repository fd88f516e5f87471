//! The socket pump: one OS thread per ZeroMQ ROUTER socket (plus its monitor socket) that
//! moves outbound records to it in batches, and [`Inbound`], the tokio side that reads it.
//!
//! A ZeroMQ socket is not thread-safe: it may move between threads only across a full memory
//! barrier. The socket therefore lives in a mutex (`Wire`, with the per-peer parked messages),
//! and is used only by whoever holds it. The pump thread holds it while it works and releases
//! it while it sleeps in `zmq::poll` on two things — the socket monitor and the read end of a
//! wake-up pipe — and does no busy-spin:
//!
//! * **Outbound**: producers push commands onto a mutex-guarded queue and wake a drainer: on a
//!   multi-thread tokio runtime the **flush task** (a `Notify`; woken from a runtime thread it
//!   runs on that thread right after the producer's turn, so no thread wakes up and everything
//!   queued by then goes as one batch), otherwise the pump thread (one byte to the wake-up pipe,
//!   only if the pump has not been woken since it last drained, so the pipe never fills).
//!   Connect, disconnect and stop always go to the pump thread, and so do parked messages'
//!   retries (the flush task wakes it when it parked something). Drainers take turns under the
//!   socket lock, so the queue's order is the wire's. A drain takes the whole queue, coalesces
//!   consecutive messages to one peer into one batch frame, and sends with `DONTWAIT` on a
//!   `ROUTER_MANDATORY` socket: an unknown routing identity is reported as
//!   [`PumpEvent::Unroutable`] (never a silent drop), and a full peer pipe (`EAGAIN`, the
//!   ZeroMQ high-water mark) parks that peer's messages in a per-peer FIFO that is retried on a
//!   short timer, so one slow peer never blocks the others and per-peer order is kept. The
//!   flush task needs a runtime thread to run on, as the reactor does: a runtime whose every
//!   worker is blocked holds queued messages until one is free; a current-thread runtime (where
//!   a producer blocking its only thread would hold them for good) keeps the pump thread's
//!   drains.
//! * **Direct sends**: when the queue is empty, nothing is parked for the peer and the socket
//!   lock is free (no drain is running), a producer writes its message to the socket itself
//!   instead of queueing it — nothing can be overtaken, and a request saves a hand-off each
//!   way. A message goes direct at least [`DIRECT_GAP_NS`] after the last direct send; the next
//!   ones of a burst are queued, so a drain batches them. A producer only *tries* the lock and
//!   sends with `DONTWAIT`; anything that does not go out at once is queued as above.
//! * **Inbound** is read by the consuming task itself ([`Inbound::recv`], the mesh reactor),
//!   not by the pump thread: it waits on the socket's `ZMQ_FD` in tokio's reactor and reads up
//!   to `batch` records per call under the socket lock. A received record so crosses one thread
//!   hand-off fewer (libzmq's I/O thread → the reactor task, instead of → the pump thread →
//!   the reactor task), a wake-up less on each leg of a request. Because the socket's `ZMQ_FD`
//!   only signals *changes*, whoever used the socket last (a direct send, the pump's sends, the
//!   reader itself) checks `ZMQ_EVENTS` and wakes the reader when a message is waiting. When
//!   the reader falls behind, the socket is not read; ZeroMQ's receive high-water mark and TCP
//!   push back on the senders. The pump's own events (monitor, unroutable) come on a bounded
//!   channel that [`Inbound::recv`] serves first.
//!
//! Memory is bounded by: the outbound queue byte cap ([`PumpConfig::queue_cap_bytes`], data
//! sends wait for room, control sends may exceed it by their own bounded count), ZeroMQ's
//! per-pipe HWMs, and `batch` records per inbound read (plus the pump's bounded event channel).

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

use super::header::{MAX_BATCH, Packed, check_batch, write_batch_header};

/// Largest batch the pump builds, in bytes (a larger message is sent on its own).
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// A send within this long of the last direct send goes through the pump (see
/// `Shared::last_direct_ns`).
const DIRECT_GAP_NS: u64 = 20_000;

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
    ///
    /// The buffers of messages copied into the batch go to `recycle`.
    fn add(
        &mut self,
        to: Bytes,
        msg: Packed,
        recycle: &mut Vec<Vec<u8>>,
    ) -> Option<(Bytes, Vec<u8>)> {
        let joins = self.to.as_ref() == Some(&to)
            && self.count < MAX_BATCH
            && self.buf.len() + msg.packed_len() <= MAX_BATCH_BYTES;
        if joins {
            if self.count == 1 {
                // The first message's buffer is sized for itself: give the batch room for the
                // rest at once instead of growing it step by step.
                let mut buf = Vec::with_capacity(MAX_BATCH_BYTES);
                buf.extend_from_slice(&self.buf);
                recycle.push(std::mem::replace(&mut self.buf, buf));
            }
            self.buf.extend_from_slice(msg.message_part());
            recycle.push(msg.into_buffer());
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
    /// Records read per [`Inbound::recv`] at most.
    pub batch: usize,
    /// Byte cap of the outbound command queue for data sends.
    pub queue_cap_bytes: usize,
    /// Capacity of the channel of the pump's own events (monitor, unroutable), in batches.
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

/// The pump thread's name: `zlink-pump-<routing id>`, so the threads of several nodes in one
/// process (tests, benchmarks, an embedding application) tell apart in a debugger, a profile or
/// a per-thread allocation count (`runtime/tests/allocations.rs`). A NUL byte, which a thread
/// name cannot hold, is left out.
fn pump_thread_name(routing_id: &[u8]) -> String {
    let id: String = String::from_utf8_lossy(routing_id)
        .chars()
        .filter(|c| *c != '\0')
        .collect();
    format!("zlink-pump-{id}")
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
    /// A message of no frames, more than 255 frames or a frame over `u32::MAX` bytes (the
    /// batch layout cannot carry it).
    #[error("message not sendable: no frames, more than 255 frames, or a frame over 4 GiB")]
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
    /// A well-formed batch ([`check_batch`](super::header::check_batch) passed) from the peer
    /// with this routing identity: its messages, in order, are
    /// [`for_each_message`](super::header::for_each_message) of `frame`. Handed up whole so the
    /// receiver iterates it without an allocation per message.
    Batch {
        /// The peer's routing identity.
        from: Bytes,
        /// The batch frame.
        frame: Bytes,
        /// Messages in it.
        messages: usize,
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
    /// A complete frame (a batch of one) handed back by a direct send that could not go out.
    SendFrame {
        to: Bytes,
        frame: Vec<u8>,
    },
    /// Data-queue bytes of the preceding send, released once the pump took it over (written to
    /// the socket, or in the batch being built, which is at most 64 KiB).
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
    /// Message buffers the pump copied into batches, for producers to reuse
    /// ([`PumpHandle::buffer`]): they circulate instead of being allocated on one thread and
    /// freed on another for every message.
    pool: Mutex<Vec<Vec<u8>>>,
    /// Set by the pump thread when it goes to sleep, cleared when it wakes: only then may a
    /// message bypass the queue. A busy pump takes every message (and batches them).
    asleep: AtomicBool,
    /// When the last direct send happened (nanoseconds since `born`). A send within
    /// [`DIRECT_GAP_NS`] of it goes to the pump instead, so a burst still reaches the pump (which
    /// batches it) after its first message, while messages spaced further apart — a serial
    /// request stream — all go straight to the socket, however long the pump sleeps.
    last_direct_ns: AtomicU64,
    born: std::time::Instant,
    /// The socket and its parked messages. Lock order: `wire` before `queue`; a producer that
    /// holds `queue` only ever `try_lock`s `wire`.
    wire: Mutex<Wire>,
    /// Wakes [`Inbound::recv`]: set by whoever touched the socket and found a message waiting
    /// (that touch may have consumed the `ZMQ_FD` signal the reader waits on).
    readable: Notify,
    woken: AtomicBool,
    wake_tx: Mutex<std::io::PipeWriter>,
    /// Wakes the flush task (see [`flush_loop`]), when there is one.
    flush: Notify,
    /// Whether a flush task drains the queue on the runtime's threads (a multi-thread tokio
    /// runtime started the pump); otherwise every queued message wakes the pump thread.
    flusher: AtomicBool,
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
    /// ZeroMQ messages read from the socket (a batch counts once).
    pub received: AtomicU64,
    /// Sends refused as unroutable.
    pub unroutable: AtomicU64,
    /// Times a peer pipe was full (`EAGAIN`) and its messages were parked.
    pub hwm_stalls: AtomicU64,
    /// Times a producer waited for queue room.
    pub queue_waits: AtomicU64,
    /// Wake-ups of the pump thread.
    pub wakeups: AtomicU64,
    /// Drains of the queue by the flush task (on a runtime thread, no thread woken).
    pub flushes: AtomicU64,
    /// Messages a producer wrote to the socket itself (no pump hand-off).
    pub direct_sends: AtomicU64,
    /// Looks at the socket by the reader that found no message (woken by a signal that was
    /// not an arrival).
    pub idle_reads: AtomicU64,
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
    /// Create the socket, bind it, and start the pump thread. Inbound messages and events are
    /// read with the returned [`Inbound`].
    ///
    /// # Errors
    /// [`PumpError`] when the socket cannot be created, configured or bound.
    pub fn start(ctx: &zmq::Context, config: PumpConfig) -> Result<(Self, Inbound), PumpError> {
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
            wire: Mutex::new(Wire {
                socket: Some(socket),
                parked: HashMap::new(),
                parked_order: VecDeque::new(),
            }),
            readable: Notify::new(),
            pool: Mutex::new(Vec::new()),
            asleep: AtomicBool::new(false),
            last_direct_ns: AtomicU64::new(0),
            born: std::time::Instant::now(),
            woken: AtomicBool::new(false),
            wake_tx: Mutex::new(wake_tx),
            flush: Notify::new(),
            flusher: AtomicBool::new(false),
            room: Notify::new(),
            stopped: AtomicBool::new(false),
            stats: PumpStats::default(),
            cap: config.queue_cap_bytes.max(1),
        });
        let socket_fd = wire_fd(&shared)?;
        if let Ok(rt) = tokio::runtime::Handle::try_current()
            && rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        {
            shared.flusher.store(true, Ordering::Release);
            rt.spawn(flush_loop(Arc::clone(&shared), tx.clone()));
        }
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(pump_thread_name(&config.routing_id))
            .spawn(move || {
                let mut pump = PumpThread {
                    monitor,
                    wake_rx,
                    shared: thread_shared,
                    tx,
                    drainer: Drainer::default(),
                };
                pump.run();
                pump.close();
            })?;
        let inbound = Inbound {
            shared: Arc::clone(&shared),
            events: rx,
            socket_fd: Some(socket_fd),
            fd: None,
            batch: config.batch.max(1),
            rx_msg: zmq::Message::new(),
            rx_buf: BytesMut::with_capacity(RX_CHUNK),
        };
        Ok((
            Self {
                handle: PumpHandle { shared },
                endpoint,
                thread: Some(thread),
            },
            inbound,
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

    /// Stop the thread, close the socket and wait for both. Call it once the [`Inbound`] is
    /// being read or is dropped: a pump blocked on its full event channel stops only when the
    /// channel moves.
    pub fn stop(&mut self) {
        self.handle.push(Command::Stop, 0);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Pump {
    /// Signal the thread to stop without waiting for it: a drop may run on a runtime thread
    /// that the pump is waiting for (full event channel), so joining here could deadlock. The
    /// thread exits at its next wake-up or when the [`Inbound`] is dropped.
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
        wake_thread(&self.shared);
    }

    /// Queued messages are waiting: the flush task takes them, or else the pump thread.
    fn kick(&self) {
        if self.shared.flusher.load(Ordering::Acquire) {
            self.shared.flush.notify_one();
        } else {
            self.wake();
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
        if msg.frame_count() == 0 {
            // A batch cannot carry a message without frames (the receiver would refuse the
            // whole batch it joined).
            return Err(PumpError::Unsendable);
        }
        self.submit(to, msg, 0);
        Ok(())
    }

    /// Write `msg` to the socket from the calling thread when that cannot reorder anything —
    /// no command is queued, nothing is parked for `to`, and the pump thread is not working the
    /// socket (its lock is free) — else queue it for the pump. `data_bytes` is the data-queue
    /// reservation the message holds (0 for control messages).
    ///
    /// The direct write saves the hand-off to the pump thread (a thread wake-up each way of a
    /// request). It never blocks: the socket lock is only tried, and the send is `DONTWAIT`; a
    /// full or unroutable peer goes to the pump, which parks or reports it as usual.
    fn submit(&self, to: Bytes, msg: Packed, data_bytes: usize) {
        let stats = &self.shared.stats;
        let mut q = lock(&self.shared.queue);
        let mut msg = Some(msg);
        let mut frame = None;
        if q.commands.is_empty()
            && self.direct_turn()
            && let Ok(wire) = self.shared.wire.try_lock()
            && wire.socket.is_some()
            && !wire.parked.contains_key(&to)
            && let Some(m) = msg.take()
        {
            let outcome = wire.try_send(&to, m.into_frame(), stats);
            // This thread touched the socket last, so it wakes the reader if a message is
            // waiting (see `Wire::readable`).
            let readable = wire.readable();
            drop(wire);
            if readable {
                self.shared.readable.notify_one();
            }
            match outcome {
                SendOutcome::Sent => {
                    stats.direct_sends.fetch_add(1, Ordering::Relaxed);
                    q.data_bytes = q.data_bytes.saturating_sub(data_bytes);
                    drop(q);
                    if data_bytes > 0 {
                        self.shared.room.notify_waiters();
                    }
                    return;
                }
                SendOutcome::Full(f) | SendOutcome::Unroutable(f) => frame = Some(f),
            }
        }
        match (msg, frame) {
            (Some(msg), _) => q.commands.push_back(Command::Send { to, msg }),
            (None, Some(frame)) => q.commands.push_back(Command::SendFrame { to, frame }),
            (None, None) => {}
        }
        if data_bytes > 0 {
            // The reservation already counted the bytes; the pump releases exactly this
            // amount once the message reached the socket.
            q.commands.push_back(Command::Release(data_bytes));
        }
        drop(q);
        self.kick();
    }

    /// Whether a direct send may go now: none went within [`DIRECT_GAP_NS`] (and this one takes
    /// the turn). Called under the queue lock, so turns are taken one at a time.
    fn direct_turn(&self) -> bool {
        if !self.shared.asleep.load(Ordering::Acquire) {
            return false;
        }
        let now = u64::try_from(self.shared.born.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let last = self.shared.last_direct_ns.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < DIRECT_GAP_NS {
            return false;
        }
        self.shared
            .last_direct_ns
            .store(now.max(1), Ordering::Relaxed);
        true
    }

    /// A message buffer from the pool (empty if the pool is), for [`Packed::stamped_in`].
    pub fn buffer(&self) -> Vec<u8> {
        self.shared
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .unwrap_or_default()
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
        // Fast path: room now, no wait registration.
        if let Some(slot) = self.try_reserve_data(bytes)? {
            return Ok(slot);
        }
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

    /// [`PumpHandle::reserve_data`] without waiting: `None` when the queue has no room.
    pub(crate) fn try_reserve_data(&self, bytes: usize) -> Result<Option<DataSlot>, PumpError> {
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(PumpError::Stopped);
        }
        let mut q = lock(&self.shared.queue);
        if q.data_bytes == 0 || q.data_bytes + bytes <= self.shared.cap {
            q.data_bytes += bytes;
            return Ok(Some(DataSlot {
                handle: self.clone(),
                bytes,
                used: false,
            }));
        }
        Ok(None)
    }

    /// Ask the socket to dial `endpoint`.
    pub fn connect(&self, endpoint: String) {
        self.push(Command::Connect(endpoint), 0);
    }

    /// Ask the socket to drop its connection to `endpoint` (every pipe to it: libzmq keys
    /// connections by endpoint).
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
        self.handle.submit(to, msg, self.bytes);
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
    monitor: zmq::Socket,
    wake_rx: std::io::PipeReader,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Vec<PumpEvent>>,
    drainer: Drainer,
}

/// Write the wake-up byte to the pump thread's pipe (once per wake-up: `woken`).
fn wake_thread(shared: &Shared) {
    if !shared.woken.swap(true, Ordering::AcqRel) {
        let mut w = shared
            .wake_tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The pipe holds at most one unread byte (guarded by `woken`), so this cannot block.
        let _ = w.write_all(&[1]);
    }
}

/// The flush task: drains the queue to the socket on the runtime's threads when producers
/// queued messages, so a message that cannot go directly costs a task wake-up (often on the
/// same thread, right after the producer's turn) instead of a wake-up of the pump thread. The
/// pump thread still owns what needs its poll: parked messages' retries, monitor events, and
/// `Stop`, which this task hands back to it.
async fn flush_loop(shared: Arc<Shared>, tx: mpsc::Sender<Vec<PumpEvent>>) {
    /// However the task ends — its loop returns, or its runtime drops it — queued messages go
    /// back to the pump thread from then on.
    struct Handback(Arc<Shared>);
    impl Drop for Handback {
        fn drop(&mut self) {
            // Under the queue lock: a producer that queued before this sees the thread woken
            // below, one that queues after it sees `flusher` false and wakes the thread itself.
            let q = lock(&self.0.queue);
            self.0.flusher.store(false, Ordering::Release);
            drop(q);
            wake_thread(&self.0);
        }
    }
    let _handback = Handback(Arc::clone(&shared));
    let mut drainer = Drainer::default();
    loop {
        shared.flush.notified().await;
        if shared.stopped.load(Ordering::Acquire) {
            return;
        }
        shared.stats.flushes.fetch_add(1, Ordering::Relaxed);
        let mut events = Vec::new();
        let (stop, parked, readable) = {
            let mut wire = lock_wire(&shared);
            let stop = drainer.drain(&shared, &mut wire, &mut events, false);
            (stop, !wire.parked.is_empty(), wire.readable())
        };
        if readable {
            shared.readable.notify_one();
        }
        if stop || parked {
            wake_thread(&shared);
        }
        if stop || (!events.is_empty() && tx.send(events).await.is_err()) {
            return;
        }
    }
}

/// One drainer's reusable buffers: the pump thread's, or the flush task's.
#[derive(Default)]
struct Drainer {
    /// The command deque of the previous drain, kept for its capacity.
    spare: VecDeque<Command>,
    /// Buffers of messages copied into a batch, on their way back to the pool.
    recycle: Vec<Vec<u8>>,
}

/// The ROUTER socket and the messages parked for peers whose pipe is full.
struct Wire {
    /// `None` once the pump has stopped and closed it.
    socket: Option<zmq::Socket>,
    /// Messages for peers whose pipe was full, per routing identity, in order.
    parked: HashMap<Bytes, VecDeque<Vec<u8>>>,
    parked_order: VecDeque<Bytes>,
}

fn lock_wire(shared: &Shared) -> MutexGuard<'_, Wire> {
    // Every update of `Wire` is a single push, pop or socket call: a panic cannot leave it
    // half-updated.
    shared
        .wire
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn wire_fd(shared: &Shared) -> Result<std::os::fd::RawFd, PumpError> {
    let wire = lock_wire(shared);
    let socket = wire.socket.as_ref().ok_or(PumpError::Stopped)?;
    socket.get_fd().map_err(zerr("socket fd"))
}

/// Most buffers the pool keeps, and the largest it keeps (at most 8 MiB in all).
const POOL_MAX_BUFFERS: usize = 1024;
const POOL_MAX_BUFFER_BYTES: usize = 8 * 1024;

/// A received frame at least this large is kept as its ZeroMQ message instead of copied.
const OWNED_FRAME_BYTES: usize = 2048;

/// A received ZeroMQ message as the owner of [`Bytes`].
struct ZmqFrame(zmq::Message);

impl AsRef<[u8]> for ZmqFrame {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
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
    /// Unknown routing identity; the frame is handed back unsent.
    Unroutable(Vec<u8>),
}

impl Wire {
    fn try_send(&self, to: &Bytes, frame: Vec<u8>, stats: &PumpStats) -> SendOutcome {
        let Some(socket) = &self.socket else {
            return SendOutcome::Unroutable(frame);
        };
        match socket.send(&to[..], zmq::SNDMORE | zmq::DONTWAIT) {
            Ok(()) => {}
            Err(zmq::Error::EAGAIN) => return SendOutcome::Full(frame),
            Err(_) => return SendOutcome::Unroutable(frame),
        }
        // After the routing frame was accepted the rest of the message cannot fail for lack
        // of room (libzmq checks the pipe for the whole message up front). The buffer is
        // handed to libzmq without a copy.
        let _ = socket.send(zmq::Message::from(frame), 0);
        stats.sent.fetch_add(1, Ordering::Relaxed);
        SendOutcome::Sent
    }

    fn send_or_park(
        &mut self,
        to: Bytes,
        frame: Vec<u8>,
        stats: &PumpStats,
        events: &mut Vec<PumpEvent>,
    ) {
        if let Some(q) = self.parked.get_mut(&to) {
            if q.len() >= MAX_PARKED_PER_PEER {
                // The peer stopped reading long ago (its pipe has been full for this many
                // messages): give its connection up instead of growing without bound. The
                // mesh layer ends the epoch, so senders see it closed.
                self.parked.remove(&to);
                stats.unroutable.fetch_add(1, Ordering::Relaxed);
                events.push(PumpEvent::Unroutable { to });
                return;
            }
            q.push_back(frame);
            return;
        }
        match self.try_send(&to, frame, stats) {
            SendOutcome::Sent => {}
            SendOutcome::Full(frame) => {
                stats.hwm_stalls.fetch_add(1, Ordering::Relaxed);
                self.parked.entry(to.clone()).or_default().push_back(frame);
                self.parked_order.push_back(to);
            }
            SendOutcome::Unroutable(_) => {
                stats.unroutable.fetch_add(1, Ordering::Relaxed);
                events.push(PumpEvent::Unroutable { to });
            }
        }
    }

    /// Returns true when anything moved.
    fn retry_parked(&mut self, stats: &PumpStats, events: &mut Vec<PumpEvent>) -> bool {
        let mut progressed = false;
        let peers: Vec<Bytes> = self.parked_order.drain(..).collect();
        for to in peers {
            let Some(mut q) = self.parked.remove(&to) else {
                continue;
            };
            let mut unroutable = false;
            while let Some(frame) = q.pop_front() {
                match self.try_send(&to, frame, stats) {
                    SendOutcome::Sent => progressed = true,
                    SendOutcome::Full(frame) => {
                        q.push_front(frame);
                        break;
                    }
                    SendOutcome::Unroutable(_) => {
                        stats.unroutable.fetch_add(1, Ordering::Relaxed);
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

    /// Whether a message is waiting to be read. Also re-arms the socket's `ZMQ_FD`: after any
    /// operation on the socket its signal may have been consumed, so whoever touched the socket
    /// last must look, and wake the reader ([`Shared::readable`]) when this is true.
    fn readable(&self) -> bool {
        self.socket
            .as_ref()
            .and_then(|s| s.get_events().ok())
            .is_some_and(|e| e.contains(zmq::POLLIN))
    }
}

impl Drainer {
    /// Return recycled buffers to the pool, bounded in count and size.
    fn give_back_buffers(&mut self, shared: &Shared) {
        if self.recycle.is_empty() {
            return;
        }
        let mut pool = shared
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let room = POOL_MAX_BUFFERS.saturating_sub(pool.len());
        pool.extend(
            self.recycle
                .drain(..)
                .filter(|b| b.capacity() <= POOL_MAX_BUFFER_BYTES)
                .take(room),
        );
        self.recycle.clear();
    }

    /// Send everything queued, under the wire lock (so drainers take turns and order holds).
    /// Returns true on `Stop`: the pump thread (`thread`) stops; the flush task puts `Stop`
    /// and what followed it back at the head of the queue for the pump thread.
    fn drain(
        &mut self,
        shared: &Shared,
        wire: &mut Wire,
        events: &mut Vec<PumpEvent>,
        thread: bool,
    ) -> bool {
        let stats = &shared.stats;
        // Kept across rounds: messages queued while a round was being sent join the batch.
        let mut batch = Batch::default();
        loop {
            // Swap in the (empty) deque of the last round, so neither side reallocates.
            let mut cmds = std::mem::take(&mut self.spare);
            std::mem::swap(&mut lock(&shared.queue).commands, &mut cmds);
            if cmds.is_empty() {
                self.spare = cmds;
                if let Some((to, frame)) = batch.take() {
                    wire.send_or_park(to, frame, stats, events);
                }
                return false;
            }
            let mut released = 0usize;
            while let Some(cmd) = cmds.pop_front() {
                match cmd {
                    Command::Send { to, msg } => {
                        if let Some((to, frame)) = batch.add(to, msg, &mut self.recycle) {
                            wire.send_or_park(to, frame, stats, events);
                        }
                    }
                    Command::SendFrame { to, frame } => {
                        if let Some((to, frame)) = batch.take() {
                            wire.send_or_park(to, frame, stats, events);
                        }
                        wire.send_or_park(to, frame, stats, events);
                    }
                    Command::Release(n) => released += n,
                    Command::Connect(ep) => {
                        if let Some((to, frame)) = batch.take() {
                            wire.send_or_park(to, frame, stats, events);
                        }
                        if let Some(socket) = &wire.socket
                            && let Err(e) = socket.connect(&ep)
                        {
                            tracing::warn!(endpoint = %ep, error = %e, "connect refused");
                        }
                    }
                    Command::Disconnect(ep) => {
                        if let Some((to, frame)) = batch.take() {
                            wire.send_or_park(to, frame, stats, events);
                        }
                        if let Some(socket) = &wire.socket {
                            let _ = socket.disconnect(&ep);
                        }
                    }
                    Command::Stop => {
                        if let Some((to, frame)) = batch.take() {
                            wire.send_or_park(to, frame, stats, events);
                        }
                        if !thread {
                            let mut q = lock(&shared.queue);
                            for c in cmds.drain(..).rev() {
                                q.commands.push_front(c);
                            }
                            q.commands.push_front(Command::Stop);
                            q.data_bytes = q.data_bytes.saturating_sub(released);
                            drop(q);
                            if released > 0 {
                                shared.room.notify_waiters();
                            }
                        }
                        return true;
                    }
                }
            }
            self.spare = cmds;
            self.give_back_buffers(shared);
            if released > 0 {
                let mut q = lock(&shared.queue);
                q.data_bytes = q.data_bytes.saturating_sub(released);
                drop(q);
                shared.room.notify_waiters();
            }
        }
    }
}

impl PumpThread {
    /// Stop monitoring before the socket closes, then close it. libzmq sends monitor events
    /// with a blocking send from its I/O and reaper threads; events of the closing socket sent
    /// to a monitor pipe whose reader is already gone would block those threads for good (and
    /// with them every socket of the context). Re-targeting the monitor at a fresh endpoint
    /// with no events stops the old one and sends nothing more.
    fn close(&mut self) {
        static OFF_SEQ: AtomicU64 = AtomicU64::new(0);
        let off = format!(
            "inproc://zlink-monitor-off-{}-{}",
            std::process::id(),
            OFF_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let socket = lock_wire(&self.shared).socket.take();
        if let Some(socket) = &socket {
            let _ = socket.monitor(&off, 0);
        }
        // Drain what the old monitor had queued; the reader closes after the socket.
        while self.monitor.recv_multipart(zmq::DONTWAIT).is_ok() {}
        drop(socket);
    }

    fn stop(&self) {
        self.shared.stopped.store(true, Ordering::Release);
        self.shared.room.notify_waiters();
        self.shared.flush.notify_one();
    }

    fn run(&mut self) {
        let mut backoff_ms: i64 = 1;
        let mut any_parked = false;
        loop {
            let timeout = if any_parked { backoff_ms } else { -1 };
            // About to sleep: a message may go straight to the socket.
            self.shared.asleep.store(true, Ordering::Release);
            let (mon_in, wake_in) = {
                let mut items = [
                    self.monitor.as_poll_item(zmq::POLLIN),
                    zmq::PollItem::from_fd(self.wake_rx.as_raw_fd(), zmq::POLLIN),
                ];
                if zmq::poll(&mut items, timeout).is_err() {
                    // EINTR: poll again.
                    continue;
                }
                (items[0].is_readable(), items[1].is_readable())
            };
            self.shared.asleep.store(false, Ordering::Release);
            self.shared.stats.wakeups.fetch_add(1, Ordering::Relaxed);
            let mut events = Vec::new();
            if wake_in {
                let mut buf = [0u8; 64];
                let _ = self.wake_rx.read(&mut buf);
            }
            // Clear before draining so a producer that pushes after the drain wakes us again. A
            // read-modify-write (not a plain store) so the clear is ordered with the producers'
            // `swap(true)` on the flag itself, independently of the queue lock that follows.
            self.shared.woken.swap(false, Ordering::AcqRel);
            // The monitor first, the socket after: a connection's pipe reaches the socket as a
            // command that only a call on the socket processes (and with it a ROUTER's probe
            // to the new peer goes out), posted just before its `HANDSHAKE_SUCCEEDED` event.
            // Reading the monitor after the socket could take that event (behind an earlier
            // one that woke us) and sleep with the command unprocessed, so the connection would
            // wait for the socket's reader — which may not be reading.
            if mon_in {
                self.read_monitor(&mut events);
            }
            {
                let shared = Arc::clone(&self.shared);
                let mut wire = lock_wire(&shared);
                if !wire.parked.is_empty() {
                    if wire.retry_parked(&shared.stats, &mut events) {
                        backoff_ms = 1;
                    } else {
                        backoff_ms = (backoff_ms * 2).min(10);
                    }
                }
                if self.drain_commands(&mut wire, &mut events) {
                    drop(wire);
                    self.stop();
                    return;
                }
                // The sends above may have consumed the `ZMQ_FD` signal of an arrival.
                let readable = wire.readable();
                any_parked = !wire.parked.is_empty();
                drop(wire);
                if readable {
                    shared.readable.notify_one();
                }
            }
            // Never while holding the wire: a full event channel must not block producers'
            // direct sends.
            if !events.is_empty() && self.tx.blocking_send(events).is_err() {
                // Receiver gone: the node is shutting down.
                self.stop();
                return;
            }
        }
    }

    /// Returns true on Stop.
    fn drain_commands(&mut self, wire: &mut Wire, events: &mut Vec<PumpEvent>) -> bool {
        let shared = Arc::clone(&self.shared);
        self.drainer.drain(&shared, wire, events, true)
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

/// The socket's `ZMQ_FD`, duplicated: registered with tokio's reactor, and closed (after it was
/// deregistered) when the [`Inbound`] goes, whenever libzmq closes its own.
struct SignalFd(std::os::fd::OwnedFd);

impl AsRawFd for SignalFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

/// The tokio side of a pump: the socket's inbound messages, read by the task that consumes
/// them (see the module docs), and the pump thread's own events.
pub struct Inbound {
    shared: Arc<Shared>,
    /// Monitor and unroutable events from the pump thread; closed when it stops.
    events: mpsc::Receiver<Vec<PumpEvent>>,
    /// The socket's `ZMQ_FD` (libzmq's), until `fd` is made on the first [`Inbound::recv`]
    /// (which runs inside a runtime, as registering needs).
    socket_fd: Option<std::os::fd::RawFd>,
    fd: Option<tokio::io::unix::AsyncFd<SignalFd>>,
    /// Records read per call at most.
    batch: usize,
    rx_msg: zmq::Message,
    rx_buf: BytesMut,
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound")
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

/// What one look at the socket found.
enum Look {
    /// Records (and whether more are waiting).
    Some(Vec<PumpEvent>, bool),
    /// Nothing waiting.
    Nothing,
}

impl Inbound {
    /// The next events: up to `batch` records read from the socket, or the pump thread's
    /// events (served first). `None` once the pump has stopped.
    ///
    /// Cancel-safe: the socket is read only in the poll that returns what it read.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled.
    pub async fn recv(&mut self) -> Option<Vec<PumpEvent>> {
        if self.fd.is_none() {
            self.fd = Some(self.register()?);
        }
        loop {
            let fd = self.fd.as_ref()?;
            tokio::select! {
                biased;
                events = self.events.recv() => return events,
                ready = fd.readable() => {
                    // An error means tokio's I/O driver is shutting down: so is the node.
                    let mut guard = ready.ok()?;
                    match Self::read(&self.shared, self.batch, &mut self.rx_msg, &mut self.rx_buf) {
                        Look::Some(events, more) => {
                            if !more {
                                guard.clear_ready();
                            }
                            return Some(events);
                        }
                        Look::Nothing => guard.clear_ready(),
                    }
                }
                () = self.shared.readable.notified() => {
                    if let Look::Some(events, more) =
                        Self::read(&self.shared, self.batch, &mut self.rx_msg, &mut self.rx_buf)
                    {
                        if more {
                            // The fd's readiness may never have been set (the signal was
                            // consumed elsewhere): the next call must look without it.
                            self.shared.readable.notify_one();
                        }
                        return Some(events);
                    }
                }
            }
        }
    }

    /// Registers a duplicate of the socket's `ZMQ_FD` with tokio. `None` when the pump has
    /// stopped (the socket is closed) or the fd cannot be duplicated or registered (logged).
    fn register(&mut self) -> Option<tokio::io::unix::AsyncFd<SignalFd>> {
        let raw = self.socket_fd.take()?;
        let wire = lock_wire(&self.shared);
        wire.socket.as_ref()?;
        // SAFETY: `raw` is the `ZMQ_FD` of the socket held in `wire`, which stays open at least
        // while the lock is held; it is only borrowed to duplicate it.
        #[allow(unsafe_code)]
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
        let owned = borrowed
            .try_clone_to_owned()
            .inspect_err(|e| tracing::error!(error = %e, "cannot duplicate the socket's ZMQ_FD: the node stops reading"))
            .ok()?;
        drop(wire);
        // SAFETY: `SignalFd` owns the duplicate, so it stays open and the same for the whole
        // life of the `AsyncFd`, which owns the `SignalFd`.
        #[allow(unsafe_code)]
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                SignalFd(owned),
                tokio::io::Interest::READABLE,
            )
        }
        .inspect_err(|e| tracing::error!(error = %e, "cannot register the socket's ZMQ_FD: the node stops reading"))
        .ok()?;
        // Whatever arrived before the registration: look once.
        self.shared.readable.notify_one();
        Some(fd)
    }

    /// Reads up to `batch` records from the socket.
    fn read(
        shared: &Shared,
        batch: usize,
        rx_msg: &mut zmq::Message,
        rx_buf: &mut BytesMut,
    ) -> Look {
        let wire = lock_wire(shared);
        let Some(socket) = &wire.socket else {
            return Look::Nothing;
        };
        let mut events = Vec::new();
        // Bounded by records handed up, not ZeroMQ messages: a batch holds up to 255 records.
        let mut records = 0;
        while records < batch {
            let Some(mut frames) = recv_message(socket, rx_msg, rx_buf) else {
                break;
            };
            if frames.is_empty() {
                continue;
            }
            let from = frames.remove(0);
            shared.stats.received.fetch_add(1, Ordering::Relaxed);
            if let [frame] = frames.as_slice()
                && let Ok(messages) = check_batch(frame)
            {
                records += messages;
                let frame = frame.clone();
                events.push(PumpEvent::Batch {
                    from,
                    frame,
                    messages,
                });
                continue;
            }
            // Anything else — a plain message, or a malformed batch, which the reactor counts
            // — is handed up whole.
            records += 1;
            events.push(PumpEvent::Message { from, frames });
        }
        // Also re-arms `ZMQ_FD` (see `Wire::readable`).
        let more = wire.readable();
        drop(wire);
        if events.is_empty() {
            shared.stats.idle_reads.fetch_add(1, Ordering::Relaxed);
            if more {
                // Readable, yet nothing came (a message still being assembled): look again.
                shared.readable.notify_one();
            }
            return Look::Nothing;
        }
        Look::Some(events, more)
    }
}

/// Receive one multipart message. Small frames (routing identities, single records) are
/// copied into the shared receive buffer — one allocation per 64 KiB of traffic, frames are
/// slices of it; a large frame (a batch) becomes `Bytes` that own the ZeroMQ message itself, so
/// it is never copied. `None` when nothing is waiting.
fn recv_message(
    socket: &zmq::Socket,
    rx_msg: &mut zmq::Message,
    rx_buf: &mut BytesMut,
) -> Option<Vec<Bytes>> {
    let mut frames = Vec::with_capacity(2);
    loop {
        let flags = if frames.is_empty() { zmq::DONTWAIT } else { 0 };
        if socket.recv(rx_msg, flags).is_err() {
            if frames.is_empty() {
                return None;
            }
            // A multipart message arrives whole; an error mid-way ends it here.
            break;
        }
        let more = rx_msg.get_more();
        if rx_msg.len() >= OWNED_FRAME_BYTES {
            let msg = std::mem::replace(rx_msg, zmq::Message::new());
            frames.push(Bytes::from_owner(ZmqFrame(msg)));
        } else {
            rx_buf.extend_from_slice(rx_msg);
            frames.push(rx_buf.split().freeze());
            if rx_buf.capacity() < RX_CHUNK / 4 {
                rx_buf.reserve(RX_CHUNK);
            }
        }
        if !more {
            break;
        }
    }
    Some(frames)
}
