//! With write-behind, the step a `Db` queued last per (thread, namespace).
//!
//! A step queued behind the caller is checked against the head of its
//! thread only when it runs, and a failure found then is reported to the
//! thread's next write or flush, whoever makes it. With one writer per
//! thread that is its writer; with two writers of one thread through one
//! `Db` it could be the other one, which would then take the other's
//! failure for its own while its own write was stored. So two writers of
//! one `Db` are told apart when they submit: a step that continues a
//! checkpoint other than the one the `Db`'s last queued step of its thread
//! made is refused at once with `Conflict` (nothing queued), as without
//! write-behind. While that last step is still queued, the refusal needs
//! no read; once it ran, the head is read from the file first (another
//! process may have continued the thread since). A queued `put` or fork
//! leaves the head unknown here: the next step is checked when it runs.
//! Only the last [`ENTRIES`] threads' steps that ran are remembered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::job::{head_id, not_head};
use super::Checkpointer;
use crate::error::Result;

/// Entries kept before those of steps that ran are dropped.
const ENTRIES: usize = 4096;

/// (thread, namespace) -> the step queued last.
#[derive(Default)]
pub(crate) struct QueuedHeads(Mutex<HashMap<(String, String), Entry>>);

struct Entry {
    id: String,
    /// Set once the step's write ran (it may still roll back: then its
    /// claim is released).
    ran: Arc<AtomicBool>,
}

/// A write queued that makes a checkpoint other than by continuing the
/// head (`put`, a fork): what the thread's head will be is not known here,
/// so a step that follows is not checked at submission (its write checks
/// when it runs).
pub(super) fn forget(heads: &QueuedHeads, thread: &str, ns: &str) {
    heads.lock().remove(&(thread.to_string(), ns.to_string()));
}

/// A queued step's claim on the head of its thread: mark it run when its
/// write ran, release it if the write fails or is not queued.
pub(super) struct Claim {
    heads: Arc<QueuedHeads>,
    key: (String, String),
    id: String,
    pub(super) ran: Arc<AtomicBool>,
}

impl Claim {
    pub(super) fn release(&self) {
        let mut map = self.heads.lock();
        if map.get(&self.key).is_some_and(|e| e.id == self.id) {
            map.remove(&self.key);
        }
    }
}

impl QueuedHeads {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Entry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Claims the head of (`thread`, `ns`) for step `id`, which continues
/// `parent` (`None`: the thread's first checkpoint).
///
/// # Errors
/// [`Error::Conflict`](crate::Error::Conflict) if the step this `Db` queued last for the thread
/// made another checkpoint than `parent` and the thread's head is not
/// `parent` either; database errors of reading the head.
pub(super) fn claim(
    saver: &Checkpointer,
    heads: &Arc<QueuedHeads>,
    thread: &str,
    ns: &str,
    parent: Option<&str>,
    id: &str,
) -> Result<Claim> {
    let key = (thread.to_string(), ns.to_string());
    // The head read from the file for the step that had run, if one was.
    let mut checked: Option<String> = None;
    loop {
        let mut map = heads.lock();
        match map.get(&key) {
            Some(e) if Some(e.id.as_str()) != parent && checked.as_deref() != Some(e.id.as_str()) => {
                if !e.ran.load(Ordering::SeqCst) {
                    return Err(not_head(thread, ns, parent, Some(&e.id)));
                }
                // It ran: the file knows the head (read without the lock:
                // the read waits for the queue, whose failures release
                // claims).
                let ran_id = e.id.clone();
                drop(map);
                let head = saver.db().read(|c| head_id(c, thread, ns))?;
                if head.as_deref() != parent {
                    return Err(not_head(thread, ns, parent, head.as_deref()));
                }
                checked = Some(ran_id);
                continue;
            }
            _ => {}
        }
        if map.len() >= ENTRIES {
            map.retain(|_, e| !e.ran.load(Ordering::SeqCst));
        }
        let ran = Arc::new(AtomicBool::new(false));
        map.insert(key.clone(), Entry { id: id.to_string(), ran: ran.clone() });
        return Ok(Claim { heads: heads.clone(), key, id: id.to_string(), ran });
    }
}
