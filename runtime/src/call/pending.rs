//! The pending-request table: which requests await a terminal result, and which event completes
//! each (glossary §3 "Reply correlation", wire §11).
//!
//! # Keying
//!
//! An entry is keyed by its [`PendingKey`] — the request's `OperationId` and `ReplyRouteId`,
//! both unique within the source owner lifecycle (wire §11) — and must also match its
//! correlation ID. It is **not** keyed by the peer the request went to: after Message Follow or
//! a reply relay the reply arrives from another node, and it is still the reply.
//!
//! # Per-entry states
//!
//! ```text
//!                insert(key, correlation, target, deadline)
//!                                 │
//!                                 ▼
//!   reply, same key but  ┌──────────────────┐
//!   other correlation ──►│     Pending      │
//!   (dropped, counted;   └──────────────────┘
//!    stays Pending)               │ first confirmed event wins:
//!                                 │   reply (key + correlation match) → Ok(payload) or its error
//!                                 │   expire(now ≥ deadline)          → DeadlineExceeded
//!                                 │   cancel(key)                     → Cancelled
//!                                 │   peer_lost(target lifecycle)     → Unavailable
//!                                 │   shutdown()                      → ShuttingDown
//!                                 ▼
//!                        ┌──────────────────┐
//!                        │    Completed     │  the entry is removed and its waker handed back
//!                        └──────────────────┘  in a Completion; a later reply or cancel finds
//!                                                no entry and is dropped and counted
//! ```
//!
//! Completed entries are removed rather than kept in a terminal state, so the table's size is
//! the number of requests in flight, and "exactly one terminal result" follows from each
//! removal happening once.
//!
//! # Guarantees
//!
//! - Every inserted request completes exactly once, with the first of the events above that
//!   applies to it; its waker comes back in exactly one [`Completion`].
//! - Outputs are deterministic: batches ([`expire`](PendingTable::expire),
//!   [`peer_lost`](PendingTable::peer_lost), [`shutdown`](PendingTable::shutdown)) come in
//!   (deadline, key) order.
//! - The table holds at most its capacity; [`insert`](PendingTable::insert) refuses more with
//!   `Backpressured`, so the shell must bound its in-flight requests.
//!
//! # Assumptions
//!
//! The table has no clock. The shell fixes one absolute end-to-end deadline at submit, checks
//! it is still in the future before inserting, arms one timer at
//! [`next_deadline`](PendingTable::next_deadline) and calls [`expire`](PendingTable::expire)
//! when it fires. An entry inserted with a deadline already past completes on the next
//! `expire`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::marker::PhantomData;

use zlink_protocol::generated::OperationId;
use zlink_protocol::ids::validate_correlation_id;

use super::error::{CallError, ErrorKind, Result};

/// The identity of a pending request: its `OperationId` and `ReplyRouteId` (wire §11).
///
/// Stored as three words because the generated `OperationId` does not implement `Hash` or
/// `Ord`; [`operation_id`](Self::operation_id) rebuilds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PendingKey {
    operation_high: u64,
    operation_low: u64,
    reply_route_id: u64,
}

impl PendingKey {
    /// The key of the request with `operation_id` and `reply_route_id`.
    pub const fn new(operation_id: &OperationId, reply_route_id: u64) -> Self {
        Self {
            operation_high: operation_id.high,
            operation_low: operation_id.low,
            reply_route_id,
        }
    }

    /// The request's operation ID.
    pub const fn operation_id(&self) -> OperationId {
        OperationId {
            high: self.operation_high,
            low: self.operation_low,
        }
    }

    /// The request's reply route ID.
    pub const fn reply_route_id(&self) -> u64 {
        self.reply_route_id
    }

    /// Both IDs are non-zero, as wire §11 requires of every request.
    const fn is_valid(&self) -> bool {
        (self.operation_high != 0 || self.operation_low != 0) && self.reply_route_id != 0
    }
}

/// A peer runtime lifecycle: its Routing ID and lifecycle generation.
///
/// Opaque to the table, which only compares it: a request is lost with its target only when
/// both the RID and the lifecycle generation match, so a restarted peer under the same RID is a
/// different peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerRef {
    /// The peer's Routing ID (glossary §9).
    pub rid: String,
    /// The peer's lifecycle generation (glossary §6).
    pub lifecycle_generation: u64,
}

impl PeerRef {
    /// The peer with `rid` in lifecycle `lifecycle_generation`.
    pub fn new(rid: impl Into<String>, lifecycle_generation: u64) -> Self {
        Self {
            rid: rid.into(),
            lifecycle_generation,
        }
    }
}

/// The correlation fields of a received reply and its outcome.
///
/// `R` is the success payload the shell decodes from the reply; an error reply carries the
/// [`CallError`] built from its status and detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyFields<R> {
    /// `Reply.operationId`.
    pub operation_id: OperationId,
    /// `Reply.replyRouteId`.
    pub reply_route_id: u64,
    /// `Reply.correlationId`.
    pub correlation_id: String,
    /// The payload for `TerminalStatus::Ok`, else the error the reply reports.
    pub outcome: Result<R>,
}

impl<R> ReplyFields<R> {
    /// The key this reply is addressed to.
    pub const fn key(&self) -> PendingKey {
        PendingKey::new(&self.operation_id, self.reply_route_id)
    }
}

