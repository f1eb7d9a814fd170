//! The relay under faults: a poison row, a full bridge queue, a returned
//! status, and sweeps that must not flood a backlog.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use baton_bus::lapin::types::{AMQPValue, FieldTable};
use baton_bus::lapin::Consumer;
use baton_domain::fleet::Queue;
use baton_domain::protocol::reply::truncation_note;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_domain::Language;
use baton_tests::{eventually, next_json, profile, sample_request_json, until_reply, TestEnv};
use futures_lite::StreamExt;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(40);
const MIB: usize = 1024 * 1024;

/// A solo agent that writes `content`, commits and finishes.
fn solo(content: &str) -> String {
    let write =
        format!(r#"{{ tool = "workspace_write", args = {{ path = "output/main.md", content = "{content}" }} }}"#);
    let tools = ["workspace_write", "workspace_commit", "workspace_finish"];
    let script = [write.as_str(), r#"{ tool = "workspace_commit" }"#, r#"{ tool = "workspace_finish" }"#];
    format!("[routes]\ndocs_agent = \"solo\"\n\n{}", profile("solo", &tools, "", &script))
}

/// Messages ready in a queue, by a passive declare.
async fn ready(env: &TestEnv, queue: &str) -> u32 {
    env.publisher.ready_count(queue).await.expect("queue exists")
}

async fn until_the_outbox_is_empty(env: &TestEnv) {
    eventually(WAIT, "the outbox is empty", || async {
        (env.scalar_i64("SELECT count(*) FROM unsent_messages", &[]).await == 0).then_some(())
    })
    .await;
}

/// A bridge queue that holds `max` messages and nacks any more
/// (`reject-publish`). Exclusive: gone with the test's connection; other
/// connections may still publish to it.
async fn bounded_queue(env: &TestEnv, name: &str, max: i64) -> String {
    let queue = format!("{}{name}", env.settings.queue_prefix);
    let channel = env.conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(max));
    args.insert("x-overflow".into(), AMQPValue::LongString("reject-publish".into()));
    let options = QueueDeclareOptions { exclusive: true, ..Default::default() };
    channel.queue_declare(queue.as_str().into(), options, args).await.unwrap();
    queue
}

/// Once the outbox is empty, whatever is still on its way to `consumer`.
async fn drain_after_the_outbox(env: &TestEnv, consumer: &mut Consumer, seen: &mut Vec<Value>) {
    until_the_outbox_is_empty(env).await;
    while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_secs(2), consumer.next()).await {
        d.acker.ack(BasicAckOptions::default()).await.unwrap();
        seen.push(serde_json::from_slice(&d.data).unwrap());
    }
}

/// Every message a bridge's queue holds up to the reply, then whatever is
/// still on its way once the outbox is empty.
async fn heard_through_the_reply(env: &TestEnv, queue: &str) -> Vec<Value> {
    let mut consumer = env.consume(queue).await;
    let mut seen = vec![];
    while seen.last().is_none_or(|m: &Value| m["type"] != "reply") {
        seen.push(next_json(&mut consumer, WAIT).await);
    }
    drain_after_the_outbox(env, &mut consumer, &mut seen).await;
    seen
}

/// What a bridge heard, in order: each status's name, and `reply`.
fn heard(seen: &[Value]) -> Vec<&str> {
    seen.iter().map(|m| if m["type"] == "reply" { "reply" } else { m["status"].as_str().unwrap_or("?") }).collect()
}

/// Plays a consumer that takes every message of a queue for `window` and
/// loses it (acks without acting): how many it took.
async fn take_and_lose(env: &TestEnv, queue: &str, window: Duration) -> i64 {
    let channel = env.conn.create_channel().await.unwrap();
    channel.basic_qos(1000, BasicQosOptions::default()).await.unwrap();
    let options = BasicConsumeOptions::default();
    let mut consumer = channel.basic_consume(queue.into(), "".into(), options, FieldTable::default()).await.unwrap();
    let (mut taken, until) = (0, tokio::time::Instant::now() + window);
    while let Ok(Some(Ok(d))) = tokio::time::timeout_at(until, consumer.next()).await {
        d.acker.ack(BasicAckOptions::default()).await.unwrap();
        taken += 1;
    }
    taken
}

