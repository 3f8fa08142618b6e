//! Embeddings: the [`Embedder`] trait the Store calls, the built-in
//! [`HashEmbedder`], and the checked wrappers that enforce the trait's
//! contract.

use crate::error::{Error, Result};

/// What an embedder may fail with: any error.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn failed(embedder: &dyn Embedder, source: BoxError) -> Error {
    Error::Embedding { message: format!("{} failed: {source}", embedder.name()), source: Some(source) }
}

/// Turns texts into vectors for the Store's semantic search.
///
/// Documents (the item fields being indexed) and queries are embedded
/// separately, because many models embed them differently.
/// Implementations must return exactly one vector per input text, each with
/// [`Embedder::dims`] finite entries; the Store checks this and reports a
/// violation as [`Error::Embedding`] or [`Error::DimensionMismatch`].
///
/// Errors are any error type (`Box<dyn Error + Send + Sync>`, so `?` works on
/// a model client's errors and `"text".into()` on a message); the Store
/// wraps them in [`Error::Embedding`] with the original as its `source`.
pub trait Embedder: Send + Sync + 'static {
    /// Identity recorded in the file with `dims()`; change it when vectors change.
    ///
    /// The Store refuses to open a file whose vectors were made by another
    /// `name/dims` (use a reindex to re-embed instead).
    fn name(&self) -> &str;

    /// The length of every vector this embedder returns: 1 to
    /// [`MAX_DIMS`] (a Store refuses other values with
    /// [`Error::InvalidArgument`]).
    fn dims(&self) -> usize;

    /// Embeds item texts, one vector per text, in order.
    ///
    /// # Errors
    /// Any error when the model fails; the Store aborts the write, stores
    /// nothing and returns [`Error::Embedding`] with this error as source.
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError>;

    /// Embeds a search query.
    ///
    /// # Errors
    /// Any error when the model fails; the search returns
    /// [`Error::Embedding`] with this error as source.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError>;
}

/// The largest vector dimension a Store accepts (65,536; embedding models
/// use a few thousand at most). Larger dimensions are refused with
/// [`Error::InvalidArgument`] before anything is allocated or written.
pub const MAX_DIMS: usize = 65_536;

/// Checks that `dims` is in `1..=MAX_DIMS`.
///
/// # Errors
/// [`Error::InvalidArgument`] otherwise, naming `what`.
pub(crate) fn check_dims(what: &str, dims: usize) -> Result<()> {
    if dims == 0 || dims > MAX_DIMS {
        return Err(Error::InvalidArgument(format!(
            "{what} dims must be between 1 and {MAX_DIMS}, got {dims}"
        )));
    }
    Ok(())
}

/// Calls [`Embedder::embed_documents`] and checks its answer: as many vectors
/// as texts, each of `dims()` finite numbers.
///
/// # Errors
/// The embedder's own error; [`Error::Embedding`] if the number of vectors is
/// wrong or a vector holds NaN or an infinity; [`Error::DimensionMismatch`]
/// if a vector's length is not `dims()`.
pub(crate) fn embed_documents_checked(embedder: &dyn Embedder, texts: &[String]) -> Result<Vec<Vec<f32>>> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let vectors = embedder.embed_documents(texts).map_err(|e| failed(embedder, e))?;
    if vectors.len() != texts.len() {
        return Err(Error::embedding(format!(
            "{} returned {} vectors for {} texts",
            embedder.name(),
            vectors.len(),
            texts.len()
        )));
    }
    for v in &vectors {
        check_vector(embedder, v)?;
    }
    Ok(vectors)
}

/// Calls [`Embedder::embed_query`] and checks that the vector has `dims()`
/// finite numbers.
///
/// # Errors
/// The embedder's own error; [`Error::DimensionMismatch`] for a wrong
/// length; [`Error::Embedding`] for NaN or an infinity.
pub(crate) fn embed_query_checked(embedder: &dyn Embedder, text: &str) -> Result<Vec<f32>> {
    let v = embedder.embed_query(text).map_err(|e| failed(embedder, e))?;
    check_vector(embedder, &v)?;
    Ok(v)
}

