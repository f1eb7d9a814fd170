//! Statement helpers: every query goes through the client's statement cache,
//! so a hot query costs one round trip, not a prepare plus an execute.

use crate::GenericClient;
use tokio_postgres::{types::ToSql, Row};

use crate::Result;

pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

pub async fn query(c: &impl GenericClient, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query(&stmt, params).await?)
}

pub async fn query_opt(c: &impl GenericClient, sql: &str, params: Params<'_>) -> Result<Option<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query_opt(&stmt, params).await?)
}

pub async fn query_one(c: &impl GenericClient, sql: &str, params: Params<'_>) -> Result<Row> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query_one(&stmt, params).await?)
}

pub async fn execute(c: &impl GenericClient, sql: &str, params: Params<'_>) -> Result<u64> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.execute(&stmt, params).await?)
}
