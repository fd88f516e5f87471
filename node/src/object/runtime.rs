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
use zlink_protocol::generated::{ObjectKind as WireKind, RouteFence};
use zlink_protocol::metadata::Metadata;
use zlink_store::types::{
    AuthorityKey, NodeRef, ObjectKind as StoreKind, OwnerToken, ReserveRequest, TargetFence,
};
use zlink_store::{LocationStore, StoreError};

use super::exec::{Binding, ObjectCaller};
use super::objects::Objects;
use super::registry::{
    FactoryInput, LiveObject, ObjectType, ObjectTypeKind, Registry, RegistryError,
};
use crate::call::error::{CallError, ErrorKind};
use crate::mesh::handler::{JsonMessage, decode_json, encode_json};
use crate::mesh::{MeshNode, ObjectDelivery, ObjectSink};
use crate::routing::{
    CacheConfig, ReadyRoute, Resolution, Resolver, RouteSource, UnavailableReason,
};

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
    /// Deliveries refused by target admission (stale routes).
    pub stale_routes: AtomicU64,
    /// Calls served on this node without the mesh.
    pub local_calls: AtomicU64,
    /// Calls sent to another owner over the mesh.
    pub remote_calls: AtomicU64,
}

struct LiveEntry {
    generation: u64,
    authority_owner_generation: u64,
    obj: Arc<dyn LiveObject>,
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
}

/// The object runtime attached to one MeshNode.
pub struct ObjectRuntime<S: LocationStore> {
    inner: Arc<Inner<S>>,
}

impl<S: LocationStore> std::fmt::Debug for ObjectRuntime<S> {
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

impl<S: LocationStore> Inner<S> {
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
            Some(e) if e.authority_owner_generation == route.authority_owner_generation => {
                Ok(Arc::clone(&e.obj))
            }
            Some(_) => Err(stale("the authority owner generation changed")),
            None => Err(stale("the object is not live here")),
        }
    }
}

impl<S: LocationStore> Inner<S> {
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
                    None => obj.send(payload).map(|()| None),
                    Some(t) => match tokio::time::timeout(t, obj.request(payload)).await {
                        Ok(r) => r.map(Some),
                        Err(_) => Err(CallError::new(
                            ErrorKind::DeadlineExceeded,
                            format!("no reply from {id} within {t:?}"),
                        )),
                    },
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
            && e.kind() == ErrorKind::StaleRoute
        {
            inner.resolver.cache().stale_route(&route.fence());
        }
        out
    }
}

impl<S: LocationStore> ObjectCaller for Inner<S> {
    fn call_object(
        &self,
        kind: StoreKind,
        id: String,
        payload: TypedPayload,
        timeout: Option<Duration>,
    ) -> crate::mesh::handler::BoxFuture<Result<Option<TypedPayload>, CallError>> {
        let this = self.this.get().and_then(std::sync::Weak::upgrade);
        Box::pin(async move {
            let Some(this) = this else {
                return Err(CallError::new(
                    ErrorKind::ShuttingDown,
                    "object runtime stopped",
                ));
            };
            this.call(kind, &id, payload, None, timeout).await
        })
    }
}

impl<S: LocationStore> ObjectSink for Inner<S> {
    fn deliver(&self, d: ObjectDelivery) {
        let admitted = self.admit(&d.route);
        match (d.request, admitted) {
            (None, Ok(obj)) => {
                if let Err(e) = obj.send(d.payload) {
                    tracing::debug!(error = %e, "object send refused after admission");
                }
            }
            (None, Err(e)) => tracing::debug!(error = %e, "object send on a stale route dropped"),
            (Some(req), Ok(obj)) => {
                let mesh = Arc::clone(&self.mesh);
                let source = d.source;
                tokio::spawn(async move {
                    let result = obj.request(d.payload).await;
                    mesh.reply_to(&source, &req, result);
                });
            }
            (Some(req), Err(e)) => self.mesh.reply_to(&d.source, &req, Err(e)),
        }
    }
}

