//! The operator's side of the nodes' HostAdmin API, behind the [`Hosts`] trait so the
//! controller can be driven by a scripted double in tests.
//!
//! [`AdminHosts`] keeps one `WatchStatus` stream per node pod (keyed by pod uid and IP), keeps
//! the latest status, and wakes the Mesh's reconcile on every change. `Relocate` calls run in
//! their own tasks (the RPC returns when the relocation ends); at most one per relocation id is
//! in flight, and `UNIMPLEMENTED` is remembered for the pod so the planner reports
//! `RelocateUnsupported` instead of asking again.
//!
//! # Errors
//! A stream that cannot be opened or breaks makes the pod's observation `Unreachable` (or
//! `AuthFailed` for `UNAUTHENTICATED` / `PERMISSION_DENIED`) until it reconnects (250 ms doubling
//! to 5 s). A failed `Relocate` is logged; the planner asks again on its next reconcile.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;
use tonic::Code;
use zlink_admin_api::proto::host_admin_client::HostAdminClient;
use zlink_admin_api::proto::{self, RelocateRequest, WatchStatusRequest};

use crate::crd::Mesh;
use crate::planner::{HostObservation, Mode};

/// A node pod the operator talks to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodAddr {
    /// The Mesh it belongs to (woken on changes).
    pub mesh: ObjectRef<Mesh>,
    /// The pod's name.
    pub name: String,
    /// The pod's uid.
    pub uid: String,
    /// The pod IP (127.x.y.z under the process kubelet).
    pub ip: String,
}

/// One `Relocate` call (see the planner's `Action::Relocate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelocateCall {
    /// The relocation id (idempotency key).
    pub id: String,
    /// The mode.
    pub mode: Mode,
    /// The targets' version.
    pub target_version: u64,
    /// The deadline passed to the host.
    pub deadline_ms: u64,
    /// Only these peers may take units.
    pub target_rids: Vec<String>,
}

/// The nodes' admin API as the controller uses it.
pub trait Hosts: Send + Sync + 'static {
    /// The latest observation of `pod`'s host (starting to watch it on first use) with the
    /// admin `token`.
    fn observe(&self, pod: &PodAddr, token: &str) -> HostObservation;
    /// Asks `pod`'s host to relocate; returns at once (the result shows in [`Hosts::observe`]).
    fn relocate(&self, pod: &PodAddr, token: &str, call: RelocateCall);
    /// Stops watching the pods of `mesh` whose uid is not in `keep`.
    fn retain(&self, mesh: &ObjectRef<Mesh>, keep: &HashSet<String>);
    /// The channel weights `pod`'s host last reported (None without a status).
    fn channel_weights(&self, pod: &PodAddr) -> Option<BTreeMap<String, u32>>;
    /// Asks `pod`'s host to set `channel`'s weight; returns at once (the new weight shows in
    /// [`Hosts::channel_weights`]).
    fn set_channel_weight(&self, pod: &PodAddr, token: &str, channel: &str, weight: u32);
}

#[derive(Default)]
struct Watch {
    status: Option<proto::HostStatus>,
    error: Option<HostObservation>,
    unsupported: bool,
    token: String,
    ip: String,
    task: Option<tokio::task::JoinHandle<()>>,
}

type Watches = Arc<Mutex<HashMap<String, Watch>>>;

/// [`Hosts`] over the real HostAdmin gRPC API at `http://<pod IP>:<port>`.
pub struct AdminHosts {
    port: u16,
    watches: Watches,
    meshes: Mutex<HashMap<String, ObjectRef<Mesh>>>,
    in_flight: Arc<Mutex<HashSet<String>>>,
    wake: UnboundedSender<ObjectRef<Mesh>>,
}

impl AdminHosts {
    /// Talks to the admin API on `port` of every pod; changes wake `wake`.
    pub fn new(port: u16, wake: UnboundedSender<ObjectRef<Mesh>>) -> Self {
        Self {
            port,
            watches: Arc::default(),
            meshes: Mutex::default(),
            in_flight: Arc::default(),
            wake,
        }
    }

