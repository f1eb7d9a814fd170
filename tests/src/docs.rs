//! Reading the project's Markdown documents in tests: a page's text, the
//! part under a heading, the names a table lists, and the anchors GitHub
//! gives its headings.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The workspace's root directory.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").to_path_buf()
}

/// The text of a document, by its path from the workspace's root.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path} cannot be read: {e}"))
}

/// The text under `heading` (a whole line, `## Settings`), up to the next
/// heading of its level or above.
pub fn under<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no heading `{heading}`"));
    let body = &text[start + heading.len() + 2..];
    let level = heading.split(' ').next().expect("a heading");
    let mut fenced = false;
    let mut at = 0;
    for line in body.split_inclusive('\n') {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.split(' ').next().unwrap_or_default();
        if !fenced && !hashes.is_empty() && hashes.chars().all(|c| c == '#') && hashes.len() <= level.len() {
            return &body[..at];
        }
        at += line.len();
    }
    body
}

/// The names in backticks in the first column of a table's rows, each
/// listed once (a name with two rows fails).
pub fn names_in_table(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for row in text.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).expect("a first column");
        for name in first.split('`').skip(1).step_by(2) {
            assert!(names.insert(name.to_string()), "`{name}` has two rows: {row}");
        }
    }
    names
}

/// GitHub's anchor for a heading's text: lower case, every character but
/// letters, digits, `-`, `_` and spaces dropped, spaces made `-`.
pub fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A link or image in a document: where it points, and its line.
pub struct Link {
    pub dest: String,
    pub line: usize,
}

/// A document's heading anchors (a repeated heading's second anchor ends in
/// `-1`, as on GitHub) and its links and images.
pub fn outline(text: &str) -> (BTreeSet<String>, Vec<Link>) {
    let mut anchors = BTreeSet::new();
    let mut links = Vec::new();
    let mut heading: Option<String> = None;
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    for (event, range) in Parser::new_ext(text, Options::all()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let mut anchor = base.clone();
                let mut n = 0;
                while !anchors.insert(anchor.clone()) {
                    n += 1;
                    anchor = format!("{base}-{n}");
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push(Link { dest: dest_url.to_string(), line: line_of(range.start) });
            }
            _ => {}
        }
    }
    (anchors, links)
}

/// Fails unless the names `code` has and the names a table `listed` agree
/// both ways, naming what each lacks: `kind` says what a name is (`tools`),
/// `place` where the table is (the heading above it, and its page).
pub fn assert_same_names(code: &BTreeSet<String>, listed: &BTreeSet<String>, kind: &str, place: &str) {
    let undocumented: Vec<&String> = code.difference(listed).collect();
    let unknown: Vec<&String> = listed.difference(code).collect();
    assert!(undocumented.is_empty(), "{kind} with no row {place}: {undocumented:?}");
    assert!(unknown.is_empty(), "rows {place} that name no {kind}: {unknown:?}");
}
