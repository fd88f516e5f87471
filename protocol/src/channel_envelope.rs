//! The ClientServer channel envelope (wire §4 "ClientServer 방향").
//!
//! Application records on a ClientServer connection never use service-wire commands. They use
//! the two-frame channel envelope the runtimes share for channel messaging:
//!
//! ```text
//! frame 0: F2 ‖ JSON header (UTF-8, one object)      at most MAX_HEADER_FRAME_BYTES bytes
//! frame 1: payload                                    opaque bytes (empty for kind "error")
//! ```
//!
//! The leading format marker `0xF2` tells a channel envelope apart from a service-wire record
//! (whose frame 0 starts with `5A 4D`) without parsing anything. The JSON header is an object
//! with these members (absent members are omitted on encode; `null` is refused on decode):
//!
//! | member | request | response | command | error |
//! | --- | --- | --- | --- | --- |
//! | `kind` (`"request"`, `"response"`, `"command"`, `"error"`) | required | required | required | required |
//! | `packetName` (1..=255 UTF-8 bytes) | required | — | required | — |
//! | `contentType` (0..=255 UTF-8 bytes) | optional | optional | optional | — |
//! | `correlationId` (1..=64 printable ASCII) | required | required | — | required |
//! | `deadlineUnixMs` (u64 ≥ 1) | optional | — | — | — |
//! | `errorCode` (a non-`ok` `TerminalStatus` name) | — | — | — | required |
//! | `errorDetail` (0..=4096 UTF-8 bytes) | — | — | — | optional |
//!
//! "—" means the member must be absent. Unknown members, duplicate members, a wrong member
//! type, a frame count other than two and a non-empty payload on an `error` are all
//! [`ChannelEnvelopeError`]s. The header frame's length is checked before the JSON is parsed,
//! and nothing is allocated for the payload (it stays the caller's frame).
//!
//! A request travels client → server and gets exactly one `response` or `error` with the same
//! `correlationId`; a `command` is one-way. The direction rules (a server never sends
//! `request`/`command`) belong to the runtime, which knows which side it is.
//!
//! Encoding is canonical: members in the table's order, no whitespace, so the golden fixtures in
//! `protocol/golden/channel-envelope.json` pin exact bytes.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::generated::TerminalStatus;
use crate::ids::validate_correlation_id;

/// First byte of a channel envelope header frame.
pub const FORMAT_MARKER: u8 = 0xF2;

/// Largest header frame (marker included), checked before the JSON is parsed.
pub const MAX_HEADER_FRAME_BYTES: usize = 8 * 1024;

/// Largest packet name or content type in UTF-8 bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// Largest error detail in UTF-8 bytes (the schema's `detailBytes`).
pub const MAX_DETAIL_BYTES: usize = 4096;

/// Number of frames of a channel envelope record.
pub const FRAME_COUNT: usize = 2;

/// A malformed channel envelope. [`ChannelEnvelopeError::kind`] is the stable label used by
/// metrics and the golden fixtures.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChannelEnvelopeError {
    /// Not exactly two frames.
    #[error("channel envelope has {0} frames, expected 2")]
    WrongFrameCount(usize),
    /// Frame 0 does not start with the `0xF2` marker (or is empty).
    #[error("channel envelope header does not start with 0xF2")]
    BadMarker,
    /// Frame 0 is longer than [`MAX_HEADER_FRAME_BYTES`].
    #[error("channel envelope header of {0} bytes exceeds {MAX_HEADER_FRAME_BYTES}")]
    HeaderTooLarge(usize),
    /// The header is not one JSON object of the v1 members (syntax, types, unknown or
    /// duplicate members, `null`).
    #[error("channel envelope header is not valid JSON of the v1 shape: {0}")]
    InvalidJson(String),
    /// A member the kind requires is absent.
    #[error("channel envelope {kind} lacks {field}")]
    MissingField {
        /// The envelope kind.
        kind: &'static str,
        /// The member.
        field: &'static str,
    },
    /// A member the kind forbids is present.
    #[error("channel envelope {kind} must not carry {field}")]
    FieldNotAllowed {
        /// The envelope kind.
        kind: &'static str,
        /// The member.
        field: &'static str,
    },
    /// A string member is outside its byte bounds, or `deadlineUnixMs` is 0.
    #[error("channel envelope {0} is out of bounds")]
    OutOfBounds(&'static str),
    /// `correlationId` is not 1..=64 printable ASCII bytes.
    #[error("channel envelope correlationId is not 1..=64 printable ASCII bytes")]
    InvalidCorrelationId,
    /// `errorCode` names no `TerminalStatus`, or names `ok`.
    #[error("channel envelope errorCode is not a non-ok terminal status")]
    UnknownErrorCode,
    /// An `error` envelope carries a non-empty payload frame.
    #[error("channel envelope error carries a payload")]
    PayloadNotAllowed,
}

