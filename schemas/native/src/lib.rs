//! `rolltape.schemas._native`: the codec's hot paths in one pass each, byte for byte what the
//! reference implementation in `rolltape.schemas._canonical`, `_envelope`, `_codec` and
//! `privacy._sealing` (a subject session's sealed content) produces.
//!
//! Each function answers `None` where it leaves the decision to the reference (a kind of value
//! it does not walk, a value without a canonical form, bytes that are not canonical), so errors
//! and their messages come from one place and every answer it does give is pinned by the
//! vectors and by differential tests against the reference.

mod batch;
mod encode;
mod plan;
mod scan;
mod sealed;

use encode::{write_int, write_str, write_value, Unsupported, Walk};
use plan::{write_planned, PayloadPlan};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use sealed::ContentSealer;
use sha2::{Digest, Sha256};

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_into(digest: &[u8], out: &mut Vec<u8>) {
    for byte in digest {
        out.push(HEX[(byte >> 4) as usize]);
        out.push(HEX[(byte & 0xf) as usize]);
    }
}

fn hex(digest: &[u8]) -> String {
    let mut out = Vec::with_capacity(digest.len() * 2);
    hex_into(digest, &mut out);
    // SAFETY: hex digits are ASCII.
    unsafe { String::from_utf8_unchecked(out) }
}

/// The canonical bytes of a JSON-like value; None when the reference must decide.
#[pyfunction]
fn canonical<'py>(py: Python<'py>, value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyBytes>> {
    let mut out = Vec::with_capacity(256);
    // SAFETY: the GIL is held (py) and `value` is alive for the call.
    unsafe { write_value(&mut out, value.as_ptr(), 0) }.ok()?;
    Some(PyBytes::new(py, &out))
}

/// The hash of a record's content when `raw` is the canonical encoding of a JSON object (the
/// top-level `hash` member cut out); None when it is not, and the reference decides.
#[pyfunction]
fn content_hash(raw: &[u8]) -> Option<String> {
    let mut scan = scan::Scan::new(raw);
    scan.top_object()?;
    let mut hasher = Sha256::new();
    match scan.hash_member {
        Some((start, end)) => {
            hasher.update(&raw[..start]);
            hasher.update(&raw[end..]);
        }
        None => hasher.update(raw),
    }
    Some(hex(&hasher.finalize()))
}

/// `obj` as exact `str` bytes.
unsafe fn exact_str<'a>(obj: &Bound<'_, PyAny>) -> Result<&'a [u8], Unsupported> {
    if ffi::PyUnicode_CheckExact(obj.as_ptr()) == 0 {
        return Err(Unsupported);
    }
    encode::utf8(obj.as_ptr())
}

unsafe fn exact_int(obj: &Bound<'_, PyAny>) -> Result<i64, Unsupported> {
    if ffi::PyLong_CheckExact(obj.as_ptr()) == 0 {
        return Err(Unsupported);
    }
    let mut overflow = 0;
    let value = ffi::PyLong_AsLongLongAndOverflow(obj.as_ptr(), &mut overflow);
    if overflow != 0 || (value == -1 && !ffi::PyErr_Occurred().is_null()) {
        ffi::PyErr_Clear();
        return Err(Unsupported);
    }
    Ok(value)
}

/// `sha256(canonical([stream, session_id, seq]))[:32]`, written as the reference writes it.
fn raw_event_id(stream: &[u8], session_id: &[u8], seq: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(stream.len() + session_id.len() + 32);
    key.extend_from_slice(b"[\"");
    key.extend_from_slice(stream);
    key.extend_from_slice(b"\",\"");
    key.extend_from_slice(session_id);
    key.extend_from_slice(b"\",");
    write_int(&mut key, seq);
    key.push(b']');
    let mut id = Vec::with_capacity(64);
    hex_into(&Sha256::digest(&key), &mut id);
    id.truncate(32);
    id
}

