//! The native half of the `agentstate` Python package: LangGraph's saver and
//! store on an agentstate file. The Python classes in `agentstate/` hold the
//! LangGraph-facing logic (serde, config shapes); this module moves typed
//! bytes and JSON in and out of the Rust crate, releasing the GIL while it
//! works.

use pyo3::prelude::*;

mod errors;
mod importer;
mod saver;
mod store;

/// The crate version this module was built from.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    errors::register(m)?;
    saver::register(m)?;
    store::register(m)?;
    importer::register(m)?;
    Ok(())
}
