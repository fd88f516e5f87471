//! Host lifecycle state (glossary §5 "Drain과 draining", runtime state; issue 8 item 2).
//!
//! `Starting → Serving → Draining → Stopped`, and with `Relocate` (issue 17)
//! `Serving | Relocated → Relocating → Relocated → Draining → Stopped`, and after a lost owner
//! lease (issue 20) `Serving → Fenced → Serving` (a new node lifecycle).

use zlink_protocol::generated::RuntimeState;

use crate::proto;

/// The host's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostState {
    /// Configuration loaded; the mesh node and the object runtime are starting.
    Starting,
    /// Accepting new work.
    Serving,
    /// Drain in progress: no new work is selected for this host; accepted work finishes until
    /// the drain deadline.
    Draining,
    /// A relocation is moving objects away (`Relocate`, or SIGTERM before the drain).
    Relocating,
    /// The last relocation is terminal; nothing new is created here.
    Relocated,
    /// Descriptors and the owner lease are released; the process exits.
    Stopped,
    /// The owner lease was lost: the objects were dropped and the host is rejoining as a new
    /// node lifecycle (`lease_loss: rejoin`). Not ready; live while the rejoin makes progress.
    Fenced,
}

impl HostState {
    /// Every state, in order (metrics render one gauge per state).
    pub const ALL: [Self; 7] = [
        Self::Starting,
        Self::Serving,
        Self::Draining,
        Self::Relocating,
        Self::Relocated,
        Self::Stopped,
        Self::Fenced,
    ];

    /// Stable lower-case name (metrics label, logs, `ctl` output).
    pub fn name(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Serving => "serving",
            Self::Draining => "draining",
            Self::Relocating => "relocating",
            Self::Relocated => "relocated",
            Self::Stopped => "stopped",
            Self::Fenced => "fenced",
        }
    }

    /// The proto enum value.
    pub fn to_proto(self) -> proto::HostState {
        match self {
            Self::Starting => proto::HostState::Starting,
            Self::Serving => proto::HostState::Serving,
            Self::Draining => proto::HostState::Draining,
            Self::Relocating => proto::HostState::Relocating,
            Self::Relocated => proto::HostState::Relocated,
            Self::Stopped => proto::HostState::Stopped,
            Self::Fenced => proto::HostState::Fenced,
        }
    }

    /// The state from a proto value (`None` for `UNSPECIFIED` or an unknown number).
    pub fn from_proto(v: i32) -> Option<Self> {
        Some(match proto::HostState::try_from(v).ok()? {
            proto::HostState::Unspecified => return None,
            proto::HostState::Starting => Self::Starting,
            proto::HostState::Serving => Self::Serving,
            proto::HostState::Draining => Self::Draining,
            proto::HostState::Relocating => Self::Relocating,
            proto::HostState::Relocated => Self::Relocated,
            proto::HostState::Stopped => Self::Stopped,
            proto::HostState::Fenced => Self::Fenced,
        })
    }

    /// The runtime state announced in the MeshNode descriptor for this host state (a fenced
    /// host has no descriptor: its lease is gone; `Stopped` is what peers last saw of it).
    pub fn runtime_state(self) -> RuntimeState {
        match self {
            Self::Starting => RuntimeState::Starting,
            Self::Serving => RuntimeState::Serving,
            Self::Draining => RuntimeState::Draining,
            Self::Relocating => RuntimeState::Relocating,
            Self::Relocated => RuntimeState::Relocated,
            Self::Stopped | Self::Fenced => RuntimeState::Stopped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_through_the_proto_enum() {
        for s in HostState::ALL {
            assert_eq!(HostState::from_proto(s.to_proto() as i32), Some(s));
        }
        assert_eq!(HostState::from_proto(0), None);
        assert_eq!(HostState::from_proto(99), None);
    }
}
