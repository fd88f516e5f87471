//! Client STREAM sessions: the StreamNode that accepts game clients over TCP (issue 19 items 1
//! and 2; glossary §10 "STREAM session", §11 "Stream packet", §6 "MaxMessageSize").
//!
//! Every rule of a session — admission of packets, the size limit, session sequence,
//! request/reply pairing, deadlines, backpressure, close reasons — is in the pure core
//! [`zlink_session::Session`]. This module is its tokio shell:
//!
//! - [`StreamNode::bind`] binds the listener and runs the accept loop: at most
//!   [`StreamConfig::max_connections`] sessions, an excess connection is closed at once and
//!   counted ([`StreamMetrics::rejected_connections`]).
//! - Each connection gets a task that owns the socket and the core (`connection.rs`) and a
//!   handler task that runs the application's [`SessionHandlers`] one packet at a time, in
//!   session-sequence order.
//! - [`StreamNode::drain`] stops accepting, sends `zlink.GoAway` to every session and closes
//!   the ones still open at the deadline (`Draining`); [`StreamNode::shutdown`] closes every
//!   session (`ServerClosed`), flushing what each had accepted, and waits for them.
//!
//! - With a [`SessionRouter`] (the node's object runtime, [`StreamNode::serve_routed`]) a
//!   handler binds its session to an Actor ([`SessionCtx::bind`], command 38), relays on the
//!   stored route ([`SessionCtx::relay`], [`SessionCtx::relay_request`]: 24/25 with the
//!   bound-session tail) and the session gets the Actor's pushes (36); see [`bindings`],
//!   [`verdict`] and `object::runtime::sessions`.
//!
//! - Session relocation (42/43/44): each binding route can be sealed by a relocation
//!   coordinator and switched by the target ([`seal`], a pure machine).

pub mod bindings;
mod connection;
mod handlers;
pub mod router;
pub mod seal;
pub mod verdict;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use zlink_protocol::stream::StreamKind;
pub use zlink_session::{
    ClientReply, CloseReason, ErrorKind, ErrorPayload, SessionConfig, SessionConfigError, SessionId,
};

pub use bindings::BindingRoute;
pub use handlers::{HandlerFuture, RequestReply, SessionClosed, SessionCtx, SessionHandlers};
pub use router::SessionRouter;

/// Packets that may wait for a session's handler task before the session stops reading.
pub const DISPATCH_QUEUE: usize = 64;

/// A StreamNode's settings (host config `stream:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// Where to listen (port 0 picks one; [`StreamNode::local_addr`] tells which).
    pub listen: SocketAddr,
    /// **(ours)** Sessions at once (20,000); a connection beyond is closed and counted.
    pub max_connections: usize,
    /// Per-session settings.
    pub session: SessionConfig,
}

impl StreamConfig {
    /// Default `max_connections`.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 20_000;

    /// The defaults, listening on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            session: SessionConfig::default(),
        }
    }

    /// Check the settings.
    ///
    /// # Errors
    /// [`StreamError::Config`].
    pub fn validate(&self) -> Result<(), StreamError> {
        if self.max_connections == 0 {
            return Err(StreamError::Config(SessionConfigError::Zero(
                "max_connections",
            )));
        }
        self.session.validate().map_err(StreamError::Config)
    }
}

/// Why a StreamNode did not start, or a handler did not register.
#[derive(Debug, Error)]
pub enum StreamError {
    /// A setting cannot work.
    #[error(transparent)]
    Config(SessionConfigError),
    /// The listen address could not be bound.
    #[error("STREAM listener cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `zlink.` names are the framework's.
    #[error("STREAM packet name {name:?} is reserved (the zlink. prefix is the framework's)")]
    ReservedPacketName {
        /// The name.
        name: String,
    },
    /// Over 255 UTF-8 bytes.
    #[error("STREAM packet name {name:?} is longer than 255 bytes")]
    PacketNameTooLong {
        /// The name.
        name: String,
    },
    /// A handler for this (kind, name) exists.
    #[error("a STREAM {kind:?} handler for {name:?} is already registered")]
    DuplicateHandler {
        /// Send or Request.
        kind: StreamKind,
        /// The name.
        name: String,
    },
}

/// Counters of a StreamNode (the host exports them on `/metrics`). Per-session counts are
/// added when the session closes.
#[derive(Debug, Default)]
pub struct StreamMetrics {
    /// Connections accepted as sessions.
    pub accepted: AtomicU64,
    /// Connections closed at once because `max_connections` sessions were open.
    pub rejected_connections: AtomicU64,
    /// Sessions open now.
    pub active: AtomicU64,
    /// Sessions closed, by [`CloseReason`] (index = declaration order, as in
    /// [`CloseReason::ALL`]).
    pub closed: [AtomicU64; CloseReason::ALL.len()],
    /// Packets decoded from clients.
    pub packets_in: AtomicU64,
    /// Packets queued to clients.
    pub packets_out: AtomicU64,
    /// Bytes read from clients.
    pub bytes_in: AtomicU64,
    /// Bytes written to clients.
    pub bytes_out: AtomicU64,
    /// Packets with no handler for their kind and name (a request got `UnknownPacket`).
    pub unknown_packets: AtomicU64,
    /// Client replies matching no server request (dropped).
    pub unknown_reply_drops: AtomicU64,
    /// Client Sends with a reserved name (dropped).
    pub reserved_send_drops: AtomicU64,
    /// Handler replies after the request's terminal (dropped).
    pub late_replies: AtomicU64,
    /// Client requests answered `DeadlineExceeded`.
    pub request_deadlines: AtomicU64,
    /// Requests whose handler dropped its reply (answered `HandlerFailed`).
    pub handler_failed: AtomicU64,
    /// Handlers that panicked.
    pub handler_panics: AtomicU64,
    /// Pushed packets that did not encode (dropped).
    pub invalid_pushes: AtomicU64,
    /// `accept` errors (the loop keeps going).
    pub accept_errors: AtomicU64,
}

