//! The one builder of multi-node test clusters: MeshNodes on 127.0.0.1 with the short timings
//! of [`super::config`], an object runtime per node when the cluster has registries, and every
//! connection ready before the test body runs.
//!
//! ```ignore
//! let c = Cluster::builder(3)
//!     .registry(|_| my_registry())        // each node hosts these types (an object runtime each)
//!     .entry_spots()                      // hosting nodes get Entry Spots `node{i}-entry-…`
//!     .clients(1)                         // …except the last node, which hosts nothing
//!     .placement_weights(&[100, 50, 0])
//!     .configure(|i, cfg| if i == 0 { cfg.object_role = ObjectRole::Client })
//!     .start()
//!     .await;
//! c.rts[0].create_actor("player", "p-1", None).await?;
//! c.shutdown().await;
//! ```
//!
//! Wiring: by default the nodes find each other through one shared Location Store (a fresh
//! memory store, or the one given to [`ClusterBuilder::store`]); [`ClusterBuilder::dialer`]
//! instead starts them without a store and has one node dial every other by manual endpoint.

use std::sync::Arc;
use std::time::Duration;

use zlink::mesh::config::ManualPeer;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, MeshNode, MeshNodeConfig};
use zlink::object::registry::Registry;
use zlink::object::runtime::{ObjectRuntime, ObjectStore};
use zlink::routing::CacheConfig;
use zlink_protocol::generated::ObjectRole;
use zlink_store::MemoryStore;
use zlink_store::clock::SystemClock;
use zlink_store::types::{AuthorityKey, AuthorityRead, ObjectKind};

use super::{WAIT, config};

type PerNode<T> = Box<dyn Fn(usize) -> T>;
/// The last word on node `i`'s configuration.
type Configure = Box<dyn Fn(usize, &mut MeshNodeConfig)>;

/// How the nodes of a cluster find each other.
enum Wiring<S> {
    /// Automatic discovery through this shared store.
    Store(Arc<S>),
    /// No store: this node starts last and dials every other node by manual endpoint.
    Dialer(usize),
}

/// One Channel membership, applied to one node's configuration in the order it was added.
struct Membership {
    node: usize,
    channel: String,
    /// `Some(weight)`: a Server membership; `None`: a Client membership.
    server_weight: Option<u16>,
}

/// Builds a [`Cluster`]; see the module docs.
pub struct ClusterBuilder<S = MemoryStore> {
    nodes: usize,
    clients: usize,
    rids: PerNode<String>,
    handlers: PerNode<Handlers>,
    registry: Option<PerNode<Registry>>,
    entry_spots: bool,
    placement_weights: Vec<u16>,
    channels: Vec<Membership>,
    configure: Configure,
    wiring: Wiring<S>,
}

impl<S: ObjectStore> ClusterBuilder<S> {
    /// Node `i`'s RID (default `node-{i}`).
    pub fn rids(mut self, rid: impl Fn(usize) -> String + 'static) -> Self {
        self.rids = Box::new(rid);
        self
    }

    /// Node `i`'s node-direct and Channel handlers (default none).
    pub fn handlers(mut self, handlers: impl Fn(usize) -> Handlers + 'static) -> Self {
        self.handlers = Box::new(handlers);
        self
    }

    /// Give every node an object runtime; node `i` hosts the types of `registry(i)` and
    /// announces them as its object capabilities (client nodes excepted, see
    /// [`ClusterBuilder::clients`]).
    pub fn registry(mut self, registry: impl Fn(usize) -> Registry + 'static) -> Self {
        self.registry = Some(Box::new(registry));
        self
    }

    /// Hosting nodes issue an Entry Spot ID `node{i}-entry-<uuid>` (the registry needs an
    /// Entry Spot type for the runtime to create it).
    pub fn entry_spots(mut self) -> Self {
        self.entry_spots = true;
        self
    }

    /// The last `k` nodes host nothing and only call: no registry, no object capabilities, no
    /// Entry Spot.
    pub fn clients(mut self, k: usize) -> Self {
        assert!(k <= self.nodes, "more clients than nodes");
        self.clients = k;
        self
    }

    /// Placement weights of the first `weights.len()` nodes (the others keep the default 100).
    pub fn placement_weights(mut self, weights: &[u16]) -> Self {
        self.placement_weights = weights.to_vec();
        self
    }

