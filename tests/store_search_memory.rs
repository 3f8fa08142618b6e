//! Store search under a memory budget: the same results whether the
//! searched prefixes are copied into memory or streamed from the file.

use std::time::{Duration, SystemTime};

use agentstate::store::{IndexConfig, Op, Put, Search};
use agentstate::{Db, Store, StoreConfig};
use serde_json::{json, Value};

mod store_support;
use store_support::*;

use proptest::prelude::*;

const NAMESPACES: [&[&str]; 5] = [&["a"], &["a", "b"], &["a-b"], &["a", "b", "c"], &["z"]];

/// One item: its namespace, vectors (as `Literal` texts; `None` for no
/// index), a category, a number, and whether it has already expired.
type Spec = (usize, Option<(Vec<i8>, Vec<i8>)>, bool, i64, bool);

fn spec() -> impl Strategy<Value = Spec> {
    let v = prop::collection::vec(-2i8..=2, 3);
    (
        0..NAMESPACES.len(),
        prop::option::weighted(0.8, (v.clone(), v)),
        any::<bool>(),
        0..5i64,
        prop::bool::weighted(0.15),
    )
}

fn text(v: &[i8]) -> String {
    v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" ")
}

type Page = Vec<(Vec<String>, String, Value, Option<f64>, SystemTime, SystemTime)>;

fn page(s: &Store, search: Search) -> Page {
    s.search(search.refresh_ttl(false))
        .unwrap()
        .into_iter()
        .map(|h| {
            let it = h.item;
            (it.namespace.to_vec(), it.key, it.value, h.score, it.created_at, it.updated_at)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Searching from the file (a budget too small for the in-memory
    /// copy) gives the same pages as searching in memory: same items,
    /// order, scores (max-pooled), unscored items last, expired items
    /// never, filters applied, offset and limit over distinct items.
    #[test]
    fn a_tiny_search_memory_gives_the_same_pages_as_the_default(
        items in prop::collection::vec(spec(), 0..40),
        searches in prop::collection::vec(
            (0..NAMESPACES.len() + 1, prop::option::of(prop::collection::vec(-2i8..=2, 3)),
             0..3usize, 1..8usize, 0..6usize),
            1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("s.db")).unwrap();
        let index = || IndexConfig::new(Literal(3)).with_fields(["x", "y"]);
        let roomy = db.store(StoreConfig::default().with_index(index())).unwrap();
        let tiny = db.store(StoreConfig::default().with_index(index()).with_search_memory(0)).unwrap();
        let some = db.store(StoreConfig::default().with_index(index()).with_search_memory(3000)).unwrap();
        // Budgets that hold part of the vector rows in memory (the
        // partial copy) and stream the rest.
        let parts: Vec<Store> = [200, 700, 1500]
            .into_iter()
            .map(|m| db.store(StoreConfig::default().with_index(index()).with_search_memory(m)).unwrap())
            .collect();
        let mut ops = vec![];
        for (i, (ns, vectors, cat, n, expired)) in items.iter().enumerate() {
            let mut value = json!({"c": if *cat { "a" } else { "b" }, "n": n});
            let put = match vectors {
                Some((x, y)) => {
                    value["x"] = json!(text(x));
                    value["y"] = json!(text(y));
                    Put::new(NAMESPACES[*ns], format!("k{}", i % 17), value)
                }
                None => Put::new(NAMESPACES[*ns], format!("k{}", i % 17), value).no_index(),
            };
            ops.push(Op::Put(if *expired { put.ttl(Duration::from_millis(1)) } else { put }));
        }
        roomy.batch(ops).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        for (prefix, query, filter, limit, offset) in searches {
            let mut search = match prefix {
                0 => Search::all(),
                p => Search::new(NAMESPACES[p - 1]),
            };
            if let Some(q) = query {
                search = search.query(text(&q));
            }
            match filter {
                1 => search = search.filter(json!({"c": "a"})),
                2 => search = search.filter(json!({"n": {"$gte": 2}})),
                _ => {}
            }
            let search = search.limit(limit).offset(offset);
            let want = page(&roomy, search.clone());
            prop_assert_eq!(&page(&tiny, search.clone()), &want);
            for part in &parts {
                prop_assert_eq!(&page(part, search.clone()), &want);
            }
            prop_assert_eq!(&page(&some, search), &want);
        }
    }
}

/// Deterministic `Literal` texts of `dims` components in [-1, 1], from an
/// xorshift stream seeded with `seed`.
fn literal_vectors(mut seed: u64, dims: usize) -> impl FnMut() -> String {
    move || {
        (0..dims)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                format!("{:.3}", (seed % 2001) as f64 / 1000.0 - 1.0)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A store of `db` indexing field `x` as `dims` literal numbers, with a
/// search memory budget (`None`: the default).
fn literal_store(db: &Db, dims: usize, memory: Option<usize>) -> Store {
    let config = StoreConfig::default().with_index(IndexConfig::new(Literal(dims)).with_fields(["x"]));
    db.store(match memory {
        Some(m) => config.with_search_memory(m),
        None => config,
    })
    .unwrap()
}

/// Searches under a budget that holds part of the vectors, from two
/// threads beside a writer: puts in another namespace (the partial copy
/// stays) and rewrites of searched items with their own values (it
/// reloads, maybe in both threads at once) never change a page, and
/// nothing fails.
#[test]
fn searches_over_budget_from_several_threads_beside_a_writer() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const DIMS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("s.db")).unwrap();
    let roomy = literal_store(&db, DIMS, None);
    let small = literal_store(&db, DIMS, Some(4_000));
    let mut vector = literal_vectors(0x2545_f491_4f6c_dd1d, DIMS);
    let values: Vec<Value> = (0..300).map(|_| json!({"x": vector()})).collect();
    for (i, v) in values.iter().enumerate() {
        roomy.put(&["a"], &format!("k{i:03}"), v.clone()).unwrap();
    }
    let queries: Vec<String> = (0..4).map(|_| vector()).collect();
    let keys_and_scores = |store: &Store, q: &str| -> Vec<(String, Option<f64>)> {
        store
            .search(Search::new(&["a"]).query(q).limit(10))
            .unwrap()
            .into_iter()
            .map(|h| (h.item.key, h.score))
            .collect()
    };
    let want: Vec<_> = queries.iter().map(|q| keys_and_scores(&roomy, q)).collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut rounds = 0;
                while !stop.load(Ordering::SeqCst) || rounds == 0 {
                    for (q, want) in queries.iter().zip(&want) {
                        assert_eq!(&keys_and_scores(&small, q), want);
                    }
                    rounds += 1;
                }
            });
        }
        for n in 0..120 {
            if n % 2 == 0 {
                roomy.put(&["other"], &format!("k{n}"), json!({"x": "1 0 0 0 0 0 0 0"})).unwrap();
            } else {
                let i = (n * 37) % values.len();
                roomy.put(&["a"], &format!("k{i:03}"), values[i].clone()).unwrap();
            }
        }
        stop.store(true, Ordering::SeqCst);
    });
}

