//! Python values to canonical JSON bytes (docs/canonical-encoding.md), the reference walk in
//! `rolltape.schemas._canonical` done in one pass.
//!
//! The walk takes the kinds that make up nearly every record: exact `str`, `int`, `float`,
//! `bool`, `None`, `dict` with `str` keys, `list` and `tuple`, and the `str`, `int` and `float`
//! subclasses a model dump yields (StrEnum, IntEnum, numpy floats). Anything else, and anything
//! without a canonical form, is `Unsupported`: the caller hands the value to the reference
//! implementation, which either encodes it or raises the error with its path. So this walk
//! never decides an error and never writes bytes the reference would not.

use pyo3::ffi;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// Deeper values are left to the reference implementation (whose encoder stops at 255 levels).
pub(crate) const MAX_DEPTH: usize = 128;

/// The value is not one this walk encodes; the reference implementation decides.
#[derive(Debug)]
pub(crate) struct Unsupported;

pub(crate) type Walk = Result<(), Unsupported>;

/// Bytes that must be escaped in a JSON string, with their escape; 0 for bytes written as is.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = b'u';
        i += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any of the eight bytes of `word` may need escaping (a control character, `"` or
/// `\\`): exact when it says no, which is the answer for nearly all text.
#[inline]
fn may_escape(word: u64) -> bool {
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * b'"' as u64);
    let backslash = word ^ (ONES * b'\\' as u64);
    ((below_space
        | (quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash))
        & HIGHS)
        != 0
}

/// Append `text` as a canonical JSON string (quotes included).
pub(crate) fn write_str(out: &mut Vec<u8>, text: &[u8]) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < text.len() {
        if i + 8 <= text.len() {
            let word = u64::from_le_bytes(text[i..i + 8].try_into().expect("eight bytes"));
            if !may_escape(word) {
                i += 8;
                continue;
            }
        }
        let byte = text[i];
        let escape = ESCAPE[byte as usize];
        i += 1;
        if escape == 0 {
            continue;
        }
        let at = i - 1;
        out.extend_from_slice(&text[start..at]);
        out.push(b'\\');
        out.push(escape);
        if escape == b'u' {
            out.extend_from_slice(b"00");
            out.push(HEX[(byte >> 4) as usize]);
            out.push(HEX[(byte & 0xf) as usize]);
        }
        start = i;
    }
    out.extend_from_slice(&text[start..]);
    out.push(b'"');
}

