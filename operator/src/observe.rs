//! From cluster objects to the planner's inputs (pure): a Mesh and its Channels to
//! [`Desired`], a Pod and its host's status to an [`ObservedPod`], and a HostAdmin
//! `HostStatus` to a [`HostView`].

use k8s_openapi::api::core::v1::Pod;
use zlink_admin_api::proto;

use crate::crd::{Channel, Mesh};
use crate::planner::{
    Desired, FORCE_DELETE_ANNOTATION, HostObservation, HostState, HostView, Intent, ObservedPod,
    RELOCATION_ANNOTATION, RETRY_ANNOTATION, RelocationState, RelocationView,
};
use crate::pods::{CONTAINER, MESSAGE_FOLLOW_SECONDS, REVISION_LABEL, VERSION_LABEL};

/// The channels of `mesh` among `channels` as (channel name, weight), sorted. Of two Channel
/// objects naming the same channel the older one wins; the others are returned as duplicates
/// (their object names).
pub fn mesh_channels(mesh: &str, channels: &[Channel]) -> (Vec<(String, i32)>, Vec<String>) {
    let mut mine: Vec<&Channel> = channels
        .iter()
        .filter(|c| c.spec.mesh_ref == mesh)
        .collect();
    mine.sort_by(|a, b| {
        let t = |c: &Channel| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
        t(a).cmp(&t(b)).then(a.metadata.name.cmp(&b.metadata.name))
    });
    let mut out: Vec<(String, i32)> = Vec::new();
    let mut dups = Vec::new();
    for c in mine {
        if out.iter().any(|(n, _)| *n == c.spec.channel_name) {
            dups.push(c.metadata.name.clone().unwrap_or_default());
        } else {
            out.push((c.spec.channel_name.clone(), c.spec.weight));
        }
    }
    out.sort();
    (out, dups)
}

/// The planner's view of `mesh`'s spec.
pub fn desired(mesh: &Mesh, channels: &[(String, i32)], store_ready: bool) -> Desired {
    let spec = &mesh.spec;
    let names: Vec<String> = channels.iter().map(|(n, _)| n.clone()).collect();
    let secs = |s: i32| u64::try_from(s).unwrap_or(0) * 1000;
    let relocation_ms = secs(spec.shutdown.relocation_deadline_seconds);
    Desired {
        mesh: mesh.metadata.name.clone().unwrap_or_default(),
        generation: mesh.metadata.generation.unwrap_or(0),
        replicas: u32::try_from(spec.replicas).unwrap_or(0),
        revision: crate::planner::revision(spec, &names),
        version: u64::try_from(spec.application_version).unwrap_or(0),
        max_surge: u32::try_from(spec.rollout.max_surge).unwrap_or(1).max(1),
        max_unavailable: u32::try_from(spec.rollout.max_unavailable).unwrap_or(0),
        paused: spec.rollout.paused,
        progress_deadline_ms: secs(spec.rollout.progress_deadline_seconds),
        relocation_attempts: u32::try_from(spec.rollout.relocation_attempts).unwrap_or(1),
        relocation_deadline_ms: relocation_ms,
        // The relocation, its Message Follow window, and a minute of margin.
        safe_timeout_ms: relocation_ms + secs(MESSAGE_FOLLOW_SECONDS as i32) + 60_000,
        store_ready,
    }
}

/// A HostAdmin status as the planner sees it. `relocate_unsupported` is the executor's
/// knowledge (the host answered `Relocate` with `UNIMPLEMENTED`).
pub fn host_view(s: &proto::HostStatus, lifecycle: u64, relocate_unsupported: bool) -> HostView {
    use proto::HostState as P;
    let state = match P::try_from(s.state).unwrap_or(P::Unspecified) {
        P::Unspecified | P::Starting => HostState::Starting,
        P::Serving => HostState::Serving,
        P::Draining => HostState::Draining,
        P::Relocating => HostState::Relocating,
        P::Relocated => HostState::Relocated,
        P::Stopped => HostState::Stopped,
        P::Fenced => HostState::Fenced,
    };
    let relocation = s.relocation.as_ref().map(|r| {
        use proto::RelocationState as R;
        RelocationView {
            id: r.relocation_id.clone(),
            state: match R::try_from(r.state).unwrap_or(R::Unspecified) {
                R::Unspecified | R::Running => RelocationState::Running,
                R::Completed => RelocationState::Completed,
                R::Failed => RelocationState::Failed,
            },
            reason: r.reason.clone(),
        }
    });
    HostView {
        rid: s.rid.clone(),
        lifecycle,
        state,
        version: s.application_version,
        objects: s.objects_live,
        safe_to_shutdown: s.safe_to_shutdown,
        ready_peers: s
            .peers
            .iter()
            .filter(|p| p.ready)
            .map(|p| p.rid.clone())
            .collect(),
        relocation,
        relocate_unsupported,
    }
}

