//! Baton's pure domain: everything that decides, validates or renders, and
//! nothing that touches a socket, a clock-driven runtime or a database.
//!
//! # Layout
//! - [`protocol`]: the bridge protocol (docs/bridge-protocol.md): requests, replies,
//!   status messages, conversations, callbacks, the contract's own words, and
//!   the events of a request's log (`HandoffEvent`).
//! - [`tools`]: the model-visible tools: arguments, surfaces and specs,
//!   handoff, delegation, the workspace, and the errors an agent can act on.
//! - [`tool_name`]: the tools by name, and which end a turn or belong to owners
//!   (profiles name them, so they sit below both).
//! - [`policy`]: decisions about what may happen: disclosure, budgets,
//!   fleet-wide model limits, priority, the external agent's box.
//! - [`run`]: run, invocation and task state machines, and the journal's events (`JournalEvent`).
//! - [`profiles`]: agent profiles, the default system prompt and the briefs agents read first.
//! - [`opening`]: what an invocation opens with: the tools it sees, its system prompt and brief.
//! - [`projects`]: the repositories coding agents work on, branch names and diffs' summaries.
//! - [`console`]: the operator's console: the names it answers to, where its
//!   POSTs may come from, its session cookies and the login rate limit.
//! - [`fleet`]: the fleet's queues and the id-only messages between its roles.
//! - [`schema`]: whether a database's migrations are the ones a binary was built with.
//! - [`wire`]: `wire_enum!`, the one way a closed set of strings (statuses, sources, tool names, languages, event names) is declared.

pub mod console;
pub mod fleet;
pub mod opening;
pub mod policy;
pub mod profiles;
pub mod projects;
pub mod protocol;
pub mod run;
pub mod schema;
pub mod tool_name;
pub mod tools;
pub mod wire;

pub use protocol::language::Language;
pub use tools::error::ToolError;
