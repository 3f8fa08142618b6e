//! Property tests: the compiled SQL and the Rust evaluator select the same
//! documents; parsing any JSON gives a filter or a typed error, never a
//! panic; and the operators obey the laws the module documentation states.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Selector;

use super::strategies::*;
use super::{json, register_functions, Connection, Error, Filter, Map, SqlValue, Value};

fn parse(v: &Value) -> Filter {
    Filter::parse(v).unwrap_or_else(|e| panic!("{v} should parse: {e}"))
}

/// Documents stored both as TEXT and as a BLOB of JSON text.
fn table(docs: &[Value]) -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    register_functions(&conn).unwrap();
    conn.execute_batch("CREATE TABLE docs(id INTEGER PRIMARY KEY, t TEXT, b BLOB)").unwrap();
    for (i, d) in docs.iter().enumerate() {
        // A NULL document stands for a NULL column.
        let text = (!d.is_null()).then(|| d.to_string());
        let blob = text.as_ref().map(|t| t.as_bytes().to_vec());
        conn.execute("INSERT INTO docs VALUES (?1, ?2, ?3)", rusqlite::params![i as i64, text, blob])
            .unwrap();
    }
    conn
}

/// The first column of every row `sql` returns.
fn column<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str, params: &[SqlValue]) -> Vec<T> {
    let mut st = conn.prepare(sql).unwrap();
    let rows = st.query_map(rusqlite::params_from_iter(params), |r| r.get(0)).unwrap();
    rows.collect::<rusqlite::Result<_>>().unwrap()
}

