//! The fanout publisher descriptor and automatic discovery (glossary §6 "Descriptor", "Fanout
//! publisher descriptor", "Descriptor revision", "Automatic discovery").
//!
//! A publisher publishes one descriptor per lifecycle under its host owner lease
//! (`DescriptorKind::FanoutPublisher`, scope = ChannelName, key RID = PublisherRid). Subscribers
//! of the same ChannelName list those descriptors — never MeshNode or ClientServer descriptors —
//! and [`reconcile`] turns a listing into socket changes: one SUB socket per publisher
//! lifecycle.
//!
//! # Content encoding
//!
//! The store keeps descriptor content as opaque bytes. Ours is a JSON object with a format
//! version, every glossary field except `UpdatedAt` (the store's own `updated_at` of the record)
//! and, for the owner, `ownerId` + `leaseGeneration`:
//!
//! ```json
//! {"v":1,"channelName":"prices","publisherRid":"pub-…","lifecycleGeneration":123,
//!  "descriptorRevision":1,"endpoint":"tcp://10.0.0.7:41234","state":"serving",
//!  "securityIdentity":"svc-prices","ownerId":"host-a","leaseGeneration":9}
//! ```
//!
//! Serialization is deterministic (fixed field order), so re-publishing the same revision is the
//! store's idempotent `Unchanged`. [`decode_descriptor`] refuses unknown versions, unknown
//! fields, zero or out-of-range generations, revision 0 and endpoints that are not `tcp://`,
//! each as a [`DescriptorError`].

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use zlink_protocol::generated::RuntimeState;
use zlink_protocol::ids;
use zlink_store::StoreError;
use zlink_store::types::{DescriptorKey, DescriptorKind, DescriptorRecord};

use crate::mesh::discovery::DiscoveryBackend;

/// The content format version this runtime writes and reads.
pub const DESCRIPTOR_FORMAT_VERSION: u8 = 1;

/// A fanout publisher descriptor (.NET `ZLinkFanoutPublisherDescriptor`; `UpdatedAt` is the
/// store record's `updated_at`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FanoutPublisherDescriptor {
    /// Content format version ([`DESCRIPTOR_FORMAT_VERSION`]).
    pub v: u8,
    /// The fanout ChannelName.
    pub channel_name: String,
    /// The publisher's RID.
    pub publisher_rid: String,
    /// The current publisher lifecycle: non-zero, at most `i64::MAX`, random per start.
    pub lifecycle_generation: u64,
    /// Order of changes within the lifecycle (1 or more).
    pub descriptor_revision: u64,
    /// The advertised PUB endpoint subscribers connect to.
    pub endpoint: String,
    /// The publisher's runtime state.
    pub state: RuntimeState,
    /// The publisher's security identity.
    pub security_identity: String,
    /// The host owner that published the descriptor.
    pub owner_id: String,
    /// The owner lease generation it was published under.
    pub lease_generation: u64,
}

/// Stored descriptor content that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DescriptorError {
    /// Not JSON of the expected shape (including unknown fields).
    #[error("descriptor content is not a fanout publisher descriptor: {0}")]
    Malformed(String),
    /// A format version this runtime does not read.
    #[error("descriptor format version {0} is not supported")]
    UnsupportedVersion(u8),
    /// A field breaks its rule.
    #[error("descriptor field {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The content disagrees with the store record that holds it.
    #[error("descriptor {field} disagrees with its store record")]
    RecordMismatch {
        /// The field.
        field: &'static str,
    },
}

/// The store key of a publisher's descriptor.
pub fn descriptor_key(channel_name: &str, publisher_rid: &str) -> DescriptorKey {
    DescriptorKey {
        kind: DescriptorKind::FanoutPublisher,
        scope: channel_name.to_owned(),
        rid: publisher_rid.to_owned(),
    }
}

/// Encode descriptor content (deterministic).
pub fn encode_descriptor(d: &FanoutPublisherDescriptor) -> Bytes {
    // A struct of strings, integers and a unit enum always serializes.
    Bytes::from(serde_json::to_vec(d).unwrap_or_default())
}

