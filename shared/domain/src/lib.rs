//! Baton's pure domain: everything that decides, validates or renders, and
//! nothing that touches a socket, a clock-driven runtime or a database.
//!
//! # Layout
//! - [`request`]: the bridge's `HandoffRequest`, parsed and validated at the edge, and its log's events (`HandoffEvent`).
//! - [`reply`]: humanized bridge replies and cutting them into chat-sized parts.
//! - [`language`]: the reply languages.
//! - [`bridge`]: the status and reply messages a bridge receives.
//! - [`contract`]: the public surface's own words: each message's `type`, the error codes.
//! - [`callback`]: status callbacks: the origin allow-list, Standard Webhooks signing, URLs safe to log.
//! - [`conversation`]: questions agents ask their users and the bridge's answers, a bridge's cancel, and one chat's requests taking turns (CONTRACT §6).
//! - [`fleet`]: the fleet's queues and the id-only messages between its roles.
//! - [`outgoing`]: the size bound of outgoing bodies, cutting them, retry backoff.
//! - [`profiles`]: the agent profiles file and its validation.
//! - [`limits`]: fleet-wide limits on model calls (`[[limits]]`): matching a binding, figures per window.
//! - [`priority`]: which waiting invocation a worker's free slot goes to (priority, with aging).
//! - [`budget`]: run budgets (tokens, model calls, tool calls, wall clock) and the pure check.
//! - [`tool_name`]: the model-visible tools by name, and which end a turn or belong to owners.
//! - [`tools`]: the tool surface an invocation sees, and the specs a model receives.
//! - [`tool_args`]: parsing a tool's arguments and deriving its schema from one type.
//! - [`handoff`]: `agent_handoff` argument parsing and the handoff policies.
//! - [`delegation`]: `agent_delegate`, `agent_await`, `task_return`: parsing, policies, rendering.
//! - [`brief`]: the markdown briefs agents read first.
//! - [`disclosure`]: the disclosure policy: what an agent may see, secrets and personal data redacted.
//! - [`prompt`]: the default system prompt.
//! - [`sandbox`]: the box an external agent runs in: its environment, output caps, interruption policy.
//! - [`workspace`]: logical paths, reads, patches, commit modes.
//! - [`state`]: run, invocation and task state machines.
//! - [`journal`]: the run journal's event names (`JournalEvent`).
//! - [`schema`]: whether a database's migrations are the ones a binary was built with.
//! - [`error`]: recoverable tool errors.
//! - [`wire`]: `wire_enum!`, the one way a closed set of strings (statuses, sources, tool names, languages, event names) is declared.

pub mod bridge;
pub mod brief;
pub mod budget;
pub mod callback;
pub mod contract;
pub mod conversation;
pub mod delegation;
pub mod disclosure;
pub mod error;
pub mod fleet;
pub mod handoff;
pub mod journal;
pub mod language;
pub mod limits;
pub mod outgoing;
pub mod priority;
pub mod profiles;
pub mod prompt;
pub mod reply;
pub mod request;
pub mod sandbox;
pub mod schema;
pub mod state;
pub mod tool_args;
pub mod tool_name;
pub mod tools;
pub mod wire;
pub mod workspace;

pub use error::ToolError;
pub use language::Language;
