//! Fuzzes the metadata frame decoder (wire §2): any byte string must decode to a `Metadata` or a
//! typed `ProtocolError`, never panic, and never allocate past the 1,024-byte frame bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zlink_protocol::metadata::Metadata;

fuzz_target!(|data: &[u8]| {
    let _ = Metadata::decode(data);
});
