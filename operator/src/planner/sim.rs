//! A model-host simulation of rollouts (issue 18 acceptance 1): a cluster of model pods whose
//! hosts start, serve, relocate (moving their objects to the targets), become safe and go away,
//! driven only by the planner's actions. A watcher checks the invariants after every step.
//!
//! - Fault-free, every generated rollout (version bump, revision-only change, scale up and down)
//!   converges to `Ready` within a bounded number of steps, and no object is ever lost.
//! - With faults (failed relocations, container restarts, unreachable hosts, dropped and
//!   repeated actions, a pod that never becomes safe), the watcher still holds: no unsafe
//!   delete, no object lost by a delete, one relocation id per pod attempt.

use std::collections::{BTreeMap, BTreeSet};

use super::tests::{Lcg, REV_NEW, REV_OLD, check_invariants, desired, seed};
use super::*;

const STEP_MS: u64 = 1_000;

#[derive(Debug, Clone)]
struct ModelPod {
    name: String,
    uid: String,
    rv: u64,
    revision: String,
    version: u64,
    created_ms: u64,
    /// Steps until the container runs (then Ready one step later).
    starting: u32,
    /// Steps until a terminating pod is gone.
    terminating: Option<u32>,
    running: bool,
    ready: bool,
    rid: String,
    lifecycle: u64,
    state: HostState,
    objects: u64,
    relocation: Option<(String, RelocationState, u32, Vec<String>)>,
    safe: bool,
    /// Steps after a completed relocation until SafeToShutdown (the follow window).
    safe_in: u32,
    intent: Option<Intent>,
    unreachable: bool,
    never_safe: bool,
}

struct Model {
    now: u64,
    pods: Vec<ModelPod>,
    uids: u64,
    /// Objects that existed and were lost by a delete of a pod still holding them.
    lost_by_delete: u64,
    /// Objects lost by a fault (a container restart) — not the planner's doing.
    lost_by_fault: u64,
    /// Every relocation id a host was asked for, by (uid, attempt).
    ids: BTreeMap<(String, u32), String>,
    relocate_calls: BTreeMap<String, u32>,
}

impl Model {
    fn steady(replicas: u32, revision: &str, version: u64, objects: u64) -> Self {
        let mut m = Self {
            now: 1_000_000,
            pods: Vec::new(),
            uids: 0,
            lost_by_delete: 0,
            lost_by_fault: 0,
            ids: BTreeMap::new(),
            relocate_calls: BTreeMap::new(),
        };
        for n in 0..replicas {
            m.create(&pod_name("m", revision, n), revision, version);
            let p = m.pods.last_mut().expect("pod");
            p.starting = 0;
            p.running = true;
            p.ready = true;
            p.state = HostState::Serving;
            p.objects = objects;
        }
        m
    }

    fn create(&mut self, name: &str, revision: &str, version: u64) {
        self.uids += 1;
        self.pods.push(ModelPod {
            name: name.into(),
            uid: format!("u{}", self.uids),
            rv: 1,
            revision: revision.into(),
            version,
            created_ms: self.now,
            starting: 2,
            terminating: None,
            running: false,
            ready: false,
            rid: format!("r{}", self.uids),
            lifecycle: 1,
            state: HostState::Starting,
            objects: 0,
            relocation: None,
            safe: true,
            safe_in: 0,
            intent: None,
            unreachable: false,
            never_safe: false,
        });
    }

    fn total_objects(&self) -> u64 {
        self.pods.iter().map(|p| p.objects).sum()
    }

    fn observe(&self) -> Observed {
        let ready_rids: Vec<String> = self
            .pods
            .iter()
            .filter(|p| p.running && p.ready && p.terminating.is_none())
            .map(|p| p.rid.clone())
            .collect();
        Observed {
            pods: self
                .pods
                .iter()
                .map(|p| ObservedPod {
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                    resource_version: p.rv.to_string(),
                    revision: p.revision.clone(),
                    version: p.version,
                    created_ms: p.created_ms,
                    terminating: p.terminating.is_some(),
                    container_running: p.running,
                    ready: p.ready,
                    host: if !p.running {
                        HostObservation::Unknown
                    } else if p.unreachable {
                        HostObservation::Unreachable
                    } else {
                        HostObservation::Status(HostView {
                            rid: p.rid.clone(),
                            lifecycle: p.lifecycle,
                            state: p.state,
                            version: p.version,
                            objects: p.objects,
                            safe_to_shutdown: p.safe,
                            ready_peers: ready_rids
                                .iter()
                                .filter(|r| **r != p.rid)
                                .cloned()
                                .collect(),
                            relocation: p.relocation.as_ref().map(|(id, st, _, _)| {
                                RelocationView {
                                    id: id.clone(),
                                    state: *st,
                                    reason: String::new(),
                                }
                            }),
                            relocate_unsupported: false,
                        })
                    },
                    intent: p.intent.clone(),
                    force_delete: false,
                    retry: String::new(),
                })
                .collect(),
        }
    }

