//! `agentstate`: inspect and maintain an agentstate SQLite file from the
//! command line (checkpoint threads and their history, the long-term Store,
//! file statistics and an integrity check).
//!
//! Shape: `agentstate <FILE> <COMMAND> [ARGS] [--json]`, and `agentstate
//! import SRC DST [--json]` (see [`import`]). Human-readable text by
//! default; `--json` prints one JSON document on stdout. Errors are one line
//! on stderr and a non-zero exit code (see [`exit`]); a command line without
//! a command (`agentstate`, `agentstate FILE store`) prints the usage instead.

mod file;
mod import;
mod output;
mod store;
mod threads;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use agentstate::{Db, Error};
use clap::{Parser, Subcommand, ValueEnum};

/// Exit codes, also listed in `--help`.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any other failure (SQLite, I/O, disk full, embedder, serialization).
    pub const FAILURE: u8 = 1;
    /// Bad command line or input: unknown option, malformed JSON, filter or
    /// namespace, a value of the wrong shape, a query without an embedder.
    pub const USAGE: u8 = 2;
    /// The thread, checkpoint or Store item named does not exist.
    pub const NOT_FOUND: u8 = 3;
    /// The operation would overwrite data (copying onto an existing thread).
    pub const CONFLICT: u8 = 4;
    /// The file cannot be used: missing, not an agentstate database, written
    /// by a newer agentstate, or corrupt.
    pub const BAD_FILE: u8 = 5;
    /// The database stayed locked by another process past the busy timeout.
    pub const BUSY: u8 = 6;
    /// `check` found problems.
    pub const CHECK_FAILED: u8 = 7;
}

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  any other failure (SQLite, I/O, disk full, embedder, serialization)
  2  bad command line or input (malformed JSON, filter or namespace; --query without the file's embedder)
  3  not found (unknown thread, checkpoint or Store item)
  4  conflict (copying onto a thread that already has checkpoints)
  5  unusable file (missing, not an agentstate database, newer schema than this binary, corrupt)
  6  database busy (locked by another process past the busy timeout; retry)
  7  `check` found problems

Errors are printed as one line on stderr, also with --json (`agentstate` alone and `agentstate FILE store`
print this usage on stderr instead, exit 2).

Importing a LangGraph SqliteSaver file: `agentstate import SRC DST` (see `agentstate import --help`).";

/// Inspect and maintain an agentstate SQLite file: checkpoint threads (history,
/// forks, diffs), the long-term Store, file statistics and integrity.
#[derive(Parser, Debug)]
#[command(name = "agentstate", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// The agentstate database file (it must exist). Commands that only read
    /// leave it exactly as it is; commands that write first apply any pending
    /// schema migrations.
    pub file: PathBuf,

    /// Print JSON (one document on stdout) instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// List threads with their checkpoint counts, namespaces, pending writes
    /// and last update (newest first).
    Threads {
        /// Show at most this many threads.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// A thread's history as a fork tree: which checkpoint branched from which
    /// (oldest first; a linear chain stays in one column).
    History {
        /// The thread id.
        thread: String,
        /// Only this checkpoint namespace ("" is the root graph); default all.
        #[arg(long)]
        ns: Option<String>,
    },
    /// One checkpoint: metadata, parent, channel values decoded to JSON and
    /// pending writes.
    Show {
        /// The thread id.
        thread: String,
        /// The checkpoint id, or a unique part of it; default the
        /// latest.
        checkpoint: Option<String>,
        /// The checkpoint namespace ("" is the root graph).
        #[arg(long, default_value = "")]
        ns: String,
    },
    /// Compare two checkpoints of a thread: channels added, removed and
    /// changed (with the changed values).
    Diff {
        /// The thread id.
        thread: String,
        /// The older checkpoint (id, or a unique part of it).
        from: String,
        /// The newer checkpoint (id, or a unique part of it).
        to: String,
        /// The checkpoint namespace ("" is the root graph).
        #[arg(long, default_value = "")]
        ns: String,
    },
    /// Start a new branch from a checkpoint (default the latest): a new
    /// checkpoint whose parent it is, optionally with some channel values
    /// replaced. History is kept.
    Fork {
        /// The thread id.
        thread: String,
        /// The checkpoint to fork from (id, or a unique part of it);
        /// default the latest.
        checkpoint: Option<String>,
        /// The checkpoint namespace ("" is the root graph).
        #[arg(long, default_value = "")]
        ns: String,
        /// Replace a channel's value: CHANNEL=JSON (repeatable).
        #[arg(long = "set", value_name = "CHANNEL=JSON")]
        set: Vec<String>,
        /// Replace channel values from a JSON object {"channel": value, ...}.
        #[arg(long, value_name = "JSON")]
        values: Option<String>,
    },
    /// Copy a thread (every namespace, checkpoint, blob and pending write) to
    /// a new thread id. Refused if the target already has checkpoints.
    Copy {
        /// The thread to copy.
        from: String,
        /// The new thread id.
        to: String,
    },
    /// Shrink threads' history: keep only the latest checkpoint of each
    /// namespace (default), or delete the threads. Unreferenced blobs go.
    Prune {
        /// The threads to prune.
        #[arg(required_unless_present = "all")]
        threads: Vec<String>,
        /// Prune every thread in the file.
        #[arg(long, conflicts_with = "threads")]
        all: bool,
        /// What to keep.
        #[arg(long, value_enum, default_value_t = Strategy::KeepLatest)]
        strategy: Strategy,
    },
    /// Delete a thread: all its checkpoints, blobs and pending writes, in every
    /// namespace.
    Delete {
        /// The thread id.
        thread: String,
    },
    /// Apply a retention policy to every thread now: keep the newest N
    /// checkpoints of each namespace and/or drop those older than an age (the
    /// newest checkpoint always stays). Blobs a kept checkpoint needs stay.
    Retain {
        /// Keep at most this many newest checkpoints per thread and namespace.
        #[arg(long)]
        keep_last: Option<usize>,
        /// Drop checkpoints older than this many minutes.
        #[arg(long)]
        max_age_minutes: Option<f64>,
        /// Threads to leave alone (repeatable).
        #[arg(long = "exempt", value_name = "THREAD")]
        exempt: Vec<String>,
    },
    /// Return free pages to the filesystem (after deletes, prunes, retention).
    Vacuum,
    /// The long-term Store: get, put, delete, search, namespaces, TTL sweep,
    /// reindex.
    #[command(subcommand)]
    Store(StoreCommand),
    /// File statistics: rows and bytes per table, blobs shared between
    /// checkpoints, expired items, vectors and the embedder.
    Stats,
    /// Integrity check: SQLite's `PRAGMA integrity_check`, then ours (writes
    /// whose checkpoint is missing, parents that do not resolve, channel
    /// versions without their blob, items that are not objects, vectors
    /// without their item). Corruption exits 7; leftovers are warnings.
    Check {
        /// First delete the leftovers that are safe to delete: vectors whose
        /// item is gone (Python's SqliteStore leaves them when it deletes).
        #[arg(long)]
        repair: bool,
    },
}

/// `prune` strategies.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Keep the newest checkpoint of each (thread, namespace) and its writes.
    KeepLatest,
    /// Remove the threads entirely.
    Delete,
}

