//! The run workspace's pure rules: logical paths, what an agent may see,
//! read windows, patches and commit modes. Storage lives in Postgres.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::tools::args;
use crate::tools::error::{codes, ToolError};

/// Roots an agent sees; everything else (input/, agent-results/, …) is hidden.
pub const VISIBLE_ROOTS: [&str; 5] = ["output/", "scratch/", "plan/", "summaries/", "persist/"];
/// The reply file a commit publishes by default.
pub const DEFAULT_BODY_PATH: &str = "output/main.md";
pub const MAX_READ_LINES: usize = 1200;
pub const MAX_READ_CHARS: usize = 80_000;
pub const MAX_FULL_READ_BYTES: usize = 256 * 1024;

/// Validates a logical path: relative, `/`-separated, no `..`, no NUL, visible.
pub fn visible_path(raw: &str) -> Result<String, ToolError> {
    let path = normalize(raw)?;
    if !VISIBLE_ROOTS.iter().any(|root| path.starts_with(root)) {
        return Err(ToolError::new(
            codes::PATH_NOT_VISIBLE,
            format!("`{path}` is outside the folders you can use: {}.", VISIBLE_ROOTS.join(", ")),
        ));
    }
    Ok(path)
}

/// The longest logical path, and the longest name inside it, in bytes (as
/// on common file systems, so a workspace can always be written out to disk).
pub const MAX_PATH_BYTES: usize = 512;
pub const MAX_NAME_BYTES: usize = 255;

fn normalize(raw: &str) -> Result<String, ToolError> {
    let invalid = |why: &str| {
        ToolError::new(codes::INVALID_PATH, format!("`{}` is not a valid workspace path: {why}.", shown(raw)))
    };
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(invalid("it is empty"));
    }
    if trimmed.len() > MAX_PATH_BYTES {
        return Err(invalid(&format!("it is longer than {MAX_PATH_BYTES} bytes; use a shorter name")));
    }
    if trimmed.chars().any(is_hidden_control) {
        return Err(invalid("it contains control characters; use letters, digits, `-`, `_` and `.`"));
    }
    if trimmed.split('/').any(|name| name.len() > MAX_NAME_BYTES) {
        return Err(invalid(&format!("a name in it is longer than {MAX_NAME_BYTES} bytes")));
    }
    if trimmed.contains('\0') || trimmed.contains('\\') {
        return Err(invalid("use plain `/`-separated names"));
    }
    if trimmed.starts_with('/') || trimmed.chars().nth(1) == Some(':') {
        return Err(invalid("use a relative path such as output/main.md"));
    }
    let parts: Vec<&str> = trimmed.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.contains(&"..") {
        return Err(invalid("`..` is not allowed"));
    }
    Ok(parts.join("/") + if trimmed.ends_with('/') { "/" } else { "" })
}

/// Control characters (line breaks, escapes, DEL, C1) and the invisible
/// bidirectional overrides that make a name display as another one.
fn is_hidden_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A path as an error message may repeat it: escaped and cut short, so a
/// bad path cannot flood or garble what the agent reads.
fn shown(raw: &str) -> String {
    const SHOWN_CHARS: usize = 80;
    let escaped: String = raw
        .chars()
        .take(SHOWN_CHARS)
        .map(|c| if is_hidden_control(c) { c.escape_unicode().to_string() } else { c.to_string() })
        .collect();
    if raw.chars().nth(SHOWN_CHARS).is_some() {
        format!("{escaped}…")
    } else {
        escaped
    }
}

/// A folder prefix for listing (`""` means the whole visible workspace).
pub fn list_prefix(raw: Option<&str>) -> Result<String, ToolError> {
    match raw.map(str::trim).filter(|p| !p.is_empty() && *p != "." && *p != "/") {
        None => Ok(String::new()),
        Some(p) => {
            let path = normalize(p)?;
            let folder = if path.ends_with('/') { path } else { format!("{path}/") };
            if VISIBLE_ROOTS.iter().any(|r| folder.starts_with(r) || r.starts_with(folder.as_str())) {
                Ok(folder)
            } else {
                Err(ToolError::new(codes::PATH_NOT_VISIBLE, format!("`{p}` is outside the folders you can use.")))
            }
        }
    }
}

