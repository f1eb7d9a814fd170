//! `baton demo` as someone trying Baton runs it (issue 24): asked for
//! zh-CN, the reply is Chinese and about the request; it ends with a
//! per-agent table; its first run on a fresh queue prefix logs no ERROR;
//! and it leaves a fleet's own profiles and routes as they are.

use std::process::Output;

use baton_tests::TestEnv;

/// The demo's queues: a prefix of its own, so its first run finds none
/// declared (the test's environment declares its own prefix's); removed
/// when the test ends, pass or fail.
struct DemoQueues {
    amqp: String,
    prefix: String,
}

impl Drop for DemoQueues {
    fn drop(&mut self) {
        baton_tests::remove_queues(&self.amqp, baton_bus::Queues::new(self.prefix.clone()), vec![]);
    }
}

async fn demo(env: &TestEnv, prefix: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(baton_tests::baton_binary())
        .arg("demo")
        .args(args)
        .env("DATABASE_URL", &env.settings.database_url)
        .env("AMQP_URL", &env.settings.amqp_url)
        .env("BATON_QUEUE_PREFIX", prefix)
        .env("BATON_RELAY_POLL_MS", "200")
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .output()
        .await
        .expect("run baton demo")
}

fn is_chinese(text: &str) -> bool {
    text.chars().filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c)).count() > 20
}

#[tokio::test]
async fn the_demo_in_chinese_replies_in_chinese_on_the_requests_subject_ends_with_a_table_per_agent_and_logs_no_error()
{
    let env = TestEnv::new().await;
    let queues =
        DemoQueues { amqp: env.settings.amqp_url.clone(), prefix: format!("{}demo.", env.settings.queue_prefix) };
    let out = demo(&env, &queues.prefix, &["--language", "zh-CN", "--timeout", "60"]).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("ERROR") && !stderr.contains("ERROR"),
        "no ERROR line on a first run:\n{stdout}\n{stderr}"
    );

    let handoff =
        stdout.split("bridge sent request ").nth(1).and_then(|r| r.split(' ').next()).expect("the request id");
    let c = env.db().await;
    let request = baton_store::requests::get(&c, handoff).await.unwrap().expect("stored");
    let intent = request.body["userIntent"].as_str().unwrap();
    let run = baton_store::runs::get(&c, request.run_id.unwrap()).await.unwrap().unwrap();
    let reply = run.final_text.expect("the reply's text");
    assert!(is_chinese(&reply) && stdout.contains(&reply), "the reply is Chinese and printed:\n{reply}");
    for subject in ["科学博物馆", "周五", "周三", "回执"] {
        assert!(intent.contains(subject) && reply.contains(subject), "`{subject}` in the request and the reply");
    }
    assert!(stdout.contains("language: zh-CN"), "{stdout}");

    let table: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("agent ")).take(5).collect();
    assert!(table[0].contains("duration") && table[0].contains("model calls") && table[0].contains("tool calls"));
    assert!(table[0].trim_end().ends_with("tokens"), "{}", table[0]);
    for (line, agent) in table[1..].iter().zip(["writer", "editor", "  ↳ checker", "finalizer"]) {
        assert!(line.starts_with(agent), "`{agent}` row: {line}\n{stdout}");
    }
    assert!(!stdout.contains("model_response_stored"), "no raw list of events:\n{stdout}");
}

#[tokio::test]
async fn the_demo_leaves_a_running_fleets_profiles_and_routes_as_they_are() {
    let env = TestEnv::new().await;
    let queues =
        DemoQueues { amqp: env.settings.amqp_url.clone(), prefix: format!("{}demo.", env.settings.queue_prefix) };
    let fleet = "[routes]\ndocs_agent = \"solo\"\ncodex = \"solo\"\n\n[[profiles]]\nid = \"solo\"\nname = \"Solo\"\n\
                 description = \"The fleet's own agent.\"\ntools = [\"workspace_finish\"]\n[profiles.model]\n\
                 provider = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n";
    env.apply_profiles(fleet).await;
    let c = env.db().await;
    let before = (
        baton_store::profiles::version(&c).await.unwrap(),
        serde_json::to_value(baton_store::profiles::all(&c).await.unwrap()).unwrap(),
        baton_store::profiles::route(&c, "docs_agent").await.unwrap(),
    );
    for args in [&["--timeout", "5"][..], &["--ask", "--timeout", "5"], &["--language", "zh-CN", "--timeout", "5"]] {
        let out = demo(&env, &queues.prefix, args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("holds profiles that `baton demo` did not apply (solo;"), "{stderr}");
        assert!(stderr.contains("a database of its own"), "{stderr}");
    }
    let after = (
        baton_store::profiles::version(&c).await.unwrap(),
        serde_json::to_value(baton_store::profiles::all(&c).await.unwrap()).unwrap(),
        baton_store::profiles::route(&c, "docs_agent").await.unwrap(),
    );
    assert_eq!(before, after, "the fleet's profiles, routes and version are untouched");
    assert_eq!(after.2.as_deref(), Some("solo"));
    drop(queues);
}
