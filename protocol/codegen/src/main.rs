//! `zlink-wire-codegen`: validate the wire schema and (re)generate `protocol/src/generated.rs`.
//!
//! ```text
//! zlink-wire-codegen --self-test [SCHEMA]     validate only
//! zlink-wire-codegen generate [SCHEMA [OUT]]  validate and write OUT
//! zlink-wire-codegen check [SCHEMA [OUT]]     fail if OUT is stale
//! ```
//! Paths default to the repository layout relative to this crate.

use std::path::PathBuf;
use std::process::ExitCode;

fn default_schema() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/service-wire-v1.schema.json")
}

fn default_out() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../src/generated.rs")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let schema = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(default_schema);
    let out = args.get(2).map(PathBuf::from).unwrap_or_else(default_out);
    if !matches!(mode, "--self-test" | "generate" | "check") {
        eprintln!("usage: zlink-wire-codegen (--self-test | generate | check) [SCHEMA [OUT]]");
        return ExitCode::from(2);
    }
    let text = match std::fs::read_to_string(&schema) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot read {}: {e}", schema.display());
            return ExitCode::FAILURE;
        }
    };
    let code = match zlink_wire_codegen::generate(&text) {
        Ok(code) => code,
        Err(errors) => {
            eprintln!("{}: {} schema error(s):", schema.display(), errors.len());
            for e in errors {
                eprintln!("  {e}");
            }
            return ExitCode::FAILURE;
        }
    };
    match mode {
        "--self-test" => {
            eprintln!("{}: schema valid", schema.display());
            ExitCode::SUCCESS
        }
        "generate" => match std::fs::write(&out, code) {
            Ok(()) => {
                eprintln!("wrote {}", out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cannot write {}: {e}", out.display());
                ExitCode::FAILURE
            }
        },
        _ => match std::fs::read_to_string(&out) {
            Ok(current) if current == code => {
                eprintln!("{} is up to date", out.display());
                ExitCode::SUCCESS
            }
            _ => {
                eprintln!(
                    "{} is stale: run `cargo run -p zlink-wire-codegen -- generate`",
                    out.display()
                );
                ExitCode::FAILURE
            }
        },
    }
}
