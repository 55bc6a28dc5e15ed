//! Payload plans: a payload model's fields as the native core checks them, so the common
//! payloads are validated, dumped and encoded in one pass instead of three (pydantic's
//! validation, its dump, the canonical walk).
//!
//! A plan is made by `rolltape.schemas._payload_plans` from the model's own core schema, only
//! for models whose every field is of a kind listed here. The check takes a payload only when
//! every value has exactly the type the field declares (an exact `str`, `int`, `float` that is
//! finite, `bool`, `None` where the field is nullable, a list or tuple of such items, a dict
//! with `str` keys) and passes the field's constraints; then the bytes it writes are the
//! canonical encoding of what pydantic's validation and dump give. Anything else (a missing
//! required field, a key the model does not know, a value of another type, even one pydantic
//! would convert) is `Unsupported`, and pydantic decides: the error and its message come from
//! one place, and a differential test holds the two together.
//!
//! A plan also knows its model's content fields (schemas/_content_fields.py). Given a session's
//! data key, it writes the content fields that are set as one canonical object, seals it
//! (sealed.rs), and writes the payload as `seal_content` leaves it: required content as `""`,
//! optional content as absent, and `sealed` in its place; a payload with no content set is
//! written as it is.

use crate::encode::{float_repr, utf8, write_dict, write_int, write_str, Unsupported, Walk};
use crate::sealed::{ContentSealer, NONCE};
use crate::str_keys_only;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::os::raw::c_int;

/// The items of a list or tuple field.
#[derive(Clone, Copy)]
enum Item {
    Int,
    Float,
    Str,
}

enum Kind {
    Str { nonempty: bool },
    Int { ge: Option<i64> },
    Float { ge: Option<f64> },
    Bool,
    Literal(Vec<Vec<u8>>),
    Items(Item),
    Dict,
}

/// What a payload without the field gets.
enum Absent {
    /// The field is required: pydantic names the missing field.
    Required,
    /// Left out of the dump (the default is None and the field is excluded while unset).
    Omit,
    /// The default's canonical bytes.
    Write(Vec<u8>),
}

struct Field {
    key: Py<PyString>,
    /// `"name":` as written before the value.
    prefix: Vec<u8>,
    kind: Kind,
    nullable: bool,
    omit_none: bool,
    absent: Absent,
    /// For a content field: the canonical bytes of the value it has when unset (`""` when it
    /// is required, else its default), which is not sealed.
    empty: Option<Vec<u8>>,
}

/// One model's fields in canonical (sorted) order.
#[pyclass(frozen, module = "rolltape.schemas._native")]
pub struct PayloadPlan {
    fields: Vec<Field>,
    /// The content fields' places in `fields`, in canonical order.
    content: Vec<usize>,
    /// The place of `sealed` in `fields`, where the model has content fields.
    sealed: Option<usize>,
}

type FieldSpec = (
    String,
    String,
    bool,
    bool,
    Option<Vec<u8>>,
    bool,
    Option<Py<PyAny>>,
    Vec<String>,
);

