//! Unit tests of the search cache: its budget, its columns and the
//! exactness of pre-scoring.

use super::*;

#[test]
fn dot_matches_naive() {
    let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..19).map(|i| 1.0 - i as f32 * 0.1).collect();
    let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    assert!((dot(&a, &b) - naive).abs() < 1e-4);
}

#[test]
fn the_cache_stays_within_its_budget_across_namespaces() {
    use crate::store::{Put, Store, StoreConfig};
    let db = crate::Db::open_in_memory().unwrap();
    let store: Store = db.store(StoreConfig::new()).unwrap();
    for ns in ["a", "b", "c"] {
        for i in 0..20 {
            store.put_with(Put::new(&[ns], format!("k{i}"), serde_json::json!({"t": "x"}))).unwrap();
        }
    }
    let one = db
        .read(|c| SearchCache::new(usize::MAX).blocks(c, &["a".to_string()], None))
        .map(|fit| match fit {
            Fit::Blocks(b) => b[0].1.bytes,
            Fit::TooLarge(_) => unreachable!("an unbounded cache holds every block"),
        })
        .unwrap();
    // Room for two namespaces: searching a third drops the least
    // recently searched one.
    let cache = SearchCache::new(2 * one + one / 2);
    for ns in ["a", "b", "a", "c"] {
        let got = db.read(|c| cache.blocks(c, &[ns.to_string()], None)).unwrap();
        assert!(matches!(got, Fit::Blocks(b) if b.len() == 1));
        assert!(cache.bytes() <= 2 * one + one / 2);
    }
    let held: HashSet<String> = lock(&cache.state).blocks.keys().cloned().collect();
    assert_eq!(held, HashSet::from(["a".to_string(), "c".to_string()]));
    // A search whose namespaces cannot fit together searches the file.
    assert!(matches!(db.read(|c| cache.blocks(c, &[], None)).unwrap(), Fit::TooLarge(_)));
}

/// Filter columns count against the budget: a block whose columns
/// grew is charged for them at its next use, and other blocks make
/// room.
#[test]
fn filter_columns_count_against_the_budget() {
    use crate::store::{Put, Store, StoreConfig};
    let db = crate::Db::open_in_memory().unwrap();
    let store: Store = db.store(StoreConfig::new()).unwrap();
    let value: serde_json::Map<String, Value> =
        (0..10).map(|f| (format!("f{f}"), Value::String("x".repeat(200)))).collect();
    for ns in ["a", "b"] {
        for i in 0..200 {
            store.put_with(Put::new(&[ns], format!("k{i}"), Value::Object(value.clone()))).unwrap();
        }
    }
    let load = |cache: &SearchCache, ns: &str| match db.read(|c| cache.blocks(c, &[ns.to_string()], None)) {
        Ok(Fit::Blocks(mut b)) => b.remove(0).1,
        _ => unreachable!("both blocks fit"),
    };
    let one = load(&SearchCache::new(usize::MAX), "a").bytes;
    let cache = SearchCache::new(one * 5 / 2);
    let a = load(&cache, "a");
    load(&cache, "b");
    assert_eq!(cache.bytes(), 2 * one);
    let paths: Vec<Vec<String>> = (0..10).map(|f| vec![format!("f{f}")]).collect();
    let refs: Vec<&[String]> = paths.iter().map(Vec::as_slice).collect();
    assert_eq!(a.columns("a", &refs).unwrap().len(), 10);
    assert!(a.held() > 2 * one, "ten columns of 200-byte strings: {} against {one}", a.held());
    // The next use of "a" charges its columns and evicts "b".
    load(&cache, "a");
    let held: HashSet<String> = lock(&cache.state).blocks.keys().cloned().collect();
    assert_eq!(held, HashSet::from(["a".to_string()]));
    assert_eq!(cache.bytes(), a.held());
    // Columns already built are not charged again.
    a.columns("a", &refs[..3]).unwrap();
    load(&cache, "a");
    assert_eq!(cache.bytes(), a.held());
    // A search over both namespaces still fits: the columns of "a" go to
    // make room for "b", and the cache stays within its budget.
    let both = db.read(|c| cache.blocks(c, &[], None)).unwrap();
    assert!(matches!(both, Fit::Blocks(b) if b.len() == 2));
    assert_eq!(a.held(), a.bytes);
    assert_eq!(cache.bytes(), 2 * one);
    // Columns that alone would exceed the budget are dropped at the
    // block's next use.
    let many: Vec<Vec<String>> =
        (0..10).flat_map(|f| [vec![format!("f{f}")], vec![format!("g{f}")]]).collect();
    let refs: Vec<&[String]> = many.iter().map(Vec::as_slice).collect();
    a.columns("a", &refs).unwrap();
    let small = SearchCache::new(one * 3 / 2);
    let a = load(&small, "a");
    a.columns("a", &refs).unwrap();
    assert!(a.held() > one * 3 / 2);
    load(&small, "a");
    assert_eq!(a.held(), a.bytes);
    assert!(small.bytes() <= one * 3 / 2);
}

