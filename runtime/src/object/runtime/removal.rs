//! Removal (wire §8.1, routing §2.6): destroying an Actor and closing a User Spot, here or on their owner (27 / 48), always of exactly the incarnation read.

use super::*;

impl<S: ObjectStore> Inner<S> {
    /// Delete this node's own incarnation `snapshot` of `key` (destroy / close): the record
    /// must name this host's lease, this node lifecycle and the live entry's ObjectGeneration.
    /// Anything else means the live entry is stale (the ID lives elsewhere now): it is dropped,
    /// the record is left alone.
    pub(super) async fn remove_local(
        &self,
        key: &AuthorityKey,
        id: &str,
        snapshot: &zlink_store::types::AuthoritySnapshot,
    ) -> Result<(), ObjectError> {
        let is_spot = snapshot.allocation.object_kind == StoreKind::Spot;
        // A removal and the membership changes that touch the same object run one at a time: a
        // join's commit never interleaves with the close of its Spot or the destroy of its
        // Actor (a join holds the Actor and both Spots).
        let serial = self.changes.lock_all(&[key]).await;
        if is_spot {
            // A Spot with members is not closed (their membership would name a gone Spot);
            // taking it out of the table first makes concurrent joins and creations into it
            // fail from here on.
            if let Err(left) = self.live().close_spot(id) {
                return Err(ObjectError::call(
                    ErrorKind::Conflict,
                    format!(
                        "Spot {id} still has {} member Actor(s) (e.g. {}): move them to another \
                         Spot or destroy them first",
                        left.count, left.example
                    ),
                ));
            }
        }
        let mut closing = Vec::new();
        let result = self.remove_exact(key, id, snapshot, &mut closing).await;
        let still_live = self.live().contains_key(key);
        if is_spot && still_live {
            // Still serving (the removal did not happen): it takes members again.
            self.live().open_spot(id);
        }
        if !is_spot && !still_live {
            // The instance is gone here (removed, or closed as stale): so is its membership.
            let left = self.live().forget_member(id);
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
    pub(super) fn notify_member(&self, spot: &str, joined: bool, actor: &str) {
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
    pub(super) async fn remove_exact(
        &self,
        key: &AuthorityKey,
        id: &str,
        snapshot: &zlink_store::types::AuthoritySnapshot,
        closing: &mut Vec<(Arc<dyn LiveObject>, Option<u64>)>,
    ) -> Result<(), ObjectError> {
        let me = self.mesh.fence();
        let record_is_ours = self.owner().is_ok_and(|o| o == snapshot.owner)
            && snapshot.owner_node.rid == me.rid
            && snapshot.owner_node.lifecycle_generation == me.lifecycle_generation;
        // Take the entry only if it is exactly the incarnation read: a newer one (created
        // here since the read) is never touched, an older one is stale and closed.
        let take = self
            .live()
            .take_for_removal(key, snapshot.object_generation, record_is_ours);
        let entry = match take {
            live::Take::Mine(e) => e,
            live::Take::Newer => {
                return Err(ObjectError::call(
                    ErrorKind::Conflict,
                    format!("{id} was re-created since it was read"),
                ));
            }
            live::Take::Stale(stale) => {
                if let Some(stale) = stale {
                    closing.push((stale.obj, Some(stale.generation)));
                }
                return Err(ObjectError::call(
                    ErrorKind::StaleRoute,
                    format!("{id} is no longer owned by this node's incarnation of it"),
                ));
            }
        };
        if entry.is_none() && !record_is_ours {
            return Err(ObjectError::call(
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
            return Err(ObjectError::store("delete_fenced")(e));
        }
        self.resolver.cache().stale_route(&fence_of(key, snapshot));
        if let Some(entry) = entry {
            closing.push((entry.obj, None));
        }
        Ok(())
    }
    /// Serve a remote Actor destroy (command 27): the route's incarnation, owner generation and
    /// lease must all still be the current record on this node (§2.6: destroy names its
    /// incarnation).
    pub(super) async fn destroy_for(&self, d: &RemoteDestroy) -> Result<ReplyResult, ObjectError> {
        let me = self.mesh.fence();
        let r = &d.route;
        if r.target_node != me || r.object_kind != WireKind::Actor {
            return Err(ObjectError::call(
                ErrorKind::StaleRoute,
                "the destroy names another node lifecycle",
            ));
        }
        let key = AuthorityKey::new(StoreKind::Actor, &r.object_id)
            .map_err(|e| ObjectError::call(ErrorKind::InvalidOperation, e.to_string()))?;
        let zlink_store::types::AuthorityRead::Found(a) = self
            .store
            .read_authority(&key)
            .await
            .map_err(ObjectError::store("read_authority"))?
        else {
            return Err(ObjectError::call(
                ErrorKind::NotFound,
                "the Actor does not exist",
            ));
        };
        if a.object_generation != r.object_generation
            || a.authority_owner_generation != r.authority_owner_generation
            || a.owner.lease_generation != r.owner_lease_generation
        {
            return Err(ObjectError::call(
                ErrorKind::Conflict,
                "the Actor changed since the destroy was addressed",
            ));
        }
        self.remove_local(&key, &r.object_id, &a).await?;
        Ok(ReplyResult::None)
    }
    /// Serve a remote close (command 48): the Spot, incarnation, owner generation and
    /// StoreVersion must all still be the current record on this node.
    pub(super) async fn close_for(&self, d: &RemoteClose) -> Result<ReplyResult, ObjectError> {
        let me = self.mesh.fence();
        if d.target_node != me {
            return Err(ObjectError::call(
                ErrorKind::StaleRoute,
                "the close names another node lifecycle",
            ));
        }
        if zlink_protocol::ids::is_entry_spot_id(&d.spot.spot_id) {
            return Err(ObjectError::call(
                ErrorKind::InvalidOperation,
                "an Entry Spot lives as long as its node lifecycle and is not closed",
            ));
        }
        let key = AuthorityKey::new(StoreKind::Spot, &d.spot.spot_id)
            .map_err(|e| ObjectError::call(ErrorKind::InvalidOperation, e.to_string()))?;
        let zlink_store::types::AuthorityRead::Found(a) = self
            .store
            .read_authority(&key)
            .await
            .map_err(ObjectError::store("read_authority"))?
        else {
            return Err(ObjectError::call(
                ErrorKind::NotFound,
                "the Spot does not exist",
            ));
        };
        if a.object_generation != d.spot.object_generation
            || a.authority_owner_generation != d.authority_owner_generation
            || a.store_version != d.store_version
        {
            return Err(ObjectError::call(
                ErrorKind::Conflict,
                "the Spot changed since the close was addressed",
            ));
        }
        self.remove_local(&key, &d.spot.spot_id, &a).await?;
        Ok(ReplyResult::UserSpotClose(
            zlink_protocol::generated::ReplyResultUserSpotClose { closed: true },
        ))
    }
}

impl<S: ObjectStore> ObjectRuntime<S> {
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
    pub(super) async fn remove(&self, kind: StoreKind, id: &str) -> Result<(), CallError> {
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
            return Ok(inner.remove_local(&key, id, &snapshot).await?);
        }
        if kind == StoreKind::Actor {
            // Remote destroy (command 27) of exactly the incarnation read.
            let route = RouteFence {
                object_kind: WireKind::Actor,
                object_id: id.to_owned(),
                object_generation: snapshot.object_generation,
                target_node: zlink_protocol::generated::NodeFence {
                    rid: zlink_protocol::shared_str::SharedStr::intern(&snapshot.owner_node.rid),
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
            rid: zlink_protocol::shared_str::SharedStr::intern(&snapshot.owner_node.rid),
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
}