impl<S: LocationStore> ObjectRuntime<S> {
    /// Attach an object runtime to `mesh` (which must hold an owner lease, i.e. run with a
    /// Location Store), with the registered types and route-cache settings.
    ///
    /// # Errors
    /// [`RuntimeError`].
    pub fn start(
        mesh: Arc<MeshNode>,
        store: Arc<S>,
        registry: Registry,
        cache: CacheConfig,
    ) -> Result<Self, RuntimeError> {
        if mesh.owner_token().is_none() {
            return Err(RuntimeError::NoOwnerLease);
        }
        let types = registry.build()?;
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
        });
        let _ = inner.this.set(Arc::downgrade(&inner));
        mesh.set_object_sink(Arc::clone(&inner) as Arc<dyn ObjectSink>)
            .map_err(RuntimeError::Attach)?;
        Ok(Self { inner })
    }

    /// The resolver (its cache counters and invalidation triggers).
    pub fn resolver(&self) -> &Resolver {
        &self.inner.resolver
    }

    /// Counters.
    pub fn stats(&self) -> &RuntimeStats {
        &self.inner.stats
    }

    /// Objects live on this node.
    pub fn live_count(&self) -> usize {
        self.inner.live().len()
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
        let _one_at_a_time = gate.lock().await;
        let mut pause = Duration::from_millis(5);
        loop {
            match self.inner.resolver.resolve(&key).await {
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
                    reason: UnavailableReason::Creating,
                    ..
                } => {}
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
        let bad = |d: String| CallError::new(ErrorKind::InvalidOperation, d);
        let key = AuthorityKey::new(kind, id).map_err(|e| bad(e.to_string()))?;
        let ty = inner.types.get(stable_type).ok_or_else(|| {
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
        let owner = inner.owner()?;
        let me = inner.mesh.fence();
        let reservation_id = format!(
            "{}-{}",
            me.rid,
            zlink_protocol::codec::hex::encode(
                &crate::mesh::auth::random_bytes::<12>()
                    .map_err(|_| CallError::new(ErrorKind::Unavailable, "no randomness"))?
            )
        );
        let reservation = inner
            .store
            .reserve(&ReserveRequest {
                key: key.clone(),
                reservation_id,
                object_kind: kind,
                stable_type: stable_type.to_owned(),
                target: TargetFence {
                    node: NodeRef {
                        mesh: inner.mesh.descriptor().mesh_name,
                        rid: me.rid.clone(),
                        lifecycle_generation: me.lifecycle_generation,
                    },
                    owner,
                },
                capacity_delta: 1,
                content: None,
                payload: Bytes::new(),
            })
            .await
            .map_err(store_error)?;
        let generation = reservation.object_generation;
        inner
            .objects
            .open(&key, generation)
            .map_err(|e| CallError::new(ErrorKind::Conflict, e.to_string()))?;
        inner.stats.factory_runs.fetch_add(1, Ordering::Relaxed);
        let made = ty
            .create(
                FactoryInput {
                    id: id.to_owned(),
                    stable_type: stable_type.to_owned(),
                    object_generation: generation,
                    init,
                },
                Binding::new(Arc::clone(&inner.objects), key.clone(), generation).with_caller(
                    Arc::downgrade(&(Arc::clone(inner) as Arc<dyn ObjectCaller>)),
                ),
            )
            .await;
        let obj: Arc<dyn LiveObject> = match made {
            Ok(o) => Arc::from(o),
            Err(e) => {
                // The factory failed: give the ID back under the reservation fence.
                let _ = inner.store.abort(&reservation).await;
                let _ = inner.objects.remove(&key, generation);
                return Err(CallError::new(
                    ErrorKind::HandlerFailed,
                    format!("factory of {stable_type:?} failed for {id}: {}", e.detail()),
                ));
            }
        };
        let snapshot = match inner.store.commit_ready(&reservation, Bytes::new()).await {
            Ok(s) => s,
            Err(e) => {
                obj.close().await;
                let _ = inner.store.abort(&reservation).await;
                return Err(store_error(e));
            }
        };
        inner.live().insert(
            key.clone(),
            LiveEntry {
                generation,
                authority_owner_generation: snapshot.authority_owner_generation,
                obj,
            },
        );
        let _ = inner.objects.mark_ready(&key, generation);
        inner.stats.created.fetch_add(1, Ordering::Relaxed);
        Ok(ObjectRef {
            kind,
            id: id.to_owned(),
            object_generation: generation,
        })
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
        let key = AuthorityKey::new(kind, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let read = self
            .inner
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
        let entry = self.inner.live().remove(&key);
        let Some(entry) = entry else {
            return Err(CallError::new(
                ErrorKind::NotFound,
                format!("{id} is not owned by this node"),
            ));
        };
        if let Err(e) = self.inner.store.delete_fenced(&snapshot.fence()).await {
            // Keep serving it: the authority still names us.
            self.inner.live().insert(key, entry);
            return Err(store_error(e));
        }
        self.inner
            .resolver
            .cache()
            .stale_route(&crate::routing::RouteFence {
                key: key.clone(),
                object_generation: snapshot.object_generation,
                authority_owner_generation: snapshot.authority_owner_generation,
                owner_rid: snapshot.owner_node.rid.clone(),
                owner_lifecycle_generation: snapshot.owner_node.lifecycle_generation,
                owner_lease_generation: snapshot.owner.lease_generation,
            });
        let _ = entry.generation;
        entry.obj.close().await;
        Ok(())
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
