//! Creation (wire §7, §8.1): reserve under the Location Store, run the factory on the target (here or remote through 47 / 49), commit Ready; the failed-creation barrier, creation content in the Relocation Store, get-or-create, and fenced cleanup of a dead owner's record.

use super::*;

/// After a Ready commit whose reply did not come back as success: did it land? (wire §7: read
/// to reconcile.) It landed exactly when the record read is Ready, of the reserved incarnation,
/// under the reserved owner; anything else — another state, incarnation or owner, no record,
/// or a read that failed too — means it did not, and the creation gives its slot back.
pub(super) fn ready_commit_landed<'a>(
    read: &'a zlink_store::Result<zlink_store::types::AuthorityRead>,
    generation: u64,
    owner: &OwnerToken,
) -> Option<&'a zlink_store::types::AuthoritySnapshot> {
    match read {
        Ok(zlink_store::types::AuthorityRead::Found(a))
            if a.state == zlink_store::types::AuthorityState::Ready
                && a.object_generation == generation
                && &a.owner == owner =>
        {
            Some(a)
        }
        Ok(
            zlink_store::types::AuthorityRead::Found(_)
            | zlink_store::types::AuthorityRead::Missing { .. },
        )
        | Err(_) => None,
    }
}

impl<S: ObjectStore> Inner<S> {
    /// The registered type `stable_type`, checked against `kind`.
    pub(super) fn type_of(
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
    pub(super) async fn reserve(
        &self,
        key: &AuthorityKey,
        kind: StoreKind,
        stable_type: &str,
        target: &zlink_protocol::generated::NodeFence,
        owner: OwnerToken,
        content: Option<zlink_store::types::ContentReceipt>,
    ) -> Result<zlink_store::types::Reservation, CallError> {
        if self.relocations.relocating() && *target == self.mesh.fence() {
            // Issue 17 item 1: a relocating (or relocated) host creates and activates nothing.
            return Err(CallError::new(
                ErrorKind::Unavailable,
                format!("{} is relocating and takes no new object", self.mesh.rid()),
            ));
        }
        let reservation_id = self.new_reservation_id()?;
        let request = ReserveRequest {
            key: key.clone(),
            reservation_id,
            object_kind: kind,
            stable_type: stable_type.to_owned(),
            target: TargetFence {
                node: NodeRef {
                    mesh: self.mesh.with_descriptor(|d| d.mesh_name.clone()),
                    rid: target.rid.to_string(),
                    lifecycle_generation: target.lifecycle_generation,
                },
                owner,
            },
            // Entry Spots are never counted (glossary "Descriptor capacity").
            capacity_delta: u32::from(
                self.types
                    .get(stable_type)
                    .is_none_or(|t| t.kind() != ObjectTypeKind::EntrySpot),
            ),
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
    pub(super) async fn give_back(
        &self,
        reservation: &zlink_store::types::Reservation,
    ) -> GiveBack {
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
    pub(super) fn failed_lock(
        &self,
    ) -> MutexGuard<'_, HashMap<AuthorityKey, zlink_store::types::Reservation>> {
        self.failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    /// The failed-creation barrier of `key`: open when no failure is recorded, or when a read
    /// now finds the ID Missing (the barrier is then lifted).
    pub(super) async fn failed_barrier_open(&self, key: &AuthorityKey) -> Result<(), CallError> {
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
    pub(super) fn new_reservation_id(&self) -> Result<String, CallError> {
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
    pub(super) async fn put_content(
        &self,
        init: &TypedPayload,
    ) -> Result<zlink_store::types::ContentReceipt, ObjectError> {
        let bytes = init
            .encode()
            .map_err(|e| ObjectError::call(ErrorKind::InvalidOperation, e.to_string()))?;
        if bytes.len() > MAX_CREATION_CONTENT {
            return Err(ObjectError::call(
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
            .map_err(ObjectError::store("put"))?;
        Ok(zlink_store::types::ContentReceipt {
            reference,
            sha256,
            size,
        })
    }
    /// Read and verify a creation's content against its receipt.
    pub(super) async fn read_content(
        &self,
        receipt: &zlink_store::types::ContentReceipt,
    ) -> Result<TypedPayload, ObjectError> {
        let stored = self
            .store
            .read(&receipt.reference)
            .await
            .map_err(ObjectError::store("read"))?
            .ok_or_else(|| {
                ObjectError::call(
                    ErrorKind::NotFound,
                    format!("creation content {} is gone", receipt.reference),
                )
            })?;
        let bytes = stored.bytes;
        let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
        if bytes.len() as u64 != receipt.size || digest.as_ref() != receipt.sha256 {
            return Err(ObjectError::call(
                ErrorKind::Conflict,
                format!(
                    "creation content {} does not match its receipt (size or SHA-256)",
                    receipt.reference
                ),
            ));
        }
        TypedPayload::decode_shared(&bytes)
            .map_err(|e| ObjectError::call(ErrorKind::InvalidOperation, e.to_string()))
    }
    /// On this node, for a reservation that names it: open the queue (work may queue before
    /// the instance exists), run the factory, commit Ready with the reservation fence, make the
    /// queue Ready. A factory failure aborts the reservation under its fence.
    pub(super) async fn materialize(
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
            && !self.live().enrol(id, spot)
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
                moves: Vec::new(),
                binding: None,
            },
        );
        let snapshot = match self.store.commit_ready(&reservation, framework).await {
            Ok(s) => s,
            Err(e) => {
                // The commit may have happened (e.g. the reply was lost): read to reconcile
                // (wire §7) before giving up the instance.
                let read = self.store.read_authority(&key).await;
                match ready_commit_landed(&read, generation, &reservation.target.owner) {
                    Some(a) => a.clone(),
                    None => {
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
        self.live()
            .set_owner_generation(&key, generation, snapshot.authority_owner_generation);
        let _ = self.objects.mark_ready(&key, generation);
        self.stats.created.fetch_add(1, Ordering::Relaxed);
        enrolled.keep();
        match kind {
            StoreKind::Spot => {
                self.live().open_spot(id);
            }
            StoreKind::Actor => {
                if let Some(spot) = membership {
                    self.notify_member(spot, true, id);
                }
            }
        }
        Ok(ObjectRef::made(
            kind,
            id,
            generation,
            zlink_protocol::generated::NodeFence {
                rid: reservation.target.node.rid.clone().into(),
                lifecycle_generation: reservation.target.node.lifecycle_generation,
            },
            snapshot.authority_owner_generation,
            reservation.target.owner.lease_generation,
            reservation.target.node.mesh.clone(),
        ))
    }
    /// The owner lease of node `target` (from its MeshNode descriptor in the store).
    pub(super) async fn owner_of(
        &self,
        target: &zlink_protocol::generated::NodeFence,
    ) -> Result<OwnerToken, ObjectError> {
        let records = self
            .store
            .list_descriptors(
                zlink_store::types::DescriptorKind::MeshNode,
                &self.mesh.with_descriptor(|d| d.mesh_name.clone()),
            )
            .await
            .map_err(ObjectError::store("list_descriptors"))?;
        records
            .into_iter()
            .find(|r| {
                r.key.rid == target.rid && r.lifecycle_generation == target.lifecycle_generation
            })
            .map(|r| r.owner)
            .ok_or_else(|| {
                ObjectError::call(
                    ErrorKind::Unavailable,
                    format!(
                        "node {} has no live descriptor for its lifecycle",
                        target.rid
                    ),
                )
            })
    }
    /// Fenced cleanup (issue "Spots and Actors" §8): if the owner lease that `a` names is no
    /// longer live by store time, delete the record under its full fence (a Ready record) or
    /// abort its reservation (a Creating record whose target is gone), so the ID becomes
    /// Missing. Safe at that point: the owner stopped admitting at its fencing deadline, which
    /// precedes its lease expiry by the fencing margin, and no one else can hold that lease
    /// again. Returns whether the record was removed.
    pub(super) async fn cleanup_if_owner_gone(
        &self,
        a: &zlink_store::types::AuthoritySnapshot,
    ) -> Result<bool, ObjectError> {
        let owner = match &a.pending_creation {
            Some(p) => p.target.owner.clone(),
            None => a.owner.clone(),
        };
        let live = match self.store.read_lease(&owner.owner_id).await {
            Ok(zlink_store::types::LeaseRead::Found { token, .. }) => token == owner,
            Ok(zlink_store::types::LeaseRead::Missing { .. }) => false,
            Err(e) => return Err(ObjectError::store("read_lease")(e)),
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
    pub(super) async fn create_for(&self, d: &RemoteCreate) -> Result<ReplyResult, CallError> {
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
        let mesh_name = self.mesh.with_descriptor(|d| d.mesh_name.clone());
        Ok(match kind {
            StoreKind::Spot => {
                ReplyResult::UserSpotCreate(zlink_protocol::generated::ReplyResultUserSpotCreate {
                    outcome: zlink_protocol::generated::CreateOutcome::Created,
                    spot: zlink_protocol::generated::SpotRef {
                        spot_id: made.id,
                        object_generation: made.object_generation,
                        mesh_name,
                        node_rid: me.rid.into(),
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
                        node_rid: me.rid.into(),
                    },
                })
            }
        })
    }
}

impl<S: ObjectStore> ObjectRuntime<S> {
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
        self.get_or_create(StoreKind::Spot, stable_type, id, init, timeout)
            .await
    }
    /// Get Actor `id`, creating it on this node if it is Missing (as
    /// [`ObjectRuntime::get_or_create_user_spot`]); its [`ObjectRef::actor_ref`] is what a
    /// session binds.
    ///
    /// # Errors
    /// As [`ObjectRuntime::get_or_create_user_spot`].
    pub async fn get_or_create_actor(
        &self,
        stable_type: &str,
        id: &str,
        init: Option<TypedPayload>,
        timeout: Duration,
    ) -> Result<(ObjectRef, Creation), CallError> {
        self.get_or_create(StoreKind::Actor, stable_type, id, init, timeout)
            .await
    }
    async fn get_or_create(
        &self,
        kind: StoreKind,
        stable_type: &str,
        id: &str,
        init: Option<TypedPayload>,
        timeout: Duration,
    ) -> Result<(ObjectRef, Creation), CallError> {
        let key = AuthorityKey::new(kind, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let deadline = tokio::time::Instant::now() + timeout;
        let _one_at_a_time = self.inner.creating.lock_all(&[&key]).await;
        self.get_or_create_locked(kind, &key, stable_type, id, init, deadline, timeout)
            .await
    }
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn get_or_create_locked(
        &self,
        kind: StoreKind,
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
                    let fence = route_fence(&r, kind, id);
                    return Ok((
                        ObjectRef::made(
                            kind,
                            id,
                            r.object_generation,
                            fence.target_node,
                            r.authority_owner_generation,
                            r.owner.lease_generation,
                            r.owner_node.mesh.clone(),
                        ),
                        Creation::Existing,
                    ));
                }
                Resolution::Missing => {
                    match self.create(kind, stable_type, id, init.clone()).await {
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
    pub(super) async fn create(
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
            rid: zlink_protocol::shared_str::SharedStr::intern(&route.owner_node.rid),
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
    pub(super) async fn create_on(
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
            if inner.mesh.with_descriptor(|d| d.object_role)
                != zlink_protocol::generated::ObjectRole::Server
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
    pub(super) async fn create_remote(
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
        let made = ObjectRef::made(
            kind,
            id,
            reservation.object_generation,
            target.clone(),
            reservation.authority_owner_generation,
            reservation.target.owner.lease_generation,
            reservation.target.node.mesh.clone(),
        );
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
                Ok(self.inner.cleanup_if_owner_gone(&a).await?)
            }
            zlink_store::types::AuthorityRead::Missing { .. } => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use zlink_store::StoreError;
    use zlink_store::types::{AuthorityRead, AuthorityState, StoreTime};

    use super::super::test_fixtures::row;
    use super::*;

    /// Wire §7: a Ready commit whose reply was lost is reconciled by a read; only the reserved
    /// incarnation, Ready, under the reserved owner counts as landed.
    #[test]
    fn a_lost_ready_commit_counts_as_landed_only_for_the_reserved_incarnation_and_owner() {
        let owner = row().owner;
        let found = |f: fn(&mut zlink_store::types::AuthoritySnapshot)| {
            let mut a = row();
            f(&mut a);
            Ok(AuthorityRead::Found(Box::new(a)))
        };
        assert!(ready_commit_landed(&found(|_| {}), 4, &owner).is_some());
        let not: [zlink_store::Result<AuthorityRead>; 6] = [
            found(|a| a.state = AuthorityState::Creating),
            found(|a| a.object_generation = 5),
            found(|a| a.owner.lease_generation = 9),
            found(|a| a.owner.owner_id = "someone-else".into()),
            Ok(AuthorityRead::Missing {
                store_now: StoreTime(0),
            }),
            Err(StoreError::StoreFailure {
                message: "down".into(),
                ambiguous: true,
            }),
        ];
        for read in &not {
            assert!(ready_commit_landed(read, 4, &owner).is_none(), "{read:?}");
        }
    }
}
