//! Helpers shared by the host tests: an in-process host ([`zlink_node::host::run`]) on a real
//! redis-server with real gRPC and HTTP listeners on 127.0.0.1, a plain HTTP GET, a HostAdmin
//! client with a bearer token, and a mesh client node joining the same mesh.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use zlink::mesh::MeshNode;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, PeerState};
use zlink_node::host::config::ChannelConfig;
use zlink_node::host::proto::host_admin_client::HostAdminClient;
use zlink_node::host::{Announce, HostConfig, HostError, RunOutcome};

pub const SECRET: &str = "host-test-mesh-secret-0123456789";
pub const TOKEN: &str = "host-test-admin-token-0123456789";
pub const WAIT: Duration = Duration::from_secs(15);

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "zlink-host-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A host configuration with millisecond timings for tests.
pub fn test_config(
    redis_url: &str,
    namespace: &str,
    prefix: &str,
    secret_file: &Path,
    channels: &[(&str, &str, u16)],
) -> HostConfig {
    let mut c = HostConfig::default();
    c.mesh.name = "hosts".into();
    c.mesh.rid_prefix = prefix.into();
    c.mesh.secret_file = Some(secret_file.to_owned());
    c.mesh.channels = channels
        .iter()
        .map(|(n, r, w)| ChannelConfig {
            name: (*n).into(),
            role: (*r).into(),
            weight: *w,
        })
        .collect();
    c.redis.url = redis_url.into();
    c.redis.namespace = namespace.into();
    c.timings.probe_interval_ms = 100;
    c.timings.liveness_deadline_ms = 3_000;
    c.timings.lease_ttl_ms = 6_000;
    c.timings.discovery_poll_ms = 100;
    c.timings.status_poll_ms = 50;
    c.admin.grpc_listen = "127.0.0.1:0".into();
    c.admin.http_listen = "127.0.0.1:0".into();
    c.drain_deadline_ms = 2_000;
    c
}

/// An in-process host.
pub struct TestHost {
    pub announce: Announce,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<Result<RunOutcome, HostError>>,
}

impl TestHost {
    pub async fn start(config: HostConfig) -> Self {
        let (stop, stop_rx) = oneshot::channel::<()>();
        let (ann_tx, ann_rx) = oneshot::channel();
        let store = zlink_node::host::connect_store(&config)
            .await
            .expect("the test host reaches its Redis");
        let registry = zlink_node::refapp::registry(&zlink_node::refapp::RefAppConfig {
            room_tick: std::time::Duration::from_millis(config.objects.room_tick_ms),
            ..zlink_node::refapp::RefAppConfig::default()
        });
        let options = zlink_node::host::RunOptions::new(TOKEN).on_serving(move |a| {
            let _ = ann_tx.send(a.clone());
        });
        let task = tokio::spawn(zlink_node::host::run(
            config,
            registry,
            store,
            async move {
                let _ = stop_rx.await;
            },
            options,
        ));
        let announce = tokio::time::timeout(WAIT, ann_rx)
            .await
            .expect("host announced in time")
            .expect("host started");
        Self {
            announce,
            stop: Some(stop),
            task,
        }
    }

    pub fn rid(&self) -> &str {
        &self.announce.rid
    }

    /// The in-process equivalent of SIGTERM.
    pub async fn terminate(mut self) -> RunOutcome {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(WAIT, &mut self.task)
            .await
            .expect("host stopped in time")
            .unwrap()
            .expect("host ran")
    }

    pub async fn admin(
        &self,
        token: Option<&str>,
    ) -> HostAdminClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>> {
        let channel = admin_channel(&self.announce.grpc).await;
        HostAdminClient::with_interceptor(
            channel,
            Bearer(token.map(|t| format!("Bearer {t}").parse().unwrap())),
        )
    }

    pub fn http_get(&self, path: &str) -> (u16, String) {
        http_get(&self.announce.http, path)
    }

    pub fn http_get_with_headers(&self, path: &str) -> (u16, String, String) {
        http_get_with_headers(&self.announce.http, path)
    }
}

/// Adds `authorization: <value>` when set.
#[derive(Clone)]
pub struct Bearer(pub Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.0 {
            req.metadata_mut().insert("authorization", h.clone());
        }
        Ok(req)
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub async fn admin_channel(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A minimal HTTP/1.1 GET: `(status, body)`.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let (status, _, body) = http_get_with_headers(addr, path);
    (status, body)
}

/// A minimal HTTP/1.1 GET: `(status, header lines, body)`.
pub fn http_get_with_headers(addr: &str, path: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "test client reads plain bodies only: {head}"
    );
    (status, head.to_owned(), body.to_owned())
}

/// A mesh node joining the hosts' mesh with a Client membership of `channel`.
pub async fn client_node(
    redis_url: &str,
    namespace: &str,
    secret_file: &Path,
    channel: &str,
) -> Arc<MeshNode> {
    let mut hc = test_config(
        redis_url,
        namespace,
        "client",
        secret_file,
        &[(channel, "client", 0)],
    );
    hc.objects.role = "client".into();
    let cfg = hc.mesh_node_config(MeshSecret::from_bytes(SECRET.as_bytes()).unwrap());
    let store = zlink_store::redis::RedisStore::connect(
        redis_url,
        zlink_store::redis::RedisStoreConfig {
            namespace: namespace.into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let backend = Arc::new(store) as Arc<dyn DiscoveryBackend>;
    Arc::new(
        MeshNode::start(cfg, Handlers::new(), Some(backend))
            .await
            .unwrap(),
    )
}

/// Wait until `node` sees `rid` Ready with a Serving descriptor.
pub async fn wait_serving_peer(node: &MeshNode, rid: &str) {
    node.wait_peer(rid, WAIT, |s| {
        s.state == PeerState::Ready
            && s.descriptor
                .as_ref()
                .is_some_and(|d| d.state == zlink_protocol::generated::RuntimeState::Serving)
    })
    .await
    .unwrap();
}
