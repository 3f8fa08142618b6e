//! [`ChannelValue`]: a channel's value, immutable and shared.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A channel's value as checkpoints hold it: immutable, and cheap to clone.
///
/// A value stored for a (thread, namespace, channel, version) never changes,
/// so the checkpointer decodes it once and hands out shared references. A
/// list is held as shared elements: the message list of step 1000 shares its
/// first 999 messages with the list of step 999, in memory as on disk.
///
/// Build one from any JSON value with [`From`] (`json!([..]).into()`); read it
/// with [`as_value`](Self::as_value) (anything but a list),
/// [`as_list`](Self::as_list) (a list's elements), or
/// [`to_value`](Self::to_value) (an owned copy of any value). It compares
/// equal to the JSON value it holds.
#[derive(Clone)]
pub struct ChannelValue(Repr);

#[derive(Clone)]
enum Repr {
    /// Any JSON value but an array.
    One(Arc<Value>),
    /// An array, element by element.
    List(Arc<[Arc<Value>]>),
}

impl ChannelValue {
    /// The value, unless it is a list (see [`as_list`](Self::as_list)).
    pub fn as_value(&self) -> Option<&Value> {
        match &self.0 {
            Repr::One(v) => Some(v),
            Repr::List(_) => None,
        }
    }

    /// The elements, if the value is a list.
    pub fn as_list(&self) -> Option<&[Arc<Value>]> {
        match &self.0 {
            Repr::List(items) => Some(items),
            Repr::One(_) => None,
        }
    }

    /// An owned JSON copy of the value (a deep copy: prefer
    /// [`as_value`](Self::as_value) / [`as_list`](Self::as_list) on hot paths).
    pub fn to_value(&self) -> Value {
        match &self.0 {
            Repr::One(v) => Value::clone(v),
            Repr::List(items) => Value::Array(items.iter().map(|v| Value::clone(v)).collect()),
        }
    }

    /// A list of shared elements.
    pub fn from_list(items: impl IntoIterator<Item = Arc<Value>>) -> ChannelValue {
        ChannelValue(Repr::List(items.into_iter().collect()))
    }

    /// This list with `items` appended (the elements already held are shared,
    /// not copied), or `None` if the value is not a list.
    pub fn appended(&self, items: impl IntoIterator<Item = Arc<Value>>) -> Option<ChannelValue> {
        let old = self.as_list()?;
        let mut all: Vec<Arc<Value>> = Vec::with_capacity(old.len() + 1);
        all.extend(old.iter().cloned());
        all.extend(items);
        Some(ChannelValue(Repr::List(all.into())))
    }

    /// True for null, booleans, numbers and strings: values a checkpoint row
    /// holds inline instead of in a blob.
    pub fn is_primitive(&self) -> bool {
        matches!(&self.0, Repr::One(v) if !v.is_object())
    }

    /// True if this and `other` share their storage (a cheap identity test;
    /// equal values need not be identical).
    pub fn ptr_eq(&self, other: &ChannelValue) -> bool {
        match (&self.0, &other.0) {
            (Repr::One(a), Repr::One(b)) => Arc::ptr_eq(a, b),
            (Repr::List(a), Repr::List(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl From<Value> for ChannelValue {
    fn from(v: Value) -> ChannelValue {
        match v {
            Value::Array(items) => ChannelValue(Repr::List(items.into_iter().map(Arc::new).collect())),
            other => ChannelValue(Repr::One(Arc::new(other))),
        }
    }
}

impl From<Arc<Value>> for ChannelValue {
    fn from(v: Arc<Value>) -> ChannelValue {
        match v.as_array() {
            Some(items) => ChannelValue::from_list(items.iter().cloned().map(Arc::new)),
            None => ChannelValue(Repr::One(v)),
        }
    }
}

impl PartialEq for ChannelValue {
    fn eq(&self, other: &ChannelValue) -> bool {
        match (&self.0, &other.0) {
            (Repr::One(a), Repr::One(b)) => a == b,
            (Repr::List(a), Repr::List(b)) => {
                Arc::ptr_eq(a, b) || (a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x == y))
            }
            _ => false,
        }
    }
}

impl PartialEq<Value> for ChannelValue {
    fn eq(&self, other: &Value) -> bool {
        match (&self.0, other) {
            (Repr::List(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| **x == *y),
            (Repr::One(a), b) => **a == *b,
            _ => false,
        }
    }
}

impl PartialEq<ChannelValue> for Value {
    fn eq(&self, other: &ChannelValue) -> bool {
        other == self
    }
}

impl fmt::Debug for ChannelValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::One(v) => fmt::Debug::fmt(v, f),
            Repr::List(items) => f.debug_list().entries(items.iter()).finish(),
        }
    }
}

impl fmt::Display for ChannelValue {
    /// Compact JSON.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(self) {
            Ok(s) => f.write_str(&s),
            Err(_) => Err(fmt::Error),
        }
    }
}

impl Serialize for ChannelValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::One(v) => v.serialize(s),
            Repr::List(items) => s.collect_seq(items.iter().map(|v| &**v)),
        }
    }
}

impl<'de> Deserialize<'de> for ChannelValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ChannelValue, D::Error> {
        Value::deserialize(d).map(ChannelValue::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_list_compares_equal_to_its_json_and_round_trips() {
        let v = json!([1, {"a": "b"}, [2]]);
        let c = ChannelValue::from(v.clone());
        assert_eq!(c, v);
        assert_eq!(c.to_value(), v);
        assert_eq!(serde_json::to_value(&c).unwrap(), v);
        assert_eq!(c.to_string(), v.to_string());
        assert!(c.as_value().is_none());
        assert_eq!(c.as_list().map(<[_]>::len), Some(3));
    }

    #[test]
    fn appending_shares_the_elements_already_held() {
        let a = ChannelValue::from(json!([{"m": 1}]));
        let b = a.appended([Arc::new(json!({"m": 2}))]).unwrap();
        assert_eq!(b, json!([{"m": 1}, {"m": 2}]));
        assert!(Arc::ptr_eq(&a.as_list().unwrap()[0], &b.as_list().unwrap()[0]));
        assert!(ChannelValue::from(json!(1)).appended([]).is_none());
    }

    #[test]
    fn primitives_are_the_values_a_row_holds_inline() {
        for v in [json!(null), json!(true), json!(1.5), json!("s")] {
            assert!(ChannelValue::from(v).is_primitive());
        }
        for v in [json!([]), json!({})] {
            assert!(!ChannelValue::from(v).is_primitive());
        }
    }
}
