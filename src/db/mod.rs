//! [`Db`]: one SQLite file, a pool of connections, and the schema.
//!
//! `Db` owns the pool. [`Db::checkpointer`] and [`Db::store`](crate::Db::store)
//! hand out cheap handles that share it, so one file serves both halves.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::commit::{Committer, Job, Reporter, Undo};
use crate::error::{Error, Result};
use crate::pool::{Pool, Pooled};
use crate::wal::WalThread;

mod schema;

pub(crate) use schema::known_versions;
use schema::{check_ours, migrate, up_to_date, Found};

/// How hard a commit tries to reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=NORMAL` in WAL mode: a crashed *process* loses nothing that
    /// was committed; a power loss may lose the last few commits (never
    /// corrupts the file).
    #[default]
    Normal,
    /// `synchronous=FULL`: every commit is fsynced before the call returns;
    /// a power loss loses nothing that was acknowledged.
    Full,
}

/// The longest busy timeout ([`DbBuilder::busy_timeout`]): `i32::MAX`
/// milliseconds (about 24.8 days), the most SQLite's busy handler counts.
const MAX_BUSY_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// Options for opening a [`Db`]. Start from [`Db::builder`].
#[derive(Clone, Debug)]
pub struct DbBuilder {
    durability: Durability,
    pool_size: u32,
    busy_timeout: Duration,
    read_only: bool,
    write_behind: bool,
}

impl Default for DbBuilder {
    fn default() -> Self {
        DbBuilder {
            durability: Durability::Normal,
            pool_size: 8,
            busy_timeout: Duration::from_secs(10),
            read_only: false,
            write_behind: false,
        }
    }
}

