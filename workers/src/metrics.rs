//! Every metric the fleet exports, named once: the names the roles record
//! here, the agent loop's ([`baton_agent::metrics`]) and the bus's
//! ([`baton_bus::metrics`]). The `metrics` facade records; the Prometheus
//! exporter renders them for `/metrics` (served by the `health` module).
//!
//! Names follow Prometheus conventions (`baton_` prefix, `_total` for
//! counters, `_seconds` for durations) and labels are bounded: no ids and no
//! user text, only enums, profile names, tool names and queue names.

use std::sync::OnceLock;
use std::time::Duration;

use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

pub const REQUESTS: &str = "baton_requests_total";
pub const RUN_SECONDS: &str = "baton_run_duration_seconds";
pub const HOP_LATENCY: &str = "baton_hop_latency_seconds";
pub const INVOCATIONS: &str = "baton_invocations";
pub const CLAIMS: &str = "baton_claims_total";
pub const TAKEOVERS: &str = "baton_takeovers_total";
pub const OUTBOX_BACKLOG: &str = "baton_outbox_backlog";
pub const OUTBOX_OLDEST_AGE: &str = "baton_outbox_oldest_age_seconds";
pub const RELAY_PUBLISH_SECONDS: &str = "baton_relay_publish_duration_seconds";
pub const RELAY_NACKS: &str = "baton_relay_nacks_total";
pub const CALLBACKS: &str = "baton_callbacks_total";
pub const BRIDGE_REPLIES: &str = "baton_bridge_replies_total";
pub const BUILD_INFO: &str = "baton_build_info";
pub const RUNS: &str = "baton_runs";
pub const UNCLAIMED_OLDEST_AGE: &str = "baton_invocations_unclaimed_oldest_age_seconds";
pub const MANUAL_WAITING: &str = "baton_manual_handoffs_waiting";

/// Every metric the fleet exports (the dashboard's queries are checked against it).
pub const NAMES: [&str; 25] = [
    BUILD_INFO,
    RUNS,
    UNCLAIMED_OLDEST_AGE,
    MANUAL_WAITING,
    baton_agent::metrics::BUDGET_EXHAUSTIONS,
    REQUESTS,
    RUN_SECONDS,
    HOP_LATENCY,
    INVOCATIONS,
    CLAIMS,
    TAKEOVERS,
    OUTBOX_BACKLOG,
    OUTBOX_OLDEST_AGE,
    RELAY_PUBLISH_SECONDS,
    RELAY_NACKS,
    CALLBACKS,
    BRIDGE_REPLIES,
    baton_agent::metrics::MODEL_REQUEST_SECONDS,
    baton_agent::metrics::MODEL_REQUEST_ERRORS,
    baton_agent::metrics::MODEL_TOKENS,
    baton_agent::metrics::TOOL_CALLS,
    baton_agent::metrics::MODEL_THROTTLED,
    baton_agent::metrics::MODEL_THROTTLE_WAIT_SECONDS,
    baton_agent::metrics::HELD_TURNS,
    baton_bus::metrics::DEAD_LETTERS,
];

/// Histogram buckets in seconds: from a fast claim to a long run.
const BUCKETS: [f64; 16] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0];

/// The process's exporter, installed on first use (one per process).
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets(&BUCKETS)
            .expect("the buckets are not empty")
            .install_recorder()
            .expect("no other metrics recorder is installed in this process");
        describe();
        zero();
        baton_store::after_commit::observe_answers(request_answered);
        handle
    })
}

