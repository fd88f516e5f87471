//! A raw ZeroMQ peer against a real MeshNode on 127.0.0.1: the admission proof (wire §4), the
//! validation every inbound service record goes through before a handler can see it (wire §2
//! decode order), the sequence and connection-generation fences (transport header, wire §5),
//! and seeded random frames.
//!
//! The raw peer speaks the transport header and the service record codec by hand, without any
//! MeshNode code on its side, so it can send what a MeshNode never would: a record that breaks
//! exactly one rule, a skipped sequence number, a record of a replaced connection epoch, noise.
//! The tests at the end guard two bugs this peer found: a spoofed `source` and an application
//! record stamped with less charge than its size (flow control bypass).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::rng::TestRng;
use common::{Echo, SECRET, WAIT};
use tokio::sync::mpsc;
use zlink::call::error::CallError;
use zlink::mesh::auth::{MeshSecret, random_bytes};
use zlink::mesh::config::{CAPABILITY, FlowConfig};
use zlink::mesh::handler::RAW_CONTENT_TYPE;
use zlink::mesh::{Handlers, ManualPeer, MeshNode, MeshNodeConfig, PeerState};
use zlink::transport::header::{Header, Packed, Stamp, split_batch};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    Admit, CommandBody, Hello, NodeDescriptor, NodeFence, NodeRequest, NodeSend, ObjectRole,
    OperationId, RejectReason, RequestHeader, RuntimeState, Topology,
};
use zlink_protocol::record::{Leg, Record, WireContext};

/// The raw peer's RID: its ZeroMQ routing identity and the RID its descriptor claims.
const RAW_RID: &str = "raw-peer";
/// The raw peer's lifecycle generation (non-zero, ≤ i64::MAX).
const RAW_LIFECYCLE: u64 = 0x0123_4567_89ab_cdef;
/// Packet name of the raw handler the node under test registers.
const RAW_PACKET: &str = "test.Raw";
/// Default seed of the random-frame test (`ZLINK_TEST_SEED` overrides it), so a failure
/// replays exactly.
const FUZZ_SEED: u64 = 0x5eed_2a1e_f00d_0f0f;

/// The raw peer never answers liveness probes: the node under test gets a liveness deadline
/// longer than any test, so the raw connection is never declared dead while a case runs.
fn patient_config(rid: &str) -> MeshNodeConfig {
    let mut c = common::config("m", rid);
    c.timings.probe_interval = Duration::from_secs(5);
    c.timings.liveness_deadline = Duration::from_secs(120);
    c
}

/// Handlers with a raw one-way handler for [`RAW_PACKET`] that reports every delivery.
fn raw_sink(mut h: Handlers) -> (Handlers, mpsc::UnboundedReceiver<(NodeFence, Bytes)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    h.on_send_raw(RAW_PACKET, move |ctx, payload| {
        let _ = tx.send(((*ctx.source).clone(), payload));
        std::future::ready(Ok::<(), CallError>(()))
    });
    (h, rx)
}

/// The next payload the raw handler received (panics after [`WAIT`]).
async fn next_delivery(rx: &mut mpsc::UnboundedReceiver<(NodeFence, Bytes)>) -> (NodeFence, Bytes) {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("no delivery to the raw handler within WAIT")
        .unwrap()
}

/// Per-kind increase of the node's protocol error counters between two snapshots.
fn error_delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(kind, n)| {
            let d = n - before.get(kind).copied().unwrap_or(0);
            (d > 0).then(|| (kind.clone(), d))
        })
        .collect()
}

fn one(kind: &str) -> BTreeMap<String, u64> {
    BTreeMap::from([(kind.to_owned(), 1)])
}

/// Charge of a record: its byte size, as a MeshNode sender computes it.
fn charge_of(record: &[Vec<u8>]) -> u32 {
    let bytes: usize = record.iter().map(Vec::len).sum();
    u32::try_from(bytes)
        .unwrap_or(u32::MAX)
        .min(FlowConfig::default().window_bytes)
        .max(1)
}

/// A hand-driven ROUTER socket playing a MeshNode's peer on the real wire.
struct RawPeer {
    socket: zmq::Socket,
    /// The node's routing identity.
    node_rid: Vec<u8>,
    /// The node's fence: the `target` of every application record.
    node: NodeFence,
    /// What the raw peer claims in `hello`.
    descriptor: NodeDescriptor,
    /// Nonces of the last handshake (acceptor, dialer).
    nonces: ([u8; 32], [u8; 32]),
    /// Connection generation issued by the last `admit` (0 before).
    generation: u64,
    /// Sequence number of the next record we send on `generation`.
    next_seq: u64,
    /// Send every message inside a one-frame batch (as MeshNodes do) instead of as plain
    /// frames.
    batched: bool,
}

