//! Intake handles deliveries side by side (`BATON_INTAKE_CONCURRENCY`), in
//! arrival order per handoff and per conversation, and reads the profiles
//! file through a cache that a new file invalidates.

use std::time::Duration;

use baton::roles::Role;
use baton_domain::protocol::request::HandoffEvent;
use baton_tests::{eventually, profile, sample_request_json, TestEnv};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
/// The key space of intake's per-handoff advisory lock (`conversations::lock_handoff`).
const HANDOFF_LOCK: i32 = 0x6261_7401;

fn lead(id: &str) -> String {
    profile(id, &["workspace_finish"], "", &[r#"{ tool = "workspace_finish" }"#])
}

fn profiles(route_to: &str) -> String {
    format!(
        "[routes]\ndocs_agent = \"{route_to}\"\n[conversations]\ndefault = \"enqueue\"\n{}\n{}",
        lead("lead"),
        lead("other")
    )
}

fn request(id: &str, chat: &str) -> Value {
    let mut request = sample_request_json(id, "docs_agent", "en");
    request["conversationKey"] = json!(chat);
    request
}

async fn stored(env: &TestEnv, ids: &[String]) -> i64 {
    env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = ANY($1)", &[&ids]).await
}

#[tokio::test]
async fn unrelated_requests_pass_a_held_up_one_and_its_chat_keeps_arrival_order() {
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles("lead")).await;
    // The first request of a chat is held up inside its transaction: this
    // session (of the test's database: advisory locks are per database)
    // holds the lock intake takes for its handoff.
    let holder = env.db().await;
    holder.execute("SELECT pg_advisory_lock($1, hashtext($2))", &[&HANDOFF_LOCK, &"held-1"]).await.unwrap();
    let fleet = env.start(&[Role::Intake]);
    env.send_request(&request("held-1", "busy-chat")).await;
    env.send_request(&request("held-2", "busy-chat")).await;
    let unrelated: Vec<String> = (0..12).map(|n| format!("free-{n}")).collect();
    for (n, id) in unrelated.iter().enumerate() {
        env.send_request(&request(id, &format!("chat-{n}"))).await;
    }
    eventually(WAIT, "the unrelated requests stored while one is held up", || async {
        (stored(&env, &unrelated).await == 12).then_some(())
    })
    .await;
    let held = ["held-1".to_string(), "held-2".to_string()];
    assert_eq!(
        stored(&env, &held).await,
        0,
        "the chat's second request waits behind its first, which waits for the lock"
    );
    holder.execute("SELECT pg_advisory_unlock($1, hashtext($2))", &[&HANDOFF_LOCK, &"held-1"]).await.unwrap();
    eventually(WAIT, "both requests of the chat stored", || async { (stored(&env, &held).await == 2).then_some(()) })
        .await;
    let first = baton_store::requests::get(&env.db().await, "held-1").await.unwrap().unwrap();
    let second = baton_store::requests::get(&env.db().await, "held-2").await.unwrap().unwrap();
    assert!(first.run_id.is_some(), "the first arrival holds the chat's turn");
    assert_eq!(second.run_id, None, "the second waits for it");
    assert!(env.handoff_events("held-2").await.contains(&HandoffEvent::Queued));
    fleet.stop().await;
}

#[tokio::test]
async fn a_cancel_sent_right_behind_its_request_cancels_its_run() {
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles("lead")).await;
    let fleet = env.start(&[Role::Intake]);
    let ids: Vec<String> = (0..8).map(|n| format!("stop-{n}")).collect();
    for (n, id) in ids.iter().enumerate() {
        env.send_request(&request(id, &format!("stop-chat-{n}"))).await;
        let cancel = json!({"type": "cancel", "id": format!("cancel-{n}"), "handoffId": id, "reason": "The user said stop.", "at": "2026-11-30T10:00:00Z"});
        env.send_raw(&serde_json::to_vec(&cancel).unwrap(), Some(&env.reply_queue.clone())).await;
        env.send_request(&request(&format!("noise-{n}"), &format!("noise-chat-{n}"))).await;
    }
    let cancelled = "SELECT count(*) FROM runs r JOIN handoff_requests h ON h.run_id = r.id WHERE h.id = ANY($1) AND r.status = 'cancelled'";
    eventually(WAIT, "every run cancelled", || async { (env.scalar_i64(cancelled, &[&ids]).await == 8).then_some(()) })
        .await;
    for id in &ids {
        let events = env.handoff_events(id).await;
        let (created, cancel) = (
            events.iter().position(|e| *e == HandoffEvent::Created),
            events.iter().position(|e| *e == HandoffEvent::CancelReceived),
        );
        assert!(created < cancel && cancel.is_some(), "{id}: the request, then its cancel: {events:?}");
        let note: String = env
            .db()
            .await
            .query_one(
                "SELECT message FROM handoff_events WHERE handoff_id = $1 AND type = $2",
                &[id, &HandoffEvent::CancelReceived.as_str()],
            )
            .await
            .unwrap()
            .get(0);
        assert!(note.contains("the run was cancelled"), "{id}: {note}");
    }
    fleet.stop().await;
}

#[tokio::test]
async fn a_profiles_file_applied_while_intake_runs_routes_the_next_request() {
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles("lead")).await;
    let fleet = env.start(&[Role::Intake]);
    let profile_of = |id: &'static str| {
        let env = &env;
        async move {
            let sql = "SELECT r.root_profile_id FROM runs r JOIN handoff_requests h ON h.run_id = r.id WHERE h.id = $1";
            env.db().await.query_opt(sql, &[&id]).await.unwrap().map(|row| row.get::<_, String>(0))
        }
    };
    env.send_request(&request("before", "chat-before")).await;
    assert_eq!(eventually(WAIT, "the first request started", || profile_of("before")).await, "lead");
    env.apply_profiles(&profiles("other")).await;
    env.send_request(&request("after", "chat-after")).await;
    assert_eq!(
        eventually(WAIT, "the second request started", || profile_of("after")).await,
        "other",
        "the new routes, not a stale copy"
    );
    fleet.stop().await;
}