/// Every counter whose labels are known in advance starts at 0, so a rate or
/// an alert on it has a series before the first event (a counter that first
/// appears at 1 hides that increase from `rate`).
fn zero() {
    use baton_domain::protocol::reply::ReplyStatus;
    use baton_domain::protocol::request::{Source, TargetAgent};
    ::metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for source in Source::ALL {
        for target in TargetAgent::ALL {
            let (source, target) = (source.as_str(), target.as_str());
            ::metrics::counter!(REQUESTS, "source" => source, "target_agent" => target, "stage" => "accepted")
                .absolute(0);
            // Answered ones too: the runs-failing alert's `increase` must see
            // a process's first failure, not a series that appears at 1.
            for outcome in ReplyStatus::ALL {
                let labels = [
                    ("source", source),
                    ("target_agent", target),
                    ("stage", "answered"),
                    ("outcome", outcome.as_str()),
                ];
                ::metrics::counter!(REQUESTS, &labels).absolute(0);
            }
        }
    }
    for kind in ["root", "handoff", "child"] {
        ::metrics::counter!(CLAIMS, "kind" => kind).absolute(0);
    }
    ::metrics::counter!(TAKEOVERS).absolute(0);
    ::metrics::counter!(RELAY_NACKS).absolute(0);
    for outcome in ["sent", "failed", "refused"] {
        ::metrics::counter!(CALLBACKS, "outcome" => outcome).absolute(0);
    }
    for status in ["completed", "failed", "blocked", "cancelled"] {
        ::metrics::counter!(BRIDGE_REPLIES, "status" => status).absolute(0);
    }
    for outcome in ["stored", "fenced", "given_up"] {
        ::metrics::counter!(baton_agent::metrics::HELD_TURNS, "outcome" => outcome).absolute(0);
    }
    for limit in baton_domain::policy::budget::Limit::ALL {
        ::metrics::counter!(baton_agent::metrics::BUDGET_EXHAUSTIONS, "limit" => limit.as_str()).absolute(0);
    }
    for (queue, reason) in baton_bus::metrics::dead_letter_labels() {
        ::metrics::counter!(baton_bus::metrics::DEAD_LETTERS, "queue" => queue, "reason" => reason).absolute(0);
    }
}

fn describe() {
    describe_counter!(
        REQUESTS,
        "Bridge requests, by source and targetAgent: accepted (stage=accepted), and answered (stage=answered) by outcome."
    );
    describe_histogram!(
        RUN_SECONDS,
        Unit::Seconds,
        "From a run's start to its end, less the time it waited for the user's answers, by outcome."
    );
    describe_gauge!(BUILD_INFO, "Always 1, labelled with the running build's version.");
    describe_gauge!(RUNS, "Live runs, by state: running, or blocked on a question to the user.");
    describe_gauge!(
        UNCLAIMED_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest invocation waiting to be claimed (0 when none waits)."
    );
    describe_gauge!(MANUAL_WAITING, "Manual handoffs waiting for an operator's result.");
    describe_counter!(
        baton_agent::metrics::BUDGET_EXHAUSTIONS,
        "Runs stopped because they spent their budget, by the limit reached."
    );
    describe_histogram!(HOP_LATENCY, Unit::Seconds, "From a handoff committed to its successor claimed.");
    describe_gauge!(
        INVOCATIONS,
        "Invocations by state: created (waiting to be claimed), running, parked; and requests blocked on a question."
    );
    describe_counter!(CLAIMS, "Invocations claimed, by kind (root, handoff, child).");
    describe_counter!(TAKEOVERS, "Claims taken from a worker that neither finished nor handed back.");
    describe_gauge!(OUTBOX_BACKLOG, "Rows waiting in the outbox.");
    describe_gauge!(OUTBOX_OLDEST_AGE, Unit::Seconds, "Age of the oldest row in the outbox.");
    describe_histogram!(
        RELAY_PUBLISH_SECONDS,
        Unit::Seconds,
        "The relay's publish of one batch, until the broker confirmed it."
    );
    describe_counter!(RELAY_NACKS, "Messages the broker refused for now (nack); kept and tried again.");
    describe_counter!(CALLBACKS, "HTTP status callbacks, by outcome (sent, failed, refused).");
    describe_counter!(BRIDGE_REPLIES, "Replies published to bridges, by status.");
    describe_histogram!(
        baton_agent::metrics::MODEL_REQUEST_SECONDS,
        Unit::Seconds,
        "Model calls (retries included), by profile and outcome."
    );
    describe_counter!(
        baton_agent::metrics::MODEL_REQUEST_ERRORS,
        "Failed model call attempts, by profile and status code."
    );
    describe_counter!(baton_agent::metrics::MODEL_TOKENS, "Tokens the models reported, by profile and kind.");
    describe_counter!(
        baton_agent::metrics::TOOL_CALLS,
        "Tool calls, by tool and outcome (ok, or a recoverable error)."
    );
    describe_counter!(
        baton_agent::metrics::HELD_TURNS,
        "Finished turns held through a database outage, by how it ended (stored, fenced, given_up)."
    );
    describe_counter!(
        baton_agent::metrics::MODEL_THROTTLED,
        "Model calls that waited under a fleet-wide limit, by the limit's name and why."
    );
    describe_histogram!(
        baton_agent::metrics::MODEL_THROTTLE_WAIT_SECONDS,
        Unit::Seconds,
        "How long throttled model calls waited, by limit."
    );
    describe_counter!(
        baton_bus::metrics::DEAD_LETTERS,
        "Messages moved to baton.dead, by source queue and reason code."
    );
}

