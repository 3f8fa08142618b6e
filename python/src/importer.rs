//! `agentstate.import_sqlite_saver(src, dst)`: the crate's importer
//! (`agentstate::import::import_sqlite_saver`), without the GIL.

use std::path::PathBuf;

use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::to_py;

/// Converts the LangGraph SqliteSaver file `src` (and its SqliteStore
/// tables) into the agentstate file `dst` and returns the counts: threads,
/// namespaces, checkpoints, writes, store_items, store_vectors,
/// orphan_vectors_skipped, source_bytes, destination_bytes, merged.
#[pyfunction]
pub fn import_sqlite_saver<'py>(py: Python<'py>, src: PathBuf, dst: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let report = py.detach(|| agentstate::import::import_sqlite_saver(&src, &dst)).map_err(|e| match e {
        // A missing source file is Python's FileNotFoundError.
        agentstate::Error::NotFound(m) => PyFileNotFoundError::new_err(m),
        other => to_py(other),
    })?;
    let out = PyDict::new(py);
    out.set_item("threads", report.threads)?;
    out.set_item("namespaces", report.namespaces)?;
    out.set_item("checkpoints", report.checkpoints)?;
    out.set_item("writes", report.writes)?;
    out.set_item("store_items", report.store_items)?;
    out.set_item("store_vectors", report.store_vectors)?;
    out.set_item("orphan_vectors_skipped", report.orphan_vectors_skipped)?;
    out.set_item("source_bytes", report.source_bytes)?;
    out.set_item("destination_bytes", report.destination_bytes)?;
    out.set_item("merged", report.merged)?;
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(import_sqlite_saver, m)?)
}
