//! `agentstate import SRC DST`: a LangGraph `SqliteSaver` file into an
//! agentstate file (`agentstate::import::import_sqlite_saver`). It names two
//! files, so it has its own command line instead of `agentstate FILE COMMAND`.

use std::ffi::OsString;
use std::path::PathBuf;

use agentstate::import::import_sqlite_saver;
use clap::Parser;
use serde_json::json;

use crate::output::{self, bytes, plural};
use crate::{CliResult, Failure};

const AFTER_HELP: &str = "\
SRC is opened read-only and never changed. A new DST appears whole or not at all; an existing DST must be
an agentstate file, and the import is added to it in one transaction unless it already holds one of the
imported threads or Store items (exit 4, nothing written).

Exit codes: 0 success; 2 SRC is not a SqliteSaver file, SRC and DST are the same file, or a checkpoint
cannot be stored as it is; 3 SRC does not exist; 4 DST already holds an imported thread or Store item, the
source has two values for one channel version, or SRC has Store vectors and DST records the embedder of
its own (Python records none for the imported ones: they would be mixed); 5 DST is not an agentstate file,
or a source row is corrupt; 1 anything else (I/O, disk full).";

/// Convert a LangGraph SqliteSaver file (langgraph-checkpoint-sqlite) into an
/// agentstate file: every checkpoint, parent, metadata entry and pending
/// write, and the file's SqliteStore tables if it has them.
#[derive(Parser, Debug)]
#[command(name = "agentstate import", version, after_help = AFTER_HELP)]
pub struct ImportCli {
    /// The SqliteSaver file to read.
    pub src: PathBuf,
    /// The agentstate file to write (created, or added to).
    pub dst: PathBuf,
    /// Print JSON (one document on stdout) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `agentstate import ...` (`args` without the program name).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<ImportCli, clap::Error> {
    ImportCli::try_parse_from(std::iter::once(OsString::from("agentstate import")).chain(args))
}

/// Runs the import and reports it.
pub fn run(cli: &ImportCli) -> CliResult {
    let pb = output::spinner(&format!("importing {}", cli.src.display()));
    let res = import_sqlite_saver(&cli.src, &cli.dst);
    pb.finish_and_clear();
    let r = res.map_err(Failure::from)?;
    let (src, dst) = (cli.src.display().to_string(), cli.dst.display().to_string());
    if cli.json {
        return output::json(&json!({
            "source": src,
            "destination": dst,
            "merged": r.merged,
            "threads": r.threads,
            "namespaces": r.namespaces,
            "checkpoints": r.checkpoints,
            "pending_writes": r.writes,
            "store_items": r.store_items,
            "store_vectors": r.store_vectors,
            "orphan_vectors_skipped": r.orphan_vectors_skipped,
            "source_bytes": r.source_bytes,
            "destination_bytes": r.destination_bytes,
        }));
    }
    output::line(&format!(
        "imported {src} into {dst}{}: {} ({} with checkpoints), {}, {}",
        if r.merged { " (added to the existing file)" } else { "" },
        plural(r.threads as usize, "thread"),
        plural(r.namespaces as usize, "namespace"),
        plural(r.checkpoints as usize, "checkpoint"),
        plural(r.writes as usize, "pending write"),
    ))?;
    if r.store_items > 0 || r.orphan_vectors_skipped > 0 {
        output::line(&format!(
            "store: {}, {}{}",
            plural(r.store_items as usize, "item"),
            plural(r.store_vectors as usize, "vector"),
            if r.orphan_vectors_skipped > 0 {
                format!(
                    " ({} of deleted items left out)",
                    plural(r.orphan_vectors_skipped as usize, "vector")
                )
            } else {
                String::new()
            }
        ))?;
    }
    output::line(&format!(
        "size: {} -> {}{}",
        bytes(r.source_bytes),
        bytes(r.destination_bytes),
        if r.merged { " (the whole destination file)" } else { "" }
    ))?;
    if r.store_vectors > 0 {
        output::line(&format!(
            "note: Python records no embedder for its vectors: open the Store with the embedder that made them \
             and adopt them (IndexConfig::with_adopt_existing_vectors), or re-embed them with \
             `agentstate {dst} store reindex --dims N`"
        ))?;
    }
    Ok(())
}
