//! The workspace keeps its shape (issue 9): crates depend on each other in
//! one direction, no module outside the bus speaks lapin, modules within a
//! crate import each other one way. Sizes are reported, not policed line by
//! line: files over 500 lines and functions over 80 (tests aside) are listed
//! (`cargo nextest run -E 'test(/^shape::/)' --no-capture` shows the list)
//! as seams to split along; only a file over 700 lines or a function over
//! 120 fails. Pure reading of the checkout: no service is touched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Sizes above these are listed in the report.
const REPORT_FILE_LINES: usize = 500;
const REPORT_FN_LINES: usize = 80;
/// Sizes above these fail the test.
const MAX_FILE_LINES: usize = 700;
const MAX_FN_LINES: usize = 120;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").to_path_buf()
}

/// The workspace crates (`baton-*`) a crate's manifest depends on, dev-dependencies aside.
fn baton_dependencies(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(manifest)).expect("manifest readable");
    let doc: toml::Table = text.parse().expect("manifest parses");
    let deps = doc.get("dependencies").and_then(|d| d.as_table()).cloned().unwrap_or_default();
    deps.keys().filter(|name| name.starts_with("baton")).cloned().collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(ToString::to_string).collect()
}

#[test]
fn crates_depend_on_each_other_in_one_direction() {
    let allowed = [
        ("shared/domain/Cargo.toml", set(&[]), "the domain imports nothing of store, bus, agent"),
        ("shared/bus/Cargo.toml", set(&["baton-domain"]), "the bus imports the domain only"),
        ("shared/store/Cargo.toml", set(&["baton-domain"]), "the store imports the domain only"),
        ("shared/agent/Cargo.toml", set(&["baton-domain", "baton-store"]), "the agent imports nothing of the bus"),
    ];
    for (manifest, may, rule) in allowed {
        let extra: Vec<_> = baton_dependencies(manifest).difference(&may).cloned().collect();
        assert!(extra.is_empty(), "{rule}: {manifest} depends on {extra:?}");
    }
}

/// Every `.rs` file under `dir`.
fn sources(dir: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = vec![];
    walk(&root().join(dir), &mut out);
    out.sort();
    out
}

fn product_sources() -> Vec<PathBuf> {
    ["shared/domain/src", "shared/store/src", "shared/bus/src", "shared/agent/src", "workers/src", "bench/src"]
        .iter()
        .flat_map(|dir| sources(dir))
        .filter(|path| path.file_name().is_none_or(|name| name != "tests.rs"))
        .collect()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

#[test]
fn roles_and_the_agent_do_not_speak_lapin() {
    let mut offenders = vec![];
    for dir in ["shared/agent/src", "shared/domain/src", "shared/store/src", "workers/src"] {
        for path in sources(dir) {
            let text = std::fs::read_to_string(&path).expect("readable");
            if text.contains("lapin") || (dir != "workers/src" && text.contains("baton_bus")) {
                offenders.push(relative(&path));
            }
        }
    }
    assert!(offenders.is_empty(), "only the bus (and the bench's raw baseline) may name lapin: {offenders:?}");
}

/// Lines of a file before its `#[cfg(test)]` module.
fn product_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let tests = lines.windows(2).position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod "));
    tests.unwrap_or(lines.len())
}

/// Prints the sizes over the report's threshold, largest first, and fails
/// on any over the hard limit. `sizes` holds `(what, lines)`.
fn report_and_check(kind: &str, mut sizes: Vec<(String, usize)>, report: usize, max: usize) {
    sizes.retain(|(_, n)| *n > report);
    sizes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    println!("{kind} over {report} lines ({} found; more than {max} fails):", sizes.len());
    for (what, n) in &sizes {
        println!("  {n:>4}  {what}");
    }
    let over: Vec<String> =
        sizes.iter().filter(|(_, n)| *n > max).map(|(what, n)| format!("{what} ({n} lines)")).collect();
    assert!(over.is_empty(), "{kind} over {max} lines (split them along a seam): {over:?}");
}

