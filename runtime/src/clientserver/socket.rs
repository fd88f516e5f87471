//! The socket thread of one ClientServer side (DESIGN "Transport is ZeroMQ").
//!
//! A ZeroMQ socket is not thread-safe, so one OS thread owns every socket of a side: the
//! server's single ROUTER, or the client's DEALERs (one per server connection, each with a
//! monitor socket so a dropped or re-established physical connection is observed). The thread
//! sleeps in `zmq::poll` on those sockets and on the read end of a wake-up pipe — no busy-spin:
//!
//! * **Outbound**: producers push [`SocketCmd`]s onto a mutex-guarded queue and write one byte
//!   to the pipe only if the thread has not been woken since it last drained it. The thread
//!   drains the whole queue per wake-up and sends with `DONTWAIT`. A full pipe (`EAGAIN`, the
//!   ZeroMQ high-water mark) parks the messages of *that peer* (one FIFO per ROUTER routing
//!   identity, one per DEALER) in order; other peers' messages keep going straight to their
//!   pipes, so one slow peer never blocks the others. Parked messages are retried on a short
//!   timer (1 ms doubling to 10 ms while nothing moves, like `transport/pump.rs`), never on
//!   `POLLOUT`: with `ROUTER_MANDATORY` a ROUTER is writable whenever *any* pipe has room,
//!   which would wake the thread in a busy loop while one peer stays full. Each peer's parked
//!   bytes are bounded (`park_cap_bytes`, one message of any size is always parked when its
//!   FIFO is empty); a peer whose FIFO would overflow has it dropped and is reported as
//!   [`SocketEvent::Overflow`] so the owner disconnects it. A ROUTER is `ROUTER_MANDATORY`: an
//!   unknown routing identity is reported as [`SocketEvent::Unroutable`], never dropped
//!   silently.
//!
//! This thread duplicates part of `transport/pump.rs` (poll loop, wake pipe, parking): the
//! pump is built around the mesh transport header and credit flow, which ClientServer does
//! not use. Left as is on purpose; a shared core is future work (review item 15).
//! * **Inbound**: up to `batch` messages per socket and wake-up are read and handed to tokio
//!   as one `Vec<SocketEvent>` on a bounded channel; when tokio falls behind the thread blocks
//!   there, the sockets stop being read and ZeroMQ's HWM and TCP push back on the senders.
//!
//! Every socket has `ZMQ_MAXMSGSIZE` set to its side's own complete-message limit, so libzmq
//! drops a connection that announces a larger frame instead of allocating it (wire §2).
//! DEALERs use `ZMQ_IMMEDIATE`, so libzmq queues nothing while no connection is up: a send
//! then fails with `EAGAIN` and the message is parked here. On a disconnect the parked
//! messages are dropped (their requests are failed by the owner) and anything still in the
//! dead connection's pipe is discarded by libzmq, so a message of one server lifecycle's
//! connection is not delivered on the next one's after a reconnect.
//! The price: when a DEALER's connection ends, libzmq also drops the messages it received on
//! it that were not read yet, so this thread reads a socket before its monitor (a reply that
//! arrived before a close is handed over before the disconnect), and a gracefully stopping
//! server waits briefly before closing.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::sync::mpsc;

/// A connection key: the client's DEALER id, or [`ROUTER_CONN`] for the server's ROUTER.
pub(crate) type ConnId = u64;

/// The key of the server's only socket.
pub(crate) const ROUTER_CONN: ConnId = 0;

/// Most frames of one ClientServer message (a record has at most 2, the envelope 2; one
/// spare), not counting the ROUTER's routing identity.
pub(crate) const MAX_FRAMES: usize = 3;