    fn apply(&mut self, a: &Action, g: &mut Lcg, faults: bool) {
        match a {
            Action::CreatePod {
                name,
                revision,
                version,
            } => {
                if self.pods.iter().all(|p| &p.name != name) {
                    self.create(name, revision, *version);
                }
            }
            Action::WriteIntent { pod, uid, intent } => {
                if let Some(p) = self
                    .pods
                    .iter_mut()
                    .find(|p| &p.name == pod && &p.uid == uid)
                {
                    p.intent = Some(intent.clone());
                    p.rv += 1;
                }
            }
            Action::Relocate {
                pod,
                id,
                target_rids,
                ..
            } => {
                let Some(p) = self.pods.iter_mut().find(|p| &p.name == pod) else {
                    return;
                };
                let i = p
                    .intent
                    .as_ref()
                    .expect("Relocate before its intent was written");
                assert_eq!(&i.id, id, "Relocate with an id other than the annotation's");
                let key = (p.uid.clone(), i.attempt);
                let prior = self.ids.insert(key.clone(), id.clone());
                assert!(
                    prior.as_ref().is_none_or(|prior| prior == id),
                    "a second relocation id for pod attempt {key:?}"
                );
                *self.relocate_calls.entry(id.clone()).or_default() += 1;
                if !p.running || p.unreachable {
                    return;
                }
                let same = p.relocation.as_ref().is_some_and(|r| &r.0 == id);
                let busy = p.state == HostState::Relocating;
                if same || busy || !matches!(p.state, HostState::Serving | HostState::Relocated) {
                    return; // idempotent, or refused (FAILED_PRECONDITION): the planner asks again
                }
                let steps = 1 + g.below(3) as u32;
                p.state = HostState::Relocating;
                p.safe = false;
                p.relocation = Some((
                    id.clone(),
                    RelocationState::Running,
                    steps,
                    target_rids.clone(),
                ));
                if faults && g.chance(5) {
                    p.never_safe = true;
                }
            }
            Action::DeletePod {
                pod,
                uid,
                resource_version,
                ..
            } => {
                let Some(p) = self.pods.iter_mut().find(|p| &p.name == pod) else {
                    return;
                };
                if &p.uid != uid || &p.rv.to_string() != resource_version {
                    return; // precondition failed: 409
                }
                if p.terminating.is_none() {
                    self.lost_by_delete += p.objects;
                    p.objects = 0;
                    p.terminating = Some(2);
                    p.state = HostState::Draining;
                }
            }
            Action::Event { .. } => {}
        }
    }

    /// Time passes by one step: hosts start, relocations progress, pods go away, faults strike.
    fn tick(&mut self, g: &mut Lcg, faults: bool) {
        self.now += STEP_MS;
        let mut moves: Vec<(String, u64)> = Vec::new();
        let live_rids: BTreeSet<String> = self
            .pods
            .iter()
            // A host that is relocating or relocated itself takes no units.
            .filter(|p| p.running && p.terminating.is_none() && p.state == HostState::Serving)
            .map(|p| p.rid.clone())
            .collect();
        for p in &mut self.pods {
            if let Some(t) = p.terminating.as_mut() {
                *t = t.saturating_sub(1);
                continue;
            }
            if !p.running {
                if p.starting == 0 {
                    p.running = true;
                    p.state = HostState::Starting;
                } else {
                    p.starting -= 1;
                }
                continue;
            }
            if !p.ready && p.state == HostState::Starting {
                p.ready = true;
                p.state = HostState::Serving;
            }
            if let Some((_, st, left, targets)) = p.relocation.as_mut() {
                if *st == RelocationState::Running {
                    if *left > 0 {
                        *left -= 1;
                    } else if let (false, Some(to)) = (
                        faults && g.chance(20),
                        targets.iter().find(|t| live_rids.contains(*t)),
                    ) {
                        *st = RelocationState::Completed;
                        p.state = HostState::Relocated;
                        moves.push((to.clone(), p.objects));
                        p.objects = 0;
                        p.safe_in = 1 + g.below(2) as u32;
                    } else {
                        // A failed unit, or every target gone: the objects stay here.
                        *st = RelocationState::Failed;
                        p.state = HostState::Relocated;
                        p.safe = true;
                    }
                } else if *st == RelocationState::Completed && !p.safe && !p.never_safe {
                    if p.safe_in == 0 {
                        p.safe = true;
                    } else {
                        p.safe_in -= 1;
                    }
                }
            }
        }
        for (to, objects) in moves {
            let target = self
                .pods
                .iter_mut()
                .find(|p| p.rid == to)
                .expect("a live target of this step");
            target.objects += objects;
        }
        for p in &mut self.pods {
            if faults && p.running && p.terminating.is_none() {
                if g.chance(2) {
                    // The container restarts: a new node lifecycle and RID; in-memory objects
                    // are gone (not the planner's doing).
                    self.uids += 1;
                    p.rid = format!("r{}", self.uids);
                    p.lifecycle += 1;
                    self.lost_by_fault += p.objects;
                    p.objects = 0;
                    p.state = HostState::Starting;
                    p.ready = false;
                    p.relocation = None;
                    p.safe = true;
                    p.never_safe = false;
                }
                p.unreachable = g.chance(5);
            }
        }
        self.pods.retain(|p| p.terminating != Some(0));
    }
}

