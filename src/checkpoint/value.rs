//! [`ChannelValue`]: a channel's value, immutable and shared.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A channel's value as checkpoints hold it: immutable, and cheap to clone.
///
/// A value stored for a (thread, namespace, channel, version) never changes,
/// so the checkpointer decodes it once and hands out shared references. A
/// list is held as a chain of shared pieces: the message list of step 1000
/// is the list of step 999 plus one message, in memory as on disk, and
/// appending to it costs the new elements, not a copy of the old ones.
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
    /// An array.
    List(View),
}

/// The first `len` elements of a chain of chunks: a list, or an older
/// version of a list that grew since (a history read builds one list and
/// hands out prefixes of it).
#[derive(Clone)]
struct View {
    chunk: Arc<Chunk>,
    len: usize,
}

/// A piece of a list: the elements appended after `prev`'s.
struct Chunk {
    prev: Option<View>,
    items: Box<[Arc<Value>]>,
    /// Elements before this chunk's.
    start: usize,
    /// Chunks in the chain, this one included.
    depth: usize,
}

/// A list is flattened into one chunk when its chain gets this long, so that
/// reading it never follows more than this many links (and dropping it never
/// recurses deeper).
const MAX_DEPTH: usize = 48;

impl View {
    /// `prev` (if any) followed by `items`.
    fn new(prev: Option<View>, items: Box<[Arc<Value>]>) -> View {
        let (start, depth) = prev.as_ref().map_or((0, 0), |p| (p.len, p.chunk.depth));
        let len = start + items.len();
        if depth < MAX_DEPTH {
            return View { chunk: Arc::new(Chunk { prev, items, start, depth: depth + 1 }), len };
        }
        let mut all = Vec::with_capacity(len);
        if let Some(p) = &prev {
            for piece in ListRef(p).pieces() {
                all.extend(piece.iter().cloned());
            }
        }
        all.extend(items.into_vec());
        View { chunk: Arc::new(Chunk { prev: None, items: all.into_boxed_slice(), start: 0, depth: 1 }), len }
    }

    /// The first `len` elements of this list.
    fn prefix(&self, len: usize) -> View {
        View { chunk: self.chunk.clone(), len: len.min(self.len) }
    }
}

/// The elements of a list [`ChannelValue`], borrowed: see
/// [`ChannelValue::as_list`].
#[derive(Clone, Copy)]
pub struct ListRef<'a>(&'a View);

impl<'a> ListRef<'a> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// True if the list has no elements.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// The pieces of the list, oldest first.
    fn pieces(&self) -> Vec<&'a [Arc<Value>]> {
        let mut out = Vec::with_capacity(self.0.chunk.depth);
        let mut v = Some(self.0);
        while let Some(view) = v {
            let chunk = &*view.chunk;
            let take = view.len.saturating_sub(chunk.start).min(chunk.items.len());
            out.push(&chunk.items[..take]);
            v = chunk.prev.as_ref();
        }
        out.reverse();
        out
    }

    /// The elements, first to last.
    pub fn iter(&self) -> impl Iterator<Item = &'a Value> + 'a {
        self.pieces().into_iter().flat_map(|p| p.iter().map(|v| &**v))
    }

    /// The element at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&'a Value> {
        if index >= self.0.len {
            return None;
        }
        let mut v = Some(self.0);
        while let Some(view) = v {
            let chunk = &*view.chunk;
            if index >= chunk.start {
                return chunk.items.get(index - chunk.start).map(|v| &**v);
            }
            v = chunk.prev.as_ref();
        }
        None
    }

    /// The last element, if any.
    pub fn last(&self) -> Option<&'a Value> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// The elements, shared (no value is copied).
    pub fn to_shared(&self) -> Vec<Arc<Value>> {
        let mut out = Vec::with_capacity(self.len());
        for p in self.pieces() {
            out.extend(p.iter().cloned());
        }
        out
    }
}