impl DbBuilder {
    /// How commits reach the disk (default [`Durability::Normal`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The most connections the pool opens (default 8, at least 1). An
    /// in-memory database always uses exactly one.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n.max(1);
        self
    }

    /// How long a writer waits for another writer before giving up with
    /// [`Error::Busy`] (default 10 s). At most `i32::MAX` milliseconds
    /// (about 24.8 days, the longest SQLite holds): a longer one,
    /// `Duration::MAX` included, waits that long.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout.min(MAX_BUSY_TIMEOUT);
        self
    }

    /// Write checkpoints behind the caller (default `false`), like
    /// LangGraph's `durability="async"`: [`Checkpointer::put`](crate::Checkpointer::put),
    /// [`put_writes`](crate::Checkpointer::put_writes) and
    /// [`Step::commit`](crate::Step::commit) return once the write is queued,
    /// and a background thread commits what is queued together, one
    /// transaction (and, with [`Durability::Full`], one fsync) for many
    /// writes.
    ///
    /// What it guarantees:
    /// - each write is still all or nothing: a crash loses at most the writes
    ///   not yet committed, never part of one, and never a write committed
    ///   before a later one that survived (the queue commits in order);
    /// - reads through this `Db` see every write queued before them (a read
    ///   waits for the queue first);
    /// - [`Db::flush`] returns once everything queued is committed, and
    ///   dropping the last handle of the `Db` commits what is queued;
    /// - a write that fails once queued (a [`Error::Conflict`] from a step
    ///   whose parent is no longer the head, a full disk) is reported by the
    ///   next write to the same thread, which then queues nothing (an error
    ///   always means the call wrote nothing: retry it if it still
    ///   applies), by [`Db::flush_thread`] of that thread, or by
    ///   [`Db::flush`]; writes to other threads neither report it nor fail
    ///   for it. A thread's writes that fail before one of its failures is
    ///   reported are reported once, by the first: after an error, read the
    ///   thread's head again before going on.
    ///
    /// Store writes and maintenance calls (prune, delete, copy, retention)
    /// are never deferred; they wait for the queue first.
    #[must_use]
    pub fn write_behind(mut self, on: bool) -> Self {
        self.write_behind = on;
        self
    }

    /// Open for reading only (default `false`): the file must exist and is
    /// left exactly as it was (no schema migration, no switch to WAL, no
    /// `-wal`/`-shm` files left behind); every write fails with an
    /// [`Error::Sqlite`] (`ReadOnly`). A file that holds none of the tables
    /// agentstate or LangGraph's `SqliteStore` create is refused with
    /// [`Error::NotAgentstate`]. A file whose schema is older than this build
    /// is read as it is: what it lacks counts as empty. Ignored for an
    /// in-memory database.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Opens (creating if needed) the database file at `path` and brings its
    /// schema up to date. A path that names no file (`":memory:"`, `""`, a
    /// `mode=memory` URI) opens a database private to its one connection,
    /// as [`open_in_memory`](Self::open_in_memory) does.
    ///
    /// # Errors
    /// - [`Error::NotAgentstate`] if the file is not an SQLite database, or is
    ///   one with tables of the same names but another layout (for example a
    ///   Python `SqliteSaver` file, which keeps whole states in its rows).
    /// - [`Error::SchemaTooNew`] if a newer agentstate wrote the file.
    /// - [`Error::Corrupt`] if SQLite reports the file damaged.
    /// - [`Error::Busy`] if another process held the file for longer than the
    ///   busy timeout while the schema was being created.
    /// - [`Error::Sqlite`] (code `CannotOpen`) at once if the file cannot be
    ///   opened (permissions, missing directory, a directory, ...).
    pub fn open(self, path: impl AsRef<Path>) -> Result<Db> {
        self.build(Some(path.as_ref().to_path_buf()))
    }

    /// Opens a fresh in-memory database (one connection; gone when the `Db`
    /// and all its handles are dropped). Handy in tests.
    ///
    /// # Errors
    /// [`Error::Sqlite`] if SQLite cannot allocate it.
    pub fn open_in_memory(self) -> Result<Db> {
        self.build(None)
    }

    fn build(self, path: Option<PathBuf>) -> Result<Db> {
        let durability = self.durability;
        let busy = self.busy_timeout;
        let read_only = self.read_only && path.is_some();
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if let (true, Some(path)) = (read_only, &path) {
            // Read-write without CREATE, every connection `query_only`: the
            // last connection to close then checkpoints and removes the
            // `-wal`/`-shm` files a WAL file needs while it is read (a
            // read-only connection would leave them behind). A file we may
            // not write to is opened read-only.
            let writable = std::fs::metadata(path).map(|m| !m.permissions().readonly()).unwrap_or(false);
            flags = OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | if writable { OpenFlags::SQLITE_OPEN_READ_WRITE } else { OpenFlags::SQLITE_OPEN_READ_ONLY };
        }
        let open = {
            let path = path.clone();
            move || -> Result<Connection> {
                let mut conn = match &path {
                    Some(p) if crate::vfs::register() => {
                        Connection::open_with_flags_and_vfs(p, flags, "agentstate")?
                    }
                    Some(p) => Connection::open_with_flags(p, flags)?,
                    None => Connection::open_in_memory_with_flags(flags)?,
                };
                init_connection(&mut conn, durability, busy, read_only)?;
                Ok(conn)
            }
        };
        // The schema is checked and migrated on the first connection, before
        // the pool hands any out.
        let mut first = open()?;
        let found = Found::read(&first)?;
        let foreign_saver = found.foreign_saver;
        let mut current = false;
        // Whether the file is in WAL mode, with a WAL-index a connection may
        // read (see `Pooled::generation`); read-only handles do not.
        let mut wal = false;
        if read_only {
            up_to_date(&found)?;
            check_ours(&found)?;
        } else if path.is_some() {
            // Refuse a foreign or newer file before writing anything to it
            // (switching to WAL rewrites its header): `Found::read` above.
            current = up_to_date(&found)?;
            // Lets `Db::vacuum` return freed pages cheaply. Only takes effect
            // on a new, empty file.
            let pages: i64 = first.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            if pages == 0 {
                first.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")?;
            }
            wal = set_wal(&first, busy)?;
        }
        if !read_only && !current {
            migrate(&mut first, busy)?;
        }
        // An in-memory database lives in its one connection. So does one a
        // path names without a file (":memory:", "" for a temporary file,
        // a `mode=memory` URI: SQLite reports no file name for them): each
        // further connection would open another, empty database.
        let private = first.path().is_none_or(str::is_empty);
        let size = if path.is_some() && !private { self.pool_size as usize } else { 1 };
        let open_wal = open.clone();
        let pool = Arc::new(
            Pool::new(first, size, busy.max(Duration::from_secs(30)), Box::new(open)).with_wal_index(wal),
        );
        if path.is_some() && !private && !read_only {
            pool.checkpoint_wal_with(Box::new(move || WalThread::start(open_wal).ok()));
        }
        // Group commit with fsync on every commit; write-behind on request.
        // An in-memory database has one connection: it writes in the caller.
        let behind = self.write_behind && !read_only;
        let committer = if (behind || durability == Durability::Full) && path.is_some() && !read_only {
            Some(Committer::start(pool.clone(), busy)?)
        } else {
            None
        };
        Ok(Db {
            inner: Arc::new(Inner {
                committer,
                behind: behind && path.is_some(),
                pool,
                path,
                durability,
                busy_timeout: busy,
                foreign_saver,
                queued_heads: Arc::default(),
            }),
            checkpointer: false,
        })
    }
}

