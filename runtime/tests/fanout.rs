//! Classic fanout over real ZeroMQ PUB/SUB sockets on 127.0.0.1 (glossary §4 "Classic fanout",
//! §6 "Fanout publisher descriptor", "Automatic discovery", "Ready target", §7 "Liveness와
//! liveness beacon"; wire §5 "Classic fanout beacon", "Subscriber ready 판정").
//!
//! Timings are milliseconds (beacon every 50 ms, not-ready 300 ms after the last valid
//! receive) instead of the spec's 5 s / 15 s; every wait is event-driven with a generous
//! timeout, never a fixed sleep that the assertion depends on.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use zlink::call::error::ErrorKind;
use zlink::fanout::descriptor::list_publishers;
use zlink::fanout::record::TopicError;
use zlink::fanout::{
    FanoutError, FanoutHandlers, Publisher, PublisherConfig, PublisherSnapshot, PublisherSource,
    Subscriber, SubscriberConfig,
};
use zlink::mesh::JsonMessage;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::fanout::{BEACON_PAYLOAD, BEACON_TOPIC};
use zlink_protocol::metadata::Metadata;
use zlink_store::MemoryStore;
use zlink_store::types::{DescriptorKind, LeaseRead, StoreTime};

const WAIT: Duration = Duration::from_secs(10);
const BEACON: Duration = Duration::from_millis(50);
const NOT_READY_AFTER: Duration = Duration::from_millis(300);
const RESERVED: &str = "\u{1}ZLF1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Price {
    seq: u64,
    symbol: String,
}
impl JsonMessage for Price {
    const PACKET_NAME: &'static str = "test.Price";
}

fn pub_config() -> PublisherConfig {
    let mut c = PublisherConfig::new("prices");
    c.beacon_interval = BEACON;
    c.lease_ttl = Duration::from_secs(2);
    c.lease_renew = Duration::from_millis(300);
    c
}

fn sub_config(endpoints: &[&str]) -> SubscriberConfig {
    let mut c = SubscriberConfig::new("prices");
    c.manual_endpoints = endpoints.iter().map(|e| (*e).to_owned()).collect();
    c.not_ready_after = NOT_READY_AFTER;
    c.discovery_poll = Duration::from_millis(50);
    c
}

/// Handlers that record every `Price` sequence number of topic "prices" (and the publisher's
/// lifecycle generation) in arrival order.
/// Sequence numbers with the lifecycle generation of the publisher they came from.
type Seen = watch::Receiver<Vec<(u64, Option<u64>)>>;

fn collecting_handlers() -> (FanoutHandlers, Seen) {
    let (tx, rx) = watch::channel(Vec::new());
    let tx = Arc::new(tx);
    let mut h = FanoutHandlers::new();
    h.on_event("prices", move |ctx, p: Price| {
        let tx = Arc::clone(&tx);
        async move {
            tx.send_modify(|v| v.push((p.seq, ctx.publisher.lifecycle_generation)));
            Ok(())
        }
    });
    (h, rx)
}

/// Counters are bumped just after the handler returns: wait for a counter to reach its value.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The store-time expiry of `owner_id`'s live lease.
async fn lease_expiry(store: &dyn DiscoveryBackend, owner_id: &str) -> StoreTime {
    match store.read_lease(owner_id).await.unwrap() {
        LeaseRead::Found {
            lease_expires_at, ..
        } => lease_expires_at,
        other => panic!("no live lease of {owner_id}: {other:?}"),
    }
}

async fn wait_len(rx: &mut Seen, n: usize) -> Vec<u64> {
    tokio::time::timeout(WAIT, rx.wait_for(|v| v.len() >= n))
        .await
        .expect("events delivered in time")
        .unwrap()
        .iter()
        .map(|(s, _)| *s)
        .collect()
}

