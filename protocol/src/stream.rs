//! The client STREAM packet (glossary §11 "Stream packet") and the StreamNode inbound size limit
//! (glossary §6 "MaxMessageSize").
//!
//! Game clients talk to a Gateway node over plain TCP. Each message is one STREAM packet: a
//! 6-byte prefix, a header and a payload.
//!
//! # Byte layout
//!
//! All multi-byte integers are big-endian (network byte order).
//!
//! ```text
//! prefix (6 bytes)          header (header_len bytes)                              payload
//! +------------+----------+ +------+------+-------+-------+-----+------+-----+-----+ +---------+
//! | header_len | payload_ | | 0xF2 | kind | codec | flags | seq | name | meta| corr| | payload |
//! | u16        | size u32 | |      |  u8  |  u8   |  u8   | ... | ...  | ... | ... | |         |
//! +------------+----------+ +------+------+-------+-------+-----+------+-----+-----+ +---------+
//! ```
//!
//! | header field | present | encoding |
//! | --- | --- | --- |
//! | format marker | always | `0xF2` |
//! | kind | always | `u8`: [`StreamKind`] `Send = 1`, `Request = 2`, `Response = 3`, `Error = 4` |
//! | codec | always | `u8`: [`StreamCodec`] `Raw = 0`, `FrameworkJson = 1` |
//! | flags | always | `u8`: bits of [`flags`]; bits above `0x0F` are undefined |
//! | request sequence | flag `0x01` | `u64`, never `0` |
//! | packet name | always | `u8 len` + UTF-8 (0..=255); length `0` for Response and Error |
//! | metadata | flag `0x02` | `u16 meta_len` + a [metadata frame](crate::metadata) |
//! | correlation ID | flag `0x04` | `u8 len` + printable ASCII (1..=64 bytes) |
//! | flow | flag `0x08` | 36-byte ASCII `flow_id` (e.g. a textual UUID) + `u8 flow_origin` |
//!
//! The spec fixes the field order and widths; zlink decides the enum values above, that
//! `request_seq` is present exactly for Request, Response and Error (it is what pairs a reply
//! with its request), and that the flow ID is printable ASCII. `flow_origin` is opaque.
//!
//! # Decode checks
//!
//! 1. From the prefix alone: `header_len + payload_size` (the prefix excluded) above the inbound
//!    [`MaxMessageSize`] → [`ProtocolError::MessageTooLarge`], before any header or payload byte
//!    is buffered.
//! 2. As soon as the header bytes are present (the payload may still be arriving), in field
//!    order: marker → `BadFormatMarker`; kind, codec → `UnknownEnumValue`; flags →
//!    `UndefinedFlags`; `request_seq` presence vs kind → `ConstraintViolated`; `request_seq` `0`
//!    → `ZeroValue`; a name on Response/Error → `ConstraintViolated`; UTF-8 → `InvalidUtf8`;
//!    metadata → the [metadata frame](crate::metadata) errors; correlation length →
//!    `OutOfBounds`, bytes → `InvalidAscii`; flow ID bytes → `InvalidAscii`. A field that needs
//!    more bytes than `header_len` leaves is `Incomplete`; header bytes left over after the last
//!    field are `TrailingBytes` (context `"stream header"`).
//!
//! Decoding distinguishes *incomplete* from *invalid*, as mini-redis's `check`/`parse` do:
//! [`decode_packet`] returns [`Decoded::Incomplete`] when the buffer simply needs more bytes,
//! and `Err` only for bytes that can never become valid. [`StreamDecoder`] wraps it for a TCP
//! read loop.
//!
//! # Size limit
//!
//! [`MaxMessageSize`] applies to inbound packets only (client → server); encoding has no
//! Framework limit beyond the wire's own (`u16` header, `u32` payload). A packet over the limit is
//! never handed to a session handler, even in part; the server records `EMSGSIZE` and closes the
//! connection (the raw client only observes the close).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::codec::{LenType, Reader, Writer, check_ascii, check_bounds};
use crate::error::{ProtocolError, Result};
use crate::metadata::Metadata;

/// The header's first byte.
pub const FORMAT_MARKER: u8 = 0xF2;

/// Bytes of the prefix (`u16 header_len`, `u32 payload_size`).
pub const PREFIX_LEN: usize = 6;

/// Bytes of the fixed header part (marker, kind, codec, flags).
pub const FIXED_HEADER_LEN: usize = 4;

/// Bytes of a flow ID.
pub const FLOW_ID_LEN: usize = 36;

/// Largest packet name in UTF-8 bytes.
pub const MAX_PACKET_NAME_BYTES: usize = 255;

/// Largest correlation ID in bytes.
pub const MAX_CORRELATION_ID_BYTES: usize = 64;

/// The default StreamNode `MaxMessageSize`: 64 KiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = 65_536;

/// Header flag bits.
pub mod flags {
    /// `request_seq u64` follows the fixed header.
    pub const REQUEST_SEQ: u8 = 0x01;
    /// `u16 meta_len` + metadata follows the packet name.
    pub const METADATA: u8 = 0x02;
    /// `u8 len` + ASCII correlation ID follows the metadata.
    pub const CORRELATION_ID: u8 = 0x04;
    /// 36-byte flow ID + 1-byte flow origin follow the correlation ID.
    pub const FLOW: u8 = 0x08;
    /// Every defined bit.
    pub const DEFINED: u8 = REQUEST_SEQ | METADATA | CORRELATION_ID | FLOW;
}

const COMMAND: &str = "STREAM packet";
const SEQ_CONSTRAINT: &str =
    "STREAM: request_seq is present exactly for Request, Response and Error";
const NAME_CONSTRAINT: &str = "STREAM: Response and Error packets carry an empty packet name";

/// Message kind of a STREAM packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamKind {
    /// One-way message.
    Send = 1,
    /// Request expecting a Response or Error with the same `request_seq`.
    Request = 2,
    /// Successful reply.
    Response = 3,
    /// Error reply.
    Error = 4,
}

impl StreamKind {
    /// The wire value.
    pub const fn to_u8(self) -> u8 {
        self as u8
    }

    /// Parse the wire value.
    ///
    /// # Errors
    /// [`ProtocolError::UnknownEnumValue`] for values other than 1..=4.
    pub const fn from_u8(value: u8) -> Result<Self> {
        match value {
            1 => Ok(Self::Send),
            2 => Ok(Self::Request),
            3 => Ok(Self::Response),
            4 => Ok(Self::Error),
            _ => Err(ProtocolError::UnknownEnumValue {
                field: "StreamPacket.kind",
                value: value as u64,
            }),
        }
    }