    /// Node `i` (for each `i < weights.len()`) is a Server of `channel` with weight
    /// `weights[i]`.
    pub fn channel_servers(mut self, channel: &str, weights: &[u16]) -> Self {
        for (node, w) in weights.iter().enumerate() {
            self.channels.push(Membership {
                node,
                channel: channel.to_owned(),
                server_weight: Some(*w),
            });
        }
        self
    }

    /// Node `node` is a Client of `channel`.
    pub fn channel_client(mut self, channel: &str, node: usize) -> Self {
        self.channels.push(Membership {
            node,
            channel: channel.to_owned(),
            server_weight: None,
        });
        self
    }

    /// A last word on node `i`'s configuration, after everything above was applied.
    pub fn configure(mut self, f: impl Fn(usize, &mut MeshNodeConfig) + 'static) -> Self {
        self.configure = Box::new(f);
        self
    }

    /// Discover through `store` instead of a fresh memory store (the test keeps a handle to
    /// cut it off, read it, or share it with its registries).
    pub fn store<T: ObjectStore>(self, store: Arc<T>) -> ClusterBuilder<T> {
        ClusterBuilder {
            nodes: self.nodes,
            clients: self.clients,
            rids: self.rids,
            handlers: self.handlers,
            registry: self.registry,
            entry_spots: self.entry_spots,
            placement_weights: self.placement_weights,
            channels: self.channels,
            configure: self.configure,
            wiring: Wiring::Store(store),
        }
    }

    /// No store: node `dialer` starts last and dials every other node by manual endpoint with
    /// its known RID. (Object runtimes need a store: no registry with this wiring.)
    pub fn dialer(mut self, dialer: usize) -> Self {
        assert!(dialer < self.nodes, "the dialer is one of the nodes");
        self.wiring = Wiring::Dialer(dialer);
        self
    }

    fn node_config(&self, i: usize, registry: Option<&Registry>) -> MeshNodeConfig {
        let mut cfg = config("m", &(self.rids)(i));
        if let Some(w) = self.placement_weights.get(i) {
            cfg.placement_weight = *w;
        }
        for m in self.channels.iter().filter(|m| m.node == i) {
            cfg = match m.server_weight {
                Some(w) => cfg.channel_server(m.channel.clone(), w),
                None => cfg.channel_client(m.channel.clone()),
            };
        }
        if let Some(reg) = registry {
            cfg.object_capabilities = reg.capabilities();
            if self.entry_spots && !self.is_client(i) {
                cfg.entry_spot_prefix = Some(format!("node{i}"));
            }
        }
        (self.configure)(i, &mut cfg);
        cfg
    }

    fn is_client(&self, i: usize) -> bool {
        i >= self.nodes - self.clients
    }

    /// Start the nodes (and their object runtimes) and wait until every pair that connects is
    /// ready: with a store every pair but two Object Clients (`NotRequired`), with a dialer
    /// every pair of the dialer and another node.
    ///
    /// # Panics
    /// When a node or runtime does not start, or a connection is not ready within [`WAIT`].
    pub async fn start(self) -> Cluster<S> {
        match &self.wiring {
            Wiring::Store(store) => {
                let store = Arc::clone(store);
                let mut nodes = Vec::new();
                let mut rts = Vec::new();
                for i in 0..self.nodes {
                    let registry = self.registry.as_ref().map(|r| {
                        if self.is_client(i) {
                            Registry::new()
                        } else {
                            r(i)
                        }
                    });
                    let cfg = self.node_config(i, registry.as_ref());
                    let handlers = (self.handlers)(i);
                    match registry {
                        Some(reg) => {
                            let (node, rt) =
                                start_object_node(cfg, handlers, Arc::clone(&store), reg).await;
                            nodes.push(node);
                            rts.push(rt);
                        }
                        None => nodes.push(Arc::new(
                            MeshNode::start(
                                cfg,
                                handlers,
                                Some(Arc::clone(&store) as Arc<dyn DiscoveryBackend>),
                            )
                            .await
                            .unwrap(),
                        )),
                    }
                }
                for a in &nodes {
                    for b in &nodes {
                        let clients =
                            |n: &MeshNode| n.descriptor().object_role == ObjectRole::Client;
                        if a.rid() != b.rid() && !(clients(a) && clients(b)) {
                            a.wait_ready(b.rid(), WAIT).await.unwrap();
                        }
                    }
                }
                Cluster {
                    nodes,
                    rts,
                    store: Some(store),
                }
            }
            Wiring::Dialer(dialer) => {
                let dialer = *dialer;
                assert!(
                    self.registry.is_none(),
                    "object runtimes need a store: drop .dialer() or .registry()"
                );
                let mut nodes: Vec<Option<Arc<MeshNode>>> = vec![None; self.nodes];
                let mut peers = Vec::new();
                for i in (0..self.nodes).filter(|i| *i != dialer) {
                    let node = MeshNode::start(self.node_config(i, None), (self.handlers)(i), None)
                        .await
                        .unwrap();
                    peers.push(ManualPeer {
                        endpoint: node.endpoint().to_owned(),
                        expected_rid: Some(node.rid().to_owned()),
                    });
                    nodes[i] = Some(Arc::new(node));
                }
                let mut cfg = self.node_config(dialer, None);
                cfg.manual_peers.extend(peers);
                let d = Arc::new(
                    MeshNode::start(cfg, (self.handlers)(dialer), None)
                        .await
                        .unwrap(),
                );
                for n in nodes.iter().flatten() {
                    d.wait_ready(n.rid(), WAIT).await.unwrap();
                    n.wait_ready(d.rid(), WAIT).await.unwrap();
                }
                nodes[dialer] = Some(d);
                Cluster {
                    nodes: nodes.into_iter().map(Option::unwrap).collect(),
                    rts: Vec::new(),
                    store: None,
                }
            }
        }
    }
}

