//! Live relocation (issue 17; wire §9–§12, glossary §5 "Relocation"): moving Actors and Spots —
//! state, queued work, timers — between nodes without losing or duplicating a message.
//!
//! Every protocol with steps is a pure state machine here (enums, `now` as an input, no I/O),
//! driven by a thin shell in the object runtime and the node host:
//!
//! - [`host`] — the host's `Relocate` lifecycle: which relocation runs (one at a time,
//!   idempotent by id), what it ends as (`Completed` only when every unit was handed over or
//!   stayed by policy), and when the host is `SafeToShutdown`.
//! - [`follow`] — Message Follow on the previous owner: which records arriving on an old route
//!   are forwarded, to whom, until when; loops and full chains refused.
//! - [`notify`] — `messageFollow` (50) suppression: one notice per stale route and recipient,
//!   not one per followed record.
//!
//! - [`session_legs`] — the coordinator's session legs of a moving unit (issue 19 item 7): a
//!   `sessionRelocationSeal` (42) per bound Actor before the admission seal, the answers
//!   (43) awaited, a 44 `abort` to every sealed leg when the unit ends before relay-ready.
//!
//! - [`capacity`] — whether a node has room for a unit: the source's target filter and the
//!   target's check at Prepare.
//! - [`terminals`] — the target's ledger of a unit's carried requests: each terminal durable
//!   (a published root) before it is relayed, `Completed` / `ForceStopped` / `DataLost`.
//! - [`target`] — the target's assembly of one object's payload from its chunks against the
//!   Prepare's manifest (ordinal, length and CRC-32C checks; no partial restore).
//!
//! To come with the rest of issue 17: `source` (seal, capture, transfer, resolution) and the
//! rest of `target` (prepare checks, restore, relay staging, cutover CAS, switch).

pub mod capacity;
pub mod follow;
pub mod host;
pub mod notify;
pub mod relay;
pub mod session_legs;
pub mod source;
pub mod target;
pub mod terminals;
