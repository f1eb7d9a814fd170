//! Real providers behind the fleet: an OpenAI-compatible model server
//! started by the test, and external agents run as shell scripts.

use std::time::Duration;

use baton_domain::run::journal::JournalEvent;
use baton_tests::http::{tokens_per_completion, ModelServer, Reply};
use baton_tests::{profile, TestEnv};
use serde_json::json;

fn openai_profile(id: &str, tools: &[&str], delegation: &str, server: &ModelServer, extra: &str) -> String {
    let tools: Vec<String> = tools.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "[[profiles]]\nid = \"{id}\"\nname = \"{id}\"\ndescription = \"The {id} agent.\"\ntools = [{}]\n[profiles.model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"test-model\"\n{extra}\n[profiles.delegation]\n{delegation}\n",
        tools.join(", "),
        server.base_url
    )
}

fn write(content: &'static str) -> Reply {
    Reply::Tool("workspace_write", json!({"path": "output/main.md", "content": content}))
}

fn commit() -> Reply {
    Reply::Tool("workspace_commit", json!({}))
}

fn finish() -> Reply {
    Reply::Tool("workspace_finish", json!({}))
}

fn solo(server: &ModelServer, extra: &str) -> String {
    let p = openai_profile("solo", &["workspace_write", "workspace_commit", "workspace_finish"], "", server, extra);
    format!("[routes]\ndocs_agent = \"solo\"\n\n{p}")
}

async fn journal_payloads(env: &TestEnv, run: uuid::Uuid, kind: JournalEvent) -> Vec<serde_json::Value> {
    let timeline = baton_store::journal::timeline(&env.db().await, run).await.unwrap();
    timeline.into_iter().filter(|e| e.is(kind)).map(|e| e.payload).collect()
}

#[tokio::test]
async fn a_chain_driven_by_an_openai_compatible_model_completes_and_counts_tokens() {
    let server = ModelServer::start(vec![
        write("Draft from the model."),
        commit(),
        Reply::Tool("agent_handoff", json!({"agentId": "editor", "handoff": {"objective": "Polish output/main.md."}})),
        Reply::Tool("workspace_read", json!({"path": "output/main.md"})),
        Reply::Tool(
            "workspace_patch",
            json!({"path": "output/main.md", "old_string": "Draft", "new_string": "Final text"}),
        ),
        commit(),
        finish(),
    ])
    .await;
    std::env::set_var("BATON_TEST_CHAIN_KEY", "sk-test-chain");
    let writer = openai_profile(
        "writer",
        &["workspace_write", "workspace_commit", "agent_handoff"],
        "can_handoff = true",
        &server,
        "api_key_env = \"BATON_TEST_CHAIN_KEY\"",
    );
    let editor = openai_profile(
        "editor",
        &["workspace_read", "workspace_patch", "workspace_commit", "workspace_finish"],
        "",
        &server,
        "temperature = 0.2\nmax_tokens = 500",
    );
    let env = TestEnv::new().await;
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}\n{editor}")).await;
    let messages = env.run_request("openai-chain").await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed");
    assert_eq!(reply["text"], "Final text from the model.");

    let bodies = server.bodies();
    assert_eq!(bodies.len(), 7);
    assert!(bodies.iter().all(|b| b["model"] == "test-model" && b["tool_choice"] == "auto"));
    let first = &bodies[0];
    assert_eq!(first["messages"][0]["role"], "system");
    assert!(first["messages"][1]["content"].as_str().unwrap().starts_with("# Request"));
    let tools: Vec<&str> =
        first["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(tools, vec!["workspace_write", "workspace_commit", "agent_handoff"]);
    assert_eq!(bodies[1]["messages"][3]["role"], "tool", "the model reads its tool result back");
    assert_eq!(bodies[4]["temperature"], json!(0.2f32));
    assert_eq!(bodies[4]["max_tokens"], 500);
    assert!(bodies[3]["messages"][1]["content"].as_str().unwrap().starts_with("# Handoff Brief"));
    let auth = server.header("authorization");
    assert_eq!(auth[0], "Bearer sk-test-chain");
    assert_eq!(auth[3], "", "the editor's binding names no key");

    let run = env.run_of("openai-chain").await;
    let writer_id = env.invocations_of(run, "writer").await[0].id;
    let editor_id = env.invocations_of(run, "editor").await[0].id;
    let sessions = server.header("x-session-id");
    assert_eq!(sessions[0], format!("{run}:{writer_id}"));
    assert_eq!(sessions[6], format!("{run}:{editor_id}"));
    for body in &bodies {
        let text = body["messages"].to_string();
        assert!(!text.contains(&run.to_string()) && !text.contains(&writer_id.to_string()), "the model never sees ids");
    }
    let per_call = tokens_per_completion();
    assert_eq!(env.scalar_i64("SELECT tokens_used FROM invocations WHERE id = $1", &[&writer_id]).await, 3 * per_call);
    assert_eq!(baton_store::runs::tokens_used(&env.db().await, run).await.unwrap(), 7 * per_call);
}

#[tokio::test]
async fn model_calls_are_retried_on_429_and_5xx_honouring_retry_after() {
    let server = ModelServer::start(vec![
        Reply::Status(429, Some(1)),
        Reply::Status(503, None),
        write("Made it."),
        commit(),
        finish(),
    ])
    .await;
    let env = TestEnv::new().await;
    env.apply_profiles(&solo(&server, "")).await;
    let started = std::time::Instant::now();
    let messages = env.run_request("retries").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After: 1 was honoured");
    assert_eq!(server.bodies().len(), 5);
    let stored = journal_payloads(&env, env.run_of("retries").await, JournalEvent::ModelResponseStored).await;
    assert_eq!(stored[0]["attempts"], 3);
    assert_eq!(stored[1]["attempts"], 1);
}

