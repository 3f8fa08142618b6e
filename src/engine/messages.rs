//! LangGraph's `add_messages` reducer, on messages stored as LangChain
//! stores them (pydantic ext values), so Python reads them as messages.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

const REMOVE_ALL: &str = "__remove_all__";

/// A marker that deletes the message with `id` when written to a
/// [`Reducer::Messages`](super::Reducer::Messages) channel (LangChain's
/// `RemoveMessage(id=...)`, stored as Python stores it). The plain dict
/// `{"type": "remove", "id": ...}` works too.
pub fn remove_message(id: impl Into<String>) -> Value {
    message_ext("remove", Map::new(), Some(id.into()))
}

/// `(module, class)` of the LangChain message of a `type`.
fn class_of(kind: &str) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        "human" => ("langchain_core.messages.human", "HumanMessage"),
        "ai" => ("langchain_core.messages.ai", "AIMessage"),
        "system" => ("langchain_core.messages.system", "SystemMessage"),
        "tool" => ("langchain_core.messages.tool", "ToolMessage"),
        "remove" => ("langchain_core.messages.modifier", "RemoveMessage"),
        _ => return None,
    })
}

/// A LangChain message's `model_dump()` as an ext value: the fields every
/// message has, then the ones its class adds, `fields` overriding.
fn message_ext(kind: &str, fields: Map<String, Value>, id: Option<String>) -> Value {
    let (module, name) = class_of(kind).unwrap_or(("langchain_core.messages.chat", "ChatMessage"));
    // Sized up front: growing an index map rehashes it (this runs for every
    // message a node returns).
    let mut m = Map::with_capacity(9 + fields.len());
    m.insert("content".into(), Value::String(String::new()));
    m.insert("additional_kwargs".into(), Value::Object(Map::new()));
    m.insert("response_metadata".into(), Value::Object(Map::new()));
    m.insert("type".into(), Value::String(kind.to_string()));
    m.insert("name".into(), Value::Null);
    m.insert("id".into(), id.map_or(Value::Null, Value::String));
    match kind {
        "ai" => {
            m.insert("tool_calls".into(), Value::Array(Vec::new()));
            m.insert("invalid_tool_calls".into(), Value::Array(Vec::new()));
            m.insert("usage_metadata".into(), Value::Null);
        }
        "tool" => {
            m.insert("tool_call_id".into(), Value::String(String::new()));
            m.insert("artifact".into(), Value::Null);
            m.insert("status".into(), Value::String("success".into()));
        }
        _ => {}
    }
    for (k, v) in fields {
        if k != "role" && k != "type" && k != "id" {
            m.insert(k, v);
        }
    }
    let mut ext = Map::with_capacity(5);
    ext.insert("code".into(), Value::from(5));
    ext.insert("module".into(), Value::String(module.into()));
    ext.insert("name".into(), Value::String(name.into()));
    ext.insert("args".into(), Value::Object(m));
    ext.insert("method".into(), Value::String("model_validate_json".into()));
    let mut outer = Map::with_capacity(1);
    outer.insert("__ext__".into(), Value::Object(ext));
    Value::Object(outer)
}

/// The dump of a message ext value (its `args`), if `v` is one.
pub(crate) fn message_fields(v: &Value) -> Option<&Map<String, Value>> {
    let ext = v.get("__ext__")?;
    if !ext.get("module")?.as_str()?.starts_with("langchain_core.messages") {
        return None;
    }
    ext.get("args")?.as_object()
}

/// Any accepted message form as a message ext value: the ext value itself,
/// a dict with `role` (`user`, `assistant`, `system`, `tool`) or `type`, or
/// a string (a human message).
fn coerce(v: &Value) -> Result<Value, String> {
    if message_fields(v).is_some() {
        return Ok(v.clone());
    }
    match v {
        Value::String(s) => {
            Ok(message_ext("human", [("content".to_string(), json!(s))].into_iter().collect(), None))
        }
        Value::Object(o) => {
            let kind = match o.get("role").or_else(|| o.get("type")).and_then(Value::as_str) {
                Some("user" | "human") => "human",
                Some("assistant" | "ai") => "ai",
                Some("system") => "system",
                Some("tool") => "tool",
                Some("remove") => "remove",
                Some(other) => return Err(format!("message type {other:?} is not supported")),
                None => return Err(format!("a message needs a role or type: {v}")),
            };
            let id = o.get("id").and_then(Value::as_str).map(str::to_string);
            Ok(message_ext(kind, o.clone(), id))
        }
        other => Err(format!("not a message: {other}")),
    }
}

fn id_of(v: &Value) -> Option<&str> {
    message_fields(v)?.get("id")?.as_str()
}

fn is_remove(v: &Value) -> bool {
    message_fields(v).and_then(|f| f.get("type")).and_then(Value::as_str) == Some("remove")
}

