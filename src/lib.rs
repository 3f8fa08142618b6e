//! agentstate: everything an LLM agent must remember, in one SQLite file.
#![deny(missing_docs)]

pub mod codec;
mod db;
mod error;
pub mod filter;
pub mod store;
mod vector;

pub use codec::{JsonPlusSerializer, Serializer};
pub use db::{Db, DbBuilder, Durability};
pub use error::{Error, Result};
pub use filter::Filter;
