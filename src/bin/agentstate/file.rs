//! File commands: stats and the integrity check.

use std::collections::{BTreeMap, HashMap};

use indicatif::ProgressBar;
use rusqlite::{Connection, OptionalExtension};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::output::{self, bytes, ns_label, plural, Table};
use crate::{exit, CliResult, Ctx, Failure};

/// The tables shown first, in this order.
const MAIN_TABLES: [&str; 5] =
    ["checkpoints", "checkpoint_blobs", "checkpoint_writes", "store", "store_vectors"];

const SERIES: [&str; 4] =
    ["checkpoint_migrations", "store_migrations", "vector_migrations", "agentstate_migrations"];

/// SQL: now as the Store compares it.
const NOW: &str = "strftime('%Y-%m-%d %H:%M:%f', 'now')";

fn count(conn: &Connection, sql: &str) -> CliResult<u64> {
    Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))?.max(0) as u64)
}

/// `(thread, namespace, channel, version)` of a blob.
type BlobKey = (String, String, String, String);

/// What a checkpoint names but the file lacks.
struct Missing {
    thread: String,
    ns: String,
    checkpoint: String,
    channel: String,
    version: String,
}

/// Every checkpoint's channel versions matched against `checkpoint_blobs`.
#[derive(Default)]
struct BlobScan {
    checkpoints: u64,
    blobs: u64,
    /// Channel values read from a blob (not inline), over all checkpoints.
    references: u64,
    /// Blobs used by two checkpoints or more.
    shared: u64,
    /// Blobs no checkpoint uses, per thread.
    unreferenced: BTreeMap<String, u64>,
    missing: Vec<Missing>,
    /// Checkpoints whose JSON does not parse: (thread, ns, id, why).
    unparsable: Vec<(String, String, String, String)>,
}

#[derive(Deserialize)]
struct VersionsOnly {
    #[serde(default)]
    channel_versions: Map<String, Value>,
    #[serde(default)]
    channel_values: Map<String, Value>,
}

fn scan_blobs(conn: &Connection, pb: &ProgressBar) -> CliResult<BlobScan> {
    let mut scan = BlobScan::default();
    let mut uses: HashMap<BlobKey, u32> = HashMap::new();
    {
        let mut stmt =
            conn.prepare("SELECT thread_id, checkpoint_ns, channel, version FROM checkpoint_blobs")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            uses.insert((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?), 0);
        }
    }
    scan.blobs = uses.len() as u64;
    let mut stmt = conn.prepare(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, CAST(checkpoint AS TEXT) FROM checkpoints",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        scan.checkpoints += 1;
        pb.inc(1);
        let (thread, ns, id): (String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let text: Option<String> = r.get(3)?;
        let parsed: VersionsOnly = match serde_json::from_str(text.as_deref().unwrap_or("")) {
            Ok(p) => p,
            Err(e) => {
                scan.unparsable.push((thread, ns, id, e.to_string()));
                continue;
            }
        };
        for (channel, version) in &parsed.channel_versions {
            if parsed.channel_values.contains_key(channel) {
                continue; // a primitive, inline
            }
            let version = match version {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => {
                    scan.unparsable.push((
                        thread.clone(),
                        ns.clone(),
                        id.clone(),
                        format!("channel_versions[{channel}] is {other}, neither a string nor a number"),
                    ));
                    continue;
                }
            };
            let key = (thread.clone(), ns.clone(), channel.clone(), version);
            match uses.get_mut(&key) {
                Some(n) => {
                    *n += 1;
                    scan.references += 1;
                }
                None => scan.missing.push(Missing {
                    thread: key.0,
                    ns: key.1,
                    checkpoint: id.clone(),
                    channel: key.2,
                    version: key.3,
                }),
            }
        }
    }
    for ((thread, ..), n) in &uses {
        match n {
            0 => *scan.unreferenced.entry(thread.clone()).or_default() += 1,
            1 => {}
            _ => scan.shared += 1,
        }
    }
    Ok(scan)
}

/// The embedder recorded in the file (`name/dims`), if any.
fn embedder(conn: &Connection) -> CliResult<Option<String>> {
    Ok(conn
        .query_row("SELECT value FROM agentstate_meta WHERE key = 'store.embedder'", [], |r| r.get(0))
        .optional()?)
}

