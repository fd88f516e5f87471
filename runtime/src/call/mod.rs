//! Request/reply correlation: deadlines and exactly one terminal completion per request
//! (glossary §3 "Reply correlation", wire §11).
//!
//! Everything here is pure logic: no clock (time is a `u64` millisecond parameter), no I/O, no
//! channels. The call shell owns the sockets and the timer and feeds this core.
//!
//! - [`error`] — the closed [`ErrorKind`](error::ErrorKind) set, [`CallError`](error::CallError)
//!   and their mapping to the wire `TerminalStatus`.
//! - [`ids`] — allocators for the per-lifecycle `OperationId`, `ReplyRouteId` and correlation
//!   ID, which never wrap and never repeat.
//! - [`pending`] — the [`PendingTable`](pending::PendingTable) keyed by operation ID and reply
//!   route ID, where the first confirmed terminal event wins and every later one is dropped and
//!   counted.

pub mod error;
pub mod ids;
pub mod pending;