/// The listing an agent sees: visible files under `prefix`, at most `depth` levels below it.
pub fn render_listing(paths: &[(String, usize)], prefix: &str, depth: usize) -> String {
    let mut lines: Vec<String> = paths
        .iter()
        .filter(|(p, _)| p.starts_with(prefix) && VISIBLE_ROOTS.iter().any(|r| p.starts_with(r)))
        .filter(|(p, _)| p[prefix.len()..].matches('/').count() < depth.max(1) + usize::from(prefix.is_empty()))
        .take(200)
        .map(|(p, size)| format!("{p} ({size} bytes)"))
        .collect();
    if lines.is_empty() {
        return "The workspace has no files here yet.".to_string();
    }
    lines.sort();
    lines.join("\n")
}

pub fn sha256_hex(content: &str) -> String {
    Sha256::digest(content.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Which part of a file to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadWindow {
    Whole,
    Lines { start: usize, count: usize },
    Chars { start: usize, max: usize },
}

impl ReadWindow {
    pub fn from_args(args: &ReadArgs) -> Result<Self, ToolError> {
        let num = |n: Option<u64>| n.map(|n| n as usize);
        match (num(args.start_line), num(args.line_count), num(args.start_char), num(args.max_chars)) {
            (None, None, None, None) => Ok(ReadWindow::Whole),
            (Some(_), _, Some(_), _)
            | (Some(_), _, _, Some(_))
            | (_, Some(_), Some(_), _)
            | (_, Some(_), _, Some(_)) => Err(ToolError::new(
                codes::MIXED_READ_RANGE,
                "Use either start_line/line_count or start_char/max_chars, not both.",
            )),
            (start, count, None, None) => {
                let (start, count) = (start.unwrap_or(1), count.unwrap_or(MAX_READ_LINES));
                if start == 0 || count == 0 || count > MAX_READ_LINES {
                    return Err(ToolError::new(
                        codes::INVALID_LINE_RANGE,
                        format!("start_line starts at 1 and line_count is 1 to {MAX_READ_LINES}."),
                    ));
                }
                Ok(ReadWindow::Lines { start, count })
            }
            (None, None, start, max) => {
                let max = max.unwrap_or(MAX_READ_CHARS);
                if max == 0 || max > MAX_READ_CHARS {
                    return Err(ToolError::new(
                        codes::INVALID_LINE_RANGE,
                        format!("max_chars is 1 to {MAX_READ_CHARS}."),
                    ));
                }
                Ok(ReadWindow::Chars { start: start.unwrap_or(0), max })
            }
        }
    }

    pub fn is_whole(self) -> bool {
        self == ReadWindow::Whole
    }
}

/// Renders a read: a header with the range and checksum, then numbered lines.
pub fn render_read(path: &str, content: &str, window: ReadWindow) -> Result<String, ToolError> {
    let sha = sha256_hex(content);
    let total = content.lines().count();
    match window {
        ReadWindow::Whole if content.len() > MAX_FULL_READ_BYTES || total > MAX_READ_LINES => Err(ToolError::new(
            codes::READ_TOO_LARGE,
            format!("`{path}` has {total} lines; read it in parts with start_line and line_count."),
        )),
        ReadWindow::Whole => Ok(numbered(path, content, 1, total, total, &sha)),
        ReadWindow::Lines { start, count } => {
            if start > total.max(1) {
                return Err(ToolError::new(codes::INVALID_LINE_RANGE, format!("`{path}` has only {total} lines.")));
            }
            let end = (start + count - 1).min(total);
            Ok(numbered(path, content, start, end, total, &sha))
        }
        ReadWindow::Chars { start, max } => {
            let text: String = content.chars().skip(start).take(max).collect();
            let end = start + text.chars().count();
            Ok(format!("{path} (characters {start}..{end} of {}, sha256 {sha})\n{text}", content.chars().count()))
        }
    }
}

fn numbered(path: &str, content: &str, start: usize, end: usize, total: usize, sha: &str) -> String {
    let mut out = format!("{path} (lines {start}-{end} of {total}, sha256 {sha})");
    for (n, line) in content.lines().enumerate().skip(start - 1).take(end + 1 - start) {
        out.push_str(&format!("\n{} | {line}", n + 1));
    }
    out
}

/// Applies a patch; the caller has checked that the file was read and is unchanged.
pub fn apply_patch(content: &str, old: &str, new: &str, replace_all: bool) -> Result<String, ToolError> {
    if old.is_empty() {
        return Err(ToolError::invalid_arguments("`old_string` must not be empty."));
    }
    match content.matches(old).count() {
        0 => Err(ToolError::new(
            codes::PATCH_OLD_STRING_NOT_FOUND,
            "`old_string` does not appear in the file; read it again and copy the text exactly.",
        )),
        1 => Ok(content.replacen(old, new, 1)),
        n if replace_all => {
            let _ = n;
            Ok(content.replace(old, new))
        }
        n => Err(ToolError::new(
            codes::PATCH_NOT_UNIQUE,
            format!("`old_string` appears {n} times; include more surrounding text or set replace_all."),
        )),
    }
}

/// Replace what is there, or append to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CommitMode {
    #[default]
    Replace,
    Append,
}

impl CommitMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CommitMode::Replace => "replace",
            CommitMode::Append => "append",
        }
    }

    /// The reply after this commit, given the reply before it.
    pub fn apply(self, previous: Option<&str>, content: &str) -> String {
        match (self, previous) {
            (CommitMode::Append, Some(prev)) if !prev.is_empty() => format!("{prev}\n\n{content}"),
            _ => content.to_string(),
        }
    }
}