/// A request's single terminal result, with everything the shell needs to wake its caller.
#[derive(Debug)]
pub struct Completion<T, R> {
    /// The completed request.
    pub key: PendingKey,
    /// Its correlation ID.
    pub correlation_id: String,
    /// The peer the request was sent to.
    pub target: PeerRef,
    /// Its absolute deadline in milliseconds.
    pub deadline_ms: u64,
    /// The peer the reply came from, when a reply completed it; differs from `target` after
    /// Message Follow or a relay. `None` for local terminals (timeout, cancel, peer loss,
    /// shutdown).
    pub replied_by: Option<PeerRef>,
    /// The terminal result.
    pub outcome: Result<R>,
    /// What the shell handed in to wake the caller.
    pub waker: T,
}

/// Why a reply matched no pending request (a late reply, glossary §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// No request with this key is pending: it already completed, or never existed.
    NotPending,
    /// A request with this key is pending but its correlation ID differs; the request stays
    /// pending.
    CorrelationMismatch,
}

/// What [`PendingTable::on_reply`] did with a reply.
#[derive(Debug)]
pub enum Delivered<T, R> {
    /// The reply completed its request.
    Completed(Completion<T, R>),
    /// The reply matched nothing and was counted as late; it is handed back for logging.
    Dropped {
        /// Why it matched nothing.
        reason: DropReason,
        /// The reply itself.
        reply: ReplyFields<R>,
    },
}

/// Counters for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Replies that matched no pending request, whatever the reason (the spec's late replies).
    pub late_replies: u64,
    /// The subset of `late_replies` whose key was pending under another correlation ID.
    pub correlation_mismatches: u64,
    /// Cancels for a request that was not pending (already completed, or unknown).
    pub late_cancels: u64,
    /// Replies that completed a request and came from a peer other than its target.
    pub relayed_replies: u64,
    /// Requests completed with a success reply.
    pub completed_ok: u64,
    /// Requests completed by a reply (success or error), as opposed to a local terminal.
    pub completed_by_reply: u64,
    /// Requests completed with each error kind, indexed by declaration order.
    completed_by: [u64; ErrorKind::ALL.len()],
}

impl Stats {
    /// Requests completed with an error of `kind`, local (timeout, cancel, peer loss,
    /// shutdown) or from an error reply.
    pub const fn completed_by(&self, kind: ErrorKind) -> u64 {
        self.completed_by[kind as usize]
    }

    /// Requests completed in total.
    pub fn completed(&self) -> u64 {
        self.completed_ok + self.completed_by.iter().sum::<u64>()
    }
}

/// One pending request.
#[derive(Debug)]
struct Entry<T> {
    correlation_id: String,
    target: PeerRef,
    deadline_ms: u64,
    waker: T,
}

/// The requests awaiting a terminal result, generic over the caller's waker `T` (for example a
/// oneshot sender) and the success payload `R`.
#[derive(Debug)]
pub struct PendingTable<T, R> {
    entries: HashMap<PendingKey, Entry<T>>,
    /// Correlation IDs of the pending entries, for the uniqueness check at insert.
    correlation_ids: HashSet<String>,
    /// Every pending entry once, by deadline: the timer index and the deterministic batch order.
    deadlines: BTreeSet<(u64, PendingKey)>,
    /// Most entries held at once.
    capacity: usize,
    /// Set by [`shutdown`](Self::shutdown); refuses every later insert.
    shutting_down: bool,
    stats: Stats,
    _reply: PhantomData<fn() -> R>,
}

