//! The classic fanout publisher (glossary §4 "Classic fanout"; wire §5 "Classic fanout
//! beacon"; glossary §6 "Fanout publisher descriptor").
//!
//! One **socket thread** owns the ZeroMQ `PUB` socket. `publish` callers encode the record on
//! their own task (topic check, typed payload envelope, metadata — a bad topic never reaches the
//! queue), push it onto a byte-bounded queue and wake the thread through a pipe, at most once
//! per drain. The thread sleeps in `zmq::poll` on that pipe with a timeout equal to the time
//! left until the next beacon (no busy-spin), drains the whole queue per wake-up and writes each
//! record with `DONTWAIT`. It sends the beacon on its own clock, whatever the application
//! traffic. A `PUB` socket never blocks: a subscriber whose pipe is at the high-water mark loses
//! records (ZeroMQ PUB/SUB semantics), which the publisher cannot observe.
//!
//! With a store, the publisher publishes its descriptor after the bind (revision 1, state
//! `serving`) under its owner lease, renews a lease it claimed itself, and on graceful shutdown
//! removes the descriptor (and releases its own lease) *before* closing the socket.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::fanout::{BEACON_PAYLOAD, BEACON_TOPIC};
use zlink_protocol::generated::RuntimeState;
use zlink_protocol::metadata::Metadata;
use zlink_store::StoreError;
use zlink_store::types::{LeaseRead, OwnerToken};

use super::config::{OwnerLease, PublisherConfig};
use super::descriptor::{
    DESCRIPTOR_FORMAT_VERSION, FanoutPublisherDescriptor, descriptor_key, encode_descriptor,
};
use super::error::{FanoutError, zerr};
use super::record::encode_application;
use crate::mesh::JsonMessage;
use crate::mesh::discovery::DiscoveryBackend;
use crate::mesh::handler::encode_json;

/// Counters of one publisher.
#[derive(Debug, Default)]
pub struct PublisherMetrics {
    /// Application records written to the PUB socket.
    pub published: AtomicU64,
    /// `publish` calls refused before transport (bad topic, envelope over its bounds, codec).
    pub refused: AtomicU64,
    /// Beacons written to the PUB socket.
    pub beacons_sent: AtomicU64,
    /// Socket writes that failed (the record or beacon is lost).
    pub send_failures: AtomicU64,
    /// Owner lease renewals that failed.
    pub lease_renew_failures: AtomicU64,
    /// `zmq::poll` calls of the socket thread that failed (other than `EINTR`).
    pub poll_failures: AtomicU64,
    /// Times a claimed lease was found lost (expired by store time or replaced) and the
    /// publisher claimed a new one and published its descriptor again.
    pub lease_reclaims: AtomicU64,
}

// The queue + `woken` flag + wake-up pipe below repeat the pattern of the mesh socket pump
// (`transport/pump.rs`: one thread per socket, a byte-bounded queue, a pipe written at most once
// per drain). It is kept separate on purpose for now: the pump is built around a ROUTER socket,
// its commands, credit and batching, and a PUB socket needs none of that. If a third socket
// thread appears, extract the shared "queue + wake pipe" piece instead of copying it again.
struct Queue {
    records: VecDeque<Vec<Vec<u8>>>,
    bytes: usize,
    /// Set once, under this lock, by `stop`: no record is accepted after it, and the thread
    /// exits only when it sees it with an empty queue.
    stopping: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    cap: usize,
    room: Notify,
    woken: AtomicBool,
    wake_tx: Mutex<std::io::PipeWriter>,
    /// A second handle on the pipe's read end, held as long as `Shared`: a late wake-up
    /// (`set_beacons_paused` after shutdown, a drop racing the thread's exit) then writes into
    /// a pipe that still has a reader instead of failing with `EPIPE` / raising `SIGPIPE` in a
    /// host that does not ignore it. `woken` keeps it at one unread byte.
    _wake_rx_keepalive: std::io::PipeReader,
    beacons_paused: AtomicBool,
    metrics: PublisherMetrics,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single push/pop/swap: a panic cannot leave it half-done.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Refuse new records (under the queue lock), release waiting publishers, wake the thread.
    fn stop(&self) {
        lock(&self.queue).stopping = true;
        self.room.notify_waiters();
        self.wake();
    }

    fn wake(&self) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            // The pipe holds at most a couple of unread bytes (guarded by `woken`).
            let _ = lock(&self.wake_tx).write_all(&[1]);
        }
    }
}

