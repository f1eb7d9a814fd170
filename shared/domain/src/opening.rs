//! An invocation's opening: the tools it sees and the first step of its
//! transcript (the system prompt and its brief), pure functions of its
//! profile, skills, role and brief.

use serde_json::{json, Value};

use crate::profiles::{prompt, Profile, Skill};
use crate::run::state::InvocationKind;
use crate::tool_name::ToolName;
use crate::tools;

/// The tools an invocation of `profile` sees: its profile's list narrowed
/// by its role ([`tools::surface`]). An external agent's (a command's, a
/// coding CLI's) result is recorded through the workspace tools, whatever
/// its profile lists.
pub fn surface(profile: &Profile, kind: InvocationKind) -> Vec<ToolName> {
    let listed = match profile.model.on_interrupt() {
        Some(_) => vec![
            ToolName::WorkspaceRead,
            ToolName::WorkspaceWrite,
            ToolName::WorkspaceCommit,
            ToolName::WorkspaceFinish,
        ],
        None => profile.tool_names(),
    };
    tools::surface(&listed, kind)
}

/// An invocation's first transcript step, as the model receives it: the
/// system prompt (its profile, tools and skills) and its brief. A pure
/// function of them, so a stored transcript may keep the profiles file's
/// version instead of the text, and render it again when read.
pub fn first_step(profile: &Profile, kind: InvocationKind, skills: &[Skill], brief: &str) -> Value {
    json!({"messages": [
        {"role": "system", "content": prompt::system_prompt(profile, &surface(profile, kind), skills)},
        {"role": "user", "content": brief},
    ]})
}
