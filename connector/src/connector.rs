//! The application's handle: connect, typed send/request, handlers, `wait`, dispatch, close.

use std::future::{Future, IntoFuture};
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use zlink_protocol::json::JsonMessage;
use zlink_protocol::metadata::Metadata;
use zlink_protocol::stream::{StreamCodec, StreamPacket};

use crate::backoff::Backoff;
use crate::config::ConnectorConfig;
use crate::dispatch::{
    ConnectorEvent, ConnectorStats, Responder, Response, Shared, decode, typed_request, typed_send,
};
use crate::driver::{Command, Driver, connect};
use crate::error::{ConnectError, RequestError, SendError, WaitError};

/// Commands in flight from the handles to the task before `send`/`request` wait.
const COMMAND_QUEUE: usize = 1024;

/// Handlers registered before the first connect, so no packet or event arrives unhandled.
#[derive(Debug)]
pub struct ConnectorBuilder {
    config: ConnectorConfig,
    shared: Arc<Shared>,
}

impl ConnectorBuilder {
    /// Handle pushes of `M` (packet name `M::PACKET_NAME`). A later registration for the same
    /// name replaces this one.
    pub fn on_send<M, F>(self, f: F) -> Self
    where
        M: JsonMessage,
        F: FnMut(M) + Send + 'static,
    {
        self.shared.set_send_handler(
            M::PACKET_NAME.to_owned(),
            typed_send::<M, F>(&self.shared, f),
        );
        self
    }

    /// Handle pushes named `name` as packets (any codec).
    pub fn on_send_raw<F>(self, name: &str, f: F) -> Self
    where
        F: FnMut(StreamPacket) + Send + 'static,
    {
        self.shared
            .set_send_handler(name.to_owned(), Arc::new(Mutex::new(f)));
        self
    }

    /// Answer server requests of `M` through the [`Responder`].
    pub fn on_request<M, F>(self, f: F) -> Self
    where
        M: JsonMessage,
        F: FnMut(M, Responder) + Send + 'static,
    {
        self.shared.set_request_handler(
            M::PACKET_NAME.to_owned(),
            typed_request::<M, F>(&self.shared, f),
        );
        self
    }

    /// Answer server requests named `name` as packets.
    pub fn on_request_raw<F>(self, name: &str, f: F) -> Self
    where
        F: FnMut(StreamPacket, Responder) + Send + 'static,
    {
        self.shared
            .set_request_handler(name.to_owned(), Arc::new(Mutex::new(f)));
        self
    }

    /// Observe lifecycle events (runs per the dispatch mode, in order with packets).
    pub fn on_event<F>(self, f: F) -> Self
    where
        F: FnMut(&ConnectorEvent) + Send + 'static,
    {
        self.shared.set_event_handler(Arc::new(Mutex::new(f)));
        self
    }

    /// Connect (one attempt within `connect_timeout`) and start the connector's task. Later
    /// disconnects reconnect per `config.reconnect`; this first connect does not retry.
    ///
    /// # Errors
    /// [`ConnectError`]: a bad setting, or the first connect failed.
    pub async fn connect(self) -> Result<Connector, ConnectError> {
        self.config.validate()?;
        let stream = connect(&self.config).await?;
        let (commands_tx, commands) = mpsc::channel(COMMAND_QUEUE);
        let (answer_tx, answers) = mpsc::unbounded_channel();
        let (close_tx, close) = watch::channel(false);
        let seed = self.config.jitter_seed.unwrap_or_else(|| {
            // Random per process and per call: RandomState's keys come from the OS.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(Arc::as_ptr(&self.shared) as usize);
            h.finish()
        });
        let driver = Driver {
            backoff: Backoff::new(self.config.reconnect, seed),
            config: self.config.clone(),
            shared: Arc::clone(&self.shared),
            commands,
            answers,
            answer_tx,
            close,
            session: 0,
        };
        // Connected from here: the first call must not race the task's first poll.
        self.shared.connected.store(true, Ordering::Release);
        let task = tokio::spawn(driver.run(stream));
        Ok(Connector {
            inner: Arc::new(Inner {
                config: self.config,
                commands: commands_tx,
                close: close_tx,
                shared: self.shared,
                task: Mutex::new(Some(task)),
            }),
        })
    }
}

#[derive(Debug)]
struct Inner {
    config: ConnectorConfig,
    commands: mpsc::Sender<Command>,
    close: watch::Sender<bool>,
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// A client of one StreamNode (glossary §11 "Stream Connector"). Cheap to clone; the
/// connection closes when [`close`](Self::close) is called or the last clone drops.
///
/// # Guarantees
/// - A `send` or `request` that returned `Ok`/an answer was queued on the session live at that
///   moment; nothing is ever resent on a later session. A request ends exactly once: the
///   server's answer, [`RequestError::TimedOut`], or [`RequestError::ConnectionLost`].
/// - Packets from the server reach waiters and callbacks in the order the server sent them.
/// - Memory is bounded: output beyond `outbound_buffer_bytes` makes calls wait; callbacks
///   beyond `dispatch_queue_capacity` stop reading; inbound packets over
///   `max_inbound_message_size` end the session.
#[derive(Debug, Clone)]
pub struct Connector {
    inner: Arc<Inner>,
}

impl Connector {
    /// Register handlers, then [`ConnectorBuilder::connect`].
    pub fn builder(config: ConnectorConfig) -> ConnectorBuilder {
        let shared = Arc::new(Shared::new(
            config.dispatch_mode,
            config.dispatch_queue_capacity,
        ));
        ConnectorBuilder { config, shared }
    }

