//! The object runtime of one MeshNode: creation through the Location Store, ID-addressed
//! Spot / Actor calls over the resolver and its positive route cache, and target admission
//! (issue "Spots and Actors" §4–§7; routing `000_…` §2; wire §7).
//!
//! What a call does:
//!
//! 1. The caller names only the global ID (never an owner, generation or reference).
//! 2. The resolver answers from the cache or with one store read: `ReadyRoute`, `Missing`
//!    (→ `NotFound`; nothing is created), `Unavailable`, `StoreFailure`.
//! 3. A route to this node is served locally; any other goes over the mesh (commands 21/22/24/25)
//!    on the owner's current connection. Either way the owner runs **target admission**: the
//!    object must be live here under the route's AuthorityOwnerGeneration and owner-lease
//!    generation. ObjectGeneration is not compared (routing §2.6): a re-created incarnation
//!    under the same owner receives the message.
//! 4. A route that fails admission is answered `StaleRoute`; the caller's cache entry for that
//!    route is invalidated and the call ends with that error. It is never resubmitted.
//!
//! Creation in this version places the object on the calling node (the target is this node;
//! placement across nodes by descriptors arrives with remote create, commands 47/49):
//! Reserve → open the queue (work may queue before the instance exists) → factory → Ready CAS
//! with the reservation fence → queue Ready. A factory failure aborts the reservation under its
//! fence, so the ID is Missing again. `get_or_create_user_spot` runs the factory at most once
//! per ID on a node and returns `Existing` for an object that is already Ready anywhere.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    NodeFence, ObjectKind as WireKind, ReplyResult, ReservationFence, RouteFence,
};
use zlink_protocol::metadata::Metadata;
use zlink_store::types::{
    AuthorityKey, NodeRef, ObjectKind as StoreKind, OwnerToken, ReserveRequest, TargetFence,
};
use zlink_store::{LocationStore, RelocationStore, StoreError};

use super::objects::Objects;
use crate::call::error::{CallError, ErrorKind};
use crate::mesh::handler::{JsonMessage, decode_json, encode_json};
use crate::mesh::{MeshNode, ObjectCommand, ObjectPayload, ObjectSink};
use crate::object::exec::{Binding, ObjectCaller};
use crate::object::registry::{FactoryInput, LiveObject, ObjectType, ObjectTypeKind, Registry};
use crate::routing::{
    CacheConfig, ReadyRoute, Resolution, Resolver, RouteSource, UnavailableReason,
};
use remote::{
    InstanceCall, JoinProposal, MulticastIn, RemoteClose, RemoteCreate, RemoteDestroy,
    RemoteMessage,
};

/// What an object runtime needs of its store: the Location Store (authority, leases,
/// descriptors) and the Relocation Store (creation content). Both providers implement both.
pub trait ObjectStore: LocationStore + RelocationStore {}
impl<T: LocationStore + RelocationStore> ObjectStore for T {}

/// Largest creation content (the encoded initial payload envelope; wire §7: 1 MiB).
pub const MAX_CREATION_CONTENT: usize = 1024 * 1024;

mod activation;
mod calls;
mod error;

pub use calls::ObjectCalls;
use error::store_error;
pub use error::{ObjectError, RuntimeError};
mod arriving;
mod creation;
mod intake;
mod live;
mod locks;
mod membership;
mod moving;
mod multicast;
mod placement;
mod relocate;
mod relocations;
mod remote;
mod removal;
mod sessions;
mod terminals;
pub use terminals::linked_terminal_roots;

pub use sessions::{
    BIND_TIMEOUT, BindingTombstone, BindingTombstoneAck, Disconnected, REPLACED_CLOSE_DELAY,
    SessionStats, Unbound,
};

pub use relocate::{Located, RelocatePlan, UnitRef, UnitReport, may_take};
pub use relocations::{
    RelocationSettings, RelocationStats, TimelineEvent, TimelineStep, TransferFault,
};

pub use activation::{ACTIVATION_RETENTION, ActivationFault};

/// `ZLINK_ACTIVATION_FAULT=abort|exit` (debug builds only) injects an [`ActivationFault`] at start (process-level
/// fault tests); anything else, or unset, injects nothing.
/// Read only in debug builds: a release host never exits on an environment variable.
fn fault_from_env() -> Option<ActivationFault> {
    if !cfg!(debug_assertions) {
        return None;
    }
    match std::env::var("ZLINK_ACTIVATION_FAULT").ok().as_deref() {
        Some("abort") => Some(ActivationFault::AbortTask),
        Some("exit") => Some(ActivationFault::ExitProcess),
        _ => None,
    }
}

/// What giving a failed creation's reservation back found.
enum GiveBack {
    /// The reservation is gone (aborted, or replaced).
    Aborted,
    /// Unknown or still Creating: the ID stays failed on this node (barrier).
    Barrier,
    /// The creation was committed after all.
    Committed(Box<zlink_store::types::AuthoritySnapshot>),
}

/// How long a remote create may take before the source reconciles with the store.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// A reference to one created incarnation (returned by create; never needed to address it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Actor or Spot.
    pub kind: StoreKind,
    /// Global ID.
    pub id: String,
    /// Incarnation.
    pub object_generation: u64,
    /// The full route fence of the incarnation when the reference was made: owner node
    /// lifecycle, authority owner generation, owner lease (issue 19 item 3).
    pub route: RouteFence,
    /// The MeshName of the owner.
    pub mesh_name: String,
}

impl ObjectRef {
    /// The reference to incarnation `generation` of (`kind`, `id`) owned by `node` under
    /// `authority_owner_generation` and lease `owner_lease_generation`.
    fn made(
        kind: StoreKind,
        id: &str,
        generation: u64,
        node: NodeFence,
        authority_owner_generation: u64,
        owner_lease_generation: u64,
        mesh_name: String,
    ) -> Self {
        Self {
            kind,
            id: id.to_owned(),
            object_generation: generation,
            route: RouteFence {
                object_kind: wire_kind(kind),
                object_id: id.to_owned(),
                object_generation: generation,
                target_node: node,
                authority_owner_generation,
                owner_lease_generation,
            },
            mesh_name,
        }
    }

