//! Table tests of the planner, one per rule of the module docs, and properties over generated
//! cluster states (issue 18 acceptance 1).

use super::*;

pub(super) const REV_OLD: &str = "0000000011111111";
pub(super) const REV_NEW: &str = "aaaaaaaabbbbbbbb";

pub(super) fn desired() -> Desired {
    Desired {
        mesh: "m".into(),
        generation: 2,
        replicas: 3,
        revision: REV_NEW.into(),
        version: 2,
        max_surge: 1,
        max_unavailable: 0,
        paused: false,
        progress_deadline_ms: 600_000,
        relocation_attempts: 3,
        relocation_deadline_ms: 60_000,
        safe_timeout_ms: 120_000,
        store_ready: true,
    }
}

/// A running, Ready, Serving pod with `objects` objects.
pub(super) fn pod(name: &str, revision: &str, version: u64, objects: u64) -> ObservedPod {
    ObservedPod {
        name: name.into(),
        uid: format!("uid-{name}"),
        resource_version: "7".into(),
        revision: revision.into(),
        version,
        created_ms: 0,
        terminating: false,
        container_running: true,
        ready: true,
        host: HostObservation::Status(HostView {
            rid: format!("rid-{name}"),
            lifecycle: 1,
            state: HostState::Serving,
            version,
            objects,
            safe_to_shutdown: true,
            ready_peers: Vec::new(),
            relocation: None,
            relocate_unsupported: false,
        }),
        intent: None,
        force_delete: false,
        retry: String::new(),
    }
}

pub(super) fn view(p: &mut ObservedPod) -> &mut HostView {
    match &mut p.host {
        HostObservation::Status(v) => v,
        other => panic!("no host view: {other:?}"),
    }
}

/// Every pod's host sees every other running pod's host as a Ready peer.
pub(super) fn meshed(mut pods: Vec<ObservedPod>) -> Observed {
    let rids: Vec<String> = pods
        .iter()
        .filter_map(|p| p.view().map(|v| v.rid.clone()))
        .collect();
    for p in &mut pods {
        if let HostObservation::Status(v) = &mut p.host {
            let me = v.rid.clone();
            v.ready_peers = rids.iter().filter(|r| **r != me).cloned().collect();
        }
    }
    Observed { pods }
}

fn old3() -> Vec<ObservedPod> {
    vec![
        pod("m-00000000-0", REV_OLD, 1, 30),
        pod("m-00000000-1", REV_OLD, 1, 10),
        pod("m-00000000-2", REV_OLD, 1, 20),
    ]
}

fn new_pod(n: u32) -> ObservedPod {
    pod(&pod_name("m", REV_NEW, n), REV_NEW, 2, 0)
}

fn cond<'a>(p: &'a Plan, t: &str) -> &'a PlannedCondition {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition"))
}

fn intent_of(p: &ObservedPod, attempt: u32, now: u64) -> Intent {
    let v = p.view().expect("view");
    Intent {
        id: Intent::id_for(&p.uid, attempt),
        mode: Mode::RollingUpdate,
        target_version: 2,
        rid: v.rid.clone(),
        lifecycle: v.lifecycle,
        attempt,
        first_attempt: 1,
        retry: String::new(),
        generation: 2,
        started_ms: now,
    }
}

fn relocation(id: &str, state: RelocationState) -> Option<RelocationView> {
    Some(RelocationView {
        id: id.into(),
        state,
        reason: String::new(),
    })
}

/// Three old pods, one Ready new pod, and `f` applied to the old pod `m-00000000-1` (the one
/// with the fewest objects).
fn rollout_with(f: impl FnOnce(&mut ObservedPod)) -> Observed {
    let mut pods = old3();
    pods.push(new_pod(0));
    f(&mut pods[1]);
    meshed(pods)
}