    /// Connect with no handlers registered yet.
    ///
    /// # Errors
    /// As [`ConnectorBuilder::connect`].
    pub async fn connect(config: ConnectorConfig) -> Result<Self, ConnectError> {
        Self::builder(config).connect().await
    }

    /// The settings.
    pub fn config(&self) -> &ConnectorConfig {
        &self.inner.config
    }

    /// Whether a session is up now.
    pub fn is_connected(&self) -> bool {
        self.inner.shared.connected.load(Ordering::Acquire)
    }

    /// Whether the connector stopped for good.
    pub fn is_closed(&self) -> bool {
        self.inner.shared.closed.load(Ordering::Acquire)
    }

    /// The counters so far.
    pub fn stats(&self) -> ConnectorStats {
        self.inner.shared.snapshot()
    }

    /// Send `msg` as a one-way packet named `M::PACKET_NAME` (see [`SendCall`] for per-call
    /// options).
    pub fn send<M: JsonMessage>(&self, msg: &M) -> SendCall<'_> {
        SendCall::new(self, json_packet(M::PACKET_NAME, msg))
    }

    /// Send raw bytes as a one-way packet named `name`.
    pub fn send_raw(&self, name: &str, payload: Vec<u8>) -> SendCall<'_> {
        SendCall::new(self, Ok((name.to_owned(), StreamCodec::Raw, payload)))
    }

    /// Ask with `msg` (packet name `M::PACKET_NAME`); the answer is a [`Response`] (see
    /// [`RequestCall`] for the timeout and other per-call options).
    pub fn request<M: JsonMessage>(&self, msg: &M) -> RequestCall<'_> {
        RequestCall::new(self, json_packet(M::PACKET_NAME, msg))
    }

    /// Ask with raw bytes under packet name `name`.
    pub fn request_raw(&self, name: &str, payload: Vec<u8>) -> RequestCall<'_> {
        RequestCall::new(self, Ok((name.to_owned(), StreamCodec::Raw, payload)))
    }

    /// As [`ConnectorBuilder::on_send`], on a running connector.
    pub fn on_send<M, F>(&self, f: F)
    where
        M: JsonMessage,
        F: FnMut(M) + Send + 'static,
    {
        let shared = &self.inner.shared;
        shared.set_send_handler(M::PACKET_NAME.to_owned(), typed_send::<M, F>(shared, f));
    }

    /// As [`ConnectorBuilder::on_send_raw`], on a running connector.
    pub fn on_send_raw<F>(&self, name: &str, f: F)
    where
        F: FnMut(StreamPacket) + Send + 'static,
    {
        self.inner
            .shared
            .set_send_handler(name.to_owned(), Arc::new(Mutex::new(f)));
    }

    /// As [`ConnectorBuilder::on_request`], on a running connector.
    pub fn on_request<M, F>(&self, f: F)
    where
        M: JsonMessage,
        F: FnMut(M, Responder) + Send + 'static,
    {
        let shared = &self.inner.shared;
        shared.set_request_handler(M::PACKET_NAME.to_owned(), typed_request::<M, F>(shared, f));
    }

    /// As [`ConnectorBuilder::on_event`], on a running connector.
    pub fn on_event<F>(&self, f: F)
    where
        F: FnMut(&ConnectorEvent) + Send + 'static,
    {
        self.inner.shared.set_event_handler(Arc::new(Mutex::new(f)));
    }

    /// The next push of `M`, taken ahead of any handler for its name, within `timeout`. Waits
    /// span reconnects; they end at close.
    ///
    /// # Errors
    /// [`WaitError`].
    pub async fn wait<M: JsonMessage>(&self, timeout: Duration) -> Result<M, WaitError> {
        let rx = self
            .inner
            .shared
            .add_waiter(M::PACKET_NAME)
            .ok_or(WaitError::Closed)?;
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(WaitError::TimedOut { after: timeout }),
            Ok(Err(_)) => Err(WaitError::Closed),
            Ok(Ok(packet)) => decode(&packet).map_err(|e| {
                self.inner
                    .shared
                    .stats
                    .decode_failures
                    .fetch_add(1, Ordering::Relaxed);
                WaitError::from(e)
            }),
        }
    }

    /// `Manual` mode: run up to `max` queued callbacks (pushes, server requests, events) here,
    /// in arrival order; how many ran. Always 0 in `Immediate` mode.
    pub fn dispatch_pending(&self, max: usize) -> usize {
        self.inner.shared.dispatch_pending(max)
    }

    /// Callbacks waiting for [`dispatch_pending`](Self::dispatch_pending).
    pub fn pending_dispatch(&self) -> usize {
        self.inner.shared.queued()
    }

    /// Close: write what was queued (within 1 s), close the connection, end pending requests
    /// `ConnectionLost` and waits `Closed`; returns when the task ended. Idempotent.
    pub async fn close(&self) {
        let _ = self.inner.close.send(true);
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    async fn submit_send(&self, packet: StreamPacket) -> Result<(), SendError> {
        if self.is_closed() {
            return Err(SendError::Closed);
        }
        if !self.is_connected() {
            return Err(SendError::NotConnected);
        }
        let (done, rx) = oneshot::channel();
        self.inner
            .commands
            .send(Command::Send { packet, done })
            .await
            .map_err(|_| SendError::Closed)?;
        rx.await.unwrap_or(Err(SendError::Closed))
    }

    async fn submit_request(
        &self,
        packet: StreamPacket,
        timeout: Duration,
    ) -> Result<Response, RequestError> {
        if self.is_closed() {
            return Err(RequestError::Closed);
        }
        if !self.is_connected() {
            return Err(RequestError::NotConnected);
        }
        let (done, rx) = oneshot::channel();
        self.inner
            .commands
            .send(Command::Request {
                packet,
                timeout,
                done,
            })
            .await
            .map_err(|_| RequestError::Closed)?;
        rx.await.unwrap_or(Err(RequestError::Closed))
    }
}

