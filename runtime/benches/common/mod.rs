//! What `benches/objects.rs` and `benches/mesh.rs` share (issue 21 item 3): two MeshNodes on
//! 127.0.0.1 over an in-process memory Location Store, an echo Actor on `bench-b`, and a
//! one-way flood from `bench-a` to it — node direct (`send_payload` to a counting raw handler)
//! or to the Actor by global ID (`send_to_actor`, counted by its handler) — so both benches
//! report the Actor level next to node direct from the same code.

#![allow(dead_code)] // each bench binary uses a part

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::handler::RAW_CONTENT_TYPE;
use zlink::mesh::{Handlers, JsonMessage, MeshNode, MeshNodeConfig, RidConfig};
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry};
use zlink::object::runtime::ObjectRuntime;
use zlink::routing::CacheConfig;
use zlink_protocol::envelope::TypedPayload;
use zlink_store::MemoryStore;
use zlink_store::clock::SystemClock;

const SECRET: &[u8] = b"bench-objects-secret-0123456789";
/// The echo request's packet name (raw on the node, JSON on the Actor).
pub const ECHO: &str = "bench.Echo";
const FLOOD: &str = "bench.Flood";

/// One-way messages handled on `b`: [node direct, remote actor].
static FLOODED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

#[derive(serde::Serialize, serde::Deserialize)]
struct Flood {
    b: String,
}
impl JsonMessage for Flood {
    const PACKET_NAME: &'static str = FLOOD;
}

/// The Actor's echo request.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Echo {
    pub b: String,
}
impl JsonMessage for Echo {
    const PACKET_NAME: &'static str = ECHO;
}

/// Nodes `a` and `b`, each with an object runtime; Actor `echo-1` lives on `b`.
pub struct World {
    pub a: Arc<MeshNode>,
    pub b: Arc<MeshNode>,
    pub rt_a: ObjectRuntime<MemoryStore>,
    pub rt_b: ObjectRuntime<MemoryStore>,
}

async fn node(rid: &str, store: &Arc<MemoryStore>) -> Arc<MeshNode> {
    let mut c = MeshNodeConfig::new("bench", MeshSecret::from_bytes(SECRET).unwrap());
    c.rid = RidConfig::Fixed(rid.into());
    c.object_capabilities = registry().capabilities();
    c.entry_spot_prefix = Some(rid.into());
    // Actors are placed on `bench-b` only (weight 0 on `bench-a`), so `a`'s calls are remote.
    if rid == "bench-a" {
        c.placement_weight = 0;
    }
    let mut h = Handlers::new();
    h.on_request_raw(ECHO, 64, |_, b| async move { Ok::<_, CallError>(b) });
    h.on_send_raw(FLOOD, |_, _| async {
        FLOODED[0].fetch_add(1, Ordering::Relaxed);
        Ok::<_, CallError>(())
    });
    Arc::new(
        MeshNode::start(c, h, Some(Arc::clone(store) as Arc<dyn DiscoveryBackend>))
            .await
            .unwrap(),
    )
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.actor(
        "echo",
        |_: FactoryInput| async { Ok(()) },
        || {
            let mut h: ObjectHandlers<()> = ObjectHandlers::new();
            h.on_request(|_, e: Echo| async move { Ok::<_, CallError>(e) });
            h.on_send(|_, _: Flood| async {
                FLOODED[1].fetch_add(1, Ordering::Relaxed);
                Ok::<_, CallError>(())
            });
            h
        },
    )
    .register();
    r.entry_spot(
        "entry",
        |_: FactoryInput| async { Ok(()) },
        ObjectHandlers::new,
    )
    .register();
    r
}

impl World {
    pub async fn start() -> Self {
        let store = Arc::new(MemoryStore::new(SystemClock));
        let a = node("bench-a", &store).await;
        let b = node("bench-b", &store).await;
        a.wait_ready("bench-b", Duration::from_secs(10))
            .await
            .unwrap();
        let rt_a = ObjectRuntime::start(
            Arc::clone(&a),
            Arc::clone(&store),
            registry(),
            CacheConfig::default(),
        )
        .await
        .unwrap();
        let rt_b = ObjectRuntime::start(
            Arc::clone(&b),
            Arc::clone(&store),
            registry(),
            CacheConfig::default(),
        )
        .await
        .unwrap();
        rt_b.create_actor("echo", "echo-1", None).await.unwrap();
        Self { a, b, rt_a, rt_b }
    }

    /// `n` one-way `size`-byte messages from `a` to `b`, node direct or to the remote Actor;
    /// returns messages/s until `b` handled the last one.
    pub async fn flood(&self, actor: bool, n: usize, size: usize) -> Result<f64, String> {
        let counter = &FLOODED[usize::from(actor)];
        let start = counter.load(Ordering::Relaxed);
        let body = "x".repeat(size);
        let t0 = Instant::now();
        for _ in 0..n {
            if actor {
                self.rt_a
                    .send_to_actor("echo-1", &Flood { b: body.clone() })
                    .await
            } else {
                let p = TypedPayload::new(FLOOD, RAW_CONTENT_TYPE, Bytes::from(body.clone()));
                self.a.send_payload("bench-b", p, None).await
            }
            .map_err(|e| e.to_string())?;
        }
        while counter.load(Ordering::Relaxed) < start + n {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    }

    /// [`World::flood`] on `rt` within `limit`; a failure or the limit ends the bench
    /// (exit status 1, as every bench loop here).
    pub fn flood_or_exit(
        &self,
        rt: &tokio::runtime::Runtime,
        actor: bool,
        n: usize,
        size: usize,
        limit: Duration,
    ) -> f64 {
        match rt.block_on(async { tokio::time::timeout(limit, self.flood(actor, n, size)).await }) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                eprintln!("one-way flood: {e}");
                std::process::exit(1);
            }
            Err(_) => {
                eprintln!("one-way flood: over the {limit:?} limit");
                std::process::exit(1);
            }
        }
    }

    pub async fn shutdown(&self) {
        self.rt_a.shutdown().await;
        self.rt_b.shutdown().await;
        self.a.shutdown().await;
        self.b.shutdown().await;
    }
}
