//! Store commands: get, put, delete, search, ns, sweep, reindex.

use std::io::{IsTerminal, Read};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentstate::inspect::ItemInfo;
use agentstate::store::{
    HashEmbedder, IndexConfig, ListNamespaces, Namespace, Put, Search, Store, TtlConfig, MAX_TTL,
};
use agentstate::StoreConfig;
use serde_json::{json, Value};

use crate::output::{self, compact, plural, Table};
use crate::{CliResult, Ctx, Failure, StoreCommand};

/// Item values wider than this are cut in text tables (`--json` has them
/// whole).
const WIDTH: usize = 100;

/// A namespace from the command line: a JSON array (`["users","alice"]`) or
/// dot-joined labels (`users.alice`; empty text is the empty prefix).
pub fn parse_ns(text: &str) -> CliResult<Vec<String>> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(trimmed)
            .map_err(|e| Failure::usage(format!("invalid JSON namespace '{text}': {e}")))?;
        if v.as_array().is_some_and(Vec::is_empty) {
            return Ok(vec![]);
        }
        return Ok(Namespace::try_from(&v)?.into_labels());
    }
    if text.is_empty() {
        return Ok(vec![]);
    }
    Ok(text.split('.').map(str::to_string).collect())
}

fn refs(labels: &[String]) -> Vec<&str> {
    labels.iter().map(String::as_str).collect()
}

fn dotted(labels: &[String]) -> String {
    labels.join(".")
}

/// The embedder the file records for its vectors.
enum Recorded {
    None,
    Hashed(usize),
    Other(String),
}

fn recorded(ctx: &Ctx) -> CliResult<Recorded> {
    Ok(match ctx.db.recorded_embedder()? {
        None => Recorded::None,
        Some(e) => match (e.name == HashEmbedder::NAME, e.dims) {
            (true, Some(d)) => Recorded::Hashed(d),
            _ => Recorded::Other(e.to_string()),
        },
    })
}

fn vector_count(ctx: &Ctx) -> CliResult<u64> {
    Ok(ctx.db.store_counts()?.vectors)
}

/// The configured fields the file's vectors were most likely made from: their
/// names with a trailing `.N` (several texts from one path) removed; `["$"]`
/// (the whole document) if there are none.
fn infer_fields(ctx: &Ctx) -> CliResult<Vec<String>> {
    let mut out: Vec<String> = vec![];
    for name in ctx.db.vector_field_names()? {
        let base = match name.rsplit_once('.') {
            Some((base, n)) if !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                base.to_string()
            }
            _ => name,
        };
        if !out.contains(&base) {
            out.push(base);
        }
    }
    if out.is_empty() {
        out.push("$".into());
    }
    Ok(out)
}

/// A timestamp as the file writes it: `YYYY-MM-DD HH:MM:SS` (UTC).
fn timestamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let rem = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, (rem / 60) % 60, rem % 60)
}

/// The CLI's store: reads never refresh TTLs (an inspector does not change
/// expiries). With `index`, and only if the file records the built-in
/// embedder, it embeds with that embedder and `fields`.
fn open_store(ctx: &Ctx, index: Option<Vec<String>>) -> CliResult<(Store, bool)> {
    let ttl = TtlConfig::new().with_refresh_on_read(false);
    let mut config = StoreConfig::default().with_ttl(ttl);
    let mut indexed = false;
    if let Some(fields) = index {
        if let Recorded::Hashed(dims) = recorded(ctx)? {
            let fields = if fields.is_empty() { infer_fields(ctx)? } else { fields };
            config = config.with_index(IndexConfig::hashed(dims)?.with_fields(fields));
            indexed = true;
        }
    }
    Ok((ctx.db.store(config)?, indexed))
}

/// The item's stored row (expired or not), vector names included.
fn item_info(ctx: &Ctx, ns: &[String], key: &str) -> CliResult<Option<ItemInfo>> {
    Ok(ctx.db.item_info(&refs(ns), key)?)
}

