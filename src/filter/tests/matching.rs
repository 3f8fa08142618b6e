//! What each operator matches, checked in the evaluator and in SQL.

use super::*;

#[test]
fn pythons_matching_cases() {
    for f in [
        json!({"x": 1.0}),
        json!({"l": [1, 2]}),
        json!({"missing": null}),
        json!({"x": {"$gt": 0}}),
        json!({"f": {"$lt": 2}}),
        json!({"d.y": 2}),
        json!({"s": {"$gte": "ha"}}),
        json!({"d": {"y": 2}}),
        json!({"l": {"$eq": [1, 2]}}),
        json!({"missing": {"$ne": "q"}}),
    ] {
        assert!(check(&f, &doc()), "{f} should match");
    }
}

#[test]
fn pythons_non_matching_cases() {
    for f in [json!({"x": true}), json!({"b": 1}), json!({"x": {"$gt": "0"}}), json!({"missing": {"$gt": 1}})]
    {
        assert!(!check(&f, &doc()), "{f} should not match");
    }
}

#[test]
fn empty_filter_matches_everything() {
    let f = Filter::parse(&json!({})).unwrap();
    assert!(f.is_empty());
    assert_eq!(f.to_sql("v"), ("1".to_string(), vec![]));
    for d in [doc(), json!({}), json!(null), json!([1]), json!("s"), json!(3)] {
        assert!(check(&json!({}), &d));
    }
    assert!(!Filter::parse(&json!({"x": 1})).unwrap().is_empty());
}

#[test]
fn dotted_keys_are_nested_paths_over_objects_only() {
    let d = json!({"user": {"level": 3, "tags": ["a"]}, "l": [10, {"a": 1}], "s": "x", "a.b": 1});
    assert!(check(&json!({"user.level": 3}), &d));
    assert!(!check(&json!({"user.level": 4}), &d));
    // Arrays are not indexed by path segments: the value is missing.
    assert!(!check(&json!({"l.0": 10}), &d));
    assert!(check(&json!({"l.0": null}), &d));
    assert!(!check(&json!({"l.1.a": 1}), &d));
    assert!(!check(&json!({"user.tags.0": "a"}), &d));
    assert!(!check(&json!({"s.x": {"$exists": true}}), &d));
    // A literal dotted key in the document is not reachable: "a.b" is a path.
    assert!(!check(&json!({"a.b": 1}), &d));
    assert!(check(&json!({"user.level.deeper": null}), &d));
}

#[test]
fn scalar_equality_follows_json_types() {
    let d = json!({"i": 1, "f": 1.0, "t": true, "z": false, "zero": 0, "s": "1", "e": "", "n": null});
    assert!(check(&json!({"i": 1}), &d));
    assert!(check(&json!({"i": 1.0}), &d));
    assert!(check(&json!({"f": 1}), &d));
    assert!(!check(&json!({"i": "1"}), &d));
    assert!(!check(&json!({"s": 1}), &d));
    assert!(check(&json!({"s": "1"}), &d));
    assert!(!check(&json!({"i": true}), &d));
    assert!(!check(&json!({"t": 1}), &d));
    assert!(check(&json!({"t": true}), &d));
    assert!(!check(&json!({"t": false}), &d));
    assert!(check(&json!({"z": false}), &d));
    assert!(!check(&json!({"zero": false}), &d));
    assert!(!check(&json!({"z": 0}), &d));
    assert!(check(&json!({"e": ""}), &d));
    assert!(!check(&json!({"n": ""}), &d));
    assert!(!check(&json!({"n": 0}), &d));
    assert!(!check(&json!({"n": false}), &d));
    assert!(!check(&json!({"i": [1]}), &d));
    assert!(!check(&json!({"s": ["1"]}), &d));
}

#[test]
fn strings_never_equal_the_json_text_of_containers() {
    let d = json!({"l": [1, 2], "o": {"a": 1}});
    assert!(!check(&json!({"l": "[1,2]"}), &d));
    assert!(!check(&json!({"o": "{\"a\":1}"}), &d));
    assert!(!check(&json!({"l": {"$in": ["[1,2]", "x"]}}), &d));
    assert!(!check(&json!({"l": {"$gte": "["}}), &d));
}