/// Runs one rollout; returns the steps it took to converge (fault-free) or `None`.
fn run(g: &mut Lcg, d: &Desired, mut m: Model, faults: bool, steps: u32, ctx: &str) -> Option<u32> {
    let peak = (d.replicas + d.max_surge) as usize;
    let start_total = m.pods.len();
    let objects = m.total_objects();
    for step in 0..steps {
        let obs = m.observe();
        let p = plan(d, &obs, m.now);
        let ctx = format!("{ctx} step {step}");
        check_invariants(d, &obs, m.now, &p, &ctx);
        if !faults && p.status.conditions[0].status && p.actions.is_empty() {
            assert_eq!(m.lost_by_delete, 0, "{ctx}: objects lost by a delete");
            assert_eq!(
                m.total_objects(),
                objects,
                "{ctx}: objects appeared or vanished"
            );
            assert!(m.pods.iter().all(|p| p.revision == d.revision));
            assert_eq!(m.pods.len(), d.replicas as usize);
            return Some(step);
        }
        for a in &p.actions {
            if faults && g.chance(10) {
                continue; // the executor failed this one; the next reconcile retries
            }
            m.apply(a, g, faults);
            if faults && g.chance(5) {
                m.apply(a, g, faults); // and a repeated one
            }
        }
        assert!(
            m.pods.len() <= peak.max(start_total),
            "{ctx}: {} pods, more than replicas + maxSurge",
            m.pods.len()
        );
        assert_eq!(m.lost_by_delete, 0, "{ctx}: a delete lost objects");
        m.tick(g, faults);
    }
    assert_eq!(m.lost_by_delete, 0, "{ctx}: a delete lost objects");
    if !faults {
        let p = plan(d, &m.observe(), m.now);
        eprintln!("{ctx}: not converged: {:#?}\n{:#?}", p.status, m.observe());
    }
    None
}

fn scenario(g: &mut Lcg) -> (Desired, Model) {
    let mut d = desired();
    let from = 1 + g.below(5) as u32;
    d.replicas = 1 + g.below(5) as u32;
    d.max_surge = 1 + g.below(2) as u32;
    d.max_unavailable = g.below(2) as u32;
    d.relocation_attempts = 3;
    // A version bump, or a revision-only change at the same version, or a plain scale.
    let m = match g.below(3) {
        0 => Model::steady(from, REV_OLD, 1, 10 + g.below(20)),
        1 => Model::steady(from, REV_OLD, 2, 10 + g.below(20)),
        _ => Model::steady(from, REV_NEW, 2, 10 + g.below(20)),
    };
    (d, m)
}

#[test]
fn fault_free_rollouts_converge_in_bounded_steps_and_lose_nothing() {
    let seed = seed();
    let mut g = Lcg(seed ^ 0xa11);
    let mut worst = 0;
    for case in 0..400 {
        let (d, m) = scenario(&mut g);
        let ctx = format!(
            "seed {seed} case {case} ({} -> {} replicas)",
            m.pods.len(),
            d.replicas
        );
        let steps = run(&mut g, &d, m, false, 200, &ctx)
            .unwrap_or_else(|| panic!("{ctx}: did not converge in 200 steps"));
        worst = worst.max(steps);
    }
    assert!(worst > 0, "the scenarios never needed a step");
}

#[test]
fn with_faults_no_unsafe_delete_no_lost_object_and_one_id_per_attempt() {
    let seed = seed();
    let mut g = Lcg(seed ^ 0xfa17);
    for case in 0..400 {
        let (d, m) = scenario(&mut g);
        let ctx = format!("seed {seed} case {case}");
        let _ = run(&mut g, &d, m, true, 120, &ctx);
    }
}

#[test]
fn a_model_rollout_of_three_pods_relocates_each_old_pod_once_and_in_order() {
    let d = desired();
    let mut m = Model::steady(3, REV_OLD, 1, 10);
    let mut g = Lcg(7);
    let mut deleted = Vec::new();
    for _ in 0..100 {
        let p = plan(&d, &m.observe(), m.now);
        for a in &p.actions {
            if let Action::DeletePod { pod, reason, .. } = a {
                assert_eq!(*reason, DeleteReason::Safe);
                deleted.push(pod.clone());
            }
            m.apply(a, &mut g, false);
        }
        if p.status.conditions[0].status {
            break;
        }
        m.tick(&mut g, false);
    }
    let old: BTreeSet<String> = (0..3).map(|n| pod_name("m", REV_OLD, n)).collect();
    assert_eq!(deleted.iter().cloned().collect::<BTreeSet<_>>(), old);
    assert_eq!(deleted.len(), 3);
    assert_eq!(m.relocate_calls.len(), 3, "one relocation id per old pod");
    assert_eq!(m.total_objects(), 30);
    assert!(m.pods.iter().all(|p| p.revision == REV_NEW));
}