/// Distinct vector lengths (in f32s, rounded down) and how many vectors have
/// each.
fn vector_dims(conn: &Connection) -> CliResult<Vec<(u64, u64)>> {
    Ok(conn
        .prepare(
            "SELECT COALESCE(length(embedding), 0) / 4, COUNT(*) FROM store_vectors GROUP BY 1 ORDER BY 1",
        )?
        .query_map([], |r| Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get::<_, i64>(1)?.max(0) as u64)))?
        .collect::<rusqlite::Result<_>>()?)
}

/// Bytes (pages) of each table with its indexes, if SQLite has `dbstat`.
fn table_bytes(conn: &Connection) -> Option<HashMap<String, u64>> {
    let mut stmt = conn
        .prepare(
            "SELECT m.tbl_name, SUM(d.pgsize) FROM dbstat AS d JOIN sqlite_master AS m ON m.name = d.name \
             GROUP BY m.tbl_name",
        )
        .ok()?;
    let rows =
        stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))).ok()?;
    rows.collect::<rusqlite::Result<HashMap<_, _>>>().ok()
}

fn table_names(conn: &Connection) -> CliResult<Vec<String>> {
    let mut names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let rank = |n: &str| MAIN_TABLES.iter().position(|m| *m == n).unwrap_or(MAIN_TABLES.len());
    names.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    Ok(names)
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `stats`.
pub fn stats(ctx: &Ctx) -> CliResult {
    let conn = ctx.ro()?;
    let size = std::fs::metadata(&ctx.path).map(|m| m.len()).unwrap_or(0);
    let mut wal_path = ctx.path.clone().into_os_string();
    wal_path.push("-wal");
    let wal = std::fs::metadata(&wal_path).map(|m| m.len()).unwrap_or(0);
    let page_size = count(&conn, "PRAGMA page_size")?;
    let pages = count(&conn, "PRAGMA page_count")?;
    let free = count(&conn, "PRAGMA freelist_count")?;
    let mut schema = Map::new();
    for s in SERIES {
        let exists: bool = conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
            [s],
            |r| r.get(0),
        )?;
        let v: Option<i64> =
            if exists { conn.query_row(&format!("SELECT MAX(v) FROM {s}"), [], |r| r.get(0))? } else { None };
        schema.insert(s.to_string(), json!(v));
    }
    let sizes = table_bytes(&conn);
    let mut tables = Map::new();
    for name in table_names(&conn)? {
        let rows = count(&conn, &format!("SELECT COUNT(*) FROM {}", quote_ident(&name)))?;
        let b = sizes.as_ref().map(|s| s.get(&name).copied().unwrap_or(0));
        tables.insert(name, json!({"rows": rows, "bytes": b}));
    }

    let threads = count(&conn, "SELECT COUNT(DISTINCT thread_id) FROM checkpoints")?;
    let namespaces =
        count(&conn, "SELECT COUNT(*) FROM (SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints)")?;
    let writes = count(&conn, "SELECT COUNT(*) FROM checkpoint_writes")?;
    let with_writes = count(
        &conn,
        "SELECT COUNT(*) FROM (SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM checkpoint_writes)",
    )?;
    let total = count(&conn, "SELECT COUNT(*) FROM checkpoints")?;
    let pb = output::bar(total, "reading checkpoints");
    let scan = scan_blobs(&conn, &pb);
    pb.finish_and_clear();
    let scan = scan?;

    let items = count(&conn, "SELECT COUNT(*) FROM store")?;
    let item_ns = count(&conn, "SELECT COUNT(DISTINCT prefix) FROM store")?;
    let with_ttl = count(&conn, "SELECT COUNT(*) FROM store WHERE ttl_minutes IS NOT NULL")?;
    let expired = count(
        &conn,
        &format!("SELECT COUNT(*) FROM store WHERE expires_at IS NOT NULL AND expires_at < {NOW}"),
    )?;
    let vectors = count(&conn, "SELECT COUNT(*) FROM store_vectors")?;
    let vector_items = count(&conn, "SELECT COUNT(*) FROM (SELECT DISTINCT prefix, key FROM store_vectors)")?;
    let dims = vector_dims(&conn)?;
    let embedder = embedder(&conn)?;
    let unreferenced: u64 = scan.unreferenced.values().sum();

    if ctx.json {
        output::json(&json!({
            "file": {
                "path": ctx.path.display().to_string(),
                "bytes": size,
                "wal_bytes": wal,
                "page_size": page_size,
                "pages": pages,
                "free_pages": free,
            },
            "schema": schema,
            "tables": tables,
            "checkpoints": {
                "threads": threads,
                "namespaces": namespaces,
                "checkpoints": total,
                "pending_writes": writes,
                "checkpoints_with_pending_writes": with_writes,
                "blobs": scan.blobs,
                "blob_references": scan.references,
                "shared_blobs": scan.shared,
                "unreferenced_blobs": unreferenced,
                "missing_blobs": scan.missing.len(),
            },
            "store": {
                "items": items,
                "namespaces": item_ns,
                "with_ttl": with_ttl,
                "expired": expired,
            },
            "vectors": {
                "vectors": vectors,
                "items": vector_items,
                "dims": dims.iter().map(|(d, _)| *d).collect::<Vec<_>>(),
                "embedder": embedder,
            },
        }));
        return Ok(());
    }

    let mut head = Table::default();
    head.row([
        "file".to_string(),
        format!(
            "{} ({} + {} WAL; {} pages of {} B, {} free)",
            ctx.path.display(),
            bytes(size),
            bytes(wal),
            pages,
            page_size,
            free
        ),
    ]);
    head.row([
        "schema".to_string(),
        schema.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
    ]);
    head.print();
    println!();
    let mut t = Table::new(["TABLE", "ROWS", "BYTES"]);
    for (name, v) in &tables {
        t.row([
            name.clone(),
            v["rows"].to_string(),
            v["bytes"].as_u64().map_or_else(|| "?".to_string(), bytes),
        ]);
    }
    t.print();
    println!();
    let mut s = Table::default();
    s.row([
        "checkpoints".to_string(),
        format!(
            "{} in {} of {}; {} on {}",
            plural(total as usize, "checkpoint"),
            plural(namespaces as usize, "namespace"),
            plural(threads as usize, "thread"),
            plural(writes as usize, "pending write"),
            plural(with_writes as usize, "checkpoint"),
        ),
    ]);
    s.row([
        "blobs".to_string(),
        format!(
            "{} hold {}: {} shared by several checkpoints, {} unreferenced, {} missing",
            plural(scan.blobs as usize, "blob"),
            plural(scan.references as usize, "channel value"),
            scan.shared,
            unreferenced,
            scan.missing.len()
        ),
    ]);
    s.row([
        "store".to_string(),
        format!(
            "{} in {}; {} with a TTL, {} expired (not yet swept)",
            plural(items as usize, "item"),
            plural(item_ns as usize, "namespace"),
            with_ttl,
            expired
        ),
    ]);
    let dims_text = match dims.as_slice() {
        [] => String::new(),
        [(d, _)] => format!(" of {d} dims"),
        many => format!(" of {} dims", many.iter().map(|(d, _)| d.to_string()).collect::<Vec<_>>().join("/")),
    };
    s.row([
        "vectors".to_string(),
        format!(
            "{}{dims_text} on {}; embedder {}",
            plural(vectors as usize, "vector"),
            plural(vector_items as usize, "item"),
            embedder.as_deref().unwrap_or("not recorded")
        ),
    ]);
    s.print();
    Ok(())
}

