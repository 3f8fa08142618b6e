//! Helpers shared by the reliability tests (`tests/reliability_*.rs`,
//! `tests/checkpointer_model.rs`): a small deterministic RNG and the file
//! invariants every test checks after it has done its damage.

#![allow(dead_code)]

pub mod harness;
pub mod hostile;
pub mod ops;

use std::path::Path;

use agentstate::inspect::Finding;
use rusqlite::{Connection, OpenFlags};

/// SplitMix64: deterministic, seedable, good enough to pick operations.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    /// True with probability `p` percent.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// A seed from the environment variable `var` (decimal), or from the clock.
/// Printed by the callers so that a failure can be replayed.
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(42)
    })
}

/// A read-only raw connection, for checks that must not change the file.
pub fn raw_ro(path: &Path) -> Connection {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .expect("open the file read-only")
}

/// What [`check_file`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStats {
    pub checkpoints: usize,
    pub blobs: usize,
    pub writes: usize,
    pub items: usize,
    pub vectors: usize,
}

/// How strict [`check_file`] is about blobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blobs {
    /// Every non-inline channel version a checkpoint names has a blob (the
    /// workload put every non-primitive channel in `new_versions` whenever
    /// its version moved).
    AllPresent,
    /// Blobs may be missing (the workload named versions no put wrote).
    MayBeMissing,
}

/// Which checkpoints [`check_file_with`] lets name a parent that is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parents {
    /// Only the oldest of a (thread, namespace) (a prune or retention
    /// removed what came before it).
    OldestMayDangle,
    /// Any: `delete_for_runs` removes checkpoints in the middle of a
    /// history, and retention removes the fork point of a younger branch.
    MayDangle,
}

/// The file's invariants, through the library's own integrity check
/// ([`agentstate::Db::check`]) on a read-only handle, held stricter than the
/// check holds a file in general: no finding at all is allowed except
///
/// - unreferenced blobs (space only);
/// - a missing parent of the oldest checkpoint of a (thread, namespace),
///   which a prune or retention leaves;
/// - missing blobs, with [`Blobs::MayBeMissing`].
///
/// Returns the row counts, or every violation found.
pub fn check_file(path: &Path, blobs: Blobs) -> Result<FileStats, Vec<String>> {
    check_file_with(path, blobs, Parents::OldestMayDangle)
}

/// [`check_file`], with the parents that may be missing.
pub fn check_file_with(path: &Path, blobs: Blobs, parents: Parents) -> Result<FileStats, Vec<String>> {
    let db = agentstate::Db::builder().read_only(true).open(path).map_err(|e| vec![format!("open: {e}")])?;
    let report = db.check().map_err(|e| vec![format!("check: {e}")])?;
    let bad: Vec<String> = report
        .findings
        .iter()
        .filter(|f| match f {
            Finding::UnreferencedBlobs { .. } => false,
            Finding::DanglingParent { oldest, .. } => !oldest && parents == Parents::OldestMayDangle,
            Finding::MissingBlob { .. } => blobs == Blobs::AllPresent,
            _ => true,
        })
        .map(|f| format!("{:?}: {f}", f.area()))
        .collect();
    if !bad.is_empty() {
        return Err(bad);
    }
    Ok(FileStats {
        checkpoints: report.checkpoints as usize,
        blobs: report.blobs as usize,
        writes: report.pending_writes as usize,
        items: report.items as usize,
        vectors: report.vectors as usize,
    })
}

/// Prints a test's figures on stderr, one line tagged `[reliability]`
/// (visible with `--nocapture`; `RELIABILITY.md` quotes them).
pub fn report(test: &str, figures: &[(&str, u64)]) {
    let parts: Vec<String> = figures.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!("[reliability] {test}: {}", parts.join(" "));
}

/// Puts `n` checkpoints in a chain on (thread, ns); each carries a list that
/// grows by one large message (above the incremental-blob threshold after a
/// few steps). Returns their ids, oldest first.
pub fn chain(saver: &agentstate::Checkpointer, thread: &str, ns: &str, n: usize) -> Vec<String> {
    let mut config = agentstate::CheckpointConfig::thread(thread).ns(ns);
    let mut versions = agentstate::checkpoint::ChannelVersions::new();
    let mut msgs: Vec<serde_json::Value> = vec![];
    let mut ids = vec![];
    for step in 0..n {
        msgs.push(serde_json::json!({"content": format!("message {step} ").repeat(300)}));
        let v = agentstate::checkpoint::next_version(versions.get("messages"));
        versions.insert("messages".into(), v.clone());
        let mut cp =
            agentstate::Checkpoint::with_id(agentstate::checkpoint::uuid6(Some(step as i64)).to_string());
        cp.channel_values.insert("messages".into(), serde_json::json!(msgs).into());
        cp.channel_versions = versions.clone();
        let meta = agentstate::Metadata::new().with("source", "loop").with("step", step as i64);
        config = saver.put(&config, &cp, &meta, &[("messages".to_string(), v)].into()).unwrap();
        ids.push(config.checkpoint_id.clone().unwrap());
    }
    ids
}