/// Work for the socket thread.
pub(crate) enum SocketCmd {
    /// Send one message. On the ROUTER, frame 0 is the routing identity. `data` is the number
    /// of bytes it holds against the data-queue cap (0 for control messages).
    Send {
        conn: ConnId,
        frames: Vec<Bytes>,
        data: usize,
    },
    /// Create a DEALER `conn` and connect it to `endpoint`.
    Open { conn: ConnId, endpoint: String },
    /// Close DEALER `conn` (its parked messages are dropped).
    Close { conn: ConnId },
    /// Stop the thread and close every socket (linger 0).
    Stop,
    /// Stop after one last attempt at the parked messages, closing every socket with this
    /// linger so replies already handed to libzmq still reach the wire (graceful shutdown).
    StopLinger(i32),
}

/// What the socket thread hands to tokio.
#[derive(Debug)]
pub(crate) enum SocketEvent {
    /// A message. On the ROUTER, frame 0 is the sender's routing identity.
    Message { conn: ConnId, frames: Vec<Bytes> },
    /// The ROUTER has no peer with this routing identity.
    Unroutable { to: Bytes },
    /// DEALER `conn` finished a ZMTP handshake (a new physical connection is up).
    Connected { conn: ConnId },
    /// DEALER `conn` lost its physical connection. Its parked messages were dropped (their
    /// bytes released); the owner fails what they carried.
    Disconnected { conn: ConnId },
    /// The parked messages for one peer (ROUTER: routing identity `to`; DEALER: `to` empty)
    /// passed `park_cap_bytes` and were dropped: the peer does not read.
    Overflow { to: Bytes },
    /// A message broke the frame-count cap or this side's byte limit while it was read; its
    /// frames were discarded. `kind` is the protocol error to count.
    Refused { kind: &'static str },
    /// A DEALER could not be created.
    OpenFailed { conn: ConnId, error: String },
}

/// Socket settings of one side.
#[derive(Debug, Clone)]
pub(crate) struct SocketConfig {
    pub hwm: i32,
    pub max_message_bytes: i64,
    pub batch: usize,
    pub inbound_batches: usize,
    pub reconnect_ivl_ms: i32,
    /// Bytes of application data that may wait in the queue and the parked FIFOs.
    pub queue_cap_bytes: usize,
    /// Bytes (all frames) that may be parked for one peer before it is given up.
    pub park_cap_bytes: usize,
}

/// Counters of a socket thread.
#[derive(Debug, Default)]
pub(crate) struct SocketStats {
    /// Returns from `zmq::poll` (a busy loop shows here).
    pub wakeups: AtomicU64,
    /// Times a peer's pipe was full and a message was parked.
    pub stalls: AtomicU64,
    /// Peers given up because their parked bytes passed the cap.
    pub overflows: AtomicU64,
}

struct Shared {
    queue: Mutex<VecDeque<SocketCmd>>,
    woken: AtomicBool,
    wake_tx: Mutex<std::io::PipeWriter>,
    stopped: AtomicBool,
    /// Application data bytes queued or parked, not yet written to a socket.
    data_bytes: AtomicUsize,
    cap: usize,
    stats: SocketStats,
}

/// The producer side. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SocketHandle {
    shared: Arc<Shared>,
}

/// The running thread.
pub(crate) struct SocketThread {
    handle: SocketHandle,
    thread: Option<JoinHandle<()>>,
}

/// The socket thread is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stopped;

