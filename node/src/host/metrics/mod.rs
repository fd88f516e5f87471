//! `/metrics`: the host's counters through `prometheus-client`, the Prometheus project's Rust
//! client (issue 16 item 5), in the Prometheus text exposition format 0.0.4; and the
//! instrumented store wrappers that count store operations, their latency and lease renewal
//! failures (issue 8 item 4; metric names in `docs/operations.md`, "Metrics").
//!
//! - [`store`]: [`StoreMetrics`] and the [`InstrumentedBackend`] / [`InstrumentedStore`]
//!   wrappers the host puts around its discovery backend and its Location + Relocation Store.
//! - `families`: one `prometheus-client` collector per concern (host lifecycle, mesh node,
//!   object runtime, store calls) that reads the live counters at scrape time.
//! - [`registry`] registers those collectors once; [`render`] encodes a scrape.
//!
//! Why text format 0.0.4 and not OpenMetrics: the families keep the names dashboards and
//! alerts already use, including the `# TYPE` line of a counter (`zlink_foo_total`, where
//! OpenMetrics would declare `zlink_foo`), and every Prometheus server and parser reads it.

mod families;
pub mod store;

use std::sync::Arc;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;

pub use self::store::{InstrumentedBackend, InstrumentedStore, OpMetrics, STORE_OPS, StoreMetrics};
use super::Host;

/// The `Content-Type` of a [`render`]ed scrape: the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Encoding a scrape failed: a collector's write into the text buffer failed, which for a
/// `String` buffer means a bug in an encoder rather than a condition a caller can fix.
#[derive(Debug, thiserror::Error)]
#[error("encoding the /metrics exposition failed")]
pub struct RenderError(#[source] std::fmt::Error);

/// A registry with every family of `host`, in the order the operations guide lists them:
/// host lifecycle, mesh node, object runtime, store calls, STREAM sessions. Build it once; each [`render`]
/// reads the live values.
pub fn registry(host: &Arc<Host>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(families::HostFamilies(Arc::clone(host))));
    registry.register_collector(Box::new(families::MeshFamilies(Arc::clone(host))));
    registry.register_collector(Box::new(families::ObjectFamilies(Arc::clone(host))));
    registry.register_collector(Box::new(families::StoreFamilies(Arc::clone(
        &host.store_metrics,
    ))));
    registry.register_collector(Box::new(families::StreamFamilies(Arc::clone(host))));
    registry
}

/// One scrape of `registry` in the Prometheus text format ([`CONTENT_TYPE`]).
///
/// # Errors
///
/// [`RenderError`] when an encoder fails (it does not for the collectors of [`registry`]).
pub fn render(registry: &Registry) -> Result<String, RenderError> {
    let mut text = String::new();
    prometheus_text::encode(&mut text, registry).map_err(RenderError)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn store_scrape(metrics: &Arc<StoreMetrics>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(families::StoreFamilies(Arc::clone(metrics))));
        render(&registry).expect("a String buffer does not fail")
    }

    #[test]
    fn counters_keep_their_total_name_once_and_samples_without_labels_have_no_braces() {
        let metrics = Arc::new(StoreMetrics::default());
        metrics
            .lease_renew_failures
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let text = store_scrape(&metrics);
        assert!(
            text.contains("# TYPE zlink_store_ops_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("zlink_store_ops_total{op=\"claim_lease\",result=\"ok\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("zlink_lease_renew_failures_total 2\n"),
            "{text}"
        );
        assert!(!text.contains("_total_total"), "{text}");
    }

    #[test]
    fn a_histogram_renders_seconds_buckets_from_ten_microseconds_an_inf_bucket_sum_and_count() {
        let metrics = Arc::new(StoreMetrics::default());
        let reserve = &metrics.ops[store::op("reserve")].latency;
        reserve.observe(Duration::from_millis(2));
        reserve.observe(Duration::from_micros(170));
        let text = store_scrape(&metrics);
        let bounds: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("zlink_store_op_duration_seconds_bucket{op=\"reserve\",le=\"")
            })
            .filter_map(|l| l.split_once('"').map(|(le, _)| le))
            .collect();
        assert_eq!(
            bounds,
            [
                "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025",
                "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
                "+Inf"
            ]
        );
        for line in [
            "zlink_store_op_duration_seconds_bucket{op=\"reserve\",le=\"0.0001\"} 0\n",
            "zlink_store_op_duration_seconds_bucket{op=\"reserve\",le=\"0.00025\"} 1\n",
            "zlink_store_op_duration_seconds_bucket{op=\"reserve\",le=\"0.001\"} 1\n",
            "zlink_store_op_duration_seconds_bucket{op=\"reserve\",le=\"0.0025\"} 2\n",
            "zlink_store_op_duration_seconds_bucket{op=\"reserve\",le=\"+Inf\"} 2\n",
            "zlink_store_op_duration_seconds_sum{op=\"reserve\"} 0.00217\n",
            "zlink_store_op_duration_seconds_count{op=\"reserve\"} 2\n",
        ] {
            assert!(text.contains(line), "no {line:?} in {text}");
        }
    }
}