#[tokio::test]
async fn a_twenty_mib_row_is_moved_aside_with_its_reason_and_the_next_run_completes() {
    let env = TestEnv::new().await;
    env.apply_profiles(&solo("Done.")).await;
    env.run_request("poison-before").await;
    let run = env.run_of("poison-before").await;
    // The oldest row of the outbox: an internal message of 20 MiB.
    let c = env.db().await;
    c.execute(
        "INSERT INTO outbox (queue, body)
         VALUES ($1, jsonb_build_object('runId', $2::uuid, 'invocationId', gen_random_uuid(), 'pad', repeat('x', $3)))",
        &[&Queue::InvocationsHandoff.as_str(), &run, &(20 * MIB as i32)],
    )
    .await
    .unwrap();
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let messages = env.run_request("poison-after").await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "the run behind the poison row completes");
    let letter = next_json(&mut dead, WAIT).await;
    let reason = letter["_error"].as_str().unwrap();
    assert!(reason.contains("over the limit"), "{reason}");
    assert_eq!(letter["_body"]["runId"], run.to_string());
    let pad = letter["_body"]["pad"].as_str().unwrap();
    let cut = pad.len() < MIB && pad.ends_with(truncation_note(Language::En));
    assert!(cut, "the dead letter's body is cut: {} bytes", pad.len());
    assert!(env.journal(run).await.contains(&JournalEvent::MessageDeadLettered), "the run is told");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM unsent_messages", &[]).await, 0, "nothing stays behind");
}

#[tokio::test]
async fn a_message_the_broker_closes_the_channel_over_is_found_alone_and_dead_lettered() {
    let mut env = TestEnv::new().await;
    // Our own bound above the broker's (128 MiB by default), so that the
    // broker is the one to refuse: it closes the channel with 406.
    env.settings.max_message_bytes = 200 * MIB;
    // Preparing 129 MiB in a debug build on a busy machine keeps the relay
    // from sending anything, heartbeats included, for longer than the
    // default dead-peer bound (10 s: a 3 s heartbeat), so the broker drops
    // it before it can refuse the message, again at every retry. The fleet
    // never publishes more than its own bound (4 MiB by default).
    env.settings.amqp_dead_peer_secs = 60;
    let finished = env.queue(Queue::RunsFinished);
    let c = env.db().await;
    for pad in [0, 129 * MIB as i32, 0] {
        c.execute(
            "INSERT INTO outbox (queue, body) VALUES ($1, jsonb_build_object('runId', gen_random_uuid(), 'pad', repeat('x', $2)))",
            &[&Queue::RunsFinished.as_str(), &pad],
        )
        .await
        .unwrap();
    }
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let fleet = env.start(&[Role::Relay]);
    // Serializing 129 MiB in a debug build on a busy machine takes a while.
    let letter = next_json(&mut dead, 2 * WAIT).await;
    eventually(WAIT, "the rows around it are published", || async {
        (ready(&env, &finished).await == 2).then_some(())
    })
    .await;
    until_the_outbox_is_empty(&env).await;
    fleet.stop().await;
    let reason = letter["_error"].as_str().unwrap();
    assert!(reason.contains("406"), "{reason}");
    let pad = letter["_body"]["pad"].as_str().unwrap();
    let cut = pad.len() < MIB && pad.ends_with(truncation_note(Language::En));
    assert!(cut, "the dead letter's body is cut: {} bytes", pad.len());
}

