//! # zlink-connector
//!
//! The Stream Connector (glossary §11): a client library for a StreamNode's STREAM sessions
//! over TCP, for game clients, bots and tools. It links no mesh and no libzmq — only the
//! bytes-only `zlink-protocol` (packets, [`JsonMessage`](zlink_protocol::json::JsonMessage)
//! types shared with the server) and the pure `zlink-session` (error payloads, reserved names).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use zlink_connector::{Connector, ConnectorConfig, DispatchMode};
//!
//! let mut config = ConnectorConfig::new("127.0.0.1:7400");
//! config.dispatch_mode = DispatchMode::Immediate;
//! let connector = Connector::builder(config)
//!     .on_send_raw("chat.Line", |packet| println!("{}", String::from_utf8_lossy(&packet.payload)))
//!     .connect()
//!     .await?;
//! let answer = connector
//!     .request_raw("refapp.Echo", b"hi".to_vec())
//!     .timeout(Duration::from_secs(2))
//!     .await?;
//! assert_eq!(answer.payload(), b"hi");
//! connector.close().await;
//! # Ok(()) }
//! ```
//!
//! ## Layout
//! - [`core`]: [`ClientSession`](core::ClientSession), the pure client end of one session
//!   (request pairing and deadlines, keepalive, `zlink.GoAway`, the inbound limit), with `now`
//!   as an input; table tests in `core_tests.rs`.
//! - [`backoff`]: the bounded, jittered, seeded reconnect schedule.
//! - `driver`: the tokio task that owns the socket, runs sessions one after another and
//!   reconnects.
//! - `dispatch`: waiters, handlers, the [`DispatchMode`] queue, [`Responder`].
//! - `connector`: the [`Connector`] handle and its per-call builders.
//!
//! ## Choices (ours; `docs/architecture.md`, "Sessions")
//! - A reconnect is a new session: pending requests end `ConnectionLost`, calls made while
//!   disconnected fail `NotConnected` at once, nothing is queued for or resent on a later
//!   session.
//! - `zlink.Ping` every 20 s, answered by the server's core; unanswered for 10 s ends the
//!   session (`PingTimeout`). The server's `idle_timeout` is 60 s.
//! - Inbound packets are limited to 16 MiB (the server's outbound has no Framework limit).
//! - A push goes to one consumer: the oldest `wait`er for its name, else its handler, else it
//!   is counted (`unhandled`) and dropped.

pub mod backoff;
mod config;
mod connector;
pub mod core;
mod dispatch;
mod driver;
mod error;

pub use backoff::ReconnectPolicy;
pub use config::{ConnectorConfig, DispatchMode};
pub use connector::{Connector, ConnectorBuilder, RequestCall, SendCall};
pub use core::DisconnectReason;
pub use dispatch::{ConnectorEvent, ConnectorStats, Responder, Response};
pub use error::{ConnectError, DecodeError, RequestError, SendError, WaitError};
pub use zlink_session::{ErrorKind, ErrorPayload};
