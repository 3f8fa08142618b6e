//! The compact checkpoint row: LangGraph's string versions without their
//! zero padding, and no `id` (the row's `checkpoint_id` holds it).
//!
//! A LangGraph version is `"{counter:032}.{random}"`: 52 bytes, 30 of them
//! zeros. A checkpoint carries one per channel in `channel_versions` and one
//! per (node, channel) in `versions_seen`, so the padding was a third of a
//! checkpoint row. A row whose `type` column is [`TYPE`] (written by the
//! version of migration 6; since migration 7 rows are
//! [MessagePack](super::row)) stores each such
//! version as `"~{counter}.{random}"` (the counter without leading zeros),
//! and any other string version that starts with `~` with one more `~` in
//! front; every other version is stored as it is. Rows with a NULL `type`
//! (written before this format) hold versions as they are. Reading expands
//! them back: the versions a caller reads are exactly the versions it wrote.
//!
//! `checkpoint_blobs` keys its rows by version too, three times per row
//! (`version`, `base_version`, `root_version`) plus once in its index, and
//! reads a delta chain as one range of versions: there a padded version is
//! stored as [`blob_key`] makes it, `"~"`, one letter for the counter's
//! length, the counter, the rest, which sorts as the padded text does.

use std::borrow::Cow;

use super::types::{ChannelVersion, ChannelVersions};

/// The `type` of a checkpoint row in the compact format.
pub(crate) const TYPE: &str = "compact";

/// Width of a LangGraph version's zero-padded counter.
const COUNTER_WIDTH: usize = 32;

/// The padding a counter may need.
const ZEROS: &str = "00000000000000000000000000000000";

/// A version read from a compact row, as it was written; `None` if the
/// stored text cannot be a compact version (a damaged row).
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

/// `version` as `checkpoint_blobs` stores it: a LangGraph version
/// `"{counter:032}.{rest}"` becomes `"~"`, the letter `'@' + n` for the `n`
/// digits of the counter without leading zeros (1 to 32: `A` to `` ` ``),
/// those digits, `".{rest}"`; a version that starts with `~` gets one more
/// in front; any other text is stored as it is. Padded versions keep their
/// order (a shorter counter is smaller), so a chain stays one key range.
pub(crate) fn blob_key(version: &str) -> Cow<'_, str> {
    let b = version.as_bytes();
    let padded = b.len() > COUNTER_WIDTH
        && b[COUNTER_WIDTH] == b'.'
        && b[..COUNTER_WIDTH].iter().all(u8::is_ascii_digit);
    if padded {
        let zeros = version[..COUNTER_WIDTH - 1].bytes().take_while(|&c| c == b'0').count();
        let digits = COUNTER_WIDTH - zeros;
        let mut out = String::with_capacity(2 + version.len() - zeros);
        out.push('~');
        out.push(char::from(b'@' + digits as u8));
        out.push_str(&version[zeros..]);
        return Cow::Owned(out);
    }
    if version.starts_with('~') {
        return Cow::Owned(format!("~{version}"));
    }
    Cow::Borrowed(version)
}

/// A version read from `checkpoint_blobs`, as it was written; `None` if the
/// stored text cannot come from [`blob_key`] (a damaged row).
pub(crate) fn blob_version(stored: &str) -> Option<Cow<'_, str>> {
    let Some(rest) = stored.strip_prefix('~') else {
        return Some(Cow::Borrowed(stored));
    };
    if rest.starts_with('~') {
        return Some(Cow::Borrowed(rest));
    }
    let (&len, rest) = rest.as_bytes().split_first()?;
    let digits = usize::from(len.checked_sub(b'@')?);
    if !(1..=COUNTER_WIDTH).contains(&digits)
        || rest.len() <= digits
        || rest[digits] != b'.'
        || !rest[..digits].iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    // `rest` starts after the one-byte ASCII letter: a char boundary.
    let rest = &stored[2..];
    let mut out = String::with_capacity(COUNTER_WIDTH - digits + rest.len());
    out.push_str(&ZEROS[..COUNTER_WIDTH - digits]);
    out.push_str(rest);
    Some(Cow::Owned(out))
}

/// [`blob_version`] of an owned column value, or [`Error::Corrupt`](crate::Error::Corrupt)
/// naming it.
pub(crate) fn blob_version_of(stored: String) -> crate::Result<String> {
    match blob_version(&stored) {
        Some(Cow::Borrowed(_)) => Ok(stored),
        Some(Cow::Owned(v)) => Ok(v),
        None => {
            Err(crate::Error::corrupt(format!("checkpoint_blobs holds the malformed version {stored:?}")))
        }
    }
}

/// Installs `agentstate_blob_key(version)`, [`blob_key`] in SQL (any value
/// that is not UTF-8 text is returned as it is), which the migration to this
/// format uses.
pub(crate) fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    let flags =
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC | FunctionFlags::SQLITE_INNOCUOUS;
    conn.create_scalar_function("agentstate_blob_key", 1, flags, |ctx| {
        use rusqlite::types::{Value, ValueRef};
        // A version that is not UTF-8 text (a damaged or foreign row) is
        // kept as it is: the migration must not fail on one odd row.
        Ok(match ctx.get_raw(0) {
            ValueRef::Text(t) => match std::str::from_utf8(t) {
                Ok(v) => Value::Text(blob_key(v).into_owned()),
                Err(_) => Value::Blob(t.to_vec()),
            },
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
            ValueRef::Integer(n) => Value::Integer(n),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Null => Value::Null,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_versions_expand_to_what_was_written() {
        let padded = format!("{:032}.0.2636492720420571", 1000);
        let zero = format!("{:032}.5", 0);
        for (stored, written) in [
            ("~1000.0.2636492720420571", padded.as_str()),
            ("~0.5", zero.as_str()),
            ("~~1.5", "~1.5"),
            ("~~", "~"),
            ("1.5", "1.5"),
            ("", ""),
        ] {
            assert_eq!(expand(stored).as_deref(), Some(written), "{stored:?}");
        }
    }

    #[test]
    fn every_blob_version_comes_back_as_written_and_padded_ones_keep_their_order() {
        let padded: Vec<String> = [0u128, 1, 9, 10, 16, 999, 1000, 12345678901234567890, 10u128.pow(32) - 1]
            .iter()
            .map(|n| format!("{n:032}.0.{}", n % 7))
            .collect();
        for pair in padded.windows(2) {
            assert!(blob_key(&pair[0]) < blob_key(&pair[1]), "{pair:?}");
        }
        let max = format!("{}.x", "9".repeat(32));
        let odd =
            ["~1.5", "~~", "~", "~A1.x", "1.5", "", "7", "-1", "00000000000000000000000000000001", "é.1"];
        for v in padded.iter().map(String::as_str).chain([max.as_str()]).chain(odd) {
            let k = blob_key(v);
            assert_eq!(blob_version(&k).as_deref(), Some(v), "{v:?} stored as {k:?}");
        }
        assert_eq!(blob_key(&padded[6]), "~D1000.0.6");
        assert_eq!(blob_key(&padded[0]), "~A0.0.0");
        assert_eq!(blob_key(&max), format!("~`{max}"));
        for s in ["~", "~A", "~A1", "~Ax.1", "~@.1", "~a1.1", "~B1.1x"] {
            assert_eq!(blob_version(s), None, "{s:?}");
        }
    }

    #[test]
    fn text_no_compact_version_can_be_is_refused() {
        for s in ["~", "~a.1", "~.1", "~12", &format!("~{}.1", "1".repeat(33))] {
            assert_eq!(expand(s), None, "{s:?}");
        }
    }
}