/// A running classic fanout publisher.
pub struct Publisher {
    shared: Arc<Shared>,
    channel_name: String,
    rid: String,
    lifecycle_generation: u64,
    endpoint: String,
    descriptor: Arc<Mutex<Option<FanoutPublisherDescriptor>>>,
    store: Option<Arc<dyn DiscoveryBackend>>,
    lease: Arc<Mutex<Option<OwnerToken>>>,
    owns_lease: bool,
    thread: Mutex<Option<JoinHandle<()>>>,
    lease_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    shut: AtomicBool,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("channel_name", &self.channel_name)
            .field("rid", &self.rid)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Bind the PUB socket, start the socket thread (the first beacon goes out at once), and
    /// with a store publish the descriptor under the owner lease.
    ///
    /// # Errors
    /// [`FanoutError`] for bad configuration, a socket failure or a store failure (the socket
    /// is closed again then).
    pub async fn start(
        config: PublisherConfig,
        store: Option<Arc<dyn DiscoveryBackend>>,
    ) -> Result<Self, FanoutError> {
        config.validate()?;
        let rid = match &config.rid {
            Some(rid) => rid.clone(),
            None => {
                let r = crate::mesh::auth::random_bytes::<16>().map_err(|_| FanoutError::Random)?;
                zlink_protocol::ids::automatic_rid(&config.rid_prefix, r).map_err(|e| {
                    FanoutError::Config {
                        field: "rid_prefix",
                        reason: e.to_string(),
                    }
                })?
            }
        };
        let lifecycle_generation =
            crate::mesh::node::new_lifecycle_generation().map_err(|_| FanoutError::Random)?;

        let ctx = crate::mesh::node::process_context();
        let socket = ctx.socket(zmq::PUB).map_err(zerr("socket"))?;
        socket.set_sndhwm(config.send_hwm).map_err(zerr("sndhwm"))?;
        let linger = i32::try_from(config.linger.as_millis()).unwrap_or(i32::MAX);
        socket.set_linger(linger).map_err(zerr("linger"))?;
        socket
            .bind(&format!(
                "tcp://{}:{}",
                bracket(&config.bind_host),
                config.port
            ))
            .map_err(zerr("bind"))?;
        let bound = socket
            .get_last_endpoint()
            .map_err(zerr("last endpoint"))?
            .map_err(|_| FanoutError::Config {
                field: "bind_host",
                reason: "bound endpoint is not UTF-8".into(),
            })?;
        let port = bound
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| FanoutError::Config {
                field: "bind_host",
                reason: format!("bound endpoint {bound:?} has no port"),
            })?;
        let advertise = config
            .advertise_host
            .clone()
            .unwrap_or_else(|| config.bind_host.clone());
        let endpoint = format!("tcp://{}:{port}", bracket(&advertise));

