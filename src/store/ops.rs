//! The Store's operations, one type each: [`Get`], [`Put`], [`Search`] and
//! [`ListNamespaces`]. The same value is the argument of the direct call
//! ([`Store::search`](super::Store::search), ...) and, wrapped in [`Op`], an
//! operation of a [`Store::batch`](super::Store::batch).
//!
//! Every constructor that takes a namespace accepts anything that is a slice
//! of labels: `&["users", "alice"]`, a [`Namespace`] (for example one
//! returned by `list_namespaces`), `&Vec<String>`, `&[String]`.

use std::time::Duration;

use serde_json::Value;

use super::item::{Item, SearchItem};
use super::namespace::{MatchCondition, Namespace};

pub(crate) fn labels<S: AsRef<str>>(ns: &[S]) -> Vec<String> {
    ns.iter().map(|s| s.as_ref().to_owned()).collect()
}

/// Read one item. Direct call: [`Store::get`](super::Store::get) or
/// [`Store::get_with`](super::Store::get_with).
#[derive(Clone, Debug, PartialEq)]
pub struct Get {
    pub(crate) namespace: Vec<String>,
    pub(crate) key: String,
    pub(crate) refresh_ttl: Option<bool>,
}

impl Get {
    /// The item at (`namespace`, `key`).
    pub fn new<S: AsRef<str>>(namespace: &[S], key: impl Into<String>) -> Get {
        Get { namespace: labels(namespace), key: key.into(), refresh_ttl: None }
    }

    /// Whether reading it pushes its expiry forward (default: the store's
    /// [`TtlConfig::refresh_on_read`](super::TtlConfig::refresh_on_read)).
    #[must_use]
    pub fn refresh_ttl(mut self, refresh: bool) -> Get {
        self.refresh_ttl = Some(refresh);
        self
    }
}

/// Which vectors a put makes (LangGraph's `index` argument).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum IndexChoice {
    /// The store's configured fields (`index=None`).
    #[default]
    Default,
    /// These field paths instead (`index=[...]`).
    Fields(Vec<String>),
    /// No vector for this item (`index=False`).
    Off,
}

/// The TTL of a put.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) enum TtlChoice {
    /// The store's default TTL (none if not configured).
    #[default]
    Default,
    /// Never expires.
    Never,
    /// Expires this long after the put (or the last read that refreshed it).
    After(Duration),
}

/// Write one item, or delete it. Direct call:
/// [`Store::put`](super::Store::put), [`Store::put_with`](super::Store::put_with)
/// or [`Store::delete`](super::Store::delete).
///
/// A put gets the store's configured index fields and default TTL unless it
/// says otherwise, in a batch as in a direct call.
///
/// ```
/// use std::time::Duration;
/// use agentstate::store::Put;
/// use serde_json::json;
///
/// let put = Put::new(&["users", "alice"], "prefs", json!({"theme": "dark"}))
///     .index_fields(["theme"])
///     .ttl(Duration::from_secs(3600));
/// # let _ = put;
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Put {
    pub(crate) namespace: Vec<String>,
    pub(crate) key: String,
    pub(crate) value: Option<Value>,
    pub(crate) index: IndexChoice,
    pub(crate) ttl: TtlChoice,
}

impl Put {
    /// Store `value` (a JSON object) at (`namespace`, `key`), replacing an
    /// existing item (keeping its creation time) and its vectors.
    pub fn new<S: AsRef<str>>(namespace: &[S], key: impl Into<String>, value: Value) -> Put {
        Put {
            namespace: labels(namespace),
            key: key.into(),
            value: Some(value),
            index: IndexChoice::Default,
            ttl: TtlChoice::Default,
        }
    }

    /// Delete the item at (`namespace`, `key`) and its vectors (LangGraph's
    /// put with `value=None`). Deleting a missing item is a no-op.
    pub fn delete<S: AsRef<str>>(namespace: &[S], key: impl Into<String>) -> Put {
        Put {
            namespace: labels(namespace),
            key: key.into(),
            value: None,
            index: IndexChoice::Default,
            ttl: TtlChoice::Never,
        }
    }

    /// Embed these field paths of this item instead of the configured ones
    /// (LangGraph's `index=[...]`; each path is tokenized, so `"$"` here is
    /// a key named `$`).
    #[must_use]
    pub fn index_fields<I, S>(mut self, paths: I) -> Put
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.index = IndexChoice::Fields(paths.into_iter().map(Into::into).collect());
        self
    }

    /// Make no vector for this item (LangGraph's `index=False`): it is found
    /// by searches but never scored.
    #[must_use]
    pub fn no_index(mut self) -> Put {
        self.index = IndexChoice::Off;
        self
    }

    /// Expire this long after the put (or the last read that refreshed it).
    /// At most [`MAX_TTL`](super::MAX_TTL).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Put {
        self.ttl = TtlChoice::After(ttl);
        self
    }

    /// Never expire, whatever the store's default TTL.
    #[must_use]
    pub fn no_ttl(mut self) -> Put {
        self.ttl = TtlChoice::Never;
        self
    }
}

