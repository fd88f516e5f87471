//! Classic fanout application records and topics (wire §5 "Classic fanout beacon", "Subscriber
//! ready 판정"; glossary §4 "Topic", "Classic fanout"). Pure: bytes in, bytes out.
//!
//! # Frame layout
//!
//! ```text
//! beacon:       [01 5A 4C 46 31] [5A 46 01 01]                      (exactly two frames)
//! application:  [wire topic] [typed payload envelope]               (no metadata)
//!               [wire topic] [metadata frame] [typed payload envelope]
//! ```
//!
//! The **wire topic** of an application topic is its UTF-8 bytes, unchanged, so ZeroMQ's
//! prefix subscription filtering works on it directly. A topic must be 1..=255 UTF-8 bytes
//! ([`TopicError::Empty`], [`TopicError::TooLong`]): an empty topic would be a ZeroMQ
//! subscription to *everything* and is almost always a bug. A topic whose wire topic equals the
//! reserved beacon topic is refused before transport ([`TopicError::Reserved`]); a topic that
//! merely starts with the reserved bytes, or is a prefix of them, is legal — the subscriber
//! classifies every received record by exact frame-0 equality first, so a beacon reached through
//! a prefix subscription is still only a beacon, and an application record on `01 5A 4C 46 31 …`
//! is still only an application record.
//!
//! The metadata frame is the wire §2 metadata frame (`zlink_protocol::metadata`, ≤ 1,024 bytes);
//! it is present only when the publisher supplied at least one entry, and the frame count tells
//! the receiver which layout it got. The envelope is the wire §2 typed payload envelope
//! ([`TypedPayload`]). Any other shape is a protocol error and never reaches a handler.

use bytes::Bytes;
use thiserror::Error;
use zlink_protocol::ProtocolError;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::fanout::{FanoutRecord, classify};
use zlink_protocol::metadata::Metadata;

/// The longest application topic, in UTF-8 bytes.
pub const MAX_TOPIC_BYTES: usize = 255;

/// An application topic refused before transport (wire §5; glossary §4 "Topic").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TopicError {
    /// The topic is empty.
    #[error("fanout topic is empty")]
    Empty,
    /// The topic is longer than [`MAX_TOPIC_BYTES`].
    #[error("fanout topic is {len} bytes, longer than {MAX_TOPIC_BYTES}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The topic's wire form equals the reserved classic fanout beacon topic `01 5A 4C 46 31`.
    #[error("fanout topic equals the reserved classic fanout beacon topic")]
    Reserved,
}

/// The wire topic (frame 0) of an application topic: its UTF-8 bytes, after the checks above.
///
/// # Errors
/// [`TopicError`].
pub fn wire_topic(topic: &str) -> Result<&[u8], TopicError> {
    let bytes = topic.as_bytes();
    if bytes.is_empty() {
        return Err(TopicError::Empty);
    }
    if bytes.len() > MAX_TOPIC_BYTES {
        return Err(TopicError::TooLong { len: bytes.len() });
    }
    zlink_protocol::fanout::check_application_topic(bytes).map_err(|_| TopicError::Reserved)?;
    Ok(bytes)
}

/// The frames of one application record: topic, metadata frame when `metadata` has entries,
/// typed payload envelope.
///
/// # Errors
/// [`RecordEncodeError`] for a bad topic or an envelope over its bounds.
pub fn encode_application(
    topic: &str,
    payload: &TypedPayload,
    metadata: Option<&Metadata>,
) -> Result<Vec<Vec<u8>>, RecordEncodeError> {
    let topic = wire_topic(topic)?;
    let envelope = payload.encode()?;
    let mut frames = Vec::with_capacity(3);
    frames.push(topic.to_vec());
    if let Some(m) = metadata.filter(|m| !m.is_empty()) {
        frames.push(m.encode());
    }
    frames.push(envelope);
    Ok(frames)
}

/// Why an application record could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordEncodeError {
    /// The topic was refused.
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// The typed payload envelope is over its bounds (packet name, content type, payload).
    #[error("typed payload envelope: {0}")]
    Envelope(#[from] ProtocolError),
}

/// A received record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A valid beacon.
    Beacon,
    /// A valid application record.
    Application(ApplicationRecord),
}

/// A valid application record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplicationRecord {
    /// Frame 0, the wire topic.
    pub topic: Bytes,
    /// The metadata snapshot (empty when the record had no metadata frame).
    pub metadata: Metadata,
    /// The typed payload; names and payload are zero-copy slices of the received frame.
    pub payload: TypedPayload,
}

