//! Fleet-wide settings that operators load with the profiles file.

use deadpool_postgres::GenericClient;
use serde_json::Value;

use crate::{sql, Result};

pub async fn put(c: &impl GenericClient, key: &str, value: &Value) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO fleet_settings (key, value) VALUES ($1, $2)
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
        &[&key, value],
    )
    .await?;
    Ok(())
}

pub async fn get(c: &impl GenericClient, key: &str) -> Result<Option<Value>> {
    Ok(sql::query_opt(c, "SELECT value FROM fleet_settings WHERE key = $1", &[&key]).await?.map(|r| r.get(0)))
}