#[pymethods]
impl PayloadPlan {
    /// `fields`: (name, kind, nullable, omit_none, default's canonical bytes or None when
    /// required, nonempty, ge, literals), kind one of str, int, float, bool, literal, ints,
    /// floats, strs, dict. `content`: (name, canonical bytes of its unset value) of each
    /// content field; a required one is a plain `str` (unset: `""`), and the model then has
    /// an optional `str` field `sealed`, left out while None.
    #[new]
    #[pyo3(signature = (fields, content=Vec::new()))]
    fn new(
        py: Python<'_>,
        fields: Vec<FieldSpec>,
        content: Vec<(String, Vec<u8>)>,
    ) -> PyResult<Self> {
        let mut out = Vec::with_capacity(fields.len());
        for (name, kind, nullable, omit_none, default, nonempty, ge, literals) in fields {
            let kind = match kind.as_str() {
                "str" => Kind::Str { nonempty },
                "int" => Kind::Int {
                    ge: ge.map(|g| g.extract::<i64>(py)).transpose()?,
                },
                "float" => Kind::Float {
                    ge: ge.map(|g| g.extract::<f64>(py)).transpose()?,
                },
                "bool" => Kind::Bool,
                "literal" => Kind::Literal(literals.into_iter().map(String::into_bytes).collect()),
                "ints" => Kind::Items(Item::Int),
                "floats" => Kind::Items(Item::Float),
                "strs" => Kind::Items(Item::Str),
                "dict" => Kind::Dict,
                other => {
                    return Err(PyValueError::new_err(format!("no field kind {other:?}")));
                }
            };
            let absent = match default {
                None => Absent::Required,
                Some(bytes) if omit_none && bytes == b"null" => Absent::Omit,
                Some(bytes) => Absent::Write(bytes),
            };
            let mut prefix = Vec::with_capacity(name.len() + 3);
            write_str(&mut prefix, name.as_bytes());
            prefix.push(b':');
            out.push(Field {
                key: PyString::intern(py, &name).unbind(),
                prefix,
                kind,
                nullable,
                omit_none,
                absent,
                empty: None,
            });
        }
        out.sort_unstable_by(|a, b| a.prefix.cmp(&b.prefix));
        let place = |out: &[Field], name: &str| {
            out.iter()
                .position(|f| f.key.bind(py).to_str().is_ok_and(|k| k == name))
        };
        for (name, empty) in content {
            let at = place(&out, &name)
                .ok_or_else(|| PyValueError::new_err(format!("no content field {name:?}")))?;
            let field = &mut out[at];
            if matches!(field.absent, Absent::Required)
                && !(matches!(field.kind, Kind::Str { nonempty: false }) && empty == b"\"\"")
            {
                return Err(PyValueError::new_err(format!(
                    "required content field {name:?} is not a plain str left as \"\""
                )));
            }
            field.empty = Some(empty);
        }
        let content: Vec<usize> = (0..out.len()).filter(|&i| out[i].empty.is_some()).collect();
        let sealed = if content.is_empty() {
            None
        } else {
            let at = place(&out, "sealed")
                .ok_or_else(|| PyValueError::new_err("a model with content has `sealed`"))?;
            let field = &out[at];
            if !(matches!(field.kind, Kind::Str { nonempty: false })
                && field.nullable
                && matches!(field.absent, Absent::Omit)
                && field.empty.is_none())
            {
                return Err(PyValueError::new_err(
                    "`sealed` is an optional str left out while None",
                ));
            }
            Some(at)
        };
        Ok(PayloadPlan {
            fields: out,
            content,
            sealed,
        })
    }

    fn __len__(&self) -> usize {
        self.fields.len()
    }
}

unsafe fn exact_i64(obj: *mut ffi::PyObject) -> Result<i64, Unsupported> {
    if ffi::PyLong_CheckExact(obj) == 0 {
        return Err(Unsupported);
    }
    let mut overflow: c_int = 0;
    let value = ffi::PyLong_AsLongLongAndOverflow(obj, &mut overflow);
    if overflow != 0 || (value == -1 && !ffi::PyErr_Occurred().is_null()) {
        ffi::PyErr_Clear();
        return Err(Unsupported);
    }
    Ok(value)
}

unsafe fn finite_f64(obj: *mut ffi::PyObject) -> Result<f64, Unsupported> {
    if ffi::PyFloat_CheckExact(obj) == 0 {
        return Err(Unsupported);
    }
    let value = ffi::PyFloat_AS_DOUBLE(obj);
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Unsupported) // pydantic decides what a non-finite value means for the field
    }
}

unsafe fn exact_text<'a>(obj: *mut ffi::PyObject) -> Result<&'a [u8], Unsupported> {
    if ffi::PyUnicode_CheckExact(obj) == 0 {
        return Err(Unsupported);
    }
    utf8(obj)
}

