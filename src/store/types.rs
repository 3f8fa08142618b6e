//! The Store's nouns: configuration, items and operations (reference 7.1).

use std::sync::Arc;

use serde_json::Value;

use super::embed::{Embedder, HashEmbedder};
use super::namespace::MatchCondition;

/// How a [`Store`](super::Store) behaves. `StoreConfig::default()` is a
/// plain store: no vector index, no TTL.
#[derive(Clone, Default)]
pub struct StoreConfig {
    /// Semantic search: which embedder, which fields.
    pub index: Option<IndexConfig>,
    /// Expiry of items.
    pub ttl: Option<TtlConfig>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig").field("index", &self.index).field("ttl", &self.ttl).finish()
    }
}

impl StoreConfig {
    /// A store with a vector index.
    pub fn with_index(mut self, index: IndexConfig) -> StoreConfig {
        self.index = Some(index);
        self
    }

    /// A store with TTL.
    pub fn with_ttl(mut self, ttl: TtlConfig) -> StoreConfig {
        self.ttl = Some(ttl);
        self
    }
}

/// The vector index: the embedder, its dimension, and which fields of each
/// item are embedded.
#[derive(Clone)]
pub struct IndexConfig {
    /// The vectors' length; every vector must have it.
    pub dims: usize,
    /// Makes vectors of documents and queries.
    pub embedder: Arc<dyn Embedder>,
    /// Field paths to embed (LangGraph syntax: `"text"`, `"a.b"`, `"l[*]"`,
    /// `"{a,b}"`); `["$"]`, the whole document, by default.
    pub fields: Vec<String>,
}

impl std::fmt::Debug for IndexConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexConfig")
            .field("dims", &self.dims)
            .field("embedder", &self.embedder.name())
            .field("fields", &self.fields)
            .finish()
    }
}

impl IndexConfig {
    /// An index over the whole document (`fields = ["$"]`) with `embedder`,
    /// whose dimension it takes.
    pub fn new(embedder: impl Embedder) -> IndexConfig {
        let dims = embedder.dims();
        IndexConfig { dims, embedder: Arc::new(embedder), fields: vec!["$".into()] }
    }

    /// The built-in, offline, deterministic [`HashEmbedder`] with `dims`
    /// dimensions. It is lexical (shared words and character n-grams), not
    /// semantic.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `dims` is 0.
    pub fn hashed(dims: usize) -> crate::Result<IndexConfig> {
        Ok(IndexConfig::new(HashEmbedder::new(dims)?))
    }

    /// Embed these fields instead of the whole document.
    pub fn fields<I, S>(mut self, fields: I) -> IndexConfig
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.fields = fields.into_iter().map(Into::into).collect();
        self
    }
}

/// Expiry (reference 7.1 `TTLConfig`, DESIGN.md decision 14). TTLs are in
/// minutes and may be fractional.
#[derive(Clone, Debug, PartialEq)]
pub struct TtlConfig {
    /// Whether reads (get, search) push an item's expiry forward by its TTL
    /// (default true); each call can override it.
    pub refresh_on_read: bool,
    /// The TTL of puts that do not give one (minutes).
    pub default_ttl: Option<f64>,
    /// If set, a background thread deletes expired items this often
    /// (minutes); it stops when the last handle of the store is dropped.
    pub sweep_interval_minutes: Option<f64>,
}

impl Default for TtlConfig {
    fn default() -> Self {
        TtlConfig { refresh_on_read: true, default_ttl: None, sweep_interval_minutes: None }
    }
}

/// A stored item (reference 7.1). Timestamps are UTC text
/// `YYYY-MM-DD HH:MM:SS`, as Python's SqliteStore writes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Its namespace's labels.
    pub namespace: Vec<String>,
    /// Its key within the namespace.
    pub key: String,
    /// The JSON object stored.
    pub value: Value,
    /// When it was first put (kept across updates).
    pub created_at: String,
    /// When it was last put.
    pub updated_at: String,
}

/// A search hit: the item and its score (cosine similarity of its best
/// vector; `None` without a query or for items without a vector).
#[derive(Clone, Debug, PartialEq)]
pub struct SearchItem {
    /// The item.
    pub item: Item,
    /// Its relevance, if a vector search scored it.
    pub score: Option<f64>,
}

/// Which vectors a put makes (LangGraph's `index` argument).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Index {
    /// The store's configured fields (`index=None`).
    #[default]
    Default,
    /// These field paths instead (`index=[...]`).
    Fields(Vec<String>),
    /// No vector for this item (`index=False`).
    Off,
}

/// Read one item.
#[derive(Clone, Debug, PartialEq)]
pub struct GetOp {
    /// Its namespace.
    pub namespace: Vec<String>,
    /// Its key.
    pub key: String,
    /// Refresh its TTL; `None` = the store's `refresh_on_read`.
    pub refresh_ttl: Option<bool>,
}

/// Write (or, with `value: None`, delete) one item.
#[derive(Clone, Debug, PartialEq)]
pub struct PutOp {
    /// Its namespace.
    pub namespace: Vec<String>,
    /// Its key.
    pub key: String,
    /// The JSON object to store, or `None` to delete.
    pub value: Option<Value>,
    /// Which vectors to make.
    pub index: Index,
    /// Its TTL in minutes; `None` = no expiry. (The convenience
    /// [`Store::put`](super::Store::put) fills in the default TTL; a raw op
    /// does not, as in LangGraph.)
    pub ttl: Option<f64>,
}

/// Find items under a namespace prefix.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchOp {
    /// The namespace prefix (label-aligned; empty = everything).
    pub namespace_prefix: Vec<String>,
    /// A filter on the value in the [filter language](crate::filter).
    pub filter: Option<Value>,
    /// At most this many results (default 10).
    pub limit: usize,
    /// Skip this many first (default 0).
    pub offset: usize,
    /// Rank by similarity to this text (needs an index).
    pub query: Option<String>,
    /// Refresh the returned items' TTL; `None` = the store's
    /// `refresh_on_read`.
    pub refresh_ttl: Option<bool>,
}

impl Default for SearchOp {
    fn default() -> Self {
        SearchOp {
            namespace_prefix: vec![],
            filter: None,
            limit: 10,
            offset: 0,
            query: None,
            refresh_ttl: None,
        }
    }
}

/// List the namespaces that hold items.
#[derive(Clone, Debug, PartialEq)]
pub struct ListNamespacesOp {
    /// Prefix / suffix conditions, ANDed (`*` matches one label).
    pub match_conditions: Vec<MatchCondition>,
    /// Truncate namespaces to this many labels (then de-duplicate).
    pub max_depth: Option<usize>,
    /// At most this many (default 100).
    pub limit: usize,
    /// Skip this many first.
    pub offset: usize,
}

impl Default for ListNamespacesOp {
    fn default() -> Self {
        ListNamespacesOp { match_conditions: vec![], max_depth: None, limit: 100, offset: 0 }
    }
}

/// One operation of a [`Store::batch`](super::Store::batch).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Read one item.
    Get(GetOp),
    /// Write or delete one item.
    Put(PutOp),
    /// Search.
    Search(SearchOp),
    /// List namespaces.
    ListNamespaces(ListNamespacesOp),
}

/// The result of one [`Op`], in the same position.
#[derive(Clone, Debug, PartialEq)]
pub enum OpResult {
    /// Of a [`GetOp`].
    Item(Option<Item>),
    /// Of a [`PutOp`].
    Done,
    /// Of a [`SearchOp`].
    Items(Vec<SearchItem>),
    /// Of a [`ListNamespacesOp`].
    Namespaces(Vec<Vec<String>>),
}