/// A request accepted (stored and taken) by intake: its source and the contract's `targetAgent`.
pub fn request_accepted(source: &'static str, target_agent: &'static str) {
    ::metrics::counter!(REQUESTS, "source" => source, "target_agent" => target_agent, "stage" => "accepted")
        .increment(1);
}

/// A request answered: its source, its `targetAgent`, the outcome, and how
/// long its run worked (the time waiting for the user's answers left out).
/// Heard of once the transaction that answered commits, in whichever role
/// ended the run (`baton_store::after_commit::observe_answers`).
pub fn request_answered(answer: &baton_store::after_commit::Answered) {
    let outcome = answer.outcome;
    let labels =
        [("source", answer.source), ("target_agent", answer.target_agent), ("stage", "answered"), ("outcome", outcome)];
    ::metrics::counter!(REQUESTS, &labels).increment(1);
    if let Some(took) = answer.took {
        ::metrics::histogram!(RUN_SECONDS, "outcome" => outcome).record(took.as_secs_f64());
    }
}

/// A claim of an invocation of this kind; a takeover when its holder was lost.
pub fn claimed(kind: &'static str, takeover: bool) {
    ::metrics::counter!(CLAIMS, "kind" => kind).increment(1);
    if takeover {
        ::metrics::counter!(TAKEOVERS).increment(1);
    }
}

pub fn hop(waited_seconds: f64) {
    ::metrics::histogram!(HOP_LATENCY).record(waited_seconds);
}

pub fn live(live: &baton_store::overview::gauges::Live, outbox: (i64, f64)) {
    let states =
        [("created", live.created), ("running", live.running), ("parked", live.parked), ("blocked", live.blocked)];
    for (state, n) in states {
        ::metrics::gauge!(INVOCATIONS, "state" => state).set(n as f64);
    }
    for (state, n) in [("running", live.runs_running), ("blocked", live.runs_blocked)] {
        ::metrics::gauge!(RUNS, "state" => state).set(n as f64);
    }
    ::metrics::gauge!(UNCLAIMED_OLDEST_AGE).set(live.unclaimed_oldest_secs);
    ::metrics::gauge!(MANUAL_WAITING).set(live.manual_waiting as f64);
    ::metrics::gauge!(OUTBOX_BACKLOG).set(outbox.0 as f64);
    ::metrics::gauge!(OUTBOX_OLDEST_AGE).set(outbox.1);
}

pub fn relay_published(took: Duration) {
    ::metrics::histogram!(RELAY_PUBLISH_SECONDS).record(took.as_secs_f64());
}

pub fn relay_nacked() {
    ::metrics::counter!(RELAY_NACKS).increment(1);
}

/// `outcome`: `sent`, `failed` (given up) or `refused` (off the allow-list, no secret).
pub fn callback(outcome: &'static str) {
    ::metrics::counter!(CALLBACKS, "outcome" => outcome).increment(1);
}

/// A message published to a bridge: counted when it is a reply, by its
/// status (one of the contract's four, anything else as `other`).
pub fn bridge_message_sent(body: &serde_json::Value) {
    if body["type"] != "reply" {
        return;
    }
    let status = match body["status"].as_str() {
        Some(s @ ("completed" | "failed" | "blocked" | "cancelled")) => s.to_owned(),
        _ => "other".to_owned(),
    };
    ::metrics::counter!(BRIDGE_REPLIES, "status" => status).increment(1);
}