fn check_vector(embedder: &dyn Embedder, v: &[f32]) -> Result<()> {
    if v.len() != embedder.dims() {
        return Err(Error::DimensionMismatch { expected: embedder.dims(), got: v.len() });
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err(Error::embedding(format!("{} returned a vector with NaN or infinity", embedder.name())));
    }
    Ok(())
}

#[cfg(test)]
/// Cosine similarity of two vectors, in `-1.0..=1.0`.
///
/// Sums are accumulated in `f64` (sqlite-vec's `vec_distance_cosine`
/// accumulates in `f32`, so scores computed there can differ in the 7th
/// significant digit). Returns `None` if either vector has zero norm (where
/// sqlite-vec returns NULL) or if the lengths differ.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    if a.len() != b.len() {
        return None;
    }
    let (mut dot, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return None;
    }
    Some((dot / (aa.sqrt() * bb.sqrt())).clamp(-1.0, 1.0) as f32)
}

/// The built-in embedder: deterministic, offline, dependency-free, and
/// **lexical, not semantic**.
///
/// Texts that share words or spellings get similar vectors ("running shoes"
/// is close to "shoes for running" and to "runner's shoe"), but synonyms with
/// no letters in common are unrelated ("sneakers" is not close to "shoes").
/// It is meant for demos, tests and as a fallback; plug a real model in
/// through [`Embedder`] for semantic search.
///
/// Algorithm (`agentstate-hash-v1`; any change gets a new name): lowercase
/// the text; split it into words (maximal runs of Unicode alphanumerics);
/// hash each word (weight 1.0), each pair of adjacent words (weight 0.5) and
/// each character trigram of the word padded with one space on each side
/// (weight 0.5) with 64-bit FNV-1a followed by the MurmurHash3 finaliser;
/// add the weight, with the sign given by the top bit of the hash, to bucket
/// `hash % dims`; L2-normalise. A text with no words gives the zero vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashEmbedder {
    dims: usize,
}

impl HashEmbedder {
    /// The [`Embedder::name`] of this algorithm.
    pub const NAME: &'static str = "agentstate-hash-v1";

    /// The dimension of [`HashEmbedder::default`].
    pub const DEFAULT_DIMS: usize = 384;

    /// An embedder producing `dims`-dimensional vectors.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `dims` is 0 or over [`MAX_DIMS`].
    pub fn new(dims: usize) -> Result<HashEmbedder> {
        check_dims("HashEmbedder", dims)?;
        Ok(HashEmbedder { dims })
    }

    /// Embeds one text (the same for documents and queries).
    pub fn embed(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f64; self.dims];
        let lower = text.to_lowercase();
        let words: Vec<&str> =
            lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
        for (i, word) in words.iter().enumerate() {
            self.add(&mut v, &[b"w", word.as_bytes()], 1.0);
            if let Some(next) = words.get(i + 1) {
                self.add(&mut v, &[b"b", word.as_bytes(), b" ", next.as_bytes()], 0.5);
            }
            let padded: Vec<char> =
                std::iter::once(' ').chain(word.chars()).chain(std::iter::once(' ')).collect();
            for tri in padded.windows(3) {
                let mut buf = [0u8; 12];
                let mut len = 0;
                for c in tri {
                    len += c.encode_utf8(&mut buf[len..]).len();
                }
                self.add(&mut v, &[b"c", &buf[..len]], 0.5);
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm == 0.0 {
            return vec![0.0; self.dims];
        }
        v.iter().map(|x| (x / norm) as f32).collect()
    }

    fn add(&self, v: &mut [f64], parts: &[&[u8]], weight: f64) {
        let h = fmix64(fnv1a64(parts));
        let bucket = (h % self.dims as u64) as usize;
        let sign = if h >> 63 == 1 { -1.0 } else { 1.0 };
        v[bucket] += sign * weight;
    }
}

impl Default for HashEmbedder {
    /// 384 dimensions.
    fn default() -> HashEmbedder {
        HashEmbedder { dims: Self::DEFAULT_DIMS }
    }
}

impl Embedder for HashEmbedder {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|t| self.embed(t)).collect())
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(self.embed(text))
    }
}

