//! The operator's `/metrics` (prometheus-client text format):
//!
//! - `zlink_operator_reconciles_total{controller, result}` — Mesh and Channel reconciles, `ok` or
//!   `error`;
//! - `zlink_operator_actions_total{action, result}` — what the planner asked for and how applying
//!   it went (`create_pod`, `write_intent`, `relocate`, `delete_pod`, `event`, `set_weight`);
//! - `zlink_operator_leader` — 1 while this replica leads (or runs without election).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// The operator's metric families.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<Labels, Counter>,
    actions: Family<Labels, Counter>,
    /// 1 while leading.
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<Labels, Counter>::default();
        let actions = Family::<Labels, Counter>::default();
        let leader = Gauge::default();
        registry.register(
            "zlink_operator_reconciles",
            "Reconciles by controller (mesh, channel) and result (ok, error)",
            reconciles.clone(),
        );
        registry.register(
            "zlink_operator_actions",
            "Planner actions applied, by action and result (ok, error)",
            actions.clone(),
        );
        registry.register(
            "zlink_operator_leader",
            "1 while this replica leads",
            leader.clone(),
        );
        Self {
            registry,
            reconciles,
            actions,
            leader,
        }
    }
}

fn labels(a: (&str, &str), b: (&str, &str)) -> Labels {
    vec![(a.0.into(), a.1.into()), (b.0.into(), b.1.into())]
}

impl Metrics {
    /// One reconcile of `controller` ended.
    pub fn reconciled(&self, controller: &str, ok: bool) {
        self.reconciles
            .get_or_create(&labels(
                ("controller", controller),
                ("result", if ok { "ok" } else { "error" }),
            ))
            .inc();
    }

    /// One action was applied.
    pub fn acted(&self, action: &str, ok: bool) {
        self.actions
            .get_or_create(&labels(
                ("action", action),
                ("result", if ok { "ok" } else { "error" }),
            ))
            .inc();
    }

    /// The count of `action` with `result` so far.
    pub fn actions(&self, action: &str, ok: bool) -> u64 {
        self.actions
            .get_or_create(&labels(
                ("action", action),
                ("result", if ok { "ok" } else { "error" }),
            ))
            .get()
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_families_are_exposed_with_their_labels() {
        let m = Metrics::default();
        m.reconciled("mesh", true);
        m.reconciled("mesh", true);
        m.reconciled("channel", false);
        m.acted("create_pod", true);
        m.leader.set(1);
        let text = m.encode();
        assert!(
            text.contains("zlink_operator_reconciles_total{controller=\"mesh\",result=\"ok\"} 2"),
            "{text}"
        );
        assert!(text.contains(
            "zlink_operator_reconciles_total{controller=\"channel\",result=\"error\"} 1"
        ));
        assert!(
            text.contains("zlink_operator_actions_total{action=\"create_pod\",result=\"ok\"} 1")
        );
        assert!(text.contains("zlink_operator_leader 1"));
        assert_eq!(m.actions("create_pod", true), 1);
    }
}
