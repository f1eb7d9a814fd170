//! The concepts guide (docs/concepts.md) lists every event of both logs,
//! and only those: a new `JournalEvent` or `HandoffEvent` without a row
//! there fails here, and so does a row naming an event the code no longer
//! has. Pure: reads files.

use std::collections::BTreeSet;

use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_tests::docs::{assert_same_names, names_in_table, read, under};

const PAGE: &str = "docs/concepts.md";
const SECTION: &str = "## Events an operator reads";
const JOURNAL: &str = "### The run journal";
const HANDOFF: &str = "### A handoff's own log";

fn assert_listed(heading: &str, code: BTreeSet<String>) {
    let text = read(PAGE);
    let listed = names_in_table(under(under(&text, SECTION), heading));
    assert_same_names(&code, &listed, "events", &format!("under `{heading}` in {PAGE}"));
}

#[test]
fn the_concepts_guide_lists_every_journal_event_and_no_other() {
    assert_listed(JOURNAL, JournalEvent::ALL.iter().map(|e| e.as_str().to_string()).collect());
}

#[test]
fn the_concepts_guide_lists_every_handoff_event_and_no_other() {
    assert_listed(HANDOFF, HandoffEvent::ALL.iter().map(|e| e.as_str().to_string()).collect());
}

/// The journal stores an event's type as a value of the database's enum
/// `journal_event` (V33), and a bridge message's row its handoff events and
/// statuses, and a transcript row its steps' kinds, as values of
/// `handoff_event`, `handoff_status` and `step_kind` (V50): each holds every
/// value the code can write, and no other, so a new one comes with the
/// migration that adds it.
#[tokio::test]
async fn the_databases_enums_hold_every_value_the_code_writes_and_no_other() {
    use baton_domain::protocol::request::HandoffStatus;
    let env = baton_tests::TestEnv::new().await;
    let c = env.db().await;
    let names = |all: &[&str]| all.iter().map(ToString::to_string).collect::<BTreeSet<String>>();
    let cases = [
        ("journal_event", names(&JournalEvent::ALL.map(JournalEvent::as_str))),
        ("handoff_event", names(&HandoffEvent::ALL.map(HandoffEvent::as_str))),
        ("handoff_status", names(&HandoffStatus::ALL.map(HandoffStatus::as_str))),
        ("step_kind", names(&baton_agent::transcript::KINDS)),
    ];
    for (name, code) in cases {
        let stored: Vec<String> =
            c.query_one(&format!("SELECT enum_range(NULL::{name})::text[]"), &[]).await.unwrap().get(0);
        assert_eq!(stored.into_iter().collect::<BTreeSet<_>>(), code, "{name} (migrations) and the code differ");
    }
}
