//! Internal messages carry ids only: Postgres is the source of truth, a
//! message only says "look at this row now".

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// "Run (or resume) this invocation."
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunInvocation {
    pub invocation_id: Uuid,
    pub run_id: Uuid,
}

/// "This run reached a terminal state."
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFinished {
    pub run_id: Uuid,
}