/// Store commands. Namespaces are dot-joined text (`users.alice`) or a JSON
/// array (`'["users","alice"]'`).
#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Print one item (its value as JSON, timestamps and expiry).
    Get {
        /// The namespace (`users.alice` or a JSON array).
        namespace: String,
        /// The key.
        key: String,
    },
    /// Store an item: a JSON object from the argument, or from stdin if the
    /// argument is absent or `-`. Replaces an existing item.
    Put {
        /// The namespace (`users.alice` or a JSON array).
        namespace: String,
        /// The key.
        key: String,
        /// The value: a JSON object (default: read stdin).
        value: Option<String>,
        /// Expire the item this many minutes after the put (default never).
        #[arg(long, value_name = "MINUTES", allow_negative_numbers = true)]
        ttl: Option<f64>,
        /// Fields to embed, comma-separated (LangGraph paths; `$` = the whole
        /// document). Default: the fields the file's vectors were made from
        /// (inferred from their names), else `$`. Only used when the file
        /// records the built-in embedder.
        #[arg(long, value_delimiter = ',', value_name = "FIELDS")]
        index: Option<Vec<String>>,
        /// Make no vector for this item.
        #[arg(long, conflicts_with = "index")]
        no_index: bool,
    },
    /// Delete an item and its vectors.
    Delete {
        /// The namespace (`users.alice` or a JSON array).
        namespace: String,
        /// The key.
        key: String,
    },
    /// Search items under a namespace prefix (default: everything), newest
    /// first, or ranked by similarity with --query.
    Search {
        /// The namespace prefix (`users`, `users.alice` or a JSON array).
        prefix: Option<String>,
        /// Rank by similarity to this text (needs the file's embedder to be
        /// the built-in `agentstate-hash-v1`).
        #[arg(long)]
        query: Option<String>,
        /// A filter on the value, as JSON (`{"kind": "fact", "score": {"$gt": 0.5}}`).
        #[arg(long, value_name = "JSON")]
        filter: Option<String>,
        /// At most this many results.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Skip this many results first.
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// List the namespaces that hold (unexpired) items.
    Ns {
        /// Only namespaces starting with these labels (`*` matches any one).
        #[arg(long)]
        prefix: Option<String>,
        /// Only namespaces ending with these labels (`*` matches any one).
        #[arg(long)]
        suffix: Option<String>,
        /// Truncate namespaces to this many labels (then de-duplicate).
        #[arg(long)]
        max_depth: Option<usize>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Skip this many first.
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Delete every expired item now (with its vectors).
    Sweep,
    /// Re-embed every item with the built-in embedder (`agentstate-hash-v1`)
    /// and record it in the file.
    Reindex {
        /// The vectors' dimension (default: the one the file records for the
        /// built-in embedder; required otherwise).
        #[arg(long)]
        dims: Option<usize>,
        /// Fields to embed, comma-separated (default: inferred from the
        /// file's vector names, else `$`, the whole document).
        #[arg(long, value_delimiter = ',', value_name = "FIELDS")]
        fields: Option<Vec<String>>,
    },
}

/// A failure: the one-line message and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code (see [`exit`]).
    pub code: u8,
    /// The message (one line).
    pub message: String,
}

