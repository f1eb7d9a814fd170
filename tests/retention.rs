//! Retention: `baton runs prune` removes old runs with everything of them
//! in every table (a run that asked a question included), the trails of
//! requests that got no run, answers of unknown handoffs, idle
//! conversations and coding sessions, and leaves young work untouched.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_tests::{eventually, next_json, profile, sample_request_json, TestEnv};
use lapin::Consumer;
use serde_json::{json, Value};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);
const TOOLS: &[&str] = &["ask_user", "workspace_write", "workspace_commit", "workspace_finish"];
const ASK: &str = r#"{ tool = "ask_user", args = { question = "Publish the post now?", options = ["yes", "no"] } }"#;
const WRITE: &str = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Published." } }"#;
const COMMIT: &str = r#"{ tool = "workspace_commit" }"#;
const FINISH: &str = r#"{ tool = "workspace_finish" }"#;

fn request(id: &str, target: &str, chat: &str) -> Value {
    let mut r = sample_request_json(id, target, "en");
    r["conversationKey"] = chat.into();
    r
}

fn answer(id: &str, handoff: &str, question: &str) -> Vec<u8> {
    let body = json!({"type": "answer", "id": id, "handoffId": handoff, "questionId": question, "text": "yes", "at": "2026-11-30T10:00:00Z"});
    serde_json::to_vec(&body).unwrap()
}

/// Reads the bridge's messages until one of `handoff` of type `kind`.
async fn until(replies: &mut Consumer, handoff: &str, kind: &str) -> Value {
    loop {
        let m = next_json(replies, WAIT).await;
        if m["handoffId"] == handoff && m["type"] == kind {
            return m;
        }
    }
}

/// A request whose agent asks, is answered and completes; its question's id.
async fn asked_and_answered(
    env: &TestEnv,
    replies: &mut Consumer,
    handoff: &str,
    chat: &str,
    answer_id: &str,
) -> String {
    env.send_request(&request(handoff, "docs_agent", chat)).await;
    let question = until(replies, handoff, "question").await;
    let question_id = question["questionId"].as_str().unwrap().to_string();
    env.send_raw(&answer(answer_id, handoff, &question_id), None).await;
    assert_eq!(until(replies, handoff, "reply").await["status"], "completed");
    question_id
}

/// What identifies a handoff's run in any table: the run and its invocations.
async fn ids_of_run(env: &TestEnv, handoff: &str) -> (Uuid, Vec<Uuid>) {
    let run = env.run_of(handoff).await;
    let invocations = baton_store::invocations::for_run(&env.db().await, run).await.unwrap();
    (run, invocations.iter().map(|i| i.id).collect())
}

/// Per table of the schema, the rows whose text holds any of `needles`.
async fn rows_mentioning(env: &TestEnv, needles: &[String], except: &[&str]) -> BTreeMap<String, i64> {
    let c = env.db().await;
    let tables = c.query("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1", &[]).await;
    let mut counts = BTreeMap::new();
    for table in tables.unwrap().iter().map(|r| r.get::<_, String>(0)) {
        if except.contains(&table.as_str()) {
            continue;
        }
        let sql = format!(
            "SELECT count(*) FROM \"{table}\" x WHERE EXISTS (SELECT 1 FROM unnest($1::text[]) n WHERE strpos(x::text, n) > 0)"
        );
        counts.insert(table, c.query_one(&sql, &[&needles]).await.unwrap().get(0));
    }
    counts
}

fn strings(ids: impl IntoIterator<Item = impl ToString>) -> Vec<String> {
    ids.into_iter().map(|id| id.to_string()).collect()
}

