//! Fuzzes the service record decoder (wire §2, §3) in every topology and leg, and the durable
//! format decoder.
//!
//! Input layout: byte 0 gives the frame count (`byte % 4 + 1`, so 1..=4); then each frame is a
//! big-endian `u16` length followed by that many bytes. A truncated length or body keeps whatever
//! bytes remain, so short inputs still reach the decoder. The same frames are decoded once per
//! (topology, leg) pair, because admission rules (allowed commands, flags, payload rule) differ
//! between them. The whole input is also given to `durable::decode_any`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zlink_protocol::durable;
use zlink_protocol::record::{Leg, Record, Topology, WireContext};

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

fn topology(index: usize) -> Topology {
    match index {
        0 => Topology::RouteMesh,
        _ => Topology::ClientServer,
    }
}

fn leg(index: usize) -> Leg {
    match index {
        0 => Leg::Send,
        1 => Leg::Request,
        _ => Leg::Reply,
    }
}

fuzz_target!(|data: &[u8]| {
    let frames = split_frames(data);
    if !frames.is_empty() {
        for t in 0..2 {
            for l in 0..3 {
                let ctx = WireContext {
                    topology: topology(t),
                    leg: leg(l),
                };
                let _ = Record::decode(&frames, ctx);
            }
        }
    }
    let _ = durable::decode_any(data);
});