impl Failure {
    /// Stdout was closed by its reader (`| head`): stop quietly, exit 0.
    pub fn closed_pipe() -> Failure {
        Failure { code: exit::OK, message: String::new() }
    }

    /// A failure with `code`.
    pub fn new(code: u8, message: impl fmt::Display) -> Failure {
        Failure { code, message: message.to_string() }
    }

    /// Bad input (exit 2).
    pub fn usage(message: impl fmt::Display) -> Failure {
        Failure::new(exit::USAGE, message)
    }

    /// Something named does not exist (exit 3).
    pub fn not_found(message: impl fmt::Display) -> Failure {
        Failure::new(exit::NOT_FOUND, message)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match &e {
            Error::InvalidNamespace(_)
            | Error::InvalidFilter { .. }
            | Error::InvalidConfig(_)
            | Error::InvalidArgument(_)
            | Error::DimensionMismatch { .. } => exit::USAGE,
            Error::NotFound(_) => exit::NOT_FOUND,
            Error::Conflict(_) => exit::CONFLICT,
            Error::NotAgentstate(_) | Error::SchemaTooNew { .. } | Error::Corrupt { .. } => exit::BAD_FILE,
            Error::Busy => exit::BUSY,
            _ => exit::FAILURE,
        };
        let message = match &e {
            Error::InvalidNamespace(m) => format!("invalid namespace: {m}"),
            // The filter module's messages mostly say "Invalid filter" already.
            Error::InvalidFilter { reason, .. }
                if reason.to_ascii_lowercase().starts_with("invalid filter") =>
            {
                reason.clone()
            }
            Error::InvalidFilter { reason, .. } => format!("invalid filter: {reason}"),
            Error::Busy => {
                "the database is locked by another process (busy timeout exceeded); retry later".to_string()
            }
            other => other.to_string(),
        };
        Failure { code, message }
    }
}

