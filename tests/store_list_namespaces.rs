//! `list_namespaces`: recent answers that every writer moves on, expiry
//! while an answer is kept, and a model of listings against the file.

use std::time::Duration;

use agentstate::store::{ListNamespaces, OpResult};
use agentstate::{Db, Store, StoreConfig};
use rusqlite::Connection;
use serde_json::json;

mod store_support;
use store_support::*;

fn names(s: &Store, list: ListNamespaces) -> Vec<String> {
    s.list_namespaces(list).unwrap().iter().map(|n| n.join(".")).collect()
}

/// A lone `list_namespaces` may be answered from recent answers (see
/// `src/store/listing.rs`); every commit moves them on, whoever makes it:
/// this store, another `Db` on the file, or a plain SQLite connection.
#[test]
fn repeated_list_namespaces_see_every_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let s = Db::open(&path).unwrap().store(StoreConfig::default()).unwrap();
    let other = Db::open(&path).unwrap().store(StoreConfig::default()).unwrap();
    let raw = Connection::open(&path).unwrap();
    let all = || ListNamespaces::new().limit(10);
    s.put(&["a"], "k", json!({})).unwrap();
    assert_eq!(names(&s, all()), ["a"]);
    assert_eq!(names(&s, all()), ["a"]);
    s.put(&["b"], "k", json!({})).unwrap();
    assert_eq!(names(&s, all()), ["a", "b"]);
    other.put(&["c"], "k", json!({})).unwrap();
    assert_eq!(names(&s, all()), ["a", "b", "c"]);
    raw.execute("DELETE FROM store WHERE prefix = 'a'", []).unwrap();
    assert_eq!(names(&s, all()), ["b", "c"]);
    assert_eq!(names(&s, all().offset(1)), ["c"]);
    assert_eq!(names(&s, all()), ["b", "c"]);
    other.delete(&["b"], "k").unwrap();
    assert_eq!(names(&s, all()), ["c"]);
    // The same answers as a batch, which reads the file every time.
    let batch = s.batch(vec![all().into(), all().offset(1).into()]).unwrap();
    assert!(matches!(&batch[0], OpResult::Namespaces(n) if n.len() == 1 && n[0] == ["c"]));
    assert!(matches!(&batch[1], OpResult::Namespaces(n) if n.is_empty()));
}

/// Expiry needs no write: a namespace leaves the answer once its last live
/// item expires, also when the answer is repeated, when the namespace was
/// skipped by the offset, and when it is one of several cut to one by
/// `max_depth` (the cut stays while one of them lives).
#[test]
fn repeated_list_namespaces_drop_what_expires_meanwhile() {
    let (_d, s, conn) = literal_store(&[]);
    for ns in ["a", "b", "c", "x.1", "x.2", "y.1", "y.2"] {
        s.put(&ns.split('.').collect::<Vec<_>>(), "k", json!({})).unwrap();
    }
    s.put(&["b"], "k2", json!({})).unwrap();
    // Expire soon: a, x.1, y.1 and one of b's two items; y.2 a bit later.
    let soon = "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1.5 seconds')";
    let later = "strftime('%Y-%m-%d %H:%M:%f', 'now', '+600 seconds')";
    let set = |prefix: &str, key: &str, at: &str| {
        conn.execute(
            &format!("UPDATE store SET expires_at = {at} WHERE prefix = ?1 AND key = ?2"),
            [prefix, key],
        )
        .unwrap();
    };
    for (p, k) in [("a", "k"), ("b", "k"), ("x.1", "k"), ("y.1", "k")] {
        set(p, k, soon);
    }
    set("y.2", "k", later);
    let all = || ListNamespaces::new().limit(20);
    let top = || ListNamespaces::new().max_depth(1).limit(20);
    let skip = || ListNamespaces::new().max_depth(1).offset(1).limit(2);
    for _ in 0..2 {
        assert_eq!(names(&s, all()), ["a", "b", "c", "x.1", "x.2", "y.1", "y.2"]);
        assert_eq!(names(&s, top()), ["a", "b", "c", "x", "y"]);
        assert_eq!(names(&s, skip()), ["b", "c"]);
    }
    std::thread::sleep(Duration::from_millis(2_000));
    for _ in 0..2 {
        assert_eq!(names(&s, all()), ["b", "c", "x.2", "y.2"]);
        assert_eq!(names(&s, top()), ["b", "c", "x", "y"]);
        assert_eq!(names(&s, skip()), ["c", "x"]);
    }
}

