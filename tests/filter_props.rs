//! Properties of the filter language through the public API: parsing never
//! panics on any JSON, errors are typed, and the operators obey the laws the
//! documentation states. (The SQL-versus-evaluator differential tests live
//! next to the compiler, in `src/filter.rs`, because `to_sql` is crate-private.)

mod filter_props {
    use agentstate::{Error, Filter};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::select;
    use serde_json::{json, Map, Number, Value};

    fn config(cases: u32) -> ProptestConfig {
        ProptestConfig {
            cases,
            failure_persistence: None,
            // ChaCha dominates the run time of unoptimized test builds.
            rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
            ..ProptestConfig::default()
        }
    }

    fn number() -> BoxedStrategy<Value> {
        prop_oneof![
            3 => (-2i64..=2).prop_map(Value::from),
            1 => select(vec![0.5, 1.0, 2.0, -0.0, f64::MAX, f64::MIN, 5e-324, 1e300]).prop_map(Value::from),
            1 => select(vec![i64::MAX, i64::MIN, 1 << 53]).prop_map(Value::from),
            1 => select(vec![u64::MAX, 1 << 63]).prop_map(Value::from),
            1 => any::<i64>().prop_map(Value::from),
            1 => any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ]
        .boxed()
    }

    fn string() -> BoxedStrategy<Value> {
        select(vec!["", "a", "b", "A", "é", "1", "[1]", "'; DROP TABLE x;--", "\"", "\\", "\u{0}", "$gt"])
            .prop_map(Value::from)
            .boxed()
    }

