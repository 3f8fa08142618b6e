//! Vectors as `i8` rows with proven error bounds, for pre-scoring searches
//! in a quarter of the memory of their `f32` rows.
//!
//! A unit vector `v` is kept as `scale * q` (`q` in `i8`) together with the
//! L2 norm of `v - scale * q`: for a unit query, Cauchy-Schwarz puts the
//! exact dot product within that norm (plus [`SLACK`] for `f32` rounding) of
//! `scale * (query . q)`. Search bounds every item from its rows and scores
//! exactly, from the file, only the items whose bound can still reach the
//! page.

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

    /// Bounds on the exact dot product of row `row` with the unit query `q`
    /// (`q.len()` = `dims`): `(lower, upper)`.
    pub(crate) fn bounds(&self, row: usize, q: &[f32]) -> (f32, f32) {
        let qv = &self.quantised[row * self.dims..(row + 1) * self.dims];
        let a = self.scale[row] * dot_i8(q, qv);
        let e = self.error[row] + SLACK;
        (a - e, a + e)
    }
}

/// Slack added to every bound, covering f32 rounding in both dot products.
const SLACK: f32 = 1e-4;

/// Appends the i8 quantisation `q` of the unit vector `v` to `out` (`v` is
/// about `scale` times `q`) and returns `(scale, error)`, `error` being the
/// L2 norm of their difference: for a unit query, the exact dot product
/// lies within `error` of `scale * dot_i8(query, q)`.
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

/// `Σ q[j] * v[j]` for an i8 row.
fn dot_i8(q: &[f32], v: &[i8]) -> f32 {
    let mut acc = [0f32; 8];
    let (cq, cv) = (q.chunks_exact(8), v.chunks_exact(8));
    let (rq, rv) = (cq.remainder(), cv.remainder());
    for (x, y) in cq.zip(cv) {
        for i in 0..8 {
            acc[i] += x[i] * f32::from(y[i]);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in rq.iter().zip(rv) {
        s += x * f32::from(*y);
    }
    s
}
