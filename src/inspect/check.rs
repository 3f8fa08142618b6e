//! [`Db::check`]: SQLite's integrity check, then the file's own invariants,
//! as typed [`Finding`]s.

use std::fmt;

use rusqlite::Connection;
use serde_json::Value;

use super::{count, has_checkpoints, has_table, BlobScan};
use crate::db::Db;
use crate::error::Result;

/// How bad a [`Finding`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Harmless: space nothing needs, a parent a prune removed on purpose,
    /// rows another writer left behind. Reads are unaffected; the repair is a
    /// cleanup.
    Leftover,
    /// Damage: something a read needs is missing or unreadable.
    Corruption,
}

/// The invariant a [`Finding`] breaks (one line of the check's report).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum CheckArea {
    /// SQLite's own `PRAGMA integrity_check`.
    Sqlite,
    /// Every pending write belongs to an existing checkpoint.
    PendingWrites,
    /// Every checkpoint's parent is in the file.
    Parents,
    /// Checkpoints parse, and every channel version they name has its blob.
    Blobs,
    /// Every Store item's value is a JSON object.
    Items,
    /// Every vector belongs to an item and has the recorded dimension.
    Vectors,
}

impl CheckArea {
    /// Every area, in the order [`Db::check`] runs them.
    pub const ALL: [CheckArea; 6] = [
        CheckArea::Sqlite,
        CheckArea::PendingWrites,
        CheckArea::Parents,
        CheckArea::Blobs,
        CheckArea::Items,
        CheckArea::Vectors,
    ];

    /// A short stable name (`sqlite`, `writes`, `parents`, `blobs`, `items`,
    /// `vectors`).
    pub fn name(self) -> &'static str {
        match self {
            CheckArea::Sqlite => "sqlite",
            CheckArea::PendingWrites => "writes",
            CheckArea::Parents => "parents",
            CheckArea::Blobs => "blobs",
            CheckArea::Items => "items",
            CheckArea::Vectors => "vectors",
        }
    }
}

/// One problem [`Db::check`] found.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Finding {
    /// A line of SQLite's `PRAGMA integrity_check` other than `ok`.
    Sqlite {
        /// SQLite's message.
        message: String,
    },
    /// Pending writes name a checkpoint that does not exist: a `put_writes`
    /// may come before its checkpoint's `put` (LangGraph has no foreign
    /// key either), or the checkpoint never came (a crash between the
    /// two). No read returns them.
    OrphanWrites {
        /// The thread.
        thread_id: String,
        /// The namespace.
        checkpoint_ns: String,
        /// The missing checkpoint.
        checkpoint_id: String,
        /// How many writes.
        writes: u64,
    },
    /// A checkpoint names a parent that is not in the file: expected after a
    /// prune or retention, which keep a checkpoint and delete its parent.
    DanglingParent {
        /// The thread.
        thread_id: String,
        /// The namespace.
        checkpoint_ns: String,
        /// The checkpoint.
        checkpoint_id: String,
        /// The parent it names.
        parent_checkpoint_id: String,
        /// Whether it is the oldest checkpoint of its namespace (what
        /// retention and `prune` leave; a gap in the middle of a history
        /// comes from deleting single runs).
        oldest: bool,
    },
    /// A checkpoint's stored JSON does not parse.
    UnparsableCheckpoint {
        /// The thread.
        thread_id: String,
        /// The namespace.
        checkpoint_ns: String,
        /// The checkpoint.
        checkpoint_id: String,
        /// The parser's message.
        reason: String,
    },
    /// A checkpoint keeps a list or an object inline, where only primitives
    /// belong.
    InlineNotPrimitive {
        /// The thread.
        thread_id: String,
        /// The namespace.
        checkpoint_ns: String,
        /// The checkpoint.
        checkpoint_id: String,
        /// The channel.
        channel: String,
    },
    /// A checkpoint names a channel version whose blob is missing.
    MissingBlob {
        /// The thread.
        thread_id: String,
        /// The namespace.
        checkpoint_ns: String,
        /// The checkpoint.
        checkpoint_id: String,
        /// The channel.
        channel: String,
        /// The version.
        version: String,
    },
    /// Blobs of a thread that nothing needs: no checkpoint names them and no
    /// needed incremental blob extends them. Space only.
    UnreferencedBlobs {
        /// The thread.
        thread_id: String,
        /// How many blobs.
        blobs: u64,
    },
    /// Checkpoints whose metadata is not JSON.
    BadMetadata {
        /// How many checkpoints.
        checkpoints: u64,
    },
    /// A Store item whose value is not a JSON object.
    BadItem {
        /// The item's namespace, dot-joined.
        namespace: String,
        /// Its key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Vectors whose item does not exist. Python's `SqliteStore` leaves them
    /// when it deletes an item (it runs without foreign keys); searches skip
    /// them. [`Db::repair_orphan_vectors`] deletes them.
    OrphanVectors {
        /// The namespace, dot-joined.
        namespace: String,
        /// The key.
        key: String,
        /// The vectors' field names.
        fields: Vec<String>,
    },
    /// Vectors of another dimension than the recorded embedder makes.
    WrongDims {
        /// Their dimension.
        dims: u64,
        /// How many.
        vectors: u64,
        /// The recorded embedder's dimension.
        recorded: usize,
    },
    /// Vectors of several dimensions in a file that records no embedder
    /// (made by successive embedders).
    MixedDims {
        /// The dimensions found.
        dims: Vec<u64>,
    },
}

