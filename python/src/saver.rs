//! The native checkpointer: LangGraph's `BaseCheckpointSaver` calls, with
//! values as the Python serde encoded them (type tag and bytes) and the
//! checkpoint and metadata as JSON text. The Python class
//! `agentstate.AgentStateSaver` wraps it.

use std::collections::BTreeMap;
use std::sync::{Mutex, RwLock};

use agentstate::checkpoint::{ChannelVersions, EncodedTuple, ListIter, PruneStrategy, TypedBytes};
use agentstate::{Checkpoint, CheckpointConfig, Checkpointer, Db, Durability, ListQuery, Metadata};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::errors::{self, to_py};

/// `(channel, type tag, bytes)` rows from Python.
type Encoded<'py> = Vec<(String, String, Bound<'py, PyBytes>)>;

fn owned(rows: Encoded<'_>) -> Vec<(String, TypedBytes)> {
    rows.into_iter().map(|(c, tag, b)| (c, TypedBytes { tag, bytes: b.as_bytes().to_vec() })).collect()
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> agentstate::Result<T> {
    serde_json::from_str(text)
        .map_err(|e| agentstate::Error::InvalidArgument(format!("{what} is not valid: {e}")))
}

fn config(thread: String, ns: String, id: Option<String>) -> CheckpointConfig {
    let mut c = CheckpointConfig::thread(thread).ns(ns);
    c.checkpoint_id = id;
    c
}

/// One checkpoint for Python: `(thread_id, checkpoint_ns, checkpoint_id,
/// parent_id, checkpoint JSON, metadata JSON, [(channel, tag, bytes)],
/// [(task_id, channel, tag, bytes)])`. The JSON is made here, without the
/// GIL; the Python objects in `into_py`.
struct Out {
    t: EncodedTuple,
    checkpoint: String,
    metadata: String,
}

impl Out {
    fn new(t: EncodedTuple) -> agentstate::Result<Out> {
        let checkpoint = serde_json::to_string(&t.checkpoint)?;
        let metadata = serde_json::to_string(&t.metadata)?;
        Ok(Out { t, checkpoint, metadata })
    }

    fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
        let Out { t, checkpoint, metadata } = self;
        let values = PyList::empty(py);
        for (ch, tb) in &t.values {
            values.append((ch, &tb.tag, PyBytes::new(py, &tb.bytes)))?;
        }
        // A list cut from the one this cursor returned before: (channel,
        // None, its length).
        for (ch, n) in &t.prefixes {
            values.append((ch, py.None(), n))?;
        }
        let writes = PyList::empty(py);
        for w in &t.pending_writes {
            writes.append((&w.task_id, &w.channel, &w.value.tag, PyBytes::new(py, &w.value.bytes)))?;
        }
        let parent = t.parent_config.and_then(|p| p.checkpoint_id);
        (
            t.config.thread_id,
            t.config.checkpoint_ns,
            t.config.checkpoint_id,
            parent,
            checkpoint,
            metadata,
            values,
            writes,
        )
            .into_pyobject(py)
    }
}

/// A checkpointer on one agentstate file. `close()` commits what is queued
/// and lets the file go (once calls in flight on other threads, and cursors
/// still open, have finished with it); any later call raises
/// `agentstate.Error`.
#[pyclass(module = "agentstate._native", frozen)]
pub struct Saver {
    open: RwLock<Option<(Db, Checkpointer)>>,
}

impl Saver {
    /// The open file's handles (clones: a close() meanwhile lets the file go
    /// when the caller is done with them), or `agentstate.Error`.
    fn handles(&self) -> PyResult<(Db, Checkpointer)> {
        let guard = self.open.read().map_err(|_| errors::Error::new_err("the saver's lock is poisoned"))?;
        guard.clone().ok_or_else(|| errors::Error::new_err("the saver is closed"))
    }

    fn saver(&self) -> PyResult<Checkpointer> {
        Ok(self.handles()?.1)
    }
}

#[pymethods]
impl Saver {
    /// Opens (creating if needed) the file at `path` (`":memory:"`: an
    /// in-memory database). `durability` is `"normal"` or `"full"`;
    /// `write_behind` queues writes and commits them in the background;
    /// `unstable_encoding`: the serde may give one value different bytes
    /// (encryption), so a version put again keeps its stored value.
    #[new]
    #[pyo3(signature = (path, *, durability = "normal", write_behind = false, unstable_encoding = false))]
    fn new(
        py: Python<'_>,
        path: String,
        durability: &str,
        write_behind: bool,
        unstable_encoding: bool,
    ) -> PyResult<Saver> {
        let durability = match durability {
            "normal" => Durability::Normal,
            "full" => Durability::Full,
            other => {
                return Err(PyValueError::new_err(format!(
                    "durability must be 'normal' or 'full', not {other:?}"
                )))
            }
        };
        let builder = Db::builder().durability(durability).write_behind(write_behind);
        let db = py
            .detach(|| if path == ":memory:" { builder.open_in_memory() } else { builder.open(&path) })
            .map_err(to_py)?;
        let saver = db.checkpointer();
        let saver = if unstable_encoding { saver.with_unstable_encoding() } else { saver };
        Ok(Saver { open: RwLock::new(Some((db.clone(), saver))) })
    }