    fn start(&self, pod: &PodAddr, token: &str) {
        let (uid, mesh) = (pod.uid.clone(), pod.mesh.clone());
        {
            let mut w = lock(&self.watches);
            let entry = w.entry(uid.clone()).or_default();
            token.clone_into(&mut entry.token);
            entry.ip.clone_from(&pod.ip);
            entry.status = None;
            entry.error = None;
            if let Some(old) = entry.task.take() {
                old.abort();
            }
        }
        let url = format!("http://{}:{}", pod.ip, self.port);
        let watches = Arc::clone(&self.watches);
        let wake = self.wake.clone();
        let token = token.to_owned();
        let task = tokio::spawn(async move {
            let mut backoff = Duration::from_millis(250);
            loop {
                match watch_once(&url, &token, &uid, &watches, &wake, &mesh).await {
                    Ok(()) => return, // no longer watched
                    Err(status) => {
                        let obs = match status.code() {
                            Code::Unauthenticated | Code::PermissionDenied => {
                                HostObservation::AuthFailed
                            }
                            _ => HostObservation::Unreachable,
                        };
                        tracing::debug!(%url, error = %status, "host status stream failed");
                        let (changed, was_streaming) =
                            lock(&watches).get_mut(&uid).map_or((false, false), |w| {
                                // A stream that delivered statuses before it broke starts
                                // the backoff afresh.
                                let streaming = w.error.is_none() && w.status.is_some();
                                let changed = w.error.as_ref() != Some(&obs);
                                w.error = Some(obs);
                                (changed, streaming)
                            });
                        if was_streaming {
                            backoff = Duration::from_millis(250);
                        }
                        if changed {
                            let _ = wake.unbounded_send(mesh.clone());
                        }
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
        if let Some(w) = lock(&self.watches).get_mut(&pod.uid) {
            w.task = Some(task);
        } else {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Adds the bearer token to every call.
type Auth = Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>;

type Client = HostAdminClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Auth>,
>;

async fn client(url: &str, token: &str) -> Result<Client, tonic::Status> {
    let bearer: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
        format!("Bearer {}", token.trim()).parse().map_err(|_| {
            tonic::Status::unauthenticated("the admin token is not printable ASCII")
        })?;
    let channel = tonic::transport::Channel::from_shared(url.to_owned())
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connect {url}: {e}")))?;
    let auth: Auth = Box::new(move |mut req: tonic::Request<()>| {
        req.metadata_mut().insert("authorization", bearer.clone());
        Ok(req)
    });
    Ok(HostAdminClient::with_interceptor(channel, auth))
}

async fn watch_once(
    url: &str,
    token: &str,
    uid: &str,
    watches: &Watches,
    wake: &UnboundedSender<ObjectRef<Mesh>>,
    mesh: &ObjectRef<Mesh>,
) -> Result<(), tonic::Status> {
    let mut c = client(url, token).await?;
    let mut stream = c.watch_status(WatchStatusRequest {}).await?.into_inner();
    while let Some(s) = stream.message().await? {
        {
            let mut w = lock(watches);
            let Some(w) = w.get_mut(uid) else {
                return Ok(());
            };
            w.error = None;
            w.status = Some(s);
        }
        let _ = wake.unbounded_send(mesh.clone());
    }
    Err(tonic::Status::unavailable("the status stream ended"))
}

impl Hosts for AdminHosts {
    fn observe(&self, pod: &PodAddr, token: &str) -> HostObservation {
        lock(&self.meshes)
            .entry(pod.uid.clone())
            .or_insert_with(|| pod.mesh.clone());
        let restart = {
            let w = lock(&self.watches);
            w.get(&pod.uid)
                .is_none_or(|w| w.ip != pod.ip || w.token != token)
        };
        if restart {
            self.start(pod, token);
        }
        let w = lock(&self.watches);
        let Some(w) = w.get(&pod.uid) else {
            return HostObservation::Unknown;
        };
        match (&w.error, &w.status) {
            (Some(e), _) => e.clone(),
            (None, Some(s)) => {
                HostObservation::Status(crate::observe::host_view(s, 0, w.unsupported))
            }
            (None, None) => HostObservation::Unknown,
        }
    }

    fn relocate(&self, pod: &PodAddr, token: &str, call: RelocateCall) {
        if !lock(&self.in_flight).insert(call.id.clone()) {
            return;
        }
        let url = format!("http://{}:{}", pod.ip, self.port);
        let (token, uid, mesh) = (token.to_owned(), pod.uid.clone(), pod.mesh.clone());
        let (watches, in_flight, wake) = (
            Arc::clone(&self.watches),
            Arc::clone(&self.in_flight),
            self.wake.clone(),
        );
        tokio::spawn(async move {
            let req = RelocateRequest {
                mode: match call.mode {
                    Mode::PlannedMaintenance => proto::RelocationMode::PlannedMaintenance,
                    Mode::RollingUpdate => proto::RelocationMode::RollingUpdate,
                } as i32,
                target_application_version: call.target_version,
                deadline_ms: call.deadline_ms,
                relocation_id: call.id.clone(),
                target_rids: call.target_rids.clone(),
            };
            let result = async {
                let mut c = client(&url, &token).await?;
                tokio::time::timeout(
                    Duration::from_millis(call.deadline_ms.saturating_add(30_000)),
                    c.relocate(req),
                )
                .await
                .map_err(|_| tonic::Status::deadline_exceeded("Relocate did not return"))?
            }
            .await;
            match result {
                Ok(r) => {
                    tracing::info!(%url, id = %call.id, outcome = ?r.into_inner().relocation.map(|s| s.state), "Relocate returned")
                }
                Err(s) if s.code() == Code::Unimplemented => {
                    tracing::warn!(%url, "the host does not implement Relocate");
                    if let Some(w) = lock(&watches).get_mut(&uid) {
                        w.unsupported = true;
                    }
                }
                Err(s) => tracing::warn!(%url, id = %call.id, error = %s, "Relocate failed"),
            }
            lock(&in_flight).remove(&call.id);
            let _ = wake.unbounded_send(mesh);
        });
    }

    fn channel_weights(&self, pod: &PodAddr) -> Option<BTreeMap<String, u32>> {
        let w = lock(&self.watches);
        let s = w.get(&pod.uid)?.status.as_ref()?;
        Some(
            s.channels
                .iter()
                .map(|c| (c.channel.clone(), c.weight))
                .collect(),
        )
    }

    fn set_channel_weight(&self, pod: &PodAddr, token: &str, channel: &str, weight: u32) {
        let key = format!("{}/{channel}/{weight}", pod.uid);
        if !lock(&self.in_flight).insert(key.clone()) {
            return;
        }
        let url = format!("http://{}:{}", pod.ip, self.port);
        let (token, channel, mesh) = (token.to_owned(), channel.to_owned(), pod.mesh.clone());
        let (in_flight, wake) = (Arc::clone(&self.in_flight), self.wake.clone());
        tokio::spawn(async move {
            let result = async {
                let mut c = client(&url, &token).await?;
                c.set_channel_weight(proto::SetChannelWeightRequest {
                    channel: channel.clone(),
                    weight,
                })
                .await
            }
            .await;
            match result {
                Ok(_) => tracing::info!(%url, %channel, weight, "channel weight set"),
                Err(s) => {
                    tracing::warn!(%url, %channel, weight, error = %s, "SetChannelWeight failed")
                }
            }
            lock(&in_flight).remove(&key);
            let _ = wake.unbounded_send(mesh);
        });
    }

    fn retain(&self, mesh: &ObjectRef<Mesh>, keep: &HashSet<String>) {
        let mut meshes = lock(&self.meshes);
        let gone: Vec<String> = meshes
            .iter()
            .filter(|(uid, m)| *m == mesh && !keep.contains(*uid))
            .map(|(uid, _)| uid.clone())
            .collect();
        let mut w = lock(&self.watches);
        for uid in gone {
            meshes.remove(&uid);
            if let Some(t) = w.remove(&uid).and_then(|w| w.task) {
                t.abort();
            }
        }
    }
}
