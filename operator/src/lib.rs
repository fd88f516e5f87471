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
//! Still to come (issue 18): the controller that feeds the planner from the API server and the
//! nodes' `WatchStatus` streams and applies its actions, the Helm chart, and the process kubelet
//! the e2e tests run pods under.

pub mod channels;
pub mod controller;
pub mod crd;
pub mod crdgen;
pub mod hosts;
pub mod observe;
pub mod planner;
pub mod pods;