/// Why application data was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataRefused {
    /// The socket thread is gone.
    Stopped,
    /// The data cap is reached (the peer or the network does not keep up).
    Full { queued: usize, cap: usize },
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SocketHandle {
    /// Counters of the thread.
    pub(crate) fn stats(&self) -> &SocketStats {
        &self.shared.stats
    }

    /// Queue a command and wake the thread.
    pub(crate) fn push(&self, cmd: SocketCmd) -> Result<(), Stopped> {
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(Stopped);
        }
        lock(&self.shared.queue).push_back(cmd);
        if !self.shared.woken.swap(true, Ordering::AcqRel) {
            // At most one unread byte is ever in the pipe (guarded by `woken`): cannot block.
            let _ = lock(&self.shared.wake_tx).write_all(&[1]);
        }
        Ok(())
    }

    /// Queue one control message (admission, liveness, update, reply). Never refused for
    /// room: control traffic is bounded by the protocol (one answer per inbound record, one
    /// probe per interval, one reply per accepted request).
    pub(crate) fn send(&self, conn: ConnId, frames: Vec<Bytes>) -> Result<(), Stopped> {
        self.push(SocketCmd::Send {
            conn,
            frames,
            data: 0,
        })
    }

    /// Queue one application message, unless the data cap is reached. A message larger than
    /// the cap is accepted when nothing else waits, so any admitted size can be sent.
    pub(crate) fn send_data(&self, conn: ConnId, frames: Vec<Bytes>) -> Result<(), DataRefused> {
        let size: usize = frames.iter().map(Bytes::len).sum();
        let queued = self.shared.data_bytes.load(Ordering::Acquire);
        if queued > 0 && queued.saturating_add(size) > self.shared.cap {
            return Err(DataRefused::Full {
                queued,
                cap: self.shared.cap,
            });
        }
        self.shared.data_bytes.fetch_add(size, Ordering::AcqRel);
        self.push(SocketCmd::Send {
            conn,
            frames,
            data: size,
        })
        .map_err(|Stopped| {
            self.shared.data_bytes.fetch_sub(size, Ordering::AcqRel);
            DataRefused::Stopped
        })
    }
}

/// Messages parked for one peer, with their data bytes, and the bytes of all their frames.
#[derive(Default)]
struct Parked {
    msgs: VecDeque<(Vec<Bytes>, usize)>,
    bytes: usize,
}

impl Parked {
    fn data(&self) -> usize {
        self.msgs.iter().map(|(_, d)| d).sum()
    }
}

struct Entry {
    conn: ConnId,
    socket: zmq::Socket,
    monitor: Option<zmq::Socket>,
    /// Messages waiting for room in a peer's pipe, per peer key (routing identity on the
    /// ROUTER, empty on a DEALER).
    parked: HashMap<Bytes, Parked>,
}

impl Entry {
    fn is_router(&self) -> bool {
        self.conn == ROUTER_CONN && self.monitor.is_none()
    }

    /// The peer a message goes to.
    fn key(&self, frames: &[Bytes]) -> Bytes {
        if self.is_router() {
            frames.first().cloned().unwrap_or_default()
        } else {
            Bytes::new()
        }
    }

    fn parked_data(&self) -> usize {
        self.parked.values().map(Parked::data).sum()
    }
}

static MONITOR_OFF_SEQ: AtomicU64 = AtomicU64::new(0);

impl Drop for Entry {
    /// Stop the monitor before the socket closes. libzmq writes monitor events with a
    /// *blocking* send on its internal PAIR: an event of the closing socket (a disconnect)
    /// sent after our reader closed would block libzmq's I/O thread — and with it every
    /// socket of the process context. Re-pointing the monitor to an unused address with no
    /// events stops the old one; what it had queued is drained, then the socket closes
    /// (field order) before the reader.
    fn drop(&mut self) {
        if let Some(monitor) = &self.monitor {
            let off = format!(
                "inproc://zlink-cs-monitor-off-{}-{}",
                std::process::id(),
                MONITOR_OFF_SEQ.fetch_add(1, Ordering::Relaxed)
            );
            let _ = self.socket.monitor(&off, 0);
            while monitor.recv_multipart(zmq::DONTWAIT).is_ok() {}
        }
    }
}

fn zmq_err(op: &str) -> impl FnOnce(zmq::Error) -> String + '_ {
    move |e| format!("zeromq {op}: {e}")
}

fn apply_common(socket: &zmq::Socket, cfg: &SocketConfig) -> Result<(), String> {
    socket.set_sndhwm(cfg.hwm).map_err(zmq_err("sndhwm"))?;
    socket.set_rcvhwm(cfg.hwm).map_err(zmq_err("rcvhwm"))?;
    socket.set_linger(0).map_err(zmq_err("linger"))?;
    socket
        .set_maxmsgsize(cfg.max_message_bytes)
        .map_err(zmq_err("maxmsgsize"))?;
    socket
        .set_reconnect_ivl(cfg.reconnect_ivl_ms)
        .map_err(zmq_err("reconnect ivl"))?;
    socket
        .set_reconnect_ivl_max(cfg.reconnect_ivl_ms.saturating_mul(10))
        .map_err(zmq_err("reconnect ivl max"))
}

