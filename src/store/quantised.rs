//! Vectors as `i8` rows with proven error bounds, for pre-scoring searches
//! in a quarter of the memory of their `f32` rows.
//!
//! A unit vector `v` is kept as `scale * q` (`q` in `i8`) together with the
//! L2 norm of `v - scale * q`: for a unit query, Cauchy-Schwarz puts the
//! exact dot product within that norm of `scale * (query . q)`. The query
//! is quantised too, to `i16` with its own error norm ([`Query`]), so that
//! the product is an exact integer one; the bound widens by that error and
//! by a slack for `f32` rounding. Search bounds every item from its rows
//! and scores exactly, from the file, only the items whose bound can still
//! reach the page.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::cache::unit_vector;

/// Unit vectors quantised to `i8`, each row with its scale, error bound and
/// owner (an item index of the holder's choosing).
pub(crate) struct Rows {
    dims: usize,
    quantised: Vec<i8>,
    scale: Vec<f32>,
    error: Vec<f32>,
    owners: Vec<u32>,
}

/// What one row of `dims` dimensions costs: its `i8` copy, scale, error and
/// owner.
pub(crate) fn row_bytes(dims: usize) -> usize {
    dims + 12
}

impl Rows {
    pub(crate) fn new(dims: usize) -> Rows {
        Rows { dims, quantised: vec![], scale: vec![], error: vec![], owners: vec![] }
    }

    /// Room for `rows` more rows without reallocating (growing by doubling
    /// would hold the old and new arrays at once).
    pub(crate) fn reserve_exact(&mut self, rows: usize) {
        self.quantised.reserve_exact(rows.saturating_mul(self.dims));
        self.scale.reserve_exact(rows);
        self.error.reserve_exact(rows);
        self.owners.reserve_exact(rows);
    }

    /// Adds the stored vector `blob` (little-endian `f32`, `dims` of them)
    /// for `owner`, scaled to unit length (`v` is scratch space); a zero or
    /// non-finite vector has no direction and is left out (false).
    pub(crate) fn push(&mut self, blob: &[u8], owner: u32, v: &mut Vec<f32>) -> bool {
        if !unit_vector(blob, v) {
            return false;
        }
        let (scale, error) = quantise(v, &mut self.quantised);
        self.scale.push(scale);
        self.error.push(error);
        self.owners.push(owner);
        true
    }

    /// The dimension of every row.
    pub(crate) fn dims(&self) -> usize {
        self.dims
    }

    /// The number of rows.
    pub(crate) fn len(&self) -> usize {
        self.owners.len()
    }

    /// Keeps the first `rows` rows.
    pub(crate) fn truncate(&mut self, rows: usize) {
        self.quantised.truncate(rows * self.dims);
        self.scale.truncate(rows);
        self.error.truncate(rows);
        self.owners.truncate(rows);
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.quantised.shrink_to_fit();
        self.scale.shrink_to_fit();
        self.error.shrink_to_fit();
        self.owners.shrink_to_fit();
    }

    /// Each row's owner.
    pub(crate) fn owners(&self) -> &[u32] {
        &self.owners
    }

    /// Bounds on the exact dot product of row `row` with the unit query
    /// `q`: `(lower, upper)`.
    pub(crate) fn bounds(&self, row: usize, q: &Query) -> (f32, f32) {
        debug_assert_eq!(q.quantised.len(), self.dims, "a query of the rows' dimension");
        let qv = &self.quantised[row * self.dims..(row + 1) * self.dims];
        // `q . v` lies within `error_v` of `q . scale_v*qv`, and that within
        // `|scale_v*qv| * error_q <= (1 + error_v) * error_q` of
        // `scale_v * scale_q * (qi . qv)`, an exact integer product.
        let a = (f64::from(self.scale[row]) * f64::from(q.scale) * dot_i16(&q.quantised, qv) as f64) as f32;
        let ev = self.error[row];
        let e = ev + (1.0 + ev) * q.error + q.slack;
        (a - e, a + e)
    }