/// The route cache of every test runtime. The test leases live 2 s (`fast_timings`): the
/// default 2 s fencing margin would leave no admission window to cache a route in.
pub fn test_cache() -> CacheConfig {
    CacheConfig {
        fencing_margin: Duration::from_millis(200),
        ..CacheConfig::default()
    }
}

/// One MeshNode discovering through `store`, with an object runtime hosting `registry` on the
/// same store (and [`test_cache`]). For tests that start and restart nodes one by one.
pub async fn start_object_node<S: ObjectStore>(
    cfg: MeshNodeConfig,
    handlers: Handlers,
    store: Arc<S>,
    registry: Registry,
) -> (Arc<MeshNode>, ObjectRuntime<S>) {
    let node = Arc::new(
        MeshNode::start(
            cfg,
            handlers,
            Some(Arc::clone(&store) as Arc<dyn DiscoveryBackend>),
        )
        .await
        .unwrap(),
    );
    let rt = ObjectRuntime::start(Arc::clone(&node), store, registry, test_cache())
        .await
        .unwrap();
    (node, rt)
}

/// Running nodes; `rts[i]` is node `i`'s object runtime (empty without registries).
pub struct Cluster<S: ObjectStore = MemoryStore> {
    pub nodes: Vec<Arc<MeshNode>>,
    pub rts: Vec<ObjectRuntime<S>>,
    store: Option<Arc<S>>,
}

impl Cluster {
    /// A builder of `nodes` nodes `node-0`, `node-1`, … on a fresh memory store.
    pub fn builder(nodes: usize) -> ClusterBuilder {
        ClusterBuilder {
            nodes,
            clients: 0,
            rids: Box::new(|i| format!("node-{i}")),
            handlers: Box::new(|_| Handlers::new()),
            registry: None,
            entry_spots: false,
            placement_weights: Vec::new(),
            channels: Vec::new(),
            configure: Box::new(|_, _| {}),
            wiring: Wiring::Store(Arc::new(MemoryStore::new(SystemClock))),
        }
    }
}

impl<S: ObjectStore> Cluster<S> {
    /// The shared store.
    ///
    /// # Panics
    /// For a cluster wired by [`ClusterBuilder::dialer`].
    pub fn store(&self) -> &Arc<S> {
        self.store
            .as_ref()
            .expect("a cluster wired by a dialer has no store")
    }

    /// The store's authority record of `(kind, id)`.
    pub async fn authority(&self, kind: ObjectKind, id: &str) -> AuthorityRead {
        let key = AuthorityKey::new(kind, id).unwrap();
        self.store().read_authority(&key).await.unwrap()
    }

    /// Shut every node down (the object runtimes go with their nodes).
    pub async fn shutdown(self) {
        for n in &self.nodes {
            n.shutdown().await;
        }
    }
}
