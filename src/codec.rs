//! Typed values on disk: `(type tag, bytes)` <-> `serde_json::Value`.
//! STUB: replaced by the codec work.

use serde_json::Value;

use crate::error::{Error, Result};

/// Turns values into `(type tag, bytes)` pairs and back.
pub trait Serializer: Send + Sync + 'static {
    /// Encodes `value` as a `(type tag, bytes)` pair.
    ///
    /// # Errors
    /// [`Error::Serialization`] if the value cannot be encoded.
    fn dumps_typed(&self, value: &Value) -> Result<(String, Vec<u8>)>;

    /// Decodes a `(type tag, bytes)` pair.
    ///
    /// # Errors
    /// [`Error::UnknownSerialization`] for a tag this serializer does not
    /// know; [`Error::Serialization`] for bytes that do not decode.
    fn loads_typed(&self, type_tag: &str, bytes: &[u8]) -> Result<Value>;
}

/// LangGraph's `JsonPlusSerializer`, byte for byte for plain values.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonPlusSerializer;

impl Serializer for JsonPlusSerializer {
    fn dumps_typed(&self, value: &Value) -> Result<(String, Vec<u8>)> {
        if value.is_null() {
            return Ok(("null".into(), vec![]));
        }
        Ok(("json".into(), serde_json::to_vec(value)?))
    }

    fn loads_typed(&self, type_tag: &str, bytes: &[u8]) -> Result<Value> {
        match type_tag {
            "null" => Ok(Value::Null),
            "json" => Ok(serde_json::from_slice(bytes)?),
            other => Err(Error::UnknownSerialization(other.to_string())),
        }
    }
}
