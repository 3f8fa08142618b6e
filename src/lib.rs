#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod checkpoint;
pub mod codec;
mod db;
mod error;
pub mod filter;
mod inspect;
pub mod store;
mod vector;

pub use checkpoint::{
    Checkpoint, CheckpointConfig, CheckpointTuple, Checkpointer, ListQuery, Metadata, PruneStrategy,
};
pub use codec::{JsonPlusSerializer, Serializer};
pub use db::{Db, DbBuilder, Durability};
pub use error::{Error, Result};
pub use filter::Filter;
pub use inspect::{
    CheckArea, CheckReport, CheckpointCounts, FileInfo, Finding, HistoryEntry, HistoryQuery, IdMatch,
    ItemInfo, RecordedEmbedder, SchemaVersion, Severity, Stats, StoreCounts, TableInfo, ThreadCounts,
    ThreadSummary, VectorDims,
};
pub use store::{Item, SearchItem, Store, StoreConfig};
