//! Hostile input, property-tested through the public API: filters, field
//! paths, namespaces and keys, values, vectors from a misbehaving embedder,
//! configs and numeric arguments. Nothing panics, nothing corrupts the file,
//! every rejection is the typed error that names the problem, and every
//! accepted input reads back exactly.
//!
//! Cases per property are in `CASES`; `AGENTSTATE_SOAK=1` multiplies them by
//! 20. Each test prints its figures (`--nocapture`).
//! Configs, ids, numbers and retention are in `reliability_input_config.rs`.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;

use agentstate::checkpoint::ChannelVersions;

use agentstate::store::{Embedder, HashEmbedder, IndexConfig, ListNamespaces, Put, Search};
use agentstate::{Checkpoint, CheckpointConfig, Db, Error, Filter, ListQuery, Metadata, StoreConfig};
use common::hostile::*;
use common::{check_file, report, Blobs};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

// ---------------------------------------------------------------------------
// Filters

fn filter_key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => prop::sample::select(vec!["a", "b", "n", "s", "tags", "user", "user.level", "a.b.c", "x-y", "z_1"])
            .prop_map(String::from),
        4 => prop::sample::select(vec![
            "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$not", "$and", "$or",
        ])
        .prop_map(String::from),
        1 => prop::sample::select(vec!["$foo", "$regex", "$where", "$", "$$", "$size", "$elemMatch"])
            .prop_map(String::from),
        2 => hostile_string(),
    ]
}

fn filter() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop::collection::vec((filter_key(), tree(filter_key(), 5)), 0..4)
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        1 => (1usize..80, any::<bool>(), leaf()).prop_map(|(n, arrays, l)| json!({ "a": nested(n, arrays, l) })),
        1 => (1usize..80).prop_map(|n| {
            let mut v = json!({"n": {"$gt": 0}});
            for i in 0..n {
                v = if i % 2 == 0 { json!({"$not": v}) } else { json!({"$or": [v, {"s": "x"}]}) };
            }
            v
        }),
        1 => tree(filter_key(), 4),
    ]
}

/// Documents the filters run against: the same keys, extreme numbers,
/// quotes and nested objects.
fn documents() -> Vec<Value> {
    let mut rng = common::Rng::new(7);
    let strings = ["x", "'", "\"", "a.b", "é", "", "null", "'; DROP TABLE store; --", "🦀"];
    let numbers = [
        json!(0),
        json!(1),
        json!(-1),
        json!(2.5),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1e308),
        json!(-0.0),
    ];
    (0..60)
        .map(|i| {
            let mut m = Map::new();
            let mut maybe = |k: &str, v: Value, rng: &mut common::Rng| {
                if rng.chance(70) {
                    m.insert(k.to_string(), v);
                }
            };
            maybe("a", json!({"b": {"c": *rng.pick(&numbers)}}), &mut rng);
            maybe("b", json!(rng.chance(50)), &mut rng);
            maybe("n", rng.pick(&numbers).clone(), &mut rng);
            maybe("s", json!(*rng.pick(&strings)), &mut rng);
            maybe("tags", json!([*rng.pick(&strings), *rng.pick(&strings)]), &mut rng);
            maybe("user", json!({"level": rng.below(4), "name": *rng.pick(&strings)}), &mut rng);
            maybe("x-y", Value::Null, &mut rng);
            m.insert("i".into(), json!(i));
            Value::Object(m)
        })
        .collect()
}

fn check_filter_error(f: &Value, e: &Error) -> Result<(), TestCaseError> {
    match e {
        Error::InvalidFilter { key, reason } => {
            prop_assert!(!reason.is_empty());
            prop_assert!(key.is_empty() || reason.contains(key.as_str()), "{reason:?} does not name {key:?}");
            Ok(())
        }
        other => Err(TestCaseError::fail(format!("filter {f}: expected InvalidFilter, got {other:?}"))),
    }
}

