//! Parsing: what is a valid filter, and the errors for what is not.

use super::*;

#[test]
fn pythons_error_cases() {
    let (key, reason) = err(&json!({"bad key": 1}));
    assert_eq!(key, "bad key");
    assert_eq!(
        reason,
        "Invalid filter key: 'bad key'. Filter keys must contain only alphanumeric characters, \
         underscores, dots, and hyphens."
    );
    assert_eq!(err(&json!({"x": {"$foo": 1}})), ("$foo".into(), "Unsupported operator: $foo".into()));
    let (key, reason) = err(&json!({"x": {"$gt": 1, "y": 2}}));
    assert_eq!(key, "y");
    assert!(reason.starts_with("Unsupported operator: y "), "{reason}");
    assert!(reason.contains("'x'"), "{reason}");
    // Display is the reason alone.
    let e = Filter::parse(&json!({"x": {"$foo": 1}})).unwrap_err();
    assert_eq!(e.to_string(), "Unsupported operator: $foo");
}

#[test]
fn filter_must_be_an_object() {
    for f in [json!(null), json!(1), json!("x"), json!([{"x": 1}]), json!(true)] {
        let (key, reason) = err(&f);
        assert_eq!(key, "");
        assert!(reason.starts_with("Invalid filter: expected a JSON object, got "), "{reason}");
    }
}

#[test]
fn keys_are_letters_digits_underscores_hyphens_and_dots() {
    for k in [
        "a",
        "A_b-9",
        "1abc",
        "access-level",
        "a.b.c",
        "_",
        "-",
        "123",
        "é",
        "ключ",
        "ключ.значение",
        "名前",
        "٣",
        "Ωmega-2",
    ] {
        Filter::parse(&json!({ k: 1 })).unwrap_or_else(|e| panic!("{k}: {e}"));
    }
    for k in [
        "",
        "bad key",
        "a..b",
        ".a",
        "a.",
        ".",
        "a$",
        "a'b",
        "a\"b",
        "a[0]",
        "a\nb",
        "'; DROP TABLE t;--",
        "ключ значение",
        "a\\b",
        "a\u{200b}b",
        "😀",
        "a\u{0}",
    ] {
        let (key, reason) = err(&json!({ k: 1 }));
        assert_eq!(key, k);
        assert_eq!(
            reason,
            format!(
                "Invalid filter key: '{k}'. Filter keys must contain only alphanumeric characters, \
                 underscores, dots, and hyphens."
            )
        );
        // Also inside partial matches and logical operators.
        assert_eq!(err(&json!({"d": { k: 1 }})).0, k);
        assert_eq!(err(&json!({"$or": [{ k: 1 }]})).0, k);
    }
}

#[test]
fn comparison_operands_must_be_numbers_or_strings() {
    for bad in [json!(true), json!(null), json!([1]), json!({"a": 1})] {
        for op in ["$gt", "$gte", "$lt", "$lte"] {
            let (key, reason) = err(&json!({"x": { op: bad.clone() }}));
            assert_eq!(key, op);
            assert!(reason.contains(op) && reason.contains("'x'"), "{reason}");
            assert!(reason.contains("expects a number or a string"), "{reason}");
        }
    }
}

#[test]
fn unknown_operators_and_mixed_keys() {
    assert_eq!(err(&json!({"x": {"$regex": "a"}})), ("$regex".into(), "Unsupported operator: $regex".into()));
    assert_eq!(err(&json!({"x": {"$": 1}})).1, "Unsupported operator: $");
    assert_eq!(err(&json!({"d": {"y": {"$size": 1}}})).1, "Unsupported operator: $size");
    let (key, reason) = err(&json!({"x": {"y": 2, "$gt": 1}}));
    assert_eq!(key, "y");
    assert_eq!(
        reason,
        "Unsupported operator: y (the operator object for 'x' mixes $ operators with the plain key \
         'y'; use only $ operators, or only plain keys for a partial match)"
    );
    let (key, reason) = err(&json!({"d": {"e": {"$eq": 1, "bad key": 2}}}));
    assert_eq!(key, "bad key");
    assert!(reason.contains("'d.e'"), "{reason}");
    // A `$eq` operand is a literal, `$` keys and all.
    assert!(check(&json!({"x": {"$eq": {"$gt": 1}}}), &json!({"x": {"$gt": 1.0}})));
}

#[test]
fn nesting_limit() {
    fn nested(depth: usize) -> Value {
        // `depth` levels of objects in total, the filter object included.
        let mut v = json!(1);
        for _ in 1..depth {
            v = json!({ "a": v });
        }
        json!({ "a": v })
    }
    let f = nested(MAX_DEPTH);
    let mut d = json!(1);
    for _ in 0..MAX_DEPTH {
        d = json!({ "a": d });
    }
    assert!(check(&f, &d));
    let (key, reason) = err(&nested(MAX_DEPTH + 1));
    assert_eq!(key, "");
    assert_eq!(reason, "Invalid filter: nested more than 32 levels of objects and arrays");
    // Operands count as well.
    let mut op = json!([]);
    for _ in 0..MAX_DEPTH {
        op = json!([op]);
    }
    assert!(err(&json!({"x": {"$eq": op}})).1.contains("nested more than 32"));
    // Logical operators count too.
    let mut f = json!({"a": 1});
    for _ in 0..40 {
        f = json!({ "$not": f });
    }
    assert!(err(&f).1.contains("nested more than 32"));
}

#[test]
fn filters_are_comparable_and_cloneable() {
    let a = Filter::parse(&json!({"a": {"$in": [1, 2]}, "b": {"c": null}})).unwrap();
    assert_eq!(a.clone(), a);
    assert_ne!(a, Filter::parse(&json!({"a": {"$in": [1, 3]}, "b": {"c": null}})).unwrap());
    assert!(format!("{a:?}").contains("Filter"));
}