    /// Whether packets of this kind carry `request_seq` (Request, Response, Error).
    pub const fn carries_request_seq(self) -> bool {
        matches!(self, Self::Request | Self::Response | Self::Error)
    }

    /// Whether this is a reply kind (Response, Error), whose packet name is empty.
    pub const fn is_reply(self) -> bool {
        matches!(self, Self::Response | Self::Error)
    }
}

/// Payload codec of a STREAM packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamCodec {
    /// Opaque application bytes.
    Raw = 0,
    /// The `framework-json-v1` profile (wire §6).
    FrameworkJson = 1,
}

impl StreamCodec {
    /// The wire value.
    pub const fn to_u8(self) -> u8 {
        self as u8
    }

    /// Parse the wire value.
    ///
    /// # Errors
    /// [`ProtocolError::UnknownEnumValue`] for values other than 0 and 1.
    pub const fn from_u8(value: u8) -> Result<Self> {
        match value {
            0 => Ok(Self::Raw),
            1 => Ok(Self::FrameworkJson),
            _ => Err(ProtocolError::UnknownEnumValue {
                field: "StreamPacket.codec",
                value: value as u64,
            }),
        }
    }
}

/// The optional flow block of a STREAM header.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StreamFlow {
    /// Exactly 36 bytes of printable ASCII, e.g. a textual UUID.
    pub flow_id: String,
    /// Opaque origin byte.
    pub flow_origin: u8,
}

/// One STREAM packet, owned.
///
/// The header flags are derived from which optional fields are present, so they cannot
/// disagree with the fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StreamPacket {
    /// Message kind.
    pub kind: StreamKind,
    /// Payload codec.
    pub codec: StreamCodec,
    /// Request sequence (flag `0x01`): present exactly for Request, Response and Error; never 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_seq: Option<u64>,
    /// Packet name, 0..=255 UTF-8 bytes; empty for Response and Error.
    #[serde(default)]
    pub packet_name: String,
    /// Metadata snapshot (flag `0x02`). `Some(empty)` and `None` encode differently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// Correlation ID (flag `0x04`): 1..=64 bytes of printable ASCII.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Flow block (flag `0x08`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<StreamFlow>,
    /// Payload bytes.
    #[serde(with = "crate::codec::hex")]
    pub payload: Vec<u8>,
}

impl StreamPacket {
    fn bare(
        kind: StreamKind,
        codec: StreamCodec,
        request_seq: Option<u64>,
        packet_name: String,
        payload: Vec<u8>,
    ) -> Self {
        Self {
            kind,
            codec,
            request_seq,
            packet_name,
            metadata: None,
            correlation_id: None,
            flow: None,
            payload,
        }
    }

    /// A one-way Send packet.
    pub fn send(codec: StreamCodec, packet_name: impl Into<String>, payload: Vec<u8>) -> Self {
        Self::bare(StreamKind::Send, codec, None, packet_name.into(), payload)
    }

    /// A Request packet.
    pub fn request(
        codec: StreamCodec,
        request_seq: u64,
        packet_name: impl Into<String>,
        payload: Vec<u8>,
    ) -> Self {
        Self::bare(
            StreamKind::Request,
            codec,
            Some(request_seq),
            packet_name.into(),
            payload,
        )
    }

    /// A Response packet answering `request_seq`.
    pub fn response(codec: StreamCodec, request_seq: u64, payload: Vec<u8>) -> Self {
        Self::bare(
            StreamKind::Response,
            codec,
            Some(request_seq),
            String::new(),
            payload,
        )
    }

    /// An Error packet answering `request_seq`.
    pub fn error(codec: StreamCodec, request_seq: u64, payload: Vec<u8>) -> Self {
        Self::bare(
            StreamKind::Error,
            codec,
            Some(request_seq),
            String::new(),
            payload,
        )
    }

    /// This packet with a metadata block.
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// This packet with a correlation ID.
    pub fn with_correlation_id(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    /// This packet with a flow block.
    pub fn with_flow(mut self, flow: StreamFlow) -> Self {
        self.flow = Some(flow);
        self
    }

    /// The header flag byte implied by the optional fields.
    pub fn flags(&self) -> u8 {
        let mut f = 0;
        if self.request_seq.is_some() {
            f |= flags::REQUEST_SEQ;
        }
        if self.metadata.is_some() {
            f |= flags::METADATA;
        }
        if self.correlation_id.is_some() {
            f |= flags::CORRELATION_ID;
        }
        if self.flow.is_some() {
            f |= flags::FLOW;
        }
        f
    }

    /// Size of the header in bytes (what the prefix's `header_len` will say).
    pub fn header_len(&self) -> usize {
        let mut n = FIXED_HEADER_LEN + 1 + self.packet_name.len();
        if self.request_seq.is_some() {
            n += 8;
        }
        if let Some(m) = &self.metadata {
            n += 2 + m.encoded_len();
        }
        if let Some(c) = &self.correlation_id {
            n += 1 + c.len();
        }
        if self.flow.is_some() {
            n += FLOW_ID_LEN + 1;
        }
        n
    }

    /// Size of the whole encoded packet, prefix included.
    pub fn encoded_len(&self) -> usize {
        PREFIX_LEN
            .saturating_add(self.header_len())
            .saturating_add(self.payload.len())
    }

    /// Check every rule the decoder enforces, in the decoder's order, without encoding.
    ///
    /// # Errors
    /// `ConstraintViolated`, `ZeroValue`, `OutOfBounds` or `InvalidAscii` (see the module
    /// documentation).
    pub fn validate(&self) -> Result<()> {
        if self.request_seq.is_some() != self.kind.carries_request_seq() {
            return Err(ProtocolError::ConstraintViolated {
                constraint: SEQ_CONSTRAINT,
            });
        }
        if self.request_seq == Some(0) {
            return Err(ProtocolError::ZeroValue {
                field: "StreamPacket.requestSeq",
            });
        }
        check_bounds(
            "StreamPacket.packetName",
            self.packet_name.len() as u64,
            0,
            MAX_PACKET_NAME_BYTES as u64,
        )?;
        if self.kind.is_reply() && !self.packet_name.is_empty() {
            return Err(ProtocolError::ConstraintViolated {
                constraint: NAME_CONSTRAINT,
            });
        }
        if let Some(c) = &self.correlation_id {
            check_bounds(
                "StreamPacket.correlationId",
                c.len() as u64,
                1,
                MAX_CORRELATION_ID_BYTES as u64,
            )?;
            check_ascii("StreamPacket.correlationId", c.as_bytes())?;
        }
        if let Some(flow) = &self.flow {
            check_bounds(
                "StreamPacket.flowId",
                flow.flow_id.len() as u64,
                FLOW_ID_LEN as u64,
                FLOW_ID_LEN as u64,
            )?;
            check_ascii("StreamPacket.flowId", flow.flow_id.as_bytes())?;
        }
        check_bounds(
            "StreamPacket.payload",
            self.payload.len() as u64,
            0,
            u64::from(u32::MAX),
        )
    }

    /// Encode the packet. Outbound packets have no `MaxMessageSize` limit.
    ///
    /// # Errors
    /// See [`StreamPacket::validate`].
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut w = Writer::with_capacity(self.encoded_len());
        self.encode_into(&mut w)?;
        Ok(w.into_vec())
    }