/// wire §5: the first valid beacon makes a publisher ready — no application record needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_becomes_ready_from_beacons_alone() {
    let publisher = Publisher::start(pub_config(), None).await.unwrap();
    let (h, _rx) = collecting_handlers();
    let sub = Subscriber::start(sub_config(&[publisher.endpoint()]), h, None).unwrap();
    assert!(!sub.publishers()[0].ready, "not ready before any receive");

    let snap = sub
        .wait_all_ready(1, WAIT)
        .await
        .expect("ready from beacons");
    assert!(snap[0].last_valid_receive.is_some());
    assert_eq!(snap[0].source, PublisherSource::Manual);
    assert_eq!(snap[0].publisher.endpoint, publisher.endpoint());
    let m = sub.metrics();
    assert!(
        m.beacons_received
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    assert_eq!(
        m.records_received
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert!(m.became_ready.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    // The snapshot taken when it turned ready holds that publisher's own count.
    assert_eq!(snap[0].became_ready, 1);
    assert_eq!(
        publisher
            .metrics()
            .published
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert!(
        publisher
            .metrics()
            .beacons_sent
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    sub.shutdown().await;
    publisher.shutdown().await;
}

/// wire §5: a publisher turns not-ready `not_ready_after` after its last valid receive, and only
/// that publisher: a second one that keeps beaconing stays ready. A frozen publisher (socket
/// open, no beacons) and a closed one both go silent.
///
/// The deadline here is 1 s (20 beacon intervals), so a loaded machine does not make the
/// beaconing publisher flap, and the assertions read each publisher's own transition counts
/// (`PublisherSnapshot::became_ready` / `became_not_ready`), not the subscriber-wide counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_publisher_turns_not_ready_while_the_other_stays_ready() {
    const SILENCE: Duration = Duration::from_secs(1);
    let a = Publisher::start(pub_config(), None).await.unwrap();
    let b = Publisher::start(pub_config(), None).await.unwrap();
    let (h, _rx) = collecting_handlers();
    let mut cfg = sub_config(&[a.endpoint(), b.endpoint()]);
    cfg.not_ready_after = SILENCE;
    let sub = Subscriber::start(cfg, h, None).unwrap();
    sub.wait_all_ready(2, WAIT).await.expect("both ready");
    let of = |snap: &[PublisherSnapshot], ep: &str| -> PublisherSnapshot {
        snap.iter()
            .find(|p| p.publisher.endpoint == ep)
            .unwrap()
            .clone()
    };

    // Frozen: A stops beaconing.
    a.set_beacons_paused(true);
    let snap = sub
        .wait_until(WAIT, |p| !of(p, a.endpoint()).ready)
        .await
        .expect("A turns not-ready");
    let (sa, sb) = (of(&snap, a.endpoint()), of(&snap, b.endpoint()));
    // The transition happens only once the deadline after A's last valid receive has passed.
    assert!(
        sa.last_valid_receive.unwrap().elapsed() >= SILENCE,
        "not-ready before the deadline"
    );
    assert_eq!((sa.became_ready, sa.became_not_ready), (1, 1));
    assert!(sb.ready, "B is unaffected");
    assert_eq!((sb.became_ready, sb.became_not_ready), (1, 0));
    // B keeps being ready for two more deadlines: the subscriber goes on receiving B's beacons
    // until two deadlines from now, and B never turned not-ready meanwhile (its own transition
    // count sees even a flap that came and went).
    let until = Instant::now() + SILENCE * 2;
    eventually("B's beacons for two more deadlines", || {
        of(&sub.publishers(), b.endpoint())
            .last_valid_receive
            .is_some_and(|t| t >= until)
    })
    .await;
    let sb = of(&sub.publishers(), b.endpoint());
    assert!(sb.ready, "B must stay ready while it beacons");
    assert_eq!((sb.became_ready, sb.became_not_ready), (1, 0));

    // A beacons again: ready again, a second transition of A only.
    a.set_beacons_paused(false);
    let snap = sub.wait_all_ready(2, WAIT).await.expect("A ready again");
    assert_eq!(of(&snap, a.endpoint()).became_ready, 2);
    assert_eq!(of(&snap, b.endpoint()).became_ready, 1);

    // Closed: A shuts down; again only A turns not-ready.
    a.shutdown().await;
    let snap = sub
        .wait_until(WAIT, |p| !of(p, a.endpoint()).ready)
        .await
        .expect("closed A turns not-ready");
    assert_eq!(of(&snap, a.endpoint()).became_not_ready, 2);
    let sb = of(&snap, b.endpoint());
    assert!(sb.ready);
    assert_eq!((sb.became_ready, sb.became_not_ready), (1, 0));
    sub.shutdown().await;
    b.shutdown().await;
}

/// wire §5 "Subscriber ready 판정": the first valid *application record* makes a publisher
/// ready too — here the publisher never sends a beacon the subscriber could see (paused before
/// the subscriber exists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_becomes_ready_from_an_application_record_alone() {
    use std::sync::atomic::Ordering::Relaxed;
    let publisher = Publisher::start(pub_config(), None).await.unwrap();
    // The one beacon sent at start had no subscriber to reach.
    publisher.set_beacons_paused(true);
    let (h, mut rx) = collecting_handlers();
    let sub = Subscriber::start(sub_config(&[publisher.endpoint()]), h, None).unwrap();
    // PUB/SUB drops records sent before the subscription arrives, so publish until one lands.
    let deadline = Instant::now() + WAIT;
    let mut seq = 0;
    while !sub.publishers()[0].ready {
        assert!(Instant::now() < deadline, "never ready");
        publisher
            .publish(
                "prices",
                &Price {
                    seq,
                    symbol: "R".into(),
                },
            )
            .await
            .unwrap();
        seq += 1;
        let _ = sub.wait_until(BEACON, |p| p[0].ready).await;
    }
    let snap = &sub.publishers()[0];
    assert_eq!(snap.became_ready, 1);
    assert_eq!(
        sub.metrics().beacons_received.load(Relaxed),
        0,
        "no beacon seen"
    );
    assert!(sub.metrics().records_received.load(Relaxed) >= 1);
    wait_len(&mut rx, 1).await;
    sub.shutdown().await;
    publisher.shutdown().await;
}

/// A raw XPUB socket (a PUB that also reports subscriptions, so the test knows the subscriber
/// is connected without sending it anything valid) bound on a free port.
fn rogue_publisher(ctx: &zmq::Context) -> (zmq::Socket, String) {
    let s = ctx.socket(zmq::XPUB).unwrap();
    s.set_rcvtimeo(10_000).unwrap();
    s.bind("tcp://127.0.0.1:0").unwrap();
    let ep = s.get_last_endpoint().unwrap().unwrap();
    (s, ep)
}

/// Wait until the rogue publisher has seen the subscriber's beacon-topic and "prices"
/// subscriptions (they arrive in byte order, the beacon topic first).
fn wait_subscribed(s: &zmq::Socket) {
    let mut want: Vec<Vec<u8>> = vec![
        [&[1u8][..], &BEACON_TOPIC[..]].concat(),
        b"\x01prices".to_vec(),
    ];
    while !want.is_empty() {
        let m = s.recv_bytes(0).expect("subscription within 10 s");
        want.retain(|w| *w != m);
    }
}

/// wire §5 / glossary §7: a record on the reserved topic whose frame count or payload is not
/// exactly the beacon is a protocol error — counted by kind, never delivered, and it does not
/// make the publisher ready. A malformed application record is likewise counted, not
/// delivered. A valid beacon afterwards proves the connection was live all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_reserved_topic_records_are_protocol_errors_and_never_ready_a_publisher() {
    use std::sync::atomic::Ordering::Relaxed;
    let ctx = zmq::Context::new();
    let (rogue, ep) = rogue_publisher(&ctx);
    // One raw handler on "prices": it counts every record that reaches it. A reserved-topic
    // record can never match it (handlers match topics exactly), so a mis-delivered one would
    // show as `records_received` / `no_handler`, both asserted to stay 0.
    let (tx, rx) = watch::channel(0u32);
    let tx = Arc::new(tx);
    let mut h = FanoutHandlers::new();
    h.on_event_raw("prices", "test.Price", move |_, _| {
        let tx = Arc::clone(&tx);
        async move {
            tx.send_modify(|n| *n += 1);
            Ok(())
        }
    });
    let sub = Subscriber::start(sub_config(&[&ep]), h, None).unwrap();
    let rogue = tokio::task::spawn_blocking(move || {
        wait_subscribed(&rogue);
        rogue
    })
    .await
    .unwrap();

    let envelope = TypedPayload::new("test.Price", "application/octet-stream", &b"x"[..])
        .encode()
        .unwrap();
    // (a) reserved topic + wrong payload, (b) three frames, (c) the topic alone, (d) a
    // reserved-topic record carrying a valid application envelope, (e) an application record
    // with a truncated envelope, (f) four frames on an application topic.
    let records: Vec<Vec<Vec<u8>>> = vec![
        vec![BEACON_TOPIC.to_vec(), vec![0x5A, 0x46, 0x01, 0x02]],
        vec![
            BEACON_TOPIC.to_vec(),
            BEACON_PAYLOAD.to_vec(),
            BEACON_PAYLOAD.to_vec(),
        ],
        vec![BEACON_TOPIC.to_vec()],
        vec![BEACON_TOPIC.to_vec(), envelope.clone()],
        vec![b"prices".to_vec(), envelope[..envelope.len() - 1].to_vec()],
        vec![b"prices".to_vec(), vec![], vec![], envelope.clone()],
    ];
    for r in &records {
        rogue.send_multipart(r, 0).unwrap();
    }
    eventually("six protocol errors", || {
        sub.metrics().protocol_error_total() == 6
    })
    .await;
    let errors = sub.metrics().protocol_errors();
    assert_eq!(errors.get("MalformedBeacon"), Some(&4), "{errors:?}");
    assert_eq!(errors.get("Incomplete"), Some(&1), "{errors:?}");
    assert_eq!(errors.get("WrongFrameCount"), Some(&1), "{errors:?}");
    let p = &sub.publishers()[0];
    assert!(
        !p.ready,
        "malformed records must not make the publisher ready"
    );
    assert!(p.last_valid_receive.is_none());
    assert_eq!(sub.metrics().beacons_received.load(Relaxed), 0);
    assert_eq!(sub.metrics().records_received.load(Relaxed), 0);

    // A valid beacon and a valid record on the same connection: ready, and the record (only
    // it) reaches its handler.
    rogue
        .send_multipart([&BEACON_TOPIC[..], &BEACON_PAYLOAD[..]], 0)
        .unwrap();
    rogue
        .send_multipart([b"prices".to_vec(), envelope], 0)
        .unwrap();
    sub.wait_all_ready(1, WAIT)
        .await
        .expect("a valid beacon makes it ready");
    let mut rx = rx;
    tokio::time::timeout(WAIT, rx.wait_for(|n| *n >= 1))
        .await
        .unwrap()
        .unwrap();
    eventually("delivered", || sub.metrics().delivered.load(Relaxed) == 1).await;
    assert_eq!(*rx.borrow(), 1, "only the valid record was delivered");
    assert_eq!(sub.metrics().records_received.load(Relaxed), 1);
    assert_eq!(sub.metrics().no_handler.load(Relaxed), 0);
    assert_eq!(sub.metrics().protocol_error_total(), 6);
    sub.shutdown().await;
}

/// wire §5: an application topic equal to the reserved topic is refused before transport with a
/// typed error; nothing reaches a raw SUB socket subscribed to the reserved topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_publish_on_the_reserved_topic_is_rejected_before_transport() {
    use std::sync::atomic::Ordering::Relaxed;
    let publisher = Publisher::start(pub_config(), None).await.unwrap();
    let ctx = zmq::Context::new();
    let raw = ctx.socket(zmq::SUB).unwrap();
    raw.set_rcvtimeo(10_000).unwrap();
    raw.set_subscribe(&BEACON_TOPIC).unwrap();
    raw.connect(publisher.endpoint()).unwrap();
    // Connected once a beacon arrives.
    let raw = tokio::task::spawn_blocking(move || {
        raw.recv_multipart(0).expect("a beacon within 10 s");
        raw
    })
    .await
    .unwrap();
    publisher.set_beacons_paused(true);

    let err = publisher
        .publish(
            RESERVED,
            &Price {
                seq: 1,
                symbol: "X".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, FanoutError::Topic(TopicError::Reserved)),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::InvalidOperation);
    let raw_payload = TypedPayload::new("p", "application/octet-stream", &b"x"[..]);
    let err = publisher
        .publish_payload(RESERVED, &raw_payload, None)
        .await
        .unwrap_err();
    assert!(matches!(err, FanoutError::Topic(TopicError::Reserved)));
    assert!(matches!(
        publisher.publish_payload("", &raw_payload, None).await,
        Err(FanoutError::Topic(TopicError::Empty))
    ));
    assert_eq!(publisher.metrics().refused.load(Relaxed), 3);
    assert_eq!(publisher.metrics().published.load(Relaxed), 0);

    // A legal topic that *starts* with the reserved bytes reaches the raw socket through its
    // prefix subscription; everything before it can only be beacons sent before the pause.
    let marker = format!("{RESERVED}x");
    publisher
        .publish_payload(&marker, &raw_payload, None)
        .await
        .unwrap();
    let seen = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        loop {
            let m = raw.recv_multipart(0).expect("the marker within 10 s");
            let done = m[0] != BEACON_TOPIC;
            seen.push(m);
            if done {
                return seen;
            }
        }
    })
    .await
    .unwrap();
    let (last, before) = seen.split_last().unwrap();
    assert_eq!(last[0], marker.as_bytes());
    for m in before {
        assert_eq!(m, &vec![BEACON_TOPIC.to_vec(), BEACON_PAYLOAD.to_vec()]);
    }
    // The counter is bumped just after the socket write, which the raw socket may beat.
    eventually("published", || {
        publisher.metrics().published.load(Relaxed) == 1
    })
    .await;
    publisher.shutdown().await;
}

