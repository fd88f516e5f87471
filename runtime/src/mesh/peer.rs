//! Peer state as the node and its monitoring see it (glossary §6 "Peer admission",
//! "Admitted peer", "Ready target").

use zlink_protocol::generated::{NodeDescriptor, RejectReason};

use super::connection::ConnRef;
use super::liveness::Liveness;

/// Observable state of one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Dialing or waiting for the peer to dial.
    Connecting,
    /// Handshake in progress.
    Admitting,
    /// Admitted and live: a ready target.
    Ready,
    /// A connection is required and none is ready (counted as a failure).
    NotConnected,
    /// No connection is required (both Object Clients, no Channel Server membership); shown,
    /// never counted as a failure (glossary §6).
    NotRequired,
    /// The peer refused admission (or we refused it) for this reason.
    Rejected(RejectReason),
}

impl PeerState {
    /// Whether monitoring counts this state as a connection failure.
    pub fn is_failure(self) -> bool {
        match self {
            Self::NotConnected | Self::Rejected(_) => true,
            Self::Connecting | Self::Admitting | Self::Ready | Self::NotRequired => false,
        }
    }
}

/// A point-in-time view of one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSnapshot {
    /// The peer's RID.
    pub rid: String,
    /// State.
    pub state: PeerState,
    /// The endpoint this node dials (None when the peer dials us).
    pub dial_endpoint: Option<String>,
    /// Current connection generation (epoch) when admitted.
    pub connection_generation: Option<u64>,
    /// Number of connections admitted so far (a new one is a new epoch).
    pub epochs: u64,
    /// The admitted descriptor, updated by `update`.
    pub descriptor: Option<NodeDescriptor>,
    /// Application bytes in flight to the peer on the current epoch.
    pub bytes_in_flight: u64,
    /// The largest relocation chunk the peer said it receives (its `admit`'s
    /// `receiveChunkLimitBytes`, wire §9); `None` when it dialed this node (no admit came from
    /// it) or announced 0.
    pub receive_chunk_limit: Option<u32>,
}

/// How this node reaches the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IntentKind {
    /// This node dials `endpoint`.
    Dial { endpoint: String },
    /// The peer dials us.
    Await,
}

/// A connection intent (glossary §2 "Connection intent"): one per peer, removed only by its
/// owner; removal is terminal.
#[derive(Debug, Clone)]
pub(crate) struct Intent {
    pub kind: IntentKind,
    /// Full descriptor expectation (automatic discovery or a manual peer with known RID).
    pub expected: Option<NodeDescriptor>,
    /// Whether it came from configuration (manual) or discovery.
    pub manual: bool,
}

/// Dialer-side handshake state.
#[derive(Debug, Clone)]
pub(crate) struct HelloState {
    pub dialer_nonce: [u8; 32],
    pub acceptor_nonce: [u8; 32],
    /// Descriptor revision the `hello` carried.
    pub revision: u64,
}

/// What the node keeps per peer.
#[derive(Debug)]
pub(crate) struct PeerEntry {
    pub rid: String,
    pub intent: Option<Intent>,
    pub state: PeerState,
    pub conn: Option<ConnRef>,
    pub liveness: Option<Liveness>,
    pub descriptor: Option<NodeDescriptor>,
    /// Last applied (revision, update body) for DescriptorRevision ordering.
    pub last_update: Option<(u64, zlink_protocol::generated::Update)>,
    pub hello: Option<HelloState>,
    pub epochs: u64,
    /// Dialer: waiting for the old connection's observed close before dialing again.
    pub awaiting_close_until: Option<u64>,
    /// When the last epoch ended other than by liveness: if the peer is not admitted again
    /// within the liveness deadline, its pending requests fail as if liveness had declared it
    /// dead (wire §5), instead of each waiting for its own deadline.
    pub lost_at: Option<u64>,
    /// Dialer: do not dial before this time (after a reject).
    pub redial_at: Option<u64>,
    /// Whether the pump currently has a connect registered for the dial endpoint.
    pub dialing: bool,
    /// Dialer: the acceptor announced a new pipe (its probe) at this time and its greeting
    /// has not arrived yet.
    pub awaiting_greeting: Option<(bytes::Bytes, u64)>,
    /// The peer's admitted receive chunk limit (see [`PeerSnapshot::receive_chunk_limit`]).
    pub receive_chunk_limit: Option<u32>,
}

impl PeerEntry {
    pub fn new(rid: String, intent: Option<Intent>) -> Self {
        Self {
            rid,
            intent,
            state: PeerState::Connecting,
            conn: None,
            liveness: None,
            descriptor: None,
            last_update: None,
            hello: None,
            epochs: 0,
            awaiting_close_until: None,
            lost_at: None,
            redial_at: None,
            dialing: false,
            awaiting_greeting: None,
            receive_chunk_limit: None,
        }
    }

    pub fn dial_endpoint(&self) -> Option<&str> {
        match self.intent.as_ref().map(|i| &i.kind) {
            Some(IntentKind::Dial { endpoint }) => Some(endpoint),
            Some(IntentKind::Await) | None => None,
        }
    }

    pub fn snapshot(&self) -> PeerSnapshot {
        PeerSnapshot {
            rid: self.rid.clone(),
            state: self.state,
            dial_endpoint: self.dial_endpoint().map(str::to_owned),
            connection_generation: self.conn.as_ref().map(|c| c.generation()),
            epochs: self.epochs,
            descriptor: self.descriptor.clone(),
            bytes_in_flight: self.conn.as_ref().map_or(0, |c| c.bytes_in_flight()),
            receive_chunk_limit: self.receive_chunk_limit,
        }
    }
}