#[tokio::test]
async fn a_huge_agent_result_reaches_the_bridge_cut_and_stays_whole_in_postgres() {
    let mut env = TestEnv::new().await;
    // Scaled down from the 4 MiB default so that a debug build stays quick:
    // a 4 MiB result, which the reply carries three times (text, its one part, finalText).
    env.settings.max_message_bytes = MIB;
    let result = "All good. ".repeat(4 * MIB / 10);
    env.apply_profiles(&solo(&result)).await;
    let mut request = sample_request_json("huge-1", "docs_agent", "en");
    request["source"] = "admin".into(); // one part: the text travels three times
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&request).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed", "{}", reply["error"]);
    // The final status and the reply are one row (V46): its writer hands the
    // row to the relay whole, which sends the status once, then the cut reply.
    let statuses: Vec<(&str, i64)> = messages[..messages.len() - 1]
        .iter()
        .map(|m| (m["status"].as_str().unwrap(), m["seq"].as_i64().unwrap()))
        .collect();
    assert_eq!(statuses, [("accepted", 1), ("running", 2), ("completed", 3)], "each status once, in order");
    let size = serde_json::to_vec(reply).unwrap().len();
    assert!(size <= MIB, "the reply is within the bound: {size} bytes");
    for field in [&reply["text"], &reply["parts"][0], &reply["result"]["finalText"]] {
        let text = field.as_str().unwrap();
        let cut = text.len() > MIB / 4 && text.ends_with(truncation_note(Language::En));
        assert!(cut, "cut with the note: {} bytes", text.len());
    }
    let kept = env.scalar_i64("SELECT length(final_text)::bigint FROM runs", &[]).await;
    assert!(kept as usize >= result.trim().len(), "the full result stays in Postgres: {kept} bytes");
    assert!(env.handoff_events("huge-1").await.contains(&HandoffEvent::MessageCut));
}

#[tokio::test]
async fn a_reply_nacked_by_a_full_queue_waits_and_arrives_once_when_there_is_room() {
    let mut env = TestEnv::new().await;
    // Retries back off up to the unclaimed grace: keep it short.
    env.settings.unclaimed_grace = Duration::from_secs(2);
    env.apply_profiles(&solo("Done.")).await;
    let full = bounded_queue(&env, "bridge.full", 1).await;
    let filler = baton_bus::Outgoing { queue: &full, body: b"{\"type\":\"filler\"}", ..Default::default() };
    env.publisher.publish(&filler).await.unwrap();
    let fleet = env.start_all();
    let request = serde_json::to_vec(&sample_request_json("full-1", "docs_agent", "en")).unwrap();
    env.send_raw(&request, Some(&full)).await;
    eventually(WAIT, "the run finished and its reply waits in the outbox", || async {
        let waiting = "SELECT count(*) FROM bridge_messages WHERE pending AND attempts > 0 AND handoff_id = 'full-1'";
        let waiting = env.scalar_i64(waiting, &[]).await;
        let replied = env
            .scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = 'full-1' AND reply_sent_at IS NOT NULL", &[])
            .await;
        (waiting > 0 && replied == 1).then_some(())
    })
    .await;
    assert!(env.handoff_events("full-1").await.contains(&HandoffEvent::DeliveryDelayed));
    // What an operator reads of it meanwhile (the console's run page).
    let sent = baton_store::outbox::sent::for_handoff(&env.db().await, "full-1").await.unwrap();
    let waiting = sent.iter().find(|m| m.pending).expect("a message not sent yet");
    assert!(waiting.last_error.is_some(), "with the broker's refusal: {:?}", waiting.message_id);
    // Room again: the bridge drains its queue.
    let seen = heard_through_the_reply(&env, &full).await;
    fleet.stop().await;
    assert_eq!(seen.iter().filter(|m| m["type"] == "reply").count(), 1, "{seen:?}");
    let mut statuses: Vec<&str> =
        seen.iter().filter(|m| m["type"] == "status").filter_map(|m| m["status"].as_str()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, ["accepted", "completed", "running"], "none lost, none twice: {seen:?}");
    assert_eq!(ready(&env, &env.queue(Queue::Dead)).await, 0, "nothing was dead-lettered");
}

