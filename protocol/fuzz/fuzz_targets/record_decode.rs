//! Fuzzes the service record decoder (wire §2, §3) in every topology and leg, and the durable
//! format decoder.
//!
//! Input layout: byte 0 gives the frame count (`byte % 4 + 1`, so 1..=4); then each frame is a
//! big-endian `u16` length followed by that many bytes. A truncated length or body keeps whatever
//! bytes remain, so short inputs still reach the decoder. The same frames are decoded once per
//! (topology, leg) pair, because admission rules (allowed commands, flags, payload rule) differ
//! between them. The whole input is also given to `DurableValue::decode_any`.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zlink_protocol::generated::DurableValue;
use zlink_protocol::record::{Leg, Record, Topology, WireContext};

/// Every leg a record can travel on.
const LEGS: [Leg; 3] = [Leg::Send, Leg::Request, Leg::Reply];

/// Splits `data` into 1..=4 length-prefixed frames as described in the file docs.
fn split_frames(data: &[u8]) -> Vec<&[u8]> {
    let Some((&count, mut rest)) = data.split_first() else {
        return Vec::new();
    };
    let count = usize::from(count % 4) + 1;
    let mut frames = Vec::with_capacity(count);
    for _ in 0..count {
        let len = match rest {
            [hi, lo, tail @ ..] => {
                rest = tail;
                usize::from(u16::from_be_bytes([*hi, *lo]))
            }
            _ => rest.len(),
        };
        let (frame, tail) = rest.split_at(len.min(rest.len()));
        frames.push(frame);
        rest = tail;
    }
    frames
}

fuzz_target!(|data: &[u8]| {
    let frames = split_frames(data);
    if !frames.is_empty() {
        let shared: Vec<Bytes> = frames.iter().map(|f| Bytes::copy_from_slice(f)).collect();
        for topology in Topology::ALL {
            for leg in LEGS {
                let ctx = WireContext { topology, leg };
                let copied = Record::decode(&frames, ctx);
                // The zero-copy path must agree with the copying one.
                let zero_copy = Record::decode_shared(&shared, ctx);
                assert_eq!(copied, zero_copy);
                // A decoded record re-encodes to the same frame 0 (one canonical form).
                if let Ok(rec) = copied {
                    let re = rec.encode(ctx).expect("a decoded record re-encodes");
                    assert_eq!(re[0].as_slice(), frames[0]);
                }
            }
        }
    }
    let _ = DurableValue::decode_any(data);
});
