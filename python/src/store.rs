//! The Store half: `_native.Store`, an agentstate [`Store`] that runs
//! LangGraph's store operations, and `PyEmbedder`, the [`Embedder`] that
//! calls a Python embeddings object.
//!
//! `agentstate/store.py` (`AgentStateStore`) turns LangGraph's ops into
//! plain tuples and the answers back into `Item`s; this module only moves
//! them across:
//!
//! | op | tuple given to `batch` | answer |
//! |---|---|---|
//! | get | `("get", namespace, key, refresh_ttl)` | `None` or an item |
//! | put | `("put", namespace, key, value_json \| None, index, ttl_minutes \| None)` | `None` |
//! | search | `("search", prefix, filter_json \| None, limit, offset, query \| None, refresh_ttl)` | a list of items with a score |
//! | list | `("list", [(match_type, path)], max_depth \| None, limit, offset)` | a list of namespace tuples |
//!
//! `index` is `None` (the configured fields), `False` (no vector) or a list
//! of field paths. An item is `(namespace, key, value_json, created_at,
//! updated_at)` with the times as seconds since the epoch (UTC); a search
//! item adds its score (`None` without one). Values cross as JSON text.
//!
//! Everything that touches the database runs with the GIL released; the
//! embedder takes it back only to call Python.

use std::path::PathBuf;
use std::sync::RwLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentstate::store::{
    Embedder, Get, IndexConfig, Item, ListNamespaces, MatchCondition, Op, OpResult, Put, Search, StoreConfig,
};
use agentstate::{BoxError, Db, Error, Store};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyTuple};
use pyo3::IntoPyObjectExt;
use serde_json::Value;

use crate::errors;

/// Adds the Store's class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStore>()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Errors

/// The Python exception for a crate error: the package's mapping
/// (`errors::to_py`: `ValueError` for bad input, `agentstate.BusyError`,
/// `CorruptError`, `Error`, ...), made more precise for the store:
/// LangGraph's `InvalidNamespaceError` for a namespace, the embedder's own
/// exception when it raised one, and `ValueError` for an embedder that
/// broke its contract or does not match the file's.
fn to_py_err(py: Python<'_>, e: Error) -> PyErr {
    match e {
        Error::InvalidNamespace(message) => invalid_namespace(py, message),
        Error::Embedding { ref source, .. } => {
            match source.as_deref().and_then(|s| s.downcast_ref::<PyErr>()) {
                Some(raised) => raised.clone_ref(py),
                None => PyValueError::new_err(e.to_string()),
            }
        }
        Error::EmbedderMismatch { .. } => PyValueError::new_err(e.to_string()),
        Error::UnrecordedEmbedder { .. } => PyValueError::new_err(format!(
            "{e} (AgentStateStore: index={{..., \"adopt_existing_vectors\": True}} adopts them, \
             reindex=True re-embeds every item)"
        )),
        other => errors::to_py(other),
    }
}

/// `langgraph.store.base.InvalidNamespaceError(message)` (a `ValueError`).
fn invalid_namespace(py: Python<'_>, message: String) -> PyErr {
    let class = py.import("langgraph.store.base").and_then(|m| m.getattr("InvalidNamespaceError"));
    match class.and_then(|c| c.call1((message.clone(),))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => PyValueError::new_err(message),
    }
}

// ---------------------------------------------------------------------------
// The embedder

/// An [`Embedder`] that calls a Python object's `embed_documents(texts)` and
/// `embed_query(text)` (in the package, the bridge in `store.py` that picks
/// the sync or async methods of the user's LangChain `Embeddings`). The
/// store calls it with the GIL released; each call takes the GIL. A Python
/// exception travels inside [`Error::Embedding`] and is raised again as is.
struct PyEmbedder {
    target: Py<PyAny>,
    name: String,
    dims: usize,
}

impl Embedder for PyEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Python::attach(|py| self.target.bind(py).call_method1("embed_documents", (texts,))?.extract())
            .map_err(|e: PyErr| Box::new(e) as BoxError)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Python::attach(|py| self.target.bind(py).call_method1("embed_query", (text,))?.extract())
            .map_err(|e: PyErr| Box::new(e) as BoxError)
    }
}

// ---------------------------------------------------------------------------
// The store

/// `(embedder, dims, embedder_name, fields, adopt_existing_vectors)`.
type IndexTuple = (Py<PyAny>, usize, String, Option<Vec<String>>, bool);