impl StreamMetrics {
    /// Sessions closed for `reason` so far.
    pub fn closed(&self, reason: CloseReason) -> u64 {
        self.closed[reason as usize].load(Ordering::Relaxed)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Draining { deadline: Instant },
    Stopping,
}

struct Shared {
    config: StreamConfig,
    handlers: SessionHandlers,
    metrics: Arc<StreamMetrics>,
    router: Option<Arc<dyn SessionRouter>>,
}

/// A running StreamNode.
#[derive(Debug)]
pub struct StreamNode {
    local_addr: SocketAddr,
    metrics: Arc<StreamMetrics>,
    phase: watch::Sender<Phase>,
    accept: JoinHandle<()>,
}

impl StreamNode {
    /// Bind `config.listen` and start accepting sessions for `handlers`.
    ///
    /// # Errors
    /// [`StreamError::Config`] or [`StreamError::Bind`].
    pub async fn bind(
        config: StreamConfig,
        handlers: SessionHandlers,
    ) -> Result<Self, StreamError> {
        config.validate()?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StreamError::Bind {
                    addr: config.listen,
                    source,
                })?;
        Self::serve(listener, config, handlers)
    }

    /// Start accepting sessions on a bound `listener` (`config.listen` is only reported). The
    /// host binds its listeners first, so a port conflict fails its start before anything is
    /// claimed, and starts serving once the node is up.
    ///
    /// # Errors
    /// [`StreamError::Config`], or [`StreamError::Bind`] when the listener has no address.
    pub fn serve(
        listener: TcpListener,
        config: StreamConfig,
        handlers: SessionHandlers,
    ) -> Result<Self, StreamError> {
        Self::serve_with(listener, config, handlers, None)
    }

    /// [`StreamNode::serve`] with the node's object runtime as `router`: handlers can bind
    /// their session to Actors, relay to them and get their pushes.
    ///
    /// # Errors
    /// As [`StreamNode::serve`].
    pub fn serve_routed(
        listener: TcpListener,
        config: StreamConfig,
        handlers: SessionHandlers,
        router: Arc<dyn SessionRouter>,
    ) -> Result<Self, StreamError> {
        Self::serve_with(listener, config, handlers, Some(router))
    }

    fn serve_with(
        listener: TcpListener,
        config: StreamConfig,
        handlers: SessionHandlers,
        router: Option<Arc<dyn SessionRouter>>,
    ) -> Result<Self, StreamError> {
        config.validate()?;
        let local_addr = listener.local_addr().map_err(|source| StreamError::Bind {
            addr: config.listen,
            source,
        })?;
        let metrics = Arc::new(StreamMetrics::default());
        let shared = Arc::new(Shared {
            config,
            handlers,
            metrics: Arc::clone(&metrics),
            router,
        });
        let (phase, phase_rx) = watch::channel(Phase::Running);
        let accept = tokio::spawn(accept_loop(listener, shared, phase_rx));
        tracing::info!(%local_addr, "STREAM listener bound");
        Ok(Self {
            local_addr,
            metrics,
            phase,
            accept,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<StreamMetrics> {
        &self.metrics
    }

    /// Sessions open now.
    pub fn active_sessions(&self) -> u64 {
        self.metrics.active.load(Ordering::Relaxed)
    }

    /// Stop accepting, send `zlink.GoAway` to every session, and close those still open after
    /// `within` (`Draining`). Sessions accepted meanwhile are none: the listener is closed.
    pub fn drain(&self, within: Duration) {
        let deadline = Instant::now() + within;
        self.phase.send_if_modified(|p| match *p {
            Phase::Running => {
                *p = Phase::Draining { deadline };
                true
            }
            Phase::Draining { .. } | Phase::Stopping => false,
        });
    }

    /// Close every session (`ServerClosed`, accepted output flushed within a bounded time) and
    /// wait until all have ended.
    pub async fn shutdown(self) {
        let _ = self.phase.send(Phase::Stopping);
        let _ = self.accept.await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut phase: watch::Receiver<Phase>,
) {
    let mut sessions = JoinSet::new();
    let mut next_id: u64 = 0;
    let mut listener = Some(listener);
    loop {
        let accept = async {
            match &listener {
                Some(l) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = accept => match accepted {
                Ok((stream, _peer)) => {
                    let active = shared.metrics.active.load(Ordering::Relaxed);
                    if active >= shared.config.max_connections as u64 {
                        shared.metrics.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        drop(stream);
                        continue;
                    }
                    next_id += 1;
                    let Some(id) = SessionId::new(next_id) else { continue };
                    shared.metrics.accepted.fetch_add(1, Ordering::Relaxed);
                    shared.metrics.active.fetch_add(1, Ordering::Relaxed);
                    let shared = Arc::clone(&shared);
                    let phase = phase.clone();
                    sessions.spawn(async move {
                        connection::serve(stream, id, Arc::clone(&shared), phase).await;
                        shared.metrics.active.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(e) => {
                    shared.metrics.accept_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "STREAM accept failed");
                    // Out of file descriptors and the like: do not spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            changed = phase.changed() => {
                let current = *phase.borrow_and_update();
                match (changed, current) {
                    (Ok(()), Phase::Running) => {}
                    (Ok(()), Phase::Draining { .. }) => listener = None,
                    (Ok(()), Phase::Stopping) | (Err(_), _) => break,
                }
            }
        }
    }
    drop(listener);
    while sessions.join_next().await.is_some() {}
}
