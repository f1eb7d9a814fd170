//! The first step of every invocation: its system prompt and its brief.

use baton_domain::opening;
use baton_domain::profiles::{Profile, Skill};
use baton_domain::run::journal::JournalEvent;
use baton_domain::tools::ToolName;
use baton_store::invocations::steps::{self, Step};
use baton_store::invocations::Invocation;
use baton_store::journal::Event;
use baton_store::profiles;
use serde_json::{json, Value};

use crate::transcript;
use crate::Error;

/// The first step of every invocation: the system prompt (its own profile,
/// tools and skills) and its brief, with the journal events that say so.
pub fn prompt_step(inv: &Invocation, profile: &Profile, skills: &[Skill]) -> (Value, Vec<Event>) {
    let id = Some(inv.id);
    let evs = vec![
        Event::new(JournalEvent::ContextAssembled, id, json!({"briefChars": inv.brief.chars().count()})),
        Event::new(
            JournalEvent::SkillScopesResolved,
            id,
            json!({"skills": skills.iter().map(|s| &s.id).collect::<Vec<_>>()}),
        ),
        Event::new(JournalEvent::ModelBindingResolved, id, json!({"provider": profile.model.provider_name()})),
    ];
    (opening::first_step(profile, inv.kind, skills, &inv.brief), evs)
}

/// The first step of a claimed invocation, made inside the claim's
/// transaction, so a new invocation costs no transaction of its own before
/// its first model call, and its loop starts from what the claim read.
pub struct Opening {
    /// The journal events that say what the prompt holds.
    pub events: Vec<Event>,
    /// The prompt, as the transcript's first step.
    pub prompt: Step,
    /// What the transcript stores of it: the profiles file's version it was
    /// rendered from (V31; `steps::load` renders it again).
    pub stored: Step,
    pub profile: Profile,
    pub skills: Vec<Skill>,
}

impl Opening {
    /// Reads the invocation's profile (from `profiles`, a copy of the
    /// profiles file at the version the claim read) and skills (at that
    /// version), and renders its prompt; `None` when the profile is gone
    /// (the loop reports that).
    pub async fn read(
        c: &impl baton_store::GenericClient,
        inv: &Invocation,
        profiles: &profiles::Snapshot,
    ) -> Result<Option<Self>, Error> {
        let Some(profile) = profiles.profile(&inv.profile_id)? else {
            return Ok(None);
        };
        let skills = profiles::skills_at(c, profiles.version, &profile.skills).await?;
        let (payload, events) = prompt_step(inv, &profile, &skills);
        let prompt = Step { seq: 0, kind: transcript::PROMPT.to_string(), payload };
        let stored = Step { payload: steps::opening_stub(profiles.version), ..prompt.clone() };
        Ok(Some(Self { events, prompt, stored, profile, skills }))
    }
}

/// The tools a profile's agent may call (see [`opening::surface`]).
pub(crate) fn surface(profile: &Profile, kind: baton_domain::run::state::InvocationKind) -> Vec<ToolName> {
    opening::surface(profile, kind)
}