static MONITOR_SEQ: AtomicU64 = AtomicU64::new(0);

impl SocketThread {
    /// Bind a ROUTER to `bind` and start its thread. Returns the bound endpoint.
    pub(crate) fn start_router(
        ctx: &zmq::Context,
        bind: &str,
        cfg: &SocketConfig,
    ) -> Result<(Self, String, mpsc::Receiver<Vec<SocketEvent>>), String> {
        let socket = ctx.socket(zmq::ROUTER).map_err(zmq_err("socket"))?;
        apply_common(&socket, cfg)?;
        socket
            .set_router_mandatory(true)
            .map_err(zmq_err("router mandatory"))?;
        socket.bind(bind).map_err(zmq_err("bind"))?;
        let endpoint = socket
            .get_last_endpoint()
            .map_err(zmq_err("last endpoint"))?
            .map_err(|_| "bound endpoint unreadable".to_owned())?;
        let entry = Entry {
            conn: ROUTER_CONN,
            socket,
            monitor: None,
            parked: HashMap::new(),
        };
        let (t, rx) = Self::spawn(ctx.clone(), cfg.clone(), vec![entry])?;
        Ok((t, endpoint, rx))
    }

    /// Start a thread for DEALERs (created later with [`SocketCmd::Open`]).
    pub(crate) fn start_dealers(
        ctx: &zmq::Context,
        cfg: &SocketConfig,
    ) -> Result<(Self, mpsc::Receiver<Vec<SocketEvent>>), String> {
        Self::spawn(ctx.clone(), cfg.clone(), Vec::new())
    }

    fn spawn(
        ctx: zmq::Context,
        cfg: SocketConfig,
        entries: Vec<Entry>,
    ) -> Result<(Self, mpsc::Receiver<Vec<SocketEvent>>), String> {
        let (wake_rx, wake_tx) = std::io::pipe().map_err(|e| format!("wake-up pipe: {e}"))?;
        let (tx, rx) = mpsc::channel(cfg.inbound_batches.max(1));
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            woken: AtomicBool::new(false),
            wake_tx: Mutex::new(wake_tx),
            stopped: AtomicBool::new(false),
            data_bytes: AtomicUsize::new(0),
            cap: cfg.queue_cap_bytes.max(1),
            stats: SocketStats::default(),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("zlink-cs-socket".into())
            .spawn(move || {
                let mut t = Worker {
                    ctx,
                    cfg,
                    entries,
                    wake_rx,
                    shared: thread_shared,
                    tx,
                };
                t.run();
                t.shared.stopped.store(true, Ordering::Release);
            })
            .map_err(|e| format!("socket thread: {e}"))?;
        Ok((
            Self {
                handle: SocketHandle { shared },
                thread: Some(thread),
            },
            rx,
        ))
    }

    /// A producer handle.
    pub(crate) fn handle(&self) -> SocketHandle {
        self.handle.clone()
    }

