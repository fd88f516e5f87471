//! Moving every unit off this node (issue 17 items 1 and 2): which objects are units, which
//! peers may take each one, and running the moves.
//!
//! The pure core is [`may_take`]: a target is a Ready peer that is a `Serving` Object Server
//! with a positive weight and the unit's kind and stable type, in another maintenance wave when
//! this node has one, and of the right application version — this node's own for
//! `PlannedMaintenance`, exactly the requested one for `RollingUpdate` (never higher) — and on
//! the caller's allow-list when it gave one. Among those, units are spread by placement weight
//! (smooth weighted round-robin, one selector per relocation).
//!
//! Units here (glossary §5 "Relocation unit"): an Instance Spot; an Entry-Spot Actor (its
//! membership moves to the target's Entry Spot in the same commit; a target needs one); a User
//! Spot together with every member Actor, committed in one aggregate (`SpotWide`; and, ours,
//! `PerActor` too: this version has no cross-node membership, so a `PerActor` member cannot
//! live on another node than its Spot, and follows it in the same commit). A unit of more
//! objects than one aggregate may hold ([`MAX_AGGREGATE_OPS`]) stays `TooManyParticipants`.
//! Entry Spots stay (they are the node's own).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use zlink_protocol::generated::{
    NodeDescriptor, ObjectKind as WireKind, ObjectRole, RelocationPolicy, RuntimeState,
};
use zlink_store::types::{AuthorityKey, MAX_AGGREGATE_OPS, ObjectKind as StoreKind};

use super::{ObjectRuntime, ObjectStore, wire_kind};
use crate::mesh::peer::PeerState;
use crate::object::registry::ObjectTypeKind;
use crate::relocation::capacity::{Need, fits, is_limited, limits_of};
use crate::relocation::host::{RelocationMode, StayReason, UnitOutcome};
use crate::select::SmoothWeighted;

/// What a relocation asks of the object runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelocatePlan {
    /// Why it runs.
    pub mode: RelocationMode,
    /// `RollingUpdate`: the exact application version of the targets (ignored otherwise).
    pub target_version: u64,
    /// When units still pending are reported `Unresolved`.
    pub deadline: Duration,
    /// When not empty: only these peers may take units.
    pub target_rids: Vec<String>,
    /// Units moved at the same time.
    pub concurrency: usize,
}

impl Default for RelocatePlan {
    fn default() -> Self {
        Self {
            mode: RelocationMode::PlannedMaintenance,
            target_version: 0,
            deadline: Duration::from_secs(60),
            target_rids: Vec::new(),
            concurrency: 32,
        }
    }
}

/// Where an object is (see [`ObjectRuntime::locate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Its authority row, when it exists.
    pub authority: Option<zlink_store::types::AuthoritySnapshot>,
    /// What this node knows of it: `live`, `moving` (sealed for a move, or followed after
    /// one), `arriving` (restored, waiting for its commit) or empty.
    pub here: &'static str,
}

/// One unit a relocation may move (see [`ObjectRuntime::relocation_units`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitRef {
    key: AuthorityKey,
    /// Actor or Spot.
    pub kind: StoreKind,
    /// Its global ID.
    pub id: String,
    /// Its stable type.
    pub stable_type: String,
    type_kind: ObjectTypeKind,
    policy: RelocationPolicy,
    /// A User Spot's member Actors, which move with it (in ID order).
    members: Vec<Member>,
}

/// A member Actor of a User Spot unit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    key: AuthorityKey,
    id: String,
    stable_type: String,
    policy: RelocationPolicy,
}

impl UnitRef {
    /// The IDs of the member Actors that move with this User Spot.
    pub fn member_ids(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.id.as_str())
    }

    /// Objects in this unit (the Spot or Actor itself and its members).
    pub fn participants(&self) -> usize {
        1 + self.members.len()
    }
}

/// How one unit's move ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitReport {
    /// Actor or Spot.
    pub kind: StoreKind,
    /// Its global ID.
    pub id: String,
    /// Its stable type.
    pub stable_type: String,
    /// The peer chosen (none when it stayed before a target was picked).
    pub target: Option<String>,
    /// The member Actors that moved (or stayed) with this User Spot, in ID order.
    pub members: Vec<String>,
    /// The outcome.
    pub outcome: UnitOutcome,
    /// A handover: when its Message Follow window ends (this node's clock).
    pub follow_until: Option<Instant>,
}

