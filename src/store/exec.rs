//! How a batch runs: validation and embedding before any lock, then reads
//! against the state before the batch, TTL refreshes, and writes, in one
//! transaction.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use rusqlite::{params_from_iter, Connection, OptionalExtension};
use serde_json::Value;

use super::cache::{self, normalise, Fit};
use super::config::ttl_minutes;
use super::embed::{embed_documents_checked, embed_query_checked};
use super::item::{parse_time, time_column, Item, SearchItem};
use super::listing;
use super::namespace::{self, validate_labels, validate_namespace, Namespace};
use super::ops::{Get, IndexChoice, Op, OpResult, Search, TtlChoice};
use super::path::{field_texts, per_put_fields};
use super::stream::{self, StreamHit};
use super::Store;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::json::{too_deep, MAX_STORED_DEPTH};
use crate::vector::encode_f32;

/// SQL: now, as comparable UTC text with milliseconds.
/// (A scalar subquery, so SQLite computes it once per statement, not per row.)
pub(crate) const NOW: &str = "(SELECT strftime('%Y-%m-%d %H:%M:%f', 'now'))";

/// SQL: the row of `store` (aliased `alias`) has not expired.
pub(crate) fn alive(alias: &str) -> String {
    format!("({alias}.expires_at IS NULL OR {alias}.expires_at >= {NOW})")
}

/// SQL: the expiry of a row whose TTL (minutes) is the expression `ttl`.
fn expiry(ttl: &str) -> String {
    format!("strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || printf('%.3f', ({ttl}) * 60.0) || ' seconds')")
}

/// A put after validation and embedding, ready to write.
struct PreparedPut {
    prefix: String,
    key: String,
    value: Option<String>,
    /// Minutes.
    ttl: Option<f64>,
    /// `(field_name, text)` to embed.
    texts: Vec<(String, String)>,
    vectors: Vec<(String, Vec<u8>)>,
}

/// Items whose TTL a read refreshes: (prefix, key).
type Refresh = Vec<(String, String)>;