#[test]
fn null_matches_null_or_missing() {
    let d = json!({"n": null, "x": 0, "s": "", "d": {}});
    assert!(check(&json!({"n": null}), &d));
    assert!(check(&json!({"missing": null}), &d));
    assert!(check(&json!({"n": {"$eq": null}}), &d));
    assert!(check(&json!({"missing": {"$eq": null}}), &d));
    assert!(!check(&json!({"x": null}), &d));
    assert!(!check(&json!({"s": null}), &d));
    assert!(!check(&json!({"d": null}), &d));
    assert!(check(&json!({"d.x": null}), &d));
    // NULL column / non-object documents: every key is missing.
    assert!(check(&json!({"k": null}), &json!(null)));
    assert!(!check(&json!({"k": 1}), &json!(null)));
    assert!(check(&json!({"k": null}), &json!([1, 2])));
}

#[test]
fn ne_is_exactly_not_eq() {
    let d = json!({"x": 1, "n": null, "s": "a", "l": [1]});
    assert!(check(&json!({"missing": {"$ne": "q"}}), &d));
    assert!(check(&json!({"missing": {"$ne": 1}}), &d));
    assert!(!check(&json!({"x": {"$ne": 1}}), &d));
    assert!(!check(&json!({"x": {"$ne": 1.0}}), &d));
    assert!(check(&json!({"x": {"$ne": 2}}), &d));
    assert!(check(&json!({"x": {"$ne": "1"}}), &d));
    assert!(check(&json!({"x": {"$ne": true}}), &d));
    assert!(check(&json!({"n": {"$ne": 1}}), &d));
    // Operand null: needs a present non-null value.
    assert!(!check(&json!({"missing": {"$ne": null}}), &d));
    assert!(!check(&json!({"n": {"$ne": null}}), &d));
    assert!(check(&json!({"x": {"$ne": null}}), &d));
    assert!(!check(&json!({"l": {"$ne": [1.0]}}), &d));
    assert!(check(&json!({"l": {"$ne": [1, 1]}}), &d));
}

#[test]
fn arrays_and_objects_compare_structurally() {
    let d =
        json!({"l": [1, 2.5, "a", null, true, [1], {"k": 1}], "o": {"a": 1, "b": [1, 2], "c": {"d": null}}});
    assert!(check(&json!({"l": [1.0, 2.5, "a", null, true, [1.0], {"k": 1.0}]}), &d));
    assert!(!check(&json!({"l": [1, 2.5, "a", null, true, [1]]}), &d));
    assert!(!check(&json!({"l": [1, 2.5, "a", null, 1, [1], {"k": 1}]}), &d));
    assert!(!check(&json!({"l": [2.5, 1, "a", null, true, [1], {"k": 1}]}), &d));
    assert!(check(&json!({"o": {"$eq": {"c": {"d": null}, "b": [1.0, 2], "a": 1}}}), &d));
    assert!(!check(&json!({"o": {"$eq": {"c": {"d": null}, "b": [1, 2]}}}), &d));
    assert!(!check(&json!({"o": {"$eq": {"a": 1, "b": [1, 2], "c": {}}}}), &d));
    assert!(!check(&json!({"o": {"$eq": {"a": 1, "b": [1, 2], "c": {"d": null}, "e": null}}}), &d));
    assert!(check(&json!({"l.x": {"$ne": []}}), &d));
    assert!(check(&json!({"e": {"$ne": []}}), &json!({"e": {}})));
    assert!(check(&json!({"e": []}), &json!({"e": []})));
    assert!(!check(&json!({"e": []}), &json!({"e": {}})));
    assert!(check(&json!({"e": {"$eq": {}}}), &json!({"e": {}})));
    assert!(!check(&json!({"e": {"$eq": {}}}), &json!({"e": []})));
    assert!(!check(&json!({"e": {"$eq": {}}}), &json!({"e": {"a": 1}})));
}

#[test]
fn partial_object_match() {
    let d = json!({"d": {"y": 2, "z": {"w": "v"}, "n": null}, "s": "x", "l": [{"y": 2}]});
    assert!(check(&json!({"d": {"y": 2}}), &d));
    assert!(check(&json!({"d": {"y": 2.0, "z": {"w": "v"}}}), &d));
    assert!(check(&json!({"d": {"z.w": "v"}}), &d));
    assert!(check(&json!({"d": {}}), &d));
    assert!(check(&json!({"d": {"z": {}}}), &d));
    assert!(!check(&json!({"s": {}}), &d));
    assert!(!check(&json!({"l": {}}), &d));
    assert!(!check(&json!({"missing": {}}), &d));
    assert!(!check(&json!({"d": {"y": 3}}), &d));
    // The nested value must be an object even when the sub-filter alone
    // would accept a missing key.
    assert!(check(&json!({"d": {"q": null}}), &d));
    assert!(!check(&json!({"s": {"q": null}}), &d));
    assert!(!check(&json!({"missing": {"q": null}}), &d));
    assert!(check(&json!({"d": {"q": {"$ne": 1}}}), &d));
    assert!(!check(&json!({"s": {"q": {"$ne": 1}}}), &d));
    assert!(check(&json!({"d": {"n": null, "y": {"$gte": 2}}}), &d));
    assert!(!check(&json!({"l": {"y": 2}}), &d));
    // Same as the dotted form.
    assert_eq!(
        Filter::parse(&json!({"d": {"y": 2}})).unwrap(),
        Filter::parse(&json!({"d.y": 2})).unwrap(),
        "the implied object check is dropped when the sub-filter needs a present value"
    );
}