/// Whether peer descriptor `d` may take a unit of `kind` / `stable_type` from `me` (see the
/// module docs).
pub fn may_take(
    me: &NodeDescriptor,
    d: &NodeDescriptor,
    kind: WireKind,
    stable_type: &str,
    policy: RelocationPolicy,
    plan: &RelocatePlan,
) -> bool {
    d.node != me.node
        && d.object_role == ObjectRole::Server
        && d.state == RuntimeState::Serving
        && d.placement_weight > 0
        && (me.maintenance_wave.is_empty() || d.maintenance_wave != me.maintenance_wave)
        && match plan.mode {
            RelocationMode::PlannedMaintenance => d.application_version == me.application_version,
            RelocationMode::RollingUpdate => d.application_version == plan.target_version,
        }
        && (plan.target_rids.is_empty() || plan.target_rids.iter().any(|r| *r == d.node.rid))
        && (kind == WireKind::Spot || !d.entry_spot_id.is_empty())
        && d.object_capabilities.iter().any(|c| {
            c.object_kind == kind && c.stable_type == stable_type && c.relocation_policy == policy
        })
}

/// Whether peer descriptor `d` may take a member Actor of type `stable_type` with its User Spot
/// (the Spot's own checks are [`may_take`]'s; a member needs no Entry Spot there).
fn may_take_member(d: &NodeDescriptor, stable_type: &str, policy: RelocationPolicy) -> bool {
    d.object_capabilities.iter().any(|c| {
        c.object_kind == WireKind::Actor
            && c.stable_type == stable_type
            && c.relocation_policy == policy
    })
}

impl<S: ObjectStore> ObjectRuntime<S> {
    /// Relocation settings (chunk limit, cutover wait, restore timeout, follow duration).
    pub fn set_relocation_settings(&self, s: super::RelocationSettings) {
        self.inner.relocations.set_settings(s);
    }

    /// The relocation settings in force.
    pub fn relocation_settings(&self) -> super::RelocationSettings {
        self.inner.relocations.settings()
    }

    /// Limit the objects this node lifecycle hosts (per kind; `0` = unlimited; Entry Spots are
    /// never counted): the Location Store refuses creations beyond them (`Rejected`), and a
    /// relocation Prepare that would exceed them is refused `restoreFailed`. Peers filter
    /// their relocation targets by the limits a node projects in its descriptor capabilities
    /// ([`crate::relocation::capacity::with_limits`], set before the MeshNode starts).
    ///
    /// # Errors
    /// `Unavailable` without an owner lease; the store's error.
    pub async fn set_capacity_limits(
        &self,
        limits: zlink_store::types::CapacityLimits,
    ) -> Result<(), crate::call::error::CallError> {
        let inner = &self.inner;
        let owner = inner.owner()?;
        let me = inner.mesh.fence();
        let node = zlink_store::types::NodeRef {
            mesh: inner.mesh.descriptor().mesh_name,
            rid: me.rid.into(),
            lifecycle_generation: me.lifecycle_generation,
        };
        inner
            .store
            .set_capacity_limits(&owner, &node, limits)
            .await
            .map_err(super::error::store_error)?;
        inner.relocations.set_capacity_limits(limits);
        Ok(())
    }

    /// This node's capacity use as the Location Store counts it (active + pending units).
    ///
    /// # Errors
    /// The store's error.
    pub async fn capacity_use(
        &self,
    ) -> Result<zlink_store::types::CapacityUse, crate::call::error::CallError> {
        let me = self.inner.mesh.fence();
        let node = zlink_store::types::NodeRef {
            mesh: self.inner.mesh.descriptor().mesh_name,
            rid: me.rid.into(),
            lifecycle_generation: me.lifecycle_generation,
        };
        self.inner
            .store
            .capacity_use(&node)
            .await
            .map_err(super::error::store_error)
    }

    /// Which node owns (`kind`, `id`) now — its authority row, read from the store — and what
    /// this node knows of it (for `ctl locate`).
    ///
    /// # Errors
    /// `InvalidOperation` for a bad ID; the store's error.
    pub async fn locate(
        &self,
        kind: StoreKind,
        id: &str,
    ) -> Result<Located, crate::call::error::CallError> {
        let key = AuthorityKey::new(kind, id).map_err(|e| {
            crate::call::error::CallError::new(
                crate::call::error::ErrorKind::InvalidOperation,
                e.to_string(),
            )
        })?;
        let authority = match self.inner.store.read_authority(&key).await {
            Ok(zlink_store::types::AuthorityRead::Found(a)) => Some(*a),
            Ok(zlink_store::types::AuthorityRead::Missing { .. }) => None,
            Err(e) => return Err(super::error::store_error(e)),
        };
        let current = self
            .inner
            .live()
            .get(&key)
            .map(|e| (e.generation, e.authority_owner_generation));
        let here = match current {
            Some((g, aog)) if self.inner.relocations.is_moving(&key, g, aog) => "moving",
            Some(_) => "live",
            None if self.inner.relocations.temporary().contains_key(&key) => "arriving",
            None => "",
        };
        Ok(Located { authority, here })
    }

