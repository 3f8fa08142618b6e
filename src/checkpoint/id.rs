//! Checkpoint ids (UUIDv6, as LangGraph makes them), channel versions (its format)
//! and timestamps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use super::row::push_padded;
use super::types::ChannelVersion;
use crate::python::python_float_repr;

/// 100 ns ticks between 1582-10-15 (the UUID epoch) and 1970-01-01.
const GREGORIAN_OFFSET: u64 = 0x01B2_1DD2_1381_4000;

static LAST_TS100: AtomicU64 = AtomicU64::new(0);

/// 64 random bits from a per-thread SplitMix64 stream seeded by the OS
/// (a v4 UUID's 122 random bits): a version's random suffix and an id's node
/// need to differ between writers, not to be secret, and one `getrandom`
/// system call per version cost more than the rest of making it. The stream
/// is seeded again in a forked child (see `forks`), so parent and child never
/// continue the same stream.
fn random_u64() -> u64 {
    thread_local! {
        static STREAM: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
    }
    STREAM.with(|cell| {
        let (seeded_in, mut state) = cell.get();
        let now = forks();
        if seeded_in != now {
            let x = Uuid::new_v4().as_u128();
            state = (x >> 64) as u64 ^ x as u64;
        }
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        cell.set((now, state));
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// A number that differs in every process, starting at 1, and changes in a
/// forked child before it runs any code of ours. On Unix a `pthread_atfork`
/// child handler counts forks (one atomic load per call, where asking for
/// the process id was a system call per version and id); elsewhere there is
/// no `fork` and the number stays 1.
fn forks() -> u64 {
    static FORKS: AtomicU64 = AtomicU64::new(1);
    #[cfg(unix)]
    {
        extern "C" fn forked() {
            FORKS.fetch_add(1, Ordering::Relaxed);
        }
        extern "C" {
            fn pthread_atfork(
                prepare: Option<extern "C" fn()>,
                parent: Option<extern "C" fn()>,
                child: Option<extern "C" fn()>,
            ) -> std::ffi::c_int;
        }
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        REGISTERED.call_once(|| {
            // SAFETY: the handler only increments an atomic, which is
            // async-signal-safe, as code run in a forked child must be.
            if unsafe { pthread_atfork(None, None, Some(forked)) } != 0 {
                // Not registered (out of memory): fall back to asking for
                // the process id on every call.
                FORKS.store(0, Ordering::Relaxed);
            }
        });
        match FORKS.load(Ordering::Relaxed) {
            0 => u64::from(std::process::id()) | 1 << 32,
            n => n,
        }
    }
    #[cfg(not(unix))]
    FORKS.load(Ordering::Relaxed)
}

/// A random (version 4) UUID from this thread's stream (see `random_u64`):
/// no system call per id, as LangGraph's message ids need none either.
pub(crate) fn uuid4() -> Uuid {
    let bytes = (u128::from(random_u64()) << 64 | u128::from(random_u64())).to_le_bytes();
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// A new UUIDv6, built the way LangGraph's `uuid6(clock_seq=...)` builds it.
///
/// Ids are strictly increasing within the process (a clock that does not
/// advance is bumped by one tick), so their string order is creation order.
/// `clock_seq` is masked to 14 bits; LangGraph passes the step, so `-1`
/// gives the group `bfff`. `None` picks a random one.
pub fn uuid6(clock_seq: Option<i64>) -> Uuid {
    build(clock_ts(), clock_seq)
}

/// The largest timestamp a UUIDv6 holds: 60 bits of 100 ns ticks.
const MAX_TS: u64 = (1 << 60) - 1;

/// The timestamp bits of a UUID in its hyphenated text form, read as a
/// UUIDv6 lays them out (the 48 bits before the version digit, then the 12
/// after it), and the version digit; `None` if the text is not a UUID.
fn timestamp_of(id: &str) -> Option<(u64, usize)> {
    let u = Uuid::parse_str(id).ok()?;
    let v = u.as_u128();
    let ts = ((((v >> 80) as u64) & 0xFFFF_FFFF_FFFF) << 12) | (((v >> 64) as u64) & 0xFFF);
    Some((ts, u.get_version_num()))
}

/// The next timestamp of this process's clock: now in 100 ns ticks since
/// 1582-10-15, bumped past the last one handed out.
fn clock_ts() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mut ts = ((now / 100) as u64 + GREGORIAN_OFFSET).min(MAX_TS);
    let mut last = LAST_TS100.load(Ordering::Relaxed);
    loop {
        if ts <= last {
            ts = last.saturating_add(1);
        }
        match LAST_TS100.compare_exchange_weak(last, ts, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return ts,
            Err(seen) => last = seen,
        }
    }
}

/// A UUIDv6 of timestamp `ts` (at most [`MAX_TS`]).
fn build(ts: u64, clock_seq: Option<i64>) -> Uuid {
    let clock_seq = clock_seq.unwrap_or_else(|| random_u64() as i64) as u64 & 0x3FFF;
    let node = random_u64() & 0xFFFF_FFFF_FFFF;
    let mut v: u128 = (((ts >> 12) & 0xFFFF_FFFF_FFFF) as u128) << 80;
    v |= ((ts & 0xFFF) as u128) << 64;
    v |= (clock_seq as u128) << 48;
    v |= node as u128;
    // version 6, variant 10
    v &= !(0xF000u128 << 64);
    v |= 0x6000u128 << 64;
    v &= !(0xC000u128 << 48);
    v |= 0x8000u128 << 48;
    Uuid::from_u128(v)
}

/// A new UUIDv6 like [`uuid6`] whose text sorts after `after` (an earlier
/// checkpoint's id), even if the wall clock has gone back since `after` was
/// made (an NTP correction, a device without a real-time clock): the
/// timestamp is then the later one's plus one tick. A timestamp taken from
/// `after` stays with this id: the process's clock does not jump with it,
/// so one id from the far future leaves the ids of other threads alone.
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if no UUIDv6
/// sorts after `after`: its timestamp is the last one a UUIDv6 holds, or it
/// is not a UUID in lowercase hyphenated form and sorts after the id the
/// clock gives (LangGraph would store the new checkpoint, and never read it
/// back as the latest).
pub(crate) fn uuid6_after(clock_seq: Option<i64>, after: Option<&str>) -> crate::Result<String> {
    let mut ts = clock_ts();
    if let Some((floor, version)) = after.and_then(timestamp_of) {
        // A UUID of a later version digit sorts after a UUIDv6 of the same
        // 48 high bits: pass those.
        let floor = if version > 6 { floor | 0xFFF } else { floor };
        ts = ts.max(floor.saturating_add(1));
    }
    let id = build(ts.min(MAX_TS), clock_seq).to_string();
    match after {
        Some(a) if id.as_str() <= a => Err(crate::Error::InvalidArgument(format!(
            "no checkpoint id can sort after {a:?} (the id of the checkpoint this one continues): it is not a \
             lowercase UUID or it is at the end of UUIDv6 time"
        ))),
        _ => Ok(id),
    }
}

/// The version after `current`, in LangGraph's format:
/// `"{counter+1:032}.{random:016}"`. `None` starts at 1; an
/// integer or a string version continues its counter.
pub fn next_version(current: Option<&ChannelVersion>) -> ChannelVersion {
    let r = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
    // One buffer, filled in place: a step makes a version per changed
    // channel, and `format!`'s padding writes one character at a time.
    let mut out = String::with_capacity(52);
    push_next_counter(&mut out, current);
    out.push('.');
    let start = out.len();
    push_python_float_repr(&mut out, r);
    let len = out.len() - start;
    if len < 16 {
        out.insert_str(start, &ZEROS_16[..16 - len]);
    }
    ChannelVersion::Str(out)
}

const ZEROS_16: &str = "0000000000000000";

/// Pushes the counter after `current`'s, zero-padded to 32 characters
/// (Python's `f"{n:032}"`). Python's counters are unbounded integers: so
/// are these (an integer version past `i64`, a string counter of any length
/// of digits). A string counter that is not a number counts from 0.
fn push_next_counter(out: &mut String, current: Option<&ChannelVersion>) {
    let text = match current {
        None => "0",
        Some(ChannelVersion::Int(n)) => {
            out.push_str(&format!("{:032}", i128::from(*n) + 1));
            return;
        }
        Some(ChannelVersion::Str(s)) => s.split('.').next().unwrap_or(""),
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Plain digits (LangGraph's own counters): add one to the text.
        let digits = text.trim_start_matches('0');
        let carry = digits.bytes().rev().take_while(|&b| b == b'9').count();
        let len = if carry == digits.len() { digits.len() + 1 } else { digits.len() };
        for _ in len..32 {
            out.push('0');
        }
        if carry == digits.len() {
            out.push('1');
        } else {
            out.push_str(&digits[..digits.len() - carry - 1]);
            out.push(char::from(digits.as_bytes()[digits.len() - carry - 1] + 1));
        }
        for _ in 0..carry {
            out.push('0');
        }
        return;
    }
    match text.parse::<i128>().ok().and_then(|n| n.checked_add(1)) {
        // A sign (`-3`, `+3`): Python's int() reads it.
        Some(n) => out.push_str(&format!("{n:032}")),
        None => out.push_str(&format!("{:032}", 1)),
    }
}

/// Pushes Python's `repr` of a float in `[0, 1)`: Rust's shortest
/// round-trip digits where they are written the same way (`0.0001` and
/// up), [`python_float_repr`] for the rest (`0.0`, `5e-05`).
fn push_python_float_repr(out: &mut String, x: f64) {
    use std::fmt::Write;
    if x >= 1e-4 {
        let _ = write!(out, "{x}");
    } else {
        out.push_str(&python_float_repr(x));
    }
}

/// Now as `2024-05-04T06:32:42.235444+00:00` (Python's
/// `datetime.now(timezone.utc).isoformat()`).
pub(crate) fn now_iso8601() -> String {
    iso8601(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default())
}

/// `d` after the epoch as `2024-05-04T06:32:42.235444+00:00`.
fn iso8601(d: Duration) -> String {
    timestamp(d, 'T', 6, "+00:00")
}

/// Now as SQLite's `strftime('%Y-%m-%d %H:%M:%f', 'now')` writes it
/// (`2024-05-04 06:32:42.235`: milliseconds, UTC), the form of the file's
/// `created_at` and `expires_at` columns.
pub(crate) fn sqlite_now() -> String {
    timestamp(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default(), ' ', 3, "")
}

/// `d` after the epoch as `YYYY-MM-DD{sep}HH:MM:SS.{fraction}{suffix}`
/// with `digits` (3 or 6) digits of fraction, by hand: every checkpoint gets
/// one, and `format!`'s padding writes one character at a time.
fn timestamp(d: Duration, sep: char, digits: usize, suffix: &str) -> String {
    let secs = d.as_secs();
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    let fraction = if digits == 3 { u64::from(d.subsec_millis()) } else { u64::from(d.subsec_micros()) };
    let mut out = String::with_capacity(32);
    // (A year after the epoch is positive; past 9999 it takes more digits.)
    for (n, width, then) in [
        (y as u64, 4, '-'),
        (u64::from(m), 2, '-'),
        (u64::from(day), 2, sep),
        (rem / 3600, 2, ':'),
        ((rem / 60) % 60, 2, ':'),
        (rem % 60, 2, '.'),
    ] {
        push_padded(&mut out, n, width);
        out.push(then);
    }
    push_padded(&mut out, fraction, digits);
    out.push_str(suffix);
    out
}

/// Days since 1970-01-01 -> (year, month, day), proleptic Gregorian.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forks of one parent take versions with the same counter: their random
    /// suffixes must differ, within a thread and across threads (each has its
    /// own stream, seeded apart).
    #[test]
    fn version_suffixes_differ_within_and_across_threads() {
        let make = || (0..2000).map(|_| next_version(None).to_string()).collect::<Vec<_>>();
        let mut all: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(make)).collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        all.extend(make());
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert!(all.iter().all(|v| v.starts_with("00000000000000000000000000000001.")));
    }

    #[test]
    fn ids_are_strictly_increasing_version_6_and_clock_seq_is_settable() {
        let ids: Vec<String> = (0..10_000).map(|_| uuid6(None).to_string()).collect();
        for w in ids.windows(2) {
            assert!(w[0] < w[1], "{} !< {}", w[0], w[1]);
        }
        assert!(ids.iter().all(|id| id.as_bytes()[14] == b'6'));
        let id = uuid6(Some(-1)).to_string();
        assert_eq!(id.split('-').nth(3), Some("bfff"));
        assert_eq!(uuid6(Some(-2)).to_string().split('-').nth(3), Some("bffe"));
        assert_eq!(uuid6(Some(5)).to_string().split('-').nth(3), Some("8005"));
    }

    #[test]
    fn versions_follow_python_format() {
        let v = next_version(None).to_string();
        assert!(v.starts_with(&format!("{}1.", "0".repeat(31))), "{v}");
        assert!(v.len() >= 32 + 1 + 16);
        let v = next_version(Some(&"00000000000000000000000000000005.123".into())).to_string();
        assert!(v.starts_with(&format!("{}06.", "0".repeat(30))), "{v}");
        let v = next_version(Some(&ChannelVersion::Int(7))).to_string();
        assert!(v.starts_with(&format!("{}8.", "0".repeat(31))), "{v}");
    }

    #[test]
    fn python_float_repr_cases() {
        assert_eq!(python_float_repr(0.5), "0.5");
        assert_eq!(format!("{:0>16}", python_float_repr(0.5)), "00000000000000.5");
        assert_eq!(python_float_repr(0.08839345909685259), "0.08839345909685259");
        assert_eq!(python_float_repr(5e-5), "5e-05");
        assert_eq!(python_float_repr(1.25e-7), "1.25e-07");
    }

    #[test]
    fn uuid4_is_a_random_version_4_uuid() {
        let ids: std::collections::HashSet<Uuid> = (0..1000).map(|_| uuid4()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|u| u.get_version_num() == 4 && u.get_variant() == uuid::Variant::RFC4122));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        let ts = now_iso8601();
        assert_eq!(ts.len(), "2024-05-04T06:32:42.235444+00:00".len(), "{ts}");
        for (secs, micros) in [(0, 0), (951_782_400, 999_999), (1_714_804_362, 235_444), (253_402_300_799, 1)]
        {
            let d = Duration::new(secs, micros * 1000);
            let (y, m, day) = civil_from_days((secs / 86_400) as i64);
            let rem = secs % 86_400;
            let (h, mi, s) = (rem / 3600, (rem / 60) % 60, rem % 60);
            assert_eq!(iso8601(d), format!("{y:04}-{m:02}-{day:02}T{h:02}:{mi:02}:{s:02}.{micros:06}+00:00"));
        }
        assert_eq!(iso8601(Duration::new(1_714_804_362, 235_444_000)), "2024-05-04T06:32:42.235444+00:00");
        assert_eq!(
            timestamp(Duration::new(1_714_804_362, 235_944_000), ' ', 3, ""),
            "2024-05-04 06:32:42.235"
        );
        assert_eq!(sqlite_now().len(), "2024-05-04 06:32:42.235".len());
    }
}

#[cfg(test)]
mod after_tests {
    use super::*;

    #[test]
    fn an_id_made_after_a_future_id_sorts_after_it() {
        // An id from a clock one hour ahead: the clock has since gone back.
        let ahead = GREGORIAN_OFFSET
            + (SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() / 100) as u64
            + 36_000_000_000;
        let v: u128 = ((((ahead >> 12) & 0xFFFF_FFFF_FFFF) as u128) << 80)
            | (0x6000u128 << 64)
            | (((ahead & 0xFFF) as u128) << 64)
            | (0x8000u128 << 48);
        let future = Uuid::from_u128(v).to_string();
        assert_eq!(timestamp_of(&future), Some((ahead, 6)));
        let next = uuid6_after(Some(3), Some(&future)).unwrap();
        assert!(next > future, "{next} must sort after {future}");
        let again = uuid6_after(Some(4), Some(&next)).unwrap();
        assert!(again > next, "{again} must sort after {next}");
        assert!(uuid6(None).to_string() < future, "the process clock did not jump with it");
        assert_eq!(timestamp_of("not-a-uuid"), None);
    }

    /// The last UUIDv6 timestamp: nothing sorts after it, a typed error; and
    /// the ids of other threads are made as before.
    #[test]
    fn nothing_sorts_after_the_end_of_uuid6_time() {
        let last = "ffffffff-ffff-6fff-bfff-ffffffffffff";
        let err = uuid6_after(Some(1), Some(last)).unwrap_err();
        assert!(matches!(err, crate::Error::InvalidArgument(_)), "{err:?}");
        let a = uuid6(None).to_string();
        let b = uuid6_after(Some(1), Some(&a)).unwrap();
        assert!(a < b && b.as_bytes()[14] == b'6' && !b.starts_with("0000"), "{a} {b}");
        // One tick before the end: one id still fits.
        let almost = "ffffffff-ffff-6ffe-bfff-ffffffffffff";
        assert!(uuid6_after(Some(1), Some(almost)).unwrap().as_str() > almost);
    }

    /// Parents that are other kinds of UUID: the new id sorts after them;
    /// text that no UUIDv6 sorts after is refused.
    #[test]
    fn ids_after_other_uuids_and_refusals() {
        for parent in [
            "f47ac10b-58cc-4372-a567-0e02b2c3d479", // v4
            "0190abcd-ef01-7234-8567-0e02b2c3d479", // v7 of the same 48 high bits
            "ffffffff-ffff-7fff-bfff-ffffffffffff", // v7 at the end
            "1F1E8220-C443-69B9-8000-000000000000", // upper case
        ] {
            match uuid6_after(None, Some(parent)) {
                Ok(id) => assert!(id.as_str() > parent, "{id} after {parent}"),
                Err(e) => {
                    assert!(matches!(e, crate::Error::InvalidArgument(_)));
                    assert!(parent.starts_with("ffffffff"), "{parent}: {e}");
                }
            }
        }
        for parent in
            ["{00000000-0000-6000-8000-000000000000}", "zzz", "urn:uuid:00000000-0000-6000-8000-000000000000"]
        {
            assert!(
                matches!(uuid6_after(None, Some(parent)), Err(crate::Error::InvalidArgument(_))),
                "{parent}"
            );
        }
        // Text a UUIDv6 does sort after is fine.
        assert!(uuid6_after(None, Some("0-step")).unwrap().as_str() > "0-step");
    }

    /// Counters past `i64` continue as Python's `int` does, and never wrap
    /// or go back.
    #[test]
    fn next_version_never_overflows_or_goes_back() {
        let next = |v: ChannelVersion| next_version(Some(&v)).to_string();
        assert!(next(ChannelVersion::Int(i64::MAX)).starts_with("00000000000009223372036854775808."));
        assert!(next(ChannelVersion::Int(-5)).starts_with("-0000000000000000000000000000004."));
        let big = format!("{}.5", "9".repeat(32));
        assert!(next(big.as_str().into()).starts_with(&format!("1{}.", "0".repeat(32))));
        let huge = format!("{}.5", "9".repeat(45));
        assert!(next(huge.as_str().into()).starts_with(&format!("1{}.", "0".repeat(45))));
        let i64_text = format!("{}.5", i64::MAX);
        assert!(next(i64_text.as_str().into()).starts_with("00000000000009223372036854775808."));
        // Not a number: counted from 0, as before.
        assert!(next("abc".into()).starts_with(&format!("{}1.", "0".repeat(31))));
    }
}