        let (wake_rx, wake_tx) = std::io::pipe().map_err(|source| FanoutError::Io {
            op: "wake-up pipe",
            source,
        })?;
        let wake_rx_keepalive = wake_rx.try_clone().map_err(|source| FanoutError::Io {
            op: "wake-up pipe",
            source,
        })?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                records: VecDeque::new(),
                bytes: 0,
                stopping: false,
            }),
            cap: config.queue_cap_bytes,
            room: Notify::new(),
            woken: AtomicBool::new(false),
            wake_tx: Mutex::new(wake_tx),
            _wake_rx_keepalive: wake_rx_keepalive,
            beacons_paused: AtomicBool::new(false),
            metrics: PublisherMetrics::default(),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            let interval = config.beacon_interval;
            std::thread::Builder::new()
                .name("zlink-fanout-pub".into())
                .spawn(move || run(&shared, &socket, wake_rx, interval))
                .map_err(|source| FanoutError::Io {
                    op: "socket thread",
                    source,
                })?
        };
        let mut publisher = Self {
            shared,
            channel_name: config.channel_name.clone(),
            rid,
            lifecycle_generation,
            endpoint,
            descriptor: Arc::new(Mutex::new(None)),
            store: store.clone(),
            lease: Arc::new(Mutex::new(None)),
            owns_lease: matches!(config.owner, OwnerLease::Claim { .. }),
            thread: Mutex::new(Some(thread)),
            lease_task: Mutex::new(None),
            shut: AtomicBool::new(false),
        };
        if let Some(store) = store
            && let Err(e) = publisher.publish_descriptor(&config, &store).await
        {
            publisher.stop_thread().await;
            return Err(e);
        }
        Ok(publisher)
    }

    async fn publish_descriptor(
        &mut self,
        config: &PublisherConfig,
        store: &Arc<dyn DiscoveryBackend>,
    ) -> Result<(), FanoutError> {
        let token = match &config.owner {
            OwnerLease::Claim { owner_id } => {
                let owner_id = owner_id
                    .clone()
                    .unwrap_or_else(|| format!("host-{}", self.rid));
                store.claim_lease(&owner_id, config.lease_ttl).await?.token
            }
            OwnerLease::Shared(token) => token.clone(),
        };
        let descriptor = FanoutPublisherDescriptor {
            v: DESCRIPTOR_FORMAT_VERSION,
            channel_name: self.channel_name.clone(),
            publisher_rid: self.rid.clone(),
            lifecycle_generation: self.lifecycle_generation,
            descriptor_revision: 1,
            endpoint: self.endpoint.clone(),
            state: RuntimeState::Serving,
            security_identity: config.security_identity.clone(),
            owner_id: token.owner_id.clone(),
            lease_generation: token.lease_generation,
        };
        if let Err(e) = put_descriptor(&**store, &token, &descriptor).await {
            if self.owns_lease {
                let _ = store.release_lease(&token).await;
            }
            return Err(e.into());
        }
        *lock(&self.descriptor) = Some(descriptor);
        *lock(&self.lease) = Some(token);
        if self.owns_lease {
            let renewal = LeaseRenewal {
                store: Arc::clone(store),
                shared: Arc::clone(&self.shared),
                lease: Arc::clone(&self.lease),
                descriptor: Arc::clone(&self.descriptor),
                renew: config.lease_renew,
                ttl: config.lease_ttl,
            };
            *lock(&self.lease_task) = Some(tokio::spawn(renewal.run()));
        }
        Ok(())
    }

    /// Publish JSON event `event` on `topic`.
    ///
    /// # Errors
    /// [`FanoutError::Topic`] for a topic refused before transport (empty, too long, or equal
    /// to the reserved beacon topic), [`FanoutError::Serialize`], [`FanoutError::Encode`],
    /// [`FanoutError::ShuttingDown`].
    pub async fn publish<M: JsonMessage>(&self, topic: &str, event: &M) -> Result<(), FanoutError> {
        let payload = encode_json(event).map_err(|e| {
            self.shared.metrics.refused.fetch_add(1, Ordering::Relaxed);
            FanoutError::Serialize(e)
        })?;
        self.publish_payload(topic, &payload, None).await
    }

    /// Publish a typed payload (any packet name, content type and bytes) with optional
    /// metadata. Waits while the outbound queue is over its byte cap.
    ///
    /// # Errors
    /// As [`Publisher::publish`].
    pub async fn publish_payload(
        &self,
        topic: &str,
        payload: &TypedPayload,
        metadata: Option<&Metadata>,
    ) -> Result<(), FanoutError> {
        let frames = encode_application(topic, payload, metadata).map_err(|e| {
            self.shared.metrics.refused.fetch_add(1, Ordering::Relaxed);
            FanoutError::from(e)
        })?;
        self.enqueue(frames).await
    }

    async fn enqueue(&self, frames: Vec<Vec<u8>>) -> Result<(), FanoutError> {
        let len: usize = frames.iter().map(Vec::len).sum();
        let mut frames = Some(frames);
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut q = lock(&self.shared.queue);
                // Under the queue lock, where `stop` sets it: a publish racing shutdown is
                // either queued before the thread's last drain or refused — never Ok and lost.
                if q.stopping {
                    return Err(FanoutError::ShuttingDown);
                }
                // An empty queue takes any record, so one larger than the cap still goes.
                if q.bytes == 0 || q.bytes.saturating_add(len) <= self.shared.cap {
                    if let Some(f) = frames.take() {
                        q.records.push_back(f);
                        q.bytes += len;
                    }
                    break;
                }
            }
            room.await;
        }
        self.shared.wake();
        Ok(())
    }

    /// The fanout ChannelName.
    pub fn channel_name(&self) -> &str {
        &self.channel_name
    }

    /// The publisher RID.
    pub fn rid(&self) -> &str {
        &self.rid
    }

    /// This lifecycle's generation (non-zero, at most `i64::MAX`, random per start).
    pub fn lifecycle_generation(&self) -> u64 {
        self.lifecycle_generation
    }

    /// The advertised PUB endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The descriptor last published to the store (with a store). After a lost lease was
    /// re-claimed it carries the new lease generation and the next descriptor revision.
    pub fn descriptor(&self) -> Option<FanoutPublisherDescriptor> {
        lock(&self.descriptor).clone()
    }

    /// The counters.
    pub fn metrics(&self) -> &PublisherMetrics {
        &self.shared.metrics
    }

    /// Fault injection for tests and diagnostics: stop (or resume) sending beacons while the
    /// socket stays open, as a frozen publisher would.
    pub fn set_beacons_paused(&self, paused: bool) {
        self.shared.beacons_paused.store(paused, Ordering::Release);
        self.shared.wake();
    }

    /// Graceful shutdown: refuse new publishes, remove the descriptor and release a lease the
    /// publisher claimed, then let the socket thread write what is queued and close the socket.
    pub async fn shutdown(&self) {
        if self.shut.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(t) = lock(&self.lease_task).take() {
            t.abort();
        }
        let token = lock(&self.lease).take();
        if let (Some(store), Some(token)) = (&self.store, token) {
            let key = descriptor_key(&self.channel_name, &self.rid);
            if let Err(e) = store.remove_descriptor(&token, &key).await {
                tracing::warn!(error = %e, "fanout descriptor removal failed");
            }
            if self.owns_lease {
                let _ = store.release_lease(&token).await;
            }
        }
        self.stop_thread().await;
    }

    async fn stop_thread(&self) {
        self.shared.stop();
        let thread = lock(&self.thread).take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        // Without `shutdown` the descriptor lapses with the lease (or stays until its holder
        // removes it); the thread still stops and closes the socket.
        if let Some(t) = lock(&self.lease_task).take() {
            t.abort();
        }
        // Only a thread that still runs needs the signal (as `Pump::drop`): after `shutdown`,
        // or after a failed `start` (which stops the thread), it has exited already.
        if lock(&self.thread).take().is_some() {
            self.shared.stop();
        }
    }
}