    /// [`bounds`](Self::bounds) of every row whose index `keep` accepts
    /// (the others `(-inf, -inf)`), in row order. A large set of rows is
    /// split between a few scoped threads: the scan reads every row's
    /// bytes, and one core alone does not draw the memory's bandwidth.
    /// Helper threads are shared by the whole process (at most one fewer
    /// than the cores): searches running at once split them, and a search
    /// that finds none scans alone.
    pub(crate) fn bounds_where(&self, q: &Query, keep: impl Fn(usize) -> bool + Sync) -> Vec<(f32, f32)> {
        static HELPERS: AtomicUsize = AtomicUsize::new(0);
        let (threads, max) = workers(self.len().saturating_mul(self.dims));
        let helpers = Helpers::reserve(&HELPERS, max - 1, threads - 1);
        self.bounds_in(q, &keep, 1 + helpers.count)
    }

    fn bounds_in(
        &self,
        q: &Query,
        keep: &(impl Fn(usize) -> bool + Sync),
        threads: usize,
    ) -> Vec<(f32, f32)> {
        let none = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        let part = |rows: std::ops::Range<usize>| -> Vec<(f32, f32)> {
            rows.map(|row| if keep(row) { self.bounds(row, q) } else { none }).collect()
        };
        let n = self.len();
        if threads <= 1 || n < 2 {
            return part(0..n);
        }
        // Parts are claimed from a counter, so that a thread that could
        // not be spawned leaves its share to the others (the caller's
        // thread works too).
        let per = n.div_ceil(threads * PARTS_PER_THREAD);
        let count = n.div_ceil(per);
        let parts: Vec<OnceLock<Vec<(f32, f32)>>> = (0..count).map(|_| OnceLock::new()).collect();
        let range = |i: usize| i * per..((i + 1) * per).min(n);
        let next = AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                break;
            }
            let _ = parts[i].set(part(range(i)));
        };
        std::thread::scope(|s| {
            for _ in 1..threads {
                // A failed spawn only means fewer helpers.
                let _ = std::thread::Builder::new().spawn_scoped(s, work);
            }
            work();
        });
        // (Every part was claimed and set before the scope ended; one that
        // was not would be computed here.)
        parts
            .into_iter()
            .enumerate()
            .flat_map(|(i, p)| p.into_inner().unwrap_or_else(|| part(range(i))))
            .collect()
    }
}

/// A unit query prepared for [`Rows::bounds`]: quantised to `i16`, with
/// the L2 norm of its quantisation error and the slack for `f32` rounding.
pub(crate) struct Query {
    quantised: Vec<i16>,
    scale: f32,
    error: f32,
    slack: f32,
}

impl Query {
    /// The unit vector `q` prepared for bounding rows of `q.len()`
    /// dimensions.
    pub(crate) fn new(q: &[f32]) -> Query {
        let max = q.iter().fold(0f32, |m, x| m.max(x.abs()));
        let top = f32::from(i16::MAX);
        let scale = if max > 0.0 && max.is_finite() { max / top } else { 1.0 };
        let mut err2 = 0f64;
        let quantised = q
            .iter()
            .map(|&x| {
                let v = (x / scale).round().clamp(-top, top) as i16;
                err2 += (f64::from(x) - f64::from(scale) * f64::from(v)).powi(2);
                v
            })
            .collect();
        // The exact score is an `f32` dot product of two unit vectors: its
        // rounding error is at most about `dims` units in the last place.
        let slack = SLACK + q.len() as f32 * f32::EPSILON;
        Query { quantised, scale, error: err2.sqrt() as f32, slack }
    }
}

/// Row elements (rows times dimensions) per thread below which a scan
/// takes no more threads: about a third of a millisecond here.
const MIN_WORK_PER_THREAD: usize = 1 << 20;

/// The most threads one scan uses.
const MAX_THREADS: usize = 8;

