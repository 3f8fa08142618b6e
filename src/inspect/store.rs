//! Store facts an inspector needs that the Store API does not return: the
//! embedder the file records, counts, and an item's raw row (expiry, TTL,
//! vector names) read without refreshing its TTL.

use std::fmt;

use rusqlite::OptionalExtension;

use super::{count, has_column, has_table};
use crate::db::Db;
use crate::error::Result;
use crate::store::namespace::{encode_prefix, validate_namespace};

/// The `agentstate_meta` key under which the Store records its embedder.
const EMBEDDER_KEY: &str = "store.embedder";

/// Now, as the Store compares expiry times.
const NOW: &str = "strftime('%Y-%m-%d %H:%M:%f', 'now')";

/// The embedder a file records for its vectors (`name/dims`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedEmbedder {
    /// Its name (for example `agentstate-hash-v1`).
    pub name: String,
    /// Its dimension, if the record has a valid one.
    pub dims: Option<usize>,
}

impl RecordedEmbedder {
    fn parse(text: &str) -> RecordedEmbedder {
        match text.rsplit_once('/') {
            Some((name, dims)) => match dims.parse::<usize>() {
                Ok(d) if d > 0 => RecordedEmbedder { name: name.to_string(), dims: Some(d) },
                _ => RecordedEmbedder { name: text.to_string(), dims: None },
            },
            None => RecordedEmbedder { name: text.to_string(), dims: None },
        }
    }
}

impl fmt::Display for RecordedEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dims {
            Some(d) => write!(f, "{}/{d}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// How many vectors have one length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VectorDims {
    /// The length, in `f32`s (bytes / 4, rounded down).
    pub dims: u64,
    /// How many vectors have it.
    pub vectors: u64,
}

/// The Store's rows at a glance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreCounts {
    /// Items, expired ones included.
    pub items: u64,
    /// Distinct namespaces of those items.
    pub namespaces: u64,
    /// Items with a TTL.
    pub with_ttl: u64,
    /// Items past their expiry that no sweep has deleted yet.
    pub expired: u64,
    /// Vectors.
    pub vectors: u64,
    /// Items that have at least one vector.
    pub vector_items: u64,
    /// The vectors' lengths, shortest first.
    pub vector_dims: Vec<VectorDims>,
    /// The embedder the file records, if any.
    pub embedder: Option<RecordedEmbedder>,
}

/// One Store item's row as stored, whether or not it has expired.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ItemInfo {
    /// When it was first put.
    pub created_at: String,
    /// When it was last put.
    pub updated_at: String,
    /// When it expires (UTC), if it has a TTL.
    pub expires_at: Option<String>,
    /// Its TTL in minutes, if any.
    pub ttl_minutes: Option<f64>,
    /// Whether it has expired (a read would not return it).
    pub expired: bool,
    /// The names of its vectors (the fields they embed), sorted.
    pub vector_fields: Vec<String>,
}

impl Db {
    /// The embedder the file records for its Store vectors, if any (a file
    /// written by Python's `SqliteStore` records none).
    ///
    /// # Errors
    /// Database errors.
    pub fn recorded_embedder(&self) -> Result<Option<RecordedEmbedder>> {
        self.read(|conn| {
            if !has_table(conn, "agentstate_meta")? {
                return Ok(None);
            }
            let v: Option<String> = conn
                .prepare_cached("SELECT value FROM agentstate_meta WHERE key = ?1")?
                .query_row([EMBEDDER_KEY], |r| r.get(0))
                .optional()?;
            Ok(v.as_deref().map(RecordedEmbedder::parse))
        })
    }

