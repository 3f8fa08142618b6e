//! Scaffolding shared by the reliability and multi-process tests: the soak
//! switch, the Store configuration they write with, and the child-process
//! entry points of a test binary.
//!
//! A child entry point is a `#[test]` marked
//! `#[ignore = "child-process entry point: run by <parent test>"]`, so that
//! it shows as ignored in an ordinary run and never counts as a passing
//! test; its parent runs it with [`child_command`]. Run on its own, without
//! the environment its parent sets, a child fails (see [`child_env`]).

use std::path::Path;
use std::process::{Command, Stdio};

use agentstate::store::IndexConfig;
use agentstate::StoreConfig;

/// True when `AGENTSTATE_SOAK` is set to anything but `0`: long runs.
pub fn soaking() -> bool {
    std::env::var("AGENTSTATE_SOAK").is_ok_and(|v| v != "0")
}

/// `factor` when [`soaking`], else 1: the multiplier of random cases.
pub fn soak(factor: u64) -> u64 {
    if soaking() {
        factor
    } else {
        1
    }
}

/// A Store with a hashed embedder of `dims` dimensions over the field `text`.
pub fn store_config(dims: usize) -> StoreConfig {
    StoreConfig::default().with_index(IndexConfig::hashed(dims).unwrap().with_fields(["text"]))
}

/// A command that runs the ignored child entry point `name` of this test
/// binary, and only it, with piped stdout and stderr.
pub fn child_command(exe: &Path, name: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(["--ignored", "--exact", name, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The environment variable `var`, which the parent test `parent` sets for
/// its children. Panics without it: a child run on its own has nothing to
/// do and must not pass.
pub fn child_env(var: &str, parent: &str) -> String {
    std::env::var(var)
        .unwrap_or_else(|_| panic!("child-process entry point: run by the test `{parent}`, which sets {var}"))
}

/// Runs the ignored test `child` of this test binary in a child process
/// limited to 4 GB of address space (so that an allocation a bug asks for
/// aborts the child, not the machine), with `var` set to `path` (read
/// there with [`child_env`]); asserts that it passed.
pub fn run_memory_limited(child: &str, var: &str, path: &std::path::Path) {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v 4000000; exec \"$0\" --ignored --exact {child} --nocapture --test-threads=1"))
        .arg(&exe)
        .env(var, path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