impl Finding {
    /// How bad it is.
    pub fn severity(&self) -> Severity {
        match self {
            Finding::DanglingParent { .. }
            | Finding::OrphanWrites { .. }
            | Finding::UnreferencedBlobs { .. }
            | Finding::OrphanVectors { .. }
            | Finding::MixedDims { .. } => Severity::Leftover,
            _ => Severity::Corruption,
        }
    }

    /// The invariant it breaks.
    pub fn area(&self) -> CheckArea {
        match self {
            Finding::Sqlite { .. } => CheckArea::Sqlite,
            Finding::OrphanWrites { .. } => CheckArea::PendingWrites,
            Finding::DanglingParent { .. } => CheckArea::Parents,
            Finding::UnparsableCheckpoint { .. }
            | Finding::InlineNotPrimitive { .. }
            | Finding::MissingBlob { .. }
            | Finding::UnreferencedBlobs { .. }
            | Finding::BadMetadata { .. } => CheckArea::Blobs,
            Finding::BadItem { .. } => CheckArea::Items,
            Finding::OrphanVectors { .. } | Finding::WrongDims { .. } | Finding::MixedDims { .. } => {
                CheckArea::Vectors
            }
        }
    }
}

fn ns_label(ns: &str) -> &str {
    if ns.is_empty() {
        "(root)"
    } else {
        ns
    }
}