impl Store {
    pub(super) fn run_batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        // 1. Validate everything and do the slow work (embedding) before
        //    taking any lock.
        let mut filters: HashMap<usize, Option<Filter>> = HashMap::new();
        let mut queries: HashMap<usize, Vec<f32>> = HashMap::new();
        let mut puts: Vec<PreparedPut> = vec![];
        let mut put_slot: HashMap<(String, String), usize> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::Get(g) => validate_namespace(&g.namespace)?,
                Op::Search(s) => {
                    validate_labels(&s.prefix)?;
                    filters.insert(i, s.filter.as_ref().map(Filter::parse).transpose()?);
                    if let Some(q) = &s.query {
                        let Some(index) = self.inner.config.index() else {
                            return Err(Error::InvalidConfig(
                                "a search with a query needs a store with an index (StoreConfig::with_index)"
                                    .into(),
                            ));
                        };
                        // Checked like documents: the right length, finite.
                        queries.insert(i, embed_query_checked(index.embedder().as_ref(), q)?);
                    }
                }
                Op::ListNamespaces(l) => {
                    for c in &l.conditions {
                        c.validate()?;
                    }
                }
                Op::Put(p) => {
                    validate_namespace(&p.namespace)?;
                    let prefix = namespace::encode_prefix(&p.namespace);
                    let prepared = match &p.value {
                        None => PreparedPut {
                            prefix,
                            key: p.key.clone(),
                            value: None,
                            ttl: None,
                            texts: vec![],
                            vectors: vec![],
                        },
                        Some(v) => {
                            if !v.is_object() {
                                return Err(Error::InvalidArgument(format!(
                                    "a store value must be a JSON object, got {}",
                                    kind(v)
                                )));
                            }
                            if too_deep(v, MAX_STORED_DEPTH) {
                                return Err(Error::InvalidArgument(format!(
                                    "a store value may nest at most {MAX_STORED_DEPTH} levels of objects \
                                     and arrays (deeper JSON could not be read back)"
                                )));
                            }
                            let ttl = match p.ttl {
                                TtlChoice::Default => self.inner.config.ttl().and_then(|t| t.default_ttl()),
                                TtlChoice::Never => None,
                                TtlChoice::After(d) => Some(d),
                            };
                            PreparedPut {
                                prefix,
                                key: p.key.clone(),
                                value: Some(serde_json::to_string(v)?),
                                ttl: ttl.map(ttl_minutes).transpose()?,
                                texts: self.texts_for(v, &p.index),
                                vectors: vec![],
                            }
                        }
                    };
                    let slot = (prepared.prefix.clone(), prepared.key.clone());
                    match put_slot.get(&slot) {
                        Some(&at) => puts[at] = prepared,
                        None => {
                            put_slot.insert(slot, puts.len());
                            puts.push(prepared);
                        }
                    }
                }
            }
        }
        // Embed the surviving puts in one call.
        self.embed_puts(&mut puts)?;

        // 2. Reads against the state before the batch, collecting the items
        //    whose TTL a read refreshes; then refreshes and puts. A batch
        //    without puts reads in a snapshot and takes the write lock only
        //    if something needs refreshing.
        // Searches read the vectors (to rank, or into the copy later
        // searches reuse) and puts write them as this store's embedder makes
        // them: once per batch, in its transaction, the file must still
        // record that embedder.
        let uses_vectors =
            ops.iter().any(|op| matches!(op, Op::Search(_))) || puts.iter().any(|p| !p.vectors.is_empty());
        let run = |conn: &Connection, refresh: &mut Refresh| -> Result<Vec<OpResult>> {
            if let (true, Some(index)) = (uses_vectors, self.inner.config.index()) {
                super::reindex::ensure_current(conn, index)?;
            }
            let mut out = Vec::with_capacity(ops.len());
            for (i, op) in ops.iter().enumerate() {
                out.push(match op {
                    Op::Get(g) => OpResult::Item(self.do_get(conn, g.clone(), refresh)?),
                    Op::Search(s) => OpResult::Items(self.do_search(
                        conn,
                        s,
                        filters.get(&i).and_then(Option::as_ref),
                        queries.get(&i).map(Vec::as_slice),
                        refresh,
                    )?),
                    Op::ListNamespaces(l) => OpResult::Namespaces(listing::list(conn, l)?),
                    Op::Put(_) => OpResult::Done,
                });
            }
            Ok(out)
        };
        let (mut out, refreshed) = if !puts.is_empty() {
            self.inner.db.write(|tx| {
                let mut refresh = vec![];
                let out = run(tx, &mut refresh)?;
                let refreshed = refresh_ttls(tx, &refresh)?;
                write_puts(tx, &puts)?;
                Ok((out, refreshed))
            })?
        } else {
            let mut refresh = vec![];
            // A lone get or list_namespaces is one SELECT, atomic by itself;
            // only multi-statement reads need an explicit snapshot.
            // A lone list_namespaces may be answered from recent answers.
            if let [Op::ListNamespaces(l)] = ops.as_slice() {
                return Ok(vec![OpResult::Namespaces(self.inner.lists.list(&self.inner.db, l)?)]);
            }
            let single_statement = matches!(ops.as_slice(), [Op::Get(_)]);
            let out = if single_statement {
                self.inner.db.read(|conn| run(conn, &mut refresh))?
            } else {
                self.inner.db.snapshot(|tx| run(tx, &mut refresh))?
            };
            let refreshed = if refresh.is_empty() {
                HashMap::new()
            } else {
                super::refresh::refresh_if_free(&self.inner.db, &refresh)?
            };
            (out, refreshed)
        };
        if !refreshed.is_empty() {
            for r in &mut out {
                let items: Vec<&mut Item> = match r {
                    OpResult::Item(Some(it)) => vec![it],
                    OpResult::Items(hits) => hits.iter_mut().map(|h| &mut h.item).collect(),
                    _ => vec![],
                };
                patch_refreshed(items, &refreshed);
            }
        }
        Ok(out)
    }

    /// A lone get: the batch's steps for one read, without its bookkeeping
    /// (a get is a few microseconds).
    pub(super) fn get_one(&self, g: Get) -> Result<Option<Item>> {
        validate_namespace(&g.namespace)?;
        let mut refresh = vec![];
        let mut item = self.inner.db.read(|conn| self.do_get(conn, g, &mut refresh))?;
        if !refresh.is_empty() {
            let refreshed = super::refresh::refresh_if_free(&self.inner.db, &refresh)?;
            patch_refreshed(item.iter_mut(), &refreshed);
        }
        Ok(item)
    }

    fn refresh(&self, flag: Option<bool>) -> bool {
        flag.unwrap_or_else(|| self.inner.config.ttl().map(|t| t.refresh_on_read()).unwrap_or(true))
    }

    fn texts_for(&self, value: &Value, index: &IndexChoice) -> Vec<(String, String)> {
        if self.inner.config.index().is_none() {
            return vec![];
        }
        match index {
            IndexChoice::Off => vec![],
            IndexChoice::Default => field_texts(value, &self.inner.fields),
            IndexChoice::Fields(paths) => field_texts(value, &per_put_fields(paths)),
        }
    }

    fn embed_puts(&self, puts: &mut [PreparedPut]) -> Result<()> {
        let Some(cfg) = self.inner.config.index() else { return Ok(()) };
        let mut texts: Vec<String> = vec![];
        let mut owners: Vec<(usize, String)> = vec![];
        for (i, p) in puts.iter_mut().enumerate() {
            for (name, text) in std::mem::take(&mut p.texts) {
                owners.push((i, name));
                texts.push(text);
            }
        }
        if texts.is_empty() {
            return Ok(());
        }
        let vecs = embed_documents_checked(cfg.embedder().as_ref(), &texts)?;
        for ((i, name), v) in owners.into_iter().zip(vecs) {
            puts[i].vectors.push((name, encode_f32(&v)));
        }
        Ok(())
    }

    /// A get; the item takes over its labels and key.
    fn do_get(&self, conn: &Connection, g: Get, refresh: &mut Refresh) -> Result<Option<Item>> {
        let prefix = namespace::encode_prefix(&g.namespace);
        // Built once: a get is too cheap to format its SQL every time.
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT CAST(value AS TEXT), created_at, updated_at, expires_at, ttl_minutes IS NOT NULL \
                 FROM store s WHERE prefix = ?1 AND key = ?2 AND {}",
                alive("s")
            )
        });
        let mut stmt = conn.prepare_cached(&SQL)?;
        let mut rows = stmt.query([&prefix, &g.key])?;
        let Some(r) = rows.next()? else { return Ok(None) };
        let refresh_ttl = self.refresh(g.refresh_ttl);
        let (item, has_ttl) = item_at(r, Namespace::from_labels(g.namespace), &prefix, g.key)?;
        if has_ttl && refresh_ttl {
            refresh.push((prefix, item.key.clone()));
        }
        Ok(Some(item))
    }

    /// Search through the in-memory cache (see `cache`): the prefixes under
    /// the namespace prefix, live expiry, the Rust filter evaluator, exact
    /// max-pooled cosine.
    fn do_search(
        &self,
        conn: &Connection,
        s: &Search,
        filter: Option<&Filter>,
        query: Option<&[f32]>,
        refresh: &mut Refresh,
    ) -> Result<Vec<SearchItem>> {
        if s.limit == 0 {
            return Ok(vec![]);
        }
        let dims = self.inner.config.index().map(|i| i.dims());
        // A zero query has no direction: nothing gets a score.
        let unit = query
            .map(<[f32]>::to_vec)
            .filter(|q| q.iter().any(|x| *x != 0.0))
            .and_then(|mut q| normalise(&mut q).then_some(q));
        let blocks = match self.inner.cache.blocks(conn, &s.prefix, dims)? {
            Fit::Blocks(blocks) => blocks,
            Fit::TooLarge(gens) => {
                let head = match (&unit, dims) {
                    (Some(_), Some(d)) if d > 0 => Some(self.inner.cache.head(conn, &s.prefix, gens, d)?),
                    _ => None,
                };
                let (q, head) = (unit.as_deref(), head.as_deref());
                let hits = stream::search(conn, &s.prefix, filter, q, dims, head, s.limit, s.offset)?;
                return self.streamed_items(conn, s, hits, refresh);
            }
        };
        let expired = expired_items(conn)?;
        let q = unit.as_deref().unwrap_or(&[]);
        let mut exact = |prefix: &str, key: &str| cache::exact_score(conn, prefix, key, q);
        let hits = cache::search(&blocks, &expired, filter, unit.as_deref(), s.limit, s.offset, &mut exact)?;
        let wants_refresh = self.refresh(s.refresh_ttl);
        let mut out = Vec::with_capacity(hits.len());
        for (prefix, it, score) in hits {
            if wants_refresh && it.has_ttl {
                refresh.push((prefix.to_string(), it.key.clone()));
            }
            let expires_at = if it.has_ttl { expires_at(conn, prefix, &it.key)? } else { None };
            let time = |t: &str, col: &str| time_column(t, col, prefix, &it.key);
            out.push(SearchItem {
                item: Item {
                    namespace: Namespace::from_encoded(prefix),
                    key: it.key.clone(),
                    value: it.value(prefix)?,
                    created_at: time(&it.created_at, "created_at")?,
                    updated_at: time(&it.updated_at, "updated_at")?,
                    expires_at,
                },
                score,
            });
        }
        Ok(out)
    }
}