type Parts = Result<(String, StreamCodec, Vec<u8>), serde_json::Error>;

fn json_packet<M: Serialize>(name: &str, msg: &M) -> Parts {
    serde_json::to_vec(msg).map(|payload| (name.to_owned(), StreamCodec::FrameworkJson, payload))
}

/// Options shared by send and request calls.
#[derive(Debug)]
struct CallOptions {
    parts: Parts,
    metadata: Option<Metadata>,
    correlation_id: Option<String>,
}

impl CallOptions {
    fn packet(self, request: bool) -> Result<StreamPacket, serde_json::Error> {
        let (name, codec, payload) = self.parts?;
        let mut packet = if request {
            // The core assigns the sequence; 1 only makes the packet well-formed until then.
            StreamPacket::request(codec, 1, name, payload)
        } else {
            StreamPacket::send(codec, name, payload)
        };
        packet.metadata = self.metadata;
        packet.correlation_id = self.correlation_id;
        Ok(packet)
    }
}

/// A send being prepared: `.await` it (glossary §7 "Packet name": the name may be set per
/// call).
#[derive(Debug)]
#[must_use = "a send does nothing until awaited"]
pub struct SendCall<'a> {
    connector: &'a Connector,
    options: CallOptions,
}

impl<'a> SendCall<'a> {
    fn new(connector: &'a Connector, parts: Parts) -> Self {
        Self {
            connector,
            options: CallOptions {
                parts,
                metadata: None,
                correlation_id: None,
            },
        }
    }

    /// Use this packet name instead of the message type's.
    pub fn packet_name(mut self, name: &str) -> Self {
        if let Ok(parts) = &mut self.options.parts {
            name.clone_into(&mut parts.0);
        }
        self
    }

    /// Attach metadata.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.options.metadata = Some(metadata);
        self
    }

    /// Attach a correlation ID (1..=64 printable ASCII bytes).
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.options.correlation_id = Some(id.into());
        self
    }
}

impl<'a> IntoFuture for SendCall<'a> {
    type Output = Result<(), SendError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let packet = self.options.packet(false).map_err(SendError::Serialize)?;
            self.connector.submit_send(packet).await
        })
    }
}

/// A request being prepared: `.await` it for the [`Response`].
#[derive(Debug)]
#[must_use = "a request does nothing until awaited"]
pub struct RequestCall<'a> {
    connector: &'a Connector,
    options: CallOptions,
    timeout: Option<Duration>,
}

impl<'a> RequestCall<'a> {
    fn new(connector: &'a Connector, parts: Parts) -> Self {
        Self {
            connector,
            options: CallOptions {
                parts,
                metadata: None,
                correlation_id: None,
            },
            timeout: None,
        }
    }

    /// Use this packet name instead of the message type's.
    pub fn packet_name(mut self, name: &str) -> Self {
        if let Ok(parts) = &mut self.options.parts {
            name.clone_into(&mut parts.0);
        }
        self
    }

    /// End with [`RequestError::TimedOut`] after this long (default: `request_timeout`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Attach metadata.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.options.metadata = Some(metadata);
        self
    }

    /// Attach a correlation ID (echoed on the answer).
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.options.correlation_id = Some(id.into());
        self
    }
}

impl<'a> IntoFuture for RequestCall<'a> {
    type Output = Result<Response, RequestError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let timeout = self
                .timeout
                .unwrap_or(self.connector.inner.config.request_timeout);
            let packet = self.options.packet(true).map_err(RequestError::Serialize)?;
            self.connector.submit_request(packet, timeout).await
        })
    }
}
