//! The gRPC `HostAdmin` service (issue 8 item 3; proto
//! `protocol/admin/proto/zlink/admin/v1/host_admin.proto`) and the standard `grpc.health.v1.Health`
//! service, both behind bearer-token authentication.
//!
//! Authentication: every call must carry `authorization: Bearer <token>`; the token comes from
//! a file or an environment variable (a Kubernetes Secret, see [`super::config`]). The compare
//! is constant-time over SHA-256 digests of both values (so neither the content nor the length
//! of the configured token leaks through timing). A missing or wrong token is answered
//! `UNAUTHENTICATED` and counted in `zlink_admin_auth_failures_total`.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::Stream;
use subtle::ConstantTimeEq;
use tonic::{Request, Response, Status};

use super::proto::host_admin_server::{HostAdmin, HostAdminServer};
use super::proto::{
    GetStatusRequest, HostStatus, LocateRequest, LocateResponse, RelocateRequest, RelocateResponse,
    SetChannelWeightRequest, SetChannelWeightResponse, ShutdownRequest, ShutdownResponse,
    WatchStatusRequest,
};
use super::relocate::{RelocateArgs, RelocateRefusal, unit_result};
use super::{Host, HostState};
use zlink::call::error::ErrorKind;

/// The HostAdmin implementation over a running [`Host`].
#[derive(Debug, Clone)]
pub struct AdminService {
    host: Arc<Host>,
}

impl AdminService {
    /// A service for `host`.
    pub fn new(host: Arc<Host>) -> Self {
        Self { host }
    }
}

/// Checks the bearer token of every call (see the [module documentation](self)).
#[derive(Clone)]
pub struct BearerAuth {
    digest: [u8; 32],
    host: Arc<Host>,
}

impl std::fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerAuth(..)")
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl BearerAuth {
    /// Accept calls carrying `token`.
    pub fn new(token: &str, host: Arc<Host>) -> Self {
        Self {
            digest: sha256(token.as_bytes()),
            host,
        }
    }

    /// Whether `header` (the `authorization` value) carries the token.
    pub fn accepts(&self, header: Option<&[u8]>) -> bool {
        bearer_matches(&self.digest, header)
    }
}

/// Whether `header` is `Bearer <t>` with `SHA-256(t) == digest`, compared in constant time.
fn bearer_matches(digest: &[u8; 32], header: Option<&[u8]>) -> bool {
    let Some(h) = header else { return false };
    let Some(presented) = h.strip_prefix(b"Bearer ") else {
        return false;
    };
    bool::from(sha256(presented).ct_eq(digest))
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let header = req
            .metadata()
            .get("authorization")
            .map(tonic::metadata::MetadataValue::as_bytes);
        if self.accepts(header) {
            Ok(req)
        } else {
            self.host.auth_failures.fetch_add(1, Ordering::Relaxed);
            Err(Status::unauthenticated(
                "missing or invalid bearer token (authorization: Bearer <token>)",
            ))
        }
    }
}

