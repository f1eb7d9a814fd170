//! One trace per run: a `baton` process exports its spans over OTLP/HTTP
//! (JSON) to a receiver in the test; the bridge's `traceparent` is the root
//! of one trace that covers intake, each agent, the delegated child, the
//! relay, the collector and the reply, whose `traceparent` names that trace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::{body::Bytes, extract::State, routing::post, Router};
use baton_bus::Outgoing;
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::HandoffEvent;
use baton_tests::{baton_binary, sample_request_json, TestEnv};
use futures_lite::StreamExt;
use lapin::options::BasicAckOptions;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(40);
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const BRIDGE_SPAN: &str = "00f067aa0ba902b7";

/// One exported span: ids in hex, as OTLP/JSON writes them.
#[derive(Debug, Clone)]
struct Span {
    trace: String,
    id: String,
    parent: String,
    name: String,
    attributes: HashMap<String, String>,
}

type Received = Arc<Mutex<Vec<Value>>>;

/// An OTLP/HTTP receiver on a free port: every body posted to `/v1/traces`.
async fn receiver() -> (String, Received) {
    let received: Received = Arc::default();
    let app = Router::new()
        .route(
            "/v1/traces",
            post(|State(r): State<Received>, body: Bytes| async move {
                r.lock().unwrap().push(serde_json::from_slice(&body).expect("OTLP/JSON"));
                "{}"
            }),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), received)
}

fn spans(received: &Received) -> Vec<Span> {
    let mut out = vec![];
    for body in received.lock().unwrap().iter() {
        for rs in body["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    let attributes = s["attributes"].as_array().into_iter().flatten().map(|a| {
                        let v = &a["value"];
                        let text = v["stringValue"].as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
                        (a["key"].as_str().unwrap().to_string(), text)
                    });
                    let text = |k: &str| s[k].as_str().unwrap_or_default().to_lowercase();
                    out.push(Span {
                        trace: text("traceId"),
                        id: text("spanId"),
                        parent: text("parentSpanId"),
                        name: text("name"),
                        attributes: attributes.collect(),
                    });
                }
            }
        }
    }
    out
}

/// The span's ancestors' names and agents, nearest first, up to the bridge.
fn ancestry<'a>(span: &'a Span, by_id: &HashMap<&str, &'a Span>) -> Vec<&'a Span> {
    let mut chain = vec![];
    let mut at = span;
    while let Some(parent) = by_id.get(at.parent.as_str()) {
        chain.push(*parent);
        at = parent;
    }
    assert_eq!(at.parent, BRIDGE_SPAN, "{}'s root span {} hangs off the bridge's span", span.name, at.name);
    chain
}

fn agent_of(span: &Span) -> &str {
    span.attributes.get("agent").map(String::as_str).unwrap_or_default()
}

/// `baton up` (every role) on the test's database and queues.
fn spawn(env: &TestEnv, extra: &[(&str, &str)]) -> tokio::process::Child {
    tokio::process::Command::new(baton_binary())
        .arg("up")
        .env("DATABASE_URL", &env.settings.database_url)
        .env("AMQP_URL", &env.settings.amqp_url)
        .env("BATON_QUEUE_PREFIX", &env.settings.queue_prefix)
        .env("BATON_RELAY_POLL_MS", "200")
        .env("BATON_WORKER_ID", "traced")
        .env("BATON_DB_POOL_SIZE", "3")
        .env("BATON_METRICS_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .envs(extra.iter().copied())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn baton")
}

/// Sends a request as a bridge would, with its own `traceparent`.
async fn send_traced(env: &TestEnv, request: &Value, traceparent: String) {
    let body = serde_json::to_vec(request).unwrap();
    let queue = env.queue(Queue::BridgeRequests);
    let headers = vec![("traceparent", traceparent), ("tracestate", "bridge=wechat".to_string())];
    let out = Outgoing { queue: &queue, body: &body, reply_to: Some(&env.reply_queue), headers, ..Default::default() };
    env.publisher.publish(&out).await.unwrap();
}

/// The next bridge message and its `traceparent` (every one has it).
async fn next_traced(replies: &mut lapin::Consumer) -> (Value, String) {
    let delivery = tokio::time::timeout(WAIT, replies.next()).await.expect("a message in time").unwrap().unwrap();
    delivery.acker.ack(BasicAckOptions::default()).await.unwrap();
    let message: Value = serde_json::from_slice(&delivery.data).unwrap();
    let traceparent = baton_bus::publish::header(&delivery.properties, "traceparent");
    (message.clone(), traceparent.unwrap_or_else(|| panic!("every bridge message has a traceparent: {message}")))
}

