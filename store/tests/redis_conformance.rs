//! The conformance suite against the Redis provider and a real `redis-server`, one server per
//! test (started by the test on a free loopback port, AOF on). A missing `redis-server` fails
//! the tests; it is never skipped.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::redis_server::RedisServer;
use tokio::sync::Mutex;
use zlink_store::conformance::Harness;
use zlink_store::redis::{RedisStore, RedisStoreConfig};

struct RedisHarness {
    store: RedisStore,
    server: Mutex<RedisServer>,
    seq: AtomicU64,
}

impl Harness for RedisHarness {
    type Store = RedisStore;

    fn store(&self) -> &RedisStore {
        &self.store
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    async fn set_counter(&self, name: &'static str, value: u64) {
        let mut c = self.server.lock().await.admin().await;
        let () = redis::cmd("SET")
            .arg(self.store.counter_key(name))
            .arg(value.to_string())
            .query_async(&mut c)
            .await
            .expect("SET counter");
    }

    async fn begin_outage(&self) {
        self.server.lock().await.stop();
    }

    async fn end_outage(&self) {
        self.server.lock().await.restart().await;
    }

    fn unique(&self, what: &str) -> String {
        format!("{what}-{}", self.seq.fetch_add(1, Ordering::Relaxed))
    }
}

async fn harness() -> Arc<RedisHarness> {
    let server = RedisServer::start().await;
    static NS: AtomicU64 = AtomicU64::new(0);
    let config = RedisStoreConfig {
        namespace: format!("conformance-{}", NS.fetch_add(1, Ordering::Relaxed)),
        response_timeout: Duration::from_secs(2),
        connection_timeout: Duration::from_millis(500),
        reconnect_retries: 1,
    };
    let store = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect");
    Arc::new(RedisHarness {
        store,
        server: Mutex::new(server),
        seq: AtomicU64::new(0),
    })
}

zlink_store::conformance_cases!(harness());

/// The test servers themselves: a start whose port is already served by another
/// `redis-server` (another test's, which a plain PING would accept) moves to another port, and
/// the server it hands out is its own child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_server_never_takes_another_servers_port_for_its_own() {
    let first = RedisServer::start().await;
    let second = RedisServer::start_preferring(Some(first.port())).await;
    assert_ne!(second.port(), first.port(), "both claim one port");
    for server in [&first, &second] {
        let mut admin = server.admin().await;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(
            support::redis_server::process_id(&info),
            server.pid(),
            "port {} answered by another server",
            server.port()
        );
    }
}
