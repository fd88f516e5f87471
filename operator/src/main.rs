//! `zlink-operator`: `crdgen` writes the CRDs (see `zlink_operator::crdgen`).
//!
//! `run` (the controller) and `check` (the `helm test` probe) come with the controller slice
//! of issue 18; until then they are refused with exit status 2 and say so.

use std::path::PathBuf;
use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "usage: zlink-operator crdgen [--root DIR] [--check]\n\
         \n  crdgen   write the CRDs to DIR/crds and DIR/charts/zlink/crds (DIR: the repository\n\
         \x20          root, default the current directory); --check only reports stale files\n\
         \x20          and exits 1 when there are any"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        return usage();
    };
    match cmd.as_str() {
        "crdgen" => {
            let mut root = PathBuf::from(".");
            let mut check = false;
            let mut it = rest.iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--root" => match it.next() {
                        Some(dir) => root = PathBuf::from(dir),
                        None => return usage(),
                    },
                    "--check" => check = true,
                    _ => return usage(),
                }
            }
            let result = if check {
                zlink_operator::crdgen::stale(&root).map(|stale| {
                    for p in &stale {
                        eprintln!("stale: {} (run `zlink-operator crdgen`)", p.display());
                    }
                    if stale.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                })
            } else {
                zlink_operator::crdgen::write_all(&root).map(|written| {
                    for p in &written {
                        println!("wrote {}", p.display());
                    }
                    ExitCode::SUCCESS
                })
            };
            result.unwrap_or_else(|e| {
                eprintln!("zlink-operator crdgen: {e:#}");
                ExitCode::FAILURE
            })
        }
        "run" | "check" => {
            eprintln!(
                "zlink-operator {cmd}: not built yet (issue 18: the controller slice); only \
                 `crdgen` works in this version"
            );
            ExitCode::from(2)
        }
        _ => usage(),
    }
}
