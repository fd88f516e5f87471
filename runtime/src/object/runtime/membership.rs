//! Spot membership (wire §9): an Actor joins a Spot (or goes back to its node's Entry Spot) with one aggregate commit, held at its handler boundary while its execution gate switches.

use super::*;
use zlink_store::types::{AuthoritySnapshot, AuthorityState};

/// Which line of the join admission table (wire §9, "Actor join 요청 envelope") an authority row
/// fails against the route a membership change was addressed with. Checked in table order; the
/// first failing line is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RowMismatch {
    /// The record is not Ready.
    NotReady,
    /// It is another object kind than the route's.
    Kind,
    /// Another incarnation (ObjectGeneration).
    ObjectGeneration,
    /// Owned by another node RID.
    OwnerNode,
    /// Owned by another lifecycle of the route's node.
    OwnerLifecycle,
    /// AuthorityOwnerGeneration moved (a transfer away and back).
    OwnerGeneration,
    /// Held under another owner-lease generation.
    LeaseGeneration,
}

impl RowMismatch {
    /// The first line of the table that `a` fails against `route`; `None` when it matches.
    pub(super) fn of(route: &RouteFence, a: &AuthoritySnapshot) -> Option<Self> {
        if a.state != AuthorityState::Ready {
            Some(Self::NotReady)
        } else if a.allocation.object_kind != store_kind(route.object_kind) {
            Some(Self::Kind)
        } else if a.object_generation != route.object_generation {
            Some(Self::ObjectGeneration)
        } else if a.owner_node.rid != route.target_node.rid {
            Some(Self::OwnerNode)
        } else if a.owner_node.lifecycle_generation != route.target_node.lifecycle_generation {
            Some(Self::OwnerLifecycle)
        } else if a.authority_owner_generation != route.authority_owner_generation {
            Some(Self::OwnerGeneration)
        } else if a.owner.lease_generation != route.owner_lease_generation {
            Some(Self::LeaseGeneration)
        } else {
            None
        }
    }

    /// Why, for the error detail.
    pub(super) fn why(self) -> &'static str {
        match self {
            Self::NotReady => "not Ready",
            Self::Kind => "another object kind",
            Self::ObjectGeneration => "another incarnation",
            Self::OwnerNode => "another owner node",
            Self::OwnerLifecycle => "another owner lifecycle",
            Self::OwnerGeneration => "the authority owner generation moved",
            Self::LeaseGeneration => "another owner lease",
        }
    }
}

