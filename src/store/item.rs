//! What the Store returns: [`Item`] and [`SearchItem`], and the conversion of
//! the file's UTC text timestamps to [`SystemTime`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::namespace::Namespace;
use crate::error::{Error, Result};

/// A stored item.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Item {
    /// Its namespace; pass it straight back to any Store call.
    pub namespace: Namespace,
    /// Its key within the namespace.
    pub key: String,
    /// The JSON object stored.
    pub value: Value,
    /// When it was first put (kept across updates). The file keeps whole
    /// seconds.
    pub created_at: SystemTime,
    /// When it was last put.
    pub updated_at: SystemTime,
    /// When it expires, if it has a TTL. A read that refreshes the TTL
    /// returns the refreshed expiry.
    pub expires_at: Option<SystemTime>,
}

/// A search hit: the item and its score.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SearchItem {
    /// The item.
    pub item: Item,
    /// The cosine similarity of the item's best vector to the query;
    /// `None` without a query, and for items without a (non-zero) vector.
    pub score: Option<f64>,
}

/// Parses the file's timestamps: `YYYY-MM-DD HH:MM:SS` (SQLite's
/// `CURRENT_TIMESTAMP`), optionally with `T` for the space, a fraction of a
/// second, and `Z` or a `+HH:MM` / `-HH:MM` offset (Python's `isoformat()`).
pub(crate) fn parse_time(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b' ' | b'T')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num_at(text, 0..4)?, num_at(text, 5..7)?, num_at(text, 8..10)?);
    let (h, mi, s) = (num_at(text, 11..13)?, num_at(text, 14..16)?, num_at(text, 17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        let digits = &frac[..n.min(9)];
        nanos = digits.parse::<u32>().ok()? * 10u32.pow(9 - digits.len() as u32);
        rest = &frac[n..];
    }
    let offset = match rest {
        "" | "Z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            sign * (num_at(rest, 1..3)? * 3600 + num_at(rest, 4..6)? * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo as u32, d as u32) * 86_400 + h * 3600 + mi * 60 + s - offset;
    let at = if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::new(secs as u64, nanos))?
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
            .checked_add(Duration::new(0, nanos))?
    };
    Some(at)
}

fn num_at(text: &str, r: std::ops::Range<usize>) -> Option<i64> {
    let s = text.get(r)?;
    s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
}

/// [`parse_time`], or [`Error::Corrupt`] naming the item and column.
pub(crate) fn time_column(text: &str, column: &str, prefix: &str, key: &str) -> Result<SystemTime> {
    parse_time(text).ok_or_else(|| {
        Error::corrupt(format!("{column} of item {prefix}/{key} is not a timestamp: {text:?}"))
    })
}

/// (year, month, day) -> days since 1970-01-01, proleptic Gregorian.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(t: SystemTime) -> f64 {
        t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
    }

    #[test]
    fn file_timestamps_parse_in_every_spelling_the_file_holds() {
        assert_eq!(secs(parse_time("1970-01-01 00:00:00").unwrap()), 0.0);
        assert_eq!(secs(parse_time("2024-01-01 00:00:00").unwrap()), 1_704_067_200.0);
        assert_eq!(secs(parse_time("2000-02-29T12:00:01").unwrap()), 951_825_601.0);
        assert_eq!(secs(parse_time("2024-01-01 00:00:00.250").unwrap()), 1_704_067_200.25);
        assert_eq!(secs(parse_time("2024-01-01 01:00:00.5+01:00").unwrap()), 1_704_067_200.5);
        assert_eq!(secs(parse_time("2023-12-31 23:00:00-01:00").unwrap()), 1_704_067_200.0);
        assert_eq!(
            parse_time("2126-10-29 02:47:53.896114+00:00").unwrap(),
            parse_time("2126-10-29T02:47:53.896114Z").unwrap()
        );
        for bad in [
            "",
            "2024-01-01",
            "2024-13-01 00:00:00",
            "2024-01-01 00:00:00.",
            "2024-01-01 00:00:00+1",
            "x024-01-01 00:00:00",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}