impl Store {
    /// The items of a page found by `stream::search`, read by primary key
    /// in the search's snapshot.
    fn streamed_items(
        &self,
        conn: &Connection,
        s: &Search,
        hits: Vec<StreamHit>,
        refresh: &mut Refresh,
    ) -> Result<Vec<SearchItem>> {
        let wants_refresh = self.refresh(s.refresh_ttl);
        let mut stmt = conn.prepare_cached(
            "SELECT CAST(value AS TEXT), created_at, updated_at, expires_at, ttl_minutes IS NOT NULL \
             FROM store WHERE prefix = ?1 AND key = ?2",
        )?;
        let mut out = Vec::with_capacity(hits.len());
        for (prefix, key, score) in hits {
            let mut rows = stmt.query([&prefix, &key])?;
            let r = rows.next()?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            let (item, has_ttl) = item_at(r, Namespace::from_encoded(&prefix), &prefix, key)?;
            if wants_refresh && has_ttl {
                refresh.push((prefix, item.key.clone()));
            }
            out.push(SearchItem { item, score });
        }
        Ok(out)
    }
}

/// Items whose TTL a read refreshed get their new expiry.
fn patch_refreshed<'a>(
    items: impl IntoIterator<Item = &'a mut Item>,
    refreshed: &HashMap<(String, String), std::time::SystemTime>,
) {
    for it in items {
        let id = (namespace::encode_prefix(it.namespace.labels()), it.key.clone());
        if let Some(at) = refreshed.get(&id) {
            it.expires_at = Some(*at);
        }
    }
}

