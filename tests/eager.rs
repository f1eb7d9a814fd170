//! Eager dispatch (docs/reliability.md#eager-dispatch): a worker that hands
//! off runs the successor itself when it has a free slot, with no message
//! through the broker, and so does the process that takes a request, for
//! its root; a successor whose worker died before claiming it is published
//! by the relay once its reservation lapsed. A run is answered by the
//! transaction that ends it.

use std::time::Duration;

use baton::roles::invocation::Worker;
use baton::roles::Role;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{profile, sample_request_json, until_reply, TestEnv};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

/// A four-stage chain of scripted agents: three handoffs, then a finish.
fn chain() -> String {
    let handoff = |to: &str| {
        format!(
            r#"{{ tool = "agent_handoff", args = {{ agentId = "{to}", handoff = {{ objective = "Carry on." }} }} }}"#
        )
    };
    let stage = |id: &str, to: &str| profile(id, &["agent_handoff"], "can_handoff = true", &[&handoff(to)]);
    let last = profile(
        "fourth",
        &["workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            r#"{ calls = [ { tool = "workspace_write", args = { path = "output/main.md", content = "Done." } }, { tool = "workspace_commit" }, { tool = "workspace_finish" } ] }"#,
        ],
    );
    format!(
        "[routes]\ndocs_agent = \"first\"\n\n{}\n{}\n{}\n{last}",
        stage("first", "second"),
        stage("second", "third"),
        stage("third", "fourth")
    )
}

/// Notes `column` of every row `event` (INSERT, UPDATE) writes to `table`
/// in a table of its own, `into`, with a column of that name.
async fn note_rows(env: &TestEnv, event: &str, table: &str, (into, column, kind): (&str, &str, &str)) {
    let sql = format!(
        "CREATE TABLE {into} ({column} {kind});
         CREATE FUNCTION note_{into}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO {into} VALUES (NEW.{column}); RETURN NULL; END $$;
         CREATE TRIGGER note_{into} AFTER {event} ON {table} FOR EACH ROW EXECUTE FUNCTION note_{into}();"
    );
    env.db().await.batch_execute(&sql).await.unwrap();
}

/// Notes every outbox row inserted (its queue), before the publisher deletes it.
async fn note_outbox_rows(env: &TestEnv) {
    note_rows(env, "INSERT", "outbox", ("seen", "queue", "text")).await;
}

/// Messages queued for the handoff queues (roots and successors).
async fn handoff_messages(env: &TestEnv) -> i64 {
    env.scalar_i64("SELECT count(*) FROM seen WHERE queue LIKE '%invocations.handoff%'", &[]).await
}

/// Runs the chain on one invocation worker and returns the run.
async fn run_chain(env: &TestEnv, handoff_id: &str) -> Uuid {
    run_chain_on(env, handoff_id, &[Role::Intake, Role::Invocation, Role::Collector]).await
}

