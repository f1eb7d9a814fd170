//! The first step of every invocation: its system prompt and its brief.

use baton_domain::profiles::prompt::system_prompt;
use baton_domain::profiles::{Profile, Skill};
use baton_domain::run::journal::JournalEvent;
use baton_domain::tools::{self, ToolName};
use baton_store::invocations::steps::Step;
use baton_store::invocations::Invocation;
use baton_store::journal::Event;
use baton_store::profiles;
use serde_json::{json, Value};

use crate::transcript;
use crate::Error;

/// The first step of every invocation: the system prompt (its own profile,
/// tools and skills) and its brief, with the journal events that say so.
pub fn prompt_step(inv: &Invocation, profile: &Profile, surface: &[ToolName], skills: &[Skill]) -> (Value, Vec<Event>) {
    let messages = json!([
        {"role": "system", "content": system_prompt(profile, surface, skills)},
        {"role": "user", "content": inv.brief},
    ]);
    let id = Some(inv.id);
    let evs = vec![
        Event::new(JournalEvent::ContextAssembled, id, json!({"briefChars": inv.brief.chars().count()})),
        Event::new(
            JournalEvent::SkillScopesResolved,
            id,
            json!({"profileId": profile.id, "skills": skills.iter().map(|s| &s.id).collect::<Vec<_>>()}),
        ),
        Event::new(JournalEvent::ModelBindingResolved, id, json!({"provider": profile.model.provider_name()})),
    ];
    (json!({"messages": messages}), evs)
}

/// The first step of a claimed invocation, made inside the claim's
/// transaction, so a new invocation costs no transaction of its own before
/// its first model call, and its loop starts from what the claim read.
pub struct Opening {
    /// The journal events that say what the prompt holds.
    pub events: Vec<Event>,
    /// The prompt, as the transcript's first step.
    pub prompt: Step,
    pub profile: Profile,
    pub skills: Vec<Skill>,
}

impl Opening {
    /// Reads the invocation's profile (from `profiles`, a copy of the
    /// profiles file at the version the claim read) and skills, and renders
    /// its prompt; `None` when the profile is gone (the loop reports that).
    pub async fn read(
        c: &impl baton_store::GenericClient,
        inv: &Invocation,
        profiles: &profiles::Snapshot,
    ) -> Result<Option<Self>, Error> {
        let Some(profile) = profiles.profile(&inv.profile_id)? else {
            return Ok(None);
        };
        Self::of(c, inv, profile).await.map(Some)
    }

    async fn of(c: &impl baton_store::GenericClient, inv: &Invocation, profile: Profile) -> Result<Self, Error> {
        let skills = profiles::skills(c, &profile.skills).await?;
        let surface = tools::surface(&tool_names(&profile), inv.kind);
        let (payload, events) = prompt_step(inv, &profile, &surface, &skills);
        let prompt = Step { seq: 0, kind: transcript::PROMPT.to_string(), payload };
        Ok(Self { events, prompt, profile, skills })
    }
}

/// The tools a profile's agent may call. An external agent's (a command's,
/// a coding CLI's) result is recorded through the workspace tools, whatever
/// its profile lists.
pub(crate) fn tool_names(profile: &Profile) -> Vec<ToolName> {
    match profile.model.on_interrupt() {
        Some(_) => {
            vec![
                ToolName::WorkspaceRead,
                ToolName::WorkspaceWrite,
                ToolName::WorkspaceCommit,
                ToolName::WorkspaceFinish,
            ]
        }
        _ => profile.tool_names(),
    }
}