// ---------------------------------------------------------------------------
// check

struct Problem {
    severity: &'static str,
    check: &'static str,
    message: String,
}

struct Outcome {
    check: &'static str,
    title: &'static str,
    detail: String,
}

/// `check`: SQLite's integrity check, then agentstate's invariants.
pub fn check(ctx: &Ctx) -> CliResult {
    let conn = ctx.ro()?;
    let total = count(&conn, "SELECT COUNT(*) FROM checkpoints")?;
    let pb = output::bar(total + 4, "integrity check");
    let res = run_checks(&conn, &pb);
    pb.finish_and_clear();
    let (outcomes, problems) = res?;
    let errors = problems.iter().filter(|p| p.severity == "error").count();
    let warnings = problems.len() - errors;
    if ctx.json {
        let checks: Vec<Value> = outcomes
            .iter()
            .map(|o| {
                let errs = problems.iter().filter(|p| p.check == o.check && p.severity == "error").count();
                let warns = problems.iter().filter(|p| p.check == o.check && p.severity == "warning").count();
                let status = if errs > 0 {
                    "error"
                } else if warns > 0 {
                    "warning"
                } else {
                    "ok"
                };
                json!({"check": o.check, "status": status, "detail": o.detail})
            })
            .collect();
        let list: Vec<Value> = problems
            .iter()
            .map(|p| json!({"severity": p.severity, "check": p.check, "message": p.message}))
            .collect();
        output::json(&json!({
            "ok": errors == 0,
            "errors": errors,
            "warnings": warnings,
            "checks": checks,
            "problems": list,
        }));
    } else {
        const SHOWN: usize = 20;
        let mut t = Table::default();
        let mut lines: Vec<(Vec<String>, Vec<String>)> = vec![];
        for o in &outcomes {
            let mine: Vec<&Problem> = problems.iter().filter(|p| p.check == o.check).collect();
            let errs = mine.iter().filter(|p| p.severity == "error").count();
            let warns = mine.len() - errs;
            let status = match (errs, warns) {
                (0, 0) => format!(
                    "ok{}",
                    if o.detail.is_empty() { String::new() } else { format!(" ({})", o.detail) }
                ),
                (0, w) => plural(w, "warning"),
                (e, 0) => plural(e, "error"),
                (e, w) => format!("{}, {}", plural(e, "error"), plural(w, "warning")),
            };
            let mut details: Vec<String> =
                mine.iter().take(SHOWN).map(|p| format!("  {}: {}", p.severity, p.message)).collect();
            if mine.len() > SHOWN {
                details.push(format!("  ... and {} more (see --json)", mine.len() - SHOWN));
            }
            lines.push((vec![o.title.to_string(), status], details));
        }
        for (row, _) in &lines {
            t.row(row.clone());
        }
        for ((_, details), line) in lines.iter().zip(t.render()) {
            println!("{line}");
            for d in details {
                println!("{d}");
            }
        }
        println!(
            "result: {}",
            match (errors, warnings) {
                (0, 0) => "ok".to_string(),
                (0, w) => format!("ok ({})", plural(w, "warning")),
                (e, w) => format!("{}, {}", plural(e, "error"), plural(w, "warning")),
            }
        );
    }
    if errors > 0 {
        return Err(Failure::new(
            exit::CHECK_FAILED,
            format!("integrity check failed: {} ({})", plural(errors, "error"), plural(warnings, "warning")),
        ));
    }
    Ok(())
}

