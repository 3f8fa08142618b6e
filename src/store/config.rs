//! How a Store behaves: [`StoreConfig`], [`IndexConfig`] and [`TtlConfig`].
//!
//! Configs are built with consuming `with_*` methods and read with getters
//! of the same name without the prefix; they are `#[non_exhaustive]` so that
//! new settings do not break callers.

use std::sync::Arc;
use std::time::Duration;

use super::embed::{check_dims, Embedder, HashEmbedder};
use crate::error::{Error, Result};

/// How a [`Store`](super::Store) behaves. `StoreConfig::new()` (or
/// `default()`) is a plain store: no vector index, no TTL.
///
/// ```
/// use std::time::Duration;
/// use agentstate::store::{IndexConfig, StoreConfig, TtlConfig};
///
/// let config = StoreConfig::new()
///     .with_index(IndexConfig::hashed(64)?.with_fields(["text"]))
///     .with_ttl(TtlConfig::new().with_default_ttl(Duration::from_secs(3600)));
/// assert_eq!(config.index().map(|i| i.dims()), Some(64));
/// # Ok::<(), agentstate::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct StoreConfig {
    index: Option<IndexConfig>,
    ttl: Option<TtlConfig>,
    search_memory: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig { index: None, ttl: None, search_memory: StoreConfig::DEFAULT_SEARCH_MEMORY }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("index", &self.index)
            .field("ttl", &self.ttl)
            .field("search_memory", &self.search_memory)
            .finish()
    }
}

impl StoreConfig {
    /// The default [search memory](Self::with_search_memory): 256 MiB, enough
    /// to keep about 300,000 items with one 384-dimension vector and a small
    /// value (~150 bytes of JSON) each in memory.
    pub const DEFAULT_SEARCH_MEMORY: usize = 256 << 20;

    /// A plain store: no index, no TTL, the default search memory.
    pub fn new() -> StoreConfig {
        StoreConfig::default()
    }

    /// How many bytes (approximately) the in-memory copy that search keeps of
    /// the searched namespaces may use, across all namespaces (default
    /// [`DEFAULT_SEARCH_MEMORY`](Self::DEFAULT_SEARCH_MEMORY)).
    ///
    /// Search keeps each searched namespace prefix's items and vectors in
    /// memory while they fit, and drops the least recently searched ones to
    /// stay under this budget. A search whose namespaces would not fit keeps
    /// instead the first of their vectors that fit in the budget (an `i8`
    /// copy and the items' keys, no values: about `dims + 30` bytes a
    /// vector; a search over it needs 12 bytes an item more while it runs),
    /// and streams the rest from the file, computing cosine distances in SQL
    /// (with sqlite-vec), in memory bounded by its `offset + limit`. Every way gives the same results in the same order
    /// with the same scores: the budget trades speed for memory, never
    /// exactness. `0` always searches from the file.
    #[must_use]
    pub fn with_search_memory(mut self, bytes: usize) -> StoreConfig {
        self.search_memory = bytes;
        self
    }

    /// The search memory budget in bytes (see
    /// [`with_search_memory`](Self::with_search_memory)).
    pub fn search_memory(&self) -> usize {
        self.search_memory
    }

    /// Adds a vector index: searches with a query rank items by similarity.
    #[must_use]
    pub fn with_index(mut self, index: IndexConfig) -> StoreConfig {
        self.index = Some(index);
        self
    }

    /// Adds expiry of items.
    #[must_use]
    pub fn with_ttl(mut self, ttl: TtlConfig) -> StoreConfig {
        self.ttl = Some(ttl);
        self
    }

    /// The vector index, if any.
    pub fn index(&self) -> Option<&IndexConfig> {
        self.index.as_ref()
    }

    /// The expiry settings, if any.
    pub fn ttl(&self) -> Option<&TtlConfig> {
        self.ttl.as_ref()
    }
}

/// The vector index: the embedder (which gives the dimension) and which
/// fields of each item are embedded.
#[derive(Clone)]
#[non_exhaustive]
pub struct IndexConfig {
    embedder: Arc<dyn Embedder>,
    fields: Vec<String>,
    adopt_existing_vectors: bool,
}

impl std::fmt::Debug for IndexConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexConfig")
            .field("embedder", &self.embedder.name())
            .field("dims", &self.embedder.dims())
            .field("fields", &self.fields)
            .field("adopt_existing_vectors", &self.adopt_existing_vectors)
            .finish()
    }
}

impl IndexConfig {
    /// An index over the whole document (fields `["$"]`) with `embedder`.
    pub fn new(embedder: impl Embedder) -> IndexConfig {
        IndexConfig::shared(Arc::new(embedder))
    }

    /// Like [`new`](Self::new), with an embedder shared with other code.
    pub fn shared(embedder: Arc<dyn Embedder>) -> IndexConfig {
        IndexConfig { embedder, fields: vec!["$".into()], adopt_existing_vectors: false }
    }

    /// The built-in, offline, deterministic [`HashEmbedder`] with `dims`
    /// dimensions. It is lexical (shared words and character n-grams), not
    /// semantic.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `dims` is 0 or over
    /// [`MAX_DIMS`](super::MAX_DIMS).
    pub fn hashed(dims: usize) -> Result<IndexConfig> {
        Ok(IndexConfig::new(HashEmbedder::new(dims)?))
    }

