//! The compact checkpoint row: LangGraph's string versions without their
//! zero padding, and no `id` (the row's `checkpoint_id` holds it).
//!
//! A LangGraph version is `"{counter:032}.{random}"`: 52 bytes, 30 of them
//! zeros. A checkpoint carries one per channel in `channel_versions` and one
//! per (node, channel) in `versions_seen`, so the padding was a third of a
//! checkpoint row. A row whose `type` column is [`TYPE`] stores each such
//! version as `"~{counter}.{random}"` (the counter without leading zeros),
//! and any other string version that starts with `~` with one more `~` in
//! front; every other version is stored as it is. Rows with a NULL `type`
//! (written before this format) hold versions as they are. Reading expands
//! them back: the versions a caller reads are exactly the versions it wrote.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::types::{ChannelVersion, ChannelVersions};

/// The `type` of a checkpoint row in the compact format.
pub(crate) const TYPE: &str = "compact";

/// Width of a LangGraph version's zero-padded counter.
const COUNTER_WIDTH: usize = 32;

/// The padding a counter may need.
const ZEROS: &str = "00000000000000000000000000000000";

/// Whether column `i` of `row` (a checkpoint row's `type`) says compact.
pub(crate) fn is_compact(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<bool> {
    Ok(row.get_ref(i)?.as_str_or_null().ok().flatten() == Some(TYPE))
}

/// `version` as a compact row stores it.
pub(crate) fn shrink(version: &str) -> Cow<'_, str> {
    let b = version.as_bytes();
    let padded = b.len() > COUNTER_WIDTH
        && b[COUNTER_WIDTH] == b'.'
        && b[..COUNTER_WIDTH].iter().all(u8::is_ascii_digit);
    if padded {
        let zeros = version[..COUNTER_WIDTH - 1].bytes().take_while(|&c| c == b'0').count();
        let mut out = String::with_capacity(1 + version.len() - zeros);
        out.push('~');
        out.push_str(&version[zeros..]);
        return Cow::Owned(out);
    }
    if version.starts_with('~') {
        let mut out = String::with_capacity(1 + version.len());
        out.push('~');
        out.push_str(version);
        return Cow::Owned(out);
    }
    Cow::Borrowed(version)
}

/// A version read from a compact row, as it was written; `None` if the
/// stored text cannot come from [`shrink`] (a damaged row).
pub(crate) fn expand(stored: &str) -> Option<Cow<'_, str>> {
    let Some(rest) = stored.strip_prefix('~') else {
        return Some(Cow::Borrowed(stored));
    };
    if rest.starts_with('~') {
        return Some(Cow::Borrowed(rest));
    }
    let dot = rest.find('.')?;
    let digits = &rest[..dot];
    if digits.is_empty() || digits.len() > COUNTER_WIDTH || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut out = String::with_capacity(COUNTER_WIDTH - digits.len() + rest.len());
    out.push_str(&ZEROS[..COUNTER_WIDTH - digits.len()]);
    out.push_str(rest);
    Some(Cow::Owned(out))
}

/// Expands every string version of `versions` in place; `Err` names the
/// first that cannot be expanded.
pub(crate) fn expand_all(versions: &mut ChannelVersions) -> Result<(), String> {
    for v in versions.values_mut() {
        if let ChannelVersion::Str(s) = v {
            if s.starts_with('~') {
                *s = expand(s).ok_or_else(|| s.clone())?.into_owned();
            }
        }
    }
    Ok(())
}

/// Serializes channel versions with [`shrink`]ed strings.
pub(crate) struct Shrunk<'a>(pub(crate) &'a ChannelVersions);

impl Serialize for Shrunk<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            match v {
                ChannelVersion::Str(v) => map.serialize_entry(k, &shrink(v))?,
                ChannelVersion::Int(n) => map.serialize_entry(k, n)?,
            }
        }
        map.end()
    }
}

/// Serializes `versions_seen` with [`shrink`]ed strings.
pub(crate) struct ShrunkSeen<'a>(pub(crate) &'a BTreeMap<String, ChannelVersions>);

impl Serialize for ShrunkSeen<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (node, versions) in self.0 {
            map.serialize_entry(node, &Shrunk(versions))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_comes_back_as_written() {
        let padded = format!("{:032}.0.2636492720420571", 1000);
        let zero = format!("{:032}.5", 0);
        let max = format!("{}.x", "9".repeat(32));
        for v in [
            padded.as_str(),
            zero.as_str(),
            max.as_str(),
            "~1.5",
            "~~",
            "~",
            "1.5",
            "",
            "00000000000000000000000000000001",
            "0000000000000000000000000000000a.1",
        ] {
            let s = shrink(v);
            assert_eq!(expand(&s).as_deref(), Some(v), "{v:?} stored as {s:?}");
        }
        assert_eq!(shrink(&padded), "~1000.0.2636492720420571");
        assert_eq!(shrink(&zero), "~0.5");
        assert_eq!(shrink("1.5"), "1.5");
    }

    #[test]
    fn text_no_shrink_can_make_is_refused() {
        for s in ["~", "~a.1", "~.1", "~12", &format!("~{}.1", "1".repeat(33))] {
            assert_eq!(expand(s), None, "{s:?}");
        }
    }
}
