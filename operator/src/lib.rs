//! # zlink-operator
//!
//! The Kubernetes operator for zlink. It owns the node pods of a mesh itself — not through a
//! Deployment or StatefulSet — because a rollout must empty an old pod before deleting it: it
//! calls `Relocate(RollingUpdate, targetVersion)` on the pod's node over the `HostAdmin` gRPC
//! API, watches the node's status stream until the node reports `SafeToShutdown`, and only then
//! deletes the pod. Pod deletion by anyone else (node drain, eviction) is covered by a preStop
//! hook that relocates with `PlannedMaintenance` and by a PodDisruptionBudget.
//!
//! Nothing is implemented yet; this crate doc records the plan so the first issue that touches
//! the operator starts from it.
//!
//! ## Planned layout
//!
//! - `crd` — the custom resource types (the mesh and its channels: desired version, replicas,
//!   store, timeouts) with their status; the CRD YAML in `crds/` is generated from them by a
//!   `crdgen` binary and a test checks the checked-in YAML is current. The operator never
//!   installs its own CRDs; the Helm chart in `charts/zlink/` does.
//! - `planner` — the rollout planner, a pure state machine: inputs are the desired spec, the
//!   observed pods and the hosts' reported statuses; the output is the next actions (create a
//!   pod, ask a host to relocate, delete a pod that is `SafeToShutdown`, wait). It reads no
//!   clock and does no I/O, so it is tested exhaustively without a cluster.
//! - `executor` — the thin shell that applies the planner's actions with kube-rs and tonic and
//!   feeds observations back; idempotent, so a reconcile never depends on why it ran.
//! - `controller` — the kube-rs controller loop: reconcile through a finalizer, status by
//!   server-side apply, an error policy with a metric.
