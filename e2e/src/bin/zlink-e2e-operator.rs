//! `zlink-e2e-operator`: the `zlink-operator` binary under another name — its `main` is
//! [`zlink_operator::cli::main`], nothing else. The e2e tests put it in the process kubelet's
//! image table for the chart's operator image, so `helm install` runs the real operator code in
//! a pod: cargo hands an integration test the paths of its own package's binaries only
//! (`CARGO_BIN_EXE_*`), and this package's are the fake node and this one.

fn main() -> std::process::ExitCode {
    zlink_operator::cli::main()
}