type StatusStream = Pin<Box<dyn Stream<Item = Result<HostStatus, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl HostAdmin for AdminService {
    async fn get_status(
        &self,
        _: Request<GetStatusRequest>,
    ) -> Result<Response<HostStatus>, Status> {
        self.host.refresh_status();
        Ok(Response::new(self.host.subscribe_status().borrow().clone()))
    }

    type WatchStatusStream = StatusStream;

    async fn watch_status(
        &self,
        _: Request<WatchStatusRequest>,
    ) -> Result<Response<Self::WatchStatusStream>, Status> {
        self.host.refresh_status();
        let rx = self.host.subscribe_status();
        // The current status first, then each change; the stream ends after Stopped.
        let stream =
            futures::stream::unfold((rx, true, false), |(mut rx, first, done)| async move {
                if done {
                    return None;
                }
                if !first && rx.changed().await.is_err() {
                    return None;
                }
                let st = rx.borrow_and_update().clone();
                let stopped = st.state == HostState::Stopped.to_proto() as i32;
                Some((Ok(st), (rx, false, stopped)))
            });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn shutdown(
        &self,
        req: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        let req = req.into_inner();
        let ms = req.deadline_ms;
        if ms > super::config::MAX_INTERVAL_MS {
            return Err(Status::invalid_argument(format!(
                "deadline_ms {ms} must be 0 (configured drain deadline) or 1..={}",
                super::config::MAX_INTERVAL_MS
            )));
        }
        let deadline = (ms > 0).then(|| Duration::from_millis(ms));
        let started = self.host.request_drain(deadline, req.relocate_first);
        Ok(Response::new(ShutdownResponse {
            started,
            state: self.host.state().to_proto() as i32,
        }))
    }

    async fn relocate(
        &self,
        req: Request<RelocateRequest>,
    ) -> Result<Response<RelocateResponse>, Status> {
        let req = req.into_inner();
        let mode = match super::proto::RelocationMode::try_from(req.mode) {
            Ok(super::proto::RelocationMode::PlannedMaintenance) => {
                zlink::relocation::host::RelocationMode::PlannedMaintenance
            }
            Ok(super::proto::RelocationMode::RollingUpdate) => {
                zlink::relocation::host::RelocationMode::RollingUpdate
            }
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "mode {} is not PLANNED_MAINTENANCE (0) or ROLLING_UPDATE (1)",
                    req.mode
                )));
            }
        };
        if req.deadline_ms > super::config::MAX_INTERVAL_MS {
            return Err(Status::invalid_argument(format!(
                "deadline_ms {} must be 0 (relocation.deadline_ms) or 1..={}",
                req.deadline_ms,
                super::config::MAX_INTERVAL_MS
            )));
        }
        if req.relocation_id.len() > 128 {
            return Err(Status::invalid_argument(
                "relocation_id is at most 128 bytes",
            ));
        }
        if let Some(bad) = req
            .target_rids
            .iter()
            .find(|r| zlink_protocol::ids::validate_rid(r).is_err())
        {
            return Err(Status::invalid_argument(format!(
                "target_rids: {bad:?} is not a RID"
            )));
        }
        let deadline = Duration::from_millis(if req.deadline_ms == 0 {
            self.host.config().relocation.deadline_ms
        } else {
            req.deadline_ms
        });
        let r = self
            .host
            .relocate(RelocateArgs {
                mode,
                target_version: req.target_application_version,
                deadline,
                relocation_id: (!req.relocation_id.is_empty()).then_some(req.relocation_id),
                target_rids: req.target_rids,
            })
            .await
            .map_err(|e| match e {
                RelocateRefusal::InvalidArgument(m) => Status::invalid_argument(m),
                RelocateRefusal::FailedPrecondition(m) => Status::failed_precondition(m),
            })?;
        Ok(Response::new(RelocateResponse {
            relocation: Some(r.status),
            units: r.units.iter().map(unit_result).collect(),
        }))
    }

    async fn locate(
        &self,
        req: Request<LocateRequest>,
    ) -> Result<Response<LocateResponse>, Status> {
        let req = req.into_inner();
        let kind = match req.kind.as_str() {
            "actor" => zlink_store::types::ObjectKind::Actor,
            "spot" => zlink_store::types::ObjectKind::Spot,
            other => {
                return Err(Status::invalid_argument(format!(
                    "kind {other:?} is not \"actor\" or \"spot\""
                )));
            }
        };
        let objects = self
            .host
            .objects()
            .ok_or_else(|| Status::failed_precondition("this host runs no object runtime"))?;
        let l = objects
            .locate(kind, &req.id)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidOperation => Status::invalid_argument(e.to_string()),
                _ => Status::unavailable(e.to_string()),
            })?;
        let mut out = LocateResponse {
            found: l.authority.is_some(),
            here: l.here.to_owned(),
            ..Default::default()
        };
        if let Some(a) = l.authority {
            out.state = format!("{:?}", a.state).to_ascii_lowercase();
            out.owner_rid = a.owner_node.rid.clone();
            out.owner_lifecycle_generation = a.owner_node.lifecycle_generation;
            out.object_generation = a.object_generation;
            out.authority_owner_generation = a.authority_owner_generation;
            out.owner_lease_generation = a.owner.lease_generation;
            out.store_version = a.store_version;
            out.stable_type = a.allocation.stable_type.clone();
            out.membership = zlink::object::runtime::membership_of(&a.payload).unwrap_or_default();
        }
        Ok(Response::new(out))
    }

    async fn set_channel_weight(
        &self,
        req: Request<SetChannelWeightRequest>,
    ) -> Result<Response<SetChannelWeightResponse>, Status> {
        let req = req.into_inner();
        let weight = u16::try_from(req.weight)
            .ok()
            .filter(|w| *w <= zlink::config::defaults::MAX_WEIGHT)
            .ok_or_else(|| {
                Status::invalid_argument(format!("weight {} must be 0..=10000", req.weight))
            })?;
        let node = self
            .host
            .node()
            .ok_or_else(|| Status::unavailable("the mesh node is not started yet"))?;
        node.set_channel_weight(&req.channel, weight)
            .map_err(|e| match e.kind() {
                ErrorKind::Configuration => Status::invalid_argument(e.to_string()),
                _ => Status::failed_precondition(e.to_string()),
            })?;
        tracing::info!(channel = %req.channel, weight, "channel weight set");
        self.host.refresh_status();
        Ok(Response::new(SetChannelWeightResponse {
            descriptor_revision: node.descriptor().descriptor_revision,
        }))
    }
}

/// Serve HostAdmin and the health service on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    host: Arc<Host>,
    token: String,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let auth = BearerAuth::new(&token, Arc::clone(&host));
    let r = tonic::transport::Server::builder()
        .layer(tonic::service::InterceptorLayer::new(auth))
        .add_service(HostAdminServer::new(AdminService::new(host)))
        .add_service(health)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            shutdown,
        )
        .await;
    if let Err(e) = r {
        tracing::error!(error = %e, "admin gRPC server failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        let digest = sha256(b"the-admin-token-0123");
        assert!(bearer_matches(
            &digest,
            Some(b"Bearer the-admin-token-0123")
        ));
        for wrong in [
            &b"Bearer the-admin-token-0124"[..],
            b"Bearer the-admin-token-012",
            b"Bearer the-admin-token-01234",
            b"bearer the-admin-token-0123",
            b"the-admin-token-0123",
            b"Bearer ",
            b"",
        ] {
            assert!(!bearer_matches(&digest, Some(wrong)), "{wrong:?}");
        }
        assert!(!bearer_matches(&digest, None));
    }
}
