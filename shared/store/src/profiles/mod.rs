//! Agent profiles and routes, loaded from the operators' file.
//!
//! - [`limits`]: fleet-wide limits on model calls: admission, end of a call, a provider's pause, usage.
//! - [`settings`]: the file's other sections (disclosure, budgets, conversations, callbacks).

pub mod limits;
pub mod settings;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::GenericClient;
use baton_domain::policy::budget::BudgetsConfig;
use baton_domain::policy::disclosure::DisclosureConfig;
use baton_domain::profiles::{ModelBinding, Profile, ProfilesFile, Skill};
use baton_domain::protocol::conversation::strategy::ConversationsConfig;
use serde_json::Value;

use crate::{sql, Error, Result};

/// Any number shared by every process that applies profiles: the key of the
/// advisory lock that lets one `apply` run at a time.
const APPLY_LOCK: i64 = 0x6261_746f_6e50; // "batonP"

/// Stores a validated profiles file in one transaction, one apply at a time:
/// readers see the old set or the new one, never a moment without routes,
/// and two applies at once queue up instead of colliding on the same rows.
pub async fn apply_atomically(client: &mut deadpool_postgres::Client, file: &ProfilesFile) -> Result<()> {
    let tx = client.transaction().await?;
    lock_applies(&tx).await?;
    apply(&tx, file).await?;
    tx.commit().await?;
    Ok(())
}

/// Takes the lock that lets one apply run at a time, until the transaction
/// ends: for a caller that reads the stored set and decides before it
/// applies (the demo), so no other apply slips in between.
pub async fn lock_applies(tx: &impl GenericClient) -> Result<()> {
    sql::execute(tx, "SELECT pg_advisory_xact_lock($1)", &[&APPLY_LOCK]).await?;
    Ok(())
}

/// Stores a validated profiles file: profiles and skills are upserted, routes
/// replaced. Run it inside a transaction ([`apply_atomically`]).
pub async fn apply(c: &impl GenericClient, file: &ProfilesFile) -> Result<()> {
    for skill in &file.skills {
        let spec = serde_json::to_value(skill)?;
        sql::execute(
            c,
            "INSERT INTO skills (id, spec) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now()",
            &[&skill.id, &spec],
        )
        .await?;
    }
    for p in &file.profiles {
        let spec = serde_json::to_value(p)?;
        let limit = file.limit_for(p).map(serde_json::to_value).transpose()?;
        sql::execute(
            c,
            "INSERT INTO profiles (id, spec, model_limit) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET spec = EXCLUDED.spec, model_limit = EXCLUDED.model_limit, updated_at = now()",
            &[&p.id, &spec, &limit],
        )
        .await?;
    }
    settings::put_sections(c, file).await?;
    sql::execute(c, "DELETE FROM routes", &[]).await?;
    for (target, profile) in &file.routes {
        sql::execute(c, "INSERT INTO routes (target_agent, profile_id) VALUES ($1, $2)", &[target, profile]).await?;
    }
    // Every cached copy of the file is stale from this commit on; the new
    // version is kept as it is, never edited (V31).
    sql::execute(
        c,
        "WITH v AS (UPDATE profiles_version SET version = version + 1 RETURNING version),
              p AS (INSERT INTO profile_versions (version, id, spec, model_limit)
                    SELECT v.version, p.id, p.spec, p.model_limit FROM profiles p, v)
         INSERT INTO skill_versions (version, id, spec) SELECT v.version, s.id, s.spec FROM skills s, v",
        &[],
    )
    .await?;
    Ok(())
}

/// A profile and its skills (in the profile's order) as the profiles file
/// of `version` had them; `None` when that version had no such profile.
pub async fn at_version(c: &impl GenericClient, version: i64, id: &str) -> Result<Option<(Profile, Vec<Skill>)>> {
    let row = sql::query_opt(
        c,
        "SELECT p.spec, p.model_limit,
                (SELECT coalesce(jsonb_object_agg(s.id, s.spec), '{}') FROM skill_versions s
                  WHERE s.version = p.version AND s.id IN (SELECT jsonb_array_elements_text(p.spec->'skills')))
           FROM profile_versions p WHERE p.version = $1 AND p.id = $2",
        &[&version, &id],
    )
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let profile = with_limit(id, row.get(0), row.get(1))?;
    let mut specs: HashMap<String, Value> = serde_json::from_value(row.get(2))?;
    let skills = profile
        .skills
        .iter()
        .filter_map(|sid| specs.remove(sid).map(|spec| read("skill", sid, spec)))
        .collect::<Result<_>>()?;
    Ok(Some((profile, skills)))
}

