//! Agent profiles and routes, loaded from the operators' file.

use baton_domain::profiles::{Profile, ProfilesFile, Skill};
use deadpool_postgres::GenericClient;

use crate::{sql, Error, Result};

/// Any number shared by every process that applies profiles: the key of the
/// advisory lock that lets one `apply` run at a time.
const APPLY_LOCK: i64 = 0x6261_746f_6e50; // "batonP"

/// Stores a validated profiles file in one transaction, one apply at a time:
/// readers see the old set or the new one, never a moment without routes,
/// and two applies at once queue up instead of colliding on the same rows.
pub async fn apply_atomically(client: &mut deadpool_postgres::Client, file: &ProfilesFile) -> Result<()> {
    let tx = client.transaction().await?;
    sql::execute(&tx, "SELECT pg_advisory_xact_lock($1)", &[&APPLY_LOCK]).await?;
    apply(&tx, file).await?;
    tx.commit().await?;
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
    crate::settings::put(c, DISCLOSURE, &serde_json::to_value(&file.disclosure)?).await?;
    crate::budgets::put_config(c, &file.budgets).await?;
    crate::conversations::put_config(c, &file.conversations).await?;
    crate::callbacks::put_config(c, &file.callbacks).await?;
    sql::execute(c, "DELETE FROM routes", &[]).await?;
    for (target, profile) in &file.routes {
        sql::execute(c, "INSERT INTO routes (target_agent, profile_id) VALUES ($1, $2)", &[target, profile]).await?;
    }
    Ok(())
}

/// One profile; [`Error::Unreadable`] when this version cannot read its row.
pub async fn get(c: &impl GenericClient, id: &str) -> Result<Option<Profile>> {
    let row = sql::query_opt(c, "SELECT spec, model_limit FROM profiles WHERE id = $1", &[&id]).await?;
    row.map(|r| with_limit(id, r.get(0), r.get(1))).transpose()
}

/// A profile with the limit its model calls are under.
fn with_limit(id: &str, spec: serde_json::Value, limit: Option<serde_json::Value>) -> Result<Profile> {
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

fn read<T: serde::de::DeserializeOwned>(kind: &'static str, id: &str, spec: serde_json::Value) -> Result<T> {
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

const DISCLOSURE: &str = "disclosure";

/// The disclosure policy loaded with the profiles file (the defaults when none was).
pub async fn disclosure(c: &impl GenericClient) -> Result<baton_domain::disclosure::DisclosureConfig> {
    match crate::settings::get(c, DISCLOSURE).await? {
        Some(value) => Ok(serde_json::from_value(value)?),
        None => Ok(Default::default()),
    }
}
