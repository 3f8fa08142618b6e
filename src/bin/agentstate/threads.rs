//! Checkpoint commands: threads, history (fork tree), show, diff, fork, copy,
//! prune, delete.

use std::collections::HashMap;

use agentstate::inspect::{HistoryEntry, HistoryQuery, IdMatch, ThreadCounts};
use agentstate::{CheckpointConfig, PruneStrategy};
use serde_json::{json, Map, Value};

use crate::output::{self, compact, ns_label, plural, Table};
use crate::{CliResult, Ctx, Failure, Strategy};

/// Values wider than this are cut in text output (`--json` has them whole).
const WIDTH: usize = 160;

fn unknown_thread(thread: &str) -> Failure {
    Failure::not_found(format!("unknown thread '{thread}'"))
}

/// The full checkpoint id `given` names in (thread, ns): the id itself, or a
/// unique part of one; the latest checkpoint if `given` is `None`.
fn resolve(ctx: &Ctx, thread: &str, ns: &str, given: Option<&str>) -> CliResult<String> {
    let saver = ctx.db.checkpointer();
    let Some(given) = given else {
        return match saver.history_entry(&CheckpointConfig::thread(thread).ns(ns))? {
            Some(e) => Ok(e.checkpoint_id),
            None if saver.has_thread(thread)? => Err(Failure::not_found(format!(
                "thread '{thread}' has no checkpoint in namespace '{ns}' (see `history {thread}`)"
            ))),
            None => Err(unknown_thread(thread)),
        };
    };
    match saver.resolve_id(thread, ns, given)? {
        IdMatch::One(id) => Ok(id),
        IdMatch::Ambiguous { matches } => Err(Failure::usage(format!(
            "checkpoint '{given}' is ambiguous in thread '{thread}': it matches {matches} checkpoints; give more characters"
        ))),
        _ if !saver.has_thread(thread)? => Err(unknown_thread(thread)),
        _ => Err(Failure::not_found(format!("no checkpoint '{given}' in thread '{thread}', namespace '{ns}'"))),
    }
}

// ---------------------------------------------------------------------------
// threads

/// `threads`: one row per thread.
pub fn list(ctx: &Ctx, limit: Option<usize>) -> CliResult {
    let mut rows = ctx.db.threads()?;
    if let Some(n) = limit {
        rows.truncate(n);
    }
    if ctx.json {
        let out: Vec<Value> = rows
            .iter()
            .map(|t| {
                json!({
                    "thread_id": t.thread_id,
                    "checkpoints": t.checkpoints,
                    "namespaces": t.namespaces,
                    "pending_writes": t.pending_writes,
                    "last_update": t.last_update,
                    "latest_checkpoint_id": t.latest_checkpoint_id,
                })
            })
            .collect();
        return output::json(&Value::Array(out));
    }
    if rows.is_empty() {
        return output::line("no threads");
    }
    let mut table =
        Table::new(["THREAD", "CHECKPOINTS", "NAMESPACES", "WRITES", "LAST ACTIVITY", "LATEST CHECKPOINT"]);
    for t in &rows {
        table.row([
            t.thread_id.clone(),
            t.checkpoints.to_string(),
            t.namespaces.iter().map(|n| ns_label(n)).collect::<Vec<_>>().join(", "),
            t.pending_writes.to_string(),
            t.last_update.clone(),
            t.latest_checkpoint_id.clone(),
        ]);
    }
    table.print()
}

// ---------------------------------------------------------------------------
// history

struct Node {
    entry: HistoryEntry,
    parent_missing: bool,
    children: Vec<usize>,
}

