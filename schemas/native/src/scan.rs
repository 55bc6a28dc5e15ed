//! Whether received bytes are the canonical encoding of what they hold, and the content hash.
//!
//! A record is canonical when encoding its parsed value again gives the same bytes. Rather than
//! parse and encode, the bytes are checked against the canonical grammar in one pass: no
//! whitespace; object members in strictly increasing key order (code points, compared on the
//! decoded keys); strings escaped exactly as the encoder escapes them; integers in the signed
//! 64-bit range without leading zeros or `-0`; floats exactly as Python's `repr` writes the
//! double they parse to. The answer is the same as the reference's
//! `canonical_bytes(loads(raw)) == raw`, and when it is yes the content hash is taken on the
//! received bytes with the top-level `hash` member cut out: no re-encode.

use crate::encode::float_repr;
use std::borrow::Cow;

/// Nesting deeper than this is left to the reference implementation.
const MAX_DEPTH: usize = 512;

pub(crate) struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    /// Byte range of the top-level `hash` member and the comma that goes with it.
    pub(crate) hash_member: Option<(usize, usize)>,
}

type Step = Option<()>;

impl<'a> Scan<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Scan {
            b,
            i: 0,
            hash_member: None,
        }
    }

    /// The whole input is one canonical JSON object (None: not canonical, or not an object).
    pub(crate) fn top_object(&mut self) -> Step {
        std::str::from_utf8(self.b).ok()?; // then every string's bytes are valid UTF-8 too
        if self.b.first() != Some(&b'{') {
            return None;
        }
        self.object(0, true)?;
        (self.i == self.b.len()).then_some(())
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn expect(&mut self, byte: u8) -> Step {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    fn value(&mut self, depth: usize) -> Step {
        match self.peek()? {
            b'{' => self.object(depth, false),
            b'[' => self.array(depth),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Step {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    fn object(&mut self, depth: usize, top: bool) -> Step {
        if depth >= MAX_DEPTH {
            return None;
        }
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        let mut previous: Option<Cow<'a, [u8]>> = None;
        let mut first = true;
        loop {
            let member_start = self.i;
            let key = self.string()?;
            if let Some(before) = &previous {
                if key.as_ref() <= before.as_ref() {
                    return None; // out of order, or a repeated key
                }
            }
            self.expect(b':')?;
            let is_hash = top && key.as_ref() == b"hash";
            if is_hash && self.peek()? != b'"' {
                return None; // a hash that is no string: the reference decides
            }
            self.value(depth + 1)?;
            let member_end = self.i;
            previous = Some(key);
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    if is_hash {
                        // the first member goes with the comma after it, any other with the
                        // comma before it
                        self.hash_member = Some(if first {
                            (member_start, self.i)
                        } else {
                            (member_start - 1, member_end)
                        });
                    }
                }
                b'}' => {
                    self.i += 1;
                    if is_hash {
                        // the last member: cut it with the comma before it (if any)
                        let start = if first {
                            member_start
                        } else {
                            member_start - 1
                        };
                        self.hash_member = Some((start, member_end));
                    }
                    return Some(());
                }
                _ => return None,
            }
            first = false;
        }
    }

    fn array(&mut self, depth: usize) -> Step {
        if depth >= MAX_DEPTH {
            return None;
        }
        self.expect(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A canonical string; its decoded text (borrowed when it has no escapes).
    fn string(&mut self) -> Option<Cow<'a, [u8]>> {
        self.expect(b'"')?;
        let start = self.i;
        let mut decoded: Option<Vec<u8>> = None;
        let mut run = start;
        loop {
            let byte = self.peek()?;
            match byte {
                b'"' => {
                    let end = self.i;
                    self.i += 1;
                    return Some(match decoded {
                        None => Cow::Borrowed(&self.b[start..end]),
                        Some(mut text) => {
                            text.extend_from_slice(&self.b[run..end]);
                            Cow::Owned(text)
                        }
                    });
                }
                b'\\' => {
                    let text = decoded.get_or_insert_with(Vec::new);
                    text.extend_from_slice(&self.b[run..self.i]);
                    let escaped = *self.b.get(self.i + 1)?;
                    let char = match escaped {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'b' => 0x08,
                        b't' => 0x09,
                        b'n' => 0x0a,
                        b'f' => 0x0c,
                        b'r' => 0x0d,
                        b'u' => {
                            let hex = self.b.get(self.i + 2..self.i + 6)?;
                            let code = u8::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16)
                                .ok()?;
                            let lower = hex[2..]
                                .iter()
                                .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
                            // only the control characters without a short escape take \u00XX
                            if &hex[..2] != b"00"
                                || !lower
                                || code >= 0x20
                                || matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)
                            {
                                return None;
                            }
                            self.i += 4;
                            code
                        }
                        _ => return None, // `\/` and the like are valid JSON, never canonical
                    };
                    text.push(char);
                    self.i += 2;
                    run = self.i;
                }
                0x00..=0x1f => return None, // raw control characters are not even JSON
                _ => self.i += 1,
            }
        }
    }

    fn number(&mut self) -> Step {
        let start = self.i;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
            self.i += 1;
        }
        let token = &self.b[start..self.i];
        if token.iter().any(|c| matches!(c, b'.' | b'e' | b'E')) {
            let value: f64 = std::str::from_utf8(token).ok()?.parse().ok()?;
            if !value.is_finite() {
                return None;
            }
            let mut repr = Vec::with_capacity(24);
            float_repr(value, &mut repr).ok()?;
            return (repr == token).then_some(());
        }
        let digits = token.strip_prefix(b"-").unwrap_or(token);
        let canonical_digits = match digits {
            [b'0'] => token.len() == 1, // "-0" is the integer 0, written "0"
            [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
            _ => false,
        };
        if !canonical_digits {
            return None;
        }
        std::str::from_utf8(token)
            .ok()?
            .parse::<i64>()
            .ok()
            .map(|_| ())
    }
}