impl ChannelEnvelopeError {
    /// Stable label (the variant name).
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::WrongFrameCount(_) => "WrongFrameCount",
            Self::BadMarker => "BadMarker",
            Self::HeaderTooLarge(_) => "HeaderTooLarge",
            Self::InvalidJson(_) => "InvalidJson",
            Self::MissingField { .. } => "MissingField",
            Self::FieldNotAllowed { .. } => "FieldNotAllowed",
            Self::OutOfBounds(_) => "OutOfBounds",
            Self::InvalidCorrelationId => "InvalidCorrelationId",
            Self::UnknownErrorCode => "UnknownErrorCode",
            Self::PayloadNotAllowed => "PayloadNotAllowed",
        }
    }
}

/// Result alias of this module.
pub type Result<T, E = ChannelEnvelopeError> = std::result::Result<T, E>;

/// The four envelope kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EnvelopeKind {
    /// Client → server, answered by exactly one `response` or `error`.
    Request,
    /// Server → client, the successful terminal result of a request.
    Response,
    /// Client → server, one-way.
    Command,
    /// Server → client, the failed terminal result of a request.
    Error,
}

impl EnvelopeKind {
    /// The JSON name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Response => "response",
            Self::Command => "command",
            Self::Error => "error",
        }
    }
}

/// A decoded, validated channel envelope header: one variant per kind, carrying exactly the
/// members that kind allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelHeader {
    /// A request.
    Request {
        /// Handler selector.
        packet_name: String,
        /// Payload content type.
        content_type: String,
        /// Reply correlation.
        correlation_id: String,
        /// Absolute end-to-end deadline, ms since the Unix epoch.
        deadline_unix_ms: Option<u64>,
    },
    /// A successful reply.
    Response {
        /// Payload content type.
        content_type: String,
        /// The request's correlation.
        correlation_id: String,
    },
    /// A one-way message.
    Command {
        /// Handler selector.
        packet_name: String,
        /// Payload content type.
        content_type: String,
    },
    /// A failed reply.
    Error {
        /// The request's correlation.
        correlation_id: String,
        /// Terminal status (never `ok`).
        code: TerminalStatus,
        /// Diagnostic text.
        detail: String,
    },
}

/// The JSON shape on the wire; validated into [`ChannelHeader`].
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WireHeader {
    kind: Option<EnvelopeKind>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "no_null")]
    #[serde(default)]
    packet_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "no_null")]
    #[serde(default)]
    content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "no_null")]
    #[serde(default)]
    correlation_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "no_null")]
    #[serde(default)]
    deadline_unix_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "no_null")]
    #[serde(default)]
    error_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "no_null")]
    #[serde(default)]
    error_detail: Option<String>,
}

/// A present member must not be `null` (absence is the only way to say "none").
fn no_null<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

fn check_name(field: &'static str, s: &str, min: usize) -> Result<()> {
    if s.len() < min || s.len() > MAX_NAME_BYTES {
        return Err(ChannelEnvelopeError::OutOfBounds(field));
    }
    Ok(())
}

fn check_correlation(c: &str) -> Result<()> {
    validate_correlation_id(c).map_err(|_| ChannelEnvelopeError::InvalidCorrelationId)
}

fn status_from_name(name: &str) -> Result<TerminalStatus> {
    TerminalStatus::ALL
        .into_iter()
        .find(|s| *s != TerminalStatus::Ok && s.name() == name)
        .ok_or(ChannelEnvelopeError::UnknownErrorCode)
}

impl ChannelHeader {
    /// The kind.
    pub const fn kind(&self) -> EnvelopeKind {
        match self {
            Self::Request { .. } => EnvelopeKind::Request,
            Self::Response { .. } => EnvelopeKind::Response,
            Self::Command { .. } => EnvelopeKind::Command,
            Self::Error { .. } => EnvelopeKind::Error,
        }
    }