/// A bridge queue that holds one message takes the first of a row's two
/// (`accepted`, `running`: one row, V46) and refuses the second: the row is
/// published again from the second only, so once the bridge drains its
/// queue it hears each message once, in order.
#[tokio::test]
async fn a_row_refused_half_way_is_sent_again_from_the_message_that_was_refused() {
    let mut env = TestEnv::new().await;
    env.settings.unclaimed_grace = Duration::from_secs(2);
    let small = bounded_queue(&env, "bridge.small", 1).await;
    // Intake's row for a root taken where it was taken in.
    let row = "INSERT INTO bridge_messages (handoff_id, status, seq, then_status, queue, external, pending)
               VALUES ('small-1', 'accepted', 1, 'running', $1, true, true)";
    env.db().await.execute(row, &[&small]).await.unwrap();
    let fleet = env.start(&[Role::Relay]);
    let half = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'small-1' AND pending AND sent_parts = 1";
    eventually(WAIT, "the row waits, its first message sent", || async {
        (env.scalar_i64(half, &[]).await == 1).then_some(())
    })
    .await;
    // What an operator reads meanwhile: the first sent, the second waiting.
    let shown = baton_store::outbox::sent::for_handoff(&env.db().await, "small-1").await.unwrap();
    let waiting: Vec<bool> = shown.iter().map(|m| m.pending).collect();
    assert_eq!(waiting, [false, true], "{shown:?}");
    let mut consumer = env.consume(&small).await;
    let mut seen = vec![next_json(&mut consumer, WAIT).await, next_json(&mut consumer, WAIT).await];
    drain_after_the_outbox(&env, &mut consumer, &mut seen).await;
    fleet.stop().await;
    let heard: Vec<(&str, i64)> =
        seen.iter().map(|m| (m["status"].as_str().unwrap(), m["seq"].as_i64().unwrap())).collect();
    assert_eq!(heard, [("accepted", 1), ("running", 2)], "each once, in order: {seen:?}");
}

/// The same through the process that wrote the row: a bridge queue that
/// holds three messages takes `accepted`, `running` and the final status,
/// and refuses the reply that shares the final status's row; its writer
/// hands the row to the relay from the reply on.
#[tokio::test]
async fn a_row_its_writer_sent_half_of_goes_on_from_the_refused_message() {
    let mut env = TestEnv::new().await;
    env.settings.unclaimed_grace = Duration::from_secs(2);
    env.apply_profiles(&solo("Done.")).await;
    let small = bounded_queue(&env, "bridge.three", 3).await;
    let fleet = env.start_all();
    let request = serde_json::to_vec(&sample_request_json("three-1", "docs_agent", "en")).unwrap();
    env.send_raw(&request, Some(&small)).await;
    let half = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'three-1' AND pending AND sent_parts = 1
                   AND status = 'completed' AND body IS NOT NULL";
    eventually(WAIT, "the final row waits, its status sent", || async {
        (env.scalar_i64(half, &[]).await == 1).then_some(())
    })
    .await;
    let seen = heard_through_the_reply(&env, &small).await;
    fleet.stop().await;
    assert_eq!(heard(&seen), ["accepted", "running", "completed", "reply"], "each once, in order: {seen:?}");
}

#[tokio::test]
async fn a_status_that_no_queue_takes_is_dead_lettered_with_its_reason() {
    let env = TestEnv::new().await;
    env.apply_profiles(&solo("Done.")).await;
    // With an invocation role beside it, intake takes the root itself and
    // sends `accepted` and `running` as one row, and the run's end sends
    // `completed` and the reply as another (V46).
    let fleet = env.start(&[Role::Intake, Role::Invocation, Role::Relay]);
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let gone = format!("{}bridge.gone", env.settings.queue_prefix);
    let request = serde_json::to_vec(&sample_request_json("gone-1", "docs_agent", "en")).unwrap();
    env.send_raw(&request, Some(&gone)).await;
    let mut letters = vec![];
    for _ in 0..4 {
        letters.push(next_json(&mut dead, WAIT).await);
    }
    // A row's second message goes once its first has left, dead-lettered
    // too; then the row is settled. The end's row always holds two (intake's
    // does unless intake took the request before its process's invocation
    // role was up).
    let pending = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'gone-1' AND pending";
    eventually(WAIT, "every row is settled", || async { (env.scalar_i64(pending, &[]).await == 0).then_some(()) })
        .await;
    let end = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'gone-1' AND status = 'completed' AND body IS NOT NULL";
    assert_eq!(env.scalar_i64(end, &[]).await, 1, "the final status and the reply are one row");
    fleet.stop().await;
    assert!(letters[0]["_error"].as_str().unwrap().contains("no queue took"), "{}", letters[0]);
    let heard: Vec<(&str, &str)> = letters
        .iter()
        .map(|l| (l["_body"]["type"].as_str().unwrap(), l["_body"]["status"].as_str().unwrap()))
        .collect();
    let expected = [("status", "accepted"), ("status", "running"), ("status", "completed"), ("reply", "completed")];
    assert_eq!(heard, expected, "each message dead-lettered once, in order");
    let failed = env.handoff_events("gone-1").await;
    assert_eq!(failed.iter().filter(|e| **e == HandoffEvent::DeliveryFailed).count(), 4, "{failed:?}");
}