/// Find items under a namespace prefix. Direct call:
/// [`Store::search`](super::Store::search).
///
/// The prefix is label-aligned: `["users"]` finds `("users", "alice")` but
/// not `("users2",)`. With a [`query`](Self::query) (which needs a store
/// with an index) items are ranked by cosine similarity, best vector of each
/// item; without, newest first. At most 10 results by default.
///
/// ```
/// use agentstate::store::Search;
/// use serde_json::json;
///
/// let search = Search::new(&["users"]).query("hiking").filter(json!({"kind": "fact"})).limit(5);
/// let everything = Search::all();
/// # let _ = (search, everything);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    pub(crate) prefix: Vec<String>,
    pub(crate) filter: Option<Value>,
    pub(crate) limit: usize,
    pub(crate) offset: usize,
    pub(crate) query: Option<String>,
    pub(crate) refresh_ttl: Option<bool>,
}

impl Search {
    /// Items under the namespace `prefix` (empty: every item).
    pub fn new<S: AsRef<str>>(prefix: &[S]) -> Search {
        Search { prefix: labels(prefix), filter: None, limit: 10, offset: 0, query: None, refresh_ttl: None }
    }

    /// Every item of the store (the empty prefix).
    pub fn all() -> Search {
        Search::new::<&str>(&[])
    }

    /// Rank by similarity to `text`. The store must have an index: on a
    /// store without one the search fails with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    #[must_use]
    pub fn query(mut self, text: impl Into<String>) -> Search {
        self.query = Some(text.into());
        self
    }

    /// Keep items whose value matches `filter`, in the
    /// [filter language](crate::filter).
    #[must_use]
    pub fn filter(mut self, filter: Value) -> Search {
        self.filter = Some(filter);
        self
    }

    /// At most `n` results (default 10).
    #[must_use]
    pub fn limit(mut self, n: usize) -> Search {
        self.limit = n;
        self
    }

    /// Skip the first `n` results (default 0).
    #[must_use]
    pub fn offset(mut self, n: usize) -> Search {
        self.offset = n;
        self
    }

    /// Whether the returned items' expiry is pushed forward (default: the
    /// store's [`TtlConfig::refresh_on_read`](super::TtlConfig::refresh_on_read)).
    #[must_use]
    pub fn refresh_ttl(mut self, refresh: bool) -> Search {
        self.refresh_ttl = Some(refresh);
        self
    }
}

/// List the namespaces that hold (unexpired) items, in tuple order. Direct
/// call: [`Store::list_namespaces`](super::Store::list_namespaces).
///
/// ```
/// use agentstate::store::ListNamespaces;
///
/// let list = ListNamespaces::new().prefix(&["users", "*"]).suffix(&["memories"]).max_depth(3);
/// # let _ = list;
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ListNamespaces {
    pub(crate) conditions: Vec<MatchCondition>,
    pub(crate) max_depth: Option<usize>,
    pub(crate) limit: usize,
    pub(crate) offset: usize,
}

impl Default for ListNamespaces {
    fn default() -> Self {
        ListNamespaces { conditions: vec![], max_depth: None, limit: 100, offset: 0 }
    }
}

impl ListNamespaces {
    /// Every namespace, at most 100.
    pub fn new() -> ListNamespaces {
        ListNamespaces::default()
    }

    /// Only namespaces starting with these labels (`"*"` matches any one
    /// label).
    #[must_use]
    pub fn prefix<S: AsRef<str>>(self, labels: &[S]) -> ListNamespaces {
        self.condition(MatchCondition::prefix(self::labels(labels)))
    }

    /// Only namespaces ending with these labels (`"*"` matches any one
    /// label).
    #[must_use]
    pub fn suffix<S: AsRef<str>>(self, labels: &[S]) -> ListNamespaces {
        self.condition(MatchCondition::suffix(self::labels(labels)))
    }

    /// Only namespaces matching `condition` (conditions are ANDed).
    #[must_use]
    pub fn condition(mut self, condition: MatchCondition) -> ListNamespaces {
        self.conditions.push(condition);
        self
    }

    /// Truncate namespaces to their first `depth` labels (then
    /// de-duplicate). `0` gives the empty namespace, as LangGraph's
    /// in-memory store does.
    #[must_use]
    pub fn max_depth(mut self, depth: usize) -> ListNamespaces {
        self.max_depth = Some(depth);
        self
    }

    /// At most `n` namespaces (default 100).
    #[must_use]
    pub fn limit(mut self, n: usize) -> ListNamespaces {
        self.limit = n;
        self
    }

    /// Skip the first `n` (default 0).
    #[must_use]
    pub fn offset(mut self, n: usize) -> ListNamespaces {
        self.offset = n;
        self
    }
}

/// One operation of a [`Store::batch`](super::Store::batch).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// Read one item.
    Get(Get),
    /// Write or delete one item.
    Put(Put),
    /// Search.
    Search(Search),
    /// List namespaces.
    ListNamespaces(ListNamespaces),
}

impl From<Get> for Op {
    fn from(op: Get) -> Op {
        Op::Get(op)
    }
}

impl From<Put> for Op {
    fn from(op: Put) -> Op {
        Op::Put(op)
    }
}

impl From<Search> for Op {
    fn from(op: Search) -> Op {
        Op::Search(op)
    }
}

impl From<ListNamespaces> for Op {
    fn from(op: ListNamespaces) -> Op {
        Op::ListNamespaces(op)
    }
}

/// The result of one [`Op`], in the same position.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum OpResult {
    /// Of a [`Get`].
    Item(Option<Item>),
    /// Of a [`Put`].
    Done,
    /// Of a [`Search`].
    Items(Vec<SearchItem>),
    /// Of a [`ListNamespaces`].
    Namespaces(Vec<Namespace>),
}