/// Decode and validate descriptor content.
///
/// # Errors
/// [`DescriptorError`].
pub fn decode_descriptor(content: &[u8]) -> Result<FanoutPublisherDescriptor, DescriptorError> {
    #[derive(Deserialize)]
    struct Version {
        v: u8,
    }
    let version: Version =
        serde_json::from_slice(content).map_err(|e| DescriptorError::Malformed(e.to_string()))?;
    if version.v != DESCRIPTOR_FORMAT_VERSION {
        return Err(DescriptorError::UnsupportedVersion(version.v));
    }
    let d: FanoutPublisherDescriptor =
        serde_json::from_slice(content).map_err(|e| DescriptorError::Malformed(e.to_string()))?;
    let invalid = |field, reason: String| DescriptorError::Invalid { field, reason };
    if d.channel_name.is_empty() {
        return Err(invalid("channelName", "empty".into()));
    }
    ids::validate_rid(&d.publisher_rid).map_err(|e| invalid("publisherRid", e.to_string()))?;
    ids::validate_lifecycle_generation(d.lifecycle_generation)
        .map_err(|e| invalid("lifecycleGeneration", e.to_string()))?;
    if d.descriptor_revision == 0 {
        return Err(invalid("descriptorRevision", "must be 1 or more".into()));
    }
    if !d.endpoint.starts_with("tcp://") || d.endpoint.len() <= "tcp://".len() {
        return Err(invalid(
            "endpoint",
            format!("{:?} is not tcp://host:port", d.endpoint),
        ));
    }
    if d.lease_generation == 0 {
        return Err(invalid("leaseGeneration", "zero".into()));
    }
    Ok(d)
}

/// Decode the descriptor of a store record and check it against the record and the channel.
///
/// # Errors
/// [`DescriptorError`].
pub fn descriptor_of_record(
    record: &DescriptorRecord,
    channel_name: &str,
) -> Result<FanoutPublisherDescriptor, DescriptorError> {
    let d = decode_descriptor(&record.content)?;
    if d.channel_name != channel_name || record.key.scope != channel_name {
        return Err(DescriptorError::RecordMismatch {
            field: "channelName",
        });
    }
    if d.publisher_rid != record.key.rid {
        return Err(DescriptorError::RecordMismatch {
            field: "publisherRid",
        });
    }
    if d.lifecycle_generation != record.lifecycle_generation {
        return Err(DescriptorError::RecordMismatch {
            field: "lifecycleGeneration",
        });
    }
    if d.descriptor_revision != record.revision {
        return Err(DescriptorError::RecordMismatch {
            field: "descriptorRevision",
        });
    }
    // The content names the lease it was published under; the store knows the real one.
    if d.owner_id != record.owner.owner_id {
        return Err(DescriptorError::RecordMismatch { field: "ownerId" });
    }
    if d.lease_generation != record.owner.lease_generation {
        return Err(DescriptorError::RecordMismatch {
            field: "leaseGeneration",
        });
    }
    Ok(d)
}

/// A publisher a subscriber should hold a socket for: one lifecycle at one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredPublisher {
    /// Lifecycle generation.
    pub lifecycle_generation: u64,
    /// Advertised endpoint.
    pub endpoint: String,
}

/// A socket change decided by [`reconcile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Open a SUB socket for this publisher lifecycle.
    Add {
        /// Publisher RID.
        rid: String,
        /// The lifecycle and endpoint.
        publisher: DiscoveredPublisher,
    },
    /// Close the socket of this RID (its descriptor vanished, or a new lifecycle replaces it).
    Remove {
        /// Publisher RID.
        rid: String,
    },
}

/// The changes that turn the `current` discovered set into `desired` (pure). A RID whose
/// lifecycle generation or endpoint changed is removed and added again, so the new lifecycle
/// gets a fresh socket and a fresh not-ready state.
pub fn reconcile(
    current: &BTreeMap<String, DiscoveredPublisher>,
    desired: &BTreeMap<String, DiscoveredPublisher>,
) -> Vec<Change> {
    let mut out = Vec::new();
    for (rid, have) in current {
        if desired.get(rid) != Some(have) {
            out.push(Change::Remove { rid: rid.clone() });
        }
    }
    for (rid, want) in desired {
        if current.get(rid) != Some(want) {
            out.push(Change::Add {
                rid: rid.clone(),
                publisher: want.clone(),
            });
        }
    }
    out
}

/// One discovery listing, sorted out by [`desired_publishers`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// The publishers to hold a socket for, by RID.
    pub publishers: BTreeMap<String, DiscoveredPublisher>,
    /// Records refused as unusable.
    pub errors: Vec<DescriptorError>,
    /// RIDs skipped because their endpoint already has a socket: a manual endpoint, or a
    /// discovered publisher with a lower RID at the same endpoint.
    pub duplicate_endpoints: Vec<String>,
}