    /// Append the encoded packet to `w`. Validates first, so on error nothing is written.
    ///
    /// # Errors
    /// See [`StreamPacket::validate`].
    pub fn encode_into(&self, w: &mut Writer) -> Result<()> {
        self.validate()?;
        // At most 4 + 8 + 256 + 2 + 1,024 + 65 + 37 = 1,396 bytes, so it fits in u16.
        let header_len = self.header_len();
        w.u16(header_len as u16);
        // Checked by `validate`.
        w.u32(self.payload.len() as u32);
        w.u8(FORMAT_MARKER);
        w.u8(self.kind.to_u8());
        w.u8(self.codec.to_u8());
        w.u8(self.flags());
        if let Some(seq) = self.request_seq {
            w.u64(seq);
        }
        w.length_delimited(
            LenType::U8,
            0,
            MAX_PACKET_NAME_BYTES as u64,
            self.packet_name.as_bytes(),
            "StreamPacket.packetName",
        )?;
        if let Some(m) = &self.metadata {
            // A Metadata is at most 1,024 bytes.
            w.u16(m.encoded_len() as u16);
            m.encode_into(w);
        }
        if let Some(c) = &self.correlation_id {
            w.ascii(
                LenType::U8,
                1,
                MAX_CORRELATION_ID_BYTES as u64,
                c,
                "StreamPacket.correlationId",
            )?;
        }
        if let Some(flow) = &self.flow {
            w.put_slice(flow.flow_id.as_bytes());
            w.u8(flow.flow_origin);
        }
        w.put_slice(&self.payload);
        Ok(())
    }

    /// Decode a buffer that holds exactly one complete packet (fixtures, fuzzing, tests).
    ///
    /// # Errors
    /// The errors of [`decode_packet`]; [`ProtocolError::Incomplete`] when the buffer ends
    /// before the packet does; [`ProtocolError::TrailingBytes`] when bytes follow it.
    pub fn decode(bytes: &[u8], limit: MaxMessageSize) -> Result<Self> {
        match decode_packet(bytes, limit)? {
            Decoded::Complete { packet, consumed } => match bytes.len() - consumed {
                0 => Ok(packet),
                count => Err(ProtocolError::TrailingBytes {
                    context: "STREAM packet",
                    count: count as u64,
                }),
            },
            Decoded::Incomplete { needed } => Err(ProtocolError::Incomplete {
                field: COMMAND,
                needed: (bytes.len() as u64).saturating_add(needed as u64),
                remaining: bytes.len() as u64,
            }),
        }
    }
}

/// The 6-byte prefix of a STREAM packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamPrefix {
    /// Header size in bytes.
    pub header_len: u16,
    /// Payload size in bytes.
    pub payload_size: u32,
}

impl StreamPrefix {
    /// Read the prefix from the start of `buf`, or `None` if fewer than 6 bytes are present.
    pub fn parse(buf: &[u8]) -> Option<Self> {
        let bytes: [u8; PREFIX_LEN] = buf.get(..PREFIX_LEN)?.try_into().ok()?;
        Some(Self {
            header_len: u16::from_be_bytes([bytes[0], bytes[1]]),
            payload_size: u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]),
        })
    }

    /// The encoded prefix.
    pub fn to_bytes(self) -> [u8; PREFIX_LEN] {
        let h = self.header_len.to_be_bytes();
        let p = self.payload_size.to_be_bytes();
        [h[0], h[1], p[0], p[1], p[2], p[3]]
    }

    /// Header + payload: the size `MaxMessageSize` limits (the prefix excluded).
    pub const fn message_len(self) -> u64 {
        self.header_len as u64 + self.payload_size as u64
    }

    /// Prefix + header + payload.
    pub const fn packet_len(self) -> u64 {
        PREFIX_LEN as u64 + self.message_len()
    }
}

/// A StreamNode configuration error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `MaxMessageSize` is negative (a startup configuration error, glossary §6).
    #[error("MaxMessageSize {value} is negative")]
    NegativeMaxMessageSize {
        /// The configured value.
        value: i64,
    },
}

/// The StreamNode inbound complete-message limit (glossary §6 "MaxMessageSize"): header +
/// payload of a client → server packet, the 6-byte prefix excluded. `0` means no Framework limit.
/// Fixed for the listener's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaxMessageSize(u64);

impl MaxMessageSize {
    /// 64 KiB, the spec default.
    pub const DEFAULT: Self = Self(DEFAULT_MAX_MESSAGE_SIZE);

    /// No Framework limit (configured as `0`).
    pub const UNLIMITED: Self = Self(0);

    /// From the configured value: negative is an error, `0` is unlimited, positive is the limit
    /// in bytes.
    ///
    /// # Errors
    /// [`ConfigError::NegativeMaxMessageSize`].
    pub const fn new(bytes: i64) -> Result<Self, ConfigError> {
        if bytes < 0 {
            return Err(ConfigError::NegativeMaxMessageSize { value: bytes });
        }
        Ok(Self(bytes as u64))
    }

    /// The configured value (`0` = unlimited).
    pub const fn configured(self) -> u64 {
        self.0
    }

    /// The limit in bytes, or `None` when unlimited.
    pub const fn limit(self) -> Option<u64> {
        match self.0 {
            0 => None,
            n => Some(n),
        }
    }

    /// The Core `ZLINK_OPT_MAXMSGSIZE` value: `-1` for unlimited, else the limit.
    pub const fn core_option_value(self) -> i64 {
        match self.0 {
            0 => -1,
            // `new` took an i64, so this cannot wrap.
            n => n as i64,
        }
    }

    /// Whether a message of `message_len` bytes (header + payload) is allowed.
    pub const fn allows(self, message_len: u64) -> bool {
        self.0 == 0 || message_len <= self.0
    }

