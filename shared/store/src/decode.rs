//! Reading typed values out of rows: a text column through its domain type's
//! `FromStr` (the `wire_enum!` strings), a JSON column through serde. A value
//! that does not read is [`Error::Corrupt`], naming the table, the row and the
//! column: never a default, so bad data is seen where it is, not guessed around.

use std::fmt::Display;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_postgres::Row;

use crate::{Error, Result};

/// Which row is being read, for the error that names it (`handoff_requests h1`).
#[derive(Clone, Copy)]
pub(crate) struct RowOf<'a> {
    pub table: &'static str,
    pub id: &'a dyn Display,
}

impl RowOf<'_> {
    fn corrupt(&self, row: &Row, col: usize, what: impl Display) -> Error {
        Error::Corrupt(format!("{} {}: {} {what}", self.table, self.id, row.columns()[col].name()))
    }

    /// A text column holding one of a domain enum's values.
    pub fn wire<T: FromStr>(&self, row: &Row, col: usize) -> Result<T> {
        let text: String = row.try_get(col)?;
        self.parse(row, col, &text)
    }

    /// A nullable text column holding one of a domain enum's values.
    pub fn wire_opt<T: FromStr>(&self, row: &Row, col: usize) -> Result<Option<T>> {
        let text: Option<String> = row.try_get(col)?;
        text.map(|t| self.parse(row, col, &t)).transpose()
    }

    fn parse<T: FromStr>(&self, row: &Row, col: usize, text: &str) -> Result<T> {
        text.parse().map_err(|_| self.corrupt(row, col, format_args!("'{text}' is not one Baton knows")))
    }

    /// A nullable JSON column holding a domain type.
    pub fn json_opt<T: DeserializeOwned>(&self, row: &Row, col: usize) -> Result<Option<T>> {
        let value: Option<Value> = row.try_get(col)?;
        value
            .map(|v| serde_json::from_value(v).map_err(|e| self.corrupt(row, col, format_args!("does not read: {e}"))))
            .transpose()
    }
}

/// The strings of some domain enum values, to bind as a `text[]` parameter
/// (`status = ANY($1)`), so a list of statuses is written in the domain only.
pub(crate) fn texts<T>(values: impl IntoIterator<Item = T>, as_str: fn(T) -> &'static str) -> Vec<&'static str> {
    values.into_iter().map(as_str).collect()
}
