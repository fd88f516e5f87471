//! # zlink-store
//!
//! The Location Store and the Relocation Store (glossary §1; wire §7, §9, §11): the single
//! source of truth for who owns what, behind two traits with two providers.
//!
//! * [`location`] — the [`LocationStore`] and [`RelocationStore`] contracts: owner leases with
//!   fencing deadlines, fenced term leases, descriptors with revision ordering, RID claims,
//!   capacity, durable authority (reserve / commit / abort / transfer / preserve / state /
//!   bounded aggregate commit / fenced delete) and the store-recovery signal.
//! * [`memory`] — the embedded provider and reference implementation (demo, single process,
//!   unit tests), on a clock tests can turn.
//! * [`redis`] — the production provider: every conditional operation is one Lua script call.
//! * [`conformance`] — one suite, run against both providers.
//! * [`types`], [`error`], [`clock`] — the values, the closed error set and the clocks.
//!
//! This crate is split from `zlink-node` because it is a clean boundary (storage semantics
//! only, no mesh) and keeps the Redis client out of crates that do not need it.

pub mod clock;
pub mod conformance;
pub mod error;
pub mod location;
pub mod memory;
pub mod redis;
pub mod types;
mod validate;

pub use error::{Result, StaleReason, StoreError};
pub use location::{LocationStore, RelocationStore};
pub use memory::MemoryStore;