/// An agentstate Store on one file. `close()` lets the file go (once calls
/// in flight on other threads have returned); any later call raises
/// `agentstate.Error`.
#[pyclass(frozen, name = "Store", module = "agentstate._native")]
pub struct PyStore {
    store: RwLock<Option<Store>>,
}

impl PyStore {
    fn store(&self) -> PyResult<Store> {
        let guard = self.store.read().map_err(|_| errors::Error::new_err("the store's lock is poisoned"))?;
        guard.clone().ok_or_else(|| errors::Error::new_err("the store is closed"))
    }
}

#[pymethods]
impl PyStore {
    /// Opens (creating and migrating if needed) the store in the file at
    /// `path` (`":memory:"`: a private in-memory database). With `index`,
    /// `(embedder, dims, embedder_name, fields, adopt_existing_vectors)`, the
    /// store has a vector index: `embedder` is an object with
    /// `embed_documents` and `embed_query`, `fields` the embedded paths
    /// (`None`: the whole document). `reindex` re-embeds every item now
    /// instead of refusing a file whose vectors another embedder made.
    /// `search_memory`: the bytes the in-memory search copy may use (`None`:
    /// the crate's default; see `StoreConfig::with_search_memory`).
    #[new]
    #[pyo3(signature = (path, *, index=None, reindex=false, search_memory=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        index: Option<IndexTuple>,
        reindex: bool,
        search_memory: Option<usize>,
    ) -> PyResult<PyStore> {
        let mut config = StoreConfig::new();
        if let Some(bytes) = search_memory {
            config = config.with_search_memory(bytes);
        }
        if let Some((target, dims, name, fields, adopt)) = index {
            let mut index =
                IndexConfig::new(PyEmbedder { target, name, dims }).with_adopt_existing_vectors(adopt);
            if let Some(fields) = fields {
                index = index.with_fields(fields);
            }
            config = config.with_index(index);
        }
        let store = py
            .detach(|| {
                let db = if path.as_os_str() == ":memory:" { Db::open_in_memory() } else { Db::open(&path) }?;
                if reindex {
                    db.reindex_store(config)
                } else {
                    db.store(config)
                }
            })
            .map_err(|e| to_py_err(py, e))?;
        Ok(PyStore { store: RwLock::new(Some(store)) })
    }

    /// Runs the ops (tuples, see the module's documentation) as one
    /// transaction and returns one answer per op.
    fn batch<'py>(&self, py: Python<'py>, ops: Vec<Bound<'py, PyTuple>>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let store = self.store()?;
        let ops = ops.iter().map(op_from_py).collect::<PyResult<Vec<Op>>>()?;
        // The clone moves in: if close() ran meanwhile, the file is let go here,
        // without the GIL.
        let results = py.detach(move || store.batch(ops)).map_err(|e| to_py_err(py, e))?;
        results.into_iter().map(|r| result_to_py(py, r)).collect()
    }

    /// Deletes the expired items now; returns how many.
    fn sweep_expired(&self, py: Python<'_>) -> PyResult<usize> {
        let store = self.store()?;
        py.detach(move || store.sweep_expired()).map_err(|e| to_py_err(py, e))
    }

    /// Re-embeds every item with the configured embedder (one transaction)
    /// and records it in the file; returns the number of items.
    fn reindex(&self, py: Python<'_>) -> PyResult<usize> {
        let store = self.store()?;
        py.detach(move || store.reindex()).map_err(|e| to_py_err(py, e))
    }

    /// Lets the file go. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken =
            self.store.write().map_err(|_| errors::Error::new_err("the store's lock is poisoned"))?.take();
        // The last handle closes the connections: not while holding the GIL.
        py.detach(move || drop(taken));
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Ops in, results out

/// `("put", namespace, key, value_json, index, ttl_minutes)`.
type PutTuple<'py> =
    (String, Vec<String>, String, Option<Bound<'py, PyBytes>>, Bound<'py, PyAny>, Option<f64>);