/// Append an integer's decimal digits.
pub(crate) fn write_int(out: &mut Vec<u8>, value: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let negative = value < 0;
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if negative {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// Python's `repr` of a double (the canonical float form), by CPython's own formatter.
pub(crate) fn float_repr(value: f64, out: &mut Vec<u8>) -> Walk {
    // SAFETY: called with the GIL held (PyMem_Free needs it); the returned C string is owned
    // here and freed once copied.
    unsafe {
        let text = ffi::PyOS_double_to_string(
            value,
            b'r' as c_char,
            0,
            ffi::Py_DTSF_ADD_DOT_0,
            std::ptr::null_mut(),
        );
        if text.is_null() {
            ffi::PyErr_Clear();
            return Err(Unsupported);
        }
        out.extend_from_slice(CStr::from_ptr(text).to_bytes());
        ffi::PyMem_Free(text as *mut c_void);
    }
    Ok(())
}

fn write_float(out: &mut Vec<u8>, value: f64) -> Walk {
    if value.is_finite() {
        float_repr(value, out)
    } else {
        out.extend_from_slice(if value.is_nan() {
            b"\"NaN\""
        } else if value > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
        Ok(())
    }
}

/// The UTF-8 text of a `str` (or subclass); Unsupported for lone surrogates.
///
/// # Safety
/// `obj` must be a live `str` and the GIL held; the slice lives as long as `obj`.
pub(crate) unsafe fn utf8<'a>(obj: *mut ffi::PyObject) -> Result<&'a [u8], Unsupported> {
    let mut size: ffi::Py_ssize_t = 0;
    let data = ffi::PyUnicode_AsUTF8AndSize(obj, &mut size);
    if data.is_null() {
        ffi::PyErr_Clear();
        return Err(Unsupported);
    }
    Ok(std::slice::from_raw_parts(data as *const u8, size as usize))
}

unsafe fn int_value(obj: *mut ffi::PyObject) -> Result<i64, Unsupported> {
    let mut overflow: c_int = 0;
    let value = ffi::PyLong_AsLongLongAndOverflow(obj, &mut overflow);
    if overflow != 0 {
        return Err(Unsupported); // outside the signed 64-bit range: the reference says so
    }
    if value == -1 && !ffi::PyErr_Occurred().is_null() {
        ffi::PyErr_Clear();
        return Err(Unsupported);
    }
    Ok(value)
}

/// Append the canonical encoding of `obj`.
///
/// # Safety
/// `obj` must be a live object and the GIL held. No Python code runs during the walk, so the
/// containers cannot change under it.
pub(crate) unsafe fn write_value(out: &mut Vec<u8>, obj: *mut ffi::PyObject, depth: usize) -> Walk {
    if ffi::PyUnicode_CheckExact(obj) != 0 {
        write_str(out, utf8(obj)?);
    } else if obj == ffi::Py_None() {
        out.extend_from_slice(b"null");
    } else if obj == ffi::Py_True() {
        out.extend_from_slice(b"true");
    } else if obj == ffi::Py_False() {
        out.extend_from_slice(b"false");
    } else if ffi::PyLong_CheckExact(obj) != 0 {
        write_int(out, int_value(obj)?);
    } else if ffi::PyFloat_CheckExact(obj) != 0 {
        write_float(out, ffi::PyFloat_AS_DOUBLE(obj))?;
    } else if ffi::PyDict_CheckExact(obj) != 0 {
        write_dict(out, obj, depth)?;
    } else if ffi::PyList_CheckExact(obj) != 0 {
        write_items(
            out,
            obj,
            ffi::PyList_GET_SIZE(obj),
            |o, i| ffi::PyList_GET_ITEM(o, i),
            depth,
        )?;
    } else if ffi::PyTuple_CheckExact(obj) != 0 {
        write_items(
            out,
            obj,
            ffi::PyTuple_GET_SIZE(obj),
            |o, i| ffi::PyTuple_GET_ITEM(o, i),
            depth,
        )?;
    } else if ffi::PyDict_Check(obj) != 0 {
        return Err(Unsupported); // a dict subclass: the reference walks it as a Mapping
    } else if ffi::PyUnicode_Check(obj) != 0 {
        write_str(out, utf8(obj)?); // StrEnum and friends: their text
    } else if ffi::PyLong_Check(obj) != 0 {
        write_int(out, int_value(obj)?); // IntEnum and friends: their value
    } else if ffi::PyFloat_Check(obj) != 0 {
        let value = ffi::PyFloat_AsDouble(obj);
        if value == -1.0 && !ffi::PyErr_Occurred().is_null() {
            ffi::PyErr_Clear();
            return Err(Unsupported);
        }
        write_float(out, value)?;
    } else {
        return Err(Unsupported);
    }
    Ok(())
}

/// A list's or tuple's items as a JSON array (`item` reads the i-th, borrowed).
unsafe fn write_items(
    out: &mut Vec<u8>,
    obj: *mut ffi::PyObject,
    size: ffi::Py_ssize_t,
    item: unsafe fn(*mut ffi::PyObject, ffi::Py_ssize_t) -> *mut ffi::PyObject,
    depth: usize,
) -> Walk {
    if depth >= MAX_DEPTH {
        return Err(Unsupported);
    }
    out.push(b'[');
    for i in 0..size {
        if i > 0 {
            out.push(b',');
        }
        write_value(out, item(obj, i), depth + 1)?;
    }
    out.push(b']');
    Ok(())
}

pub(crate) unsafe fn write_dict(out: &mut Vec<u8>, obj: *mut ffi::PyObject, depth: usize) -> Walk {
    if depth >= MAX_DEPTH {
        return Err(Unsupported);
    }
    let mut members: Vec<(&[u8], *mut ffi::PyObject)> =
        Vec::with_capacity(ffi::PyDict_Size(obj) as usize);
    let mut pos: ffi::Py_ssize_t = 0;
    let mut key: *mut ffi::PyObject = std::ptr::null_mut();
    let mut value: *mut ffi::PyObject = std::ptr::null_mut();
    while ffi::PyDict_Next(obj, &mut pos, &mut key, &mut value) != 0 {
        if ffi::PyUnicode_CheckExact(key) == 0 {
            return Err(Unsupported); // the reference names the key that is not a string
        }
        members.push((utf8(key)?, value));
    }
    // Code point order is UTF-8 byte order; keys of a dict are unique.
    members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (i, (name, item)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, name);
        out.push(b':');
        write_value(out, *item, depth + 1)?;
    }
    out.push(b'}');
    Ok(())
}