/// Decode one received ZeroMQ message.
///
/// # Errors
/// - [`ProtocolError::MalformedBeacon`] for a reserved-topic record that is not exactly the
///   beacon;
/// - [`ProtocolError::WrongFrameCount`] for an application record that is not 2 or 3 frames;
/// - the metadata frame's and the envelope's decode errors.
pub fn decode(frames: &[Bytes]) -> Result<Received, ProtocolError> {
    let mut slices: [&[u8]; 4] = [&[]; 4];
    // Classify on at most four frames: anything longer is a frame-count error either way, but
    // the beacon rule must still win for a reserved topic.
    let n = frames.len().min(4);
    for (s, f) in slices.iter_mut().zip(frames) {
        *s = f;
    }
    // `classify` answers `Beacon` only for exactly topic + payload, and `n` is the real frame
    // count up to four, so a beacon here is exactly two frames; longer reserved-topic records
    // are already `MalformedBeacon`.
    if classify(&slices[..n])? == FanoutRecord::Beacon {
        return Ok(Received::Beacon);
    }
    let (metadata, envelope) = match frames {
        [_, envelope] => (Metadata::default(), envelope),
        [_, metadata, envelope] => (Metadata::decode(metadata)?, envelope),
        _ => {
            return Err(ProtocolError::WrongFrameCount {
                command: "classic fanout application record",
                actual: frames.len() as u64,
                min: 2,
                max: 3,
            });
        }
    };
    Ok(Received::Application(ApplicationRecord {
        topic: frames[0].clone(),
        metadata,
        payload: TypedPayload::decode_shared(envelope)?,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use zlink_protocol::fanout::{BEACON_PAYLOAD, BEACON_TOPIC};

    fn bytes(frames: &[&[u8]]) -> Vec<Bytes> {
        frames.iter().map(|f| Bytes::copy_from_slice(f)).collect()
    }

    fn payload() -> TypedPayload {
        TypedPayload::new("test.Event", "application/octet-stream", &b"hello"[..])
    }

    #[test]
    fn topic_rules() {
        assert_eq!(wire_topic("chat").unwrap(), b"chat");
        assert_eq!(wire_topic(""), Err(TopicError::Empty));
        assert_eq!(
            wire_topic(&"x".repeat(256)),
            Err(TopicError::TooLong { len: 256 })
        );
        assert!(wire_topic(&"x".repeat(255)).is_ok());
        assert_eq!(wire_topic("\u{1}ZLF1"), Err(TopicError::Reserved));
        // Prefixes and extensions of the reserved topic are ordinary topics.
        assert!(wire_topic("\u{1}ZLF").is_ok());
        assert!(wire_topic("\u{1}ZLF1x").is_ok());
    }

    #[test]
    fn application_round_trip_with_and_without_metadata() {
        let p = payload();
        let frames = encode_application("chat", &p, None).unwrap();
        assert_eq!(frames.len(), 2);
        let Received::Application(r) = decode(&bytes(&[&frames[0], &frames[1]])).unwrap() else {
            panic!("not an application record");
        };
        assert_eq!(
            (&r.topic[..], &r.payload, r.metadata.len()),
            (&b"chat"[..], &p, 0)
        );

        let m = Metadata::new([("trace".to_owned(), "abc".to_owned())]).unwrap();
        let frames = encode_application("chat", &p, Some(&m)).unwrap();
        assert_eq!(frames.len(), 3);
        let f: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let Received::Application(r) = decode(&bytes(&f)).unwrap() else {
            panic!("not an application record");
        };
        assert_eq!((r.metadata, r.payload), (m, p.clone()));

        // Empty metadata is sent as no metadata frame.
        let empty = Metadata::default();
        assert_eq!(
            encode_application("chat", &p, Some(&empty)).unwrap().len(),
            2
        );
    }

    #[test]
    fn reserved_topic_is_refused_before_encoding() {
        assert_eq!(
            encode_application("\u{1}ZLF1", &payload(), None),
            Err(RecordEncodeError::Topic(TopicError::Reserved))
        );
    }

    #[test]
    fn beacon_and_malformed_beacons() {
        assert_eq!(
            decode(&bytes(&[&BEACON_TOPIC, &BEACON_PAYLOAD])).unwrap(),
            Received::Beacon
        );
        for frames in [
            vec![&BEACON_TOPIC[..]],
            vec![&BEACON_TOPIC[..], &[0x5A, 0x46, 0x01, 0x02][..]],
            vec![&BEACON_TOPIC[..], &BEACON_PAYLOAD[..], &BEACON_PAYLOAD[..]],
            vec![
                &BEACON_TOPIC[..],
                &BEACON_PAYLOAD[..],
                &BEACON_PAYLOAD[..],
                &BEACON_PAYLOAD[..],
                &BEACON_PAYLOAD[..],
            ],
        ] {
            assert_eq!(
                decode(&bytes(&frames)).unwrap_err(),
                ProtocolError::MalformedBeacon,
                "{frames:?}"
            );
        }
    }

    #[test]
    fn malformed_application_records_are_typed_errors() {
        let env = payload().encode().unwrap();
        assert_eq!(
            decode(&bytes(&[b"chat"])).unwrap_err().kind(),
            "WrongFrameCount"
        );
        assert_eq!(
            decode(&bytes(&[b"chat", b"a", b"b", &env]))
                .unwrap_err()
                .kind(),
            "WrongFrameCount"
        );
        assert_eq!(
            decode(&bytes(&[b"chat", &env[..env.len() - 1]]))
                .unwrap_err()
                .kind(),
            "Incomplete"
        );
        let mut trailing = env.clone();
        trailing.push(0);
        assert_eq!(
            decode(&bytes(&[b"chat", &trailing])).unwrap_err().kind(),
            "TrailingBytes"
        );
        // A bad metadata frame in the three-frame layout.
        assert!(decode(&bytes(&[b"chat", &[0xFF], &env])).is_err());
        // An application record on an extension of the reserved topic is an application record.
        assert!(matches!(
            decode(&bytes(&[b"\x01ZLF1x", &env])).unwrap(),
            Received::Application(_)
        ));
    }
}