/// Runs one store command.
pub fn run(ctx: &Ctx, cmd: StoreCommand) -> CliResult {
    match cmd {
        StoreCommand::Get { namespace, key } => get(ctx, &namespace, &key),
        StoreCommand::Put { namespace, key, value, ttl, index, no_index } => {
            put(ctx, &namespace, &key, value.as_deref(), ttl, index, no_index)
        }
        StoreCommand::Delete { namespace, key } => delete(ctx, &namespace, &key),
        StoreCommand::Search { prefix, query, filter, limit, offset } => {
            search(ctx, prefix.as_deref().unwrap_or(""), query, filter.as_deref(), limit, offset)
        }
        StoreCommand::Ns { prefix, suffix, max_depth, limit, offset } => {
            namespaces(ctx, prefix.as_deref(), suffix.as_deref(), max_depth, limit, offset)
        }
        StoreCommand::Sweep => sweep(ctx),
        StoreCommand::Reindex { dims, fields } => reindex(ctx, dims, fields),
    }
}

fn get(ctx: &Ctx, namespace: &str, key: &str) -> CliResult {
    let ns = parse_ns(namespace)?;
    let (store, _) = open_store(ctx, None)?;
    let prefix = dotted(&ns);
    let Some(item) = store.get(&refs(&ns), key)? else {
        let info = item_info(ctx, &ns, key)?;
        return Err(Failure::not_found(match info.and_then(|i| i.expires_at) {
            Some(at) => format!("item '{key}' in namespace '{prefix}' expired at {at}"),
            None => format!("no item '{key}' in namespace '{prefix}'"),
        }));
    };
    let info = item_info(ctx, &ns, key)?;
    let vectors = info.as_ref().map(|i| i.vector_fields.clone()).unwrap_or_default();
    let expires = info.as_ref().and_then(|i| i.expires_at.clone());
    let ttl = info.as_ref().and_then(|i| i.ttl_minutes);
    if ctx.json {
        output::json(&json!({
            "namespace": item.namespace,
            "key": item.key,
            "value": item.value,
            "created_at": timestamp(item.created_at),
            "updated_at": timestamp(item.updated_at),
            "expires_at": expires,
            "ttl_minutes": ttl,
            "vectors": vectors,
        }))?;
        return Ok(());
    }
    let mut t = Table::default();
    t.row(["namespace", &prefix]);
    t.row(["key", key]);
    t.row(["created_at", &timestamp(item.created_at)]);
    t.row(["updated_at", &timestamp(item.updated_at)]);
    let expiry = match (&expires, ttl) {
        (Some(at), Some(m)) => format!("{at} (ttl {m} minutes)"),
        (Some(at), None) => at.clone(),
        (None, _) => "never".into(),
    };
    t.row(["expires_at", &expiry]);
    let vecs = if vectors.is_empty() {
        "none".to_string()
    } else {
        format!("{} ({})", vectors.len(), vectors.join(", "))
    };
    t.row(["vectors", &vecs]);
    t.print()?;
    output::line(&output::pretty_indented(&item.value, 0))?;
    Ok(())
}

fn put(
    ctx: &Ctx,
    namespace: &str,
    key: &str,
    value: Option<&str>,
    ttl: Option<f64>,
    index: Option<Vec<String>>,
    no_index: bool,
) -> CliResult {
    let ns = parse_ns(namespace)?;
    let text = match value {
        Some(v) if v != "-" => v.to_string(),
        _ => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(Failure::usage(
                    "store put: give the value (a JSON object) as an argument or on stdin",
                ));
            }
            let mut buf = String::new();
            stdin
                .lock()
                .read_to_string(&mut buf)
                .map_err(|e| Failure::usage(format!("cannot read the value from stdin: {e}")))?;
            buf
        }
    };
    let value: Value =
        serde_json::from_str(&text).map_err(|e| Failure::usage(format!("invalid JSON value: {e}")))?;
    if !value.is_object() {
        return Err(Failure::usage("a store value must be a JSON object"));
    }
    let (store, indexed) = open_store(ctx, Some(index.unwrap_or_default()))?;
    let mut put = Put::new(&ns, key, value);
    if no_index {
        put = put.no_index();
    }
    put = match ttl {
        Some(m) => put.ttl(ttl_duration(m)?),
        None => put.no_ttl(),
    };
    store.put_with(put)?;
    let prefix = dotted(&ns);
    let info = item_info(ctx, &ns, key)?;
    let vectors = info.as_ref().map(|i| i.vector_fields.clone()).unwrap_or_default();
    let expires = info.and_then(|i| i.expires_at);
    if !indexed && !no_index {
        let note = match recorded(ctx)? {
            Recorded::Other(name) => {
                Some(format!("the file's vectors come from '{name}', which this CLI does not have"))
            }
            Recorded::None if vector_count(ctx)? > 0 => {
                Some("the file's vectors come from an embedder it does not record".to_string())
            }
            _ => None,
        };
        if let Some(why) = note {
            eprintln!("note: no vector made for {prefix}/{key}: {why}");
        }
    }
    if ctx.json {
        output::json(&json!({"namespace": ns, "key": key, "vectors": vectors, "expires_at": expires}))?;
    } else {
        let vecs = if vectors.is_empty() {
            "no vector".to_string()
        } else {
            format!("{} ({})", plural(vectors.len(), "vector"), vectors.join(", "))
        };
        output::line(&format!(
            "put {prefix}/{key}: {vecs}, expires {}",
            expires.as_deref().unwrap_or("never")
        ))?;
    }
    Ok(())
}