struct Inner {
    /// Declared before the pool: dropped first, it commits what is queued.
    committer: Option<Committer>,
    behind: bool,
    pool: Arc<Pool>,
    path: Option<PathBuf>,
    durability: Durability,
    busy_timeout: Duration,
    /// The file's `checkpoints` table is a Python `SqliteSaver`'s (see
    /// `check_foreign`): checkpointer handles refuse to run.
    foreign_saver: bool,
    /// With write-behind: the step queued last per thread (see
    /// `checkpoint::queued`).
    queued_heads: Arc<crate::checkpoint::QueuedHeads>,
}

/// One agentstate database: a file (or memory) and a pool of connections.
///
/// Cloning is cheap (an `Arc`); clones share the pool. `Db` is `Send + Sync`:
/// use it from as many threads as you like. Several processes may open the
/// same file; SQLite's WAL mode and `BEGIN IMMEDIATE` transactions keep them
/// consistent.
#[derive(Clone)]
pub struct Db {
    inner: Arc<Inner>,
    /// This handle belongs to a checkpointer: on a file whose checkpoint
    /// tables are a Python `SqliteSaver`'s, it hands out no connection.
    checkpointer: bool,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.inner.path)
            .field("durability", &self.inner.durability)
            .finish()
    }
}

impl Db {
    /// Opens (creating if needed) the file at `path` with default options.
    /// See [`DbBuilder::open`] for the errors.
    ///
    /// # Errors
    /// As [`DbBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Db> {
        DbBuilder::default().open(path)
    }

    /// A fresh in-memory database with default options.
    ///
    /// # Errors
    /// As [`DbBuilder::open_in_memory`].
    pub fn open_in_memory() -> Result<Db> {
        DbBuilder::default().open_in_memory()
    }

    /// Options for opening a database.
    pub fn builder() -> DbBuilder {
        DbBuilder::default()
    }

    /// The file's path, or `None` for an in-memory database.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The durability every connection of this `Db` uses.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// Returns the file's free pages to the filesystem and folds the WAL
    /// into the file; returns the bytes the file shrank by. Incremental
    /// (cheap) on files this crate created; a full `VACUUM` (rewrites the
    /// file, needs as much free disk) on older or foreign ones.
    ///
    /// # Errors
    /// [`Error::Busy`] if other connections keep the file busy; [`Error::DiskFull`]
    /// if a full vacuum has no room; other database errors.
    pub fn vacuum(&self) -> Result<u64> {
        let conn = self.conn()?;
        let size = |c: &Connection| -> Result<u64> {
            let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let page: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok((pages * page) as u64)
        };
        let before = size(&conn)?;
        let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
        if mode == 2 {
            // A bounded number at a time, each batch its own transaction
            // (the log stays short), while a batch frees any.
            let free = |c: &Connection| -> Result<i64> {
                Ok(c.query_row("PRAGMA freelist_count", [], |r| r.get(0))?)
            };
            let mut left = free(&conn)?;
            while left > 0 {
                let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))?;
                let mut rows = stmt.query([])?;
                while rows.next()?.is_some() {}
                drop(rows);
                let now = free(&conn)?;
                if now >= left {
                    break;
                }
                left = now;
            }
        } else {
            // (Read-only: as SQLite answers.)
            conn.execute_batch("VACUUM")?;
        }
        if self.inner.path.is_some() {
            // A checkpoint another connection is running (this `Db`'s WAL
            // thread, another process) makes this one give up at once,
            // answering `busy` instead of waiting: try again, within the
            // busy timeout.
            let deadline = std::time::Instant::now() + self.inner.busy_timeout;
            loop {
                let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
                if busy == 0 {
                    break;
                }
                if std::time::Instant::now() >= deadline {
                    return Err(Error::Busy);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(before.saturating_sub(size(&conn)?))
    }

    /// A pooled connection, for crate-internal reads. (`read`, `snapshot`
    /// and `write` all come here.)
    pub(crate) fn conn(&self) -> Result<Pooled<'_>> {
        self.refuse_foreign()?;
        self.inner.pool.get()
    }

    /// A checkpointer's handle on a file whose checkpoint tables are a
    /// Python `SqliteSaver`'s fails with [`Error::NotAgentstate`].
    fn refuse_foreign(&self) -> Result<()> {
        if self.checkpointer && self.inner.foreign_saver {
            return Err(Error::NotAgentstate(
                "the file's `checkpoints` and `writes` tables belong to a Python SqliteSaver, whose \
                 layout (whole states per row) agentstate's checkpointer does not use; they are left \
                 untouched (the file's Store can be used)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// This database as a checkpointer's handle: every call fails with
    /// [`Error::NotAgentstate`] if the file's checkpoint tables are a Python
    /// `SqliteSaver`'s.
    pub(crate) fn for_checkpointer(&self) -> Db {
        Db { inner: self.inner.clone(), checkpointer: true }
    }

    /// This database as a handle for anything but the checkpointer (the
    /// Store, inspection).
    pub(crate) fn for_store(&self) -> Db {
        Db { inner: self.inner.clone(), checkpointer: false }
    }

    /// Runs `f` on a pooled connection (reads; no explicit transaction unless
    /// `f` opens one).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.settle();
        let conn = self.conn()?;
        f(&conn)
    }

    /// Runs `f` in a read transaction: every statement sees one snapshot of
    /// the file. (BEGIN/COMMIT go through cached statements: this sits on
    /// every read path.)
    pub(crate) fn snapshot<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.settle();
        let conn = self.conn()?;
        in_read_transaction(&conn, f)
    }

    /// Like [`snapshot`](Self::snapshot) for a read whose result the caller
    /// caches: `hit(g)` may answer from what was cached at generation `g` (no
    /// transaction then); otherwise `f(conn, g)` reads, and what it returns
    /// may be cached at `g`. The generation moves with every write through
    /// this `Db` and every commit by another connection or process (see
    /// `pool`), so an answer cached at the current generation is current.
    pub(crate) fn cached_snapshot<T>(
        &self,
        hit: impl FnOnce(u64) -> Option<T>,
        f: impl FnOnce(&Connection, u64) -> Result<T>,
    ) -> Result<T> {
        self.settle();
        let mut conn = self.conn()?;
        let generation = conn.generation()?;
        if let Some(v) = hit(generation) {
            return Ok(v);
        }
        in_read_transaction(&conn, |c| f(c, generation))
    }

    /// Runs `f` inside a `BEGIN IMMEDIATE` transaction and commits; any error
    /// rolls everything back. If the database stays busy (another writer),
    /// the whole transaction is retried until the busy timeout has passed.
    pub(crate) fn write<T>(&self, f: impl FnMut(&Connection) -> Result<T>) -> Result<T> {
        self.settle();
        let mut conn = self.conn()?;
        write_on(&mut conn, self.inner.busy_timeout, f)
    }

    /// Runs a checkpoint write `job` to thread `owner` (`None`: several):
    /// queued behind the caller with [`DbBuilder::write_behind`] (a failure
    /// is then reported to that thread, see [`flush_thread`](Self::flush_thread)),
    /// through the group committer with [`Durability::Full`], in the caller
    /// otherwise.
    pub(crate) fn submit(&self, job: Job, owner: Option<&str>) -> Result<()> {
        // Refuses a file whose checkpoint tables are not ours (the queue
        // would otherwise bypass the check `conn` makes).
        self.refuse_foreign()?;
        match &self.inner.committer {
            Some(c) => self.queue(c, job, CacheTag::None, owner, None),
            None => {
                let mut conn = self.conn()?;
                write_on(&mut conn, self.inner.busy_timeout, |tx| job(tx))
            }
        }
    }

    /// [`submit`](Self::submit), and the generation under which what the
    /// job wrote may be cached ([`Pooled::wrote`]): known on return when
    /// the job ran in the caller; for a queued job, once it is committed,
    /// if it was the last job of its transaction. Empty if the file moved
    /// meanwhile. `undo` runs if a job queued behind the caller fails (see
    /// [`writes_behind`](Self::writes_behind)).
    pub(crate) fn submit_tagged(
        &self,
        job: Job,
        owner: Option<&str>,
        undo: Option<Undo>,
    ) -> Result<CacheTag> {
        self.refuse_foreign()?;
        if let Some(c) = &self.inner.committer {
            let tag = CacheTag::pending();
            self.queue(c, job, tag.clone(), owner, undo)?;
            return Ok(tag);
        }
        let mut conn = self.conn()?;
        let mut start = conn.write_start();
        write_on(&mut conn, self.inner.busy_timeout, |tx| {
            start.observe(tx)?;
            job(tx)
        })?;
        Ok(CacheTag::known(conn.wrote(start)))
    }

    /// Hands `job` to the committer: queued behind the caller with
    /// write-behind, waited for (group commit) otherwise.
    fn queue(
        &self,
        c: &Committer,
        job: Job,
        tag: CacheTag,
        owner: Option<&str>,
        undo: Option<Undo>,
    ) -> Result<()> {
        match self.writes_behind() {
            true => c.run_behind(job, tag, owner, undo),
            false => c.run_and_wait(job, tag),
        }
    }

    /// The steps queued last per thread (write-behind).
    pub(crate) fn queued_heads(&self) -> &Arc<crate::checkpoint::QueuedHeads> {
        &self.inner.queued_heads
    }

    /// Whether a submitted write is queued behind the caller (it may fail
    /// after the call returned) rather than done when the call returns.
    pub(crate) fn writes_behind(&self) -> bool {
        self.inner.behind && self.inner.committer.is_some()
    }

    /// Waits for queued writes, if any: what runs next sees them.
    pub(crate) fn settle(&self) {
        if let Some(c) = &self.inner.committer {
            c.wait();
        }
    }

    /// Commits every write queued behind the caller (see
    /// [`DbBuilder::write_behind`]) and returns when they are durable (as
    /// durable as the [`Durability`] says). A no-op without write-behind.
    ///
    /// # Errors
    /// The first error of a queued write not reported yet, to any thread
    /// (for example [`Error::Conflict`] from a step whose parent was no
    /// longer the head, or [`Error::DiskFull`]); the writes that succeeded
    /// are committed all the same.
    pub fn flush(&self) -> Result<()> {
        self.flush_for(Reporter::Any)
    }

    /// [`flush`](Self::flush), reporting only a failure of a queued write
    /// to thread `thread_id` (LangGraph's `thread_id`, any namespace):
    /// another thread's failure stays for that thread's next write or
    /// flush. This is how one conversation learns of its own lost write
    /// while others share the `Db`; a graph's `invoke` ends with it.
    ///
    /// # Errors
    /// The first error of a queued write to `thread_id` not reported yet,
    /// as for [`flush`](Self::flush).
    pub fn flush_thread(&self, thread_id: &str) -> Result<()> {
        self.flush_for(Reporter::Owner(Some(thread_id)))
    }

    /// Commits what is queued; the failure `by` reports, if any.
    fn flush_for(&self, by: Reporter<'_>) -> Result<()> {
        match &self.inner.committer {
            Some(c) => c.flush(by),
            None => Ok(()),
        }
    }
}

/// The generation under which what a write left in the file may be cached
/// (see `Pooled::wrote`): known once the write is committed, which for a
/// queued write is after [`Db::submit_tagged`] returned. Empty when nothing
/// may be cached (another change came in between, or the write failed).
#[derive(Clone, Debug, Default)]
pub(crate) enum CacheTag {
    /// Nothing may be cached.
    #[default]
    None,
    /// Known when the write returned (it ran in the caller).
    Known(u64),
    /// Set by the committer when it commits the queued write.
    Pending(Arc<OnceLock<u64>>),
}

impl CacheTag {
    /// A tag known now (`None`: nothing may be cached).
    pub(crate) fn known(generation: Option<u64>) -> CacheTag {
        generation.map_or(CacheTag::None, CacheTag::Known)
    }

    /// A tag the committer sets when it commits the write.
    pub(crate) fn pending() -> CacheTag {
        CacheTag::Pending(Arc::new(OnceLock::new()))
    }

    /// Sets a pending tag (once; later calls change nothing).
    pub(crate) fn set(&self, generation: u64) {
        if let CacheTag::Pending(cell) = self {
            let _ = cell.set(generation);
        }
    }

    /// The generation, if known by now.
    pub(crate) fn get(&self) -> Option<u64> {
        match self {
            CacheTag::None => None,
            CacheTag::Known(g) => Some(*g),
            CacheTag::Pending(cell) => cell.get().copied(),
        }
    }
}

/// SQLite's page cache per connection, in KiB. Small on purpose: what is
/// read again and again (decoded values, recent rows) is cached above
/// SQLite, and SQLite scans a connection's whole page cache at the end of
/// any write transaction in which a B-tree split renumbered pages (it moves
/// them through the pending-byte page's number, which makes its truncation
/// of pages past the file's end walk every cached page). Writes spread over
/// many threads split often: 100 threads round robin ran 5 % faster at
/// 4 MiB than at 16 MiB, a 10,000-step history read 10-25 % faster, and the
/// Store's peak RSS fell from 84 to 71 MiB, with its reads no slower.
/// (While the file is under 1 GiB: past it, the pending-byte page lies
/// inside the file and the walk does not happen.)
const PAGE_CACHE_KIB: u32 = 4000;

/// Pages `Db::vacuum` frees per transaction on a file in incremental
/// auto-vacuum mode (about 4 MiB: what a transaction keeps in memory).
const VACUUM_PAGES: u32 = 1000;

/// Runs `f` inside a read (deferred) transaction on `conn`.
fn in_read_transaction<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    in_transaction(conn, "BEGIN", f)
}

/// Runs `f` between `begin` and `COMMIT`, both through cached statements
/// (`execute_batch`, as rusqlite's `Transaction` uses, parses them every
/// time: this sits on every read and write path). An error of `f` or of the
/// commit rolls back.
fn in_transaction<T>(conn: &Connection, begin: &str, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    conn.prepare_cached(begin)?.execute([])?;
    let out = f(conn).and_then(|out| Ok(conn.prepare_cached("COMMIT")?.execute([]).map(|_| out)?));
    // (A failed COMMIT may have ended the transaction.)
    if out.is_err() && !conn.is_autocommit() {
        let _ = conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]));
    }
    out
}