/// Milliseconds since the Unix epoch of a Kubernetes time.
pub fn unix_ms(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> u64 {
    u64::try_from(t.0.as_millisecond()).unwrap_or(0)
}

/// The planner's view of `pod` (None for a pod without a name or uid).
pub fn observed_pod(pod: &Pod, host: HostObservation) -> Option<ObservedPod> {
    let meta = &pod.metadata;
    let labels = meta.labels.as_ref();
    let annotations = meta.annotations.as_ref();
    let annotation = |k: &str| annotations.and_then(|a| a.get(k));
    let status = pod.status.as_ref();
    let container_running = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.state.as_ref())
        .is_some_and(|st| st.running.is_some());
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Some(ObservedPod {
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        revision: labels
            .and_then(|l| l.get(REVISION_LABEL))
            .cloned()
            .unwrap_or_default(),
        version: labels
            .and_then(|l| l.get(VERSION_LABEL))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        created_ms: meta.creation_timestamp.as_ref().map_or(0, unix_ms),
        terminating: meta.deletion_timestamp.is_some(),
        container_running,
        ready,
        host,
        // An annotation that does not parse is treated as absent; the planner's next attempt
        // then starts from 1 with the id `<uid>-1` again, which the host maps to the
        // relocation it already ran (Relocate is idempotent per id).
        intent: annotation(RELOCATION_ANNOTATION)
            .and_then(|v| serde_json::from_str::<Intent>(v).ok()),
        force_delete: annotation(FORCE_DELETE_ANNOTATION).is_some_and(|v| v != "false"),
        retry: annotation(RETRY_ANNOTATION).cloned().unwrap_or_default(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::planner::Mode;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_running_ready_pod_with_its_annotations_is_observed_as_such() {
        let intent = Intent {
            id: "u1-2".into(),
            mode: Mode::RollingUpdate,
            target_version: 8,
            rid: "r".into(),
            lifecycle: 3,
            attempt: 2,
            first_attempt: 1,
            retry: String::new(),
            generation: 4,
            started_ms: 9,
        };
        let p = pod(serde_json::json!({
            "metadata": {
                "name": "game-aaaaaaaa-0", "uid": "u1", "resourceVersion": "55",
                "creationTimestamp": "2026-12-02T06:00:00Z",
                "labels": {"zlink.io/revision": "aaaaaaaabbbbbbbb", "zlink.io/version": "7"},
                "annotations": {
                    "zlink.io/relocation": serde_json::to_string(&intent).unwrap(),
                    "zlink.io/force-delete": "true",
                    "zlink.io/retry": "2",
                },
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "node", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                    "state": {"running": {"startedAt": "2026-12-02T06:00:01Z"}},
                }],
            },
        }));
        let o = observed_pod(&p, HostObservation::Unknown).unwrap();
        assert_eq!(
            (o.name.as_str(), o.uid.as_str(), o.resource_version.as_str()),
            ("game-aaaaaaaa-0", "u1", "55")
        );
        assert_eq!((o.revision.as_str(), o.version), ("aaaaaaaabbbbbbbb", 7));
        assert_eq!(o.created_ms, 1_796_191_200_000);
        assert!(o.container_running && o.ready && !o.terminating);
        assert_eq!(o.intent, Some(intent));
        assert!(o.force_delete);
        assert_eq!(o.retry, "2");
    }

    #[test]
    fn a_pending_pod_has_no_container_and_a_bad_annotation_is_absent() {
        let p = pod(serde_json::json!({
            "metadata": {
                "name": "x", "uid": "u", "deletionTimestamp": "2026-12-02T06:00:00Z",
                "annotations": {"zlink.io/relocation": "{not json"},
            },
            "status": {"phase": "Pending", "containerStatuses": [{
                "name": "node", "ready": false, "restartCount": 1, "image": "i", "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            }]},
        }));
        let o = observed_pod(&p, HostObservation::Unknown).unwrap();
        assert!(!o.container_running && !o.ready && o.terminating);
        assert_eq!(o.intent, None);
        assert!(!o.force_delete);
        assert!(
            observed_pod(
                &pod(serde_json::json!({"metadata": {"name": "x"}})),
                HostObservation::Unknown
            )
            .is_none()
        );
    }

    #[test]
    fn host_status_maps_state_relocation_and_ready_peers() {
        let s = proto::HostStatus {
            state: proto::HostState::Relocated as i32,
            rid: "r1".into(),
            application_version: 3,
            objects_live: 4,
            safe_to_shutdown: true,
            peers: vec![
                proto::PeerStatus {
                    rid: "a".into(),
                    ready: true,
                    state: "Ready".into(),
                },
                proto::PeerStatus {
                    rid: "b".into(),
                    ready: false,
                    state: "Connecting".into(),
                },
            ],
            relocation: Some(proto::RelocationStatus {
                relocation_id: "u-1".into(),
                state: proto::RelocationState::Completed as i32,
                ..proto::RelocationStatus::default()
            }),
            ..proto::HostStatus::default()
        };
        let v = host_view(&s, 2, false);
        assert_eq!(v.state, HostState::Relocated);
        assert_eq!(
            (v.rid.as_str(), v.lifecycle, v.version, v.objects),
            ("r1", 2, 3, 4)
        );
        assert_eq!(v.ready_peers, ["a"]);
        assert_eq!(
            v.relocation,
            Some(RelocationView {
                id: "u-1".into(),
                state: RelocationState::Completed,
                reason: String::new()
            })
        );
    }

    #[test]
    fn channels_of_a_mesh_keep_the_oldest_of_a_duplicate_name() {
        let ch = |name: &str, mesh: &str, channel: &str, weight: i32, created: &str| -> Channel {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "zlink.io/v1alpha1", "kind": "Channel",
                "metadata": {"name": name, "creationTimestamp": created},
                "spec": {"meshRef": mesh, "channelName": channel, "weight": weight},
            }))
            .unwrap()
        };
        let all = [
            ch("b", "game", "chat", 5, "2026-12-02T06:00:02Z"),
            ch("a", "game", "chat", 7, "2026-12-02T06:00:01Z"),
            ch("c", "game", "zone", 1, "2026-12-02T06:00:03Z"),
            ch("d", "other", "chat", 9, "2026-12-02T06:00:00Z"),
        ];
        let (mine, dups) = mesh_channels("game", &all);
        assert_eq!(mine, [("chat".to_owned(), 7), ("zone".to_owned(), 1)]);
        assert_eq!(dups, ["b"]);
    }
}