/// Build, hash and encode one envelope: (record bytes, hash), as `seal` in the reference does;
/// None when the reference must decide. A `payload` given as bytes is its canonical encoding.
/// With a `plan` (plan.rs) the payload is not valid yet: it is checked against its model's plan
/// and written as pydantic's validation and dump would give it, or None (pydantic decides).
/// With a `sealer` (sealed.rs) as well, the payload's content is sealed under it as
/// `seal_content` seals it, in the same pass.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (stream, session_id, seq, ts_ns, r#type, event_id, causes, producer, payload, prev_hash, plan=None, sealer=None))]
fn seal<'py>(
    py: Python<'py>,
    stream: &Bound<'py, PyAny>,
    session_id: &Bound<'py, PyAny>,
    seq: &Bound<'py, PyAny>,
    ts_ns: &Bound<'py, PyAny>,
    r#type: &Bound<'py, PyAny>,
    event_id: &Bound<'py, PyAny>,
    causes: &Bound<'py, PyAny>,
    producer: &Bound<'py, PyAny>,
    payload: &Bound<'py, PyAny>,
    prev_hash: &Bound<'py, PyAny>,
    plan: Option<&Bound<'py, PayloadPlan>>,
    sealer: Option<&Bound<'py, ContentSealer>>,
) -> Option<(Bound<'py, PyBytes>, Bound<'py, PyString>)> {
    let header = Header {
        stream,
        session_id,
        seq,
        ts_ns,
        r#type,
        event_id,
        causes,
        producer,
        prev_hash,
    };
    // SAFETY: the GIL is held and every argument is alive for the call; no Python code runs.
    let body = unsafe {
        let aad = match sealer {
            Some(_) if plan.is_none() => return None, // only a planned payload is sealed here
            Some(_) => Some(header.associated_data().ok()?),
            None => None,
        };
        let seal = sealer.zip(aad.as_deref()).map(|(s, aad)| (s.get(), aad));
        header.body(|out| match plan {
            Some(plan) => write_planned(out, plan.get(), payload.as_ptr(), seal),
            None if ffi::PyBytes_CheckExact(payload.as_ptr()) != 0 => {
                let data = ffi::PyBytes_AsString(payload.as_ptr()) as *const u8;
                let size = ffi::PyBytes_Size(payload.as_ptr()) as usize;
                out.extend_from_slice(std::slice::from_raw_parts(data, size));
                Ok(())
            }
            None => write_value(out, payload.as_ptr(), 1),
        })
    }?;
    Some(finish(py, body))
}

/// The envelope's fields other than the payload, as `seal` takes them.
struct Header<'a, 'py> {
    stream: &'a Bound<'py, PyAny>,
    session_id: &'a Bound<'py, PyAny>,
    seq: &'a Bound<'py, PyAny>,
    ts_ns: &'a Bound<'py, PyAny>,
    r#type: &'a Bound<'py, PyAny>,
    event_id: &'a Bound<'py, PyAny>,
    causes: &'a Bound<'py, PyAny>,
    producer: &'a Bound<'py, PyAny>,
    prev_hash: &'a Bound<'py, PyAny>,
}