#[test]
fn an_empty_mesh_creates_replicas_pods_with_deterministic_names() {
    let p = plan(&desired(), &Observed::default(), 0);
    let names: Vec<&str> = p
        .actions
        .iter()
        .map(|a| match a {
            Action::CreatePod { name, version, .. } => {
                assert_eq!(*version, 2);
                name.as_str()
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(names, ["m-aaaaaaaa-0", "m-aaaaaaaa-1", "m-aaaaaaaa-2"]);
    assert!(!cond(&p, "Ready").status);
}

#[test]
fn a_settled_mesh_does_nothing_and_is_ready() {
    let obs = meshed(vec![new_pod(0), new_pod(1), new_pod(2)]);
    let p = plan(&desired(), &obs, 0);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(cond(&p, "Ready").status);
    assert_eq!(cond(&p, "Ready").reason, "AllReplicasReady");
    assert!(cond(&p, "Available").status);
    assert_eq!(cond(&p, "Progressing").reason, "NewRevisionAvailable");
    assert!(!cond(&p, "RolloutBlocked").status);
    assert_eq!(p.status.updated, 3);
}

#[test]
fn a_version_bump_surges_one_pod_and_relocates_nothing_before_it_is_ready() {
    let p = plan(&desired(), &meshed(old3()), 0);
    assert_eq!(
        p.actions,
        vec![Action::CreatePod {
            name: "m-aaaaaaaa-0".into(),
            revision: REV_NEW.into(),
            version: 2,
        }]
    );
    let mut pods = old3();
    let mut n = new_pod(0);
    n.ready = false;
    view(&mut n).state = HostState::Starting;
    pods.push(n);
    let p = plan(&desired(), &meshed(pods), 1_000);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(cond(&p, "Ready").reason, "RolloutInProgress");
}

#[test]
fn a_ready_new_peer_lets_the_emptiest_old_pod_write_its_intent_first() {
    let obs = rollout_with(|_| {});
    let p = plan(&desired(), &obs, 5_000);
    let [Action::WriteIntent { pod, uid, intent }] = p.actions.as_slice() else {
        panic!("{:?}", p.actions);
    };
    assert_eq!(pod, "m-00000000-1", "fewest objects first");
    assert_eq!(uid, "uid-m-00000000-1");
    assert_eq!(intent.id, "uid-m-00000000-1-1");
    assert_eq!(
        (intent.mode, intent.target_version, intent.attempt),
        (Mode::RollingUpdate, 2, 1)
    );
    assert_eq!(
        (intent.rid.as_str(), intent.lifecycle),
        ("rid-m-00000000-1", 1)
    );
    assert_eq!(intent.started_ms, 5_000);
}

#[test]
fn a_written_intent_is_sent_as_relocate_with_the_staying_pods_as_targets() {
    let obs = rollout_with(|p| p.intent = Some(intent_of(p, 1, 0)));
    let p = plan(&desired(), &obs, 1_000);
    assert_eq!(
        p.actions,
        vec![Action::Relocate {
            pod: "m-00000000-1".into(),
            id: "uid-m-00000000-1-1".into(),
            mode: Mode::RollingUpdate,
            target_version: 2,
            deadline_ms: 60_000,
            target_rids: vec!["rid-m-aaaaaaaa-0".into()],
        }]
    );
}

/// Pod `p` with attempt 1 written, its host in `host` reporting that attempt as `state`.
fn attempt_one(p: &mut ObservedPod, host: HostState, safe: bool, state: RelocationState) {
    p.intent = Some(intent_of(p, 1, 0));
    let v = view(p);
    v.state = host;
    v.safe_to_shutdown = safe;
    v.relocation = relocation("uid-m-00000000-1-1", state);
}

#[test]
fn a_running_relocation_is_left_alone_and_a_completed_safe_one_is_deleted_with_preconditions() {
    let running = rollout_with(|p| {
        attempt_one(p, HostState::Relocating, false, RelocationState::Running);
    });
    assert!(plan(&desired(), &running, 1_000).actions.is_empty());
    let done = rollout_with(|p| {
        attempt_one(p, HostState::Relocated, true, RelocationState::Completed);
        p.resource_version = "42".into();
        view(p).objects = 0;
    });
    let p = plan(&desired(), &done, 2_000);
    assert_eq!(
        p.actions[0],
        Action::DeletePod {
            pod: "m-00000000-1".into(),
            uid: "uid-m-00000000-1".into(),
            resource_version: "42".into(),
            reason: DeleteReason::Safe,
        }
    );
    // No other old pod starts: 3 pods are available (2 old, 1 new) and maxUnavailable is 0.
    assert_eq!(p.actions.len(), 1, "{:?}", p.actions);
}

#[test]
fn completed_but_not_safe_waits_and_times_out_without_a_delete() {
    let obs = rollout_with(|p| {
        attempt_one(p, HostState::Relocated, false, RelocationState::Completed);
    });
    let p = plan(&desired(), &obs, 10_000);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.requeue_at_ms, Some(120_000));
    let p = plan(&desired(), &obs, 120_000);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(cond(&p, "RolloutBlocked").reason, "RelocationTimedOut");
    assert_eq!(p.status.pods[1].reason, "RelocationTimedOut");
}

#[test]
fn safe_to_shutdown_alone_never_deletes_a_pod_that_did_not_relocate() {
    // Every old host reports safe_to_shutdown (they never relocated); with no Ready new pod the
    // plan is only the surge.
    let mut pods = old3();
    for p in &mut pods {
        view(p).state = HostState::Relocated;
    }
    let p = plan(&desired(), &meshed(pods), 0);
    assert!(
        p.actions
            .iter()
            .all(|a| !matches!(a, Action::DeletePod { .. })),
        "{:?}",
        p.actions
    );
}

#[test]
fn a_changed_rid_voids_the_attempt_and_the_next_one_gets_a_new_id() {
    let obs = rollout_with(|p| {
        p.intent = Some(intent_of(p, 1, 0));
        view(p).rid = "rid-restarted".into();
    });
    let p = plan(&desired(), &obs, 3_000);
    let [Action::WriteIntent { intent, .. }] = p.actions.as_slice() else {
        panic!("{:?}", p.actions);
    };
    assert_eq!(
        (intent.attempt, intent.id.as_str()),
        (2, "uid-m-00000000-1-2")
    );
    assert_eq!(intent.rid, "rid-restarted");
    // A changed lifecycle alone voids it too.
    let obs = rollout_with(|p| {
        p.intent = Some(intent_of(p, 1, 0));
        view(p).lifecycle = 9;
    });
    let p = plan(&desired(), &obs, 3_000);
    assert!(matches!(&p.actions[..], [Action::WriteIntent { intent, .. }] if intent.attempt == 2));
}

#[test]
fn a_failed_relocation_is_retried_up_to_the_attempts_then_blocks_until_a_retry() {
    let failed = |attempt: u32, retry: &str| {
        let retry = retry.to_owned();
        rollout_with(move |p| {
            p.intent = Some(intent_of(p, attempt, 0));
            p.retry = retry;
            let v = view(p);
            v.state = HostState::Relocated;
            v.relocation = relocation(
                &Intent::id_for("uid-m-00000000-1", attempt),
                RelocationState::Failed,
            );
        })
    };
    for attempt in 1..3 {
        let p = plan(&desired(), &failed(attempt, ""), 1_000);
        assert!(
            matches!(&p.actions[..], [Action::WriteIntent { intent, .. }] if intent.attempt == attempt + 1),
            "attempt {attempt}: {:?}",
            p.actions
        );
    }
    let p = plan(&desired(), &failed(3, ""), 1_000);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(cond(&p, "RolloutBlocked").reason, "RelocationFailed");
    // A new zlink.io/retry value starts a new series.
    let p = plan(&desired(), &failed(3, "again"), 1_000);
    let [Action::WriteIntent { intent, .. }] = p.actions.as_slice() else {
        panic!("{:?}", p.actions);
    };
    assert_eq!((intent.attempt, intent.first_attempt), (4, 4));
    assert_eq!(intent.retry, "again");
    // So does a spec change.
    let mut d = desired();
    d.generation = 3;
    let p = plan(&d, &failed(3, ""), 1_000);
    assert!(
        matches!(&p.actions[..], [Action::WriteIntent { intent, .. }] if intent.first_attempt == 4 && intent.generation == 3)
    );
}

#[test]
fn unsupported_or_unreachable_hosts_are_reported_and_never_deleted() {
    let obs = rollout_with(|p| view(p).relocate_unsupported = true);
    let p = plan(&desired(), &obs, 0);
    assert_eq!(cond(&p, "RolloutBlocked").reason, "RelocateUnsupported");
    assert!(
        p.actions.iter().all(|a| match a {
            Action::WriteIntent { pod, .. } | Action::DeletePod { pod, .. } =>
                pod != "m-00000000-1",
            _ => true,
        }),
        "{:?}",
        p.actions
    );
    for (host, reason) in [
        (HostObservation::Unreachable, "HostUnreachable"),
        (HostObservation::AuthFailed, "AdminAuthFailed"),
    ] {
        let obs = rollout_with(|p| p.host = host.clone());
        let p = plan(&desired(), &obs, 0);
        assert!(cond(&p, "Degraded").status);
        assert_eq!(cond(&p, "Degraded").reason, reason);
        assert!(
            p.actions.iter().all(|a| match a {
                Action::WriteIntent { pod, .. } | Action::DeletePod { pod, .. } =>
                    pod != "m-00000000-1",
                _ => true,
            }),
            "{:?}",
            p.actions
        );
    }
}

#[test]
fn an_old_pod_without_a_container_is_deleted_directly() {
    let mut pods = old3();
    pods[0].container_running = false;
    pods[0].ready = false;
    let p = plan(&desired(), &meshed(pods), 0);
    assert_eq!(
        p.actions[0],
        Action::DeletePod {
            pod: "m-00000000-0".into(),
            uid: "uid-m-00000000-0".into(),
            resource_version: "7".into(),
            reason: DeleteReason::NoContainer,
        }
    );
}

#[test]
fn without_the_store_secret_nothing_is_created_relocated_or_deleted() {
    let mut d = desired();
    d.store_ready = false;
    let p = plan(&d, &Observed::default(), 0);
    assert!(p.actions.is_empty());
    assert_eq!(cond(&p, "RolloutBlocked").reason, "StoreSecretMissing");
    assert_eq!(cond(&p, "Ready").reason, "StoreSecretMissing");
    let mut pods = old3();
    pods[0].container_running = false;
    let p = plan(&d, &meshed(pods), 0);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

#[test]
fn zero_replicas_deletes_every_pod_with_a_warning() {
    let mut d = desired();
    d.replicas = 0;
    let p = plan(&d, &meshed(old3()), 0);
    let deletes = p
        .actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::DeletePod {
                    reason: DeleteReason::ScaledToZero,
                    ..
                }
            )
        })
        .count();
    let warnings = p
        .actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::Event {
                    warning: true,
                    reason: "ScaledToZero",
                    ..
                }
            )
        })
        .count();
    assert_eq!((deletes, warnings), (3, 3));
    assert_eq!(cond(&p, "Ready").reason, "ScaledToZero");
}

