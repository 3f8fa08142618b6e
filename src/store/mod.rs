//! Long-term memory: namespaced JSON items shared across threads, with TTL,
//! the [filter language](crate::filter) and exact, max-pooled cosine vector
//! search, in the file format of LangGraph's Python `SqliteStore`.
//!
//! - [`Store`]: the operations (`get`, `put`, `delete`, `search`,
//!   `list_namespaces`, `batch`, `sweep_expired`, `reindex`);
//! - [`namespace`]: validation with LangGraph's messages, the `prefix` column
//!   encoding, label-aligned matching and tuple ordering;
//! - [`path`]: field paths, which texts of an item are embedded and the names
//!   of their vectors;
//! - [`embed`]: the [`Embedder`] trait, the built-in lexical
//!   [`HashEmbedder`] and [`cosine`] similarity.

mod cache;
pub mod embed;
pub mod namespace;
pub mod path;
mod sqlite;
mod types;

pub use embed::{cosine, Embedder, HashEmbedder};
pub use namespace::{Label, MatchCondition, Namespace};
pub use path::{get_text_at_path, tokenize_path, IndexField};
pub use sqlite::{ListNamespacesOptions, PutOptions, SearchOptions, Store, Ttl};
pub use types::{
    GetOp, Index, IndexConfig, Item, ListNamespacesOp, Op, OpResult, PutOp, SearchItem, SearchOp,
    StoreConfig, TtlConfig,
};
