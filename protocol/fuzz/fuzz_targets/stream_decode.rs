//! Fuzzes the incremental client STREAM packet decoder.
//!
//! Input layout: byte 0 chooses where the rest of the input is split; the two pieces are fed to
//! one `StreamDecoder` one after the other, and after each piece every complete packet is pulled
//! until the decoder reports "need more bytes" (`Ok(None)`) or an error. This exercises packets
//! that straddle a read boundary, which is where incremental decoders usually go wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zlink_protocol::stream::{MaxMessageSize, StreamDecoder};

/// Pulls packets until the decoder needs more input (`true`) or fails (`false`).
///
/// Every packet consumes at least its length prefix, so a decoder can yield at most one packet
/// per input byte; more than that means it returned a packet without consuming input, which
/// would hang a real connection, so it is reported as a crash.
fn drain(decoder: &mut StreamDecoder, fed_bytes: usize) -> bool {
    for _ in 0..=fed_bytes {
        match decoder.next_packet() {
            Ok(Some(_packet)) => {}
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
    panic!("StreamDecoder yielded more packets than the {fed_bytes} bytes fed to it");
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let (first, second) = rest.split_at(usize::from(split).min(rest.len()));

    let mut decoder = StreamDecoder::new(MaxMessageSize::default());
    decoder.extend(first);
    if !drain(&mut decoder, first.len()) {
        return;
    }
    decoder.extend(second);
    drain(&mut decoder, rest.len());
});
