//! Rows keep their domain types: a value the domain does not know is a
//! `Corrupt` error naming the row, never a silent default.

use std::time::Duration;

use baton::roles::Role;
use baton_domain::fleet::{Queue, RunFinished};
use baton_domain::protocol::request::{HandoffStatus, Source, TargetAgent};
use baton_domain::run::state::{InvocationKind, RunStatus};
use baton_domain::Language;
use baton_store::invocations::{self, NewBrief, NewInvocation};
use baton_store::requests::{self, NewRequest};
use baton_store::{runs, Error};
use baton_tests::{next_json, TestEnv};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

/// Stores request `id` (English, from WeChat) with a completed run, as
/// intake and a finished run would leave it; returns the run.
async fn finished_request(env: &TestEnv, id: &str) -> Uuid {
    let c = env.db().await;
    let body = serde_json::json!({"id": id});
    let new = NewRequest {
        id,
        body: &body,
        source: Source::Weixin,
        target_agent: TargetAgent::DocsAgent,
        status: HandoffStatus::Requested,
        language: Language::En,
        reply_to: Some(&env.reply_queue),
        reply_chat_id: Some("wxid_demo_chat"),
        status_url: None,
        bridge: None,
    };
    assert!(requests::insert_or_count(&c, &new).await.unwrap());
    let run = Uuid::now_v7();
    runs::insert(&c, run, Some(id), "writer").await.unwrap();
    requests::link_run(&c, id, run).await.unwrap();
    runs::set_final_text(&c, run, "Done.").await.unwrap();
    assert!(runs::finish(&c, run, RunStatus::Completed, None).await.unwrap());
    run
}

fn corrupt_message(error: Error) -> String {
    match error {
        Error::Corrupt(message) => message,
        other => panic!("expected a corrupt-row error, got {other}"),
    }
}

#[tokio::test]
async fn a_request_with_a_language_baton_does_not_know_reads_as_corrupt() {
    let env = TestEnv::new().await;
    finished_request(&env, "lang-1").await;
    let c = env.db().await;
    assert_eq!(requests::get(&c, "lang-1").await.unwrap().unwrap().language, Language::En);
    c.execute("UPDATE handoff_requests SET language = 'xx' WHERE id = 'lang-1'", &[]).await.unwrap();
    let error = corrupt_message(requests::get(&c, "lang-1").await.unwrap_err());
    assert_eq!(error, "handoff_requests lang-1: language 'xx' is not one Baton knows");
    c.execute("UPDATE handoff_requests SET language = 'en', status = 'done' WHERE id = 'lang-1'", &[]).await.unwrap();
    assert!(corrupt_message(requests::lock(&c, "lang-1").await.unwrap_err()).contains("status 'done'"));
}