/// Parts per thread, for balance when one thread is slower or missing.
const PARTS_PER_THREAD: usize = 4;

/// How many threads a scan of `work` row elements would use, and the most
/// any scan may: `(wanted, most)`, both at least 1.
fn workers(work: usize) -> (usize, usize) {
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let most = cores.clamp(1, MAX_THREADS);
    ((work / MIN_WORK_PER_THREAD).clamp(1, most), most)
}

/// Helper threads taken from a process-wide count (see
/// [`Rows::bounds_where`]), given back when dropped.
struct Helpers<'a> {
    taken: &'a AtomicUsize,
    count: usize,
}

impl<'a> Helpers<'a> {
    /// Up to `want` helpers, as long as `taken` stays at most `max`.
    fn reserve(taken: &'a AtomicUsize, max: usize, want: usize) -> Helpers<'a> {
        let mut count = 0;
        let _ = taken.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
            count = want.min(max.saturating_sub(now));
            (count > 0).then_some(now + count)
        });
        Helpers { taken, count }
    }
}

impl Drop for Helpers<'_> {
    fn drop(&mut self) {
        if self.count > 0 {
            self.taken.fetch_sub(self.count, Ordering::AcqRel);
        }
    }
}

/// Slack added to every bound, covering f32 rounding in the bound itself
/// (the exact score's rounding is added per query, see [`Query::new`]).
const SLACK: f32 = 1e-4;

/// Appends the i8 quantisation `q` of the unit vector `v` to `out` (`v` is
/// about `scale` times `q`) and returns `(scale, error)`, `error` being the
/// L2 norm of their difference: for a unit query, the exact dot product
/// lies within `error` of `scale` times its dot product with `q`.
fn quantise(v: &[f32], out: &mut Vec<i8>) -> (f32, f32) {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    let mut err2 = 0f64;
    for x in v {
        let q = (x / scale).round().clamp(-127.0, 127.0) as i8;
        err2 += f64::from(x - scale * f32::from(q)).powi(2);
        out.push(q);
    }
    (scale, err2.sqrt() as f32)
}

