//! The file's schema: the numbered migrations of `schema.sql`, and the
//! checks `Db::open` makes before using a file (a foreign layout, a file
//! newer than this binary, one that is not ours).

use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Result};

/// The DDL of every table, as numbered migrations (see `schema.sql`).
const SCHEMA_SQL: &str = include_str!("../../schema.sql");

/// The migration series, in the order they are applied.
const SERIES: [&str; 4] =
    ["checkpoint_migrations", "store_migrations", "vector_migrations", "agentstate_migrations"];

/// One numbered migration parsed out of `schema.sql`.
struct Migration {
    series: &'static str,
    version: i64,
    sql: String,
}

/// The migrations of `schema.sql`, parsed once.
fn migrations() -> &'static [Migration] {
    static PARSED: std::sync::LazyLock<Vec<Migration>> = std::sync::LazyLock::new(parse_migrations);
    &PARSED
}

fn parse_migrations() -> Vec<Migration> {
    let mut out: Vec<Migration> = Vec::new();
    for line in SCHEMA_SQL.lines() {
        if let Some(rest) = line.strip_prefix("-- migration: ") {
            let mut parts = rest.split_whitespace();
            let series = parts.next().unwrap_or_default();
            let version = parts.next().and_then(|v| v.parse().ok()).unwrap_or(-1);
            let series = SERIES.iter().copied().find(|s| *s == series).unwrap_or("invalid");
            out.push(Migration { series, version, sql: String::new() });
        } else if let Some(m) = out.last_mut() {
            m.sql.push_str(line);
            m.sql.push('\n');
        }
    }
    out
}

/// The highest migration number of each series this binary knows.
pub(crate) fn known_versions() -> Vec<(&'static str, i64)> {
    SERIES
        .iter()
        .map(|s| (*s, migrations().iter().filter(|m| m.series == *s).map(|m| m.version).max().unwrap_or(-1)))
        .collect()
}

/// Applies every migration the file lacks, in one `BEGIN IMMEDIATE`
/// transaction, so that two processes creating the same file serialize and
/// the second one finds nothing to do.
pub(super) fn migrate(conn: &mut Connection, busy: Duration) -> Result<()> {
    // A cheap read first: an up-to-date file needs no write lock at all.
    if up_to_date(&Found::read(conn)?)? {
        return Ok(());
    }
    let deadline = Instant::now() + busy;
    loop {
        let res = (|| -> Result<()> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let skip = skipped_series(Found::read(&tx)?.foreign_saver);
            for series in SERIES.into_iter().filter(|s| Some(*s) != skip) {
                tx.execute_batch(&format!("CREATE TABLE IF NOT EXISTS {series} (v INTEGER PRIMARY KEY)"))?;
            }
            for (series, known) in known_versions() {
                let have = max_version(&tx, series)?;
                if have > known {
                    return Err(Error::SchemaTooNew { table: series, found: have, supported: known });
                }
            }
            for m in migrations() {
                if Some(m.series) == skip || m.version <= max_version(&tx, m.series)? {
                    continue;
                }
                tx.execute_batch(&m.sql)?;
                tx.execute(&format!("INSERT INTO {} (v) VALUES (?1)", m.series), [m.version])?;
            }
            tx.commit()?;
            Ok(())
        })();
        match res {
            Err(Error::Busy) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            other => return other,
        }
    }
}

fn max_version(conn: &Connection, series: &str) -> Result<i64> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [series],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(-1);
    }
    Ok(conn.query_row(&format!("SELECT COALESCE(MAX(v), -1) FROM {series}"), [], |r| r.get(0))?)
}