/// `--ttl MINUTES` as a duration: a finite number >= 0 and at most
/// [`MAX_TTL`] (a number too large for a `Duration` gets the same message as
/// one just over the limit).
fn ttl_duration(minutes: f64) -> CliResult<Duration> {
    if !minutes.is_finite() || minutes < 0.0 {
        return Err(Failure::usage(format!("a TTL must be a finite number of minutes >= 0, got {minutes}")));
    }
    let max = MAX_TTL.as_secs() / 60;
    if minutes > max as f64 {
        // 1e300 rather than its 301 digits.
        let got = if minutes >= 1e15 { format!("{minutes:e}") } else { minutes.to_string() };
        return Err(Failure::usage(format!("a TTL must be at most {max} minutes, got {got}")));
    }
    Duration::try_from_secs_f64(minutes * 60.0)
        .map_err(|_| Failure::usage(format!("a TTL must be at most {max} minutes, got {minutes}")))
}

fn delete(ctx: &Ctx, namespace: &str, key: &str) -> CliResult {
    let ns = parse_ns(namespace)?;
    let prefix = dotted(&ns);
    let (store, _) = open_store(ctx, None)?;
    if item_info(ctx, &ns, key)?.is_none() {
        return Err(Failure::not_found(format!("no item '{key}' in namespace '{prefix}'")));
    }
    store.delete(&refs(&ns), key)?;
    if ctx.json {
        output::json(&json!({"namespace": ns, "key": key, "deleted": true}))?;
    } else {
        output::line(&format!("deleted {prefix}/{key}"))?;
    }
    Ok(())
}

fn search(
    ctx: &Ctx,
    prefix: &str,
    query: Option<String>,
    filter: Option<&str>,
    limit: usize,
    offset: usize,
) -> CliResult {
    let prefix = parse_ns(prefix)?;
    let filter: Option<Value> = filter
        .map(|f| serde_json::from_str(f).map_err(|e| Failure::usage(format!("invalid JSON filter: {e}"))))
        .transpose()?;
    if query.is_some() {
        match recorded(ctx)? {
            Recorded::Hashed(_) => {}
            Recorded::Other(name) => {
                return Err(Failure::usage(format!(
                    "--query needs the embedder the file was indexed with ('{name}'), which this CLI does not have \
                     (only {}); a --filter search works without it",
                    HashEmbedder::NAME
                )))
            }
            Recorded::None => {
                let n = vector_count(ctx)?;
                let why = if n > 0 {
                    format!("the file's {n} vectors come from an embedder it does not record")
                } else {
                    "the file records no embedder (index it with `store reindex --dims N`)".to_string()
                };
                return Err(Failure::usage(format!(
                    "--query needs the embedder the file was indexed with: {why}; a --filter search works without it"
                )));
            }
        }
    }
    // A query only needs the embedder; the fields matter to puts alone.
    let (store, _) = open_store(ctx, query.as_ref().map(|_| vec!["$".to_string()]))?;
    let mut search = Search::new(&prefix).limit(limit).offset(offset).refresh_ttl(false);
    if let Some(q) = query {
        search = search.query(q);
    }
    if let Some(f) = filter {
        search = search.filter(f);
    }
    let hits = store.search(search)?;
    if ctx.json {
        let out: Vec<Value> = hits
            .iter()
            .map(|h| {
                json!({
                    "namespace": h.item.namespace,
                    "key": h.item.key,
                    "value": h.item.value,
                    "created_at": timestamp(h.item.created_at),
                    "updated_at": timestamp(h.item.updated_at),
                    "score": h.score,
                })
            })
            .collect();
        output::json(&Value::Array(out))?;
        return Ok(());
    }
    if hits.is_empty() {
        output::line("no items")?;
        return Ok(());
    }
    let mut t = Table::new(["SCORE", "NAMESPACE", "KEY", "CHANGED", "VALUE"]);
    for h in &hits {
        t.row([
            h.score.map_or_else(|| "-".to_string(), |s| format!("{s:.3}")),
            dotted(&h.item.namespace),
            h.item.key.clone(),
            timestamp(h.item.updated_at),
            compact(&h.item.value, WIDTH),
        ]);
    }
    t.print()?;
    Ok(())
}