#[tokio::test]
async fn one_trace_runs_from_the_bridge_traceparent_through_every_agent_to_the_reply() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let (endpoint, received) = receiver().await;
    let mut baton = spawn(&env, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint), ("OTEL_BSP_SCHEDULE_DELAY", "200")]);

    let mut replies = env.replies().await;
    send_traced(&env, &sample_request_json("traced-1", "docs_agent", "en"), format!("00-{TRACE}-{BRIDGE_SPAN}-01"))
        .await;
    let reply_traceparent = loop {
        let (message, traceparent) = next_traced(&mut replies).await;
        if message["type"] == "reply" {
            assert_eq!(message["status"], "completed", "{message}");
            break traceparent;
        }
    };
    let trace_of_reply = reply_traceparent.split('-').nth(1).unwrap().to_string();
    assert_eq!(trace_of_reply, TRACE, "the reply's traceparent: {reply_traceparent}");

    // SIGTERM: the process flushes its spans before it exits.
    let pid = baton.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let _ = tokio::time::timeout(WAIT, baton.wait()).await.expect("baton stops");

    let all = spans(&received);
    let run: Vec<&Span> = all.iter().filter(|s| s.trace == TRACE).collect();
    let by_id: HashMap<&str, &Span> = run.iter().map(|s| (s.id.as_str(), *s)).collect();
    let named = |name: &'static str| run.iter().filter(move |s| s.name == name).copied();
    let reply_parent = reply_traceparent.split('-').nth(2).unwrap();
    let publish =
        by_id.get(reply_parent).unwrap_or_else(|| panic!("the reply's parent span was exported: {reply_traceparent}"));
    assert_eq!(publish.name, "publish");

    let intake = named("intake").next().expect("an intake span in the bridge's trace");
    assert_eq!(intake.parent, BRIDGE_SPAN);
    let invocations: Vec<&Span> = named("invocation").collect();
    for agent in ["writer", "editor", "checker", "finalizer"] {
        assert!(invocations.iter().any(|s| agent_of(s) == agent), "{agent}'s invocation is in the trace: {run:#?}");
    }
    // Each hop descends from the one before it, and every chain ends at the bridge.
    let before = |later: &str, earlier: &str| {
        let span = invocations.iter().find(|s| agent_of(s) == later).unwrap();
        let chain = ancestry(span, &by_id);
        assert!(
            chain.iter().any(|s| s.name == "invocation" && agent_of(s) == earlier),
            "{earlier} comes before {later}"
        );
        assert!(chain.iter().any(|s| s.id == intake.id), "{later} descends from intake");
    };
    before("editor", "writer");
    before("checker", "editor");
    before("finalizer", "editor");
    // The run is answered by the finalizer's last step, in its transaction.
    let collector = named("answer").next().expect("the answer's span");
    let chain = ancestry(collector, &by_id);
    assert!(
        chain.iter().any(|s| s.name == "invocation" && agent_of(s) == "finalizer"),
        "the answer is the finalizer's"
    );
    assert!(ancestry(publish, &by_id).iter().any(|s| s.id == collector.id), "the reply was written by the answer");
    // Every agent's work names the bridge's handoff (the claim span above it).
    for invocation in &invocations {
        let claim = by_id[invocation.parent.as_str()];
        assert_eq!(claim.attributes.get("handoff_id").map(String::as_str), Some("traced-1"), "{claim:?}");
    }
    assert_eq!(collector.attributes.get("handoff_id").map(String::as_str), Some("traced-1"));
    // Model and tool calls are children of their invocation, tokens as attributes.
    let model = named("model").next().expect("model spans");
    assert_eq!(by_id[model.parent.as_str()].name, "invocation");
    assert!(model.attributes.contains_key("tokens"), "{model:?}");
    let tool = named("tool")
        .find(|s| s.attributes.get("tool").is_some_and(|t| t == "agent_delegate"))
        .expect("the delegate call's span");
    assert_eq!(agent_of(by_id[tool.parent.as_str()]), "editor");
}

/// A request queued behind its chat's live run starts when that run ends, in
/// its own trace, not the ending run's. No exporter: the context still travels.
#[tokio::test]
async fn a_request_queued_behind_its_chat_keeps_its_own_trace() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let _baton = spawn(&env, &[]);
    let mut replies = env.replies().await;
    let traces = [("chat-1", "0af7651916cd43dd8448eb211c80319c"), ("chat-2", "5b8efff798038103d269b633813fc60c")];
    for (id, trace) in traces {
        send_traced(&env, &sample_request_json(id, "docs_agent", "en"), format!("00-{trace}-{BRIDGE_SPAN}-01")).await;
    }
    let mut seen = HashMap::new();
    while seen.len() < 2 {
        let (message, traceparent) = next_traced(&mut replies).await;
        let id = message["handoffId"].as_str().unwrap().to_string();
        let (_, trace) = traces.iter().find(|(h, _)| *h == id).unwrap();
        assert_eq!(traceparent.split('-').nth(1), Some(*trace), "{id}'s message {message} is in its own trace");
        if message["type"] == "reply" {
            seen.insert(id, traceparent);
        }
    }
    let queued = env.handoff_events("chat-2").await;
    assert!(queued.contains(&HandoffEvent::Queued), "chat-2 waited for chat-1: {queued:?}");
}
