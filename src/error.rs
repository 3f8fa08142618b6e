//! The one error type of the crate.
//!
//! Every public fallible function returns [`Result`]. Variants are the things a
//! caller can act on: fix the input ([`Error::InvalidNamespace`],
//! [`Error::InvalidFilter`], [`Error::InvalidArgument`], ...), retry
//! ([`Error::Busy`]), free space ([`Error::DiskFull`]), or give up on a file
//! ([`Error::Corrupt`], [`Error::NotAgentstate`], [`Error::SchemaTooNew`]).

use std::fmt;

/// `Result<T, agentstate::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The underlying cause an [`Error`] may carry (see
/// [`std::error::Error::source`]): a JSON or SQLite error, or the error of a
/// user's [`Serializer`](crate::Serializer) or embedder.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in agentstate.
///
/// The enum is `#[non_exhaustive]`: match the variants you act on and keep a
/// catch-all arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A Store namespace broke LangGraph's rules (empty, a label that is empty,
    /// contains `.` or NUL, or a root label `langgraph`). The message is
    /// LangGraph's own.
    #[error("{0}")]
    InvalidNamespace(String),

    /// A filter (Store search or checkpoint metadata) could not be parsed: a key
    /// with characters outside `[A-Za-z0-9_.-]`, an unknown `$` operator, an
    /// operator mixed with plain keys, or an operand of the wrong shape.
    #[error("{reason}")]
    InvalidFilter {
        /// The offending key (or operator).
        key: String,
        /// What is wrong with it (the whole message, naming the key).
        reason: String,
    },

    /// A config lacks something the operation needs (for example `thread_id`),
    /// or has a value of the wrong type.
    #[error("invalid config: {0}")]
    InvalidConfig(String),

    /// Any other malformed argument: an unknown prune strategy, a TTL that
    /// is negative or not finite, a value that is not a JSON object. (A
    /// Store field path that names nothing is not an error: it embeds
    /// nothing, as in LangGraph.)
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The thread or checkpoint an operation names does not exist.
    #[error("not found: {0}")]
    NotFound(String),

    /// The operation would overwrite data it must not (for example copying a
    /// thread onto one that already has checkpoints).
    #[error("conflict: {0}")]
    Conflict(String),

    /// A vector's length is not the dimension the Store was configured with.
    #[error("vector dimension mismatch: expected {expected}, got {got}")]
    DimensionMismatch {
        /// The configured dimension.
        expected: usize,
        /// The dimension that was given.
        got: usize,
    },

    /// The file's vectors were made by another embedder than the one
    /// configured. Configure the recorded one, or call `reindex` to re-embed.
    #[error("embedder mismatch: the file's vectors were made by {stored}, the store is configured with {configured}; use the same embedder or reindex")]
    EmbedderMismatch {
        /// `name/dims` recorded in the file.
        stored: String,
        /// `name/dims` of the configured embedder.
        configured: String,
    },

    /// The file holds vectors but records no embedder (LangGraph's Python
    /// `SqliteStore` records none), so they cannot be told apart from the
    /// configured embedder's. If the configured embedder made them, adopt
    /// them with [`IndexConfig::with_adopt_existing_vectors`](crate::store::IndexConfig::with_adopt_existing_vectors);
    /// otherwise reindex.
    #[error("the file holds {vectors} vectors from an embedder it does not record; adopt them if {configured} made them, or reindex")]
    UnrecordedEmbedder {
        /// How many vectors the file holds.
        vectors: u64,
        /// `name/dims` of the configured embedder.
        configured: String,
    },

    /// The embedder failed (its error is the [`source`](std::error::Error::source)),
    /// returned the wrong number of vectors, or a vector with NaN or an
    /// infinity.
    #[error("embedding failed: {message}")]
    Embedding {
        /// What went wrong, naming the embedder.
        message: String,
        /// The embedder's own error, if it returned one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// A value could not be encoded or decoded by the serializer (for example
    /// an integer outside the msgpack range, or bytes that are not valid
    /// msgpack). A custom [`Serializer`](crate::Serializer) reports its own
    /// failures with [`Error::serialization`] or [`Error::serialization_from`].
    #[error("serialization error: {message}")]
    Serialization {
        /// What failed.
        message: String,
        /// The cause, when another error (JSON, a user serializer's) is behind it.
        #[source]
        source: Option<BoxError>,
    },

    /// A stored value carries a type tag no serializer here knows.
    #[error("Unknown serialization type: {0}")]
    UnknownSerialization(String),

    /// Another writer held the database for longer than the busy timeout.
    /// Retrying later is safe: nothing was written.
    #[error("database is busy (locked by another connection for longer than the busy timeout)")]
    Busy,

    /// The disk (or `max_page_count`) is full. The operation was rolled back;
    /// free space and retry.
    #[error("database or disk is full; the operation was rolled back")]
    DiskFull,

    /// The file is damaged, or a row breaks an invariant this crate relies on
    /// (for example a checkpoint whose channel value is missing).
    #[error("corrupt database: {message}")]
    Corrupt {
        /// What is damaged.
        message: String,
        /// The cause, when SQLite or a parser reported it.
        #[source]
        source: Option<BoxError>,
    },

    /// The file is an SQLite database but not one agentstate (or LangGraph's
    /// SqliteStore) wrote, or not an SQLite database at all.
    #[error("not an agentstate database: {0}")]
    NotAgentstate(String),

    /// The file was written by a newer agentstate: its schema has migrations
    /// this binary does not know. Upgrade agentstate.
    #[error(
        "the file's {table} is at version {found}, newer than this binary's {supported}; upgrade agentstate"
    )]
    SchemaTooNew {
        /// The migrations table.
        table: &'static str,
        /// The highest version recorded in the file.
        found: i64,
        /// The highest version this binary knows.
        supported: i64,
    },

    /// Any other SQLite error, with its extended code.
    #[error("sqlite error: {source}")]
    Sqlite {
        /// The error from rusqlite.
        #[source]
        source: rusqlite::Error,
    },

    /// A filesystem error outside SQLite.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),

    /// A graph given to [`GraphBuilder::compile`](crate::engine::GraphBuilder::compile)
    /// is malformed: a duplicate or reserved name, an edge to an unknown
    /// node, no entry edge.
    #[error("invalid graph: {0}")]
    InvalidGraph(String),

    /// A superstep's writes do not fit their channels (two writes to a
    /// last-value key, a reducer that fails, an input that is not an
    /// object). The message is LangGraph's where it has one.
    #[error("invalid update: {0}")]
    InvalidUpdate(String),

    /// A node (or its router) failed. Its error is stored as the task's
    /// `__error__` write; invoking the thread again with no input resumes.
    #[error("node {node} failed: {error}")]
    Node {
        /// The node's name.
        node: String,
        /// The failed task's id.
        task_id: String,
        /// What the node returned.
        error: Box<crate::engine::NodeError>,
    },

    /// A run took more supersteps than the graph's recursion limit.
    #[error("Recursion limit of {limit} reached without hitting a stop condition")]
    Recursion {
        /// The limit.
        limit: i64,
    },

    /// A graph was invoked with no input on a thread that has nothing to
    /// resume.
    #[error("received no input and the thread has no checkpoint to resume")]
    EmptyInput,
}