    /// The [`ActorRef`](crate::object::ActorRef) of an Actor's reference (what a session bind
    /// takes); `None` for a Spot.
    pub fn actor_ref(&self) -> Option<crate::object::ActorRef> {
        crate::object::ActorRef::from_route(self.route.clone(), self.mesh_name.clone())
    }
}

/// How a get-or-create ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creation {
    /// This call created the object (its factory ran).
    Created,
    /// The object was Ready already; no factory ran.
    Existing,
}

/// Counters of a runtime.
#[derive(Debug, Default)]
pub struct RuntimeStats {
    /// Factory runs started.
    pub factory_runs: AtomicU64,
    /// Objects created here.
    pub created: AtomicU64,
    /// Objects this node placed on another node (remote create, command 47).
    pub created_remotely: AtomicU64,
    /// Deliveries refused by target admission (stale routes).
    pub stale_routes: AtomicU64,
    /// Calls served on this node without the mesh.
    pub local_calls: AtomicU64,
    /// Calls sent to another owner over the mesh.
    pub remote_calls: AtomicU64,
    /// One-way messages dropped by target admission (stale route).
    pub dropped_sends: AtomicU64,
    /// Cold activations started here (reservations won).
    pub activations: AtomicU64,
    /// First calls that lost the activation race here and were delivered to the winner.
    pub activation_forwards: AtomicU64,
    /// Activations the recovery scan resumed or ended.
    pub activation_recoveries: AtomicU64,
    /// One-way first messages that could not be delivered (drop events).
    pub activation_drops: AtomicU64,
    /// Times a first call delivered to the winner of its activation race waited for a
    /// connection to the winner's node (not yet discovered here).
    pub activation_owner_waits: AtomicU64,
    /// Kind-2 routes refused as protocol errors (they disagreed with this node or the call).
    pub activation_route_mismatches: AtomicU64,
    /// Logical Multicast publishes started here.
    pub multicast_published: AtomicU64,
    /// Publish records submitted to remote member nodes.
    pub multicast_sent: AtomicU64,
    /// Remote member nodes of a publish snapshot that could not be reached.
    pub multicast_submit_failures: AtomicU64,
    /// Deliveries of publishes to local Spot subscriptions (from here or from other nodes).
    pub multicast_local_deliveries: AtomicU64,
    /// Publishes received for a Channel this node is not a member of (dropped).
    pub multicast_not_member: AtomicU64,
    /// Actor membership changes (join / leave) committed here.
    pub membership_changes: AtomicU64,
    /// Authorities (or pending creations) of an owner whose lease is gone, removed under
    /// their fence so the ID could be created again.
    pub fenced_cleanups: AtomicU64,
}

/// Undoes an Actor's enrolment in its Spot when its creation does not complete.
struct EnrolGuard<'a, S: ObjectStore> {
    inner: &'a Inner<S>,
    actor: Option<String>,
}

impl<S: ObjectStore> EnrolGuard<'_, S> {
    fn keep(mut self) {
        self.actor = None;
    }
}

impl<S: ObjectStore> Drop for EnrolGuard<'_, S> {
    fn drop(&mut self) {
        if let Some(a) = self.actor.take() {
            self.inner.live().forget_member(&a);
        }
    }
}

/// Most unfinished activations one recovery scan pass looks at.
const ACTIVATION_SCAN_BATCH: usize = 256;

/// The receive chunk limit a join reply announces (wire §9: 32 KiB without negotiation).
const JOIN_RECEIVE_CHUNK_LIMIT: u32 = 32 * 1024;

/// One live incarnation on this node.
struct LiveEntry {
    generation: u64,
    authority_owner_generation: u64,
    obj: Arc<dyn LiveObject>,
    /// Its registered type (Logical Multicast subscriptions).
    ty: Arc<dyn ObjectType>,
    /// Its move history as its authority payload recorded it when it arrived here (empty for
    /// an object created here): the chain bound is checked without a store read.
    moves: Vec<u64>,
    /// An Actor's one current STREAM session binding (issue 19 item 4): relays must carry
    /// exactly it, pushes go to it. Gone with the incarnation.
    binding: Option<zlink_protocol::generated::SessionRef>,
}

impl live::OwnerGenerationMut for LiveEntry {
    fn set_authority_owner_generation(&mut self, g: u64) {
        self.authority_owner_generation = g;
    }
}

impl live::Incarnation for LiveEntry {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn authority_owner_generation(&self) -> u64 {
        self.authority_owner_generation
    }
}

struct Inner<S> {
    mesh: Arc<MeshNode>,
    store: Arc<S>,
    resolver: Resolver,
    types: BTreeMap<String, Arc<dyn ObjectType>>,
    objects: Arc<Objects>,
    /// Live incarnations and Spot membership (held only for short, synchronous sections).
    live: Mutex<live::LiveTable<LiveEntry>>,
    /// One creation or activation at a time per ID on this node.
    creating: locks::KeyLocks,
    stats: RuntimeStats,
    /// Itself, weakly (so handler calls can run on an owned handle).
    this: std::sync::OnceLock<std::sync::Weak<Inner<S>>>,
    /// Placement state per stable type.
    placement: Mutex<placement::Placement>,
    /// IDs whose creation failed here with an unknown outcome, with the reservation still to
    /// abort (see `give_back`).
    failed: Mutex<HashMap<AuthorityKey, zlink_store::types::Reservation>>,
    /// Cold activations of this lifecycle whose first operation is not done yet.
    activations: activation::Activations,
    /// Fault injection in the activation path.
    fault: Mutex<Option<ActivationFault>>,
    /// Period of the background activation recovery scan, in milliseconds.
    scan_interval_ms: AtomicU64,
    /// Sequence of this node's Logical Multicast publishes.
    publish_seq: AtomicU64,
    /// Changes to one object's membership or existence (join, leave, close, destroy) run one
    /// at a time; changes to other objects run side by side, also across store round trips.
    changes: locks::KeyLocks,
    /// Moves from and to this node (issue 17).
    relocations: relocations::Relocations,
    /// The session owner's binding table and open sessions (issue 19).
    sessions: Mutex<sessions::SessionHub>,
    /// Binding, relay and push counters.
    session_stats: sessions::SessionStats,
    /// `SessionRelocationSealTimeout` in milliseconds (wire §10; default 3,000).
    seal_timeout_ms: AtomicU64,
    /// How long a bind (38) may take end to end, in milliseconds ([`BIND_TIMEOUT`]).
    bind_timeout_ms: AtomicU64,
}

