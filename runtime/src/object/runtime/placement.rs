//! Placement by weight (glossary §6 "Weight"; wire §7): which node a new object goes to.
//!
//! The pure core is [`eligible`] (may this descriptor host a new object of this kind and
//! stable type?) and [`Placement::choose`] (smooth weighted round-robin by placement weight,
//! one selector per stable type, over candidates in RID order). The shell,
//! [`Inner::choose_descriptor`], feeds it this node's descriptor and those of its ready peers.
//! The maintenance wave does not exclude creation targets.

use std::collections::HashMap;

use zlink_protocol::generated::{NodeDescriptor, ObjectRole, RuntimeState};

use super::*;
use crate::select::SmoothWeighted;

/// Whether `d` may host a new object of `kind` and `stable_type`: an Object Server, `Serving`,
/// with a capability for the pair; an Actor also needs the node's Entry Spot (it joins it).
/// Weight is the selector's concern: weight 0 is eligible but never picked.
pub(crate) fn eligible(d: &NodeDescriptor, kind: WireKind, stable_type: &str) -> bool {
    d.object_role == ObjectRole::Server
        && d.state == RuntimeState::Serving
        && (kind == WireKind::Spot || !d.entry_spot_id.is_empty())
        && d.object_capabilities
            .iter()
            .any(|c| c.object_kind == kind && c.stable_type == stable_type)
}

/// Per-stable-type smooth weighted round-robin selectors.
#[derive(Debug, Default)]
pub(crate) struct Placement {
    selectors: HashMap<String, SmoothWeighted<String>>,
}

impl Placement {
    /// Pick one of `descriptors` for a new object of `kind` and `stable_type`: the eligible
    /// ones, in RID order, weighted by their placement weight. `None` when none is eligible
    /// with a positive weight.
    pub(crate) fn choose(
        &mut self,
        kind: WireKind,
        stable_type: &str,
        descriptors: impl IntoIterator<Item = NodeDescriptor>,
    ) -> Option<NodeDescriptor> {
        let mut candidates: Vec<NodeDescriptor> = descriptors
            .into_iter()
            .filter(|d| eligible(d, kind, stable_type))
            .collect();
        candidates.sort_by(|a, b| a.node.rid.cmp(&b.node.rid));
        candidates.dedup_by(|a, b| a.node.rid == b.node.rid);
        let sel = self.selectors.entry(stable_type.to_owned()).or_default();
        let _ = sel.set_candidates(
            candidates
                .iter()
                .map(|d| (d.node.rid.clone(), d.placement_weight)),
        );
        let rid = sel.pick()?;
        candidates.into_iter().find(|d| d.node.rid == rid)
    }
}

impl<S: ObjectStore> Inner<S> {
    /// Placement of a new object of (`kind`, `stable_type`) over this node and its ready peers
    /// (see the module docs): the chosen node and its Entry Spot ID.
    pub(super) fn choose_target(
        &self,
        kind: StoreKind,
        stable_type: &str,
    ) -> Result<(zlink_protocol::generated::NodeFence, String), CallError> {
        self.choose_descriptor(kind, stable_type)
            .map(|d| (d.node, d.entry_spot_id))
    }

    /// [`Inner::choose_target`], giving the chosen node's whole descriptor.
    pub(super) fn choose_descriptor(
        &self,
        kind: StoreKind,
        stable_type: &str,
    ) -> Result<NodeDescriptor, CallError> {
        let peers = self
            .mesh
            .peers()
            .into_iter()
            .filter(|p| p.state == crate::mesh::PeerState::Ready)
            .filter_map(|p| p.descriptor);
        let descriptors = std::iter::once(self.mesh.descriptor()).chain(peers);
        self.placement
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .choose(wire_kind(kind), stable_type, descriptors)
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::Unavailable,
                    format!("no serving Object Server can host stable type {stable_type:?}"),
                )
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use zlink_protocol::generated::{NodeFence, ObjectCapability, RelocationPolicy};

    use super::*;