/// The result of a command.
pub type CliResult<T = ()> = Result<T, Failure>;

/// What every command gets: the file, the opened database, the output mode.
pub struct Ctx {
    /// The file's path as given.
    pub path: PathBuf,
    /// The database: read-only for the commands that only read.
    pub db: Db,
    /// `--json`.
    pub json: bool,
}

impl Command {
    /// Whether the command only reads (the file is opened read-only).
    fn reads_only(&self) -> bool {
        match self {
            Command::Threads { .. }
            | Command::History { .. }
            | Command::Show { .. }
            | Command::Diff { .. }
            | Command::Stats
            | Command::Check { repair: false } => true,
            // A search with --query opens the Store with the file's embedder,
            // and opening a Store with an index still takes the write lock to
            // confirm the recorded embedder (even when it matches).
            Command::Store(StoreCommand::Search { query: Some(_), .. }) => false,
            Command::Store(s) => {
                matches!(s, StoreCommand::Get { .. } | StoreCommand::Search { .. } | StoreCommand::Ns { .. })
            }
            _ => false,
        }
    }

    /// Whether the command works on the checkpoint tables (threads and their
    /// history), which a file holding a Python `SqliteSaver` next to its
    /// Store does not have in agentstate's layout.
    fn uses_checkpoints(&self) -> bool {
        matches!(
            self,
            Command::Threads { .. }
                | Command::History { .. }
                | Command::Show { .. }
                | Command::Diff { .. }
                | Command::Fork { .. }
                | Command::Copy { .. }
                | Command::Prune { .. }
                | Command::Delete { .. }
                | Command::Retain { .. }
        )
    }
}

/// The `agentstate_migrations` the Store's reads need: 1 adds the generation
/// table the search cache reads, 2 the index `list_namespaces` names
/// (`INDEXED BY`). The later ones only change what writers do (triggers).
const STORE_READS_NEED_AGENTSTATE: i64 = 2;

/// Whether a Store read on this file needs migrations first: the Store and
/// vector series (LangGraph's numbering) behind this build, or agentstate's
/// own series before [`STORE_READS_NEED_AGENTSTATE`] (a file Python's
/// `SqliteStore` wrote has none of it). The checkpoint series never matters
/// to the Store: an older agentstate file whose checkpoint tables are behind
/// is read as it is.
fn store_reads_need_migration(db: &Db) -> CliResult<bool> {
    Ok(db.schema_versions()?.iter().any(|v| {
        let have = v.version.unwrap_or(-1);
        match v.series.as_str() {
            "checkpoint_migrations" => false,
            "agentstate_migrations" => have < STORE_READS_NEED_AGENTSTATE.min(v.supported),
            _ => have < v.supported,
        }
    }))
}

/// The refusal of a thread command on a file whose `checkpoints` and
/// `writes` tables are a Python `SqliteSaver`'s (next to a Store).
fn python_saver_refused(shown: &dyn fmt::Display) -> Failure {
    Failure::new(
        exit::BAD_FILE,
        format!(
            "{shown}: its `checkpoints` and `writes` tables belong to a Python SqliteSaver (LangGraph's layout, \
             whole states per row), which agentstate's thread commands do not read; convert them with \
             `agentstate import {shown} NEW.db` (the `store` commands, `stats` and `check` work on this file)"
        ),
    )
}

