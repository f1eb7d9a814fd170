//! Policies: pure decisions about what may happen.
//!
//! - [`disclosure`]: what an agent may see of a handoff, secrets and personal data redacted.
//! - [`budget`]: run budgets (tokens, model calls, tool calls, wall clock) and the pure check.
//! - [`limits`]: fleet-wide limits on model calls (`[[limits]]`): matching a binding, figures per window.
//! - [`permissions`]: a request's forbidden actions and confirmations as a coding CLI's permissions.
//! - [`priority`]: which waiting invocation a worker's free slot goes to (priority, with aging).
//! - [`sandbox`]: the box an external agent runs in: its environment, output caps, interruption policy.

pub mod budget;
pub mod disclosure;
pub mod limits;
pub mod permissions;
pub mod priority;
pub mod sandbox;