/// 64-bit FNV-1a over the concatenation of `parts`.
fn fnv1a64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// MurmurHash3's 64-bit finaliser: spreads FNV's weak low bits.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(e: &HashEmbedder, a: &str, b: &str) -> f32 {
        cosine(&e.embed(a), &e.embed(b)).unwrap()
    }

    #[test]
    fn deterministic_and_pinned() {
        let e = HashEmbedder::default();
        assert_eq!(e.name(), "agentstate-hash-v1");
        assert_eq!(e.dims(), 384);
        let a = e.embed("The quick brown fox");
        assert_eq!(a, e.embed("The quick brown fox"));
        assert_eq!(a, HashEmbedder::new(384).unwrap().embed("the QUICK, brown fox!"));
        // Pinned hashes: a change here changes every stored vector, so it
        // needs a new NAME.
        assert_eq!(fnv1a64(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(&[b"foo", b"bar"]), fnv1a64(&[b"foobar"]));
        let small = HashEmbedder::new(8).unwrap().embed("hello");
        let norm: f32 = small.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-6);
    }

    #[test]
    fn lexical_similarity() {
        let e = HashEmbedder::default();
        let close = sim(&e, "running shoes", "shoes for running");
        let far = sim(&e, "running shoes", "tax return");
        assert!(close > 0.5, "{close}");
        assert!(far < 0.2, "{far}");
        assert!(close > far);
        assert!(sim(&e, "running shoes", "runner's shoe") > far);
        assert!((sim(&e, "same text", "same text") - 1.0).abs() < 1e-6);
    }

    #[test]
    fn empty_text_is_the_zero_vector() {
        let e = HashEmbedder::new(16).unwrap();
        assert_eq!(e.embed(""), vec![0.0; 16]);
        assert_eq!(e.embed(" ,.!? "), vec![0.0; 16]);
        assert_eq!(cosine(&e.embed(""), &e.embed("x")), None);
    }

    #[test]
    fn dims_respected_and_checked() {
        assert!(matches!(HashEmbedder::new(0), Err(Error::InvalidArgument(_))));
        for dims in [1, 3, 8, 384, 1536] {
            let e = HashEmbedder::new(dims).unwrap();
            let texts: Vec<String> = ["a", "", "b c d", "é日本"].iter().map(|s| s.to_string()).collect();
            let vs = embed_documents_checked(&e, &texts).unwrap();
            assert_eq!(vs.len(), texts.len());
            assert!(vs.iter().all(|v| v.len() == dims));
            assert_eq!(embed_query_checked(&e, "q").unwrap().len(), dims);
        }
        assert!(embed_documents_checked(&HashEmbedder::default(), &[]).unwrap().is_empty());
    }

    struct Broken(usize);
    impl Embedder for Broken {
        fn name(&self) -> &str {
            "broken"
        }
        fn dims(&self) -> usize {
            4
        }
        fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
            match self.0 {
                0 => Ok(vec![vec![0.0; 4]; texts.len() + 1]),
                1 => Ok(vec![vec![0.0; 3]; texts.len()]),
                _ => Ok(vec![vec![f32::NAN; 4]; texts.len()]),
            }
        }
        fn embed_query(&self, _: &str) -> Result<Vec<f32>, BoxError> {
            Ok(vec![0.0; 5])
        }
    }

    #[test]
    fn contract_violations_are_errors() {
        let texts = vec!["x".to_string()];
        let e = embed_documents_checked(&Broken(0), &texts).unwrap_err();
        assert!(
            matches!(&e, Error::Embedding { message, .. } if message == "broken returned 2 vectors for 1 texts"),
            "{e}"
        );
        let e = embed_documents_checked(&Broken(1), &texts).unwrap_err();
        assert!(matches!(e, Error::DimensionMismatch { expected: 4, got: 3 }));
        assert!(matches!(embed_documents_checked(&Broken(2), &texts), Err(Error::Embedding { .. })));
        assert!(matches!(
            embed_query_checked(&Broken(0), "q"),
            Err(Error::DimensionMismatch { expected: 4, got: 5 })
        ));
    }

    #[test]
    fn cosine_values() {
        assert_eq!(cosine(&[1.0, 0.0], &[1.0, 0.0]), Some(1.0));
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 2.0]), Some(0.0));
        assert_eq!(cosine(&[1.0, 0.0], &[-3.0, 0.0]), Some(-1.0));
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), None);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), None);
        let c = cosine(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap();
        assert!((c - 0.974_631_85).abs() < 1e-6);
    }
}