/// The object runtime attached to one MeshNode (a cheap handle: clones share it).
pub struct ObjectRuntime<S: ObjectStore> {
    inner: Arc<Inner<S>>,
}

impl<S: ObjectStore> Clone for ObjectRuntime<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: ObjectStore> std::fmt::Debug for ObjectRuntime<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRuntime")
            .field("node", &self.inner.mesh.rid())
            .field("live", &self.inner.live().len())
            .finish()
    }
}

fn store_kind(k: WireKind) -> StoreKind {
    match k {
        WireKind::Actor => StoreKind::Actor,
        WireKind::Spot => StoreKind::Spot,
    }
}

/// The kind and ID an authority key names (`None` for a key that is not one).
fn key_parts(key: &AuthorityKey) -> Option<(StoreKind, String)> {
    let (k, id) = zlink_protocol::keys::parse_authority_key(key.as_str()).ok()?;
    Some((
        match k {
            zlink_protocol::keys::ObjectKindKey::Actor => StoreKind::Actor,
            zlink_protocol::keys::ObjectKindKey::Spot => StoreKind::Spot,
        },
        id,
    ))
}

fn wire_kind(k: StoreKind) -> WireKind {
    match k {
        StoreKind::Actor => WireKind::Actor,
        StoreKind::Spot => WireKind::Spot,
    }
}

fn route_fence(r: &ReadyRoute, kind: StoreKind, id: &str) -> RouteFence {
    RouteFence {
        object_kind: wire_kind(kind),
        object_id: id.to_owned(),
        object_generation: r.object_generation,
        target_node: zlink_protocol::generated::NodeFence {
            rid: zlink_protocol::shared_str::SharedStr::intern(&r.owner_node.rid),
            lifecycle_generation: r.owner_node.lifecycle_generation,
        },
        authority_owner_generation: r.authority_owner_generation,
        owner_lease_generation: r.owner.lease_generation,
    }
}

/// The route fence of an authority record (for cache invalidation).
fn fence_of(
    key: &AuthorityKey,
    a: &zlink_store::types::AuthoritySnapshot,
) -> crate::routing::RouteFence {
    crate::routing::RouteFence {
        key: key.clone(),
        object_generation: a.object_generation,
        authority_owner_generation: a.authority_owner_generation,
        owner_rid: a.owner_node.rid.clone(),
        owner_lifecycle_generation: a.owner_node.lifecycle_generation,
        owner_lease_generation: a.owner.lease_generation,
    }
}

use crate::millis;

/// Wall-clock Unix milliseconds (request deadlines are in this clock).
fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The reservation of the pending creation `p` recorded on the Creating record `a` (to commit
/// or abort it under its fence).
fn pending_reservation(
    a: &zlink_store::types::AuthoritySnapshot,
    p: &zlink_store::types::PendingCreation,
) -> zlink_store::types::Reservation {
    zlink_store::types::Reservation {
        key: a.key.clone(),
        reservation_id: p.reservation_id.clone(),
        store_version: a.store_version,
        object_generation: a.object_generation,
        authority_owner_generation: a.authority_owner_generation,
        reservation_version: p.reservation_version,
        target: p.target.clone(),
    }
}

/// The framework payload of an Actor's authority: its Spot membership (versioned JSON).
fn membership_payload(spot: &str) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&serde_json::json!({ "v": 1, "membership": spot })).unwrap_or_default(),
    )
}

/// `payload` (a framework JSON object, or empty) with its Spot membership set to `spot`, every
/// other field kept (the move history among them).
fn with_membership(payload: &[u8], spot: &str) -> Bytes {
    match serde_json::from_slice::<serde_json::Value>(payload) {
        Ok(serde_json::Value::Object(mut m)) => {
            m.insert("membership".into(), serde_json::Value::from(spot));
            Bytes::from(serde_json::to_vec(&m).unwrap_or_default())
        }
        _ => membership_payload(spot),
    }
}

/// The move history an authority payload keeps (routing §2.5; issue 17 item 7): the unix-ms
/// times of the object's latest owner transfers, oldest first (empty when none is recorded).
pub fn recent_moves(payload: &[u8]) -> Vec<u64> {
    framework_fields(payload)
        .map(|f| f.moves)
        .unwrap_or_default()
}

/// The two framework fields of an authority payload that moves and joins read, taken in one
/// pass without building the JSON tree (every unit of a bulk move reads them): the last
/// `"membership"` if it is a string, and the whole numbers of the last `"moves"` if it is an
/// array — as a `serde_json::Value` lookup would give them. `None` for anything but a JSON
/// object.
#[derive(Debug, Default, PartialEq, Eq)]
struct FrameworkFields {
    membership: Option<String>,
    moves: Vec<u64>,
}