#[test]
fn top_keeps_the_first_n_sorted() {
    let mut v = vec![5, 1, 4, 2, 3];
    top(&mut v, 3, |a, b| a.cmp(b));
    assert_eq!(v, vec![1, 2, 3]);
    let mut v = vec![2, 1];
    top(&mut v, 0, |a, b| a.cmp(b));
    assert!(v.is_empty());
}

mod exactness {
    use super::super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn block(vectors: &[(u32, Vec<f32>)], items: usize, dims: usize) -> (Connection, Block) {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE store (prefix TEXT, key TEXT, value TEXT, created_at TEXT, updated_at TEXT, ttl_minutes REAL);
             CREATE TABLE store_vectors (prefix TEXT, key TEXT, field_name TEXT, embedding BLOB);",
        )
        .unwrap();
        for i in 0..items {
            conn.execute("INSERT INTO store VALUES ('p', ?1, '{}', 'c', 'u', NULL)", [format!("k{i:03}")])
                .unwrap();
        }
        for (n, (owner, v)) in vectors.iter().enumerate() {
            let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            conn.execute(
                "INSERT INTO store_vectors VALUES ('p', ?1, ?2, ?3)",
                rusqlite::params![format!("k{owner:03}"), format!("f{n}"), blob],
            )
            .unwrap();
        }
        let counts = Counts::of(&conn, "p", Some(dims)).unwrap();
        let block = load(&conn, "p", 1, Some(dims), counts, usize::MAX).unwrap().unwrap();
        (conn, block)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Pre-scoring on quantised rows never changes the page: it equals
        /// the exhaustive exact scan.
        #[test]
        fn pruned_search_equals_exhaustive_scan(
            items in 1usize..40,
            raw in prop::collection::vec((0u32..40, prop::collection::vec(-1.0f32..1.0, 16)), 0..120),
            q in prop::collection::vec(-1.0f32..1.0, 16),
            limit in 1usize..12,
            offset in 0usize..5,
        ) {
            let vectors: Vec<(u32, Vec<f32>)> = raw.into_iter().map(|(o, v)| (o % items as u32, v)).collect();
            let (conn, b) = block(&vectors, items, 16);
            let b = Arc::new(b);
            let mut unit = q.clone();
            prop_assume!(normalise(&mut unit));
            let blocks = vec![("p".to_string(), b.clone())];
            let mut lookups = 0;
            let mut exact = |p: &str, k: &str| {
                lookups += 1;
                exact_score(&conn, p, k, &unit)
            };
            let got: Vec<(String, Option<f64>)> =
                search(&blocks, &HashSet::new(), None, Some(&unit), limit, offset, &mut exact)
                    .unwrap().into_iter().map(|(_, it, s)| (it.key.clone(), s)).collect();
            // Exhaustive: every vector, exact, pooled.
            let mut best: Vec<Option<f32>> = vec![None; items];
            for (o, v) in &vectors {
                let mut v = v.clone();
                if !normalise(&mut v) {
                    continue;
                }
                let s = dot(&unit, &v);
                let e = &mut best[*o as usize];
                *e = Some(e.map_or(s, |x: f32| x.max(s)));
            }
            prop_assert!(lookups <= items);
            let mut scored: Vec<(String, f32)> = best.iter().enumerate()
                .filter_map(|(i, s)| s.map(|s| (format!("k{i:03}"), s))).collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let mut seq: Vec<(String, Option<f64>)> =
                scored.into_iter().map(|(k, s)| (k, Some(f64::from(s)))).collect();
            let unscored: Vec<String> = (0..items).filter(|i| best[*i].is_none()).map(|i| format!("k{i:03}")).collect();
            seq.extend(unscored.into_iter().map(|k| (k, None)));
            let want: Vec<_> = seq.into_iter().skip(offset).take(limit).collect();
            prop_assert_eq!(got, want);
            let _ = json!(null);
        }
    }

    /// Rescoring from the file reads only the items whose bound can still
    /// reach the page: three items close to the query and 300 far from it,
    /// a page of three, read three of them (or a few more), not 303.
    #[test]
    fn only_the_items_that_can_reach_the_page_are_read() {
        let mut vectors: Vec<(u32, Vec<f32>)> = vec![];
        for i in 0..303u32 {
            let mut v = vec![0.0f32; 16];
            if i < 3 {
                v[0] = 1.0;
                v[1] = 0.2 * i as f32;
            } else {
                v[1 + (i as usize % 15)] = 1.0;
                v[0] = 0.1;
            }
            vectors.push((i, v));
        }
        let (conn, b) = block(&vectors, 303, 16);
        let blocks = vec![("p".to_string(), Arc::new(b))];
        let mut q = vec![0.0f32; 16];
        q[0] = 1.0;
        let mut lookups = 0;
        let mut exact = |p: &str, k: &str| {
            lookups += 1;
            exact_score(&conn, p, k, &q)
        };
        let got = search(&blocks, &HashSet::new(), None, Some(&q), 3, 0, &mut exact).unwrap();
        let keys: Vec<&str> = got.iter().map(|(_, it, _)| it.key.as_str()).collect();
        assert_eq!(keys, ["k000", "k001", "k002"]);
        assert!(lookups <= 5, "{lookups} items read from the file");
    }
}
