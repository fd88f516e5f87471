//! Typed JSON messages (wire §2 typed payload envelope, §6 `framework-json-v1`; glossary §7
//! "Packet name").
//!
//! An application message type names its packet with [`JsonMessage`] and travels with the
//! default codec: serde JSON in a [`TypedPayload`] whose content type is
//! [`JSON_CONTENT_TYPE`]. This lives in the bytes-only protocol crate so a client that does not
//! link the mesh (for example a Stream Connector) shares the same message types and helpers as
//! the runtime; the runtime maps [`JsonPayloadError`] to its own call error.

use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::envelope::TypedPayload;

/// Content type of the `framework-json-v1` profile.
pub const JSON_CONTENT_TYPE: &str = "application/json; profile=framework-json-v1";
/// Content type of raw byte payloads.
pub const RAW_CONTENT_TYPE: &str = "application/octet-stream";

/// A message type with a packet name, carried with the default JSON codec.
pub trait JsonMessage: Serialize + DeserializeOwned + Send + 'static {
    /// The packet name handlers are looked up by.
    const PACKET_NAME: &'static str;
}

/// Why a value did not become, or come out of, a `framework-json-v1` payload.
#[derive(Debug, Error)]
pub enum JsonPayloadError {
    /// serde could not serialize the value.
    #[error("{packet} does not serialize as framework-json-v1: {source}")]
    Serialize {
        /// The packet name of the message type.
        packet: &'static str,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
    /// The payload's content type is not [`JSON_CONTENT_TYPE`].
    #[error("content type {content_type:?} is not {JSON_CONTENT_TYPE}")]
    ContentType {
        /// The content type the payload carried.
        content_type: String,
    },
    /// The bytes are not valid JSON for the target type.
    #[error("payload of {packet:?} is not valid framework-json-v1: {source}")]
    Deserialize {
        /// The packet name the payload carried.
        packet: String,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
}

/// Encode `msg` as a typed payload with its packet name and the JSON content type.
///
/// # Errors
/// [`JsonPayloadError::Serialize`] when serde cannot serialize the value.
pub fn encode_json<M: JsonMessage>(msg: &M) -> Result<TypedPayload, JsonPayloadError> {
    let bytes = serde_json::to_vec(msg).map_err(|source| JsonPayloadError::Serialize {
        packet: M::PACKET_NAME,
        source,
    })?;
    Ok(TypedPayload::new(M::PACKET_NAME, JSON_CONTENT_TYPE, bytes))
}

/// Decode a typed payload as JSON value `M` (any packet name).
///
/// # Errors
/// [`JsonPayloadError::ContentType`] when the content type is not JSON,
/// [`JsonPayloadError::Deserialize`] when the bytes do not decode as `M`.
pub fn decode_json<M: DeserializeOwned>(p: &TypedPayload) -> Result<M, JsonPayloadError> {
    if p.content_type != JSON_CONTENT_TYPE {
        return Err(JsonPayloadError::ContentType {
            content_type: p.content_type.to_string(),
        });
    }
    serde_json::from_slice(&p.payload).map_err(|source| JsonPayloadError::Deserialize {
        packet: p.packet_name.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Ping {
        n: u32,
    }
    impl JsonMessage for Ping {
        const PACKET_NAME: &'static str = "ping";
    }

    #[test]
    fn a_message_round_trips_with_its_packet_name_and_json_content_type() {
        let p = encode_json(&Ping { n: 7 }).expect("encode");
        assert_eq!(&*p.packet_name, "ping");
        assert_eq!(&*p.content_type, JSON_CONTENT_TYPE);
        assert_eq!(&p.payload[..], br#"{"n":7}"#);
        assert_eq!(decode_json::<Ping>(&p).expect("decode"), Ping { n: 7 });
    }

    #[test]
    fn a_raw_payload_is_refused_by_content_type_and_bad_bytes_by_serde() {
        let raw = TypedPayload::new("ping", RAW_CONTENT_TYPE, &b"{}"[..]);
        assert!(matches!(
            decode_json::<Ping>(&raw),
            Err(JsonPayloadError::ContentType { .. })
        ));
        let bad = TypedPayload::new("ping", JSON_CONTENT_TYPE, &b"{\"n\":-1}"[..]);
        let err = decode_json::<Ping>(&bad).expect_err("negative u32");
        assert!(
            matches!(err, JsonPayloadError::Deserialize { ref packet, .. } if packet == "ping")
        );
    }
}
