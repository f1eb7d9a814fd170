//! The handoff chain end to end: request in, three agents, one reply out.

use std::time::Duration;

use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{profile, sample_request_json, until_reply, TestEnv};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

/// Runs one request through the fleet and returns every bridge message.
pub async fn run_request(env: &TestEnv, id: &str) -> Vec<Value> {
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json(id, "docs_agent", "en")).await;
    until_reply(&mut replies, WAIT).await
}

/// Runs one request through a fleet on the example profiles, stops the
/// fleet, and returns the environment and the request's run.
async fn example_run(id: &str) -> (TestEnv, uuid::Uuid) {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    run_request(&env, id).await;
    fleet.stop().await;
    let run = env.run_of(id).await;
    (env, run)
}

#[tokio::test]
async fn a_three_stage_chain_runs_and_the_bridge_gets_one_humanized_reply() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let messages = run_request(&env, "chain-1").await;
    fleet.stop().await;

    let statuses: Vec<(&str, i64)> = messages[..messages.len() - 1]
        .iter()
        .map(|m| (m["status"].as_str().unwrap(), m["seq"].as_i64().unwrap()))
        .collect();
    assert_eq!(statuses, vec![("accepted", 1), ("running", 2), ("completed", 3)]);
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed");
    assert_eq!(reply["handoffId"], "chain-1");
    assert_eq!(reply["replyToChatId"], "wxid_demo_chat");
    let agents: Vec<&str> = reply["result"]["agents"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(agents, vec!["writer", "editor", "finalizer"]);
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("**Deadline: signed forms by Wednesday.**"), "editor's change is in the reply: {text}");
    assert!(text.contains("Ms. Li, Class 3B"), "finalizer's change is in the reply: {text}");
    assert_eq!(reply["parts"].as_array().unwrap().len(), 1);

    let run = env.run_of("chain-1").await;
    let ledger = baton_store::runs::workspace::ledger(&env.db().await, run).await.unwrap();
    let committers: Vec<&str> = ledger.iter().map(|(_, p, _)| p.as_str()).collect();
    assert_eq!(committers, vec!["writer", "editor", "finalizer"]);
    assert_eq!(
        env.handoff_events("chain-1").await,
        [
            HandoffEvent::Created,
            HandoffEvent::ContextPackaged,
            HandoffEvent::Sent,
            HandoffEvent::Accepted,
            HandoffEvent::StatusChanged,
            HandoffEvent::StatusChanged,
            HandoffEvent::ResultReceived,
            HandoffEvent::StatusChanged,
            HandoffEvent::ReplySent,
        ]
    );
}

/// A successful handoff's journal, in this order (docs/concepts.md#a-handoff-in-the-journal).
#[tokio::test]
async fn the_journal_follows_the_seed_handoff_sequence() {
    let (env, run) = example_run("journal-1").await;
    let journal = env.journal(run).await;
    let expected = [
        JournalEvent::RunCreated,
        JournalEvent::InvocationCreated,
        JournalEvent::InvocationStarted,
        JournalEvent::HandoffRequested,
        JournalEvent::InvocationCreated,
        JournalEvent::TaskRegistered,
        JournalEvent::HandoffAccepted,
        JournalEvent::InvocationTransferred,
        JournalEvent::LoopFinished,
        JournalEvent::TaskStarted,
        JournalEvent::InvocationStarted,
        JournalEvent::ContextAssembled,
        JournalEvent::SkillScopesResolved,
        JournalEvent::HandoffRequested,
        JournalEvent::InvocationTransferred,
        JournalEvent::LoopFinished,
        JournalEvent::TaskCompleted,
        JournalEvent::TaskStarted,
        JournalEvent::InvocationStarted,
        JournalEvent::ContextAssembled,
        JournalEvent::TaskCompleted,
        JournalEvent::InvocationCompleted,
        JournalEvent::RunCompleted,
    ];
    let mut at = 0;
    for want in expected {
        let found = journal[at..].iter().position(|k| *k == want);
        assert!(found.is_some(), "`{want}` missing after position {at} in {journal:?}");
        at += found.unwrap() + 1;
    }
    assert_eq!(journal.last(), Some(&JournalEvent::RunCompleted));
}

