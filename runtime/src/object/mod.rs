//! Spots and Actors (glossary §1–§3, §5; routing `000_…` §2): the pure cores of object
//! execution, built for relocation.
//!
//! - [`queue`] — one serialized execution queue per object incarnation: application and
//!   lifecycle lanes, yield debt, turns, `Yield`/resume, capture at a handler boundary.
//! - [`timers`] — timers held as data (due time, period, payload), captured with their remaining
//!   time in the durable `relocation-envelope-v1` form.
//! - [`actor_ref`] — `ActorRef`, an Actor incarnation's full route fence (what a session
//!   bind takes).
//! - [`exec`] — the execution shell: handler turns on tokio, `Async` / `Yield`, timers.
//! - [`objects`] — the node-wide table every executor runs its queue in.
//! - [`registry`] — factory registration per stable type, kinds, relocation policies and state
//!   adapters.
//! - [`runtime`] — the object runtime of a MeshNode: creation through the Location Store,
//!   ID-addressed calls on the resolver, target admission.
//! - `work` — one unit of queue work (messages, requests, ticks, control claims), shared by
//!   [`objects`] and [`exec`] without either importing the other.
//! - [`table`] — the node's dispatch table: temporary queue before instance, admission seal
//!   with an unbounded ingress hold, queues that exist before the instance, the atomic switch
//!   from a temporary queue to the real one.
//!
//! The runtime shell (handler turns on tokio, factories, creation, ID-addressed calls) builds
//! on these; see `docs/architecture.md`, "Objects".

pub mod actor_ref;
pub mod exec;
pub mod objects;
pub mod queue;
pub mod registry;
pub mod runtime;
pub mod table;
pub mod timers;

pub use actor_ref::ActorRef;
pub use runtime::ObjectCalls;
mod work;
