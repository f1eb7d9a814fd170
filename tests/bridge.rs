//! The bridge side: idempotent intake, bad input, statuses and replies.

use std::time::Duration;

use baton::roles::collector;
use baton_domain::fleet::{Queue, RunFinished};
use baton_domain::protocol::request::HandoffEvent;
use baton_tests::{eventually, next_json, sample_request_json, until_reply, TestEnv};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_same_request_delivered_twice_starts_one_run() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    let request = sample_request_json("dup-1", "docs_agent", "zh-CN");
    env.send_request(&request).await;
    env.send_request(&request).await;
    let messages = until_reply(&mut replies, WAIT).await;
    eventually(WAIT, "the second delivery is recorded", || async {
        (env.scalar_i64("SELECT deliveries::bigint FROM handoff_requests WHERE id = 'dup-1'", &[]).await == 2)
            .then_some(())
    })
    .await;
    fleet.stop().await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM runs WHERE handoff_id = 'dup-1'", &[]).await, 1);
    let reply = messages.last().unwrap();
    assert_eq!(reply["language"], "zh-CN");
    assert_eq!(messages.iter().filter(|m| m["type"] == "reply").count(), 1);
}

#[tokio::test]
async fn a_reply_s_row_keeps_what_its_request_does_not_say_and_the_bridge_hears_it_whole() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("slim-1", "docs_agent", "zh-CN")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let heard = messages.last().unwrap().clone();
    assert_eq!(
        (&heard["type"], &heard["handoffId"], &heard["language"], &heard["status"], &heard["replyToChatId"]),
        (
            &serde_json::json!("reply"),
            &serde_json::json!("slim-1"),
            &serde_json::json!("zh-CN"),
            &serde_json::json!("completed"),
            &serde_json::json!("wxid_demo_chat")
        ),
        "{heard}"
    );
    assert!(heard["at"].as_str().is_some_and(|at| at.ends_with('Z')), "{heard}");
    let row = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'slim-1' AND body IS NOT NULL
                  AND message_id IS NULL AND NOT body ?| ARRAY['type', 'handoffId', 'language', 'status', 'replyToChatId', 'at']";
    assert_eq!(env.scalar_i64(row, &[]).await, 1, "the row keeps neither the reply's id nor what its request says");
    let sent = baton_store::outbox::sent::for_handoff(&env.db().await, "slim-1").await.unwrap();
    let reply = sent.iter().find(|m| m.body["type"] == "reply").unwrap();
    assert_eq!((reply.message_id.as_deref(), &reply.body), (Some("reply:slim-1"), &heard), "read back as it was sent");
}

#[tokio::test]
async fn a_finished_run_is_replied_to_once_even_if_collected_twice() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("once-1", "docs_agent", "en")).await;
    until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let run_id = env.run_of("once-1").await;
    let queued = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'once-1'";
    let queued_before = env.scalar_i64(queued, &[]).await;
    collector::collect(&env.pool, RunFinished { run_id }).await.unwrap();
    assert_eq!(env.scalar_i64(queued, &[]).await, queued_before, "no second reply queued");
    let sql = "SELECT count(*) FROM handoff_events WHERE handoff_id = 'once-1' AND type = $1";
    let sent = env.scalar_i64(sql, &[&HandoffEvent::ReplySent.as_str()]).await;
    assert_eq!(sent, 1);
}

#[tokio::test]
async fn a_body_that_is_not_json_is_dead_lettered_with_its_reason() {
    let env = TestEnv::new().await;
    let fleet = env.start(&[baton::roles::Role::Intake]);
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    env.send_raw(b"{not json", None).await;
    let message = next_json(&mut dead, WAIT).await;
    fleet.stop().await;
    assert_eq!(message["_body"], "{not json");
    assert!(message["_error"].as_str().unwrap().starts_with("body is not JSON"), "{message}");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM handoff_requests", &[]).await, 0);
}

#[tokio::test]
async fn a_request_missing_a_field_is_dead_lettered_and_the_sender_gets_a_failed_reply() {
    let env = TestEnv::new().await;
    let fleet = env.start(&[baton::roles::Role::Intake]);
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let mut replies = env.replies().await;
    let mut request = sample_request_json("bad-1", "docs_agent", "en");
    request.as_object_mut().unwrap().remove("userIntent");
    env.send_request(&request).await;
    let reply = next_json(&mut replies, WAIT).await;
    let dead_letter = next_json(&mut dead, WAIT).await;
    fleet.stop().await;
    assert_eq!(reply["type"], "reply");
    assert_eq!(reply["status"], "failed");
    assert_eq!(reply["handoffId"], "bad-1");
    assert_eq!(reply["replyToChatId"], "wxid_demo_chat");
    assert!(reply["error"]["message"].as_str().unwrap().contains("userIntent"), "{reply}");
    assert!(dead_letter["_error"].as_str().unwrap().contains("userIntent"), "{dead_letter}");
}

#[tokio::test]
async fn a_request_for_an_agent_nobody_handles_fails_with_a_reply() {
    let env = TestEnv::new().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("noroute-1", "codex", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "failed");
    assert!(reply["text"].as_str().unwrap().contains("codex"), "{reply}");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM runs", &[]).await, 0);
}

#[tokio::test]
async fn a_draft_is_stored_but_not_run_and_manual_waits_for_an_operator() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    let mut draft = sample_request_json("draft-1", "docs_agent", "en");
    draft["status"] = "draft".into();
    env.send_request(&draft).await;
    env.send_request(&sample_request_json("manual-1", "manual", "en")).await;
    let status = next_json(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(status["handoffId"], "manual-1", "a draft sends nothing");
    assert_eq!(status["status"], "accepted");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM runs", &[]).await, 0);
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = 'draft-1' AND status = 'draft'", &[]).await,
        1
    );
}

