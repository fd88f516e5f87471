//! # zlink-node
//!
//! The zlink mesh runtime: the library that hosts an application's **Spots** (addressable,
//! stateful logical instances such as a room or a zone) and **Actors** (an entity with its own
//! state and mailbox, such as a player), routes messages to them by global ID, keeps per-object
//! message order, and moves live objects — state, queued work and timers — between nodes
//! without losing a message. The `zlink-node` binary that hosts it in a pod arrives with the
//! node host issue; today the crate holds its configuration defaults.
//!
//! ## Layout
//!
//! Implemented:
//!
//! - [`config`] — the spec's default settings ([`config::defaults`]) and the pure rules that
//!   relate settings, such as
//!   [`validate_route_cache_vs_follow`](config::validate_route_cache_vs_follow).
//!
//! Planned, each as a pure core with a thin I/O shell (see `docs/architecture.md`):
//!
//! - `store` — the `LocationStore` and `RelocationStore` traits with their contracts, the
//!   in-memory provider (embedded default, unit tests) and the Redis provider (one Lua script per
//!   conditional write, store-issued generations, Redis `TIME`), sharing one conformance suite.
//! - `transport` — ZeroMQ ROUTER mesh sockets and PUB/SUB classic fanout, each socket owned by
//!   one pump thread with a bounded outbound queue; peer admission and liveness.
//! - `mesh` — `MeshNode`, descriptors, discovery, node direct, channels (select-one, multicast).
//! - `call` — request/reply correlation, deadlines, exactly-one terminal completion.
//! - `object` — Spots, Actors, factories, serialized execution queues and timers kept as data
//!   (so relocation can capture them), creation and cold activation.
//! - `routing` — the resolver with its four closed results (`ReadyRoute`, `Missing`,
//!   `Unavailable`, `StoreFailure`), the positive route cache and Message Follow.
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
pub mod config;
pub mod jobs;
pub mod mesh;
pub mod select;
pub mod transport;
