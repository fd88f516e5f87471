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
use thiserror::Error;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    NodeFence, ObjectKind as WireKind, ReplyResult, ReservationFence, RouteFence,
};
use zlink_protocol::metadata::Metadata;
use zlink_store::types::{
    AuthorityKey, NodeRef, ObjectKind as StoreKind, OwnerToken, ReserveRequest, TargetFence,
};
use zlink_store::{LocationStore, RelocationStore, StoreError};

use super::exec::{Binding, ObjectCaller};
use super::objects::Objects;
use super::registry::{
    FactoryInput, LiveObject, ObjectType, ObjectTypeKind, Registry, RegistryError,
};
use crate::call::error::{CallError, ErrorKind};
use crate::mesh::handler::{JsonMessage, decode_json, encode_json};
use crate::mesh::{MeshNode, ObjectCommand, ObjectPayload, ObjectSink};
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
mod remote;

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

/// An object runtime could not start.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// A registration was refused.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The MeshNode runs without a Location Store (no owner lease to own objects with).
    #[error("the MeshNode has no owner lease: start it with a Location Store")]
    NoOwnerLease,
    /// Another runtime is attached to the node.
    #[error("{0}")]
    Attach(CallError),
    /// The route-cache settings break a rule of the spec (routing §2.5).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A registered placeable type is missing from the node's descriptor capabilities, so no
    /// peer would ever place it here (set `MeshNodeConfig::object_capabilities` to
    /// `Registry::capabilities()`).
    #[error("stable type {0:?} is registered but not in the node's object_capabilities")]
    CapabilityMissing(String),
    /// A Logical Multicast subscription cannot be served by this node.
    #[error("{0}")]
    Subscription(String),
    /// The node has an Entry Spot ID but no Entry Spot type is registered.
    #[error("the node has an Entry Spot (entry_spot_prefix) but no Entry Spot type is registered")]
    NoEntrySpotType,
    /// Creating the Entry Spot failed.
    #[error("the Entry Spot could not be created: {0}")]
    EntrySpot(CallError),
}

/// A reference to one created incarnation (returned by create; never needed to address it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Actor or Spot.
    pub kind: StoreKind,
    /// Global ID.
    pub id: String,
    /// Incarnation.
    pub object_generation: u64,
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

/// Spot membership on this node: the member Actors of each live Spot (Entry and User) and the
/// Spot of each live Actor. Every member of a Spot lives on the Spot's node (cross-node
/// membership moves the Actor: relocation), so this table is authoritative for the node.
#[derive(Default)]
struct Members {
    /// Spot ID → member Actor IDs. A Spot is here from its Ready commit until its close starts.
    spots: HashMap<String, std::collections::BTreeSet<String>>,
    /// Actor ID → Spot ID (also for creations in progress, so a close sees them).
    of: HashMap<String, String>,
}

impl Members {
    /// Enrol `actor` in `spot`; `false` when the Spot is not live here (or is closing).
    fn enrol(&mut self, actor: &str, spot: &str) -> bool {
        let Some(set) = self.spots.get_mut(spot) else {
            return false;
        };
        set.insert(actor.to_owned());
        if let Some(old) = self.of.insert(actor.to_owned(), spot.to_owned())
            && old != spot
            && let Some(s) = self.spots.get_mut(&old)
        {
            s.remove(actor);
        }
        true
    }

    /// Forget `actor`; returns the Spot it was a member of.
    fn forget(&mut self, actor: &str) -> Option<String> {
        let spot = self.of.remove(actor)?;
        if let Some(s) = self.spots.get_mut(&spot) {
            s.remove(actor);
        }
        Some(spot)
    }
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
            self.inner.members().forget(&a);
        }
    }
}

/// Most unfinished activations one recovery scan pass looks at.
const ACTIVATION_SCAN_BATCH: usize = 256;

/// The receive chunk limit a join reply announces (wire §9: 32 KiB without negotiation).
const JOIN_RECEIVE_CHUNK_LIMIT: u32 = 32 * 1024;

struct LiveEntry {
    generation: u64,
    authority_owner_generation: u64,
    obj: Arc<dyn LiveObject>,
    /// Its registered type (Logical Multicast subscriptions).
    ty: Arc<dyn ObjectType>,
}

struct Inner<S> {
    mesh: Arc<MeshNode>,
    store: Arc<S>,
    resolver: Resolver,
    types: BTreeMap<String, Arc<dyn ObjectType>>,
    objects: Arc<Objects>,
    live: Mutex<HashMap<AuthorityKey, LiveEntry>>,
    /// One creation at a time per ID on this node.
    creating: tokio::sync::Mutex<HashMap<AuthorityKey, Arc<tokio::sync::Mutex<()>>>>,
    stats: RuntimeStats,
    /// Itself, weakly (so handler calls can run on an owned handle).
    this: std::sync::OnceLock<std::sync::Weak<Inner<S>>>,
    /// Placement state per stable type.
    placement: Mutex<HashMap<String, crate::select::SmoothWeighted<String>>>,
    /// IDs whose creation failed here with an unknown outcome, with the reservation still to
    /// abort (see `give_back`).
    failed: Mutex<HashMap<AuthorityKey, zlink_store::types::Reservation>>,
    /// Spot membership of the objects live here.
    members: Mutex<Members>,
    /// Cold activations of this lifecycle whose first operation is not done yet.
    activations: Mutex<HashMap<AuthorityKey, Arc<activation::Activation>>>,
    /// Fault injection in the activation path.
    fault: Mutex<Option<ActivationFault>>,
    /// Period of the background activation recovery scan, in milliseconds.
    scan_interval_ms: AtomicU64,
    /// Sequence of this node's Logical Multicast publishes.
    publish_seq: AtomicU64,
    /// Membership changes (join, leave) on this node run one at a time.
    membership_changes: tokio::sync::Mutex<()>,
}

/// The object runtime attached to one MeshNode.
pub struct ObjectRuntime<S: ObjectStore> {
    inner: Arc<Inner<S>>,
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
            rid: r.owner_node.rid.clone(),
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

/// The Spot membership recorded in an Actor's authority payload.
pub fn membership_of(payload: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    v.get("membership")?.as_str().map(str::to_owned)
}

fn store_error(e: StoreError) -> CallError {
    let kind = match &e {
        StoreError::AlreadyExists(_) | StoreError::SpotIdConflict(_) => ErrorKind::AlreadyExists,
        StoreError::Stale { .. } | StoreError::Conflict(_) => ErrorKind::Conflict,
        StoreError::Missing(_) => ErrorKind::NotFound,
        StoreError::InvalidArgument(_) => ErrorKind::InvalidOperation,
        StoreError::CapacityExhausted(_) => ErrorKind::Rejected,
        StoreError::GenerationExhausted(_) => ErrorKind::GenerationExhausted,
        _ => ErrorKind::StoreFailure,
    };
    CallError::new(kind, e.to_string())
}

impl<S: ObjectStore> Inner<S> {
    /// The execution gate of Spot `id` if it is live here and shares one with its members.
    fn spot_gate(&self, id: &str) -> Option<super::exec::SpotGate> {
        let key = AuthorityKey::new(StoreKind::Spot, id).ok()?;
        self.live().get(&key).and_then(|e| e.obj.gate())
    }