impl<S: ObjectStore> Inner<S> {
    /// Read the authority of `route`'s object and check it against the route (wire §9, the
    /// seven lines of the join admission table): Ready, the route's kind, ObjectGeneration,
    /// owner node and lifecycle, AuthorityOwnerGeneration and owner-lease generation.
    pub(super) async fn read_matching(
        &self,
        route: &RouteFence,
    ) -> Result<zlink_store::types::AuthoritySnapshot, ObjectError> {
        let key = AuthorityKey::new(store_kind(route.object_kind), &route.object_id)
            .map_err(|e| ObjectError::call(ErrorKind::InvalidOperation, e.to_string()))?;
        let zlink_store::types::AuthorityRead::Found(a) = self
            .store
            .read_authority(&key)
            .await
            .map_err(ObjectError::store("read_authority"))?
        else {
            return Err(ObjectError::call(
                ErrorKind::NotFound,
                format!("{} does not exist", route.object_id),
            ));
        };
        let mismatch = RowMismatch::of(route, &a);
        if let Some(m) = mismatch {
            self.resolver.cache().stale_route(&fence_of(&key, &a));
            return Err(ObjectError::call(
                ErrorKind::StaleRoute,
                format!(
                    "{} changed since the membership change was addressed ({})",
                    route.object_id,
                    m.why()
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
    pub(super) async fn join_local(
        &self,
        actor_route: &RouteFence,
        entry: bool,
        spot_route: &RouteFence,
    ) -> Result<(), ObjectError> {
        let me = self.mesh.fence();
        if actor_route.target_node != me || spot_route.target_node != me {
            return Err(ObjectError::call(
                ErrorKind::StaleRoute,
                format!(
                    "the join names another node lifecycle than {} (a join across nodes moves \
                     the Actor; that is relocation)",
                    me.rid
                ),
            ));
        }
        if entry != zlink_protocol::ids::is_entry_spot_id(&spot_route.object_id) {
            return Err(ObjectError::call(
                ErrorKind::InvalidOperation,
                format!(
                    "the join's entry flag ({entry}) does not match Spot {}",
                    spot_route.object_id
                ),
            ));
        }
        if !self.mesh.admission_open() {
            return Err(ObjectError::call(
                ErrorKind::Unavailable,
                "the owner lease could not be renewed before the fencing deadline",
            ));
        }
        // The Actor's gate changes only at its handler boundary: hold it there (a control
        // claim on its own queue) for the whole change. A turn running now, or a member's
        // yielded job, finishes first under the gate it took.
        let held = {
            let key = AuthorityKey::new(StoreKind::Actor, &actor_route.object_id)
                .map_err(|e| ObjectError::call(ErrorKind::InvalidOperation, e.to_string()))?;
            let obj = self
                .live()
                .get_incarnation(&key, actor_route.object_generation)
                .map(|e| Arc::clone(&e.obj))
                .ok_or_else(|| {
                    ObjectError::call(ErrorKind::StaleRoute, "the Actor is not live on this node")
                })?;
            tokio::time::timeout(CREATE_TIMEOUT, obj.hold())
                .await
                .map_err(|_| {
                    ObjectError::call(
                        ErrorKind::DeadlineExceeded,
                        "the Actor's running turn did not end in time for the join",
                    )
                })??
        };
        // This Actor's and this Spot's changes wait for each other (a close of the Spot between
        // the join's commit and its enrolment would leave a membership naming a gone Spot);
        // changes to other objects do not wait — also not across the store round trips below.
        // The Actor's current Spot needs no lock: while it has a member it does not close.
        let (actor_key, spot_key) = (
            AuthorityKey::new(StoreKind::Actor, &actor_route.object_id)
                .map_err(|e| ObjectError::call(ErrorKind::InvalidOperation, e.to_string()))?,
            AuthorityKey::new(store_kind(spot_route.object_kind), &spot_route.object_id)
                .map_err(|e| ObjectError::call(ErrorKind::InvalidOperation, e.to_string()))?,
        );
        let _changes = self.changes.lock_all(&[&actor_key, &spot_key]).await;
        let actor = self.read_matching(actor_route).await?;
        // The receiver resolves the stable type from the authority row (wire §9), never from
        // the wire: a type this node does not host is a typed rejection.
        self.type_of(StoreKind::Actor, &actor.allocation.stable_type)
            .map_err(|e| ObjectError::call(ErrorKind::Rejected, e.detail().to_owned()))?;
        let spot = self.read_matching(spot_route).await?;
        let (actor_obj, spot_obj) = {
            let live = self.live();
            let spot_key = spot.key.clone();
            let a = live
                .get_incarnation(&actor_key, actor.object_generation)
                .map(|e| Arc::clone(&e.obj));
            let s = live
                .get_incarnation(&spot_key, spot.object_generation)
                .map(|e| Arc::clone(&e.obj));
            (a, s)
        };
        let (Some(actor_obj), Some(spot_obj)) = (actor_obj, spot_obj) else {
            return Err(ObjectError::call(
                ErrorKind::StaleRoute,
                "the Actor or the Spot is not live on this node",
            ));
        };
        let actor_id = actor_route.object_id.as_str();
        let spot_id = spot_route.object_id.as_str();
        let old = self.live().spot_of(actor_id).map(str::to_owned);
        if old.as_deref() == Some(spot_id) {
            return Ok(());
        }
        if !self.live().spot_is_open(spot_id) {
            return Err(ObjectError::call(
                ErrorKind::NotFound,
                format!("Spot {spot_id} is closing"),
            ));
        }
        // Other framework fields (the move history) stay.
        let payload = with_membership(&actor.payload, spot_id);
        let ops = [
            zlink_store::types::AggregateOp::Preserve {
                fence: actor.fence(),
                payload: payload.clone(),
            },
            zlink_store::types::AggregateOp::Check(spot.fence()),
        ];
        if let Err(e) = self
            .store
            .commit_aggregate(&ops)
            .await
            .map_err(ObjectError::store("commit_aggregate"))
        {
            // A definite refusal (a fence moved) changed nothing. An ambiguous failure may have
            // landed: the Actor's row tells.
            if !e.is_ambiguous() {
                return Err(e);
            }
            let landed = matches!(
                self.store.read_authority(&actor_key).await,
                Ok(zlink_store::types::AuthorityRead::Found(a))
                    if a.object_generation == actor.object_generation
                        && a.authority_owner_generation == actor.authority_owner_generation
                        && a.payload == payload
            );
            if !landed {
                return Err(e);
            }
        }
        // Committed. Closes and destroys wait for this serial section, so the Spot is still
        // in the table.
        if !self.live().enrol(actor_id, spot_id) {
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
    pub(super) async fn join_for(&self, d: &JoinProposal) -> Result<ReplyResult, CallError> {
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
}

impl<S: ObjectStore> ObjectRuntime<S> {
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
    pub(super) async fn join_route(
        &self,
        actor_id: &str,
        spot: RouteFence,
    ) -> Result<(), CallError> {
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
            Ok(inner.join_local(&actor, entry, &spot).await?)
        } else {
            inner
                .mesh
                .actor_join(&actor, entry, &spot, CREATE_TIMEOUT)
                .await
        }
    }
    /// The current route of `id`, read from the store (no cache): Ready only.
    pub(super) async fn ready_route(
        &self,
        kind: StoreKind,
        id: &str,
    ) -> Result<RouteFence, CallError> {
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
        self.inner.live().spot_of(actor_id).map(str::to_owned)
    }
    /// The member Actors of Spot `id`, if it lives on this node.
    pub fn members_of(&self, spot_id: &str) -> Option<Vec<String>> {
        self.inner.live().members_of(spot_id)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use zlink_protocol::generated::NodeFence;
    use zlink_store::types::ObjectKind;

    use super::super::test_fixtures::row;
    use super::*;

    fn route() -> RouteFence {
        RouteFence {
            object_kind: WireKind::Actor,
            object_id: "p-1".into(),
            object_generation: 4,
            target_node: NodeFence {
                rid: "n1".into(),
                lifecycle_generation: 9,
            },
            authority_owner_generation: 2,
            owner_lease_generation: 3,
        }
    }

    /// Wire §9: each of the seven lines, broken alone, is the mismatch reported; the row the
    /// route was read from matches; a StoreVersion change alone is not a mismatch.
    #[test]
    fn each_line_of_the_join_admission_table_is_checked() {
        assert_eq!(RowMismatch::of(&route(), &row()), None);
        let mut r = row();
        r.store_version = 12;
        assert_eq!(
            RowMismatch::of(&route(), &r),
            None,
            "StoreVersion is not a line"
        );
        type Break = fn(&mut AuthoritySnapshot);
        let lines: [(Break, RowMismatch); 7] = [
            (|a| a.state = AuthorityState::Closing, RowMismatch::NotReady),
            (
                |a| a.allocation.object_kind = ObjectKind::Spot,
                RowMismatch::Kind,
            ),
            (|a| a.object_generation = 5, RowMismatch::ObjectGeneration),
            (|a| a.owner_node.rid = "n2".into(), RowMismatch::OwnerNode),
            (
                |a| a.owner_node.lifecycle_generation = 10,
                RowMismatch::OwnerLifecycle,
            ),
            (
                |a| a.authority_owner_generation = 3,
                RowMismatch::OwnerGeneration,
            ),
            (
                |a| a.owner.lease_generation = 4,
                RowMismatch::LeaseGeneration,
            ),
        ];
        for (break_line, want) in lines {
            let mut a = row();
            break_line(&mut a);
            assert_eq!(RowMismatch::of(&route(), &a), Some(want), "{}", want.why());
        }
        let mut a = row();
        a.state = AuthorityState::Creating;
        a.object_generation = 1;
        assert_eq!(
            RowMismatch::of(&route(), &a),
            Some(RowMismatch::NotReady),
            "the first failing line is reported"
        );
    }
}
