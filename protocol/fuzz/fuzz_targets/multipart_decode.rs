//! Fuzzes the framework multipart profile decoder: any byte string must decode to its parts or a
//! typed `ProtocolError`, and never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zlink_protocol::multipart::decode_parts;

fuzz_target!(|data: &[u8]| {
    let _ = decode_parts(data);
});
