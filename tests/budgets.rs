//! Run budgets: an agent that never finishes (an OpenAI-compatible server
//! that always answers with tool calls) is stopped by each limit of its
//! run's budget, the bridge is told which one in words, and no model call
//! happens after the stop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use baton_domain::run::journal::JournalEvent;
use baton_store::runs::budgets;
use baton_tests::{logs, sample_request_json, until_reply, TestEnv};
use serde_json::{json, Value};
use uuid::Uuid;

/// Tokens the looping server reports per completion.
const TOKENS_PER_TURN: u64 = 50;

/// A model that never finishes: every answer calls `workspace_list`
/// (`calls` times), after `delay`, and reports token usage.
struct Looper {
    base_url: String,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct LoopState {
    requests: Arc<AtomicUsize>,
    calls: usize,
    delay: Duration,
}

impl Looper {
    async fn start(calls: usize, delay: Duration) -> Self {
        let requests = Arc::new(AtomicUsize::new(0));
        let state = LoopState { requests: requests.clone(), calls, delay };
        let app = Router::new().route("/v1/chat/completions", post(answer)).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { base_url, requests, task }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Looper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(State(state): State<LoopState>, Json(_body): Json<Value>) -> Json<Value> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(state.delay).await;
    let calls: Vec<Value> = (0..state.calls)
        .map(|_| {
            json!({"id": format!("call_{}", Uuid::new_v4().simple()), "type": "function",
                        "function": {"name": "workspace_list", "arguments": "{}"}})
        })
        .collect();
    Json(json!({
        "id": "chatcmpl-loop", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": TOKENS_PER_TURN - 10, "completion_tokens": 10, "total_tokens": TOKENS_PER_TURN}
    }))
}

fn looper_profile(id: &str, tools: &str, server: &Looper) -> String {
    format!(
        "[[profiles]]\nid = \"{id}\"\nname = \"{id}\"\ndescription = \"Lists files, for ever.\"\ntools = [{tools}]\n\
         [profiles.model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"test-model\"\n\
         [profiles.delegation]\nallow_as_subagent = true\n",
        server.base_url
    )
}

/// A profiles file routing `docs_agent` to the looping agent, with `budget`
/// (TOML lines) as the route's run budget.
fn looping_file(server: &Looper, budget: &str) -> String {
    let looper = looper_profile("looper", "\"workspace_list\", \"workspace_commit\", \"workspace_finish\"", server);
    format!("[routes]\ndocs_agent = \"looper\"\n\n[budgets.routes.docs_agent]\n{budget}\n\n{looper}")
}

/// What a stopped run left behind.
struct Stopped {
    reply: Value,
    run: Uuid,
    spend: budgets::RunSpend,
    exhausted: Value,
}

/// Sends one request, waits for its reply, and checks what every budget
/// stop must show: a `failed` reply with `budget_exhausted`, a failed run,
/// a `run_budget_exhausted` journal event naming `limit`, and no model call
/// after the stop.
async fn run_until_stopped(env: &TestEnv, server: &Looper, id: &str, language: &str, limit: &str) -> Stopped {
    logs::capture();
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json(id, "docs_agent", language)).await;
    let messages = until_reply(&mut replies, Duration::from_secs(30)).await;
    let reply = messages.last().unwrap().clone();
    assert_eq!(reply["status"], "failed", "{reply}");
    assert_eq!(reply["error"]["code"], "budget_exhausted", "{reply}");

    let run = env.run_of(id).await;
    let c = env.db().await;
    assert_eq!(baton_store::runs::get(&c, run).await.unwrap().unwrap().status.as_str(), "failed");
    let timeline = baton_store::journal::timeline(&c, run).await.unwrap();
    let exhausted: Vec<Value> =
        timeline.iter().filter(|e| e.is(JournalEvent::RunBudgetExhausted)).map(|e| e.payload.clone()).collect();
    assert_eq!(exhausted.len(), 1, "one budget event: {exhausted:?}");
    assert_eq!(exhausted[0]["limit"], limit);