/// An item from a row of `CAST(value AS TEXT), created_at, updated_at,
/// expires_at, ttl_minutes IS NOT NULL`, parsed straight from SQLite's
/// buffers, and whether it has a TTL. `Corrupt` if its value is not JSON or
/// a time does not parse.
fn item_at(r: &rusqlite::Row<'_>, namespace: Namespace, prefix: &str, key: String) -> Result<(Item, bool)> {
    let text = |i: usize| -> Result<Option<&str>> {
        Ok(r.get_ref(i)?.as_str_or_null().map_err(rusqlite::Error::from)?)
    };
    let value = super::cache::parse_value(text(0)?.unwrap_or_default(), prefix, &key)?;
    let time = |i: usize, col: &str| -> Result<std::time::SystemTime> {
        time_column(text(i)?.unwrap_or(""), col, prefix, &key)
    };
    let created_at = time(1, "created_at")?;
    let updated_at = time(2, "updated_at")?;
    let expires_at = match text(3)? {
        Some(_) => Some(time(3, "expires_at")?),
        None => None,
    };
    let has_ttl: bool = r.get(4)?;
    Ok((Item { namespace, value, created_at, updated_at, expires_at, key }, has_ttl))
}

/// The live expiry of one item (TTL refreshes do not move the cache's
/// generation, so it is never cached).
fn expires_at(conn: &Connection, prefix: &str, key: &str) -> Result<Option<std::time::SystemTime>> {
    let text: Option<Option<String>> = conn
        .prepare_cached("SELECT expires_at FROM store WHERE prefix = ?1 AND key = ?2")?
        .query_row([prefix, key], |r| r.get(0))
        .optional()?;
    text.flatten().map(|t| time_column(&t, "expires_at", prefix, key)).transpose()
}

