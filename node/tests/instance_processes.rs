//! Cold activation when the target **process** dies (issue "Instance Spot cold activation",
//! acceptance; wire §8: recovery is never done by another node; `000_…` §2.6: no automatic
//! reactivation). A real `zlink-node peer --objects` process hosts the reference application
//! and exits (status 86, `ZLINK_ACTIVATION_FAULT=exit`) right after the Ready commit of a cold
//! activation — the durable inbox holds the first message, no handler ran it. Discovery and
//! objects go through a real `redis-server`.
#![allow(clippy::unwrap_used)]

#[path = "../../runtime/tests/common/mod.rs"]
mod common;
#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zlink::call::error::ErrorKind;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, MeshNode, RidConfig};
use zlink::object::registry::Registry;
use zlink::object::runtime::ObjectRuntime;
use zlink::routing::CacheConfig;
use zlink_node::refapp::counter::{Add, Total};
use zlink_store::LocationStore;
use zlink_store::redis::{RedisStore, RedisStoreConfig};
use zlink_store::types::{AuthorityKey, AuthorityRead, AuthorityState, LeaseRead, ObjectKind};

const T: Duration = Duration::from_secs(10);

async fn store(url: &str) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::connect(
            url,
            RedisStoreConfig {
                namespace: "zlink".into(),
                response_timeout: Duration::from_secs(2),
                connection_timeout: Duration::from_millis(500),
                reconnect_retries: 1,
            },
        )
        .await
        .unwrap(),
    )
}

async fn node(
    store: &Arc<RedisStore>,
    rid: &str,
    registry: Registry,
    entry: bool,
    placement_weight: u16,
) -> (Arc<MeshNode>, ObjectRuntime<RedisStore>) {
    let mut cfg = common::config("m", rid);
    cfg.placement_weight = placement_weight;
    cfg.rid = RidConfig::Fixed(rid.into());
    cfg.object_capabilities = registry.capabilities();
    cfg.entry_spot_prefix = entry.then(|| rid.to_owned());
    let node = Arc::new(
        MeshNode::start(
            cfg,
            Handlers::new(),
            Some(Arc::clone(store) as Arc<dyn DiscoveryBackend>),
        )
        .await
        .unwrap(),
    );
    let rt = ObjectRuntime::start(
        Arc::clone(&node),
        Arc::clone(store),
        registry,
        CacheConfig {
            fencing_margin: Duration::from_millis(200),
            ..CacheConfig::default()
        },
    )
    .await
    .unwrap();
    (node, rt)
}

/// The target process dies between the inbox commit and the first handler: the caller gets
/// exactly one terminal result (`Unavailable`: the target's lifecycle ended), no other node
/// runs that first message, the dead owner's record is removed by fenced cleanup once its
/// lease has lapsed, and a new Instance-intent call activates the ID cleanly on a live node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_dies_mid_activation_ends_the_call_once_and_the_id_activates_again() {
    let server = redis_server::RedisServer::start().await;
    let url = server.url();
    let secret = String::from_utf8(common::SECRET.to_vec()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_zlink-node"))
        .args([
            "peer",
            "--objects",
            "--mesh",
            "m",
            "--rid",
            "dying",
            "--rid-prefix",
            "dying",
            "--redis",
            &url,
            "--probe-interval-ms",
            "100",
            "--liveness-deadline-ms",
            "1500",
            "--discovery-poll-ms",
            "50",
            "--lease-ttl-ms",
            "2000",
        ])
        .env("ZLINK_MESH_SECRET", &secret)
        .env("ZLINK_ACTIVATION_FAULT", "exit")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"rid\":\"dying\""), "{first}");

    let s = store(&url).await;
    // The caller hosts nothing: the only target for `counter` is the dying process.
    let (client_node, client) = node(&s, "caller", Registry::new(), false, 100).await;
    // A second host of `counter`, alive throughout, out of placement (weight 0) until the end:
    // it must never see the dying target's first message.
    let (host_node, host) = node(
        &s,
        "host",
        zlink_node::refapp::registry(&zlink_node::refapp::RefAppConfig::default()),
        true,
        0,
    )
    .await;
    client_node.wait_ready("dying", T).await.unwrap();
    client_node.wait_ready("host", T).await.unwrap();
    let t0 = Instant::now();
    loop {
        let serving = client_node.peers().into_iter().any(|p| {
            p.descriptor.as_ref().is_some_and(|d| {
                d.node.rid == "dying" && d.state == zlink_protocol::generated::RuntimeState::Serving
            })
        });
        if serving {
            break;
        }
        assert!(t0.elapsed() < T, "the dying process never turned Serving");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let old = Add {
        source: "test".into(),
        seq: 0,
        by: 100,
    };
    let err = client
        .request_to_instance_spot::<Add, Total>("counter", "c-1", &old, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(86), "the fault point was reached");

    // The dead target's record stays until its lease lapses: no one reactivates it.
    let key = AuthorityKey::new(ObjectKind::Spot, "c-1").unwrap();
    let AuthorityRead::Found(a) = s.read_authority(&key).await.unwrap() else {
        panic!("the activation reached its Ready commit");
    };
    assert_eq!(a.state, AuthorityState::Ready);
    assert_eq!(a.owner_node.rid, "dying");
    let t0 = Instant::now();
    loop {
        match LocationStore::read_lease(&*s, &a.owner.owner_id)
            .await
            .unwrap()
        {
            LeaseRead::Found { token, .. } if token == a.owner => {}
            _ => break,
        }
        assert!(t0.elapsed() < T, "the dead owner's lease never lapsed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        client
            .clean_up_dead_owner(ObjectKind::Spot, "c-1")
            .await
            .unwrap(),
        "fenced cleanup removed the dead owner's record"
    );
    assert!(matches!(
        s.read_authority(&key).await.unwrap(),
        AuthorityRead::Missing { .. }
    ));

    assert_eq!(
        host.stats()
            .activations
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no other node took over the activation"
    );
    // The live host enters placement; a new Instance-intent call activates the ID there. Its
    // first message is the new one: the old one (by 100) never ran anywhere.
    host_node.set_placement_weight(100).unwrap();
    let t0 = Instant::now();
    while !client_node.peers().into_iter().any(|p| {
        p.descriptor
            .as_ref()
            .is_some_and(|d| d.node.rid == "host" && d.placement_weight == 100)
    }) {
        assert!(
            t0.elapsed() < T,
            "the caller never saw the host's new weight"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fresh = Add {
        source: "test".into(),
        seq: 1,
        by: 1,
    };
    let t0 = Instant::now();
    let total = loop {
        match client
            .request_to_instance_spot::<Add, Total>("counter", "c-1", &fresh, T)
            .await
        {
            Ok(t) => break t,
            // A transient view (descriptor update still in flight): bounded retry.
            Err(e)
                if e.kind() == ErrorKind::Unavailable && t0.elapsed() < Duration::from_secs(3) =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!((total.value, total.adds), (1, 1), "{total:?}");
    assert_eq!(
        host.stats()
            .activations
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    host.shutdown().await;
    client.shutdown().await;
    host_node.shutdown().await;
    client_node.shutdown().await;
}