#[test]
fn comparisons() {
    let d = json!({"i": 5, "f": 2.5, "s": "m", "t": true, "n": null, "l": [1], "o": {}});
    for (f, want) in [
        (json!({"i": {"$gt": 4}}), true),
        (json!({"i": {"$gt": 5}}), false),
        (json!({"i": {"$gte": 5}}), true),
        (json!({"i": {"$gte": 5.0}}), true),
        (json!({"i": {"$lt": 5.5}}), true),
        (json!({"i": {"$lte": 4.999}}), false),
        (json!({"f": {"$gt": 2}}), true),
        (json!({"f": {"$lt": 3}}), true),
        (json!({"f": {"$lte": 2.5}}), true),
        (json!({"s": {"$gt": "l"}}), true),
        (json!({"s": {"$gt": "m"}}), false),
        (json!({"s": {"$gte": "m"}}), true),
        (json!({"s": {"$lt": "ma"}}), true),
        (json!({"s": {"$lt": "M"}}), false),
        (json!({"s": {"$gt": 1}}), false),
        (json!({"s": {"$lt": 1}}), false),
        (json!({"i": {"$lt": "a"}}), false),
        (json!({"i": {"$gt": "a"}}), false),
        (json!({"t": {"$gte": 1}}), false),
        (json!({"t": {"$lte": 1}}), false),
        (json!({"n": {"$lt": 1}}), false),
        (json!({"n": {"$gt": ""}}), false),
        (json!({"l": {"$gte": 1}}), false),
        (json!({"l": {"$gte": ""}}), false),
        (json!({"o": {"$gt": ""}}), false),
        (json!({"missing": {"$lt": 1}}), false),
        (json!({"missing": {"$gt": ""}}), false),
        (json!({"i": {"$gt": 1, "$lt": 10}}), true),
        (json!({"i": {"$gt": 1, "$lt": 5}}), false),
    ] {
        assert_eq!(check(&f, &d), want, "{f}");
    }
}

#[test]
fn strings_compare_bytewise() {
    let d = json!({"a": "B", "b": "a", "c": "é", "e": "", "z": "a\u{0}b"});
    assert!(check(&json!({"a": {"$lt": "a"}}), &d));
    assert!(check(&json!({"c": {"$gt": "z"}}), &d));
    assert!(check(&json!({"e": {"$lt": "a"}}), &d));
    assert!(check(&json!({"e": {"$gte": ""}}), &d));
    assert!(check(&json!({"z": {"$gt": "a"}}), &d));
    assert!(check(&json!({"z": {"$lt": "a\u{1}"}}), &d));
    assert!(check(&json!({"z": "a\u{0}b"}), &d));
    assert!(!check(&json!({"z": "a"}), &d));
}