async fn delivery_in_publish_order(subscribers: usize) {
    const N: u64 = 500;
    let publisher = Publisher::start(pub_config(), None).await.unwrap();
    let mut subs = Vec::new();
    for _ in 0..subscribers {
        let (h, rx) = collecting_handlers();
        let sub = Subscriber::start(sub_config(&[publisher.endpoint()]), h, None).unwrap();
        subs.push((sub, rx));
    }
    for (sub, _) in &subs {
        sub.wait_all_ready(1, WAIT).await.expect("ready");
    }
    for seq in 0..N {
        publisher
            .publish(
                "prices",
                &Price {
                    seq,
                    symbol: "ZL".into(),
                },
            )
            .await
            .unwrap();
    }
    // A topic nobody subscribed to is filtered by ZeroMQ and never reaches the subscriber; a
    // topic that *extends* a subscribed one passes ZeroMQ's prefix filter and, with no handler
    // of its own, counts as `no_handler`. A marker record after both: once it has run, both
    // were handled (one dispatcher, arrival order), so the exact counts below mean something.
    for topic in ["other", "pricesX"] {
        publisher
            .publish(
                topic,
                &Price {
                    seq: u64::MAX,
                    symbol: String::new(),
                },
            )
            .await
            .unwrap();
    }
    publisher
        .publish(
            "prices",
            &Price {
                seq: N,
                symbol: "marker".into(),
            },
        )
        .await
        .unwrap();
    for (sub, rx) in &mut subs {
        let got = wait_len(rx, N as usize + 1).await;
        assert_eq!(
            got,
            (0..=N).collect::<Vec<_>>(),
            "publish order per publisher"
        );
        let m = sub.metrics();
        eventually("delivered", || {
            m.delivered.load(std::sync::atomic::Ordering::Relaxed) == N + 1
        })
        .await;
        assert_eq!(m.no_handler.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(
            m.records_received
                .load(std::sync::atomic::Ordering::Relaxed),
            N + 2,
            "\"other\" never arrives"
        );
        assert_eq!(m.protocol_error_total(), 0);
    }
    for (sub, _) in &subs {
        sub.shutdown().await;
    }
    publisher.shutdown().await;
}

/// Events reach the typed handler of one subscriber in publish order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_one_subscriber_in_publish_order() {
    delivery_in_publish_order(1).await;
}

