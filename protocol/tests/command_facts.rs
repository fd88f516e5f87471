//! The per-command facts the reactor reads from the generated `CommandSpec` (issue 16 item 2):
//! which commands are charged to flow control and where each names its sender. These were lists
//! kept by hand in the reactor; the schema (`flowCharged`, `source`) is now the one place, and
//! this test pins the set so a schema edit that changes it is deliberate.

use zlink_protocol::generated::{COMMAND_SPECS, CommandId, SourceRule};

#[test]
fn the_flow_charged_commands_are_the_application_records_and_the_object_control_requests() {
    let charged: Vec<u8> = COMMAND_SPECS
        .iter()
        .filter(|s| s.flow_charged)
        .map(|s| s.id)
        .collect();
    // nodeSend..channelRequest, spot/actor send and request, logicalMulticast, instanceSpot,
    // and the object control requests actorDestroy, actorJoin, userSpotCreate/Close, actorCreate.
    assert_eq!(
        charged,
        [16, 17, 18, 19, 21, 22, 23, 24, 25, 27, 28, 39, 47, 48, 49]
    );
}

#[test]
fn every_charged_command_names_its_sender_and_only_actor_join_by_its_connection() {
    for s in &COMMAND_SPECS {
        if s.flow_charged {
            assert_ne!(s.source, SourceRule::None, "{} is charged", s.name);
        }
    }
    let by_connection: Vec<&str> = COMMAND_SPECS
        .iter()
        .filter(|s| s.source == SourceRule::Connection)
        .map(|s| s.name)
        .collect();
    assert_eq!(by_connection, ["actorJoin"]);
    assert_eq!(CommandId::Hello.spec().source, SourceRule::None);
    assert_eq!(CommandId::RelocationPrepare.spec().source, SourceRule::Body);
}
