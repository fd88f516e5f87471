//! The ClientServer Server descriptor (glossary §6) and DescriptorRevision ordering (wire §4).
//!
//! # Content encoding
//!
//! The Location Store keeps descriptor content as opaque bytes. A Server descriptor is one
//! UTF-8 JSON object, version 1:
//!
//! ```json
//! {"v":1,"channelName":"lobby","serverRid":"cs-…","lifecycleGeneration":123,
//!  "descriptorRevision":2,"endpoint":"tcp://10.0.0.7:7100","weight":100,"state":"serving",
//!  "securityIdentity":"zlink","ownerId":"host-cs-…","leaseGeneration":9}
//! ```
//!
//! `UpdatedAt` is the store record's `updated_at`. A reader refuses (typed
//! [`DescriptorError`]) another version, unknown members, out-of-range values and content that
//! disagrees with the store record's key, lifecycle generation or revision; the client ignores
//! such a descriptor and counts it.

use serde::{Deserialize, Serialize};
use thiserror::Error;
use zlink_protocol::generated::RuntimeState;
use zlink_protocol::ids::MAX_LIFECYCLE_GENERATION;
use zlink_store::types::{DescriptorKey, DescriptorKind, DescriptorRecord};

use crate::config::defaults::MAX_WEIGHT;

/// Content version written and accepted.
pub const DESCRIPTOR_VERSION: u32 = 1;

/// A ClientServer Server descriptor (glossary §6 `ZLinkClientServerServerDescriptor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerDescriptor {
    /// Content version ([`DESCRIPTOR_VERSION`]).
    pub v: u32,
    /// The ClientServer Channel.
    pub channel_name: String,
    /// Server identity.
    pub server_rid: String,
    /// Current server run (non-zero, ≤ `i64::MAX`).
    pub lifecycle_generation: u64,
    /// Order of weight and state changes within the lifecycle (≥ 1).
    pub descriptor_revision: u64,
    /// Advertised ROUTER endpoint.
    pub endpoint: String,
    /// Selection weight, `0..=10000`.
    pub weight: u16,
    /// Runtime state (`serving`, `draining`, `stopped`, …).
    #[serde(with = "state_name")]
    pub state: RuntimeState,
    /// Transport admission identity.
    pub security_identity: String,
    /// Host owner that published it.
    pub owner_id: String,
    /// Owner lease generation.
    pub lease_generation: u64,
}

mod state_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use zlink_protocol::generated::RuntimeState;

    pub fn serialize<S: Serializer>(s: &RuntimeState, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RuntimeState, D::Error> {
        let name = String::deserialize(d)?;
        RuntimeState::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown runtime state {name:?}")))
    }
}

/// Why a stored descriptor was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DescriptorError {
    /// Not JSON of the v1 shape.
    #[error("descriptor content is not v1 JSON: {0}")]
    InvalidJson(String),
    /// Another content version.
    #[error("descriptor content version {0} is not supported")]
    UnsupportedVersion(u32),
    /// A value out of range.
    #[error("descriptor {0} is out of range")]
    OutOfRange(&'static str),
    /// The content disagrees with the store record that holds it.
    #[error("descriptor {0} disagrees with its store record")]
    RecordMismatch(&'static str),
}

impl DescriptorError {
    /// Metrics label.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::InvalidJson(_) => "InvalidJson",
            Self::UnsupportedVersion(_) => "UnsupportedVersion",
            Self::OutOfRange(_) => "OutOfRange",
            Self::RecordMismatch(_) => "RecordMismatch",
        }
    }
}

impl ServerDescriptor {
    /// The store key of this descriptor (kind ClientServerServer, scope = ChannelName).
    pub fn key(&self) -> DescriptorKey {
        DescriptorKey {
            kind: DescriptorKind::ClientServerServer,
            scope: self.channel_name.clone(),
            rid: self.server_rid.clone(),
        }
    }