impl Error {
    /// SQLite's primary error code, if this error came from SQLite.
    pub fn sqlite_code(&self) -> Option<rusqlite::ErrorCode> {
        match self {
            Error::Sqlite { source } => source.sqlite_error_code(),
            Error::Busy => Some(rusqlite::ErrorCode::DatabaseBusy),
            Error::DiskFull => Some(rusqlite::ErrorCode::DiskFull),
            _ => None,
        }
    }

    pub(crate) fn invalid_filter(key: impl fmt::Display, reason: impl fmt::Display) -> Self {
        Error::InvalidFilter { key: key.to_string(), reason: reason.to_string() }
    }

    /// The same error again, for a second caller of one failed commit (the
    /// cause, which cannot be copied, is kept as text).
    pub(crate) fn replicate(&self) -> Error {
        let text = |e: &Option<BoxError>| e.as_ref().map(|e| -> BoxError { e.to_string().into() });
        match self {
            Error::InvalidNamespace(m) => Error::InvalidNamespace(m.clone()),
            Error::InvalidFilter { key, reason } => {
                Error::InvalidFilter { key: key.clone(), reason: reason.clone() }
            }
            Error::InvalidConfig(m) => Error::InvalidConfig(m.clone()),
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::NotFound(m) => Error::NotFound(m.clone()),
            Error::Conflict(m) => Error::Conflict(m.clone()),
            Error::DimensionMismatch { expected, got } => {
                Error::DimensionMismatch { expected: *expected, got: *got }
            }
            Error::UnrecordedEmbedder { vectors, configured } => {
                Error::UnrecordedEmbedder { vectors: *vectors, configured: configured.clone() }
            }
            Error::EmbedderMismatch { stored, configured } => {
                Error::EmbedderMismatch { stored: stored.clone(), configured: configured.clone() }
            }
            Error::Embedding { message, source } => {
                Error::Embedding { message: message.clone(), source: text(source) }
            }
            Error::Serialization { message, source } => {
                Error::Serialization { message: message.clone(), source: text(source) }
            }
            Error::UnknownSerialization(m) => Error::UnknownSerialization(m.clone()),
            Error::Busy => Error::Busy,
            Error::DiskFull => Error::DiskFull,
            Error::Corrupt { message, source } => {
                Error::Corrupt { message: message.clone(), source: text(source) }
            }
            Error::NotAgentstate(m) => Error::NotAgentstate(m.clone()),
            Error::SchemaTooNew { table, found, supported } => {
                Error::SchemaTooNew { table, found: *found, supported: *supported }
            }
            Error::Sqlite { source } => match source {
                rusqlite::Error::SqliteFailure(e, m) => {
                    Error::Sqlite { source: rusqlite::Error::SqliteFailure(*e, m.clone()) }
                }
                other => Error::Sqlite {
                    source: rusqlite::Error::ToSqlConversionFailure(other.to_string().into()),
                },
            },
            Error::Io(e) => Error::Io(std::io::Error::new(e.kind(), e.to_string())),
            Error::InvalidGraph(m) => Error::InvalidGraph(m.clone()),
            Error::InvalidUpdate(m) => Error::InvalidUpdate(m.clone()),
            Error::Node { node, task_id, error } => {
                Error::Node { node: node.clone(), task_id: task_id.clone(), error: error.clone() }
            }
            Error::Recursion { limit } => Error::Recursion { limit: *limit },
            Error::EmptyInput => Error::EmptyInput,
        }
    }

