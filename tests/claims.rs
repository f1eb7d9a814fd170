//! Fenced claims: duplicates find nothing, an expired lease is taken over
//! once the relay's sweep found it stalled, and the stalled worker's writes
//! are refused.

use std::time::Duration;

use baton::roles::invocation::Worker;
use baton::roles::Role;
use baton_agent::Exit;
use baton_bus::Outgoing;
use baton_domain::fleet::{Queue, RunInvocation};
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, profile, sample_request_json, until_reply, TestEnv};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

/// Starts intake and relay only, sends a request, and returns its root invocation.
async fn pending_root(env: &TestEnv, id: &str) -> (baton::fleet::Fleet, RunInvocation) {
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    env.send_request(&sample_request_json(id, "docs_agent", "en")).await;
    (fleet, env.root_invocation().await)
}

#[tokio::test]
async fn a_duplicate_invocation_message_finds_nothing_to_do() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("first", "docs_agent", "en")).await;
    until_reply(&mut replies, WAIT).await;
    let run = env.run_of("first").await;
    let root: Uuid = env
        .db()
        .await
        .query_one("SELECT id FROM invocations WHERE run_id = $1 AND kind = 'root'", &[&run])
        .await
        .unwrap()
        .get(0);
    let events_before = env.journal(run).await.len();

    // The same "run it" message again, through the broker, then a second
    // request behind it on the same queue: once that one is done, the
    // duplicate has been handled.
    let body = serde_json::to_vec(&RunInvocation { invocation_id: root, run_id: run }).unwrap();
    let queue = env.queue(Queue::InvocationsHandoff);
    env.publisher.publish(&Outgoing { queue: &queue, body: &body, ..Default::default() }).await.unwrap();
    env.send_request(&sample_request_json("second", "docs_agent", "en")).await;
    until_reply(&mut replies, WAIT).await;
    fleet.stop().await;

    assert_eq!(env.journal(run).await.len(), events_before, "the finished run did not move");
    let epoch = env.scalar_i64("SELECT claim_epoch FROM invocations WHERE id = $1", &[&root]).await;
    assert_eq!(epoch, 1, "nobody claimed the finished invocation again");
    let worker = Worker::new(env.pool.clone(), env.settings.clone());
    assert!(worker.claim(RunInvocation { invocation_id: root, run_id: run }).await.unwrap().is_none());
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_stale_worker_is_fenced() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let (fleet, message) = pending_root(&env, "takeover").await;
    let mut a_settings = env.settings.clone();
    a_settings.worker_id = "worker-a".into();
    let mut b_settings = env.settings.clone();
    b_settings.worker_id = "worker-b".into();
    let a = Worker::new(env.pool.clone(), a_settings);
    let b = Worker::new(env.pool.clone(), b_settings);

    let held_by_a = a.claim(message).await.unwrap().expect("a claims");
    assert_eq!(held_by_a.claim_epoch, 1);
    assert!(b.claim(message).await.unwrap().is_none(), "a live lease cannot be claimed");

    // A stalls past its lease; the relay's sweep finds it stalled; B takes
    // over with a higher epoch.
    env.lapse_lease(message.invocation_id).await;
    env.sweep_stalled().await;
    let held_by_b = b.claim(message).await.unwrap().expect("b takes over");
    assert_eq!(held_by_b.claim_epoch, 2);

    // A wakes up: its writes are refused and its loop stops without writing.
    let c = env.db().await;
    let fenced = baton_store::invocations::fence(&c, held_by_a.id, held_by_a.claim_epoch, None).await;
    assert!(matches!(fenced, Err(baton_store::Error::Fenced(_))), "{fenced:?}");
    let steps_before = env.scalar_i64("SELECT count(*) FROM steps WHERE invocation_id = $1", &[&held_by_a.id]).await;
    assert_eq!(steps_before, 1, "only the prompt, written with A's claim");
    let exit = a.runner.run(&held_by_a, &CancellationToken::new()).await.unwrap();
    assert_eq!(exit, Exit::Fenced);
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM steps WHERE invocation_id = $1", &[&held_by_a.id]).await,
        steps_before,
        "A wrote nothing"
    );

    // B runs the writer stage; the rest of the chain completes through the fleet.
    let invocation_fleet = env.start(&[Role::Invocation]);
    let mut replies = env.replies().await;
    assert_eq!(b.runner.run(&held_by_b, &CancellationToken::new()).await.unwrap(), Exit::Transferred);
    let messages = until_reply(&mut replies, WAIT).await;
    invocation_fleet.stop().await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let timeline = baton_store::journal::timeline(&env.db().await, message.run_id).await.unwrap();
    let writer_starts: Vec<_> = timeline
        .iter()
        .filter(|e| e.is(JournalEvent::InvocationStarted) && e.invocation_id == Some(message.invocation_id))
        .map(|e| e.payload["resumed"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(writer_starts, vec![false, true], "the writer started once and was resumed once, by the takeover");
}

/// Issue 25: a lease also lapses while the database is away. When it comes
/// back, a claim that was retried through the outage (a duplicate delivery
/// of a claimed invocation), or a duplicate the outbox sends again, may run
/// before the holder's heartbeat has renewed; it must take nothing over, or
/// the turn the holder kept through the outage is discarded and asked again.
/// Only a lease the relay's sweep found stalled (the sweep waits a lease
/// after the relay regains the database) is taken over.
#[tokio::test]
async fn a_lapsed_lease_is_taken_over_only_once_the_relays_sweep_found_it_stalled() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    // No relay: nothing sweeps but this test.
    let intake = env.start(&[Role::Intake]);
    env.send_request(&sample_request_json("lapsed", "docs_agent", "en")).await;
    let message = env.root_invocation().await;
    intake.stop().await;
    let mut b_settings = env.settings.clone();
    b_settings.worker_id = "worker-b".into();
    let a = Worker::new(env.pool.clone(), env.settings.clone());
    let b = Worker::new(env.pool.clone(), b_settings);
    let held_by_a = a.claim(message).await.unwrap().expect("a claims");

    env.lapse_lease(message.invocation_id).await;
    assert!(b.claim(message).await.unwrap().is_none(), "a duplicate took over a lease the sweep had not found stalled");
    assert!(a.claim(message).await.unwrap().is_none(), "so did A's own duplicate");
    let renewed = baton_store::invocations::renew(&env.db().await, held_by_a.id, 1, env.settings.lease).await;
    assert!(renewed.unwrap(), "A renews when the database is back and keeps its claim");
    assert_eq!(env.sweep_stalled().await, Vec::<Uuid>::new(), "a renewed lease is not stalled");

    env.lapse_lease(message.invocation_id).await;
    assert_eq!(env.sweep_stalled().await, vec![message.invocation_id], "the sweep finds the lapsed lease");
    let held_by_b = b.claim(message).await.unwrap().expect("b takes over what the sweep found stalled");
    assert_eq!(held_by_b.claim_epoch, 2);
    assert_eq!(held_by_b.takeovers, 1);
    let renewed = baton_store::invocations::renew(&env.db().await, held_by_a.id, 1, env.settings.lease).await;
    assert!(!renewed.unwrap(), "A's claim is gone");
}

