//! Logical Multicast across real MeshNodes on the memory Location Store (issue "Instance Spot
//! cold activation and Logical Multicast" §4; glossary §4 "Topic", "Logical Multicast",
//! "Subscription", "Publish target snapshot"):
//!
//! - a publish reaches every ready, positive-weight remote Server node of the Channel once
//!   (the weight's size does not matter) and the publisher's own matching subscriptions;
//! - each receiving node delivers to its local Spots subscribed to (Channel, topic, packet);
//! - a weight-0 member, another topic, or another packet name gets nothing;
//! - reserved topics and Channels the node is not a member of are refused before transport;
//! - subscriptions are checked at start (duplicates, Channel membership, handler).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{WAIT, config};
use serde::{Deserialize, Serialize};
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, JsonMessage, MeshNode, MeshNodeConfig};
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry, RegistryError};
use zlink::object::runtime::{ObjectRuntime, RuntimeError};
use zlink::routing::CacheConfig;
use zlink_store::MemoryStore;
use zlink_store::clock::SystemClock;
use zlink_store::types::ObjectKind;

const T: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize)]
struct Post {
    n: u64,
}
impl JsonMessage for Post {
    const PACKET_NAME: &'static str = "news.Post";
}

#[derive(Debug, Serialize, Deserialize)]
struct Other {
    n: u64,
}
impl JsonMessage for Other {
    const PACKET_NAME: &'static str = "news.Other";
}

