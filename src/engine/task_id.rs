//! LangGraph's task ids: XXH3-128 over the checkpoint id and the task's
//! identity, formatted as a UUID.

use xxhash_rust::xxh3::xxh3_128;

use crate::error::{Error, Result};

/// The 16 bytes of a checkpoint id (a UUID string, dashes optional).
///
/// # Errors
/// [`Error::InvalidArgument`] if `id` is not 32 hex digits (dashes aside).
pub fn checkpoint_id_bytes(id: &str) -> Result<[u8; 16]> {
    // Read in place (every task of every superstep derives its id here).
    let mut out = [0u8; 16];
    let mut digits = id.bytes().filter(|b| *b != b'-').map(|b| char::from(b).to_digit(16));
    for byte in &mut out {
        match (digits.next(), digits.next()) {
            (Some(Some(hi)), Some(Some(lo))) => *byte = (hi << 4 | lo) as u8,
            _ => return Err(not_a_uuid(id)),
        }
    }
    match digits.next() {
        None => Ok(out),
        Some(_) => Err(not_a_uuid(id)),
    }
}

fn not_a_uuid(id: &str) -> Error {
    Error::InvalidArgument(format!("checkpoint id {id:?} is not a uuid"))
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `h` as 32 lowercase hex digits, most significant first (`{h:032x}`),
/// with a dash before the bytes at `dashes`.
fn hex128(h: u128, dashes: &[usize]) -> String {
    let mut out = String::with_capacity(32 + dashes.len());
    for (i, b) in h.to_be_bytes().iter().enumerate() {
        if dashes.contains(&i) {
            out.push('-');
        }
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

/// `h` as a UUID string, `8-4-4-4-12` (no version bits are set).
fn uuid_format(h: u128) -> String {
    hex128(h, &[4, 6, 8, 10])
}

/// The id of a task prepared from checkpoint `checkpoint_id`:
/// `xxh3_128(id bytes ++ utf8(parts concatenated))` as a UUID string.
/// `parts` are, in order, the task namespace, the step, the node name, the
/// kind (`__pregel_pull` / `__pregel_push`) and the rest (sorted triggers,
/// or the Send index).
///
/// # Errors
/// [`Error::InvalidArgument`] if `checkpoint_id` is not a UUID.
pub fn task_id(checkpoint_id: &str, parts: &[&str]) -> Result<String> {
    let mut buf = checkpoint_id_bytes(checkpoint_id)?.to_vec();
    for p in parts {
        buf.extend_from_slice(p.as_bytes());
    }
    Ok(uuid_format(xxh3_128(&buf)))
}

/// The id LangGraph gives the writes of `update_state` on checkpoint
/// `checkpoint_id` when no task of its next superstep runs the node the
/// update is made as: `uuid5(checkpoint id, "__interrupt__")`.
///
/// # Errors
/// [`Error::InvalidArgument`] if `checkpoint_id` is not a UUID.
pub(crate) fn update_task_id(checkpoint_id: &str) -> Result<String> {
    let namespace = uuid::Uuid::from_bytes(checkpoint_id_bytes(checkpoint_id)?);
    Ok(uuid::Uuid::new_v5(&namespace, super::INTERRUPT.as_bytes()).to_string())
}

/// The id of an interrupt raised by the task whose namespace is `task_ns`
/// (`ns + ":" + task_id`): 32 lowercase hex digits, no dashes. An
/// interrupt raised after the task got `n` answers hashes `task_ns|n`
/// instead.
pub fn interrupt_id(task_ns: &str) -> String {
    hex128(xxh3_128(task_ns.as_bytes()), &[])
}

/// The id of the interrupt a task raises once it has `answered` answers:
/// [`interrupt_id`] of its namespace, then of `task_ns|n`.
pub(crate) fn interrupt_id_after(task_ns: &str, answered: usize) -> String {
    match answered {
        0 => interrupt_id(task_ns),
        n => interrupt_id(&format!("{task_ns}|{n}")),
    }
}

/// The id of a PULL task (a node triggered by its channels).
pub(crate) fn pull_task_id(
    checkpoint_id: &str,
    ns: &str,
    step: i64,
    name: &str,
    triggers: &[String],
) -> Result<String> {
    let task_ns = task_ns(ns, name);
    let step = step.to_string();
    let mut sorted: Vec<&str> = triggers.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    let mut parts = vec![task_ns.as_str(), step.as_str(), name, super::PULL];
    parts.extend(sorted);
    task_id(checkpoint_id, &parts)
}

/// The id of a PUSH task (the `idx`-th Send of `__pregel_tasks`).
pub(crate) fn push_task_id(
    checkpoint_id: &str,
    ns: &str,
    step: i64,
    name: &str,
    idx: usize,
) -> Result<String> {
    let task_ns = task_ns(ns, name);
    task_id(checkpoint_id, &[&task_ns, &step.to_string(), name, super::PUSH, &idx.to_string()])
}

fn task_ns(ns: &str, name: &str) -> String {
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}|{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Every task id a fixture derived, re-derived from its raw parts.
    #[test]
    fn fixture_task_ids_rederive() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/engine");
        let mut checked = 0;
        for name in ["linear", "send_fanout_join", "node_error_resume", "interrupt_resume", "subgraph"] {
            let text = std::fs::read_to_string(format!("{dir}/{name}.json")).unwrap();
            let fixture: Value = serde_json::from_str(&text).unwrap();
            for cp in fixture["raw"]["checkpoints"].as_array().unwrap() {
                for t in cp["derivations"]["tasks"].as_array().unwrap() {
                    let parts: Vec<&str> =
                        t["parts"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
                    let id = task_id(t["checkpoint_id"].as_str().unwrap(), &parts).unwrap();
                    assert_eq!(id, t["task_id"].as_str().unwrap(), "{name}: {parts:?}");
                    checked += 1;
                }
                for i in cp["derivations"]["interrupts"].as_array().unwrap() {
                    assert_eq!(
                        interrupt_id(i["input"].as_str().unwrap()),
                        i["interrupt_id"].as_str().unwrap()
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 20, "only {checked} task ids checked");
    }

    #[test]
    fn pull_and_push_helpers_match_the_formula() {
        let cp = "1f1e80e6-6c15-607f-8002-fb3ca7582eed";
        let a = pull_task_id(cp, "", 3, "prune", &["branch:to:prune".to_string()]).unwrap();
        assert_eq!(a, "b9f322d7-b880-008f-b383-525b5d606fba");
        let b = push_task_id(cp, "", 3, "w", 2).unwrap();
        assert_eq!(b, task_id(cp, &["w", "3", "w", "__pregel_push", "2"]).unwrap());
    }

    #[test]
    fn ids_are_formatted_as_hex() {
        for h in [0u128, 1, 0xabc, u128::MAX, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210] {
            let hex = format!("{h:032x}");
            assert_eq!(hex128(h, &[]), hex);
            let dashed =
                format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
            assert_eq!(uuid_format(h), dashed);
            assert_eq!(checkpoint_id_bytes(&dashed).unwrap(), h.to_be_bytes());
            assert_eq!(checkpoint_id_bytes(&hex.to_uppercase()).unwrap(), h.to_be_bytes());
        }
    }

    #[test]
    fn bad_checkpoint_id_is_an_error() {
        for bad in [
            "",
            "1f1e80e6",
            "1f1e80e6-6c15-607f-8002-fb3ca7582eed0",
            "1f1e80e6-6c15-607f-8002-fb3ca7582ee+",
            "1f1e80e6-6c15-607f-8002-fb3ca7582eé",
        ] {
            assert!(matches!(checkpoint_id_bytes(bad), Err(Error::InvalidArgument(_))), "{bad}");
        }
        assert!(matches!(task_id("nope", &["a"]), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            task_id("zz1e80e6-6c15-607f-8002-fb3ca7582eed", &["a"]),
            Err(Error::InvalidArgument(_))
        ));
    }
}