/// `Σ q[j] * v[j]`, exact: products summed in `i32` over blocks short
/// enough not to overflow (256 * 127 * 32767 < 2^31), blocks in `i64`;
/// written so that the compiler vectorises it.
fn dot_i16(q: &[i16], v: &[i8]) -> i64 {
    let mut total = 0i64;
    for (bq, bv) in q.chunks(256).zip(v.chunks(256)) {
        let mut acc = [0i32; 16];
        let (cq, cv) = (bq.chunks_exact(16), bv.chunks_exact(16));
        let (rq, rv) = (cq.remainder(), cv.remainder());
        for (x, y) in cq.zip(cv) {
            for i in 0..16 {
                acc[i] += i32::from(x[i]) * i32::from(y[i]);
            }
        }
        let mut s: i32 = acc.iter().sum();
        for (x, y) in rq.iter().zip(rv) {
            s += i32::from(*x) * i32::from(*y);
        }
        total += i64::from(s);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::cache::{dot, normalise};
    use proptest::prelude::*;

    fn rows_of(vectors: &[Vec<f32>]) -> Rows {
        let mut rows = Rows::new(vectors[0].len());
        let mut scratch = vec![];
        for (i, v) in vectors.iter().enumerate() {
            let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            rows.push(&blob, i as u32, &mut scratch);
        }
        rows
    }

    /// A component: mostly ordinary, sometimes zero, tiny or dominant, so
    /// that scales and errors of every size are met.
    fn component() -> impl Strategy<Value = f32> {
        prop_oneof![
            6 => -1.0f32..1.0,
            1 => Just(0.0f32),
            1 => -1e-30f32..1e-30,
            1 => prop_oneof![Just(1e30f32), Just(-1e30f32), Just(f32::MAX)],
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// The score search computes exactly (an `f32` dot product of the
        /// unit vectors) lies within every row's bounds, whatever the
        /// dimension (blocks of 256 and their remainders included).
        #[test]
        fn bounds_hold_the_exact_score(
            (vectors, q) in (1usize..600).prop_flat_map(|dims| (
                prop::collection::vec(prop::collection::vec(component(), dims), 1..8),
                prop::collection::vec(component(), dims),
            ))
        ) {
            let mut unit_q = q.clone();
            prop_assume!(normalise(&mut unit_q));
            let rows = rows_of(&vectors);
            let query = Query::new(&unit_q);
            let mut row = 0;
            for v in &vectors {
                let mut unit_v = v.clone();
                if !normalise(&mut unit_v) {
                    continue;
                }
                let exact = dot(&unit_q, &unit_v);
                let (lo, hi) = rows.bounds(row, &query);
                prop_assert!(lo <= exact && exact <= hi, "{lo} <= {exact} <= {hi}");
                row += 1;
            }
            prop_assert_eq!(row, rows.len());
        }
    }

    /// A scan split between threads returns what one thread does, row for
    /// row, skipped rows included.
    #[test]
    fn a_scan_split_between_threads_equals_one_thread() {
        let vectors: Vec<Vec<f32>> =
            (0..1001).map(|i| (0..40).map(|j| ((i * 31 + j * 7) % 17) as f32 - 8.0).collect()).collect();
        let rows = rows_of(&vectors);
        let mut q: Vec<f32> = (0..40).map(|j| (j % 5) as f32 - 2.0).collect();
        assert!(normalise(&mut q));
        let query = Query::new(&q);
        let keep = |row: usize| row % 3 != 1;
        let one = rows.bounds_in(&query, &keep, 1);
        assert_eq!(one.len(), rows.len());
        assert_eq!(one[1], (f32::NEG_INFINITY, f32::NEG_INFINITY));
        for threads in [2, 3, 8] {
            assert_eq!(rows.bounds_in(&query, &keep, threads), one, "{threads} threads");
        }
    }

    /// The integer product is exact at the extremes of both types, over
    /// more dimensions than one `i32` block could sum.
    #[test]
    fn the_integer_product_is_exact_at_the_extremes() {
        for dims in [1, 15, 16, 255, 256, 257, 4099] {
            let q = vec![i16::MAX; dims];
            let v = vec![i8::MIN + 1; dims];
            assert_eq!(dot_i16(&q, &v), -(dims as i64) * 127 * 32767, "{dims}");
            let q = vec![-i16::MAX; dims];
            assert_eq!(dot_i16(&q, &v), dims as i64 * 127 * 32767, "{dims}");
        }
    }

    #[test]
    fn workers_stay_within_their_limits() {
        assert_eq!(workers(0).0, 1);
        assert_eq!(workers(MIN_WORK_PER_THREAD - 1).0, 1);
        let (wanted, most) = workers(usize::MAX);
        assert_eq!(wanted, most);
        assert!((1..=MAX_THREADS).contains(&most));
    }

    /// Scans running at once share the helpers: what one holds, another
    /// cannot take, until it is given back.
    #[test]
    fn helpers_are_shared_and_given_back() {
        let taken = AtomicUsize::new(0);
        let a = Helpers::reserve(&taken, 3, 2);
        assert_eq!(a.count, 2);
        let b = Helpers::reserve(&taken, 3, 2);
        assert_eq!(b.count, 1);
        let c = Helpers::reserve(&taken, 3, 2);
        assert_eq!(c.count, 0);
        drop(a);
        assert_eq!(taken.load(Ordering::Acquire), 1);
        let d = Helpers::reserve(&taken, 3, 5);
        assert_eq!(d.count, 2);
        drop((b, c, d));
        assert_eq!(taken.load(Ordering::Acquire), 0);
        assert_eq!(Helpers::reserve(&taken, 0, 4).count, 0);
    }
}