/// The (prefix, key) of every expired, unswept item: found through the
/// partial index on `expires_at`, so it costs what has expired, not what the
/// namespace holds. (Filtering by prefix here would steer SQLite to the
/// prefix index and a scan of the namespace.)
fn expired_items(conn: &Connection) -> Result<HashSet<(String, String)>> {
    let rows = conn
        .prepare_cached(&format!(
            "SELECT prefix, key FROM store WHERE expires_at IS NOT NULL AND expires_at < {NOW}"
        ))?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Pushes the expiry of these (unexpired, TTL'd) items forward by their TTL
/// and returns their new expiries. A TTL that is not a number of minutes
/// from now to a date SQLite can write (text, a negative number, an
/// infinity: a damaged row) is not refreshed: the item keeps the expiry it
/// has, instead of one computed from garbage (now, or none at all).
pub(super) fn refresh_ttls(
    conn: &Connection,
    items: &[(String, String)],
) -> Result<HashMap<(String, String), std::time::SystemTime>> {
    let mut up = conn.prepare_cached(&format!(
        "UPDATE store SET expires_at = {new} WHERE prefix = ?1 AND key = ?2 \
         AND typeof(ttl_minutes) IN ('integer', 'real') AND ttl_minutes >= 0 AND {new} IS NOT NULL AND {} \
         RETURNING expires_at",
        alive("store"),
        new = expiry("ttl_minutes"),
    ))?;
    let mut out = HashMap::new();
    for (p, k) in items {
        let new: Option<Option<String>> = up.query_row([p, k], |r| r.get(0)).optional()?;
        if let Some(at) = new.flatten().as_deref().and_then(parse_time) {
            out.insert((p.clone(), k.clone()), at);
        }
    }
    Ok(out)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The most rows one multi-row statement writes; a batch goes in chunks of
/// powers of two up to this (few distinct statements to cache).
const CHUNK: usize = 64;

/// The sizes of the chunks `n` rows go in: `CHUNK`s, then powers of two.
fn chunks(mut n: usize) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if n == 0 {
            return None;
        }
        let c = if n >= CHUNK { CHUNK } else { 1 << n.ilog2() };
        n -= c;
        Some(c)
    })
}

/// Runs `sql(rows)` (a statement over `rows` rows of `width` parameters) on
/// `args` in chunks.
fn run_chunked(
    conn: &Connection,
    args: &[rusqlite::types::Value],
    width: usize,
    sql: impl Fn(usize) -> String,
) -> Result<()> {
    let mut at = 0;
    for rows in chunks(args.len() / width) {
        let end = at + rows * width;
        conn.prepare_cached(&sql(rows))?.execute(params_from_iter(&args[at..end]))?;
        at = end;
    }
    Ok(())
}

/// `(?, ?), (?, ?), ...`: `rows` groups of `width` placeholders. (The
/// deletes join these rows to the primary key index: a row-value
/// `IN (VALUES ...)` would scan the table.)
fn placeholders(rows: usize, width: usize) -> String {
    let one = format!("({})", vec!["?"; width].join(", "));
    vec![one; rows].join(", ")
}