impl RawPeer {
    /// Connect to `node` and wait for its greeting.
    fn connect(node: &MeshNode) -> Self {
        let ctx = zmq::Context::new();
        let socket = ctx.socket(zmq::ROUTER).unwrap();
        socket.set_identity(RAW_RID.as_bytes()).unwrap();
        socket.set_probe_router(true).unwrap();
        // A send to an unknown identity fails instead of vanishing.
        socket.set_router_mandatory(true).unwrap();
        socket.set_linger(0).unwrap();
        socket.set_rcvtimeo(50).unwrap();
        socket.set_sndtimeo(5_000).unwrap();
        socket.connect(node.endpoint()).unwrap();
        let mut peer = Self {
            socket,
            node_rid: node.rid().as_bytes().to_vec(),
            node: NodeFence {
                rid: node.rid().to_owned().into(),
                lifecycle_generation: node.lifecycle_generation(),
            },
            descriptor: NodeDescriptor {
                mesh_name: "m".into(),
                node: NodeFence {
                    rid: RAW_RID.into(),
                    lifecycle_generation: RAW_LIFECYCLE,
                },
                descriptor_revision: 1,
                endpoint: "tcp://127.0.0.1:1".into(),
                security_identity: "raw-peer-identity".into(),
                object_role: ObjectRole::Server,
                state: RuntimeState::Serving,
                application_version: 1,
                maintenance_wave: String::new(),
                placement_weight: 100,
                entry_spot_id: String::new(),
                channels: vec![],
                object_capabilities: vec![],
            },
            nonces: ([0; 32], [0; 32]),
            generation: 0,
            next_seq: 0,
            batched: false,
        };
        peer.nonces.0 = peer.await_greeting();
        peer
    }

    fn fence(&self) -> NodeFence {
        self.descriptor.node.clone()
    }

    /// Send `[node_rid, frames...]` as one message.
    fn send_raw(&self, frames: Vec<Vec<u8>>) {
        let mut msg = Vec::with_capacity(frames.len() + 1);
        msg.push(self.node_rid.clone());
        if self.batched && !frames.is_empty() {
            msg.push(Packed::from_frames(&frames).unwrap().into_frame());
        } else {
            msg.extend(frames);
        }
        self.socket.send_multipart(msg, 0).unwrap();
    }

    /// Send a record behind `header`.
    fn send_with(&self, header: Header, record: Vec<Vec<u8>>) {
        let mut frames = Vec::with_capacity(record.len() + 1);
        frames.push(header.encode());
        frames.extend(record);
        self.send_raw(frames);
    }

    /// The stamp of the next record on the current connection, consuming its sequence number.
    fn take_stamp(&mut self, charge: u32) -> Stamp {
        let stamp = Stamp {
            generation: self.generation,
            seq: self.next_seq,
            charge,
        };
        self.next_seq += 1;
        stamp
    }

    /// Send a record on the current connection with the next sequence number and its charge.
    fn send_next(&mut self, leg: fn(Stamp) -> Header, record: Vec<Vec<u8>>) -> Stamp {
        let stamp = self.take_stamp(charge_of(&record));
        self.send_with(leg(stamp), record);
        stamp
    }

    /// Receive until `pick` accepts a message from the node (panics after [`WAIT`]). Probe
    /// frames and undecodable headers are skipped; so is everything `pick` declines.
    fn recv_until<T>(
        &self,
        what: &str,
        mut pick: impl FnMut(&Header, &[Vec<u8>]) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + WAIT;
        // The test body runs on the runtime's `block_on` thread; blocking here (in 50 ms steps)
        // must not hold a worker the node's tasks need.
        tokio::task::block_in_place(|| {
            while Instant::now() < deadline {
                let Ok(msg) = self.socket.recv_multipart(0) else {
                    continue;
                };
                let Some((from, frames)) = msg.split_first() else {
                    continue;
                };
                if *from != self.node_rid {
                    continue;
                }
                // The node's pump may coalesce several messages into one batch.
                let frames = frames.iter().map(|f| Bytes::copy_from_slice(f)).collect();
                let Ok(messages) = split_batch(frames) else {
                    continue;
                };
                for m in messages {
                    let m: Vec<Vec<u8>> = m.iter().map(|f| f.to_vec()).collect();
                    let [first, rest @ ..] = m.as_slice() else {
                        continue;
                    };
                    let Ok(header) = Header::decode(first) else {
                        continue;
                    };
                    if let Some(v) = pick(&header, rest) {
                        return v;
                    }
                }
            }
            panic!("raw peer: no {what} from the node within {WAIT:?}");
        })
    }

    /// Discard everything the node sent so far (credits, acks, resets), without waiting.
    fn drain(&self) {
        while self.socket.recv_multipart(zmq::DONTWAIT).is_ok() {}
    }

