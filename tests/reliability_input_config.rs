//! Hostile configs, ids and numbers, property-tested through the public API
//! (as `reliability_input.rs` does for filters, namespaces, values and
//! vectors): configs from arbitrary JSON, empty ids, extreme limits,
//! offsets, depths, TTLs, retention numbers and index dimensions. Each is
//! accepted or refused with its typed error, never a panic.
//!
//! `AGENTSTATE_SOAK=1` multiplies the cases by 20.

mod common;

use std::sync::Mutex;

use agentstate::checkpoint::{ChannelVersions, Retention};
use std::time::{Duration, SystemTime};

use agentstate::store::{IndexConfig, ListNamespaces, Put, Search};
use agentstate::{Checkpoint, CheckpointConfig, Db, Error, ListQuery, Metadata, StoreConfig};
use common::hostile::*;
use common::report;
use proptest::prelude::*;
use serde_json::json;

/// The thread `hostile_configs_ids_and_numbers` lists; the random thread ids
/// it puts and deletes skip this one.
const LISTED: &str = "t";

// ---------------------------------------------------------------------------
// Configs, ids and numbers

/// Configs from arbitrary JSON, prune strategies from arbitrary text, empty
/// thread and checkpoint ids, and extreme limits, offsets, depths and TTLs:
/// each is accepted or refused with its typed error, never a panic.
#[test]
fn hostile_configs_ids_and_numbers() {
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer();
    let store = db.store(StoreConfig::default()).unwrap();
    store.put(&["a", "b"], "k", json!({"x": 1})).unwrap();
    // TTL puts go to a file of their own, so that the namespaces above stay
    // ["a", "b"] alone.
    let ttl_store = Db::open_in_memory().unwrap().store(StoreConfig::default()).unwrap();
    let t_id = saver
        .put(&CheckpointConfig::thread(LISTED), &Checkpoint::new(), &Metadata::new(), &ChannelVersions::new())
        .unwrap()
        .checkpoint_id
        .unwrap();
    let n = Mutex::new(0u64);
    let strategy = (
        tree(
            prop_oneof![
                prop::sample::select(vec![
                    "configurable",
                    "thread_id",
                    "checkpoint_ns",
                    "checkpoint_id",
                    "metadata"
                ])
                .prop_map(String::from),
                value_key()
            ],
            3,
        ),
        hostile_string(),
        prop_oneof![Just(usize::MAX), Just(0usize), 0usize..5, any::<usize>()],
        prop_oneof![Just(usize::MAX), Just(0usize), 0usize..5, any::<usize>()],
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(-1.0),
            Just(0.0),
            Just(1e300),
            Just(f64::MIN_POSITIVE),
            any::<f64>()
        ],
    );
    runner(500)
        .run(&strategy, |(config, text, a, b, ttl)| {
            match CheckpointConfig::from_json(&config) {
                Ok(c) => {
                    // A config that parsed can be used (an empty thread id is refused).
                    match saver.get_tuple(&c) {
                        Ok(_) => prop_assert!(!c.thread_id.is_empty()),
                        Err(Error::InvalidConfig(_)) => prop_assert!(c.thread_id.is_empty()),
                        Err(e) => return Err(TestCaseError::fail(format!("{config}: {e:?}"))),
                    }
                }
                Err(Error::InvalidConfig(m)) => prop_assert!(!m.is_empty()),
                Err(e) => return Err(TestCaseError::fail(format!("{config}: {e:?}"))),
            }
            match text.parse::<agentstate::PruneStrategy>() {
                Ok(_) => prop_assert!(text == "keep_latest" || text == "delete"),
                Err(Error::InvalidArgument(m)) => prop_assert!(m.contains("prune strategy")),
                Err(e) => return Err(TestCaseError::fail(format!("{e:?}"))),
            }
            // Any thread or checkpoint id text (but the listed thread's
            // own id, which the put-and-delete below would remove).
            prop_assume!(text != LISTED);
            let cp = Checkpoint::with_id(text.clone());
            match saver.put(&CheckpointConfig::thread(&text), &cp, &Metadata::new(), &ChannelVersions::new())
            {
                Ok(c) => {
                    let t = saver.get_tuple(&c).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(t.map(|t| t.checkpoint.id.clone()), Some(text.clone()));
                    saver.delete_thread(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                Err(Error::InvalidConfig(_)) | Err(Error::InvalidArgument(_)) => {
                    prop_assert!(text.is_empty())
                }
                Err(e) => return Err(TestCaseError::fail(format!("{e:?}"))),
            }
            // Limits and offsets: the store holds one item in ["a", "b"].
            let hits = store
                .search(Search::new(&["a"]).limit(a).offset(b))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(hits.len(), usize::from(a > 0 && b == 0));
            let ab = ["a".to_string(), "b".to_string()];
            // `max_depth(d)` cuts ["a", "b"] to its first d labels; then
            // offset, then limit.
            for (depth, limit, offset) in [(a, b, a), (b, a, 0)] {
                let opts = ListNamespaces::new().max_depth(depth).limit(limit).offset(offset);
                let got: Vec<Vec<String>> = store
                    .list_namespaces(opts)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?
                    .into_iter()
                    .map(|ns| ns.into_labels())
                    .collect();
                let want: Vec<Vec<String>> =
                    if offset == 0 && limit > 0 { vec![ab[..depth.min(2)].to_vec()] } else { vec![] };
                prop_assert_eq!(got, want, "max_depth {} limit {} offset {}", depth, limit, offset);
            }
            // Thread LISTED holds one checkpoint; `before` is exclusive.
            let q = ListQuery { limit: Some(a), before: Some(text.clone()), ..ListQuery::all() };
            let listed = saver.list(&q).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let ids: Vec<&str> = listed.iter().map(|c| c.checkpoint.id.as_str()).collect();
            let want: Vec<&str> =
                if a > 0 && t_id.as_str() < text.as_str() { vec![t_id.as_str()] } else { vec![] };
            prop_assert_eq!(ids, want, "limit {} before {:?}", a, text);
            // TTLs are Durations: a negative or NaN number of minutes cannot
            // be built; one over MAX_TTL is refused by the store. An accepted
            // one is the item's expiry, to the second.
            let store = &ttl_store;
            let before = SystemTime::now();
            let put = match Duration::try_from_secs_f64(ttl * 60.0) {
                Ok(d) => store.put_with(Put::new(&["ttl"], "k", json!({"ttl": ttl})).ttl(d)),
                Err(e) => Err(Error::InvalidArgument(e.to_string())),
            };
            let valid = (0.0..=1e9).contains(&ttl);
            match put {
                Ok(()) => {
                    prop_assert!(valid);
                    let item = store.get(&["ttl"], "k").map_err(|e| TestCaseError::fail(e.to_string()))?;
                    if ttl * 60.0 >= 2.0 {
                        let item =
                            item.ok_or_else(|| TestCaseError::fail(format!("ttl {ttl}: item gone")))?;
                        prop_assert_eq!(&item.value, &json!({"ttl": ttl}));
                        let expires = item.expires_at.ok_or_else(|| TestCaseError::fail("no expiry"))?;
                        let lo = before + Duration::from_secs_f64(ttl * 60.0) - Duration::from_secs(2);
                        let hi =
                            SystemTime::now() + Duration::from_secs_f64(ttl * 60.0) + Duration::from_secs(2);
                        prop_assert!(
                            lo <= expires && expires <= hi,
                            "ttl {} minutes: expires {:?}",
                            ttl,
                            expires
                        );
                    } else if let Some(item) = item {
                        // Expires within two seconds, or has already.
                        prop_assert_eq!(&item.value, &json!({"ttl": ttl}));
                    }
                }
                Err(Error::InvalidArgument(m)) => {
                    prop_assert!(!valid, "{m}");
                    // Refused before anything was written: the last valid
                    // put (if any) is still there, untouched.
                    if let Some(item) =
                        store.get(&["ttl"], "k").map_err(|e| TestCaseError::fail(e.to_string()))?
                    {
                        prop_assert!(item.value["ttl"].as_f64().is_some_and(|t| (0.0..=1e9).contains(&t)));
                    }
                }
                Err(e) => return Err(TestCaseError::fail(format!("ttl {ttl}: {e:?}"))),
            }
            *n.lock().unwrap() += 1;
            Ok(())
        })
        .unwrap();
    report("hostile_configs", &[("cases", *n.lock().unwrap())]);
}

/// Retention with ordinary numbers (`keep_last` 0 to 30, ages from zero to
/// a day), applied on demand and on write: the newest checkpoint of a
/// thread always stays, and exactly the documented number of others.
#[test]
fn retention_numbers_keep_the_newest_checkpoint() {
    let keep = prop_oneof![Just(0usize), 1usize..30];
    let age = prop_oneof![
        Just(None),
        Just(Some(Duration::ZERO)),
        Just(Some(Duration::from_millis(500))),
        (1u64..120).prop_map(|s| Some(Duration::from_secs(s))),
        (120u64..86_400).prop_map(|s| Some(Duration::from_secs(s))),
    ];
    retention_cases("retention_numbers", 100, keep.boxed(), age.boxed());
}

/// The same with extreme numbers: `keep_last` up to `usize::MAX`, ages up
/// to `Duration::MAX`.
#[test]
fn hostile_retention_numbers_keep_the_newest_checkpoint() {
    let keep =
        prop_oneof![Just(usize::MAX), Just(usize::MAX - 8), Just(i64::MAX as usize + 1), any::<usize>()];
    let age = prop_oneof![
        Just(None),
        Just(Some(Duration::ZERO)),
        Just(Some(Duration::MAX)),
        Just(Some(Duration::from_secs(u64::MAX / 2))),
        Just(Some(Duration::from_secs(1 << 62))),
    ];
    retention_cases("hostile_retention", 150, keep.boxed(), age.boxed());
}

fn retention_cases(name: &str, cases: u32, keep: BoxedStrategy<usize>, age: BoxedStrategy<Option<Duration>>) {
    let n = Mutex::new(0u64);
    runner(cases)
        .run(&(keep, age), |(keep, age)| {
            let policy = |k: usize| {
                let p = Retention::keep_last(k);
                match age {
                    Some(a) => p.max_age(a),
                    None => p,
                }
            };
            // What stays of 12 checkpoints written just now: the newest
            // `keep` (at least 1); with a max age of under a minute, also
            // fewer (down to the newest alone), depending on how long the
            // writes took.
            let kept = |total: usize| total.min(keep.max(1));
            let short_age = age.is_some_and(|a| a < Duration::from_secs(60));
            let db = Db::open_in_memory().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let saver = db.checkpointer();
            let on_write = db.checkpointer().with_retention(policy(keep));
            let mut heads = [None, None];
            for step in 0..12 {
                for (i, (s, t)) in [(&saver, "demand"), (&on_write, "write")].into_iter().enumerate() {
                    let next = match &heads[i] {
                        None => s.start(&CheckpointConfig::thread(t)),
                        Some(h) => s.step(h),
                    };
                    let tuple = next
                        .set("n", json!(step))
                        .commit()
                        .map_err(|e| TestCaseError::fail(format!("{t}: {e}")))?;
                    heads[i] = Some(tuple);
                }
            }
            let ids = |t: &str| -> Result<Vec<String>, TestCaseError> {
                Ok(saver
                    .list(&ListQuery::thread(t))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?
                    .into_iter()
                    .map(|c| c.checkpoint.id.clone())
                    .collect())
            };
            // On write: never the newest, never below what keep_last allows.
            let written = ids("write")?;
            prop_assert_eq!(
                written.first(),
                heads[1].as_ref().map(|h| &h.checkpoint.id),
                "on write: newest gone"
            );
            prop_assert!(
                short_age || written.len() >= kept(12),
                "on write: {} left, keep {}",
                written.len(),
                keep
            );
            // On demand: exactly the newest `kept`.
            let removed =
                saver.apply_retention(&policy(keep)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let left = ids("demand")?;
            prop_assert_eq!(
                left.first(),
                heads[0].as_ref().map(|h| &h.checkpoint.id),
                "on demand: newest gone"
            );
            if short_age {
                prop_assert!(
                    (1..=kept(12)).contains(&left.len()),
                    "keep {} age {:?}: {}",
                    keep,
                    age,
                    left.len()
                );
            } else {
                prop_assert_eq!(left.len(), kept(12), "keep {} age {:?}", keep, age);
                prop_assert!(removed >= 12 - kept(12));
            }
            *n.lock().unwrap() += 1;
            Ok(())
        })
        .unwrap();
    report(name, &[("cases", *n.lock().unwrap())]);
}

const DIMS_PARENT: &str = "absurd_index_dims_are_refused_before_anything_changes";

/// An index with absurd dimensions is refused with a typed error before
/// anything changes (not a huge allocation that aborts the process). The
/// calls run in a child process limited to 4 GB of address space, so that
/// the bug, while it lasts, cannot take the machine's memory.
#[test]
fn absurd_index_dims_are_refused_before_anything_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dims.db");
    let db = Db::open(&path).unwrap();
    db.store(common::harness::store_config(64)).unwrap().put(&["a"], "k", json!({"text": "tea"})).unwrap();
    drop(db);
    common::harness::run_memory_limited("absurd_dims_child", "AGENTSTATE_DIMS_CHILD", &path);
    // Still 64 dimensions, every vector intact.
    assert!(Db::open(&path).unwrap().store(common::harness::store_config(64)).is_ok());
    common::ops::check_vectors(&path, 64).unwrap();
}

#[test]
#[ignore = "child-process entry point: run by absurd_index_dims_are_refused_before_anything_changes"]
fn absurd_dims_child() {
    let path = common::harness::child_env("AGENTSTATE_DIMS_CHILD", DIMS_PARENT);
    let db = Db::open(&path).unwrap();
    for dims in [1usize << 32, usize::MAX] {
        let refused = IndexConfig::hashed(dims)
            .and_then(|index| db.reindex_store(StoreConfig::new().with_index(index)));
        assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{dims} dims: {refused:?}");
    }
}
