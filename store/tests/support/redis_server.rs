//! A throwaway `redis-server` for one test: a free loopback port, its own temporary directory,
//! AOF on with `appendfsync always` (so a kill loses no acknowledged write), no RDB snapshots.
//! Killed and its directory removed on drop.

#![allow(dead_code)] // each test binary uses a different subset

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A running (or stopped) test server.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

fn require_redis_server() {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        panic!(
            "redis-server is not on PATH: the Redis conformance tests need a real server \
             (install the Debian package `redis-server`, or run scripts/test which installs it){}",
            if ci {
                " — failing because CI=true"
            } else {
                ""
            }
        );
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

impl RedisServer {
    /// Start a server and wait until it answers.
    pub async fn start() -> Self {
        require_redis_server();
        let dir = std::env::temp_dir().join(format!(
            "zlink-redis-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = Self {
            child: None,
            port: free_port(),
            dir,
        };
        server.spawn().await;
        server
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    async fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &self.dir.to_string_lossy()])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .args([
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
                "--logfile",
                "redis.log",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        self.wait_ready().await;
    }

    async fn wait_ready(&self) {
        let client = redis::Client::open(self.url()).expect("url");
        for _ in 0..200 {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
                if pong.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("redis-server on port {} did not become ready", self.port);
    }

    /// Kill the server (SIGKILL: only what the AOF holds survives).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and directory (the AOF is replayed).
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }

    /// A plain connection for test controls.
    pub async fn admin(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("admin connection")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