/// Every filter either parses or is refused with `InvalidFilter` naming the
/// key; Store search and checkpoint `list` agree with `Filter::matches` on
/// every accepted filter (Store search evaluates in Rust over its cache,
/// `list` in SQL: this is a differential test of the two through the API).
#[test]
fn hostile_filters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.db");
    let db = Db::open(&path).unwrap();
    let store = db.store(StoreConfig::default()).unwrap();
    let saver = db.checkpointer();
    let docs = documents();
    for (i, d) in docs.iter().enumerate() {
        store.put(&["docs"], &format!("{i:02}"), d.clone()).unwrap();
        let cp = Checkpoint::with_id(format!("{i:02}"));
        saver
            .put(
                &CheckpointConfig::thread("f"),
                &cp,
                &Metadata(d.as_object().unwrap().clone()),
                &ChannelVersions::new(),
            )
            .unwrap();
    }
    // What list returns as metadata (top-level NULs are stripped on put).
    let stored: BTreeMap<String, Value> = saver
        .list(&ListQuery::thread("f"))
        .unwrap()
        .into_iter()
        .map(|t| (t.checkpoint.id.clone(), Value::Object(t.metadata.0.clone())))
        .collect();
    let (accepted, refused) = (Mutex::new(0u64), Mutex::new(0u64));
    runner(1500)
        .run(&filter(), |f| {
            let parsed = Filter::parse(&f);
            let search = store.search(Search::all().filter(f.clone()).limit(1000));
            let listed = saver.list(&ListQuery::thread("f").filter(f.clone()));
            match parsed {
                Err(e) => {
                    check_filter_error(&f, &e)?;
                    check_filter_error(&f, &search.expect_err("search accepted a filter parse refused"))?;
                    check_filter_error(&f, &listed.expect_err("list accepted a filter parse refused"))?;
                    *refused.lock().unwrap() += 1;
                }
                Ok(parsed) => {
                    let mut got: Vec<String> = search
                        .map_err(|e| TestCaseError::fail(format!("search {f}: {e}")))?
                        .into_iter()
                        .map(|i| i.item.key)
                        .collect();
                    got.sort();
                    let want: Vec<String> = docs
                        .iter()
                        .enumerate()
                        .filter(|(_, d)| parsed.matches(d))
                        .map(|(i, _)| format!("{i:02}"))
                        .collect();
                    prop_assert_eq!(&got, &want, "search with {}", f);
                    let mut got: Vec<String> = listed
                        .map_err(|e| TestCaseError::fail(format!("list {f}: {e}")))?
                        .into_iter()
                        .map(|t| t.checkpoint.id.clone())
                        .collect();
                    got.sort();
                    let want: Vec<String> =
                        stored.iter().filter(|(_, m)| parsed.matches(m)).map(|(id, _)| id.clone()).collect();
                    prop_assert_eq!(&got, &want, "list with {}", f);
                    *accepted.lock().unwrap() += 1;
                }
            }
            Ok(())
        })
        .unwrap();
    drop((store, saver, db));
    check_file(&path, Blobs::AllPresent).unwrap();
    let (a, r) = (*accepted.lock().unwrap(), *refused.lock().unwrap());
    report("hostile_filters", &[("filters", a + r), ("accepted", a), ("refused", r)]);
}

// ---------------------------------------------------------------------------
// Namespaces and keys

fn label() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-z]{1,6}", 1 => "\\PC{1,8}", 2 => hostile_string()]
}

fn labels_ok(ns: &[String]) -> bool {
    ns.iter().all(|l| !l.is_empty() && !l.contains('.') && !l.contains('\0'))
}

fn namespace_ok(ns: &[String]) -> bool {
    !ns.is_empty() && labels_ok(ns) && ns[0] != "langgraph"
}

fn check_ns_error<T: std::fmt::Debug>(ns: &[String], r: agentstate::Result<T>) -> Result<(), TestCaseError> {
    match r {
        Err(Error::InvalidNamespace(m)) => {
            // LangGraph's messages: they name the namespace or the label.
            prop_assert!(
                m == "Namespace cannot be empty."
                    || m.starts_with("Namespace labels cannot be empty strings.")
                    || m.starts_with("Invalid namespace label ")
                    || m.starts_with("Root label for namespace cannot be \"langgraph\""),
                "{m}"
            );
            Ok(())
        }
        other => Err(TestCaseError::fail(format!("{ns:?}: expected InvalidNamespace, got {other:?}"))),
    }
}

