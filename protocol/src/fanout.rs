//! Classic fanout records and the reserved beacon (wire §5 "Classic fanout beacon",
//! "Subscriber ready 판정").
//!
//! Classic fanout is one-way PUB/SUB: subscribers never answer, so a publisher proves it is alive
//! by publishing a beacon every [`BEACON_INTERVAL_MS`], regardless of application traffic. A
//! beacon is exactly two frames:
//!
//! ```text
//! frame 0 (topic):   01 5A 4C 46 31
//! frame 1 (payload): 5A 46 01 01
//! ```
//!
//! A subscriber (one SUB socket per publisher) becomes Ready on the first valid application
//! record or beacon from that publisher and marks only that publisher not-ready
//! [`SUBSCRIBER_NOT_READY_AFTER_MS`] after its last valid receive. A record on the reserved topic
//! with any other frame count or payload is a protocol error at once
//! ([`ProtocolError::MalformedBeacon`]). An application topic equal to the reserved topic is
//! rejected before transport as an argument or configuration error ([`TopicError`]).
//!
//! Only a topic *equal* to the reserved one is reserved: ZeroMQ subscriptions match by prefix,
//! so an application topic that merely starts with the reserved bytes is legal, and
//! [`classify`] compares frame 0 for equality.

use thiserror::Error;

use crate::error::{ProtocolError, Result};

/// Topic frame of the beacon.
pub const BEACON_TOPIC: [u8; 5] = [0x01, 0x5A, 0x4C, 0x46, 0x31];

/// Payload frame of the beacon.
pub const BEACON_PAYLOAD: [u8; 4] = [0x5A, 0x46, 0x01, 0x01];

/// Beacon period in milliseconds (wire §5).
pub const BEACON_INTERVAL_MS: u64 = 5_000;

/// A subscriber marks a publisher not-ready this long after its last valid receive (wire §5).
pub const SUBSCRIBER_NOT_READY_AFTER_MS: u64 = 15_000;

/// An application topic the runtime refuses to publish or subscribe before touching transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TopicError {
    /// The topic equals the reserved beacon topic `01 5A 4C 46 31`.
    #[error("topic equals the reserved classic fanout beacon topic")]
    ReservedTopic,
}

/// Reject an application topic equal to the reserved beacon topic (wire §5).
///
/// # Errors
/// [`TopicError::ReservedTopic`].
pub fn check_application_topic(topic: &[u8]) -> Result<(), TopicError> {
    if topic == BEACON_TOPIC {
        return Err(TopicError::ReservedTopic);
    }
    Ok(())
}

/// The two frames of a beacon record.
pub fn beacon_frames() -> [&'static [u8]; 2] {
    [&BEACON_TOPIC, &BEACON_PAYLOAD]
}

/// A received classic fanout record, classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutRecord<'a> {
    /// A valid beacon: the publisher is alive.
    Beacon,
    /// An application record.
    Application {
        /// Frame 0.
        topic: &'a [u8],
        /// The frames after the topic, in order (possibly none).
        frames: &'a [&'a [u8]],
    },
}

/// Classify the frames of one received record.
///
/// # Errors
/// - [`ProtocolError::MalformedBeacon`] for a reserved-topic record that is not exactly the two
///   beacon frames;
/// - [`ProtocolError::WrongFrameCount`] for a record with no frames at all (which a transport
///   should never deliver).
pub fn classify<'a>(frames: &'a [&'a [u8]]) -> Result<FanoutRecord<'a>> {
    let Some((&topic, rest)) = frames.split_first() else {
        return Err(ProtocolError::WrongFrameCount {
            command: "classic fanout record",
            actual: 0,
            min: 1,
            max: u64::MAX,
        });
    };
    if topic != BEACON_TOPIC {
        return Ok(FanoutRecord::Application {
            topic,
            frames: rest,
        });
    }
    match rest {
        [payload] if *payload == BEACON_PAYLOAD => Ok(FanoutRecord::Beacon),
        _ => Err(ProtocolError::MalformedBeacon),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn constants_match_the_spec() {
        assert_eq!(&BEACON_TOPIC, b"\x01ZLF1");
        assert_eq!(&BEACON_PAYLOAD, b"ZF\x01\x01");
        assert_eq!(BEACON_INTERVAL_MS * 3, SUBSCRIBER_NOT_READY_AFTER_MS);
    }

    #[test]
    fn beacon_frames_classify_as_a_beacon() {
        assert_eq!(classify(&beacon_frames()).unwrap(), FanoutRecord::Beacon);
    }

    #[test]
    fn reserved_topic_with_wrong_shape_is_malformed() {
        let topic: &[u8] = &BEACON_TOPIC;
        let payload: &[u8] = &BEACON_PAYLOAD;
        for frames in [
            vec![topic],
            vec![topic, payload, payload],
            vec![topic, &[0x5A, 0x46, 0x01, 0x02]],
            vec![topic, &[0x5A, 0x46, 0x01]],
            vec![topic, &[]],
        ] {
            assert_eq!(
                classify(&frames).unwrap_err(),
                ProtocolError::MalformedBeacon,
                "{frames:?}"
            );
        }
    }

    #[test]
    fn other_topics_are_application_records() {
        let frames: [&[u8]; 3] = [b"chat", b"a", b"b"];
        assert_eq!(
            classify(&frames).unwrap(),
            FanoutRecord::Application {
                topic: b"chat",
                frames: &[b"a", b"b"],
            }
        );
        // A topic that merely starts with the reserved bytes is an application topic.
        let longer: [&[u8]; 2] = [b"\x01ZLF1x", &BEACON_PAYLOAD];
        assert!(matches!(
            classify(&longer).unwrap(),
            FanoutRecord::Application { .. }
        ));
        let only_topic: [&[u8]; 1] = [b"t"];
        assert_eq!(
            classify(&only_topic).unwrap(),
            FanoutRecord::Application {
                topic: b"t",
                frames: &[],
            }
        );
    }

    #[test]
    fn a_record_without_frames_is_a_frame_count_error() {
        assert_eq!(classify(&[]).unwrap_err().kind(), "WrongFrameCount");
    }

    #[test]
    fn application_topic_equal_to_the_reserved_topic_is_rejected() {
        assert_eq!(
            check_application_topic(&BEACON_TOPIC),
            Err(TopicError::ReservedTopic)
        );
        assert!(check_application_topic(b"\x01ZLF1x").is_ok());
        assert!(check_application_topic(b"\x01ZLF").is_ok());
        assert!(check_application_topic(b"").is_ok());
    }

    proptest! {
        #[test]
        fn arbitrary_frames_never_panic(
            frames in proptest::collection::vec(
                prop_oneof![
                    Just(BEACON_TOPIC.to_vec()),
                    Just(BEACON_PAYLOAD.to_vec()),
                    proptest::collection::vec(any::<u8>(), 0..8),
                ],
                0..4,
            ),
        ) {
            let slices: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            match classify(&slices) {
                Ok(FanoutRecord::Beacon) => prop_assert_eq!(slices, beacon_frames().to_vec()),
                Ok(FanoutRecord::Application { topic, .. }) => {
                    prop_assert!(check_application_topic(topic).is_ok());
                }
                Err(_) => {}
            }
        }
    }
}