    /// Encode the content.
    pub fn encode(&self) -> bytes::Bytes {
        // A struct of strings and integers always serializes.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Decode content and check it on its own.
    ///
    /// # Errors
    /// [`DescriptorError`].
    pub fn decode(content: &[u8]) -> Result<Self, DescriptorError> {
        // Peek the version first so a future version is reported as such, not as bad JSON.
        #[derive(Deserialize)]
        struct Version {
            v: u32,
        }
        let version: Version = serde_json::from_slice(content)
            .map_err(|e| DescriptorError::InvalidJson(e.to_string()))?;
        if version.v != DESCRIPTOR_VERSION {
            return Err(DescriptorError::UnsupportedVersion(version.v));
        }
        let d: Self = serde_json::from_slice(content)
            .map_err(|e| DescriptorError::InvalidJson(e.to_string()))?;
        if d.channel_name.is_empty() || d.channel_name.len() > 255 {
            return Err(DescriptorError::OutOfRange("channelName"));
        }
        if d.server_rid.is_empty() || d.server_rid.len() > 255 {
            return Err(DescriptorError::OutOfRange("serverRid"));
        }
        if d.lifecycle_generation == 0 || d.lifecycle_generation > MAX_LIFECYCLE_GENERATION {
            return Err(DescriptorError::OutOfRange("lifecycleGeneration"));
        }
        if d.descriptor_revision == 0 {
            return Err(DescriptorError::OutOfRange("descriptorRevision"));
        }
        if d.endpoint.is_empty() || d.endpoint.len() > 255 {
            return Err(DescriptorError::OutOfRange("endpoint"));
        }
        if d.weight > MAX_WEIGHT {
            return Err(DescriptorError::OutOfRange("weight"));
        }
        Ok(d)
    }

    /// Decode the content of a store record and check it against the record.
    ///
    /// # Errors
    /// [`DescriptorError`].
    pub fn from_record(record: &DescriptorRecord) -> Result<Self, DescriptorError> {
        let d = Self::decode(&record.content)?;
        if record.key.kind != DescriptorKind::ClientServerServer {
            return Err(DescriptorError::RecordMismatch("kind"));
        }
        if d.channel_name != record.key.scope {
            return Err(DescriptorError::RecordMismatch("channelName"));
        }
        if d.server_rid != record.key.rid {
            return Err(DescriptorError::RecordMismatch("serverRid"));
        }
        if d.lifecycle_generation != record.lifecycle_generation {
            return Err(DescriptorError::RecordMismatch("lifecycleGeneration"));
        }
        if d.descriptor_revision != record.revision {
            return Err(DescriptorError::RecordMismatch("descriptorRevision"));
        }
        Ok(d)
    }
}

/// What an inbound revision does to the state held for one lifecycle (wire §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevisionOutcome {
    /// Higher revision: apply it.
    Apply,
    /// Same revision, same bytes: nothing to do.
    Idempotent,
}

/// A revision that breaks the ordering: a protocol error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RevisionError {
    /// Lower than the current revision.
    #[error("revision {got} is lower than the current {current}")]
    Lower {
        /// Held revision.
        current: u64,
        /// Received revision.
        got: u64,
    },
    /// Same revision with other content.
    #[error("revision {0} arrived again with different content")]
    Conflict(u64),
}

