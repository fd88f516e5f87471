//! Property tests for the record codec and durable formats.
//!
//! * Arbitrary bytes and arbitrary frame lists never panic any decoder.
//! * Mutations of every valid golden record either fail with a typed error or decode to a record
//!   whose re-encoding is canonical: `encode(decode(x))` decodes to the same record and frame 0
//!   is byte-identical (the body encoding has exactly one form).
//! * Hand-built strategies for `actorRequest` and `relocationState` round-trip encode → decode.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::Value;
use zlink_protocol::codec::hex;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    ActorRequest, DurableValue, NodeFence, ObjectKind, OperationId, RelocationDataChunkV1,
    RelocationState, RequestHeader, RouteFence, SenderRole,
};
use zlink_protocol::metadata::Metadata;
use zlink_protocol::record::{CommandBody, Leg, Record, Topology, WireContext};

struct Sample {
    frames: Vec<Vec<u8>>,
    ctx: WireContext,
}

fn samples() -> &'static [Sample] {
    static SAMPLES: OnceLock<Vec<Sample>> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/commands");
        let mut out = Vec::new();
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .expect("golden/commands")
            .map(|e| e.expect("entry").path())
            .collect();
        paths.sort();
        for p in paths {
            let doc: Value =
                serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
            for item in doc["valid"].as_array().into_iter().flatten() {
                let frames = item["frames"]
                    .as_array()
                    .expect("frames")
                    .iter()
                    .map(|f| hex::decode(f.as_str().expect("hex")).expect("hex"))
                    .collect();
                let topology: Topology =
                    serde_json::from_value(item["topology"].clone()).expect("topology");
                let leg: Leg = serde_json::from_value(item["leg"].clone()).expect("leg");
                out.push(Sample {
                    frames,
                    ctx: WireContext { topology, leg },
                });
            }
        }
        assert!(out.len() >= 40, "expected the golden fixtures");
        out
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { frame: usize, pos: usize, xor: u8 },
    Truncate { frame: usize, len: usize },
    Insert { frame: usize, pos: usize, byte: u8 },
    DropFrame { frame: usize },
    AddFrame(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<usize>(), 1..=255u8).prop_map(|(frame, pos, xor)| Mutation::Flip { frame, pos, xor }),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(frame, len)| Mutation::Truncate { frame, len }),
        2 => (any::<usize>(), any::<usize>(), any::<u8>()).prop_map(|(frame, pos, byte)| Mutation::Insert { frame, pos, byte }),
        1 => any::<usize>().prop_map(|frame| Mutation::DropFrame { frame }),
        1 => proptest::collection::vec(any::<u8>(), 0..16).prop_map(Mutation::AddFrame),
    ]
}

fn apply(frames: &mut Vec<Vec<u8>>, m: &Mutation) {
    if frames.is_empty() {
        return;
    }
    let n = frames.len();
    match m {
        Mutation::Flip { frame, pos, xor } => {
            let f = &mut frames[frame % n];
            if !f.is_empty() {
                let i = pos % f.len();
                f[i] ^= xor;
            }
        }
        Mutation::Truncate { frame, len } => {
            let f = &mut frames[frame % n];
            let l = len % (f.len() + 1);
            f.truncate(l);
        }
        Mutation::Insert { frame, pos, byte } => {
            let f = &mut frames[frame % n];
            let i = pos % (f.len() + 1);
            f.insert(i, *byte);
        }
        Mutation::DropFrame { frame } => {
            frames.remove(frame % n);
        }
        Mutation::AddFrame(bytes) => frames.push(bytes.clone()),
    }
}

fn canonical(frames: &[Vec<u8>], ctx: WireContext) -> Result<(), TestCaseError> {
    if let Ok(rec) = Record::decode(frames, ctx) {
        let re = rec
            .encode(ctx)
            .map_err(|e| TestCaseError::fail(format!("re-encode failed: {e}")))?;
        prop_assert_eq!(&re[0], &frames[0], "frame 0 is not canonical");
        let again = Record::decode(&re, ctx)
            .map_err(|e| TestCaseError::fail(format!("re-decode failed: {e}")))?;
        prop_assert_eq!(again, rec);
    }
    Ok(())
}

fn leg() -> impl Strategy<Value = Leg> {
    prop_oneof![Just(Leg::Send), Just(Leg::Request), Just(Leg::Reply)]
}

fn topology() -> impl Strategy<Value = Topology> {
    prop_oneof![Just(Topology::RouteMesh), Just(Topology::ClientServer)]
}

fn ident() -> impl Strategy<Value = String> {
    // 1..=255 UTF-8 bytes: up to 63 chars of up to 4 bytes each.
    "\\PC{1,63}".prop_filter("1..=255 bytes", |s| !s.is_empty() && s.len() <= 255)
}

