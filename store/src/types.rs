//! Values exchanged with a Location Store or Relocation Store.
//!
//! Every generation is a `u64` in `1..=i64::MAX` issued by the store (glossary §1
//! "ObjectGeneration", §10 "AuthorityOwnerGeneration", "OwnerLeaseGeneration"); generations are
//! compared for equality only, never by magnitude (wire §9, §12). Store time is the provider's
//! clock (Redis `TIME`), in milliseconds since the Unix epoch; no operation judges expiry with
//! the caller's clock.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A point in store time: milliseconds since the Unix epoch, as the store's clock reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StoreTime(pub u64);

impl StoreTime {
    /// Milliseconds since the Unix epoch.
    pub const fn millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating.
    #[must_use]
    pub fn plus(self, d: Duration) -> Self {
        Self(self.0.saturating_add(duration_ms(d)))
    }

    /// `self - d`, saturating at 0.
    #[must_use]
    pub fn minus(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(duration_ms(d)))
    }
}

/// A duration in whole milliseconds, saturating at `u64::MAX`.
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Host owner identity plus the store-issued lease generation of one process lifecycle
/// (glossary §8 "Owner lease", .NET `ZLinkLocationOwnerToken`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnerToken {
    /// Host owner identity (stable across restarts of the same host, e.g. the pod name).
    pub owner_id: String,
    /// Issued anew by every claim, even for the same `owner_id`.
    pub lease_generation: u64,
}

/// A successful lease claim or renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    /// The lease holder.
    pub token: OwnerToken,
    /// Store time at which the lease lapses unless renewed.
    pub lease_expires_at: StoreTime,
    /// The store's clock when it granted the lease.
    pub store_now: StoreTime,
}

impl LeaseGrant {
    /// The fencing deadline (glossary §8 "Fencing deadline"): the lease deadline minus a margin.
    /// A host whose renewals fail stops admitting new work at this store instant; expressed as
    /// a delay from `store_now` by [`LeaseGrant::fencing_delay`] so a host can arm a local timer
    /// without comparing its own clock with the store's.
    pub fn fencing_deadline(&self, margin: Duration) -> StoreTime {
        self.lease_expires_at.minus(margin)
    }

    /// How long after this grant was issued the host must stop admitting work if no further
    /// renewal succeeds: `fencing_deadline - store_now` (zero if already past). The caller
    /// starts this timer when it *sent* the renew request, which errs on the safe side.
    pub fn fencing_delay(&self, margin: Duration) -> Duration {
        Duration::from_millis(
            self.fencing_deadline(margin)
                .millis()
                .saturating_sub(self.store_now.millis()),
        )
    }
}

/// Result of reading an owner lease (.NET `ZLinkOwnerLeaseReadResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRead {
    /// A live lease.
    Found {
        /// Current holder.
        token: OwnerToken,
        /// Store-time expiry.
        lease_expires_at: StoreTime,
        /// Store time of the read.
        store_now: StoreTime,
    },
    /// No live lease (never claimed, released, or expired by store time).
    Missing {
        /// Store time of the read.
        store_now: StoreTime,
    },
}

/// A generic fenced term lease (e.g. one of the 256 presence hash slots): a named lease whose
/// `term` increases by one every time the holder changes, plus the config epoch it was taken
/// under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermLease {
    /// Lease name.
    pub name: String,
    /// Current holder.
    pub holder: OwnerToken,
    /// Monotonic term; a new holder always gets a higher term than any earlier holder.
    pub term: u64,
    /// Configuration epoch supplied by the holder.
    pub config_epoch: u64,
    /// Store-time expiry.
    pub expires_at: StoreTime,
    /// Store time of the operation.
    pub store_now: StoreTime,
}

/// Kinds of ephemeral descriptors (glossary §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DescriptorKind {
    /// RouteMesh MeshNode descriptor; scope = MeshName.
    MeshNode,
    /// ClientServer Server descriptor; scope = ChannelName.
    ClientServerServer,
    /// Classic fanout publisher descriptor; scope = ChannelName.
    FanoutPublisher,
}

impl DescriptorKind {
    /// Short key tag.
    pub const fn tag(self) -> &'static str {
        match self {
            Self::MeshNode => "mn",
            Self::ClientServerServer => "cs",
            Self::FanoutPublisher => "fp",
        }
    }
}

/// Identity of one descriptor: kind, scope (MeshName or ChannelName) and RID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DescriptorKey {
    /// Kind.
    pub kind: DescriptorKind,
    /// MeshName (MeshNode) or ChannelName.
    pub scope: String,
    /// Publishing node RID.
    pub rid: String,
}