    /// Check a prefix against the limit.
    ///
    /// # Errors
    /// [`ProtocolError::MessageTooLarge`] when `header_len + payload_size` exceeds the limit.
    pub const fn check(self, prefix: StreamPrefix) -> Result<()> {
        let size = prefix.message_len();
        if self.allows(size) {
            Ok(())
        } else {
            Err(ProtocolError::MessageTooLarge {
                size,
                limit: self.0,
            })
        }
    }
}

impl Default for MaxMessageSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<i64> for MaxMessageSize {
    type Error = ConfigError;

    fn try_from(bytes: i64) -> Result<Self, ConfigError> {
        Self::new(bytes)
    }
}

/// The outcome of [`decode_packet`] on a buffer that is not invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A complete packet at the start of the buffer.
    Complete {
        /// The packet.
        packet: StreamPacket,
        /// Bytes it occupied (prefix + header + payload).
        consumed: usize,
    },
    /// The buffer holds a valid beginning of a packet but not all of it.
    Incomplete {
        /// Additional bytes needed before decoding can progress: exact once the prefix is
        /// present (the rest of the packet), otherwise the rest of the prefix.
        needed: usize,
    },
}

/// The header fields of a packet (everything but the payload).
struct Header {
    kind: StreamKind,
    codec: StreamCodec,
    request_seq: Option<u64>,
    packet_name: String,
    metadata: Option<Metadata>,
    correlation_id: Option<String>,
    flow: Option<StreamFlow>,
}

fn parse_header(bytes: &[u8]) -> Result<Header> {
    let mut r = Reader::new(bytes);
    let marker = r.u8("StreamPacket.formatMarker")?;
    if marker != FORMAT_MARKER {
        return Err(ProtocolError::BadFormatMarker { found: marker });
    }
    let kind = StreamKind::from_u8(r.u8("StreamPacket.kind")?)?;
    let codec = StreamCodec::from_u8(r.u8("StreamPacket.codec")?)?;
    let flag_bits = r.u8("StreamPacket.flags")?;
    let undefined = flag_bits & !flags::DEFINED;
    if undefined != 0 {
        return Err(ProtocolError::UndefinedFlags {
            command: COMMAND,
            bits: undefined,
        });
    }
    let has = |flag: u8| flag_bits & flag != 0;
    if has(flags::REQUEST_SEQ) != kind.carries_request_seq() {
        return Err(ProtocolError::ConstraintViolated {
            constraint: SEQ_CONSTRAINT,
        });
    }
    let request_seq = if has(flags::REQUEST_SEQ) {
        let field = "StreamPacket.requestSeq";
        match r.u64(field)? {
            0 => return Err(ProtocolError::ZeroValue { field }),
            seq => Some(seq),
        }
    } else {
        None
    };
    let name = r.length_delimited(
        LenType::U8,
        0,
        MAX_PACKET_NAME_BYTES as u64,
        "StreamPacket.packetName",
    )?;
    if kind.is_reply() && !name.is_empty() {
        return Err(ProtocolError::ConstraintViolated {
            constraint: NAME_CONSTRAINT,
        });
    }
    let packet_name = std::str::from_utf8(name)
        .map_err(|_| ProtocolError::InvalidUtf8 {
            field: "StreamPacket.packetName",
        })?
        .to_owned();
    let metadata = if has(flags::METADATA) {
        let block = r.length_delimited(
            LenType::U16,
            0,
            u64::from(u16::MAX),
            "StreamPacket.metadata",
        )?;
        Some(Metadata::decode(block)?)
    } else {
        None
    };
    let correlation_id = if has(flags::CORRELATION_ID) {
        Some(r.ascii(
            LenType::U8,
            1,
            MAX_CORRELATION_ID_BYTES as u64,
            "StreamPacket.correlationId",
        )?)
    } else {
        None
    };
    let flow = if has(flags::FLOW) {
        let id = r.fixed::<FLOW_ID_LEN>("StreamPacket.flowId")?;
        check_ascii("StreamPacket.flowId", &id)?;
        let flow_origin = r.u8("StreamPacket.flowOrigin")?;
        Some(StreamFlow {
            // Printable ASCII is valid UTF-8.
            flow_id: id.iter().map(|&b| char::from(b)).collect(),
            flow_origin,
        })
    } else {
        None
    };
    r.finish("stream header")?;
    Ok(Header {
        kind,
        codec,
        request_seq,
        packet_name,
        metadata,
        correlation_id,
        flow,
    })
}

/// `prefix.packet_len()` as a `usize`, or `MessageTooLarge` where memory cannot address it
/// (only possible on 32-bit targets with an unlimited `MaxMessageSize`).
fn packet_len_usize(prefix: StreamPrefix) -> Result<usize> {
    usize::try_from(prefix.packet_len()).map_err(|_| ProtocolError::MessageTooLarge {
        size: prefix.message_len(),
        limit: (usize::MAX - PREFIX_LEN) as u64,
    })
}

fn needed(total: usize, have: usize) -> Decoded {
    Decoded::Incomplete {
        needed: total - have,
    }
}

/// Decode the packet at the start of `buf`, applying the inbound `limit`.
///
/// Pure: no buffering, no I/O. Returns [`Decoded::Incomplete`] while `buf` is a valid but
/// unfinished packet, and `Err` as soon as the bytes present prove it invalid — the size limit
/// from the prefix alone, header errors as soon as the header is present (the payload is not
/// validated, so its absence never hides or changes an error).
///
/// # Errors
/// See the module documentation.
pub fn decode_packet(buf: &[u8], limit: MaxMessageSize) -> Result<Decoded> {
    let Some(prefix) = StreamPrefix::parse(buf) else {
        return Ok(needed(PREFIX_LEN, buf.len()));
    };
    limit.check(prefix)?;
    let total = packet_len_usize(prefix)?;
    let header_end = PREFIX_LEN + usize::from(prefix.header_len);
    let Some(header_bytes) = buf.get(PREFIX_LEN..header_end) else {
        return Ok(needed(total, buf.len()));
    };
    let header = parse_header(header_bytes)?;
    let Some(payload) = buf.get(header_end..total) else {
        return Ok(needed(total, buf.len()));
    };
    Ok(Decoded::Complete {
        packet: StreamPacket {
            kind: header.kind,
            codec: header.codec,
            request_seq: header.request_seq,
            packet_name: header.packet_name,
            metadata: header.metadata,
            correlation_id: header.correlation_id,
            flow: header.flow,
            payload: payload.to_vec(),
        },
        consumed: total,
    })
}