fn node() -> impl Strategy<Value = NodeFence> {
    (ident(), 1..=i64::MAX as u64).prop_map(|(rid, g)| NodeFence {
        rid: rid.into(),
        lifecycle_generation: g,
    })
}

fn route(kind: ObjectKind) -> impl Strategy<Value = RouteFence> {
    (ident(), 1..=u64::MAX, node(), 1..=u64::MAX, 1..=u64::MAX).prop_map(
        move |(id, og, n, aog, olg)| RouteFence {
            object_kind: kind,
            object_id: id,
            object_generation: og,
            target_node: n,
            authority_owner_generation: aog,
            owner_lease_generation: olg,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_frames_never_panic(
        frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..4),
        head in proptest::collection::vec(any::<u8>(), 0..64),
        leg in leg(),
        topology in topology(),
    ) {
        let ctx = WireContext { topology, leg };
        let _ = Record::decode(&frames, ctx);
        // Bias towards a valid head so body decoders get exercised too.
        let mut biased = frames.clone();
        let mut f0 = vec![0x5a, 0x4d, 0x01];
        f0.extend_from_slice(&head);
        biased.insert(0, f0);
        let _ = Record::decode(&biased, ctx);
    }

    #[test]
    fn arbitrary_bytes_never_panic_durable_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..256), magic in 0usize..5) {
        let _ = DurableValue::decode_any(&bytes);
        let name = DurableValue::FORMAT_NAMES[magic];
        let mut prefixed = match name {
            "instance-activation-recovery-v1" => b"ZLIA\x01".to_vec(),
            "relocation-envelope-v1" => b"ZRE1\x01".to_vec(),
            "relocation-data-chunk-v1" => b"ZRD1\x01".to_vec(),
            "relocation-manifest-v1" => b"ZRM1\x01".to_vec(),
            _ => b"ZRP1\x01".to_vec(),
        };
        prefixed.extend_from_slice(&bytes);
        let _ = DurableValue::decode_named(name, &prefixed);
    }

    #[test]
    fn mutated_golden_records_fail_cleanly_or_reencode_canonically(
        index in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let sample = &samples()[index.index(samples().len())];
        let mut frames = sample.frames.clone();
        for m in &mutations {
            apply(&mut frames, m);
        }
        canonical(&frames, sample.ctx)?;
    }

    #[test]
    fn actor_request_round_trips(
        route in route(ObjectKind::Actor),
        source in node(),
        high in any::<u64>(),
        low in 1..=u64::MAX,
        reply in 1..=u64::MAX,
        corr in "[!-~]{1,64}",
        deadline in 1..=u64::MAX,
        payload in proptest::collection::vec(any::<u8>(), 0..512),
        meta in proptest::collection::vec(("[a-z]{1,8}", "[a-z0-9]{0,16}"), 0..8),
    ) {
        let body = CommandBody::ActorRequest(ActorRequest {
            request: RequestHeader {
                operation_id: OperationId { high, low },
                reply_route_id: reply,
                correlation_id: corr,
                deadline_unix_ms: deadline,
            },
            route,
            source,
        });
        let mut rec = Record::new(body).with_payload(TypedPayload::new("Move", "application/json", payload));
        if !meta.is_empty() {
            rec = rec.with_metadata(Metadata::new(meta).map_err(|e| TestCaseError::fail(e.to_string()))?);
        }
        let ctx = WireContext::route_mesh(Leg::Request);
        let frames = rec.encode(ctx).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(Record::decode(&frames, ctx).map_err(|e| TestCaseError::fail(e.to_string()))?, rec);
    }

    #[test]
    fn relocation_state_round_trips(
        id in any::<[u8; 16]>().prop_filter("non-zero", |b| b.iter().any(|x| *x != 0)),
        attempt in 1..=u64::MAX,
        fence in 1..=u64::MAX,
        object_id in ident(),
        generation in 1..=u64::MAX,
        ordinal in any::<u32>(),
        data in proptest::collection::vec(any::<u8>(), 0..4096),
    ) {
        let body = CommandBody::RelocationState(RelocationState {
            relocation_id: id,
            target_attempt_generation: attempt,
            coordinator_fence: fence,
            object_kind: ObjectKind::Spot,
            object_id,
            object_generation: generation,
            sender_role: SenderRole::Source,
            chunk: RelocationDataChunkV1 { chunk_ordinal: ordinal, data: data.into() },
        });
        let rec = Record::new(body);
        let ctx = WireContext::route_mesh(Leg::Send);
        let frames = rec.encode(ctx).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(frames.len(), 1);
        prop_assert_eq!(Record::decode(&frames, ctx).map_err(|e| TestCaseError::fail(e.to_string()))?, rec);
    }
}

#[test]
fn every_golden_record_reencodes_canonically() {
    for s in samples() {
        canonical(&s.frames, s.ctx).expect("canonical");
    }
}