/// Every one of three subscribers gets every event, each in publish order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_three_subscribers_in_publish_order() {
    delivery_in_publish_order(3).await;
}

/// Metadata, packet name, topic and publisher identity reach the handler context; an event
/// whose JSON does not decode as the handler's type never reaches the application function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_context_carries_metadata_and_undecodable_events_are_counted() {
    use std::sync::atomic::Ordering::Relaxed;
    let publisher = Publisher::start(pub_config(), None).await.unwrap();
    let (tx, mut rx) = watch::channel(Vec::<(String, String, Option<String>, u64)>::new());
    let tx = Arc::new(tx);
    let mut h = FanoutHandlers::new();
    h.on_event("prices", move |ctx, p: Price| {
        let tx = Arc::clone(&tx);
        async move {
            tx.send_modify(|v| {
                v.push((
                    ctx.topic.to_string(),
                    ctx.packet_name.to_string(),
                    ctx.metadata.find("trace").map(str::to_owned),
                    p.seq,
                ));
            });
            Ok(())
        }
    });
    let sub = Subscriber::start(sub_config(&[publisher.endpoint()]), h, None).unwrap();
    sub.wait_all_ready(1, WAIT).await.unwrap();
    let bad = TypedPayload::new(
        "test.Price",
        zlink::mesh::handler::JSON_CONTENT_TYPE,
        &b"{\"seq\":\"not a number\"}"[..],
    );
    publisher
        .publish_payload("prices", &bad, None)
        .await
        .unwrap();
    let good = zlink::mesh::handler::encode_json(&Price {
        seq: 7,
        symbol: "A".into(),
    })
    .unwrap();
    let md = Metadata::new([("trace".to_owned(), "t-1".to_owned())]).unwrap();
    publisher
        .publish_payload("prices", &good, Some(&md))
        .await
        .unwrap();
    let got = tokio::time::timeout(WAIT, rx.wait_for(|v| !v.is_empty()))
        .await
        .unwrap()
        .unwrap()
        .clone();
    assert_eq!(
        got,
        vec![(
            "prices".to_owned(),
            "test.Price".to_owned(),
            Some("t-1".to_owned()),
            7
        )]
    );
    assert_eq!(sub.metrics().undecodable.load(Relaxed), 1);
    eventually("delivered", || sub.metrics().delivered.load(Relaxed) == 1).await;
    sub.shutdown().await;
    publisher.shutdown().await;
}