#[test]
fn no_file_outgrows_seven_hundred_lines() {
    let sizes = product_sources()
        .iter()
        .map(|path| (relative(path), product_lines(&std::fs::read_to_string(path).expect("readable"))))
        .collect();
    report_and_check("files", sizes, REPORT_FILE_LINES, MAX_FILE_LINES);
}

/// The length of every function, tests and `#[cfg(test)]` modules aside.
#[derive(Default)]
struct FunctionSizes {
    found: Vec<(String, usize)>,
}

fn is_test_attr(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        path.is_ident("test")
            || path.segments.last().is_some_and(|s| s.ident == "test")
            || (path.is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test"))
    })
}

impl FunctionSizes {
    fn check(&mut self, name: &syn::Ident, attrs: &[syn::Attribute], block: &syn::Block) {
        if is_test_attr(attrs) {
            return;
        }
        let (start, end) = (name.span().start().line, block_end(block));
        self.found.push((name.to_string(), end - start + 1));
    }
}

fn block_end(block: &syn::Block) -> usize {
    block.brace_token.span.close().end().line
}

impl<'ast> Visit<'ast> for FunctionSizes {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test_attr(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.check(&f.sig.ident, &f.attrs, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.check(&f.sig.ident, &f.attrs, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }
}

#[test]
fn no_function_outgrows_a_hundred_and_twenty_lines() {
    let mut sizes = vec![];
    for path in product_sources() {
        let file = syn::parse_file(&std::fs::read_to_string(&path).expect("readable")).expect("parses");
        let mut visitor = FunctionSizes::default();
        visitor.visit_file(&file);
        sizes.extend(visitor.found.into_iter().map(|(name, n)| (format!("{}: {name}", relative(&path)), n)));
    }
    report_and_check("functions", sizes, REPORT_FN_LINES, MAX_FN_LINES);
}

/// The top-level module a source file belongs to (`runner/mod.rs` → `runner`).
fn module_of(src: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(src).expect("under src").to_string_lossy().to_string();
    rel.split('/').next().expect("a name").trim_end_matches(".rs").to_string()
}

/// `a -> b` whenever a module's own (non-test) code names `crate::b`.
fn module_edges(src_dir: &str) -> BTreeSet<(String, String)> {
    let src = root().join(src_dir);
    let mut edges = BTreeSet::new();
    for path in sources(src_dir).iter().filter(|p| p.file_name().is_none_or(|n| n != "tests.rs")) {
        let text = std::fs::read_to_string(path).expect("readable");
        let own: String = text.lines().take(product_lines(&text)).collect::<Vec<_>>().join("\n");
        let from = module_of(&src, path);
        for (i, _) in own.match_indices("crate::") {
            let to: String = own[i + 7..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            if !to.is_empty() && to != from && from != "lib" {
                edges.insert((from.clone(), to));
            }
        }
    }
    edges
}

/// A cycle among `edges`, if there is one.
fn find_cycle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeSet<(String, String)>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            return Some(path[at..].iter().cloned().chain([node.to_string()]).collect());
        }
        if !done.insert(node.to_string()) {
            return None;
        }
        path.push(node.to_string());
        for (_, next) in edges.iter().filter(|(from, _)| from == node) {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges.iter().find_map(|(from, _)| visit(from, edges, &mut vec![], &mut done))
}

#[test]
fn modules_within_a_crate_import_each_other_one_way() {
    for dir in ["shared/domain/src", "shared/store/src", "shared/bus/src", "shared/agent/src", "workers/src"] {
        let edges = module_edges(dir);
        assert!(!edges.is_empty() || dir == "shared/bus/src", "{dir}: the scan found no imports at all");
        assert_eq!(find_cycle(&edges), None, "{dir}: modules import each other in a cycle");
    }
}