    fn scalar() -> BoxedStrategy<Value> {
        prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::Bool), number(), string()].boxed()
    }

    fn key() -> BoxedStrategy<String> {
        select(vec!["a", "b", "c"]).prop_map(String::from).boxed()
    }

    /// Plain JSON over the keys a, b, c.
    fn value() -> BoxedStrategy<Value> {
        scalar()
            .prop_recursive(3, 16, 3, |inner| {
                prop_oneof![
                    vec(inner.clone(), 0..3).prop_map(Value::Array),
                    vec((key(), inner), 0..3).prop_map(|kv| Value::Object(kv.into_iter().collect())),
                ]
            })
            .boxed()
    }

    fn doc() -> BoxedStrategy<Value> {
        vec((key(), value()), 0..=3).prop_map(|kv| Value::Object(kv.into_iter().collect())).boxed()
    }

    fn path() -> BoxedStrategy<String> {
        prop_oneof![2 => key(), 1 => (key(), key()).prop_map(|(a, b)| format!("{a}.{b}"))].boxed()
    }

    /// Any JSON at all, biased towards things that look like filters:
    /// operators, bad keys, quotes and SQL in keys and strings.
    fn wild() -> BoxedStrategy<Value> {
        let keys = select(vec![
            "a",
            "b.c",
            "a..b",
            ".a",
            "a.",
            "",
            " ",
            "bad key",
            "$eq",
            "$ne",
            "$gt",
            "$gte",
            "$lt",
            "$lte",
            "$in",
            "$nin",
            "$exists",
            "$and",
            "$or",
            "$not",
            "$foo",
            "$",
            "$$",
            "x.$gt",
            "'; DROP TABLE x;--",
            "\") OR 1=1 --",
            "\"",
            "a\"b",
            "a'b",
            "a\\b",
            "é",
            "\u{0}",
            "a[0]",
            "*",
        ])
        .prop_map(String::from);
        scalar()
            .prop_recursive(8, 64, 4, move |inner| {
                prop_oneof![
                    vec(inner.clone(), 0..4).prop_map(Value::Array),
                    vec((keys.clone(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
                ]
            })
            .boxed()
    }

    /// A valid condition on one path.
    fn condition() -> BoxedStrategy<Value> {
        let ordered = prop_oneof![number(), string()];
        prop_oneof![
            3 => value(),
            1 => value().prop_map(|v| json!({"$eq": v})),
            1 => value().prop_map(|v| json!({"$ne": v})),
            2 => (select(vec!["$gt", "$gte", "$lt", "$lte"]), ordered).prop_map(|(o, v)| json!({ o: v })),
            1 => vec(value(), 0..3).prop_map(|l| json!({"$in": l})),
            1 => vec(value(), 0..3).prop_map(|l| json!({"$nin": l})),
            1 => any::<bool>().prop_map(|b| json!({"$exists": b})),
        ]
        .boxed()
    }

    fn filter() -> BoxedStrategy<Value> {
        vec((path(), condition()), 0..=2)
            .prop_map(|kv| Value::Object(kv.into_iter().collect()))
            .prop_recursive(2, 8, 2, |inner| {
                prop_oneof![
                    vec(inner.clone(), 1..3).prop_map(|l| json!({"$or": l})),
                    vec(inner.clone(), 1..3).prop_map(|l| json!({"$and": l})),
                    inner.prop_map(|f| json!({"$not": f})),
                ]
            })
            .boxed()
    }

    fn parse(v: &Value) -> Filter {
        Filter::parse(v).unwrap_or_else(|e| panic!("{v} should parse: {e}"))
    }

    proptest! {
        #![proptest_config(config(2000))]

        /// Any JSON: a filter or an `InvalidFilter` whose message is its
        /// reason; never a panic, and a parsed filter evaluates without one.
        #[test]
        fn filter_parse_never_panics(src in wild(), docs in vec(doc(), 0..3)) {
            match Filter::parse(&src) {
                Ok(f) => {
                    for d in &docs {
                        let _ = f.matches(d);
                    }
                    prop_assert_eq!(Filter::parse(&src).ok(), Some(f));
                }
                Err(e) => {
                    let message = e.to_string();
                    match e {
                        Error::InvalidFilter { reason, .. } => {
                            prop_assert!(!reason.is_empty());
                            prop_assert_eq!(message, reason);
                        }
                        other => prop_assert!(false, "unexpected error {other:?}"),
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(config(500))]

        /// `$ne` is `NOT $eq`, `$nin` is `NOT $in`, `$in [v]` is `$eq v`,
        /// `$exists: false` is `NOT $exists: true`, `$gte` is `$gt OR $eq`.
        #[test]
        fn filter_operator_laws(p in path(), v in value(), l in vec(value(), 0..3), x in number(), s in string(),
                                docs in vec(doc(), 1..6)) {
            let eq = parse(&json!({ &p: {"$eq": v} }));
            let ne = parse(&json!({ &p: {"$ne": v} }));
            let implicit = parse(&json!({ &p: v }));
            let in1 = parse(&json!({ &p: {"$in": [v]} }));
            let in_l = parse(&json!({ &p: {"$in": l} }));
            let nin_l = parse(&json!({ &p: {"$nin": l} }));
            let exists = parse(&json!({ &p: {"$exists": true} }));
            let absent = parse(&json!({ &p: {"$exists": false} }));
            let not_eq = parse(&json!({ &p: {"$not": {"$eq": v}} }));
            for d in &docs {
                prop_assert_eq!(ne.matches(d), !eq.matches(d));
                prop_assert_eq!(not_eq.matches(d), !eq.matches(d));
                prop_assert_eq!(nin_l.matches(d), !in_l.matches(d));
                prop_assert_eq!(in1.matches(d), eq.matches(d));
                prop_assert_eq!(absent.matches(d), !exists.matches(d));
                if !v.is_object() {
                    prop_assert_eq!(implicit.matches(d), eq.matches(d));
                }
                let any_of = l.iter().any(|w| parse(&json!({ &p: {"$eq": w} })).matches(d));
                prop_assert_eq!(in_l.matches(d), any_of);
                for bound in [&x, &s] {
                    let gte = parse(&json!({ &p: {"$gte": bound} })).matches(d);
                    let gt = parse(&json!({ &p: {"$gt": bound} })).matches(d);
                    let lt = parse(&json!({ &p: {"$lt": bound} })).matches(d);
                    let lte = parse(&json!({ &p: {"$lte": bound} })).matches(d);
                    let is = parse(&json!({ &p: {"$eq": bound} })).matches(d);
                    prop_assert_eq!(gte, gt || is);
                    prop_assert_eq!(lte, lt || is);
                    // Comparable values are ordered one way exactly.
                    prop_assert!(!(gt && lte || lt && gte));
                    // Comparisons need a present value of the same kind.
                    if gte || lte {
                        prop_assert!(exists.matches(d));
                    }
                }
            }
        }

        /// Top-level keys are ANDed; `$and`, `$or` and `$not` combine as
        /// boolean logic; De Morgan holds.
        #[test]
        fn filter_logic_laws(a in filter(), b in filter(), docs in vec(doc(), 1..6)) {
            let fa = parse(&a);
            let fb = parse(&b);
            let and = parse(&json!({"$and": [a, b]}));
            let or = parse(&json!({"$or": [a, b]}));
            let not_a = parse(&json!({"$not": a}));
            let de_morgan = parse(&json!({"$not": {"$and": [{"$not": a}, {"$not": b}]}}));
            let mut merged = Map::new();
            merged.insert("$and".into(), json!([a]));
            merged.insert("$or".into(), json!([b]));
            let merged = parse(&Value::Object(merged));
            for d in &docs {
                prop_assert_eq!(and.matches(d), fa.matches(d) && fb.matches(d));
                prop_assert_eq!(or.matches(d), fa.matches(d) || fb.matches(d));
                prop_assert_eq!(not_a.matches(d), !fa.matches(d));
                prop_assert_eq!(de_morgan.matches(d), or.matches(d));
                prop_assert_eq!(merged.matches(d), and.matches(d));
            }
        }

        /// A nested object without `$` keys is the dotted form plus "is an
        /// object"; key order never matters; a document equals itself.
        #[test]
        fn filter_partial_match_laws(k in key(), sub in vec((key(), condition()), 0..3), docs in vec(doc(), 1..6)) {
            let sub: Map<String, Value> = sub.into_iter().collect();
            prop_assume!(sub.values().all(|c| !c.as_object().is_some_and(|o| o.is_empty())));
            let nested = parse(&json!({ &k: sub }));
            let mut dotted: Map<String, Value> =
                sub.iter().map(|(s, c)| (format!("{k}.{s}"), c.clone())).collect();
            dotted.insert(k.clone(), json!({"$exists": true}));
            let dotted = parse(&Value::Object(dotted));
            let reversed: Map<String, Value> = sub.iter().rev().map(|(s, c)| (s.clone(), c.clone())).collect();
            let reversed = parse(&json!({ &k: reversed }));
            for d in &docs {
                let is_object = d.get(&k).is_some_and(Value::is_object);
                prop_assert_eq!(nested.matches(d), is_object && dotted.matches(d));
                prop_assert_eq!(reversed.matches(d), nested.matches(d));
                // Every document matches the filter made of itself (as $eq
                // operands, so that nested objects compare whole).
                if let Value::Object(m) = d {
                    let own: Map<String, Value> =
                        m.iter().map(|(k, v)| (k.clone(), json!({"$eq": v}))).collect();
                    prop_assert!(parse(&Value::Object(own)).matches(d));
                }
            }
        }
    }

    /// Builds `depth` levels of `wrap` around `leaf` without recursion.
    fn deep(depth: usize, leaf: Value, wrap: impl Fn(Value) -> Value) -> Value {
        (0..depth).fold(leaf, |v, _| wrap(v))
    }

    /// Drops a value iteratively (the default drop recurses).
    fn drop_deep(v: Value) {
        let mut stack = vec![v];
        while let Some(mut v) = stack.pop() {
            match &mut v {
                Value::Array(a) => stack.append(a),
                Value::Object(m) => stack.extend(std::mem::take(m).into_iter().map(|(_, v)| v)),
                _ => {}
            }
        }
    }

    fn obj(k: &str, v: Value) -> Value {
        Value::Object(Map::from_iter([(k.to_owned(), v)]))
    }

    #[test]
    fn filter_deep_nesting_is_an_error_not_a_crash() {
        let cases = [
            deep(100_000, json!(1), |v| obj("a", v)),
            deep(100_000, json!({"a": 1}), |v| obj("$not", v)),
            deep(100_000, json!({"a": 1}), |v| obj("$or", Value::Array(vec![v]))),
            obj("x", obj("$in", deep(100_000, Value::Null, |v| Value::Array(vec![v])))),
            obj("x", deep(100_000, json!(1), |v| obj("$not", v))),
        ];
        for f in cases {
            match Filter::parse(&f) {
                Err(Error::InvalidFilter { reason, .. }) => assert!(reason.contains("nested"), "{reason}"),
                other => panic!("expected a nesting error, got {other:?}"),
            }
            drop_deep(f);
        }
        // 32 levels are fine.
        let f = deep(31, json!({"a": 1}), |v| obj("$not", v));
        assert!(Filter::parse(&f).is_ok());
        let f = deep(32, json!({"a": 1}), |v| obj("$not", v));
        assert!(Filter::parse(&f).is_err());
    }

    #[test]
    fn filter_deep_documents_are_fine() {
        let d = obj("a", deep(100_000, json!(1), |v| obj("a", v)));
        let path = vec!["a"; 1_000].join(".");
        assert!(parse(&json!({ &path: {"$exists": true} })).matches(&d));
        assert!(parse(&json!({"a": {"$ne": [1]}})).matches(&d));
        assert!(!parse(&json!({"a": {"a": {"a": 2}}})).matches(&d));
        drop_deep(d);
    }

    #[test]
    fn filter_hostile_strings_are_values_not_syntax() {
        let evil = "'; DROP TABLE x;--";
        let d = json!({"k": evil, "q": "\") OR 1=1 --"});
        assert!(parse(&json!({"k": evil})).matches(&d));
        assert!(parse(&json!({"q": {"$in": ["\") OR 1=1 --"]}})).matches(&d));
        assert!(!parse(&json!({"k": "x"})).matches(&d));
        for k in [evil, "a\"b", "a'b", "k) OR (1=1", "k[0]"] {
            match Filter::parse(&json!({ k: 1 })) {
                Err(Error::InvalidFilter { key, reason }) => {
                    assert_eq!(key, k);
                    assert!(reason.starts_with(&format!("Invalid filter key: '{k}'.")), "{reason}");
                }
                other => panic!("{k}: expected InvalidFilter, got {other:?}"),
            }
        }
    }

    #[test]
    fn filter_dollar_keys_are_operators() {
        match Filter::parse(&json!({"$.k": 1})) {
            Err(e) => assert_eq!(e.to_string(), "Unsupported operator: $.k"),
            Ok(f) => panic!("parsed {f:?}"),
        }
    }

    #[test]
    fn filter_huge_numbers() {
        let d = json!({"u": u64::MAX, "i": i64::MIN, "f": f64::MAX, "t": 5e-324});
        assert!(parse(&json!({"u": u64::MAX})).matches(&d));
        assert!(parse(&json!({"u": {"$gt": i64::MAX}})).matches(&d));
        assert!(parse(&json!({"i": {"$lt": -9_223_372_036_854_775_807i64}})).matches(&d));
        assert!(parse(&json!({"f": {"$gt": 1e308}})).matches(&d));
        assert!(parse(&json!({"t": {"$gt": 0}})).matches(&d));
        assert!(!parse(&json!({"t": 0})).matches(&d));
    }
}
