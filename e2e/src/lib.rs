//! # zlink-e2e
//!
//! End-to-end tests for zlink: the behaviours that cross process or cluster boundaries and so
//! cannot be proven by the unit and in-process tests of `zlink-node` and `zlink-operator` —
//! relocating live objects between separate `zlink-node` processes without losing a message or
//! reconnecting a client, draining a node, and rolling out a new version through the operator.
//!
//! What exists so far: [`k8s`], the harness for tests against a real Kubernetes control plane
//! (etcd and kube-apiserver built from Go modules by `scripts/k8s-tools`, run by
//! `scripts/k8s-env`), and its smoke test in `tests/k8s_smoke.rs`. `docs/testing.md` says what
//! runs where.
//!
//! ## Planned layout
//!
//! - a process harness: starts `zlink-node` processes bound to free loopback ports with a
//!   shared Redis Location Store (started by `scripts/test`) or the embedded memory store,
//!   collects their logs, and stops them on drop, so multi-process tests run in the default
//!   `scripts/test` run with millisecond timeouts;
//! - a client driver: game clients over the STREAM packet protocol, counting sent and received
//!   messages to check "no loss, no reorder" across relocations;
//! - operator scenarios against the [`k8s`] control plane, run by default: pods are objects
//!   only there (no kubelet), so the tests play the kubelet's part by patching pod status;
//! - Kubernetes scenarios on a local kind cluster (with the scripts that create it): the
//!   operator's rolling update and pod eviction with real pods. They need Docker, so they are
//!   opt-in and do not run by default.

pub mod fault_proxy;
pub mod history;
pub mod k8s;
pub mod kubelet;