fn plural(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("{n} {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Sqlite { message } => f.write_str(message),
            Finding::OrphanWrites { thread_id, checkpoint_ns, checkpoint_id, writes } => write!(
                f,
                "{} {} checkpoint {checkpoint_id} of thread '{thread_id}', namespace {}, which does not exist",
                plural(*writes, "pending write"),
                if *writes == 1 { "names" } else { "name" },
                ns_label(checkpoint_ns)
            ),
            Finding::DanglingParent { thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, oldest } => {
                write!(
                    f,
                    "checkpoint {checkpoint_id} of thread '{thread_id}', namespace {} names parent \
                     {parent_checkpoint_id}, which is not in the file ({})",
                    ns_label(checkpoint_ns),
                    if *oldest { "expected after a prune" } else { "a run was deleted" }
                )
            }
            Finding::UnparsableCheckpoint { thread_id, checkpoint_ns, checkpoint_id, reason } => write!(
                f,
                "checkpoint {checkpoint_id} of thread '{thread_id}', namespace {} does not parse: {reason}",
                ns_label(checkpoint_ns)
            ),
            Finding::InlineNotPrimitive { thread_id, checkpoint_ns, checkpoint_id, channel } => write!(
                f,
                "checkpoint {checkpoint_id} of thread '{thread_id}', namespace {} keeps channel '{channel}' \
                 inline but its value is not a primitive",
                ns_label(checkpoint_ns)
            ),
            Finding::MissingBlob { thread_id, checkpoint_ns, checkpoint_id, channel, version } => write!(
                f,
                "checkpoint {checkpoint_id} of thread '{thread_id}', namespace {} names channel '{channel}' \
                 version {version}, which has no blob",
                ns_label(checkpoint_ns)
            ),
            Finding::UnreferencedBlobs { thread_id, blobs } => write!(
                f,
                "thread '{thread_id}': {} nothing needs (space only; `prune` removes them)",
                plural(*blobs, "blob")
            ),
            Finding::BadMetadata { checkpoints } => {
                write!(f, "{} with metadata that is not JSON", plural(*checkpoints, "checkpoint"))
            }
            Finding::BadItem { namespace, key, reason } => write!(f, "item {namespace}/{key} {reason}"),
            Finding::OrphanVectors { namespace, key, fields } => write!(
                f,
                "vectors ({}) of item {namespace}/{key}, which does not exist (left by a writer without \
                 foreign keys; `check --repair` deletes them)",
                fields.join(", ")
            ),
            Finding::WrongDims { dims, vectors, recorded } => write!(
                f,
                "{} of {dims} dims, but the recorded embedder makes {recorded}",
                plural(*vectors, "vector")
            ),
            Finding::MixedDims { dims } => write!(
                f,
                "vectors of several dimensions ({})",
                dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// What [`Db::check`] found, with the counts it went through.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct CheckReport {
    /// Every problem, in the order of [`CheckArea::ALL`].
    pub findings: Vec<Finding>,
    /// Checkpoints read.
    pub checkpoints: u64,
    /// Pending writes.
    pub pending_writes: u64,
    /// Channel blobs.
    pub blobs: u64,
    /// Channel values read from a blob, over all checkpoints.
    pub blob_references: u64,
    /// Store items.
    pub items: u64,
    /// Store vectors.
    pub vectors: u64,
}

impl CheckReport {
    /// No corruption found (leftovers allowed).
    pub fn is_ok(&self) -> bool {
        self.corruption() == 0
    }

    /// How many findings are [`Severity::Corruption`].
    pub fn corruption(&self) -> usize {
        self.findings.iter().filter(|f| f.severity() == Severity::Corruption).count()
    }

    /// How many findings are [`Severity::Leftover`].
    pub fn leftovers(&self) -> usize {
        self.findings.iter().filter(|f| f.severity() == Severity::Leftover).count()
    }
}

impl Db {
    /// Checks the whole file: SQLite's `PRAGMA integrity_check`, then that
    /// pending writes have their checkpoint, parents resolve, checkpoints
    /// parse and have every blob they need, items are JSON objects, and
    /// vectors have their item and the recorded dimension. Reads only (works
    /// on a read-only [`Db`]); linear in the size of the file.
    ///
    /// Problems are [`Finding`]s in the report, not errors: tell corruption
    /// from leftovers with [`Finding::severity`].
    ///
    /// # Errors
    /// [`Error::Busy`](crate::Error::Busy) and other database errors that
    /// stop the check itself (a file too damaged to query gives
    /// [`Error::Corrupt`](crate::Error::Corrupt)).
    pub fn check(&self) -> Result<CheckReport> {
        let recorded = self.recorded_embedder()?.and_then(|e| e.dims);
        self.snapshot(|conn| check_conn(conn, recorded))
    }
}

impl Db {
    /// Deletes the vectors whose item does not exist (the
    /// [`Finding::OrphanVectors`] of [`check`](Db::check)) and returns how
    /// many. One transaction; items and their own vectors are untouched.
    ///
    /// # Errors
    /// [`Error::Busy`](crate::Error::Busy) if another writer holds the file
    /// past the busy timeout; [`Error::Sqlite`](crate::Error::Sqlite) on a
    /// read-only `Db`; other database errors.
    pub fn repair_orphan_vectors(&self) -> Result<u64> {
        self.write(|tx| {
            if !has_table(tx, "store_vectors")? {
                return Ok(0);
            }
            let n = tx.execute(
                "DELETE FROM store_vectors WHERE NOT EXISTS \
                 (SELECT 1 FROM store s WHERE s.prefix = store_vectors.prefix AND s.key = store_vectors.key)",
                [],
            )?;
            Ok(n as u64)
        })
    }
}

fn check_conn(conn: &Connection, recorded_dims: Option<usize>) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let out = &mut report.findings;

    // 1. SQLite's own check.
    let rows: Vec<String> = conn
        .prepare("PRAGMA integrity_check")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if rows != ["ok"] {
        out.extend(rows.into_iter().map(|message| Finding::Sqlite { message }));
    }

    if has_checkpoints(conn)? {
        // 2. Every pending write's checkpoint exists.
        let counted = super::writes_counted(conn)?;
        report.pending_writes = count(conn, &format!("SELECT {counted} FROM checkpoint_writes"), [])?;
        let mut stmt = conn.prepare(&format!(
            "SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, {counted} FROM checkpoint_writes w \
             WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id \
                 AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id) \
             GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            out.push(Finding::OrphanWrites {
                thread_id: r.get(0)?,
                checkpoint_ns: r.get(1)?,
                checkpoint_id: r.get(2)?,
                writes: r.get::<_, i64>(3)?.max(0) as u64,
            });
        }

        // 3. Every parent resolves.
        let mut stmt = conn.prepare(
            "SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, \
                 NOT EXISTS (SELECT 1 FROM checkpoints o WHERE o.thread_id = c.thread_id \
                     AND o.checkpoint_ns = c.checkpoint_ns AND o.checkpoint_id < c.checkpoint_id) \
             FROM checkpoints c \
             WHERE c.parent_checkpoint_id IS NOT NULL AND c.parent_checkpoint_id != '' \
               AND NOT EXISTS (SELECT 1 FROM checkpoints p WHERE p.thread_id = c.thread_id \
                   AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_checkpoint_id) \
             ORDER BY 1, 2, 3",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            out.push(Finding::DanglingParent {
                thread_id: r.get(0)?,
                checkpoint_ns: r.get(1)?,
                checkpoint_id: r.get(2)?,
                parent_checkpoint_id: r.get(3)?,
                oldest: r.get(4)?,
            });
        }

        // 4. Checkpoints parse and have their blobs.
        let scan = BlobScan::run(conn, None, || {})?;
        report.checkpoints = scan.checkpoints;
        report.blobs = scan.blobs();
        report.blob_references = scan.references;
        let unneeded = scan.unneeded();
        for u in scan.unparsable {
            out.push(Finding::UnparsableCheckpoint {
                thread_id: u.thread_id,
                checkpoint_ns: u.checkpoint_ns,
                checkpoint_id: u.checkpoint_id,
                reason: u.reason,
            });
        }
        for (thread_id, checkpoint_ns, checkpoint_id, channel) in scan.non_primitive {
            out.push(Finding::InlineNotPrimitive { thread_id, checkpoint_ns, checkpoint_id, channel });
        }
        for m in scan.missing {
            out.push(Finding::MissingBlob {
                thread_id: m.thread_id,
                checkpoint_ns: m.checkpoint_ns,
                checkpoint_id: m.checkpoint_id,
                channel: m.channel,
                version: m.version,
            });
        }
        for (thread_id, keys) in unneeded {
            out.push(Finding::UnreferencedBlobs { thread_id, blobs: keys.len() as u64 });
        }
        let bad_meta = count(conn, "SELECT COUNT(*) FROM checkpoints WHERE json_valid(metadata) = 0", [])?;
        if bad_meta > 0 {
            out.push(Finding::BadMetadata { checkpoints: bad_meta });
        }
    }

    // 5. Items are JSON objects.
    if has_table(conn, "store")? {
        let mut stmt = conn.prepare("SELECT prefix, key, CAST(value AS TEXT) FROM store")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            report.items += 1;
            let text: Option<String> = r.get(2)?;
            let reason = match serde_json::from_str::<Value>(text.as_deref().unwrap_or("")) {
                Ok(v) if v.is_object() => continue,
                Ok(v) => format!("is not a JSON object: {}", crate_cut(&v.to_string())),
                Err(e) => format!("does not parse: {e}"),
            };
            out.push(Finding::BadItem { namespace: r.get(0)?, key: r.get(1)?, reason });
        }
    }

    // 6. Vectors have their item and the recorded dimension.
    if has_table(conn, "store_vectors")? {
        report.vectors = count(conn, "SELECT COUNT(*) FROM store_vectors", [])?;
        let mut stmt = conn.prepare(
            "SELECT v.prefix, v.key, group_concat(v.field_name, char(31)) FROM store_vectors v \
             WHERE NOT EXISTS (SELECT 1 FROM store s WHERE s.prefix = v.prefix AND s.key = v.key) \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let fields: String = r.get(2)?;
            out.push(Finding::OrphanVectors {
                namespace: r.get(0)?,
                key: r.get(1)?,
                fields: fields.split('\u{1f}').map(str::to_string).collect(),
            });
        }
        let mut stmt = conn.prepare(
            "SELECT COALESCE(length(embedding), 0) / 4, COUNT(*) FROM store_vectors GROUP BY 1 ORDER BY 1",
        )?;
        let dims: Vec<(u64, u64)> = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get::<_, i64>(1)?.max(0) as u64)))?
            .collect::<rusqlite::Result<_>>()?;
        match recorded_dims {
            Some(want) => {
                for (d, n) in dims.iter().filter(|(d, _)| *d != want as u64) {
                    out.push(Finding::WrongDims { dims: *d, vectors: *n, recorded: want });
                }
            }
            None if dims.len() > 1 => {
                out.push(Finding::MixedDims { dims: dims.iter().map(|(d, _)| *d).collect() })
            }
            None => {}
        }
    }
    Ok(report)
}

/// `s` cut to 80 characters.
fn crate_cut(s: &str) -> String {
    if s.chars().count() <= 80 {
        return s.to_string();
    }
    let mut out: String = s.chars().take(79).collect();
    out.push('…');
    out
}