/// A published descriptor. The content is opaque to the store (the runtime encodes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorRecord {
    /// Identity.
    pub key: DescriptorKey,
    /// Publishing host lease; the descriptor disappears with it.
    pub owner: OwnerToken,
    /// Lifecycle generation of the publishing node.
    pub lifecycle_generation: u64,
    /// Strictly increasing within one lifecycle (wire §4 DescriptorRevision ordering).
    pub revision: u64,
    /// Opaque descriptor bytes.
    pub content: Bytes,
    /// Store time of the last change.
    pub updated_at: StoreTime,
}

/// Outcome of a descriptor publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The descriptor was created or changed.
    Published,
    /// Same lifecycle, same revision, same bytes: nothing changed (idempotent).
    Unchanged,
}

/// Object kinds with authority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ObjectKind {
    /// An Actor.
    Actor,
    /// A Spot (Entry, User or Instance).
    Spot,
}

/// The authority key of one object: the `zla1:` key of wire §1.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AuthorityKey(String);

impl AuthorityKey {
    /// The key of an object.
    ///
    /// # Errors
    /// The ID is not 1..=255 UTF-8 bytes.
    pub fn new(kind: ObjectKind, id: &str) -> Result<Self, zlink_protocol::ids::IdError> {
        zlink_protocol::keys::authority_key(Self::tag(kind), id).map(Self)
    }

    /// The key's kind tag of `kind` (one mapping for [`AuthorityKey::new`] and
    /// [`AuthorityKey::with_text`], so both build the same text).
    fn tag(kind: ObjectKind) -> zlink_protocol::keys::ObjectKindKey {
        match kind {
            ObjectKind::Actor => zlink_protocol::keys::ObjectKindKey::Actor,
            ObjectKind::Spot => zlink_protocol::keys::ObjectKindKey::Spot,
        }
    }

    /// `f` of the key text of an object — what [`AuthorityKey::new`] would hold — built in a
    /// buffer this thread reuses: a map keyed by `AuthorityKey` is searched with it (it borrows
    /// as `str`) without a key allocated per lookup, as on every ID-addressed send and every
    /// admission of a received message.
    ///
    /// # Errors
    /// The ID is not 1..=255 UTF-8 bytes (`f` is not called).
    pub fn with_text<R>(
        kind: ObjectKind,
        id: &str,
        f: impl FnOnce(&str) -> R,
    ) -> Result<R, zlink_protocol::ids::IdError> {
        thread_local! {
            static TEXT: std::cell::Cell<String> = const { std::cell::Cell::new(String::new()) };
        }
        // Taken out while `f` runs: a nested call finds an empty buffer and allocates its own.
        let mut text = TEXT.take();
        text.clear();
        let out = zlink_protocol::keys::push_authority_key(Self::tag(kind), id, &mut text)
            .map(|()| f(&text));
        TEXT.set(text);
        out
    }

    /// Wrap an already formatted key (e.g. read back from the store).
    pub fn from_raw(raw: impl Into<String>) -> Self {
        Self(raw.into())
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Maps keyed by `AuthorityKey` can be searched with the key text (a key built in a reused
/// buffer on a hot path, without an allocation): the derived `Hash`, `Eq` and `Ord` of the
/// one-field struct are those of its `String`, so of the `str`.
impl std::borrow::Borrow<str> for AuthorityKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A MeshNode incarnation: RID + lifecycle generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeRef {
    /// MeshName of the node.
    pub mesh: String,
    /// Node RID.
    pub rid: String,
    /// Node lifecycle generation.
    pub lifecycle_generation: u64,
}

/// Target descriptor fence (glossary §1): the target node and its owner lease, fixed when the
/// source chose it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TargetFence {
    /// Target node.
    pub node: NodeRef,
    /// Target host owner lease.
    pub owner: OwnerToken,
}

/// Lifecycle state of an authority record (Missing = no record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AuthorityState {
    /// Reserved by a creation attempt; not routable.
    Creating,
    /// Committed; messages are delivered to the owner.
    Ready,
    /// Being closed by its owner.
    Closing,
    /// Marked by its owner while a relocation is in progress (still owned by the source).
    Relocating,
}

/// Placement allocation state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AllocationState {
    /// Capacity reserved by a pending creation.
    Pending,
    /// Capacity held by a Ready (or Closing/Relocating) object.
    Active,
}

/// Placement allocation of an object (.NET `ZLinkPlacementAllocation`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Allocation {
    /// Pending or Active.
    pub state: AllocationState,
    /// Actor or Spot.
    pub object_kind: ObjectKind,
    /// Factory stable type.
    pub stable_type: String,
    /// Capacity units charged to the owner node.
    pub units: u32,
}

