//! File commands: stats, the integrity check and vacuum.

use agentstate::inspect::{CheckArea, Finding, Severity};
use serde_json::{json, Map, Value};

use crate::output::{self, bytes, plural, Table};
use crate::{exit, CliResult, Ctx, Failure};

/// `stats`.
pub fn stats(ctx: &Ctx) -> CliResult {
    let pb = output::spinner("reading the file");
    let res = ctx.db.stats();
    pb.finish_and_clear();
    let st = res?;
    let (file, cp, store) = (&st.file, &st.checkpoints, &st.store);
    let mut schema = Map::new();
    for v in &st.schema {
        schema.insert(v.series.clone(), json!(v.version));
    }
    let mut tables = Map::new();
    for t in &st.tables {
        tables.insert(t.name.clone(), json!({"rows": t.rows, "bytes": t.bytes}));
    }
    let embedder = store.embedder.as_ref().map(ToString::to_string);
    // A Python SqliteSaver's tables next to a Store: not agentstate's
    // checkpoints (the counts below are zero), and said so.
    let saver = ctx.db.has_python_saver()?;

    if ctx.json {
        return output::json(&json!({
            "file": {
                "path": ctx.path.display().to_string(),
                "bytes": file.bytes,
                "wal_bytes": file.wal_bytes,
                "page_size": file.page_size,
                "pages": file.pages,
                "free_pages": file.free_pages,
            },
            "schema": schema,
            "tables": tables,
            "checkpoints": {
                "threads": cp.threads,
                "namespaces": cp.namespaces,
                "checkpoints": cp.checkpoints,
                "pending_writes": cp.pending_writes,
                "checkpoints_with_pending_writes": cp.checkpoints_with_pending_writes,
                "blobs": cp.blobs,
                "blob_references": cp.blob_references,
                "shared_blobs": cp.shared_blobs,
                "delta_bases": cp.delta_bases,
                "unreferenced_blobs": cp.unreferenced_blobs,
                "missing_blobs": cp.missing_blobs,
                "python_sqlite_saver": saver,
            },
            "store": {
                "items": store.items,
                "namespaces": store.namespaces,
                "with_ttl": store.with_ttl,
                "expired": store.expired,
            },
            "vectors": {
                "vectors": store.vectors,
                "items": store.vector_items,
                "dims": store.vector_dims.iter().map(|d| d.dims).collect::<Vec<_>>(),
                "embedder": embedder,
            },
        }));
    }

    let mut head = Table::default();
    head.row([
        "file".to_string(),
        format!(
            "{} ({} + {} WAL; {} pages of {} B, {} free)",
            ctx.path.display(),
            bytes(file.bytes),
            bytes(file.wal_bytes),
            file.pages,
            file.page_size,
            file.free_pages
        ),
    ]);
    head.row([
        "schema".to_string(),
        schema.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
    ]);
    head.print()?;
    output::line("")?;
    let mut t = Table::new(["TABLE", "ROWS", "BYTES"]);
    for info in &st.tables {
        t.row([info.name.clone(), info.rows.to_string(), info.bytes.map_or_else(|| "?".to_string(), bytes)]);
    }
    t.print()?;
    output::line("")?;
    let mut s = Table::default();
    let checkpoints = if saver {
        let rows = |name: &str| st.tables.iter().find(|t| t.name == name).map_or(0, |t| t.rows);
        format!(
            "none in agentstate's layout: `checkpoints` ({}) and `writes` ({}) are a Python SqliteSaver's \
             tables, not read here; convert them with `agentstate import {} NEW.db`",
            plural(rows("checkpoints") as usize, "row"),
            plural(rows("writes") as usize, "row"),
            ctx.path.display()
        )
    } else {
        format!(
            "{} in {} of {}; {} on {}",
            plural(cp.checkpoints as usize, "checkpoint"),
            plural(cp.namespaces as usize, "namespace"),
            plural(cp.threads as usize, "thread"),
            plural(cp.pending_writes as usize, "pending write"),
            plural(cp.checkpoints_with_pending_writes as usize, "checkpoint"),
        )
    };
    s.row(["checkpoints".to_string(), checkpoints]);
    s.row([
        "blobs".to_string(),
        format!(
            "{} hold {}: {} shared by several checkpoints, {} needed as delta bases, {} unreferenced, {} missing",
            plural(cp.blobs as usize, "blob"),
            plural(cp.blob_references as usize, "channel value"),
            cp.shared_blobs,
            cp.delta_bases,
            cp.unreferenced_blobs,
            cp.missing_blobs
        ),
    ]);
    s.row([
        "store".to_string(),
        format!(
            "{} in {}; {} with a TTL, {} expired (not yet swept)",
            plural(store.items as usize, "item"),
            plural(store.namespaces as usize, "namespace"),
            store.with_ttl,
            store.expired
        ),
    ]);
    let dims_text = match store.vector_dims.as_slice() {
        [] => String::new(),
        [d] => format!(" of {} dims", d.dims),
        many => format!(" of {} dims", many.iter().map(|d| d.dims.to_string()).collect::<Vec<_>>().join("/")),
    };
    s.row([
        "vectors".to_string(),
        format!(
            "{}{dims_text} on {}; embedder {}",
            plural(store.vectors as usize, "vector"),
            plural(store.vector_items as usize, "item"),
            embedder.as_deref().unwrap_or("not recorded")
        ),
    ]);
    s.print()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// check

fn severity(f: &Finding) -> &'static str {
    match f.severity() {
        Severity::Corruption => "error",
        _ => "warning",
    }
}

