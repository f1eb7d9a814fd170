//! The default system prompt: who the agent is and how it ends its part,
//! described from its own point of view and from the tools it really has.

use crate::profiles::{Profile, Skill};
use crate::tool_name::ToolName;

/// The system prompt: the profile's own words, the shared workspace, the
/// profile's skills, and how this agent ends its part.
pub fn system_prompt(profile: &Profile, surface: &[ToolName], skills: &[Skill]) -> String {
    let mut parts = vec![];
    let own = profile.system_prompt.trim();
    parts.push(if own.is_empty() {
        format!("You are {}. {}", profile.name, profile.description)
    } else {
        own.to_string()
    });
    parts.push(
        "You work in a shared workspace with other agents. Write your work to workspace files (output/main.md holds the reply for the user)."
            .to_string(),
    );
    if !skills.is_empty() {
        let packs: Vec<String> = skills.iter().map(|s| format!("### {}\n{}", s.id, s.instructions.trim())).collect();
        parts.push(format!("## Skills\n{}", packs.join("\n\n")));
    }
    parts.push(closing_guidance(surface));
    parts.join("\n\n")
}

fn closing_guidance(surface: &[ToolName]) -> String {
    let has = |t| surface.contains(&t);
    let mut lines = vec![];
    if has(ToolName::TaskReturn) {
        lines.push("When your task is done, call task_return with a clear summary. Do not answer in plain text.");
    }
    if has(ToolName::WorkspaceCommit) {
        lines
            .push("Use workspace_commit to publish the reply the user will receive; you may commit again after edits.");
    }
    if has(ToolName::WorkspaceFinish) {
        lines.push("Do not answer in plain text: when the work is ready, commit it and call workspace_finish.");
    } else if has(ToolName::AgentHandoff) {
        lines
            .push("When your part is done, hand the next stage to another agent with agent_handoff and a clear brief.");
    }
    if has(ToolName::AgentHandoff) {
        lines.push("After a successful handoff your part is complete: make no further tool calls.");
    }
    if has(ToolName::AskUser) {
        lines.push(
            "You can ask the user a question with ask_user; the answer comes back as its result. Ask before any action the \
             brief says the user must confirm, and when the request is too unclear to act on; otherwise do not interrupt \
             the user. If the user does not answer in time, go on with a safe choice or finish and say what you need.",
        );
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::{DelegationPolicy, ModelBinding};

    fn profile() -> Profile {
        Profile {
            id: "editor".into(),
            name: "Editor".into(),
            description: "Edits drafts.".into(),
            system_prompt: String::new(),
            tools: vec![],
            skills: vec![],
            model: ModelBinding::Scripted { script: vec![] },
            delegation: DelegationPolicy::default(),
            ask_timeout: None,
            model_limit: None,
        }
    }

    #[test]
    fn default_agent_system_prompt_describes_handoff_from_current_agent_view() {
        let text = system_prompt(&profile(), &[ToolName::WorkspaceCommit, ToolName::AgentHandoff], &[]);
        assert!(text.starts_with("You are Editor. Edits drafts."));
        assert!(text.contains("hand the next stage to another agent with agent_handoff"));
        assert!(text.contains("After a successful handoff your part is complete"));
        assert!(!text.contains("workspace_finish"));
        for term in ["invocation", "task id", "queue", "provider"] {
            assert!(!text.to_lowercase().contains(term));
        }
    }

    #[test]
    fn a_finishing_agent_is_told_to_finish_not_to_answer_in_plain_text() {
        let text = system_prompt(&profile(), &[ToolName::WorkspaceCommit, ToolName::WorkspaceFinish], &[]);
        assert!(text.contains("call workspace_finish"));
        assert!(!text.contains("agent_handoff"));
    }

    #[test]
    fn enabled_skills_are_part_of_the_prompt() {
        let skill = Skill {
            id: "plain-chinese".into(),
            description: String::new(),
            instructions: "Write short sentences.".into(),
        };
        let text = system_prompt(&profile(), &[ToolName::WorkspaceFinish], &[skill]);
        assert!(text.contains("## Skills\n### plain-chinese\nWrite short sentences."), "{text}");
    }

    #[test]
    fn handoff_target_profiles_do_not_require_finish_tool() {
        // An intermediate stage with only handoff is a valid profile: it is
        // told to hand off, never to finish.
        let text = system_prompt(&profile(), &[ToolName::WorkspaceWrite, ToolName::AgentHandoff], &[]);
        assert!(text.contains("agent_handoff"));
        assert!(!text.contains("workspace_finish"));
    }

    #[test]
    fn an_agent_that_can_ask_is_told_when_to_ask() {
        let text = system_prompt(&profile(), &[ToolName::AskUser, ToolName::WorkspaceFinish], &[]);
        assert!(text.contains("You can ask the user a question with ask_user"), "{text}");
        assert!(text.contains("the user must confirm"), "{text}");
        assert!(!system_prompt(&profile(), &[ToolName::WorkspaceFinish], &[]).contains("ask_user"));
    }
}