/// Content receipt of a creation envelope or recovery root (glossary §2 "Recovery receipt").
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContentReceipt {
    /// Relocation Store reference.
    pub reference: String,
    /// SHA-256 of the content.
    pub sha256: [u8; 32],
    /// Encoded size in bytes (≤ 1 MiB for creation envelopes).
    pub size: u64,
}

/// Pending creation recorded on a Creating authority (.NET `ZLinkPendingObjectCreation`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PendingCreation {
    /// Creation reservation ID.
    pub reservation_id: String,
    /// Fence that alone may commit or abort this reservation.
    pub reservation_version: u64,
    /// Target chosen by the source.
    pub target: TargetFence,
    /// Capacity delta reserved on the target.
    pub capacity_delta: u32,
    /// Creation envelope / recovery root receipt, if any.
    pub content: Option<ContentReceipt>,
}

/// A snapshot of one authority record (.NET `ZLinkAuthoritySnapshot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthoritySnapshot {
    /// Object key.
    pub key: AuthorityKey,
    /// Lifecycle state.
    pub state: AuthorityState,
    /// Store-issued revision of this record; changes on every write.
    pub store_version: u64,
    /// Incarnation.
    pub object_generation: u64,
    /// Owner change order within the incarnation.
    pub authority_owner_generation: u64,
    /// Current owner lease token.
    pub owner: OwnerToken,
    /// Current owner node.
    pub owner_node: NodeRef,
    /// Placement allocation.
    pub allocation: Allocation,
    /// Present only while Creating.
    pub pending_creation: Option<PendingCreation>,
    /// Opaque framework payload (membership, recovery pointer, relocation root reference,
    /// terminal counters…), never parsed by the store.
    pub payload: Bytes,
    /// Store time of the read or write that produced the snapshot.
    pub store_now: StoreTime,
}

impl AuthoritySnapshot {
    /// The owner fence of this snapshot (with its StoreVersion).
    pub fn fence(&self) -> OwnerFence {
        OwnerFence {
            key: self.key.clone(),
            store_version: self.store_version,
            object_generation: self.object_generation,
            authority_owner_generation: self.authority_owner_generation,
            owner: self.owner.clone(),
        }
    }
}

/// Result of reading authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorityRead {
    /// A record exists (any state).
    Found(Box<AuthoritySnapshot>),
    /// No record.
    Missing {
        /// Store time of the read.
        store_now: StoreTime,
    },
}

/// The owner lease named by an authority record, as read in the same store round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerLeaseState {
    /// The live lease of the record's owner ID (its generation may differ from the record's
    /// owner token when the host restarted; the reader compares).
    pub token: OwnerToken,
    /// Store-time expiry.
    pub lease_expires_at: StoreTime,
}

/// Result of [`crate::LocationStore::read_route`]: the authority record and, when it exists,
/// the live lease of its owner ID — one round trip, so the positive route cache can fix the
/// owner-lease admission deadline of a Ready route without a second read (routing §2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRead {
    /// The authority record in any state.
    pub authority: AuthorityRead,
    /// The live lease of the record's owner ID; `None` when there is no record or no live
    /// lease for that owner ID (by store time).
    pub owner_lease: Option<OwnerLeaseState>,
}

/// Owner fence (glossary §1): every conditional change of an existing record names the exact
/// StoreVersion, ObjectGeneration, AuthorityOwnerGeneration and owner token it read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnerFence {
    /// Object key.
    pub key: AuthorityKey,
    /// Expected StoreVersion.
    pub store_version: u64,
    /// Expected ObjectGeneration.
    pub object_generation: u64,
    /// Expected AuthorityOwnerGeneration.
    pub authority_owner_generation: u64,
    /// Expected owner (id + lease generation).
    pub owner: OwnerToken,
}

/// A creation reservation request (wire §7 Creation record).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReserveRequest {
    /// Object key.
    pub key: AuthorityKey,
    /// Caller-chosen creation reservation ID (replay-safe).
    pub reservation_id: String,
    /// Actor or Spot.
    pub object_kind: ObjectKind,
    /// Factory stable type.
    pub stable_type: String,
    /// Target node and lease, as the source saw them.
    pub target: TargetFence,
    /// Capacity units to reserve on the target (usually 1).
    pub capacity_delta: u32,
    /// Creation envelope receipt, if any.
    pub content: Option<ContentReceipt>,
    /// Initial framework payload.
    #[serde(with = "bytes_hex")]
    pub payload: Bytes,
}

/// A successful reservation (.NET `ZLinkObjectReservation`): the fence that alone can commit or
/// abort this creation attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reservation {
    /// Object key.
    pub key: AuthorityKey,
    /// Reservation ID.
    pub reservation_id: String,
    /// StoreVersion of the Creating record.
    pub store_version: u64,
    /// New incarnation.
    pub object_generation: u64,
    /// Initial owner generation.
    pub authority_owner_generation: u64,
    /// Reservation fence.
    pub reservation_version: u64,
    /// Target.
    pub target: TargetFence,
}