    // Nothing may call the model once the run stopped: count once every
    // loop of the run has ended (a call counts when it arrives).
    let at_stop = server.requests();
    env.wait_for_loops_to_end(run, Duration::from_secs(30)).await;
    assert_eq!(server.requests(), at_stop, "a model call happened after the run stopped");
    let live =
        env.scalar_i64("SELECT count(*) FROM invocations WHERE status IN ('created', 'running', 'parked')", &[]).await;
    assert_eq!(live, 0, "every invocation of the run has ended");
    fleet.stop().await;

    let spend = budgets::get(&c, run).await.unwrap().unwrap();
    assert_eq!(spend.spent.model_calls, stored(env, run, "model_turn").await, "every stored model turn was counted");
    assert_eq!(spend.spent.tool_calls, stored(env, run, "tool_result").await, "every stored tool result was counted");
    Stopped { reply, run, spend, exhausted: exhausted[0].clone() }
}

/// Transcript steps of one kind across a run's invocations.
async fn stored(env: &TestEnv, run: Uuid, kind: &str) -> u64 {
    let sql =
        "SELECT count(*) FROM steps s JOIN invocations i ON i.id = s.invocation_id WHERE i.run_id = $1 AND s.kind = $2";
    env.scalar_i64(sql, &[&run, &kind]).await as u64
}

#[tokio::test]
async fn a_run_that_reaches_its_token_limit_fails_with_budget_exhausted() {
    let server = Looper::start(1, Duration::ZERO).await;
    let env = TestEnv::new().await;
    env.apply_profiles(&looping_file(&server, "max_tokens = 120")).await;
    let stopped = run_until_stopped(&env, &server, "budget-tokens", "en", "tokens").await;

    // 50, 100, 150: the third call crossed 120, and the fourth was never made.
    assert_eq!(server.requests(), 3);
    assert_eq!(stopped.spend.spent.tokens, 3 * TOKENS_PER_TURN);
    assert_eq!(stopped.reply["error"]["message"], "the agents reached this request's limit of 120 model tokens");
    assert_eq!(
        stopped.reply["text"],
        "Sorry, I couldn't finish this request: the agents reached this request's limit of 120 model tokens"
    );
    assert_eq!(stopped.exhausted["spent"]["tokens"], 150);
    assert_eq!(stopped.exhausted["budget"]["tokens"], 120);
}

#[tokio::test]
async fn a_run_that_reaches_its_model_call_limit_fails_even_after_the_profiles_change() {
    let server = Looper::start(1, Duration::from_millis(300)).await;
    let env = TestEnv::new().await;
    env.apply_profiles(&looping_file(&server, "max_model_calls = 4")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("budget-calls", "docs_agent", "en")).await;
    baton_tests::eventually(Duration::from_secs(20), "the first model call", || async {
        (server.requests() > 0).then_some(())
    })
    .await;
    // The budget was copied onto the run at intake: lifting it now changes nothing for this run.
    env.apply_profiles(&looping_file(&server, "max_model_calls = 500")).await;
    let reply = until_reply(&mut replies, Duration::from_secs(30)).await.last().unwrap().clone();
    fleet.stop().await;

    assert_eq!(reply["status"], "failed", "{reply}");
    assert_eq!(reply["error"]["code"], "budget_exhausted");
    assert_eq!(reply["error"]["message"], "the agents reached this request's limit of 4 model calls");
    assert_eq!(server.requests(), 4, "the fifth model call was never made");
    let run = env.run_of("budget-calls").await;
    let spend = budgets::get(&env.db().await, run).await.unwrap().unwrap();
    assert_eq!((spend.spent.model_calls, spend.budget.max_model_calls), (4, 4));
    let journal = env.journal(run).await;
    assert!(journal.contains(&JournalEvent::RunBudgetExhausted), "{journal:?}");
}

#[tokio::test]
async fn a_run_that_reaches_its_tool_call_limit_fails_and_is_told_in_chinese() {
    // Two calls per turn: 2, 4, 6 tool calls; the limit of 5 is crossed by the third turn.
    let server = Looper::start(2, Duration::ZERO).await;
    let env = TestEnv::new().await;
    env.apply_profiles(&looping_file(&server, "max_tool_calls = 5")).await;
    let stopped = run_until_stopped(&env, &server, "budget-tools", "zh-CN", "tool_calls").await;

    assert_eq!(server.requests(), 3);
    assert_eq!((stopped.spend.spent.tool_calls, stopped.spend.spent.model_calls), (6, 3));
    assert_eq!(stopped.reply["language"], "zh-CN");
    assert_eq!(stopped.reply["error"]["message"], "智能体已达到本次请求的工具调用次数上限（5 次）");
    assert_eq!(stopped.reply["text"], "抱歉，这次请求没有完成：智能体已达到本次请求的工具调用次数上限（5 次）");
    assert_eq!(stored(&env, stopped.run, "tool_result").await, 6);
}

#[tokio::test]
async fn a_run_that_reaches_its_wall_clock_limit_fails_in_time_even_mid_call() {
    // Each answer takes 1.5 s: the second call is still in flight when the
    // 2 s run limit passes, and is cut short there rather than at 3 s.
    let server = Looper::start(1, Duration::from_millis(1500)).await;
    let env = TestEnv::new().await;
    env.apply_profiles(&looping_file(&server, "max_wall_clock_secs = 2")).await;
    let stopped = run_until_stopped(&env, &server, "budget-clock", "en", "wall_clock").await;

    assert_eq!(stopped.reply["error"]["message"], "the agents reached this request's time limit of 2 seconds");
    let ran = stopped.spend.spent.elapsed;
    assert!(
        ran >= Duration::from_secs(2) && ran < Duration::from_millis(2900),
        "the run ended {ran:?} after it started"
    );
    let calls = server.requests() as u64;
    assert!((1..=2).contains(&calls), "{calls} calls");
    assert_eq!(
        stopped.spend.spent.model_calls,
        calls - 1,
        "the call in flight at the limit was cut short and not stored"
    );
    assert!(stopped.exhausted["spent"]["wallClockMs"].as_u64().unwrap() >= 2000, "{}", stopped.exhausted);
}

#[tokio::test]
async fn a_delegated_child_spends_its_runs_budget_and_the_whole_run_stops() {
    let server = Looper::start(1, Duration::from_millis(50)).await;
    let root = baton_tests::profile(
        "lead",
        &["agent_delegate", "agent_await", "workspace_commit", "workspace_finish"],
        "can_delegate = true",
        &[
            r#"{ tool = "agent_delegate", args = { agentId = "child", task = { objective = "List the files." } } }"#,
            r#"{ tool = "agent_await", args = { taskIds = ["child"], mode = "allCompleted", timeoutMs = 60000 } }"#,
        ],
    );
    let child = looper_profile("child", "\"workspace_list\", \"task_return\"", &server);
    let file = format!("[routes]\ndocs_agent = \"lead\"\n\n[budgets.default]\nmax_model_calls = 6\n\n{root}\n{child}");
    let env = TestEnv::new().await;
    env.apply_profiles(&file).await;
    let stopped = run_until_stopped(&env, &server, "budget-child", "en", "model_calls").await;

    assert_eq!(stopped.reply["error"]["message"], "the agents reached this request's limit of 6 model calls");
    // The lead's two scripted turns and the child's calls share one budget.
    assert!(stopped.spend.spent.model_calls >= 6, "{:?}", stopped.spend);
    assert_eq!(server.requests() as u64, stopped.spend.spent.model_calls - 2, "the child made every other call");
    let lead = &env.invocations_of(stopped.run, "lead").await[0];
    let child = &env.invocations_of(stopped.run, "child").await[0];
    assert_eq!(lead.status.as_str(), "cancelled", "the parked owner stopped with its run");
    assert_eq!(child.status.as_str(), "failed");
}

/// Issue 23: a run's spend is not summed over all of its invocations at
/// each claim and step; each foreground owner carries what the run spent
/// before it. Across a chain with a delegated child, the last owner's
/// carried figures, its own and its children's add up to the sum over every
/// invocation of the run.
#[tokio::test]
async fn each_owner_carries_what_its_run_spent_before_it_and_the_sums_agree() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let reply = env.run_request("carried-1").await;
    fleet.stop().await;
    assert_eq!(reply.last().unwrap()["status"], "completed");
    let run = env.run_of("carried-1").await;
    let c = env.db().await;
    let carried = c
        .query_one(
            "SELECT o.run_spent_model_calls + o.model_calls + coalesce(sum(ch.model_calls), 0),
                    o.run_spent_tool_calls + o.tool_calls + coalesce(sum(ch.tool_calls), 0),
                    o.run_spent_tool_calls
               FROM invocations o LEFT JOIN invocations ch ON ch.parent_invocation_id = o.id AND ch.kind = 'child'
              WHERE o.run_id = $1 AND o.profile_id = 'finalizer'
              GROUP BY o.id",
            &[&run],
        )
        .await
        .unwrap();
    let summed = budgets::get(&c, run).await.unwrap().unwrap().spent;
    let (model_calls, tool_calls, before): (i64, i64, i64) = (carried.get(0), carried.get(1), carried.get(2));
    assert_eq!((model_calls as u64, tool_calls as u64), (summed.model_calls, summed.tool_calls));
    // The editor delegated to the checker: the finalizer's carried figures
    // hold the writer's, the editor's and the checker's tool calls.
    let checker = env.invocations_of(run, "checker").await;
    assert_eq!(checker.len(), 1, "the editor delegated once");
    assert!(before >= 8, "the finalizer carries its predecessors' and their child's tool calls: {before}");
}