/// With no process publishing its own rows (a grace of zero), every bridge
/// message goes through the relay: a row's messages (V46: `accepted` and
/// `running` from intake, `completed` and the reply from the end) one after
/// another, in order, and the row marked sent once its last is confirmed.
#[tokio::test]
async fn a_row_s_messages_go_through_the_relay_in_order_and_the_row_is_settled_after_its_last() {
    let mut env = TestEnv::new().await;
    env.settings.outbox_grace = Duration::ZERO;
    env.apply_profiles(&solo("Done.")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("relayed-1", "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    until_the_outbox_is_empty(&env).await;
    fleet.stop().await;
    assert_eq!(heard(&messages), ["accepted", "running", "completed", "reply"], "{messages:?}");
    // Two rows (three if intake took the request before its process's
    // invocation role was up), each marked sent.
    let pending = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'relayed-1' AND pending";
    assert_eq!(env.scalar_i64(pending, &[]).await, 0, "every row marked sent");
    let end = "SELECT count(*) FROM bridge_messages
                WHERE handoff_id = 'relayed-1' AND status = 'completed' AND body IS NOT NULL";
    assert_eq!(env.scalar_i64(end, &[]).await, 1, "the final status and the reply are one row");
}

#[tokio::test]
async fn a_stopped_collector_gets_one_message_per_finished_run_not_one_per_sweep() {
    let mut env = TestEnv::new().await;
    env.settings.relay_poll = Duration::from_millis(100);
    env.settings.unclaimed_grace = Duration::from_millis(500);
    env.apply_profiles(&solo("Done.")).await;
    env.count_sweeps().await;
    let fleet = env.start(&[Role::Intake, Role::Invocation, Role::Relay]);
    for i in 0..10 {
        env.send_request(&sample_request_json(&format!("idle-{i}"), "docs_agent", "en")).await;
    }
    eventually(WAIT, "10 runs finished", || async {
        (env.scalar_i64("SELECT count(*) FROM runs WHERE status = 'completed'", &[]).await == 10).then_some(())
    })
    .await;
    // Each run was answered by the transaction that ended it; these stand
    // for runs whose answer was left to a "run finished" message that was
    // lost (an earlier version's, or an operator's `runs answer`).
    let finished = env.queue(Queue::RunsFinished);
    assert_eq!(ready(&env, &finished).await, 0, "an ended run is answered with no message to the collector");
    // (Ended a minute ago, so one sweep finds all ten.)
    let lost = "BEGIN; UPDATE handoff_requests SET reply_sent_at = NULL;
                UPDATE runs SET finished_at = finished_at - interval '1 minute'; COMMIT;";
    env.db().await.batch_execute(lost).await.unwrap();
    // 60 sweeps, 12 graces: nobody reads the queue, and it holds what it needs.
    env.wait_for_sweeps(60, WAIT).await;
    let queued = ready(&env, &finished).await;
    assert!((10..=12).contains(&queued), "{queued} messages for 10 finished runs");
    // A collector that takes the messages but never replies (they are lost
    // each time): the sweep tells it again, with backoff.
    let taken = take_and_lose(&env, &finished, Duration::from_secs(6)).await;
    fleet.stop().await;
    // 10 queued, then re-sends after about 0, 1 and 3 s (backoff from the grace).
    assert!((20..=60).contains(&taken), "{taken} messages in 60 sweeps for 10 unreplied runs");
}

#[tokio::test]
async fn queued_invocations_without_workers_are_not_multiplied() {
    let mut env = TestEnv::new().await;
    env.settings.relay_poll = Duration::from_millis(100);
    env.settings.lease = Duration::from_millis(500);
    env.settings.unclaimed_grace = Duration::from_secs(1);
    const N: i64 = 500;
    let c = env.db().await;
    c.batch_execute(&format!(
        "CREATE TEMP TABLE ids AS SELECT gen_random_uuid() AS run, gen_random_uuid() AS inv FROM generate_series(1, {N});
         INSERT INTO runs (id, status, root_profile_id) SELECT run, 'running', 'solo' FROM ids;
         INSERT INTO invocations (id, run_id, profile_id, kind, status, exit_policy, brief)
              SELECT inv, run, 'solo', 'root', 'created', 'run_finish_allowed', 'Do it.' FROM ids;
         INSERT INTO outbox (queue, body)
              SELECT '{}', jsonb_build_object('invocationId', inv, 'runId', run) FROM ids;",
        Queue::InvocationsHandoff
    ))
    .await
    .unwrap();
    let queue = env.queue(Queue::InvocationsHandoff);
    env.count_sweeps().await;
    let fleet = env.start(&[Role::Relay]);
    eventually(WAIT, "every invocation published", || async {
        (i64::from(ready(&env, &queue).await) >= N).then_some(())
    })
    .await;
    // 80 sweeps, 16 leases, 8 graces, no worker: the queue holds one message each.
    env.wait_for_sweeps(80, WAIT).await;
    let queued = i64::from(ready(&env, &queue).await);
    assert!(queued <= N + N / 50, "{queued} messages for {N} queued invocations");
    // Workers that take the messages and lose them: re-sent, with backoff.
    let taken = take_and_lose(&env, &queue, Duration::from_secs(6)).await;
    fleet.stop().await;
    // N queued, then re-sends after about 0, 2 and 6 s (backoff from the grace).
    assert!((2 * N..=5 * N).contains(&taken), "{taken} messages in 12 leases for {N} lost invocations");
}

/// Bridge messages still queued as outbox rows when V38 runs (a fleet
/// stopped with messages unsent) move to their copies in `bridge_messages`,
/// in order, and the relay sends them from there: two messages of one
/// handoff, the second with the same id as a copy already sent, and one
/// whose copy was pruned.
#[tokio::test]
async fn bridge_messages_queued_in_the_outbox_before_v38_are_sent_from_bridge_messages_in_order() {
    let env = TestEnv::migrated_to(37).await;
    let c = env.db().await;
    let queue = &env.reply_queue;
    let copies = "INSERT INTO bridge_messages (handoff_id, message_id, queue, body) VALUES
                      ('old-1', 'status:old-1:1', $1, '{\"seq\": 1, \"n\": \"sent before\"}'),
                      ('old-1', 'status:old-1:1', $1, '{\"seq\": 1, \"n\": \"queued first\"}'),
                      ('old-1', 'status:old-1:2', $1, '{\"seq\": 2, \"n\": \"queued second\"}')";
    c.execute(copies, &[queue]).await.unwrap();
    let queued = "INSERT INTO outbox (queue, external, message_id, correlation_id, body, mandatory) VALUES
                      ($1, true, 'status:old-1:1', 'old-1', '{\"seq\": 1, \"n\": \"queued first\"}', true),
                      ($1, true, 'status:old-1:2', 'old-1', '{\"seq\": 2, \"n\": \"queued second\"}', true),
                      ($1, true, 'status:old-2:1', 'old-2', '{\"seq\": 1, \"n\": \"no copy\"}', true)";
    c.execute(queued, &[queue]).await.unwrap();
    baton_store::migrate(&env.pool).await.unwrap();
    assert_eq!(env.scalar_i64("SELECT count(*) FROM outbox", &[]).await, 0, "every bridge row moved");
    let pending = "SELECT count(*) FROM bridge_messages WHERE pending";
    assert_eq!(env.scalar_i64(pending, &[]).await, 3, "the two queued copies and a new row for the one without");
    let fleet = env.start(&[Role::Relay]);
    let mut replies = env.consume(queue).await;
    let mut seen = vec![];
    for _ in 0..3 {
        seen.push(next_json(&mut replies, WAIT).await["n"].as_str().unwrap().to_string());
    }
    until_the_outbox_is_empty(&env).await;
    fleet.stop().await;
    let old_1: Vec<&str> = seen.iter().map(String::as_str).filter(|n| *n != "no copy").collect();
    assert_eq!(old_1, ["queued first", "queued second"], "one handoff's messages in the order they were queued");
    assert!(seen.iter().any(|n| n == "no copy"), "{seen:?}");
    let kept = "SELECT count(*) FROM bridge_messages WHERE NOT pending";
    assert_eq!(env.scalar_i64(kept, &[]).await, 4, "each message kept, marked sent");
}

/// A bridge message this version cannot read (a status a newer version
/// wrote) waits with the reason, and every other message still goes: one
/// unreadable row holds up only its own handoff.
#[tokio::test]
async fn a_status_this_version_cannot_read_waits_with_its_reason_and_holds_up_nothing_else() {
    let env = TestEnv::new().await;
    let c = env.db().await;
    let queue = &env.reply_queue;
    let rows = "INSERT INTO bridge_messages (handoff_id, status, seq, queue, external, pending) VALUES ('odd-1', 'pondering', 1, $1, true, true);
                INSERT INTO bridge_messages (handoff_id, message_id, queue, body, external, pending)
                VALUES ('fine-1', 'reply:fine-1', $1, '{\"n\": \"fine\"}', true, true)";
    for statement in rows.split(';') {
        c.execute(statement, &[queue]).await.unwrap();
    }
    let fleet = env.start(&[Role::Relay]);
    let mut replies = env.consume(queue).await;
    assert_eq!(next_json(&mut replies, WAIT).await["n"], "fine", "the readable message goes");
    let waiting = "SELECT count(*) FROM bridge_messages
                    WHERE handoff_id = 'odd-1' AND pending AND attempts = 1 AND last_error LIKE '%cannot read%pondering%'";
    eventually(WAIT, "the unreadable status waits with its reason", || async {
        (env.scalar_i64(waiting, &[]).await == 1).then_some(())
    })
    .await;
    fleet.stop().await;
    let shown = baton_store::outbox::sent::for_handoff(&env.db().await, "odd-1").await.unwrap();
    assert!(shown[0].body["unreadable"].as_str().is_some_and(|why| why.contains("pondering")), "{:?}", shown[0]);
}

/// What a writer that holds its request's row tells the publisher: the
/// earlier messages of the handoff still pending (so the publisher need not
/// ask the database); a writer that does not hold it tells nothing.
#[tokio::test]
async fn a_writer_holding_its_request_says_which_earlier_messages_are_pending() {
    use baton_domain::protocol::request::HandoffStatus;
    use baton_store::outbox::after_commit::{scope, Publishing};
    use baton_store::requests::bridge::{self, Update};

    let env = TestEnv::new().await;
    env.apply_profiles(&solo("Done.")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("held-1", "docs_agent", "en")).await;
    until_reply(&mut replies, WAIT).await;
    until_the_outbox_is_empty(&env).await;
    fleet.stop().await;

    // Nobody publishes now: what each update wrote stays pending.
    let (publishing, mut written) = Publishing::new(Duration::from_secs(30));
    let request = baton_store::requests::get(&env.db().await, "held-1").await.unwrap().unwrap();
    let write = |held: bool| {
        let (request, publishing) = (request.clone(), publishing.clone());
        let env = &env;
        async move {
            scope(publishing, async {
                let mut client = env.db().await;
                let tx = baton_store::begin(&mut client).await.unwrap();
                let status = Some((HandoffStatus::Running, None));
                bridge::update(&tx, &request, Update { status, held, ..Update::default() }).await.unwrap();
                baton_store::commit(tx).await.unwrap();
            })
            .await;
        }
    };
    let mut first_of_next_row = || {
        let rows = written.try_recv().expect("the committed row reached the publisher");
        (rows[0].id, rows[0].waits_for.clone())
    };
    write(true).await;
    let (a, waits) = first_of_next_row();
    assert_eq!(waits, Some(vec![]), "every earlier message was sent: this one may go at once");
    write(false).await;
    let (b, waits) = first_of_next_row();
    assert_eq!(waits, None, "a writer that does not hold the request says nothing");
    write(true).await;
    let (_, waits) = first_of_next_row();
    assert_eq!(waits, Some(vec![a, b]), "the two earlier messages, still pending");
}
