//! Vector plumbing shared by the Store: sqlite-vec registration, the
//! little-endian `f32` blob format, and exact cosine similarity.

use std::os::raw::{c_char, c_int};

use rusqlite::Connection;

type VecInit =
    unsafe extern "C" fn(*mut rusqlite::ffi::sqlite3, *mut *mut c_char, *const std::ffi::c_void) -> c_int;

/// Registers sqlite-vec's functions (`vec_distance_cosine`, `vec_f32`, ...) on
/// this one connection. Never installed process-wide: other SQLite users in
/// the host process are not changed.
pub(crate) fn register(conn: &Connection) -> rusqlite::Result<()> {
    // SAFETY: sqlite-vec is compiled with SQLITE_CORE against the same bundled
    // SQLite as rusqlite, so its init function takes (db, errmsg, api) and
    // ignores `api`. The handle is valid for the duration of the call.
    let rc = unsafe {
        let init: VecInit = std::mem::transmute(sqlite_vec::sqlite3_vec_init as *const ());
        init(conn.handle(), std::ptr::null_mut(), std::ptr::null())
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            Some("sqlite-vec failed to initialise".into()),
        ));
    }
    Ok(())
}

/// Packs a vector as little-endian `f32`s (sqlite-vec's and Python's
/// `serialize_float32` format): `[1.0, 2.0]` -> `0000803f00000040`.
pub(crate) fn encode_f32(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Unpacks a little-endian `f32` blob; `None` if its length is not a multiple
/// of 4.
#[cfg(test)]
pub(crate) fn decode_f32(b: &[u8]) -> Option<Vec<f32>> {
    if b.len() % 4 != 0 {
        return None;
    }
    Some(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_vec_is_registered_per_connection_only() {
        let conn = Connection::open_in_memory().unwrap();
        assert!(conn.query_row("select vec_version()", [], |r| r.get::<_, String>(0)).is_err());
        register(&conn).unwrap();
        let v: String = conn.query_row("select vec_version()", [], |r| r.get(0)).unwrap();
        assert_eq!(v, "v0.1.9");
        let other = Connection::open_in_memory().unwrap();
        assert!(other.query_row("select vec_version()", [], |r| r.get::<_, String>(0)).is_err());
    }

    #[test]
    fn f32_blob_format_matches_python() {
        assert_eq!(encode_f32(&[1.0, 2.0]), vec![0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);
        assert_eq!(decode_f32(&encode_f32(&[0.5, -3.25])).unwrap(), vec![0.5, -3.25]);
        assert!(decode_f32(&[1, 2, 3]).is_none());
    }
}
