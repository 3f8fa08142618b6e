//! The hasher of the read path's maps (decoded values by blob key, a read's
//! memo of versions and deltas).
//!
//! Their keys are short strings (thread, namespace, channel, version), looked
//! up several times per checkpoint a history read returns: SipHash, the
//! standard maps' default, was about a tenth of a read. This is the
//! multiply-rotate hash rustc uses for its own tables, started from a
//! per-process random seed so that key sets chosen to collide cannot be
//! prepared in advance.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A `HashMap` with [`FastState`].
pub(crate) type FastMap<K, V> = HashMap<K, V, FastState>;

/// Builds [`FastHasher`]s from this process's seed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastState {
    seed: u64,
}

impl Default for FastState {
    fn default() -> FastState {
        static SEED: OnceLock<u64> = OnceLock::new();
        let seed = *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64));
        FastState { seed }
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;

    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.seed)
    }
}

/// One word at a time: rotate, xor, multiply.
pub(crate) struct FastHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_alike_and_different_ones_apart() {
        let s = FastState::default();
        let key = |t: &str, v: &str| (t.to_string(), String::new(), "messages".to_string(), v.to_string());
        assert_eq!(s.hash_one(key("a", "1")), s.hash_one(key("a", "1")));
        // `str`'s Hash writes a terminator: moving a byte between fields
        // changes the hash.
        assert_ne!(s.hash_one(("ab", "c")), s.hash_one(("a", "bc")));
        let mut m: FastMap<(String, String, String, String), usize> = FastMap::default();
        for i in 0..10_000 {
            m.insert(key("thread", &format!("{i:032}.0.123")), i);
        }
        assert!((0..10_000).all(|i| m[&key("thread", &format!("{i:032}.0.123"))] == i));
    }
}
