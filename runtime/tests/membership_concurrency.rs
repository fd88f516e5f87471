//! Membership changes of different Spots run side by side (issue 16 acceptance; wire §9): a
//! join into one Spot completes while another Spot's join is stalled inside its store call —
//! the memory Location Store parks the aggregate commit that names the stalled Spot
//! ([`MemoryStore::stall_aggregates_touching`]) — and the stalled join completes once the store
//! answers. Before, one node-wide lock was held across the store round trip, so every join of
//! the node waited for the slowest one.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::WAIT;
use common::cluster::Cluster;
use serde::{Deserialize, Serialize};
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry};
use zlink_store::types::{AuthorityKey, ObjectKind};

#[derive(Debug, Default, Serialize, Deserialize)]
struct St;

fn registry() -> Registry {
    let mut reg = Registry::new();
    let f = |_: FactoryInput| async { Ok(St) };
    reg.actor("a", f, ObjectHandlers::new).register();
    reg.user_spot("room", f, ObjectHandlers::new).register();
    reg.entry_spot("entry", f, ObjectHandlers::new).register();
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_on_one_spot_completes_while_another_spots_join_is_stalled_in_the_store() {
    let c = Arc::new(
        Cluster::builder(1)
            .registry(|_| registry())
            .entry_spots()
            .start()
            .await,
    );
    let rt = &c.rts[0];
    for spot in ["slow-room", "fast-room"] {
        rt.create_user_spot("room", spot, None).await.unwrap();
    }
    for actor in ["slow-a", "fast-a"] {
        rt.create_actor("a", actor, None).await.unwrap();
    }
    let mut stall = c
        .store()
        .stall_aggregates_touching(AuthorityKey::new(ObjectKind::Spot, "slow-room").unwrap());
    let slow = {
        let c = Arc::clone(&c);
        tokio::spawn(async move { c.rts[0].join_actor("slow-a", "slow-room").await })
    };
    // The slow join is inside its commit_aggregate call now (a marker, not a sleep).
    tokio::time::timeout(WAIT, stall.parked(1))
        .await
        .expect("the slow join reaches its store call");
    tokio::time::timeout(WAIT, rt.join_actor("fast-a", "fast-room"))
        .await
        .expect("a join on another Spot does not wait for the stalled one")
        .unwrap();
    assert_eq!(rt.membership("fast-a").as_deref(), Some("fast-room"));
    assert!(
        !slow.is_finished(),
        "the slow join is still waiting on the store"
    );
    assert_ne!(rt.membership("slow-a").as_deref(), Some("slow-room"));
    stall.release();
    tokio::time::timeout(WAIT, slow)
        .await
        .expect("the stalled join completes once the store answers")
        .unwrap()
        .unwrap();
    assert_eq!(rt.membership("slow-a").as_deref(), Some("slow-room"));
    assert_eq!(rt.members_of("slow-room"), Some(vec!["slow-a".to_owned()]));
    if let Ok(c) = Arc::try_unwrap(c) {
        c.shutdown().await;
    }
}