#[test]
fn in_and_nin() {
    let d = json!({"x": 1, "s": "a", "t": true, "n": null, "l": [1, 2], "o": {"k": 1}});
    for (f, want) in [
        (json!({"x": {"$in": [3, 1.0]}}), true),
        (json!({"x": {"$in": [3]}}), false),
        (json!({"x": {"$in": ["1", true, [1]]}}), false),
        (json!({"x": {"$in": []}}), false),
        (json!({"x": {"$nin": []}}), true),
        (json!({"s": {"$in": ["b", "a"]}}), true),
        (json!({"s": {"$in": ["b", 1, null]}}), false),
        (json!({"t": {"$in": [1, false]}}), false),
        (json!({"t": {"$in": [false, true]}}), true),
        (json!({"t": {"$in": [true]}}), true),
        (json!({"n": {"$in": [null]}}), true),
        (json!({"missing": {"$in": [null, 1]}}), true),
        (json!({"missing": {"$in": [1, 2]}}), false),
        (json!({"missing": {"$nin": [1, 2]}}), true),
        (json!({"missing": {"$nin": [1, null]}}), false),
        (json!({"x": {"$nin": [1]}}), false),
        (json!({"x": {"$nin": [2, "1"]}}), true),
        (json!({"l": {"$in": [[1, 2.0], 5]}}), true),
        (json!({"l": {"$in": [[2, 1], {"k": 1}]}}), false),
        (json!({"o": {"$in": [[2, 1], {"k": 1.0}]}}), true),
        (json!({"o": {"$in": [{"k": 1.0}]}}), true),
        (json!({"o": {"$nin": [{"k": 2}, [1], null, "x", 3, true]}}), true),
        (json!({"x": {"$in": [null, true, 1, "a", [1], {"a": 1}]}}), true),
        (json!({"s": {"$in": [null, true, 1, "a", [1], {"a": 1}]}}), true),
        (json!({"l": {"$in": [null, true, 1, "a", [1], {"a": 1}]}}), false),
    ] {
        assert_eq!(check(&f, &d), want, "{f}");
    }
    for op in ["$in", "$nin"] {
        for bad in [json!(1), json!("a"), json!(null), json!({"a": 1})] {
            let (key, reason) = err(&json!({"x": { op: bad }}));
            assert_eq!(key, op);
            assert!(reason.contains("expects an array"), "{reason}");
        }
    }
}

#[test]
fn exists() {
    let d = json!({"x": 1, "n": null, "d": {"y": null}});
    assert!(check(&json!({"x": {"$exists": true}}), &d));
    assert!(check(&json!({"n": {"$exists": true}}), &d));
    assert!(check(&json!({"d.y": {"$exists": true}}), &d));
    assert!(!check(&json!({"missing": {"$exists": true}}), &d));
    assert!(check(&json!({"missing": {"$exists": false}}), &d));
    assert!(!check(&json!({"n": {"$exists": false}}), &d));
    assert!(check(&json!({"d.z": {"$exists": false}}), &d));
    for bad in [json!(1), json!("true"), json!(null), json!([true])] {
        let (key, reason) = err(&json!({"x": {"$exists": bad}}));
        assert_eq!(key, "$exists");
        assert!(reason.contains("expects true or false"), "{reason}");
    }
}

#[test]
fn logical_operators_on_filters() {
    let d = json!({"a": 1, "b": 3, "c": "x"});
    for (f, want) in [
        (json!({"$or": [{"a": 1}, {"b": {"$gt": 2}}], "c": "x"}), true),
        (json!({"$or": [{"a": 2}, {"b": {"$gt": 3}}], "c": "x"}), false),
        (json!({"$or": [{"a": 2}, {"b": {"$gt": 2}}], "c": "y"}), false),
        (json!({"$and": [{"a": 1}, {"b": 3}]}), true),
        (json!({"$and": [{"a": 1}, {"b": 4}]}), false),
        (json!({"$and": [{}]}), true),
        (json!({"$or": [{}]}), true),
        (json!({"$not": {"a": 1}}), false),
        (json!({"$not": {"a": 2}}), true),
        (json!({"$not": {}}), false),
        (json!({"$not": {"$not": {"a": 1}}}), true),
        (json!({"$or": [{"$and": [{"a": 1}, {"$not": {"b": 3}}]}, {"$not": {"c": {"$in": ["x"]}}}]}), false),
        (json!({"d": {"$not": {}}}), true),
        (json!({"$or": [{"missing": 1}, {"missing": {"$exists": true}}]}), false),
        (json!({"$not": {"$or": [{"missing": 1}, {"missing": {"$exists": true}}]}}), true),
    ] {
        assert_eq!(check(&f, &d), want, "{f}");
    }
    for f in [
        json!({"$and": []}),
        json!({"$or": []}),
        json!({"$or": {"a": 1}}),
        json!({"$or": [1]}),
        json!({"$and": [{"a": 1}, "b"]}),
        json!({"$not": [{"a": 1}]}),
        json!({"$not": 1}),
    ] {
        let (key, reason) = err(&f);
        assert!(key.starts_with('$'), "{f}: {key}");
        assert!(reason.starts_with(&format!("Invalid filter: {key} expects ")), "{f}: {reason}");
    }
    assert_eq!(err(&json!({"$nor": [{"a": 1}]})), ("$nor".into(), "Unsupported operator: $nor".into()));
    assert_eq!(err(&json!({"$eq": 1})), ("$eq".into(), "Unsupported operator: $eq".into()));
}