fn framework_fields(payload: &[u8]) -> Option<FrameworkFields> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    /// What the reader keeps of a JSON value: a string, a whole number that fits `u64`, the
    /// whole numbers of an array (what `as_u64` gives of its elements), or nothing.
    enum Kept {
        Str(String),
        Whole(u64),
        Wholes(Vec<u64>),
        Other,
    }
    impl<'de> serde::Deserialize<'de> for Kept {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Kept;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("any JSON value")
                }
                fn visit_str<E>(self, v: &str) -> Result<Kept, E> {
                    Ok(Kept::Str(v.to_owned()))
                }
                fn visit_string<E>(self, v: String) -> Result<Kept, E> {
                    Ok(Kept::Str(v))
                }
                fn visit_u64<E>(self, v: u64) -> Result<Kept, E> {
                    Ok(Kept::Whole(v))
                }
                fn visit_i64<E>(self, v: i64) -> Result<Kept, E> {
                    Ok(u64::try_from(v).map_or(Kept::Other, Kept::Whole))
                }
                fn visit_f64<E>(self, _: f64) -> Result<Kept, E> {
                    Ok(Kept::Other)
                }
                fn visit_bool<E>(self, _: bool) -> Result<Kept, E> {
                    Ok(Kept::Other)
                }
                fn visit_unit<E>(self) -> Result<Kept, E> {
                    Ok(Kept::Other)
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Kept, A::Error> {
                    let mut out = Vec::new();
                    while let Some(e) = a.next_element::<Kept>()? {
                        if let Kept::Whole(n) = e {
                            out.push(n);
                        }
                    }
                    Ok(Kept::Wholes(out))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Kept, A::Error> {
                    while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Kept::Other)
                }
            }
            d.deserialize_any(V)
        }
    }

    /// A key, told apart without keeping its text.
    enum Key {
        Membership,
        Moves,
        Other,
    }
    impl<'de> serde::Deserialize<'de> for Key {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct K;
            impl Visitor<'_> for K {
                type Value = Key;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an object key")
                }
                fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                    Ok(match v {
                        "membership" => Key::Membership,
                        "moves" => Key::Moves,
                        _ => Key::Other,
                    })
                }
            }
            d.deserialize_str(K)
        }
    }

    struct Fields;
    impl<'de> Visitor<'de> for Fields {
        type Value = FrameworkFields;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<FrameworkFields, A::Error> {
            let mut out = FrameworkFields::default();
            // A later duplicate replaces an earlier one, as in `serde_json::Value`.
            while let Some(key) = a.next_key::<Key>()? {
                match key {
                    Key::Membership => {
                        out.membership = match a.next_value::<Kept>()? {
                            Kept::Str(s) => Some(s),
                            Kept::Whole(_) | Kept::Wholes(_) | Kept::Other => None,
                        };
                    }
                    Key::Moves => {
                        out.moves = match a.next_value::<Kept>()? {
                            Kept::Wholes(v) => v,
                            Kept::Str(_) | Kept::Whole(_) | Kept::Other => Vec::new(),
                        };
                    }
                    Key::Other => {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(payload);
    let fields = de.deserialize_map(Fields).ok()?;
    de.end().ok()?;
    Some(fields)
}

/// `payload` with one more move at `at_ms` in its history, keeping only the moves within
/// `window_ms` before it and at most [`MAX_FOLLOW_HOPS`](crate::relocation::follow::MAX_FOLLOW_HOPS)
/// in all; `None` (payload kept as it is) when it is not a framework JSON object.
#[cfg(test)]
fn with_move(payload: &[u8], at_ms: u64, window_ms: u64) -> Option<Bytes> {
    moved_payload(payload, None, at_ms, window_ms).map(|(p, _)| p)
}

/// The payload a move commits: `payload` with this move logged (see `with_move`) and, for a
/// lone Actor, its Spot membership set to `membership` (see [`with_membership`]) — parsed and
/// written once, as every unit of a bulk move commits one; with the move history it records
/// (what [`recent_moves`] reads from it). `None` (payload kept as it is) when there is no
/// membership to write and `payload` is not a framework JSON object.
fn moved_payload(
    payload: &[u8],
    membership: Option<&str>,
    at_ms: u64,
    window_ms: u64,
) -> Option<(Bytes, Vec<u64>)> {
    let object = || match serde_json::from_slice::<serde_json::Value>(payload) {
        Ok(serde_json::Value::Object(m)) => Some(m),
        _ => None,
    };
    let fresh = || {
        let mut m = serde_json::Map::new();
        m.insert("v".into(), serde_json::Value::from(1));
        m
    };
    let mut m = match membership {
        Some(spot) => {
            // As `with_membership`: anything but an object becomes a fresh framework payload.
            let mut m = object().unwrap_or_else(fresh);
            m.insert("membership".into(), serde_json::Value::from(spot));
            m
        }
        None if payload.is_empty() => fresh(),
        None => object()?,
    };
    let mut moves: Vec<u64> = m
        .get("moves")
        .and_then(serde_json::Value::as_array)
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default();
    moves.retain(|t| at_ms.saturating_sub(*t) <= window_ms);
    moves.push(at_ms);
    let keep = crate::relocation::follow::MAX_FOLLOW_HOPS;
    if moves.len() > keep {
        moves.drain(..moves.len() - keep);
    }
    m.insert("moves".into(), serde_json::Value::from(moves.clone()));
    serde_json::to_vec(&m).ok().map(|p| (Bytes::from(p), moves))
}

/// The Spot membership recorded in an Actor's authority payload.
pub fn membership_of(payload: &[u8]) -> Option<String> {
    framework_fields(payload)?.membership
}

impl<S: ObjectStore> Inner<S> {
    /// The execution gate of Spot `id` if it is live here and shares one with its members.
    fn spot_gate(&self, id: &str) -> Option<crate::object::exec::SpotGate> {
        let key = AuthorityKey::new(StoreKind::Spot, id).ok()?;
        self.live().get(&key).and_then(|e| e.obj.gate())
    }

    /// Drop the live entry of `key` if it is still incarnation `generation`.
    fn forget_live(&self, key: &AuthorityKey, generation: u64) {
        self.live().forget_incarnation(key, generation);
    }

    fn live(&self) -> MutexGuard<'_, live::LiveTable<LiveEntry>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn owner(&self) -> Result<OwnerToken, CallError> {
        self.mesh
            .owner_token()
            .ok_or_else(|| CallError::new(ErrorKind::Unavailable, "this node holds no owner lease"))
    }
}

/// The sink the MeshNode holds: weak handles on the runtime and on the node itself, so there
/// is no reference cycle; a runtime that is gone answers requests `ShuttingDown`.
struct SinkRef<S: ObjectStore> {
    runtime: std::sync::Weak<Inner<S>>,
    mesh: std::sync::Weak<MeshNode>,
}

impl<S: ObjectStore> SinkRef<S> {
    fn gone(
        &self,
        source: &zlink_protocol::generated::NodeFence,
        request: Option<&zlink_protocol::generated::RequestHeader>,
    ) {
        if let (Some(mesh), Some(req)) = (self.mesh.upgrade(), request) {
            mesh.reply_to(
                source,
                req,
                Err(CallError::new(
                    ErrorKind::ShuttingDown,
                    "the object runtime stopped",
                )),
            );
        }
    }
}

impl<S: ObjectStore> SinkRef<S> {
    /// Run an object control request (create, close, destroy) on its own task and answer it
    /// once with its result, or `ShuttingDown` when the runtime is gone.
    fn serve<F, Fut>(
        &self,
        source: Arc<zlink_protocol::generated::NodeFence>,
        request: zlink_protocol::generated::RequestHeader,
        op: F,
    ) where
        F: FnOnce(Arc<Inner<S>>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<ReplyResult, CallError>> + Send + 'static,
    {
        match self.runtime.upgrade() {
            Some(inner) => {
                tokio::spawn(async move {
                    let result = op(Arc::clone(&inner)).await;
                    inner.mesh.reply_create(&source, &request, result);
                });
            }
            None => self.gone(&source, Some(&request)),
        }
    }
}

impl<S: ObjectStore> ObjectSink for SinkRef<S> {
    fn take(&self, source: Arc<NodeFence>, command: ObjectCommand) {
        let message = |source, route, request, p: ObjectPayload| RemoteMessage {
            source,
            route,
            request,
            metadata: p.metadata,
            payload: p.payload,
            session: p.bound_session,
        };
        match command {
            ObjectCommand::SpotSend(b, p) => self.message(message(source, b.route, None, p)),
            ObjectCommand::ActorSend(b, p) => self.message(message(source, b.route, None, p)),
            ObjectCommand::SpotRequest(b, p) => {
                self.message(message(source, b.route, Some(b.request), p));
            }
            ObjectCommand::ActorRequest(b, p) => {
                self.message(message(source, b.route, Some(b.request), p));
            }
            ObjectCommand::LogicalMulticast(m, p) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.multicast_delivery(MulticastIn {
                        channel: m.channel_name,
                        topic: m.topic,
                        metadata: p.metadata,
                        payload: p.payload,
                    });
                }
            }
            ObjectCommand::InstanceSpot(i, p) => {
                let request = crate::mesh::object_command::instance_request(&i);
                let call = InstanceCall {
                    source,
                    request,
                    operation_id: i.operation_id,
                    deadline_unix_ms: i.deadline_unix_ms,
                    source_spot_id: i.source_spot_id,
                    route: i.route,
                    metadata: p.metadata,
                    payload: p.payload,
                };
                match self.runtime.upgrade() {
                    Some(inner) => inner.instance_delivery(call),
                    None => self.gone(&call.source, call.request.as_ref()),
                }
            }
            ObjectCommand::ActorJoin(j) => {
                let d = JoinProposal {
                    request: j.request.clone(),
                    actor_route: j.actor_route,
                    entry: j.entry,
                    spot_route: j.target_spot_route,
                };
                self.serve(source, j.request, move |inner| async move {
                    inner.join_for(&d).await
                });
            }
            ObjectCommand::ActorDestroy(c) => {
                let d = RemoteDestroy { route: c.route };
                self.serve(source, c.request, move |inner| async move {
                    Ok(inner.destroy_for(&d).await?)
                });
            }
            ObjectCommand::UserSpotClose(c) => {
                let d = RemoteClose {
                    spot: c.spot,
                    target_node: c.target_node,
                    authority_owner_generation: c.authority_owner_generation,
                    store_version: c.store_version,
                };
                self.serve(source, c.request, move |inner| async move {
                    Ok(inner.close_for(&d).await?)
                });
            }
            ObjectCommand::UserSpotCreate(c) => {
                let d = RemoteCreate {
                    kind: WireKind::Spot,
                    id: c.spot_id,
                    stable_type: c.stable_type,
                    membership: None,
                    reservation: c.reservation,
                };
                self.serve(source, c.request, move |inner| async move {
                    inner.create_for(&d).await
                });
            }
            ObjectCommand::ActorCreate(c) => {
                let d = RemoteCreate {
                    kind: WireKind::Actor,
                    id: c.actor_id,
                    stable_type: c.stable_type,
                    membership: Some(c.membership_spot_id),
                    reservation: c.reservation,
                };
                self.serve(source, c.request, move |inner| async move {
                    inner.create_for(&d).await
                });
            }
            ObjectCommand::RelocationPrepare(p) => match self.runtime.upgrade() {
                Some(inner) => inner.on_prepare(p),
                None => {
                    if let Some(mesh) = self.mesh.upgrade() {
                        let _ = mesh.relocation_record(
                            &source,
                            crate::mesh::connection::Leg::Reply,
                            zlink_protocol::generated::CommandBody::RelocationFailed(
                                zlink_protocol::generated::RelocationFailed {
                                    relocation_id: p.relocation_id,
                                    target_attempt_generation: p.target_attempt_generation,
                                    reason: zlink_protocol::generated::RelocationFailureReason::ShuttingDown,
                                    detail: "the object runtime stopped".into(),
                                },
                            ),
                            None,
                        );
                    }
                }
            },
            ObjectCommand::RelocationState(c) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_chunk(c);
                }
            }
            ObjectCommand::RelocationData(d) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_relay(d);
                }
            }
            ObjectCommand::RelocationCutover(c) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_cutover(c);
                }
            }
            ObjectCommand::BoundSessionBind(b) => {
                match (self.runtime.upgrade(), self.mesh.upgrade()) {
                    (Some(inner), Some(mesh)) => {
                        let result = inner
                            .bind_here(&b.session, &b.actor_route, b.request.deadline_unix_ms)
                            .map(|_| {
                                ReplyResult::BoundSessionBind(
                                    zlink_protocol::generated::ReplyResultBoundSessionBind {
                                        binding_generation: b.session.binding_generation,
                                    },
                                )
                            });
                        mesh.reply_create(&source, &b.request, result);
                    }
                    _ => self.gone(&source, Some(&b.request)),
                }
            }
            ObjectCommand::BoundSessionSend(b, p) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.deliver_push(&b.session, &b.actor_id, b.object_generation, p.payload);
                }
            }
            ObjectCommand::SessionRelocationSeal(b) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_seal(&source, &b);
                }
            }
            ObjectCommand::SessionRelocationSealed(b) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_sealed(&source, &b);
                }
            }
            ObjectCommand::BoundSessionReplaced(b) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_replaced(&source, &b);
                }
            }
            ObjectCommand::FrameworkRequest(r, p) => {
                match (self.runtime.upgrade(), self.mesh.upgrade()) {
                    (Some(inner), Some(mesh)) => {
                        let result = inner.framework_request(&source, &p.payload);
                        mesh.reply_to(&source, &r.request, result);
                    }
                    _ => self.gone(&source, Some(&r.request)),
                }
            }
            ObjectCommand::SessionRelocationRoute(b) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_session_route(&b);
                }
            }
            ObjectCommand::RelocationReady(r) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_prepare_answer(&source, r.relocation_id, moving::PrepareAnswer::Ready);
                }
            }
            ObjectCommand::RelocationFailed(f) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_prepare_answer(
                        &source,
                        f.relocation_id,
                        moving::PrepareAnswer::Failed(f.reason),
                    );
                }
            }
            ObjectCommand::ReplyRelayAck(a) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_reply_relay_ack(a);
                }
            }
            ObjectCommand::MessageFollow(m) => {
                if let Some(inner) = self.runtime.upgrade() {
                    inner.on_message_follow(&m.follow);
                }
            }
        }
    }
}

