//! `agentstate::import::import_sqlite_saver` and `agentstate import SRC DST`:
//! a file LangGraph's SqliteSaver and SqliteStore wrote
//! (`tests/fixtures/import/`, made by `tools/sqlite_saver_fixture/make.py`)
//! becomes an agentstate file with the same history, byte for byte where
//! bytes were stored, through the library and through the CLI; a failure
//! leaves no destination and no temporary file, and the source is never
//! changed. (Synthetic SqliteSaver files: `tests/import_synthetic.rs`.)

use std::path::Path;
use std::process::Command;

use agentstate::import::{import_sqlite_saver, ImportReport};
use agentstate::store::{IndexConfig, Search};
use agentstate::{Db, Error, ListQuery, StoreConfig};
use rusqlite::Connection;
use serde_json::{json, Value};

mod import_support;
use import_support::*;

#[test]
fn a_langgraph_file_imports_with_its_whole_history_and_store() {
    let (dir, src) = fixture_copy();
    let before = std::fs::read(&src).unwrap();
    let dst = dir.path().join("agent.db");
    let report = import_sqlite_saver(&src, &dst).unwrap();

    // The source is untouched and nothing but the destination was left.
    assert_eq!(std::fs::read(&src).unwrap(), before);
    assert_eq!(listing(dir.path()), ["agent.db", "langgraph.sqlite"]);

    let conn = Connection::open(&src).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as u64;
    assert_eq!(report.checkpoints, count("SELECT COUNT(*) FROM checkpoints"));
    assert_eq!(report.writes, count("SELECT COUNT(*) FROM writes"));
    assert_eq!(report.threads, 5);
    assert_eq!(
        report.namespaces,
        count("SELECT COUNT(*) FROM (SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints)")
    );
    assert_eq!(report.namespaces, 6, "the subgraph has its own namespace");
    assert_eq!(report.store_items, 4);
    assert_eq!(report.store_vectors, 3);
    assert_eq!(report.orphan_vectors_skipped, 1, "the deleted item's vector");
    assert_eq!(report.source_bytes, before.len() as u64);
    assert_eq!(report.destination_bytes, std::fs::metadata(&dst).unwrap().len());
    assert!(!report.merged);
    drop(conn);

    assert_same_history(&src, &dst);

    // The file passes agentstate's own check.
    let db = Db::open(&dst).unwrap();
    let check = db.check().unwrap();
    assert!(check.findings.is_empty(), "{:?}", check.findings);

    // Imported rows are dated by their checkpoint's ts.
    let conn = Connection::open(&dst).unwrap();
    let all = db.checkpointer().list(&agentstate::ListQuery::all()).unwrap();
    assert!(!all.is_empty());
    for t in all {
        let dated: bool = conn
            .query_row(
                "SELECT created_at = strftime('%Y-%m-%d %H:%M:%f', ?1) FROM checkpoints WHERE checkpoint_id = ?2",
                [&t.checkpoint.ts, &t.checkpoint.id],
                |r| r.get(0),
            )
            .unwrap();
        assert!(dated, "{} {}", t.checkpoint.id, t.checkpoint.ts);
    }

    // The Store: Python recorded no embedder, so the vectors must be
    // adopted (or reindexed) before a store with an index opens.
    let index = || IndexConfig::new(FixtureEmbed).with_fields(["text"]);
    assert!(matches!(
        db.store(StoreConfig::new().with_index(index())),
        Err(Error::UnrecordedEmbedder { vectors: 3, .. })
    ));
    let store = db.store(StoreConfig::new().with_index(index().with_adopt_existing_vectors(true))).unwrap();
    assert_eq!(
        store.get(&["users", "alice"], "m1").unwrap().unwrap().value,
        json!({"text": "likes hiking", "score": 0.9})
    );
    assert_eq!(
        store.get(&["docs"], "readme").unwrap().unwrap().value,
        json!({"text": "one file", "version": 1})
    );
    assert!(store.get(&["docs"], "gone").unwrap().is_none());
    let hits = store.search(Search::new(&["users"]).query("likes hiking")).unwrap();
    assert_eq!(hits[0].item.namespace.labels(), ["users", "alice"]);
    assert_eq!(hits[0].item.key, "m1");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6, "the stored vector is Python's");
}

#[test]
fn the_fixture_file_itself_is_read_without_any_change() {
    // The committed fixture (a WAL-mode file without -wal/-shm, as a closed
    // SqliteSaver leaves it) is imported in place: not a byte changes and
    // no -wal/-shm file appears beside it.
    let src = fixture();
    let dir = src.parent().unwrap().to_path_buf();
    let before = (std::fs::read(&src).unwrap(), listing(&dir));
    let out = tempfile::tempdir().unwrap();
    let report = import_sqlite_saver(&src, out.path().join("a.db")).unwrap();
    assert_eq!(report.checkpoints, 36);
    assert_eq!((std::fs::read(&src).unwrap(), listing(&dir)), before);
}

