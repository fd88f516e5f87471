//! The HTTP endpoints (issue 8 item 4): `/healthz` (the process is alive: 200, unless the
//! node has been fenced for longer than a lease TTL — its lease is lost and only a restart
//! recovers), `/readyz` (200 only while `Serving` and the mesh node admits work, else 503),
//! `/metrics` (Prometheus text exposition 0.0.4 through `prometheus-client`,
//! [`super::metrics::render`]). No authentication:
//! bind `admin.http_listen` to an interface only the kubelet and Prometheus reach.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use prometheus_client::registry::Registry;

use super::Host;

/// The router over `host`.
pub fn router(host: Arc<Host>) -> Router {
    // One registry for the life of the router: its collectors read the live values per scrape.
    let registry = Arc::new(super::metrics::registry(&host));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(move || metrics(Arc::clone(&registry))))
        .with_state(host)
}

async fn healthz(State(host): State<Arc<Host>>) -> impl IntoResponse {
    if host.healthy() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "unhealthy: the owner lease is lost; restart the process\n",
        )
    }
}

async fn readyz(State(host): State<Arc<Host>>) -> impl IntoResponse {
    if host.ready() {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", host.state().name()),
        )
    }
}

async fn metrics(registry: Arc<Registry>) -> Response {
    match super::metrics::render(&registry) {
        Ok(text) => ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "/metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "metrics encoding failed\n",
            )
                .into_response()
        }
    }
}

/// Serve the endpoints on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    host: Arc<Host>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    if let Err(e) = axum::serve(listener, router(host))
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(error = %e, "HTTP server failed");
    }
}
