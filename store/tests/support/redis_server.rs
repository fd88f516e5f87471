//! A throwaway `redis-server` for one test: a free loopback port, its own temporary directory,
//! AOF on with `appendfsync always` (so a kill loses no acknowledged write), no RDB snapshots.
//! Killed and its directory removed on drop.
//!
//! A port from `bind(127.0.0.1:0)` is free when drawn, not when redis-server binds it: another
//! test's server (or an outgoing connection) can take it in between, and then a plain PING would
//! be answered by *that* server. So a start counts only once the server on the port reports the
//! pid of our child (`INFO server`), and a server that exits or is not ours is started again on
//! another port (up to [`START_ATTEMPTS`] times).

#![allow(dead_code)] // each test binary uses a different subset

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Starts on fresh ports before giving up.
const START_ATTEMPTS: u32 = 5;

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

/// The `process_id` line of an `INFO server` reply.
pub fn process_id(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

impl RedisServer {
    /// Start a server and wait until it answers.
    pub async fn start() -> Self {
        Self::start_preferring(None).await
    }

    /// Like [`RedisServer::start`], trying `port` first (tests hand it a port that is taken).
    pub async fn start_preferring(port: Option<u16>) -> Self {
        require_redis_server();
        let dir = std::env::temp_dir().join(format!(
            "zlink-redis-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = Self {
            child: None,
            port: port.unwrap_or_else(free_port),
            dir,
        };
        for attempt in 1..=START_ATTEMPTS {
            match server.spawn().await {
                Ok(()) => return server,
                Err(why) if attempt < START_ATTEMPTS => {
                    eprintln!(
                        "redis-server on port {}: {why}; starting it on another port (attempt {attempt} of {START_ATTEMPTS})",
                        server.port
                    );
                    server.stop();
                    server.port = free_port();
                }
                Err(why) => panic!("redis-server on port {}: {why}", server.port),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// The port it serves on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The pid of the running child, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    async fn spawn(&mut self) -> Result<(), String> {
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
        self.wait_ready().await
    }

    /// Waits until the server on our port answers and is our child (its `process_id`).
    async fn wait_ready(&mut self) -> Result<(), String> {
        let client = redis::Client::open(self.url()).expect("url");
        for _ in 0..200 {
            let child = self.child.as_mut().ok_or("not started")?;
            let pid = child.id();
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "it exited ({status}); was the port taken? (log: {})",
                    self.dir.join("redis.log").display()
                ));
            }
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let info: redis::RedisResult<String> =
                    redis::cmd("INFO").arg("server").query_async(&mut c).await;
                let answered = info.ok().as_deref().and_then(process_id);
                match answered {
                    Some(p) if p == pid => return Ok(()),
                    Some(other) => {
                        return Err(format!(
                            "the port is served by another redis-server (pid {other}, ours {pid})"
                        ));
                    }
                    None => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err("not ready within 5 s".to_owned())
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
        if let Err(why) = self.spawn().await {
            panic!("redis-server restarted on port {}: {why}", self.port);
        }
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
