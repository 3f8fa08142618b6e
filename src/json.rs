//! Limits on the JSON documents agentstate stores (Store values, checkpoint
//! metadata), shared by the Store, the checkpointer and the filter parser.

use serde_json::Value;

/// The most levels of arrays and objects a JSON document agentstate stores
/// (a Store value, checkpoint metadata) may nest: serde_json, like most JSON
/// readers, refuses to read deeper text, so a deeper document could be
/// written but never read back.
pub(crate) const MAX_STORED_DEPTH: usize = 127;

/// True if `v` nests more than `max` levels of arrays and objects. Iterative,
/// so arbitrarily deep input cannot overflow the stack.
pub(crate) fn too_deep(v: &Value, max: usize) -> bool {
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Array(a) => {
                if depth > max {
                    return true;
                }
                stack.extend(a.iter().map(|c| (c, depth + 1)));
            }
            Value::Object(m) => {
                if depth > max {
                    return true;
                }
                stack.extend(m.values().map(|c| (c, depth + 1)));
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_arrays_and_objects_not_scalars() {
        assert!(!too_deep(&json!(1), 0));
        assert!(too_deep(&json!([]), 0));
        assert!(!too_deep(&json!([{"a": [1]}]), 3));
        assert!(too_deep(&json!([{"a": [1]}]), 2));
        assert!(!too_deep(&json!({"a": 1, "b": {"c": []}}), 3));
        assert!(too_deep(&json!({"a": 1, "b": {"c": []}}), 2));
    }

    #[test]
    fn very_deep_values_do_not_overflow_the_stack() {
        let mut v = Value::Null;
        for _ in 0..200_000 {
            v = Value::Array(vec![v]);
        }
        assert!(too_deep(&v, MAX_STORED_DEPTH));
        // Take it apart iteratively: dropping it recursively could overflow.
        let mut stack = vec![v];
        while let Some(mut v) = stack.pop() {
            if let Value::Array(a) = &mut v {
                stack.append(a);
            }
        }
    }
}