/// A handoff is refused while delegated tasks are pending (docs/concepts.md#handoff).
#[tokio::test]
async fn agent_handoff_denies_pending_delegated_tasks() {
    let env = TestEnv::new().await;
    // The lead's handoff is run below by hand, so its script is never played.
    let lead = profile("lead", &["agent_handoff"], "can_handoff = true", &[r#"{ tool = "workspace_list" }"#]);
    let closer = profile("closer", &["workspace_finish"], "", &[r#"{ tool = "workspace_finish" }"#]);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"lead\"\n\n{lead}\n{closer}")).await;
    let (fleet, message) = pending_root(&env, "pending").await;
    let worker = Worker::new(env.pool.clone(), env.settings.clone());
    let lead = worker.claim(message).await.unwrap().unwrap();
    // A delegated (ReturnToParent) task of the lead, still queued.
    let child = Uuid::now_v7();
    let c = env.db().await;
    c.execute(
        "INSERT INTO invocations (id, run_id, parent_invocation_id, profile_id, kind, status, exit_policy, brief)
         VALUES ($1, $2, $3, 'closer', 'child', 'created', 'task_return_required', '# Delegated Task')",
        &[&child, &message.run_id, &lead.id],
    )
    .await
    .unwrap();
    c.execute(
        "INSERT INTO tasks (id, run_id, parent_invocation_id, child_invocation_id, target_profile_id, workspace_key, continuation, status, task, created_by_tool_call_id)
         VALUES ($1, $2, $3, $4, 'closer', 'closer', 'return_to_parent', 'queued', '{}', 'x')",
        &[&Uuid::now_v7(), &message.run_id, &lead.id, &child],
    )
    .await
    .unwrap();
    // The lead's handoff, run as the loop runs it: inside a fenced transaction.
    let profile = baton_store::profiles::get(&c, "lead").await.unwrap().unwrap();
    let surface = baton_domain::tools::surface(&profile.tool_names(), lead.kind);
    let call = baton_agent::providers::ToolCall {
        id: "call_1".into(),
        name: "agent_handoff".into(),
        arguments: serde_json::json!({"agentId": "closer", "handoff": {"objective": "Close."}}),
    };
    let ctx = baton_agent::tools::ToolCtx {
        invocation: &lead,
        profile: &profile,
        surface: &surface,
        call: &call,
        may_have_children: true,
        as_claimed: None,
        spending: Default::default(),
        workspace: &Default::default(),
    };
    let mut client = env.db().await;
    let tx = client.transaction().await.unwrap();
    baton_store::invocations::fence(&tx, lead.id, lead.claim_epoch, None).await.unwrap();
    let refused = baton_agent::tools::dispatch(&tx, &ctx).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(refused.is_error);
    assert_eq!(refused.structured["error"]["code"], "agent.handoff_pending_tasks");
    assert!(refused.content.contains("agent_await"), "{}", refused.content);

    // Once the delegated task is done, the same handoff goes through.
    c.execute("UPDATE tasks SET status = 'completed' WHERE continuation = 'return_to_parent'", &[]).await.unwrap();
    let tx = client.transaction().await.unwrap();
    let accepted = baton_agent::tools::dispatch(&tx, &ctx).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!accepted.is_error, "{}", accepted.content);
    assert_eq!(accepted.content, "Handoff accepted for Agent closer. Your part is complete.");
    fleet.stop().await;
}

/// A worker that claimed an invocation and died: the relay's sweep
/// re-publishes it after the lease, and another worker finishes the run.
#[tokio::test]
async fn work_of_a_dead_worker_is_re_published_and_finished_by_another() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let (fleet, message) = pending_root(&env, "orphan").await;
    let dead = Worker::new(env.pool.clone(), env.settings.clone());
    let claimed = dead.claim(message).await.unwrap().expect("claimed, then the worker dies");
    // The dead worker had acked its delivery: the queue no longer holds it.
    let queue = env.queue(Queue::InvocationsHandoff);
    let channel = env.conn.create_channel().await.unwrap();
    eventually(WAIT, "the root message was published", || async {
        let purged = channel.queue_purge(queue.as_str().into(), Default::default()).await.unwrap();
        (purged > 0).then_some(())
    })
    .await;
    env.lapse_lease(claimed.id).await;
    let mut replies = env.replies().await;
    let workers = env.start(&[Role::Invocation]);
    let messages = until_reply(&mut replies, WAIT).await;
    workers.stop().await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let epoch = env.scalar_i64("SELECT claim_epoch FROM invocations WHERE id = $1", &[&claimed.id]).await;
    assert_eq!(epoch, 2, "taken over once");
    let republished = env
        .scalar_i64("SELECT count(*) FROM invocations WHERE id = $1 AND republished_at IS NOT NULL", &[&claimed.id])
        .await;
    assert_eq!(republished, 1, "the relay re-published it");
}

/// A new stage this process took itself is claimed by one lookup of its
/// row and its run (`claim_taken_here`): it reads what the full claim reads
/// (deferred, at epoch 1, the run, its spend, the profiles' version), with
/// the brief its writer rendered; a stage no longer new, or whose run has
/// ended, is left to the full claim.
#[tokio::test]
async fn a_new_stage_taken_here_is_claimed_by_a_lookup_that_reads_what_the_full_claim_reads() {
    use baton_store::after_commit::Known;
    use baton_store::claims::{claim_start, claim_taken_here};
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let (fleet, message) = pending_root(&env, "taken-here").await;
    fleet.stop().await;
    let id = message.invocation_id;
    let mut c = env.db().await;
    let profile: String = c.query_one("SELECT profile_id FROM invocations WHERE id = $1", &[&id]).await.unwrap().get(0);
    let lease = Duration::from_secs(30);
    let full = {
        let tx = baton_store::begin(&mut c).await.unwrap();
        claim_start(&tx, id, "w", lease, std::slice::from_ref(&profile)).await.unwrap().expect("claimable")
    };
    let known = Known { profile_id: profile.clone(), root_brief: Some(full.inv.brief.clone()) };
    let here = {
        let tx = baton_store::begin(&mut c).await.unwrap();
        claim_taken_here(&tx, id, &known).await.unwrap().expect("claimable")
    };
    let what = |s: &baton_store::claims::ClaimStart| {
        let (inv, run, spend) = (&s.inv, &s.run, &s.spend);
        format!(
            "{:?}",
            (
                (inv.id, inv.run_id, inv.kind, inv.status, &inv.brief, inv.claim_epoch, inv.priority, inv.handoffs),
                (s.deferred, s.task_started, s.facts.takeover, s.profiles_version),
                (run.id, &run.handoff_id, run.status, &run.root_profile_id, run.handoff_count, &run.final_text),
                (&spend.budget, spend.spent.tokens, spend.spent.model_calls, spend.spent.tool_calls),
            )
        )
    };
    assert_eq!(what(&here), what(&full));
    assert_eq!(here.inv.claim_epoch, 1);
    assert!(here.deferred);
    let other = Known { profile_id: profile, root_brief: Some("the brief intake rendered".into()) };
    let tx = baton_store::begin(&mut c).await.unwrap();
    let read = claim_taken_here(&tx, id, &other).await.unwrap().expect("claimable");
    assert_eq!(read.inv.brief, "the brief intake rendered", "a root's row has none; its writer's is used");
    drop(tx);

    // No longer new, or its run ended: the lookup finds nothing.
    c.execute("UPDATE invocations SET claim_epoch = 1 WHERE id = $1", &[&id]).await.unwrap();
    let tx = baton_store::begin(&mut c).await.unwrap();
    assert!(claim_taken_here(&tx, id, &known).await.unwrap().is_none(), "claimed before");
    drop(tx);
    c.execute("UPDATE invocations SET claim_epoch = 0 WHERE id = $1", &[&id]).await.unwrap();
    c.execute("UPDATE runs SET status = 'cancelled' WHERE id = $1", &[&message.run_id]).await.unwrap();
    let tx = baton_store::begin(&mut c).await.unwrap();
    assert!(claim_taken_here(&tx, id, &known).await.unwrap().is_none(), "its run ended");
}
