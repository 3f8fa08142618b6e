//! Rust errors as Python exceptions: bad input is `ValueError`, a missing
//! checkpoint `KeyError`; everything else an `agentstate.Error` subclass.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    agentstate,
    Error,
    PyException,
    "Any error agentstate reports that is not about bad input."
);
create_exception!(
    agentstate,
    ConflictError,
    Error,
    "Another writer got there first (the thread moved on, or a version was reused with another value)."
);
create_exception!(
    agentstate,
    CorruptError,
    Error,
    "The file is damaged: a row does not parse, or a stored value is missing."
);
create_exception!(
    agentstate,
    BusyError,
    Error,
    "Another process held the file for longer than the busy timeout."
);

/// The Python exception for an agentstate error.
pub fn to_py(e: agentstate::Error) -> PyErr {
    use agentstate::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidNamespace(_)
        | E::InvalidFilter { .. }
        | E::InvalidConfig(_)
        | E::InvalidArgument(_)
        | E::DimensionMismatch { .. }
        | E::Serialization { .. }
        | E::UnknownSerialization(_) => PyValueError::new_err(msg),
        E::NotFound(_) => PyKeyError::new_err(msg),
        E::Conflict(_) => ConflictError::new_err(msg),
        E::Corrupt { .. } => CorruptError::new_err(msg),
        E::Busy => BusyError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    Ok(())
}
