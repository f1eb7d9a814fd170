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
/// `journal_event` (V33): it holds every event the code can write, and no
/// other, so a new event comes with the migration that adds it.
#[tokio::test]
async fn the_databases_journal_event_enum_holds_every_journal_event_and_no_other() {
    let env = baton_tests::TestEnv::new().await;
    let stored: Vec<String> =
        env.db().await.query_one("SELECT enum_range(NULL::journal_event)::text[]", &[]).await.unwrap().get(0);
    let stored: BTreeSet<String> = stored.into_iter().collect();
    let code: BTreeSet<String> = JournalEvent::ALL.iter().map(|e| e.as_str().to_string()).collect();
    assert_eq!(stored, code, "journal_event (migrations) and JournalEvent (code) differ");
}
