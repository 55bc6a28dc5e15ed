//! Sealed content (docs/canonical-encoding.md, "Sealed content"), done inside the plan's pass:
//! byte for byte what `seal_content` in `rolltape.schemas.privacy._sealing`, the reference,
//! writes.
//!
//! The plan (plan.rs) writes the content fields that are set as one canonical object; here it
//! is sealed: `nonce = HMAC-SHA256(nonce_key, aad 0x00 plaintext)[:12]`, then AES-256-GCM under
//! the encryption key with that nonce and the same associated data, written as
//! `"v1.<key id>.<base64url of nonce, ciphertext and tag, padded>"`. The keys are the ones the
//! reference derives from the session's data key (HKDF happens there, once per key).

use crate::encode::{write_int, Unsupported};
use aes_gcm::aead::{AeadInOut, KeyInit, Nonce};
use aes_gcm::Aes256Gcm;
use base64::engine::general_purpose::URL_SAFE;
use base64::Engine;
use hmac::{Hmac, Mac};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sha2::Sha256;

/// Bytes of the synthetic nonce, at the front of a sealed blob.
pub(crate) const NONCE: usize = 12;

const AAD_LABEL: &[u8] = b"rolltape.sealed-content.v1";

/// A session's data key as the sealing needs it: its id, the AES-256-GCM key schedule and the
/// HMAC state of the nonce key, each made once per key rather than once per record.
#[pyclass(frozen, module = "rolltape.schemas._native")]
pub struct ContentSealer {
    key_id: Vec<u8>,
    aead: Aes256Gcm,
    nonce_mac: Hmac<Sha256>,
}

#[pymethods]
impl ContentSealer {
    /// `key_id`: 16 lowercase hex digits; `encrypt_key` and `nonce_key`: the 32-byte keys
    /// derived from the data key.
    #[new]
    fn new(key_id: &str, encrypt_key: &[u8], nonce_key: &[u8]) -> PyResult<Self> {
        let id = key_id.as_bytes();
        if id.len() != 16 || !id.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(PyValueError::new_err(format!(
                "a data key id is 16 lowercase hex digits, not {key_id:?}"
            )));
        }
        if encrypt_key.len() != 32 || nonce_key.len() != 32 {
            return Err(PyValueError::new_err("the derived keys are 32 bytes each"));
        }
        let aead = Aes256Gcm::new_from_slice(encrypt_key)
            .map_err(|_| PyValueError::new_err("the encryption key is 32 bytes"))?;
        let nonce_mac = <Hmac<Sha256> as KeyInit>::new_from_slice(nonce_key)
            .map_err(|_| PyValueError::new_err("the nonce key is 32 bytes"))?;
        Ok(ContentSealer {
            key_id: id.to_vec(),
            aead,
            nonce_mac,
        })
    }

    /// The plaintext of a payload's `sealed` value (`v1.<key id>.<base64url>`) under this key,
    /// bound to `aad`, or None where it does not open here: the reference then decides, and
    /// says why (another key, bytes changed, another record's identity, a form it reads and
    /// this does not).
    fn open<'py>(
        &self,
        py: Python<'py>,
        sealed: &str,
        aad: &[u8],
    ) -> Option<Bound<'py, pyo3::types::PyBytes>> {
        let rest = sealed.as_bytes().strip_prefix(b"v1.")?;
        let rest = rest.strip_prefix(self.key_id.as_slice())?;
        let encoded = rest.strip_prefix(b".")?;
        let mut blob = URL_SAFE.decode(encoded).ok()?;
        if blob.len() < NONCE + 16 {
            return None;
        }
        let nonce: [u8; NONCE] = blob[..NONCE].try_into().ok()?;
        let tag_at = blob.len() - 16;
        let (body, tag) = blob[NONCE..].split_at_mut(tag_at - NONCE);
        let tag: [u8; 16] = (&*tag).try_into().ok()?;
        self.aead
            .decrypt_inout_detached(
                &Nonce::<Aes256Gcm>::from(nonce),
                aad,
                body.into(),
                &tag.into(),
            )
            .ok()?;
        Some(pyo3::types::PyBytes::new(py, body))
    }
}

impl ContentSealer {
    /// `blob` is `NONCE` placeholder bytes then the plaintext; it becomes nonce, ciphertext and
    /// tag, bound to `aad`.
    pub(crate) fn seal(&self, blob: &mut Vec<u8>, aad: &[u8]) -> Result<(), Unsupported> {
        let mut mac = self.nonce_mac.clone();
        mac.update(aad);
        mac.update(&[0]);
        mac.update(&blob[NONCE..]);
        let digest = mac.finalize().into_bytes();
        blob[..NONCE].copy_from_slice(&digest[..NONCE]);
        let nonce: [u8; NONCE] = digest[..NONCE].try_into().map_err(|_| Unsupported)?;
        let tag = self
            .aead
            .encrypt_inout_detached(
                &Nonce::<Aes256Gcm>::from(nonce),
                aad,
                (&mut blob[NONCE..]).into(),
            )
            .map_err(|_| Unsupported)?;
        blob.extend_from_slice(&tag);
        Ok(())
    }

    /// Append the `sealed` member's value, a JSON string: `"v1.<key id>.<base64url(blob)>"`
    /// (nothing in it needs escaping).
    pub(crate) fn write_sealed(&self, out: &mut Vec<u8>, blob: &[u8]) -> Result<(), Unsupported> {
        out.extend_from_slice(b"\"v1.");
        out.extend_from_slice(&self.key_id);
        out.push(b'.');
        let size = base64::encoded_len(blob.len(), true).ok_or(Unsupported)?;
        let at = out.len();
        out.resize(at + size, 0);
        URL_SAFE
            .encode_slice(blob, &mut out[at..])
            .map_err(|_| Unsupported)?;
        out.push(b'"');
        Ok(())
    }
}

/// The envelope's identity a sealed payload is bound to, as `associated_data` writes it.
pub(crate) fn associated_data(stream: &[u8], session_id: &[u8], seq: i64, kind: &[u8]) -> Vec<u8> {
    let mut aad =
        Vec::with_capacity(AAD_LABEL.len() + stream.len() + session_id.len() + kind.len() + 24);
    aad.extend_from_slice(AAD_LABEL);
    aad.push(0);
    aad.extend_from_slice(stream);
    aad.push(0);
    aad.extend_from_slice(session_id);
    aad.push(0);
    write_int(&mut aad, seq);
    aad.push(0);
    aad.extend_from_slice(kind);
    aad
}