    /// Queue a publish, one-way, on every live Spot here subscribed to (`channel`, `topic`,
    /// its packet name).
    fn deliver_to_subscribers(
        &self,
        channel: &str,
        topic: &str,
        payload: &TypedPayload,
        metadata: Option<&Metadata>,
    ) {
        let packet_name = payload.packet_name.as_str();
        let subscribers: Vec<Arc<dyn LiveObject>> = self
            .live()
            .values()
            .filter(|e| {
                e.ty.subscriptions().iter().any(|s| {
                    s.channel == channel && s.topic == topic && s.packet_name == packet_name
                })
            })
            .map(|e| Arc::clone(&e.obj))
            .collect();
        for obj in subscribers {
            if obj.send(payload.clone(), metadata.cloned()).is_ok() {
                self.stats
                    .multicast_local_deliveries
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Deliver a publish from another node to the local subscriptions.
    fn multicast_delivery(&self, d: MulticastIn) {
        let member = self
            .mesh
            .descriptor()
            .channels
            .iter()
            .any(|c| c.channel_name == d.channel);
        if !member {
            self.stats
                .multicast_not_member
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.deliver_to_subscribers(&d.channel, &d.topic, &d.payload, d.metadata.as_ref());
    }

    /// Drop the live entry of `key` if it is still incarnation `generation`.
    fn forget_live(&self, key: &AuthorityKey, generation: u64) {
        let mut live = self.live();
        if live.get(key).is_some_and(|e| e.generation == generation) {
            live.remove(key);
        }
    }

    fn members(&self) -> MutexGuard<'_, Members> {
        self.members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn live(&self) -> MutexGuard<'_, HashMap<AuthorityKey, LiveEntry>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn owner(&self) -> Result<OwnerToken, CallError> {
        self.mesh
            .owner_token()
            .ok_or_else(|| CallError::new(ErrorKind::Unavailable, "this node holds no owner lease"))
    }

    /// Target admission: the live object for `route`, if this node holds it under the route's
    /// owner generation and lease (ObjectGeneration is not compared).
    fn admit(&self, route: &RouteFence) -> Result<Arc<dyn LiveObject>, CallError> {
        let stale = |why: &str| {
            self.stats.stale_routes.fetch_add(1, Ordering::Relaxed);
            CallError::new(
                ErrorKind::StaleRoute,
                format!("{} on {}: {why}", route.object_id, self.mesh.rid()),
            )
        };
        let key = AuthorityKey::new(store_kind(route.object_kind), &route.object_id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        if !self.mesh.admission_open() {
            // Fenced (glossary §8): renewals failed past the fencing deadline; no new work.
            return Err(CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "{} on {}: the owner lease could not be renewed before the fencing deadline",
                    route.object_id,
                    self.mesh.rid()
                ),
            ));
        }
        let lease_ok = self
            .mesh
            .owner_token()
            .is_some_and(|t| t.lease_generation == route.owner_lease_generation);
        if !lease_ok {
            return Err(stale(
                "the route's owner lease is not this host's current lease",
            ));
        }
        let live = self.live();
        match live.get(&key) {
            // Same incarnation: the owner generation must still be the route's (a transfer
            // away and back would change it).
            Some(e)
                if e.generation == route.object_generation
                    && e.authority_owner_generation == route.authority_owner_generation =>
            {
                Ok(Arc::clone(&e.obj))
            }
            Some(e) if e.generation == route.object_generation => {
                Err(stale("the authority owner generation changed"))
            }
            // A newer incarnation of the ID under this same owner and lease: ObjectGeneration
            // is not a target-match condition for messages (routing §2.6), so it receives it.
            Some(e) => Ok(Arc::clone(&e.obj)),
            None => Err(stale("the object is not live here")),
        }
    }
}

impl<S: ObjectStore> Inner<S> {
    /// The call path shared by every ID-addressed surface: `timeout` `None` is a one-way send.
    ///
    /// # Errors
    /// See the module docs.
    async fn call(
        &self,
        kind: StoreKind,
        id: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        let inner = self;
        let key = AuthorityKey::new(kind, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let route = match inner.resolver.resolve(&key).await {
            Resolution::ReadyRoute(r) => r,
            Resolution::Missing => {
                return Err(CallError::new(
                    ErrorKind::NotFound,
                    format!("{id} does not exist"),
                ));
            }
            Resolution::Unavailable { reason, .. } => {
                return Err(CallError::new(
                    ErrorKind::Unavailable,
                    format!("{id} cannot be used now ({reason:?})"),
                ));
            }
            Resolution::StoreFailure(e) => return Err(store_error(e)),
        };
        let fence = route_fence(&route, kind, id);
        let me = inner.mesh.fence();
        let local = route.owner_node.rid == me.rid
            && route.owner_node.lifecycle_generation == me.lifecycle_generation;
        let out = if local {
            inner.stats.local_calls.fetch_add(1, Ordering::Relaxed);
            match inner.admit(&fence) {
                Ok(obj) => match timeout {
                    None => obj.send(payload, metadata).map(|()| None),
                    Some(t) => {
                        let rx = obj.request_start(payload, metadata)?;
                        match tokio::time::timeout(t, rx).await {
                            Ok(Ok(r)) => r.map(Some),
                            Ok(Err(_)) => {
                                Err(CallError::new(ErrorKind::Unavailable, "object closed"))
                            }
                            Err(_) => Err(CallError::new(
                                ErrorKind::DeadlineExceeded,
                                format!("no reply from {id} within {t:?}"),
                            )),
                        }
                    }
                },
                Err(e) => Err(e),
            }
        } else {
            inner.stats.remote_calls.fetch_add(1, Ordering::Relaxed);
            match timeout {
                None => inner
                    .mesh
                    .object_send(&fence, payload, metadata)
                    .await
                    .map(|()| None),
                Some(t) => inner
                    .mesh
                    .object_request(&fence, payload, metadata, t)
                    .await
                    .map(Some),
            }
        };
        if let Err(e) = &out
            && matches!(e.kind(), ErrorKind::StaleRoute | ErrorKind::Unavailable)
        {
            // StaleRoute: the owner refused the route. Unavailable: no connection to that
            // owner lifecycle (it restarted or left). Either way the next call resolves again.
            inner.resolver.cache().stale_route(&route.fence());
        }
        out
    }
}

impl<S: ObjectStore> Inner<S> {
    /// The registered type `stable_type`, checked against `kind`.
    fn type_of(
        &self,
        kind: StoreKind,
        stable_type: &str,
    ) -> Result<Arc<dyn ObjectType>, CallError> {
        let bad = |d: String| CallError::new(ErrorKind::InvalidOperation, d);
        let ty = self.types.get(stable_type).ok_or_else(|| {
            bad(format!(
                "no factory is registered for stable type {stable_type:?}"
            ))
        })?;
        let kind_ok = match kind {
            StoreKind::Actor => ty.kind() == ObjectTypeKind::Actor,
            StoreKind::Spot => ty.kind() == ObjectTypeKind::UserSpot,
        };
        if !kind_ok {
            return Err(bad(format!(
                "stable type {stable_type:?} is a {:?}, not a {kind:?}",
                ty.kind()
            )));
        }
        Ok(Arc::clone(ty))
    }

    /// Reserve `key` for `target` (its node and owner lease).
    async fn reserve(
        &self,
        key: &AuthorityKey,
        kind: StoreKind,
        stable_type: &str,
        target: &zlink_protocol::generated::NodeFence,
        owner: OwnerToken,
        content: Option<zlink_store::types::ContentReceipt>,
    ) -> Result<zlink_store::types::Reservation, CallError> {
        let reservation_id = self.new_reservation_id()?;
        let request = ReserveRequest {
            key: key.clone(),
            reservation_id,
            object_kind: kind,
            stable_type: stable_type.to_owned(),
            target: TargetFence {
                node: NodeRef {
                    mesh: self.mesh.descriptor().mesh_name,
                    rid: target.rid.clone(),
                    lifecycle_generation: target.lifecycle_generation,
                },
                owner,
            },
            capacity_delta: 1,
            content,
            payload: Bytes::new(),
        };
        match self.store.reserve(&request).await {
            // A record left by an owner whose lease is gone: clean it up under its fence and
            // reserve again (once).
            Err(StoreError::AlreadyExists(existing))
                if self.cleanup_if_owner_gone(&existing).await? =>
            {
                self.store.reserve(&request).await.map_err(store_error)
            }
            other => other.map_err(store_error),
        }
    }

    /// Abort a failed creation's reservation under its fence. If the outcome is unknown (the
    /// store did not answer), read: a record still Creating under this reservation keeps the ID
    /// **failed** on this node — no new creation of it starts here until a read confirms it
    /// Missing (wire §7 "Factory 실패 처리").
    async fn give_back(&self, reservation: &zlink_store::types::Reservation) -> GiveBack {
        if self.store.abort(reservation).await.is_ok() {
            return GiveBack::Aborted;
        }
        match self.store.read_authority(&reservation.key).await {
            Ok(zlink_store::types::AuthorityRead::Found(a))
                if a.state == zlink_store::types::AuthorityState::Creating
                    && a.object_generation == reservation.object_generation =>
            {
                self.failed_lock()
                    .insert(reservation.key.clone(), reservation.clone());
                GiveBack::Barrier
            }
            // The commit landed after all (e.g. on the remote target).
            Ok(zlink_store::types::AuthorityRead::Found(a))
                if a.state == zlink_store::types::AuthorityState::Ready
                    && a.object_generation == reservation.object_generation =>
            {
                GiveBack::Committed(a)
            }
            Ok(_) => GiveBack::Aborted,
            // Unknown: keep the barrier; the next creation re-reads.
            Err(_) => {
                self.failed_lock()
                    .insert(reservation.key.clone(), reservation.clone());
                GiveBack::Barrier
            }
        }
    }

    fn failed_lock(
        &self,
    ) -> MutexGuard<'_, HashMap<AuthorityKey, zlink_store::types::Reservation>> {
        self.failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The failed-creation barrier of `key`: open when no failure is recorded, or when a read
    /// now finds the ID Missing (the barrier is then lifted).
    async fn failed_barrier_open(&self, key: &AuthorityKey) -> Result<(), CallError> {
        let Some(reservation) = self.failed_lock().get(key).cloned() else {
            return Ok(());
        };
        // Retry the abort first: it succeeds once the store answers again.
        if self.store.abort(&reservation).await.is_ok() {
            self.failed_lock().remove(key);
            return Ok(());
        }
        match self.store.read_authority(key).await {
            Ok(zlink_store::types::AuthorityRead::Missing { .. }) => {
                self.failed_lock().remove(key);
                Ok(())
            }
            // Another incarnation replaced the failed reservation, or the creation was
            // committed after all: the barrier is moot.
            Ok(zlink_store::types::AuthorityRead::Found(a))
                if a.object_generation != reservation.object_generation
                    || a.state != zlink_store::types::AuthorityState::Creating =>
            {
                self.failed_lock().remove(key);
                Ok(())
            }
            _ => Err(CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "an earlier creation of {} failed and its reservation is not cleared yet",
                    key.as_str()
                ),
            )),
        }
    }

    /// A new creation reservation ID (`<rid>-<random>`).
    fn new_reservation_id(&self) -> Result<String, CallError> {
        Ok(format!(
            "{}-{}",
            self.mesh.rid(),
            zlink_protocol::codec::hex::encode(
                &crate::mesh::auth::random_bytes::<12>()
                    .map_err(|_| CallError::new(ErrorKind::Unavailable, "no randomness"))?
            )
        ))
    }

    /// Store a creation's initial payload as its immutable content (wire §7: the creation
    /// record keeps its reference and hash; the target reads it from the store, command 47 /
    /// 49 carries no payload).
    async fn put_content(
        &self,
        init: &TypedPayload,
    ) -> Result<zlink_store::types::ContentReceipt, CallError> {
        let bytes = init
            .encode()
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        if bytes.len() > MAX_CREATION_CONTENT {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "the initial payload encodes to {} bytes; a creation carries at most {MAX_CREATION_CONTENT}",
                    bytes.len()
                ),
            ));
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(digest.as_ref());
        let reference = format!("creation/{}", self.new_reservation_id()?);
        let size = bytes.len() as u64;
        self.store
            .put(&reference, Bytes::from(bytes), CREATE_TIMEOUT * 2)
            .await
            .map_err(store_error)?;
        Ok(zlink_store::types::ContentReceipt {
            reference,
            sha256,
            size,
        })
    }