#[test]
fn a_new_pod_not_ready_by_the_progress_deadline_blocks_the_rollout() {
    let mut pods = old3();
    let mut n = new_pod(0);
    n.ready = false;
    n.created_ms = 1_000;
    pods.push(n);
    let obs = meshed(pods);
    let p = plan(&desired(), &obs, 600_999);
    assert!(cond(&p, "Progressing").status);
    assert_eq!(p.requeue_at_ms, Some(601_000));
    let p = plan(&desired(), &obs, 601_000);
    assert!(!cond(&p, "Progressing").status);
    assert_eq!(cond(&p, "Progressing").reason, "ProgressDeadlineExceeded");
    assert_eq!(cond(&p, "RolloutBlocked").reason, "NewPodNotReady");
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

#[test]
fn a_superseded_pod_that_never_became_ready_and_holds_nothing_relocates_without_a_target() {
    // v1 pods m-00000000-{0,1,2}; the surge pod of a bad v2 (revision "bad") never became
    // Ready; the spec now asks for REV_NEW (v2 too here). With replicas 3 + maxSurge 1 the bad
    // pod holds the only surge slot, and no staying pod exists to be a target.
    let bad_rev = "badbadbadbadbad0";
    let bad_name = pod_name("m", bad_rev, 0);
    let mut bad = pod(&bad_name, bad_rev, 2, 0);
    bad.ready = false;
    let cases: Vec<(&str, ObservedPod, bool)> = vec![
        ("not Ready and empty", bad.clone(), true),
        (
            "Ready (available: it waits for a target)",
            {
                let mut p = bad.clone();
                p.ready = true;
                p
            },
            false,
        ),
        (
            "holds objects",
            {
                let mut p = bad.clone();
                view(&mut p).objects = 1;
                p
            },
            false,
        ),
        (
            "unreachable host",
            {
                let mut p = bad.clone();
                p.host = HostObservation::Unreachable;
                p
            },
            false,
        ),
    ];
    for (what, b, relocates) in cases {
        let mut pods = old3();
        pods.push(b);
        let p = plan(&desired(), &meshed(pods), 1_000);
        let intent = p.actions.iter().find_map(|a| match a {
            Action::WriteIntent { pod, intent, .. } if *pod == bad_name => Some(intent.clone()),
            _ => None,
        });
        assert_eq!(intent.is_some(), relocates, "{what}: {:?}", p.actions);
        if let Some(i) = intent {
            assert_eq!(
                (i.mode, i.target_version),
                (Mode::PlannedMaintenance, 2),
                "{what}"
            );
        }
        // Nothing is deleted for it (only a safe relocation lets it go); when it relocates, no
        // old pod does (its objects would move twice).
        assert!(
            p.actions
                .iter()
                .all(|a| !matches!(a, Action::DeletePod { .. })),
            "{what}: {:?}",
            p.actions
        );
        if relocates {
            assert!(
                p.actions.iter().all(|a| !matches!(a, Action::WriteIntent { pod, .. } if pod.starts_with("m-00000000"))),
                "{what}: {:?}",
                p.actions
            );
        }
    }
    // The intent written, the host relocates nothing, completes and is safe: deleted as Safe,
    // which frees the slot for the spec's revision.
    let mut done = bad.clone();
    let i = intent_of(&done, 1, 1_000);
    let i = Intent {
        mode: Mode::PlannedMaintenance,
        ..i
    };
    done.intent = Some(i.clone());
    let v = view(&mut done);
    v.state = HostState::Relocated;
    v.safe_to_shutdown = true;
    v.relocation = relocation(&i.id, RelocationState::Completed);
    let mut pods = old3();
    pods.push(done);
    let p = plan(&desired(), &meshed(pods), 2_000);
    assert!(
        p.actions.iter().any(|a| matches!(a, Action::DeletePod { pod, reason: DeleteReason::Safe, .. } if *pod == bad_name)),
        "{:?}",
        p.actions
    );
}

#[test]
fn paused_starts_no_relocation_and_no_surge() {
    let mut d = desired();
    d.paused = true;
    assert!(plan(&d, &meshed(old3()), 0).actions.is_empty());
    let p = plan(&d, &rollout_with(|_| {}), 0);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(cond(&p, "RolloutBlocked").reason, "Paused");
    // A relocation already written still goes out.
    let p = plan(
        &d,
        &rollout_with(|p| p.intent = Some(intent_of(p, 1, 0))),
        0,
    );
    assert!(matches!(&p.actions[..], [Action::Relocate { .. }]));
}

#[test]
fn force_delete_removes_an_unsafe_pod_with_a_warning() {
    let obs = rollout_with(|p| p.force_delete = true);
    let p = plan(&desired(), &obs, 0);
    assert!(matches!(
        &p.actions[0],
        Action::Event {
            warning: true,
            reason: "ForceDelete",
            ..
        }
    ));
    assert!(matches!(
        &p.actions[1],
        Action::DeletePod { pod, reason: DeleteReason::Forced, .. } if pod == "m-00000000-1"
    ));
}

#[test]
fn a_revision_only_change_relocates_with_planned_maintenance() {
    let mut pods: Vec<ObservedPod> = old3()
        .into_iter()
        .map(|mut p| {
            p.version = 2;
            view(&mut p).version = 2;
            p
        })
        .collect();
    pods.push(new_pod(0));
    let p = plan(&desired(), &meshed(pods), 0);
    assert!(matches!(
        &p.actions[..],
        [Action::WriteIntent { intent, .. }] if intent.mode == Mode::PlannedMaintenance && intent.target_version == 2
    ));
}

#[test]
fn a_scale_down_relocates_the_emptiest_pod_to_the_staying_ones() {
    let mut d = desired();
    d.replicas = 2;
    let mut pods = vec![new_pod(0), new_pod(1), new_pod(2)];
    view(&mut pods[0]).objects = 5;
    view(&mut pods[1]).objects = 1;
    view(&mut pods[2]).objects = 9;
    let mut obs = meshed(pods);
    let p = plan(&d, &obs, 0);
    let [Action::WriteIntent { pod, intent, .. }] = p.actions.as_slice() else {
        panic!("{:?}", p.actions);
    };
    assert_eq!(pod, "m-aaaaaaaa-1");
    assert_eq!(intent.mode, Mode::PlannedMaintenance);
    obs.pods[1].intent = Some(intent.clone());
    // The next plan relocates it to the two staying pods, even though it now has the most
    // objects of all (a started relocation keeps its pod leaving).
    view(&mut obs.pods[1]).objects = 50;
    let p = plan(&d, &obs, 1);
    let [Action::Relocate { target_rids, .. }] = p.actions.as_slice() else {
        panic!("{:?}", p.actions);
    };
    assert_eq!(target_rids, &["rid-m-aaaaaaaa-0", "rid-m-aaaaaaaa-2"]);
}

#[test]
fn a_target_the_source_does_not_see_as_ready_is_not_used() {
    let mut obs = rollout_with(|_| {});
    for p in &mut obs.pods[..3] {
        view(p).ready_peers.retain(|r| !r.contains("aaaaaaaa"));
    }
    assert!(plan(&desired(), &obs, 0).actions.is_empty());
}

#[test]
fn availability_is_never_made_worse_by_a_relocation() {
    // maxUnavailable 0 and only 3 available (one old pod is not Ready): only that one may
    // start (it is unavailable already, so its relocation costs nothing).
    let mut obs = rollout_with(|_| {});
    obs.pods[0].ready = false;
    let p = plan(&desired(), &obs, 0);
    assert!(
        matches!(&p.actions[..], [Action::WriteIntent { pod, .. }] if pod == "m-00000000-0"),
        "{:?}",
        p.actions
    );
    // maxUnavailable 1: one available pod may start too.
    let mut d = desired();
    d.max_unavailable = 1;
    let p = plan(&d, &obs, 0);
    let starts: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::WriteIntent { pod, .. } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(starts, ["m-00000000-1", "m-00000000-0"], "{:?}", p.actions);
}

#[test]
fn a_taken_name_is_skipped_not_duplicated() {
    let mut pods = vec![new_pod(0)];
    let mut t = new_pod(1);
    t.terminating = true;
    pods.push(t);
    let p = plan(&desired(), &meshed(pods), 0);
    let names: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["m-aaaaaaaa-2", "m-aaaaaaaa-3"]);
}

