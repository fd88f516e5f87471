//! Fuzzes the ClientServer channel envelope decoder (wire §4): bytes 0..2 give frame 0's
//! length (big-endian `u16`, capped at what remains), frame 0 follows, the rest is frame 1.
//! Any input must decode to a header or a typed `ChannelEnvelopeError`, never panic; a decoded
//! header must re-encode and decode to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zlink_protocol::channel_envelope::{ChannelHeader, decode_record};

fuzz_target!(|data: &[u8]| {
    let (len, rest) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), rest),
        _ => (0, data),
    };
    let (frame0, frame1) = rest.split_at(len.min(rest.len()));
    if let Ok(h) = decode_record(&[frame0, frame1]) {
        let again = h.encode().expect("a decoded header re-encodes");
        assert_eq!(ChannelHeader::decode(&again).expect("re-decodes"), h);
    }
});