/// Issue 23: a handoff's events do not write again what the invocations'
/// rows hold (V35), and every reader of the `events` view still sees it:
/// the successor's ids on `agent_handoff_accepted` and
/// `agent_invocation_transferred`, each stage's task on its `agent_task_*`,
/// each invocation's agent on its start.
#[tokio::test]
async fn a_handoff_s_events_read_back_whole_though_the_row_keeps_no_copy_of_the_successor() {
    let (env, run) = example_run("payloads-1").await;
    let c = env.db().await;
    let invocations = baton_store::invocations::for_run(&c, run).await.unwrap();
    let (writer, editor) = (&invocations[0], &invocations[1]);
    assert_eq!((writer.profile_id.as_str(), editor.profile_id.as_str()), ("writer", "editor"));
    let task = editor.incoming_task_id.expect("a handoff stage has its task");
    let timeline = baton_store::journal::timeline(&c, run).await.unwrap();
    let payload = |kind: JournalEvent, of: uuid::Uuid| -> Value {
        let found = timeline.iter().find(|e| e.is(kind) && e.invocation_id == Some(of));
        found.unwrap_or_else(|| panic!("no `{kind}` of {of}")).payload.clone()
    };
    let (editor_id, task_id) = (editor.id.to_string(), task.to_string());
    let accepted = payload(JournalEvent::HandoffAccepted, writer.id);
    assert_eq!((accepted["invocationId"].as_str(), accepted["taskId"].as_str()), (Some(&*editor_id), Some(&*task_id)));
    let transferred = payload(JournalEvent::InvocationTransferred, writer.id);
    assert_eq!((transferred["to"].as_str(), transferred["agentId"].as_str()), (Some(&*editor_id), Some("editor")));
    assert_eq!(payload(JournalEvent::TaskRegistered, editor.id)["taskId"], task_id);
    assert_eq!(payload(JournalEvent::TaskRegistered, editor.id)["continuation"], "transfer_control");
    assert_eq!(payload(JournalEvent::TaskStarted, editor.id)["taskId"], task_id);
    assert_eq!(payload(JournalEvent::TaskCompleted, editor.id)["taskId"], task_id);
    let created = payload(JournalEvent::InvocationCreated, editor.id);
    assert_eq!((created["kind"].as_str(), created["profileId"].as_str()), (Some("handoff"), Some("editor")));
    assert_eq!(created["parentInvocationId"], writer.id.to_string());
    let started = payload(JournalEvent::InvocationStarted, editor.id);
    assert_eq!((started["kind"].as_str(), started["profileId"].as_str()), (Some("handoff"), Some("editor")));
    assert_eq!(payload(JournalEvent::SkillScopesResolved, editor.id)["profileId"], "editor");
    // The editor's delegated fact-check: a child's task (a row of its own) reads back the same way.
    let checker = invocations.iter().find(|i| i.profile_id == "checker").expect("the editor delegated");
    let child_task = checker.incoming_task_id.expect("a child has its task").to_string();
    let registered = payload(JournalEvent::TaskRegistered, checker.id);
    assert_eq!(
        (registered["taskId"].as_str(), registered["continuation"].as_str()),
        (Some(&*child_task), Some("return_to_parent"))
    );
    assert_eq!(payload(JournalEvent::TaskStarted, checker.id)["taskId"], child_task);
    let created = payload(JournalEvent::InvocationCreated, checker.id);
    assert_eq!((created["kind"].as_str(), created["parentInvocationId"].as_str()), (Some("child"), Some(&*editor_id)));
    // What the writer's handoff stored names the editor once (its events'
    // invocation, as a uuid), never as text in a payload.
    let stored: Vec<String> = c
        .query(
            "SELECT payloads::text FROM journal WHERE run_id = $1
             UNION ALL SELECT journal_payloads::text FROM bridge_messages WHERE journal_run = $1",
            &[&run],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(stored.iter().all(|p| !p.contains(&editor_id) && !p.contains(&task_id)), "{stored:#?}");
    // A run's first events read back what its row and its request's keep
    // (V48), and the journal keeps none of it.
    let first = |kind: JournalEvent| -> Value {
        timeline.iter().find(|e| e.is(kind)).unwrap_or_else(|| panic!("no `{kind}`")).payload.clone()
    };
    let created = first(JournalEvent::RunCreated);
    assert_eq!((created["handoffId"].as_str(), created["source"].as_str()), (Some("payloads-1"), Some("weixin")));
    let budget: Value = c.query_one("SELECT budget FROM runs WHERE id = $1", &[&run]).await.unwrap().get(0);
    assert!(budget["max_model_calls"].is_number(), "{budget}");
    assert_eq!(created["budget"], budget, "the budget copied onto the run");
    let resolved = first(JournalEvent::ProfileResolved);
    assert_eq!(
        (resolved["targetAgent"].as_str(), resolved["profileId"].as_str()),
        (Some("docs_agent"), Some("writer"))
    );
    assert!(stored.iter().all(|p| !p.contains("\"handoffId\"") && !p.contains("\"targetAgent\"")), "{stored:#?}");
    // They are kept in the row of intake's messages to the bridge (V51),
    // and read first, in the order they happened.
    let beside = "SELECT count(*) FROM bridge_messages WHERE journal_run = $1 AND journal_types[1] = 'run_created'";
    assert_eq!(env.scalar_i64(beside, &[&run]).await, 1);
    let apart = "SELECT count(*) FROM journal WHERE run_id = $1 AND 'run_created' = ANY(types)";
    assert_eq!(env.scalar_i64(apart, &[&run]).await, 0);
    let start = [
        JournalEvent::RunCreated,
        JournalEvent::ProfileResolved,
        JournalEvent::WorkspaceInitialized,
        JournalEvent::InvocationCreated,
    ];
    assert!(timeline.iter().zip(start).all(|(e, kind)| e.is(kind)), "{:?}", &timeline[..4]);
}

/// The successor reads a markdown brief and a prompt from its own view.
#[tokio::test]
async fn the_next_agent_receives_a_rendered_markdown_brief() {
    let (env, run) = example_run("brief-1").await;
    let c = env.db().await;
    let invocations = baton_store::invocations::for_run(&c, run).await.unwrap();
    let editor = invocations.iter().find(|i| i.profile_id == "editor").unwrap();
    let steps = baton_store::invocations::steps::load(&c, editor.id).await.unwrap();
    let prompt = &steps[0].payload["messages"];
    let system = prompt[0]["content"].as_str().unwrap();
    let brief = prompt[1]["content"].as_str().unwrap();
    for section in [
        "# Handoff Brief",
        "## Title\nEdit the draft",
        "## Reason\n",
        "## Objective\nTighten output/main.md",
        "## Context Summary\n",
        "## Workspace References\n- output/main.md",
        "## Must Preserve\n- The date and the Wednesday deadline.",
        "## Completion Criteria\n",
        "## Working Notes\n",
    ] {
        assert!(brief.contains(section), "brief lacks {section:?}:\n{brief}");
    }
    assert!(system.contains("hand the next stage to another agent with agent_handoff"), "{system}");
    let finalizer = invocations.iter().find(|i| i.profile_id == "finalizer").unwrap();
    assert!(finalizer.brief.contains("## Additional Instructions\n- tone: warm"), "{}", finalizer.brief);
    // Nothing the models read names an id, a queue or the provider's session.
    for inv in &invocations {
        let text = baton_store::invocations::steps::load(&c, inv.id)
            .await
            .unwrap()
            .iter()
            .map(|s| s.payload.to_string())
            .collect::<String>();
        for leak in [inv.id.to_string(), run.to_string(), "baton.invocations".into(), "invocation".into()] {
            assert!(!text.contains(&leak), "{} saw `{leak}`", inv.profile_id);
        }
    }
}

/// A run's root stores no brief (V39): its row reads it back rendered from
/// the run's stored request, and that is what its model read.
#[tokio::test]
async fn a_root_stores_no_brief_and_reads_back_the_one_rendered_from_its_request() {
    let (env, run) = example_run("root-brief-1").await;
    let c = env.db().await;
    let stored =
        "SELECT count(*) FROM invocations WHERE run_id = $1 AND kind = 'root' AND brief IS NULL AND handoff IS NULL";
    assert_eq!(env.scalar_i64(stored, &[&run]).await, 1, "the root's row holds no brief");
    let body = baton_store::requests::get(&c, "root-brief-1").await.unwrap().unwrap().body;
    let request: baton_domain::protocol::request::HandoffRequest = serde_json::from_value(body).unwrap();
    let expected = baton_domain::profiles::brief::render_request_brief(&request);
    let root = &baton_store::invocations::for_run(&c, run).await.unwrap()[0];
    assert_eq!(root.brief, expected);
    assert!(root.brief.starts_with("# Request") && root.brief.contains(request.user_intent.trim()), "{}", root.brief);
    let steps = baton_store::invocations::steps::load(&c, root.id).await.unwrap();
    assert_eq!(steps[0].payload["messages"][1]["content"], expected.as_str(), "the model read that brief");
}

/// A later stage may finish on an earlier stage's commit (docs/concepts.md#handoff).
#[tokio::test]
async fn agent_handoff_continues_after_prior_commit() {
    let env = TestEnv::new().await;
    let drafter = profile(
        "drafter",
        &["workspace_write", "workspace_commit", "agent_handoff"],
        "can_handoff = true",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Committed by the drafter." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "agent_handoff", args = { agentId = "closer", handoff = { objective = "Finish the run." } } }"#,
        ],
    );
    let closer = profile("closer", &["workspace_finish"], "", &[r#"{ tool = "workspace_finish" }"#]);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"drafter\"\n\n{drafter}\n{closer}")).await;
    let fleet = env.start_all();
    let messages = run_request(&env, "prior-commit").await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed");
    assert_eq!(reply["result"]["finalText"], "Committed by the drafter.");
    assert_eq!(reply["result"]["agents"], serde_json::json!(["drafter", "closer"]));
}

/// Each invocation resolves its own profile's skills (docs/concepts.md#handoff),
/// never its caller's, records them and includes them in its prompt.
#[tokio::test]
async fn each_agent_gets_its_own_profiles_skills_in_its_prompt() {
    let env = TestEnv::new().await;
    let profiles = include_str!("../examples/profiles.toml").to_string()
        + "\n[[skills]]\nid = \"school-tone\"\ndescription = \"How the school writes to parents.\"\ninstructions = \"Address parents warmly; put dates in bold.\"\n";
    let profiles = profiles.replacen(
        "id = \"writer\"\nname = \"Writer\"",
        "id = \"writer\"\nname = \"Writer\"\nskills = [\"school-tone\"]",
        1,
    );
    env.apply_profiles(&profiles).await;
    let fleet = env.start_all();
    run_request(&env, "skills-1").await;
    fleet.stop().await;
    let run = env.run_of("skills-1").await;
    let c = env.db().await;
    let prompt_of = |profile: &'static str| {
        let env = &env;
        async move {
            let inv = &env.invocations_of(run, profile).await[0];
            baton_store::invocations::steps::load(&env.db().await, inv.id).await.unwrap()[0].payload["messages"][0]
                ["content"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    assert!(prompt_of("writer")
        .await
        .contains("## Skills\n### school-tone\nAddress parents warmly; put dates in bold."));
    assert!(!prompt_of("editor").await.contains("school-tone"), "the editor does not inherit the writer's skills");
    let resolved: Vec<Value> = baton_store::journal::timeline(&c, run)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.is(JournalEvent::SkillScopesResolved))
        .map(|e| e.payload["skills"].clone())
        .collect();
    assert_eq!(resolved[0], serde_json::json!(["school-tone"]));
    assert_eq!(resolved[1], serde_json::json!([]));
}

/// Issue 23: the transcript keeps an opening prompt as the version of the
/// profiles file it was rendered from, not its text, and reading it renders
/// the same prompt again from that version, whatever was applied since
/// (versions are never edited).
#[tokio::test]
async fn a_stored_prompt_is_its_profiles_version_and_reads_back_as_rendered_then() {
    let env = TestEnv::new().await;
    let skill = "\n[[skills]]\nid = \"school-tone\"\ndescription = \"How the school writes.\"\ninstructions = \"Put dates in bold.\"\n";
    let profiles = (include_str!("../examples/profiles.toml").to_string() + skill).replacen(
        "id = \"writer\"\nname = \"Writer\"",
        "id = \"writer\"\nname = \"Writer\"\nskills = [\"school-tone\"]",
        1,
    );
    env.apply_profiles(&profiles).await;
    let fleet = env.start_all();
    run_request(&env, "versioned-1").await;
    fleet.stop().await;
    let run = env.run_of("versioned-1").await;
    let writer = env.invocations_of(run, "writer").await[0].id;
    let c = env.db().await;
    let rendered = baton_store::invocations::steps::load(&c, writer).await.unwrap()[0].payload.clone();
    let system = rendered["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(system.contains("### school-tone\nPut dates in bold."), "{system}");
    assert!(rendered["messages"][1]["content"].as_str().unwrap().contains("# "), "the brief: {rendered}");
    // What is stored: the version, a few bytes, not the prompt.
    let version: i64 = c.query_one("SELECT version FROM profiles_version", &[]).await.unwrap().get(0);
    let stored: Value = c
        .query_one("SELECT (payloads::jsonb) -> 0 FROM transcript WHERE invocation_id = $1 AND seq = 0", &[&writer])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, serde_json::json!({"profilesVersion": version}));
    // A new file changes the skill and the writer's words; the run's prompt
    // still reads as the model received it.
    let changed = profiles
        .replace("Put dates in bold.", "Never use bold.")
        .replace("You are Writer. You draft clear, warm announcements.", "You are someone else now.");
    assert_ne!(changed, profiles);
    env.apply_profiles(&changed).await;
    let again = baton_store::invocations::steps::load(&c, writer).await.unwrap()[0].payload.clone();
    assert_eq!(again, rendered, "the stored prompt renders as it did before the new apply");
}

/// An agent's output is hostile input: a NUL character in a journal event
/// or a transcript step (which the views' `jsonb` cannot hold) is stored as
/// U+FFFD, so the run's journal and transcript still read.
#[tokio::test]
async fn a_nul_character_an_agent_printed_is_kept_readable_in_the_journal_and_the_transcript() {
    let env = TestEnv::new().await;
    let c = env.db().await;
    let (run, invocation) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let printed = serde_json::json!({"output": "before\u{0}after"});
    let event = baton_store::journal::Event::new(JournalEvent::CodingAgentCommand, Some(invocation), printed.clone());
    baton_store::journal::append(&c, run, &[event]).await.unwrap();
    baton_store::invocations::steps::append_all(&c, invocation, &[(0, "tool_result", &printed)]).await.unwrap();
    let timeline = baton_store::journal::timeline(&c, run).await.unwrap();
    assert_eq!(timeline[0].payload["output"], "before\u{FFFD}after");
    let steps = c.query("SELECT payload FROM steps WHERE invocation_id = $1", &[&invocation]).await.unwrap();
    assert_eq!(steps[0].get::<_, Value>(0)["output"], "before\u{FFFD}after");
}

#[tokio::test]
async fn a_commit_made_again_by_its_tool_call_returns_its_ordinal_and_adds_nothing() {
    use baton_store::runs::workspace::{self, NewCommit};
    let env = TestEnv::new().await;
    let c = env.db().await;
    let (run, owner) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let commit = |call: &'static str, reply: &'static str| NewCommit {
        run_id: run,
        invocation_id: owner,
        tool_call_id: call,
        path: "output/main.md",
        mode: "replace",
        reason: None,
        reply,
    };
    assert_eq!(workspace::commit(&c, &commit("call_1", "first")).await.unwrap(), 1);
    assert_eq!(workspace::commit(&c, &commit("call_2", "second")).await.unwrap(), 2);
    assert_eq!(workspace::commit(&c, &commit("call_1", "again")).await.unwrap(), 1, "the resumed call's own");
    assert_eq!(workspace::latest_reply(&c, run).await.unwrap().as_deref(), Some("second"));
    assert_eq!(env.scalar_i64("SELECT count(*) FROM commits WHERE run_id = $1", &[&run]).await, 2);
}

/// A tool result stored in its call's row keeps no tool name the call gave;
/// the transcript reads back with it, as the model received it.
#[tokio::test]
async fn a_transcript_reads_back_each_tool_result_named_as_its_call() {
    let (env, run) = example_run("names-1").await;
    let c = env.db().await;
    let beside_its_call = "SELECT count(*) FROM transcript t JOIN invocations i ON i.id = t.invocation_id,
                                  json_array_elements(t.payloads) WITH ORDINALITY p(payload, n)
                            WHERE i.run_id = $1 AND t.kinds[p.n] = 'tool_result' AND 'model_turn' = ANY(t.kinds)";
    let named = format!("{beside_its_call} AND (p.payload::jsonb) ? 'name'");
    assert!(env.scalar_i64(beside_its_call, &[&run]).await >= 1, "a turn stored with its results");
    assert_eq!(env.scalar_i64(&named, &[&run]).await, 0, "no result in its call's row repeats the call's name");
    let mut results = 0;
    for inv in baton_store::invocations::for_run(&c, run).await.unwrap() {
        let steps = baton_store::invocations::steps::load(&c, inv.id).await.unwrap();
        let calls: Vec<&Value> = steps.iter().filter_map(|s| s.payload["toolCalls"].as_array()).flatten().collect();
        for result in steps.iter().filter(|s| s.kind == "tool_result") {
            let call = calls.iter().find(|c| c["id"] == result.payload["toolCallId"]).expect("its call");
            assert_eq!(result.payload["name"], call["name"], "{}", result.payload);
            results += 1;
        }
    }
    assert!(results >= 3, "the chain's agents called tools: {results}");
}