#[test]
fn the_revision_ignores_replicas_rollout_and_weights_but_not_the_image_or_channels() {
    let spec: crate::crd::MeshSpec = serde_json::from_value(serde_json::json!({
        "image": "zlink-node:1",
        "applicationVersion": 1,
        "locationStore": {"redisUrlSecretRef": {"name": "r", "key": "u"}, "namespace": "g"},
    }))
    .expect("spec");
    let base = revision(&spec, &["chat".into()]);
    assert_eq!(base.len(), 16);
    let mut s = spec.clone();
    s.replicas = 9;
    s.rollout.max_surge = 4;
    assert_eq!(revision(&s, &["chat".into()]), base);
    assert_eq!(revision(&spec, &["chat".into(), "chat".into()]), base);
    let mut s = spec.clone();
    s.image = "zlink-node:2".into();
    assert_ne!(revision(&s, &["chat".into()]), base);
    assert_ne!(revision(&spec, &["chat".into(), "zone".into()]), base);
    let mut s = spec;
    s.application_version = 2;
    assert_ne!(revision(&s, &["chat".into()]), base);
}

// ---- Properties over generated cluster states ----

/// A small seeded generator (the tests print the seed; `ZLINK_PLANNER_SEED` replays one).
pub(super) struct Lcg(pub(super) u64);