fn run_checks(conn: &Connection, pb: &ProgressBar) -> CliResult<(Vec<Outcome>, Vec<Problem>)> {
    let mut outcomes = vec![];
    let mut problems = vec![];

    // 1. SQLite's own check.
    pb.set_message("PRAGMA integrity_check");
    let rows: Vec<String> = conn
        .prepare("PRAGMA integrity_check")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if rows != ["ok"] {
        for r in rows {
            problems.push(Problem { severity: "error", check: "sqlite", message: r });
        }
    }
    outcomes.push(Outcome { check: "sqlite", title: "sqlite integrity_check", detail: String::new() });
    pb.inc(1);

    // 2. Every pending write's checkpoint exists.
    pb.set_message("pending writes");
    let writes = count(conn, "SELECT COUNT(*) FROM checkpoint_writes")?;
    {
        let mut stmt = conn.prepare(
            "SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, COUNT(*) FROM checkpoint_writes w \
             WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id \
                 AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id) \
             GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (t, ns, id, n): (String, String, String, i64) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            problems.push(Problem {
                severity: "error",
                check: "writes",
                message: format!(
                    "{} {} checkpoint {id} of thread '{t}', namespace {}, which does not exist",
                    plural(n as usize, "pending write"),
                    if n == 1 { "names" } else { "name" },
                    ns_label(&ns)
                ),
            });
        }
    }
    outcomes.push(Outcome {
        check: "writes",
        title: "pending writes have their checkpoint",
        detail: plural(writes as usize, "write"),
    });
    pb.inc(1);

    // 3. Every parent resolves (a warning: prune keep-latest and
    //    delete_for_runs leave the kept checkpoints' parents behind).
    pb.set_message("parents");
    {
        let mut stmt = conn.prepare(
            "SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id FROM checkpoints c \
             WHERE c.parent_checkpoint_id IS NOT NULL AND c.parent_checkpoint_id != '' \
               AND NOT EXISTS (SELECT 1 FROM checkpoints p WHERE p.thread_id = c.thread_id \
                   AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_checkpoint_id) \
             ORDER BY 1, 2, 3",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (t, ns, id, p): (String, String, String, String) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            problems.push(Problem {
                severity: "warning",
                check: "parents",
                message: format!(
                    "checkpoint {id} of thread '{t}', namespace {} names parent {p}, which is not in the file \
                     (expected after a prune)",
                    ns_label(&ns)
                ),
            });
        }
    }
    outcomes.push(Outcome { check: "parents", title: "parents resolve", detail: String::new() });
    pb.inc(1);

    // 4. Every channel version a checkpoint names has its blob, unless the
    //    value is inline; checkpoint JSON parses.
    pb.set_message("channel blobs");
    let scan = scan_blobs(conn, pb)?;
    for (t, ns, id, why) in &scan.unparsable {
        problems.push(Problem {
            severity: "error",
            check: "blobs",
            message: format!(
                "checkpoint {id} of thread '{t}', namespace {} does not parse: {why}",
                ns_label(ns)
            ),
        });
    }
    for m in &scan.missing {
        problems.push(Problem {
            severity: "error",
            check: "blobs",
            message: format!(
                "checkpoint {} of thread '{}', namespace {} names channel '{}' version {}, which has no blob",
                m.checkpoint,
                m.thread,
                ns_label(&m.ns),
                m.channel,
                m.version
            ),
        });
    }
    for (t, n) in &scan.unreferenced {
        problems.push(Problem {
            severity: "warning",
            check: "blobs",
            message: format!(
                "thread '{t}': {} no checkpoint references (space only; `prune` removes them)",
                plural(*n as usize, "blob")
            ),
        });
    }
    let bad_meta = count(conn, "SELECT COUNT(*) FROM checkpoints WHERE json_valid(metadata) = 0")?;
    if bad_meta > 0 {
        problems.push(Problem {
            severity: "error",
            check: "blobs",
            message: format!("{} with metadata that is not JSON", plural(bad_meta as usize, "checkpoint")),
        });
    }
    outcomes.push(Outcome {
        check: "blobs",
        title: "channel versions have their blob",
        detail: format!(
            "{} to {}",
            plural(scan.references as usize, "reference"),
            plural(scan.blobs as usize, "blob")
        ),
    });

    // 5. No vector without its item; vectors of the recorded dimension.
    pb.set_message("vectors");
    let vectors = count(conn, "SELECT COUNT(*) FROM store_vectors")?;
    {
        let mut stmt = conn.prepare(
            "SELECT v.prefix, v.key, group_concat(v.field_name, ', ') FROM store_vectors v \
             WHERE NOT EXISTS (SELECT 1 FROM store s WHERE s.prefix = v.prefix AND s.key = v.key) \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (prefix, key, fields): (String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            problems.push(Problem {
                severity: "error",
                check: "vectors",
                message: format!("vectors ({fields}) of item {prefix}/{key}, which does not exist"),
            });
        }
    }
    let dims = vector_dims(conn)?;
    let recorded_dims =
        embedder(conn)?.and_then(|e| e.rsplit_once('/').and_then(|(_, d)| d.parse::<u64>().ok()));
    match recorded_dims {
        Some(want) => {
            for (d, n) in dims.iter().filter(|(d, _)| *d != want) {
                problems.push(Problem {
                    severity: "error",
                    check: "vectors",
                    message: format!(
                        "{} of {d} dims, but the recorded embedder makes {want}",
                        plural(*n as usize, "vector")
                    ),
                });
            }
        }
        None if dims.len() > 1 => problems.push(Problem {
            severity: "warning",
            check: "vectors",
            message: format!(
                "vectors of several dimensions ({})",
                dims.iter().map(|(d, _)| d.to_string()).collect::<Vec<_>>().join(", ")
            ),
        }),
        None => {}
    }
    outcomes.push(Outcome {
        check: "vectors",
        title: "vectors have their item",
        detail: plural(vectors as usize, "vector"),
    });
    pb.inc(1);
    Ok((outcomes, problems))
}

/// `vacuum`: return free pages to the filesystem.
pub fn vacuum(ctx: &Ctx) -> CliResult {
    let before = std::fs::metadata(&ctx.path).map(|m| m.len()).unwrap_or(0);
    let freed = ctx.db.vacuum()?;
    let after = std::fs::metadata(&ctx.path).map(|m| m.len()).unwrap_or(0);
    if ctx.json {
        output::json(&json!({"freed_bytes": freed, "file_bytes_before": before, "file_bytes_after": after}));
    } else {
        println!("vacuum freed {freed} bytes; file {before} -> {after} bytes");
    }
    Ok(())
}
