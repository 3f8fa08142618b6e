//! Model-based property test of the Store: random sequences of put / delete /
//! get / search (plain, filtered, vector) / list_namespaces / TTL expiry /
//! sweep / reopen, checked after every step against a plain in-memory model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use std::time::Duration;

use agentstate::store::{Embedder, HashEmbedder, IndexConfig, ListNamespaces, Put, Search};
use agentstate::{Db, Filter, Store, StoreConfig};
use proptest::prelude::*;
use serde_json::{json, Value};

const NAMESPACES: [&[&str]; 5] = [&["a"], &["a", "b"], &["a", "c"], &["b"], &["b", "x", "y"]];
const KEYS: [&str; 4] = ["k1", "k2", "k3", "k4"];
const WORDS: [&str; 6] = ["apple", "banana", "cherry", "apple pie", "banana split", "cherry tart"];

#[derive(Clone, Debug)]
enum Step {
    Put { ns: usize, key: usize, word: usize, n: i64, ttl: bool },
    Delete { ns: usize, key: usize },
    Get { ns: usize, key: usize },
    Search { prefix: usize, filter: Option<i64>, query: Option<usize> },
    List { prefix: Option<usize> },
    Expire { ns: usize, key: usize },
    Sweep,
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..5usize, 0..4usize, 0..6usize, 0..4i64, any::<bool>())
            .prop_map(|(ns, key, word, n, ttl)| Step::Put { ns, key, word, n, ttl }),
        1 => (0..5usize, 0..4usize).prop_map(|(ns, key)| Step::Delete { ns, key }),
        2 => (0..5usize, 0..4usize).prop_map(|(ns, key)| Step::Get { ns, key }),
        2 => (0..6usize, prop::option::of(0..4i64), prop::option::of(0..6usize))
            .prop_map(|(prefix, filter, query)| Step::Search { prefix, filter, query }),
        1 => prop::option::of(0..5usize).prop_map(|prefix| Step::List { prefix }),
        1 => (0..5usize, 0..4usize).prop_map(|(ns, key)| Step::Expire { ns, key }),
        1 => Just(Step::Sweep),
        1 => Just(Step::Reopen),
    ]
}

type Key = (Vec<String>, String);

#[derive(Default)]
struct Model {
    live: BTreeMap<Key, Value>,
    /// Expired but not yet swept.
    expired: BTreeSet<Key>,
}

/// The model's cosine similarity (f64 sums); `None` for a zero vector.
fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    (na > 0.0 && nb > 0.0).then(|| (dot / (na * nb)) as f32)
}

fn labels(ns: &[&str]) -> Vec<String> {
    ns.iter().map(|s| s.to_string()).collect()
}

fn config() -> StoreConfig {
    StoreConfig::default().with_index(IndexConfig::new(HashEmbedder::new(64).unwrap()).with_fields(["text"]))
}

fn open(path: &Path) -> Store {
    Db::open(path).unwrap().store(config()).unwrap()
}