/// glossary §6: the subscriber finds the publisher through its descriptor in the Location
/// Store; a publisher that shuts down gracefully removes its descriptor and is dropped; a
/// publisher restarted under the same RID with a new lifecycle generation replaces the old
/// socket, and its events carry the new generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_finds_the_publisher_and_follows_a_new_lifecycle() {
    let store: Arc<dyn DiscoveryBackend> = Arc::new(MemoryStore::default());
    let mut cfg = pub_config();
    cfg.rid = Some("pub-a".into());
    let first = Publisher::start(cfg.clone(), Some(Arc::clone(&store)))
        .await
        .unwrap();
    let d = first.descriptor().unwrap();
    assert_eq!(
        (
            d.publisher_rid.as_str(),
            d.endpoint.as_str(),
            d.descriptor_revision
        ),
        ("pub-a", first.endpoint(), 1)
    );
    assert!(d.lifecycle_generation != 0 && d.lifecycle_generation <= i64::MAX as u64);

    let (h, mut rx) = collecting_handlers();
    let sub = Subscriber::start(sub_config(&[]), h, Some(Arc::clone(&store))).unwrap();
    let snap = sub
        .wait_all_ready(1, WAIT)
        .await
        .expect("discovered and ready");
    assert_eq!(snap[0].source, PublisherSource::Discovered);
    assert_eq!(snap[0].publisher.rid.as_deref(), Some("pub-a"));
    assert_eq!(
        snap[0].publisher.lifecycle_generation,
        Some(first.lifecycle_generation())
    );
    first
        .publish(
            "prices",
            &Price {
                seq: 1,
                symbol: "A".into(),
            },
        )
        .await
        .unwrap();
    wait_len(&mut rx, 1).await;

    // Restart under the same RID while the first still runs: the new lifecycle's descriptor
    // replaces the old one, and the subscriber swaps sockets.
    let second = Publisher::start(cfg.clone(), Some(Arc::clone(&store)))
        .await
        .unwrap();
    assert_ne!(second.lifecycle_generation(), first.lifecycle_generation());
    let want = second.lifecycle_generation();
    let snap = sub
        .wait_until(WAIT, |p| {
            p.len() == 1 && p[0].ready && p[0].publisher.lifecycle_generation == Some(want)
        })
        .await
        .expect("new lifecycle picked up");
    assert_eq!(snap[0].publisher.endpoint, second.endpoint());
    // The old lifecycle's socket is gone: its events no longer arrive; the new one's do.
    first
        .publish(
            "prices",
            &Price {
                seq: 2,
                symbol: "A".into(),
            },
        )
        .await
        .unwrap();
    second
        .publish(
            "prices",
            &Price {
                seq: 3,
                symbol: "A".into(),
            },
        )
        .await
        .unwrap();
    tokio::time::timeout(WAIT, rx.wait_for(|v| v.iter().any(|(s, _)| *s == 3)))
        .await
        .unwrap()
        .unwrap();
    let got = rx.borrow().clone();
    assert_eq!(got.last(), Some(&(3, Some(want))));
    assert!(!got.iter().any(|(s, _)| *s == 2), "{got:?}");
    // The stale first lifecycle cannot remove the new descriptor on its way out.
    first.shutdown().await;
    let left = list_publishers(&*store, "prices").await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].key.kind, DescriptorKind::FanoutPublisher);
    assert_eq!(left[0].lifecycle_generation, want);

    // Graceful shutdown removes the descriptor; the subscriber drops the publisher.
    second.shutdown().await;
    assert!(list_publishers(&*store, "prices").await.unwrap().is_empty());
    sub.wait_until(WAIT, <[_]>::is_empty)
        .await
        .expect("vanished publisher dropped");
    sub.shutdown().await;
}