/// Runs `f` inside a `BEGIN IMMEDIATE` transaction on `conn` and commits; any
/// error rolls everything back. While the database is busy (another writer),
/// the whole transaction is retried until `busy` has passed.
pub(crate) fn write_on<T>(
    conn: &mut Pooled<'_>,
    busy: Duration,
    mut f: impl FnMut(&Connection) -> Result<T>,
) -> Result<T> {
    // Writers of this process take turns before SQLite's lock (see
    // `Pool::write_turn`).
    let _turn = conn.pool().write_turn(busy);
    retry_busy(busy, || {
        let attempt = in_transaction(conn, "BEGIN IMMEDIATE", &mut f);
        if attempt.is_ok() {
            conn.pool().committed();
        }
        attempt
    })
}

/// Runs `attempt` again while it fails with [`Error::Busy`], pausing 1 ms,
/// then twice as long each time (at most 50 ms), until `busy` has passed.
pub(crate) fn retry_busy<T>(busy: Duration, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
    let deadline = Instant::now() + busy;
    let mut pause = Duration::from_millis(1);
    loop {
        match attempt() {
            Err(Error::Busy) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

fn init_connection(
    conn: &mut Connection,
    durability: Durability,
    busy: Duration,
    read_only: bool,
) -> Result<()> {
    conn.busy_timeout(busy)?;
    let sync = match durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    // A transaction larger than the page cache spills its pages to the
    // log before its commit, so its memory stays bounded (`crate::vfs`).
    conn.execute_batch(&format!(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = {sync}; PRAGMA temp_store = MEMORY; \
         PRAGMA cache_size = -{PAGE_CACHE_KIB};"
    ))?;
    if read_only {
        conn.execute_batch("PRAGMA query_only = ON")?;
    } else {
        // WAL checkpoints run on their own thread (`crate::wal`); a commit
        // does one itself only past this many pages.
        conn.execute_batch(&format!("PRAGMA wal_autocheckpoint = {};", crate::wal::FALLBACK_PAGES))?;
    }
    conn.set_prepared_statement_cache_capacity(64);
    crate::vector::register(conn)?;
    crate::filter::register_functions(conn)?;
    crate::checkpoint::compact::register(conn)?;
    crate::checkpoint::packed::register(conn)?;
    crate::checkpoint::row::register(conn)?;
    Ok(())
}

/// Switches the file to WAL; whether it is (a VFS without shared memory
/// keeps another mode). `journal_mode` cannot be changed inside a
/// transaction and may briefly be busy while another process does the same.
fn set_wal(conn: &Connection, busy: Duration) -> Result<bool> {
    let deadline = Instant::now() + busy;
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(mode) => return Ok(mode.eq_ignore_ascii_case("wal")),
            Err(e) => match Error::from(e) {
                Error::Busy if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                other => return Err(other),
            },
        }
    }
}

#[cfg(test)]
mod tests;
