//! The checked-in CRDs (`crds/` and `charts/zlink/crds/`) are exactly what `crdgen` renders
//! from `operator/src/crd.rs` (issue 18 acceptance 2).

use std::path::Path;

#[test]
fn the_checked_in_crds_equal_the_crdgen_output_in_both_directories() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let stale = zlink_operator::crdgen::stale(&root).expect("render the CRDs");
    assert!(
        stale.is_empty(),
        "stale CRD files {stale:?}: run `cargo run -p zlink-operator -- crdgen`"
    );
    let rendered = zlink_operator::crdgen::render().expect("render the CRDs");
    assert_eq!(rendered.len(), 2, "Mesh and Channel");
    for (name, text) in &rendered {
        let a = std::fs::read(root.join("crds").join(name)).expect("crds/ copy");
        let b = std::fs::read(root.join("charts/zlink/crds").join(name)).expect("chart copy");
        assert_eq!(a, b, "{name}: the two copies differ");
        assert_eq!(a, text.as_bytes());
    }
}

#[test]
fn a_stale_copy_is_reported() {
    let dir = std::env::temp_dir().join(format!("zlink-crdgen-{}", std::process::id()));
    let written = zlink_operator::crdgen::write_all(&dir).expect("write");
    assert_eq!(written.len(), 4);
    assert!(
        zlink_operator::crdgen::stale(&dir)
            .expect("check")
            .is_empty()
    );
    std::fs::write(&written[0], "# edited by hand\n").expect("edit");
    std::fs::remove_file(&written[3]).expect("remove");
    let stale = zlink_operator::crdgen::stale(&dir).expect("check");
    assert_eq!(stale, vec![written[0].clone(), written[3].clone()]);
    let _ = std::fs::remove_dir_all(&dir);
}