/// An incremental STREAM decoder for a TCP read loop.
///
/// Feed whatever each read returned with [`extend`](Self::extend), then call
/// [`next_packet`](Self::next_packet) until it returns `Ok(None)`. Packets come out in order
/// regardless of how the byte stream was split.
///
/// # Guarantees
/// - Each packet's prefix is checked against `MaxMessageSize` the moment its sixth byte arrives;
///   an oversized packet's header and payload bytes are never buffered (the decoder stops
///   buffering altogether), and `next_packet` reports [`ProtocolError::MessageTooLarge`] once the
///   packets before it have been returned.
/// - So no packet occupies more than `6 + limit` bytes of the buffer. With the read loop above
///   the buffer holds at most the unread tail of one read plus one partial packet.
/// - A header error is reported as soon as the header has arrived, before its payload.
/// - Errors are sticky: after an `Err` the decoder returns the same error forever and holds no
///   bytes; the connection must be closed.
#[derive(Debug, Clone)]
pub struct StreamDecoder {
    limit: MaxMessageSize,
    buf: Vec<u8>,
    /// Offset of the next packet to return.
    start: usize,
    /// Offset of the packet still arriving; `start..frontier` holds complete, size-checked
    /// packets.
    frontier: usize,
    /// Full length of the packet at `frontier`, once its prefix has arrived and passed the limit.
    frontier_len: Option<usize>,
    /// Whether the header of the packet at `frontier` has already been validated.
    frontier_header_checked: bool,
    /// The packet at `frontier` exceeds the limit; nothing more is buffered.
    oversized: Option<ProtocolError>,
    /// An error was returned; the decoder is finished.
    failed: Option<ProtocolError>,
}

impl StreamDecoder {
    /// A decoder applying the inbound `limit`.
    pub fn new(limit: MaxMessageSize) -> Self {
        Self {
            limit,
            buf: Vec::new(),
            start: 0,
            frontier: 0,
            frontier_len: None,
            frontier_header_checked: false,
            oversized: None,
            failed: None,
        }
    }

    /// The inbound limit.
    pub fn limit(&self) -> MaxMessageSize {
        self.limit
    }

    /// Bytes currently held (unread complete packets and the partial one).
    pub fn buffered_len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether the decoder has failed (or will fail once the packets before the failure are
    /// read); the connection should be closed after draining it.
    pub fn is_failed(&self) -> bool {
        self.failed.is_some() || self.oversized.is_some()
    }

    /// Append bytes received from the connection. Bytes after an oversized packet's prefix are
    /// dropped, as is everything after a failure.
    pub fn extend(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.failed.is_none() && self.oversized.is_none() {
            let have = self.buf.len() - self.frontier;
            let want = match self.frontier_len {
                None => PREFIX_LEN - have,
                Some(total) => total - have,
            };
            let (now, later) = bytes.split_at(want.min(bytes.len()));
            self.buf.extend_from_slice(now);
            bytes = later;
            self.settle_frontier();
        }
    }

    /// Advance `frontier` past every packet that is now complete and check each new prefix.
    fn settle_frontier(&mut self) {
        loop {
            let have = self.buf.len() - self.frontier;
            match self.frontier_len {
                None => {
                    let Some(prefix) = StreamPrefix::parse(&self.buf[self.frontier..]) else {
                        return;
                    };
                    match self
                        .limit
                        .check(prefix)
                        .and_then(|()| packet_len_usize(prefix))
                    {
                        Ok(total) => self.frontier_len = Some(total),
                        Err(e) => {
                            self.oversized = Some(e);
                            return;
                        }
                    }
                }
                Some(total) if have >= total => {
                    self.frontier += total;
                    self.frontier_len = None;
                    self.frontier_header_checked = false;
                }
                Some(_) => return,
            }
        }
    }

    /// The next complete packet, `Ok(None)` if more bytes are needed.
    ///
    /// # Errors
    /// The first error of the byte stream (see the module documentation); then the same error
    /// on every call.
    pub fn next_packet(&mut self) -> Result<Option<StreamPacket>> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.step() {
            Ok(packet) => Ok(packet),
            Err(e) => {
                self.fail(e.clone());
                Err(e)
            }
        }
    }

    fn step(&mut self) -> Result<Option<StreamPacket>> {
        if self.start < self.frontier {
            // A complete packet is waiting; `frontier` is a packet boundary.
            return match decode_packet(&self.buf[self.start..self.frontier], self.limit)? {
                Decoded::Complete { packet, consumed } => {
                    self.start += consumed;
                    self.compact();
                    Ok(Some(packet))
                }
                Decoded::Incomplete { .. } => Ok(None),
            };
        }
        if let Some(e) = &self.oversized {
            return Err(e.clone());
        }
        // The packet at `frontier` is partial: validate its header once it is all here.
        if let (Some(_), false) = (self.frontier_len, self.frontier_header_checked)
            && let Some(prefix) = StreamPrefix::parse(&self.buf[self.frontier..])
        {
            let header_start = self.frontier + PREFIX_LEN;
            let header_end = header_start + usize::from(prefix.header_len);
            if let Some(header) = self.buf.get(header_start..header_end) {
                parse_header(header)?;
                self.frontier_header_checked = true;
            }
        }
        Ok(None)
    }

    fn fail(&mut self, e: ProtocolError) {
        self.failed = Some(e);
        self.buf = Vec::new();
        self.start = 0;
        self.frontier = 0;
        self.frontier_len = None;
    }