/// One profile; [`Error::Unreadable`] when this version cannot read its row.
pub async fn get(c: &impl GenericClient, id: &str) -> Result<Option<Profile>> {
    let row = sql::query_opt(c, "SELECT spec, model_limit FROM profiles WHERE id = $1", &[&id]).await?;
    row.map(|r| with_limit(id, r.get(0), r.get(1))).transpose()
}

/// A profile with the limit its model calls are under.
fn with_limit(id: &str, spec: Value, limit: Option<Value>) -> Result<Profile> {
    let mut profile: Profile = read("profile", id, spec)?;
    profile.model_limit = limit.map(|l| read("model limit of profile", id, l)).transpose()?;
    Ok(profile)
}

/// Every profile this version can read. One it cannot read cannot run here
/// either, so it is left out (with a warning) rather than failing whoever
/// lists the agents.
pub async fn all(c: &impl GenericClient) -> Result<Vec<Profile>> {
    let rows = sql::query(c, "SELECT id, spec, model_limit FROM profiles ORDER BY id", &[]).await?;
    let readable = rows.iter().filter_map(|r| {
        let id: String = r.get(0);
        with_limit(&id, r.get(1), r.get(2)).inspect_err(|e| tracing::warn!(error = %e, "profile left out")).ok()
    });
    Ok(readable.collect())
}

fn read<T: serde::de::DeserializeOwned>(kind: &'static str, id: &str, spec: Value) -> Result<T> {
    serde_json::from_value(spec).map_err(|e| Error::Unreadable { kind, id: id.to_string(), reason: e.to_string() })
}

pub async fn route(c: &impl GenericClient, target_agent: &str) -> Result<Option<String>> {
    let row = sql::query_opt(c, "SELECT profile_id FROM routes WHERE target_agent = $1", &[&target_agent]).await?;
    Ok(row.map(|r| r.get(0)))
}

/// The skills with these ids, in the order given (unknown ids are skipped:
/// the profiles file was validated when it was applied).
pub async fn skills(c: &impl GenericClient, ids: &[String]) -> Result<Vec<Skill>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let rows = sql::query(c, "SELECT id, spec FROM skills WHERE id = ANY($1)", &[&ids]).await?;
    sorted_skills(&rows, ids)
}

/// [`skills`] as the profiles file of `version` had them.
pub async fn skills_at(c: &impl GenericClient, version: i64, ids: &[String]) -> Result<Vec<Skill>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let rows =
        sql::query(c, "SELECT id, spec FROM skill_versions WHERE version = $1 AND id = ANY($2)", &[&version, &ids])
            .await?;
    sorted_skills(&rows, ids)
}

fn sorted_skills(rows: &[tokio_postgres::Row], ids: &[String]) -> Result<Vec<Skill>> {
    let mut found: Vec<(String, Skill)> = rows
        .iter()
        .map(|r| {
            let id: String = r.get(0);
            Ok((id.clone(), read("skill", &id, r.get(1))?))
        })
        .collect::<Result<_>>()?;
    found.sort_by_key(|(id, _)| ids.iter().position(|i| i == id));
    Ok(found.into_iter().map(|(_, s)| s).collect())
}

/// The disclosure policy loaded with the profiles file (the defaults when none was).
pub async fn disclosure(c: &impl GenericClient) -> Result<DisclosureConfig> {
    match settings::get(c, settings::DISCLOSURE).await? {
        Some(value) => Ok(serde_json::from_value(value)?),
        None => Ok(Default::default()),
    }
}

/// The version of the profiles file applied last: bumped by every [`apply`],
/// in its transaction. One short statement, meant to be pipelined with a
/// transaction's first one (`tokio::try_join!`), so a [`Cache`] hit costs no
/// round trip of its own.
pub async fn version(c: &impl GenericClient) -> Result<i64> {
    Ok(sql::query_one(c, "SELECT version FROM profiles_version", &[]).await?.get(0))
}