#[derive(Debug, Serialize, Deserialize)]
struct Read;
impl JsonMessage for Read {
    const PACKET_NAME: &'static str = "news.Read";
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Seen {
    posts: Vec<u64>,
}
impl JsonMessage for Seen {
    const PACKET_NAME: &'static str = "news.Seen";
}

fn board_handlers() -> ObjectHandlers<Vec<u64>> {
    let mut h: ObjectHandlers<Vec<u64>> = ObjectHandlers::new();
    h.on_send(|ctx, p: Post| async move {
        ctx.state().push(p.n);
        Ok(())
    });
    h.on_send(|ctx, o: Other| async move {
        ctx.state().push(1000 + o.n);
        Ok(())
    });
    h.on_request(|ctx, _: Read| async move {
        Ok::<_, CallError>(Seen {
            posts: ctx.state().clone(),
        })
    });
    h
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.user_spot(
        "board",
        |_: FactoryInput| async { Ok(Vec::<u64>::new()) },
        board_handlers,
    )
    .subscribe::<Post>("news", "world")
    .register();
    reg
}

/// n0: Server 100, n1: Server 1, n2: Server 0, n3: Client (the publisher). All host boards.
async fn cluster(
    store: &Arc<MemoryStore>,
) -> (Vec<Arc<MeshNode>>, Vec<ObjectRuntime<MemoryStore>>) {
    let mut nodes = Vec::new();
    let mut rts = Vec::new();
    for i in 0..4 {
        let reg = registry();
        let mut cfg: MeshNodeConfig = config("m", &format!("n{i}"));
        cfg = match i {
            0 => cfg.channel_server("news", 100),
            1 => cfg.channel_server("news", 1),
            2 => cfg.channel_server("news", 0),
            _ => cfg.channel_client("news"),
        };
        cfg.object_capabilities = reg.capabilities();
        cfg.entry_spot_prefix = None;
        let node = Arc::new(
            MeshNode::start(
                cfg,
                Handlers::new(),
                Some(Arc::clone(store) as Arc<dyn DiscoveryBackend>),
            )
            .await
            .unwrap(),
        );
        rts.push(
            ObjectRuntime::start(
                Arc::clone(&node),
                Arc::clone(store),
                reg,
                CacheConfig {
                    fencing_margin: Duration::from_millis(200),
                    ..CacheConfig::default()
                },
            )
            .await
            .unwrap(),
        );
        nodes.push(node);
    }
    for a in &nodes {
        for b in &nodes {
            if a.rid() != b.rid() {
                a.wait_ready(b.rid(), WAIT).await.unwrap();
            }
        }
    }
    (nodes, rts)
}

async fn seen(rt: &ObjectRuntime<MemoryStore>, id: &str) -> Vec<u64> {
    rt.request_to_spot::<Read, Seen>(id, &Read, T)
        .await
        .unwrap()
        .posts
}

/// Glossary §4: one message per positive-weight remote member node, local delivery on every
/// node to its own matching subscriptions, nothing for weight 0, other topics or packets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_reaches_every_subscribed_spot_on_positive_weight_members_and_the_publisher() {
    let store = Arc::new(MemoryStore::new(SystemClock));
    let (nodes, rts) = cluster(&store).await;
    let publisher = &rts[3];
    // Boards spread over the four nodes by placement weight; find where each landed.
    let mut on = vec![Vec::new(); 4];
    for b in 0..12 {
        let id = format!("board-{b}");
        publisher
            .create_user_spot("board", &id, None)
            .await
            .unwrap();
        let host = (0..4)
            .find(|&i| rts[i].live_generation(ObjectKind::Spot, &id).is_some())
            .unwrap();
        on[host].push(id);
    }
    assert!(
        on.iter().all(|ids| !ids.is_empty()),
        "every node hosts boards: {on:?}"
    );
    publisher
        .publish("news", "world", &Post { n: 1 })
        .await
        .unwrap();
    publisher
        .publish("news", "elsewhere", &Post { n: 2 })
        .await
        .unwrap();
    publisher
        .publish("news", "world", &Other { n: 3 })
        .await
        .unwrap();
    // A sentinel last: on each ordered connection it arrives after anything sent before it.
    publisher
        .publish("news", "world", &Post { n: 4 })
        .await
        .unwrap();
    // Receivers: boards on n0, n1 (positive weight) and on the publisher n3.
    let deadline = tokio::time::Instant::now() + T;
    for i in [0, 1, 3] {
        for id in &on[i] {
            loop {
                let s = seen(&rts[i], id).await;
                if s.contains(&4) {
                    assert_eq!(
                        s,
                        vec![1, 4],
                        "{id} on n{i}: another topic or packet leaked"
                    );
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{id} on n{i} got nothing"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    for id in &on[2] {
        assert_eq!(seen(&rts[2], id).await, Vec::<u64>::new(), "weight 0: {id}");
    }
    let stat = |i: usize| &rts[i].stats().multicast_local_deliveries;
    assert_eq!(stat(2).load(Ordering::Relaxed), 0);
    assert_eq!(stat(0).load(Ordering::Relaxed), 2 * on[0].len() as u64);
    assert_eq!(stat(1).load(Ordering::Relaxed), 2 * on[1].len() as u64);
    assert_eq!(stat(3).load(Ordering::Relaxed), 2 * on[3].len() as u64);
    // One record per positive-weight remote node per publish (four publishes, two nodes): the
    // weight-0 member is in no snapshot.
    assert_eq!(publisher.stats().multicast_sent.load(Ordering::Relaxed), 8);
    assert_eq!(
        publisher
            .stats()
            .multicast_published
            .load(Ordering::Relaxed),
        4
    );

    // Refused before transport: a reserved topic, a Channel this node is not a member of.
    let err = publisher
        .publish("news", "\u{1}ZLF1", &Post { n: 9 })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{err}");
    let err = publisher
        .publish("sports", "world", &Post { n: 9 })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{err}");
    assert_eq!(
        publisher
            .stats()
            .multicast_published
            .load(Ordering::Relaxed),
        4
    );
    assert_eq!(publisher.stats().multicast_sent.load(Ordering::Relaxed), 8);
    for n in &nodes {
        n.shutdown().await;
    }
}

/// Glossary §4 "Subscription": duplicates, reserved topics, a Channel the node is not a member
/// of, and a subscribed packet without a send handler are refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_checked_at_start() {
    let mut reg = Registry::new();
    reg.user_spot(
        "b",
        |_: FactoryInput| async { Ok(Vec::<u64>::new()) },
        board_handlers,
    )
    .subscribe::<Post>("news", "world")
    .subscribe::<Post>("news", "world")
    .register();
    assert!(matches!(
        reg.build(),
        Err(RegistryError::DuplicateSubscription(..))
    ));
    let mut reg = Registry::new();
    reg.user_spot(
        "b",
        |_: FactoryInput| async { Ok(Vec::<u64>::new()) },
        board_handlers,
    )
    .subscribe::<Post>("news", "\u{1}ZLF1")
    .register();
    assert!(matches!(reg.build(), Err(RegistryError::BadTopic(..))));

    let store = Arc::new(MemoryStore::new(SystemClock));
    let start = |reg: Registry, member: bool| {
        let store = Arc::clone(&store);
        async move {
            let mut cfg = config("m", "solo");
            if member {
                cfg = cfg.channel_client("news");
            }
            cfg.object_capabilities = reg.capabilities();
            let node = Arc::new(
                MeshNode::start(
                    cfg,
                    Handlers::new(),
                    Some(Arc::clone(&store) as Arc<dyn DiscoveryBackend>),
                )
                .await
                .unwrap(),
            );
            let r = ObjectRuntime::start(
                Arc::clone(&node),
                Arc::clone(&store),
                reg,
                CacheConfig::default(),
            )
            .await;
            node.shutdown().await;
            r.map(|_| ())
        }
    };
    // Not a member of the subscribed Channel.
    assert!(matches!(
        start(registry(), false).await,
        Err(RuntimeError::Subscription(_))
    ));
    // No send handler for the subscribed packet.
    let mut reg = Registry::new();
    reg.user_spot(
        "b",
        |_: FactoryInput| async { Ok(Vec::<u64>::new()) },
        ObjectHandlers::<Vec<u64>>::new,
    )
    .subscribe::<Post>("news", "world")
    .register();
    assert!(matches!(
        start(reg, true).await,
        Err(RuntimeError::Subscription(_))
    ));
    // And a valid one starts.
    start(registry(), true).await.unwrap();
}