/// glossary §6 "Automatic discovery": a discovered publisher whose SUB socket cannot be opened
/// (here an endpoint ZeroMQ refuses to connect to) is retried on every discovery poll instead of
/// being forgotten after the first failure; each attempt is counted in `socket_errors`, and the
/// publisher never shows up as known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_retries_a_socket_that_failed_to_open() {
    use std::sync::atomic::Ordering::Relaxed;
    use zlink::fanout::descriptor::{
        DESCRIPTOR_FORMAT_VERSION, FanoutPublisherDescriptor, descriptor_key, encode_descriptor,
    };
    let store: Arc<dyn DiscoveryBackend> = Arc::new(MemoryStore::default());
    let grant = store
        .claim_lease("host-bad", Duration::from_secs(30))
        .await
        .unwrap();
    let d = FanoutPublisherDescriptor {
        v: DESCRIPTOR_FORMAT_VERSION,
        channel_name: "prices".into(),
        publisher_rid: "pub-bad".into(),
        lifecycle_generation: 5,
        descriptor_revision: 1,
        // Passes descriptor validation (tcp://), but ZeroMQ refuses the port at connect.
        endpoint: "tcp://127.0.0.1:notaport".into(),
        state: zlink_protocol::generated::RuntimeState::Serving,
        security_identity: String::new(),
        owner_id: grant.token.owner_id.clone(),
        lease_generation: grant.token.lease_generation,
    };
    store
        .publish_descriptor(
            &grant.token,
            &descriptor_key("prices", "pub-bad"),
            5,
            1,
            encode_descriptor(&d),
        )
        .await
        .unwrap();
    let (h, _rx) = collecting_handlers();
    let sub = Subscriber::start(sub_config(&[]), h, Some(Arc::clone(&store))).unwrap();
    // Discovery polls every 50 ms: three failed opens mean it retried at least twice.
    eventually("three open attempts", || {
        sub.metrics().socket_errors.load(Relaxed) >= 3
    })
    .await;
    assert!(
        sub.publishers().is_empty() || sub.publishers().iter().all(|p| !p.ready),
        "a socket that never opened is never ready"
    );
    assert_eq!(sub.metrics().descriptor_errors.load(Relaxed), 0);
    sub.shutdown().await;
}

/// wire §5 "Subscriber ready 판정" with a handler that does not return: the socket thread
/// hands batches over with `try_send`, so once the dispatcher's channel is full it keeps the
/// batch, stops reading (ZeroMQ's high-water mark holds the rest) and still runs the readiness
/// deadlines — a publisher that goes silent turns not-ready on time. (With a blocking send the
/// thread would sit in the full channel and the publisher would stay ready forever.) When the
/// handler is released, every event arrives in publish order: nothing was lost below the HWM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_handler_does_not_freeze_readiness() {
    use std::sync::atomic::Ordering::Relaxed;
    const N: u64 = 20;
    let publisher = Publisher::start(pub_config(), None).await.unwrap();
    let (gate_tx, gate_rx) = watch::channel(false);
    let (seen_tx, mut seen_rx) = watch::channel(Vec::<u64>::new());
    let seen_tx = Arc::new(seen_tx);
    let mut h = FanoutHandlers::new();
    h.on_event("prices", move |_, p: Price| {
        let (mut gate, seen) = (gate_rx.clone(), Arc::clone(&seen_tx));
        async move {
            // Blocks until the test opens the gate.
            let _ = gate.wait_for(|open| *open).await;
            seen.send_modify(|v| v.push(p.seq));
            Ok(())
        }
    });
    let mut cfg = sub_config(&[publisher.endpoint()]);
    cfg.batch = 1;
    cfg.inbound_batches = 1;
    let sub = Subscriber::start(cfg, h, None).unwrap();
    sub.wait_all_ready(1, WAIT).await.expect("ready");
    for seq in 0..N {
        publisher
            .publish(
                "prices",
                &Price {
                    seq,
                    symbol: "B".into(),
                },
            )
            .await
            .unwrap();
    }
    // One record in the blocked handler, one batch in the channel, one held by the thread.
    eventually("the socket thread stalls", || {
        sub.metrics().inbound_stalls.load(Relaxed) >= 1
    })
    .await;
    publisher.set_beacons_paused(true);
    let paused_at = Instant::now();
    let snap = sub
        .wait_until(WAIT, |p| !p[0].ready)
        .await
        .expect("not-ready while the handler is blocked");
    let took = paused_at.elapsed();
    assert!(
        took < NOT_READY_AFTER + Duration::from_secs(2),
        "not-ready late: {took:?}"
    );
    assert!(snap[0].last_valid_receive.unwrap().elapsed() >= NOT_READY_AFTER);
    assert!(seen_rx.borrow().is_empty(), "the handler is still blocked");

    // Release: everything arrives, in order, and the publisher is ready again once it beacons.
    gate_tx.send_replace(true);
    publisher.set_beacons_paused(false);
    let got = tokio::time::timeout(WAIT, seen_rx.wait_for(|v| v.len() >= N as usize))
        .await
        .expect("all events after the release")
        .unwrap()
        .clone();
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    sub.wait_all_ready(1, WAIT).await.expect("ready again");
    sub.shutdown().await;
    publisher.shutdown().await;
}

