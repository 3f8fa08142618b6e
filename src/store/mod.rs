//! The long-term Store: namespaced JSON items with TTL, filters and vector
//! search, in the file format of LangGraph's SqliteStore.

pub mod namespace;
pub mod path;

pub use namespace::{Label, MatchCondition, Namespace};
pub use path::{get_text_at_path, tokenize_path, IndexField};