    /// The last steps of moves from and to this node on this node's clock (seal, transfer,
    /// switch; at most 4,096), for pause measurements.
    pub fn relocation_timeline(&self) -> Vec<super::TimelineEvent> {
        self.inner.relocations.timeline()
    }

    /// Counters of the moves from and to this node.
    pub fn relocation_stats(&self) -> &super::RelocationStats {
        &self.inner.relocations.stats
    }

    /// Mark this host as relocating (or relocated): it takes no unit from other nodes and
    /// creates or activates nothing new (`Unavailable`).
    pub fn set_relocating(&self, on: bool) {
        self.inner.relocations.set_relocating(on);
    }

    /// Move every unit off this node (see the module docs); one report per unit, in ID order.
    pub async fn relocate(&self, plan: &RelocatePlan) -> Vec<UnitReport> {
        let units = self.relocation_units();
        self.relocate_units(&units, plan, |_, _| {}).await
    }

    /// The units a relocation started now would move (every live object but the Entry Spot;
    /// a User Spot's members are part of its unit), in ID order.
    pub fn relocation_units(&self) -> Vec<UnitRef> {
        let live = self.inner.live();
        let unit_of = |key: &AuthorityKey, e: &super::LiveEntry| {
            let (kind, id) = super::key_parts(key)?;
            Some(UnitRef {
                key: key.clone(),
                kind,
                id,
                stable_type: e.ty.stable_type().to_owned(),
                type_kind: e.ty.kind(),
                policy: e.ty.policy(),
                members: Vec::new(),
            })
        };
        let eligible = |key: &AuthorityKey, e: &super::LiveEntry| {
            e.ty.kind() != ObjectTypeKind::EntrySpot
                && !self.inner.relocations.is_moving(
                    key,
                    e.generation,
                    e.authority_owner_generation,
                )
        };
        let mut units: Vec<UnitRef> = Vec::new();
        let mut spots: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for (key, e) in live.iter() {
            if e.ty.kind() == ObjectTypeKind::UserSpot
                && eligible(key, e)
                && let Some(u) = unit_of(key, e)
            {
                spots.insert(u.id.clone(), units.len());
                units.push(u);
            }
        }
        for (key, e) in live.iter() {
            if e.ty.kind() == ObjectTypeKind::UserSpot || !eligible(key, e) {
                continue;
            }
            let Some(u) = unit_of(key, e) else { continue };
            // A member of a User Spot that moves here goes with it.
            let spot = (u.kind == StoreKind::Actor)
                .then(|| live.spot_of(&u.id).and_then(|s| spots.get(s).copied()))
                .flatten();
            match spot {
                Some(i) => units[i].members.push(Member {
                    key: u.key,
                    id: u.id,
                    stable_type: u.stable_type,
                    policy: u.policy,
                }),
                None => units.push(u),
            }
        }
        for u in &mut units {
            u.members.sort_by(|a, b| a.id.cmp(&b.id));
        }
        units.sort_by(|a, b| (a.kind as u8, &a.id).cmp(&(b.kind as u8, &b.id)));
        units
    }