    /// Stop the thread and wait for it. The inbound receiver must be drained or dropped.
    pub(crate) fn stop(&mut self) {
        let _ = self.handle.push(SocketCmd::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stop after the queued commands, closing the sockets with `linger` so what was sent
    /// still leaves (a graceful stop).
    pub(crate) fn stop_lingering(&mut self, linger: std::time::Duration) {
        let ms = i32::try_from(linger.as_millis()).unwrap_or(i32::MAX);
        let _ = self.handle.push(SocketCmd::StopLinger(ms));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SocketThread {
    fn drop(&mut self) {
        if self.thread.take().is_some() {
            let _ = self.handle.push(SocketCmd::Stop);
        }
    }
}

struct Worker {
    ctx: zmq::Context,
    cfg: SocketConfig,
    entries: Vec<Entry>,
    wake_rx: std::io::PipeReader,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Vec<SocketEvent>>,
}

enum SendOutcome {
    Sent,
    Full,
    Unroutable,
    Failed,
}

fn send_now(socket: &zmq::Socket, frames: &[Bytes]) -> SendOutcome {
    let last = frames.len().saturating_sub(1);
    for (i, f) in frames.iter().enumerate() {
        let flags = zmq::DONTWAIT | if i < last { zmq::SNDMORE } else { 0 };
        match socket.send(&f[..], flags) {
            Ok(()) => {}
            // Only the first part can be refused: libzmq accepts the rest of a multipart
            // message atomically once its first part is queued.
            Err(zmq::Error::EAGAIN) if i == 0 => return SendOutcome::Full,
            Err(zmq::Error::EHOSTUNREACH) if i == 0 => return SendOutcome::Unroutable,
            Err(_) => return SendOutcome::Failed,
        }
    }
    SendOutcome::Sent
}

impl Worker {
    fn run(&mut self) {
        let mut backoff_ms: i64 = 1;
        loop {
            let any_parked = self.entries.iter().any(|e| !e.parked.is_empty());
            let timeout = if any_parked { backoff_ms } else { -1 };
            let (readable, monitor_readable, wake) = {
                let mut items = Vec::with_capacity(self.entries.len() * 2 + 1);
                for e in &self.entries {
                    items.push(e.socket.as_poll_item(zmq::POLLIN));
                }
                for e in &self.entries {
                    match &e.monitor {
                        Some(m) => items.push(m.as_poll_item(zmq::POLLIN)),
                        None => items.push(e.socket.as_poll_item(zmq::PollEvents::empty())),
                    }
                }
                items.push(zmq::PollItem::from_fd(
                    self.wake_rx.as_raw_fd(),
                    zmq::POLLIN,
                ));
                if zmq::poll(&mut items, timeout).is_err() {
                    continue; // EINTR
                }
                let n = self.entries.len();
                let readable: Vec<bool> =
                    items[..n].iter().map(zmq::PollItem::is_readable).collect();
                let monitor: Vec<bool> = items[n..2 * n]
                    .iter()
                    .map(zmq::PollItem::is_readable)
                    .collect();
                (readable, monitor, items[2 * n].is_readable())
            };
            self.shared.stats.wakeups.fetch_add(1, Ordering::Relaxed);
            let mut events = Vec::new();
            if wake {
                let mut buf = [0u8; 16];
                let _ = self.wake_rx.read(&mut buf);
            }
            // Clear before draining so a push after the drain wakes us again.
            self.shared.woken.store(false, Ordering::Release);
            if any_parked {
                let mut moved = false;
                for i in 0..self.entries.len() {
                    moved |= self.flush_parked(i, &mut events);
                }
                backoff_ms = if moved { 1 } else { (backoff_ms * 2).min(10) };
            }
            for i in 0..readable.len() {
                // Messages first: a reply that arrived before the peer closed is handed over
                // before the disconnect that would fail its request.
                if readable[i] || monitor_readable[i] {
                    self.read_socket(i, &mut events);
                }
                if monitor_readable[i] {
                    self.read_monitor(i, &mut events);
                }
            }
            let commands: Vec<SocketCmd> = lock(&self.shared.queue).drain(..).collect();
            for cmd in commands {
                match cmd {
                    SocketCmd::Send { conn, frames, data } => {
                        self.send(conn, frames, data, &mut events);
                    }
                    SocketCmd::Open { conn, endpoint } => {
                        if let Err(error) = self.open(conn, &endpoint) {
                            events.push(SocketEvent::OpenFailed { conn, error });
                        }
                    }
                    SocketCmd::Close { conn } => {
                        let mut released = 0;
                        self.entries.retain(|e| {
                            if e.conn == conn {
                                released += e.parked_data();
                            }
                            e.conn != conn
                        });
                        self.release(released);
                    }
                    SocketCmd::Stop => {
                        self.entries.clear();
                        return;
                    }
                    SocketCmd::StopLinger(linger_ms) => {
                        for i in 0..self.entries.len() {
                            self.flush_parked(i, &mut events);
                            let _ = self.entries[i].socket.set_linger(linger_ms);
                        }
                        self.entries.clear();
                        return;
                    }
                }
            }
            if !events.is_empty() && self.tx.blocking_send(events).is_err() {
                // Nobody listens any more.
                self.entries.clear();
                return;
            }
        }
    }

    fn open(&mut self, conn: ConnId, endpoint: &str) -> Result<(), String> {
        let socket = self.ctx.socket(zmq::DEALER).map_err(zmq_err("socket"))?;
        apply_common(&socket, &self.cfg)?;
        socket.set_immediate(true).map_err(zmq_err("immediate"))?;
        let addr = format!(
            "inproc://zlink-cs-monitor-{}-{}",
            std::process::id(),
            MONITOR_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let events = zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw()
            | zmq::SocketEvent::DISCONNECTED.to_raw();
        socket
            .monitor(&addr, i32::from(events))
            .map_err(zmq_err("monitor"))?;
        let monitor = self
            .ctx
            .socket(zmq::PAIR)
            .map_err(zmq_err("monitor socket"))?;
        monitor.connect(&addr).map_err(zmq_err("monitor connect"))?;
        socket.connect(endpoint).map_err(zmq_err("connect"))?;
        self.entries.push(Entry {
            conn,
            socket,
            monitor: Some(monitor),
            parked: HashMap::new(),
        });
        Ok(())
    }

    fn release(&self, data: usize) {
        if data > 0 {
            self.shared.data_bytes.fetch_sub(data, Ordering::AcqRel);
        }
    }

    fn send(
        &mut self,
        conn: ConnId,
        frames: Vec<Bytes>,
        data: usize,
        events: &mut Vec<SocketEvent>,
    ) {
        let Some(i) = self.entries.iter().position(|e| e.conn == conn) else {
            // Closed meanwhile: the owner already treats the connection as gone.
            self.release(data);
            return;
        };
        let key = self.entries[i].key(&frames);
        if self.entries[i].parked.contains_key(&key) {
            self.park(i, key, frames, data, events);
            return;
        }
        let outcome = send_now(&self.entries[i].socket, &frames);
        if !matches!(outcome, SendOutcome::Full) {
            self.release(data);
        }
        match outcome {
            SendOutcome::Sent | SendOutcome::Failed => {}
            SendOutcome::Full => {
                self.shared.stats.stalls.fetch_add(1, Ordering::Relaxed);
                self.park(i, key, frames, data, events);
            }
            SendOutcome::Unroutable => {
                if let Some(to) = frames.into_iter().next() {
                    events.push(SocketEvent::Unroutable { to });
                }
            }
        }
    }

    /// Append to a peer's FIFO, or give the peer up when that passes its cap (a message of
    /// any size is parked when the FIFO is empty).
    fn park(
        &mut self,
        i: usize,
        key: Bytes,
        frames: Vec<Bytes>,
        data: usize,
        events: &mut Vec<SocketEvent>,
    ) {
        let size: usize = frames.iter().map(Bytes::len).sum();
        let cap = self.cfg.park_cap_bytes;
        let e = &mut self.entries[i];
        let q = e.parked.entry(key.clone()).or_default();
        if !q.msgs.is_empty() && q.bytes.saturating_add(size) > cap {
            let released = q.data() + data;
            e.parked.remove(&key);
            self.release(released);
            self.shared.stats.overflows.fetch_add(1, Ordering::Relaxed);
            events.push(SocketEvent::Overflow { to: key });
            return;
        }
        q.bytes += size;
        q.msgs.push_back((frames, data));
    }

    /// Retry every parked peer of entry `i` in FIFO order; a peer still full keeps the rest
    /// of its FIFO and does not hold up the next peer. Returns whether anything was sent.
    fn flush_parked(&mut self, i: usize, events: &mut Vec<SocketEvent>) -> bool {
        let mut released = 0;
        let mut moved = false;
        let e = &mut self.entries[i];
        let keys: Vec<Bytes> = e.parked.keys().cloned().collect();
        for key in keys {
            let Some(q) = e.parked.get_mut(&key) else {
                continue;
            };
            let mut gone = false;
            while let Some((frames, data)) = q.msgs.pop_front() {
                let outcome = send_now(&e.socket, &frames);
                if matches!(outcome, SendOutcome::Full) {
                    q.msgs.push_front((frames, data));
                    break;
                }
                released += data;
                q.bytes = q
                    .bytes
                    .saturating_sub(frames.iter().map(Bytes::len).sum::<usize>());
                match outcome {
                    SendOutcome::Sent => moved = true,
                    SendOutcome::Failed | SendOutcome::Full => {}
                    SendOutcome::Unroutable => {
                        // The peer is gone: the rest of its FIFO cannot be delivered either.
                        released += q.data();
                        q.msgs.clear();
                        gone = true;
                        events.push(SocketEvent::Unroutable { to: key.clone() });
                    }
                }
            }
            if gone || q.msgs.is_empty() {
                e.parked.remove(&key);
            }
        }
        self.release(released);
        moved
    }

    /// Read up to `batch` messages frame by frame (review item 11): at most
    /// [`MAX_FRAMES`] frames after the ROUTER's routing identity, and a running byte total
    /// against this side's own limit (the owner checks the smaller admitted limit before
    /// parsing). The rest of a message that breaks either is read and discarded, never
    /// accumulated, and reported as [`SocketEvent::Refused`].
    fn read_socket(&mut self, i: usize, events: &mut Vec<SocketEvent>) {
        let e = &self.entries[i];
        let max_frames = MAX_FRAMES + usize::from(e.is_router());
        let limit = u64::try_from(self.cfg.max_message_bytes).unwrap_or(u64::MAX);
        for _ in 0..self.cfg.batch.max(1) {
            let Ok(first) = e.socket.recv_bytes(zmq::DONTWAIT) else {
                return;
            };
            let mut frames = vec![Bytes::from(first)];
            let mut total: u64 = 0;
            let mut refused: Option<&'static str> = None;
            while e.socket.get_rcvmore().unwrap_or(false) {
                // The rest of a multipart message is already here (atomic delivery).
                let Ok(part) = e.socket.recv_bytes(0) else {
                    break;
                };
                if refused.is_some() {
                    continue;
                }
                if frames.len() >= max_frames {
                    refused = Some("WrongFrameCount");
                    frames.clear();
                    continue;
                }
                total = total.saturating_add(part.len() as u64);
                if total > limit {
                    refused = Some("MessageTooLarge");
                    frames.clear();
                    continue;
                }
                frames.push(Bytes::from(part));
            }
            if !e.is_router() {
                // A DEALER's first frame is the record's own first frame.
                total = total.saturating_add(frames.first().map_or(0, |f| f.len() as u64));
                if refused.is_none() && total > limit {
                    refused = Some("MessageTooLarge");
                }
            }
            match refused {
                Some(kind) => events.push(SocketEvent::Refused { kind }),
                None => events.push(SocketEvent::Message {
                    conn: e.conn,
                    frames,
                }),
            }
        }
    }

    fn read_monitor(&mut self, i: usize, events: &mut Vec<SocketEvent>) {
        let mut released = 0;
        let e = &mut self.entries[i];
        let Some(monitor) = &e.monitor else { return };
        while let Ok(parts) = monitor.recv_multipart(zmq::DONTWAIT) {
            let Some(raw) = parts.first().and_then(|h| h.get(0..2)) else {
                continue;
            };
            let id = u16::from_le_bytes([raw[0], raw[1]]);
            if id == zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw() {
                events.push(SocketEvent::Connected { conn: e.conn });
            } else if id == zmq::SocketEvent::DISCONNECTED.to_raw() {
                // What was parked belonged to requests the owner now fails (review item 4):
                // drop it and give its bytes back to the data cap.
                released += e.parked_data();
                e.parked.clear();
                events.push(SocketEvent::Disconnected { conn: e.conn });
            }
        }
        self.release(released);
    }
}
