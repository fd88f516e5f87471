//! Codec benchmarks: encode and decode of a typical `actorRequest` record and of a 64 KiB
//! `relocationState` chunk, each next to a `memcpy` of the same bytes measured in the same run
//! (the baseline `docs/benchmarks.md` reports ratios against).
//!
//! `decode` copies byte fields out of the frames; `decode_shared` is the zero-copy form the
//! transport uses (frames arrive as shared `Bytes`).
//!
//! ```text
//! cargo bench -p zlink-protocol --bench codec
//! ```

#![allow(clippy::unwrap_used, missing_docs)] // bench harness: criterion macros generate undocumented fns

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    ActorRequest, NodeFence, ObjectKind, OperationId, RelocationDataChunkV1, RelocationState,
    RequestHeader, RouteFence, SenderRole,
};
use zlink_protocol::metadata::Metadata;
use zlink_protocol::record::{CommandBody, Leg, Record, WireContext};

fn actor_request() -> Record {
    let body = CommandBody::ActorRequest(ActorRequest {
        request: RequestHeader {
            operation_id: OperationId {
                high: 0x0123_4567_89ab_cdef,
                low: 42,
            },
            reply_route_id: 7,
            correlation_id: "req-000042".into(),
            deadline_unix_ms: 1_795_000_000_000,
        },
        route: RouteFence {
            object_kind: ObjectKind::Actor,
            object_id: "player-8f14e45f".into(),
            object_generation: 3,
            target_node: NodeFence {
                rid: "zone-5f2b7c1e-8a4d-4c3b-9e21-0d6f4a7b9c10".into(),
                lifecycle_generation: 0x1234_5678_9abc,
            },
            authority_owner_generation: 9,
            owner_lease_generation: 11,
        },
        source: NodeFence {
            rid: "gate-0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5".into(),
            lifecycle_generation: 0x0fed_cba9,
        },
    });
    let metadata = Metadata::new([(
        "trace".to_owned(),
        "00-4bf92f3577b34da6-00f067aa0ba902b7-01".to_owned(),
    )])
    .expect("valid metadata");
    Record::new(body)
        .with_metadata(metadata)
        .with_payload(TypedPayload::new(
            "Move",
            "application/json",
            br#"{"x":12,"y":-3,"speed":4.5}"#.to_vec(),
        ))
}

fn relocation_state() -> Record {
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 31 % 251) as u8).collect();
    Record::new(CommandBody::RelocationState(RelocationState {
        relocation_id: [0x11; 16],
        target_attempt_generation: 1,
        coordinator_fence: 2,
        object_kind: ObjectKind::Spot,
        object_id: "room-7".into(),
        object_generation: 4,
        sender_role: SenderRole::Source,
        chunk: RelocationDataChunkV1 {
            chunk_ordinal: 0,
            data: data.into(),
        },
    }))
}

fn bench_record(c: &mut Criterion, name: &str, rec: &Record, ctx: WireContext) {
    let frames = rec.encode(ctx).expect("encodes");
    let total: usize = frames.iter().map(Vec::len).sum();
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(total as u64));
    g.bench_function(BenchmarkId::new("memcpy", total), |b| {
        b.iter(|| {
            let copies: Vec<Vec<u8>> = black_box(&frames).iter().map(|f| f.to_vec()).collect();
            black_box(copies)
        })
    });
    g.bench_function(BenchmarkId::new("encode", total), |b| {
        b.iter(|| black_box(black_box(rec).encode(ctx).expect("encodes")))
    });
    g.bench_function(BenchmarkId::new("decode", total), |b| {
        b.iter(|| black_box(Record::decode(black_box(&frames), ctx).expect("decodes")))
    });
    let shared: Vec<Bytes> = frames.iter().map(|f| Bytes::from(f.clone())).collect();
    g.bench_function(BenchmarkId::new("decode_shared", total), |b| {
        b.iter(|| black_box(Record::decode_shared(black_box(&shared), ctx).expect("decodes")))
    });
    g.finish();
}

fn codec(c: &mut Criterion) {
    bench_record(
        c,
        "actor_request",
        &actor_request(),
        WireContext::route_mesh(Leg::Request),
    );
    bench_record(
        c,
        "relocation_state_64k",
        &relocation_state(),
        WireContext::route_mesh(Leg::Send),
    );
}

criterion_group!(benches, codec);
criterion_main!(benches);