/// What a request's start reads of the applied profiles file, as of one
/// version: the disclosure policy, the routes and their profiles, and the
/// conversation and budget settings.
#[derive(Debug)]
pub struct Snapshot {
    pub version: i64,
    pub disclosure: DisclosureConfig,
    pub conversations: ConversationsConfig,
    pub budgets: BudgetsConfig,
    /// `[[bridges]]`: empty, one trusted bridge (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other).
    pub bridges: Vec<baton_domain::protocol::bridges::Bridge>,
    routes: HashMap<String, String>,
    /// Each profile, read once; one this version cannot read keeps why
    /// (`kind`, `reason` of [`Error::Unreadable`]), so it fails only the
    /// requests routed to it.
    profiles: HashMap<String, std::result::Result<Profile, (&'static str, String)>>,
}

impl Snapshot {
    /// Everything at once, in one statement (one snapshot of the database),
    /// with the version it is of.
    pub async fn load(c: &impl GenericClient) -> Result<Self> {
        let row = sql::query_one(
            c,
            "SELECT v.version,
                    (SELECT value FROM fleet_settings WHERE key = $1),
                    (SELECT value FROM fleet_settings WHERE key = $2),
                    (SELECT value FROM fleet_settings WHERE key = $3),
                    (SELECT coalesce(jsonb_object_agg(target_agent, profile_id), '{}') FROM routes),
                    (SELECT coalesce(jsonb_object_agg(id, jsonb_build_array(spec, model_limit)), '{}') FROM profiles),
                    (SELECT value FROM fleet_settings WHERE key = $4)
               FROM profiles_version v",
            &[&settings::DISCLOSURE, &settings::CONVERSATIONS, &settings::BUDGETS, &settings::BRIDGES],
        )
        .await?;
        let setting = |i: usize| row.get::<_, Option<Value>>(i).filter(|v| !v.is_null());
        let profiles: HashMap<String, Value> = serde_json::from_value(row.get(5))?;
        Ok(Self {
            version: row.get(0),
            disclosure: setting(1).map(serde_json::from_value).transpose()?.unwrap_or_default(),
            conversations: setting(2).map(serde_json::from_value).transpose()?.unwrap_or_default(),
            budgets: setting(3).map(serde_json::from_value).transpose()?.unwrap_or_default(),
            bridges: setting(6).map(serde_json::from_value).transpose()?.unwrap_or_default(),
            routes: serde_json::from_value(row.get(4))?,
            profiles: profiles
                .into_iter()
                .map(|(id, pair)| {
                    let (spec, limit) = match pair {
                        Value::Array(mut two) if two.len() == 2 => {
                            let limit = two.pop().filter(|l| !l.is_null());
                            (two.pop().unwrap_or_default(), limit)
                        }
                        other => (other, None),
                    };
                    let read = with_limit(&id, spec, limit).map_err(|e| match e {
                        Error::Unreadable { kind, reason, .. } => (kind, reason),
                        other => ("profile", other.to_string()),
                    });
                    (id, read)
                })
                .collect(),
        })
    }

    /// The profile id `target_agent` requests are routed to ([`route`]).
    pub fn route(&self, target_agent: &str) -> Option<&str> {
        self.routes.get(target_agent).map(String::as_str)
    }

    /// The ids of the profiles whose model is scripted: a first turn of
    /// theirs may be taken inside the claim's transaction.
    pub fn scripted(&self) -> Vec<String> {
        self.profiles
            .iter()
            .filter(|(_, p)| matches!(p, Ok(Profile { model: ModelBinding::Scripted { .. }, .. })))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// One profile ([`get`]); [`Error::Unreadable`] when this version cannot read it.
    pub fn profile(&self, id: &str) -> Result<Option<Profile>> {
        match self.profiles.get(id) {
            None => Ok(None),
            Some(Ok(profile)) => Ok(Some(profile.clone())),
            Some(Err((kind, reason))) => Err(Error::Unreadable { kind, id: id.to_string(), reason: reason.clone() }),
        }
    }
}

/// A process's copy of the applied profiles file, kept while its version is
/// current. Cheap to clone; share one per role.
#[derive(Clone, Default)]
pub struct Cache {
    held: Arc<Mutex<Option<Arc<Snapshot>>>>,
}

impl Cache {
    /// The copy held now, current or not: work that may start before the
    /// version is read, to be checked against it ([`Cache::at`]).
    pub fn held(&self) -> Option<Arc<Snapshot>> {
        self.held.lock().expect("not poisoned").clone()
    }

    /// The file as of `version` (from [`version`]) or later: the copy held
    /// when it is that version, else a fresh one (one statement), kept for
    /// the next caller.
    pub async fn at(&self, c: &impl GenericClient, version: i64) -> Result<Arc<Snapshot>> {
        if let Some(held) = self.held().filter(|s| s.version == version) {
            return Ok(held);
        }
        let fresh = Arc::new(Snapshot::load(c).await?);
        let mut held = self.held.lock().expect("not poisoned");
        if held.as_ref().is_none_or(|h| h.version <= fresh.version) {
            *held = Some(fresh.clone());
        }
        Ok(fresh)
    }
}
