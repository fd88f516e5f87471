//! # zlink-node
//!
//! The product around the [`zlink`] runtime: the node host that runs an application's Spots
//! and Actors in a pod, plus the tools and the reference application that ship in the
//! `zlink-node` binary.
//!
//! - [`host`] — the node host behind `zlink-node run`: YAML configuration with `ZLINK_*`
//!   overrides, lifecycle and drain, the gRPC `HostAdmin` service (from `zlink-admin-api`) with
//!   bearer auth and health, HTTP `/healthz` `/readyz` `/metrics` (see `docs/operations.md`).
//!   [`host::run`] takes the application's registry, so a user's own binary hosts its own
//!   object types with the same configuration, admin API and probes (see
//!   `examples/own_objects.rs`).
//! - [`refapp`] — the reference application: the `room` User Spot, the `player` Actor and the
//!   `counter` Instance Spot with per-source sequence tracking (gaps and duplicates per ID),
//!   state preserved as versioned JSON.
//! - [`demo`] — `zlink-node demo` as a library: the reference application on an in-process
//!   mesh, numbered traffic through every node, the per-ID exactly-once check and its report.
//!
//! The crate graph and why it is cut this way are in `docs/architecture.md`, "Crates".

pub mod demo;
pub mod host;
pub mod refapp;