#[tokio::test]
async fn a_pruned_database_holds_nothing_of_the_pruned_runs_in_any_table_and_keeps_young_ones() {
    let env = TestEnv::new().await;
    let file =
        format!("[routes]\ndocs_agent = \"asker\"\n\n{}", profile("asker", TOOLS, "", &[ASK, WRITE, COMMIT, FINISH]));
    env.apply_profiles(&file).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    let old_question = asked_and_answered(&env, &mut replies, "ret-old", "ret-chat-old", "ret-ans-old").await;
    let young_question = asked_and_answered(&env, &mut replies, "ret-young", "ret-chat-young", "ret-ans-young").await;
    // A request no agent takes: refused, with no run.
    env.send_request(&request("ret-refused", "codex", "ret-chat-refused")).await;
    assert_eq!(until(&mut replies, "ret-refused", "reply").await["status"], "failed");
    // An answer for a handoff nobody knows.
    env.send_raw(&answer("ret-ans-ghost", "ret-ghost", "q-ghost"), None).await;
    eventually(WAIT, "the unknown handoff's answer kept", || async {
        (env.scalar_i64("SELECT count(*) FROM bridge_answers WHERE id = 'ret-ans-ghost'", &[]).await == 1).then_some(())
    })
    .await;
    fleet.stop().await;
    let (old_run, old_invocations) = ids_of_run(&env, "ret-old").await;
    let (young_run, young_invocations) = ids_of_run(&env, "ret-young").await;
    // What a coding agent leaves: its diff (with the run) and its session (by age).
    let c = env.db().await;
    for (run, inv, chat) in
        [(old_run, old_invocations[0], "ret-chat-old"), (young_run, young_invocations[0], "ret-chat-young")]
    {
        c.execute(
            "INSERT INTO coding_changes (invocation_id, run_id, project, changes, patch) VALUES ($1, $2, 'site', '{}', 'diff')",
            &[&inv, &run],
        )
        .await
        .unwrap();
        c.execute(
            "INSERT INTO coding_sessions (conversation_key, target_agent, project, cli, session_id) VALUES ($1, 'docs_agent', 'site', 'codex', $1)",
            &[&chat],
        )
        .await
        .unwrap();
    }
    // Forty days pass for the old ones.
    c.batch_execute(
        "UPDATE runs SET created_at = now() - interval '40 days', finished_at = now() - interval '40 days' WHERE handoff_id = 'ret-old';
         UPDATE handoff_requests SET reply_sent_at = now() - interval '40 days' WHERE id IN ('ret-old', 'ret-refused');
         UPDATE bridge_answers SET received_at = now() - interval '40 days' WHERE id IN ('ret-ans-old', 'ret-ans-ghost');
         UPDATE conversations SET updated_at = now() - interval '40 days' WHERE key IN ('ret-chat-old', 'ret-chat-refused');
         UPDATE coding_sessions SET updated_at = now() - interval '40 days' WHERE conversation_key = 'ret-chat-old';",
    )
    .await
    .unwrap();
    let handoffs = ["ret-old", "ret-refused", "ret-ghost"];
    let mut old = strings(handoffs);
    old.extend(strings([old_run]).into_iter().chain(strings(&old_invocations)));
    old.extend(strings([old_question.as_str(), "ret-ans-old", "ret-ans-ghost", "ret-chat-old", "ret-chat-refused"]));
    let mut young = strings(["ret-young", "ret-ans-young", "ret-chat-young", young_question.as_str()]);
    young.extend(strings([young_run]).into_iter().chain(strings(&young_invocations)));
    let young_before = rows_mentioning(&env, &young, &[]).await;
    assert!(
        young_before.values().filter(|n| **n > 0).count() >= 10,
        "the young run is in many tables: {young_before:?}"
    );
    let old_before = rows_mentioning(&env, &old, &[]).await;
    assert!(old_before["questions"] == 1 && old_before["bridge_answers"] == 2, "{old_before:?}");

    // Small batches: each kind takes more than one.
    let printed = env.baton_cli(&["runs", "prune", "--older-than-days", "30", "--batch", "1"]).await;
    assert!(printed.contains("pruned 1 finished run(s), the trails of 2 request(s), 1 answer(s), 2 conversation(s) and 1 coding session(s)"), "{printed}");

    // Nothing of the old ones is left anywhere, but the request rows
    // themselves, which say when their trail went and name no run.
    let left = rows_mentioning(&env, &old, &["handoff_requests"]).await;
    let left: Vec<_> = left.into_iter().filter(|(_, n)| *n > 0).collect();
    assert!(left.is_empty(), "rows of pruned work left: {left:?}");
    let ids = strings([old_run]).into_iter().chain(strings(&old_invocations)).collect::<Vec<_>>();
    assert_eq!(rows_mentioning(&env, &ids, &[]).await["handoff_requests"], 0, "no request names the pruned run");
    let kept = "SELECT count(*) FROM handoff_requests WHERE id IN ('ret-old', 'ret-refused') AND pruned_at IS NOT NULL AND run_id IS NULL";
    assert_eq!(env.scalar_i64(kept, &[]).await, 2);
    // The young run is whole.
    assert_eq!(rows_mentioning(&env, &young, &[]).await, young_before);
    // A pruned request's id is still a duplicate: sent again, nothing runs.
    let fleet = env.start_all();
    env.send_request(&request("ret-old", "docs_agent", "ret-chat-old")).await;
    eventually(WAIT, "the repeated request counted", || async {
        (env.scalar_i64("SELECT deliveries::bigint FROM handoff_requests WHERE id = 'ret-old'", &[]).await == 2)
            .then_some(())
    })
    .await;
    fleet.stop().await;
    assert_eq!(env.scalar_i64("SELECT count(*) FROM runs", &[]).await, 1, "the young run only");
}
