//! The checked-in codec must equal a fresh generation from the schema (wire §12 "생성 결과와
//! checked-in codec table이 schema와 일치한다"). Fails when the schema changes without
//! `cargo run -p zlink-wire-codegen -- generate`.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

const SCHEMA: &str = include_str!("../schema/service-wire-v1.schema.json");
const CHECKED_IN: &str = include_str!("../src/generated.rs");

#[test]
fn generated_codec_is_fresh() {
    let fresh = zlink_wire_codegen::generate(SCHEMA).unwrap_or_else(|errors| {
        panic!(
            "schema self-test failed:\n{}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    assert!(
        fresh == CHECKED_IN,
        "protocol/src/generated.rs is stale: run `cargo run -p zlink-wire-codegen -- generate`"
    );
}

#[test]
fn a_changed_schema_generates_different_code() {
    // Guards the freshness test itself: a one-byte schema change must change the output.
    let changed = SCHEMA.replace("\"detailBytes\": 4096", "\"detailBytes\": 4095");
    assert_ne!(changed, SCHEMA);
    let fresh = zlink_wire_codegen::generate(&changed).expect("still valid");
    assert_ne!(fresh, CHECKED_IN);
}
