//! Pending writes stored with the indexes another saver gave them (the
//! importer keeps LangGraph's `idx` exactly; `put_writes` numbers by
//! position).

use std::sync::Arc;

use rusqlite::params;

use super::Checkpointer;
use crate::error::Result;

/// One pending write as it is to be stored, `idx` included.
#[derive(Clone, Debug)]
pub(crate) struct ExactWrite {
    pub(crate) thread_id: String,
    pub(crate) checkpoint_ns: String,
    pub(crate) checkpoint_id: String,
    pub(crate) task_id: String,
    pub(crate) task_path: String,
    pub(crate) idx: i64,
    pub(crate) channel: String,
    /// The serializer's type tag (`None`: a NULL the source stored).
    pub(crate) tag: Option<String>,
    pub(crate) bytes: Vec<u8>,
}

impl Checkpointer {
    /// Stores `writes` in one transaction, each with its own `idx`. A row
    /// whose key (thread, namespace, checkpoint, task, idx) is already
    /// stored is left as it is.
    pub(crate) fn put_writes_exact(&self, writes: Vec<ExactWrite>) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let writes = Arc::new(writes);
        self.db.submit(Box::new(move |tx| {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO checkpoint_writes \
                 (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING",
            )?;
            for w in writes.iter() {
                stmt.execute(params![
                    w.thread_id,
                    w.checkpoint_ns,
                    w.checkpoint_id,
                    w.task_id,
                    w.idx,
                    w.channel,
                    w.tag,
                    w.bytes,
                    w.task_path
                ])?;
            }
            Ok(())
        }))
    }
}
