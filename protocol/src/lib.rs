//! # zlink-protocol
//!
//! Bytes only: the service wire v1 codec (framing and schema-generated command bodies), the
//! metadata frame, typed payload envelope, framework multipart profile, Location Store authority
//! keys and identifier rules, CRC-32C, the client STREAM packet and classic fanout beacon.
//! No tokio, no sockets, no clocks.

pub mod channel_envelope;
pub mod codec;
pub mod crc;
pub mod envelope;
pub mod error;
pub mod fanout;
#[rustfmt::skip]
pub mod generated;
pub mod ids;
pub mod json;
pub mod keys;
pub mod metadata;
pub mod multipart;
pub mod record;
pub mod shared_str;
pub mod stream;

pub use error::{ProtocolError, Result};
