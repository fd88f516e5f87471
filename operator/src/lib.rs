//! # zlink-operator
//!
//! The Kubernetes operator for zlink. It owns the node pods of a mesh itself — not through a
//! Deployment or StatefulSet — because a rollout must empty an old pod before deleting it: it
//! starts a new-version pod, calls `Relocate(RollingUpdate, targetVersion)` on an old pod's node
//! over the `HostAdmin` gRPC API, watches the node's status stream until that relocation is
//! `Completed` and the node reports `SafeToShutdown`, and only then deletes the pod. A pod
//! deleted by anyone else (node drain, eviction, `kubectl delete`) relocates on SIGTERM
//! (`Relocate(PlannedMaintenance)` in the node), so no preStop hook is needed; a
//! PodDisruptionBudget bounds evictions.
//!
//! ## Layout
//!
//! - [`crd`] — the `zlink.io/v1alpha1` resources `Mesh` and `Channel`, with their CEL rules;
//!   `zlink-operator crdgen` writes them to `crds/` and `charts/zlink/crds/` (a test checks
//!   both copies are current). The operator never installs its own CRDs; the chart does.
//! - [`planner`] — the rollout planner, a pure function `plan(spec, observed, now)`: no I/O, no
//!   clock, no memory between calls. It is tested by tables and by properties over generated
//!   cluster states, with a model-host simulation.
//!
//! - [`controller`] — the kube-runtime controllers (Mesh, Channel): read the cluster and the
//!   hosts, ask the planner, apply its actions, write the status by server-side apply.
//! - [`pods`] / [`observe`] / [`channels`] — pure builders and conversions: node pods and the
//!   PDB from the spec, cluster objects to planner inputs, channel-weight drift.
//! - [`hosts`] — the nodes' HostAdmin API behind a trait (`AdminHosts` over gRPC).
//! - [`leader`] — leader election on a Lease (a pure elector and its shell).
//!
//! Still to come (issue 18): `/metrics` and JSON logs. See `docs/operator.md`.

pub mod channels;
pub mod cli;
pub mod controller;
pub mod crd;
pub mod crdgen;
pub mod hosts;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod planner;
pub mod pods;