/// A store none of whose items expires is listed without reading expiries
/// (each namespace once); the first item with an expiry, wherever it is,
/// makes listings weigh every item's expiry again, in the same snapshot.
#[test]
fn list_namespaces_with_and_without_expiring_items() {
    let (_d, s, conn) = literal_store(&[]);
    for ns in ["a", "b", "b.c", "d"] {
        for key in ["k1", "k2"] {
            s.put(&ns.split('.').collect::<Vec<_>>(), key, json!({})).unwrap();
        }
    }
    let all = || ListNamespaces::new().limit(20);
    let top = || ListNamespaces::new().max_depth(1).limit(20);
    let under_b = || ListNamespaces::new().prefix(&["b"]).limit(20);
    let check = |expect_all: &[&str], expect_top: &[&str], expect_b: &[&str]| {
        // Through a batch too, which never answers from recent answers.
        for _ in 0..2 {
            assert_eq!(names(&s, all()), expect_all);
            assert_eq!(names(&s, top()), expect_top);
            assert_eq!(names(&s, under_b()), expect_b);
        }
        let batch = s.batch(vec![all().into()]).unwrap();
        let OpResult::Namespaces(n) = &batch[0] else { panic!("not namespaces") };
        assert_eq!(n.iter().map(|n| n.join(".")).collect::<Vec<_>>(), expect_all);
    };
    check(&["a", "b", "b.c", "d"], &["a", "b", "d"], &["b", "b.c"]);
    // Every item of "a" and of "b.c" expired, one of "d"'s two.
    for (prefix, key) in [("a", "k1"), ("a", "k2"), ("b.c", "k1"), ("b.c", "k2"), ("d", "k1")] {
        conn.execute(
            "UPDATE store SET expires_at = '2000-01-01 00:00:00.000' WHERE prefix = ?1 AND key = ?2",
            [prefix, key],
        )
        .unwrap();
    }
    check(&["b", "d"], &["b", "d"], &["b"]);
    // Expiring later is alive; gone again when no item expires.
    conn.execute("UPDATE store SET expires_at = '9999-01-01 00:00:00.000' WHERE prefix = 'a'", []).unwrap();
    check(&["a", "b", "d"], &["a", "b", "d"], &["b"]);
    conn.execute("UPDATE store SET expires_at = NULL", []).unwrap();
    check(&["a", "b", "b.c", "d"], &["a", "b", "d"], &["b", "b.c"]);
}

mod list_namespaces_model {
    use super::*;
    use proptest::prelude::*;

    /// Labels that sort around the `.` separator: `-` and ` ` sort below it.
    const LABELS: [&str; 5] = ["a", "a-b", "a b", "b", "ab"];

    /// One step of a store's life between listings.
    #[derive(Clone, Debug)]
    enum Act {
        /// Put item `key` in the namespace (indexes into LABELS).
        Put(Vec<usize>, u8),
        /// Delete it.
        Delete(Vec<usize>, u8),
        /// Expire it (its `expires_at` in the past, by another connection).
        Expire(Vec<usize>, u8),
        /// List twice with nothing in between (the second may be a recent
        /// answer): (prefix, max_depth, offset, limit).
        List(Option<Vec<usize>>, Option<usize>, usize, usize),
    }