#[tokio::test]
async fn a_model_that_keeps_failing_fails_the_run_with_a_clear_error() {
    let server = ModelServer::start(vec![Reply::Status(500, None), Reply::Status(500, None)]).await;
    let env = TestEnv::new().await;
    env.apply_profiles(&solo(&server, "max_attempts = 2")).await;
    let messages = env.run_request("gives-up").await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "failed");
    // The model endpoint's failure is its own code, not a host error, and
    // the bridge reads no endpoint detail.
    assert_eq!(reply["error"]["code"], "model_unavailable", "{reply}");
    assert!(reply["text"].as_str().unwrap().contains("model did not answer"), "{reply}");
    assert!(!reply.to_string().contains("500"), "{reply}");
    let run = env.run_of("gives-up").await;
    let details = journal_payloads(&env, run, JournalEvent::HostError).await;
    let detail = details[0]["detail"].as_str().unwrap();
    assert!(detail.contains("after 2 attempts") && detail.contains("500"), "{detail}");
    // The operator's reason is the endpoint's own words, kept with the run.
    let listed = baton_store::overview::runs(&env.db().await, &Default::default()).await.unwrap();
    let reason = listed[0].error.as_ref().map(|e| e.reason().to_string()).unwrap_or_default();
    assert!(reason.contains("after 2 attempts") && reason.contains("500"), "{reason}");
}

#[tokio::test]
async fn a_model_call_that_hangs_times_out_and_is_tried_again() {
    let server =
        ModelServer::start(vec![Reply::Hang(Duration::from_secs(4)), write("Second try."), commit(), finish()]).await;
    let env = TestEnv::new().await;
    env.apply_profiles(&solo(&server, "timeout_secs = 1")).await;
    let messages = env.run_request("timeout").await;
    assert_eq!(messages.last().unwrap()["text"], "Second try.");
    let stored = journal_payloads(&env, env.run_of("timeout").await, JournalEvent::ModelResponseStored).await;
    assert_eq!(stored[0]["attempts"], 2);
}

fn command_profile(id: &str, script: &str, extra: &str, delegation: &str) -> String {
    format!(
        "[[profiles]]\nid = \"{id}\"\nname = \"{id}\"\ndescription = \"An external coding agent.\"\n[profiles.model]\nprovider = \"command\"\ncommand = [\"sh\", \"-c\", '''{script}''']\n{extra}\n[profiles.delegation]\n{delegation}\n"
    )
}

#[tokio::test]
async fn an_external_agent_reads_the_brief_on_stdin_and_its_stdout_is_the_reply() {
    // The box lets the agent write nowhere the test could read, so the
    // agent itself checks what it was given and says so on stdout.
    let script = "read -r first; [ \"$first\" = '# Request' ] && grep -q '^## Constraints' \
                  && echo 'Patched the flaky test and pushed a branch.' || echo 'not the brief'";
    let env = TestEnv::new().await;
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"coder\"\n\n{}", command_profile("coder", script, "", "")))
        .await;
    let messages = env.run_request("command-ok").await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed");
    assert_eq!(
        reply["text"], "Patched the flaky test and pushed a branch.",
        "the brief on stdin starts with `# Request` and has its constraints"
    );
}

#[tokio::test]
async fn an_external_agent_that_fails_or_hangs_fails_the_run_with_the_reason_in_the_journal() {
    for (id, script, extra, expect) in [
        ("command-fails", "cat > /dev/null; echo 'cannot find the repo' >&2; exit 2", "", "cannot find the repo"),
        ("command-hangs", "sleep 10", "timeout_secs = 1", "did not finish within"),
    ] {
        let env = TestEnv::new().await;
        env.apply_profiles(&format!(
            "[routes]\ndocs_agent = \"coder\"\n\n{}",
            command_profile("coder", script, extra, "")
        ))
        .await;
        let messages = env.run_request(id).await;
        assert_eq!(messages.last().unwrap()["status"], "failed", "{id}");
        let details = journal_payloads(&env, env.run_of(id).await, JournalEvent::HostError).await;
        assert!(details[0]["detail"].as_str().unwrap().contains(expect), "{id}: {details:?}");
    }
}

#[tokio::test]
async fn an_external_agent_can_be_delegated_to_and_returns_its_result() {
    let lead = profile(
        "lead",
        &["agent_delegate", "agent_await", "workspace_write", "workspace_commit", "workspace_finish"],
        "can_delegate = true",
        &[
            r#"{ tool = "agent_delegate", args = { agentId = "coder", task = { objective = "Run the tests." } } }"#,
            r#"{ tool = "agent_await" }"#,
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "The coder reported back." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    let coder = command_profile("coder", "cat > /dev/null; echo 'All 42 tests pass.'", "", "allow_as_subagent = true");
    let env = TestEnv::new().await;
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"lead\"\n\n{lead}\n{coder}")).await;
    let messages = env.run_request("command-child").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let run = env.run_of("command-child").await;
    let lead = &env.invocations_of(run, "lead").await[0];
    let awaited = &env.tool_results(lead.id).await[1];
    assert!(awaited["content"].as_str().unwrap().contains("Summary: All 42 tests pass."), "{awaited}");
}
