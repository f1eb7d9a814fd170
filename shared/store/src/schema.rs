//! The schema: creating the database, applying the embedded migrations under
//! an advisory lock (so two `baton migrate` at once are safe), and checking at
//! startup that the database has exactly the migrations this binary has.

use std::str::FromStr;

use baton_domain::schema::{self, Migration};
use deadpool_postgres::Pool;

use crate::GenericClient;

use crate::{Error, Result};

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// The advisory lock key every migrator takes ("batonmig" in ASCII). Keys
/// are per database: the one taken on `postgres` guards creating the database,
/// the one on the database itself guards its migrations.
const MIGRATION_LOCK: i64 = 0x6261_746f_6e6d_6967;

/// refinery's history table.
const HISTORY: &str = "refinery_schema_history";

/// Applies the embedded migrations (refinery keeps track of what ran), one
/// migrator at a time: the others wait for the lock, then find nothing to do.
pub async fn migrate(pool: &Pool) -> Result<usize> {
    let mut client = pool.get().await?;
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await?;
    let report = embedded::migrations::runner().run_async(&mut **client).await;
    let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await;
    if unlocked.is_err() {
        // A session lock must not go back to the pool with the connection.
        drop(deadpool_postgres::Object::take(client));
    }
    Ok(report?.applied_migrations().len())
}

/// Applies the embedded migrations up to `version` only, as [`migrate`]
/// does all of them: a test of a migration's data move fills the schema as
/// it was before the migration, then runs [`migrate`].
pub async fn migrate_to(pool: &Pool, version: i32) -> Result<usize> {
    let mut client = pool.get().await?;
    let runner = embedded::migrations::runner().set_target(refinery::Target::Version(version));
    Ok(runner.run_async(&mut **client).await?.applied_migrations().len())
}

/// Creates the database named in `database_url` if it does not exist, by
/// connecting to the server's `postgres` database.
pub async fn ensure_database(database_url: &str) -> Result<()> {
    let cfg = tokio_postgres::Config::from_str(database_url).map_err(|e| Error::Config(e.to_string()))?;
    let name = cfg.get_dbname().unwrap_or("postgres").to_string();
    let mut admin = cfg.clone();
    admin.dbname("postgres");
    let (client, conn) = admin.connect(tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    // Two creators at once would race on the catalog; the lock ends with
    // this connection.
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await?;
    let exists = client.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name]).await?.is_some();
    if !exists {
        let sql = format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""));
        if let Err(e) = client.batch_execute(&sql).await {
            // Another process (not a `baton migrate`) may have created it meanwhile.
            if e.code() != Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) {
                return Err(e.into());
            }
        }
    }
    drop(client);
    let _ = conn.await;
    Ok(())
}

/// The migrations this binary embeds.
pub fn embedded() -> Vec<Migration> {
    let runner = embedded::migrations::runner();
    runner
        .get_migrations()
        .iter()
        .map(|m| Migration { version: m.version(), name: m.name().to_string(), checksum: m.checksum().to_string() })
        .collect()
}

/// The migrations recorded in the database (none before the first migrate).
pub async fn applied(c: &impl GenericClient) -> Result<Vec<Migration>> {
    let exists: bool = c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&HISTORY]).await?.get(0);
    if !exists {
        return Ok(vec![]);
    }
    let rows = c.query(&format!("SELECT version, name, checksum FROM {HISTORY} ORDER BY version"), &[]).await?;
    Ok(rows.iter().map(|r| Migration { version: r.get(0), name: r.get(1), checksum: r.get(2) }).collect())
}

/// Refuses a database whose migrations are not exactly this binary's,
/// saying which and what to do.
pub async fn check(c: &impl GenericClient) -> Result<()> {
    Ok(schema::check(&embedded(), &applied(c).await?)?)
}