/// Every namespace and key: valid ones round-trip through put, get, search,
/// list_namespaces and delete; invalid ones are refused by every operation
/// with LangGraph's message, and nothing is written.
#[test]
fn hostile_namespaces_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.db");
    let store = Db::open(&path).unwrap().store(StoreConfig::default()).unwrap();
    let (valid, invalid) = (Mutex::new(0u64), Mutex::new(0u64));
    let strategy = (prop::collection::vec(label(), 0..5), prop_oneof!["[a-z]{1,5}", hostile_string()]);
    runner(600)
        .run(&strategy, |(ns, key)| {
            let n: Vec<&str> = ns.iter().map(String::as_str).collect();
            let value = json!({"key": key, "ns": ns});
            let put = store.put(&n, &key, value.clone());
            if !namespace_ok(&ns) {
                check_ns_error(&ns, put)?;
                check_ns_error(&ns, store.get(&n, &key))?;
                check_ns_error(&ns, store.delete(&n, &key))?;
                if !labels_ok(&ns) {
                    check_ns_error(&ns, store.search(Search::new(&n)))?;
                    let opts = ListNamespaces::new().prefix(&ns.clone());
                    check_ns_error(&ns, store.list_namespaces(opts))?;
                }
                *invalid.lock().unwrap() += 1;
                return Ok(());
            }
            put.map_err(|e| TestCaseError::fail(format!("put {ns:?}/{key:?}: {e}")))?;
            let got = store.get(&n, &key).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(got.as_ref().map(|i| &i.value), Some(&value));
            prop_assert_eq!(got.as_ref().map(|i| i.namespace.to_vec()), Some(ns.clone()));
            prop_assert_eq!(got.as_ref().map(|i| &i.key), Some(&key));
            let hits = store
                .search(Search::new(&n).filter(json!({"key": key})).limit(1000))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(
                hits.iter().any(|h| h.item.key == key && h.item.namespace == ns),
                "search misses it"
            );
            let opts = ListNamespaces::new().prefix(&ns.clone()).limit(10_000);
            let listed = store.list_namespaces(opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(listed.iter().any(|l| *l == ns), "list_namespaces misses {:?}: {:?}", ns, listed);
            store.delete(&n, &key).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(store.get(&n, &key).map_err(|e| TestCaseError::fail(e.to_string()))?.is_none());
            *valid.lock().unwrap() += 1;
            Ok(())
        })
        .unwrap();
    drop(store);
    let stats = check_file(&path, Blobs::AllPresent).unwrap();
    assert_eq!(stats.items, 0, "every valid put was deleted again, every invalid one refused");
    let (v, i) = (*valid.lock().unwrap(), *invalid.lock().unwrap());
    report("hostile_namespaces", &[("namespaces", v + i), ("valid", v), ("refused", i)]);
}

// ---------------------------------------------------------------------------
// Values

/// Values: random trees with hostile keys and strings, large strings, and
/// deep nesting around both sides of the limit.
fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => tree(value_key(), 6),
        1 => (100_000usize..400_000).prop_map(|n| json!("z".repeat(n))),
        2 => (100usize..160, any::<bool>(), leaf()).prop_map(|(n, arrays, l)| nested(n, arrays, l)),
        1 => (160usize..400, any::<bool>()).prop_map(|(n, arrays)| nested(n, arrays, json!(1))),
    ]
}

fn store_value_error(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument(m) if m.contains(&MAX_STORED_DEPTH.to_string()))
}

