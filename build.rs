//! Declares the `python_venv` cfg, set when `AGENTSTATE_STORE_PYTHON` names
//! the Python interpreter of the reference venv at build time (CI sets it).
//! The tests that read files back with Python's SqliteStore are ignored
//! without it, so that a missing venv shows as ignored tests rather than as
//! passing ones; with it, a missing or broken venv fails them.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(python_venv)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=AGENTSTATE_STORE_PYTHON");
    if std::env::var_os("AGENTSTATE_STORE_PYTHON").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=python_venv");
    }
}
