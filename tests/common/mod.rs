//! Helpers shared by the reliability tests (`tests/reliability_*.rs`,
//! `tests/checkpointer_model.rs`): a small deterministic RNG and the file
//! invariants every test checks after it has done its damage.

#![allow(dead_code)]

pub mod harness;
pub mod ops;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

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

/// The file's invariants, checked with raw SQL on a connection of its own:
///
/// - `PRAGMA integrity_check` is `ok` and `PRAGMA foreign_key_check` empty;
/// - every checkpoint row parses, and every channel version it names whose
///   value is not inline has its `checkpoint_blobs` row (see [`Blobs`]);
/// - every `checkpoint_writes` row belongs to an existing checkpoint;
/// - every `store_vectors` row belongs to an existing item;
/// - parents resolve: within a (thread, namespace), only the oldest
///   checkpoint may name a parent that is gone (a `prune` keeps the latest
///   checkpoint, whose parent it deletes);
/// - every item's value is a JSON object.
///
/// Returns the row counts, or every violation found.
pub fn check_file(path: &Path, blobs: Blobs) -> Result<FileStats, Vec<String>> {
    let conn = raw_ro(path);
    check_conn(&conn, blobs)
}

pub fn check_conn(conn: &Connection, blobs: Blobs) -> Result<FileStats, Vec<String>> {
    let mut bad = vec![];
    let q = |sql: &str| -> Vec<Vec<rusqlite::types::Value>> {
        let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let n = stmt.column_count();
        stmt.query_map([], |r| (0..n).map(|i| r.get::<_, rusqlite::types::Value>(i)).collect())
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    let text = |v: &rusqlite::types::Value| -> String {
        match v {
            rusqlite::types::Value::Text(s) => s.clone(),
            rusqlite::types::Value::Blob(b) => String::from_utf8_lossy(b).into_owned(),
            rusqlite::types::Value::Null => String::new(),
            other => format!("{other:?}"),
        }
    };
    let integrity: Vec<String> = q("PRAGMA integrity_check").iter().map(|r| text(&r[0])).collect();
    if integrity != ["ok"] {
        bad.push(format!("integrity_check: {integrity:?}"));
    }
    let fk = q("PRAGMA foreign_key_check");
    if !fk.is_empty() {
        bad.push(format!("foreign_key_check: {} violations", fk.len()));
    }
    let mut stats = FileStats::default();

    let blob_keys: BTreeSet<(String, String, String, String)> =
        q("SELECT thread_id, checkpoint_ns, channel, version FROM checkpoint_blobs")
            .iter()
            .map(|r| (text(&r[0]), text(&r[1]), text(&r[2]), text(&r[3])))
            .collect();
    stats.blobs = blob_keys.len();
    type Lineage = Vec<(String, Option<String>)>;
    let mut by_ns: BTreeMap<(String, String), Lineage> = BTreeMap::new();
    let mut ids: BTreeSet<(String, String, String)> = BTreeSet::new();
    for r in
        q("SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint FROM checkpoints")
    {
        let (t, ns, id) = (text(&r[0]), text(&r[1]), text(&r[2]));
        let parent = match &r[3] {
            rusqlite::types::Value::Null => None,
            v => Some(text(v)).filter(|p| !p.is_empty()),
        };
        stats.checkpoints += 1;
        let cp: Value = match serde_json::from_str(&text(&r[4])) {
            Ok(v) => v,
            Err(e) => {
                bad.push(format!("checkpoint {t}/{ns}/{id} does not parse: {e}"));
                continue;
            }
        };
        let inline = cp.get("channel_values").and_then(Value::as_object).cloned().unwrap_or_default();
        if let Some((ch, v)) = inline.iter().find(|(_, v)| v.is_array() || v.is_object()) {
            bad.push(format!("checkpoint {t}/{ns}/{id} holds a non-primitive inline value {ch}={v}"));
        }
        if blobs == Blobs::AllPresent {
            for (ch, ver) in cp.get("channel_versions").and_then(Value::as_object).into_iter().flatten() {
                if inline.contains_key(ch) {
                    continue;
                }
                let ver = match ver {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                if !blob_keys.contains(&(t.clone(), ns.clone(), ch.clone(), ver.clone())) {
                    bad.push(format!("checkpoint {t}/{ns}/{id} names {ch}@{ver} but it has no blob"));
                }
            }
        }
        by_ns.entry((t.clone(), ns.clone())).or_default().push((id.clone(), parent));
        ids.insert((t, ns, id));
    }
    for ((t, ns), mut cps) in by_ns {
        cps.sort();
        for (i, (id, parent)) in cps.iter().enumerate() {
            if let Some(p) = parent {
                if i > 0 && !ids.contains(&(t.clone(), ns.clone(), p.clone())) {
                    bad.push(format!("checkpoint {t}/{ns}/{id} names parent {p}, which is gone"));
                }
            }
        }
    }
    for r in q("SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM checkpoint_writes") {
        let key = (text(&r[0]), text(&r[1]), text(&r[2]));
        if !ids.contains(&key) {
            bad.push(format!("writes for checkpoint {key:?}, which does not exist"));
        }
    }
    stats.writes = q("SELECT COUNT(*) FROM checkpoint_writes")
        .first()
        .map(|r| match r[0] {
            rusqlite::types::Value::Integer(n) => n as usize,
            _ => 0,
        })
        .unwrap_or(0);

    let items: BTreeSet<(String, String)> = q("SELECT prefix, key, CAST(value AS TEXT) FROM store")
        .iter()
        .map(|r| {
            let (p, k) = (text(&r[0]), text(&r[1]));
            match serde_json::from_str::<Value>(&text(&r[2])) {
                Ok(v) if v.is_object() => {}
                Ok(v) => bad.push(format!("item {p}/{k} is not an object: {v}")),
                Err(e) => bad.push(format!("item {p}/{k} does not parse: {e}")),
            }
            (p, k)
        })
        .collect();
    stats.items = items.len();
    for r in q("SELECT prefix, key, field_name FROM store_vectors") {
        stats.vectors += 1;
        let key = (text(&r[0]), text(&r[1]));
        if !items.contains(&key) {
            bad.push(format!("vector {} of {key:?}, which does not exist", text(&r[2])));
        }
    }
    if bad.is_empty() {
        Ok(stats)
    } else {
        Err(bad)
    }
}

/// Prints a test's figures on stderr, one line tagged `[reliability]`
/// (visible with `--nocapture`; `RELIABILITY.md` quotes them).
pub fn report(test: &str, figures: &[(&str, u64)]) {
    let parts: Vec<String> = figures.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!("[reliability] {test}: {}", parts.join(" "));
}