#[tokio::test]
async fn old_finished_runs_are_pruned_and_their_request_still_counts_as_seen() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    env.run_request("old-1").await;
    let run = env.run_of("old-1").await;
    let c = env.db().await;
    c.execute("UPDATE runs SET created_at = now() - interval '40 days', finished_at = now() - interval '40 days' WHERE id = $1", &[&run]).await.unwrap();
    assert_eq!(baton::operator::prune_runs(&env.pool, Duration::from_secs(30 * 86_400), 1).await.unwrap().runs, 1);
    for table in [
        "runs WHERE id",
        "invocations WHERE run_id",
        "events WHERE run_id",
        "tasks WHERE run_id",
        "commits WHERE run_id",
    ] {
        assert_eq!(env.scalar_i64(&format!("SELECT count(*) FROM {table} = $1"), &[&run]).await, 0, "{table}");
    }
    assert_eq!(env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = 'old-1'", &[]).await, 1);
    // A young run is kept.
    env.run_request("young-1").await;
    assert_eq!(baton::operator::prune_runs(&env.pool, Duration::from_secs(30 * 86_400), 10).await.unwrap().runs, 0);
}

/// A statement that writes bridge messages keeps its handoff events in their
/// row (V47), and a handoff's events still read back in the order they were
/// written, across that row and `handoff_log` rows, including those written
/// before V47 (whose ids came from the log's own sequence, here past the
/// outbox's).
#[tokio::test]
async fn handoff_events_read_in_order_across_their_message_rows_and_the_log_before_and_after_v47() {
    use baton_domain::protocol::request::HandoffStatus;
    use baton_store::requests;
    let env = TestEnv::migrated_to(46).await;
    let c = env.db().await;
    let request = "INSERT INTO handoff_requests (id, body, source, target_agent, status, language, reply_to)
                   VALUES ('h-47', '{}', 'weixin', 'docs_agent', 'accepted', 'en', 'bridge.q')";
    c.execute(request, &[]).await.unwrap();
    // As V46's fleet wrote events, its log's ids well ahead of the outbox's.
    let old = "INSERT INTO handoff_log (id, handoff_id, types, statuses, messages) OVERRIDING SYSTEM VALUE
               VALUES (900000, 'h-47', '{created,accepted}', '{requested,accepted}', '{NULL,NULL}')";
    c.execute(old, &[]).await.unwrap();
    baton_store::migrate(&env.pool).await.unwrap();
    let c = env.db().await;
    let stored = requests::get(&c, "h-47").await.unwrap().unwrap();
    requests::bridge::status(&c, &stored, HandoffStatus::Running, Some("started")).await.unwrap();
    requests::add_event(&c, "h-47", HandoffEvent::DeliveryDelayed, None, Some("later")).await.unwrap();
    let events: Vec<(String, Option<String>)> =
        requests::events(&c, "h-47").await.unwrap().into_iter().map(|e| (e.kind, e.message)).collect();
    let expected = [
        ("created", None),
        ("accepted", None),
        ("status_changed", Some("started")),
        ("delivery_delayed", Some("later")),
    ]
    .map(|(kind, note)| (kind.to_string(), note.map(str::to_string)));
    assert_eq!(events, expected);
    let beside = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'h-47' AND log_types = '{status_changed}'";
    assert_eq!(env.scalar_i64(beside, &[]).await, 1, "the status's event is kept in its message's row");
    let logged = "SELECT count(*) FROM handoff_log WHERE handoff_id = 'h-47'";
    assert_eq!(env.scalar_i64(logged, &[]).await, 2, "the old row and the event written alone");
}

#[tokio::test]
async fn a_request_s_body_is_stored_compressed_and_one_stored_before_v49_still_reads() {
    use baton_domain::protocol::request::{HandoffStatus, Source, TargetAgent};
    use baton_domain::Language;
    use baton_store::requests::{self, NewRequest};
    let env = TestEnv::migrated_to(48).await;
    let c = env.db().await;
    let old = sample_request_json("h-48", "docs_agent", "zh-CN");
    let request = "INSERT INTO handoff_requests (id, body, source, target_agent, status, language)
                   VALUES ('h-48', $1, 'weixin', 'docs_agent', 'requested', 'zh-CN')";
    c.execute(request, &[&old]).await.unwrap();
    baton_store::migrate(&env.pool).await.unwrap();
    let c = env.db().await;
    assert_eq!(requests::get(&c, "h-48").await.unwrap().unwrap().body, old, "a jsonb body reads back whole");

    let new = sample_request_json("h-49", "docs_agent", "zh-CN");
    let stored = NewRequest {
        id: "h-49",
        body: &new,
        source: Source::Weixin,
        target_agent: TargetAgent::DocsAgent,
        status: HandoffStatus::Requested,
        language: Language::ZhCn,
        reply_to: None,
        reply_chat_id: None,
        status_url: None,
        bridge: None,
    };
    assert!(requests::insert_or_count(&c, &stored).await.unwrap());
    assert_eq!(requests::get(&c, "h-49").await.unwrap().unwrap().body, new);
    let sizes = "SELECT get_byte(body, 0)::bigint * 1000000 + octet_length(body) FROM handoff_requests WHERE id = $1";
    let [was, is] = [env.scalar_i64(sizes, &[&"h-48"]).await, env.scalar_i64(sizes, &[&"h-49"]).await];
    assert_eq!(was / 1_000_000, i64::from(b'{'), "the old body is its JSON text");
    assert_eq!(is / 1_000_000, 1, "the new body is compressed (format 1)");
    assert!((is % 1_000_000) * 2 < was % 1_000_000, "compressed: {} bytes against {}", is % 1_000_000, was % 1_000_000);
}