impl fmt::Debug for ListRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Drop for Chunk {
    /// Unlinks the chain iteratively (no deep recursion on long chains).
    fn drop(&mut self) {
        let mut prev = self.prev.take();
        while let Some(p) = prev {
            match Arc::try_unwrap(p.chunk) {
                Ok(mut chunk) => prev = chunk.prev.take(),
                Err(_) => break,
            }
        }
    }
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
    pub fn as_list(&self) -> Option<ListRef<'_>> {
        match &self.0 {
            Repr::List(c) => Some(ListRef(c)),
            Repr::One(_) => None,
        }
    }

    /// An owned JSON copy of the value (a deep copy: prefer
    /// [`as_value`](Self::as_value) / [`as_list`](Self::as_list) on hot paths).
    pub fn to_value(&self) -> Value {
        match &self.0 {
            Repr::One(v) => Value::clone(v),
            Repr::List(c) => Value::Array(ListRef(c).iter().cloned().collect()),
        }
    }

    /// A list of shared elements.
    pub fn from_list(items: impl IntoIterator<Item = Arc<Value>>) -> ChannelValue {
        ChannelValue(Repr::List(View::new(None, items.into_iter().collect())))
    }

    /// This list with `items` appended (the elements already held are shared,
    /// not copied), or `None` if the value is not a list.
    pub fn appended(&self, items: impl IntoIterator<Item = Arc<Value>>) -> Option<ChannelValue> {
        match &self.0 {
            Repr::List(v) => {
                Some(ChannelValue(Repr::List(View::new(Some(v.clone()), items.into_iter().collect()))))
            }
            Repr::One(_) => None,
        }
    }

    /// The first `len` elements of this list (shared, O(1)), or `None` if
    /// the value is not a list.
    pub(crate) fn prefix(&self, len: usize) -> Option<ChannelValue> {
        match &self.0 {
            Repr::List(v) => Some(ChannelValue(Repr::List(v.prefix(len)))),
            Repr::One(_) => None,
        }
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
            (Repr::List(a), Repr::List(b)) => Arc::ptr_eq(&a.chunk, &b.chunk) && a.len == b.len,
            _ => false,
        }
    }
}

impl From<Value> for ChannelValue {
    fn from(v: Value) -> ChannelValue {
        match v {
            Value::Array(items) => ChannelValue::from_list(items.into_iter().map(Arc::new)),
            other => ChannelValue(Repr::One(Arc::new(other))),
        }
    }
}

impl PartialEq for ChannelValue {
    fn eq(&self, other: &ChannelValue) -> bool {
        match (&self.0, &other.0) {
            (Repr::One(a), Repr::One(b)) => a == b,
            (Repr::List(a), Repr::List(b)) => {
                a.len == b.len && (Arc::ptr_eq(&a.chunk, &b.chunk) || ListRef(a).iter().eq(ListRef(b).iter()))
            }
            _ => false,
        }
    }
}

impl PartialEq<Value> for ChannelValue {
    fn eq(&self, other: &Value) -> bool {
        match (&self.0, other) {
            (Repr::List(a), Value::Array(b)) => a.len == b.len() && ListRef(a).iter().eq(b.iter()),
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
            Repr::List(c) => fmt::Debug::fmt(&ListRef(c), f),
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
            Repr::List(c) => s.collect_seq(ListRef(c).iter()),
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
        assert_eq!(c.as_list().map(|l| l.len()), Some(3));
    }

    #[test]
    fn appending_shares_the_elements_already_held() {
        let a = ChannelValue::from(json!([{"m": 1}]));
        let b = a.appended([Arc::new(json!({"m": 2}))]).unwrap();
        assert_eq!(b, json!([{"m": 1}, {"m": 2}]));
        assert!(std::ptr::eq(a.as_list().unwrap().get(0).unwrap(), b.as_list().unwrap().get(0).unwrap()));
        assert_eq!(b.as_list().unwrap().last(), Some(&json!({"m": 2})));
        assert!(ChannelValue::from(json!(1)).appended([]).is_none());
    }

    #[test]
    fn long_chains_of_appends_stay_correct_and_shallow() {
        let mut v = ChannelValue::from(json!([]));
        let mut want = vec![];
        for i in 0..10_000 {
            v = v.appended([Arc::new(json!(i))]).unwrap();
            want.push(json!(i));
        }
        let l = v.as_list().unwrap();
        assert!(l.0.chunk.depth <= MAX_DEPTH);
        assert_eq!(l.len(), 10_000);
        assert_eq!(l.get(9_999), Some(&json!(9_999)));
        assert_eq!(l.get(10_000), None);
        assert_eq!(v, Value::Array(want));
        drop(v);
    }

    #[test]
    fn a_prefix_shares_the_list_and_can_grow_its_own_branch() {
        let full = ChannelValue::from(json!([0, 1, 2, 3]));
        let head = full.prefix(2).unwrap();
        assert_eq!(head, json!([0, 1]));
        assert_eq!(head.as_list().unwrap().get(2), None);
        let branch = head.appended([Arc::new(json!("b"))]).unwrap();
        assert_eq!(branch, json!([0, 1, "b"]));
        assert_eq!(full, json!([0, 1, 2, 3]));
        let mut deep = branch.clone();
        for i in 0..200 {
            deep = deep.appended([Arc::new(json!(i))]).unwrap();
        }
        assert_eq!(deep.as_list().unwrap().len(), 203);
        assert_eq!(deep.as_list().unwrap().get(2), Some(&json!("b")));
        assert_eq!(deep.as_list().unwrap().get(202), Some(&json!(199)));
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
