//! Every operation of the Redis provider is exactly one Redis command (issue acceptance).
//!
//! Two independent measurements per operation, against a real `redis-server`:
//! * `MONITOR` (read on a separate connection): between two markers, exactly one command comes
//!   from a client — the provider's `EVALSHA` (`TIME` for `store_now`); every other line is a
//!   command the script itself ran (`[0 lua]`).
//! * `INFO commandstats` before/after: `cmdstat_evalsha` (or `cmdstat_time`) moved by exactly
//!   one, no `eval`/`script|load` (no NOSCRIPT fallback), and the total delta (excluding the
//!   test's own `info`/`echo`) equals that one command plus the commands run inside the script.
//!   Redis counts commands run by a script in `INFO commandstats` too, so the raw total of a
//!   script call is 1 + its inner `redis.call`s; the client-side count is what must be 1.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use support::redis_server::RedisServer;
use zlink_store::redis::{RedisStore, RedisStoreConfig};
use zlink_store::types::{
    AggregateOp, AuthorityKey, AuthorityState, CapacityLimits, DescriptorKey, DescriptorKind,
    NodeRef, ObjectKind, ReserveRequest, TargetFence, TransferOwner,
};
use zlink_store::{LocationStore, RelocationStore};

struct Probe {
    admin: MultiplexedConnection,
    monitor: mpsc::Receiver<String>,
    seq: u64,
}

async fn commandstats(admin: &mut MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

impl Probe {
    async fn start(server: &RedisServer) -> Self {
        let port = server
            .url()
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .unwrap()
            .to_owned();
        let mut stream = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let (tx, rx) = mpsc::channel();
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert!(ok.starts_with("+OK"), "{ok}");
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            admin: server.admin().await,
            monitor: rx,
            seq: 0,
        }
    }

    async fn mark(&mut self, what: &str) -> String {
        let m = format!("zlink-mark-{what}-{}", self.seq);
        let _: String = redis::cmd("ECHO")
            .arg(&m)
            .query_async(&mut self.admin)
            .await
            .unwrap();
        m
    }

    /// The MONITOR lines strictly between the two markers.
    fn between(&self, begin: &str, end: &str) -> Vec<String> {
        let mut inside = false;
        let mut out = Vec::new();
        loop {
            let line = self
                .monitor
                .recv_timeout(Duration::from_secs(5))
                .expect("monitor line");
            if line.contains(begin) {
                inside = true;
            } else if line.contains(end) {
                return out;
            } else if inside {
                out.push(line);
            }
        }
    }

    /// Run `op` and assert it was exactly one client command, `expected` (EVALSHA or TIME).
    async fn one<T>(&mut self, name: &str, expected: &str, op: impl Future<Output = T>) -> T {
        self.seq += 1;
        let before = commandstats(&mut self.admin).await;
        let begin = self.mark("begin").await;
        let out = op.await;
        let end = self.mark("end").await;
        let after = commandstats(&mut self.admin).await;

        let lines = self.between(&begin, &end);
        let (inner, client): (Vec<_>, Vec<_>) = lines.iter().partition(|l| l.contains(" lua]"));
        assert_eq!(client.len(), 1, "{name}: client commands {client:?}");
        assert!(
            client[0].contains(&format!("\"{expected}\"")),
            "{name}: {client:?}"
        );

        let delta = |cmd: &str| {
            after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0)
        };
        assert_eq!(
            delta(&expected.to_ascii_lowercase()) - inner_count(&inner, expected),
            1,
            "{name}: {expected} calls"
        );
        for c in ["eval", "script|load", "script|exists"] {
            assert_eq!(delta(c), 0, "{name}: {c} (NOSCRIPT fallback?)");
        }
        let total: u64 = after
            .keys()
            .filter(|k| !matches!(k.as_str(), "info" | "echo"))
            .map(|k| delta(k))
            .sum();
        assert_eq!(
            total,
            1 + inner.len() as u64,
            "{name}: commandstats total = 1 client command + {} inside the script",
            inner.len()
        );
        out
    }
}