/// Store values and checkpoint channel values, metadata and pending writes:
/// every accepted value reads back exactly; a store value or metadata too
/// deep to be read back is refused with `InvalidArgument` and nothing is
/// written.
#[test]
fn hostile_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let db = Db::open(&path).unwrap();
    let store = db.store(StoreConfig::default()).unwrap();
    let saver = db.checkpointer();
    let counts = Mutex::new([0u64; 4]); // cases, accepted store values, refused store values, refused metadata
    let n = Mutex::new(0u64);
    runner(300)
        .run(&value(), |v| {
            let i = {
                let mut n = n.lock().unwrap();
                *n += 1;
                *n
            };
            // Store: the value sits one level down, in an object.
            let doc = json!({ "v": v });
            let key = format!("k{}", i % 7);
            let before = store.get(&["vals"], &key).map_err(|e| TestCaseError::fail(e.to_string()))?;
            match store.put(&["vals"], &key, doc.clone()) {
                Ok(()) => {
                    prop_assert!(depth(&doc) <= MAX_STORED_DEPTH, "a value of depth {} was accepted", depth(&doc));
                    let got = store.get(&["vals"], &key).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(got.map(|i| i.value), Some(doc.clone()));
                    counts.lock().unwrap()[1] += 1;
                }
                Err(e) => {
                    prop_assert!(depth(&doc) > MAX_STORED_DEPTH && store_value_error(&e), "{e:?} (depth {})", depth(&doc));
                    let after = store.get(&["vals"], &key).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(after, before, "a refused put changed the item");
                    counts.lock().unwrap()[2] += 1;
                }
            }
            // The whole namespace stays searchable.
            store.search(Search::new(&["vals"])).map_err(|e| TestCaseError::fail(e.to_string()))?;

            // Checkpoints: the value as a channel value (inline or blob), in
            // the metadata and as a pending write.
            let thread = format!("t{}", i % 5);
            let mut cp = Checkpoint::new();
            cp.channel_values.insert("c".into(), (v.clone()).into());
            cp.channel_versions.insert("c".into(), (i as i64).into());
            let nv: ChannelVersions = [("c".to_string(), (i as i64).into())].into();
            let meta = Metadata::new().with("m", v.clone());
            let config = match saver.put(&CheckpointConfig::thread(&thread), &cp, &meta, &nv) {
                Ok(c) => c,
                Err(e) => {
                    prop_assert!(
                        depth(&json!({"m": v})) > MAX_STORED_DEPTH
                            && matches!(&e, Error::InvalidArgument(m) if m.contains(&MAX_STORED_DEPTH.to_string())),
                        "{e:?}"
                    );
                    counts.lock().unwrap()[3] += 1;
                    // Without the metadata.
                    saver.put(&CheckpointConfig::thread(&thread), &cp, &Metadata::new(), &nv).map_err(|e| TestCaseError::fail(e.to_string()))?
                }
            };
            saver.put_writes(&config, &[("w", v.clone())], "task", "").map_err(|e| TestCaseError::fail(e.to_string()))?;
            let t = saver.get_tuple(&config).map_err(|e| TestCaseError::fail(e.to_string()))?.expect("just put");
            prop_assert_eq!(&t.checkpoint.channel_values["c"], &v);
            prop_assert_eq!(&t.pending_writes[0].value, &v);
            if let Some(m) = t.metadata.get("m") {
                // Top-level NULs are stripped from metadata strings, as LangGraph does.
                let want = match &v {
                    Value::String(s) => Value::String(s.replace('\0', "")),
                    other => other.clone(),
                };
                prop_assert_eq!(m, &want);
            }
            let listed = saver.list(&ListQuery::thread(&thread)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(listed.len(), 1);
            saver.delete_thread(&thread).map_err(|e| TestCaseError::fail(e.to_string()))?;
            counts.lock().unwrap()[0] += 1;
            Ok(())
        })
        .unwrap();
    drop((store, saver, db));
    check_file(&path, Blobs::AllPresent).unwrap();
    let c = *counts.lock().unwrap();
    report(
        "hostile_values",
        &[
            ("values", c[0]),
            ("store_accepted", c[1]),
            ("store_refused_too_deep", c[2]),
            ("metadata_refused_too_deep", c[3]),
        ],
    );
}

// ---------------------------------------------------------------------------
// Field paths

fn field_path() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "$", "text", "a.b", "a[0]", "a[-1]", "a[*]", "a[*].b", "{text,a}", "a.{b,c}", "[", "]", "{", "}",
            "a[", "a]", "a[x]", "a[99999999999999999999]", "..", ".", "a..b", "", "*", "[*]", "{}", "{,}",
            "a.b.c.d.e.f.g", "é", "'", "a[-99999]",
        ])
        .prop_map(String::from),
        1 => hostile_string(),
        1 => "[a-z\\[\\]{}.,*$0-9-]{0,12}",
    ]
}

/// Configured and per-put field paths of any shape: the store opens, puts
/// succeed, each item gets exactly the vectors its paths name, and search
/// works.
#[test]
fn hostile_field_paths() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let db = Db::open(&path).unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    let doc_strategy = tree(prop_oneof![4 => prop::sample::select(vec!["text", "a", "b", "c"]).prop_map(String::from), 1 => value_key()], 4)
        .prop_map(|v| match v {
            Value::Object(m) => Value::Object(m),
            other => json!({"text": "plain", "a": other}),
        });
    let strategy = (
        prop::collection::vec(field_path(), 0..4),
        prop::option::of(prop::collection::vec(field_path(), 0..4)),
        doc_strategy,
        hostile_string(),
    );
    let n = Mutex::new(0u64);
    runner(300)
        .run(&strategy, |(configured, per_put, doc, query)| {
            let counting = std::sync::Arc::new(Counting(Mutex::new(0)));
            let cfg = StoreConfig::default()
                .with_index(IndexConfig::shared(counting.clone()).with_fields(configured.clone()));
            let store =
                db.store(cfg).map_err(|e| TestCaseError::fail(format!("fields {configured:?}: {e}")))?;
            let put = Put::new(&["p"], "k", doc.clone());
            let put = match &per_put {
                Some(p) => put.index_fields(p.clone()),
                None => put,
            };
            store
                .put_with(put)
                .map_err(|e| TestCaseError::fail(format!("put {doc} with {per_put:?}: {e}")))?;
            prop_assert_eq!(
                store.get(&["p"], "k").map_err(|e| TestCaseError::fail(e.to_string()))?.map(|i| i.value),
                Some(doc.clone())
            );
            // Every text the store embedded has its vector.
            let want = std::mem::take(&mut *counting.0.lock().unwrap());
            let got: usize = raw
                .query_row("SELECT COUNT(*) FROM store_vectors WHERE prefix = 'p' AND key = 'k'", [], |r| {
                    r.get::<_, i64>(0)
                })
                .unwrap() as usize;
            prop_assert_eq!(got, want, "vectors for {} with {:?}/{:?}", doc, configured, per_put);
            store.search(Search::new(&["p"]).query(query)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            *n.lock().unwrap() += 1;
            Ok(())
        })
        .unwrap();
    drop((db, raw));
    check_file(&path, Blobs::AllPresent).unwrap();
    report("hostile_field_paths", &[("cases", *n.lock().unwrap())]);
}

