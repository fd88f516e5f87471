//! A user's own node binary under a process test (issue 16 acceptance, "Hosting your own
//! objects"): the real `own-objects` binary, configured by a YAML file plus `ZLINK_*`
//! overrides, joins a mesh on a real redis-server, serves a request to its own `leaderboard`
//! type by global ID (cold-activated on the first call) from a caller node in this process,
//! and drains on SIGTERM: the caller sees it `Draining`, it exits 0 and its descriptor leaves
//! the store.
#![allow(clippy::unwrap_used)]

#[path = "../../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zlink::mesh::auth::MeshSecret;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, MeshNode, MeshNodeConfig, PeerState, RidConfig};
use zlink::object::registry::Registry;
use zlink::object::runtime::ObjectRuntime;
use zlink::routing::CacheConfig;
use zlink_example_own_objects::{LEADERBOARD, Standing, Submit};
use zlink_protocol::generated::{ObjectRole, RuntimeState};
use zlink_store::LocationStore;
use zlink_store::redis::{RedisStore, RedisStoreConfig};
use zlink_store::types::{AuthorityKey, AuthorityRead, AuthorityState, ObjectKind};

const BIN: &str = env!("CARGO_BIN_EXE_own-objects");
const SECRET: &str = "own-objects-mesh-secret-0123456789";
const WAIT: Duration = Duration::from_secs(20);

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn write_config(dir: &Path, redis_url: &str) -> std::path::PathBuf {
    let path = dir.join("node.yaml");
    std::fs::write(
        &path,
        format!(
            "mesh:\n  name: own\n  rid_prefix: yaml\n\
             redis:\n  url: {redis_url}\n  namespace: own\n\
             timings:\n  probe_interval_ms: 100\n  liveness_deadline_ms: 3000\n  lease_ttl_ms: 6000\n  discovery_poll_ms: 100\n  status_poll_ms: 50\n\
             admin:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n\
             drain_deadline_ms: 3000\nlog_level: warn\n"
        ),
    )
    .unwrap();
    path
}

async fn caller(redis_url: &str) -> (Arc<MeshNode>, ObjectRuntime<RedisStore>, Arc<RedisStore>) {
    let store = Arc::new(
        RedisStore::connect(
            redis_url,
            RedisStoreConfig {
                namespace: "own".into(),
                ..RedisStoreConfig::default()
            },
        )
        .await
        .unwrap(),
    );
    let mut cfg = MeshNodeConfig::new("own", MeshSecret::from_bytes(SECRET.as_bytes()).unwrap());
    cfg.rid = RidConfig::Fixed("caller".into());
    cfg.object_role = ObjectRole::Client;
    let node = Arc::new(
        MeshNode::start(
            cfg,
            Handlers::new(),
            Some(Arc::clone(&store) as Arc<dyn DiscoveryBackend>),
        )
        .await
        .unwrap(),
    );
    let rt = ObjectRuntime::start(
        Arc::clone(&node),
        Arc::clone(&store),
        Registry::new(),
        CacheConfig::default(),
    )
    .await
    .unwrap();
    (node, rt, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_own_binary_serves_its_own_type_by_global_id_and_drains_on_sigterm() {
    let redis = redis_server::RedisServer::start().await;
    let dir = std::env::temp_dir().join(format!("zlink-own-objects-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_config(&dir, &redis.url());
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .env("ZLINK_MESH_RID_PREFIX", "board")
        .env("ZLINK_MESH_SECRET", SECRET)
        .env("ZLINK_ADMIN_TOKEN", "own-objects-admin-token-0123456789")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn own-objects");
    let stdout = child.stdout.take().unwrap();
    let mut child = Proc(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let line = tokio::task::spawn_blocking(move || rx.recv_timeout(WAIT))
        .await
        .unwrap()
        .expect("the binary announces itself once serving");
    let announce: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(announce["state"], "serving", "{line}");
    let rid = announce["rid"].as_str().unwrap().to_owned();
    assert!(
        rid.starts_with("board-"),
        "the env override names the RID: {rid}"
    );

    let (node, rt, store) = caller(&redis.url()).await;
    node.wait_peer(&rid, WAIT, |s| {
        s.state == PeerState::Ready
            && s.descriptor.as_ref().is_some_and(|d| {
                d.object_role == ObjectRole::Server && d.state == RuntimeState::Serving
            })
    })
    .await
    .unwrap();
    for (player, score, rank) in [("ann", 5, 1), ("bob", 9, 1), ("ann", 3, 2)] {
        let s: Standing = rt
            .request_to_instance_spot(
                LEADERBOARD,
                "season-1",
                &Submit {
                    player: player.into(),
                    score,
                },
                WAIT,
            )
            .await
            .expect("the user's own type answers by global ID");
        assert_eq!((s.board.as_str(), s.rank), ("season-1", rank), "{player}");
    }
    let key = AuthorityKey::new(ObjectKind::Spot, "season-1").unwrap();
    let AuthorityRead::Found(a) = store.read_authority(&key).await.unwrap() else {
        panic!("the board was activated");
    };
    assert_eq!(
        (
            a.state,
            a.owner_node.rid.as_str(),
            a.allocation.stable_type.as_str()
        ),
        (AuthorityState::Ready, rid.as_str(), LEADERBOARD),
        "the board lives in the user's binary"
    );

    let pid = child.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    node.wait_peer(&rid, WAIT, |s| {
        s.descriptor
            .as_ref()
            .is_some_and(|d| d.state == RuntimeState::Draining)
            || s.state != PeerState::Ready
    })
    .await
    .expect("the caller sees the binary draining or gone");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < WAIT,
            "own-objects did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(0), "a clean drain exits 0");
    rt.shutdown().await;
    node.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
