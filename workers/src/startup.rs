//! What `baton up` checks before any role starts.

use anyhow::Context;

use crate::config::Settings;

/// Waits while the database cannot be reached (it may still be starting),
/// then refuses to start unless its migrations are exactly this binary's:
/// behind, run `baton migrate`; ahead, this binary is older than the database.
pub async fn check_schema(settings: &Settings) -> anyhow::Result<()> {
    let pool = baton_store::pool(&settings.database_url, 1)?;
    let mut delays = crate::roles::backoff(settings.reconnect_max);
    loop {
        let checked = async { baton_store::schema::check(&pool.get().await?).await }.await;
        match checked {
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() => {
                let delay = delays.next().unwrap_or(settings.reconnect_max);
                tracing::warn!(error = %e, ?delay, "cannot check the database schema yet; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("refusing to start against {}", settings.database_url_redacted()));
            }
        }
    }
}
