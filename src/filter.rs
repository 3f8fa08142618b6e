//! The filter language shared by Store search and checkpoint metadata
//! (DESIGN.md decisions 7-9). STUB: replaced by the filter work.

use rusqlite::Connection;
use serde_json::Value;

use crate::error::{Error, Result};

/// A parsed filter. Build it with [`Filter::parse`].
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    _private: (),
}

impl Filter {
    /// Parses a JSON filter object.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`] naming the offending key.
    pub fn parse(filter: &Value) -> Result<Filter> {
        let _ = filter;
        Err(Error::invalid_filter("", "filters are not implemented yet"))
    }

    /// True if `doc` matches (the Rust evaluator).
    pub fn matches(&self, doc: &Value) -> bool {
        let _ = doc;
        false
    }

    /// Compiles to an SQL boolean expression over the JSON text in `column`
    /// (a column name or SQL expression), with its bound parameters.
    pub(crate) fn to_sql(&self, column: &str) -> (String, Vec<rusqlite::types::Value>) {
        let _ = column;
        ("0".into(), vec![])
    }
}

/// Registers the SQL functions the compiled filters call, on one connection.
pub(crate) fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    let _ = conn;
    Ok(())
}
