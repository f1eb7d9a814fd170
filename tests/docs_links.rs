//! Every relative link and anchor in the project's documents resolves:
//! README.md, CHANGELOG.md, CONTRIBUTING.md and every page of docs/. A
//! link names a file that exists, and its `#anchor` a heading of that file
//! (GitHub's slug of it). Every broken link is reported at once, with its
//! file and line. Pure: reads files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use baton_tests::docs::{self, outline, slug};

/// The documents checked, by their path from the workspace's root.
fn documents() -> Vec<String> {
    let mut paths: Vec<String> = ["README.md", "CHANGELOG.md", "CONTRIBUTING.md"].map(String::from).to_vec();
    let mut pages: Vec<String> = std::fs::read_dir(docs::root().join("docs"))
        .expect("a docs/ folder")
        .map(|e| e.expect("a readable entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
}

/// What is wrong with each link of `documents` (`file:line: …`), given
/// each document's text by its path.
fn broken_links(texts: &BTreeMap<String, String>, exists: impl Fn(&Path) -> bool) -> Vec<String> {
    let anchors: BTreeMap<&String, _> = texts.iter().map(|(path, text)| (path, outline(text).0)).collect();
    let mut broken = Vec::new();
    for (path, text) in texts {
        let dir = Path::new(path).parent().unwrap_or(Path::new(""));
        for link in outline(text).1 {
            let dest = link.dest.as_str();
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = dest.split_once('#').map_or((dest, None), |(f, a)| (f, Some(a)));
            let target = if file.is_empty() { PathBuf::from(path) } else { normalize(&dir.join(file)) };
            let key = target.to_string_lossy().into_owned();
            let at = format!("{path}:{}: `{dest}`", link.line);
            if !file.is_empty() && !exists(&target) {
                broken.push(format!("{at}: no file {key}"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            match anchors.get(&key) {
                Some(found) if found.contains(anchor) => {}
                Some(_) => broken.push(format!("{at}: {key} has no heading whose anchor is #{anchor}")),
                None if key.ends_with(".md") => {
                    let text = std::fs::read_to_string(docs::root().join(&target)).unwrap_or_default();
                    if !outline(&text).0.contains(anchor) {
                        broken.push(format!("{at}: {key} has no heading whose anchor is #{anchor}"));
                    }
                }
                None => broken.push(format!("{at}: an anchor into {key}, which is not Markdown")),
            }
        }
    }
    broken
}

/// `a/b/../c` as `a/c`: links are relative to their document's folder.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_in_the_documents_resolves() {
    let texts: BTreeMap<String, String> = documents().into_iter().map(|p| (p.clone(), docs::read(&p))).collect();
    let broken = broken_links(&texts, |p| docs::root().join(p).exists());
    assert!(broken.is_empty(), "{} broken link(s):\n{}", broken.len(), broken.join("\n"));
}

#[test]
fn the_checker_finds_a_missing_file_a_missing_anchor_and_takes_a_good_link() {
    let texts = BTreeMap::from([
        ("pages/a.md".to_string(), "# A page\n\n## The box's layers\n\n[ok](#the-boxs-layers) [ok](b.md#b)\n\n[gone](c.md) [bad](b.md#nothing)\n[bad](#missing) [web](https://example.com/#x)\n".to_string()),
        ("pages/b.md".to_string(), "# B\n\n[ok](../README.md) [ok](a.md#a-page)\n".to_string()),
    ]);
    let exists = |p: &Path| ["pages/a.md", "pages/b.md", "README.md"].iter().any(|f| Path::new(f) == p);
    let broken = broken_links(&texts, exists);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].starts_with("pages/a.md:7: `c.md`: no file pages/c.md"), "{}", broken[0]);
    assert!(broken[1].starts_with("pages/a.md:7: `b.md#nothing`"), "{}", broken[1]);
    assert!(broken[2].starts_with("pages/a.md:8: `#missing`"), "{}", broken[2]);
}

#[test]
fn anchors_are_githubs_slugs_of_the_headings() {
    assert_eq!(slug("The contract as code (contract/)"), "the-contract-as-code-contract");
    assert_eq!(slug("The box's layers"), "the-boxs-layers");
    assert_eq!(slug("The lean hop (issue 23), so far"), "the-lean-hop-issue-23-so-far");
    assert_eq!(slug("Dependencies, and why"), "dependencies-and-why");
    let (anchors, _) = outline("# Tests\n\n## Tests\n\n### The contract as code (`contract/`)\n");
    let expected = ["tests", "tests-1", "the-contract-as-code-contract"].map(String::from);
    assert_eq!(anchors, expected.into_iter().collect());
}

/// Every `docs/<page>.md#anchor` a comment of the code, the scripts or the
/// generated contract cites names a page that exists and a heading on it.
#[test]
fn every_docs_page_and_anchor_the_code_cites_resolves() {
    let mut files = Vec::new();
    for dir in ["shared", "workers", "tests", "bench", "contract", "examples", "scripts", "deploy", ".ci"] {
        sources(&docs::root().join(dir), &mut files);
    }
    let mut broken = Vec::new();
    let mut cited = 0;
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for (n, line) in text.lines().enumerate() {
            for (at, _) in line.match_indices("docs/") {
                let tail = &line[at..];
                let end = tail.find(|c: char| !(c.is_alphanumeric() || "/.-_#".contains(c))).unwrap_or(tail.len());
                let cite = tail[..end].trim_end_matches(['.', '-']);
                let Some((page, anchor)) = cite.split_once('#').map_or(Some((cite, None)), |(p, a)| Some((p, Some(a))))
                else {
                    continue;
                };
                if !page.ends_with(".md") {
                    continue;
                }
                cited += 1;
                let at = format!("{}:{}: `{cite}`", file.strip_prefix(docs::root()).unwrap_or(&file).display(), n + 1);
                let Ok(target) = std::fs::read_to_string(docs::root().join(page)) else {
                    broken.push(format!("{at}: no file {page}"));
                    continue;
                };
                if anchor.is_some_and(|a| !outline(&target).0.contains(a)) {
                    broken.push(format!("{at}: {page} has no such heading"));
                }
            }
        }
    }
    assert!(cited > 40, "too few citations found ({cited}): is the scan broken?");
    assert!(broken.is_empty(), "{} broken citation(s):\n{}", broken.len(), broken.join("\n"));
}

/// The source, script and contract files under `dir` (build output and
/// installed packages aside).
fn sources(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "node_modules" | "target" | "dist") {
                sources(&path, into);
            }
        } else if [".rs", ".ts", ".mjs", ".sh", ".toml", ".yaml", ".yml", ".json", ".md"]
            .iter()
            .any(|e| name.ends_with(e))
            || !name.contains('.')
        {
            into.push(path);
        }
    }
}