impl<S: ObjectStore> SinkRef<S> {
    /// A Spot / Actor message, or — when the runtime is gone — its refusal.
    fn message(&self, d: RemoteMessage) {
        match self.runtime.upgrade() {
            Some(inner) => inner.deliver(d),
            None => self.gone(&d.source, d.request.as_ref()),
        }
    }
}

impl<S: ObjectStore> ObjectRuntime<S> {
    /// Attach an object runtime to `mesh` (which must hold an owner lease, i.e. run with a
    /// Location Store), with the registered types and route-cache settings.
    ///
    /// # Errors
    /// [`RuntimeError`].
    pub async fn start(
        mesh: Arc<MeshNode>,
        store: Arc<S>,
        registry: Registry,
        cache: CacheConfig,
    ) -> Result<Self, RuntimeError> {
        if mesh.owner_token().is_none() {
            return Err(RuntimeError::NoOwnerLease);
        }
        crate::config::validate_route_cache_vs_follow(cache.max_age, cache.message_follow)?;
        let me = mesh.descriptor();
        let announced = if me.object_role == zlink_protocol::generated::ObjectRole::Server {
            me.object_capabilities
        } else {
            // An Object Client hosts nothing; its registrations only type its calls.
            registry.capabilities()
        };
        for c in registry.capabilities() {
            if !announced
                .iter()
                .any(|a| a.object_kind == c.object_kind && a.stable_type == c.stable_type)
            {
                return Err(RuntimeError::CapabilityMissing(c.stable_type));
            }
        }
        let types = registry.build()?;
        // Glossary §4 "Subscription": checked at start — the node is a member of each
        // subscribed Channel, and the type handles the subscribed packet.
        let channels = mesh.descriptor().channels;
        for ty in types.values() {
            for sub in ty.subscriptions() {
                if !channels.iter().any(|c| {
                    c.channel_name == sub.channel
                        && c.role == zlink_protocol::generated::ChannelRole::Server
                }) && channels.iter().any(|c| c.channel_name == sub.channel)
                {
                    tracing::warn!(
                        stable_type = ty.stable_type(),
                        channel = %sub.channel,
                        "a subscription on a Channel this node is only a Client of gets local \
                         publishes only (remote publishers target Servers)"
                    );
                }
                if !channels.iter().any(|c| c.channel_name == sub.channel) {
                    return Err(RuntimeError::Subscription(format!(
                        "stable type {:?} subscribes to Channel {:?}, which this node is not a \
                         member of",
                        ty.stable_type(),
                        sub.channel
                    )));
                }
                if !ty.has_send_handler(&sub.packet_name) {
                    return Err(RuntimeError::Subscription(format!(
                        "stable type {:?} subscribes to {:?} on ({}, {}) without a send handler \
                         for it",
                        ty.stable_type(),
                        sub.packet_name,
                        sub.channel,
                        sub.topic
                    )));
                }
            }
        }
        // A cached route must never outlive the owner's own admission window.
        let mut cache = cache;
        cache.fencing_margin = cache.fencing_margin.max(mesh.fencing_margin());
        let source: Arc<dyn RouteSource> = Arc::clone(&store) as Arc<dyn RouteSource>;
        let inner = Arc::new(Inner {
            resolver: Resolver::new(source, cache),
            mesh: Arc::clone(&mesh),
            store,
            types,
            objects: Objects::new(),
            live: Mutex::new(live::LiveTable::default()),
            creating: locks::KeyLocks::default(),
            stats: RuntimeStats::default(),
            this: std::sync::OnceLock::new(),
            placement: Mutex::new(placement::Placement::default()),
            failed: Mutex::new(HashMap::new()),
            activations: activation::Activations::default(),
            fault: Mutex::new(fault_from_env()),
            scan_interval_ms: AtomicU64::new(1000),
            publish_seq: AtomicU64::new(0),
            changes: locks::KeyLocks::default(),
            relocations: relocations::Relocations::default(),
            sessions: Mutex::default(),
            session_stats: sessions::SessionStats::default(),
            seal_timeout_ms: AtomicU64::new(millis(
                crate::config::defaults::SESSION_RELOCATION_SEAL_TIMEOUT,
            )),
            bind_timeout_ms: AtomicU64::new(millis(BIND_TIMEOUT)),
        });
        let _ = inner.this.set(Arc::downgrade(&inner));
        // The node holds the runtime weakly: no reference cycle through the sink.
        let entry = mesh.descriptor().entry_spot_id;
        if !entry.is_empty() {
            // The Entry Spot of this lifecycle exists before the node turns Serving (wire §7).
            let ty = inner
                .types
                .values()
                .find(|t| t.kind() == ObjectTypeKind::EntrySpot)
                .cloned()
                .ok_or(RuntimeError::NoEntrySpotType)?;
            let key = AuthorityKey::new(StoreKind::Spot, &entry).map_err(|e| {
                RuntimeError::EntrySpot(CallError::new(ErrorKind::InvalidOperation, e.to_string()))
            })?;
            let owner = inner.owner().map_err(RuntimeError::EntrySpot)?;
            let reservation = inner
                .reserve(
                    &key,
                    StoreKind::Spot,
                    ty.stable_type(),
                    &mesh.fence(),
                    owner,
                    None,
                )
                .await
                .map_err(RuntimeError::EntrySpot)?;
            inner
                .materialize(&ty, StoreKind::Spot, &entry, None, None, reservation)
                .await
                .map_err(RuntimeError::EntrySpot)?;
        }
        // Attached only once the runtime is complete: a failed start leaves the node free for
        // another attempt.
        mesh.set_object_sink(Arc::new(SinkRef {
            runtime: Arc::downgrade(&inner),
            mesh: Arc::downgrade(&mesh),
        }) as Arc<dyn ObjectSink>)
            .map_err(RuntimeError::Attach)?;
        // The startup scan of wire §8 runs before Serving. A new lifecycle can never match an
        // earlier one's authority, so it finds nothing to resume (see `activation`).
        inner.recover_activations(ACTIVATION_SCAN_BATCH).await;
        if !entry.is_empty() {
            mesh.set_runtime_state(zlink_protocol::generated::RuntimeState::Serving);
        }
        // The bounded background scan: resumes activations whose task ended early.
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            loop {
                let every = match weak.upgrade() {
                    Some(i) => Duration::from_millis(i.scan_interval_ms.load(Ordering::Relaxed)),
                    None => return,
                };
                tokio::time::sleep(every).await;
                let Some(i) = weak.upgrade() else { return };
                if i.mesh.is_shut_down() {
                    return;
                }
                i.recover_activations(ACTIVATION_SCAN_BATCH).await;
            }
        });
        Ok(Self { inner })
    }

    /// This node's Entry Spot ID (empty without one).
    pub fn entry_spot_id(&self) -> String {
        self.inner.mesh.with_descriptor(|d| d.entry_spot_id.clone())
    }

    /// Stop every live object of this node (waiting requests end with `Unavailable`). The
    /// authority records stay: the objects become Unavailable until the lease lapses and a
    /// fenced cleanup removes them. Call before shutting the MeshNode down.
    pub async fn shutdown(&self) {
        // First operations of cold activations still pending end now, once each.
        self.inner.fail_pending_activations();
        let live: Vec<LiveEntry> = self.inner.live().drain_all();
        for e in live {
            e.obj.close().await;
        }
    }

    /// The resolver (its cache counters and invalidation triggers).
    pub fn resolver(&self) -> &Resolver {
        &self.inner.resolver
    }

    /// Counters.
    pub fn stats(&self) -> &RuntimeStats {
        &self.inner.stats
    }

    /// The ObjectGeneration of `id` if it is live on this node.
    pub fn live_generation(&self, kind: StoreKind, id: &str) -> Option<u64> {
        let key = AuthorityKey::new(kind, id).ok()?;
        self.inner.live().get(&key).map(|e| e.generation)
    }

    /// Whether this node admits new object work now (its owner lease is confirmed and the
    /// fencing deadline has not passed).
    pub fn admitting(&self) -> bool {
        self.inner.mesh.admission_open()
    }

    /// Objects live on this node.
    pub fn live_count(&self) -> usize {
        let (actors, spots) = self.live_by_kind();
        actors + spots
    }

    /// Objects live on this node by kind: `(actors, spots)`. An object handed over to another
    /// node is not counted while its old entry here still follows arrivals to it.
    pub fn live_by_kind(&self) -> (usize, usize) {
        let handed = self.inner.relocations.handed();
        let live = self.inner.live();
        let (mut actors, mut spots) = live.count_by_kind();
        for (key, g, aog) in handed {
            if live
                .get_incarnation(&key, g)
                .is_some_and(|e| e.authority_owner_generation == aog)
            {
                match key_parts(&key).map(|(k, _)| k) {
                    Some(StoreKind::Actor) => actors = actors.saturating_sub(1),
                    Some(StoreKind::Spot) => spots = spots.saturating_sub(1),
                    None => {}
                }
            }
        }
        (actors, spots)
    }

    /// Work not finished in the objects live here — waiting items, running turns, yielded
    /// continuations (a drain waits for them).
    pub fn queued_work(&self) -> usize {
        self.inner.live().values().map(|e| e.obj.pending()).sum()
    }
}