impl Header<'_, '_> {
    /// The identity a sealed payload of this envelope is bound to (sealed.rs).
    ///
    /// # Safety
    /// The GIL is held and every field is alive.
    unsafe fn associated_data(&self) -> Result<Vec<u8>, Unsupported> {
        Ok(sealed::associated_data(
            exact_str(self.stream)?,
            exact_str(self.session_id)?,
            exact_int(self.seq)?,
            exact_str(self.r#type)?,
        ))
    }

    /// The hashed bytes (every member but `hash`, sorted) and where `hash` goes in them.
    ///
    /// # Safety
    /// The GIL is held and every field is alive; `payload` runs no Python code.
    unsafe fn body(&self, payload: impl FnOnce(&mut Vec<u8>) -> Walk) -> Option<(Vec<u8>, usize)> {
        let stream_text = exact_str(self.stream).ok()?;
        let session_text = exact_str(self.session_id).ok()?;
        let seq_value = exact_int(self.seq).ok()?;
        let id = if self.event_id.is_none() {
            raw_event_id(stream_text, session_text, seq_value)
        } else {
            exact_str(self.event_id).ok()?.to_vec()
        };
        let mut body = Vec::with_capacity(1024);
        body.extend_from_slice(b"{\"causes\":");
        write_causes(&mut body, self.causes.as_ptr()).ok()?;
        body.extend_from_slice(b",\"event_id\":");
        write_str(&mut body, &id);
        let splice = body.len();
        body.extend_from_slice(b",\"payload\":");
        payload(&mut body).ok()?;
        body.extend_from_slice(b",\"prev_hash\":");
        write_str(&mut body, exact_str(self.prev_hash).ok()?);
        body.extend_from_slice(b",\"producer\":");
        write_value(&mut body, self.producer.as_ptr(), 1).ok()?;
        body.extend_from_slice(b",\"seq\":");
        write_int(&mut body, seq_value);
        body.extend_from_slice(b",\"session_id\":");
        write_str(&mut body, session_text);
        body.extend_from_slice(b",\"stream\":");
        write_str(&mut body, stream_text);
        body.extend_from_slice(b",\"ts_ns\":");
        write_int(&mut body, exact_int(self.ts_ns).ok()?);
        body.extend_from_slice(b",\"type\":");
        write_str(&mut body, exact_str(self.r#type).ok()?);
        body.extend_from_slice(b",\"v\":1}");
        Some((body, splice))
    }
}

/// The record (the hash spliced in before `payload`) and its hash.
fn finish(
    py: Python<'_>,
    (body, splice): (Vec<u8>, usize),
) -> (Bound<'_, PyBytes>, Bound<'_, PyString>) {
    let digest = hex(&Sha256::digest(&body));
    let mut record = Vec::with_capacity(body.len() + 76);
    record.extend_from_slice(&body[..splice]);
    record.extend_from_slice(b",\"hash\":\"");
    record.extend_from_slice(digest.as_bytes());
    record.push(b'"');
    record.extend_from_slice(&body[splice..]);
    (PyBytes::new(py, &record), PyString::new(py, &digest))
}

/// The causes, a tuple or list of exact `str`, as a JSON array.
unsafe fn write_causes(out: &mut Vec<u8>, causes: *mut ffi::PyObject) -> Result<(), Unsupported> {
    let (count, item): (
        isize,
        unsafe fn(*mut ffi::PyObject, isize) -> *mut ffi::PyObject,
    ) = if ffi::PyTuple_CheckExact(causes) != 0 {
        (ffi::PyTuple_GET_SIZE(causes), |o, i| {
            ffi::PyTuple_GET_ITEM(o, i)
        })
    } else if ffi::PyList_CheckExact(causes) != 0 {
        (ffi::PyList_GET_SIZE(causes), |o, i| {
            ffi::PyList_GET_ITEM(o, i)
        })
    } else {
        return Err(Unsupported);
    };
    out.push(b'[');
    for i in 0..count {
        let cause = item(causes, i);
        if ffi::PyUnicode_CheckExact(cause) == 0 {
            return Err(Unsupported);
        }
        if i > 0 {
            out.push(b',');
        }
        write_str(out, encode::utf8(cause)?);
    }
    out.push(b']');
    Ok(())
}

/// Interned key strings: a dict lookup with one hashes nothing (its hash is cached) and
/// allocates nothing, where a lookup by C string builds a str every time.
struct Keys {
    header: [Py<PyString>; 12],
    producer: [Py<PyString>; 3],
}

static KEYS: pyo3::sync::PyOnceLock<Keys> = pyo3::sync::PyOnceLock::new();

fn keys(py: Python<'_>) -> &Keys {
    KEYS.get_or_init(py, || {
        let key = |k: &str| PyString::intern(py, k).unbind();
        Keys {
            header: [
                "v",
                "stream",
                "session_id",
                "seq",
                "ts_ns",
                "type",
                "event_id",
                "causes",
                "producer",
                "payload",
                "prev_hash",
                "hash",
            ]
            .map(key),
            producer: ["name", "version", "principal"].map(key),
        }
    })
}

/// The value under `key` of a dict (borrowed), or null. Only for a dict `has_exactly` took:
/// its keys are all exact `str`, so the lookup compares strings in C and runs no Python code
/// (a key of another type could run `__eq__`, change the dict and free what was read from it).
unsafe fn member(dict: *mut ffi::PyObject, key: &Py<PyString>) -> *mut ffi::PyObject {
    ffi::PyDict_GetItem(dict, key.as_ptr())
}

/// Whether every key of a dict is an exact `str`.
pub(crate) unsafe fn str_keys_only(dict: *mut ffi::PyObject) -> bool {
    let mut at: ffi::Py_ssize_t = 0;
    let mut key: *mut ffi::PyObject = std::ptr::null_mut();
    let mut value: *mut ffi::PyObject = std::ptr::null_mut();
    while ffi::PyDict_Next(dict, &mut at, &mut key, &mut value) != 0 {
        if ffi::PyUnicode_CheckExact(key) == 0 {
            return false;
        }
    }
    true
}

/// Whether an exact dict's keys are exactly `keys` (no more, no fewer), all exact `str`.
unsafe fn has_exactly(dict: *mut ffi::PyObject, keys: &[Py<PyString>]) -> bool {
    ffi::PyDict_Size(dict) == keys.len() as isize
        && str_keys_only(dict)
        && keys.iter().all(|k| !member(dict, k).is_null())
}

unsafe fn is_str(obj: *mut ffi::PyObject) -> bool {
    ffi::PyUnicode_CheckExact(obj) != 0
}

/// An exact `int` within [low, i64::MAX].
unsafe fn int_at_least(obj: *mut ffi::PyObject, low: i64) -> bool {
    if ffi::PyLong_CheckExact(obj) == 0 {
        return false;
    }
    let mut overflow = 0;
    let value = ffi::PyLong_AsLongLongAndOverflow(obj, &mut overflow);
    if value == -1 && !ffi::PyErr_Occurred().is_null() {
        ffi::PyErr_Clear();
        return false;
    }
    overflow == 0 && value >= low
}

/// An exact `str` whose UTF-8 bytes satisfy `test` (false for one with no UTF-8 form).
unsafe fn str_where(obj: *mut ffi::PyObject, test: impl Fn(&[u8]) -> bool) -> bool {
    is_str(obj) && encode::utf8(obj).map(test).unwrap_or(false)
}

fn session_id_text(b: &[u8]) -> bool {
    // [A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}: ASCII only, so bytes are characters.
    !b.is_empty()
        && b.len() <= 200
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"._:@+-".contains(&c))
}

fn hex64_text(b: &[u8]) -> bool {
    b.len() == 64
        && b.iter()
            .all(|&c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// The header checks of the `Envelope` schema on a decoded record. For an exact dict whose
/// keys are strings (what the JSON decoder makes) it answers as `_codec._well_formed`, the
/// reference, does: a differential test holds them together. Anything else it refuses (a dict
/// subclass, a key of another type), where the reference is not asked (`read_event` decodes
/// before it checks).
#[pyfunction]
fn well_formed(py: Python<'_>, obj: &Bound<'_, PyAny>) -> bool {
    let keys = keys(py);
    let [v, stream, session_id, seq, ts_ns, kind, event_id, causes, producer, payload, prev, hash] =
        &keys.header;
    let _ = v; // its value is the caller's check (the version decides the error)
    let obj = obj.as_ptr();
    // SAFETY: the GIL is held and `obj` is alive for the call; every pointer read from it is
    // a borrowed reference used before the call returns. No Python code runs: the dicts are
    // exact and looked into only once their keys are known to be exact `str` (`has_exactly`),
    // and nothing else called here calls back into Python.
    unsafe {
        if ffi::PyDict_CheckExact(obj) == 0 || !has_exactly(obj, &keys.header) {
            return false;
        }
        let get = |key: &Py<PyString>| member(obj, key);
        let producer = get(producer);
        let causes = get(causes);
        if !(str_where(get(session_id), session_id_text)
            && int_at_least(get(seq), 0)
            && int_at_least(get(ts_ns), i64::MIN)
            && ffi::PyDict_CheckExact(producer) != 0
            && ffi::PyList_CheckExact(causes) != 0
            && str_where(get(prev), hex64_text)
            && str_where(get(hash), hex64_text)
            && is_str(get(stream))
            && is_str(get(kind))
            && is_str(get(event_id))
            && ffi::PyDict_CheckExact(get(payload)) != 0
            && has_exactly(producer, &keys.producer)
            && keys.producer.iter().all(|k| is_str(member(producer, k))))
        {
            return false;
        }
        (0..ffi::PyList_GET_SIZE(causes)).all(|i| is_str(ffi::PyList_GET_ITEM(causes, i)))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(batch::batch_fit, m)?)?;
    m.add_function(wrap_pyfunction!(batch::record_batch, m)?)?;
    m.add_function(wrap_pyfunction!(canonical, m)?)?;
    m.add_function(wrap_pyfunction!(content_hash, m)?)?;
    m.add_function(wrap_pyfunction!(seal, m)?)?;
    m.add_class::<ContentSealer>()?;
    m.add_class::<PayloadPlan>()?;
    m.add_function(wrap_pyfunction!(well_formed, m)?)?;
    Ok(())
}
