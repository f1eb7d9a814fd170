//! The README lists every event of both logs, and only those: a new
//! `JournalEvent` or `HandoffEvent` without a row there fails here, and so
//! does a row naming an event the code no longer has. Pure: reads files.

use std::collections::BTreeSet;
use std::path::Path;

use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;

const SECTION: &str = "## Events an operator reads";
const JOURNAL: &str = "### The run journal";
const HANDOFF: &str = "### A handoff's own log";

fn readme() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace");
    std::fs::read_to_string(root.join("README.md")).expect("a readable README.md")
}

/// The text under `heading`, up to the next heading of its level or above.
fn under<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("README.md has no `{heading}`"));
    let body = &text[start + heading.len() + 2..];
    let level = heading.split(' ').next().expect("a heading");
    let end = body.match_indices("\n#").find(|(i, _)| {
        let hashes = body[i + 1..].split(' ').next().unwrap_or_default();
        hashes.chars().all(|c| c == '#') && hashes.len() <= level.len()
    });
    &body[..end.map_or(body.len(), |(i, _)| i)]
}

/// The names in the first column of a table's rows (each in backticks),
/// every one once.
fn names_in_table(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for row in text.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).expect("a first column");
        for name in first.split('`').skip(1).step_by(2) {
            assert!(names.insert(name.to_string()), "`{name}` has two rows: {row}");
        }
    }
    names
}

fn assert_listed(heading: &str, code: BTreeSet<String>) {
    let text = readme();
    let listed = names_in_table(under(under(&text, SECTION), heading));
    let undocumented: Vec<&String> = code.difference(&listed).collect();
    let unknown: Vec<&String> = listed.difference(&code).collect();
    assert!(undocumented.is_empty(), "events with no row under `{heading}` in README.md: {undocumented:?}");
    assert!(unknown.is_empty(), "rows under `{heading}` in README.md that name no event: {unknown:?}");
}

#[test]
fn the_readme_lists_every_journal_event_and_no_other() {
    assert_listed(JOURNAL, JournalEvent::ALL.iter().map(|e| e.as_str().to_string()).collect());
}

#[test]
fn the_readme_lists_every_handoff_event_and_no_other() {
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