/// How many of the script's inner commands were `cmd` (only `TIME` can be both).
fn inner_count(inner: &[&String], cmd: &str) -> u64 {
    inner
        .iter()
        .filter(|l| l.contains(&format!("\"{cmd}\"")))
        .count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_exactly_one_redis_command() {
    let server = RedisServer::start().await;
    let config = RedisStoreConfig {
        namespace: "commandstats".into(),
        ..RedisStoreConfig::default()
    };
    let s = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect");
    let mut p = Probe::start(&server).await;
    let long = Duration::from_secs(60);

    p.one("store_now", "TIME", s.store_now()).await.unwrap();
    let a = p
        .one("claim_lease", "EVALSHA", s.claim_lease("host-a", long))
        .await
        .unwrap();
    let b = s.claim_lease("host-b", long).await.unwrap();
    p.one("renew_lease", "EVALSHA", s.renew_lease(&a.token, long))
        .await
        .unwrap();
    p.one("read_lease", "EVALSHA", s.read_lease("host-a"))
        .await
        .unwrap();
    let t = p
        .one(
            "acquire_term_lease",
            "EVALSHA",
            s.acquire_term_lease("slot-1", &a.token, 1, long),
        )
        .await
        .unwrap();
    p.one("read_term_lease", "EVALSHA", s.read_term_lease("slot-1"))
        .await
        .unwrap();
    p.one(
        "release_term_lease",
        "EVALSHA",
        s.release_term_lease("slot-1", &a.token, t.term),
    )
    .await
    .unwrap();

    let node_a = NodeRef {
        mesh: "mesh".into(),
        rid: "rid-a".into(),
        lifecycle_generation: 1,
    };
    let node_b = NodeRef {
        mesh: "mesh".into(),
        rid: "rid-b".into(),
        lifecycle_generation: 1,
    };
    for (token, node) in [(&a.token, &node_a), (&b.token, &node_b)] {
        let key = DescriptorKey {
            kind: DescriptorKind::MeshNode,
            scope: node.mesh.clone(),
            rid: node.rid.clone(),
        };
        p.one(
            "publish_descriptor",
            "EVALSHA",
            s.publish_descriptor(token, &key, 1, 1, Bytes::from_static(b"d")),
        )
        .await
        .unwrap();
    }
    p.one(
        "list_descriptors",
        "EVALSHA",
        s.list_descriptors(DescriptorKind::MeshNode, "mesh"),
    )
    .await
    .unwrap();
    p.one(
        "claim_routing_id",
        "EVALSHA",
        s.claim_routing_id(&a.token, "mesh", "zone"),
    )
    .await
    .unwrap();
    p.one(
        "set_capacity_limits",
        "EVALSHA",
        s.set_capacity_limits(
            &a.token,
            &node_a,
            CapacityLimits {
                actors: 10,
                spots: 10,
            },
        ),
    )
    .await
    .unwrap();
    p.one("capacity_use", "EVALSHA", s.capacity_use(&node_a))
        .await
        .unwrap();

    let key = AuthorityKey::new(ObjectKind::Spot, "room").unwrap();
    let target = |token: &zlink_store::types::OwnerToken, node: &NodeRef| TargetFence {
        node: node.clone(),
        owner: token.clone(),
    };
    let req = |key: &AuthorityKey, id: &str| ReserveRequest {
        key: key.clone(),
        reservation_id: id.into(),
        object_kind: ObjectKind::Spot,
        stable_type: "Room".into(),
        target: target(&a.token, &node_a),
        capacity_delta: 1,
        content: None,
        payload: Bytes::from_static(b"p"),
    };
    p.one(
        "read_authority (missing)",
        "EVALSHA",
        s.read_authority(&key),
    )
    .await
    .unwrap();
    let res = p
        .one("reserve", "EVALSHA", s.reserve(&req(&key, "r1")))
        .await
        .unwrap();
    p.one("reserve (replay)", "EVALSHA", s.reserve(&req(&key, "r1")))
        .await
        .unwrap();
    let snap = p
        .one(
            "commit_ready",
            "EVALSHA",
            s.commit_ready(&res, Bytes::from_static(b"ready")),
        )
        .await
        .unwrap();
    p.one("read_authority", "EVALSHA", s.read_authority(&key))
        .await
        .unwrap();
    p.one(
        "reserve (AlreadyExists)",
        "EVALSHA",
        s.reserve(&req(&key, "r2")),
    )
    .await
    .unwrap_err();
    let snap = p
        .one(
            "preserve",
            "EVALSHA",
            s.preserve(&snap.fence(), Bytes::from_static(b"kept")),
        )
        .await
        .unwrap();
    p.one(
        "preserve (stale)",
        "EVALSHA",
        s.preserve(&res_fence_stale(&snap), Bytes::new()),
    )
    .await
    .unwrap_err();
    let snap = p
        .one(
            "set_state",
            "EVALSHA",
            s.set_state(
                &snap.fence(),
                AuthorityState::Ready,
                AuthorityState::Relocating,
            ),
        )
        .await
        .unwrap();
    let transfer = TransferOwner {
        source: snap.fence(),
        target: target(&b.token, &node_b),
        payload: None,
    };
    let snap = p
        .one("transfer_owner", "EVALSHA", s.transfer_owner(&transfer))
        .await
        .unwrap();
    let key2 = AuthorityKey::new(ObjectKind::Spot, "room-2").unwrap();
    let res2 = s.reserve(&req(&key2, "r3")).await.unwrap();
    let snap2 = s.commit_ready(&res2, Bytes::new()).await.unwrap();
    let ops = vec![
        AggregateOp::Check(snap.fence()),
        AggregateOp::Preserve {
            fence: snap2.fence(),
            payload: Bytes::from_static(b"agg"),
        },
    ];
    p.one("commit_aggregate", "EVALSHA", s.commit_aggregate(&ops))
        .await
        .unwrap();
    p.one("delete_fenced", "EVALSHA", s.delete_fenced(&snap.fence()))
        .await
        .unwrap();
    let key3 = AuthorityKey::new(ObjectKind::Spot, "room-3").unwrap();
    let res3 = s.reserve(&req(&key3, "r4")).await.unwrap();
    p.one("abort", "EVALSHA", s.abort(&res3)).await.unwrap();
    let dkey = DescriptorKey {
        kind: DescriptorKind::MeshNode,
        scope: "mesh".into(),
        rid: "rid-a".into(),
    };
    p.one(
        "remove_descriptor",
        "EVALSHA",
        s.remove_descriptor(&a.token, &dkey),
    )
    .await
    .unwrap();
    p.one("release_lease", "EVALSHA", s.release_lease(&a.token))
        .await
        .unwrap();

    p.one(
        "put",
        "EVALSHA",
        s.put("ref-1", Bytes::from_static(b"\x00\xffbytes"), long),
    )
    .await
    .unwrap();
    p.one("read", "EVALSHA", s.read("ref-1")).await.unwrap();
    p.one("renew", "EVALSHA", s.renew("ref-1", long))
        .await
        .unwrap();
    p.one("delete", "EVALSHA", s.delete("ref-1")).await.unwrap();
}

fn res_fence_stale(snap: &zlink_store::types::AuthoritySnapshot) -> zlink_store::types::OwnerFence {
    let mut f = snap.fence();
    f.store_version += 1;
    f
}
