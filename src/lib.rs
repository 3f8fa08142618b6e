#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod checkpoint;
pub mod codec;
mod commit;
mod db;
pub mod engine;
mod error;
pub mod filter;
mod hash;
pub mod import;
pub mod inspect;
mod json;
#[cfg(feature = "tokio")]
pub mod nonblocking;
mod pool;
mod python;
pub mod store;
mod vector;
mod vfs;
mod wal;

pub use checkpoint::{
    ChannelValue, Checkpoint, CheckpointConfig, CheckpointTuple, Checkpointer, ListQuery, Metadata,
    PruneStrategy, Step,
};
pub use codec::{JsonPlusSerializer, Serializer};
pub use db::{Db, DbBuilder, Durability};
pub use error::{BoxError, Error, Result};
pub use filter::Filter;
pub use store::{Item, SearchItem, Store, StoreConfig};

/// The `rusqlite` this crate links (and so the SQLite it bundles): an
/// application that also uses rusqlite directly must use this same version
/// (Cargo allows one `libsqlite3-sys` per build). See the README, "Living
/// beside another SQLite user".
pub use rusqlite;