    /// Read and verify a creation's content against its receipt.
    async fn read_content(
        &self,
        receipt: &zlink_store::types::ContentReceipt,
    ) -> Result<TypedPayload, CallError> {
        let stored = self
            .store
            .read(&receipt.reference)
            .await
            .map_err(store_error)?
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::NotFound,
                    format!("creation content {} is gone", receipt.reference),
                )
            })?;
        let bytes = stored.bytes;
        let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
        if bytes.len() as u64 != receipt.size || digest.as_ref() != receipt.sha256 {
            return Err(CallError::new(
                ErrorKind::Conflict,
                format!(
                    "creation content {} does not match its receipt (size or SHA-256)",
                    receipt.reference
                ),
            ));
        }
        TypedPayload::decode_shared(&bytes)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))
    }

    /// On this node, for a reservation that names it: open the queue (work may queue before
    /// the instance exists), run the factory, commit Ready with the reservation fence, make the
    /// queue Ready. A factory failure aborts the reservation under its fence.
    async fn materialize(
        &self,
        ty: &Arc<dyn ObjectType>,
        kind: StoreKind,
        id: &str,
        init: Option<TypedPayload>,
        membership: Option<&str>,
        reservation: zlink_store::types::Reservation,
    ) -> Result<ObjectRef, CallError> {
        let key = reservation.key.clone();
        let generation = reservation.object_generation;
        // An Actor is enrolled in its Spot before its factory runs, so a close of that Spot
        // sees it; the Spot must be live here.
        if let Some(spot) = membership.filter(|_| kind == StoreKind::Actor)
            && !self.members().enrol(id, spot)
        {
            let _ = self.give_back(&reservation).await;
            return Err(CallError::new(
                ErrorKind::NotFound,
                format!(
                    "Spot {spot} is not live on {} (an Actor is created on its Spot's node)",
                    self.mesh.rid()
                ),
            ));
        }
        let enrolled = EnrolGuard {
            inner: self,
            actor: (kind == StoreKind::Actor && membership.is_some()).then(|| id.to_owned()),
        };
        if let Err(e) = self.objects.open(&key, generation) {
            // An older incarnation's queue is still closing here: give the slot back.
            let _ = self.give_back(&reservation).await;
            return Err(CallError::new(ErrorKind::Conflict, e.to_string()));
        }
        self.stats.factory_runs.fetch_add(1, Ordering::Relaxed);
        let caller = self
            .this
            .get()
            .cloned()
            .map(|w| w as std::sync::Weak<dyn ObjectCaller>);
        let mut home = Binding::new(Arc::clone(&self.objects), key.clone(), generation);
        if let Some(c) = caller {
            home = home.with_caller(c);
        }
        // A factory may fail or panic; either way the reservation is given back.
        let made = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(ty.create(
            FactoryInput {
                id: id.to_owned(),
                stable_type: ty.stable_type().to_owned(),
                object_generation: generation,
                init,
            },
            home,
        )))
        .await
        .unwrap_or_else(|_| {
            Err(CallError::new(
                ErrorKind::HandlerFailed,
                "the factory panicked",
            ))
        });
        let obj: Arc<dyn LiveObject> = match made {
            Ok(o) => {
                let o: Arc<dyn LiveObject> = Arc::from(o);
                // A member Actor of a SpotWide User Spot takes the Spot's gate from its first
                // turn on (its queue is not Ready yet, so no turn has run).
                if kind == StoreKind::Actor
                    && let Some(gate) = membership.and_then(|m| self.spot_gate(m))
                {
                    o.set_gate(Some(gate));
                }
                o
            }
            Err(e) => {
                if let GiveBack::Committed(a) = self.give_back(&reservation).await {
                    // Cannot happen for a factory that never reached commit; delete to be sure.
                    let _ = self.store.delete_fenced(&a.fence()).await;
                }
                let _ = self.objects.remove(&key, generation);
                return Err(CallError::new(
                    ErrorKind::HandlerFailed,
                    format!(
                        "factory of {:?} failed for {id}: {}",
                        ty.stable_type(),
                        e.detail()
                    ),
                ));
            }
        };
        // The framework payload of the authority records the Actor's membership atomically
        // with its Ready commit.
        let framework = membership.map_or_else(Bytes::new, membership_payload);
        // Admissible before the Ready commit is visible: a caller that sees Ready at once finds
        // the instance; its work waits in the queue until the queue is marked Ready below.
        self.live().insert(
            key.clone(),
            LiveEntry {
                generation,
                authority_owner_generation: reservation.authority_owner_generation,
                obj: Arc::clone(&obj),
                ty: Arc::clone(ty),
            },
        );
        let snapshot = match self.store.commit_ready(&reservation, framework).await {
            Ok(s) => s,
            Err(e) => {
                // The commit may have happened (e.g. the reply was lost): read to reconcile
                // (wire §7) before giving up the instance.
                match self.store.read_authority(&key).await {
                    Ok(zlink_store::types::AuthorityRead::Found(a))
                        if a.state == zlink_store::types::AuthorityState::Ready
                            && a.object_generation == generation
                            && a.owner == reservation.target.owner =>
                    {
                        *a
                    }
                    _ => {
                        self.forget_live(&key, generation);
                        obj.close().await;
                        let _ = self.objects.remove(&key, generation);
                        // A commit that landed although its reply and the read failed leaves a
                        // Ready record without an instance: delete it under its fence.
                        if let GiveBack::Committed(a) = self.give_back(&reservation).await {
                            let _ = self.store.delete_fenced(&a.fence()).await;
                        }
                        return Err(store_error(e));
                    }
                }
            }
        };
        if let Some(e) = self
            .live()
            .get_mut(&key)
            .filter(|e| e.generation == generation)
        {
            e.authority_owner_generation = snapshot.authority_owner_generation;
        }
        let _ = self.objects.mark_ready(&key, generation);
        self.stats.created.fetch_add(1, Ordering::Relaxed);
        enrolled.keep();
        match kind {
            StoreKind::Spot => {
                self.members().spots.entry(id.to_owned()).or_default();
            }
            StoreKind::Actor => {
                if let Some(spot) = membership {
                    self.notify_member(spot, true, id);
                }
            }
        }
        Ok(ObjectRef {
            kind,
            id: id.to_owned(),
            object_generation: generation,
        })
    }

    /// Placement (glossary §6 "Weight"): smooth weighted round-robin by placement weight over
    /// this node and its ready peers whose descriptor is an Object Server, `Serving`, with a
    /// capability for (`kind`, `stable_type`). The maintenance wave does not exclude creation
    /// targets.
    fn choose_target(
        &self,
        kind: StoreKind,
        stable_type: &str,
    ) -> Result<(zlink_protocol::generated::NodeFence, String), CallError> {
        self.choose_descriptor(kind, stable_type)
            .map(|d| (d.node, d.entry_spot_id))
    }

    /// [`Inner::choose_target`], giving the chosen node's whole descriptor.
    fn choose_descriptor(
        &self,
        kind: StoreKind,
        stable_type: &str,
    ) -> Result<zlink_protocol::generated::NodeDescriptor, CallError> {
        use zlink_protocol::generated::{ObjectRole, RuntimeState};
        let wk = wire_kind(kind);
        let hosts = |d: &zlink_protocol::generated::NodeDescriptor| {
            d.object_role == ObjectRole::Server
                && d.state == RuntimeState::Serving
                // An Actor joins its node's Entry Spot: only nodes that have one host Actors.
                && (wk == WireKind::Spot || !d.entry_spot_id.is_empty())
                && d.object_capabilities
                    .iter()
                    .any(|c| c.object_kind == wk && c.stable_type == stable_type)
        };
        let mut candidates: Vec<(String, u16, zlink_protocol::generated::NodeDescriptor)> =
            Vec::new();
        let me = self.mesh.descriptor();
        if hosts(&me) {
            candidates.push((me.node.rid.clone(), me.placement_weight, me.clone()));
        }
        for p in self.mesh.peers() {
            if p.state != crate::mesh::PeerState::Ready {
                continue;
            }
            if let Some(d) = p.descriptor.filter(|d| hosts(d)) {
                candidates.push((d.node.rid.clone(), d.placement_weight, d));
            }
        }
        candidates.sort_by(|a, b| a.0.cmp(&b.0));
        let mut selectors = self
            .placement
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let sel = selectors.entry(stable_type.to_owned()).or_default();
        let _ = sel.set_candidates(candidates.iter().map(|(rid, w, _)| (rid.clone(), *w)));
        let picked = sel.pick();
        picked
            .and_then(|rid| candidates.into_iter().find(|c| c.0 == rid))
            .map(|c| c.2)
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::Unavailable,
                    format!("no serving Object Server can host stable type {stable_type:?}"),
                )
            })
    }

    /// The owner lease of node `target` (from its MeshNode descriptor in the store).
    async fn owner_of(
        &self,
        target: &zlink_protocol::generated::NodeFence,
    ) -> Result<OwnerToken, CallError> {
        let records = self
            .store
            .list_descriptors(
                zlink_store::types::DescriptorKind::MeshNode,
                &self.mesh.descriptor().mesh_name,
            )
            .await
            .map_err(store_error)?;
        records
            .into_iter()
            .find(|r| {
                r.key.rid == target.rid && r.lifecycle_generation == target.lifecycle_generation
            })
            .map(|r| r.owner)
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "node {} has no live descriptor for its lifecycle",
                        target.rid
                    ),
                )
            })
    }

    /// Delete this node's own incarnation `snapshot` of `key` (destroy / close): the record
    /// must name this host's lease, this node lifecycle and the live entry's ObjectGeneration.
    /// Anything else means the live entry is stale (the ID lives elsewhere now): it is dropped,
    /// the record is left alone.
    async fn remove_local(
        &self,
        key: &AuthorityKey,
        id: &str,
        snapshot: &zlink_store::types::AuthoritySnapshot,
    ) -> Result<(), CallError> {
        let is_spot = snapshot.allocation.object_kind == StoreKind::Spot;
        // Membership changes and removals of this node run one at a time: a join's commit can
        // never interleave with the close of its Spot or the destroy of its Actor.
        let serial = self.membership_changes.lock().await;
        if is_spot {
            // A Spot with members is not closed (their membership would name a gone Spot);
            // taking it out of the table first makes concurrent joins and creations into it
            // fail from here on.
            let mut m = self.members();
            if let Some(set) = m.spots.get(id).filter(|s| !s.is_empty()) {
                return Err(CallError::new(
                    ErrorKind::Conflict,
                    format!(
                        "Spot {id} still has {} member Actor(s) (e.g. {}): move them to another \
                         Spot or destroy them first",
                        set.len(),
                        set.iter().next().map_or("", String::as_str)
                    ),
                ));
            }
            m.spots.remove(id);
        }
        let mut closing = Vec::new();
        let result = self.remove_exact(key, id, snapshot, &mut closing).await;
        let still_live = self.live().contains_key(key);
        if is_spot && still_live {
            // Still serving (the removal did not happen): it takes members again.
            self.members().spots.entry(id.to_owned()).or_default();
        }
        if !is_spot && !still_live {
            // The instance is gone here (removed, or closed as stale): so is its membership.
            let left = self.members().forget(id);
            if let Some(spot) = left {
                self.notify_member(&spot, false, id);
            }
        }
        drop(serial);
        // Closing waits for a running turn; that turn may itself change memberships, so it
        // happens outside the serial section.
        for (obj, generation) in closing {
            obj.close().await;
            if let Some(g) = generation {
                let _ = self.objects.remove(key, g);
            }
        }
        result
    }

    /// Queue a membership notification on Spot `spot` if it is live here.
    fn notify_member(&self, spot: &str, joined: bool, actor: &str) {
        let Ok(key) = AuthorityKey::new(StoreKind::Spot, spot) else {
            return;
        };
        let obj = self.live().get(&key).map(|e| Arc::clone(&e.obj));
        if let Some(obj) = obj {
            let _ = obj.notify_member(joined, actor.to_owned());
        }
    }

    /// The store side of a removal; the instances to close (with a queue slot to remove) are
    /// left in `closing` for the caller.
    async fn remove_exact(
        &self,
        key: &AuthorityKey,
        id: &str,
        snapshot: &zlink_store::types::AuthoritySnapshot,
        closing: &mut Vec<(Arc<dyn LiveObject>, Option<u64>)>,
    ) -> Result<(), CallError> {
        let me = self.mesh.fence();
        let record_is_ours = self.owner().is_ok_and(|o| o == snapshot.owner)
            && snapshot.owner_node.rid == me.rid
            && snapshot.owner_node.lifecycle_generation == me.lifecycle_generation;
        // Take the entry only if it is exactly the incarnation read: a newer one (created
        // here since the read) is never touched, an older one is stale and closed.
        enum Take {
            Mine(Option<LiveEntry>),
            Newer,
            Stale(Option<LiveEntry>),
        }
        let take = {
            let mut live = self.live();
            match live.get(key).map(|e| e.generation) {
                Some(g) if g == snapshot.object_generation && record_is_ours => {
                    Take::Mine(live.remove(key))
                }
                Some(g) if g > snapshot.object_generation => Take::Newer,
                Some(_) => Take::Stale(live.remove(key)),
                None => Take::Mine(None),
            }
        };
        let entry = match take {
            Take::Mine(e) => e,
            Take::Newer => {
                return Err(CallError::new(
                    ErrorKind::Conflict,
                    format!("{id} was re-created since it was read"),
                ));
            }
            Take::Stale(stale) => {
                if let Some(stale) = stale {
                    closing.push((stale.obj, Some(stale.generation)));
                }
                return Err(CallError::new(
                    ErrorKind::StaleRoute,
                    format!("{id} is no longer owned by this node's incarnation of it"),
                ));
            }
        };
        if entry.is_none() && !record_is_ours {
            return Err(CallError::new(
                ErrorKind::NotFound,
                format!("{id} is not owned by this node"),
            ));
        }
        // (No entry but the record names this node: a Ready record left without an instance
        // by an ambiguous commit; it is deleted the same way.)
        if let Err(e) = self.store.delete_fenced(&snapshot.fence()).await {
            // Keep serving only if the record provably still names this incarnation and owner:
            // a delete whose reply was lost must not leave a second admitting instance behind.
            let still = matches!(
                self.store.read_authority(key).await,
                Ok(zlink_store::types::AuthorityRead::Found(a))
                    if a.object_generation == snapshot.object_generation
                        && a.authority_owner_generation == snapshot.authority_owner_generation
                        && a.owner == snapshot.owner
            );
            if let Some(entry) = entry {
                if still {
                    self.live().insert(key.clone(), entry);
                } else {
                    closing.push((entry.obj, None));
                }
            }
            return Err(store_error(e));
        }
        self.resolver.cache().stale_route(&fence_of(key, snapshot));
        if let Some(entry) = entry {
            closing.push((entry.obj, None));
        }
        Ok(())
    }

    /// Read the authority of `route`'s object and check it against the route (wire §9, the
    /// seven lines of the join admission table): Ready, the route's kind, ObjectGeneration,
    /// owner node and lifecycle, AuthorityOwnerGeneration and owner-lease generation.
    async fn read_matching(
        &self,
        route: &RouteFence,
    ) -> Result<zlink_store::types::AuthoritySnapshot, CallError> {
        let key = AuthorityKey::new(store_kind(route.object_kind), &route.object_id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let zlink_store::types::AuthorityRead::Found(a) =
            self.store.read_authority(&key).await.map_err(store_error)?
        else {
            return Err(CallError::new(
                ErrorKind::NotFound,
                format!("{} does not exist", route.object_id),
            ));
        };
        let matches = a.state == zlink_store::types::AuthorityState::Ready
            && a.allocation.object_kind == store_kind(route.object_kind)
            && a.object_generation == route.object_generation
            && a.owner_node.rid == route.target_node.rid
            && a.owner_node.lifecycle_generation == route.target_node.lifecycle_generation
            && a.authority_owner_generation == route.authority_owner_generation
            && a.owner.lease_generation == route.owner_lease_generation;
        if !matches {
            self.resolver.cache().stale_route(&fence_of(&key, &a));
            return Err(CallError::new(
                ErrorKind::StaleRoute,
                format!(
                    "{} changed since the membership change was addressed",
                    route.object_id
                ),
            ));
        }
        Ok(*a)
    }

    /// The membership change itself, on the owner of both the Actor and the target Spot
    /// (issue "Spots and Actors" §9; wire §9): check both rows against their fences, commit
    /// the Actor's new membership with a Preserve CAS that also checks the Spot's fence (one
    /// aggregate: all or nothing), then switch the Actor to the Spot's gate and notify the
    /// old and the new Spot. Joining the Spot the Actor is in already succeeds unchanged.
    async fn join_local(
        &self,
        actor_route: &RouteFence,
        entry: bool,
        spot_route: &RouteFence,
    ) -> Result<(), CallError> {
        let me = self.mesh.fence();
        if actor_route.target_node != me || spot_route.target_node != me {
            return Err(CallError::new(
                ErrorKind::StaleRoute,
                format!(
                    "the join names another node lifecycle than {} (a join across nodes moves \
                     the Actor; that is relocation)",
                    me.rid
                ),
            ));
        }
        if entry != zlink_protocol::ids::is_entry_spot_id(&spot_route.object_id) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "the join's entry flag ({entry}) does not match Spot {}",
                    spot_route.object_id
                ),
            ));
        }
        if !self.mesh.admission_open() {
            return Err(CallError::new(
                ErrorKind::Unavailable,
                "the owner lease could not be renewed before the fencing deadline",
            ));
        }
        // The Actor's gate changes only at its handler boundary: hold it there (a control
        // claim on its own queue) for the whole change. A turn running now, or a member's
        // yielded job, finishes first under the gate it took.
        let held = {
            let key = AuthorityKey::new(StoreKind::Actor, &actor_route.object_id)
                .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
            let obj = self
                .live()
                .get(&key)
                .filter(|e| e.generation == actor_route.object_generation)
                .map(|e| Arc::clone(&e.obj))
                .ok_or_else(|| {
                    CallError::new(ErrorKind::StaleRoute, "the Actor is not live on this node")
                })?;
            tokio::time::timeout(CREATE_TIMEOUT, obj.hold())
                .await
                .map_err(|_| {
                    CallError::new(
                        ErrorKind::DeadlineExceeded,
                        "the Actor's running turn did not end in time for the join",
                    )
                })??
        };
        let _one_at_a_time = self.membership_changes.lock().await;
        let actor = self.read_matching(actor_route).await?;
        // The receiver resolves the stable type from the authority row (wire §9), never from
        // the wire: a type this node does not host is a typed rejection.
        self.type_of(StoreKind::Actor, &actor.allocation.stable_type)
            .map_err(|e| CallError::new(ErrorKind::Rejected, e.detail().to_owned()))?;
        let spot = self.read_matching(spot_route).await?;
        let actor_key = actor.key.clone();
        let (actor_obj, spot_obj) = {
            let live = self.live();
            let spot_key = spot.key.clone();
            let a = live
                .get(&actor_key)
                .filter(|e| e.generation == actor.object_generation)
                .map(|e| Arc::clone(&e.obj));
            let s = live
                .get(&spot_key)
                .filter(|e| e.generation == spot.object_generation)
                .map(|e| Arc::clone(&e.obj));
            (a, s)
        };
        let (Some(actor_obj), Some(spot_obj)) = (actor_obj, spot_obj) else {
            return Err(CallError::new(
                ErrorKind::StaleRoute,
                "the Actor or the Spot is not live on this node",
            ));
        };
        let actor_id = actor_route.object_id.as_str();
        let spot_id = spot_route.object_id.as_str();
        let old = self.members().of.get(actor_id).cloned();
        if old.as_deref() == Some(spot_id) {
            return Ok(());
        }
        if !self.members().spots.contains_key(spot_id) {
            return Err(CallError::new(
                ErrorKind::NotFound,
                format!("Spot {spot_id} is closing"),
            ));
        }
        let payload = membership_payload(spot_id);
        let ops = [
            zlink_store::types::AggregateOp::Preserve {
                fence: actor.fence(),
                payload: payload.clone(),
            },
            zlink_store::types::AggregateOp::Check(spot.fence()),
        ];
        if let Err(e) = self.store.commit_aggregate(&ops).await {
            // Unknown outcome: the Actor's row tells whether the commit landed.
            let landed = matches!(
                self.store.read_authority(&actor_key).await,
                Ok(zlink_store::types::AuthorityRead::Found(a))
                    if a.object_generation == actor.object_generation
                        && a.authority_owner_generation == actor.authority_owner_generation
                        && a.payload == payload
            );
            if !landed {
                return Err(store_error(e));
            }
        }
        // Committed. Closes and destroys wait for this serial section, so the Spot is still
        // in the table.
        if !self.members().enrol(actor_id, spot_id) {
            tracing::error!(
                actor = actor_id,
                spot = spot_id,
                "a joined Spot left the membership table"
            );
        }
        // The Actor is held at its boundary: its next turn takes the new Spot's gate.
        actor_obj.set_gate(spot_obj.gate());
        drop(held);
        if let Some(old) = old {
            self.notify_member(&old, false, actor_id);
        }
        let _ = spot_obj.notify_member(true, actor_id.to_owned());
        self.stats
            .membership_changes
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Serve an Actor join proposal (command 28) from another node.
    async fn join_for(&self, d: &JoinProposal) -> Result<ReplyResult, CallError> {
        let now_ms = now_unix_ms();
        if d.request.deadline_unix_ms <= now_ms {
            return Err(CallError::new(
                ErrorKind::DeadlineExceeded,
                "the join's deadline passed before it ran",
            ));
        }
        self.join_local(&d.actor_route, d.entry, &d.spot_route)
            .await?;
        Ok(ReplyResult::ActorJoin(
            zlink_protocol::generated::ReplyResultActorJoin {
                receive_chunk_limit_bytes: JOIN_RECEIVE_CHUNK_LIMIT,
            },
        ))
    }

    /// Serve a remote Actor destroy (command 27): the route's incarnation, owner generation and
    /// lease must all still be the current record on this node (§2.6: destroy names its
    /// incarnation).
    async fn destroy_for(&self, d: &RemoteDestroy) -> Result<ReplyResult, CallError> {
        let me = self.mesh.fence();
        let r = &d.route;
        if r.target_node != me || r.object_kind != WireKind::Actor {
            return Err(CallError::new(
                ErrorKind::StaleRoute,
                "the destroy names another node lifecycle",
            ));
        }
        let key = AuthorityKey::new(StoreKind::Actor, &r.object_id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let zlink_store::types::AuthorityRead::Found(a) =
            self.store.read_authority(&key).await.map_err(store_error)?
        else {
            return Err(CallError::new(
                ErrorKind::NotFound,
                "the Actor does not exist",
            ));
        };
        if a.object_generation != r.object_generation
            || a.authority_owner_generation != r.authority_owner_generation
            || a.owner.lease_generation != r.owner_lease_generation
        {
            return Err(CallError::new(
                ErrorKind::Conflict,
                "the Actor changed since the destroy was addressed",
            ));
        }
        self.remove_local(&key, &r.object_id, &a).await?;
        Ok(ReplyResult::None)
    }

    /// Serve a remote close (command 48): the Spot, incarnation, owner generation and
    /// StoreVersion must all still be the current record on this node.
    async fn close_for(&self, d: &RemoteClose) -> Result<ReplyResult, CallError> {
        let me = self.mesh.fence();
        if d.target_node != me {
            return Err(CallError::new(
                ErrorKind::StaleRoute,
                "the close names another node lifecycle",
            ));
        }
        if zlink_protocol::ids::is_entry_spot_id(&d.spot.spot_id) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "an Entry Spot lives as long as its node lifecycle and is not closed",
            ));
        }
        let key = AuthorityKey::new(StoreKind::Spot, &d.spot.spot_id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let zlink_store::types::AuthorityRead::Found(a) =
            self.store.read_authority(&key).await.map_err(store_error)?
        else {
            return Err(CallError::new(
                ErrorKind::NotFound,
                "the Spot does not exist",
            ));
        };
        if a.object_generation != d.spot.object_generation
            || a.authority_owner_generation != d.authority_owner_generation
            || a.store_version != d.store_version
        {
            return Err(CallError::new(
                ErrorKind::Conflict,
                "the Spot changed since the close was addressed",
            ));
        }
        self.remove_local(&key, &d.spot.spot_id, &a).await?;
        Ok(ReplyResult::UserSpotClose(
            zlink_protocol::generated::ReplyResultUserSpotClose { closed: true },
        ))
    }

    /// Fenced cleanup (issue "Spots and Actors" §8): if the owner lease that `a` names is no
    /// longer live by store time, delete the record under its full fence (a Ready record) or
    /// abort its reservation (a Creating record whose target is gone), so the ID becomes
    /// Missing. Safe at that point: the owner stopped admitting at its fencing deadline, which
    /// precedes its lease expiry by the fencing margin, and no one else can hold that lease
    /// again. Returns whether the record was removed.
    async fn cleanup_if_owner_gone(
        &self,
        a: &zlink_store::types::AuthoritySnapshot,
    ) -> Result<bool, CallError> {
        let owner = match &a.pending_creation {
            Some(p) => p.target.owner.clone(),
            None => a.owner.clone(),
        };
        let live = match self.store.read_lease(&owner.owner_id).await {
            Ok(zlink_store::types::LeaseRead::Found { token, .. }) => token == owner,
            Ok(zlink_store::types::LeaseRead::Missing { .. }) => false,
            Err(e) => return Err(store_error(e)),
        };
        if live {
            return Ok(false);
        }
        let removed = match &a.pending_creation {
            Some(p) => self.store.abort(&pending_reservation(a, p)).await.is_ok(),
            None => self.store.delete_fenced(&a.fence()).await.is_ok(),
        };
        if removed {
            self.stats.fenced_cleanups.fetch_add(1, Ordering::Relaxed);
            tracing::info!(key = a.key.as_str(), owner = %owner.owner_id, "fenced cleanup of an expired owner's record");
        }
        Ok(removed)
    }

    /// Serve a remote create (47 for a User Spot, 49 for an Actor) that names this node.
    async fn create_for(&self, d: &RemoteCreate) -> Result<ReplyResult, CallError> {
        let me = self.mesh.fence();
        let owner = self.owner()?;
        let f = &d.reservation;
        if f.target_node != me || f.owner_lease_generation != owner.lease_generation {
            return Err(CallError::new(
                ErrorKind::StaleRoute,
                "the reservation names another node lifecycle or owner lease",
            ));
        }
        let now_ms = now_unix_ms();
        if f.deadline_unix_ms <= now_ms {
            return Err(CallError::new(
                ErrorKind::DeadlineExceeded,
                "the create's deadline passed before it ran",
            ));
        }
        if !self.mesh.admission_open() {
            return Err(CallError::new(
                ErrorKind::Unavailable,
                "this host is past its fencing deadline and creates nothing",
            ));
        }
        let kind = store_kind(d.kind);
        let ty = self.type_of(kind, &d.stable_type)?;
        let key = AuthorityKey::new(kind, &d.id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let zlink_store::types::AuthorityRead::Found(a) =
            self.store.read_authority(&key).await.map_err(store_error)?
        else {
            return Err(CallError::new(
                ErrorKind::NotFound,
                "the reservation is gone",
            ));
        };
        let current = a.state == zlink_store::types::AuthorityState::Creating
            && a.store_version == f.store_version
            && a.object_generation == f.object_generation
            && a.authority_owner_generation == f.authority_owner_generation;
        let Some(pending) = a.pending_creation.clone().filter(|p| {
            current
                && p.target.node.rid == me.rid
                && p.target.node.lifecycle_generation == me.lifecycle_generation
                && p.target.owner == owner
        }) else {
            return Err(CallError::new(
                ErrorKind::Conflict,
                "the reservation is no longer the current creation of this ID on this node",
            ));
        };
        let init = match &pending.content {
            Some(receipt) => Some(self.read_content(receipt).await?),
            None => None,
        };
        let reservation = pending_reservation(&a, &pending);
        let made = self
            .materialize(&ty, kind, &d.id, init, d.membership.as_deref(), reservation)
            .await?;
        let mesh_name = self.mesh.descriptor().mesh_name;
        Ok(match kind {
            StoreKind::Spot => {
                ReplyResult::UserSpotCreate(zlink_protocol::generated::ReplyResultUserSpotCreate {
                    outcome: zlink_protocol::generated::CreateOutcome::Created,
                    spot: zlink_protocol::generated::SpotRef {
                        spot_id: made.id,
                        object_generation: made.object_generation,
                        mesh_name,
                        node_rid: me.rid,
                    },
                })
            }
            StoreKind::Actor => {
                ReplyResult::ActorCreate(zlink_protocol::generated::ReplyResultActorCreate {
                    outcome: zlink_protocol::generated::CreateOutcome::Created,
                    actor: zlink_protocol::generated::ActorRef {
                        actor_id: made.id,
                        object_generation: made.object_generation,
                        mesh_name,
                        node_rid: me.rid,
                    },
                })
            }
        })
    }
}