/// Asserts that SQL selects exactly the documents the evaluator matches,
/// through both columns, in WHERE and as a 0/1 value.
fn agree(
    conn: &Connection,
    docs: &[Value],
    f: &Filter,
    src: &Value,
) -> std::result::Result<(), TestCaseError> {
    let want: Vec<i64> = (0..docs.len() as i64).filter(|&i| f.matches(&docs[i as usize])).collect();
    for col in ["t", "b"] {
        let (sql, params) = f.to_sql(col);
        prop_assert_eq!(sql.matches('?').count(), params.len());
        let got: Vec<i64> = column(conn, &format!("SELECT id FROM docs WHERE {sql} ORDER BY id"), &params);
        prop_assert_eq!(&got, &want, "filter {} ({}): {}\ndocs {:?}", src, col, sql, docs);
    }
    let (sql, params) = f.to_sql("t");
    let values: Vec<SqlValue> = column(conn, &format!("SELECT {sql} FROM docs ORDER BY id"), &params);
    for (i, v) in values.iter().enumerate() {
        let expected = SqlValue::Integer(want.contains(&(i as i64)).into());
        prop_assert_eq!(v, &expected, "value of {} on {}", src, &docs[i]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1500))]

    /// 1500 cases x up to 8 documents x up to 4 filters.
    #[test]
    fn filter_sql_agrees_with_evaluator(docs in vec(doc(), 4..=8), filters in vec(filter(), 1..=4)) {
        let conn = table(&docs);
        for src in &filters {
            let f = Filter::parse(src).map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
            agree(&conn, &docs, &f, src)?;
        }
    }

    /// Every single-path condition, each against many documents.
    #[test]
    fn filter_condition_sql_agrees_with_evaluator(
        docs in vec(doc(), 8..=16), conds in vec((path(), condition()), 1..=4),
    ) {
        let conn = table(&docs);
        for (p, c) in conds {
            let src = Value::Object(Map::from_iter([(p, c)]));
            let f = Filter::parse(&src).map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
            agree(&conn, &docs, &f, &src)?;
        }
    }

    /// Conditions built from values the documents really hold, so that
    /// most filters select some documents and not others.
    #[test]
    fn filter_anchored_conditions_agree(
        docs in vec(doc(), 4..=8),
        picks in vec((any::<Selector>(), 0..15usize, any::<Selector>()), 2..=6),
    ) {
        let present = present_values(&docs);
        prop_assume!(!present.is_empty());
        let mut filters = Vec::new();
        for (sel, op, sel2) in &picks {
            let (p, v) = sel.select(&present).clone();
            let (_, w) = sel2.select(&present).clone();
            let ordered = |o: &str, v: &Value| {
                if v.is_number() || v.is_string() { json!({ o: v }) } else { json!({ "$eq": v }) }
            };
            let cond = match op {
                0 => v.clone(),
                1 => json!({"$ne": v}),
                2 => ordered("$gt", &v),
                3 => ordered("$gte", &v),
                4 => ordered("$lt", &v),
                5 => ordered("$lte", &v),
                6 => json!({"$in": [v, w]}),
                7 => json!({"$nin": [v, w]}),
                8 => json!({"$not": {"$eq": w}}),
                9 => json!({"$or": [v, w]}),
                10 => json!({"$exists": true}),
                // The same content as another JSON type: never equal.
                11 => cousin(&v),
                12 => json!({"$in": [cousin(&v), "zz"]}),
                13 => ordered("$gte", &cousin(&v)),
                _ => json!({"$in": [w, null]}),
            };
            filters.push(Value::Object(Map::from_iter([(p, cond)])));
        }
        let n = filters.len();
        for i in 0..n - 1 {
            filters.push(json!({"$or": [filters[i], filters[i + 1]]}));
            filters.push(json!({"$and": [filters[i], {"$not": filters[i + 1]}]}));
        }
        let conn = table(&docs);
        for src in &filters {
            let f = Filter::parse(src).map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
            agree(&conn, &docs, &f, src)?;
        }
    }

    /// A container's JSON text (as SQLite's json_extract returns it) never
    /// equals or compares with a string.
    #[test]
    fn filter_container_text_is_not_a_string(v in value()) {
        let text = Value::String(v.to_string());
        let docs = vec![json!({"a": v.clone()}), json!({"a": text.clone()})];
        let conn = table(&docs);
        for src in [
            json!({"a": text.clone()}),
            json!({"a": {"$in": [text.clone(), "x"]}}),
            json!({"a": {"$nin": [text.clone(), "x"]}}),
            json!({"a": {"$gte": text.clone()}}),
            json!({"a": {"$lte": text.clone()}}),
            json!({"a": {"$in": [v.clone(), 1]}}),
        ] {
            let f = Filter::parse(&src).unwrap();
            agree(&conn, &docs, &f, &src)?;
        }
    }

    /// Numbers next to each other (int/float twins, +-1, the next float)
    /// under every comparison, alone and inside arrays.
    #[test]
    fn filter_numeric_twins_agree((a, b) in twins()) {
        let docs = vec![json!({"a": a.clone()}), json!({"a": b.clone()}), json!({"a": [a.clone()]})];
        let conn = table(&docs);
        let mut srcs = vec![
            json!({"a": a.clone()}),
            json!({"a": b.clone()}),
            json!({"a": [b.clone()]}),
            json!({"a": {"$ne": b.clone()}}),
            json!({"a": {"$in": [b.clone(), "x"]}}),
            json!({"a": {"$in": [[b.clone()], {"k": 1}]}}),
        ];
        for o in ["$gt", "$gte", "$lt", "$lte"] {
            srcs.push(json!({"a": { o: a.clone() }}));
            srcs.push(json!({"a": { o: b.clone() }}));
        }
        for src in srcs {
            let f = Filter::parse(&src).unwrap();
            agree(&conn, &docs, &f, &src)?;
        }
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// Any JSON: a filter or an `InvalidFilter` whose message is its reason;
    /// never a panic. Whatever parses parses again to the same filter, and
    /// compiles to SQL that runs and agrees with the evaluator.
    #[test]
    fn filter_parse_of_wild_json_never_panics(src in wild(), docs in vec(doc(), 1..=4)) {
        match Filter::parse(&src) {
            Ok(f) => {
                prop_assert_eq!(Filter::parse(&src).ok(), Some(f.clone()));
                let conn = table(&docs);
                agree(&conn, &docs, &f, &src)?;
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