/// Publish `d` under `token` at its own revision.
async fn put_descriptor(
    store: &dyn DiscoveryBackend,
    token: &OwnerToken,
    d: &FanoutPublisherDescriptor,
) -> Result<(), StoreError> {
    store
        .publish_descriptor(
            token,
            &descriptor_key(&d.channel_name, &d.publisher_rid),
            d.lifecycle_generation,
            d.descriptor_revision,
            encode_descriptor(d),
        )
        .await
        .map(|_| ())
}

/// Renews a lease the publisher claimed itself. When the store says the lease is gone and no
/// one else holds the owner ID (it expired by store time while renewals failed), it claims a
/// new lease for the same owner ID and publishes the descriptor again: same lifecycle
/// generation, next revision, the new lease generation. A failure is retried after 50 ms,
/// doubling, capped well inside the TTL (`RetrySchedule`). When another claim *replaced* the lease (a live lease of a newer generation — for
/// example a restart of the same RID), this lifecycle is superseded: it does not fight back,
/// it stops renewing and leaves the descriptor to the newer holder.
struct LeaseRenewal {
    store: Arc<dyn DiscoveryBackend>,
    shared: Arc<Shared>,
    lease: Arc<Mutex<Option<OwnerToken>>>,
    descriptor: Arc<Mutex<Option<FanoutPublisherDescriptor>>>,
    renew: Duration,
    ttl: Duration,
}