/// The desired set of one listing: valid descriptors of `channel_name` that are not stopped,
/// at most one per endpoint, none at an endpoint in `taken` (the manual endpoints). One
/// publisher never gets two SUB sockets, which would deliver each of its events twice.
/// Endpoints compare as strings: `tcp://localhost:1` and `tcp://127.0.0.1:1` are not caught.
pub fn desired_publishers(
    records: &[DescriptorRecord],
    channel_name: &str,
    taken: &[String],
) -> Desired {
    let mut out = Desired::default();
    let mut endpoints: BTreeMap<String, ()> = taken.iter().map(|e| (e.clone(), ())).collect();
    let mut valid: Vec<FanoutPublisherDescriptor> = Vec::new();
    for r in records {
        match descriptor_of_record(r, channel_name) {
            Ok(d) if d.state == RuntimeState::Stopped => {}
            Ok(d) => valid.push(d),
            Err(e) => out.errors.push(e),
        }
    }
    // Lowest RID first, whatever order the store listed them in.
    valid.sort_by(|a, b| a.publisher_rid.cmp(&b.publisher_rid));
    for d in valid {
        if endpoints.insert(d.endpoint.clone(), ()).is_some() {
            out.duplicate_endpoints.push(d.publisher_rid);
            continue;
        }
        out.publishers.insert(
            d.publisher_rid,
            DiscoveredPublisher {
                lifecycle_generation: d.lifecycle_generation,
                endpoint: d.endpoint,
            },
        );
    }
    out
}

