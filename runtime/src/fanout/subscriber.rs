//! The classic fanout subscriber (wire §5 "Subscriber ready 판정"; glossary §6 "Automatic
//! discovery", "Manual endpoint", "Ready target"; §7 "Liveness와 liveness beacon").
//!
//! Tasks of a running subscriber:
//!
//! * the **socket thread** owns one ZeroMQ `SUB` socket *per publisher* (wire §5) and sleeps in
//!   `zmq::poll` on all of them plus a wake-up pipe, with a timeout equal to the nearest
//!   not-ready deadline. Per wake-up it reads up to `batch` records per socket and decodes each
//!   ([`super::record::decode`]): a valid beacon or application record feeds that publisher's
//!   [`PublisherLiveness`]; a malformed record is counted by kind and dropped — it never
//!   reaches a handler and never makes a publisher ready or refreshes it. Valid application
//!   records go to tokio as one `Vec` per wake-up on a bounded channel, offered with
//!   `try_send`: when the handlers are behind and the channel is full, the thread keeps that
//!   batch, stops reading the SUB sockets (so ZeroMQ buffers up to `recv_hwm` and then the
//!   publisher drops — PUB/SUB has no backpressure across the wire) and still runs commands and
//!   the readiness deadlines; the dispatcher wakes it when it takes a batch. A slow handler
//!   therefore never freezes readiness, and while records wait unread a publisher turns
//!   not-ready on time — the subscriber is not receiving from it.
//! * the **dispatcher** task runs the handler of each record's (topic, packet name), one record
//!   at a time, so events of one publisher reach handlers in publish order.
//! * with a store, the **discovery** task polls the publisher descriptors of the ChannelName and
//!   [`reconcile`]s them into socket changes: a vanished descriptor closes its socket, a new
//!   lifecycle generation for the same RID replaces the old socket.
//!
//! Each socket subscribes to the handlers' wire topics and to the beacon topic. ZeroMQ
//! matches subscriptions by prefix, so a socket may receive records on longer topics; those are
//! counted as `no_handler` (handlers match the topic exactly), and a beacon is recognised by
//! exact frame-0 equality whichever subscription let it through.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use zlink_protocol::fanout::BEACON_TOPIC;

use super::config::SubscriberConfig;
use super::descriptor::{
    Change, Desired, DiscoveredPublisher, desired_publishers, list_publishers, reconcile,
};
use super::error::{FanoutError, zerr};
use super::handler::{FanoutContext, FanoutHandlers, HandlerFailure, HandlerTable, PublisherRef};
use super::readiness::{PublisherLiveness, Transition};
use super::record::{ApplicationRecord, Received, decode};
use crate::mesh::discovery::DiscoveryBackend;

/// Counters of one subscriber.
#[derive(Debug, Default)]
pub struct SubscriberMetrics {
    /// Valid beacons received.
    pub beacons_received: AtomicU64,
    /// Valid application records received.
    pub records_received: AtomicU64,
    /// Records whose application handler ran (successfully or not).
    pub delivered: AtomicU64,
    /// Valid records with no handler for their (topic, packet name).
    pub no_handler: AtomicU64,
    /// Records whose payload did not decode as the handler's type (the handler never ran).
    pub undecodable: AtomicU64,
    /// Handler runs that returned an error.
    pub handler_failures: AtomicU64,
    /// Handler runs that panicked.
    pub handler_panics: AtomicU64,
    /// NotReady → Ready transitions, all publishers.
    pub became_ready: AtomicU64,
    /// Ready → NotReady transitions, all publishers.
    pub became_not_ready: AtomicU64,
    /// Store descriptors refused as unusable (counted per discovery poll).
    pub descriptor_errors: AtomicU64,
    /// Discovered publishers skipped (per poll) because their endpoint already has a socket:
    /// a manual endpoint, or another discovered publisher with a lower RID.
    pub duplicate_endpoints: AtomicU64,
    /// Discovery polls that failed (the last publisher set is kept).
    pub discovery_failures: AtomicU64,
    /// SUB sockets that could not be set up.
    pub socket_errors: AtomicU64,
    /// Times the socket thread found the dispatcher's channel full (handlers behind) and
    /// stopped reading the SUB sockets until it had room.
    pub inbound_stalls: AtomicU64,
    /// `zmq::poll` calls of the socket thread that failed (other than `EINTR`).
    pub poll_failures: AtomicU64,
    /// Shutdowns whose handlers did not finish within `shutdown_drain` and were cancelled.
    pub shutdown_cancelled: AtomicU64,
    protocol_errors: Mutex<BTreeMap<&'static str, u64>>,
}

