//! The Location Store and Relocation Store contracts.
//!
//! Both providers ([`crate::memory::MemoryStore`] and [`crate::redis::RedisStore`]) implement
//! these traits with identical semantics, checked by one conformance suite
//! ([`crate::conformance`]).
//!
//! # Guarantees (every provider)
//! * **Atomic.** Every method is one atomic step of the store: a conditional write checks all
//!   its conditions and applies all its changes, or changes nothing (Redis: one Lua script
//!   call). There is no read-modify-write across calls.
//! * **Store time.** Lease expiry, descriptor liveness and retention are judged by the store's
//!   clock only; results carry `store_now`.
//! * **Counters.** StoreVersion, ObjectGeneration, AuthorityOwnerGeneration, LeaseGeneration,
//!   reservation versions and term numbers come from store-global counters, strictly increase,
//!   and fail with [`StoreError::GenerationExhausted`] at `i64::MAX` instead of wrapping.
//!   Every successful write of an authority record gives it a new StoreVersion.
//! * **No TTL on authority.** Authority records disappear only by [`LocationStore::abort`] or
//!   [`LocationStore::delete_fenced`]. Leases and descriptors expire by store time.
//!
//! # Errors
//! Semantic refusals are [`StoreError::Stale`] (with the failing part), `Missing`,
//! `AlreadyExists`, `SpotIdConflict`, `Conflict`, `RoutingIdConflict`, `CapacityExhausted`,
//! `GenerationExhausted`, `InvalidArgument`; none of them changes anything. A store that cannot
//! answer is [`StoreError::StoreFailure`]; `ambiguous: true` means the write may have happened
//! and the caller must re-read before deciding.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use crate::error::Result;
use crate::types::{
    AggregateOp, AuthorityKey, AuthorityRead, AuthoritySnapshot, AuthorityState, CapacityLimits,
    CapacityUse, DescriptorKey, DescriptorKind, DescriptorRecord, LeaseGrant, LeaseRead, NodeRef,
    OwnerFence, OwnerToken, PublishOutcome, Reservation, ReserveRequest, RouteRead, StoreTime,
    StoredPayload, TermLease, TransferOwner,
};