/// DescriptorRevision ordering within one lifecycle (wire §4): strictly increasing; the same
/// revision with the same bytes is idempotent; the same revision with other bytes, or a lower
/// one, is a protocol error. `current` is the held revision and its bytes.
///
/// # Errors
/// [`RevisionError`].
pub fn order_revision(
    current: Option<(u64, &[u8])>,
    revision: u64,
    bytes: &[u8],
) -> Result<RevisionOutcome, RevisionError> {
    match current {
        None => Ok(RevisionOutcome::Apply),
        Some((cur, _)) if revision > cur => Ok(RevisionOutcome::Apply),
        Some((cur, held)) if revision == cur => {
            if held == bytes {
                Ok(RevisionOutcome::Idempotent)
            } else {
                Err(RevisionError::Conflict(revision))
            }
        }
        Some((cur, _)) => Err(RevisionError::Lower {
            current: cur,
            got: revision,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use zlink_store::types::{OwnerToken, StoreTime};

    fn desc() -> ServerDescriptor {
        ServerDescriptor {
            v: 1,
            channel_name: "lobby".into(),
            server_rid: "cs-a".into(),
            lifecycle_generation: 7,
            descriptor_revision: 2,
            endpoint: "tcp://127.0.0.1:7100".into(),
            weight: 50,
            state: RuntimeState::Draining,
            security_identity: "zlink".into(),
            owner_id: "host-a".into(),
            lease_generation: 3,
        }
    }

    fn record(d: &ServerDescriptor) -> DescriptorRecord {
        DescriptorRecord {
            key: d.key(),
            owner: OwnerToken {
                owner_id: d.owner_id.clone(),
                lease_generation: d.lease_generation,
            },
            lifecycle_generation: d.lifecycle_generation,
            revision: d.descriptor_revision,
            content: d.encode(),
            updated_at: StoreTime(1),
        }
    }

    #[test]
    fn content_round_trips_with_the_documented_member_names() {
        let d = desc();
        let json: serde_json::Value = serde_json::from_slice(&d.encode()).unwrap();
        assert_eq!(json["state"], "draining");
        assert_eq!(json["serverRid"], "cs-a");
        assert_eq!(ServerDescriptor::from_record(&record(&d)).unwrap(), d);
    }

    #[test]
    fn malformed_content_is_a_typed_error() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not json".to_vec(), "InvalidJson"),
            (br#"{"v":2}"#.to_vec(), "UnsupportedVersion"),
            (
                desc()
                    .encode()
                    .to_vec()
                    .replace_str("\"weight\":50", "\"weight\":10001"),
                "OutOfRange",
            ),
            (
                desc()
                    .encode()
                    .to_vec()
                    .replace_str("\"lifecycleGeneration\":7", "\"lifecycleGeneration\":0"),
                "OutOfRange",
            ),
            (
                desc()
                    .encode()
                    .to_vec()
                    .replace_str("\"draining\"", "\"sleepy\""),
                "InvalidJson",
            ),
            (
                desc()
                    .encode()
                    .to_vec()
                    .replace_str("{\"v\":1,", "{\"v\":1,\"x\":1,"),
                "InvalidJson",
            ),
        ];
        for (bytes, kind) in cases {
            assert_eq!(ServerDescriptor::decode(&bytes).unwrap_err().kind(), kind);
        }
        let mut r = record(&desc());
        r.revision = 3;
        assert_eq!(
            ServerDescriptor::from_record(&r).unwrap_err(),
            DescriptorError::RecordMismatch("descriptorRevision")
        );
    }

    trait ReplaceStr {
        fn replace_str(self, from: &str, to: &str) -> Vec<u8>;
    }
    impl ReplaceStr for Vec<u8> {
        fn replace_str(self, from: &str, to: &str) -> Vec<u8> {
            let s = String::from_utf8(self).unwrap();
            assert!(s.contains(from), "{s} lacks {from}");
            s.replace(from, to).into_bytes()
        }
    }

    #[test]
    fn revision_ordering_follows_wire_4() {
        assert_eq!(order_revision(None, 1, b"a"), Ok(RevisionOutcome::Apply));
        assert_eq!(
            order_revision(Some((2, b"a")), 3, b"b"),
            Ok(RevisionOutcome::Apply)
        );
        assert_eq!(
            order_revision(Some((2, b"a")), 2, b"a"),
            Ok(RevisionOutcome::Idempotent)
        );
        assert_eq!(
            order_revision(Some((2, b"a")), 2, b"b"),
            Err(RevisionError::Conflict(2))
        );
        assert_eq!(
            order_revision(Some((2, b"a")), 1, b"a"),
            Err(RevisionError::Lower { current: 2, got: 1 })
        );
    }
}
