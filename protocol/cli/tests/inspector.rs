//! Black-box conformance of the `zlink-wire` binary against the golden fixtures: `decode` of
//! every valid record prints the expected value, `encode` of that output prints the original
//! hex, and every malformed record exits 1 with the named error kind.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

fn wire(args: &[&str], stdin: Option<&str>) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zlink-wire"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn golden(rel: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../golden")
        .join(rel);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn joined(item: &Value) -> String {
    item["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("|")
}

fn topology_arg(item: &Value) -> &'static str {
    if item["topology"] == "clientServer" {
        "client-server"
    } else {
        "route-mesh"
    }
}

#[test]
fn decode_prints_the_expected_record_and_encode_restores_the_bytes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden/commands");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for item in doc["valid"].as_array().unwrap() {
            let hex = joined(item);
            let leg = item["leg"].as_str().unwrap();
            let (code, out) = wire(
                &[
                    "decode",
                    &hex,
                    "--topology",
                    topology_arg(item),
                    "--leg",
                    leg,
                ],
                None,
            );
            assert_eq!(code, 0, "{}: {out}", item["name"]);
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["record"], item["decoded"], "{}", item["name"]);
            let (code, back) = wire(&["encode", "-"], Some(&out));
            assert_eq!(code, 0, "{}", item["name"]);
            assert_eq!(back.trim(), hex, "{}", item["name"]);
            checked += 1;
        }
        // One malformed record per file is enough to prove the error path end to end.
        if let Some(item) = doc["invalid"].as_array().and_then(|a| a.first()) {
            let hex = joined(item);
            let leg = item["leg"].as_str().unwrap();
            let (code, out) = wire(
                &[
                    "decode",
                    &hex,
                    "--as",
                    "record",
                    "--topology",
                    topology_arg(item),
                    "--leg",
                    leg,
                ],
                None,
            );
            assert_eq!(code, 1, "{}: {out}", item["name"]);
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["error"]["kind"], item["error"], "{}", item["name"]);
        }
    }
    assert!(checked >= 40);
}

#[test]
fn durable_blobs_and_stream_packets_round_trip_through_the_inspector() {
    for format in [
        "relocation-root-pointer",
        "instance-activation-recovery-v1",
        "relocation-envelope-v1",
    ] {
        let doc = golden(&format!("durable/{format}.json"));
        let item = &doc["valid"][0];
        let hex = item["hex"].as_str().unwrap();
        let (code, out) = wire(&["decode", hex], None);
        assert_eq!(code, 0, "{format}: {out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["kind"], "durable");
        assert_eq!(v["value"]["format"], format);
        assert_eq!(v["value"]["value"], item["decoded"]);
        let (code, back) = wire(&["encode", "-"], Some(&out));
        assert_eq!(code, 0);
        assert_eq!(back.trim(), hex);
    }
    let doc = golden("stream.json");
    let item = &doc["valid"][0];
    let hex = item["hex"].as_str().unwrap();
    let (code, out) = wire(&["decode", "--as", "stream", hex], None);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["packet"], item["decoded"]);
    let (code, back) = wire(&["encode", "-"], Some(&out));
    assert_eq!(code, 0);
    assert_eq!(back.trim(), hex);
}

#[test]
fn malformed_hex_is_a_usage_error_not_a_crash() {
    let (code, _) = wire(&["decode", "5a4d0"], None);
    assert_eq!(code, 2);
}