/// Target-only owner transfer (wire §9 Target CAS, §10): keeps ObjectGeneration, issues a new
/// AuthorityOwnerGeneration and switches owner + lease to the target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TransferOwner {
    /// The source's authority as the target read it.
    pub source: OwnerFence,
    /// The new owner (the caller, i.e. the target host) and its node.
    pub target: TargetFence,
    /// Replacement framework payload (e.g. new membership); `None` keeps it.
    pub payload: Option<Bytes>,
}

/// One member of a bounded aggregate commit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AggregateOp {
    /// Transfer an owner (relocation).
    Transfer(TransferOwner),
    /// Replace the payload keeping owner and generations (Preserve CAS).
    Preserve {
        /// Fence.
        fence: OwnerFence,
        /// New payload.
        payload: Bytes,
    },
    /// Only check that a record still matches a fence, without changing it.
    Check(OwnerFence),
}

impl AggregateOp {
    /// The key this op conditions on.
    pub fn key(&self) -> &AuthorityKey {
        match self {
            Self::Transfer(t) => &t.source.key,
            Self::Preserve { fence, .. } | Self::Check(fence) => &fence.key,
        }
    }
}

/// Most members one aggregate commit may have (glossary §2 "Bounded aggregate commit"). At least
/// 1,024 (issue 17: one relocation unit — a Spot with its members — commits in one aggregate).
/// On Redis the whole commit is one script of 14 arguments per member, run atomically.
pub const MAX_AGGREGATE_OPS: usize = 1024;

/// Per-node capacity limits (descriptor projection); 0 = unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CapacityLimits {
    /// Actors of any stable type.
    pub actors: u32,
    /// User and Instance Spots of any stable type (Entry Spots are not counted).
    pub spots: u32,
}

/// Current capacity use of one node incarnation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CapacityUse {
    /// Actor units, active + pending.
    pub actors: u64,
    /// Spot units, active + pending.
    pub spots: u64,
}

/// A Relocation Store payload read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPayload {
    /// The immutable bytes.
    pub bytes: Bytes,
    /// Store-time expiry of the retention.
    pub expires_at: StoreTime,
    /// Store time of the read.
    pub store_now: StoreTime,
}

mod bytes_hex {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub fn serialize<S: Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&zlink_protocol::codec::hex::encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let s = String::deserialize(d)?;
        zlink_protocol::codec::hex::decode(&s)
            .map(Bytes::from)
            .map_err(D::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// The reused buffer gives exactly the text `AuthorityKey::new` holds (IDs with and
    /// without escapes, one call nested in another, the buffer reused after a long ID), the
    /// same error for an invalid ID, and a map keyed by `AuthorityKey` finds the key by it.
    #[test]
    fn the_key_text_is_the_key_and_finds_it() {
        let long = "é".repeat(100);
        let ids = ["p-1", "room/7", "a b%c", long.as_str(), "x"];
        let mut map: HashMap<AuthorityKey, usize> = HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            for kind in [ObjectKind::Actor, ObjectKind::Spot] {
                let key = AuthorityKey::new(kind, id).unwrap();
                let text = AuthorityKey::with_text(kind, id, str::to_owned).unwrap();
                assert_eq!(text, key.as_str(), "{kind:?} {id:?}");
                map.insert(key, i);
            }
        }
        for (i, id) in ids.iter().enumerate() {
            let found = AuthorityKey::with_text(ObjectKind::Spot, id, |k| map.get(k).copied());
            assert_eq!(found.unwrap(), Some(i), "{id:?}");
        }
        let nested = AuthorityKey::with_text(ObjectKind::Actor, "outer", |outer| {
            let inner = AuthorityKey::with_text(ObjectKind::Actor, "inner", str::to_owned);
            (outer.to_owned(), inner.unwrap())
        })
        .unwrap();
        assert_eq!(
            nested.0,
            AuthorityKey::new(ObjectKind::Actor, "outer")
                .unwrap()
                .as_str()
        );
        assert_eq!(
            nested.1,
            AuthorityKey::new(ObjectKind::Actor, "inner")
                .unwrap()
                .as_str()
        );
        let too_long = "x".repeat(256);
        for bad in ["", too_long.as_str()] {
            let want = AuthorityKey::new(ObjectKind::Actor, bad).unwrap_err();
            let got = AuthorityKey::with_text(ObjectKind::Actor, bad, |_| unreachable!());
            assert_eq!(got.unwrap_err(), want, "{bad:?}");
        }
    }
}
