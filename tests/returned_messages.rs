//! A reply to a bridge queue that is gone comes back from the broker; the
//! AMQP library would log it whole (its body as decimal bytes, the reply's
//! text with it). The real `baton` binary keeps it out of its log, at the
//! level operators run it.

use std::time::Duration;

use baton_domain::protocol::request::HandoffEvent;
use baton_tests::{eventually, profile, sample_request_json, TestEnv};

const WAIT: Duration = Duration::from_secs(60);
/// The reply's text: it must appear in no log line, as text or as bytes.
const MARKER: &str = "Kept out of every log line: zebra-quartz-7741.";

fn solo() -> String {
    let write =
        format!(r#"{{ tool = "workspace_write", args = {{ path = "output/main.md", content = "{MARKER}" }} }}"#);
    let tools = ["workspace_write", "workspace_commit", "workspace_finish"];
    let script = [write.as_str(), r#"{ tool = "workspace_commit" }"#, r#"{ tool = "workspace_finish" }"#];
    format!("[routes]\ndocs_agent = \"solo\"\n\n{}", profile("solo", &tools, "", &script))
}

#[tokio::test]
async fn a_reply_to_a_deleted_queue_leaves_no_reply_text_in_the_log() {
    let env = TestEnv::new().await;
    env.apply_profiles(&solo()).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics = format!("127.0.0.1:{port}");
    let roles = ["intake", "invocation", "relay", "collector"];
    let mut fleet = env.spawn_baton_roles(&roles, "returns", &[("BATON_METRICS_ADDR", &metrics)]);
    // A bridge whose reply queue is gone: every status and the reply come back.
    let gone = format!("{}bridge.gone", env.settings.queue_prefix);
    let request = serde_json::to_vec(&sample_request_json("gone-1", "docs_agent", "en")).unwrap();
    env.send_raw(&request, Some(&gone)).await;
    let failed = HandoffEvent::DeliveryFailed.as_str();
    eventually(WAIT, "the reply dead-lettered", || async {
        let sql = "SELECT count(*) FROM handoff_events WHERE handoff_id = 'gone-1' AND type = $1 AND message LIKE 'the reply %'";
        (env.scalar_i64(sql, &[&failed]).await == 1).then_some(())
    })
    .await;
    fleet.signal("TERM");
    assert_eq!(fleet.exit_code(WAIT).await, Some(0));

    let log = std::fs::read_to_string(env.log_of("returns")).unwrap();
    let as_bytes = MARKER.bytes().map(|b| b.to_string()).collect::<Vec<_>>().join(", ");
    assert!(log.contains("dead-lettering it"), "Baton says what came back, and where:\n{log}");
    for line in log.lines() {
        assert!(!line.contains(MARKER) && !line.contains(&as_bytes), "a line holds the reply's text: {line}");
        assert!(!line.contains("Server returned us a message"), "the library logged a returned message: {line}");
    }
}
