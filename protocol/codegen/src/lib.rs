//! # zlink-wire-codegen
//!
//! Turns `protocol/schema/service-wire-v1.schema.json` into the Rust codec of `zlink-protocol`
//! (`protocol/src/generated.rs`). Two steps:
//!
//! 1. [`Model::from_json`] validates the schema — the `--self-test` of wire §1: undefined types,
//!    duplicate IDs or names, bad enums, bounds, conditionals (`when`), legs and pairings,
//!    uncovered command IDs, unknown keys. An invalid schema generates nothing.
//! 2. [`emit::generate`] writes deterministic Rust source from the model.
//!
//! The checked-in output is compared with a fresh generation by
//! `protocol/tests/generated_fresh.rs`, so a schema change without regeneration fails the build.

pub mod emit;
pub mod model;

pub use model::{Model, SchemaError};

/// Validate `schema_json` and generate the Rust codec source.
///
/// # Errors
/// Every schema problem found by [`Model::from_json`].
pub fn generate(schema_json: &str) -> Result<String, Vec<SchemaError>> {
    let model = Model::from_json(schema_json)?;
    Ok(emit::generate(&model))
}