#[tokio::test]
async fn an_invocation_whose_budget_does_not_read_is_corrupt() {
    let env = TestEnv::new().await;
    let run = finished_request(&env, "budget-1").await;
    let c = env.db().await;
    let id = Uuid::now_v7();
    let new = NewInvocation {
        id,
        run_id: run,
        parent_invocation_id: None,
        incoming_task_id: None,
        profile_id: "writer",
        kind: InvocationKind::Root,
        brief: NewBrief::Text("brief"),
        budget: None,
        deadline_at: None,
        handoffs: 0,
        run_spent: Default::default(),
    };
    invocations::spawn::invocation(&c, &new, None).await.unwrap();
    assert!(invocations::get(&c, id).await.unwrap().unwrap().budget.is_none());
    c.execute(r#"UPDATE invocations SET budget = '{"maxRounds": "many"}' WHERE id = $1"#, &[&id]).await.unwrap();
    let error = corrupt_message(invocations::get(&c, id).await.unwrap_err());
    assert!(error.starts_with(&format!("invocations {id}: budget does not read")), "{error}");
    c.execute("UPDATE invocations SET budget = NULL, kind = 'stage' WHERE id = $1", &[&id]).await.unwrap();
    let error = corrupt_message(invocations::for_run(&c, run).await.unwrap_err());
    assert_eq!(error, format!("invocations {id}: kind 'stage' is not one Baton knows"));
}

/// Today's behaviour on a store error, kept visible: the collector does not
/// guess a language and reply in English; the run-finished message goes to
/// `baton.dead` with the reason, and no reply is sent or recorded.
#[tokio::test]
async fn the_collector_dead_letters_a_run_whose_request_language_is_corrupt_instead_of_replying_in_english() {
    let env = TestEnv::new().await;
    let run = finished_request(&env, "lang-2").await;
    env.db().await.execute("UPDATE handoff_requests SET language = 'xx' WHERE id = 'lang-2'", &[]).await.unwrap();
    let fleet = env.start(&[Role::Collector]);
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let mut replies = env.replies().await;
    let body = serde_json::to_vec(&RunFinished { run_id: run }).unwrap();
    let queue = env.queue(Queue::RunsFinished);
    env.publisher.publish(&baton_bus::Outgoing { queue: &queue, body: &body, ..Default::default() }).await.unwrap();
    let dead_letter = next_json(&mut dead, WAIT).await;
    let quiet = tokio::time::timeout(Duration::from_millis(1500), futures_lite::StreamExt::next(&mut replies)).await;
    fleet.stop().await;
    let error = dead_letter["_error"].as_str().unwrap_or_default();
    assert!(error.contains("handoff_requests lang-2: language 'xx' is not one Baton knows"), "{dead_letter}");
    assert!(quiet.is_err(), "no reply reaches the bridge");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM unsent_messages", &[]).await, 0);
    let sent = env
        .scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = 'lang-2' AND reply_sent_at IS NOT NULL", &[])
        .await;
    assert_eq!(sent, 0);
}

/// A role ends a run whose answer cannot be read (its request's language
/// is one this version does not know): the run still ends, in the same
/// transaction, and the collector is told with a "run finished" message
/// (which it dead-letters with the reason, above), instead of the ending
/// failing and the run staying live for ever.
#[tokio::test]
async fn a_run_whose_answer_cannot_be_read_still_ends_and_the_collector_is_told() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    // A request with a running run and its root queued: intake alone.
    let intake = env.start(&[Role::Intake]);
    env.send_request(&baton_tests::sample_request_json("lang-3", "docs_agent", "en")).await;
    let root = env.root_invocation().await;
    intake.stop().await;
    env.db().await.execute("UPDATE handoff_requests SET language = 'xx' WHERE id = 'lang-3'", &[]).await.unwrap();
    // Ended by a role (in a publishing scope, as a worker's step is).
    let (publishing, _published) = baton_store::after_commit::Publishing::new(Duration::from_secs(2));
    let error = serde_json::json!({"code": "failed", "message": "the agents could not finish"});
    baton_store::after_commit::scope(publishing, async {
        let mut client = env.db().await;
        let tx = baton_store::begin(&mut client).await.unwrap();
        runs::ending::fail_run(&tx, root.run_id, &error).await.unwrap();
        baton_store::commit(tx).await.unwrap();
    })
    .await;
    let ended = "SELECT count(*) FROM runs WHERE id = $1 AND status = 'failed'";
    assert_eq!(env.scalar_i64(ended, &[&root.run_id]).await, 1, "the run ended");
    let told = "SELECT count(*) FROM outbox WHERE queue = $1 AND body->>'runId' = $2";
    let queue = Queue::RunsFinished.as_str();
    assert_eq!(env.scalar_i64(told, &[&queue, &root.run_id.to_string()]).await, 1, "the collector is told");
    let sent = "SELECT count(*) FROM handoff_requests WHERE id = 'lang-3' AND reply_sent_at IS NOT NULL";
    assert_eq!(env.scalar_i64(sent, &[]).await, 0, "no answer was written");
}