/// The Location Store (glossary §1): owner leases, descriptors, RID claims, capacity and durable
/// authority with generation counters.
pub trait LocationStore: Send + Sync + 'static {
    /// The store's clock.
    fn store_now(&self) -> impl Future<Output = Result<StoreTime>> + Send;

    // ---- owner leases -------------------------------------------------------------------

    /// Claim the owner lease of `owner_id` for `ttl`. Always issues a new lease generation,
    /// even when the same `owner_id` holds a live lease (that older token becomes stale).
    fn claim_lease(
        &self,
        owner_id: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LeaseGrant>> + Send;

    /// Extend a live lease to `store_now + ttl`.
    ///
    /// # Errors
    /// `Stale(LeaseNotLive)` when the token is not the current live lease of its owner id
    /// (released, replaced by a newer claim, or expired by store time).
    fn renew_lease(
        &self,
        token: &OwnerToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<LeaseGrant>> + Send;

    /// Read the live lease of `owner_id`; an expired lease reads as `Missing`.
    fn read_lease(&self, owner_id: &str) -> impl Future<Output = Result<LeaseRead>> + Send;

    /// Release the lease if `token` is current; its descriptors and RID claims disappear with
    /// it. Releasing a stale token is a no-op (`Ok(false)`).
    fn release_lease(&self, token: &OwnerToken) -> impl Future<Output = Result<bool>> + Send;

    // ---- fenced term leases -------------------------------------------------------------

    /// Acquire or renew the named term lease for `holder` until `store_now + ttl`.
    /// Free or expired → granted with `term = previous term + 1` (the first term is 1);
    /// held by the same holder token → renewed, same term, `config_epoch` updated;
    /// held live by another holder → `Stale(LeaseNotLive)`. `holder` must be a live owner lease.
    fn acquire_term_lease(
        &self,
        name: &str,
        holder: &OwnerToken,
        config_epoch: u64,
        ttl: Duration,
    ) -> impl Future<Output = Result<TermLease>> + Send;

    /// Read the named term lease if live.
    fn read_term_lease(&self, name: &str)
    -> impl Future<Output = Result<Option<TermLease>>> + Send;

    /// Release the term lease if `holder` and `term` still match (`Ok(false)` otherwise). The
    /// term counter is kept, so the next holder still gets a higher term.
    fn release_term_lease(
        &self,
        name: &str,
        holder: &OwnerToken,
        term: u64,
    ) -> impl Future<Output = Result<bool>> + Send;

    // ---- descriptors and RID claims -----------------------------------------------------

    /// Publish or update a descriptor tied to `owner`'s live lease.
    ///
    /// Within one `lifecycle_generation`, revisions are strictly ordered: a higher revision
    /// replaces; the same revision with the same bytes is `Unchanged`; the same revision with
    /// other bytes, or a lower revision, is `Conflict`. A different lifecycle generation (a new
    /// process of the node) replaces the descriptor whatever its revision.
    ///
    /// # Errors
    /// `Stale(LeaseNotLive)` when `owner` is not a live lease; `Conflict` as above;
    /// `InvalidArgument` for revision 0.
    fn publish_descriptor(
        &self,
        owner: &OwnerToken,
        key: &DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> impl Future<Output = Result<PublishOutcome>> + Send;

    /// Every descriptor of `kind` in `scope` whose publishing lease is live, ordered by RID.
    fn list_descriptors(
        &self,
        kind: DescriptorKind,
        scope: &str,
    ) -> impl Future<Output = Result<Vec<DescriptorRecord>>> + Send;

    /// Remove a descriptor if `owner` published it (`Ok(false)` otherwise).
    fn remove_descriptor(
        &self,
        owner: &OwnerToken,
        key: &DescriptorKey,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Claim RID `rid` in `mesh` for `owner`'s lease (automatic RID claim). Re-claiming by the
    /// same token is a no-op.
    ///
    /// # Errors
    /// `RoutingIdConflict` when another live lease holds it; `Stale(LeaseNotLive)` when `owner`
    /// is not live.
    fn claim_routing_id(
        &self,
        owner: &OwnerToken,
        mesh: &str,
        rid: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    // ---- capacity -----------------------------------------------------------------------

    /// Set the capacity limits of a node incarnation (descriptor projection; 0 = unlimited).
    /// Requires `owner` to be live.
    fn set_capacity_limits(
        &self,
        owner: &OwnerToken,
        node: &NodeRef,
        limits: CapacityLimits,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Current charged capacity (active + pending units) of a node incarnation.
    fn capacity_use(&self, node: &NodeRef) -> impl Future<Output = Result<CapacityUse>> + Send;

    // ---- authority ----------------------------------------------------------------------

    /// Read the authority record of `key` in any state.
    fn read_authority(
        &self,
        key: &AuthorityKey,
    ) -> impl Future<Output = Result<AuthorityRead>> + Send;

    /// Read the authority record of `key` and the live lease of its owner ID in one round
    /// trip (the resolver's only read; routing §2.1–§2.2).
    fn read_route(&self, key: &AuthorityKey) -> impl Future<Output = Result<RouteRead>> + Send;

    /// Reserve a creation (state Missing → Creating, allocation Pending).
    ///
    /// Conditions, in order: (1) if a reservation with this ID exists: the same request
    /// returns the earlier [`Reservation`], a different request is `Conflict`; (2) an existing
    /// record of the same kind and stable type is `AlreadyExists(snapshot)`, of another kind or
    /// type `SpotIdConflict`; (3) the target owner lease is live and equals `target.owner`,
    /// else `Stale(LeaseNotLive)`; the target has a MeshNode descriptor in `target.node.mesh`
    /// with that lifecycle generation published by that lease, else `Stale(Descriptor)`;
    /// (4) target capacity (`limit 0` = unlimited) else `CapacityExhausted`.
    /// Effects: issues ObjectGeneration, AuthorityOwnerGeneration, reservation version and
    /// StoreVersion; charges `capacity_delta` to the target; owner = target.
    fn reserve(&self, request: &ReserveRequest)
    -> impl Future<Output = Result<Reservation>> + Send;

    /// Commit a reservation: Creating → Ready, allocation Active, pending creation cleared,
    /// payload replaced by `payload`, new StoreVersion.
    ///
    /// # Errors
    /// `Missing`; `Stale(Reservation | StoreVersion | …)` when the record is not this
    /// reservation's Creating record; `Stale(LeaseNotLive)` when the target lease lapsed.
    fn commit_ready(
        &self,
        reservation: &Reservation,
        payload: Bytes,
    ) -> impl Future<Output = Result<AuthoritySnapshot>> + Send;

    /// Abort a reservation: delete the Creating record and return its capacity. Same fence as
    /// commit (lease liveness is not required, so a dead target's reservation can be cleaned).
    fn abort(&self, reservation: &Reservation) -> impl Future<Output = Result<()>> + Send;

    /// Target-only owner transfer (relocation CAS): requires state Ready or Relocating and the
    /// exact source fence; the target lease must be live. Keeps ObjectGeneration, issues a new
    /// AuthorityOwnerGeneration and StoreVersion, moves the active capacity from the source node
    /// to the target node, state → Ready.
    fn transfer_owner(
        &self,
        transfer: &TransferOwner,
    ) -> impl Future<Output = Result<AuthoritySnapshot>> + Send;

    /// Preserve CAS: replace the payload keeping owner and generations (new StoreVersion).
    /// Requires the exact fence and a live owner lease; any state but Creating.
    fn preserve(
        &self,
        fence: &OwnerFence,
        payload: Bytes,
    ) -> impl Future<Output = Result<AuthoritySnapshot>> + Send;

    /// Change the lifecycle state: Ready → Closing, Ready → Relocating, Relocating → Ready.
    /// Requires the exact fence, the `from` state and a live owner lease.
    fn set_state(
        &self,
        fence: &OwnerFence,
        from: AuthorityState,
        to: AuthorityState,
    ) -> impl Future<Output = Result<AuthoritySnapshot>> + Send;

    /// Bounded aggregate commit: up to [`crate::types::MAX_AGGREGATE_OPS`] members on distinct
    /// keys, every condition checked first, then every change applied — all or nothing, one
    /// store request. Returns the resulting snapshots in request order.
    fn commit_aggregate(
        &self,
        ops: &[AggregateOp],
    ) -> impl Future<Output = Result<Vec<AuthoritySnapshot>>> + Send;

    /// Delete a Ready/Closing/Relocating record only if the full fence still matches (owner
    /// lease liveness is not required: the owner may be gone). Returns the object's capacity.
    fn delete_fenced(&self, fence: &OwnerFence) -> impl Future<Output = Result<()>> + Send;

    // ---- store recovery -----------------------------------------------------------------

    /// A watch of the store's recovery epoch: it increases every time the provider observes the
    /// store come back after a failure (reconnect after errors, or a Redis restart detected by a
    /// changed `run_id`). Caches must drop everything learned before (routing §2.2).
    fn recovery(&self) -> watch::Receiver<u64>;
}

/// The Relocation Store (glossary §1): immutable opaque payloads under framework-issued
/// references with a store-time retention.
pub trait RelocationStore: Send + Sync + 'static {
    /// Store `bytes` under `reference` until `store_now + retention`. Putting the same bytes
    /// again is idempotent (retention is extended to the later of the two); other bytes under a
    /// live reference are `Conflict`.
    fn put(
        &self,
        reference: &str,
        bytes: Bytes,
        retention: Duration,
    ) -> impl Future<Output = Result<StoreTime>> + Send;

    /// Read a live payload (`None` when missing or expired by store time).
    fn read(&self, reference: &str) -> impl Future<Output = Result<Option<StoredPayload>>> + Send;

    /// Extend a live payload's retention to `store_now + retention`.
    ///
    /// # Errors
    /// `Missing` when the payload is gone.
    fn renew(
        &self,
        reference: &str,
        retention: Duration,
    ) -> impl Future<Output = Result<StoreTime>> + Send;

    /// Delete a payload (`Ok(false)` when it was not there).
    fn delete(&self, reference: &str) -> impl Future<Output = Result<bool>> + Send;
}
