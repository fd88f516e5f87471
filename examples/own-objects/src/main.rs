//! `own-objects --config node.yaml`: a node binary that hosts its own object types (see the
//! crate docs). Everything else — configuration, admin API, probes, metrics, drain on SIGTERM,
//! exit status — is the zlink node host's.

fn main() {
    std::process::exit(zlink_node::host::main(|_config| {
        zlink_example_own_objects::registry()
    }));
}