/// Opens the file: always read-only first, which refuses (without changing
/// anything) a missing file, something that is not SQLite, an SQLite file
/// with none of agentstate's tables, a Python `SqliteSaver` file (and, for a
/// thread command, a Python `SqliteSaver` next to a Store) and a newer
/// schema; then read-write (migrated) for a command that writes.
fn open(cli: &Cli) -> CliResult<Ctx> {
    let shown = cli.file.display();
    match std::fs::metadata(&cli.file) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(Failure::new(exit::BAD_FILE, format!("{shown}: not a file"))),
        Err(e) => return Err(Failure::new(exit::BAD_FILE, format!("{shown}: {e}"))),
    }
    let in_file = |e: Error| {
        let mut f = Failure::from(e);
        f.message = format!("{shown}: {}", f.message);
        f
    };
    let mut db = Db::builder().read_only(true).open(&cli.file).map_err(in_file)?;
    // Refused before a command that writes opens (and migrates) the file.
    if cli.command.uses_checkpoints() && db.has_python_saver()? {
        return Err(python_saver_refused(&shown));
    }
    // The Store's reads rely on the indexes and tables agentstate's
    // migrations add: a Store command on a file that lacks them (one written
    // by Python's SqliteStore) still opens it read-write, which migrates it.
    let store_needs_migration = matches!(cli.command, Command::Store(_))
        && cli.command.reads_only()
        && store_reads_need_migration(&db)?;
    if !cli.command.reads_only() || store_needs_migration {
        drop(db);
        db = Db::open(&cli.file).map_err(in_file)?;
    }
    Ok(Ctx { path: cli.file.clone(), db, json: cli.json })
}

fn run(cli: Cli) -> CliResult {
    let ctx = open(&cli)?;
    match cli.command {
        Command::Threads { limit } => threads::list(&ctx, limit),
        Command::History { thread, ns } => threads::history(&ctx, &thread, ns.as_deref()),
        Command::Show { thread, checkpoint, ns } => threads::show(&ctx, &thread, checkpoint.as_deref(), &ns),
        Command::Diff { thread, from, to, ns } => threads::diff(&ctx, &thread, &from, &to, &ns),
        Command::Fork { thread, checkpoint, ns, set, values } => {
            threads::fork(&ctx, &thread, checkpoint.as_deref(), &ns, &set, values.as_deref())
        }
        Command::Copy { from, to } => threads::copy(&ctx, &from, &to),
        Command::Prune { threads: ids, all, strategy } => threads::prune(&ctx, &ids, all, strategy),
        Command::Delete { thread } => threads::delete(&ctx, &thread),
        Command::Store(cmd) => store::run(&ctx, cmd),
        Command::Retain { keep_last, max_age_minutes, exempt } => {
            threads::retain(&ctx, keep_last, max_age_minutes, exempt)
        }
        Command::Vacuum => file::vacuum(&ctx),
        Command::Stats => file::stats(&ctx),
        Command::Check { repair } => file::check(&ctx, repair),
    }
}

/// One line: newlines and runs of spaces collapsed.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The exit for a command line clap refused (or help and version).
fn bad_command_line(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(exit::USAGE);
    }
    // clap's message without its usage block, on one line.
    let text = e.render().to_string();
    let head = text.split("\nUsage:").next().unwrap_or(&text);
    let head: Vec<&str> =
        head.lines().filter(|l| !l.trim_start().starts_with("For more information")).collect();
    let head = one_line(&head.join("\n"));
    let head = head.trim_start_matches("error:").trim();
    eprintln!("error: {head} (see --help)");
    ExitCode::from(exit::USAGE)
}

fn finish(result: CliResult) -> ExitCode {
    match result {
        Ok(()) => ExitCode::from(exit::OK),
        Err(f) if f.code == exit::OK => ExitCode::from(exit::OK),
        Err(f) => {
            eprintln!("error: {}", one_line(&f.message));
            ExitCode::from(f.code)
        }
    }
}

fn main() -> ExitCode {
    // `import` names two files: it has a command line of its own (a file
    // named `import` is `./import` for the other commands).
    let mut args = std::env::args_os().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "import") {
        let rest: Vec<OsString> = args.skip(1).collect();
        return match import::parse(rest) {
            Ok(cli) => finish(import::run(&cli)),
            Err(e) => bad_command_line(e),
        };
    }
    match Cli::try_parse() {
        Ok(cli) => finish(run(cli)),
        Err(e) => bad_command_line(e),
    }
}