/// Store rows for the pure cores' unit tests.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod test_fixtures {
    use bytes::Bytes;
    use zlink_store::types::{
        Allocation, AllocationState, AuthorityKey, AuthoritySnapshot, AuthorityState, NodeRef,
        ObjectKind, OwnerToken, StoreTime,
    };

    /// A Ready Actor `p-1`, incarnation 4, owner generation 2, on node `n1` lifecycle 9 under
    /// lease `lease-n1` generation 3.
    pub(crate) fn row() -> AuthoritySnapshot {
        AuthoritySnapshot {
            key: AuthorityKey::new(ObjectKind::Actor, "p-1").unwrap(),
            state: AuthorityState::Ready,
            store_version: 11,
            object_generation: 4,
            authority_owner_generation: 2,
            owner: OwnerToken {
                owner_id: "lease-n1".into(),
                lease_generation: 3,
            },
            owner_node: NodeRef {
                mesh: "m".into(),
                rid: "n1".into(),
                lifecycle_generation: 9,
            },
            allocation: Allocation {
                state: AllocationState::Active,
                object_kind: ObjectKind::Actor,
                stable_type: "player".into(),
                units: 1,
            },
            pending_creation: None,
            payload: Bytes::new(),
            store_now: StoreTime(0),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod payload_tests {
    use super::*;

    #[test]
    fn the_move_history_keeps_the_window_and_at_most_eight_moves() {
        let p = with_move(b"", 1_000, 30_000).unwrap();
        assert_eq!(recent_moves(&p), vec![1_000]);
        // Other fields stay.
        let m = with_move(&membership_payload("room-1"), 2_000, 30_000).unwrap();
        assert_eq!(membership_of(&m).as_deref(), Some("room-1"));
        assert_eq!(recent_moves(&m), vec![2_000]);
        // Older than the window: dropped.
        let late = with_move(&p, 40_000, 30_000).unwrap();
        assert_eq!(recent_moves(&late), vec![40_000]);
        // Never more than MAX_FOLLOW_HOPS.
        let mut q = Bytes::new();
        for t in 0..12 {
            q = with_move(&q, 1_000 + t, 30_000).unwrap();
        }
        assert_eq!(recent_moves(&q), (1_004..1_012).collect::<Vec<_>>());
        // A payload that is not a framework JSON object is left alone.
        assert_eq!(with_move(b"\x00raw", 1, 1), None);
        assert!(recent_moves(b"\x00raw").is_empty());
        // A lone Actor's commit writes both in one pass, as the two steps would.
        for p in [
            Bytes::new(),
            membership_payload("room-1"),
            q.clone(),
            Bytes::from_static(b"\x00raw"),
            Bytes::from_static(b"[1,2]"),
        ] {
            let joined = moved_payload(&p, Some("entry-b"), 2_000, 30_000);
            assert_eq!(
                joined.as_ref().map(|(p, _)| p.clone()),
                with_move(&with_membership(&p, "entry-b"), 2_000, 30_000),
                "{p:?}"
            );
            // The history it returns is the one its payload records.
            let (written, moves) = joined.unwrap();
            assert_eq!(moves, recent_moves(&written));
            let alone = moved_payload(&p, None, 2_000, 30_000);
            assert_eq!(
                alone.as_ref().map(|(p, _)| p.clone()),
                with_move(&p, 2_000, 30_000)
            );
            if let Some((written, moves)) = alone {
                assert_eq!(moves, recent_moves(&written));
            }
        }
        // A membership change keeps the history.
        let moved = with_membership(&q, "entry-b");
        assert_eq!(membership_of(&moved).as_deref(), Some("entry-b"));
        assert_eq!(recent_moves(&moved), recent_moves(&q));
    }

    /// What `framework_fields` must give: the lookups of a `serde_json::Value` tree (the
    /// reading before the one-pass reader).
    fn by_tree(payload: &[u8]) -> Option<FrameworkFields> {
        let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
        let m = v.as_object()?;
        Some(FrameworkFields {
            membership: m
                .get("membership")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            moves: m
                .get("moves")
                .and_then(serde_json::Value::as_array)
                .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
                .unwrap_or_default(),
        })
    }

    #[test]
    fn the_one_pass_reader_reads_the_framework_fields_as_the_json_tree_does() {
        for p in [
            &br#"{"v":1,"membership":"room-1","moves":[1,2,3]}"#[..],
            br#"{"moves":[5],"membership":"a\"b\u00e9","v":1}"#,
            br#"{"membership":"x","membership":"y","moves":[1],"moves":[2,3]}"#,
            br#"{"membership":7,"moves":"no"}"#,
            br#"{"membership":null,"moves":{"a":1}}"#,
            br#"{"moves":[1,-2,3.5,"4",null,[5],{"6":6},18446744073709551615,18446744073709551616]}"#,
            br#"{"other":{"membership":"nested","moves":[9]},"list":[{"moves":[1]}]}"#,
            br#"{"membership":["a"],"moves":true}"#,
            br#"  {"moves":[ 1 , 2 ]}  "#,
            br#"{"m\u0065mbership":"escaped-key"}"#,
            br#"{}"#,
            br#"[1,2]"#,
            br#""membership""#,
            br#"7"#,
            br#"{"moves":[1]} trailing"#,
            br#"{"moves":[1]"#,
            b"",
            b"\x00raw",
        ] {
            assert_eq!(
                framework_fields(p),
                by_tree(p),
                "{}",
                String::from_utf8_lossy(p)
            );
        }
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// Any JSON object of framework-like and other fields reads alike both ways.
        #[test]
        fn the_one_pass_reader_agrees_with_the_json_tree(
            fields in proptest::collection::vec(
                (
                    proptest::sample::select(vec!["membership", "moves", "v", "x"]),
                    proptest::prop_oneof![
                        proptest::collection::vec(proptest::num::i64::ANY, 0..5)
                            .prop_map(|v| serde_json::json!(v)),
                        ".{0,8}".prop_map(|s| serde_json::json!(s)),
                        proptest::num::u64::ANY.prop_map(|n| serde_json::json!(n)),
                        proptest::num::f64::NORMAL.prop_map(|n| serde_json::json!(n)),
                        proptest::strategy::Just(serde_json::Value::Null),
                    ],
                ),
                0..6,
            )
        ) {
            // Written by hand so duplicate keys stay in (a `Map` would fold them).
            let body: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}:{v}", serde_json::json!(k)))
                .collect();
            let text = format!("{{{}}}", body.join(","));
            proptest::prop_assert_eq!(framework_fields(text.as_bytes()), by_tree(text.as_bytes()), "{}", text);
        }
    }
}