    pub(crate) fn corrupt(what: impl fmt::Display) -> Self {
        Error::Corrupt { message: what.to_string(), source: None }
    }

    pub(crate) fn corrupt_from(what: impl fmt::Display, source: impl Into<BoxError>) -> Self {
        Error::Corrupt { message: what.to_string(), source: Some(source.into()) }
    }

    pub(crate) fn embedding(message: impl fmt::Display) -> Self {
        Error::Embedding { message: message.to_string(), source: None }
    }

    pub(crate) fn ser(what: impl fmt::Display) -> Self {
        Error::serialization(what)
    }

    /// A [`Error::Serialization`] with a message and no cause (for custom
    /// [`Serializer`](crate::Serializer)s).
    pub fn serialization(message: impl fmt::Display) -> Self {
        Error::Serialization { message: message.to_string(), source: None }
    }

    /// A [`Error::Serialization`] caused by `source` (for custom
    /// [`Serializer`](crate::Serializer)s wrapping another library's error);
    /// the message is the source's.
    pub fn serialization_from(source: impl Into<BoxError>) -> Self {
        let source = source.into();
        Error::Serialization { message: source.to_string(), source: Some(source) }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        match e.sqlite_error_code() {
            Some(C::DatabaseBusy) | Some(C::DatabaseLocked) => Error::Busy,
            Some(C::DiskFull) => Error::DiskFull,
            Some(C::DatabaseCorrupt) => Error::corrupt_from(e.to_string(), e),
            Some(C::NotADatabase) => Error::NotAgentstate(e.to_string()),
            // A stored value of a type or encoding its column never holds
            // (text that is not UTF-8, a blob where text belongs): a damaged
            // row.
            None if matches!(
                e,
                rusqlite::Error::Utf8Error(..)
                    | rusqlite::Error::FromSqlConversionFailure(..)
                    | rusqlite::Error::InvalidColumnType(..)
                    | rusqlite::Error::IntegralValueOutOfRange(..)
            ) =>
            {
                Error::corrupt_from(e.to_string(), e)
            }
            _ => Error::Sqlite { source: e },
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::serialization_from(e)
    }
}