    /// Item, vector and TTL counts of the Store, the vectors' lengths and the
    /// recorded embedder.
    ///
    /// # Errors
    /// Database errors.
    pub fn store_counts(&self) -> Result<StoreCounts> {
        let embedder = self.recorded_embedder()?;
        self.snapshot(|conn| {
            let mut out = StoreCounts { embedder, ..StoreCounts::default() };
            if has_table(conn, "store")? {
                out.items = count(conn, "SELECT COUNT(*) FROM store", [])?;
                out.namespaces = count(conn, "SELECT COUNT(DISTINCT prefix) FROM store", [])?;
                if has_column(conn, "store", "expires_at")? {
                    out.with_ttl = count(conn, "SELECT COUNT(*) FROM store WHERE ttl_minutes IS NOT NULL", [])?;
                    out.expired = count(
                        conn,
                        &format!("SELECT COUNT(*) FROM store WHERE expires_at IS NOT NULL AND expires_at < {NOW}"),
                        [],
                    )?;
                }
            }
            if has_table(conn, "store_vectors")? {
                out.vectors = count(conn, "SELECT COUNT(*) FROM store_vectors", [])?;
                out.vector_items =
                    count(conn, "SELECT COUNT(*) FROM (SELECT DISTINCT prefix, key FROM store_vectors)", [])?;
                let mut stmt = conn.prepare_cached(
                    "SELECT COALESCE(length(embedding), 0) / 4, COUNT(*) FROM store_vectors GROUP BY 1 ORDER BY 1",
                )?;
                out.vector_dims = stmt
                    .query_map([], |r| {
                        Ok(VectorDims {
                            dims: r.get::<_, i64>(0)?.max(0) as u64,
                            vectors: r.get::<_, i64>(1)?.max(0) as u64,
                        })
                    })?
                    .collect::<rusqlite::Result<_>>()?;
            }
            Ok(out)
        })
    }

    /// The distinct names of the Store's vectors (the fields they embed, with
    /// `.N` suffixes for several texts from one path), sorted.
    ///
    /// # Errors
    /// Database errors.
    pub fn vector_field_names(&self) -> Result<Vec<String>> {
        self.read(|conn| {
            if !has_table(conn, "store_vectors")? {
                return Ok(vec![]);
            }
            let mut stmt =
                conn.prepare_cached("SELECT DISTINCT field_name FROM store_vectors ORDER BY field_name")?;
            let names = stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
            Ok(names)
        })
    }

    /// The stored row of item (`namespace`, `key`), expired or not, with the
    /// names of its vectors; `None` if there is none. Never refreshes a TTL.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`](crate::Error::InvalidNamespace) if the
    /// namespace breaks the Store's rules; database errors.
    pub fn item_info(&self, namespace: &[&str], key: &str) -> Result<Option<ItemInfo>> {
        validate_namespace(namespace)?;
        let prefix = encode_prefix(namespace);
        self.snapshot(|conn| {
            if !has_table(conn, "store")? {
                return Ok(None);
            }
            let ttl_columns = has_column(conn, "store", "expires_at")?;
            let sql = if ttl_columns {
                format!(
                    "SELECT created_at, updated_at, expires_at, ttl_minutes, \
                     COALESCE(expires_at < {NOW}, 0) FROM store WHERE prefix = ?1 AND key = ?2"
                )
            } else {
                "SELECT created_at, updated_at, NULL, NULL, 0 FROM store WHERE prefix = ?1 AND key = ?2"
                    .into()
            };
            let row = conn
                .prepare_cached(&sql)?
                .query_row([&prefix, key], |r| {
                    Ok(ItemInfo {
                        created_at: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                        updated_at: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                        expires_at: r.get(2)?,
                        ttl_minutes: r.get(3)?,
                        expired: r.get(4)?,
                        vector_fields: vec![],
                    })
                })
                .optional()?;
            let Some(mut info) = row else { return Ok(None) };
            if has_table(conn, "store_vectors")? {
                let mut stmt = conn.prepare_cached(
                    "SELECT field_name FROM store_vectors WHERE prefix = ?1 AND key = ?2 ORDER BY field_name",
                )?;
                info.vector_fields =
                    stmt.query_map([&prefix, key], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
            }
            Ok(Some(info))
        })
    }
}