fn under(ns: &[String], prefix: &[String]) -> bool {
    ns.len() >= prefix.len() && ns[..prefix.len()] == *prefix
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.db");
    let mut store = open(&path);
    let raw = rusqlite::Connection::open(&path).unwrap();
    let embedder = HashEmbedder::new(64).unwrap();
    let mut model = Model::default();
    for s in steps {
        match s {
            Step::Put { ns, key, word, n, ttl } => {
                let value = json!({"text": WORDS[word], "n": n});
                let put = Put::new(NAMESPACES[ns], KEYS[key], value.clone());
                let put = if ttl { put.ttl(Duration::from_secs(3600)) } else { put.no_ttl() };
                store.put_with(put).unwrap();
                let k = (labels(NAMESPACES[ns]), KEYS[key].to_string());
                model.expired.remove(&k);
                model.live.insert(k, value);
            }
            Step::Delete { ns, key } => {
                store.delete(NAMESPACES[ns], KEYS[key]).unwrap();
                let k = (labels(NAMESPACES[ns]), KEYS[key].to_string());
                model.expired.remove(&k);
                model.live.remove(&k);
            }
            Step::Get { ns, key } => {
                let got = store.get(NAMESPACES[ns], KEYS[key]).unwrap().map(|i| i.value);
                let want = model.live.get(&(labels(NAMESPACES[ns]), KEYS[key].to_string())).cloned();
                prop_assert_eq!(got, want);
            }
            Step::Search { prefix, filter, query } => {
                let prefix: Vec<String> = if prefix == 5 { vec![] } else { labels(NAMESPACES[prefix]) };
                let mut opts = Search::new(&prefix).limit(100);
                let f = filter.map(|n| json!({"n": {"$gte": n}}));
                if let Some(f) = &f {
                    opts = opts.filter(f.clone());
                }
                if let Some(q) = query {
                    opts = opts.query(WORDS[q]);
                }
                let got = store.search(opts).unwrap();
                let parsed = f.as_ref().map(|f| Filter::parse(f).unwrap());
                let mut want: Vec<(Key, Option<f64>)> = model
                    .live
                    .iter()
                    .filter(|((ns, _), v)| under(ns, &prefix) && parsed.as_ref().is_none_or(|f| f.matches(v)))
                    .map(|(k, v)| {
                        let score = query.and_then(|q| {
                            let qv = embedder.embed_query(WORDS[q]).unwrap();
                            let dv =
                                embedder.embed_documents(&[v["text"].as_str().unwrap().to_string()]).unwrap();
                            cosine(&qv, &dv[0]).map(f64::from)
                        });
                        (k.clone(), score)
                    })
                    .collect();
                prop_assert_eq!(got.len(), want.len());
                if query.is_some() {
                    // Scores match the model's and never increase.
                    for w in got.windows(2) {
                        prop_assert!(w[0].score >= w[1].score);
                    }
                    want.sort_by(|a, b| a.0.cmp(&b.0));
                    let mut got_sorted: Vec<_> = got.iter().collect();
                    got_sorted.sort_by(|a, b| {
                        (&a.item.namespace[..], &a.item.key).cmp(&(&b.item.namespace[..], &b.item.key))
                    });
                    for (g, (k, s)) in got_sorted.iter().zip(&want) {
                        prop_assert_eq!(&(g.item.namespace.to_vec(), g.item.key.clone()), k);
                        prop_assert!((g.score.unwrap() - s.unwrap()).abs() < 1e-5);
                    }
                } else {
                    let mut got_keys: Vec<Key> =
                        got.iter().map(|i| (i.item.namespace.to_vec(), i.item.key.clone())).collect();
                    got_keys.sort();
                    let want_keys: Vec<Key> = want.into_iter().map(|(k, _)| k).collect();
                    prop_assert_eq!(got_keys, want_keys);
                    prop_assert!(got.iter().all(|i| i.score.is_none()));
                }
            }
            Step::List { prefix } => {
                let want_prefix = prefix.map(|p| labels(NAMESPACES[p])).unwrap_or_default();
                let got: Vec<Vec<String>> = store
                    .list_namespaces(ListNamespaces::new().prefix(&want_prefix))
                    .unwrap()
                    .into_iter()
                    .map(|n| n.into_labels())
                    .collect();
                let mut want: Vec<Vec<String>> = model
                    .live
                    .keys()
                    .map(|(ns, _)| ns.clone())
                    .filter(|ns| under(ns, &want_prefix))
                    .collect();
                want.dedup();
                want.sort();
                want.dedup();
                prop_assert_eq!(got, want);
            }
            Step::Expire { ns, key } => {
                let k = (labels(NAMESPACES[ns]), KEYS[key].to_string());
                let prefix = NAMESPACES[ns].join(".");
                let changed = raw
                    .execute(
                        "UPDATE store SET expires_at = '2000-01-01 00:00:00' \
                         WHERE prefix = ?1 AND key = ?2 AND ttl_minutes IS NOT NULL",
                        [&prefix, KEYS[key]],
                    )
                    .unwrap();
                if changed == 1 && model.live.remove(&k).is_some() {
                    model.expired.insert(k);
                }
            }
            Step::Sweep => {
                prop_assert_eq!(store.sweep_expired().unwrap(), model.expired.len());
                model.expired.clear();
                let orphans: i64 = raw
                    .query_row(
                        "SELECT COUNT(*) FROM store_vectors v WHERE NOT EXISTS \
                         (SELECT 1 FROM store s WHERE s.prefix = v.prefix AND s.key = v.key)",
                        [],
                        |r| r.get(0),
                    )
                    .unwrap();
                prop_assert_eq!(orphans, 0);
            }
            Step::Reopen => {
                drop(store);
                store = open(&path);
            }
        }
    }
    Ok(())
}

/// 200 sequences; 4000 with `AGENTSTATE_SOAK=1`.
fn cases() -> u32 {
    if std::env::var("AGENTSTATE_SOAK").is_ok_and(|v| v != "0") {
        4000
    } else {
        200
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn store_matches_in_memory_model(steps in prop::collection::vec(step(), 1..40)) {
        run(steps)?;
    }
}