impl LeaseRenewal {
    async fn run(self) {
        let m = &self.shared.metrics;
        // A failed renewal is retried after 50 ms, doubling (issue 20), not a period later.
        let mut schedule =
            crate::mesh::lease::RetrySchedule::new(crate::mesh::lease::RenewPolicy::new(
                crate::millis(self.renew),
                crate::millis(self.ttl) / 5,
            ));
        let mut wait = self.renew;
        loop {
            tokio::time::sleep(wait).await;
            wait = schedule.failed();
            let Some(token) = lock(&self.lease).clone() else {
                return;
            };
            match self.store.renew_lease(&token, self.ttl).await {
                Ok(_) => wait = schedule.succeeded(),
                Err(StoreError::Stale { .. }) => {
                    m.lease_renew_failures.fetch_add(1, Ordering::Relaxed);
                    match self.store.read_lease(&token.owner_id).await {
                        Ok(LeaseRead::Found { token: holder, .. })
                            if holder.lease_generation != token.lease_generation =>
                        {
                            tracing::warn!(
                                owner_id = %token.owner_id,
                                "fanout publisher lease was replaced by a newer claim; this lifecycle stops renewing"
                            );
                            lock(&self.lease).take();
                            return;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "fanout publisher lease read failed; retrying");
                            continue;
                        }
                    }
                    match self.reclaim(&token).await {
                        Ok(()) => {
                            wait = schedule.succeeded();
                            m.lease_reclaims.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(
                                owner_id = %token.owner_id,
                                "fanout publisher lease was lost; claimed a new one and published the descriptor again"
                            );
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "fanout publisher lease lost and re-claim failed; retrying");
                        }
                    }
                }
                Err(e) => {
                    m.lease_renew_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "fanout publisher lease renewal failed");
                }
            }
        }
    }

    async fn reclaim(&self, lost: &OwnerToken) -> Result<(), StoreError> {
        let Some(mut d) = lock(&self.descriptor).clone() else {
            return Ok(());
        };
        let token = self
            .store
            .claim_lease(&lost.owner_id, self.ttl)
            .await?
            .token;
        d.descriptor_revision += 1;
        d.owner_id.clone_from(&token.owner_id);
        d.lease_generation = token.lease_generation;
        if let Err(e) = put_descriptor(&*self.store, &token, &d).await {
            let _ = self.store.release_lease(&token).await;
            return Err(e);
        }
        *lock(&self.descriptor) = Some(d);
        *lock(&self.lease) = Some(token);
        Ok(())
    }
}

/// Shortest and longest pause after a failed `zmq::poll`.
const POLL_BACKOFF_MIN: Duration = Duration::from_millis(1);
const POLL_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// The socket thread.
fn run(
    shared: &Shared,
    socket: &zmq::Socket,
    mut wake_rx: std::io::PipeReader,
    beacon_interval: Duration,
) {
    let mut next_beacon = Instant::now();
    let mut records = VecDeque::new();
    let mut poll_backoff = POLL_BACKOFF_MIN;
    loop {
        let now = Instant::now();
        if now >= next_beacon {
            if !shared.beacons_paused.load(Ordering::Acquire) {
                let counter = match socket
                    .send_multipart([&BEACON_TOPIC[..], &BEACON_PAYLOAD[..]], zmq::DONTWAIT)
                {
                    Ok(()) => &shared.metrics.beacons_sent,
                    Err(_) => &shared.metrics.send_failures,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            next_beacon = now + beacon_interval;
        }
        // Clear before draining, so a producer that pushes after the drain wakes us again (a
        // read-modify-write, ordered with the producers' `swap(true)` on the flag itself).
        shared.woken.swap(false, Ordering::AcqRel);
        {
            let mut q = lock(&shared.queue);
            std::mem::swap(&mut q.records, &mut records);
            q.bytes = 0;
        }
        if !records.is_empty() {
            shared.room.notify_waiters();
            for frames in records.drain(..) {
                let counter = match socket.send_multipart(frames, zmq::DONTWAIT) {
                    Ok(()) => &shared.metrics.published,
                    Err(_) => &shared.metrics.send_failures,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        {
            let q = lock(&shared.queue);
            if q.stopping && q.records.is_empty() {
                return;
            }
        }
        let wait = next_beacon.saturating_duration_since(Instant::now());
        // Round up so the thread does not wake a fraction of a millisecond early and spin.
        let timeout = i64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i64::MAX);
        let mut items = [zmq::PollItem::from_fd(wake_rx.as_raw_fd(), zmq::POLLIN)];
        match zmq::poll(&mut items, timeout) {
            Ok(_) => {
                poll_backoff = POLL_BACKOFF_MIN;
                if items[0].is_readable() {
                    let mut buf = [0u8; 64];
                    let _ = wake_rx.read(&mut buf);
                }
            }
            Err(zmq::Error::EINTR) => {}
            Err(e) => {
                // Not a signal: back off instead of spinning, and say so (rate-limited).
                let n = shared.metrics.poll_failures.fetch_add(1, Ordering::Relaxed);
                if n == 0 || n.is_power_of_two() {
                    tracing::warn!(error = %e, failures = n + 1, "fanout PUB poll failed");
                }
                std::thread::sleep(poll_backoff.min(wait.max(POLL_BACKOFF_MIN)));
                poll_backoff = (poll_backoff * 2).min(POLL_BACKOFF_MAX);
            }
        }
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}
