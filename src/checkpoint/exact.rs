//! Pending writes stored with the indexes another saver gave them (the
//! importer keeps LangGraph's `idx` exactly; `put_writes` numbers by
//! position).

use super::job::WritesJob;
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
        // One job per run of writes of one task to one checkpoint.
        let mut jobs: Vec<WritesJob> = Vec::new();
        for w in writes {
            let same = jobs.last().is_some_and(|j| {
                (&j.thread, &j.ns, &j.checkpoint_id, &j.task_id, &j.task_path)
                    == (&w.thread_id, &w.checkpoint_ns, &w.checkpoint_id, &w.task_id, &w.task_path)
            });
            if !same {
                jobs.push(WritesJob {
                    thread: w.thread_id,
                    ns: w.checkpoint_ns,
                    checkpoint_id: w.checkpoint_id,
                    task_id: w.task_id,
                    task_path: w.task_path,
                    upsert: false,
                    rows: Vec::new(),
                    target: None,
                });
            }
            if let Some(job) = jobs.last_mut() {
                job.rows.push((w.channel, w.idx, w.tag, w.bytes));
            }
        }
        // A failure is reported to the one thread written, if there is one.
        let owner = jobs.iter().all(|j| j.thread == jobs[0].thread).then(|| jobs[0].thread.clone());
        self.db.submit(Box::new(move |tx| jobs.iter().try_for_each(|j| j.apply(tx))), owner.as_deref())
    }
}
