//! Placement by weight (glossary §6 "weight"): which node a new object goes to, chosen by smooth weighted round-robin over the Serving Object Servers that host its stable type.

use super::*;

impl<S: ObjectStore> Inner<S> {
    /// Placement (glossary §6 "Weight"): smooth weighted round-robin by placement weight over
    /// this node and its ready peers whose descriptor is an Object Server, `Serving`, with a
    /// capability for (`kind`, `stable_type`). The maintenance wave does not exclude creation
    /// targets.
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
}