    /// Move `units` (from [`ObjectRuntime::relocation_units`]); `progress(i, report)` is called
    /// as unit `i` ends. Returns one report per unit, in the order given.
    pub async fn relocate_units(
        &self,
        units: &[UnitRef],
        plan: &RelocatePlan,
        progress: impl Fn(usize, &UnitReport) + Send + Sync,
    ) -> Vec<UnitReport> {
        let inner = Arc::clone(&self.inner);
        let deadline = Instant::now() + plan.deadline;
        let me = inner.mesh.descriptor();
        let peers: Vec<NodeDescriptor> = inner
            .mesh
            .peers()
            .into_iter()
            .filter(|p| p.state == PeerState::Ready)
            .filter_map(|p| p.descriptor)
            .collect();
        let mut selector: SmoothWeighted<String> = SmoothWeighted::default();
        // Per limited peer: its capacity use read from the store plus this relocation's units.
        let mut capacity: std::collections::HashMap<String, zlink_store::types::CapacityUse> =
            std::collections::HashMap::new();
        let mut jobs = Vec::new();
        let mut reports: Vec<Option<UnitReport>> = vec![None; units.len()];
        for (i, u) in units.iter().enumerate() {
            let members: Vec<String> = u.members.iter().map(|m| m.id.clone()).collect();
            let mut report = |target: Option<String>, outcome| {
                let r = UnitReport {
                    kind: u.kind,
                    id: u.id.clone(),
                    stable_type: u.stable_type.clone(),
                    members: members.clone(),
                    target,
                    outcome,
                    follow_until: None,
                };
                progress(i, &r);
                reports[i] = Some(r);
            };
            let blocked = match u.type_kind {
                ObjectTypeKind::Actor
                    if inner.live().spot_of(&u.id) != Some(me.entry_spot_id.as_str()) =>
                {
                    Some(
                        "an Actor that is a member of a User Spot moves with its Spot, which is \
                         not movable here now",
                    )
                }
                ObjectTypeKind::Actor
                | ObjectTypeKind::UserSpot
                | ObjectTypeKind::InstanceSpot
                | ObjectTypeKind::EntrySpot => None,
            };
            if u.policy == RelocationPolicy::DisableRelocation
                || u.members
                    .iter()
                    .any(|m| m.policy == RelocationPolicy::DisableRelocation)
            {
                report(None, UnitOutcome::Stayed(StayReason::Disabled));
                continue;
            }
            if let Some(why) = blocked {
                report(None, UnitOutcome::Failed(why.to_owned()));
                continue;
            }
            if u.participants() > MAX_AGGREGATE_OPS {
                report(None, UnitOutcome::Stayed(StayReason::TooManyParticipants));
                continue;
            }
            let wk = wire_kind(u.kind);
            let need =
                Need::of(std::iter::once(wk).chain(u.members.iter().map(|_| WireKind::Actor)));
            let mut candidates: Vec<&NodeDescriptor> = Vec::new();
            for d in peers.iter().filter(|d| {
                may_take(&me, d, wk, &u.stable_type, u.policy, plan)
                    && u.members
                        .iter()
                        .all(|m| may_take_member(d, &m.stable_type, m.policy))
            }) {
                // Capacity, as the peer projects it: its use read once per relocation, plus
                // what this relocation already sent its way.
                let limits = limits_of(&d.object_capabilities);
                if is_limited(limits) {
                    let used = match capacity.get(d.node.rid.as_str()) {
                        Some(u) => Some(*u),
                        None => inner
                            .store
                            .capacity_use(&zlink_store::types::NodeRef {
                                mesh: d.mesh_name.clone(),
                                rid: d.node.rid.to_string(),
                                lifecycle_generation: d.node.lifecycle_generation,
                            })
                            .await
                            .ok()
                            .inspect(|u| {
                                capacity.insert(d.node.rid.to_string(), *u);
                            }),
                    };
                    // Unreadable: the target's own check at Prepare decides.
                    if used.is_some_and(|used| !fits(limits, used, need)) {
                        continue;
                    }
                }
                candidates.push(d);
            }
            let _ = selector.set_candidates(
                candidates
                    .iter()
                    .map(|d| (d.node.rid.to_string(), d.placement_weight)),
            );
            let Some(rid) = (!candidates.is_empty()).then(|| selector.pick()).flatten() else {
                report(None, UnitOutcome::Stayed(StayReason::NoTarget));
                continue;
            };
            let Some(target) = candidates
                .iter()
                .find(|d| d.node.rid == rid)
                .map(|d| d.node.clone())
            else {
                report(None, UnitOutcome::Stayed(StayReason::NoTarget));
                continue;
            };
            if let Some(used) = capacity.get_mut(target.rid.as_str()) {
                *used = need.add_to(*used);
            }
            let keys: Vec<AuthorityKey> = std::iter::once(u.key.clone())
                .chain(u.members.iter().map(|m| m.key.clone()))
                .collect();
            jobs.push((
                i,
                keys,
                (u.kind, u.id.clone(), u.stable_type.clone()),
                members,
                target,
            ));
        }
        let progress = &progress;
        let moved: Vec<(usize, UnitReport)> = futures::stream::iter(jobs)
            .map(|(i, keys, (kind, id, stable_type), members, target)| {
                let inner = Arc::clone(&inner);
                async move {
                    let m = inner.move_unit(keys, target.clone(), deadline).await;
                    let r = UnitReport {
                        kind,
                        id,
                        stable_type,
                        members,
                        target: Some(target.rid.into()),
                        outcome: m.outcome,
                        follow_until: m.follow_until,
                    };
                    progress(i, &r);
                    (i, r)
                }
            })
            .buffer_unordered(plan.concurrency.max(1))
            .collect()
            .await;
        for (i, r) in moved {
            reports[i] = Some(r);
        }
        reports.into_iter().flatten().collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use zlink_protocol::generated::{NodeFence, ObjectCapability};

    const P: RelocationPolicy = RelocationPolicy::PreserveState;

    fn desc(rid: &str, version: u64, wave: &str) -> NodeDescriptor {
        NodeDescriptor {
            mesh_name: "m".into(),
            node: NodeFence {
                rid: zlink_protocol::shared_str::SharedStr::copy_from(rid),
                lifecycle_generation: 1,
            },
            descriptor_revision: 1,
            endpoint: "tcp://127.0.0.1:1".into(),
            security_identity: String::new(),
            object_role: ObjectRole::Server,
            state: RuntimeState::Serving,
            application_version: version,
            maintenance_wave: wave.into(),
            placement_weight: 100,
            entry_spot_id: format!("entry-{rid}"),
            channels: Vec::new(),
            object_capabilities: vec![ObjectCapability {
                object_kind: WireKind::Spot,
                stable_type: "counter".into(),
                relocation_policy: P,
                capacity_limit: 0,
            }],
        }
    }

    #[test]
    fn targets_by_state_role_weight_wave_version_type_and_allow_list() {
        let me = desc("a", 3, "");
        let pm = RelocatePlan::default();
        let ru = RelocatePlan {
            mode: RelocationMode::RollingUpdate,
            target_version: 4,
            ..RelocatePlan::default()
        };
        let ok = desc("b", 3, "");
        assert!(may_take(&me, &ok, WireKind::Spot, "counter", P, &pm));
        assert!(
            !may_take(
                &me,
                &ok,
                WireKind::Spot,
                "counter",
                RelocationPolicy::RecreateOnRelocation,
                &pm
            ),
            "policy"
        );
        assert!(
            !may_take(&me, &me, WireKind::Spot, "counter", P, &pm),
            "not itself"
        );
        assert!(!may_take(&me, &ok, WireKind::Spot, "room", P, &pm), "type");
        assert!(
            !may_take(&me, &ok, WireKind::Actor, "counter", P, &pm),
            "kind"
        );
        let mut d = ok.clone();
        d.state = RuntimeState::Relocating;
        assert!(
            !may_take(&me, &d, WireKind::Spot, "counter", P, &pm),
            "state"
        );
        let mut d = ok.clone();
        d.object_role = ObjectRole::Client;
        assert!(
            !may_take(&me, &d, WireKind::Spot, "counter", P, &pm),
            "role"
        );
        let mut d = ok.clone();
        d.placement_weight = 0;
        assert!(
            !may_take(&me, &d, WireKind::Spot, "counter", P, &pm),
            "weight"
        );
        assert!(
            !may_take(&me, &desc("b", 4, ""), WireKind::Spot, "counter", P, &pm),
            "higher version for PM"
        );
        assert!(may_take(
            &me,
            &desc("b", 4, ""),
            WireKind::Spot,
            "counter",
            P,
            &ru
        ));
        assert!(
            !may_take(&me, &desc("b", 5, ""), WireKind::Spot, "counter", P, &ru),
            "never higher"
        );
        assert!(
            !may_take(&me, &desc("b", 3, ""), WireKind::Spot, "counter", P, &ru),
            "RU needs the requested one"
        );
        let waved = desc("a", 3, "w1");
        assert!(
            !may_take(
                &waved,
                &desc("b", 3, "w1"),
                WireKind::Spot,
                "counter",
                P,
                &pm
            ),
            "same wave"
        );
        assert!(may_take(
            &waved,
            &desc("b", 3, "w2"),
            WireKind::Spot,
            "counter",
            P,
            &pm
        ));
        assert!(may_take(
            &waved,
            &desc("b", 3, ""),
            WireKind::Spot,
            "counter",
            P,
            &pm
        ));
        let only_c = RelocatePlan {
            target_rids: vec!["c".into()],
            ..RelocatePlan::default()
        };
        assert!(
            !may_take(&me, &ok, WireKind::Spot, "counter", P, &only_c),
            "allow-list"
        );
        assert!(may_take(
            &me,
            &desc("c", 3, ""),
            WireKind::Spot,
            "counter",
            P,
            &only_c
        ));
    }
}