/// Gives `v` (a message ext value) a fresh id if it has none.
fn ensure_id(mut v: Value) -> Value {
    if id_of(&v).is_none() {
        if let Some(args) = v.pointer_mut("/__ext__/args").and_then(Value::as_object_mut) {
            args.insert("id".into(), Value::String(crate::checkpoint::id::uuid4().to_string()));
        }
    }
    v
}

/// The ids of a message list (id -> position), kept with the list so that a
/// superstep that appends does not index the whole history again.
pub(crate) type MessageIndex = HashMap<String, usize>;

/// `add_messages(left, right)`: `right` (a message or a list) merged into
/// `left`: same id replaces in place, a remove marker deletes, the rest is
/// appended. `index` is `left`'s id index if known (every message of `left`
/// is then a message with an id); it is brought up to date, or built.
/// Returns the merged list and whether `right` only appended to `left`.
pub(crate) fn add_messages_indexed(
    left: Value,
    right: &Value,
    index: &mut Option<MessageIndex>,
) -> Result<(Value, bool), String> {
    let right: Vec<Value> = match right {
        Value::Array(items) => items.iter().map(|m| coerce(m).map(ensure_id)).collect::<Result<_, _>>()?,
        one => vec![ensure_id(coerce(one)?)],
    };
    if let Some(pos) = right.iter().rposition(|m| is_remove(m) && id_of(m) == Some(REMOVE_ALL)) {
        *index = None;
        return Ok((Value::Array(right[pos + 1..].to_vec()), false));
    }
    // The current list is owned: its messages (already messages with ids,
    // unless a checkpoint or an initial value held dicts) are not copied.
    let mut merged = match left {
        Value::Array(items) => items,
        one => {
            *index = None;
            vec![one]
        }
    };
    let ids = match index {
        Some(ids) if ids.len() == merged.len() => ids,
        _ => {
            for m in merged.iter_mut() {
                if message_fields(m).is_none() {
                    *m = coerce(m)?;
                }
                if id_of(m).is_none() {
                    *m = ensure_id(std::mem::take(m));
                }
            }
            index.insert(
                merged
                    .iter()
                    .enumerate()
                    .filter_map(|(i, m)| id_of(m).map(|id| (id.to_string(), i)))
                    .collect(),
            )
        }
    };
    let mut appended_only = true;
    let mut removed: HashSet<String> = HashSet::new();
    for m in right {
        let id = id_of(&m).unwrap_or_default().to_string();
        match ids.get(&id) {
            Some(_) if is_remove(&m) => {
                removed.insert(id);
                appended_only = false;
            }
            Some(&i) => {
                removed.remove(&id);
                merged[i] = m;
                appended_only = false;
            }
            None if is_remove(&m) => {
                *index = None;
                return Err(format!("Attempting to delete a message with an ID that doesn't exist ('{id}')"));
            }
            None => {
                ids.insert(id, merged.len());
                merged.push(m);
            }
        }
    }
    if !removed.is_empty() {
        merged.retain(|m| !id_of(m).is_some_and(|id| removed.contains(id)));
        *index = None;
    } else if ids.len() != merged.len() {
        // Duplicate ids in the list: positions are ambiguous, index again
        // next time.
        *index = None;
    }
    Ok((Value::Array(merged), appended_only))
}

/// `add_messages(left, right)` without a kept index.
#[cfg(test)]
pub(crate) fn add_messages(left: Value, right: &Value) -> Result<Value, String> {
    add_messages_indexed(left, right, &mut None).map(|(v, _)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &Value) -> Vec<String> {
        v.as_array().unwrap().iter().map(|m| id_of(m).unwrap().to_string()).collect()
    }

    #[test]
    fn append_replace_remove() {
        let a = add_messages(json!([]), &json!([{"role": "user", "content": "hi", "id": "m1"}])).unwrap();
        let b = add_messages(a, &json!({"role": "assistant", "content": "yo", "id": "m2"})).unwrap();
        assert_eq!(ids(&b), ["m1", "m2"]);
        let c = add_messages(b, &json!([{"role": "assistant", "content": "edited", "id": "m1"}])).unwrap();
        assert_eq!(message_fields(&c[0]).unwrap()["content"], json!("edited"));
        assert_eq!(message_fields(&c[0]).unwrap()["type"], json!("ai"));
        let d = add_messages(c.clone(), &json!([remove_message("m1")])).unwrap();
        assert_eq!(ids(&d), ["m2"]);
        let e = add_messages(d.clone(), &json!([{"type": "remove", "id": "m2"}])).unwrap();
        assert_eq!(e, json!([]));
        assert!(add_messages(e.clone(), &json!([remove_message("nope")])).is_err());
        assert!(add_messages(e, &json!([{"role": "wizard"}])).is_err());
        let f = add_messages(d, &json!([remove_message(REMOVE_ALL), "fresh"])).unwrap();
        assert_eq!(f.as_array().unwrap().len(), 1);
        assert!(id_of(&f[0]).is_some());
    }
}