    /// The correlation ID of a request, response or error.
    pub fn correlation_id(&self) -> Option<&str> {
        match self {
            Self::Request { correlation_id, .. }
            | Self::Response { correlation_id, .. }
            | Self::Error { correlation_id, .. } => Some(correlation_id),
            Self::Command { .. } => None,
        }
    }

    /// Check the bounds an encoder must respect (the same checks a decoder applies).
    ///
    /// # Errors
    /// `OutOfBounds`, `InvalidCorrelationId` or `UnknownErrorCode`.
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Request {
                packet_name,
                content_type,
                correlation_id,
                deadline_unix_ms,
            } => {
                check_name("packetName", packet_name, 1)?;
                check_name("contentType", content_type, 0)?;
                check_correlation(correlation_id)?;
                if *deadline_unix_ms == Some(0) {
                    return Err(ChannelEnvelopeError::OutOfBounds("deadlineUnixMs"));
                }
            }
            Self::Response {
                content_type,
                correlation_id,
            } => {
                check_name("contentType", content_type, 0)?;
                check_correlation(correlation_id)?;
            }
            Self::Command {
                packet_name,
                content_type,
            } => {
                check_name("packetName", packet_name, 1)?;
                check_name("contentType", content_type, 0)?;
            }
            Self::Error {
                correlation_id,
                code,
                detail,
            } => {
                check_correlation(correlation_id)?;
                if *code == TerminalStatus::Ok {
                    return Err(ChannelEnvelopeError::UnknownErrorCode);
                }
                if detail.len() > MAX_DETAIL_BYTES {
                    return Err(ChannelEnvelopeError::OutOfBounds("errorDetail"));
                }
            }
        }
        Ok(())
    }

    /// Encode frame 0 (`F2` ‖ canonical JSON). Its length is known before any payload frame
    /// is built, so a sender can check the complete-message limit first.
    ///
    /// # Errors
    /// As [`ChannelHeader::validate`], plus `HeaderTooLarge`.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut w = WireHeader {
            kind: Some(self.kind()),
            ..WireHeader::default()
        };
        match self {
            Self::Request {
                packet_name,
                content_type,
                correlation_id,
                deadline_unix_ms,
            } => {
                w.packet_name = Some(packet_name.clone());
                w.content_type = non_empty(content_type);
                w.correlation_id = Some(correlation_id.clone());
                w.deadline_unix_ms = *deadline_unix_ms;
            }
            Self::Response {
                content_type,
                correlation_id,
            } => {
                w.content_type = non_empty(content_type);
                w.correlation_id = Some(correlation_id.clone());
            }
            Self::Command {
                packet_name,
                content_type,
            } => {
                w.packet_name = Some(packet_name.clone());
                w.content_type = non_empty(content_type);
            }
            Self::Error {
                correlation_id,
                code,
                detail,
            } => {
                w.correlation_id = Some(correlation_id.clone());
                w.error_code = Some(code.name().to_owned());
                w.error_detail = non_empty(detail);
            }
        }
        let mut out = Vec::with_capacity(128);
        out.push(FORMAT_MARKER);
        serde_json::to_writer(&mut out, &w)
            .map_err(|e| ChannelEnvelopeError::InvalidJson(e.to_string()))?;
        if out.len() > MAX_HEADER_FRAME_BYTES {
            return Err(ChannelEnvelopeError::HeaderTooLarge(out.len()));
        }
        Ok(out)
    }

    /// Decode and validate frame 0.
    ///
    /// # Errors
    /// `BadMarker`, `HeaderTooLarge` (before parsing), `InvalidJson`, `MissingField`,
    /// `FieldNotAllowed`, `OutOfBounds`, `InvalidCorrelationId`, `UnknownErrorCode`.
    pub fn decode(frame0: &[u8]) -> Result<Self> {
        let Some((&FORMAT_MARKER, json)) = frame0.split_first() else {
            return Err(ChannelEnvelopeError::BadMarker);
        };
        if frame0.len() > MAX_HEADER_FRAME_BYTES {
            return Err(ChannelEnvelopeError::HeaderTooLarge(frame0.len()));
        }
        let w: WireHeader = serde_json::from_slice(json)
            .map_err(|e| ChannelEnvelopeError::InvalidJson(e.to_string()))?;
        let Some(kind) = w.kind else {
            return Err(ChannelEnvelopeError::MissingField {
                kind: "envelope",
                field: "kind",
            });
        };
        let k = kind.name();
        let missing = |field| ChannelEnvelopeError::MissingField { kind: k, field };
        let forbid = |present: bool, field| {
            if present {
                Err(ChannelEnvelopeError::FieldNotAllowed { kind: k, field })
            } else {
                Ok(())
            }
        };
        let header = match kind {
            EnvelopeKind::Request => {
                forbid(w.error_code.is_some(), "errorCode")?;
                forbid(w.error_detail.is_some(), "errorDetail")?;
                Self::Request {
                    packet_name: w.packet_name.ok_or_else(|| missing("packetName"))?,
                    content_type: w.content_type.unwrap_or_default(),
                    correlation_id: w.correlation_id.ok_or_else(|| missing("correlationId"))?,
                    deadline_unix_ms: w.deadline_unix_ms,
                }
            }
            EnvelopeKind::Response => {
                forbid(w.packet_name.is_some(), "packetName")?;
                forbid(w.deadline_unix_ms.is_some(), "deadlineUnixMs")?;
                forbid(w.error_code.is_some(), "errorCode")?;
                forbid(w.error_detail.is_some(), "errorDetail")?;
                Self::Response {
                    content_type: w.content_type.unwrap_or_default(),
                    correlation_id: w.correlation_id.ok_or_else(|| missing("correlationId"))?,
                }
            }
            EnvelopeKind::Command => {
                forbid(w.correlation_id.is_some(), "correlationId")?;
                forbid(w.deadline_unix_ms.is_some(), "deadlineUnixMs")?;
                forbid(w.error_code.is_some(), "errorCode")?;
                forbid(w.error_detail.is_some(), "errorDetail")?;
                Self::Command {
                    packet_name: w.packet_name.ok_or_else(|| missing("packetName"))?,
                    content_type: w.content_type.unwrap_or_default(),
                }
            }
            EnvelopeKind::Error => {
                forbid(w.packet_name.is_some(), "packetName")?;
                forbid(w.content_type.is_some(), "contentType")?;
                forbid(w.deadline_unix_ms.is_some(), "deadlineUnixMs")?;
                let code = w.error_code.ok_or_else(|| missing("errorCode"))?;
                Self::Error {
                    correlation_id: w.correlation_id.ok_or_else(|| missing("correlationId"))?,
                    code: status_from_name(&code)?,
                    detail: w.error_detail.unwrap_or_default(),
                }
            }
        };
        header.validate()?;
        Ok(header)
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// Whether frame 0 carries the channel envelope marker (cheap classification, no parsing).
pub fn is_channel_envelope(frame0: &[u8]) -> bool {
    frame0.first() == Some(&FORMAT_MARKER)
}

/// Decode a complete two-frame record: the header, validated against the payload frame.
/// The payload itself is not copied; it is `frames[1]`.
///
/// # Errors
/// `WrongFrameCount`, any [`ChannelHeader::decode`] error, `PayloadNotAllowed`.
pub fn decode_record<F: AsRef<[u8]>>(frames: &[F]) -> Result<ChannelHeader> {
    let [frame0, payload] = frames else {
        return Err(ChannelEnvelopeError::WrongFrameCount(frames.len()));
    };
    let header = ChannelHeader::decode(frame0.as_ref())?;
    if header.kind() == EnvelopeKind::Error && !payload.as_ref().is_empty() {
        return Err(ChannelEnvelopeError::PayloadNotAllowed);
    }
    Ok(header)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn to_hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn header_from_json(v: &serde_json::Value) -> ChannelHeader {
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
        match v["kind"].as_str().unwrap() {
            "request" => ChannelHeader::Request {
                packet_name: s("packetName"),
                content_type: s("contentType"),
                correlation_id: s("correlationId"),
                deadline_unix_ms: v["deadlineUnixMs"].as_u64(),
            },
            "response" => ChannelHeader::Response {
                content_type: s("contentType"),
                correlation_id: s("correlationId"),
            },
            "command" => ChannelHeader::Command {
                packet_name: s("packetName"),
                content_type: s("contentType"),
            },
            "error" => ChannelHeader::Error {
                correlation_id: s("correlationId"),
                code: status_from_name(&s("errorCode")).unwrap(),
                detail: s("errorDetail"),
            },
            other => panic!("unknown kind {other}"),
        }
    }

    /// Every fixture of `golden/channel-envelope.json` (wire §4): valid records decode to the
    /// listed header and re-encode to the same bytes; invalid ones fail with the listed error.
    #[test]
    fn golden_fixtures_decode_and_reencode_byte_exact() {
        let text = include_str!("../golden/channel-envelope.json");
        let doc: serde_json::Value = serde_json::from_str(text).unwrap();
        let valid = doc["valid"].as_array().unwrap();
        let invalid = doc["invalid"].as_array().unwrap();
        assert!(valid.len() >= 4 && invalid.len() >= 10);
        for case in valid {
            let name = case["name"].as_str().unwrap();
            let frames: Vec<Vec<u8>> = case["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| hex(f.as_str().unwrap()))
                .collect();
            let got = decode_record(&frames).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, header_from_json(&case["decoded"]), "{name}");
            assert_eq!(to_hex(&got.encode().unwrap()), to_hex(&frames[0]), "{name}");
        }
        let mut kinds = std::collections::BTreeSet::new();
        for case in invalid {
            let name = case["name"].as_str().unwrap();
            let frames: Vec<Vec<u8>> = case["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| hex(f.as_str().unwrap()))
                .collect();
            let err = decode_record(&frames).expect_err(name);
            assert_eq!(err.kind(), case["error"].as_str().unwrap(), "{name}: {err}");
            kinds.insert(err.kind());
        }
        // Every error variant has at least one fixture.
        for k in [
            "WrongFrameCount",
            "BadMarker",
            "HeaderTooLarge",
            "InvalidJson",
            "MissingField",
            "FieldNotAllowed",
            "OutOfBounds",
            "InvalidCorrelationId",
            "UnknownErrorCode",
            "PayloadNotAllowed",
        ] {
            assert!(kinds.contains(k), "no fixture for {k}");
        }
    }

    #[test]
    fn encoder_refuses_what_the_decoder_refuses() {
        let long = "x".repeat(256);
        let bad = [
            ChannelHeader::Command {
                packet_name: String::new(),
                content_type: String::new(),
            },
            ChannelHeader::Command {
                packet_name: long.clone(),
                content_type: String::new(),
            },
            ChannelHeader::Response {
                content_type: long,
                correlation_id: "c".into(),
            },
            ChannelHeader::Request {
                packet_name: "p".into(),
                content_type: String::new(),
                correlation_id: "has space".into(),
                deadline_unix_ms: None,
            },
            ChannelHeader::Request {
                packet_name: "p".into(),
                content_type: String::new(),
                correlation_id: "c".into(),
                deadline_unix_ms: Some(0),
            },
            ChannelHeader::Error {
                correlation_id: "c".into(),
                code: TerminalStatus::Ok,
                detail: String::new(),
            },
            ChannelHeader::Error {
                correlation_id: "c".into(),
                code: TerminalStatus::HandlerFailed,
                detail: "d".repeat(MAX_DETAIL_BYTES + 1),
            },
        ];
        for h in bad {
            assert!(h.encode().is_err(), "{h:?}");
        }
    }

    proptest::proptest! {
        /// Arbitrary header bytes behind the marker never panic the decoder, and whatever
        /// decodes re-encodes canonically to something that decodes to the same header.
        #[test]
        fn arbitrary_headers_decode_or_fail_typed(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut frame = vec![FORMAT_MARKER];
            frame.extend_from_slice(&body);
            if let Ok(h) = ChannelHeader::decode(&frame) {
                let again = h.encode().unwrap();
                proptest::prop_assert_eq!(ChannelHeader::decode(&again).unwrap(), h);
            }
        }
    }

    #[test]
    fn a_service_wire_record_is_not_a_channel_envelope() {
        assert!(!is_channel_envelope(&[0x5a, 0x4d, 1, 16, 0]));
        assert!(is_channel_envelope(&[FORMAT_MARKER, b'{']));
        assert_eq!(
            ChannelHeader::decode(&[0x5a, 0x4d, 1, 16, 0]).unwrap_err(),
            ChannelEnvelopeError::BadMarker
        );
    }
}
