//! Helpers shared by the Store's tests (`tests/store*.rs`): an embedder
//! whose vectors the test spells out, and small constructors.

#![allow(dead_code)]

use agentstate::store::{Embedder, IndexConfig};
use agentstate::{Db, Store, StoreConfig};
use rusqlite::Connection;

/// Embeds texts like `"1 0 0.5"` as the vector they spell; other texts as a
/// zero vector. Lets tests choose exact vectors.
pub struct Literal(pub usize);

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Embedder for Literal {
    fn name(&self) -> &str {
        "literal"
    }
    fn dims(&self) -> usize {
        self.0
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|t| self.parse(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(self.parse(text))
    }
}

impl Literal {
    pub fn parse(&self, t: &str) -> Vec<f32> {
        let v: Vec<f32> = t.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if v.len() == self.0 {
            v
        } else {
            vec![0.0; self.0]
        }
    }
}

pub fn plain() -> Store {
    Db::open_in_memory().unwrap().store(StoreConfig::default()).unwrap()
}

pub fn literal_store(fields: &[&str]) -> (tempfile::TempDir, Store, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let db = Db::open(&path).unwrap();
    let store = db
        .store(StoreConfig::default().with_index(IndexConfig::new(Literal(3)).with_fields(fields.to_vec())))
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    (dir, store, conn)
}

/// The field names of an item's vectors, sorted.
pub fn vector_names(conn: &Connection, key: &str) -> Vec<String> {
    conn.prepare("SELECT field_name FROM store_vectors WHERE key = ?1 ORDER BY field_name")
        .unwrap()
        .query_map([key], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

pub fn keys(items: &[agentstate::SearchItem]) -> Vec<String> {
    items.iter().map(|i| i.item.key.clone()).collect()
}

pub fn ns_list(v: &[&[&str]]) -> Vec<Vec<String>> {
    v.iter().map(|n| n.iter().map(|s| s.to_string()).collect()).collect()
}
