//! # zlink
//!
//! The zlink mesh runtime: the library that hosts an application's **Spots** (addressable,
//! stateful logical instances such as a room or a zone) and **Actors** (an entity with its own
//! state and mailbox, such as a player), routes messages to them by global ID, keeps per-object
//! message order, and moves live objects — state, queued work and timers — between nodes
//! without losing a message. This is the crate an application depends on to write its own
//! Spots and Actors; the node host that runs them in a pod (`zlink-node run`), its admin client,
//! the demo and the reference application live in the `zlink-node` crate, whose
//! `zlink::host::run` takes the application's [`object::registry::Registry`].
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
//!   credit-based backpressure, typed handlers (see `docs/architecture.md`, "Mesh transport"),
//!   and RouteMesh Channels with select-one (`channel_send` / `channel_request`).
//! - [`clientserver`] — the ClientServer Channel: [`ClientServerServer`](clientserver::ClientServerServer)
//!   and [`ClientServerClient`](clientserver::ClientServerClient) over DEALER/ROUTER, the
//!   `0xF2` channel envelope, select-one, drain and discovery (`docs/architecture.md`,
//!   "ClientServer Channel").
//! - [`call`] — request/reply correlation, deadlines, exactly-one terminal completion (pure).
//! - [`jobs`] — the application job queue with pause/resume pressure.
//! - [`select`] — smooth weighted round-robin selection (pure).
//! - [`object`] — Spots and Actors: execution queues with lanes, yield debt and capture; timers
//!   as data; the dispatch table with the relocation hooks; handler turns with `Async` /
//!   `Yield`; factory registration; the object runtime (creation and placement through the
//!   Location Store, calls by ID, target admission, Entry Spots, fencing). See
//!   `examples/chat_room.rs`; cold activation of Instance Spots, Logical Multicast and
//!   Actor join / leave between Spots are in [`object::runtime`].
//! - [`routing`] — the resolver (`ReadyRoute` / `Missing` / `Unavailable` / `StoreFailure`)
//!   and the positive route cache with its fences and invalidation triggers.
//! - [`fanout`] — classic fanout: PUB/SUB publisher with the liveness beacon, subscriber with
//!   one SUB socket and one readiness state per publisher, publisher descriptors for discovery
//!   (see `docs/architecture.md`, "Classic fanout").
//! - [`metrics`] — lock-free latency histograms for the Prometheus exposition.
//! - [`session`] — client STREAM sessions: the StreamNode (listener, per-connection task, handler
//!   task) around the pure core of the `zlink-session` crate. Actor binding and session
//!   relocation (wire 38/24/25/36/51, 42/43/44) are still to come.
//!
//! The Location Store and Relocation Store live in the `zlink-store` crate.
//!
//! Planned, each as a pure core with a thin I/O shell (see `docs/architecture.md`):
//!
//! - Message Follow (relay of messages that reach a previous owner) on top of [`routing`].
//! - [`relocation`] — host `Relocate`, capture/restore, chunked state transfer, target-only
//!   cutover CAS and `SafeToShutdown`. Its first pure core, [`relocation::host`] (the host's
//!   relocation lifecycle and SafeToShutdown), exists; the rest comes with the relocation
//!   issue.
//! - `presence` — user connection routing over 256 hash slots with a presence authority.
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
pub mod fanout;
pub mod jobs;
pub mod mesh;
pub mod metrics;
pub mod object;
pub mod relocation;
pub mod routing;
pub mod select;
pub mod session;
pub mod transport;

/// A duration in whole milliseconds (saturating): the one conversion the runtime's
/// millisecond clocks use.
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
