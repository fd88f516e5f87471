//! The closed set of protocol errors.
//!
//! Every malformed input is reported as exactly one [`ProtocolError`] variant, before any
//! application code sees it (wire §2 "Decode 검증과 크기 상한", §12). The variant names are part of
//! the golden-fixture contract: `protocol/golden/` names the expected variant of every malformed
//! record by its [`ProtocolError::kind`] string, and a test checks that every variant has at
//! least one fixture.

use thiserror::Error;

/// Result alias for this crate.
pub type Result<T, E = ProtocolError> = std::result::Result<T, E>;

/// A malformed record, frame, packet or durable blob.
///
/// Field names (`field`) are static paths such as `"NodeFence.rid"` so that errors never
/// allocate and never echo attacker-controlled bytes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Fewer bytes remain than a length, integer or fixed-size field needs.
    #[error("incomplete {field}: needs {needed} bytes, {remaining} remain")]
    Incomplete {
        /// Field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the frame.
        remaining: u64,
    },
    /// A vector count cannot be represented by the remaining bytes (checked before allocating).
    #[error("{field}: count {count} needs at least {needed} bytes, {remaining} remain")]
    CountExceedsRemaining {
        /// Vector field.
        field: &'static str,
        /// Declared item count.
        count: u64,
        /// Minimum bytes that count needs.
        needed: u64,
        /// Bytes left.
        remaining: u64,
    },
    /// A string field is not valid UTF-8.
    #[error("{field}: invalid UTF-8")]
    InvalidUtf8 {
        /// String field.
        field: &'static str,
    },
    /// An ASCII-only field (correlation ID) holds a non-ASCII or control byte.
    #[error("{field}: invalid ASCII byte 0x{byte:02x}")]
    InvalidAscii {
        /// ASCII field.
        field: &'static str,
        /// First offending byte.
        byte: u8,
    },
    /// An enum, bool or union tag holds a value the schema does not define.
    #[error("{field}: unknown value {value}")]
    UnknownEnumValue {
        /// Enum field.
        field: &'static str,
        /// The value read.
        value: u64,
    },
    /// A length, integer or count is outside its declared bounds.
    #[error("{field}: {value} outside {min}..={max}")]
    OutOfBounds {
        /// Field.
        field: &'static str,
        /// Value read (length, count or integer).
        value: u64,
        /// Inclusive minimum.
        min: u64,
        /// Inclusive maximum.
        max: u64,
    },
    /// A field declared non-zero is zero (generations, IDs, request sequence).
    #[error("{field}: zero is not allowed")]
    ZeroValue {
        /// Field.
        field: &'static str,
    },
    /// A semantic constraint declared by the schema does not hold.
    #[error("constraint violated: {constraint}")]
    ConstraintViolated {
        /// Constraint description, e.g. `"messageFollow: sourceRoute and targetRoute name the same object"`.
        constraint: &'static str,
    },
    /// Bytes remain after a complete frame, body, tail or length-delimited block.
    #[error("{context}: {count} trailing bytes")]
    TrailingBytes {
        /// What was complete.
        context: &'static str,
        /// How many bytes were left over.
        count: u64,
    },
    /// Frame 0 does not start with the `5A 4D` magic, or a durable blob has the wrong magic.
    #[error("{context}: bad magic")]
    BadMagic {
        /// Record or durable format.
        context: &'static str,
    },
    /// The wire major or a durable/body version is not the supported one.
    #[error("{context}: unsupported version {found}")]
    UnsupportedVersion {
        /// Record or durable format.
        context: &'static str,
        /// Version read.
        found: u64,
    },
    /// A reserved command ID (7..15, 32, 35, 41, 45, 54..255): never sent, never accepted.
    #[error("reserved command id {id}")]
    ReservedCommand {
        /// The reserved ID.
        id: u8,
    },
    /// A command ID that is neither defined nor reserved (only 0).
    #[error("unknown command id {id}")]
    UnknownCommand {
        /// The ID.
        id: u8,
    },
    /// A flag bit that wire v1 does not define at all (`0x10..=0x80`).
    #[error("{command}: undefined flag bits 0x{bits:02x}")]
    UndefinedFlags {
        /// Command name.
        command: &'static str,
        /// The undefined bits.
        bits: u8,
    },
    /// A defined flag that the schema does not allow for this command.
    #[error("{command}: flag 0x{flag:02x} not allowed")]
    FlagNotAllowed {
        /// Command name.
        command: &'static str,
        /// The flag.
        flag: u8,
    },
    /// The record has the wrong number of frames for its flags and payload rule.
    #[error("{command}: {actual} frames, expected {min}..={max}")]
    WrongFrameCount {
        /// Command name.
        command: &'static str,
        /// Frames present.
        actual: u64,
        /// Minimum frames.
        min: u64,
        /// Maximum frames.
        max: u64,
    },
    /// A flag announces a conditional tail but the tail is absent or carries another tag.
    #[error("{command}: conditional tail for flag 0x{flag:02x} missing or mismatched")]
    ConditionalTailMismatch {
        /// Command name.
        command: &'static str,
        /// The flag whose tail was expected.
        flag: u8,
    },
    /// The command travelled on a leg (send / request / reply) the schema does not allow.
    #[error("{command}: not allowed on the {leg} leg")]
    WrongLeg {
        /// Command name.
        command: &'static str,
        /// The leg it arrived on.
        leg: &'static str,
    },
    /// The command may not appear on this topology (only 1..6 on ClientServer).
    #[error("{command}: not allowed on {topology}")]
    TopologyNotAllowed {
        /// Command name.
        command: &'static str,
        /// The topology.
        topology: &'static str,
    },
    /// The metadata frame exceeds 1,024 encoded bytes.
    #[error("metadata frame of {size} bytes exceeds {limit}")]
    MetadataTooLarge {
        /// Encoded size.
        size: u64,
        /// The limit (1,024).
        limit: u64,
    },
    /// A metadata key or value contains NUL.
    #[error("metadata {field} contains NUL")]
    MetadataNul {
        /// `"key"` or `"value"`.
        field: &'static str,
    },
    /// A framework multipart payload declares zero parts.
    #[error("multipart payload declares zero parts")]
    EmptyMultipart,
    /// A STREAM packet does not start with the `0xF2` format marker.
    #[error("STREAM packet format marker 0x{found:02x}, expected 0xF2")]
    BadFormatMarker {
        /// Marker byte read.
        found: u8,
    },
    /// A STREAM packet's header + payload exceeds the inbound `MaxMessageSize`
    /// (reported from the prefix, before the payload is buffered).
    #[error("STREAM message of {size} bytes exceeds MaxMessageSize {limit}")]
    MessageTooLarge {
        /// Header + payload size announced by the prefix.
        size: u64,
        /// The configured limit.
        limit: u64,
    },
    /// A CRC-32C trailer or declared checksum does not match the bytes.
    #[error("{context}: checksum mismatch (declared 0x{declared:08x}, computed 0x{computed:08x})")]
    ChecksumMismatch {
        /// Durable format or transfer.
        context: &'static str,
        /// Declared checksum.
        declared: u32,
        /// Computed checksum.
        computed: u32,
    },
    /// A classic fanout record on the reserved beacon topic has the wrong frame count or payload.
    #[error("malformed classic fanout beacon")]
    MalformedBeacon,
}