    /// Drop consumed bytes once they are at least half of the buffer (amortised O(1)).
    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.frontier = 0;
            self.start = 0;
        } else if self.start >= self.buf.len() - self.start {
            self.buf.drain(..self.start);
            self.frontier -= self.start;
            self.start = 0;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FLOW_ID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

    fn unlimited() -> MaxMessageSize {
        MaxMessageSize::UNLIMITED
    }

    fn full_packet() -> StreamPacket {
        StreamPacket::request(StreamCodec::FrameworkJson, 7, "Move", b"{}".to_vec())
            .with_metadata(
                Metadata::new([("trace".to_owned(), "t1".to_owned())]).expect("valid metadata"),
            )
            .with_correlation_id("c-1")
            .with_flow(StreamFlow {
                flow_id: FLOW_ID.to_owned(),
                flow_origin: 2,
            })
    }

    /// Prefix + the given header bytes + payload.
    fn raw(header: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut v = StreamPrefix {
            header_len: header.len() as u16,
            payload_size: payload.len() as u32,
        }
        .to_bytes()
        .to_vec();
        v.extend_from_slice(header);
        v.extend_from_slice(payload);
        v
    }

    fn decode_err(bytes: &[u8]) -> ProtocolError {
        decode_packet(bytes, unlimited()).expect_err("must be invalid")
    }

    #[test]
    fn send_packet_layout() {
        let p = StreamPacket::send(StreamCodec::Raw, "Hi", vec![9]);
        assert_eq!(
            p.encode().unwrap(),
            [0, 7, 0, 0, 0, 1, 0xF2, 1, 0, 0, 2, b'H', b'i', 9]
        );
    }

    #[test]
    fn full_packet_layout_follows_the_flag_order() {
        let p = full_packet();
        let bytes = p.encode().unwrap();
        let mut header = vec![
            0xF2, 2, 1, 0x0F, 0, 0, 0, 0, 0, 0, 0, 7, 4, b'M', b'o', b'v', b'e',
        ];
        header.extend_from_slice(&[0, 13, 0, 1, 0, 5]);
        header.extend_from_slice(b"trace");
        header.extend_from_slice(&[0, 2, b't', b'1', 3, b'c', b'-', b'1']);
        header.extend_from_slice(FLOW_ID.as_bytes());
        header.push(2);
        assert_eq!(bytes, raw(&header, b"{}"));
        assert_eq!(p.header_len(), header.len());
        assert_eq!(p.encoded_len(), bytes.len());
        assert_eq!(StreamPacket::decode(&bytes, unlimited()).unwrap(), p);
    }

    #[test]
    fn replies_carry_the_request_seq_and_no_name() {
        for p in [
            StreamPacket::response(StreamCodec::Raw, 7, vec![1]),
            StreamPacket::error(StreamCodec::FrameworkJson, u64::MAX, vec![]),
        ] {
            let bytes = p.encode().unwrap();
            assert_eq!(StreamPacket::decode(&bytes, unlimited()).unwrap(), p);
        }
    }

    #[test]
    fn encode_rejects_what_decode_rejects() {
        let cases = [
            (
                StreamPacket::request(StreamCodec::Raw, 0, "x", vec![]),
                "ZeroValue",
            ),
            (
                StreamPacket {
                    request_seq: None,
                    ..StreamPacket::request(StreamCodec::Raw, 1, "x", vec![])
                },
                "ConstraintViolated",
            ),
            (
                StreamPacket {
                    request_seq: Some(1),
                    ..StreamPacket::send(StreamCodec::Raw, "x", vec![])
                },
                "ConstraintViolated",
            ),
            (
                StreamPacket {
                    packet_name: "x".to_owned(),
                    ..StreamPacket::response(StreamCodec::Raw, 1, vec![])
                },
                "ConstraintViolated",
            ),
            (
                StreamPacket::send(StreamCodec::Raw, "n".repeat(256), vec![]),
                "OutOfBounds",
            ),
            (
                StreamPacket::send(StreamCodec::Raw, "", vec![]).with_correlation_id(""),
                "OutOfBounds",
            ),
            (
                StreamPacket::send(StreamCodec::Raw, "", vec![])
                    .with_correlation_id("a".repeat(65)),
                "OutOfBounds",
            ),
            (
                StreamPacket::send(StreamCodec::Raw, "", vec![]).with_correlation_id("a b"),
                "InvalidAscii",
            ),
            (
                StreamPacket::send(StreamCodec::Raw, "", vec![]).with_flow(StreamFlow {
                    flow_id: "short".to_owned(),
                    flow_origin: 0,
                }),
                "OutOfBounds",
            ),
            (
                StreamPacket::send(StreamCodec::Raw, "", vec![]).with_flow(StreamFlow {
                    flow_id: " ".repeat(36),
                    flow_origin: 0,
                }),
                "InvalidAscii",
            ),
        ];
        for (p, kind) in cases {
            let mut w = Writer::new();
            assert_eq!(
                p.encode_into(&mut w).map_err(|e| e.kind()),
                Err(kind),
                "{p:?}"
            );
            assert!(w.is_empty(), "nothing is written on error");
        }
    }

    #[test]
    fn header_errors_in_field_order() {
        let cases: &[(&[u8], ProtocolError)] = &[
            (
                &[0xF1, 1, 0, 0, 0],
                ProtocolError::BadFormatMarker { found: 0xF1 },
            ),
            (
                &[0xF2, 5, 0, 0, 0],
                ProtocolError::UnknownEnumValue {
                    field: "StreamPacket.kind",
                    value: 5,
                },
            ),
            (
                &[0xF2, 0, 0, 0, 0],
                ProtocolError::UnknownEnumValue {
                    field: "StreamPacket.kind",
                    value: 0,
                },
            ),
            (
                &[0xF2, 1, 2, 0, 0],
                ProtocolError::UnknownEnumValue {
                    field: "StreamPacket.codec",
                    value: 2,
                },
            ),
            (
                &[0xF2, 1, 0, 0x30, 0],
                ProtocolError::UndefinedFlags {
                    command: COMMAND,
                    bits: 0x30,
                },
            ),
            (
                &[0xF2, 1, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 0],
                ProtocolError::ConstraintViolated {
                    constraint: SEQ_CONSTRAINT,
                },
            ),
            (
                &[0xF2, 2, 0, 0, 0],
                ProtocolError::ConstraintViolated {
                    constraint: SEQ_CONSTRAINT,
                },
            ),
            (
                &[0xF2, 2, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                ProtocolError::ZeroValue {
                    field: "StreamPacket.requestSeq",
                },
            ),
            (
                &[0xF2, 3, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 1, b'x'],
                ProtocolError::ConstraintViolated {
                    constraint: NAME_CONSTRAINT,
                },
            ),
            (
                &[0xF2, 1, 0, 0, 1, 0xff],
                ProtocolError::InvalidUtf8 {
                    field: "StreamPacket.packetName",
                },
            ),
            (
                &[0xF2, 1, 0, 0x04, 0, 0],
                ProtocolError::OutOfBounds {
                    field: "StreamPacket.correlationId",
                    value: 0,
                    min: 1,
                    max: 64,
                },
            ),
            (
                &[0xF2, 1, 0, 0x04, 0, 1, 0x7f],
                ProtocolError::InvalidAscii {
                    field: "StreamPacket.correlationId",
                    byte: 0x7f,
                },
            ),
            (
                &[0xF2, 1, 0, 0, 0, 0xAA],
                ProtocolError::TrailingBytes {
                    context: "stream header",
                    count: 1,
                },
            ),
        ];
        for (header, expected) in cases {
            assert_eq!(&decode_err(&raw(header, b"")), expected, "{header:?}");
        }
    }

    #[test]
    fn header_fields_beyond_header_len_are_incomplete() {
        for header in [
            &[][..],
            &[0xF2],
            &[0xF2, 1, 0],
            &[0xF2, 1, 0, 0],
            &[0xF2, 2, 0, 0x01, 0, 0, 0],
            &[0xF2, 1, 0, 0, 3, b'a'],
            &[0xF2, 1, 0, 0x02, 0, 0],
            &[0xF2, 1, 0, 0x02, 0, 0, 0, 9],
            &[0xF2, 1, 0, 0x08, 0, b'a'],
        ] {
            // The payload after the header must not be read as header bytes.
            assert_eq!(
                decode_err(&raw(header, b"payload")).kind(),
                "Incomplete",
                "{header:?}"
            );
        }
    }

    #[test]
    fn metadata_errors_surface_from_the_header() {
        // meta_len 3: count 1 with no entry bytes.
        let header = [0xF2, 1, 0, 0x02, 0, 0, 3, 0, 1, 0];
        assert_eq!(
            decode_err(&raw(&header, b"")).kind(),
            "CountExceedsRemaining"
        );
        let mut big = vec![0xF2, 1, 0, 0x02, 0];
        big.extend_from_slice(&1025u16.to_be_bytes());
        big.extend(std::iter::repeat_n(0, 1025));
        assert_eq!(decode_err(&raw(&big, b"")).kind(), "MetadataTooLarge");
    }

    #[test]
    fn flow_id_must_be_printable_ascii() {
        let mut header = vec![0xF2, 1, 0, 0x08, 0];
        header.extend_from_slice(&[b'a'; 35]);
        header.push(0x00);
        header.push(1);
        assert_eq!(
            decode_err(&raw(&header, b"")),
            ProtocolError::InvalidAscii {
                field: "StreamPacket.flowId",
                byte: 0
            }
        );
    }

    #[test]
    fn max_message_size_configuration() {
        assert_eq!(
            MaxMessageSize::new(-1),
            Err(ConfigError::NegativeMaxMessageSize { value: -1 })
        );
        assert_eq!(MaxMessageSize::default().limit(), Some(65_536));
        let unlimited = MaxMessageSize::new(0).unwrap();
        assert_eq!(unlimited.limit(), None);
        assert_eq!(unlimited.core_option_value(), -1);
        assert_eq!(MaxMessageSize::new(10).unwrap().core_option_value(), 10);
        assert!(unlimited.allows(u64::MAX));
        assert_eq!(
            MaxMessageSize::try_from(i64::MAX).unwrap().configured(),
            i64::MAX as u64
        );
    }

    #[test]
    fn limit_counts_header_and_payload_but_not_the_prefix() {
        let p = StreamPacket::send(StreamCodec::Raw, "", vec![0; 5]);
        let bytes = p.encode().unwrap();
        // header 5 + payload 5 = 10.
        let exact = MaxMessageSize::new(10).unwrap();
        assert!(StreamPacket::decode(&bytes, exact).is_ok());
        let smaller = MaxMessageSize::new(9).unwrap();
        assert_eq!(
            StreamPacket::decode(&bytes, smaller).unwrap_err(),
            ProtocolError::MessageTooLarge { size: 10, limit: 9 }
        );
    }

    #[test]
    fn too_large_is_reported_from_the_prefix_alone() {
        let prefix = StreamPrefix {
            header_len: 5,
            payload_size: 1_000_000,
        };
        assert_eq!(
            decode_packet(&prefix.to_bytes(), MaxMessageSize::DEFAULT).unwrap_err(),
            ProtocolError::MessageTooLarge {
                size: 1_000_005,
                limit: 65_536
            }
        );
    }

    #[test]
    fn incomplete_buffers_report_what_is_needed() {
        let bytes = full_packet().encode().unwrap();
        assert_eq!(
            decode_packet(&bytes[..2], unlimited()).unwrap(),
            Decoded::Incomplete { needed: 4 }
        );
        for cut in PREFIX_LEN..bytes.len() {
            assert_eq!(
                decode_packet(&bytes[..cut], unlimited()).unwrap(),
                Decoded::Incomplete {
                    needed: bytes.len() - cut
                }
            );
        }
        assert_eq!(
            StreamPacket::decode(&bytes[..10], unlimited())
                .unwrap_err()
                .kind(),
            "Incomplete"
        );
    }

    #[test]
    fn header_errors_are_reported_before_the_payload_arrives() {
        let bytes = raw(&[0xF1, 1, 0, 0, 0], &[0; 100]);
        assert_eq!(
            decode_packet(&bytes[..11], unlimited()).unwrap_err().kind(),
            "BadFormatMarker"
        );
        let mut d = StreamDecoder::new(unlimited());
        d.extend(&bytes[..11]);
        assert_eq!(d.next_packet().unwrap_err().kind(), "BadFormatMarker");
    }

    #[test]
    fn trailing_bytes_after_a_single_packet() {
        let mut bytes = StreamPacket::send(StreamCodec::Raw, "", vec![])
            .encode()
            .unwrap();
        bytes.push(0);
        assert_eq!(
            StreamPacket::decode(&bytes, unlimited()).unwrap_err(),
            ProtocolError::TrailingBytes {
                context: "STREAM packet",
                count: 1
            }
        );
    }

    #[test]
    fn decoder_returns_packets_in_order_then_none() {
        let a = StreamPacket::send(StreamCodec::Raw, "a", vec![1, 2]);
        let b = full_packet();
        let mut bytes = a.encode().unwrap();
        bytes.extend(b.encode().unwrap());
        let mut d = StreamDecoder::new(MaxMessageSize::DEFAULT);
        d.extend(&bytes);
        assert_eq!(d.next_packet().unwrap(), Some(a));
        assert_eq!(d.next_packet().unwrap(), Some(b));
        assert_eq!(d.next_packet().unwrap(), None);
        assert_eq!(d.buffered_len(), 0);
    }

    #[test]
    fn decoder_reports_too_large_once_the_prefix_arrives_and_buffers_no_more() {
        let good = StreamPacket::send(StreamCodec::Raw, "ok", vec![7; 10]);
        let mut bytes = good.encode().unwrap();
        let big = StreamPrefix {
            header_len: 5,
            payload_size: 100_000,
        };
        bytes.extend_from_slice(&big.to_bytes());
        let mut d = StreamDecoder::new(MaxMessageSize::DEFAULT);
        d.extend(&bytes);
        d.extend(&[0u8; 200_000]);
        assert!(d.is_failed());
        assert_eq!(d.buffered_len(), good.encoded_len() + PREFIX_LEN);
        // The packet that arrived first is still delivered.
        assert_eq!(d.next_packet().unwrap(), Some(good));
        let err = d.next_packet().unwrap_err();
        assert_eq!(
            err,
            ProtocolError::MessageTooLarge {
                size: 100_005,
                limit: 65_536
            }
        );
        assert_eq!(d.next_packet().unwrap_err(), err, "errors are sticky");
        assert_eq!(d.buffered_len(), 0);
    }

    #[test]
    fn decoder_errors_are_sticky_and_release_the_buffer() {
        let mut d = StreamDecoder::new(unlimited());
        d.extend(&raw(&[0xF2, 9, 0, 0, 0], b"xyz"));
        let err = d.next_packet().unwrap_err();
        assert_eq!(err.kind(), "UnknownEnumValue");
        d.extend(
            &StreamPacket::send(StreamCodec::Raw, "", vec![])
                .encode()
                .unwrap(),
        );
        assert_eq!(d.next_packet().unwrap_err(), err);
        assert_eq!(d.buffered_len(), 0);
    }

    #[test]
    fn serde_uses_camel_case_and_hex_payload() {
        let p = full_packet();
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "request",
                "codec": "frameworkJson",
                "requestSeq": 7,
                "packetName": "Move",
                "metadata": [["trace", "t1"]],
                "correlationId": "c-1",
                "flow": { "flowId": FLOW_ID, "flowOrigin": 2 },
                "payload": "7b7d"
            })
        );
        assert_eq!(serde_json::from_value::<StreamPacket>(json).unwrap(), p);
        let send: StreamPacket =
            serde_json::from_str(r#"{"kind":"send","codec":"raw","payload":""}"#).unwrap();
        assert_eq!(send, StreamPacket::send(StreamCodec::Raw, "", vec![]));
    }

    fn ascii_id(len: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = String> {
        proptest::collection::vec(0x21u8..=0x7E, len)
            .prop_map(|b| b.into_iter().map(char::from).collect())
    }

    fn packet() -> impl Strategy<Value = StreamPacket> {
        let kind = prop_oneof![
            Just(StreamKind::Send),
            Just(StreamKind::Request),
            Just(StreamKind::Response),
            Just(StreamKind::Error),
        ];
        let codec = prop_oneof![Just(StreamCodec::Raw), Just(StreamCodec::FrameworkJson)];
        let metadata = proptest::option::of(
            proptest::collection::vec(("[a-z]{1,6}", "[^\u{0}]{0,8}"), 0..4)
                .prop_filter_map("fits", |pairs| Metadata::new(pairs).ok()),
        );
        let flow = proptest::option::of((ascii_id(36..=36), any::<u8>()).prop_map(
            |(flow_id, flow_origin)| StreamFlow {
                flow_id,
                flow_origin,
            },
        ));
        (
            kind,
            codec,
            1u64..,
            "\\PC{0,20}",
            metadata,
            proptest::option::of(ascii_id(1..=64)),
            flow,
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(
                |(kind, codec, seq, name, metadata, correlation_id, flow, payload)| StreamPacket {
                    kind,
                    codec,
                    request_seq: kind.carries_request_seq().then_some(seq),
                    packet_name: if kind.is_reply() { String::new() } else { name },
                    metadata,
                    correlation_id,
                    flow,
                    payload,
                },
            )
    }

    proptest! {
        #[test]
        fn encode_then_decode_round_trips(p in packet()) {
            let bytes = p.encode().unwrap();
            prop_assert_eq!(bytes.len(), p.encoded_len());
            prop_assert_eq!(StreamPacket::decode(&bytes, MaxMessageSize::DEFAULT).unwrap(), p);
        }

        #[test]
        fn split_stream_yields_the_same_packets(
            packets in proptest::collection::vec(packet(), 1..5),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let mut bytes = Vec::new();
            for p in &packets {
                bytes.extend(p.encode().unwrap());
            }
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.push(bytes.len());
            points.sort_unstable();
            let mut d = StreamDecoder::new(MaxMessageSize::DEFAULT);
            let mut out = Vec::new();
            let mut start = 0;
            for p in points {
                d.extend(&bytes[start..p]);
                start = p;
                while let Some(packet) = d.next_packet().unwrap() {
                    out.push(packet);
                }
            }
            prop_assert_eq!(out, packets);
            prop_assert_eq!(d.buffered_len(), 0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(Decoded::Complete { packet, consumed }) = decode_packet(&bytes, MaxMessageSize::DEFAULT) {
                prop_assert_eq!(packet.encode().unwrap(), &bytes[..consumed]);
            }
        }

        #[test]
        fn plausible_headers_never_panic(
            kind in 0u8..6,
            codec in 0u8..3,
            flag_bits in 0u8..0x12,
            rest in proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(b'a'), any::<u8>()], 0..80),
            payload_len in 0usize..8,
        ) {
            let mut header = vec![FORMAT_MARKER, kind, codec, flag_bits];
            header.extend(rest);
            let bytes = raw(&header, &vec![0; payload_len]);
            if let Ok(p) = StreamPacket::decode(&bytes, MaxMessageSize::DEFAULT) {
                prop_assert_eq!(p.encode().unwrap(), bytes);
            }
        }

        #[test]
        fn decoder_on_arbitrary_chunks_never_panics_and_respects_the_limit(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
            limit in 0i64..200,
        ) {
            let limit = MaxMessageSize::new(limit).unwrap();
            let mut d = StreamDecoder::new(limit);
            for chunk in &chunks {
                d.extend(chunk);
                while let Ok(Some(p)) = d.next_packet() {
                    let message_len = (p.encoded_len() - PREFIX_LEN) as u64;
                    prop_assert!(limit.allows(message_len));
                }
            }
        }

        #[test]
        fn decoder_never_buffers_more_than_one_read_plus_one_bounded_packet(
            packets in proptest::collection::vec(packet(), 1..4),
            chunk in 1usize..64,
        ) {
            let limit = MaxMessageSize::new(400).unwrap();
            let mut bytes = Vec::new();
            for p in &packets {
                bytes.extend(p.encode().unwrap());
            }
            let mut d = StreamDecoder::new(limit);
            for piece in bytes.chunks(chunk) {
                d.extend(piece);
                prop_assert!(d.buffered_len() <= chunk + PREFIX_LEN + 400);
                while let Ok(Some(_)) = d.next_packet() {}
            }
        }
    }
}