/// A budget too small for the namespace's in-memory copy keeps the first
/// vector rows that fit (no values) and streams the rest: pages equal the
/// in-memory ones with 16 dimensions and 600 items, for budgets that hold
/// none, a part, and every row, after writes that move the copy, and for
/// items another namespace sorts among (`a-b` lies between `a` and `a.b`).
#[test]
fn a_partial_copy_in_memory_gives_the_same_pages_as_the_default() {
    const DIMS: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("s.db")).unwrap();
    let roomy = literal_store(&db, DIMS, None);
    let budgets = [0, 2_000, 9_000, 20_000, 60_000];
    let stores: Vec<Store> = budgets.iter().map(|m| literal_store(&db, DIMS, Some(*m))).collect();
    let mut vector = literal_vectors(0x9e37_79b9_7f4a_7c15, DIMS);
    let put = |store: &Store, ns: &[&str], i: usize, x: String| {
        store.put(ns, &format!("k{i:04}"), json!({"x": x, "c": if i % 3 == 0 { "a" } else { "b" }})).unwrap();
    };
    for i in 0..600 {
        let ns: &[&str] = match i % 7 {
            0 => &["a-b"],
            1 => &["a", "c"],
            _ => &["a", "b"],
        };
        put(&roomy, ns, i, vector());
    }
    let queries: Vec<String> = (0..6).map(|_| vector()).collect();
    let check = |round: &str| {
        for q in &queries {
            for (filter, limit, offset) in [(None, 10, 0), (Some(json!({"c": "a"})), 7, 3)] {
                let mut search = Search::new(&["a"]).query(q.clone()).limit(limit).offset(offset);
                if let Some(f) = &filter {
                    search = search.filter(f.clone());
                }
                let want = page(&roomy, search.clone());
                assert_eq!(want.len(), limit, "{round}");
                for (store, budget) in stores.iter().zip(budgets) {
                    assert_eq!(page(store, search.clone()), want, "{round}: budget {budget}");
                }
            }
        }
    };
    check("first");
    // Writes move the copy: a new best item, one deleted, one re-put.
    put(&roomy, &["a", "b"], 9_999, queries[0].clone());
    roomy.delete(&["a", "b"], "k0002").unwrap();
    put(&roomy, &["a", "c"], 1, queries[1].clone());
    check("after writes");
}