    /// A query: (prefix, max_depth, offset, limit).
    type Query = (Option<&'static [usize]>, Option<usize>, usize, usize);

    /// A few queries, asked again and again between writes.
    const QUERIES: [Query; 4] =
        [(None, None, 0, 5), (Some(&[0]), None, 0, 5), (None, Some(1), 0, 5), (None, None, 1, 2)];

    fn act() -> impl Strategy<Value = Act> {
        let ns = || prop::collection::vec(0..LABELS.len(), 1..4);
        prop_oneof![
            (ns(), 0..3u8).prop_map(|(n, k)| Act::Put(n, k)),
            (ns(), 0..3u8).prop_map(|(n, k)| Act::Delete(n, k)),
            (ns(), 0..3u8).prop_map(|(n, k)| Act::Expire(n, k)),
            (
                prop::option::of(prop::collection::vec(0..LABELS.len(), 0..3)),
                prop::option::of(0..4usize),
                0..3usize,
                1..6usize
            )
                .prop_map(|(p, d, o, l)| Act::List(p, d, o, l)),
            (0..QUERIES.len()).prop_map(|q| {
                let (p, d, o, l) = QUERIES[q];
                Act::List(p.map(<[usize]>::to_vec), d, o, l)
            }),
            (0..QUERIES.len()).prop_map(|q| {
                let (p, d, o, l) = QUERIES[q];
                Act::List(p.map(<[usize]>::to_vec), d, o, l)
            }),
        ]
    }

    fn labels(n: &[usize]) -> Vec<String> {
        n.iter().map(|&i| LABELS[i].to_string()).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever happens between listings (puts and deletes by the store,
        /// expiries written by another connection), a lone list_namespaces,
        /// asked twice, answers what a batch (which reads the file) answers,
        /// and what a model of the live items gives.
        #[test]
        fn repeated_lists_match_the_file_and_a_model(acts in prop::collection::vec(act(), 1..24)) {
            let (_d, s, conn) = literal_store(&[]);
            let mut live: std::collections::BTreeSet<(Vec<String>, u8)> = Default::default();
            for a in acts {
                match a {
                    Act::Put(n, k) => {
                        s.put(&labels(&n), &format!("k{k}"), json!({})).unwrap();
                        live.insert((labels(&n), k));
                    }
                    Act::Delete(n, k) => {
                        s.delete(&labels(&n), &format!("k{k}")).unwrap();
                        live.remove(&(labels(&n), k));
                    }
                    Act::Expire(n, k) => {
                        conn.execute(
                            "UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE prefix = ?1 AND key = ?2",
                            [labels(&n).join("."), format!("k{k}")],
                        )
                        .unwrap();
                        live.remove(&(labels(&n), k));
                    }
                    Act::List(prefix, depth, offset, limit) => {
                        let mut list = ListNamespaces::new().offset(offset).limit(limit);
                        if let Some(p) = &prefix {
                            list = list.prefix(&labels(p));
                        }
                        if let Some(d) = depth {
                            list = list.max_depth(d);
                        }
                        let prefix = prefix.map(|p| labels(&p));
                        let mut want: Vec<Vec<String>> = live
                            .iter()
                            .map(|(n, _)| n)
                            .filter(|n| prefix.as_ref().is_none_or(|p| n.starts_with(p)))
                            .map(|n| match depth { Some(d) => n.iter().take(d).cloned().collect(), None => n.clone() })
                            .collect();
                        want.sort();
                        want.dedup();
                        let want: Vec<Vec<String>> = want.into_iter().skip(offset).take(limit).collect();
                        let got = |s: &Store| -> Vec<Vec<String>> {
                            s.list_namespaces(list.clone()).unwrap().into_iter().map(|n| n.to_vec()).collect()
                        };
                        prop_assert_eq!(got(&s), want.clone());
                        prop_assert_eq!(got(&s), want.clone());
                        let batch = s.batch(vec![list.clone().into(), list.clone().into()]).unwrap();
                        for r in batch {
                            let OpResult::Namespaces(n) = r else { panic!("not namespaces") };
                            let n: Vec<Vec<String>> = n.into_iter().map(|n| n.to_vec()).collect();
                            prop_assert_eq!(n, want.clone());
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// list_namespaces returns the distinct namespaces (cut to max_depth)
        /// that match every condition, in tuple order, then offset and limit,
        /// whatever bytes the labels hold.
        #[test]
        fn list_namespaces_pages_follow_tuple_order(
            nss in prop::collection::btree_set(prop::collection::vec(0..LABELS.len(), 1..4), 1..12),
            prefix in prop::option::of(prop::collection::vec(0..LABELS.len(), 0..3)),
            suffix in prop::option::of(0..LABELS.len()),
            depth in prop::option::of(0..4usize),
            offset in 0..4usize,
            limit in 1..8usize,
        ) {
            let s = plain();
            let nss: Vec<Vec<String>> =
                nss.iter().map(|n| n.iter().map(|&i| LABELS[i].to_string()).collect()).collect();
            for ns in &nss {
                s.put(ns, "k", json!({})).unwrap();
            }
            let mut list = ListNamespaces::new().offset(offset).limit(limit);
            let prefix: Option<Vec<String>> = prefix.map(|p| p.iter().map(|&i| LABELS[i].to_string()).collect());
            if let Some(p) = &prefix {
                list = list.prefix(p);
            }
            if let Some(x) = suffix {
                list = list.suffix(&[LABELS[x]]);
            }
            if let Some(d) = depth {
                list = list.max_depth(d);
            }
            let mut want: Vec<Vec<String>> = nss
                .iter()
                .filter(|n| prefix.as_ref().is_none_or(|p| n.starts_with(p)))
                .filter(|n| suffix.is_none_or(|x| n.last().map(String::as_str) == Some(LABELS[x])))
                .map(|n| match depth { Some(d) => n.iter().take(d).cloned().collect(), None => n.clone() })
                .collect();
            want.sort();
            want.dedup();
            let want: Vec<Vec<String>> = want.into_iter().skip(offset).take(limit).collect();
            let got: Vec<Vec<String>> =
                s.list_namespaces(list).unwrap().into_iter().map(|n| n.to_vec()).collect();
            prop_assert_eq!(got, want);
        }
    }
}
