//! Channel weights (issue 18 item 2): which nodes need a `SetChannelWeight`, and how many run the
//! spec's weight. Pure. A weight is never part of the pod revision, so a change goes live on
//! the running nodes and drift (a node restarted with an older weight, a hand-made change) is
//! re-applied on the next reconcile.

use std::collections::BTreeMap;

use crate::crd::ChannelReport;

/// One `SetChannelWeight` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetWeight {
    /// The pod whose host is asked.
    pub pod: String,
    /// The channel.
    pub channel: String,
    /// The weight.
    pub weight: u32,
}

/// The calls that bring every node in `nodes` (pod name, the weights its host reports) to the
/// `desired` (channel, weight) pairs, and the per-channel report. A node that does not report a
/// channel at all is not a member (membership is the revision's business) and gets no call.
pub fn reconcile_weights(
    desired: &[(String, i32)],
    nodes: &[(String, BTreeMap<String, u32>)],
) -> (Vec<SetWeight>, Vec<ChannelReport>) {
    let mut calls = Vec::new();
    let mut report = Vec::new();
    for (channel, weight) in desired {
        let want = u32::try_from(*weight).unwrap_or(0);
        let mut applied = 0;
        for (pod, weights) in nodes {
            match weights.get(channel) {
                Some(w) if *w == want => applied += 1,
                Some(_) => calls.push(SetWeight {
                    pod: pod.clone(),
                    channel: channel.clone(),
                    weight: want,
                }),
                None => {}
            }
        }
        report.push(ChannelReport {
            name: channel.clone(),
            weight: *weight,
            applied_nodes: applied,
            nodes: i32::try_from(nodes.len()).unwrap_or(i32::MAX),
        });
    }
    (calls, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(pod: &str, w: &[(&str, u32)]) -> (String, BTreeMap<String, u32>) {
        (
            pod.into(),
            w.iter().map(|(c, w)| ((*c).to_owned(), *w)).collect(),
        )
    }

    #[test]
    fn only_members_with_another_weight_are_called_and_the_report_counts_the_rest() {
        let desired = [("chat".to_owned(), 7), ("zone".to_owned(), 0)];
        let nodes = [
            node("a", &[("chat", 7), ("zone", 0)]),
            node("b", &[("chat", 100), ("zone", 0)]),
            node("c", &[("zone", 5)]),
        ];
        let (calls, report) = reconcile_weights(&desired, &nodes);
        assert_eq!(
            calls,
            [
                SetWeight {
                    pod: "b".into(),
                    channel: "chat".into(),
                    weight: 7
                },
                SetWeight {
                    pod: "c".into(),
                    channel: "zone".into(),
                    weight: 0
                },
            ]
        );
        assert_eq!(
            report,
            [
                ChannelReport {
                    name: "chat".into(),
                    weight: 7,
                    applied_nodes: 1,
                    nodes: 3
                },
                ChannelReport {
                    name: "zone".into(),
                    weight: 0,
                    applied_nodes: 2,
                    nodes: 3
                },
            ]
        );
    }

    #[test]
    fn no_nodes_no_calls() {
        let (calls, report) = reconcile_weights(&[("chat".into(), 1)], &[]);
        assert!(calls.is_empty());
        assert_eq!(report[0].nodes, 0);
    }
}