    fn await_greeting(&self) -> [u8; 32] {
        let node_rid = self.node.rid.clone();
        self.recv_until("greeting", |h, _| match h {
            Header::Greeting { nonce, rid, .. } if *rid == node_rid => Some(*nonce),
            _ => None,
        })
    }

    /// Announce a new pipe (the PROBE_ROUTER empty message): the node ends the current epoch
    /// of this identity and greets again.
    fn reprobe(&mut self) {
        self.send_raw(vec![Vec::new()]);
        self.nonces.0 = self.await_greeting();
    }

    /// Send `hello` proven with `secret` and return the node's answer (admit or reject).
    fn handshake(&mut self, secret: &MeshSecret) -> CommandBody {
        let acceptor = self.nonces.0;
        let dialer = random_bytes::<32>().unwrap();
        self.nonces.1 = dialer;
        let hello = Hello {
            capability: CAPABILITY.into(),
            topology: Topology::RouteMesh,
            channel_name: String::new(),
            descriptor: self.descriptor.clone(),
            max_message_bytes: 0,
            nonce: dialer,
            proof: secret.hello_proof(&acceptor, &dialer, &self.descriptor, CAPABILITY),
        };
        let record = Record::new(CommandBody::Hello(hello))
            .encode(WireContext::route_mesh(Leg::Request))
            .unwrap();
        self.send_with(Header::Request(Stamp::UNADMITTED), record);
        let answer = self.recv_until("admit or reject", |h, frames| {
            if *h != Header::Reply(Stamp::UNADMITTED) {
                return None;
            }
            let r = Record::decode(frames, WireContext::route_mesh(Leg::Reply)).ok()?;
            matches!(r.body, CommandBody::Admit(_) | CommandBody::Reject(_)).then_some(r.body)
        });
        if let CommandBody::Admit(a) = &answer {
            self.generation = a.connection_generation;
            self.next_seq = 1;
        }
        answer
    }

    /// Handshake with the node's own secret; panics unless admitted.
    fn admit(&mut self) -> Admit {
        match self.handshake(&MeshSecret::from_bytes(SECRET).unwrap()) {
            CommandBody::Admit(a) => a,
            other => panic!("raw peer not admitted: {other:?}"),
        }
    }

    /// A valid `nodeSend` to the node carrying `payload` for [`RAW_PACKET`].
    fn node_send(&self, payload: &[u8]) -> Vec<Vec<u8>> {
        Record::new(CommandBody::NodeSend(NodeSend {
            source: self.fence(),
            target: self.node.clone(),
        }))
        .with_payload(TypedPayload::new(
            RAW_PACKET,
            RAW_CONTENT_TYPE,
            payload.to_vec(),
        ))
        .encode(WireContext::route_mesh(Leg::Send))
        .unwrap()
    }

    /// A valid `nodeRequest` (request leg) to the node.
    fn node_request(&self, payload: &[u8]) -> Vec<Vec<u8>> {
        Record::new(CommandBody::NodeRequest(NodeRequest {
            request: RequestHeader {
                operation_id: OperationId { high: 1, low: 2 },
                reply_route_id: 3,
                correlation_id: "raw-correlation".into(),
                deadline_unix_ms: u64::MAX,
            },
            source: self.fence(),
            target: self.node.clone(),
        }))
        .with_payload(TypedPayload::new(
            RAW_PACKET,
            RAW_CONTENT_TYPE,
            payload.to_vec(),
        ))
        .encode(WireContext::route_mesh(Leg::Request))
        .unwrap()
    }

    /// A valid `admit` (reply leg), as the raw peer would answer a hello.
    fn admit_record(&self) -> Vec<Vec<u8>> {
        Record::new(CommandBody::Admit(Admit {
            descriptor: self.descriptor.clone(),
            connection_generation: 7,
            receive_chunk_limit_bytes: 0,
            max_message_bytes: 0,
            nonce: [1; 32],
            proof: [2; 32],
        }))
        .encode(WireContext::route_mesh(Leg::Reply))
        .unwrap()
    }
}

