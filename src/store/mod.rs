//! The long-term Store: namespaced JSON items with TTL, filters and vector
//! search, in the file format of LangGraph's SqliteStore.
//!
//! The pieces that need no database:
//! - [`namespace`]: validation with LangGraph's messages, the `prefix` column
//!   encoding, label-aligned matching and tuple ordering;
//! - [`path`]: field paths, which texts of an item are embedded and the names
//!   of their vectors;
//! - [`embed`]: the [`Embedder`] trait, the built-in lexical
//!   [`HashEmbedder`] and [`cosine`] similarity.

pub mod embed;
pub mod namespace;
pub mod path;

pub use embed::{cosine, Embedder, HashEmbedder};
pub use namespace::{Label, MatchCondition, Namespace};
pub use path::{get_text_at_path, tokenize_path, IndexField};
