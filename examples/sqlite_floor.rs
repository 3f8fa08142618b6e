//! What SQLite alone costs for the rows one checkpoint step stores: the
//! floor under `bench_checkpointer`'s step rate.
//!
//! Raw rusqlite, no agentstate code: tables shaped as agentstate's (a
//! checkpoint row of `--checkpoint-bytes`, a blob row holding one
//! `--msg-bytes` message, 3 pending-write rows in a clustered table), the
//! same pragmas (WAL, `synchronous=NORMAL` or `--full`, incremental
//! auto-vacuum, 4 KiB pages), one `BEGIN IMMEDIATE ... COMMIT` per step,
//! cached statements. It times steps that insert 0 rows (an empty
//! transaction), the checkpoint only, checkpoint + blob, and all five.
//!
//! ```text
//! cargo run --release --example sqlite_floor -- [--steps 3000] [--checkpoint-bytes 675] [--msg-bytes 300] [--full]
//! ```
//!
//! Prints one JSON object: microseconds per step for each row set.

use std::time::Instant;

use agentstate::rusqlite::{params, Connection};
use serde_json::{json, Map, Value};

#[path = "common/mod.rs"]
mod common;
use common::{arg, flag, median};

const SCHEMA: &str = "
    CREATE TABLE checkpoints (thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, parent_checkpoint_id TEXT,
        type TEXT, metadata TEXT, checkpoint TEXT,
        created_at TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
    CREATE TABLE checkpoint_blobs (thread_id TEXT, checkpoint_ns TEXT, channel TEXT, version TEXT, type TEXT,
        blob BLOB, created_at TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
        base_version TEXT, chain INTEGER, root_version TEXT,
        PRIMARY KEY (thread_id, checkpoint_ns, channel, version));
    CREATE TABLE checkpoint_writes (thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, task_id TEXT,
        idx INTEGER, channel TEXT, type TEXT, blob BLOB, task_path TEXT,
        created_at TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)) WITHOUT ROWID;";

/// Microseconds per step (median of 5 rounds of `steps / 5`) inserting
/// `rows` of the step's 5 rows.
fn per_step(
    dir: &std::path::Path,
    rows: usize,
    steps: usize,
    full: bool,
) -> agentstate::rusqlite::Result<f64> {
    let path = dir.join(format!("floor-{rows}.db"));
    let c = Connection::open(&path)?;
    let sync = if full { "FULL" } else { "NORMAL" };
    c.execute_batch(&format!(
        "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; {SCHEMA}"
    ))?;
    let checkpoint = "x".repeat(arg("--checkpoint-bytes", 675));
    let msg = vec![7u8; arg("--msg-bytes", 300)];
    let mut rounds = vec![];
    for round in 0..5 {
        let t = Instant::now();
        for s in 0..steps / 5 {
            let i = round * steps + s;
            let id = format!("1f1e8351-5ba3-{i:04x}-83e7-c2aef7808c99");
            c.execute_batch("BEGIN IMMEDIATE")?;
            if rows >= 1 {
                c.prepare_cached(
                    "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, \
                     metadata, checkpoint) VALUES ('long', '', ?1, ?1, 'compact', ?2, ?3)",
                )?
                .execute(params![id, r#"{"source":"loop","step":1,"parents":{}}"#, checkpoint])?;
            }
            if rows >= 2 {
                c.prepare_cached(
                    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob, \
                     base_version, chain, root_version) VALUES ('long', '', 'messages', ?1, 'msgpack', ?2, ?3, 1, ?4)",
                )?
                .execute(params![
                    format!("{i:032}.0.8458877473376559"),
                    msg,
                    format!("{:032}.0.7581465709587004", i.saturating_sub(1)),
                    format!("{:032}.0.816892248563453", 16)
                ])?;
            }
            if rows >= 3 {
                let mut stmt = c.prepare_cached(
                    "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, \
                     type, blob, task_path) VALUES ('long', '', ?1, 'aa77d487-85e2-4916-a999-d021fe120c14', ?2, ?3, \
                     'msgpack', ?4, '~__pregel_pull, agent')",
                )?;
                for (idx, ch, bytes) in
                    [(0, "messages", &msg[..]), (1, "counter", &msg[..1]), (2, "branch:to:tools", &[][..])]
                {
                    stmt.execute(params![id, idx, ch, bytes])?;
                }
            }
            c.execute_batch("COMMIT")?;
        }
        rounds.push(t.elapsed().as_secs_f64() / (steps / 5) as f64 * 1e6);
    }
    Ok(median(rounds))
}

fn main() -> agentstate::rusqlite::Result<()> {
    let steps = arg("--steps", 3000).max(5);
    let full = flag("--full");
    let dir = std::env::temp_dir().join(format!("agentstate-sqlite-floor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let mut out = Map::new();
    for (rows, name) in
        [(0, "empty_txn_us"), (1, "checkpoint_us"), (2, "checkpoint_blob_us"), (3, "all_five_rows_us")]
    {
        out.insert(name.into(), json!(per_step(&dir, rows, steps, full)?));
    }
    out.insert("synchronous".into(), json!(if full { "FULL" } else { "NORMAL" }));
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", Value::Object(out));
    Ok(())
}
