//! Capacity in relocation (issue 17 items 2 and 5; glossary "Descriptor capacity", §5 target
//! order "capability, policy, adapter, capacity, weight"): whether a node has room for a unit.
//!
//! Pure: limits, use and the unit's need in, a verdict out. Limits are per node and per kind —
//! Actors, and User plus Instance Spots (Entry Spots are never counted) — with `0` meaning
//! unlimited, as the Location Store keeps them ([`CapacityLimits`]).
//!
//! - A **source** filters its candidate targets with [`limits_of`] (the limits a peer
//!   projects in its descriptor's capabilities) and [`fits`], against the peer's use read from
//!   the store plus what this relocation already planned for it ([`Need::add_to`]). The
//!   descriptor only filters quickly (glossary: "the actual slot is confirmed by the store").
//! - A **target** checks its own limits at Prepare against its store use plus the units
//!   already arriving, and refuses `restoreFailed` when the unit does not fit, so the
//!   owner CAS — which moves capacity without checking it — never overfills a node.

use zlink_protocol::generated::{ObjectCapability, ObjectKind};
use zlink_store::types::{CapacityLimits, CapacityUse};

/// The capacity a unit takes on its target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    /// Actors in the unit.
    pub actors: u64,
    /// User or Instance Spots in the unit.
    pub spots: u64,
}

impl Need {
    /// The need of a unit of these objects' kinds.
    pub fn of(kinds: impl IntoIterator<Item = ObjectKind>) -> Self {
        kinds.into_iter().fold(Self::default(), |mut n, k| {
            match k {
                ObjectKind::Actor => n.actors += 1,
                ObjectKind::Spot => n.spots += 1,
            }
            n
        })
    }

    /// `used` with this need added.
    #[must_use]
    pub fn add_to(self, used: CapacityUse) -> CapacityUse {
        CapacityUse {
            actors: used.actors.saturating_add(self.actors),
            spots: used.spots.saturating_add(self.spots),
        }
    }

    /// `used` with this need taken back.
    #[must_use]
    pub fn remove_from(self, used: CapacityUse) -> CapacityUse {
        CapacityUse {
            actors: used.actors.saturating_sub(self.actors),
            spots: used.spots.saturating_sub(self.spots),
        }
    }
}

/// Whether a unit needing `need` fits a node with `limits` that uses `used` (in-flight units
/// included). A limit of `0` is unlimited.
pub fn fits(limits: CapacityLimits, used: CapacityUse, need: Need) -> bool {
    let room = |limit: u32, used: u64, need: u64| {
        limit == 0 || need == 0 || used.saturating_add(need) <= u64::from(limit)
    };
    room(limits.actors, used.actors, need.actors) && room(limits.spots, used.spots, need.spots)
}

/// Whether `limits` bound anything.
pub fn is_limited(limits: CapacityLimits) -> bool {
    limits.actors > 0 || limits.spots > 0
}

/// The per-kind limits a node projects in its descriptor capabilities: per kind, the highest
/// limit of its capabilities of that kind (a capability's `0` is unlimited, so any `0` makes
/// the kind unlimited).
pub fn limits_of(caps: &[ObjectCapability]) -> CapacityLimits {
    let of = |kind: ObjectKind| {
        let limits = caps
            .iter()
            .filter(|c| c.object_kind == kind)
            .map(|c| c.capacity_limit);
        if limits.clone().any(|l| l == 0) {
            0
        } else {
            limits.max().unwrap_or(0)
        }
    };
    CapacityLimits {
        actors: of(ObjectKind::Actor),
        spots: of(ObjectKind::Spot),
    }
}

/// `caps` projecting `limits`: each capability's limit is its kind's.
pub fn with_limits(caps: &mut [ObjectCapability], limits: CapacityLimits) {
    for c in caps {
        c.capacity_limit = match c.object_kind {
            ObjectKind::Actor => limits.actors,
            ObjectKind::Spot => limits.spots,
        };
    }
}

#[cfg(test)]
mod tests {
    use zlink_protocol::generated::RelocationPolicy;

    use super::*;

    fn cap(kind: ObjectKind, ty: &str, limit: u32) -> ObjectCapability {
        ObjectCapability {
            object_kind: kind,
            stable_type: ty.into(),
            relocation_policy: RelocationPolicy::PreserveState,
            capacity_limit: limit,
        }
    }

    fn used(actors: u64, spots: u64) -> CapacityUse {
        CapacityUse { actors, spots }
    }

    fn limits(actors: u32, spots: u32) -> CapacityLimits {
        CapacityLimits { actors, spots }
    }

    #[test]
    fn a_unit_fits_while_each_limited_kind_has_room_for_its_part() {
        let room = Need::of([ObjectKind::Spot, ObjectKind::Actor, ObjectKind::Actor]);
        assert_eq!(
            room,
            Need {
                actors: 2,
                spots: 1
            }
        );
        let cases = [
            ("unlimited", limits(0, 0), used(1_000, 1_000), true),
            ("exactly full after", limits(5, 3), used(3, 2), true),
            ("one Actor too many", limits(4, 3), used(3, 2), false),
            ("the Spot does not fit", limits(0, 2), used(0, 2), false),
            (
                "Actors unlimited, Spot room",
                limits(0, 3),
                used(99, 2),
                true,
            ),
        ];
        for (case, l, u, want) in cases {
            assert_eq!(fits(l, u, room), want, "{case}");
        }
        // A lone Actor needs no Spot room: a full Spot limit does not stop it.
        assert!(fits(
            limits(10, 1),
            used(0, 1),
            Need::of([ObjectKind::Actor])
        ));
    }

    #[test]
    fn planned_and_arriving_units_count_until_they_are_taken_back() {
        let one = Need::of([ObjectKind::Spot]);
        let l = limits(0, 2);
        let mut planned = used(0, 1);
        assert!(fits(l, planned, one));
        planned = one.add_to(planned);
        assert!(!fits(l, planned, one), "the second is refused");
        planned = one.remove_from(planned);
        assert!(fits(l, planned, one));
        assert_eq!(one.remove_from(used(0, 0)), used(0, 0), "never below zero");
    }

    #[test]
    fn descriptor_capabilities_project_per_kind_limits_and_zero_is_unlimited() {
        assert_eq!(limits_of(&[]), limits(0, 0));
        let caps = [
            cap(ObjectKind::Actor, "player", 50),
            cap(ObjectKind::Spot, "room", 10),
            cap(ObjectKind::Spot, "counter", 12),
        ];
        assert_eq!(limits_of(&caps), limits(50, 12));
        let open = [
            cap(ObjectKind::Spot, "room", 10),
            cap(ObjectKind::Spot, "counter", 0),
        ];
        assert_eq!(limits_of(&open), limits(0, 0), "one unlimited type");
        let mut caps = caps.to_vec();
        with_limits(&mut caps, limits(7, 3));
        assert_eq!(
            caps.iter().map(|c| c.capacity_limit).collect::<Vec<_>>(),
            [7, 3, 3]
        );
        assert_eq!(limits_of(&caps), limits(7, 3));
        assert!(is_limited(limits(0, 1)) && !is_limited(limits(0, 0)));
    }
}