/// What a file holds of the tables we look at when opening it: its table
/// names and the highest migration of each series (-1: the series' table
/// is missing), read with two queries (opening a file prepares every
/// statement it runs: a query per table would cost more than the rest of
/// `open`).
pub(super) struct Found {
    tables: std::collections::HashSet<String>,
    versions: Vec<(&'static str, i64)>,
    /// The file holds a Python `SqliteSaver` next to a Store (see
    /// [`check_foreign`]).
    pub(super) foreign_saver: bool,
}

impl Found {
    /// # Errors
    /// Those of [`check_foreign`] (before reading any version: a foreign
    /// file's tables may not have the columns we read), database errors.
    pub(super) fn read(conn: &Connection) -> Result<Found> {
        let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
        let tables = stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<_>>()?;
        let mut found =
            Found { tables, versions: SERIES.iter().map(|s| (*s, -1)).collect(), foreign_saver: false };
        found.foreign_saver = check_foreign(&found)?;
        let present: Vec<&str> = SERIES.iter().copied().filter(|s| found.has(s)).collect();
        if !present.is_empty() {
            // The series names are ours (constants), never input.
            let sql = present
                .iter()
                .map(|s| format!("SELECT '{s}', COALESCE(MAX(v), -1) FROM {s}"))
                .collect::<Vec<_>>()
                .join(" UNION ALL ");
            let mut stmt = conn.prepare(&sql)?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let (series, v): (String, i64) = (r.get(0)?, r.get(1)?);
                if let Some(slot) = found.versions.iter_mut().find(|(s, _)| *s == series) {
                    slot.1 = v;
                }
            }
        }
        Ok(found)
    }

    fn has(&self, table: &str) -> bool {
        self.tables.contains(table)
    }

    fn version(&self, series: &str) -> i64 {
        self.versions.iter().find(|(s, _)| *s == series).map_or(-1, |(_, v)| *v)
    }
}

pub(super) fn up_to_date(found: &Found) -> Result<bool> {
    let skip = skipped_series(found.foreign_saver);
    for (series, known) in known_versions().into_iter().filter(|(s, _)| Some(*s) != skip) {
        let have = found.version(series);
        if have > known {
            return Err(Error::SchemaTooNew { table: series, found: have, supported: known });
        }
        if have < known {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Refuses (when opening read-only, which creates nothing) a file with none
/// of the migration tables agentstate or LangGraph's `SqliteStore` create.
pub(super) fn check_ours(found: &Found) -> Result<()> {
    if SERIES.iter().any(|s| found.version(s) >= 0) {
        return Ok(());
    }
    Err(Error::NotAgentstate(if found.tables.is_empty() {
        "an empty SQLite database".into()
    } else {
        "an SQLite database without agentstate's tables".into()
    }))
}

/// Refuses files whose tables share our names but not our layout, and
/// tells whether the file holds a Python `SqliteSaver` (tables `checkpoints`
/// and `writes`, no `checkpoint_migrations`) next to a Store. A saver alone
/// is refused; next to a Store it is left untouched: the checkpoint series
/// is then never applied (see `skipped_series`) and checkpointer handles
/// refuse to run, while the Store half is used as usual.
fn check_foreign(found: &Found) -> Result<bool> {
    let has = |name: &str| found.has(name);
    if has("store") && !has("store_migrations") {
        return Err(Error::NotAgentstate(
            "the file has a `store` table that no LangGraph or agentstate store created".into(),
        ));
    }
    let saver = has("checkpoints") && !has("checkpoint_migrations");
    if saver && !has("store_migrations") {
        return Err(Error::NotAgentstate(
            "the file has a `checkpoints` table but no `checkpoint_migrations`: it looks like a \
             Python SqliteSaver file, whose layout (whole states per row) agentstate does not use"
                .into(),
        ));
    }
    Ok(saver)
}

/// The migration series not applied to a file: the checkpoint series when
/// the file holds a Python `SqliteSaver` (its tables would be mixed with
/// ours).
fn skipped_series(foreign_saver: bool) -> Option<&'static str> {
    foreign_saver.then_some("checkpoint_migrations")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_parses_into_numbered_migrations() {
        let ms = migrations();
        assert!(ms.iter().all(|m| m.series != "invalid" && m.version >= 0));
        for s in SERIES {
            let vs: Vec<i64> = ms.iter().filter(|m| m.series == s).map(|m| m.version).collect();
            let expect: Vec<i64> = (0..vs.len() as i64).collect();
            assert_eq!(vs, expect, "{s} must be numbered 0, 1, 2, ...");
        }
        let store: Vec<_> = ms.iter().filter(|m| m.series == "store_migrations").collect();
        assert_eq!(store.len(), 5, "Python's SqliteStore has store migrations 0..=4");
    }
}