/// Issue 23: a handoff counts the tasks its run gave the target's agent
/// before (the new task's readable workspace key) without reading the
/// run's other invocations: in a run of 2,000 invocations, 3 of them the
/// writer's, the count reads 3 rows, however long the run.
#[tokio::test]
async fn a_handoff_counts_its_target_s_earlier_tasks_without_reading_the_whole_run() {
    let env = TestEnv::new().await;
    let c = env.db().await;
    let run = Uuid::now_v7();
    c.execute(
        "INSERT INTO invocations (id, run_id, profile_id, kind, status, exit_policy, handoff, claim_epoch)
         SELECT gen_random_uuid(), $1, CASE WHEN i % 700 = 1 THEN 'writer' ELSE 'stage-' || i END,
                'handoff', 'transferred', 'run_finish_allowed', jsonb_build_object('objective', 'Go on.'), 1
           FROM generate_series(1, 2000) i",
        &[&run],
    )
    .await
    .unwrap();
    c.batch_execute("ANALYZE invocations").await.unwrap();
    // The count `invocations::hand_over` makes (HANDED_OVER), as it makes it.
    let plan: Value = c
        .query_one(
            "EXPLAIN (ANALYZE, FORMAT JSON)
             SELECT count(*) FROM invocations WHERE run_id = $1 AND profile_id = $2 AND kind <> $3",
            &[&run, &"writer", &"root"],
        )
        .await
        .unwrap()
        .get(0);
    let scan = &plan[0]["Plan"]["Plans"][0];
    let read = scan["Actual Rows"].as_i64().unwrap()
        + scan["Rows Removed by Filter"].as_i64().unwrap_or(0)
        + scan["Rows Removed by Index Recheck"].as_i64().unwrap_or(0);
    assert_eq!(scan["Actual Rows"], 3, "{plan}");
    assert!(read <= 3, "the count read {read} of the run's 2,000 invocations: {plan}");
}