/// A node under test with the raw handler, and a raw peer admitted to it.
async fn node_with_admitted_raw_peer() -> (
    MeshNode,
    RawPeer,
    mpsc::UnboundedReceiver<(NodeFence, Bytes)>,
) {
    let (h, rx) = raw_sink(Handlers::new());
    let node = common::start(patient_config("node-x"), h).await;
    let mut peer = RawPeer::connect(&node);
    peer.admit();
    node.wait_ready(RAW_RID, WAIT).await.unwrap();
    (node, peer, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_peer_that_proves_the_secret_is_admitted_and_its_node_send_reaches_the_handler() {
    let (h, mut rx) = raw_sink(Handlers::new());
    let node = common::start(patient_config("node-x"), h).await;
    let mut peer = RawPeer::connect(&node);
    let admit = peer.admit();

    // The node's admit proves the same secret back, bound to this generation.
    let secret = MeshSecret::from_bytes(SECRET).unwrap();
    let (acceptor, dialer) = peer.nonces;
    assert_eq!(admit.nonce, acceptor);
    assert_eq!(admit.descriptor.node, peer.node);
    assert!(secret.verify_admit(
        &dialer,
        &acceptor,
        &admit.descriptor,
        CAPABILITY,
        admit.connection_generation,
        &admit.proof
    ));

    let snap = node.wait_ready(RAW_RID, WAIT).await.unwrap();
    assert_eq!(snap.state, PeerState::Ready);
    assert_eq!(
        snap.connection_generation,
        Some(admit.connection_generation)
    );
    assert_eq!(node.metrics().admitted.load(Ordering::Relaxed), 1);

    peer.send_next(Header::Send, peer.node_send(b"hello from raw"));
    let (source, payload) = next_delivery(&mut rx).await;
    assert_eq!(source, peer.fence());
    assert_eq!(&payload[..], b"hello from raw");
    assert_eq!(node.metrics().delivered.load(Ordering::Relaxed), 1);
    assert!(node.metrics().protocol_errors().is_empty());
    node.shutdown().await;
}

/// One record that breaks exactly one wire rule, and the `ProtocolError::kind` it must raise.
struct MalformedCase {
    name: String,
    leg: fn(Stamp) -> Header,
    record: Vec<Vec<u8>>,
    kind: &'static str,
}

/// Every malformed record the node must refuse, built from valid encodings by mutation.
fn malformed_cases(peer: &RawPeer) -> Vec<MalformedCase> {
    let mut cases = Vec::new();
    let mut case = |name: String, leg: fn(Stamp) -> Header, record, kind| {
        cases.push(MalformedCase {
            name,
            leg,
            record,
            kind,
        });
    };
    let send = |name: &str| peer.node_send(format!("malformed: {name}").as_bytes());
    let with_frame0 = |name: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let mut record = send(name);
        f(&mut record[0]);
        record
    };

    // Wrong leg: the transport header's leg contradicts the command's schema legs.
    case(
        "nodeRequest body on the send leg".into(),
        Header::Send,
        peer.node_request(b"malformed: nodeRequest on send"),
        "WrongLeg",
    );
    case(
        "nodeSend body on the request leg".into(),
        Header::Request,
        send("nodeSend on request"),
        "WrongLeg",
    );
    case(
        "admit on the request leg".into(),
        Header::Request,
        peer.admit_record(),
        "WrongLeg",
    );
    // Frame 0 head.
    for id in [7u8, 32, 54, 255] {
        let name = format!("reserved command id {id}");
        let record = with_frame0(&name, &|f| f[3] = id);
        case(name, Header::Send, record, "ReservedCommand");
    }
    case(
        "command id 0".into(),
        Header::Send,
        with_frame0("command 0", &|f| f[3] = 0),
        "UnknownCommand",
    );
    case(
        "bad magic 5A 4E".into(),
        Header::Send,
        with_frame0("bad magic", &|f| f[1] = 0x4e),
        "BadMagic",
    );
    case(
        "wire major 2".into(),
        Header::Send,
        with_frame0("major 2", &|f| f[2] = 2),
        "UnsupportedVersion",
    );
    // Flags.
    for bit in [0x10u8, 0x80] {
        let name = format!("undefined flag 0x{bit:02x}");
        let record = with_frame0(&name, &|f| f[4] |= bit);
        case(name, Header::Send, record, "UndefinedFlags");
    }
    for bit in [0x02u8, 0x08] {
        let name = format!("flag 0x{bit:02x} that nodeSend does not allow");
        let record = with_frame0(&name, &|f| f[4] |= bit);
        case(name, Header::Send, record, "FlagNotAllowed");
    }
    // Body.
    case(
        "one trailing byte after the body".into(),
        Header::Send,
        with_frame0("trailing", &|f| f.push(0)),
        "TrailingBytes",
    );
    case(
        "body cut by one byte".into(),
        Header::Send,
        with_frame0("truncated", &|f| {
            f.pop();
        }),
        "Incomplete",
    );
    // Frame count.
    case(
        "metadata flag without a metadata frame".into(),
        Header::Send,
        with_frame0("metadata flag", &|f| f[4] |= 0x01),
        "WrongFrameCount",
    );
    let mut extra = send("extra frame");
    extra.push(extra[1].clone());
    case(
        "an extra frame after the payload".into(),
        Header::Send,
        extra,
        "WrongFrameCount",
    );
    let mut missing = send("missing payload");
    missing.truncate(1);
    case(
        "the required payload frame missing".into(),
        Header::Send,
        missing,
        "WrongFrameCount",
    );
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_malformed_record_is_counted_by_kind_never_handled_and_the_connection_stays_usable() {
    let (node, mut peer, mut rx) = node_with_admitted_raw_peer().await;
    let generation = peer.generation;
    let cases = malformed_cases(&peer);
    assert!(cases.len() >= 19);
    // Every case runs three times: first before any valid `NodeSend` of this epoch was
    // delivered, then after one was, then inside a batch frame (as MeshNodes send). A
    // delivered tail-less `NodeSend` primes the receiver's fast paths (a byte-identical frame
    // 0 skips decoding it; in a batch the frames are not even made into `Bytes`), which must
    // reject exactly the same records.
    let cases = cases.into_iter().flat_map(|c| {
        let again = |how: &str| MalformedCase {
            name: format!("{} ({how})", c.name),
            leg: c.leg,
            record: c.record.clone(),
            kind: c.kind,
        };
        let (primed, batched) = (again("fast path primed"), again("batched"));
        [(c, false), (primed, false), (batched, true)]
    });
    for (i, (c, batched)) in cases.enumerate() {
        peer.batched = batched;
        let before = node.metrics().protocol_errors();
        peer.send_next(c.leg, c.record);
        // The reactor handles one peer's records in order: once the valid record behind the
        // malformed one reached the handler, the malformed one has been judged.
        let marker = format!("valid after case {i}");
        peer.send_next(Header::Send, peer.node_send(marker.as_bytes()));
        let (_, payload) = next_delivery(&mut rx).await;
        assert_eq!(
            &payload[..],
            marker.as_bytes(),
            "{}: the malformed record reached the handler",
            c.name
        );
        assert_eq!(
            error_delta(&before, &node.metrics().protocol_errors()),
            one(c.kind),
            "{}: protocol errors counted",
            c.name
        );
        let snap = node.peer(RAW_RID).unwrap();
        assert_eq!(snap.state, PeerState::Ready, "{}", c.name);
        assert_eq!(snap.connection_generation, Some(generation), "{}", c.name);
    }
    assert!(rx.try_recv().is_err());
    assert_eq!(node.metrics().sequence_gaps.load(Ordering::Relaxed), 0);
    node.shutdown().await;
}

/// One random message of 1..=6 frames of 0..=300 bytes. A third carry a transport header
/// fenced with the current generation and the next sequence number, so the record decoder sees
/// the random frames (half the time behind a plausible record head); the rest carry a transport
/// header of any kind with random fields, only the header's magic and version, or nothing valid.
///
/// Only an `epoch_ending` message may break the fences of the current connection (a stamp with
/// a wrong sequence number, a reset of the current generation, a charge over the window): those
/// end the epoch by design, and everything after them would only test the stale-generation drop.
///
/// Never the single empty frame: that is the PROBE_ROUTER announcement, which re-greets by
/// design and is exercised by each round's re-admission.
fn random_message(rng: &mut TestRng, peer: &mut RawPeer, epoch_ending: bool) -> Vec<Vec<u8>> {
    let count = rng.below(6) + 1;
    let mut frames: Vec<Vec<u8>> = (0..count).map(|_| rng.bytes(300)).collect();
    match rng.below(6) {
        0 | 1 => {
            if frames.len() > 1 && rng.below(2) == 0 {
                let defined = [1u8, 2, 3, 4, 5, 6, 16, 17, 20];
                let command = if rng.below(2) == 0 {
                    defined[rng.below(defined.len() as u64) as usize]
                } else {
                    rng.next_u64() as u8
                };
                let flags = if rng.below(2) == 0 {
                    0
                } else {
                    rng.below(16) as u8
                };
                let head = [0x5a, 0x4d, 1, command, flags];
                let f = &mut frames[1];
                let n = head.len().min(f.len());
                f[..n].copy_from_slice(&head[..n]);
                f.extend_from_slice(&head[n..]);
            }
            let charge = if epoch_ending && rng.below(4) == 0 {
                rng.next_u64() as u32
            } else {
                charge_of(&frames[1..])
            };
            let stamp = peer.take_stamp(charge);
            frames[0] = match rng.below(3) {
                0 => Header::Send(stamp),
                1 => Header::Request(stamp),
                _ => Header::Reply(stamp),
            }
            .encode();
        }
        2 | 3 => {
            let generation = if epoch_ending {
                peer.generation
            } else if rng.below(4) == 0 {
                0 // the pre-admission path
            } else {
                peer.generation ^ (rng.next_u64() | 1) // any other epoch
            };
            let stamp = Stamp {
                generation,
                seq: rng.below(4),
                charge: rng.next_u64() as u32,
            };
            frames[0] = match rng.below(6) {
                0 => Header::Send(stamp),
                1 => Header::Request(stamp),
                2 => Header::Reply(stamp),
                3 => Header::Credit {
                    generation,
                    limit: rng.next_u64(),
                },
                4 => Header::Greeting {
                    nonce: [rng.next_u64() as u8; 32],
                    rid: RAW_RID.into(),
                    endpoint: "tcp://127.0.0.1:1".into(),
                },
                _ => Header::Reset { generation },
            }
            .encode();
        }
        4 => {
            let mut f = b"ZT\x01".to_vec();
            f.extend(rng.bytes(40));
            frames[0] = f;
        }
        _ => {}
    }
    if frames.len() == 1 && frames[0].is_empty() {
        frames[0].push(0);
    }
    frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_frames_from_a_raw_peer_never_crash_the_node_and_request_reply_still_works() {
    let (hb, mut rx) = raw_sink(common::echo_handlers());
    let b = common::start(patient_config("node-b"), hb).await;
    let mut ca = patient_config("node-a");
    ca.manual_peers.push(ManualPeer {
        endpoint: b.endpoint().to_owned(),
        expected_rid: Some("node-b".into()),
    });
    let a = common::start(ca, Handlers::new()).await;
    a.wait_ready("node-b", WAIT).await.unwrap();
    b.wait_ready("node-a", WAIT).await.unwrap();

    let mut rng = TestRng::from_env(FUZZ_SEED);
    let mut peer = RawPeer::connect(&b);
    // 8 rounds × 250 messages, each on a freshly admitted connection; the last 25 of a round
    // may end its epoch (a reset, a sequence gap, a charge over the window).
    for round in 0..8 {
        if round > 0 {
            peer.drain();
            peer.reprobe();
        }
        peer.admit();
        for i in 0..250 {
            let msg = random_message(&mut rng, &mut peer, i >= 225);
            peer.send_raw(msg);
            if i % 50 == 49 {
                peer.drain();
            }
        }
    }
    peer.drain();

    // The node still admits the raw peer and delivers its valid records.
    peer.reprobe();
    peer.admit();
    peer.send_next(Header::Send, peer.node_send(b"after the noise"));
    assert_eq!(&next_delivery(&mut rx).await.1[..], b"after the noise");
    let errors: u64 = b.metrics().protocol_errors().values().sum();
    assert!(
        errors > 100,
        "seed {:#x}: the noise never reached the decoders",
        rng.seed()
    );

    // And two real MeshNodes still do a request/reply.
    a.wait_ready("node-b", WAIT).await.unwrap();
    let reply: Echo = a
        .request(
            "node-b",
            &Echo {
                text: "still alive".into(),
                n: 41,
            },
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(
        reply,
        Echo {
            text: "still alive".into(),
            n: 42
        }
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_proven_with_another_secret_is_rejected_as_authentication_failed() {
    let (h, mut rx) = raw_sink(Handlers::new());
    let node = common::start(patient_config("node-x"), h).await;
    let mut peer = RawPeer::connect(&node);
    let wrong = MeshSecret::from_bytes(b"another-mesh-secret-0123456789").unwrap();
    match peer.handshake(&wrong) {
        CommandBody::Reject(r) => assert_eq!(r.reason, RejectReason::AuthenticationFailed),
        other => panic!("expected a reject, got {other:?}"),
    }
    assert_eq!(node.metrics().rejected.load(Ordering::Relaxed), 1);
    assert_eq!(node.metrics().admitted.load(Ordering::Relaxed), 0);
    assert_ne!(node.peer(RAW_RID).map(|p| p.state), Some(PeerState::Ready));

    // Records the rejected peer stamps with a made-up generation are not admitted traffic.
    peer.generation = 99;
    peer.next_seq = 1;
    peer.send_next(Header::Send, peer.node_send(b"from a rejected peer"));
    let deadline = Instant::now() + WAIT;
    while node.metrics().unadmitted.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The reactor dropped it before dispatch: counting it was the last thing it did with it.
    assert_eq!(node.metrics().unadmitted.load(Ordering::Relaxed), 1);
    assert!(rx.try_recv().is_err());
    assert_eq!(node.metrics().delivered.load(Ordering::Relaxed), 0);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_gap_drops_the_record_and_the_epoch_and_the_node_sends_a_reset() {
    let (node, mut peer, mut rx) = node_with_admitted_raw_peer().await;
    let generation = peer.generation;
    peer.send_next(Header::Send, peer.node_send(b"seq 1"));
    assert_eq!(&next_delivery(&mut rx).await.1[..], b"seq 1");

    let before = node.metrics().protocol_errors();
    peer.next_seq += 1; // skip seq 2
    let gap = peer.send_next(Header::Send, peer.node_send(b"seq 3 after a gap"));
    assert_eq!(gap.seq, 3);
    let reset = peer.recv_until("reset", |h, _| match h {
        Header::Reset { generation } => Some(*generation),
        _ => None,
    });
    assert_eq!(reset, generation);
    assert_eq!(node.metrics().sequence_gaps.load(Ordering::Relaxed), 1);
    assert_eq!(
        error_delta(&before, &node.metrics().protocol_errors()),
        one("sequence_gap")
    );
    let snap = node
        .wait_peer(RAW_RID, WAIT, |p| p.state != PeerState::Ready)
        .await
        .unwrap();
    assert_eq!(snap.state, PeerState::NotConnected);
    assert_eq!(snap.connection_generation, None);

    // A new epoch works, and the record behind the gap never reached the handler.
    peer.reprobe();
    let admit = peer.admit();
    assert_ne!(admit.connection_generation, generation);
    peer.send_next(Header::Send, peer.node_send(b"new epoch seq 1"));
    assert_eq!(&next_delivery(&mut rx).await.1[..], b"new epoch seq 1");
    assert!(rx.try_recv().is_err());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_a_replaced_connection_generation_is_dropped_and_counted_as_stale() {
    let (node, mut peer, mut rx) = node_with_admitted_raw_peer().await;
    let old = peer.generation;
    peer.send_next(Header::Send, peer.node_send(b"old epoch"));
    assert_eq!(&next_delivery(&mut rx).await.1[..], b"old epoch");

    // A new pipe from the same identity replaces the epoch.
    peer.reprobe();
    let current = peer.admit().connection_generation;
    assert_ne!(current, old);
    node.wait_peer(RAW_RID, WAIT, |p| p.connection_generation == Some(current))
        .await
        .unwrap();

    let stale_before = node.metrics().stale_generation.load(Ordering::Relaxed);
    let record = peer.node_send(b"stamped with the old generation");
    let charge = charge_of(&record);
    peer.send_with(
        Header::Send(Stamp {
            generation: old,
            seq: 2,
            charge,
        }),
        record,
    );
    // The stale record took no sequence number: seq 1 of the current epoch is still next.
    peer.send_next(Header::Send, peer.node_send(b"current epoch seq 1"));
    assert_eq!(&next_delivery(&mut rx).await.1[..], b"current epoch seq 1");
    assert_eq!(
        node.metrics().stale_generation.load(Ordering::Relaxed) - stale_before,
        1
    );
    assert!(rx.try_recv().is_err());
    assert_eq!(node.metrics().sequence_gaps.load(Ordering::Relaxed), 0);
    assert_eq!(node.peer(RAW_RID).unwrap().state, PeerState::Ready);
    node.shutdown().await;
}

// ---- regressions found by the raw peer --------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_send_whose_source_is_not_the_admitted_peer_never_reaches_the_handler() {
    let (node, mut peer, mut rx) = node_with_admitted_raw_peer().await;
    let before = node.metrics().protocol_errors();
    let spoofed = Record::new(CommandBody::NodeSend(NodeSend {
        source: NodeFence {
            rid: "impersonated-node".into(),
            lifecycle_generation: 5,
        },
        target: peer.node.clone(),
    }))
    .with_payload(TypedPayload::new(
        RAW_PACKET,
        RAW_CONTENT_TYPE,
        &b"from someone else"[..],
    ))
    .encode(WireContext::route_mesh(Leg::Send))
    .unwrap();
    peer.send_next(Header::Send, spoofed);
    peer.send_next(Header::Send, peer.node_send(b"honest"));
    let (source, payload) = next_delivery(&mut rx).await;
    // Regression: the spoofed record used to be delivered with `MessageContext::source` =
    // impersonated-node; now it is a `source_mismatch` protocol error.
    assert_eq!(
        (source, &payload[..]),
        (peer.fence(), &b"honest"[..]),
        "a record claiming another source reached the handler"
    );
    assert!(!error_delta(&before, &node.metrics().protocol_errors()).is_empty());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_record_stamped_without_its_charge_never_reaches_the_handler() {
    let (node, mut peer, mut rx) = node_with_admitted_raw_peer().await;
    // Regression: "free ride" used to be delivered outside the credit window; a record whose
    // charge differs from its size is now a `charge_mismatch` protocol error. Three ways in:
    // the general path; the fast path primed by the delivered "charged" record (the uncharged
    // twin of a validated frame 0); and inside batch frames, as MeshNodes send.
    for (batched, marker) in [
        (false, &b"charged"[..]),
        (false, b"charged again, fast path primed"),
        (true, b"charged, batched"),
    ] {
        peer.batched = batched;
        let before = node.metrics().protocol_errors();
        let stamp = peer.take_stamp(0);
        peer.send_with(Header::Send(stamp), peer.node_send(b"free ride"));
        peer.send_next(Header::Send, peer.node_send(marker));
        let (_, payload) = next_delivery(&mut rx).await;
        assert_eq!(
            &payload[..],
            marker,
            "an uncharged application record reached the handler"
        );
        assert_eq!(
            error_delta(&before, &node.metrics().protocol_errors()),
            one("charge_mismatch")
        );
    }
    node.shutdown().await;
}

/// wire §4 DescriptorRevision ordering, from a raw peer: a higher revision applies; the same
/// revision with the same body is idempotent; a lower revision, or the same revision with
/// another body, is a protocol error that changes nothing — and the connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_updates_apply_only_in_revision_order() {
    use zlink_protocol::generated::Update;
    let (node, mut peer, mut rx) = node_with_admitted_raw_peer().await;
    let sender = peer.fence();
    let update = |revision: u64, weight: u16| {
        Record::new(CommandBody::Update(Update {
            sender: sender.clone(),
            descriptor_revision: revision,
            state: RuntimeState::Serving,
            placement_weight: weight,
            placement_capacity: 0,
            maintenance_wave: String::new(),
            channel_weights: vec![],
        }))
        .encode(WireContext::route_mesh(Leg::Send))
        .unwrap()
    };
    let view = |node: &MeshNode| {
        let d = node.peer(RAW_RID).unwrap().descriptor.unwrap();
        (d.descriptor_revision, d.placement_weight)
    };
    let errors = |node: &MeshNode| {
        node.metrics()
            .protocol_errors()
            .get("descriptor_revision_order")
            .copied()
            .unwrap_or(0)
    };
    // Higher applies.
    peer.send_next(Header::Send, update(3, 50));
    // Same revision, same body: no change, no error.
    peer.send_next(Header::Send, update(3, 50));
    // Lower revision: error, no change.
    peer.send_next(Header::Send, update(2, 10));
    // Same revision, other body: error, no change.
    peer.send_next(Header::Send, update(3, 70));
    // The connection still carries application records afterwards.
    peer.send_next(Header::Send, peer.node_send(b"after"));
    let (_, payload) = next_delivery(&mut rx).await;
    assert_eq!(&payload[..], b"after");
    assert_eq!(view(&node), (3, 50));
    assert_eq!(errors(&node), 2);
    assert_eq!(
        node.metrics()
            .updates_applied
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // A higher revision still applies after the refused ones.
    peer.send_next(Header::Send, update(4, 60));
    peer.send_next(Header::Send, peer.node_send(b"again"));
    let _ = next_delivery(&mut rx).await;
    assert_eq!(view(&node), (4, 60));
    node.shutdown().await;
}

/// A peer may select this node for a Channel only if its descriptor announced a Server
/// membership of it (glossary §6, §7 "Select-one"). `node-x` serves no Channel: a
/// `channelSend` is a counted `not_channel_server` protocol error that reaches no handler —
/// not even the node-direct handler of the same packet name (separate namespaces) — and a
/// `channelRequest` gets exactly one terminal `NotFound` reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_records_for_a_channel_the_node_does_not_serve_never_reach_a_handler() {
    use zlink_protocol::generated::{ChannelRequest, ChannelSend, TerminalStatus};
    let (node, mut peer, mut rx) = node_with_admitted_raw_peer().await;
    let before = node.metrics().protocol_errors();
    let payload = TypedPayload::new(RAW_PACKET, RAW_CONTENT_TYPE, &b"selected"[..]);
    let send = Record::new(CommandBody::ChannelSend(ChannelSend {
        channel_name: "work".into(),
        source: peer.fence(),
        target: peer.node.clone(),
    }))
    .with_payload(payload.clone())
    .encode(WireContext::route_mesh(Leg::Send))
    .unwrap();
    peer.send_next(Header::Send, send);
    let request = Record::new(CommandBody::ChannelRequest(ChannelRequest {
        request: RequestHeader {
            operation_id: OperationId { high: 9, low: 9 },
            reply_route_id: 9,
            correlation_id: "chan-correlation".into(),
            deadline_unix_ms: u64::MAX,
        },
        channel_name: "work".into(),
        source: peer.fence(),
        target: peer.node.clone(),
    }))
    .with_payload(payload)
    .encode(WireContext::route_mesh(Leg::Request))
    .unwrap();
    peer.send_next(Header::Request, request);
    let status = peer.recv_until("channel reply", |h, frames| {
        if !matches!(h, Header::Reply(_)) {
            return None;
        }
        match Record::decode(frames, WireContext::route_mesh(Leg::Reply))
            .ok()?
            .body
        {
            CommandBody::Reply(r) if r.correlation_id == "chan-correlation" => Some(r.status),
            _ => None,
        }
    });
    assert_eq!(status, TerminalStatus::NotFound);
    // An honest node-direct send afterwards is the first (and only) delivery.
    peer.send_next(Header::Send, peer.node_send(b"direct"));
    let (_, got) = next_delivery(&mut rx).await;
    assert_eq!(&got[..], b"direct");
    assert_eq!(
        error_delta(&before, &node.metrics().protocol_errors()),
        BTreeMap::from([("not_channel_server".to_owned(), 2)])
    );
    node.shutdown().await;
}