unsafe fn write_item(out: &mut Vec<u8>, item: Item, obj: *mut ffi::PyObject) -> Walk {
    match item {
        Item::Int => write_int(out, exact_i64(obj)?),
        Item::Float => float_repr(finite_f64(obj)?, out)?,
        Item::Str => write_str(out, exact_text(obj)?),
    }
    Ok(())
}

unsafe fn write_items(out: &mut Vec<u8>, item: Item, obj: *mut ffi::PyObject) -> Walk {
    let (size, get): (
        isize,
        unsafe fn(*mut ffi::PyObject, isize) -> *mut ffi::PyObject,
    ) = if ffi::PyList_CheckExact(obj) != 0 {
        (ffi::PyList_GET_SIZE(obj), |o, i| ffi::PyList_GET_ITEM(o, i))
    } else if ffi::PyTuple_CheckExact(obj) != 0 {
        (ffi::PyTuple_GET_SIZE(obj), |o, i| {
            ffi::PyTuple_GET_ITEM(o, i)
        })
    } else {
        return Err(Unsupported);
    };
    out.push(b'[');
    for i in 0..size {
        if i > 0 {
            out.push(b',');
        }
        write_item(out, item, get(obj, i))?;
    }
    out.push(b']');
    Ok(())
}

unsafe fn write_field(out: &mut Vec<u8>, kind: &Kind, obj: *mut ffi::PyObject) -> Walk {
    match kind {
        Kind::Str { nonempty } => {
            let text = exact_text(obj)?;
            if *nonempty && text.is_empty() {
                return Err(Unsupported);
            }
            write_str(out, text);
        }
        Kind::Int { ge } => {
            let value = exact_i64(obj)?;
            if ge.is_some_and(|low| value < low) {
                return Err(Unsupported);
            }
            write_int(out, value);
        }
        Kind::Float { ge } => {
            let value = finite_f64(obj)?;
            if ge.is_some_and(|low| value < low) {
                return Err(Unsupported);
            }
            float_repr(value, out)?;
        }
        Kind::Bool => {
            if obj == ffi::Py_True() {
                out.extend_from_slice(b"true");
            } else if obj == ffi::Py_False() {
                out.extend_from_slice(b"false");
            } else {
                return Err(Unsupported);
            }
        }
        Kind::Literal(allowed) => {
            let text = exact_text(obj)?;
            if !allowed.iter().any(|a| a.as_slice() == text) {
                return Err(Unsupported);
            }
            write_str(out, text);
        }
        Kind::Items(item) => write_items(out, *item, obj)?,
        Kind::Dict => {
            if ffi::PyDict_CheckExact(obj) == 0 {
                return Err(Unsupported);
            }
            write_dict(out, obj, 2)?; // the payload is at depth 1, as `seal` walks it
        }
    }
    Ok(())
}

/// Append `"name":` (after a comma unless it is the first member) and `bytes`.
fn write_member(out: &mut Vec<u8>, first: &mut bool, field: &Field, bytes: &[u8]) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    out.extend_from_slice(&field.prefix);
    out.extend_from_slice(bytes);
}

/// Append the canonical object of the content fields of `payload` that are set (their value
/// is not the unset one) to `blob`; false, and `blob` as it was, when none is.
///
/// # Safety
/// As `write_planned`, once `payload` is known to be an exact dict with exact `str` keys.
unsafe fn write_content(
    blob: &mut Vec<u8>,
    plan: &PayloadPlan,
    payload: *mut ffi::PyObject,
) -> Result<bool, Unsupported> {
    let start = blob.len();
    blob.push(b'{');
    let mut any = false;
    for &at in &plan.content {
        let field = &plan.fields[at];
        let value = ffi::PyDict_GetItem(payload, field.key.as_ptr());
        if value.is_null() {
            continue; // unset: a required one is missing, and the clear pass declines
        }
        let mark = blob.len();
        if any {
            blob.push(b',');
        }
        blob.extend_from_slice(&field.prefix);
        let written = blob.len();
        if value == ffi::Py_None() {
            if !field.nullable {
                return Err(Unsupported);
            }
            if field.omit_none {
                blob.truncate(mark); // left out of the dump: not content
                continue;
            }
            blob.extend_from_slice(b"null");
        } else {
            write_field(blob, &field.kind, value)?;
        }
        if field.empty.as_deref() == Some(&blob[written..]) {
            blob.truncate(mark);
        } else {
            any = true;
        }
    }
    if !any {
        blob.truncate(start);
        return Ok(false);
    }
    blob.push(b'}');
    Ok(true)
}

