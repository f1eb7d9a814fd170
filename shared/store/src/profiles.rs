//! Agent profiles and routes, loaded from the operators' file.

use baton_domain::profiles::{Profile, ProfilesFile, Skill};
use deadpool_postgres::GenericClient;

use crate::{sql, Result};

/// Stores a validated profiles file: profiles and skills are upserted, routes replaced.
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
        sql::execute(
            c,
            "INSERT INTO profiles (id, spec) VALUES ($1, $2)
             ON CONFLICT (id) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now()",
            &[&p.id, &spec],
        )
        .await?;
    }
    crate::settings::put(c, DISCLOSURE, &serde_json::to_value(&file.disclosure)?).await?;
    crate::budgets::put_config(c, &file.budgets).await?;
    sql::execute(c, "DELETE FROM routes", &[]).await?;
    for (target, profile) in &file.routes {
        sql::execute(c, "INSERT INTO routes (target_agent, profile_id) VALUES ($1, $2)", &[target, profile]).await?;
    }
    Ok(())
}

pub async fn get(c: &impl GenericClient, id: &str) -> Result<Option<Profile>> {
    let row = sql::query_opt(c, "SELECT spec FROM profiles WHERE id = $1", &[&id]).await?;
    row.map(|r| Ok(serde_json::from_value(r.get(0))?)).transpose()
}

pub async fn all(c: &impl GenericClient) -> Result<Vec<Profile>> {
    let rows = sql::query(c, "SELECT spec FROM profiles ORDER BY id", &[]).await?;
    rows.iter().map(|r| Ok(serde_json::from_value(r.get(0))?)).collect()
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
    let mut found: Vec<(String, Skill)> = rows.iter().map(|r| Ok((r.get(0), serde_json::from_value(r.get(1))?))).collect::<Result<_>>()?;
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
