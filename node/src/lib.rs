//! # zlink-node
//!
//! The zlink mesh runtime: the library that hosts an application's **Spots** (addressable,
//! stateful logical instances such as a room or a zone) and **Actors** (an entity with its own
//! state and mailbox, such as a player), routes messages to them by global ID, keeps per-object
//! message order, and moves live objects — state, queued work and timers — between nodes
//! without losing a message. The `zlink-node` binary runs one MeshNode (`zlink-node peer`); the
//! full pod host (configuration file, gRPC HostAdmin, demo) arrives with the node host issue.
//!
//! ## Layout
//!
//! Implemented:
//!
//! - [`config`] — the spec's default settings ([`config::defaults`]) and the pure rules that
//!   relate settings, such as
//!   [`validate_route_cache_vs_follow`](config::validate_route_cache_vs_follow).
//! - [`transport`] — the ZeroMQ socket pump (one thread per ROUTER socket, bounded queues,
//!   batching) and the transport header (leg, connection epoch, sequence, flow charge).
//! - [`mesh`] — [`MeshNode`](mesh::MeshNode): discovery, admission, liveness, node direct,
//!   credit-based backpressure, typed handlers (see `docs/architecture.md`, "Mesh transport").
//! - [`clientserver`] — the ClientServer Channel: [`ClientServerServer`](clientserver::ClientServerServer)
//!   and [`ClientServerClient`](clientserver::ClientServerClient) over DEALER/ROUTER, the
//!   `0xF2` channel envelope, select-one, drain and discovery (`docs/architecture.md`,
//!   "ClientServer Channel").
//! - [`call`] — request/reply correlation, deadlines, exactly-one terminal completion (pure).
//! - [`jobs`] — the application job queue with pause/resume pressure.
//! - [`select`] — smooth weighted round-robin selection (pure).
//! - [`object`] — the pure cores of object execution: execution queues with lanes, yield debt
//!   and capture; timers as data; the dispatch table with the relocation hooks.
//! - [`routing`] — the resolver (`ReadyRoute` / `Missing` / `Unavailable` / `StoreFailure`)
//!   and the positive route cache with its fences and invalidation triggers.
//!
//! The Location Store and Relocation Store live in the `zlink-store` crate.
//!
//! Planned, each as a pure core with a thin I/O shell (see `docs/architecture.md`):
//!
//! - channels — RouteMesh select-one channels and classic fanout.
//! - `object` — Spots, Actors, factories, serialized execution queues and timers kept as data
//!   (so relocation can capture them), creation and cold activation.
//! - Message Follow (relay of messages that reach a previous owner) on top of [`routing`].
//! - `relocation` — host `Relocate`, capture/restore, chunked state transfer, target-only
//!   cutover CAS and `SafeToShutdown`.
//! - `session` — client STREAM sessions, Actor binding and session relocation (wire 42/43/44).
//! - `presence` — user connection routing over 256 hash slots with a presence authority.
//! - `admin` — the tonic `HostAdmin` gRPC service the operator calls, health and Prometheus
//!   metrics.
//!
//! Wire formats (records, STREAM packets, metadata, durable blobs) are not defined here: they
//! come from [`zlink_protocol`], which is bytes only.
//!
//! ## Time
//!
//! Every timeout of the spec is a setting whose default lives in [`config::defaults`]; tests
//! shorten them to milliseconds and drive the real code paths instead of sleeping.

pub mod call;
pub mod clientserver;
pub mod config;
pub mod jobs;
pub mod mesh;
pub mod object;
pub mod routing;
pub mod select;
pub mod transport;
