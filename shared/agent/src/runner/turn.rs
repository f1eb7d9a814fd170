//! What a model is asked for an invocation's next turn, and what kind of
//! turn it answered.

use baton_domain::tools::{self, ToolName};
use serde_json::Value;

use super::Claimed;
use crate::providers::{ModelRequest, ModelTurn};
use crate::transcript;

/// What a model is asked for an invocation's next turn: the conversation so
/// far and the specs of the tools it may call.
pub(super) struct Asking {
    messages: Vec<Value>,
    specs: Vec<Value>,
}

impl Asking {
    pub(super) fn of(c: &Claimed<'_>) -> Self {
        Self { messages: transcript::messages(&c.steps), specs: c.surface.iter().map(|t| tools::spec(*t)).collect() }
    }

    pub(super) fn request<'a>(&'a self, c: &'a Claimed<'_>, turns: usize) -> ModelRequest<'a> {
        ModelRequest {
            profile: &c.profile,
            messages: &self.messages,
            tools: &self.specs,
            session_id: format!("{}:{}", c.inv.run_id, c.inv.id),
            turn_index: turns,
            run_id: c.inv.run_id,
            invocation_id: c.inv.id,
            priority: c.inv.priority,
            allowance: c.budget.allowance(),
        }
    }
}

fn is_closing(name: &str) -> bool {
    ToolName::parse(name).is_some_and(ToolName::is_closing)
}

/// A turn that calls a closing tool (finish, handoff, return) before its last call.
pub(super) fn closes_before_its_last_call(turn: &ModelTurn) -> bool {
    turn.tool_calls.iter().rev().skip(1).any(|call| is_closing(&call.name))
}

/// Whether a turn commits together with the calls it asks for: it asks for
/// some, and closes (if at all) with its last. Any other turn is stored on
/// its own, and the loop judges it.
pub(super) fn stores_with_its_calls(turn: &ModelTurn) -> bool {
    !turn.tool_calls.is_empty() && !closes_before_its_last_call(turn)
}