// ---------------------------------------------------------------------------
// Vectors

#[derive(Clone, Copy, Debug)]
enum Behaviour {
    Good,
    Zero,
    WrongDims(usize),
    Nan,
    Inf,
    TooFew,
    TooMany,
    Fails,
}

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        3 => Just(Behaviour::Good),
        1 => Just(Behaviour::Zero),
        1 => prop_oneof![0usize..8, 9usize..64].prop_map(Behaviour::WrongDims),
        1 => Just(Behaviour::Nan),
        1 => Just(Behaviour::Inf),
        1 => Just(Behaviour::TooFew),
        1 => Just(Behaviour::TooMany),
        1 => Just(Behaviour::Fails),
    ]
}

const DIMS: usize = 8;

/// The built-in embedder, counting the texts it embeds for documents.
struct Counting(Mutex<usize>);

impl Embedder for Counting {
    fn name(&self) -> &str {
        "counting-hash"
    }
    fn dims(&self) -> usize {
        16
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        *self.0.lock().unwrap() += texts.len();
        let e = HashEmbedder::new(16)?;
        Ok(texts.iter().map(|t| e.embed(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(HashEmbedder::new(16)?.embed(text))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An embedder that misbehaves on demand.
struct Hostile {
    docs: Mutex<Behaviour>,
    query: Mutex<Behaviour>,
}

impl Hostile {
    fn vectors(b: Behaviour, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        let good = HashEmbedder::new(DIMS).unwrap();
        let mut out: Vec<Vec<f32>> = texts.iter().map(|t| good.embed(t)).collect();
        match b {
            Behaviour::Good => {}
            Behaviour::Zero => out.iter_mut().for_each(|v| v.iter_mut().for_each(|x| *x = 0.0)),
            Behaviour::WrongDims(n) => out.iter_mut().for_each(|v| v.resize(n, 0.5)),
            Behaviour::Nan => out.iter_mut().for_each(|v| v[0] = f32::NAN),
            Behaviour::Inf => out.iter_mut().for_each(|v| v[DIMS - 1] = f32::NEG_INFINITY),
            Behaviour::TooFew => {
                out.pop();
            }
            Behaviour::TooMany => out.push(vec![0.1; DIMS]),
            Behaviour::Fails => return Err("the model is down".into()),
        }
        Ok(out)
    }
}

impl Embedder for Hostile {
    fn name(&self) -> &str {
        "hostile"
    }
    fn dims(&self) -> usize {
        DIMS
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Hostile::vectors(*self.docs.lock().unwrap(), texts)
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        let mut v = Hostile::vectors(*self.query.lock().unwrap(), &[text.to_string()])?;
        Ok(v.pop().unwrap_or_default())
    }
}

/// What a misbehaving embedder must turn into.
fn expect_embedder_error(b: Behaviour, r: &agentstate::Result<()>) -> Result<(), TestCaseError> {
    match (b, r) {
        (Behaviour::Good | Behaviour::Zero, Ok(())) => Ok(()),
        (Behaviour::WrongDims(n), Err(Error::DimensionMismatch { expected, got })) => {
            prop_assert_eq!((*expected, *got), (DIMS, n));
            Ok(())
        }
        (Behaviour::Nan | Behaviour::Inf, Err(Error::Embedding { message: m, .. })) => {
            prop_assert!(m.contains("NaN or infinity"), "{m}");
            Ok(())
        }
        (Behaviour::TooFew | Behaviour::TooMany, Err(Error::Embedding { message: m, .. })) => {
            prop_assert!(m.contains("vectors for"), "{m}");
            Ok(())
        }
        (Behaviour::Fails, Err(Error::Embedding { message: m, .. })) if m.contains("the model is down") => {
            Ok(())
        }
        (b, r) => Err(TestCaseError::fail(format!("embedder {b:?}: got {r:?}"))),
    }
}

/// A custom embedder returning wrong dimensions, NaN, infinities, zero
/// vectors, too few or too many vectors, or failing: puts and searches give
/// the typed error (`DimensionMismatch`, `Embedding`) and write nothing;
/// zero vectors are stored and never scored.
#[test]
fn hostile_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vec.db");
    let db = Db::open(&path).unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    let embedder = std::sync::Arc::new(Hostile {
        docs: Mutex::new(Behaviour::Good),
        query: Mutex::new(Behaviour::Good),
    });
    let cfg = IndexConfig::shared(embedder.clone()).with_fields(["text", "more"]);
    let store = db.store(StoreConfig::default().with_index(cfg)).unwrap();

    let model: Mutex<BTreeMap<String, Value>> = Mutex::default();
    let tally = Mutex::new(BTreeMap::<String, u64>::new());
    let strategy = (behaviour(), behaviour(), 0usize..6, "[a-z ]{0,20}", any::<bool>(), "[a-z ]{0,10}");
    runner(400)
        .run(&strategy, |(docs, query, key, text, two, q)| {
            *embedder.docs.lock().unwrap() = docs;
            *embedder.query.lock().unwrap() = query;
            let key = format!("k{key}");
            let doc = if two {
                json!({"text": text, "more": format!("{text} more")})
            } else {
                json!({"text": text})
            };
            let vectors_before: i64 =
                raw.query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0)).unwrap();
            let put = store.put(&["v"], &key, doc.clone());
            expect_embedder_error(docs, &put)?;
            let mut model = model.lock().unwrap();
            if put.is_ok() {
                model.insert(key.clone(), doc.clone());
            } else {
                let vectors_after: i64 =
                    raw.query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0)).unwrap();
                prop_assert_eq!(vectors_after, vectors_before, "a refused put wrote vectors");
            }
            let got =
                store.get(&["v"], &key).map_err(|e| TestCaseError::fail(e.to_string()))?.map(|i| i.value);
            prop_assert_eq!(got.as_ref(), model.get(&key));
            let search = store.search(Search::new(&["v"]).query(q).limit(100));
            // A query is one vector: "too few" is none at all (an empty
            // vector), "too many" is one good vector.
            let as_query = match query {
                Behaviour::TooFew => Behaviour::WrongDims(0),
                Behaviour::TooMany => Behaviour::Good,
                other => other,
            };
            let outcome = match &search {
                Ok(_) => Ok(()),
                Err(e) => Err(clone_err(e)),
            };
            expect_embedder_error(as_query, &outcome)?;
            if let Ok(hits) = search {
                prop_assert_eq!(hits.len(), model.len());
                if matches!(query, Behaviour::Zero) {
                    prop_assert!(hits.iter().all(|h| h.score.is_none()), "a zero query scored items");
                }
                for h in &hits {
                    prop_assert!(
                        h.score.is_none_or(|s| s.is_finite() && (-1.0001..=1.0001).contains(&s)),
                        "{:?}",
                        h.score
                    );
                }
            }
            *tally
                .lock()
                .unwrap()
                .entry(format!("{docs:?}").split('(').next().unwrap().to_string())
                .or_default() += 1;
            Ok(())
        })
        .unwrap();
    drop((store, db, raw));
    check_file(&path, Blobs::AllPresent).unwrap();
    let t = tally.lock().unwrap();
    let figures: Vec<(&str, u64)> = t.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    report("hostile_vectors", &[("cases", t.values().sum())]);
    report("hostile_vectors (put embedder behaviour)", &figures);
}

/// Rebuilds the error (agentstate's `Error` is not `Clone`).
fn clone_err(e: &Error) -> Error {
    match e {
        Error::DimensionMismatch { expected, got } => {
            Error::DimensionMismatch { expected: *expected, got: *got }
        }
        Error::Embedding { message, .. } => Error::Embedding { message: message.clone(), source: None },
        other => Error::InvalidArgument(format!("{other:?}")),
    }
}
