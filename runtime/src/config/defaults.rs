//! The spec's default settings, one documented constant each.
//!
//! Every timeout and bound here is a *default*: the node's configuration may override each one
//! (tests run the real code paths with millisecond timings instead of these values). Rules that
//! relate two settings to each other live in [`super`], for example
//! [`validate_route_cache_vs_follow`](super::validate_route_cache_vs_follow).
//!
//! Section references: "routing" is the Spot/Actor routing fragment (`000_…`), "wire" the
//! service wire protocol (`002_…`), "glossary" the glossary (`004_…`).
//!
//! The metadata frame bound (≤ 1,024 bytes, UTF-8, no NUL) is a fixed wire rule rather than a
//! setting, so it is owned and enforced by `zlink_protocol::metadata`, not repeated here.

use std::time::Duration;

/// How long a `ReadyRoute` may stay in the positive route cache (routing §2.2).
///
/// A cache entry is used until the earlier of this age and the owner lease's local admission
/// deadline. `Duration::ZERO` disables the route cache.
pub const ROUTE_CACHE_MAX_AGE: Duration = Duration::from_secs(15);

/// How long an old owner keeps a Message Follow route after a relocation (routing §2.5).
///
/// During this time a message arriving on the previous route is relayed to the new owner.
/// `Duration::ZERO` disables Message Follow.
pub const MESSAGE_FOLLOW_DURATION: Duration = Duration::from_secs(30);

/// The least amount by which [`ROUTE_CACHE_MAX_AGE`] must be shorter than
/// [`MESSAGE_FOLLOW_DURATION`] when both are positive (routing §2.5).
///
/// It exists so that a cached route to the old owner expires before the detour path closes.
pub const ROUTE_CACHE_FOLLOW_MARGIN: Duration = Duration::from_secs(5);

/// The longest Message Follow chain, in hops (routing §2.5; wire §3 allows hop counts 1..=8).
pub const MESSAGE_FOLLOW_MAX_HOPS: u8 = 8;

/// How often each side of an admitted connection sends a `livenessProbe` (wire §5).
pub const LIVENESS_PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// How long after the last matching `livenessAck` a connection becomes not ready (wire §5).
pub const LIVENESS_DEADLINE: Duration = Duration::from_secs(15);

/// How often a classic fanout publisher sends its liveness beacon (wire §5).
///
/// The publisher cannot receive ACKs, so it beacons regardless of application traffic.
pub const FANOUT_BEACON_INTERVAL: Duration = Duration::from_secs(5);

/// How long after its last valid receive a classic fanout subscriber marks that publisher not
/// ready (wire §5).
pub const FANOUT_SUBSCRIBER_NOT_READY_AFTER: Duration = Duration::from_secs(15);

/// How long a session owner waits for `sessionRelocationRoute` (44) before it closes the
/// physical session and cleans up binding, held messages and seal state (wire §10).
pub const SESSION_RELOCATION_SEAL_TIMEOUT: Duration = Duration::from_millis(3_000);

/// How long a relocation source waits for the `sessionRelocationSealed` (43) answers to the
/// `sessionRelocationSeal`s (42) of a unit's bound Actors before the unit fails (**ours**; the
/// spec names no value: "no 43 by its deadline → explicit failure before relay-ready"). A third
/// of the session owner's seal timeout, so a unit that proceeds late still has most of it.
pub const SESSION_SEAL_ANSWER_WAIT: Duration = Duration::from_millis(1_000);

/// How long the relocation target waits for `relocationCutover` (34) after its restore-ready
/// reply before it starts the owner CAS anyway (wire §9, §10).
///
/// The same value is the source's cutover retransmission window.
pub const RELOCATION_CUTOVER_WAIT_TIMEOUT: Duration = Duration::from_millis(1_000);

/// The largest relocation state chunk a source sends, in bytes (glossary, relocation chunk).
///
/// The effective chunk size is the smallest of this, the target's advertised receive limit and
/// the effective in-flight payload budget.
pub const RELOCATION_PAYLOAD_CHUNK_LIMIT: u64 = 256 * 1024;

/// The relocation payload bytes that may be in flight on one connection (glossary,
/// `RelocationInFlightPayloadBudget`). `0` means no per-connection budget is applied.
pub const RELOCATION_IN_FLIGHT_PAYLOAD_BUDGET: u64 = 16 * 1024 * 1024;

/// The largest complete client message a StreamNode accepts: header plus payload, without the
/// 6-byte prefix (glossary, `MaxMessageSize`). `0` means unlimited.
pub const STREAM_MAX_MESSAGE_SIZE: u64 = 64 * 1024;

/// The selection weight of a server or placement target unless configured (glossary, Weight).
pub const DEFAULT_WEIGHT: u16 = 100;

/// The largest allowed selection weight (glossary, Weight). `0` means "not selected for new
/// work" without draining the target.
pub const MAX_WEIGHT: u16 = 10_000;

/// Application job queue pressure: the host pauses intake once this percentage of permits is
/// in use (glossary, host pressure state).
pub const JOB_QUEUE_PAUSE_PERCENT: u8 = 80;

/// Application job queue pressure: the host resumes intake once permits in use fall to this
/// percentage. Between the two boundaries the current state is kept (glossary).
pub const JOB_QUEUE_RESUME_PERCENT: u8 = 60;

/// The largest complete request envelope a creation record refers to, in bytes (wire §7, §8).
pub const ACTIVATION_ENVELOPE_MAX_BYTES: u64 = 1024 * 1024;

/// How long a creation operation's terminal result is kept after the original deadline
/// (glossary, creation reservation).
pub const CREATION_TERMINAL_RETENTION_AFTER_DEADLINE: Duration = Duration::from_secs(5 * 60);

// Relations between defaults that must hold for any sane configuration, checked at compile
// time so a typo in the table above cannot ship.
const _: () = assert!(DEFAULT_WEIGHT > 0 && DEFAULT_WEIGHT <= MAX_WEIGHT);
const _: () = assert!(JOB_QUEUE_RESUME_PERCENT < JOB_QUEUE_PAUSE_PERCENT);
const _: () = assert!(JOB_QUEUE_PAUSE_PERCENT <= 100);

/// Fencing margin (glossary §8 "Fencing deadline"): an owner whose lease renewals fail stops
/// admitting new work this long before its last valid lease deadline, and a positive route
/// cache entry never outlives that admission deadline (routing §2.2). It must exceed the worst
/// clock step between a host's timer and the store's clock plus one store round trip.
pub const FENCING_MARGIN: Duration = Duration::from_secs(2);

/// `relocation.terminal_retention_ms`: how long a terminal root of carried requests stays in
/// the Relocation Store (issue 17 item 9; a `ForceStopped` one is kept that long).
pub const TERMINAL_RETENTION: Duration = Duration::from_millis(300_000);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::validate_route_cache_vs_follow;

    #[test]
    fn default_route_cache_and_message_follow_satisfy_the_margin_rule() {
        assert_eq!(
            validate_route_cache_vs_follow(ROUTE_CACHE_MAX_AGE, MESSAGE_FOLLOW_DURATION),
            Ok(())
        );
    }
}