/// Writes a batch's puts (keys are distinct): deletes, then upserts with
/// multi-row statements, then the vectors of every put item replaced; then
/// moves the generation of each prefix written once (the per-row triggers
/// stand aside meanwhile: see `agentstate_store_quiet` in schema.sql).
fn write_puts(conn: &Connection, puts: &[PreparedPut]) -> Result<()> {
    conn.prepare_cached("INSERT OR REPLACE INTO agentstate_store_quiet (x) VALUES (1)")?.execute([])?;
    write_rows(conn, puts)?;
    let prefixes: std::collections::BTreeSet<&str> = puts.iter().map(|p| p.prefix.as_str()).collect();
    let mut bump = conn.prepare_cached(
        "INSERT INTO agentstate_store_gen (prefix, gen) VALUES (?1, 1) \
         ON CONFLICT (prefix) DO UPDATE SET gen = gen + 1",
    )?;
    for p in prefixes {
        bump.execute([p])?;
    }
    // Before the commit: no other connection ever sees the row.
    conn.prepare_cached("DELETE FROM agentstate_store_quiet")?.execute([])?;
    Ok(())
}

fn write_rows(conn: &Connection, puts: &[PreparedPut]) -> Result<()> {
    use rusqlite::types::Value as V;
    let text = |s: &str| V::Text(s.to_owned());
    let mut deletes = vec![];
    let mut upserts = vec![];
    let mut keys = vec![];
    let mut vectors = vec![];
    for p in puts {
        keys.extend([text(&p.prefix), text(&p.key)]);
        match &p.value {
            None => deletes.extend([text(&p.prefix), text(&p.key)]),
            Some(value) => {
                let ttl = p.ttl.map_or(V::Null, V::Real);
                upserts.extend([text(&p.prefix), text(&p.key), text(value), ttl]);
                for (field, blob) in &p.vectors {
                    vectors.extend([text(&p.prefix), text(&p.key), text(field), V::Blob(blob.clone())]);
                }
            }
        }
    }
    delete_keys(conn, "store", &deletes)?;
    run_chunked(conn, &upserts, 4, |n| {
        // Row i binds ?(4i+1)..?(4i+4): prefix, key, value, TTL minutes.
        let rows: Vec<String> = (0..n)
            .map(|i| {
                let (p, k, v, t) = (4 * i + 1, 4 * i + 2, 4 * i + 3, 4 * i + 4);
                format!(
                    "(?{p}, ?{k}, ?{v}, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, \
                     CASE WHEN ?{t} IS NULL THEN NULL ELSE {} END, ?{t})",
                    expiry(&format!("?{t}"))
                )
            })
            .collect();
        format!(
            "INSERT INTO store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) \
             VALUES {} \
             ON CONFLICT (prefix, key) DO UPDATE SET \
               value = excluded.value, updated_at = excluded.updated_at, \
               created_at = CASE WHEN {} THEN store.created_at ELSE excluded.created_at END, \
               expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes",
            rows.join(", "),
            alive("store")
        )
    })?;
    // Files written by Python without foreign keys may hold orphans, so the
    // vectors of deleted items go explicitly too.
    delete_keys(conn, "store_vectors", &keys)?;
    run_chunked(conn, &vectors, 4, |n| {
        format!(
            "INSERT OR REPLACE INTO store_vectors (prefix, key, field_name, embedding) VALUES {}",
            placeholders(n, 4)
        )
    })?;
    Ok(())
}

/// Deletes the rows of `table` (`store` or `store_vectors`) whose
/// (prefix, key) is one of the pairs flattened in `keys`.
fn delete_keys(conn: &Connection, table: &str, keys: &[rusqlite::types::Value]) -> Result<()> {
    run_chunked(conn, keys, 2, |n| {
        format!(
            "DELETE FROM {table} WHERE rowid IN (SELECT x.rowid FROM (VALUES {}) AS t \
             CROSS JOIN {table} x ON x.prefix = t.column1 AND x.key = t.column2)",
            placeholders(n, 2)
        )
    })
}

pub(crate) fn sweep(db: &Db) -> Result<usize> {
    db.write(|tx| {
        let n = tx
            .execute(&format!("DELETE FROM store WHERE expires_at IS NOT NULL AND expires_at < {NOW}"), [])?;
        // Vectors go by cascade; orphans left by Python writers go too.
        tx.execute(
            "DELETE FROM store_vectors WHERE NOT EXISTS \
             (SELECT 1 FROM store s WHERE s.prefix = store_vectors.prefix AND s.key = store_vectors.key)",
            [],
        )?;
        Ok(n)
    })
}