/// glossary §6 "Descriptor" (tied to the owner lease), `OwnerLease::Claim`: when the store's
/// clock passes the lease TTL, the lease and with it the descriptor lapse; the next renewal
/// finds the lease gone, claims a new one for the same owner ID and publishes the descriptor
/// again — same lifecycle generation, next revision, the new lease generation — so
/// subscribers keep finding the publisher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_reclaimed_and_the_descriptor_published_again() {
    use std::sync::atomic::Ordering::Relaxed;
    use zlink_store::clock::Clock;
    const TTL: Duration = Duration::from_secs(10);
    let (mem, clock) = MemoryStore::with_manual_clock();
    let store: Arc<dyn DiscoveryBackend> = Arc::new(mem);
    let mut cfg = pub_config();
    cfg.rid = Some("pub-lease".into());
    cfg.lease_ttl = TTL;
    cfg.lease_renew = Duration::from_millis(50);
    let publisher = Publisher::start(cfg, Some(Arc::clone(&store)))
        .await
        .unwrap();
    let first = publisher.descriptor().unwrap();
    assert_eq!(first.descriptor_revision, 1);
    let listed = list_publishers(&*store, "prices").await.unwrap();
    assert_eq!(listed.len(), 1);

    // Store time jumps past the TTL: the lease expires, and the descriptor with it.
    clock.advance(Duration::from_secs(11));
    let deadline = Instant::now() + WAIT;
    let again = loop {
        let listed = list_publishers(&*store, "prices").await.unwrap();
        if let Some(r) = listed.first()
            && r.revision == 2
        {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "descriptor never re-published");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(again.lifecycle_generation, first.lifecycle_generation);
    assert_eq!(again.owner.owner_id, first.owner_id);
    assert!(again.owner.lease_generation > first.lease_generation);
    let now = publisher.descriptor().unwrap();
    assert_eq!(now.descriptor_revision, 2);
    assert_eq!(now.lease_generation, again.owner.lease_generation);
    assert_eq!(
        zlink::fanout::descriptor::decode_descriptor(&again.content).unwrap(),
        now
    );
    assert_eq!(publisher.metrics().lease_reclaims.load(Relaxed), 1);

    // The new lease is renewed from now on: store time moves on, and a renewal at the new
    // store time pushes the lease's expiry past what the claim gave it. No second re-claim;
    // the descriptor stays listed; shutdown removes it.
    let claimed_until = lease_expiry(&*store, &first.owner_id).await;
    clock.advance(Duration::from_secs(5));
    let renewed_from = clock.now();
    let deadline = Instant::now() + WAIT;
    while lease_expiry(&*store, &first.owner_id).await < renewed_from.plus(TTL) {
        assert!(Instant::now() < deadline, "the new lease is not renewed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(lease_expiry(&*store, &first.owner_id).await > claimed_until);
    assert_eq!(list_publishers(&*store, "prices").await.unwrap().len(), 1);
    assert_eq!(publisher.metrics().lease_reclaims.load(Relaxed), 1);
    publisher.shutdown().await;
    assert!(list_publishers(&*store, "prices").await.unwrap().is_empty());
}

/// `OwnerLease::Claim`: a lease *replaced* by another claim of the same owner ID (a newer holder,
/// such as a restart of the same RID) is not fought over — the superseded publisher stops
/// renewing and never re-claims, so the newer holder's token stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_lease_is_not_reclaimed() {
    use std::sync::atomic::Ordering::Relaxed;
    let store: Arc<dyn DiscoveryBackend> = Arc::new(MemoryStore::default());
    let mut cfg = pub_config();
    cfg.rid = Some("pub-replaced".into());
    cfg.lease_renew = Duration::from_millis(20);
    let publisher = Publisher::start(cfg, Some(Arc::clone(&store)))
        .await
        .unwrap();
    let owner = publisher.descriptor().unwrap().owner_id;
    // The renewal task holds a handle on the store as long as it runs.
    let while_renewing = Arc::strong_count(&store);
    let newer = store
        .claim_lease(&owner, Duration::from_secs(30))
        .await
        .unwrap()
        .token;
    // It notices the newer holder and ends: the point past which a re-claim can no longer
    // happen (a task that re-claimed would go on renewing, and keep its handle).
    eventually("the superseded renewal task ends", || {
        Arc::strong_count(&store) == while_renewing - 1
    })
    .await;
    assert_eq!(publisher.metrics().lease_reclaims.load(Relaxed), 0);
    assert_eq!(publisher.metrics().lease_renew_failures.load(Relaxed), 1);
    match store.read_lease(&owner).await.unwrap() {
        LeaseRead::Found { token, .. } => assert_eq!(token, newer),
        other => panic!("{other:?}"),
    }
    publisher.shutdown().await;
}

/// glossary §6 "Manual endpoint" + "Automatic discovery": a publisher that is both configured
/// by hand and discovered through its descriptor gets one SUB socket, not two (two would deliver
/// every event twice); the discovered copy is skipped and counted as `duplicate_endpoints`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_endpoint_that_is_also_discovered_gets_one_socket() {
    use std::sync::atomic::Ordering::Relaxed;
    const N: u64 = 10;
    let store: Arc<dyn DiscoveryBackend> = Arc::new(MemoryStore::default());
    let publisher = Publisher::start(pub_config(), Some(Arc::clone(&store)))
        .await
        .unwrap();
    let (h, mut rx) = collecting_handlers();
    let sub = Subscriber::start(
        sub_config(&[publisher.endpoint()]),
        h,
        Some(Arc::clone(&store)),
    )
    .unwrap();
    sub.wait_all_ready(1, WAIT).await.expect("ready");
    eventually("discovery saw the duplicate", || {
        sub.metrics().duplicate_endpoints.load(Relaxed) >= 2
    })
    .await;
    let snap = sub.publishers();
    assert_eq!(snap.len(), 1, "{snap:?}");
    assert_eq!(snap[0].source, PublisherSource::Manual);
    for seq in 0..N {
        publisher
            .publish(
                "prices",
                &Price {
                    seq,
                    symbol: "D".into(),
                },
            )
            .await
            .unwrap();
    }
    wait_len(&mut rx, N as usize).await;
    // A marker after the events: every copy of them arrived before it.
    publisher
        .publish(
            "prices",
            &Price {
                seq: N,
                symbol: "D".into(),
            },
        )
        .await
        .unwrap();
    tokio::time::timeout(WAIT, rx.wait_for(|v| v.iter().any(|(s, _)| *s == N)))
        .await
        .unwrap()
        .unwrap();
    let got: Vec<u64> = rx.borrow().iter().map(|(s, _)| *s).collect();
    assert_eq!(got, (0..=N).collect::<Vec<_>>(), "each event exactly once");
    sub.shutdown().await;
    publisher.shutdown().await;
}