    /// Stores a checkpoint (inline values in its JSON, the others encoded).
    fn put(
        &self,
        py: Python<'_>,
        thread_id: String,
        checkpoint_ns: String,
        parent_id: Option<String>,
        checkpoint: String,
        values: Encoded<'_>,
        metadata: String,
        new_versions: String,
    ) -> PyResult<()> {
        let saver = self.saver()?;
        let values: BTreeMap<String, TypedBytes> = owned(values).into_iter().collect();
        let config = config(thread_id, checkpoint_ns, parent_id);
        py.detach(|| {
            let checkpoint: Checkpoint = parse("checkpoint", &checkpoint)?;
            let metadata: Metadata = parse("metadata", &metadata)?;
            let new_versions: ChannelVersions = parse("new_versions", &new_versions)?;
            saver.put_encoded(&config, &checkpoint, &values, &metadata, &new_versions)
        })
        .map_err(to_py)?;
        Ok(())
    }

    /// Stores a task's writes for a checkpoint.
    fn put_writes(
        &self,
        py: Python<'_>,
        thread_id: String,
        checkpoint_ns: String,
        checkpoint_id: String,
        writes: Encoded<'_>,
        task_id: String,
        task_path: String,
    ) -> PyResult<()> {
        let saver = self.saver()?;
        let writes = owned(writes);
        let config = config(thread_id, checkpoint_ns, Some(checkpoint_id));
        py.detach(|| saver.put_writes_encoded(&config, &writes, &task_id, &task_path)).map_err(to_py)
    }

    /// The checkpoint `checkpoint_id` (the newest without one), or None.
    #[pyo3(signature = (thread_id, checkpoint_ns, checkpoint_id = None))]
    fn get_tuple<'py>(
        &self,
        py: Python<'py>,
        thread_id: String,
        checkpoint_ns: String,
        checkpoint_id: Option<String>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let saver = self.saver()?;
        let config = config(thread_id, checkpoint_ns, checkpoint_id);
        let out = py
            .detach(|| saver.get_tuple_encoded(&config).and_then(|t| t.map(Out::new).transpose()))
            .map_err(to_py)?;
        out.map(|o| o.into_py(py)).transpose()
    }

    /// A cursor over the matching checkpoints, newest first. With `share`, a
    /// `msgpack` list that is the start of the list this cursor returned for
    /// its channel just before comes as `(channel, None, length)`
    /// (`Checkpointer::list_encoded_sharing`).
    #[pyo3(signature = (thread_id = None, checkpoint_ns = None, checkpoint_id = None, filter = None, before = None, limit = None, share = false))]
    fn list(
        &self,
        py: Python<'_>,
        thread_id: Option<String>,
        checkpoint_ns: Option<String>,
        checkpoint_id: Option<String>,
        filter: Option<String>,
        before: Option<String>,
        limit: Option<usize>,
        share: bool,
    ) -> PyResult<Cursor> {
        let saver = self.saver()?;
        let filter = filter.map(|f| parse::<serde_json::Value>("filter", &f)).transpose().map_err(to_py)?;
        let query = ListQuery { thread_id, checkpoint_ns, checkpoint_id, filter, before, limit };
        let iter = py
            .detach(|| if share { saver.list_encoded_sharing(&query) } else { saver.list_encoded(&query) })
            .map_err(to_py)?;
        Ok(Cursor { iter: Mutex::new(iter) })
    }

    fn delete_thread(&self, py: Python<'_>, thread_id: String) -> PyResult<()> {
        let saver = self.saver()?;
        py.detach(|| saver.delete_thread(&thread_id)).map_err(to_py)
    }

    fn copy_thread(&self, py: Python<'_>, source: String, target: String) -> PyResult<()> {
        let saver = self.saver()?;
        py.detach(|| saver.copy_thread(&source, &target)).map_err(to_py)
    }

    fn prune(&self, py: Python<'_>, thread_ids: Vec<String>, strategy: String) -> PyResult<()> {
        let saver = self.saver()?;
        let strategy: PruneStrategy = strategy.parse().map_err(to_py)?;
        py.detach(|| saver.prune(&thread_ids, strategy)).map_err(to_py)
    }

    fn delete_for_runs(&self, py: Python<'_>, run_ids: Vec<String>) -> PyResult<()> {
        let saver = self.saver()?;
        py.detach(|| saver.delete_for_runs(&run_ids)).map_err(to_py)
    }

    /// Commits what write-behind has queued; with `thread_id`, reports only
    /// a failure of a queued write to that thread (`Db::flush_thread`).
    #[pyo3(signature = (thread_id=None))]
    fn flush(&self, py: Python<'_>, thread_id: Option<String>) -> PyResult<()> {
        let (db, _) = self.handles()?;
        py.detach(|| match &thread_id {
            Some(t) => db.flush_thread(t),
            None => db.flush(),
        })
        .map_err(to_py)
    }

    /// Commits what write-behind has queued and lets the file go; later
    /// calls raise `agentstate.Error`. Idempotent. The file is let go even
    /// if the commit fails (its error is raised).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken =
            self.open.write().map_err(|_| errors::Error::new_err("the saver's lock is poisoned"))?.take();
        // The last handle closes the connections: not while holding the GIL.
        py.detach(move || match taken {
            Some((db, saver)) => {
                let flushed = db.flush();
                drop(saver);
                drop(db);
                flushed
            }
            None => Ok(()),
        })
        .map_err(to_py)
    }
}

/// Checkpoints of a `list` call, read a page at a time.
#[pyclass(module = "agentstate._native", frozen)]
pub struct Cursor {
    iter: Mutex<ListIter<EncodedTuple>>,
}

#[pymethods]
impl Cursor {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let next = py.detach(|| {
            let mut iter = self.iter.lock().unwrap_or_else(|p| p.into_inner());
            iter.next().map(|r| r.and_then(Out::new)).transpose()
        });
        next.map_err(to_py)?.map(|o| o.into_py(py)).transpose()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Saver>()?;
    m.add_class::<Cursor>()?;
    Ok(())
}