impl Lcg {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub(super) fn seed() -> u64 {
    std::env::var("ZLINK_PLANNER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2026_1202)
}

fn random_state(g: &mut Lcg) -> (Desired, Observed, u64) {
    let mut d = desired();
    d.replicas = g.below(6) as u32;
    d.max_surge = 1 + g.below(3) as u32;
    d.max_unavailable = g.below(3) as u32;
    d.paused = g.chance(10);
    d.store_ready = !g.chance(5);
    d.relocation_attempts = 1 + g.below(3) as u32;
    d.generation = 1 + g.below(4) as i64;
    let now = 100_000 + g.below(1_000_000);
    let mut pods = Vec::new();
    for i in 0..g.below(9) {
        let new = g.chance(50);
        let (rev, ver) = if new {
            (REV_NEW, 2)
        } else {
            (REV_OLD, 1 + g.below(2))
        };
        let mut p = pod(&format!("p{i}"), rev, ver, g.below(50));
        p.created_ms = g.below(now);
        p.terminating = g.chance(10);
        p.container_running = !g.chance(15);
        p.ready = p.container_running && !g.chance(20);
        p.force_delete = g.chance(5);
        p.retry = if g.chance(10) {
            "r1".into()
        } else {
            String::new()
        };
        let state = match g.below(7) {
            0 => HostState::Starting,
            1 | 2 => HostState::Serving,
            3 => HostState::Relocating,
            4 => HostState::Relocated,
            5 => HostState::Draining,
            _ => HostState::Fenced,
        };
        let uid = p.uid.clone();
        {
            let v = view(&mut p);
            v.state = state;
            v.safe_to_shutdown = g.chance(50);
            v.relocate_unsupported = g.chance(5);
            v.lifecycle = 1 + g.below(2);
        }
        if g.chance(50) {
            let attempt = 1 + g.below(4) as u32;
            let v = p.view().expect("view").clone();
            p.intent = Some(Intent {
                id: Intent::id_for(&uid, attempt),
                mode: Mode::RollingUpdate,
                target_version: 2,
                rid: if g.chance(80) {
                    v.rid.clone()
                } else {
                    "rid-old".into()
                },
                lifecycle: if g.chance(90) { v.lifecycle } else { 99 },
                attempt,
                first_attempt: 1 + g.below(u64::from(attempt)) as u32,
                retry: String::new(),
                generation: 1 + g.below(3) as i64,
                started_ms: g.below(now),
            });
            if g.chance(70) {
                let st = match g.below(3) {
                    0 => RelocationState::Running,
                    1 => RelocationState::Completed,
                    _ => RelocationState::Failed,
                };
                let id = if g.chance(85) {
                    Intent::id_for(&uid, attempt)
                } else {
                    "other".into()
                };
                view(&mut p).relocation = relocation(&id, st);
            }
        }
        match g.below(20) {
            0 => p.host = HostObservation::Unreachable,
            1 => p.host = HostObservation::AuthFailed,
            2 => p.host = HostObservation::Unknown,
            _ => {}
        }
        pods.push(p);
    }
    let mut obs = meshed(pods);
    // Some peers are not Ready.
    for p in &mut obs.pods {
        if let HostObservation::Status(v) = &mut p.host {
            v.ready_peers.retain(|_| !g.chance(15));
        }
    }
    (d, obs, now)
}

/// Checks one plan against the invariants of the module docs; panics with `ctx` on a breach.
pub(super) fn check_invariants(d: &Desired, obs: &Observed, now: u64, p: &Plan, ctx: &str) {
    let by_name = |n: &str| obs.pods.iter().find(|p| p.name == n);
    let total = obs.pods.len();
    let creates = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::CreatePod { .. }))
        .count();
    if creates > 0 {
        assert!(
            total + creates <= (d.replicas + d.max_surge) as usize,
            "{ctx}: {creates} creates over {total} pods exceed replicas + maxSurge"
        );
        assert!(d.store_ready, "{ctx}: a create without the store Secret");
    }
    let mut touched = BTreeSet::new();
    let min_available = (d.replicas as usize).saturating_sub(d.max_unavailable as usize);
    let available = obs.pods.iter().filter(|p| p.available()).count();
    // Availability taken by the user's explicit choice (force-delete, replicas 0) and by the
    // relocations the planner starts.
    let (mut forced, mut lost) = (0usize, 0usize);
    for a in &p.actions {
        match a {
            Action::CreatePod {
                name,
                revision,
                version,
            } => {
                assert!(
                    by_name(name).is_none(),
                    "{ctx}: create of a taken name {name}"
                );
                assert_eq!(
                    (revision.as_str(), *version),
                    (d.revision.as_str(), d.version)
                );
            }
            Action::DeletePod {
                pod,
                uid,
                resource_version,
                reason,
            } => {
                let q = by_name(pod).expect("delete of an unknown pod");
                assert!(d.store_ready, "{ctx}: a delete without the store Secret");
                assert!(!q.terminating, "{ctx}: {pod} deleted twice");
                assert_eq!((uid, resource_version), (&q.uid, &q.resource_version));
                let ok = match reason {
                    DeleteReason::Safe => q.safe(),
                    DeleteReason::NoContainer => !q.container_running,
                    DeleteReason::Forced => q.force_delete,
                    DeleteReason::ScaledToZero => d.replicas == 0,
                };
                assert!(ok, "{ctx}: {pod} deleted as {reason:?} but is not: {q:?}");
                assert!(touched.insert(pod.clone()), "{ctx}: two actions for {pod}");
                if q.available() {
                    assert!(
                        matches!(reason, DeleteReason::Forced | DeleteReason::ScaledToZero),
                        "{ctx}: an available pod {pod} deleted as {reason:?}"
                    );
                    forced += 1;
                }
            }
            Action::WriteIntent { pod, uid, intent } => {
                let q = by_name(pod).expect("intent for an unknown pod");
                assert!(d.store_ready && !d.paused, "{ctx}: start while blocked");
                assert_eq!(uid, &q.uid);
                assert_eq!(intent.id, Intent::id_for(&q.uid, intent.attempt), "{ctx}");
                let prev = q.intent.as_ref().map_or(0, |i| i.attempt);
                assert_eq!(intent.attempt, prev + 1, "{ctx}: attempts go one by one");
                assert!(
                    intent.attempt - intent.first_attempt < d.relocation_attempts,
                    "{ctx}: over the attempts"
                );
                assert_ne!(q.revision, "", "{ctx}");
                assert!(!q.terminating && q.container_running, "{ctx}");
                assert_eq!(intent.started_ms, now);
                assert!(touched.insert(pod.clone()), "{ctx}: two actions for {pod}");
                if q.available() {
                    lost += 1;
                }
            }
            Action::Relocate {
                pod,
                id,
                target_rids,
                mode,
                target_version,
                ..
            } => {
                let q = by_name(pod).expect("relocate of an unknown pod");
                let i = q
                    .current_intent()
                    .expect("relocate without a current intent");
                assert_eq!(
                    (id, mode, target_version),
                    (&i.id, &i.mode, &i.target_version),
                    "{ctx}: Relocate names the annotation's id"
                );
                assert!(touched.insert(pod.clone()), "{ctx}: two actions for {pod}");
                let src = q.view().expect("view");
                for rid in target_rids {
                    let t = obs
                        .pods
                        .iter()
                        .find(|t| t.view().is_some_and(|v| &v.rid == rid))
                        .expect("target is a pod");
                    assert!(
                        t.revision == d.revision
                            || (*mode == Mode::PlannedMaintenance && t.version == q.version),
                        "{ctx}: a target of an old revision outside a consolidation"
                    );
                    assert!(!t.terminating, "{ctx}: a terminating target");
                    assert_ne!(&t.name, pod, "{ctx}: relocate to itself");
                    assert!(
                        src.ready_peers.contains(rid),
                        "{ctx}: target not a ready peer"
                    );
                }
            }
            Action::Event { .. } => {}
        }
    }
    let base = available - forced;
    assert!(
        base.saturating_sub(lost) >= base.min(min_available),
        "{ctx}: availability {base} made worse by {lost} relocations (min {min_available})"
    );
}

#[test]
fn property_ten_thousand_generated_states_keep_every_invariant_and_plan_deterministically() {
    let seed = seed();
    let mut g = Lcg(seed);
    for case in 0..12_000 {
        let (d, obs, now) = random_state(&mut g);
        let ctx = format!("seed {seed} case {case}");
        let p = plan(&d, &obs, now);
        check_invariants(&d, &obs, now, &p, &ctx);
        assert_eq!(p, plan(&d, &obs, now), "{ctx}: not deterministic");
        // The order pods are listed in changes nothing.
        let mut shuffled = obs.clone();
        shuffled.pods.reverse();
        let n = shuffled.pods.len();
        if n > 1 {
            shuffled.pods.swap(0, g.below(n as u64) as usize);
        }
        assert_eq!(
            p,
            plan(&d, &shuffled, now),
            "{ctx}: depends on the pod order"
        );
    }
}