    /// Embeds these field paths instead of the whole document (LangGraph
    /// syntax: `"text"`, `"a.b"`, `"l[*]"`, `"{a,b}"`, `"$"` for the whole
    /// document). An empty list means the whole document.
    #[must_use]
    pub fn with_fields<I, S>(mut self, fields: I) -> IndexConfig
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.fields = fields.into_iter().map(Into::into).collect();
        self
    }

    /// Whether to take the vectors of a file that records no embedder as
    /// this embedder's (default false). A file written by LangGraph's
    /// Python `SqliteStore` holds vectors but does not say which model made
    /// them; opening it with an index is refused with
    /// [`Error::UnrecordedEmbedder`] unless this is set (then this embedder
    /// is recorded as theirs) or the store is reindexed
    /// ([`Db::reindex_store`](crate::Db::reindex_store)). Set it only when
    /// you know the same model made them: other vectors give confident
    /// nonsense scores. Vectors of another length than this embedder's
    /// dims are refused even then ([`Error::DimensionMismatch`]). It has no
    /// effect on a file that records an embedder.
    #[must_use]
    pub fn with_adopt_existing_vectors(mut self, adopt: bool) -> IndexConfig {
        self.adopt_existing_vectors = adopt;
        self
    }

    /// Whether vectors of an unrecorded embedder are adopted.
    pub fn adopt_existing_vectors(&self) -> bool {
        self.adopt_existing_vectors
    }

    /// The vectors' length: the embedder's [`Embedder::dims`].
    pub fn dims(&self) -> usize {
        self.embedder.dims()
    }

    /// The embedder.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The embedded field paths.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }
}

/// Expiry of items. TTLs are [`Duration`]s; the file stores them in
/// (fractional) minutes, as LangGraph's Python store does.
///
/// ```
/// use std::time::Duration;
/// use agentstate::store::TtlConfig;
///
/// let ttl = TtlConfig::new()
///     .with_default_ttl(Duration::from_secs(30 * 60))
///     .with_refresh_on_read(false)
///     .with_sweep_interval(Duration::from_secs(60));
/// assert_eq!(ttl.default_ttl(), Some(Duration::from_secs(1800)));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TtlConfig {
    refresh_on_read: bool,
    default_ttl: Option<Duration>,
    sweep_interval: Option<Duration>,
}

impl Default for TtlConfig {
    fn default() -> Self {
        TtlConfig { refresh_on_read: true, default_ttl: None, sweep_interval: None }
    }
}

impl TtlConfig {
    /// Reads refresh, no default TTL, no background sweeper.
    pub fn new() -> TtlConfig {
        TtlConfig::default()
    }

    /// Whether reads (get, search) push an item's expiry forward by its TTL
    /// (default true); each read can override it.
    ///
    /// The refresh is a write, tried without waiting: if another connection
    /// holds the write lock at that instant (or the database is read-only),
    /// it is skipped, and the read answers with the expiry it found instead
    /// of waiting or failing with [`Error::Busy`]. The next read that finds
    /// the lock free refreshes. (A batch that also puts takes the lock anyway
    /// and always refreshes.)
    #[must_use]
    pub fn with_refresh_on_read(mut self, refresh: bool) -> TtlConfig {
        self.refresh_on_read = refresh;
        self
    }

    /// The TTL of puts that do not give one. At most [`MAX_TTL`].
    #[must_use]
    pub fn with_default_ttl(mut self, ttl: Duration) -> TtlConfig {
        self.default_ttl = Some(ttl);
        self
    }

    /// Runs a background thread that deletes expired items this often; it
    /// stops when the last handle of the store is dropped. Must be > 0.
    #[must_use]
    pub fn with_sweep_interval(mut self, every: Duration) -> TtlConfig {
        self.sweep_interval = Some(every);
        self
    }

    /// Whether reads refresh TTLs by default.
    pub fn refresh_on_read(&self) -> bool {
        self.refresh_on_read
    }

    /// The TTL of puts that do not give one.
    pub fn default_ttl(&self) -> Option<Duration> {
        self.default_ttl
    }

    /// How often the background sweeper runs, if it does.
    pub fn sweep_interval(&self) -> Option<Duration> {
        self.sweep_interval
    }
}

/// The longest TTL: 10⁹ minutes (about 1,900 years), so that every expiry
/// is a date SQLite can write.
pub const MAX_TTL: Duration = Duration::from_secs(60_000_000_000);

/// A TTL in the file's unit (minutes), checked.
pub(crate) fn ttl_minutes(ttl: Duration) -> Result<f64> {
    if ttl > MAX_TTL {
        return Err(Error::InvalidArgument(format!(
            "a TTL must be at most {} minutes, got {:?}",
            MAX_TTL.as_secs() / 60,
            ttl
        )));
    }
    Ok(ttl.as_secs_f64() / 60.0)
}

/// Checks the durations of a config: TTL in range, sweep interval > 0.
pub(crate) fn check(config: &StoreConfig) -> Result<()> {
    if let Some(ttl) = &config.ttl {
        if let Some(t) = ttl.default_ttl {
            ttl_minutes(t)?;
        }
        if ttl.sweep_interval == Some(Duration::ZERO) {
            return Err(Error::InvalidArgument("the sweep interval must be > 0".into()));
        }
    }
    if let Some(index) = &config.index {
        check_dims("index", index.dims())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_convert_to_minutes_and_reject_overflow() {
        assert_eq!(ttl_minutes(Duration::from_secs(90)).unwrap(), 1.5);
        assert_eq!(ttl_minutes(MAX_TTL).unwrap(), 1e9);
        assert!(matches!(ttl_minutes(Duration::MAX), Err(Error::InvalidArgument(_))));
        let zero = StoreConfig::new().with_ttl(TtlConfig::new().with_sweep_interval(Duration::ZERO));
        assert!(matches!(check(&zero), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn index_dims_come_from_the_embedder() {
        let index = IndexConfig::hashed(12).unwrap();
        assert_eq!(index.dims(), 12);
        assert_eq!(index.fields(), ["$"]);
    }
}