impl SubscriberMetrics {
    fn protocol_error(&self, kind: &'static str) {
        *lock(&self.protocol_errors).entry(kind).or_insert(0) += 1;
    }

    /// Protocol errors counted by kind (`ProtocolError::kind()` names, e.g. `MalformedBeacon`,
    /// `WrongFrameCount`, `Incomplete`).
    pub fn protocol_errors(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.protocol_errors).clone()
    }

    /// All protocol errors.
    pub fn protocol_error_total(&self) -> u64 {
        lock(&self.protocol_errors).values().sum()
    }
}

/// How a publisher became known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublisherSource {
    /// A configured manual endpoint.
    Manual,
    /// A descriptor in the Location Store.
    Discovered,
}

/// What a subscriber knows about one publisher (one SUB socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherSnapshot {
    /// Identity of this socket within the subscriber (a replaced lifecycle gets a new one).
    pub id: u64,
    /// RID, lifecycle generation and endpoint.
    pub publisher: Arc<PublisherRef>,
    /// How it became known.
    pub source: PublisherSource,
    /// Whether the publisher is a ready target (wire §5).
    pub ready: bool,
    /// The last valid beacon or application record.
    pub last_valid_receive: Option<Instant>,
    /// NotReady → Ready transitions of this publisher (this socket).
    pub became_ready: u64,
    /// Ready → NotReady transitions of this publisher (this socket).
    pub became_not_ready: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single update: a panic cannot leave it half-done.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

enum Command {
    Add {
        id: u64,
        publisher: Arc<PublisherRef>,
    },
    Remove {
        id: u64,
    },
    Stop,
}

// The command queue + `woken` flag + wake-up pipe repeat the pattern of the mesh socket pump
// (`transport/pump.rs`); see the note in `publisher.rs` on why it is not shared yet.
struct Shared {
    commands: Mutex<VecDeque<Command>>,
    woken: AtomicBool,
    wake_tx: Mutex<std::io::PipeWriter>,
    /// A second handle on the pipe's read end, held as long as `Shared`, so a late command (a
    /// discovery task that was aborted mid-poll, a drop racing the thread's exit) never writes
    /// into a pipe without a reader (`EPIPE` / `SIGPIPE`). `woken` keeps it at one unread byte.
    _wake_rx_keepalive: std::io::PipeReader,
    view: Mutex<BTreeMap<u64, PublisherSnapshot>>,
    changed: watch::Sender<u64>,
    metrics: SubscriberMetrics,
    next_id: AtomicU64,
    /// Set by the socket thread before it offers a batch; the dispatcher clears it after each
    /// receive and wakes the thread when it was set, so a stalled thread retries at once.
    stalled: AtomicBool,
}

impl Shared {
    fn command(&self, c: Command) {
        lock(&self.commands).push_back(c);
        self.wake();
    }

    fn wake(&self) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            let _ = lock(&self.wake_tx).write_all(&[1]);
        }
    }

    /// Show the publisher (not ready) at once and have the socket thread open its socket.
    fn add(&self, publisher: Arc<PublisherRef>, source: PublisherSource) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.view).insert(
            id,
            PublisherSnapshot {
                id,
                publisher: Arc::clone(&publisher),
                source,
                ready: false,
                last_valid_receive: None,
                became_ready: 0,
                became_not_ready: 0,
            },
        );
        self.command(Command::Add { id, publisher });
        self.changed();
        id
    }

    fn changed(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }
}

/// One valid application record on its way to a handler.
struct Delivery {
    publisher: Arc<PublisherRef>,
    record: ApplicationRecord,
}

/// What the socket thread leaves behind: a batch it read but could not hand over yet, and the
/// channel's sender, so `shutdown` can still hand it to the dispatcher.
type ThreadExit = (Option<Vec<Delivery>>, mpsc::Sender<Vec<Delivery>>);

