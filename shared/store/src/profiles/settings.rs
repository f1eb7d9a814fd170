//! Fleet-wide settings that operators load with the profiles file: its
//! `[disclosure]`, `[budgets]`, `[conversations]` and `[callbacks]` sections and `[[projects]]`,
//! one row each in `fleet_settings`. The folders that act on a section read
//! it from here, so the profiles file's loader depends on none of them.

use crate::GenericClient;
use baton_domain::policy::budget::BudgetsConfig;
use baton_domain::profiles::ProfilesFile;
use baton_domain::protocol::callback::CallbacksConfig;
use baton_domain::protocol::conversation::strategy::ConversationsConfig;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{sql, Result};

pub(crate) const DISCLOSURE: &str = "disclosure";
pub(crate) const BUDGETS: &str = "budgets";
pub(crate) const CONVERSATIONS: &str = "conversations";
const CALLBACKS: &str = "callbacks";
pub(crate) const PROJECTS: &str = "projects";
pub(crate) const BRIDGES: &str = "bridges";

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

/// Every section of the file, in the caller's transaction.
pub(crate) async fn put_sections(c: &impl GenericClient, file: &ProfilesFile) -> Result<()> {
    put(c, DISCLOSURE, &serde_json::to_value(&file.disclosure)?).await?;
    put(c, BUDGETS, &serde_json::to_value(&file.budgets)?).await?;
    put(c, CONVERSATIONS, &serde_json::to_value(&file.conversations)?).await?;
    put(c, CALLBACKS, &serde_json::to_value(&file.callbacks)?).await?;
    put(c, PROJECTS, &serde_json::to_value(&file.projects)?).await?;
    put(c, BRIDGES, &serde_json::to_value(&file.bridges)?).await
}

/// `[[bridges]]` (none: one trusted bridge, as without bridge identity: docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other).
pub async fn bridges(c: &impl GenericClient) -> Result<Vec<baton_domain::protocol::bridges::Bridge>> {
    section(c, BRIDGES).await
}

/// The `[budgets]` section (empty when none was loaded).
pub async fn budgets(c: &impl GenericClient) -> Result<BudgetsConfig> {
    section(c, BUDGETS).await
}

/// The `[conversations]` section (the defaults, `enqueue` everywhere, when none was loaded).
pub async fn conversations(c: &impl GenericClient) -> Result<ConversationsConfig> {
    section(c, CONVERSATIONS).await
}

/// The `[callbacks]` section (none: no origin is allowed, so every callback is refused).
pub async fn callbacks(c: &impl GenericClient) -> Result<CallbacksConfig> {
    section(c, CALLBACKS).await
}

async fn section<T: DeserializeOwned + Default>(c: &impl GenericClient, key: &str) -> Result<T> {
    match get(c, key).await? {
        Some(value) => Ok(serde_json::from_value(value)?),
        None => Ok(T::default()),
    }
}