/// [`run_chain`], with the fleet's `roles` in this process. A first chain
/// warms the fleet up (its roles connected, the worker's copy of the
/// profiles file read); what the notes tables saw of it is forgotten.
async fn run_chain_on(env: &TestEnv, handoff_id: &str, roles: &[Role]) -> Uuid {
    env.apply_profiles(&chain()).await;
    note_outbox_rows(env).await;
    let fleet = env.start(roles);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json(&format!("{handoff_id}-warm-up"), "docs_agent", "en")).await;
    until_reply(&mut replies, WAIT).await;
    let forget = "DELETE FROM seen;
                  DO $$ BEGIN IF to_regclass('versions') IS NOT NULL THEN DELETE FROM versions; END IF; END $$;";
    env.db().await.batch_execute(forget).await.unwrap();
    env.send_request(&sample_request_json(handoff_id, "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "{messages:?}");
    let agents = &messages.last().unwrap()["result"]["agents"];
    assert_eq!(agents, &serde_json::json!(["first", "second", "third", "fourth"]));
    env.run_of(handoff_id).await
}

#[tokio::test]
async fn a_worker_that_hands_off_runs_the_successor_itself_with_no_message() {
    let env = TestEnv::new().await;
    let run = run_chain(&env, "eager-1").await;
    assert_eq!(
        handoff_messages(&env).await,
        0,
        "nothing was queued: the root ran where intake took its request, each successor where it was handed to"
    );
    let finished = env.scalar_i64("SELECT count(*) FROM seen WHERE queue LIKE '%runs.finished%'", &[]).await;
    assert_eq!(finished, 0, "the run was answered by the transaction that ended it, with no message to the collector");
    let workers = env.workers_that_started("eager-1").await;
    assert_eq!(workers, vec![env.settings.worker_id.clone(); 4]);
    // Every stage's journal is the seed's: its task started, then the stage.
    let journal = env.journal(run).await;
    let count = |kind: JournalEvent| journal.iter().filter(|e| **e == kind).count();
    assert_eq!(count(JournalEvent::HandoffAccepted), 3);
    assert_eq!(count(JournalEvent::TaskStarted), 3);
    assert_eq!(count(JournalEvent::InvocationStarted), 4);
    assert_eq!(count(JournalEvent::TaskCompleted), 3);
    let reserved = env.scalar_i64("SELECT count(*) FROM invocations WHERE republish_count > 0", &[]).await;
    assert_eq!(reserved, 0, "nothing waited for the relay");
}

/// A scripted stage whose one turn ends its invocation writes its row once:
/// each handoff's end carries its claim and spend, and so does the last
/// stage's, which writes, commits and finishes the reply in that turn.
#[tokio::test]
async fn each_stage_s_claim_spend_and_end_are_one_version_of_its_row() {
    let env = TestEnv::new().await;
    note_rows(&env, "UPDATE", "invocations", ("versions", "id", "uuid")).await;
    let run = run_chain(&env, "one-version-1").await;
    let per_stage = "SELECT i.profile_id, (SELECT count(*) FROM versions v WHERE v.id = i.id), i.status, i.claim_epoch,
                            i.started_at IS NOT NULL, i.model_calls, i.tool_calls
                       FROM invocations i WHERE i.run_id = $1 ORDER BY i.created_at";
    let rows = env.db().await.query(per_stage, &[&run]).await.unwrap();
    let seen: Vec<(String, i64, String, i64, bool, i32, i32)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), r.get(6))).collect();
    let stage = |id: &str, status: &str, tools: i32| (id.to_string(), 1, status.to_string(), 1, true, 1, tools);
    assert_eq!(
        seen,
        vec![
            stage("first", "transferred", 1),
            stage("second", "transferred", 1),
            stage("third", "transferred", 1),
            stage("fourth", "completed", 3),
        ],
        "one update per stage, with its claim (epoch, start) and its spend (one model turn, its tool calls)"
    );
}

/// The run ends and is answered in one transaction: no collector runs, no
/// "run finished" message is queued, and the bridge hears the final status
/// and the reply, in order, from the worker that ran the last stage.
#[tokio::test]
async fn a_run_is_answered_by_the_transaction_that_ends_it_with_no_collector_running() {
    let env = TestEnv::new().await;
    let run = run_chain_on(&env, "answered-1", &[Role::Intake, Role::Invocation]).await;
    let finished = env.scalar_i64("SELECT count(*) FROM seen WHERE queue LIKE '%runs.finished%'", &[]).await;
    assert_eq!(finished, 0, "nothing was left to the collector");
    let ended_then = "SELECT count(*) FROM runs r JOIN handoff_requests h ON h.run_id = r.id
                       WHERE r.id = $1 AND h.reply_sent_at >= r.finished_at AND h.status = 'completed'";
    assert_eq!(env.scalar_i64(ended_then, &[&run]).await, 1, "the reply is recorded with the run's end");
    // The root started where it was taken: intake's commit says `accepted`
    // and `running`; the claim writes nothing to the request.
    assert_eq!(statuses(&env, "answered-1").await, ["1 accepted", "2 running", "3 completed"]);
    assert_eq!(log_rows(&env, "answered-1").await, 2, "intake's and the answer's: none from the root's claim");
}