fn title(area: CheckArea) -> &'static str {
    match area {
        CheckArea::Sqlite => "sqlite integrity_check",
        CheckArea::PendingWrites => "pending writes have their checkpoint",
        CheckArea::Parents => "parents resolve",
        CheckArea::Blobs => "channel versions have their blob",
        CheckArea::Items => "items are JSON objects",
        CheckArea::Vectors => "vectors have their item",
        _ => "other",
    }
}

/// `check`: SQLite's integrity check, then agentstate's invariants; with
/// `repair`, orphan vectors are deleted first.
pub fn check(ctx: &Ctx, repair: bool) -> CliResult {
    let repaired = if repair { Some(ctx.db.repair_orphan_vectors()?) } else { None };
    let pb = output::spinner("integrity check");
    let res = ctx.db.check();
    pb.finish_and_clear();
    let report = res?;
    // A Python SqliteSaver's tables next to a Store: the checkpoint checks
    // have nothing of agentstate's to look at, and say so.
    let saver = ctx.db.has_python_saver()?;
    let skipped = |area: CheckArea| {
        saver && matches!(area, CheckArea::PendingWrites | CheckArea::Parents | CheckArea::Blobs)
    };
    const SKIPPED: &str = "not checked: Python SqliteSaver tables";
    let saver_note = format!(
        "the file's `checkpoints` and `writes` tables are a Python SqliteSaver's, not checked here; \
         convert them with `agentstate import {} NEW.db`",
        ctx.path.display()
    );
    let errors = report.corruption();
    let warnings = report.leftovers();
    let detail = |area: CheckArea| -> String {
        match area {
            CheckArea::PendingWrites => plural(report.pending_writes as usize, "write"),
            CheckArea::Blobs => format!(
                "{} to {}",
                plural(report.blob_references as usize, "reference"),
                plural(report.blobs as usize, "blob")
            ),
            CheckArea::Items => plural(report.items as usize, "item"),
            CheckArea::Vectors => plural(report.vectors as usize, "vector"),
            _ => String::new(),
        }
    };
    let of =
        |area: CheckArea| -> Vec<&Finding> { report.findings.iter().filter(|f| f.area() == area).collect() };
    if ctx.json {
        let checks: Vec<Value> = CheckArea::ALL
            .iter()
            .map(|&area| {
                let mine = of(area);
                let status = if mine.iter().any(|f| f.severity() == Severity::Corruption) {
                    "error"
                } else if !mine.is_empty() {
                    "warning"
                } else if skipped(area) {
                    "skipped"
                } else {
                    "ok"
                };
                let detail = if status == "skipped" { SKIPPED.to_string() } else { detail(area) };
                json!({"check": area.name(), "status": status, "detail": detail})
            })
            .collect();
        let list: Vec<Value> = report
            .findings
            .iter()
            .map(|f| json!({"severity": severity(f), "check": f.area().name(), "message": f.to_string()}))
            .collect();
        let mut doc = json!({
            "ok": errors == 0,
            "errors": errors,
            "warnings": warnings,
            "checks": checks,
            "problems": list,
            "python_sqlite_saver": saver,
        });
        if saver {
            doc["note"] = json!(saver_note);
        }
        if let Some(n) = repaired {
            doc["repaired"] = json!({"orphan_vectors_deleted": n});
        }
        output::json(&doc)?;
    } else {
        if let Some(n) = repaired {
            output::line(&format!("repair: deleted {}", plural(n as usize, "orphan vector")))?;
        }
        const SHOWN: usize = 20;
        let mut t = Table::default();
        let mut lines: Vec<Vec<String>> = vec![];
        for &area in &CheckArea::ALL {
            let mine = of(area);
            let errs = mine.iter().filter(|f| f.severity() == Severity::Corruption).count();
            let warns = mine.len() - errs;
            let d = detail(area);
            let status = match (errs, warns) {
                (0, 0) if skipped(area) => SKIPPED.to_string(),
                (0, 0) => format!("ok{}", if d.is_empty() { String::new() } else { format!(" ({d})") }),
                (0, w) => plural(w, "warning"),
                (e, 0) => plural(e, "error"),
                (e, w) => format!("{}, {}", plural(e, "error"), plural(w, "warning")),
            };
            let mut details: Vec<String> =
                mine.iter().take(SHOWN).map(|f| format!("  {}: {f}", severity(f))).collect();
            if mine.len() > SHOWN {
                details.push(format!("  ... and {} more (see --json)", mine.len() - SHOWN));
            }
            t.row([title(area).to_string(), status]);
            lines.push(details);
        }
        for (details, row) in lines.iter().zip(t.render()) {
            output::line(&row)?;
            for d in details {
                output::line(d)?;
            }
        }
        if saver {
            output::line(&format!("note: {saver_note}"))?;
        }
        output::line(&format!(
            "result: {}",
            match (errors, warnings) {
                (0, 0) => "ok".to_string(),
                (0, w) => format!("ok ({})", plural(w, "warning")),
                (e, w) => format!("{}, {}", plural(e, "error"), plural(w, "warning")),
            }
        ))?;
    }
    if errors > 0 {
        return Err(Failure::new(
            exit::CHECK_FAILED,
            format!("integrity check failed: {} ({})", plural(errors, "error"), plural(warnings, "warning")),
        ));
    }
    Ok(())
}

/// `vacuum`: return free pages to the filesystem.
pub fn vacuum(ctx: &Ctx) -> CliResult {
    let before = std::fs::metadata(&ctx.path).map(|m| m.len()).unwrap_or(0);
    let freed = ctx.db.vacuum()?;
    let after = std::fs::metadata(&ctx.path).map(|m| m.len()).unwrap_or(0);
    if ctx.json {
        output::json(&json!({"freed_bytes": freed, "file_bytes_before": before, "file_bytes_after": after}))?;
    } else {
        output::line(&format!("vacuum freed {freed} bytes; file {before} -> {after} bytes"))?;
    }
    Ok(())
}