/// List files in the shared workspace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListArgs {
    /// A folder such as output/; the whole workspace when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4))]
    pub depth: Option<u64>,
}

/// Read a workspace file. Give start_line and line_count, or start_char and max_chars, or neither for the whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadArgs {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub start_line: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1200))]
    pub line_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub start_char: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 80_000))]
    pub max_chars: Option<u64>,
}

/// Write a workspace file. To replace a file that already exists, read it first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// For example output/main.md.
    pub path: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CommitMode>,
}

/// Replace text in a workspace file you have read. old_string must appear exactly once unless replace_all is true.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PatchArgs {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_all: Option<bool>,
}

/// Publish a workspace file as the reply the user will receive. You may edit and commit again; the latest commit wins. Close with workspace_finish.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommitArgs {
    /// Defaults to output/main.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CommitMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl CommitArgs {
    /// Parses `workspace_commit`'s arguments; an unknown mode keeps its own error code.
    pub fn parse(args: &serde_json::Value) -> Result<Self, ToolError> {
        args::parse(args).map_err(|e: ToolError| {
            if e.message.starts_with("`mode`") {
                ToolError::new(codes::COMMIT_MODE_INVALID, e.message)
            } else {
                e
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_logical_and_visible() {
        assert_eq!(visible_path("output/main.md").unwrap(), "output/main.md");
        assert_eq!(visible_path("./output//a.md").unwrap(), "output/a.md");
        assert_eq!(visible_path("/etc/passwd").unwrap_err().code, codes::INVALID_PATH);
        assert_eq!(visible_path("output/../input/x").unwrap_err().code, codes::INVALID_PATH);
        assert_eq!(visible_path("C:/x").unwrap_err().code, codes::INVALID_PATH);
        assert_eq!(visible_path("input/request.json").unwrap_err().code, codes::PATH_NOT_VISIBLE);
        assert_eq!(visible_path("agent-results/x.json").unwrap_err().code, codes::PATH_NOT_VISIBLE);
    }

    #[test]
    fn paths_have_a_length_limit() {
        let longest = format!("output/{}", "a/".repeat((MAX_PATH_BYTES - 8) / 2) + "b");
        assert!(longest.len() <= MAX_PATH_BYTES);
        assert!(visible_path(&longest).is_ok());
        let too_long = format!("output/{}", "a/".repeat(MAX_PATH_BYTES));
        let error = visible_path(&too_long).unwrap_err();
        assert_eq!(error.code, codes::INVALID_PATH);
        assert!(error.message.contains("longer than 512 bytes"), "{}", error.message);
        assert!(error.message.chars().count() < 200, "the message does not repeat the whole path: {}", error.message);
        let long_name = format!("output/{}.md", "n".repeat(MAX_NAME_BYTES));
        assert!(visible_path(&long_name).unwrap_err().message.contains("a name in it"));
        assert!(visible_path(&format!("output/{}.md", "n".repeat(MAX_NAME_BYTES - 3))).is_ok());
    }

    #[test]
    fn paths_refuse_control_characters() {
        for bad in [
            "output/a\nb.md",
            "output/\u{1b}[31mred.md",
            "output/a\tb",
            "output/x\u{7f}",
            "output/\u{85}x",
            "output/\u{202e}dm.exe",
            "output/a\rb",
        ] {
            let error = visible_path(bad).unwrap_err();
            assert_eq!(error.code, codes::INVALID_PATH, "{bad:?}");
            assert!(error.message.contains("control characters"), "{bad:?}: {}", error.message);
            assert!(!error.message.chars().any(is_hidden_control), "the message itself is clean: {:?}", error.message);
        }
        // Ordinary names, including non-ASCII ones, are fine.
        for good in ["output/报告.md", "output/résumé-v2_final.md", "scratch/notes (1).txt"] {
            assert!(visible_path(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn reads_are_numbered_and_windowed() {
        let text = "a\nb\nc\n";
        let whole = render_read("output/x.md", text, ReadWindow::Whole).unwrap();
        assert!(whole.contains("lines 1-3 of 3"));
        assert!(whole.ends_with("1 | a\n2 | b\n3 | c"));
        let part = render_read("output/x.md", text, ReadWindow::Lines { start: 2, count: 1 }).unwrap();
        assert!(part.ends_with("2 | b"));
        assert_eq!(
            render_read("output/x.md", text, ReadWindow::Lines { start: 9, count: 1 }).unwrap_err().code,
            codes::INVALID_LINE_RANGE
        );
    }

    #[test]
    fn read_windows_cannot_be_mixed() {
        let args = ReadArgs { start_line: Some(1), max_chars: Some(10), ..Default::default() };
        assert_eq!(ReadWindow::from_args(&args).unwrap_err().code, codes::MIXED_READ_RANGE);
        let args = ReadArgs { line_count: Some(5000), ..Default::default() };
        assert_eq!(ReadWindow::from_args(&args).unwrap_err().code, codes::INVALID_LINE_RANGE);
    }

    #[test]
    fn patches_need_a_unique_match_unless_replace_all() {
        assert_eq!(apply_patch("a b a", "b", "c", false).unwrap(), "a c a");
        assert_eq!(apply_patch("a b a", "a", "c", false).unwrap_err().code, codes::PATCH_NOT_UNIQUE);
        assert_eq!(apply_patch("a b a", "a", "c", true).unwrap(), "c b c");
        assert_eq!(apply_patch("a", "z", "c", false).unwrap_err().code, codes::PATCH_OLD_STRING_NOT_FOUND);
    }

    #[test]
    fn commit_modes_replace_or_append_the_reply() {
        assert_eq!(CommitMode::Replace.apply(Some("old"), "new"), "new");
        assert_eq!(CommitMode::Append.apply(Some("old"), "new"), "old\n\nnew");
        assert_eq!(CommitMode::Append.apply(None, "new"), "new");
        let merge = CommitArgs::parse(&serde_json::json!({"mode": "merge"})).unwrap_err();
        assert_eq!(merge.code, codes::COMMIT_MODE_INVALID);
        assert!(merge.message.contains("append"), "{}", merge.message);
    }

    #[test]
    fn listings_show_visible_files_only() {
        let files = vec![
            ("output/main.md".to_string(), 5),
            ("input/request.json".to_string(), 9),
            ("scratch/a/b/c.md".to_string(), 1),
        ];
        let text = render_listing(&files, "", 2);
        assert!(text.contains("output/main.md (5 bytes)"));
        assert!(!text.contains("input/"));
        assert!(!text.contains("scratch/a/b/c.md"));
        assert!(render_listing(&files, "scratch/", 4).contains("scratch/a/b/c.md"));
    }
}