    fn node(rid: &str, weight: u16) -> NodeDescriptor {
        NodeDescriptor {
            mesh_name: "m".into(),
            node: NodeFence {
                rid: rid.into(),
                lifecycle_generation: 1,
            },
            descriptor_revision: 1,
            endpoint: format!("tcp://127.0.0.1:1/{rid}"),
            security_identity: "zlink-node".into(),
            object_role: ObjectRole::Server,
            state: RuntimeState::Serving,
            application_version: 1,
            maintenance_wave: String::new(),
            placement_weight: weight,
            entry_spot_id: format!("{rid}-entry"),
            channels: Vec::new(),
            object_capabilities: vec![
                ObjectCapability {
                    object_kind: WireKind::Spot,
                    stable_type: "room".into(),
                    relocation_policy: RelocationPolicy::PreserveState,
                    capacity_limit: 0,
                },
                ObjectCapability {
                    object_kind: WireKind::Actor,
                    stable_type: "player".into(),
                    relocation_policy: RelocationPolicy::PreserveState,
                    capacity_limit: 0,
                },
            ],
        }
    }

    #[test]
    fn only_serving_object_servers_with_the_capability_are_eligible() {
        let ok = node("a", 100);
        assert!(eligible(&ok, WireKind::Spot, "room"));
        assert!(eligible(&ok, WireKind::Actor, "player"));
        let cases: [(&str, NodeDescriptor, WireKind, &str); 5] = [
            ("another type", ok.clone(), WireKind::Spot, "zone"),
            ("another kind", ok.clone(), WireKind::Actor, "room"),
            (
                "draining",
                NodeDescriptor {
                    state: RuntimeState::Draining,
                    ..ok.clone()
                },
                WireKind::Spot,
                "room",
            ),
            (
                "an Object Client",
                NodeDescriptor {
                    object_role: ObjectRole::Client,
                    ..ok.clone()
                },
                WireKind::Spot,
                "room",
            ),
            (
                "an Actor host without an Entry Spot",
                NodeDescriptor {
                    entry_spot_id: String::new(),
                    ..ok.clone()
                },
                WireKind::Actor,
                "player",
            ),
        ];
        for (why, d, kind, ty) in cases {
            assert!(!eligible(&d, kind, ty), "{why} is not eligible");
        }
        let no_entry = NodeDescriptor {
            entry_spot_id: String::new(),
            ..ok
        };
        assert!(
            eligible(&no_entry, WireKind::Spot, "room"),
            "a Spot needs no Entry Spot"
        );
    }

    #[test]
    fn picks_follow_the_placement_weights_and_weight_zero_is_never_picked() {
        let mut p = Placement::default();
        let nodes = [node("c", 0), node("b", 50), node("a", 100)];
        let mut counts: HashMap<String, usize> = HashMap::new();
        for _ in 0..300 {
            let d = p.choose(WireKind::Spot, "room", nodes.clone()).unwrap();
            *counts.entry(d.node.rid).or_default() += 1;
        }
        assert_eq!(counts.get("a"), Some(&200));
        assert_eq!(counts.get("b"), Some(&100));
        assert_eq!(counts.get("c"), None);
    }

    #[test]
    fn each_stable_type_has_its_own_rotation_and_none_eligible_is_none() {
        let mut p = Placement::default();
        let nodes = [node("a", 1), node("b", 1)];
        let rooms: Vec<String> = (0..4)
            .map(|_| {
                p.choose(WireKind::Spot, "room", nodes.clone())
                    .unwrap()
                    .node
                    .rid
            })
            .collect();
        // Interleaving another type does not shift the rooms' rotation.
        let mut q = Placement::default();
        let mut mixed = Vec::new();
        for _ in 0..4 {
            mixed.push(
                q.choose(WireKind::Spot, "room", nodes.clone())
                    .unwrap()
                    .node
                    .rid,
            );
            let _ = q.choose(WireKind::Actor, "player", nodes.clone()).unwrap();
        }
        assert_eq!(rooms, mixed);
        assert_eq!(rooms.iter().filter(|r| *r == "a").count(), 2);
        assert!(p.choose(WireKind::Spot, "zone", nodes.clone()).is_none());
        assert!(p.choose(WireKind::Spot, "room", []).is_none());
        assert!(
            p.choose(WireKind::Spot, "room", [node("z", 0)]).is_none(),
            "weight 0 only: nothing to pick"
        );
    }

    #[test]
    fn a_descriptor_seen_twice_counts_once() {
        let mut p = Placement::default();
        let a = node("a", 100);
        let picks: Vec<String> = (0..4)
            .map(|_| {
                p.choose(
                    WireKind::Spot,
                    "room",
                    [a.clone(), a.clone(), node("b", 100)],
                )
                .unwrap()
                .node
                .rid
            })
            .collect();
        assert_eq!(picks.iter().filter(|r| *r == "a").count(), 2);
    }
}