/// `Subscriber::start` outside a tokio runtime is a typed error, not a panic, and nothing is
/// left running.
#[test]
fn subscriber_start_outside_a_runtime_is_a_typed_error() {
    let (h, _rx) = collecting_handlers();
    let err = Subscriber::start(sub_config(&["tcp://127.0.0.1:1"]), h, None).unwrap_err();
    assert!(matches!(err, FanoutError::NoRuntime), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::InvalidOperation);
}

/// `Subscriber::shutdown` drains: records already read when it is called still reach their
/// (slow) handler, in order. A handler that never finishes is cancelled once `shutdown_drain`
/// has passed, so shutdown stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_read_records_within_a_bounded_wait() {
    use std::sync::atomic::Ordering::Relaxed;
    const N: u64 = 5;
    let publisher = Publisher::start(pub_config(), None).await.unwrap();

    // Slow handler: 50 ms per event.
    let (seen_tx, seen_rx) = watch::channel(Vec::<u64>::new());
    let seen_tx = Arc::new(seen_tx);
    let mut h = FanoutHandlers::new();
    h.on_event("prices", move |_, p: Price| {
        let seen = Arc::clone(&seen_tx);
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            seen.send_modify(|v| v.push(p.seq));
            Ok(())
        }
    });
    let sub = Subscriber::start(sub_config(&[publisher.endpoint()]), h, None).unwrap();
    sub.wait_all_ready(1, WAIT).await.expect("ready");
    for seq in 0..N {
        publisher
            .publish(
                "prices",
                &Price {
                    seq,
                    symbol: "S".into(),
                },
            )
            .await
            .unwrap();
    }
    eventually("all read", || {
        sub.metrics().records_received.load(Relaxed) == N
    })
    .await;
    assert!(seen_rx.borrow().len() < N as usize, "the handler is slower");
    sub.shutdown().await;
    assert_eq!(*seen_rx.borrow(), (0..N).collect::<Vec<_>>());
    assert_eq!(sub.metrics().delivered.load(Relaxed), N);
    assert_eq!(sub.metrics().shutdown_cancelled.load(Relaxed), 0);

    // A handler that never returns: shutdown gives up after `shutdown_drain`.
    let mut h = FanoutHandlers::new();
    h.on_event("prices", |_, _: Price| {
        std::future::pending::<Result<(), _>>()
    });
    let mut cfg = sub_config(&[publisher.endpoint()]);
    cfg.shutdown_drain = Duration::from_millis(200);
    let stuck = Subscriber::start(cfg, h, None).unwrap();
    stuck.wait_all_ready(1, WAIT).await.expect("ready");
    publisher
        .publish(
            "prices",
            &Price {
                seq: 0,
                symbol: "S".into(),
            },
        )
        .await
        .unwrap();
    eventually("read", || {
        stuck.metrics().records_received.load(Relaxed) == 1
    })
    .await;
    let started = Instant::now();
    stuck.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(stuck.metrics().shutdown_cancelled.load(Relaxed), 1);
    publisher.shutdown().await;
}

/// Pins what docs/architecture.md ("Beacon and readiness") says about subscription order:
/// ZeroMQ sends a SUB socket's subscriptions in byte order of its subscription trie, not in the
/// order they were set, so the beacon topic `01 5A 4C 46 31` reaches the publisher *before*
/// "prices" (and after its own prefix "\u{1}Z"). A beacon therefore does not prove that the
/// application subscriptions were processed. Read from a raw XPUB socket, which reports the
/// subscriptions in the order it received them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_reach_the_publisher_in_byte_order_not_in_set_order() {
    let ctx = zmq::Context::new();
    let (rogue, ep) = rogue_publisher(&ctx);
    let mut h = FanoutHandlers::new();
    for topic in ["\u{1}Z", "prices"] {
        h.on_event_raw(topic, "test.Price", |_, _| async { Ok(()) });
    }
    let sub = Subscriber::start(sub_config(&[&ep]), h, None).unwrap();
    let subscriptions = tokio::task::spawn_blocking(move || {
        (0..3)
            .map(|_| rogue.recv_bytes(0).expect("a subscription within 10 s"))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let sub_of = |t: &[u8]| [&[1u8][..], t].concat();
    assert_eq!(
        subscriptions,
        vec![
            sub_of("\u{1}Z".as_bytes()),
            sub_of(&BEACON_TOPIC),
            sub_of(b"prices"),
        ]
    );
    sub.shutdown().await;
}