impl<T, R> PendingTable<T, R> {
    /// An empty table holding at most `capacity` pending requests.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            correlation_ids: HashSet::new(),
            deadlines: BTreeSet::new(),
            capacity,
            shutting_down: false,
            stats: Stats::default(),
            _reply: PhantomData,
        }
    }

    /// Most pending requests the table holds.
    pub const fn capacity(&self) -> usize {
        self.capacity
    }

    /// Pending requests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No request is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The request with `key` is pending.
    pub fn contains(&self, key: &PendingKey) -> bool {
        self.entries.contains_key(key)
    }

    /// [`shutdown`](Self::shutdown) has run.
    pub const fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// The counters.
    pub const fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Replies that matched no pending request.
    pub const fn late_replies(&self) -> u64 {
        self.stats.late_replies
    }

    /// Requests completed with an error of `kind`.
    pub const fn completed_by(&self, kind: ErrorKind) -> u64 {
        self.stats.completed_by(kind)
    }

    /// The earliest deadline among pending requests: when the shell's single timer should fire.
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|(deadline_ms, _)| *deadline_ms)
    }

    /// Register a submitted request. `deadline_ms` is its absolute end-to-end deadline.
    ///
    /// # Errors
    /// - [`ErrorKind::ShuttingDown`] after [`shutdown`](Self::shutdown).
    /// - [`ErrorKind::InvalidOperation`] for a zero operation or reply route ID, a correlation
    ///   ID that is not 1..=64 bytes of printable ASCII, or a key or correlation ID already
    ///   pending.
    /// - [`ErrorKind::Backpressured`] when `capacity` requests are pending.
    ///
    /// Nothing is inserted on error.
    pub fn insert(
        &mut self,
        key: PendingKey,
        correlation_id: String,
        target: PeerRef,
        deadline_ms: u64,
        waker: T,
    ) -> Result<()> {
        if self.shutting_down {
            return Err(CallError::new(
                ErrorKind::ShuttingDown,
                "runtime is shutting down",
            ));
        }
        if !key.is_valid() {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "operation ID and reply route ID must be non-zero (wire §11)",
            ));
        }
        if let Err(error) = validate_correlation_id(&correlation_id) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                error.to_string(),
            ));
        }
        if self.entries.contains_key(&key) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "operation ID and reply route ID already pending",
            ));
        }
        if self.correlation_ids.contains(&correlation_id) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "correlation ID already pending",
            ));
        }
        if self.entries.len() >= self.capacity {
            return Err(CallError::new(
                ErrorKind::Backpressured,
                format!("{} requests already pending", self.capacity),
            ));
        }
        self.correlation_ids.insert(correlation_id.clone());
        self.deadlines.insert((deadline_ms, key));
        self.entries.insert(
            key,
            Entry {
                correlation_id,
                target,
                deadline_ms,
                waker,
            },
        );
        Ok(())
    }

    /// Match a received reply to its pending request.
    ///
    /// The reply completes the request only when both its key and its correlation ID match;
    /// otherwise it is a late reply, counted and handed back in [`Delivered::Dropped`]. The
    /// sender `from` is not checked against the request's target: after Message Follow or a
    /// reply relay the reply legitimately comes from another node, and the key plus correlation
    /// ID already identify the request. `from` is recorded in
    /// [`Completion::replied_by`].
    pub fn on_reply(&mut self, reply: ReplyFields<R>, from: &PeerRef) -> Delivered<T, R> {
        let key = reply.key();
        let Some(entry) = self.entries.remove(&key) else {
            self.stats.late_replies += 1;
            return Delivered::Dropped {
                reason: DropReason::NotPending,
                reply,
            };
        };
        if entry.correlation_id != reply.correlation_id {
            // Not this request's reply: the request stays pending, untouched.
            self.entries.insert(key, entry);
            self.stats.late_replies += 1;
            self.stats.correlation_mismatches += 1;
            return Delivered::Dropped {
                reason: DropReason::CorrelationMismatch,
                reply,
            };
        }
        if entry.target != *from {
            self.stats.relayed_replies += 1;
        }
        Delivered::Completed(self.finish(key, entry, reply.outcome, Some(from.clone())))
    }

    /// Complete every request whose deadline is at or before `now_ms` with
    /// [`ErrorKind::DeadlineExceeded`], earliest deadline first.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Completion<T, R>> {
        let due: Vec<PendingKey> = self
            .deadlines
            .iter()
            .take_while(|(deadline_ms, _)| *deadline_ms <= now_ms)
            .map(|(_, key)| *key)
            .collect();
        due.into_iter()
            .filter_map(|key| {
                let error = CallError::new(
                    ErrorKind::DeadlineExceeded,
                    format!("no reply by the deadline (now {now_ms} ms)"),
                );
                self.complete(key, Err(error), None)
            })
            .collect()
    }

    /// Complete the request with `key` with [`ErrorKind::DeadlineExceeded`] because the shell's
    /// per-request timer fired; `None` when a racing event already completed it (then that
    /// event's result is the terminal one).
    pub fn expire_key(&mut self, key: &PendingKey) -> Option<Completion<T, R>> {
        let error = CallError::new(ErrorKind::DeadlineExceeded, "no reply by the deadline");
        self.complete(*key, Err(error), None)
    }

    /// Complete the request with `key` with [`ErrorKind::Cancelled`]; `None` (counted as a late
    /// cancel) when it is not pending.
    pub fn cancel(&mut self, key: &PendingKey) -> Option<Completion<T, R>> {
        let error = CallError::new(ErrorKind::Cancelled, "cancelled by the requester");
        let completion = self.complete(*key, Err(error), None);
        if completion.is_none() {
            self.stats.late_cancels += 1;
        }
        completion
    }

    /// Complete with [`ErrorKind::Unavailable`] every request whose target is exactly `peer`
    /// (same RID and lifecycle generation), earliest deadline first.
    ///
    /// Requests sent to another peer are untouched even if their reply might have been relayed
    /// through `peer`: the table knows targets, not relay paths, and such a request still ends
    /// by its reply or its deadline. Costs one pass over the pending requests.
    pub fn peer_lost(&mut self, peer: &PeerRef) -> Vec<Completion<T, R>> {
        let lost: Vec<PendingKey> = self
            .deadlines
            .iter()
            .map(|(_, key)| *key)
            .filter(|key| {
                self.entries
                    .get(key)
                    .is_some_and(|entry| entry.target == *peer)
            })
            .collect();
        lost.into_iter()
            .filter_map(|key| {
                let error = CallError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "peer {} (lifecycle {}) ended before replying",
                        peer.rid, peer.lifecycle_generation
                    ),
                );
                self.complete(key, Err(error), None)
            })
            .collect()
    }

    /// Whether any request whose target is exactly `peer` is still pending. One pass over the
    /// pending requests.
    pub fn has_pending_for(&self, peer: &PeerRef) -> bool {
        self.entries.values().any(|entry| entry.target == *peer)
    }

    /// Complete every pending request with [`ErrorKind::ShuttingDown`], earliest deadline
    /// first, and refuse every later [`insert`](Self::insert). Idempotent.
    pub fn shutdown(&mut self) -> Vec<Completion<T, R>> {
        self.shutting_down = true;
        let all: Vec<PendingKey> = self.deadlines.iter().map(|(_, key)| *key).collect();
        all.into_iter()
            .filter_map(|key| {
                let error = CallError::new(ErrorKind::ShuttingDown, "runtime is shutting down");
                self.complete(key, Err(error), None)
            })
            .collect()
    }

    /// Remove the entry with `key` and build its completion; `None` when it is not pending.
    fn complete(
        &mut self,
        key: PendingKey,
        outcome: Result<R>,
        replied_by: Option<PeerRef>,
    ) -> Option<Completion<T, R>> {
        let entry = self.entries.remove(&key)?;
        Some(self.finish(key, entry, outcome, replied_by))
    }

    /// Drop the indexes of an entry already removed from `entries`, count its outcome and
    /// build its completion.
    fn finish(
        &mut self,
        key: PendingKey,
        entry: Entry<T>,
        outcome: Result<R>,
        replied_by: Option<PeerRef>,
    ) -> Completion<T, R> {
        self.correlation_ids.remove(&entry.correlation_id);
        self.deadlines.remove(&(entry.deadline_ms, key));
        match &outcome {
            Ok(_) => self.stats.completed_ok += 1,
            Err(error) => self.stats.completed_by[error.kind() as usize] += 1,
        }
        if replied_by.is_some() {
            self.stats.completed_by_reply += 1;
        }
        Completion {
            key,
            correlation_id: entry.correlation_id,
            target: entry.target,
            deadline_ms: entry.deadline_ms,
            replied_by,
            outcome,
            waker: entry.waker,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashSet;

    use super::super::ids::{CorrelationIdAllocator, OperationIdAllocator, ReplyRouteIdAllocator};
    use super::*;

    /// A request as the tests submit it.
    struct Submitted {
        key: PendingKey,
        correlation_id: String,
        target: PeerRef,
        deadline_ms: u64,
    }

    /// Issues requests the way the shell does, from per-lifecycle allocators.
    struct Requester {
        operations: OperationIdAllocator,
        routes: ReplyRouteIdAllocator,
        correlations: CorrelationIdAllocator,
    }

    impl Requester {
        fn new() -> Self {
            Self {
                operations: OperationIdAllocator::new(),
                routes: ReplyRouteIdAllocator::new(),
                correlations: CorrelationIdAllocator::new("t-").unwrap(),
            }
        }

        fn submit<R>(
            &mut self,
            table: &mut PendingTable<usize, R>,
            waker: usize,
            target: &PeerRef,
            deadline_ms: u64,
        ) -> Submitted {
            let operation_id = self.operations.allocate().unwrap();
            let key = PendingKey::new(&operation_id, self.routes.allocate().unwrap());
            let correlation_id = self.correlations.allocate().unwrap();
            table
                .insert(
                    key,
                    correlation_id.clone(),
                    target.clone(),
                    deadline_ms,
                    waker,
                )
                .unwrap();
            Submitted {
                key,
                correlation_id,
                target: target.clone(),
                deadline_ms,
            }
        }
    }

    fn reply_to<R>(request: &Submitted, outcome: Result<R>) -> ReplyFields<R> {
        ReplyFields {
            operation_id: request.key.operation_id(),
            reply_route_id: request.key.reply_route_id(),
            correlation_id: request.correlation_id.clone(),
            outcome,
        }
    }

    fn completed<T, R>(delivered: Delivered<T, R>) -> Completion<T, R> {
        match delivered {
            Delivered::Completed(completion) => completion,
            Delivered::Dropped { reason, .. } => panic!("reply dropped: {reason:?}"),
        }
    }

    fn dropped<T, R>(delivered: Delivered<T, R>) -> DropReason {
        match delivered {
            Delivered::Completed(completion) => panic!("completed {:?}", completion.key),
            Delivered::Dropped { reason, .. } => reason,
        }
    }

    fn kind_of<R>(outcome: &Result<R>) -> Option<ErrorKind> {
        outcome.as_ref().err().map(CallError::kind)
    }

    fn node(name: &str) -> PeerRef {
        PeerRef::new(name, 1)
    }

    #[test]
    fn matching_reply_completes_the_request_with_its_payload() {
        let mut table = PendingTable::new(8);
        let request = Requester::new().submit(&mut table, 7, &node("a"), 100);
        let completion = completed(table.on_reply(reply_to(&request, Ok("pong")), &node("a")));
        assert_eq!(completion.waker, 7);
        assert_eq!(completion.outcome, Ok("pong"));
        assert_eq!(completion.key, request.key);
        assert_eq!(completion.correlation_id, request.correlation_id);
        assert_eq!(completion.target, request.target);
        assert_eq!(completion.deadline_ms, request.deadline_ms);
        assert_eq!(completion.replied_by, Some(node("a")));
        assert!(table.is_empty());
        assert_eq!(table.next_deadline(), None);
        assert_eq!(table.stats().completed_ok, 1);
        assert_eq!(table.stats().relayed_replies, 0);
    }

    #[test]
    fn reply_from_another_node_after_message_follow_is_accepted() {
        let mut table = PendingTable::new(8);
        let request = Requester::new().submit(&mut table, 0, &node("a"), 100);
        let completion = completed(table.on_reply(reply_to(&request, Ok(())), &node("b")));
        assert_eq!(completion.replied_by, Some(node("b")));
        assert_eq!(completion.target, node("a"));
        assert_eq!(table.stats().relayed_replies, 1);
    }

    #[test]
    fn error_reply_completes_with_its_kind() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let request = Requester::new().submit(&mut table, 0, &node("a"), 100);
        let error = CallError::new(ErrorKind::HandlerFailed, "boom");
        let completion = completed(table.on_reply(reply_to(&request, Err(error)), &node("a")));
        assert_eq!(kind_of(&completion.outcome), Some(ErrorKind::HandlerFailed));
        assert_eq!(table.completed_by(ErrorKind::HandlerFailed), 1);
    }

    #[test]
    fn reply_with_another_correlation_id_is_late_and_leaves_the_request_pending() {
        let mut table = PendingTable::new(8);
        let request = Requester::new().submit(&mut table, 0, &node("a"), 100);
        let mut forged = reply_to(&request, Ok(1));
        forged.correlation_id = "other".to_owned();
        assert_eq!(
            dropped(table.on_reply(forged, &node("a"))),
            DropReason::CorrelationMismatch
        );
        assert!(table.contains(&request.key));
        assert_eq!(table.late_replies(), 1);
        assert_eq!(table.stats().correlation_mismatches, 1);
        assert_eq!(
            completed(table.on_reply(reply_to(&request, Ok(2)), &node("a"))).outcome,
            Ok(2)
        );
    }

    #[test]
    fn reply_for_an_unknown_key_is_late_and_handed_back() {
        let mut table = PendingTable::<usize, u32>::new(8);
        let reply = ReplyFields {
            operation_id: OperationId { high: 9, low: 9 },
            reply_route_id: 9,
            correlation_id: "x".to_owned(),
            outcome: Ok(5),
        };
        match table.on_reply(reply.clone(), &node("a")) {
            Delivered::Dropped {
                reason,
                reply: back,
            } => {
                assert_eq!(reason, DropReason::NotPending);
                assert_eq!(back, reply);
            }
            Delivered::Completed(_) => panic!("unknown key completed"),
        }
        assert_eq!(table.late_replies(), 1);
        assert_eq!(table.stats().correlation_mismatches, 0);
    }

    #[test]
    fn duplicate_reply_after_completion_is_late() {
        let mut table = PendingTable::new(8);
        let request = Requester::new().submit(&mut table, 0, &node("a"), 100);
        completed(table.on_reply(reply_to(&request, Ok(1)), &node("a")));
        assert_eq!(
            dropped(table.on_reply(reply_to(&request, Ok(2)), &node("a"))),
            DropReason::NotPending
        );
        assert_eq!(table.late_replies(), 1);
        assert_eq!(table.stats().completed(), 1);
    }

    #[test]
    fn expire_completes_only_requests_due_by_now_in_deadline_order() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let mut requester = Requester::new();
        for (waker, deadline) in [(0, 30), (1, 10), (2, 20), (3, 50)] {
            requester.submit(&mut table, waker, &node("a"), deadline);
        }
        assert_eq!(table.next_deadline(), Some(10));
        assert!(table.expire(9).is_empty());
        let due = table.expire(30);
        assert_eq!(due.iter().map(|c| c.waker).collect::<Vec<_>>(), [1, 2, 0]);
        assert!(
            due.iter()
                .all(|c| kind_of(&c.outcome) == Some(ErrorKind::DeadlineExceeded))
        );
        assert_eq!(table.next_deadline(), Some(50));
        assert_eq!(table.len(), 1);
        assert_eq!(table.completed_by(ErrorKind::DeadlineExceeded), 3);
    }

    #[test]
    fn deadline_equal_to_now_has_passed() {
        let mut table = PendingTable::<usize, ()>::new(8);
        Requester::new().submit(&mut table, 0, &node("a"), 10);
        assert_eq!(table.expire(10).len(), 1);
    }

    #[test]
    fn next_deadline_follows_completions() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let mut requester = Requester::new();
        let early = requester.submit(&mut table, 0, &node("a"), 10);
        requester.submit(&mut table, 1, &node("a"), 20);
        table.cancel(&early.key).unwrap();
        assert_eq!(table.next_deadline(), Some(20));
    }

    #[test]
    fn cancel_completes_once_and_a_second_cancel_is_late() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let request = Requester::new().submit(&mut table, 4, &node("a"), 100);
        let completion = table.cancel(&request.key).unwrap();
        assert_eq!(completion.waker, 4);
        assert_eq!(kind_of(&completion.outcome), Some(ErrorKind::Cancelled));
        assert!(table.cancel(&request.key).is_none());
        assert_eq!(table.stats().late_cancels, 1);
        assert_eq!(
            dropped(table.on_reply(reply_to(&request, Ok(())), &node("a"))),
            DropReason::NotPending
        );
    }

    #[test]
    fn peer_lost_completes_only_requests_to_that_peer_lifecycle() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let mut requester = Requester::new();
        requester.submit(&mut table, 0, &PeerRef::new("a", 1), 100);
        requester.submit(&mut table, 1, &PeerRef::new("a", 2), 100);
        requester.submit(&mut table, 2, &PeerRef::new("b", 1), 100);
        requester.submit(&mut table, 3, &PeerRef::new("a", 1), 50);
        let lost = table.peer_lost(&PeerRef::new("a", 1));
        assert_eq!(lost.iter().map(|c| c.waker).collect::<Vec<_>>(), [3, 0]);
        assert!(
            lost.iter()
                .all(|c| kind_of(&c.outcome) == Some(ErrorKind::Unavailable))
        );
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn peer_lost_leaves_requests_whose_reply_is_relayed_through_that_peer() {
        let mut table = PendingTable::new(8);
        let request = Requester::new().submit(&mut table, 0, &node("a"), 100);
        assert!(table.peer_lost(&node("relay")).is_empty());
        assert_eq!(
            completed(table.on_reply(reply_to(&request, Ok(1)), &node("b"))).outcome,
            Ok(1)
        );
    }

    #[test]
    fn shutdown_completes_everything_and_refuses_new_requests() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let mut requester = Requester::new();
        requester.submit(&mut table, 0, &node("a"), 20);
        requester.submit(&mut table, 1, &node("b"), 10);
        let all = table.shutdown();
        assert_eq!(all.iter().map(|c| c.waker).collect::<Vec<_>>(), [1, 0]);
        assert!(
            all.iter()
                .all(|c| kind_of(&c.outcome) == Some(ErrorKind::ShuttingDown))
        );
        assert!(table.is_empty());
        assert!(table.is_shutting_down());
        assert!(table.shutdown().is_empty());
        let key = PendingKey::new(&OperationId { high: 0, low: 99 }, 99);
        let error = table
            .insert(key, "c".to_owned(), node("a"), 100, 9)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ShuttingDown);
    }

    #[test]
    fn insert_rejects_a_key_already_pending() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let request = Requester::new().submit(&mut table, 0, &node("a"), 100);
        let error = table
            .insert(request.key, "other".to_owned(), node("a"), 100, 1)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidOperation);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn insert_rejects_a_correlation_id_already_pending_but_allows_it_after_completion() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let request = Requester::new().submit(&mut table, 0, &node("a"), 100);
        let other = PendingKey::new(&OperationId { high: 7, low: 7 }, 7);
        let error = table
            .insert(other, request.correlation_id.clone(), node("a"), 100, 1)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidOperation);
        table.cancel(&request.key).unwrap();
        table
            .insert(other, request.correlation_id, node("a"), 100, 1)
            .unwrap();
    }

    #[test]
    fn insert_rejects_zero_ids_and_malformed_correlation_ids() {
        let mut table = PendingTable::<usize, ()>::new(8);
        let zero_operation = PendingKey::new(&OperationId { high: 0, low: 0 }, 1);
        let zero_route = PendingKey::new(&OperationId { high: 0, low: 1 }, 0);
        let good = PendingKey::new(&OperationId { high: 0, low: 1 }, 1);
        for (key, correlation_id) in [
            (zero_operation, "c".to_owned()),
            (zero_route, "c".to_owned()),
            (good, String::new()),
            (good, "has space".to_owned()),
            (good, "a".repeat(65)),
        ] {
            let error = table
                .insert(key, correlation_id, node("a"), 100, 0)
                .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidOperation);
        }
        assert!(table.is_empty());
    }

    #[test]
    fn insert_beyond_capacity_is_backpressured() {
        let mut table = PendingTable::<usize, ()>::new(2);
        let mut requester = Requester::new();
        requester.submit(&mut table, 0, &node("a"), 100);
        let second = requester.submit(&mut table, 1, &node("a"), 100);
        let key = PendingKey::new(&OperationId { high: 5, low: 5 }, 5);
        let error = table
            .insert(key, "c".to_owned(), node("a"), 100, 2)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Backpressured);
        table.cancel(&second.key).unwrap();
        table
            .insert(key, "c".to_owned(), node("a"), 100, 2)
            .unwrap();
    }

    /// Seeded SplitMix64: deterministic schedules that do not change with a crate version.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// Uniform-enough value in `0..n` (n > 0).
        fn below(&mut self, n: usize) -> usize {
            (self.next_u64() % n as u64) as usize
        }

        fn between(&mut self, low: usize, high: usize) -> usize {
            low + self.below(high - low + 1)
        }
    }

    /// One event of a schedule. Request and peer fields are indexes.
    #[derive(Debug, Clone)]
    enum Event {
        /// A success reply with the right IDs and `payload`, from peer `from` (`None`: a relay
        /// node that is never a target).
        Reply {
            request: usize,
            payload: u64,
            from: Option<usize>,
        },
        /// An error reply with the right IDs.
        ErrorReply {
            request: usize,
            kind: ErrorKind,
            from: Option<usize>,
        },
        /// A reply with the right key and another correlation ID.
        WrongCorrelation {
            request: usize,
        },
        /// A reply for a key never issued.
        UnknownKey,
        /// Time moves forward by `by` ms and the timer fires.
        Advance {
            by: u64,
        },
        Cancel {
            request: usize,
        },
        /// Peer `peer` dies; `restarted` names the same RID in a later lifecycle instead.
        PeerLost {
            peer: usize,
            restarted: bool,
        },
        Shutdown,
    }

    /// The terminal result the model expects, comparable across the table and the model.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Terminal {
        Reply {
            payload: u64,
            from: PeerRef,
        },
        Error {
            kind: ErrorKind,
            from: Option<PeerRef>,
        },
    }

    fn terminal_of(completion: &Completion<usize, u64>) -> Terminal {
        match &completion.outcome {
            Ok(payload) => Terminal::Reply {
                payload: *payload,
                from: completion.replied_by.clone().unwrap(),
            },
            Err(error) => Terminal::Error {
                kind: error.kind(),
                from: completion.replied_by.clone(),
            },
        }
    }

    fn random_schedule(rng: &mut Rng, requests: usize, peers: usize) -> Vec<Event> {
        let mut events: Vec<Event> = Vec::new();
        let pick_from = |rng: &mut Rng| match rng.below(peers + 1) {
            p if p == peers => None,
            p => Some(p),
        };
        for _ in 0..rng.between(0, 24) {
            let request = rng.below(requests);
            let event = match rng.below(11) {
                0 | 1 => Event::Reply {
                    request,
                    payload: rng.next_u64(),
                    from: pick_from(rng),
                },
                2 => Event::ErrorReply {
                    request,
                    kind: ErrorKind::ALL[rng.below(ErrorKind::ALL.len())],
                    from: pick_from(rng),
                },
                3 => Event::WrongCorrelation { request },
                4 => Event::UnknownKey,
                5 | 6 => Event::Advance {
                    by: rng.below(40) as u64,
                },
                7 => Event::Cancel { request },
                8 => Event::PeerLost {
                    peer: rng.below(peers),
                    restarted: rng.below(3) == 0,
                },
                9 => Event::Shutdown,
                // A duplicate of the latest reply, if any.
                _ => match events
                    .iter()
                    .rev()
                    .find(|e| matches!(e, Event::Reply { .. }))
                {
                    Some(previous) => previous.clone(),
                    None => Event::UnknownKey,
                },
            };
            events.push(event);
        }
        events.push(Event::Shutdown);
        events
    }

    /// Counters the model expects.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct ModelCounters {
        late_replies: u64,
        correlation_mismatches: u64,
        late_cancels: u64,
    }

    /// The independent model: each request's first applicable event, kept without the table.
    struct Model {
        terminals: Vec<Option<Terminal>>,
        /// Requests settled by the current event, with their terminal.
        newly: Vec<(usize, Terminal)>,
        counters: ModelCounters,
    }

    impl Model {
        fn is_pending(&self, request: usize) -> bool {
            self.terminals[request].is_none()
        }

        /// Settle `request` with `terminal` if it is still pending; false when it was not.
        fn settle(&mut self, request: usize, terminal: Terminal) -> bool {
            if !self.is_pending(request) {
                return false;
            }
            self.terminals[request] = Some(terminal.clone());
            self.newly.push((request, terminal));
            true
        }
    }

    fn delivered_completions(delivered: Delivered<usize, u64>) -> Vec<Completion<usize, u64>> {
        match delivered {
            Delivered::Completed(completion) => vec![completion],
            Delivered::Dropped { .. } => Vec::new(),
        }
    }

    /// Run schedule `seed` against the table and the model; returns the model's counters and
    /// terminals so the caller can check the generator reached every case.
    fn run_schedule(seed: u64) -> (ModelCounters, Vec<Terminal>, Vec<PeerRef>) {
        let mut rng = Rng(seed);
        let peers: Vec<PeerRef> = (0..rng.between(1, 3))
            .map(|p| PeerRef::new(format!("node-{p}"), 3))
            .collect();
        let relay = PeerRef::new("relay", 1);
        let peer = |from: Option<usize>| from.map_or(relay.clone(), |p| peers[p].clone());

        let mut table = PendingTable::<usize, u64>::new(8);
        let mut requester = Requester::new();
        let requests: Vec<Submitted> = (0..rng.between(1, 8))
            .map(|index| {
                let target = peers[rng.below(peers.len())].clone();
                let deadline = rng.between(1, 100) as u64;
                requester.submit(&mut table, index, &target, deadline)
            })
            .collect();
        let events = random_schedule(&mut rng, requests.len(), peers.len());

        let mut model = Model {
            terminals: vec![None; requests.len()],
            newly: Vec::new(),
            counters: ModelCounters::default(),
        };
        let mut actual: Vec<Option<Terminal>> = vec![None; requests.len()];
        let mut now = 0_u64;

        for (step, event) in events.iter().enumerate() {
            let context = format!("seed {seed}, step {step}, event {event:?}");
            model.newly.clear();
            let completions = match event {
                Event::Reply {
                    request,
                    payload,
                    from,
                } => {
                    let from = peer(*from);
                    let terminal = Terminal::Reply {
                        payload: *payload,
                        from: from.clone(),
                    };
                    if !model.settle(*request, terminal) {
                        model.counters.late_replies += 1;
                    }
                    let reply = reply_to(&requests[*request], Ok(*payload));
                    delivered_completions(table.on_reply(reply, &from))
                }
                Event::ErrorReply {
                    request,
                    kind,
                    from,
                } => {
                    let from = peer(*from);
                    let terminal = Terminal::Error {
                        kind: *kind,
                        from: Some(from.clone()),
                    };
                    if !model.settle(*request, terminal) {
                        model.counters.late_replies += 1;
                    }
                    let error = CallError::new(*kind, "remote");
                    let reply = reply_to(&requests[*request], Err(error));
                    delivered_completions(table.on_reply(reply, &from))
                }
                Event::WrongCorrelation { request } => {
                    model.counters.late_replies += 1;
                    if model.is_pending(*request) {
                        model.counters.correlation_mismatches += 1;
                    }
                    let mut reply = reply_to(&requests[*request], Ok(0));
                    reply.correlation_id = "wrong".to_owned();
                    delivered_completions(table.on_reply(reply, &requests[*request].target))
                }
                Event::UnknownKey => {
                    model.counters.late_replies += 1;
                    let reply = ReplyFields {
                        operation_id: OperationId {
                            high: u64::MAX,
                            low: 1,
                        },
                        reply_route_id: u64::MAX,
                        correlation_id: requests[0].correlation_id.clone(),
                        outcome: Ok(0),
                    };
                    delivered_completions(table.on_reply(reply, &relay))
                }
                Event::Advance { by } => {
                    now += by;
                    for (index, request) in requests.iter().enumerate() {
                        if request.deadline_ms <= now {
                            let kind = ErrorKind::DeadlineExceeded;
                            model.settle(index, Terminal::Error { kind, from: None });
                        }
                    }
                    table.expire(now)
                }
                Event::Cancel { request } => {
                    let terminal = Terminal::Error {
                        kind: ErrorKind::Cancelled,
                        from: None,
                    };
                    if !model.settle(*request, terminal) {
                        model.counters.late_cancels += 1;
                    }
                    table.cancel(&requests[*request].key).into_iter().collect()
                }
                Event::PeerLost {
                    peer: lost,
                    restarted,
                } => {
                    let mut dead = peers[*lost].clone();
                    if *restarted {
                        dead.lifecycle_generation += 1;
                    } else {
                        for (index, request) in requests.iter().enumerate() {
                            if request.target == dead {
                                let kind = ErrorKind::Unavailable;
                                model.settle(index, Terminal::Error { kind, from: None });
                            }
                        }
                    }
                    table.peer_lost(&dead)
                }
                Event::Shutdown => {
                    for index in 0..requests.len() {
                        let kind = ErrorKind::ShuttingDown;
                        model.settle(index, Terminal::Error { kind, from: None });
                    }
                    table.shutdown()
                }
            };

            let mut got: Vec<(usize, Terminal)> = Vec::new();
            for completion in &completions {
                let request = &requests[completion.waker];
                assert_eq!(completion.key, request.key, "{context}");
                assert_eq!(
                    completion.correlation_id, request.correlation_id,
                    "{context}"
                );
                assert_eq!(completion.target, request.target, "{context}");
                assert!(
                    actual[completion.waker].is_none(),
                    "completed twice: {context}"
                );
                actual[completion.waker] = Some(terminal_of(completion));
                got.push((completion.waker, terminal_of(completion)));
            }
            got.sort_by_key(|(index, _)| *index);
            model.newly.sort_by_key(|(index, _)| *index);
            assert_eq!(got, model.newly, "{context}");
            let pending = (0..requests.len()).filter(|r| model.is_pending(*r)).count();
            assert_eq!(table.len(), pending, "{context}");
        }

        assert_eq!(actual, model.terminals, "seed {seed}");
        assert!(model.terminals.iter().all(Option::is_some), "seed {seed}");
        assert!(table.is_empty(), "seed {seed}");
        assert_eq!(table.next_deadline(), None, "seed {seed}");
        let stats = table.stats();
        let seen = ModelCounters {
            late_replies: stats.late_replies,
            correlation_mismatches: stats.correlation_mismatches,
            late_cancels: stats.late_cancels,
        };
        assert_eq!(seen, model.counters, "seed {seed}");
        assert_eq!(stats.completed(), requests.len() as u64, "seed {seed}");
        let key = PendingKey::new(&OperationId { high: 1, low: 1 }, 1);
        let refused = table.insert(key, "late".to_owned(), peers[0].clone(), now + 1, 99);
        assert_eq!(
            refused.unwrap_err().kind(),
            ErrorKind::ShuttingDown,
            "seed {seed}"
        );
        let targets = requests.into_iter().map(|r| r.target).collect();
        (
            model.counters,
            model.terminals.into_iter().flatten().collect(),
            targets,
        )
    }

    #[test]
    fn every_request_completes_once_with_its_first_event_over_10000_schedules() {
        let mut totals = ModelCounters::default();
        let mut seen_kinds = HashSet::new();
        let (mut replies_from_target, mut replies_from_elsewhere) = (0, 0);
        for seed in 0..10_000 {
            let (counters, terminals, targets) = run_schedule(seed);
            totals.late_replies += counters.late_replies;
            totals.correlation_mismatches += counters.correlation_mismatches;
            totals.late_cancels += counters.late_cancels;
            for (terminal, target) in terminals.into_iter().zip(targets) {
                match terminal {
                    Terminal::Reply { from, .. } if from == target => replies_from_target += 1,
                    Terminal::Reply { .. } => replies_from_elsewhere += 1,
                    Terminal::Error { kind, .. } => {
                        seen_kinds.insert(kind);
                    }
                }
            }
        }
        // The generator reaches every case the schedules are meant to cover.
        for kind in [
            ErrorKind::DeadlineExceeded,
            ErrorKind::Cancelled,
            ErrorKind::Unavailable,
            ErrorKind::ShuttingDown,
            ErrorKind::HandlerFailed,
        ] {
            assert!(seen_kinds.contains(&kind), "no request ended {kind}");
        }
        assert!(replies_from_target > 0 && replies_from_elsewhere > 0);
        assert!(totals.late_replies > 0 && totals.correlation_mismatches > 0);
        assert!(totals.late_cancels > 0);
    }
}