/// The live fanout publisher descriptors of `channel_name`, ordered by RID.
///
/// # Errors
/// The store's error.
pub async fn list_publishers(
    store: &dyn DiscoveryBackend,
    channel_name: &str,
) -> Result<Vec<DescriptorRecord>, StoreError> {
    store
        .list_descriptors(DescriptorKind::FanoutPublisher, channel_name)
        .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use zlink_store::types::{OwnerToken, StoreTime};

    fn d() -> FanoutPublisherDescriptor {
        FanoutPublisherDescriptor {
            v: 1,
            channel_name: "prices".into(),
            publisher_rid: "pub-1".into(),
            lifecycle_generation: 42,
            descriptor_revision: 1,
            endpoint: "tcp://127.0.0.1:4000".into(),
            state: RuntimeState::Serving,
            security_identity: "svc".into(),
            owner_id: "host-a".into(),
            lease_generation: 7,
        }
    }

    fn rec(d: &FanoutPublisherDescriptor) -> DescriptorRecord {
        DescriptorRecord {
            key: descriptor_key(&d.channel_name, &d.publisher_rid),
            owner: OwnerToken {
                owner_id: d.owner_id.clone(),
                lease_generation: d.lease_generation,
            },
            lifecycle_generation: d.lifecycle_generation,
            revision: d.descriptor_revision,
            content: encode_descriptor(d),
            updated_at: StoreTime(0),
        }
    }

    #[test]
    fn round_trip_is_deterministic() {
        let a = encode_descriptor(&d());
        assert_eq!(a, encode_descriptor(&d()));
        assert_eq!(decode_descriptor(&a).unwrap(), d());
        assert!(std::str::from_utf8(&a).unwrap().starts_with("{\"v\":1,"));
    }

    #[test]
    fn malformed_content_is_a_typed_error() {
        assert!(matches!(
            decode_descriptor(b"not json"),
            Err(DescriptorError::Malformed(_))
        ));
        let mut v2 = d();
        v2.v = 2;
        assert_eq!(
            decode_descriptor(&encode_descriptor(&v2)),
            Err(DescriptorError::UnsupportedVersion(2))
        );
        let mut extra: serde_json::Value =
            serde_json::from_slice(&encode_descriptor(&d())).unwrap();
        extra["surprise"] = 1.into();
        assert!(matches!(
            decode_descriptor(&serde_json::to_vec(&extra).unwrap()),
            Err(DescriptorError::Malformed(_))
        ));
        for (field, f) in [
            (
                "lifecycleGeneration",
                (|x: &mut FanoutPublisherDescriptor| x.lifecycle_generation = 0) as fn(&mut _),
            ),
            ("lifecycleGeneration", |x| x.lifecycle_generation = u64::MAX),
            ("descriptorRevision", |x| x.descriptor_revision = 0),
            ("endpoint", |x| x.endpoint = "ipc:///tmp/x".into()),
            ("publisherRid", |x| x.publisher_rid = String::new()),
            ("channelName", |x| x.channel_name = String::new()),
            ("leaseGeneration", |x| x.lease_generation = 0),
        ] {
            let mut bad = d();
            f(&mut bad);
            match decode_descriptor(&encode_descriptor(&bad)) {
                Err(DescriptorError::Invalid { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn records_must_agree_with_their_content_and_channel() {
        assert!(descriptor_of_record(&rec(&d()), "prices").is_ok());
        assert_eq!(
            descriptor_of_record(&rec(&d()), "other"),
            Err(DescriptorError::RecordMismatch {
                field: "channelName"
            })
        );
        let mut r = rec(&d());
        r.key.rid = "pub-2".into();
        assert_eq!(
            descriptor_of_record(&r, "prices"),
            Err(DescriptorError::RecordMismatch {
                field: "publisherRid"
            })
        );
        let mut r = rec(&d());
        r.lifecycle_generation = 43;
        assert_eq!(
            descriptor_of_record(&r, "prices"),
            Err(DescriptorError::RecordMismatch {
                field: "lifecycleGeneration"
            })
        );
        let mut r = rec(&d());
        r.owner.owner_id = "host-b".into();
        assert_eq!(
            descriptor_of_record(&r, "prices"),
            Err(DescriptorError::RecordMismatch { field: "ownerId" })
        );
        let mut r = rec(&d());
        r.owner.lease_generation = 8;
        assert_eq!(
            descriptor_of_record(&r, "prices"),
            Err(DescriptorError::RecordMismatch {
                field: "leaseGeneration"
            })
        );
    }

    #[test]
    fn desired_set_skips_stopped_and_invalid_publishers() {
        let mut stopped = d();
        stopped.publisher_rid = "pub-2".into();
        stopped.state = RuntimeState::Stopped;
        let mut garbled = rec(&d());
        garbled.key.rid = "pub-3".into();
        garbled.content = Bytes::from_static(b"{");
        let out = desired_publishers(&[rec(&d()), rec(&stopped), garbled], "prices", &[]);
        assert_eq!(out.publishers.keys().collect::<Vec<_>>(), vec!["pub-1"]);
        assert_eq!(out.errors.len(), 1);
        assert!(out.duplicate_endpoints.is_empty());
    }

    #[test]
    fn one_socket_per_endpoint() {
        // pub-0 shares pub-1's endpoint (lower RID wins); pub-2 sits on a manual endpoint.
        let mut twin = d();
        twin.publisher_rid = "pub-0".into();
        let mut manual = d();
        manual.publisher_rid = "pub-2".into();
        manual.endpoint = "tcp://127.0.0.1:5000".into();
        let out = desired_publishers(
            &[rec(&d()), rec(&twin), rec(&manual)],
            "prices",
            &["tcp://127.0.0.1:5000".to_owned()],
        );
        assert_eq!(out.publishers.keys().collect::<Vec<_>>(), vec!["pub-0"]);
        assert_eq!(out.duplicate_endpoints, vec!["pub-1", "pub-2"]);
        assert!(out.errors.is_empty());
    }

    #[test]
    fn reconcile_adds_removes_and_replaces_a_new_lifecycle() {
        let p = |g: u64, port: u16| DiscoveredPublisher {
            lifecycle_generation: g,
            endpoint: format!("tcp://127.0.0.1:{port}"),
        };
        let current: BTreeMap<_, _> = [("a".to_owned(), p(1, 1)), ("b".to_owned(), p(2, 2))].into();
        let desired: BTreeMap<_, _> = [("b".to_owned(), p(3, 2)), ("c".to_owned(), p(4, 4))].into();
        assert_eq!(
            reconcile(&current, &desired),
            vec![
                Change::Remove { rid: "a".into() },
                Change::Remove { rid: "b".into() },
                Change::Add {
                    rid: "b".into(),
                    publisher: p(3, 2)
                },
                Change::Add {
                    rid: "c".into(),
                    publisher: p(4, 4)
                },
            ]
        );
        assert!(reconcile(&desired, &desired).is_empty());
    }
}