#[test]
fn logical_operators_on_conditions() {
    let d = json!({"x": 7, "o": {"a": 1, "b": 2}});
    for (f, want) in [
        (json!({"x": {"$not": {"$gt": 5}}}), false),
        (json!({"x": {"$not": 8}}), true),
        (json!({"x": {"$not": 7.0}}), false),
        (json!({"missing": {"$not": {"$gt": 5}}}), true),
        (json!({"x": {"$or": [1, {"$gt": 6}]}}), true),
        (json!({"x": {"$or": [1, {"$gt": 7}]}}), false),
        (json!({"x": {"$and": [{"$gt": 1}, {"$lt": 8}, {"$ne": 3}]}}), true),
        (json!({"x": {"$and": [{"$gt": 1}, {"$lt": 7}]}}), false),
        (json!({"o": {"$or": [{"a": 2}, {"b": 2}]}}), true),
        (json!({"o": {"$not": {"a": 1}}}), false),
        (json!({"x": {"$not": {"a": 1}}}), true),
        (json!({"x": {"$or": [{"$in": [1, 2]}, {"$exists": false}]}}), false),
    ] {
        assert_eq!(check(&f, &d), want, "{f}");
    }
    let (key, reason) = err(&json!({"x": {"$or": []}}));
    assert_eq!(key, "$or");
    assert_eq!(reason, "Invalid filter for 'x': $or expects a non-empty array of conditions, got an array");
    assert_eq!(err(&json!({"x": {"$and": 1}})).0, "$and");
    assert_eq!(err(&json!({"x": {"$not": {"$bad": 1}}})).0, "$bad");
}

#[test]
fn large_numbers() {
    let big = json!({
        "imax": i64::MAX, "imin": i64::MIN, "umax": u64::MAX, "two63": 1u64 << 63,
        "p53": 9_007_199_254_740_993i64, "f63": 9_223_372_036_854_775_808.0f64,
    });
    for (f, want) in [
        (json!({"imax": i64::MAX}), true),
        (json!({"imax": i64::MAX - 1}), false),
        // Exact integer/float comparisons: i64::MAX < 2^63 as a float.
        (json!({"imax": 9_223_372_036_854_775_808.0f64}), false),
        (json!({"imax": {"$lt": 9_223_372_036_854_775_808.0f64}}), true),
        (json!({"imax": {"$lt": 1u64 << 63}}), true),
        (json!({"imin": -9_223_372_036_854_775_808.0f64}), true),
        (json!({"imin": {"$gte": i64::MIN}}), true),
        (json!({"imin": {"$lt": -9_223_372_036_854_775_807.0f64}}), false),
        (json!({"p53": 9_007_199_254_740_992.0f64}), false),
        (json!({"p53": {"$gt": 9_007_199_254_740_992.0f64}}), true),
        (json!({"p53": 9_007_199_254_740_993i64}), true),
        // Beyond i64 an integer is its nearest f64, as SQLite reads it.
        (json!({"umax": u64::MAX}), true),
        (json!({"umax": 18_446_744_073_709_551_616.0f64}), true),
        (json!({"umax": u64::MAX - 1}), true),
        (json!({"umax": {"$gt": i64::MAX}}), true),
        (json!({"two63": 9_223_372_036_854_775_808.0f64}), true),
        (json!({"two63": {"$gt": i64::MAX}}), true),
        (json!({"f63": 1u64 << 63}), true),
        (json!({"f63": i64::MAX}), false),
        (json!({"umax": {"$in": [1, u64::MAX]}}), true),
        (json!({"imax": {"$in": [1, 9_223_372_036_854_775_808.0f64]}}), false),
        (json!({"l": [u64::MAX]}), false),
    ] {
        assert_eq!(check(&f, &big), want, "{f}");
    }
    let d = json!({"l": [u64::MAX, i64::MIN, 1e300]});
    assert!(check(
        &json!({"l": [18_446_744_073_709_551_616.0f64, -9_223_372_036_854_775_808.0f64, 1e300]}),
        &d
    ));
    assert!(!check(&json!({"l": [u64::MAX, i64::MIN + 1, 1e300]}), &d));
}

#[test]
fn negative_zero_and_fractions() {
    let d = json!({"z": -0.0, "f": 0.1, "i": 0});
    assert!(check(&json!({"z": 0}), &d));
    assert!(check(&json!({"i": -0.0}), &d));
    assert!(check(&json!({"z": {"$gte": 0}}), &d));
    assert!(check(&json!({"f": 0.1}), &d));
    assert!(!check(&json!({"f": 0.30000000000000004 - 0.2}), &d));
}
