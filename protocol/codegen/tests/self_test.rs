//! The schema self-test (wire §1 Validator) refuses invalid schemas: each test breaks the real
//! schema in one way and checks that generation is refused with an error naming the problem.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use serde_json::{Value, json};

const SCHEMA: &str = include_str!("../../schema/service-wire-v1.schema.json");

fn schema() -> Value {
    serde_json::from_str(SCHEMA).expect("schema is JSON")
}

fn errors_of(v: &Value) -> Vec<String> {
    match zlink_wire_codegen::generate(&v.to_string()) {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

fn assert_refused(v: &Value, needle: &str) {
    let errs = errors_of(v);
    assert!(
        errs.iter().any(|e| e.contains(needle)),
        "expected an error containing {needle:?}, got {errs:#?}"
    );
}

fn command_mut<'a>(v: &'a mut Value, name: &str) -> &'a mut Value {
    v["commands"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == name)
        .unwrap()
}

#[test]
fn the_real_schema_passes() {
    assert!(
        errors_of(&schema()).is_empty(),
        "{:#?}",
        errors_of(&schema())
    );
}

#[test]
fn the_schema_defines_forty_commands_and_every_id_is_defined_or_reserved() {
    let model = zlink_wire_codegen::Model::from_json(SCHEMA).unwrap();
    assert_eq!(model.commands.len(), 40);
    for id in 1..=255u8 {
        let defined = model.commands.iter().any(|c| c.id == id);
        let reserved = model
            .reserved
            .iter()
            .any(|(a, b, _)| (*a..=*b).contains(&id));
        assert!(defined ^ reserved, "id {id}");
    }
    for id in [7u8, 15, 32, 35, 41, 45, 54, 255] {
        assert!(
            !model.commands.iter().any(|c| c.id == id),
            "{id} must be reserved"
        );
    }
}

#[test]
fn undefined_type_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "hello")["body"][0] = json!({"name": "x", "$ref": "NoSuchType"});
    assert_refused(&v, "undefined type `NoSuchType`");
}

#[test]
fn duplicate_command_id_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "admit")["id"] = json!(1);
    assert_refused(&v, "duplicate command id 1");
}

#[test]
fn reserved_id_reused_by_a_command_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "admit")["id"] = json!(32);
    assert_refused(
        &v,
        "command id 32 must be exactly one of defined or reserved",
    );
}

#[test]
fn duplicate_enum_value_is_refused() {
    let mut v = schema();
    let t = v["types"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["name"] == "ObjectKind")
        .unwrap();
    t["values"][1]["value"] = json!(1);
    assert_refused(&v, "duplicate enum name or value");
}

#[test]
fn bounds_beyond_the_length_prefix_are_refused() {
    let mut v = schema();
    command_mut(&mut v, "reject")["body"][1] =
        json!({"name": "detail", "type": "string", "lengthType": "u8", "maxBytes": 300});
    assert_refused(&v, "bad length bounds");
}

#[test]
fn when_on_an_unknown_enum_value_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "instanceSpot")["body"][2]["when"]["equals"] = json!("publish");
    assert_refused(&v, "is not a value of OperationKind");
}

#[test]
fn when_on_a_later_field_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "sessionRelocationRoute")["body"][5]["when"]["field"] = json!("nope");
    assert_refused(&v, "not an earlier sibling");
}

#[test]
fn client_server_topology_beyond_six_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "nodeSend")["topologies"] = json!(["routeMesh", "clientServer"]);
    assert_refused(&v, "only commands 1..6 may appear on clientServer");
}

#[test]
fn a_reply_that_does_not_name_its_request_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "relocationFailed")["inReplyTo"] = json!(["hello"]);
    assert_refused(&v, "does not list `relocationPrepare` in inReplyTo");
}

#[test]
fn unknown_keys_are_refused() {
    let mut v = schema();
    command_mut(&mut v, "hello")["lenght"] = json!(3);
    assert_refused(&v, "unknown key `lenght`");
}

#[test]
fn unknown_limit_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "reject")["body"][1] =
        json!({"name": "detail", "type": "string", "lengthType": "u16", "$bound": "noSuchLimit"});
    assert_refused(&v, "unknown limit `noSuchLimit`");
}

#[test]
fn a_command_without_a_body_layout_is_refused() {
    let mut v = schema();
    command_mut(&mut v, "update")["body"] = json!([]);
    assert_refused(&v, "command lacks a body layout");
    command_mut(&mut v, "update")
        .as_object_mut()
        .unwrap()
        .remove("body");
    assert_refused(&v, "expected an array of fields");
}

#[test]
fn a_durable_format_without_a_layout_is_refused() {
    let mut v = schema();
    v["durableFormats"][0]["fields"] = json!([]);
    assert_refused(&v, "durable format lacks a layout");
}

#[test]
fn a_dropped_command_leaves_its_id_uncovered() {
    let mut v = schema();
    v["commands"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["name"] != "relocationFailed");
    assert_refused(
        &v,
        "command id 53 must be exactly one of defined or reserved",
    );
}

#[test]
fn a_flow_charged_command_without_a_sender_identity_is_refused() {
    let mut v = schema();
    // livenessProbe names no sender: charging it would leave the reactor nothing to check.
    command_mut(&mut v, "livenessProbe")["flowCharged"] = json!(true);
    assert_refused(&v, "a flow-charged command needs a sender identity");
}

#[test]
fn a_source_rule_must_agree_with_the_body() {
    let mut v = schema();
    command_mut(&mut v, "spotSend")["source"] = json!("connection");
    assert_refused(&v, "names its sender by it");
    let mut v = schema();
    command_mut(&mut v, "actorJoin")["source"] = json!("body");
    assert_refused(&v, "needs a `source` field of type NodeFence");
    let mut v = schema();
    command_mut(&mut v, "actorJoin")["source"] = json!("peer");
    assert_refused(&v, "source must be body, connection or none");
    let mut v = schema();
    command_mut(&mut v, "actorJoin")["flowCharged"] = json!("yes");
    assert_refused(&v, "flowCharged must be a boolean");
}