impl<S: ObjectStore> ObjectCaller for Inner<S> {
    fn call_object(
        &self,
        kind: StoreKind,
        id: String,
        payload: TypedPayload,
        timeout: Option<Duration>,
        held: Option<super::exec::SpotGate>,
    ) -> crate::mesh::handler::BoxFuture<Result<Option<TypedPayload>, CallError>> {
        let this = self.this.get().and_then(std::sync::Weak::upgrade);
        Box::pin(async move {
            let Some(this) = this else {
                return Err(CallError::new(
                    ErrorKind::ShuttingDown,
                    "object runtime stopped",
                ));
            };
            if let (Some(held), Some(_)) = (&held, timeout)
                && let Ok(key) = AuthorityKey::new(kind, &id)
            {
                let same_gate = this
                    .live()
                    .get(&key)
                    .and_then(|e| e.obj.gate())
                    .is_some_and(|g| Arc::ptr_eq(&g, held));
                if same_gate {
                    return Err(CallError::new(
                        ErrorKind::InvalidOperation,
                        format!(
                            "{id} shares this turn's SpotWide gate: an Async request would wait \
                             for the gate its caller holds; wrap it in Yield or send one-way"
                        ),
                    ));
                }
            }
            this.call(kind, &id, payload, None, timeout).await
        })
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
                let request =
                    ObjectCommand::InstanceSpot(i.clone(), ObjectPayload::default()).request();
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
                    inner.destroy_for(&d).await
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
                    inner.close_for(&d).await
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

impl<S: ObjectStore> Inner<S> {
    /// Target admission and queueing of an admitted Spot / Actor record (see the module docs).
    fn deliver(&self, d: RemoteMessage) {
        let admitted = self.admit(&d.route);
        match (d.request, admitted) {
            (None, Ok(obj)) => {
                if let Err(e) = obj.send(d.payload, d.metadata) {
                    tracing::debug!(error = %e, "object send refused after admission");
                }
            }
            (None, Err(e)) => {
                // A one-way message on a stale route has no one to answer: counted as a drop
                // event (wire §7); the sender's cache entry lapses with its lifetime.
                self.stats.dropped_sends.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "object send on a stale route dropped");
            }
            (Some(req), Ok(obj)) => {
                let now_ms = now_unix_ms();
                if req.deadline_unix_ms <= now_ms {
                    self.mesh.reply_to(
                        &d.source,
                        &req,
                        Err(CallError::new(
                            ErrorKind::DeadlineExceeded,
                            "the request's deadline passed before it was admitted",
                        )),
                    );
                    return;
                }
                // Queued now, in arrival order with later records of the same sender; only the
                // wait for the reply runs on its own task.
                match obj.request_start(d.payload, d.metadata) {
                    Ok(rx) => {
                        let mesh = Arc::clone(&self.mesh);
                        let source = d.source;
                        tokio::spawn(async move {
                            let result = rx.await.unwrap_or_else(|_| {
                                Err(CallError::new(ErrorKind::Unavailable, "object closed"))
                            });
                            mesh.reply_to(&source, &req, result);
                        });
                    }
                    Err(e) => self.mesh.reply_to(&d.source, &req, Err(e)),
                }
            }
            (Some(req), Err(e)) => self.mesh.reply_to(&d.source, &req, Err(e)),
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
            live: Mutex::new(HashMap::new()),
            creating: tokio::sync::Mutex::new(HashMap::new()),
            stats: RuntimeStats::default(),
            this: std::sync::OnceLock::new(),
            placement: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            members: Mutex::new(Members::default()),
            activations: Mutex::new(HashMap::new()),
            fault: Mutex::new(fault_from_env()),
            scan_interval_ms: AtomicU64::new(1000),
            publish_seq: AtomicU64::new(0),
            membership_changes: tokio::sync::Mutex::new(()),
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
        self.inner.mesh.descriptor().entry_spot_id
    }

    /// Stop every live object of this node (waiting requests end with `Unavailable`). The
    /// authority records stay: the objects become Unavailable until the lease lapses and a
    /// fenced cleanup removes them. Call before shutting the MeshNode down.
    pub async fn shutdown(&self) {
        *self.inner.members() = Members::default();
        // First operations of cold activations still pending end now, once each.
        self.inner.fail_pending_activations();
        let live: Vec<LiveEntry> = self.inner.live().drain().map(|(_, e)| e).collect();
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
        self.inner.live().len()
    }

    /// Objects live on this node by kind: `(actors, spots)`.
    pub fn live_by_kind(&self) -> (usize, usize) {
        let live = self.inner.live();
        let actors = live
            .keys()
            .filter(|k| {
                zlink_protocol::keys::parse_authority_key(k.as_str())
                    .is_ok_and(|(kind, _)| kind == zlink_protocol::keys::ObjectKindKey::Actor)
            })
            .count();
        (actors, live.len() - actors)
    }

    /// Create Actor `id` of `stable_type` on this node.
    ///
    /// # Errors
    /// `AlreadyExists`; `InvalidOperation` (bad ID, unknown or non-Actor stable type);
    /// `HandlerFailed` when the factory failed (the reservation is aborted); store errors.
    pub async fn create_actor(
        &self,
        stable_type: &str,
        id: &str,
        init: Option<TypedPayload>,
    ) -> Result<ObjectRef, CallError> {
        self.create(StoreKind::Actor, stable_type, id, init).await
    }

    /// Create User Spot `id` of `stable_type` on this node.
    ///
    /// # Errors
    /// As [`ObjectRuntime::create_actor`].
    pub async fn create_user_spot(
        &self,
        stable_type: &str,
        id: &str,
        init: Option<TypedPayload>,
    ) -> Result<ObjectRef, CallError> {
        self.create(StoreKind::Spot, stable_type, id, init).await
    }

    /// Get User Spot `id`, creating it on this node if it is Missing. Concurrent calls for one
    /// ID on this node run the factory at most once; an object Ready anywhere is `Existing`. A
    /// creation in progress elsewhere is waited for until `timeout`.
    ///
    /// # Errors
    /// As [`ObjectRuntime::create_user_spot`]; `DeadlineExceeded` when another node's
    /// creation did not finish in time.
    pub async fn get_or_create_user_spot(
        &self,
        stable_type: &str,
        id: &str,
        init: Option<TypedPayload>,
        timeout: Duration,
    ) -> Result<(ObjectRef, Creation), CallError> {
        let key = AuthorityKey::new(StoreKind::Spot, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let deadline = tokio::time::Instant::now() + timeout;
        let gate = {
            let mut creating = self.inner.creating.lock().await;
            Arc::clone(creating.entry(key.clone()).or_default())
        };
        let guard = gate.lock().await;
        let out = self
            .get_or_create_locked(&key, stable_type, id, init, deadline, timeout)
            .await;
        drop(guard);
        // Forget the gate once nobody else holds or waits for it.
        let mut creating = self.inner.creating.lock().await;
        if Arc::strong_count(&gate) == 2 {
            creating.remove(&key);
        }
        out
    }

    async fn get_or_create_locked(
        &self,
        key: &AuthorityKey,
        stable_type: &str,
        id: &str,
        init: Option<TypedPayload>,
        deadline: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<(ObjectRef, Creation), CallError> {
        let mut pause = Duration::from_millis(5);
        loop {
            // The store's current answer, not a cached route (it may point at a destroyed
            // incarnation).
            match self.inner.resolver.resolve_fresh(key).await {
                Resolution::ReadyRoute(r) => {
                    return Ok((
                        ObjectRef {
                            kind: StoreKind::Spot,
                            id: id.to_owned(),
                            object_generation: r.object_generation,
                        },
                        Creation::Existing,
                    ));
                }
                Resolution::Missing => {
                    match self
                        .create(StoreKind::Spot, stable_type, id, init.clone())
                        .await
                    {
                        Ok(r) => return Ok((r, Creation::Created)),
                        // Another node reserved it between our read and our reserve: wait.
                        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(e),
                    }
                }
                Resolution::Unavailable {
                    reason: UnavailableReason::Creating | UnavailableReason::OwnerLeaseLost,
                    authority,
                } => {
                    // A creation in progress is waited for, unless its target is gone; a record
                    // of a gone owner is cleaned up under its fence. Either way the next round
                    // reads the store again.
                    if self.inner.cleanup_if_owner_gone(&authority).await? {
                        continue;
                    }
                    if authority.state != zlink_store::types::AuthorityState::Creating {
                        return Err(CallError::new(
                            ErrorKind::Unavailable,
                            format!("{id} exists but its owner cannot be used now"),
                        ));
                    }
                }
                Resolution::Unavailable { reason, .. } => {
                    return Err(CallError::new(
                        ErrorKind::Unavailable,
                        format!("{id} exists but cannot be used now ({reason:?})"),
                    ));
                }
                Resolution::StoreFailure(e) => return Err(store_error(e)),
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(CallError::new(
                    ErrorKind::DeadlineExceeded,
                    format!("{id} did not become Ready within {timeout:?}"),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    async fn create(
        &self,
        kind: StoreKind,
        stable_type: &str,
        id: &str,
        init: Option<TypedPayload>,
    ) -> Result<ObjectRef, CallError> {
        let inner = &self.inner;
        inner.type_of(kind, stable_type)?;
        // Placement by placement weight among the nodes that can host the type (an initial
        // payload travels as the creation's content). An Actor becomes a member of its node's
        // Entry Spot.
        let (target, entry) = inner.choose_target(kind, stable_type)?;
        let membership = match kind {
            StoreKind::Spot => None,
            StoreKind::Actor if entry.is_empty() => {
                return Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "node {} has no Entry Spot for the Actor to join (configure \
                         MeshNodeConfig::entry_spot_prefix)",
                        target.rid
                    ),
                ));
            }
            StoreKind::Actor => Some(entry),
        };
        self.create_on(kind, stable_type, id, init, target, membership)
            .await
    }

    /// Create Actor `id` as a member of User Spot `spot_id`: it is placed on the Spot's owner
    /// node (members share their Spot's execution there).
    ///
    /// # Errors
    /// `NotFound` when the Spot does not exist; as [`ObjectRuntime::create_actor`] otherwise.
    pub async fn create_actor_in(
        &self,
        stable_type: &str,
        id: &str,
        spot_id: &str,
        init: Option<TypedPayload>,
    ) -> Result<ObjectRef, CallError> {
        let inner = &self.inner;
        inner.type_of(StoreKind::Actor, stable_type)?;
        let spot = AuthorityKey::new(StoreKind::Spot, spot_id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let route = match inner.resolver.resolve_fresh(&spot).await {
            Resolution::ReadyRoute(r) => r,
            Resolution::Missing => {
                return Err(CallError::new(
                    ErrorKind::NotFound,
                    format!("Spot {spot_id} does not exist"),
                ));
            }
            Resolution::Unavailable { reason, .. } => {
                return Err(CallError::new(
                    ErrorKind::Unavailable,
                    format!("Spot {spot_id} cannot be used now ({reason:?})"),
                ));
            }
            Resolution::StoreFailure(e) => return Err(store_error(e)),
        };
        let target = zlink_protocol::generated::NodeFence {
            rid: route.owner_node.rid.clone(),
            lifecycle_generation: route.owner_node.lifecycle_generation,
        };
        self.create_on(
            StoreKind::Actor,
            stable_type,
            id,
            init,
            target,
            Some(spot_id.to_owned()),
        )
        .await
    }

    /// Reserve `id` for `target` and have it created there: locally, or by remote create
    /// (47 for a Spot, 49 for an Actor) with reconciliation through the store when the outcome
    /// is unknown.
    async fn create_on(
        &self,
        kind: StoreKind,
        stable_type: &str,
        id: &str,
        init: Option<TypedPayload>,
        target: zlink_protocol::generated::NodeFence,
        membership: Option<String>,
    ) -> Result<ObjectRef, CallError> {
        let inner = &self.inner;
        let key = AuthorityKey::new(kind, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let ty = inner.type_of(kind, stable_type)?;
        inner.failed_barrier_open(&key).await?;
        if !inner.mesh.admission_open() {
            return Err(CallError::new(
                ErrorKind::Unavailable,
                "this host is past its fencing deadline and creates nothing",
            ));
        }
        let me = inner.mesh.fence();
        if target == me {
            if inner.mesh.descriptor().object_role != zlink_protocol::generated::ObjectRole::Server
            {
                return Err(CallError::new(
                    ErrorKind::InvalidOperation,
                    "this node is not an Object Server and hosts no objects",
                ));
            }
            let reservation = inner
                .reserve(&key, kind, stable_type, &me, inner.owner()?, None)
                .await?;
            return inner
                .materialize(&ty, kind, id, init, membership.as_deref(), reservation)
                .await;
        }
        let owner = inner.owner_of(&target).await?;
        // The initial payload travels as the creation's content, read by the target.
        let content = match &init {
            Some(p) => Some(inner.put_content(p).await?),
            None => None,
        };
        let reserved = inner
            .reserve(&key, kind, stable_type, &target, owner, content.clone())
            .await;
        let reservation = match reserved {
            Ok(r) => r,
            Err(e) => {
                if let Some(c) = &content {
                    let _ = inner.store.delete(&c.reference).await;
                }
                return Err(e);
            }
        };
        let result = self
            .create_remote(kind, stable_type, id, &key, target, membership, reservation)
            .await;
        if let Some(c) = &content {
            // Done with (either way): the retention would drop it later anyway.
            let _ = inner.store.delete(&c.reference).await;
        }
        result
    }

    /// The remote half of a creation: command 47 / 49 to the reserved target, then
    /// reconciliation through the store when the outcome is unknown.
    #[allow(clippy::too_many_arguments)]
    async fn create_remote(
        &self,
        kind: StoreKind,
        stable_type: &str,
        id: &str,
        key: &AuthorityKey,
        target: zlink_protocol::generated::NodeFence,
        membership: Option<String>,
        reservation: zlink_store::types::Reservation,
    ) -> Result<ObjectRef, CallError> {
        let inner = &self.inner;
        let deadline_unix_ms = std::time::SystemTime::now()
            .checked_add(CREATE_TIMEOUT)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(u64::MAX, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            });
        let fence = ReservationFence {
            store_version: reservation.store_version,
            object_generation: reservation.object_generation,
            authority_owner_generation: reservation.authority_owner_generation,
            target_node: target.clone(),
            owner_lease_generation: reservation.target.owner.lease_generation,
            pending_capacity: 1,
            deadline_unix_ms,
        };
        let sent = inner
            .mesh
            .object_create(
                &target,
                id,
                stable_type,
                membership.as_deref(),
                fence,
                CREATE_TIMEOUT,
            )
            .await;
        let made = ObjectRef {
            kind,
            id: id.to_owned(),
            object_generation: reservation.object_generation,
        };
        match sent {
            Ok(()) => {
                inner.stats.created_remotely.fetch_add(1, Ordering::Relaxed);
                Ok(made)
            }
            Err(e) => {
                // The outcome may be unknown (reply lost, deadline): reconcile with the store.
                match inner.store.read_authority(key).await {
                    Ok(zlink_store::types::AuthorityRead::Found(a))
                        if a.state == zlink_store::types::AuthorityState::Ready
                            && a.object_generation == reservation.object_generation =>
                    {
                        inner.stats.created_remotely.fetch_add(1, Ordering::Relaxed);
                        Ok(made)
                    }
                    _ => {
                        // Not committed when read: give the slot back under its fence. A commit
                        // that races this abort wins, and then the creation did succeed.
                        match inner.give_back(&reservation).await {
                            GiveBack::Committed(_) => {
                                inner.stats.created_remotely.fetch_add(1, Ordering::Relaxed);
                                Ok(made)
                            }
                            GiveBack::Aborted | GiveBack::Barrier => Err(e),
                        }
                    }
                }
            }
        }
    }

    /// Destroy Actor `id` (owned by this node): its authority is deleted under the full fence,
    /// waiting work ends with `Unavailable`, and the ID is Missing afterwards.
    ///
    /// # Errors
    /// `NotFound` when this node does not own it; store errors.
    pub async fn destroy_actor(&self, id: &str) -> Result<(), CallError> {
        self.remove(StoreKind::Actor, id).await
    }

    /// Close User Spot `id` (owned by this node), like [`ObjectRuntime::destroy_actor`].
    ///
    /// # Errors
    /// As [`ObjectRuntime::destroy_actor`].
    pub async fn close_user_spot(&self, id: &str) -> Result<(), CallError> {
        self.remove(StoreKind::Spot, id).await
    }

    async fn remove(&self, kind: StoreKind, id: &str) -> Result<(), CallError> {
        let inner = &self.inner;
        if kind == StoreKind::Spot && zlink_protocol::ids::is_entry_spot_id(id) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "an Entry Spot lives as long as its node lifecycle and is not closed",
            ));
        }
        let key = AuthorityKey::new(kind, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let read = inner
            .store
            .read_authority(&key)
            .await
            .map_err(store_error)?;
        let zlink_store::types::AuthorityRead::Found(snapshot) = read else {
            return Err(CallError::new(
                ErrorKind::NotFound,
                format!("{id} does not exist"),
            ));
        };
        let me = inner.mesh.fence();
        let remote_owner = snapshot.owner_node.rid != me.rid
            || snapshot.owner_node.lifecycle_generation != me.lifecycle_generation;
        if !remote_owner {
            return inner.remove_local(&key, id, &snapshot).await;
        }
        if kind == StoreKind::Actor {
            // Remote destroy (command 27) of exactly the incarnation read.
            let route = RouteFence {
                object_kind: WireKind::Actor,
                object_id: id.to_owned(),
                object_generation: snapshot.object_generation,
                target_node: zlink_protocol::generated::NodeFence {
                    rid: snapshot.owner_node.rid.clone(),
                    lifecycle_generation: snapshot.owner_node.lifecycle_generation,
                },
                authority_owner_generation: snapshot.authority_owner_generation,
                owner_lease_generation: snapshot.owner.lease_generation,
            };
            inner.mesh.actor_destroy(&route, CREATE_TIMEOUT).await?;
            inner
                .resolver
                .cache()
                .stale_route(&fence_of(&key, &snapshot));
            return Ok(());
        }
        // Remote close (command 48): the owner checks the same fences and deletes.
        let target = zlink_protocol::generated::NodeFence {
            rid: snapshot.owner_node.rid.clone(),
            lifecycle_generation: snapshot.owner_node.lifecycle_generation,
        };
        let spot = zlink_protocol::generated::SpotRef {
            spot_id: id.to_owned(),
            object_generation: snapshot.object_generation,
            mesh_name: snapshot.owner_node.mesh.clone(),
            node_rid: snapshot.owner_node.rid.clone(),
        };
        inner
            .mesh
            .user_spot_close(
                &target,
                spot,
                snapshot.authority_owner_generation,
                snapshot.store_version,
                CREATE_TIMEOUT,
            )
            .await?;
        inner
            .resolver
            .cache()
            .stale_route(&fence_of(&key, &snapshot));
        Ok(())
    }

    /// Request Spot `id` **with Instance intent** for stable type `stable_type` (valid for this
    /// call only): a Missing Spot is cold-activated on a node chosen from descriptors and this
    /// message is its first; a Ready one is called as usual. Concurrent first calls to one ID
    /// produce one activation, and every caller gets one reply.
    ///
    /// # Errors
    /// As [`ObjectRuntime::request_to_spot`]; `Rejected` when no node can host the type;
    /// `Unavailable` when the activation failed (its records were removed under their fence).
    pub async fn request_to_instance_spot<M: JsonMessage, R: JsonMessage>(
        &self,
        stable_type: &str,
        id: &str,
        msg: &M,
        timeout: Duration,
    ) -> Result<R, CallError> {
        let reply = self
            .inner
            .call_instance(stable_type, id, encode_json(msg)?, None, Some(timeout))
            .await?;
        decode_json(&reply.unwrap_or_default())
    }

    /// One-way message to Spot `id` with Instance intent (see
    /// [`ObjectRuntime::request_to_instance_spot`]); completes at source-local admission.
    ///
    /// # Errors
    /// As [`ObjectRuntime::send_to_spot`].
    pub async fn send_to_instance_spot<M: JsonMessage>(
        &self,
        stable_type: &str,
        id: &str,
        msg: &M,
    ) -> Result<(), CallError> {
        self.inner
            .call_instance(stable_type, id, encode_json(msg)?, None, None)
            .await
            .map(|_| ())
    }

    /// Logical Multicast (glossary §4; issue "Instance Spot cold activation" §4): publish `msg`
    /// on (`channel`, `topic`). The target snapshot is fixed now: every ready remote node that
    /// is a Server of `channel` with a positive weight gets one `logicalMulticast` (23) — the
    /// weight's size does not matter — and this node's own matching Spot subscriptions get it
    /// locally. Each receiving node delivers it, one-way, to its local Spots subscribed to
    /// (`channel`, `topic`, `M`'s packet name). Completes without a per-target result (a target
    /// that cannot be reached is counted); membership changes during the publish do not
    /// change its snapshot.
    ///
    /// # Errors
    /// `InvalidOperation` for a reserved or malformed topic, or when this node is not a member
    /// of `channel` — checked before anything is sent.
    pub async fn publish<M: JsonMessage>(
        &self,
        channel: &str,
        topic: &str,
        msg: &M,
    ) -> Result<(), CallError> {
        self.publish_payload(channel, topic, encode_json(msg)?, None)
            .await
    }

    /// [`ObjectRuntime::publish`] with a typed payload and a metadata snapshot.
    ///
    /// # Errors
    /// As [`ObjectRuntime::publish`].
    pub async fn publish_payload(
        &self,
        channel: &str,
        topic: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<(), CallError> {
        let inner = &self.inner;
        if let Some(why) = super::registry::topic_problem(topic) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!("topic {topic:?} cannot be published: {why}"),
            ));
        }
        let me = inner.mesh.descriptor();
        if !me.channels.iter().any(|c| c.channel_name == channel) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "node {} is not a member of Channel {channel:?}",
                    me.node.rid
                ),
            ));
        }
        // The target snapshot, fixed once.
        let remote: Vec<zlink_protocol::generated::NodeFence> = inner
            .mesh
            .peers()
            .into_iter()
            .filter(|p| p.state == crate::mesh::PeerState::Ready)
            .filter_map(|p| p.descriptor)
            .filter(|d| {
                d.channels.iter().any(|c| {
                    c.channel_name == channel
                        && c.role == zlink_protocol::generated::ChannelRole::Server
                        && c.weight > 0
                })
            })
            .map(|d| d.node)
            .collect();
        let sequence = inner.publish_seq.fetch_add(1, Ordering::Relaxed) + 1;
        inner
            .stats
            .multicast_published
            .fetch_add(1, Ordering::Relaxed);
        inner.deliver_to_subscribers(channel, topic, &payload, metadata.as_ref());
        // One record per target, submitted side by side: a slow peer does not hold up the rest.
        let sends = remote.iter().map(|node| {
            let (payload, metadata) = (payload.clone(), metadata.clone());
            async move {
                let sent = inner
                    .mesh
                    .logical_multicast(node, channel, topic, sequence, payload, metadata)
                    .await;
                (node, sent)
            }
        });
        for (node, sent) in futures::future::join_all(sends).await {
            match sent {
                Ok(()) => inner.stats.multicast_sent.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::debug!(node = %node.rid, error = %e, "a multicast target was not reached");
                    inner
                        .stats
                        .multicast_submit_failures
                        .fetch_add(1, Ordering::Relaxed)
                }
            };
        }
        Ok(())
    }

    /// Fenced cleanup of one ID (issue "Spots and Actors" §8): if its record names an owner
    /// whose lease is no longer live by store time, delete the record under its full fence (or
    /// abort a pending creation whose target is gone), so the ID is Missing. Creations and calls
    /// with Instance intent do this on their own; this runs it on demand (operators, tests).
    /// Returns whether a record was removed.
    ///
    /// # Errors
    /// `StoreFailure` when the store cannot tell.
    pub async fn clean_up_dead_owner(&self, kind: StoreKind, id: &str) -> Result<bool, CallError> {
        let key = AuthorityKey::new(kind, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        match self
            .inner
            .store
            .read_authority(&key)
            .await
            .map_err(store_error)?
        {
            zlink_store::types::AuthorityRead::Found(a) => {
                self.inner.cleanup_if_owner_gone(&a).await
            }
            zlink_store::types::AuthorityRead::Missing { .. } => Ok(false),
        }
    }

    /// Inject (or clear) a fault in the activation path (tests and chaos drills).
    pub fn set_activation_fault(&self, fault: Option<ActivationFault>) {
        *self
            .inner
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fault;
    }

    /// Period of the background activation recovery scan (default 1 s).
    pub fn set_activation_scan_interval(&self, every: Duration) {
        self.inner.scan_interval_ms.store(
            u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1),
            Ordering::Relaxed,
        );
    }

    /// Run one pass of the activation recovery scan now; returns how many unfinished
    /// activations it resumed or ended.
    pub async fn recover_activations(&self) -> usize {
        self.inner.recover_activations(ACTIVATION_SCAN_BATCH).await
    }

    /// Work not finished in the objects live here — waiting items, running turns, yielded
    /// continuations (a drain waits for them).
    pub fn queued_work(&self) -> usize {
        self.inner.live().values().map(|e| e.obj.pending()).sum()
    }

    /// Cold activations of this lifecycle whose first operation is not done yet.
    pub fn unfinished_activations(&self) -> usize {
        self.inner
            .activations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Make Actor `actor_id` a member of Spot `spot_id` (issue "Spots and Actors" §9). Both
    /// must live on the same node; that owner commits the new membership atomically with the
    /// Actor's authority (Preserve CAS + a check of the Spot's fence), the Actor's later turns
    /// take the new Spot's execution gate (SpotWide), and the Spots get their
    /// `on_member_left` / `on_member_joined` callbacks. From a node that is not the owner the
    /// proposal travels as `actorJoin` (28).
    ///
    /// # Errors
    /// `NotFound` (no such Actor / Spot, or the Spot is closing), `InvalidOperation` (the two
    /// live on different nodes: that join moves the Actor, which is relocation), `StaleRoute`
    /// (either changed meanwhile), `Unavailable`, `StoreFailure`.
    pub async fn join_actor(&self, actor_id: &str, spot_id: &str) -> Result<(), CallError> {
        let spot = self.ready_route(StoreKind::Spot, spot_id).await?;
        self.join_route(actor_id, spot).await
    }

    /// Move Actor `actor_id` back to the Entry Spot of the node it lives on (a leave from its
    /// User Spot), like [`ObjectRuntime::join_actor`].
    ///
    /// # Errors
    /// As [`ObjectRuntime::join_actor`].
    pub async fn leave_actor(&self, actor_id: &str) -> Result<(), CallError> {
        let actor = self.ready_route(StoreKind::Actor, actor_id).await?;
        let inner = &self.inner;
        let me = inner.mesh.descriptor();
        let entry = if actor.target_node.rid == me.node.rid {
            me.entry_spot_id
        } else {
            inner
                .mesh
                .peers()
                .into_iter()
                .filter_map(|p| p.descriptor)
                .find(|d| d.node == actor.target_node)
                .map(|d| d.entry_spot_id)
                .unwrap_or_default()
        };
        if entry.is_empty() {
            return Err(CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "the Entry Spot of node {} (owner of {actor_id}) is not known here",
                    actor.target_node.rid
                ),
            ));
        }
        let spot = self.ready_route(StoreKind::Spot, &entry).await?;
        self.join_route(actor_id, spot).await
    }

    async fn join_route(&self, actor_id: &str, spot: RouteFence) -> Result<(), CallError> {
        let inner = &self.inner;
        let actor = self.ready_route(StoreKind::Actor, actor_id).await?;
        if actor.target_node != spot.target_node {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "Actor {actor_id} lives on {} and Spot {} on {}: a join across nodes moves \
                     the Actor, which is relocation (not available in this version)",
                    actor.target_node.rid, spot.object_id, spot.target_node.rid
                ),
            ));
        }
        let entry = zlink_protocol::ids::is_entry_spot_id(&spot.object_id);
        if actor.target_node == inner.mesh.fence() {
            inner.join_local(&actor, entry, &spot).await
        } else {
            inner
                .mesh
                .actor_join(&actor, entry, &spot, CREATE_TIMEOUT)
                .await
        }
    }

    /// The current route of `id`, read from the store (no cache): Ready only.
    async fn ready_route(&self, kind: StoreKind, id: &str) -> Result<RouteFence, CallError> {
        let key = AuthorityKey::new(kind, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        match self.inner.resolver.resolve_fresh(&key).await {
            Resolution::ReadyRoute(r) => Ok(route_fence(&r, kind, id)),
            Resolution::Missing => Err(CallError::new(
                ErrorKind::NotFound,
                format!("{id} does not exist"),
            )),
            Resolution::Unavailable { reason, .. } => Err(CallError::new(
                ErrorKind::Unavailable,
                format!("{id} cannot be used now ({reason:?})"),
            )),
            Resolution::StoreFailure(e) => Err(store_error(e)),
        }
    }

    /// The Spot Actor `id` is a member of, if it lives on this node.
    pub fn membership(&self, actor_id: &str) -> Option<String> {
        self.inner.members().of.get(actor_id).cloned()
    }

    /// The member Actors of Spot `id`, if it lives on this node.
    pub fn members_of(&self, spot_id: &str) -> Option<Vec<String>> {
        self.inner
            .members()
            .spots
            .get(spot_id)
            .map(|s| s.iter().cloned().collect())
    }

    /// One-way message to Actor `id` (completes at source-local admission).
    ///
    /// # Errors
    /// `NotFound` (Missing), `Unavailable`, `StaleRoute`, `StoreFailure`, `InvalidOperation`.
    pub async fn send_to_actor<M: JsonMessage>(&self, id: &str, msg: &M) -> Result<(), CallError> {
        self.call(StoreKind::Actor, id, encode_json(msg)?, None, None)
            .await
            .map(|_| ())
    }

    /// Request to Actor `id` with one end-to-end `timeout`.
    ///
    /// # Errors
    /// As [`ObjectRuntime::send_to_actor`]; `DeadlineExceeded`; the handler's error.
    pub async fn request_to_actor<M: JsonMessage, R: JsonMessage>(
        &self,
        id: &str,
        msg: &M,
        timeout: Duration,
    ) -> Result<R, CallError> {
        let reply = self
            .call(StoreKind::Actor, id, encode_json(msg)?, None, Some(timeout))
            .await?;
        decode_json(&reply.unwrap_or_default())
    }

    /// One-way message to Spot `id`.
    ///
    /// # Errors
    /// As [`ObjectRuntime::send_to_actor`].
    pub async fn send_to_spot<M: JsonMessage>(&self, id: &str, msg: &M) -> Result<(), CallError> {
        self.call(StoreKind::Spot, id, encode_json(msg)?, None, None)
            .await
            .map(|_| ())
    }

    /// Request to Spot `id`.
    ///
    /// # Errors
    /// As [`ObjectRuntime::request_to_actor`].
    pub async fn request_to_spot<M: JsonMessage, R: JsonMessage>(
        &self,
        id: &str,
        msg: &M,
        timeout: Duration,
    ) -> Result<R, CallError> {
        let reply = self
            .call(StoreKind::Spot, id, encode_json(msg)?, None, Some(timeout))
            .await?;
        decode_json(&reply.unwrap_or_default())
    }

    /// The call path shared by every ID-addressed surface: `timeout` `None` is a one-way send.
    ///
    /// # Errors
    /// See the module docs.
    pub async fn call(
        &self,
        kind: StoreKind,
        id: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        self.inner.call(kind, id, payload, metadata, timeout).await
    }
}