/// `history`: the thread's checkpoints as a fork tree, per namespace.
pub fn history(ctx: &Ctx, thread: &str, ns: Option<&str>) -> CliResult {
    let saver = ctx.db.checkpointer();
    let mut query = HistoryQuery::thread(thread).oldest_first();
    if let Some(ns) = ns {
        query = query.namespace(ns);
    }
    let mut nodes: Vec<Node> = saver
        .history(&query)?
        .into_iter()
        .map(|entry| Node { entry, parent_missing: false, children: vec![] })
        .collect();
    if nodes.is_empty() {
        return Err(match ns {
            Some(ns) if saver.has_thread(thread)? => {
                Failure::not_found(format!("thread '{thread}' has no checkpoint in namespace '{ns}'"))
            }
            _ => unknown_thread(thread),
        });
    }
    // Link children to parents within each namespace.
    let index: HashMap<(String, String), usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| ((n.entry.checkpoint_ns.clone(), n.entry.checkpoint_id.clone()), i))
        .collect();
    let mut roots: Vec<usize> = vec![];
    for i in 0..nodes.len() {
        let parent = nodes[i].entry.parent_checkpoint_id.clone();
        let has_parent = parent.is_some();
        match parent.and_then(|p| index.get(&(nodes[i].entry.checkpoint_ns.clone(), p)).copied()) {
            Some(p) => nodes[p].children.push(i),
            None => {
                nodes[i].parent_missing = has_parent;
                roots.push(i);
            }
        }
    }
    // Nodes are sorted by (ns, id), so children and roots are in id order.

    if ctx.json {
        let out: Vec<Value> = nodes
            .iter()
            .map(|n| {
                let e = &n.entry;
                json!({
                    "checkpoint_ns": e.checkpoint_ns,
                    "checkpoint_id": e.checkpoint_id,
                    "parent_checkpoint_id": e.parent_checkpoint_id,
                    "parent_missing": n.parent_missing,
                    "children": n.children.iter().map(|&c| nodes[c].entry.checkpoint_id.clone()).collect::<Vec<_>>(),
                    "source": e.metadata.source(),
                    "step": e.metadata.step(),
                    "created_at": e.created_at,
                    "updated_channels": e.updated_channels,
                    "pending_writes": e.pending_writes,
                    "head": n.children.is_empty(),
                })
            })
            .collect();
        return output::json(&json!({"thread_id": thread, "checkpoints": out}));
    }

    let mut namespaces: Vec<&str> = nodes.iter().map(|n| n.entry.checkpoint_ns.as_str()).collect();
    namespaces.dedup();
    for (k, this_ns) in namespaces.iter().enumerate() {
        if k > 0 {
            output::line("")?;
        }
        let members = nodes.iter().filter(|n| n.entry.checkpoint_ns == *this_ns);
        let count = members.clone().count();
        let heads = members.clone().filter(|n| n.children.is_empty()).count();
        let latest = members.map(|n| n.entry.checkpoint_id.as_str()).max().unwrap_or_default();
        output::line(&format!(
            "thread {thread}, namespace {}: {}, {}",
            ns_label(this_ns),
            plural(count, "checkpoint"),
            plural(heads, "head")
        ))?;
        let mut table = Table::default();
        let ns_roots: Vec<usize> =
            roots.iter().copied().filter(|&r| nodes[r].entry.checkpoint_ns == *this_ns).collect();
        for line in tree_lines(&nodes, &ns_roots) {
            let (prefix, i) = line;
            let n = &nodes[i];
            let e = &n.entry;
            let mut notes: Vec<String> = vec![];
            if let Some(u) = &e.updated_channels {
                if !u.is_empty() {
                    notes.push(format!("updated {}", u.join(", ")));
                }
            }
            if e.pending_writes > 0 {
                notes.push(plural(e.pending_writes as usize, "pending write"));
            }
            if n.parent_missing {
                notes.push(format!(
                    "parent {} not in the file",
                    e.parent_checkpoint_id.as_deref().unwrap_or_default()
                ));
            }
            if e.checkpoint_id == latest {
                notes.push("latest".into());
            } else if n.children.is_empty() {
                notes.push("head".into());
            }
            table.row([
                format!("{prefix}{}", e.checkpoint_id),
                e.metadata.step().map_or_else(|| "step ?".to_string(), |s| format!("step {s}")),
                e.metadata.source().unwrap_or("?").to_string(),
                e.created_at.clone(),
                notes.join("; "),
            ]);
        }
        table.print()?;
    }
    Ok(())
}