/// `("search", prefix, filter_json, limit, offset, query, refresh_ttl)`.
type SearchTuple<'py> =
    (String, Vec<String>, Option<Bound<'py, PyBytes>>, usize, usize, Option<String>, bool);
/// `("list", [(match_type, path)], max_depth, limit, offset)`.
type ListTuple = (String, Vec<(String, Vec<String>)>, Option<usize>, usize, usize);

fn op_from_py(op: &Bound<'_, PyTuple>) -> PyResult<Op> {
    let kind: String = op.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "get" => {
            let (_, namespace, key, refresh): (String, Vec<String>, String, bool) = op.extract()?;
            Get::new(&namespace, key).refresh_ttl(refresh).into()
        }
        "put" => {
            let (_, namespace, key, value, index, ttl): PutTuple<'_> = op.extract()?;
            let Some(value) = value else { return Ok(Put::delete(&namespace, key).into()) };
            let mut put = Put::new(&namespace, key, json_from(&value)?);
            if index.is_instance_of::<PyBool>() {
                if index.is_truthy()? {
                    return Err(PyTypeError::new_err("index must be None, False or a list of field paths"));
                }
                put = put.no_index();
            } else if !index.is_none() {
                let fields: Vec<String> = index.extract().map_err(|_| {
                    PyTypeError::new_err("index must be None, False or a list of field paths")
                })?;
                put = put.index_fields(fields);
            }
            put = match ttl {
                None => put.no_ttl(),
                Some(minutes) => put.ttl(ttl_from_minutes(minutes)?),
            };
            put.into()
        }
        "search" => {
            let (_, prefix, filter, limit, offset, query, refresh): SearchTuple<'_> = op.extract()?;
            let mut search = Search::new(&prefix).limit(limit).offset(offset).refresh_ttl(refresh);
            if let Some(filter) = filter {
                search = search.filter(json_from(&filter)?);
            }
            if let Some(query) = query {
                search = search.query(query);
            }
            search.into()
        }
        "list" => {
            let (_, conditions, max_depth, limit, offset): ListTuple = op.extract()?;
            let mut list = ListNamespaces::new().limit(limit).offset(offset);
            for (match_type, path) in conditions {
                list = list.condition(match match_type.as_str() {
                    "prefix" => MatchCondition::prefix(path),
                    "suffix" => MatchCondition::suffix(path),
                    other => {
                        return Err(PyValueError::new_err(format!(
                            "match_type must be \"prefix\" or \"suffix\", got {other:?}"
                        )))
                    }
                });
            }
            if let Some(depth) = max_depth {
                list = list.max_depth(depth);
            }
            list.into()
        }
        other => return Err(PyValueError::new_err(format!("unknown store op {other:?}"))),
    })
}

/// JSON from `orjson.dumps`: only its depth can fail here (serde_json reads
/// 128 levels; the store keeps 127).
fn json_from(bytes: &Bound<'_, PyBytes>) -> PyResult<Value> {
    serde_json::from_slice(bytes.as_bytes()).map_err(|e| {
        PyValueError::new_err(format!(
            "could not read the JSON ({e}); the store keeps values nesting at most 127 levels of \
             objects and arrays"
        ))
    })
}

/// LangGraph's TTL (minutes) as a duration: finite and not negative.
fn ttl_from_minutes(minutes: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(minutes * 60.0).map_err(|_| {
        PyValueError::new_err(format!("ttl must be a finite, non-negative number of minutes, got {minutes}"))
    })
}

fn result_to_py(py: Python<'_>, result: OpResult) -> PyResult<Bound<'_, PyAny>> {
    match result {
        OpResult::Item(None) | OpResult::Done => Ok(py.None().into_bound(py)),
        OpResult::Item(Some(item)) => item_to_py(py, item, None),
        OpResult::Items(hits) => {
            let items = hits
                .into_iter()
                .map(|hit| item_to_py(py, hit.item, Some(hit.score)))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(PyList::new(py, items)?.into_any())
        }
        OpResult::Namespaces(namespaces) => {
            let tuples =
                namespaces.iter().map(|ns| PyTuple::new(py, ns.labels())).collect::<PyResult<Vec<_>>>()?;
            Ok(PyList::new(py, tuples)?.into_any())
        }
        _ => Err(errors::Error::new_err("the store returned a result this module does not know")),
    }
}

/// `(namespace, key, value_json, created_at, updated_at)`, and the score if
/// `score` is given (a search item).
fn item_to_py(py: Python<'_>, item: Item, score: Option<Option<f64>>) -> PyResult<Bound<'_, PyAny>> {
    let namespace = PyTuple::new(py, item.namespace.labels())?;
    let value = serde_json::to_string(&item.value).map_err(|e| errors::Error::new_err(e.to_string()))?;
    let (created, updated) = (seconds(item.created_at), seconds(item.updated_at));
    match score {
        None => (namespace, item.key, value, created, updated).into_bound_py_any(py),
        Some(score) => (namespace, item.key, value, created, updated, score).into_bound_py_any(py),
    }
}

/// Seconds since the Unix epoch (negative before it).
fn seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}