/// The status messages a handoff's bridge was sent, as "seq status", read
/// as operators read them (a status row keeps its status and number, and
/// its body is rendered from them, V43).
async fn statuses(env: &TestEnv, handoff_id: &str) -> Vec<String> {
    let sent = baton_store::outbox::sent::for_handoff(&env.db().await, handoff_id).await.unwrap();
    sent.iter()
        .filter(|m| m.body["type"] == "status")
        .map(|m| {
            let id = format!("status:{handoff_id}:{}", m.body["seq"]);
            assert_eq!(m.message_id.as_deref(), Some(id.as_str()), "a status's message id names its number");
            format!("{} {}", m.body["seq"], m.body["status"].as_str().unwrap())
        })
        .collect()
}

/// How many statements wrote the handoff's events: each one row, a
/// `handoff_log` row or, when the statement also wrote bridge messages, their
/// row (V47).
async fn log_rows(env: &TestEnv, handoff_id: &str) -> i64 {
    let rows = "SELECT (SELECT count(*) FROM handoff_log WHERE handoff_id = $1)
                     + (SELECT count(*) FROM bridge_messages WHERE handoff_id = $1 AND log_types IS NOT NULL)";
    env.scalar_i64(rows, &[&handoff_id]).await
}

/// A process that takes requests but runs no invocations queues each root
/// for the fleet, as before; a worker's own handoffs stay eager.
#[tokio::test]
async fn a_request_taken_where_no_invocation_role_runs_queues_its_root() {
    let env = TestEnv::new().await;
    env.apply_profiles(&chain()).await;
    note_outbox_rows(&env).await;
    let intake = env.start(&[Role::Intake]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("queued-root-1", "docs_agent", "en")).await;
    env.root_invocation().await;
    assert_eq!(handoff_messages(&env).await, 1, "the root was queued for whichever worker takes it");
    let workers = env.start(&[Role::Invocation]);
    let messages = until_reply(&mut replies, WAIT).await;
    workers.stop().await;
    intake.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "{messages:?}");
    assert_eq!(handoff_messages(&env).await, 1, "each successor ran where it was handed to");
    // A queued root is `running` when a worker claims it.
    assert_eq!(statuses(&env, "queued-root-1").await, ["1 accepted", "2 running", "3 completed"]);
    assert_eq!(log_rows(&env, "queued-root-1").await, 3, "intake's, the root's claim's and the answer's");
}

#[tokio::test]
async fn with_eager_dispatch_off_every_successor_is_queued_for_any_worker() {
    let mut env = TestEnv::new().await;
    env.settings.eager_dispatch = false;
    run_chain(&env, "queued-1").await;
    assert_eq!(handoff_messages(&env).await, 4, "the root and its three successors were queued");
}

/// A worker that took a successor and died before claiming it leaves a
/// `created` row reserved for it, with no message anywhere: the relay's
/// sweep leaves it alone while the reservation lasts (its worker may yet
/// claim it), publishes it once it lapsed, and any worker claims it then,
/// as new work rather than a takeover.
#[tokio::test]
async fn a_successor_whose_worker_died_before_claiming_it_is_published_once_its_reservation_lapsed() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    // No relay: nothing sweeps but this test.
    let intake = env.start(&[Role::Intake]);
    env.send_request(&sample_request_json("reserved-1", "docs_agent", "en")).await;
    let message = env.root_invocation().await;
    intake.stop().await;
    // What a worker's eager reservation leaves when it dies before its claim.
    let reserve = "UPDATE invocations SET lease_owner = 'gone', lease_expires_at = now() + interval '30 seconds',
                          created_at = now() - interval '1 hour' WHERE id = $1";
    env.db().await.execute(reserve, &[&message.invocation_id]).await.unwrap();
    assert_eq!(
        env.sweep_stalled().await,
        Vec::<Uuid>::new(),
        "a live reservation is its worker's, however old the row"
    );
    env.lapse_lease(message.invocation_id).await;
    assert_eq!(env.sweep_stalled().await, vec![message.invocation_id], "a lapsed reservation is published");
    assert_eq!(env.sweep_stalled().await, Vec::<Uuid>::new(), "once, until its backoff has passed");
    let worker = Worker::new(env.pool.clone(), env.settings.clone());
    let claimed = worker.claim(message).await.unwrap().expect("any worker claims it");
    assert_eq!((claimed.claim_epoch, claimed.takeovers), (1, 0), "new work, not a takeover");
}