/// The tree as `(prefix, node)` lines, oldest first. A checkpoint's oldest
/// child continues its line of history in the same column; younger children
/// (forks) are drawn as branches (`├── `) above that continuation. Iterative:
/// the depth is the nesting of forks, not the length of the history.
fn tree_lines(nodes: &[Node], roots: &[usize]) -> Vec<(String, usize)> {
    let mut out = vec![];
    // (node, prefix of its own line, prefix of the lines that follow it)
    let mut stack: Vec<(usize, String, String)> =
        roots.iter().rev().map(|&r| (r, String::new(), String::new())).collect();
    while let Some((start, first, rest)) = stack.pop() {
        out.push((first, start));
        let mut cur = start;
        loop {
            let kids = &nodes[cur].children;
            let Some((&main, sides)) = kids.split_first() else { break };
            if sides.is_empty() {
                out.push((rest.clone(), main));
                cur = main;
                continue;
            }
            stack.push((main, rest.clone(), rest.clone()));
            for &side in sides.iter().rev() {
                stack.push((side, format!("{rest}├── "), format!("{rest}│   ")));
            }
            break;
        }
    }
    out
}

// ---------------------------------------------------------------------------
// show

/// `show`: one checkpoint with its values and pending writes.
pub fn show(ctx: &Ctx, thread: &str, checkpoint: Option<&str>, ns: &str) -> CliResult {
    let id = resolve(ctx, thread, ns, checkpoint)?;
    let saver = ctx.db.checkpointer();
    let config = CheckpointConfig::thread(thread).ns(ns).at(id.clone());
    let t = saver
        .get_tuple(&config)?
        .ok_or_else(|| Failure::not_found(format!("no checkpoint '{id}' in thread '{thread}'")))?;
    let created_at: Option<String> = saver.history_entry(&config)?.map(|e| e.created_at);
    let parent = t.parent_config.as_ref().and_then(|p| p.checkpoint_id.clone());
    if ctx.json {
        let writes: Vec<Value> = t
            .pending_writes
            .iter()
            .map(|w| json!({"task_id": w.task_id, "channel": w.channel, "value": w.value}))
            .collect();
        output::json(&json!({
            "thread_id": thread,
            "checkpoint_ns": ns,
            "checkpoint_id": id,
            "parent_checkpoint_id": parent,
            "created_at": created_at,
            "metadata": Value::Object(t.metadata.as_map().clone()),
            "checkpoint": serde_json::to_value(&*t.checkpoint).map_err(agentstate::Error::from)?,
            "pending_writes": writes,
        }))?;
        return Ok(());
    }
    let mut head = Table::default();
    head.row(["checkpoint", &id]);
    head.row(["thread", thread]);
    head.row(["namespace", &ns_label(ns)]);
    head.row(["parent", parent.as_deref().unwrap_or("-")]);
    head.row(["ts", &t.checkpoint.ts]);
    if let Some(c) = &created_at {
        head.row(["written", c]);
    }
    head.row(["metadata", &Value::Object(t.metadata.as_map().clone()).to_string()]);
    if let Some(u) = &t.checkpoint.updated_channels {
        head.row(["updated", &u.join(", ")]);
    }
    head.print()?;
    output::line("")?;
    output::line(&format!("channels ({}):", t.checkpoint.channel_values.len()))?;
    for (ch, value) in &t.checkpoint.channel_values {
        let version = t.checkpoint.channel_versions.get(ch).map(|v| v.to_string()).unwrap_or_default();
        output::line(&format!("  {ch}  (version {version})"))?;
        output::line(&output::pretty_indented(&value.to_value(), 4))?;
    }
    let empty: Vec<&String> = t
        .checkpoint
        .channel_versions
        .keys()
        .filter(|c| !t.checkpoint.channel_values.contains_key(*c))
        .collect();
    if !empty.is_empty() {
        output::line(&format!(
            "  (no value: {})",
            empty.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ))?;
    }
    output::line("")?;
    output::line(&format!("pending writes ({}):", t.pending_writes.len()))?;
    for w in t.pending_writes.iter() {
        output::line(&format!("  task {}  channel {}", w.task_id, w.channel))?;
        output::line(&output::pretty_indented(&w.value, 4))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// diff

/// `diff`: channel values of `to` against those of `from`.
pub fn diff(ctx: &Ctx, thread: &str, from: &str, to: &str, ns: &str) -> CliResult {
    let a_id = resolve(ctx, thread, ns, Some(from))?;
    let b_id = resolve(ctx, thread, ns, Some(to))?;
    let saver = ctx.db.checkpointer();
    let load = |id: &str| -> CliResult<agentstate::CheckpointTuple> {
        saver
            .get_tuple(&CheckpointConfig::thread(thread).ns(ns).at(id))?
            .ok_or_else(|| Failure::not_found(format!("no checkpoint '{id}' in thread '{thread}'")))
    };
    let (a, b) = (load(&a_id)?, load(&b_id)?);
    let (av, bv) = (&a.checkpoint.channel_values, &b.checkpoint.channel_values);
    let mut added = Map::new();
    let mut removed = Map::new();
    let mut changed = Map::new();
    let mut unchanged = vec![];
    for (ch, v) in bv {
        match av.get(ch) {
            None => {
                added.insert(ch.clone(), v.to_value());
            }
            Some(old) if old == v => unchanged.push(ch.clone()),
            Some(old) => {
                let version = |t: &agentstate::CheckpointTuple| {
                    t.checkpoint.channel_versions.get(ch).map(|v| v.to_string())
                };
                changed.insert(
                    ch.clone(),
                    json!({"from": old, "to": v, "from_version": version(&a), "to_version": version(&b)}),
                );
            }
        }
    }
    for (ch, v) in av {
        if !bv.contains_key(ch) {
            removed.insert(ch.clone(), v.to_value());
        }
    }
    if ctx.json {
        output::json(&json!({
            "thread_id": thread,
            "checkpoint_ns": ns,
            "from": a_id,
            "to": b_id,
            "added": added,
            "removed": removed,
            "changed": changed,
            "unchanged": unchanged,
        }))?;
        return Ok(());
    }
    output::line(&format!("thread {thread}, namespace {}: {a_id} -> {b_id}", ns_label(ns)))?;
    if added.is_empty() && removed.is_empty() && changed.is_empty() {
        output::line("no channel changed")?;
    }
    for (ch, v) in &added {
        output::line(&format!("+ {ch} = {}", compact(v, WIDTH)))?;
    }
    for (ch, v) in &removed {
        output::line(&format!("- {ch} = {}", compact(v, WIDTH)))?;
    }
    for (ch, c) in &changed {
        output::line(&format!("~ {ch}"))?;
        for line in value_diff(&c["from"], &c["to"]) {
            output::line(&format!("    {line}"))?;
        }
    }
    if !unchanged.is_empty() {
        output::line(&format!("= unchanged: {}", unchanged.join(", ")))?;
    }
    Ok(())
}

/// Lines describing how `old` became `new`: for lists, the items after
/// their common beginning (`- [i]` dropped, `+ [i]` added); for objects, the
/// keys added, removed or changed; otherwise the two values whole.
fn value_diff(old: &Value, new: &Value) -> Vec<String> {
    match (old, new) {
        (Value::Array(o), Value::Array(n)) => {
            let same = o.iter().zip(n).take_while(|(a, b)| a == b).count();
            let dropped =
                o[same..].iter().enumerate().map(|(i, v)| format!("- [{}] {}", same + i, compact(v, WIDTH)));
            let added =
                n[same..].iter().enumerate().map(|(i, v)| format!("+ [{}] {}", same + i, compact(v, WIDTH)));
            dropped.chain(added).collect()
        }
        (Value::Object(o), Value::Object(n)) => {
            let mut lines = vec![];
            for (k, v) in n {
                match o.get(k) {
                    None => lines.push(format!("+ .{k} = {}", compact(v, WIDTH))),
                    Some(ov) if ov != v => {
                        lines.push(format!("- .{k} = {}", compact(ov, WIDTH)));
                        lines.push(format!("+ .{k} = {}", compact(v, WIDTH)));
                    }
                    _ => {}
                }
            }
            for (k, v) in o {
                if !n.contains_key(k) {
                    lines.push(format!("- .{k} = {}", compact(v, WIDTH)));
                }
            }
            lines
        }
        _ => vec![format!("- {}", compact(old, WIDTH)), format!("+ {}", compact(new, WIDTH))],
    }
}

// ---------------------------------------------------------------------------
// fork

/// `fork`: a new checkpoint whose parent is the one named.
pub fn fork(
    ctx: &Ctx,
    thread: &str,
    checkpoint: Option<&str>,
    ns: &str,
    set: &[String],
    values: Option<&str>,
) -> CliResult {
    let mut replace = Map::new();
    if let Some(text) = values {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => replace.extend(m),
            Ok(_) => return Err(Failure::usage("--values must be a JSON object {\"channel\": value, ...}")),
            Err(e) => return Err(Failure::usage(format!("invalid JSON in --values: {e}"))),
        }
    }
    for s in set {
        let Some((ch, text)) = s.split_once('=') else {
            return Err(Failure::usage(format!("--set expects CHANNEL=JSON, got '{s}'")));
        };
        if ch.is_empty() {
            return Err(Failure::usage(format!("--set expects CHANNEL=JSON, got '{s}'")));
        }
        let v: Value = serde_json::from_str(text).map_err(|e| {
            let hint = if text.trim_start().starts_with(|c: char| c.is_alphabetic()) {
                format!(" (a JSON string needs quotes: --set '{ch}=\"{text}\"')")
            } else {
                String::new()
            };
            Failure::usage(format!("invalid JSON in --set {ch}: {e}{hint}"))
        })?;
        replace.insert(ch.to_string(), v);
    }
    let base = resolve(ctx, thread, ns, checkpoint)?;
    let saver = ctx.db.checkpointer();
    let config = CheckpointConfig::thread(thread).ns(ns).at(base.clone());
    let source = if replace.is_empty() { "fork" } else { "update" };
    let channels: Vec<String> = replace.keys().cloned().collect();
    let new = if replace.is_empty() { saver.fork(&config)? } else { saver.fork_with(&config, replace)? };
    let new_id = new.checkpoint_id.unwrap_or_default();
    if ctx.json {
        output::json(&json!({
            "thread_id": thread,
            "checkpoint_ns": ns,
            "checkpoint_id": new_id,
            "parent_checkpoint_id": base,
            "source": source,
            "replaced_channels": channels,
        }))?;
        return Ok(());
    }
    output::line(&format!("new checkpoint {new_id}"))?;
    output::line(&format!("  parent  {base}"))?;
    output::line(&format!("  source  {source}"))?;
    if !channels.is_empty() {
        output::line(&format!("  replaced {}", channels.join(", ")))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// copy, prune, delete

/// Rows of `thread` as `[checkpoints, blobs, pending writes]`.
fn counts(ctx: &Ctx, thread: &str) -> CliResult<[usize; 3]> {
    let ThreadCounts { checkpoints, blobs, pending_writes, .. } =
        ctx.db.checkpointer().thread_counts(thread)?;
    Ok([checkpoints as usize, blobs as usize, pending_writes as usize])
}

/// `copy`: the whole thread under a new id.
pub fn copy(ctx: &Ctx, from: &str, to: &str) -> CliResult {
    if from == to {
        return Err(Failure::usage("copy: the source and target threads are the same"));
    }
    if to.is_empty() {
        return Err(Failure::usage("copy: the target thread id is empty"));
    }
    if !ctx.db.checkpointer().has_thread(from)? {
        return Err(unknown_thread(from));
    }
    let pb = output::spinner(&format!("copying thread {from} to {to}"));
    let res = ctx.db.checkpointer().copy_thread(from, to);
    pb.finish_and_clear();
    res?;
    let [c, b, w] = counts(ctx, to)?;
    if ctx.json {
        output::json(&json!({"from": from, "to": to, "checkpoints": c, "blobs": b, "pending_writes": w}))?;
    } else {
        output::line(&format!(
            "copied thread {from} to {to}: {}, {}, {}",
            plural(c, "checkpoint"),
            plural(b, "blob"),
            plural(w, "pending write")
        ))?;
    }
    Ok(())
}

/// `prune`: keep the latest checkpoint per namespace, or delete threads.
pub fn prune(ctx: &Ctx, ids: &[String], all: bool, strategy: Strategy) -> CliResult {
    let mut threads: Vec<String> = if all {
        let mut all: Vec<String> = ctx.db.threads()?.into_iter().map(|t| t.thread_id).collect();
        all.sort();
        all
    } else {
        for t in ids {
            if !ctx.db.checkpointer().has_thread(t)? {
                return Err(unknown_thread(t));
            }
        }
        ids.to_vec()
    };
    let mut seen = std::collections::HashSet::new();
    threads.retain(|t| seen.insert(t.clone()));
    let (lib_strategy, name) = match strategy {
        Strategy::KeepLatest => (PruneStrategy::KeepLatest, "keep_latest"),
        Strategy::Delete => (PruneStrategy::Delete, "delete"),
    };
    let saver = ctx.db.checkpointer();
    let pb = output::bar(threads.len() as u64, "pruning");
    let mut report = vec![];
    for t in &threads {
        let before = counts(ctx, t)?;
        let res = saver.prune(&[t], lib_strategy);
        if let Err(e) = res {
            pb.finish_and_clear();
            return Err(e.into());
        }
        let after = counts(ctx, t)?;
        report.push((t.clone(), before, after));
        pb.inc(1);
    }
    pb.finish_and_clear();
    if ctx.json {
        let out: Vec<Value> = report
            .iter()
            .map(|(t, b, a)| {
                json!({
                    "thread_id": t,
                    "checkpoints_removed": b[0] - a[0].min(b[0]),
                    "blobs_removed": b[1] - a[1].min(b[1]),
                    "pending_writes_removed": b[2] - a[2].min(b[2]),
                    "checkpoints_kept": a[0],
                })
            })
            .collect();
        output::json(&json!({"strategy": name, "threads": out}))?;
        return Ok(());
    }
    if report.is_empty() {
        output::line("no threads to prune")?;
        return Ok(());
    }
    output::line(&format!("prune ({name}):"))?;
    let mut table =
        Table::new(["THREAD", "CHECKPOINTS REMOVED", "BLOBS REMOVED", "WRITES REMOVED", "CHECKPOINTS KEPT"]);
    for (t, b, a) in &report {
        table.row([
            t.clone(),
            (b[0] - a[0].min(b[0])).to_string(),
            (b[1] - a[1].min(b[1])).to_string(),
            (b[2] - a[2].min(b[2])).to_string(),
            a[0].to_string(),
        ]);
    }
    table.print()?;
    Ok(())
}

/// `delete`: the thread, in every namespace.
pub fn delete(ctx: &Ctx, thread: &str) -> CliResult {
    let [c, b, w] = counts(ctx, thread)?;
    if c + b + w == 0 {
        return Err(unknown_thread(thread));
    }
    ctx.db.checkpointer().delete_thread(thread)?;
    if ctx.json {
        output::json(&json!({"thread_id": thread, "checkpoints": c, "blobs": b, "pending_writes": w}))?;
    } else {
        output::line(&format!(
            "deleted thread {thread}: {}, {}, {}",
            plural(c, "checkpoint"),
            plural(b, "blob"),
            plural(w, "pending write")
        ))?;
    }
    Ok(())
}

/// `retain`: apply a retention policy to every thread now.
pub fn retain(
    ctx: &Ctx,
    keep_last: Option<usize>,
    max_age_minutes: Option<f64>,
    exempt: Vec<String>,
) -> CliResult {
    if keep_last.is_none() && max_age_minutes.is_none() {
        return Err(Failure::new(crate::exit::USAGE, "retain needs --keep-last and/or --max-age-minutes"));
    }
    if keep_last == Some(0) {
        return Err(Failure::usage("--keep-last must be at least 1 (the newest checkpoint always stays)"));
    }
    let mut policy = agentstate::checkpoint::Retention { keep_last, ..Default::default() };
    if let Some(m) = max_age_minutes {
        if !m.is_finite() || m < 0.0 {
            return Err(Failure::usage("--max-age-minutes must be a number >= 0"));
        }
        let age = std::time::Duration::try_from_secs_f64(m * 60.0).map_err(|_| {
            Failure::usage(format!("--max-age-minutes {m:e} is too large (at most about 3e17)"))
        })?;
        policy.max_age = Some(age);
    }
    policy.exempt = exempt.into_iter().collect();
    let removed = ctx.db.checkpointer().apply_retention(&policy)?;
    if ctx.json {
        output::json(&json!({"removed_checkpoints": removed}))?;
    } else {
        output::line(&format!("retention removed {}", plural(removed, "checkpoint")))?;
    }
    Ok(())
}