/// Append the canonical encoding of `payload` as its model validates and dumps it. With `seal`
/// (a session's data key and the record's associated data), as `seal_content` then leaves it:
/// the content that is set sealed into `sealed`, and in clear as unset.
///
/// # Safety
/// The GIL is held and `payload` is alive; no Python code runs (the dict's keys are exact
/// `str` before any lookup, and nothing called here calls back into Python).
pub(crate) unsafe fn write_planned(
    out: &mut Vec<u8>,
    plan: &PayloadPlan,
    payload: *mut ffi::PyObject,
    seal: Option<(&ContentSealer, &[u8])>,
) -> Walk {
    if ffi::PyDict_CheckExact(payload) == 0 || !str_keys_only(payload) {
        return Err(Unsupported);
    }
    let mut blob = Vec::new();
    let sealer = match (seal, plan.sealed) {
        (Some((sealer, aad)), Some(sealed)) => {
            blob.reserve(1024);
            blob.resize(NONCE, 0);
            if !write_content(&mut blob, plan, payload)? {
                None // no content set: the payload is written as it is
            } else if !ffi::PyDict_GetItem(payload, plan.fields[sealed].key.as_ptr()).is_null() {
                return Err(Unsupported); // `sealed` given as well: the reference decides
            } else {
                sealer.seal(&mut blob, aad)?;
                Some(sealer)
            }
        }
        _ => None,
    };
    let mut found: isize = 0;
    let mut first = true;
    out.push(b'{');
    for (at, field) in plan.fields.iter().enumerate() {
        let value = ffi::PyDict_GetItem(payload, field.key.as_ptr());
        if let Some(sealer) = sealer {
            if field.empty.is_some() {
                // Sealed (or unset): in clear as unset, checked by `write_content`.
                let clear: Option<&[u8]> = match &field.absent {
                    Absent::Required if value.is_null() => return Err(Unsupported),
                    Absent::Required => Some(b"\"\""),
                    Absent::Omit => None,
                    Absent::Write(bytes) => Some(bytes),
                };
                found += !value.is_null() as isize;
                if let Some(bytes) = clear {
                    write_member(out, &mut first, field, bytes);
                }
                continue;
            }
            if plan.sealed == Some(at) {
                write_member(out, &mut first, field, b"");
                sealer.write_sealed(out, &blob)?;
                continue;
            }
        }
        let write: Option<&[u8]> = if value.is_null() {
            match &field.absent {
                Absent::Required => return Err(Unsupported),
                Absent::Omit => None,
                Absent::Write(bytes) => Some(bytes),
            }
        } else {
            found += 1;
            if value == ffi::Py_None() {
                if !field.nullable {
                    return Err(Unsupported);
                }
                if field.omit_none {
                    None
                } else {
                    Some(b"null")
                }
            } else {
                write_member(out, &mut first, field, b"");
                write_field(out, &field.kind, value)?;
                continue;
            }
        };
        if let Some(bytes) = write {
            write_member(out, &mut first, field, bytes);
        }
    }
    if found != ffi::PyDict_Size(payload) {
        return Err(Unsupported); // a key the model does not know: pydantic names it
    }
    out.push(b'}');
    Ok(())
}
