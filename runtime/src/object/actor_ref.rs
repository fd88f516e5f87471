//! `ActorRef`: the immutable location snapshot of one Actor incarnation with its full route
//! fence (issue 19 item 3; routing `000_…` §3.1 "The Route Is Stored at Bind Time").
//!
//! A bind takes only an `ActorRef`, and the session owner stores exactly the route it names:
//! no overload resolves the Actor ID from the Location Store or takes a local instance
//! (routing §3.1). An `ActorRef` comes from the runtime — a create, a get-or-create, or
//! `ObjectRuntime::actor_ref(id)`, which reads the current authority — never from the
//! application's own fields, so it always names a route that was Ready when it was taken.
//!
//! It is **not** a message target (routing §2.6): Actor sends and requests take the global
//! ID. It only restricts what changes one incarnation's state — a bind here.

use zlink_protocol::generated::{NodeFence, ObjectKind as WireKind, RouteFence};

/// See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorRef {
    route: RouteFence,
    mesh_name: String,
}

impl ActorRef {
    /// The snapshot of `route` (an Actor route) in mesh `mesh_name`; `None` for a Spot route.
    /// For a route obtained elsewhere (a remote create's reply, a relocation coordinator's
    /// target route); the Actor owner checks every fence at bind.
    pub fn new(route: RouteFence, mesh_name: impl Into<String>) -> Option<Self> {
        Self::from_route(route, mesh_name)
    }

    pub(crate) fn from_route(route: RouteFence, mesh_name: impl Into<String>) -> Option<Self> {
        match route.object_kind {
            WireKind::Actor => Some(Self {
                route,
                mesh_name: mesh_name.into(),
            }),
            WireKind::Spot => None,
        }
    }

    /// The Actor ID.
    pub fn actor_id(&self) -> &str {
        &self.route.object_id
    }

    /// The incarnation.
    pub fn object_generation(&self) -> u64 {
        self.route.object_generation
    }

    /// The MeshName of the owner's connection group.
    pub fn mesh_name(&self) -> &str {
        &self.mesh_name
    }

    /// The owner MeshNode: RID and lifecycle generation (NodeGeneration).
    pub fn owner(&self) -> &NodeFence {
        &self.route.target_node
    }

    /// The authority's owner change order when the snapshot was taken.
    pub fn authority_owner_generation(&self) -> u64 {
        self.route.authority_owner_generation
    }

    /// The owner's host lease generation when the snapshot was taken.
    pub fn owner_lease_generation(&self) -> u64 {
        self.route.owner_lease_generation
    }

    /// The full route fence (what command 38 carries as `actorRoute`).
    pub fn route(&self) -> &RouteFence {
        &self.route
    }

    /// The wire `ActorRef` (ID, generation, MeshName, owner RID).
    pub fn to_wire(&self) -> zlink_protocol::generated::ActorRef {
        zlink_protocol::generated::ActorRef {
            actor_id: self.route.object_id.clone(),
            object_generation: self.route.object_generation,
            mesh_name: self.mesh_name.clone(),
            node_rid: self.route.target_node.rid.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(kind: WireKind) -> RouteFence {
        RouteFence {
            object_kind: kind,
            object_id: "player:ann".into(),
            object_generation: 3,
            target_node: NodeFence {
                rid: "node-b".into(),
                lifecycle_generation: 7,
            },
            authority_owner_generation: 11,
            owner_lease_generation: 5,
        }
    }

    #[test]
    fn an_actor_ref_keeps_every_fence_of_its_route_and_a_spot_route_is_not_one() {
        let r = ActorRef::from_route(route(WireKind::Actor), "game").expect("an Actor route");
        assert_eq!(r.actor_id(), "player:ann");
        assert_eq!(r.object_generation(), 3);
        assert_eq!(r.owner().rid, "node-b");
        assert_eq!(r.owner().lifecycle_generation, 7);
        assert_eq!(r.authority_owner_generation(), 11);
        assert_eq!(r.owner_lease_generation(), 5);
        assert_eq!(r.mesh_name(), "game");
        assert_eq!(r.route(), &route(WireKind::Actor));
        let w = r.to_wire();
        assert_eq!(
            (
                w.actor_id.as_str(),
                w.object_generation,
                w.mesh_name.as_str(),
                w.node_rid.as_str()
            ),
            ("player:ann", 3, "game", "node-b")
        );
        assert!(ActorRef::from_route(route(WireKind::Spot), "game").is_none());
    }
}