#[test]
fn a_source_that_python_is_writing_is_read_as_one_snapshot_and_left_alone() {
    let (dir, src) = fixture_copy();
    // A writer that keeps the file open with uncheckpointed frames in its WAL.
    let writer = Connection::open(&src).unwrap();
    writer.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
    writer
        .execute(
            "INSERT INTO checkpoints SELECT 'live', checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, \
             checkpoint, metadata FROM checkpoints WHERE thread_id = 'chat'",
            [],
        )
        .unwrap();
    let wal = dir.path().join("langgraph.sqlite-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0);
    let before = (std::fs::read(&src).unwrap(), std::fs::read(&wal).unwrap());

    let dst = dir.path().join("agent.db");
    let report = import_sqlite_saver(&src, &dst).unwrap();
    assert_eq!(report.threads, 6, "the rows in the WAL are read");
    assert_eq!((std::fs::read(&src).unwrap(), std::fs::read(&wal).unwrap()), before);
    let db = Db::open(&dst).unwrap();
    assert_eq!(db.checkpointer().list(&ListQuery::thread("live")).unwrap().len(), 16);
    drop(writer);
}

// ---------------------------------------------------------------------------
// The CLI

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cli(args: &[&std::ffi::OsStr]) -> Out {
    let out = Command::new(BIN).args(args).output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn cli_import(src: &Path, dst: &Path, json: bool) -> Out {
    let mut args = vec!["import".as_ref(), src.as_os_str(), dst.as_os_str()];
    if json {
        args.push("--json".as_ref());
    }
    cli(&args)
}

fn cli_fails(out: &Out, code: i32) -> &str {
    assert_eq!(out.code, code, "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr.lines().count(), 1, "{:?}", out.stderr);
    assert!(out.stderr.starts_with("error: ") && !out.stderr.contains("panicked"), "{}", out.stderr);
    out.stderr.trim_end()
}

#[test]
fn cli_imports_a_real_file_and_reports_it() {
    let (dir, src) = fixture_copy();
    let before = std::fs::read(&src).unwrap();
    let dst = dir.path().join("agent.db");
    let out = cli_import(&src, &dst, true);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stderr, "");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["checkpoints"], 36);
    assert_eq!(report["pending_writes"], 69);
    assert_eq!(report["threads"], 5);
    assert_eq!(report["store_items"], 4);
    assert_eq!(report["store_vectors"], 3);
    assert_eq!(report["merged"], false);
    assert_eq!(report["source_bytes"], before.len());
    assert_eq!(std::fs::read(&src).unwrap(), before);
    assert_same_history(&src, &dst);

    // The other commands read the result.
    let threads = cli(&[dst.as_os_str(), "threads".as_ref(), "--json".as_ref()]);
    assert_eq!(threads.code, 0, "{}", threads.stderr);
    assert_eq!(serde_json::from_str::<Value>(&threads.stdout).unwrap().as_array().unwrap().len(), 5);
    let check = cli(&[dst.as_os_str(), "check".as_ref()]);
    assert_eq!(check.code, 0, "{}", check.stdout);

    // Text: what was imported, the sizes, and what to do about the vectors.
    let dst2 = dir.path().join("agent2.db");
    let out = cli_import(&src, &dst2, false);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("5 threads (6 namespaces with checkpoints), 36 checkpoints, 69 pending writes"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("store: 4 items, 3 vectors (1 vector of deleted items left out)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("store reindex"), "{}", out.stdout);

    // Again onto the same file: a conflict, nothing written.
    let out = cli_import(&src, &dst, false);
    assert!(cli_fails(&out, 4).contains("already has checkpoints"));
}

#[test]
fn cli_errors_are_one_line_with_their_exit_code_and_leave_nothing() {
    let (dir, src) = fixture_copy();
    let before = listing(dir.path());
    let dst = dir.path().join("out.db");
    cli_fails(&cli_import(&dir.path().join("nope.sqlite"), &dst, false), 3);
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "plain text, not SQLite at all; long enough to have a header").unwrap();
    assert!(cli_fails(&cli_import(&text, &dst, false), 2).contains("not a LangGraph SqliteSaver file"));
    std::fs::remove_file(&text).unwrap();
    assert!(cli_fails(&cli_import(&src, &src, true), 2).contains("same file"));
    let out = cli(&["import".as_ref(), src.as_os_str()]);
    assert_eq!(out.code, 2);
    assert_eq!(listing(dir.path()), before);
    let help = cli(&["import".as_ref(), "--help".as_ref()]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("SqliteSaver"));
    let main_help = cli(&["--help".as_ref()]);
    assert!(main_help.stdout.contains("agentstate import SRC DST"));
}

#[test]
fn report_fields_are_plain_numbers() {
    // The report is a plain value: comparable, cloneable, printable.
    let r = ImportReport::default();
    assert_eq!(r.clone(), r);
    assert!(format!("{r:?}").contains("checkpoints"));
}