fn namespaces(
    ctx: &Ctx,
    prefix: Option<&str>,
    suffix: Option<&str>,
    max_depth: Option<usize>,
    limit: usize,
    offset: usize,
) -> CliResult {
    let prefix = prefix.map(parse_ns).transpose()?.unwrap_or_default();
    let suffix = suffix.map(parse_ns).transpose()?.unwrap_or_default();
    let (store, _) = open_store(ctx, None)?;
    let mut list = ListNamespaces::new().prefix(&prefix).suffix(&suffix).limit(limit).offset(offset);
    if let Some(d) = max_depth {
        list = list.max_depth(d);
    }
    let found = store.list_namespaces(list)?;
    if ctx.json {
        output::json(&json!(found))?;
        return Ok(());
    }
    if found.is_empty() {
        output::line("no namespaces")?;
    }
    for ns in &found {
        output::line(&dotted(ns))?;
    }
    Ok(())
}

fn sweep(ctx: &Ctx) -> CliResult {
    let (store, _) = open_store(ctx, None)?;
    let n = store.sweep_expired()?;
    if ctx.json {
        output::json(&json!({"swept": n}))?;
    } else {
        output::line(&format!("swept {}", plural(n, "expired item")))?;
    }
    Ok(())
}

fn reindex(ctx: &Ctx, dims: Option<usize>, fields: Option<Vec<String>>) -> CliResult {
    let dims = match (dims, recorded(ctx)?) {
        (Some(d), _) => d,
        (None, Recorded::Hashed(d)) => d,
        (None, Recorded::Other(name)) => {
            return Err(Failure::usage(format!(
                "the file's vectors were made by '{name}', which this CLI does not have; \
                 pass --dims N to re-embed every item with {}",
                HashEmbedder::NAME
            )))
        }
        (None, Recorded::None) => {
            return Err(Failure::usage(format!(
                "the file records no embedder; pass --dims N to embed every item with {}",
                HashEmbedder::NAME
            )))
        }
    };
    let fields = match fields {
        Some(f) if !f.is_empty() => f,
        _ => infer_fields(ctx)?,
    };
    let index = IndexConfig::hashed(dims)?.with_fields(fields.clone());
    let config =
        StoreConfig::default().with_index(index).with_ttl(TtlConfig::new().with_refresh_on_read(false));
    let items = ctx.db.store_counts()?.items;
    let pb = output::spinner(&format!("re-embedding {items} items"));
    let res = ctx.db.reindex_store(config);
    pb.finish_and_clear();
    res?;
    let vectors = vector_count(ctx)?;
    let embedder = format!("{}/{dims}", HashEmbedder::NAME);
    if ctx.json {
        output::json(&json!({"items": items, "vectors": vectors, "embedder": embedder, "fields": fields}))?;
    } else {
        output::line(&format!(
            "reindexed {} with {embedder} (fields: {}): {}",
            plural(items as usize, "item"),
            fields.join(", "),
            plural(vectors as usize, "vector")
        ))?;
    }
    Ok(())
}
