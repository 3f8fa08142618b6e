//! The `agentstate` command-line inspector's error cases (one stderr line,
//! a documented non-zero exit code), its help, a closed output pipe, and the
//! read-only commands leaving the file untouched. (The commands' output:
//! `tests/cli.rs`.)

mod cli_support;

use std::path::Path;
use std::process::{Command, Stdio};

use agentstate::{Db, StoreConfig};
use serde_json::json;

use cli_support::*;

#[test]
fn errors_are_one_line_with_an_exit_code() {
    let f = fixture();
    let p = f.path.as_path();

    assert_eq!(fails(p, &["history", "nope"], 3), "error: unknown thread 'nope'");
    fails(p, &["history", "t1", "--ns", "zzz"], 3);
    fails(p, &["show", "nope"], 3);
    let e = fails(p, &["show", "t1", "zzzzzzzz"], 3);
    assert!(e.contains("no checkpoint 'zzzzzzzz'"), "{e}");
    fails(p, &["diff", "t1", &f.ids[0], "zzzzzzzz"], 3);
    let e = fails(p, &["show", "t1", &f.ids[0][..1]], 2);
    assert!(e.contains("ambiguous"), "{e}");

    let e = fails(p, &["store", "search", "--filter", r#"{"a b": 1}"#], 2);
    assert!(e.to_lowercase().starts_with("error: invalid filter"), "{e}");
    let e = fails(p, &["store", "search", "--filter", r#"{"score": {"$near": 1}}"#], 2);
    assert!(e.starts_with("error: invalid filter:"), "{e}");
    let e = fails(p, &["store", "search", "--filter", "{bad"], 2);
    assert!(e.starts_with("error: invalid JSON filter:"), "{e}");
    let e = fails(p, &["store", "put", "users.x", "k", "{bad"], 2);
    assert!(e.starts_with("error: invalid JSON value:"), "{e}");
    fails_with(p, &["store", "put", "users.x", "k"], Some("not json"), 2);
    fails(p, &["store", "put", "users.x", "k", "[1, 2]"], 2);
    fails(p, &["store", "put", "users.x", "k", "{}", "--ttl", "-1"], 2);
    let e = fails(p, &["store", "put", "langgraph.x", "k", "{}"], 2);
    assert!(e.starts_with("error: invalid namespace:"), "{e}");
    let e = fails(p, &["store", "get", "users..alice", "k"], 2);
    assert!(e.starts_with("error: invalid namespace:"), "{e}");
    let e = fails(p, &["store", "get", r#"["users", 1]"#, "k"], 2);
    assert!(e.starts_with("error: invalid namespace:"), "{e}");
    fails(p, &["store", "get", "[users", "k"], 2);

    // Command-line errors are one line too.
    let e = fails(p, &["frobnicate"], 2);
    assert!(e.contains("frobnicate") && e.ends_with("(see --help)"), "{e}");
    let e = fails(p, &["show"], 2);
    assert!(e.contains("<THREAD>"), "{e}");
    fails(p, &["store", "search", "--limit", "many"], 2);

    // Files that are not usable.
    let dir = tempfile::tempdir().unwrap();
    let e = fails(&dir.path().join("missing.db"), &["threads"], 5);
    assert!(e.contains("missing.db"), "{e}");
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "this is not a database, just some text that is long enough to have a header\n".repeat(20),
    )
    .unwrap();
    let e = fails(&text, &["stats"], 5);
    assert!(e.contains("not an agentstate database"), "{e}");

    let other = dir.path().join("other.sqlite");
    rusqlite::Connection::open(&other).unwrap().execute_batch("CREATE TABLE foo (x)").unwrap();
    let e = fails(&other, &["threads"], 5);
    assert!(e.contains("not an agentstate database"), "{e}");
    let tables: i64 = rusqlite::Connection::open(&other)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    assert_eq!(tables, 1, "the foreign file was not touched");

    let saver_file = dir.path().join("python_saver.sqlite");
    rusqlite::Connection::open(&saver_file)
        .unwrap()
        .execute_batch("CREATE TABLE checkpoints (thread_id TEXT, checkpoint BLOB); CREATE TABLE writes (x)")
        .unwrap();
    let e = fails(&saver_file, &["threads"], 5);
    assert!(e.contains("SqliteSaver"), "{e}");

    let newer = dir.path().join("newer.db");
    drop(Db::open(&newer).unwrap());
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute("INSERT INTO checkpoint_migrations (v) VALUES (999)", [])
        .unwrap();
    let e = fails(&newer, &["threads"], 5);
    assert!(e.contains("newer") && e.contains("999"), "{e}");

    // A --query needs the file's embedder; a filter does not.
    let plain = dir.path().join("plain.db");
    {
        let db = Db::open(&plain).unwrap();
        db.store(StoreConfig::default()).unwrap().put(&["docs"], "a", json!({"text": "hello"})).unwrap();
    }
    let e = fails(&plain, &["store", "search", "--query", "hello"], 2);
    assert!(e.contains("needs the embedder") && e.contains("--filter"), "{e}");
    assert_eq!(ok_json(&plain, &["store", "search", "--filter", r#"{"text": "hello"}"#])[0]["key"], "a");
    fails(&plain, &["store", "reindex"], 2);
    let r = ok_json(&plain, &["store", "reindex", "--dims", "16"]);
    assert_eq!(r["fields"], json!(["$"]));
    assert_eq!(ok_json(&plain, &["store", "search", "--query", "hello"])[0]["key"], "a");
}

#[test]
fn help_lists_the_commands_and_exit_codes() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for word in
        ["threads", "history", "show", "diff", "fork", "copy", "prune", "delete", "store", "stats", "check"]
    {
        assert!(text.contains(word), "{word} missing from --help");
    }
    assert!(text.contains("Exit codes:") && text.contains("7  `check` found problems"), "{text}");
    let out = Command::new(BIN).args(["x.db", "store", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for word in ["get", "put", "delete", "search", "ns", "sweep", "reindex"] {
        assert!(text.contains(word), "{word} missing from store --help");
    }
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let f = fixture();
    for args in [
        vec!["history", "t1"],
        vec!["show", "t1", "--json"],
        vec!["store", "search"],
        vec!["threads"],
        vec!["check"],
    ] {
        let mut child = Command::new(BIN)
            .arg(&f.path)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away before the first line
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn retain_refuses_numbers_it_cannot_honour() {
    let f = fixture();
    let p = f.path.as_path();
    let e = fails(p, &["retain", "--max-age-minutes", "1e308"], 2);
    assert!(e.contains("too large"), "{e}");
    let e = fails(p, &["retain", "--keep-last", "0"], 2);
    assert!(e.contains("at least 1"), "{e}");
    assert_eq!(thread(&ok_json(p, &["threads"]), "t1").unwrap()["checkpoints"], 5, "nothing removed");
}

#[test]
fn input_errors_say_what_to_fix_once() {
    let f = fixture();
    let p = f.path.as_path();
    let e = fails(p, &["store", "search", "--filter", r#"{"a b": 1}"#], 2);
    assert!(!e.to_lowercase().contains("invalid filter: invalid filter"), "{e}");
    let e = fails(p, &["fork", "t1", "--set", "counter=notjson"], 2);
    assert!(e.contains(r#"--set 'counter="notjson"'"#), "{e}");
}

#[test]
fn read_only_commands_leave_the_file_untouched() {
    let f = fixture();
    let dir = f.path.parent().unwrap();
    let before = dir_snapshot(dir);
    assert_eq!(before.len(), 1, "{:?}", before.iter().map(|e| &e.0).collect::<Vec<_>>());
    let p = f.path.as_path();
    let latest = &f.ids[3];
    for args in [
        vec!["threads"],
        vec!["history", "t1"],
        vec!["show", "t1"],
        vec!["diff", "t1", &f.ids[0], latest],
        vec!["stats"],
        vec!["check"],
        vec!["store", "get", "users.alice", "m1"],
        vec!["store", "search", "users"],
        vec!["store", "ns"],
    ] {
        ok(p, &args);
        assert_eq!(dir_snapshot(dir), before, "{args:?} changed the directory");
    }

    // A Python-written Store file: the checkpoint side reads without a
    // migration or a switch to WAL.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store");
    let pdir = tempfile::tempdir().unwrap();
    let py = pdir.path().join("python_store.sqlite");
    std::fs::copy(fixtures.join("python_store.sqlite"), &py).unwrap();
    let before = dir_snapshot(pdir.path());
    for args in [vec!["threads"], vec!["stats"], vec!["check"]] {
        ok(&py, &args);
        assert_eq!(dir_snapshot(pdir.path()), before, "{args:?} changed the Python file");
    }

    // Refused files are left as they were, with no -wal/-shm beside them.
    let saver = pdir.path().join("saver.sqlite");
    rusqlite::Connection::open(&saver)
        .unwrap()
        .execute_batch("CREATE TABLE checkpoints (thread_id TEXT, checkpoint BLOB); CREATE TABLE writes (x)")
        .unwrap();
    let before = dir_snapshot(pdir.path());
    fails(&saver, &["stats"], 5);
    fails(&saver, &["delete", "x"], 5);
    assert_eq!(dir_snapshot(pdir.path()), before);
}

/// Files an older agentstate wrote (`tests/fixtures/format/`: checkpoint
/// series 5 and 6, `agentstate_migrations` 3; v5 in rollback-journal mode,
/// v6 in WAL mode) stay byte-identical through every read-only command, the
/// Store reads included: no migration, no switch to WAL, no `-wal`/`-shm`.
#[test]
fn read_only_commands_leave_older_files_untouched() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format");
    for name in ["v5.sqlite", "v6.sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::copy(fixtures.join(name), &p).unwrap();
        // An item for the Store reads to find, written as another writer
        // (Python, a script) would: through SQL, without a migration.
        rusqlite::Connection::open(&p)
            .unwrap()
            .execute(
                r#"INSERT INTO store (prefix, key, value) VALUES ('docs', 'readme', '{"text": "hi"}')"#,
                [],
            )
            .unwrap();
        let before = dir_snapshot(dir.path());
        assert_eq!(before.len(), 1, "{name}: {before:?}");
        let journal = |p: &Path| -> String {
            rusqlite::Connection::open_with_flags(p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap()
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap()
        };
        let mode = journal(&p);
        let history = ok_json(&p, &["history", "ints"]);
        let ids: Vec<String> = history["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["checkpoint_id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), 2, "{name}: {history}");
        assert_eq!(dir_snapshot(dir.path()), before, "{name}: history changed the file");
        for args in [
            vec!["threads"],
            vec!["show", "ints"],
            vec!["diff", "ints", &ids[0], &ids[1]],
            vec!["stats"],
            vec!["store", "get", "docs", "readme"],
            vec!["store", "search"],
            vec!["store", "search", "docs", "--filter", r#"{"text": "hi"}"#],
            vec!["store", "ns"],
        ] {
            ok(&p, &args);
            assert_eq!(dir_snapshot(dir.path()), before, "{name}: {args:?} changed the file");
        }
        // Whatever it finds (its verdict on old formats is not this test's
        // business), `check` changes nothing either.
        let out = run(&p, &["check"]);
        assert!(matches!(out.code, 0 | 7), "{name}: check: {}", out.stderr);
        assert_eq!(dir_snapshot(dir.path()), before, "{name}: check changed the file");
        // The Store reads did read the old file.
        assert_eq!(ok_json(&p, &["store", "ns"]), json!([["docs"]]), "{name}");
        assert_eq!(ok_json(&p, &["store", "search", "docs"])[0]["key"], "readme", "{name}");
        assert_eq!(ok_json(&p, &["store", "get", "docs", "readme"])["value"], json!({"text": "hi"}));
        assert_eq!(dir_snapshot(dir.path()), before, "{name}: --json reads changed the file");
        assert_eq!(journal(&p), mode, "{name}: journal mode");
    }
}

/// A Python file with a `SqliteSaver` next to its `SqliteStore`: the thread
/// commands refuse it unchanged (exit 5, pointing to `agentstate import`),
/// as they refuse a `SqliteSaver` file without a Store; the Store commands,
/// `stats` and `check` work, and the last two say the checkpoints are a
/// SqliteSaver's instead of reporting none.
#[test]
fn thread_commands_refuse_a_python_saver_next_to_a_store() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import/sqlite_saver.sqlite");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("py.sqlite");
    std::fs::copy(&src, &p).unwrap();
    let before = dir_snapshot(dir.path());
    for args in [
        vec!["threads"],
        vec!["threads", "--json"],
        vec!["history", "chat"],
        vec!["show", "chat"],
        vec!["diff", "chat", "a", "b"],
        vec!["fork", "chat"],
        vec!["copy", "chat", "chat2"],
        vec!["prune", "--all"],
        vec!["delete", "chat"],
        vec!["retain", "--keep-last", "1"],
    ] {
        let e = fails(&p, &args, 5);
        assert!(e.contains("SqliteSaver") && e.contains("agentstate import"), "{args:?}: {e}");
        assert_eq!(dir_snapshot(dir.path()), before, "{args:?} changed the file");
    }

    let stats = ok_json(&p, &["stats"]);
    assert_eq!(stats["checkpoints"]["python_sqlite_saver"], true, "{stats}");
    assert_eq!(stats["tables"]["checkpoints"]["rows"], 36, "{stats}");
    let text = ok(&p, &["stats"]);
    // The summary row (the table of tables has a `checkpoints` row too).
    let row = text.lines().rfind(|l| l.starts_with("checkpoints ")).unwrap();
    assert!(
        row.contains("Python SqliteSaver") && row.contains("36 rows") && row.contains("agentstate import"),
        "{row}"
    );
    let check = ok_json(&p, &["check"]);
    assert_eq!(check["python_sqlite_saver"], true, "{check}");
    for c in check["checks"].as_array().unwrap() {
        let skipped = ["writes", "parents", "blobs"].contains(&c["check"].as_str().unwrap());
        assert_eq!(c["status"] == "skipped", skipped, "{c}");
    }
    let text = ok(&p, &["check"]);
    assert!(text.contains("not checked: Python SqliteSaver tables"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("note: ") && l.contains("agentstate import")), "{text}");
    assert_eq!(dir_snapshot(dir.path()), before, "stats and check changed the file");

    // The Store half works (a Store command migrates a Python Store file:
    // agentstate's own tables, never the checkpoint series).
    assert!(!ok_json(&p, &["store", "ns"]).as_array().unwrap().is_empty());
    assert_eq!(ok_json(&p, &["stats"])["checkpoints"]["python_sqlite_saver"], true);
    fails(&p, &["threads"], 5);

    // A file of agentstate's own says false.
    let f = fixture();
    assert_eq!(ok_json(&f.path, &["stats"])["checkpoints"]["python_sqlite_saver"], false);
    assert_eq!(ok_json(&f.path, &["check"])["python_sqlite_saver"], false);
}

#[test]
fn ttl_too_large_names_the_limit() {
    let f = fixture();
    let p = f.path.as_path();
    for ttl in ["1e10", "1e300", "1.7976931348623157e308"] {
        let e = fails(p, &["store", "put", "users.x", "k", "{}", "--ttl", ttl], 2);
        assert!(e.starts_with("error: a TTL must be at most 1000000000 minutes, got "), "{ttl}: {e}");
        assert!(e.len() < 120, "{ttl}: {e}");
    }
    for ttl in ["-1", "NaN", "inf"] {
        let e = fails(p, &["store", "put", "users.x", "k", "{}", "--ttl", ttl], 2);
        assert!(e.starts_with("error: a TTL must be a finite number of minutes >= 0"), "{ttl}: {e}");
    }
    ok(p, &["store", "put", "users.x", "k", "{}", "--ttl", "1e9"]);
}

/// `agentstate import SRC DST` onto a destination that is in the way: exit
/// 4 with the item named plainly, or the embedder the destination records.
#[test]
fn import_conflicts_say_what_is_in_the_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import/sqlite_saver.sqlite");
    let dir = tempfile::tempdir().unwrap();
    let import = |dst: &Path| -> String {
        // `fails` runs `agentstate PATH ARGS...`: here PATH is `import`.
        fails(Path::new("import"), &[src.to_str().unwrap(), dst.to_str().unwrap()], 4)
    };

    let d1 = dir.path().join("d1.db");
    {
        let db = Db::open(&d1).unwrap();
        db.store(StoreConfig::default()).unwrap().put(&["docs"], "readme", json!({"mine": true})).unwrap();
    }
    let e = import(&d1);
    assert!(e.contains("Store item 'readme' in namespace 'docs' already exists"), "{e}");
    assert!(!e.contains("Text("), "{e}");

    let d2 = dir.path().join("d2.db");
    {
        let db = Db::open(&d2).unwrap();
        let index = agentstate::store::IndexConfig::hashed(16).unwrap();
        db.store(StoreConfig::default().with_index(index))
            .unwrap()
            .put(&["mine"], "a", json!({"t": 1}))
            .unwrap();
    }
    let e = import(&d2);
    assert!(e.contains("records its vectors as made by agentstate-hash-v1/16"), "{e}");
}

/// A command line without a command prints the usage on stderr (exit 2),
/// as docs/cli.md says; a missing command after FILE is one line.
#[test]
fn no_command_prints_the_usage() {
    let out = Command::new(BIN).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let text = String::from_utf8(out.stderr).unwrap();
    assert!(text.contains("Usage: agentstate") && text.contains("Exit codes:"), "{text}");
    let e = fails(Path::new("x.db"), &[], 2);
    assert!(e.contains("subcommand"), "{e}");
}