impl ProtocolError {
    /// The stable variant name used by golden fixtures (`"error": "TrailingBytes"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Incomplete { .. } => "Incomplete",
            Self::CountExceedsRemaining { .. } => "CountExceedsRemaining",
            Self::InvalidUtf8 { .. } => "InvalidUtf8",
            Self::InvalidAscii { .. } => "InvalidAscii",
            Self::UnknownEnumValue { .. } => "UnknownEnumValue",
            Self::OutOfBounds { .. } => "OutOfBounds",
            Self::ZeroValue { .. } => "ZeroValue",
            Self::ConstraintViolated { .. } => "ConstraintViolated",
            Self::TrailingBytes { .. } => "TrailingBytes",
            Self::BadMagic { .. } => "BadMagic",
            Self::UnsupportedVersion { .. } => "UnsupportedVersion",
            Self::ReservedCommand { .. } => "ReservedCommand",
            Self::UnknownCommand { .. } => "UnknownCommand",
            Self::UndefinedFlags { .. } => "UndefinedFlags",
            Self::FlagNotAllowed { .. } => "FlagNotAllowed",
            Self::WrongFrameCount { .. } => "WrongFrameCount",
            Self::ConditionalTailMismatch { .. } => "ConditionalTailMismatch",
            Self::WrongLeg { .. } => "WrongLeg",
            Self::TopologyNotAllowed { .. } => "TopologyNotAllowed",
            Self::MetadataTooLarge { .. } => "MetadataTooLarge",
            Self::MetadataNul { .. } => "MetadataNul",
            Self::EmptyMultipart => "EmptyMultipart",
            Self::BadFormatMarker { .. } => "BadFormatMarker",
            Self::MessageTooLarge { .. } => "MessageTooLarge",
            Self::ChecksumMismatch { .. } => "ChecksumMismatch",
            Self::MalformedBeacon => "MalformedBeacon",
        }
    }

    /// Every variant name, for the "each variant has a fixture" test.
    pub const ALL_KINDS: &'static [&'static str] = &[
        "Incomplete",
        "CountExceedsRemaining",
        "InvalidUtf8",
        "InvalidAscii",
        "UnknownEnumValue",
        "OutOfBounds",
        "ZeroValue",
        "ConstraintViolated",
        "TrailingBytes",
        "BadMagic",
        "UnsupportedVersion",
        "ReservedCommand",
        "UnknownCommand",
        "UndefinedFlags",
        "FlagNotAllowed",
        "WrongFrameCount",
        "ConditionalTailMismatch",
        "WrongLeg",
        "TopologyNotAllowed",
        "MetadataTooLarge",
        "MetadataNul",
        "EmptyMultipart",
        "BadFormatMarker",
        "MessageTooLarge",
        "ChecksumMismatch",
        "MalformedBeacon",
    ];
}