/// A running classic fanout subscriber.
pub struct Subscriber {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<ThreadExit>>>,
    dispatcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    discovery: Mutex<Option<tokio::task::JoinHandle<()>>>,
    shutdown_drain: Duration,
    shut: AtomicBool,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber").finish_non_exhaustive()
    }
}

impl Subscriber {
    /// Start the socket thread and the dispatcher, connect the manual endpoints, and with a
    /// store start discovery. Call it from within a tokio runtime (it spawns the dispatcher and
    /// discovery tasks there).
    ///
    /// # Errors
    /// [`FanoutError`] for bad configuration, a bad handler topic or a duplicate handler;
    /// [`FanoutError::NoRuntime`] outside a tokio runtime (checked before anything starts).
    pub fn start(
        config: SubscriberConfig,
        handlers: FanoutHandlers,
        store: Option<Arc<dyn DiscoveryBackend>>,
    ) -> Result<Self, FanoutError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| FanoutError::NoRuntime)?;
        config.validate()?;
        let mut topics: Vec<Vec<u8>> = handlers.topics().map(<[u8]>::to_vec).collect();
        topics.sort();
        let table = handlers.build()?;
        let (wake_rx, wake_tx) = std::io::pipe().map_err(|source| FanoutError::Io {
            op: "wake-up pipe",
            source,
        })?;
        let wake_rx_keepalive = wake_rx.try_clone().map_err(|source| FanoutError::Io {
            op: "wake-up pipe",
            source,
        })?;
        let shared = Arc::new(Shared {
            commands: Mutex::new(VecDeque::new()),
            woken: AtomicBool::new(false),
            wake_tx: Mutex::new(wake_tx),
            _wake_rx_keepalive: wake_rx_keepalive,
            view: Mutex::new(BTreeMap::new()),
            changed: watch::channel(0).0,
            metrics: SubscriberMetrics::default(),
            next_id: AtomicU64::new(1),
            stalled: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel(config.inbound_batches);
        let thread = {
            let shared = Arc::clone(&shared);
            let socket_config = SocketThread {
                ctx: crate::mesh::node::process_context(),
                topics,
                recv_hwm: config.recv_hwm,
                max_message_bytes: config.max_message_bytes,
                reconnect_ivl: i32::try_from(config.reconnect_ivl.as_millis()).unwrap_or(i32::MAX),
                batch: config.batch,
                not_ready_after: config.not_ready_after,
            };
            std::thread::Builder::new()
                .name("zlink-fanout-sub".into())
                .spawn(move || {
                    let pending = socket_config.run(&shared, wake_rx, &tx);
                    (pending, tx)
                })
                .map_err(|source| FanoutError::Io {
                    op: "socket thread",
                    source,
                })?
        };
        for endpoint in &config.manual_endpoints {
            shared.add(
                Arc::new(PublisherRef {
                    rid: None,
                    lifecycle_generation: None,
                    endpoint: endpoint.clone(),
                }),
                PublisherSource::Manual,
            );
        }
        let dispatcher = runtime.spawn(dispatch(rx, table, Arc::clone(&shared)));
        let discovery = store.map(|store| {
            runtime.spawn(discover(
                store,
                config.channel_name.clone(),
                config.manual_endpoints.clone(),
                config.discovery_poll,
                Arc::clone(&shared),
            ))
        });
        Ok(Self {
            shared,
            thread: Mutex::new(Some(thread)),
            dispatcher: Mutex::new(Some(dispatcher)),
            discovery: Mutex::new(discovery),
            shutdown_drain: config.shutdown_drain,
            shut: AtomicBool::new(false),
        })
    }

    /// Every publisher this subscriber holds a socket for, by socket id.
    pub fn publishers(&self) -> Vec<PublisherSnapshot> {
        lock(&self.shared.view).values().cloned().collect()
    }

    /// A receiver that changes whenever a publisher is added, removed, or changes readiness.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    /// Wait until `condition` holds for the publisher set, re-checking on every change;
    /// `None` after `timeout`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        condition: impl Fn(&[PublisherSnapshot]) -> bool,
    ) -> Option<Vec<PublisherSnapshot>> {
        let mut rx = self.changes();
        tokio::time::timeout(timeout, async {
            loop {
                rx.borrow_and_update();
                let now = self.publishers();
                if condition(&now) {
                    return now;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
        .await
        .ok()
    }

    /// Wait until exactly `n` publishers are known and all of them are ready.
    pub async fn wait_all_ready(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Option<Vec<PublisherSnapshot>> {
        self.wait_until(timeout, |p| p.len() == n && p.iter().all(|p| p.ready))
            .await
    }

    /// The counters.
    pub fn metrics(&self) -> &SubscriberMetrics {
        &self.shared.metrics
    }

    /// Graceful shutdown: stop discovery, close every SUB socket (nothing more is read), then
    /// **drain**: every record already read — queued for the dispatcher or held by the socket
    /// thread — still reaches its handler, for up to `shutdown_drain` in all. Handlers still
    /// running after that are cancelled (dropped at their next `.await`) and counted in
    /// `shutdown_cancelled`.
    pub async fn shutdown(&self) {
        if self.shut.swap(true, Ordering::AcqRel) {
            return;
        }
        let deadline = tokio::time::Instant::now() + self.shutdown_drain;
        let discovery = lock(&self.discovery).take();
        if let Some(t) = discovery {
            t.abort();
            let _ = t.await;
        }
        self.shared.command(Command::Stop);
        let thread = lock(&self.thread).take();
        if let Some(t) = thread
            && let Ok(Ok((pending, tx))) = tokio::task::spawn_blocking(move || t.join()).await
        {
            if let Some(batch) = pending {
                let _ = tokio::time::timeout_at(deadline, tx.send(batch)).await;
            }
            // The last sender: the dispatcher ends once it has run what is queued.
            drop(tx);
        }
        let dispatcher = lock(&self.dispatcher).take();
        if let Some(mut d) = dispatcher
            && tokio::time::timeout_at(deadline, &mut d).await.is_err()
        {
            d.abort();
            let _ = d.await;
            self.shared
                .metrics
                .shutdown_cancelled
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "fanout subscriber shutdown: handlers did not finish within shutdown_drain and were cancelled"
            );
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        // Without `shutdown` nothing is drained: the tasks are cancelled.
        for slot in [&self.discovery, &self.dispatcher] {
            if let Some(t) = lock(slot).take() {
                t.abort();
            }
        }
        // Only a thread that still runs needs the signal (as `Pump::drop`): after `shutdown`
        // it has exited already.
        if lock(&self.thread).take().is_some() {
            self.shared.command(Command::Stop);
        }
    }
}

/// One SUB socket and its publisher's readiness.
struct Slot {
    id: u64,
    publisher: Arc<PublisherRef>,
    socket: zmq::Socket,
    liveness: PublisherLiveness,
    touched: bool,
    became_ready: u64,
    became_not_ready: u64,
}

/// Settings the socket thread needs.
struct SocketThread {
    ctx: zmq::Context,
    topics: Vec<Vec<u8>>,
    recv_hwm: i32,
    max_message_bytes: i64,
    reconnect_ivl: i32,
    batch: usize,
    not_ready_after: Duration,
}

impl SocketThread {
    fn open(&self, endpoint: &str) -> Result<zmq::Socket, FanoutError> {
        let s = self.ctx.socket(zmq::SUB).map_err(zerr("socket"))?;
        s.set_rcvhwm(self.recv_hwm).map_err(zerr("rcvhwm"))?;
        s.set_maxmsgsize(self.max_message_bytes)
            .map_err(zerr("maxmsgsize"))?;
        s.set_linger(0).map_err(zerr("linger"))?;
        s.set_reconnect_ivl(self.reconnect_ivl)
            .map_err(zerr("reconnect ivl"))?;
        s.set_reconnect_ivl_max(self.reconnect_ivl.saturating_mul(10))
            .map_err(zerr("reconnect ivl max"))?;
        // ZeroMQ sends a SUB socket's subscriptions in byte order of its subscription trie on
        // every (re)connect, not in the order they are set here, so the order below carries no
        // meaning: a beacon does not prove the application subscriptions have all reached the
        // publisher (see docs/architecture.md, "Beacon and readiness").
        for t in &self.topics {
            s.set_subscribe(t).map_err(zerr("subscribe"))?;
        }
        s.set_subscribe(&BEACON_TOPIC).map_err(zerr("subscribe"))?;
        s.connect(endpoint).map_err(zerr("connect"))?;
        Ok(s)
    }

    fn run(
        &self,
        shared: &Shared,
        mut wake_rx: std::io::PipeReader,
        tx: &mpsc::Sender<Vec<Delivery>>,
    ) -> Option<Vec<Delivery>> {
        let mut slots: Vec<Slot> = Vec::new();
        // A batch the dispatcher had no room for. While it waits, the SUB sockets are not read
        // (ZeroMQ buffers up to `recv_hwm`, then the publisher drops), but commands and the
        // readiness deadlines still run.
        let mut pending: Option<Vec<Delivery>> = None;
        let mut poll_backoff = POLL_BACKOFF_MIN;
        loop {
            let mut timeout = slots
                .iter()
                .filter_map(|s| s.liveness.next_deadline())
                .min()
                .map_or(-1, |d| {
                    let wait = d.saturating_duration_since(Instant::now());
                    i64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
                });
            if pending.is_some() {
                // The dispatcher wakes us when it takes a batch; this is only a safety net.
                timeout = if timeout < 0 {
                    STALL_RECHECK_MS
                } else {
                    timeout.min(STALL_RECHECK_MS)
                };
            }
            let (wake_in, readable) = {
                let mut items = Vec::with_capacity(slots.len() + 1);
                items.push(zmq::PollItem::from_fd(wake_rx.as_raw_fd(), zmq::POLLIN));
                if pending.is_none() {
                    items.extend(slots.iter().map(|s| s.socket.as_poll_item(zmq::POLLIN)));
                }
                match zmq::poll(&mut items, timeout) {
                    Ok(_) => poll_backoff = POLL_BACKOFF_MIN,
                    Err(zmq::Error::EINTR) => continue,
                    Err(e) => {
                        // Not a signal: back off instead of spinning, and say so.
                        let n = shared.metrics.poll_failures.fetch_add(1, Ordering::Relaxed);
                        if n.is_power_of_two() || n == 0 {
                            tracing::warn!(error = %e, failures = n + 1, "fanout SUB poll failed");
                        }
                        std::thread::sleep(poll_backoff);
                        poll_backoff = (poll_backoff * 2).min(POLL_BACKOFF_MAX);
                        continue;
                    }
                }
                // Readable flags paired with the socket ids they belong to: the commands below
                // may remove or add slots, so positions would not survive them.
                let readable: Vec<u64> = slots
                    .iter()
                    .zip(&items[1..])
                    .filter(|(_, item)| item.is_readable())
                    .map(|(slot, _)| slot.id)
                    .collect();
                (items[0].is_readable(), readable)
            };
            if wake_in {
                let mut buf = [0u8; 64];
                let _ = wake_rx.read(&mut buf);
            }
            // Cleared before the commands are drained, so a command pushed after the drain
            // wakes us again.
            shared.woken.swap(false, Ordering::AcqRel);
            let commands: Vec<Command> = lock(&shared.commands).drain(..).collect();
            let mut changed = false;
            let mut stop = false;
            for c in commands {
                match c {
                    Command::Add { id, publisher } => match self.open(&publisher.endpoint) {
                        Ok(socket) => {
                            slots.push(Slot {
                                id,
                                publisher,
                                socket,
                                liveness: PublisherLiveness::new(self.not_ready_after),
                                touched: false,
                                became_ready: 0,
                                became_not_ready: 0,
                            });
                        }
                        Err(e) => {
                            lock(&shared.view).remove(&id);
                            changed = true;
                            shared.metrics.socket_errors.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(error = %e, endpoint = %publisher.endpoint, "fanout SUB socket failed");
                        }
                    },
                    Command::Remove { id } => {
                        slots.retain(|s| s.id != id);
                        lock(&shared.view).remove(&id);
                        changed = true;
                    }
                    Command::Stop => stop = true,
                }
            }
            if stop {
                // Sockets close here; a batch that was read but not handed over goes back to
                // `shutdown`, which still delivers it.
                return pending;
            }
            if let Some(batch) = pending.take() {
                pending = offer(shared, tx, batch);
            }
            let mut out = Vec::new();
            let now = Instant::now();
            for slot in slots.iter_mut().filter(|s| readable.contains(&s.id)) {
                changed |= self.read(slot, shared, now, &mut out);
            }
            for slot in &mut slots {
                if slot.liveness.poll(now) == Some(Transition::BecameNotReady) {
                    shared
                        .metrics
                        .became_not_ready
                        .fetch_add(1, Ordering::Relaxed);
                    slot.became_not_ready += 1;
                    slot.touched = true;
                    changed = true;
                }
            }
            if slots.iter().any(|s| s.touched) {
                let mut view = lock(&shared.view);
                for slot in slots.iter_mut().filter(|s| s.touched) {
                    slot.touched = false;
                    if let Some(v) = view.get_mut(&slot.id) {
                        v.ready = slot.liveness.is_ready();
                        v.last_valid_receive = slot.liveness.last_valid_receive();
                        v.became_ready = slot.became_ready;
                        v.became_not_ready = slot.became_not_ready;
                    }
                }
            }
            if changed {
                shared.changed();
            }
            // Sockets are read only when nothing was pending, so `out` never overtakes it.
            if !out.is_empty() {
                pending = offer(shared, tx, out);
                if pending.is_some() {
                    shared
                        .metrics
                        .inbound_stalls
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Read up to `batch` records from one socket. Returns whether readiness changed.
    fn read(
        &self,
        slot: &mut Slot,
        shared: &Shared,
        now: Instant,
        out: &mut Vec<Delivery>,
    ) -> bool {
        let m = &shared.metrics;
        let mut changed = false;
        for _ in 0..self.batch {
            let frames = match slot.socket.recv_multipart(zmq::DONTWAIT) {
                Ok(f) => f,
                Err(zmq::Error::EAGAIN) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "fanout SUB receive failed");
                    break;
                }
            };
            let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
            let record = match decode(&frames) {
                Ok(Received::Beacon) => {
                    m.beacons_received.fetch_add(1, Ordering::Relaxed);
                    None
                }
                Ok(Received::Application(r)) => {
                    m.records_received.fetch_add(1, Ordering::Relaxed);
                    Some(r)
                }
                Err(e) => {
                    // Never delivered, and not a valid receive: readiness is untouched.
                    m.protocol_error(e.kind());
                    continue;
                }
            };
            slot.touched = true;
            if slot.liveness.on_valid_receive(now) == Some(Transition::BecameReady) {
                m.became_ready.fetch_add(1, Ordering::Relaxed);
                slot.became_ready += 1;
                changed = true;
            }
            if let Some(record) = record {
                out.push(Delivery {
                    publisher: Arc::clone(&slot.publisher),
                    record,
                });
            }
        }
        changed
    }
}

/// Shortest and longest pause after a failed `zmq::poll`.
const POLL_BACKOFF_MIN: Duration = Duration::from_millis(1);
const POLL_BACKOFF_MAX: Duration = Duration::from_millis(500);
/// While a batch waits for the dispatcher, the socket thread re-checks at least this often (ms)
/// even if no wake-up comes.
const STALL_RECHECK_MS: i64 = 50;

/// Hand `batch` to the dispatcher without blocking; give it back when the channel is full. A
/// gone dispatcher (shutdown) drops it.
fn offer(
    shared: &Shared,
    tx: &mpsc::Sender<Vec<Delivery>>,
    batch: Vec<Delivery>,
) -> Option<Vec<Delivery>> {
    // Set before trying, so a dispatcher that makes room after the failed try sees it.
    shared.stalled.store(true, Ordering::SeqCst);
    match tx.try_send(batch) {
        Ok(()) => {
            shared.stalled.store(false, Ordering::SeqCst);
            None
        }
        Err(mpsc::error::TrySendError::Full(batch)) => Some(batch),
        Err(mpsc::error::TrySendError::Closed(_)) => {
            // The dispatcher is gone (shutdown): records are dropped, sockets still drain.
            shared.stalled.store(false, Ordering::SeqCst);
            None
        }
    }
}

/// Run each record's handler, one at a time in arrival order.
async fn dispatch(mut rx: mpsc::Receiver<Vec<Delivery>>, table: HandlerTable, shared: Arc<Shared>) {
    let m = &shared.metrics;
    while let Some(batch) = rx.recv().await {
        // Room was made: a socket thread holding a batch it could not hand over retries now.
        if shared.stalled.swap(false, Ordering::SeqCst) {
            shared.wake();
        }
        for d in batch {
            let Some((topic, handler)) = table
                .get(&d.record.topic[..])
                .and_then(|by_name| by_name.get(d.record.payload.packet_name.as_str()))
            else {
                m.no_handler.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let ctx = FanoutContext {
                publisher: d.publisher,
                topic: Arc::clone(topic),
                packet_name: d.record.payload.packet_name.clone(),
                metadata: d.record.metadata,
            };
            match AssertUnwindSafe(handler(ctx, d.record.payload))
                .catch_unwind()
                .await
            {
                Ok(Ok(())) => {
                    m.delivered.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(HandlerFailure::Undecodable(e))) => {
                    m.undecodable.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "fanout event did not decode");
                }
                Ok(Err(HandlerFailure::Failed(e))) => {
                    m.delivered.fetch_add(1, Ordering::Relaxed);
                    m.handler_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "fanout handler failed");
                }
                Err(_) => {
                    m.handler_panics.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Poll the store and reconcile the discovered publishers into socket changes.
async fn discover(
    store: Arc<dyn DiscoveryBackend>,
    channel_name: String,
    manual_endpoints: Vec<String>,
    poll: Duration,
    shared: Arc<Shared>,
) {
    let mut current: BTreeMap<String, (DiscoveredPublisher, u64)> = BTreeMap::new();
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let records = match list_publishers(&*store, &channel_name).await {
            Ok(r) => r,
            Err(e) => {
                shared
                    .metrics
                    .discovery_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "fanout discovery poll failed; keeping the last set");
                continue;
            }
        };
        let Desired {
            publishers: desired,
            errors,
            duplicate_endpoints,
        } = desired_publishers(&records, &channel_name, &manual_endpoints);
        if !errors.is_empty() {
            shared
                .metrics
                .descriptor_errors
                .fetch_add(errors.len() as u64, Ordering::Relaxed);
        }
        if !duplicate_endpoints.is_empty() {
            shared
                .metrics
                .duplicate_endpoints
                .fetch_add(duplicate_endpoints.len() as u64, Ordering::Relaxed);
        }
        // A socket the thread could not open was dropped from the view: forget it here too, so
        // `reconcile` adds it again and this poll retries the open.
        let retry = {
            let view = lock(&shared.view);
            forget_closed(&mut current, |id| view.contains_key(&id))
        };
        if !retry.is_empty() {
            tracing::debug!(rids = ?retry, "fanout discovery retries SUB sockets that failed to open");
        }
        let have: BTreeMap<String, DiscoveredPublisher> = current
            .iter()
            .map(|(rid, (p, _))| (rid.clone(), p.clone()))
            .collect();
        for change in reconcile(&have, &desired) {
            match change {
                Change::Remove { rid } => {
                    if let Some((_, id)) = current.remove(&rid) {
                        shared.command(Command::Remove { id });
                    }
                }
                Change::Add { rid, publisher } => {
                    let id = shared.add(
                        Arc::new(PublisherRef {
                            rid: Some(rid.clone()),
                            lifecycle_generation: Some(publisher.lifecycle_generation),
                            endpoint: publisher.endpoint.clone(),
                        }),
                        PublisherSource::Discovered,
                    );
                    current.insert(rid, (publisher, id));
                }
            }
        }
    }
}

/// Drop the discovered publishers whose socket id is no longer `live` (the socket thread
/// could not open it and removed it from the view) and return their RIDs, so the next
/// reconcile adds them again (pure).
fn forget_closed<T>(
    current: &mut BTreeMap<String, (T, u64)>,
    live: impl Fn(u64) -> bool,
) -> Vec<String> {
    let gone: Vec<String> = current
        .iter()
        .filter(|(_, (_, id))| !live(*id))
        .map(|(rid, _)| rid.clone())
        .collect();
    for rid in &gone {
        current.remove(rid);
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishers_whose_socket_failed_are_forgotten_so_the_next_poll_retries() {
        let mut current: BTreeMap<String, ((), u64)> = [
            ("a".to_owned(), ((), 1)),
            ("b".to_owned(), ((), 2)),
            ("c".to_owned(), ((), 3)),
        ]
        .into();
        let gone = forget_closed(&mut current, |id| id != 2);
        assert_eq!(gone, vec!["b".to_owned()]);
        assert_eq!(current.keys().collect::<Vec<_>>(), vec!["a", "c"]);
        assert!(forget_closed(&mut current, |_| true).is_empty());
        assert_eq!(current.len(), 2);
    }
}
