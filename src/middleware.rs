//! The policy pieces of the Invoker's rules, pure logic: canonical arguments and their hash,
//! repeat detection, the idempotency cache, retry backoff with full jitter, the per-tool
//! circuit breaker and the egress host allow-list (the refusals' messages are in `crate::errors`).
//! The call pipeline (`crate::pipeline`) is built on them. No Python types.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

// ------------------------------------------------------------------ canonical arguments

/// The canonical JSON text of a value: object keys sorted (by code point), no whitespace,
/// non-ASCII kept as UTF-8, numbers as serde_json prints them. Two argument objects that differ
/// only in key order give the same text.
pub fn canonical_json(value: &Value) -> String {
    let mut w = Canonical::new(usize::MAX);
    match write_value(&mut w, value) {
        Ok(()) => w.finish(),
        Err(e) => match e {}, // a Value holds only finite numbers; no depth limit
    }
}

fn write_value(w: &mut Canonical, value: &Value) -> Result<(), std::convert::Infallible> {
    match value {
        Value::Object(map) => {
            // The entries of a small object sorted on the stack (no allocation per object).
            const NULL: Value = Value::Null;
            if map.len() <= SMALL_OBJECT {
                let mut buf = [("", &NULL); SMALL_OBJECT];
                for (slot, (k, v)) in buf.iter_mut().zip(map) {
                    *slot = (k.as_str(), v);
                }
                w.object(&mut buf[..map.len()], write_value)
            } else {
                w.object(
                    &mut map.iter().map(|(k, v)| (k.as_str(), v)).collect::<Vec<_>>(),
                    write_value,
                )
            }
        }
        Value::Array(items) => w.array(items, write_value),
        Value::String(s) => {
            w.string(s);
            Ok(())
        }
        Value::Bool(b) => {
            w.boolean(*b);
            Ok(())
        }
        Value::Null => {
            w.null();
            Ok(())
        }
        // A number as serde_json prints it, written in place (an integer as `itoa` writes it,
        // which is what serde_json prints).
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                w.out.push_str(itoa::Buffer::new().format(u));
            } else if let Some(i) = n.as_i64() {
                w.out.push_str(itoa::Buffer::new().format(i));
            } else {
                let _ = write!(w.out, "{n}");
            }
            Ok(())
        }
    }
}

/// The identity of a value's canonical form, cheaper to make than its text: two values have the
/// same key exactly when they have the same [`canonical_json`] text (objects compared whatever
/// their key order, every number as the text tells it: `1` and `1.0`, `0.0` and `-0.0` apart).
/// A prefix-free encoding (a tag byte per node, lengths and counts as LEB128, numbers as their
/// 8 bytes, object entries sorted as the text sorts them); its first byte is below `0x08`, where no
/// JSON text starts, so no key equals a canonical text used as a key (see
/// `crate::pipeline::Facts::key`).
pub fn args_key(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    key_value(&mut out, value);
    out
}

/// A length or count as LEB128 (seven bits a byte, the high bit set on all but the last): one
/// byte below 128, and prefix-free as the rest of the encoding.
#[inline]
fn key_len(out: &mut Vec<u8>, n: usize) {
    let mut n = n as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

#[inline]
fn key_str(out: &mut Vec<u8>, s: &str) {
    key_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

// The nodes of an [`args_key`], one function each: [`key_value`] writes a `Value` with them, and a
// binding that walks its own values (`crate::flat`) writes the same bytes with them.

/// JSON `null`.
#[inline]
pub fn key_null(out: &mut Vec<u8>) {
    out.push(0);
}

#[inline]
pub fn key_bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(&[1, u8::from(b)]);
}

/// A non-negative integer (as the text writes it: unsigned).
#[inline]
pub fn key_u64(out: &mut Vec<u8>, u: u64) {
    out.push(2);
    out.extend_from_slice(&u.to_le_bytes());
}

/// An integer: unsigned when it is not negative (see [`key_u64`]), else signed.
#[inline]
pub fn key_int(out: &mut Vec<u8>, i: i64) {
    if let Ok(u) = u64::try_from(i) {
        return key_u64(out, u);
    }
    out.push(3);
    out.extend_from_slice(&i.to_le_bytes());
}

/// A float (a number the text writes with a fraction or an exponent).
#[inline]
pub fn key_float(out: &mut Vec<u8>, f: f64) {
    out.push(4);
    out.extend_from_slice(&f.to_bits().to_le_bytes());
}

#[inline]
pub fn key_string(out: &mut Vec<u8>, s: &str) {
    out.push(5);
    key_str(out, s);
}

/// An array of `len` items; the items follow.
#[inline]
pub fn key_array(out: &mut Vec<u8>, len: usize) {
    out.push(6);
    key_len(out, len);
}

/// An object of `len` entries; they follow, each a [`key_entry_name`] then its value, in the
/// order [`key_sorted`] gives.
#[inline]
pub fn key_object(out: &mut Vec<u8>, len: usize) {
    out.push(7);
    key_len(out, len);
}

/// The name of an object's entry.
#[inline]
pub fn key_entry_name(out: &mut Vec<u8>, name: &str) {
    key_str(out, name);
}

/// The order of an object's entries in its key (and its canonical text).
pub fn key_sorted(a: &str, b: &str) -> std::cmp::Ordering {
    key_order(a, b)
}

fn key_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => key_null(out),
        Value::Bool(b) => key_bool(out, *b),
        // As the text writes a number: an unsigned integer, else a signed one, else a float.
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                key_u64(out, u);
            } else if let Some(i) = n.as_i64() {
                key_int(out, i);
            } else {
                key_float(out, n.as_f64().unwrap_or(f64::NAN));
            }
        }
        Value::String(s) => key_string(out, s),
        Value::Array(items) => {
            key_array(out, items.len());
            for v in items {
                key_value(out, v);
            }
        }
        Value::Object(map) => {
            key_object(out, map.len());
            const NULL: Value = Value::Null;
            let mut each = |entries: &mut [(&str, &Value)]| {
                entries.sort_unstable_by(|a, b| key_order(a.0, b.0));
                for (k, v) in entries.iter() {
                    key_entry_name(out, k);
                    key_value(out, v);
                }
            };
            if map.len() <= SMALL_OBJECT {
                let mut buf = [("", &NULL); SMALL_OBJECT];
                for (slot, (k, v)) in buf.iter_mut().zip(map) {
                    *slot = (k.as_str(), v);
                }
                each(&mut buf[..map.len()]);
            } else {
                each(&mut map.iter().map(|(k, v)| (k.as_str(), v)).collect::<Vec<_>>());
            }
        }
    }
}

/// [`canonical_json`] and [`args_key`] of `value` at once (one walk, each object's entries
/// sorted once): for a call that needs both.
pub fn canonical_and_key(value: &Value) -> (String, Vec<u8>) {
    let mut text = Canonical::new(usize::MAX);
    let mut key = Vec::with_capacity(256);
    both(&mut text, &mut key, value);
    (text.finish(), key)
}

fn both(w: &mut Canonical, key: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            key_object(key, map.len());
            // Each entry carries its key to the value's writer: `Canonical::object` sorts the
            // entries, then writes each one's key and calls back for its value, so the key
            // encoding gets the entries in the text's order.
            let mut each = |entries: &mut [(&str, (&str, &Value))]| {
                let _: Result<(), std::convert::Infallible> = w.object(entries, |w, (k, v)| {
                    key_entry_name(key, k);
                    both(w, key, v);
                    Ok(())
                });
            };
            const NULL: Value = Value::Null;
            if map.len() <= SMALL_OBJECT {
                let mut buf = [("", ("", &NULL)); SMALL_OBJECT];
                for (slot, (k, v)) in buf.iter_mut().zip(map) {
                    *slot = (k.as_str(), (k.as_str(), v));
                }
                each(&mut buf[..map.len()]);
            } else {
                each(
                    &mut map
                        .iter()
                        .map(|(k, v)| (k.as_str(), (k.as_str(), v)))
                        .collect::<Vec<_>>(),
                );
            }
        }
        Value::Array(items) => {
            key_array(key, items.len());
            let _: Result<(), std::convert::Infallible> = w.array(items, |w, v| {
                both(w, key, v);
                Ok(())
            });
        }
        _ => {
            key_value(key, value);
            let _ = write_value(w, value);
        }
    }
}

/// Objects of at most this many entries are sorted in a buffer on the stack.
const SMALL_OBJECT: usize = 16;

/// Object keys in code-point order (UTF-8 byte order), the first bytes compared inline: keys
/// mostly differ there, and a full comparison is a call.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.as_bytes().first(), b.as_bytes().first()) {
        (Some(x), Some(y)) if x != y => x.cmp(y),
        _ => a.cmp(b),
    }
}

/// Why a tree could not be written as canonical JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum CanonicalError {
    /// NaN or an infinity.
    NotFinite(f64),
    /// Arrays and objects nested deeper than the writer's limit.
    TooDeep,
}

impl std::fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CanonicalError::NotFinite(_) => "not a finite number",
            CanonicalError::TooDeep => "arguments nested too deeply",
        })
    }
}

/// How deep arrays and objects may nest in a value whose nesting no JSON parser bounded (a
/// host-language object written with [`Canonical::bounded`]); deeper is
/// [`CanonicalError::TooDeep`].
pub const MAX_CANONICAL_DEPTH: usize = 256;

impl From<CanonicalError> for std::convert::Infallible {
    fn from(e: CanonicalError) -> Self {
        unreachable!("a serde_json::Value cannot fail canonical writing: {e:?}")
    }
}

/// The one canonical-JSON writer: whoever walks a JSON-like tree (a `serde_json::Value` here, a
/// Python object in the binding) calls these methods, and the writer applies the rules of
/// [`canonical_json`]: keys sorted by code point, no whitespace, strings escaped as serde_json
/// escapes them, numbers as serde_json prints them, a nesting limit.
#[derive(Debug)]
pub struct Canonical {
    out: String,
    depth: usize,
    max_depth: usize,
}

impl Canonical {
    /// A writer that refuses arrays and objects nested more than `max_depth` deep.
    pub fn new(max_depth: usize) -> Self {
        Self {
            out: String::with_capacity(128),
            depth: 0,
            max_depth,
        }
    }

    /// A writer for a value whose nesting no parser bounded: at most [`MAX_CANONICAL_DEPTH`].
    pub fn bounded() -> Self {
        Self::new(MAX_CANONICAL_DEPTH)
    }

    /// The text written.
    pub fn finish(self) -> String {
        self.out
    }

    pub fn null(&mut self) {
        self.out.push_str("null");
    }

    pub fn boolean(&mut self, b: bool) {
        self.out.push_str(if b { "true" } else { "false" });
    }

    /// An integer given as its decimal text (any size).
    pub fn integer(&mut self, decimal: &str) {
        self.out.push_str(decimal);
    }

    /// A float as serde_json prints it; NaN and the infinities are refused.
    pub fn float(&mut self, f: f64) -> Result<(), CanonicalError> {
        let n = serde_json::Number::from_f64(f).ok_or(CanonicalError::NotFinite(f))?;
        let _ = write!(self.out, "{n}");
        Ok(())
    }

    pub fn string(&mut self, s: &str) {
        write_string(s, &mut self.out);
    }

    fn enter(&mut self) -> Result<(), CanonicalError> {
        if self.depth >= self.max_depth {
            return Err(CanonicalError::TooDeep);
        }
        self.depth += 1;
        Ok(())
    }

    /// An array of `items`, each written by `each`.
    pub fn array<V, E: From<CanonicalError>>(
        &mut self,
        items: impl IntoIterator<Item = V>,
        mut each: impl FnMut(&mut Self, V) -> Result<(), E>,
    ) -> Result<(), E> {
        self.enter()?;
        self.out.push('[');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            each(self, item)?;
        }
        self.out.push(']');
        self.depth -= 1;
        Ok(())
    }

    /// An object of `entries` (in any order: they are sorted by key here), each value written by
    /// `each`.
    pub fn object<K: AsRef<str>, V: Copy, E: From<CanonicalError>>(
        &mut self,
        entries: &mut [(K, V)],
        mut each: impl FnMut(&mut Self, V) -> Result<(), E>,
    ) -> Result<(), E> {
        self.enter()?;
        entries.sort_unstable_by(|a, b| key_order(a.0.as_ref(), b.0.as_ref()));
        self.out.push('{');
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            write_string(k.as_ref(), &mut self.out);
            self.out.push(':');
            each(self, *v)?;
        }
        self.out.push('}');
        self.depth -= 1;
        Ok(())
    }
}

/// Whether `bytes` holds a byte JSON escapes (a control character, `"` or `\`): eight bytes
/// at a time as one word (the classic "has a byte less than n" / "has a zero byte" tests), the
/// rest one by one.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let x = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let below_space = x.wrapping_sub(ONES * 0x20) & !x;
        let q = x ^ (ONES * u64::from(b'"'));
        let quote = q.wrapping_sub(ONES) & !q;
        let b = x ^ (ONES * u64::from(b'\\'));
        let backslash = b.wrapping_sub(ONES) & !b;
        if (below_space | quote | backslash) & HIGH != 0 {
            return true;
        }
    }
    chunks.remainder().iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// `s` as a JSON string literal appended to `out`, escaped exactly as serde_json escapes it
/// (`"`, `\`, and control characters: `\b \f \n \r \t`, else `\u00xx`; everything else,
/// non-ASCII included, kept as is: the same as Python's `json.dumps(..., ensure_ascii=False)`).
/// Written in place: this runs for every key and string of every call's arguments.
pub fn write_string(s: &str, out: &mut String) {
    // Most strings need no escape: a pass over the bytes, eight at a time, finds out; such a
    // string is appended with its quotes in one extension of the buffer.
    if !needs_escape(s.as_bytes()) {
        // SAFETY: only whole UTF-8 text is appended (the quotes are ASCII, `s` is a `str`).
        let buf = unsafe { out.as_mut_vec() };
        buf.reserve(s.len() + 2);
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
        return;
    }
    out.reserve(s.len() + 2);
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // `b` is ASCII, so `i` is a character boundary.
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Lowercase hex of the SHA-256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// The audit record's `args_hash`: the first 16 hex characters of the SHA-256 of the canonical
/// JSON arguments.
pub fn args_hash(canonical: &str) -> String {
    hex(&Sha256::digest(canonical.as_bytes())[..8])
}

// ------------------------------------------------------------------ per-conversation state

/// The most conversations (scopes) whose repeat counts and idempotency window one Invoker keeps;
/// beyond it the least recently used idle one is forgotten.
pub const MAX_SCOPES: usize = 4096;
/// The most distinct calls whose repeat count one conversation keeps; beyond it the oldest
/// count is dropped (a loop repeats a recent call, so old counts matter least).
pub const MAX_CALLS_PER_SCOPE: usize = 256;

/// Whether a call seen `count` times (this one included) is refused by a guard of `limit`:
/// the `limit`-th identical call and every later one (the third, by default).
pub fn is_repeat(count: u32, limit: u32) -> bool {
    limit > 0 && count >= limit
}

/// A call inside one conversation: (tool name, the arguments' key: see
/// `crate::pipeline::Facts::key`).
type Call = (String, Vec<u8>);

/// A [`Call`] looked up without copying its parts (hashed and compared as the pair is).
struct CallRef<'a>(&'a str, &'a [u8]);

impl std::hash::Hash for CallRef<'_> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // As `(String, Vec<u8>)` hashes: each part in turn.
        self.0.hash(h);
        self.1.hash(h);
    }
}

impl hashbrown::Equivalent<Call> for CallRef<'_> {
    fn equivalent(&self, key: &Call) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

/// The maps of the per-conversation state (hashbrown's default hasher: its keys are bounded in
/// number, see [`MAX_CALLS_PER_SCOPE`] and [`MAX_SCOPES`]).
type Map<K, V> = hashbrown::HashMap<K, V>;

/// How often one identical call was seen, and when it was first seen (see `Scope::order`).
#[derive(Debug)]
struct Counted {
    call: Call,
    n: u32,
    seq: u64,
}

#[derive(Debug)]
struct Scope<V> {
    /// The counts, by the hash of their call (`Conversations::hasher`): each call is stored once.
    counts: hashbrown::HashTable<Counted>,
    /// The counts in the order they were first seen, oldest first, as (hash, seq): what is
    /// dropped beyond the cap.
    order: VecDeque<(u64, u64)>,
    seq: u64,
    /// The one open idempotency window: the last side-effecting call that succeeded, with its
    /// result. Another side-effecting success replaces it (the world changed).
    done: Option<(Call, V)>,
    /// Side-effecting calls running now, with what their duplicates wait on.
    running: Map<Call, V>,
    touched: u64,
}

impl<V> Scope<V> {
    fn new(touched: u64) -> Self {
        Self {
            counts: hashbrown::HashTable::new(),
            order: VecDeque::new(),
            seq: 0,
            done: None,
            running: Map::default(),
            touched,
        }
    }
}

/// What [`Conversations::claim`] found.
#[derive(Debug, PartialEq)]
pub enum Claim<'a, V> {
    /// The same call succeeded and its window is open: return its result, do not run the tool.
    Hit(&'a V),
    /// An identical call is running: wait on this, then claim again.
    Pending(&'a V),
    /// Nothing to reuse: the caller runs the tool, then calls `complete` or `release`.
    Claimed,
}

/// The state the rules keep per conversation: how often each identical call was seen (repeat
/// detection) and the idempotency window (the last successful side-effecting call and the calls
/// in flight). Bounded: at most [`MAX_SCOPES`] conversations, each with at most
/// [`MAX_CALLS_PER_SCOPE`] counts, one finished result and its calls in flight.
#[derive(Debug)]
pub struct Conversations<V> {
    scopes: Map<String, Scope<V>>,
    /// touched tick → scope, least recently used first.
    lru: BTreeMap<u64, String>,
    tick: u64,
    max_scopes: usize,
    max_calls: usize,
    /// How the repeat counts hash their calls.
    hasher: hashbrown::DefaultHashBuilder,
}

impl<V> Default for Conversations<V> {
    fn default() -> Self {
        Self::with_limits(MAX_SCOPES, MAX_CALLS_PER_SCOPE)
    }
}

impl<V> Conversations<V> {
    pub fn with_limits(max_scopes: usize, max_calls: usize) -> Self {
        Self {
            scopes: Map::default(),
            lru: BTreeMap::new(),
            tick: 0,
            max_scopes: max_scopes.max(1),
            max_calls: max_calls.max(1),
            hasher: hashbrown::DefaultHashBuilder::default(),
        }
    }

    fn scope(&mut self, scope: &str) -> &mut Scope<V> {
        if self.scopes.len() < self.max_scopes || self.scopes.contains_key(scope) {
            // Found or added with one lookup (no scope need be forgotten for it).
            return match self.scopes.entry_ref(scope) {
                hashbrown::hash_map::EntryRef::Occupied(e) => {
                    let s = e.into_mut();
                    if s.touched != self.tick {
                        // Not the most recently used one already (the usual case of a
                        // conversation's calls in a row costs no reordering): it becomes so.
                        self.tick += 1;
                        self.lru.remove(&s.touched);
                        s.touched = self.tick;
                        self.lru.insert(self.tick, scope.to_owned());
                    }
                    s
                }
                hashbrown::hash_map::EntryRef::Vacant(e) => {
                    self.tick += 1;
                    self.lru.insert(self.tick, scope.to_owned());
                    e.insert(Scope::new(self.tick))
                }
            };
        }
        self.tick += 1;
        let tick = self.tick;
        {
            // The least recently used scope with no call in flight (its waiters must be woken by
            // the call that runs, so such a scope stays).
            let victim = self
                .lru
                .iter()
                .find(|(_, name)| self.scopes.get(name.as_str()).is_none_or(|s| s.running.is_empty()))
                .map(|(t, n)| (*t, n.clone()));
            if let Some((t, name)) = victim {
                self.lru.remove(&t);
                self.scopes.remove(&name);
            }
        }
        self.lru.insert(tick, scope.to_owned());
        self.scopes.entry(scope.to_owned()).or_insert_with(|| Scope::new(tick))
    }

    /// Count one more identical call and return how many there have been, this one included.
    pub fn observe(&mut self, scope: &str, name: &str, key: &[u8]) -> u32 {
        use std::hash::BuildHasher;
        let max_calls = self.max_calls;
        let hasher = self.hasher.clone();
        let hash = hasher.hash_one(CallRef(name, key));
        let s = self.scope(scope);
        if let Some(c) = s.counts.find_mut(hash, |c| c.call.0 == name && c.call.1 == key) {
            c.n = c.n.saturating_add(1);
            return c.n;
        }
        while s.counts.len() >= max_calls {
            match s.order.pop_front() {
                Some((h, seq)) => {
                    if let Ok(old) = s.counts.find_entry(h, |c| c.seq == seq) {
                        old.remove();
                    }
                }
                None => break,
            }
        }
        s.seq += 1;
        s.order.push_back((hash, s.seq));
        let counted = Counted {
            call: (name.to_owned(), key.to_owned()),
            n: 1,
            seq: s.seq,
        };
        s.counts
            .insert_unique(hash, counted, |c| hasher.hash_one(CallRef(&c.call.0, &c.call.1)));
        1
    }

    /// Forget every repeat count of `scope` (a side-effecting call succeeded: reading the world
    /// again is legitimate).
    pub fn reset_counts(&mut self, scope: &str) {
        if let Some(s) = self.scopes.get_mut(scope) {
            s.counts.clear();
            s.order.clear();
        }
    }

    /// Look a side-effecting call up; when nothing is reusable, mark it running with `waiter`.
    pub fn claim(&mut self, scope: &str, name: &str, key: &[u8], waiter: V) -> Claim<'_, V> {
        let s = self.scope(scope);
        let call = CallRef(name, key);
        if s.running.contains_key(&call) {
            return Claim::Pending(&s.running[&call]);
        }
        if matches!(&s.done, Some((c, _)) if hashbrown::Equivalent::equivalent(&call, c)) {
            return Claim::Hit(&s.done.as_ref().expect("checked").1);
        }
        s.running.insert((name.to_owned(), key.to_owned()), waiter);
        Claim::Claimed
    }

    /// The claimed call succeeded: its window opens (when `keep`: the result is held here) and
    /// every other one of the scope closes. Returns the waiter to wake.
    pub fn complete(&mut self, scope: &str, name: &str, key: &[u8], value: Option<V>) -> Option<V> {
        let s = self.scope(scope);
        let waiter = s.running.remove(&CallRef(name, key));
        s.done = value.map(|v| ((name.to_owned(), key.to_owned()), v));
        waiter
    }

    /// Close the scope's idempotency window (another side-effecting call succeeded).
    pub fn close_window(&mut self, scope: &str) {
        if let Some(s) = self.scopes.get_mut(scope) {
            s.done = None;
        }
    }

    /// Forget a claimed call that failed; returns the waiter to wake.
    pub fn release(&mut self, scope: &str, name: &str, key: &[u8]) -> Option<V> {
        let s = self.scopes.get_mut(scope)?;
        s.running.remove(&CallRef(name, key))
    }

    /// Forget a finished conversation (its calls in flight keep their claims).
    pub fn forget(&mut self, scope: &str) {
        let Some(s) = self.scopes.get_mut(scope) else { return };
        if s.running.is_empty() {
            let t = s.touched;
            self.scopes.remove(scope);
            self.lru.remove(&t);
        } else {
            s.counts.clear();
            s.order.clear();
            s.done = None;
        }
    }

    /// `(repeat counts, idempotency entries (finished + running), scopes)`.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let counts = self.scopes.values().map(|s| s.counts.len()).sum();
        let idem = self
            .scopes
            .values()
            .map(|s| s.running.len() + usize::from(s.done.is_some()))
            .sum();
        (counts, idem, self.scopes.len())
    }
}

/// The key of a cached result in a shared store: `agentkit-tools:idem:` + SHA-256 hex of the
/// scope, name and canonical arguments (NUL-separated, so no two triples collide).
pub fn store_key(scope: &str, name: &str, canonical: &str) -> String {
    format!(
        "agentkit-tools:idem:{}",
        sha256_hex(&format!("{scope}\0{name}\0{canonical}"))
    )
}

// ------------------------------------------------------------------ retry

/// How a failed attempt is classified (by exception type, never by message text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// `ToolError(retriable=True)`, `ConnectionError`, a `TimeoutError` raised by the body, a
    /// declared transient type: worth another attempt on a read-only or idempotent tool.
    Transient,
    /// Our own deadline expired (`ToolTimeoutError`): not retried (the backend is slow), but it
    /// counts toward the circuit breaker.
    Deadline,
    /// Anything else, including argument and output-shape errors: back to the model.
    Permanent,
}

impl FailureKind {
    /// Its name: `"transient"`, `"deadline"` or `"permanent"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::Transient => "transient",
            FailureKind::Deadline => "deadline",
            FailureKind::Permanent => "permanent",
        }
    }
}

/// Retry settings (defaults: 3 attempts, 0.5 s base, 30 s cap).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base_s: f64,
    pub cap_s: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_s: 0.5,
            cap_s: 30.0,
        }
    }
}

impl RetryPolicy {
    /// `max_attempts` ≥ 1 (the first call included); `base_s` and `cap_s` finite and ≥ 0
    /// seconds. The error says which setting is wrong and what it got.
    pub fn new(max_attempts: u32, base_s: f64, cap_s: f64) -> Result<Self, String> {
        if max_attempts < 1 {
            return Err(format!("retry: max_attempts must be at least 1, got {max_attempts}"));
        }
        if !(base_s >= 0.0 && cap_s >= 0.0 && base_s.is_finite() && cap_s.is_finite()) {
            return Err(format!(
                "retry: base_s and cap_s must be finite and >= 0 seconds, got {base_s} and {cap_s}"
            ));
        }
        Ok(Self {
            max_attempts,
            base_s,
            cap_s,
        })
    }

    /// Whether attempt number `attempt` (1-based) that failed with `kind` is tried again.
    /// `retry_safe`: the tool is read-only or idempotent.
    pub fn should_retry(&self, kind: FailureKind, retry_safe: bool, attempt: u32) -> bool {
        kind == FailureKind::Transient && retry_safe && attempt < self.max_attempts
    }

    /// The upper bound of the wait after failed attempt `attempt` (1-based):
    /// `min(cap, base * 2^(attempt-1))` seconds.
    pub fn ceiling_s(&self, attempt: u32) -> f64 {
        let exp = attempt.saturating_sub(1).min(1023) as i32;
        let ceiling = self.base_s * 2f64.powi(exp);
        if ceiling.is_finite() {
            ceiling.min(self.cap_s).max(0.0)
        } else {
            self.cap_s.max(0.0)
        }
    }

    /// "Full jitter" (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015): a uniform
    /// draw in `[0, ceiling_s(attempt))` seconds.
    pub fn delay_s(&self, attempt: u32, rng: &mut fastrand::Rng) -> f64 {
        rng.f64() * self.ceiling_s(attempt)
    }

    /// After failed attempt `attempt` (1-based) with `kind`: the wait before the next attempt
    /// ([`RetryPolicy::delay_s`], drawn from `rng` only then), or None when the call is not
    /// tried again (see [`RetryPolicy::should_retry`]).
    #[inline]
    pub fn decide(&self, kind: FailureKind, retry_safe: bool, attempt: u32, rng: &mut fastrand::Rng) -> Option<f64> {
        self.should_retry(kind, retry_safe, attempt)
            .then(|| self.delay_s(attempt, rng))
    }
}

// ------------------------------------------------------------------ circuit breaker

/// A per-tool circuit breaker: after `threshold` consecutive failures (transient or deadline)
/// the circuit opens and calls are refused for `cooldown_s`; then one trial call is let through
/// (half-open): a success closes the circuit, a failure opens it again. Times are monotonic
/// seconds supplied by the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitBreaker {
    pub threshold: u32,
    pub cooldown_s: f64,
    failures: u32,
    opened_at: Option<f64>,
    trial_running: bool,
}

impl CircuitBreaker {
    pub fn new(threshold: u32, cooldown_s: f64) -> Self {
        Self {
            threshold: threshold.max(1),
            cooldown_s,
            failures: 0,
            opened_at: None,
            trial_running: false,
        }
    }

    /// `Ok(())` when a call may run now, `Err(seconds until the next trial)` when refused.
    pub fn admit(&mut self, now: f64) -> Result<(), f64> {
        let Some(opened) = self.opened_at else { return Ok(()) };
        let waited = now - opened;
        if waited < self.cooldown_s {
            return Err(self.cooldown_s - waited);
        }
        if self.trial_running {
            return Err(0.0);
        }
        self.trial_running = true;
        Ok(())
    }

    pub fn record_success(&mut self) {
        self.failures = 0;
        self.opened_at = None;
        self.trial_running = false;
    }

    /// Record a failure that says the backend is unhealthy; returns true when the circuit is open.
    pub fn record_failure(&mut self, now: f64) -> bool {
        self.failures = self.failures.saturating_add(1);
        if self.trial_running || self.failures >= self.threshold {
            self.opened_at = Some(now);
        }
        self.trial_running = false;
        self.opened_at.is_some()
    }

    /// A call that ended for a reason saying nothing about the backend's health (a permanent
    /// error): a half-open trial slot is freed, counts are unchanged.
    pub fn record_neutral(&mut self) {
        self.trial_running = false;
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    pub fn is_open(&self) -> bool {
        self.opened_at.is_some()
    }
}

// ------------------------------------------------------------------ egress

/// The host an egress check may judge: the URL's host lowercased, without port, IPv6 brackets
/// or a final dot; `None` for every URL [`check_egress`] refuses before looking at the host.
pub fn url_host(url: &str) -> Option<String> {
    read_http_url(url).ok()
}

/// Reads an `http`/`https` URL so that its host is the same for every reader: WHATWG URL
/// parsers (browsers, many HTTP clients) and RFC 3986 ones (Python's `urllib.parse`, which
/// `requests` and `httpx` build on) differ on backslashes, percent-escapes, whitespace and
/// control characters, missing slashes and userinfo, so a URL with any of those is refused
/// rather than guessed at. Refused: anything but `http:`/`https:` (any case) followed by `//`;
/// whitespace or a control character anywhere; in the authority (up to the first `/`, `?` or
/// `#`), a backslash, userinfo (`@`), a `%`, a character other than ASCII letters, digits, `-`,
/// `.`, `_` in the host, an empty host, a port that is not a number from 0 to 65535, a
/// bracketed IPv6 literal that is not an IPv6 address, or a host ending in a number that is not
/// an IPv4 address in plain `a.b.c.d` form (`0x7f.1`, `2130706433`, `127.0.0.01`).
fn read_http_url(url: &str) -> Result<String, EgressDenial> {
    let refused = |why: &str| Err(EgressDenial::Refused(why.to_owned()));
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return refused(
            "the URL contains a space, tab, line break or other control character, which URL parsers \
             strip or keep differently",
        );
    }
    let Some((scheme, rest)) = url.split_once(':') else {
        return Err(EgressDenial::NoHost);
    };
    let mut chars = scheme.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return Err(EgressDenial::NoHost);
    }
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(EgressDenial::Refused(format!(
            "only http and https URLs may be fetched, not '{scheme}:' URLs"
        )));
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return Err(EgressDenial::NoHost);
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority.contains('\\') {
        return refused(
            "the URL has a backslash before its path, which some parsers read as '/' and others do \
             not, so its host is ambiguous",
        );
    }
    if authority.contains('@') {
        return refused("the URL carries a user name or password ('user@host'), which is not allowed");
    }
    if authority.contains('%') {
        return refused("the host contains a percent-escape, which some parsers decode and others do not");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((inner, after)) = v6.split_once(']') else {
            return refused("the IPv6 address in the host has no closing ']'");
        };
        if inner.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(EgressDenial::Refused(format!("'[{inner}]' is not an IPv6 address")));
        }
        match after.strip_prefix(':') {
            Some(port) => (inner, port),
            None if after.is_empty() => (inner, ""),
            None => return refused("the host has text after its IPv6 address"),
        }
    } else {
        authority.split_once(':').unwrap_or((authority, ""))
    };
    let port_ok = port.is_empty()
        || (port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| p <= 65535));
    if !port_ok {
        return Err(EgressDenial::Refused(format!(
            "the port '{port}' is not a number from 0 to 65535"
        )));
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return Err(EgressDenial::NoHost);
    }
    if !authority.starts_with('[')
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(EgressDenial::Refused(format!(
            "the host '{host}' has characters a host name cannot have (write a non-ASCII name in its \
             ASCII xn-- form)"
        )));
    }
    if !authority.starts_with('[') && is_ip_literal(host) && host.parse::<std::net::Ipv4Addr>().is_err() {
        return Err(EgressDenial::Refused(format!(
            "the host '{host}' is an IPv4 address in a form URL parsers read differently; write it as four \
             decimal numbers a.b.c.d"
        )));
    }
    Ok(host.to_ascii_lowercase())
}

/// A host allow-list. An entry covers itself and its subdomains (`example.com` allows
/// `example.com` and `api.example.com`, never `example.com.evil.test` or `badexample.com`);
/// `*.example.com` covers the subdomains only; an IP literal covers exactly itself.
/// Case-insensitive. Private, loopback and link-local addresses (and `localhost`) are refused
/// unless an entry names them exactly.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostAllowList {
    exact: Vec<String>,
    /// Entries given as `*.x`: subdomains only (stored as `.x`).
    suffixes: Vec<String>,
}

/// Whether `host` is an IP literal: IPv6 (it has a `:`) or a dotted/numeric IPv4 form (the last
/// label all digits or `0x..`: WHATWG URL parsers read such a host as an address).
fn is_ip_literal(host: &str) -> bool {
    if host.contains(':') {
        return true;
    }
    let last = host.rsplit('.').next().unwrap_or("");
    !last.is_empty()
        && (last.chars().all(|c| c.is_ascii_digit())
            || (last.starts_with("0x") && last[2..].chars().all(|c| c.is_ascii_hexdigit())))
}

/// Whether `host` names this machine or a private, loopback, link-local or unspecified address
/// (the targets of server-side request forgery: `169.254.169.254`, `10.0.0.1`, `::1`, ...).
/// Any IPv4 literal that is not in plain dotted-decimal form counts too (`2130706433`, `0x7f.1`
/// both mean 127.0.0.1).
pub fn is_internal_host(host: &str) -> bool {
    use std::net::{IpAddr, Ipv4Addr};
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    if !is_ip_literal(host) {
        return false;
    }
    let v4 = |ip: Ipv4Addr| {
        ip.is_private()
            || ip.is_loopback()
            || ip.is_link_local()
            || ip.is_unspecified()
            || ip.is_broadcast()
            || ip.octets()[0] == 0
            || (ip.octets()[0] == 100 && (ip.octets()[1] & 0xc0) == 64) // 100.64.0.0/10, shared
    };
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => v4(ip),
        Ok(IpAddr::V6(ip)) => {
            if let Some(mapped) = ip.to_ipv4_mapped() {
                return v4(mapped);
            }
            let first = ip.segments()[0];
            ip.is_loopback() || ip.is_unspecified() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
        }
        Err(_) => true, // an address in a form we do not read: refused unless listed
    }
}

impl HostAllowList {
    pub fn new<S: AsRef<str>>(entries: impl IntoIterator<Item = S>) -> Self {
        let mut list = Self::default();
        for entry in entries {
            let e = entry.as_ref().trim().to_ascii_lowercase();
            let e = e.strip_suffix('.').unwrap_or(&e);
            let e = e.trim_start_matches('[').trim_end_matches(']');
            if let Some(suffix) = e.strip_prefix("*.") {
                if !suffix.is_empty() {
                    list.suffixes.push(format!(".{suffix}"));
                }
            } else if !e.is_empty() {
                list.exact.push(e.to_owned());
            }
        }
        list
    }

    /// Whether `host` (as returned by [`url_host`]) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        if self.exact.iter().any(|e| e == host) {
            return true;
        }
        if is_internal_host(host) || is_ip_literal(host) {
            return false; // addresses match only an entry naming them exactly
        }
        let covered = |suffix: &str| host.len() > suffix.len() && host.ends_with(suffix);
        self.suffixes.iter().any(|s| covered(s))
            || self.exact.iter().any(|e| {
                !is_ip_literal(e)
                    && host.len() > e.len() + 1
                    && host.ends_with(e.as_str())
                    && host.as_bytes()[host.len() - e.len() - 1] == b'.'
            })
    }

    /// The entries as given back to the model (`*.x` for suffixes), exact ones first.
    pub fn entries(&self) -> Vec<String> {
        self.exact
            .iter()
            .cloned()
            .chain(self.suffixes.iter().map(|s| format!("*{s}")))
            .collect()
    }
}

/// Why an egress check failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressDenial {
    /// The value is not an absolute URL with a host we can check.
    NoHost,
    /// The host is not on the list.
    HostNotAllowed(String),
    /// The host is private, loopback or link-local and no entry names it.
    Internal(String),
    /// The URL is refused before its host is judged (why): a scheme other than http(s),
    /// userinfo, or a form whose host URL parsers read differently.
    Refused(String),
}

/// Check the URL a tool is about to fetch against the allow-list.
/// Refuses, before the allow-list is consulted, every URL that is not a plain `http`/`https`
/// URL whose host all URL parsers read alike (see [`url_host`]).
pub fn check_egress(url: &str, allow: &HostAllowList) -> Result<String, EgressDenial> {
    let host = read_http_url(url)?;
    if allow.allows(&host) {
        Ok(host)
    } else if is_internal_host(&host) {
        Err(EgressDenial::Internal(host))
    } else {
        Err(EgressDenial::HostNotAllowed(host))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn needs_escape_matches_the_byte_rule_at_every_place() {
        let naive = |b: &[u8]| b.iter().any(|&c| c < 0x20 || c == b'"' || c == b'\\');
        for len in 0..20 {
            for at in 0..len.max(1) {
                for byte in 0..=255u8 {
                    let mut v = vec![b'a'; len];
                    if len > 0 {
                        v[at] = byte;
                    }
                    // Neighbours that sit next to the borrow boundary of the word tests.
                    if len > at + 1 {
                        v[at + 1] = 0x80;
                    }
                    assert_eq!(needs_escape(&v), naive(&v), "{v:?}");
                }
            }
        }
    }

    #[test]
    fn canonical_objects_sort_keys_by_code_point_at_any_size() {
        let mut m = serde_json::Map::new();
        for k in ["b", "", "a\u{0}", "a", "é", "Z", "ab", "aa", "\u{10000}", "\u{ffff}"] {
            m.insert(k.to_owned(), Value::from(k));
        }
        let small = Value::Object(m.clone());
        let mut keys: Vec<String> = m.keys().cloned().collect();
        keys.sort();
        let expected = format!(
            "{{{}}}",
            keys.iter()
                .map(|k| format!("{}:{}", Value::from(k.as_str()), Value::from(k.as_str())))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(canonical_json(&small), expected);
        for i in 0..20 {
            m.insert(format!("k{i:02}"), Value::from(i));
        }
        let big = canonical_json(&Value::Object(m.clone()));
        let mut keys: Vec<String> = m.keys().cloned().collect();
        keys.sort();
        let order: Vec<usize> = keys
            .iter()
            .map(|k| big.find(&format!("{}:", Value::from(k.as_str()))).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{big}");
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn retry_settings_out_of_range_are_refused_with_what_was_given() {
        assert_eq!(RetryPolicy::new(3, 0.5, 30.0), Ok(RetryPolicy::default()));
        assert_eq!(
            RetryPolicy::new(0, 0.5, 30.0),
            Err("retry: max_attempts must be at least 1, got 0".to_owned())
        );
        for (base, cap) in [(-1.0, 1.0), (1.0, -0.5), (f64::NAN, 1.0), (1.0, f64::INFINITY)] {
            let err = RetryPolicy::new(3, base, cap).unwrap_err();
            assert_eq!(
                err,
                format!("retry: base_s and cap_s must be finite and >= 0 seconds, got {base} and {cap}")
            );
        }
    }

    #[test]
    fn strings_are_escaped_exactly_as_serde_json_escapes_them() {
        let mut samples: Vec<String> = (0u8..0x80).map(|b| format!("a{}z", b as char)).collect();
        samples.extend(
            [
                "",
                "plain",
                "\"quoted\" \\ back",
                "é ü 中文 😀",
                "\u{7f}\u{80}\u{2028}",
                "\n\r\t\u{8}\u{c}\u{0}\u{1f}",
            ]
            .map(String::from),
        );
        for s in samples {
            let mut out = String::from("prefix:");
            write_string(&s, &mut out);
            assert_eq!(out, format!("prefix:{}", serde_json::to_string(&s).unwrap()), "{s:?}");
        }
    }

    #[test]
    fn args_key_is_equal_exactly_when_the_canonical_text_is() {
        let values = [
            json!({"b": [1, {"z": null, "a": "é\"x"}], "a": true, "c": 1.5}),
            json!({"c": 1.5, "a": true, "b": [1, {"a": "é\"x", "z": null}]}),
            json!({"a": true, "b": [1, {"a": "é\"x", "z": null}], "c": 1.5, "d": null}),
            json!({"a": 1}),
            json!({"a": 1.0}),
            json!({"a": -1}),
            json!({"a": 0.0}),
            json!({"a": -0.0}),
            json!({"a": 18446744073709551615u64}),
            json!({"a": "1"}),
            json!({"a": [1]}),
            json!({"a": ["1"]}),
            json!({"a": [[]]}),
            json!({"a": [[], []]}),
            json!({"a": {}}),
            json!({"a": null}),
            json!({"a": false}),
            json!({"a": "", "b": ""}),
            json!({"ab": "", "": "b"}),
            json!({"a": "b\u{0}"}),
            json!(["a", "b"]),
            json!(["ab"]),
            json!({}),
            json!([]),
            json!(null),
        ];
        let many: serde_json::Map<String, Value> = (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
        let reversed: serde_json::Map<String, Value> = (0..40).rev().map(|i| (format!("k{i}"), json!(i))).collect();
        let mut all = values.to_vec();
        all.push(Value::Object(many));
        all.push(Value::Object(reversed));
        // lengths and counts of more than one LEB128 byte
        all.extend([
            json!({"a": "x".repeat(300)}),
            json!({"a": "x".repeat(301)}),
            json!({"a": "x".repeat(127)}),
            json!({"a": "x".repeat(128)}),
        ]);
        all.extend([
            Value::Array(vec![json!(1); 130]),
            Value::Array(vec![json!(1); 131]),
            Value::Array(vec![json!(1); 128]),
        ]);
        for a in &all {
            assert!(args_key(a)[0] < 0x08);
            assert_eq!(canonical_and_key(a), (canonical_json(a), args_key(a)), "{a}");
            for b in &all {
                assert_eq!(
                    args_key(a) == args_key(b),
                    canonical_json(a) == canonical_json(b),
                    "{a} / {b}"
                );
            }
        }
    }

    #[test]
    fn canonical_text_and_hash() {
        let v = json!({"b": [1, {"z": null, "a": "é\"x"}], "a": true, "c": 1.5});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":true,"b":[1,{"a":"é\"x","z":null}],"c":1.5}"#
        );
        assert_eq!(canonical_json(&json!({})), "{}");
        assert_eq!(
            canonical_json(&json!([1e300, -0.0, 2.5e-8, 18446744073709551615u64, -3])),
            "[1e+300,-0.0,2.5e-8,18446744073709551615,-3]"
        );
        let mut w = Canonical::new(1);
        let deep: Result<(), CanonicalError> = w.array([1], |w, _| w.array([2], |_, _| Ok(())));
        assert_eq!(deep, Err(CanonicalError::TooDeep));
        assert!(matches!(Canonical::new(1).float(f64::NAN), Err(CanonicalError::NotFinite(f)) if f.is_nan()));
        assert_eq!(
            CanonicalError::NotFinite(f64::INFINITY).to_string(),
            "not a finite number"
        );
        assert_eq!(CanonicalError::TooDeep.to_string(), "arguments nested too deeply");
        // the bounded writer takes MAX_CANONICAL_DEPTH levels, not one more
        fn nest(w: &mut Canonical, levels: usize) -> Result<(), CanonicalError> {
            if levels == 0 {
                w.null();
                return Ok(());
            }
            w.array([levels - 1], nest)
        }
        let mut w = Canonical::bounded();
        assert_eq!(nest(&mut w, MAX_CANONICAL_DEPTH), Ok(()));
        assert_eq!(w.finish(), format!("{}null{}", "[".repeat(256), "]".repeat(256)));
        assert_eq!(
            nest(&mut Canonical::bounded(), MAX_CANONICAL_DEPTH + 1),
            Err(CanonicalError::TooDeep)
        );
        // sha256("{}") = 44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a
        assert_eq!(args_hash("{}"), "44136fa355b3678a");
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            store_key("r", "t", "{}"),
            format!("agentkit-tools:idem:{}", sha256_hex("r\0t\0{}"))
        );
    }

    #[test]
    fn repeat_counts_per_scope() {
        let mut r: Conversations<u32> = Conversations::default();
        assert_eq!(r.observe("a", "t", b"{}"), 1);
        assert_eq!(r.observe("a", "t", b"{}"), 2);
        assert_eq!(r.observe("b", "t", b"{}"), 1);
        assert_eq!(r.observe("a", "t", b"{\"x\":1}"), 1);
        assert_eq!(r.observe("a", "t", b"{}"), 3);
        assert_eq!(
            (is_repeat(2, 3), is_repeat(3, 3), is_repeat(4, 3), is_repeat(9, 0)),
            (false, true, true, false)
        );
        r.reset_counts("a");
        assert_eq!(r.observe("a", "t", b"{}"), 1);
        r.forget("a");
        assert_eq!(r.sizes(), (1, 0, 1));
        assert_eq!(r.observe("a", "t", b"{}"), 1);
    }

    #[test]
    fn idempotency_window() {
        let mut c: Conversations<u32> = Conversations::default();
        assert_eq!(c.claim("s", "send", b"{}", 7), Claim::Claimed);
        assert_eq!(c.claim("s", "send", b"{}", 8), Claim::Pending(&7));
        assert_eq!(c.release("s", "send", b"{}"), Some(7));
        assert_eq!(c.claim("s", "send", b"{}", 9), Claim::Claimed);
        assert_eq!(c.complete("s", "send", b"{}", Some(42)), Some(9));
        assert_eq!(c.claim("s", "send", b"{}", 10), Claim::Hit(&42));
        assert_eq!(c.release("s", "send", b"{}"), None);
        // another side-effecting success closes the window of the first
        assert_eq!(c.claim("s", "send", b"{\"x\":1}", 11), Claim::Claimed);
        assert_eq!(c.complete("s", "send", b"{\"x\":1}", Some(43)), Some(11));
        assert_eq!(c.claim("s", "send", b"{}", 12), Claim::Claimed);
        c.close_window("s");
        assert_eq!(c.claim("s", "send", b"{\"x\":1}", 13), Claim::Claimed);
        assert_eq!(c.sizes(), (0, 2, 1));
        c.forget("s"); // calls in flight keep their claims
        assert_eq!(c.sizes(), (0, 2, 1));
        c.release("s", "send", b"{}");
        c.release("s", "send", b"{\"x\":1}");
        c.forget("s");
        assert_eq!(c.sizes(), (0, 0, 0));
    }

    #[test]
    fn state_is_bounded() {
        let mut c: Conversations<u32> = Conversations::with_limits(3, 2);
        for i in 0..10 {
            c.observe("a", "t", i.to_string().as_bytes());
        }
        assert_eq!(c.sizes(), (2, 0, 1));
        assert_eq!(c.observe("a", "t", b"9"), 2);
        assert_eq!(c.observe("a", "t", b"0"), 1); // dropped long ago
        assert_eq!(c.claim("busy", "t", b"{}", 1), Claim::Claimed);
        for i in 0..100 {
            c.observe(&format!("run-{i}"), "t", b"{}");
        }
        // the scope with a call in flight is never evicted
        assert_eq!(c.sizes().2, 3);
        assert_eq!(c.claim("busy", "t", b"{}", 2), Claim::Pending(&1));
        assert_eq!(c.observe("run-99", "t", b"{}"), 2);
    }

    #[test]
    fn the_least_recently_used_scope_is_forgotten_first() {
        let mut c: Conversations<u32> = Conversations::with_limits(2, 4);
        c.observe("a", "t", b"{}");
        c.observe("b", "t", b"{}");
        assert_eq!(c.observe("a", "t", b"{}"), 2); // `a` used again: `b` is the least recent
        c.observe("c", "t", b"{}"); // full: `b` forgotten
        assert_eq!(c.observe("a", "t", b"{}"), 3);
        assert_eq!(c.observe("b", "t", b"{}"), 1); // full again: `c` forgotten
        assert_eq!(c.observe("a", "t", b"{}"), 4);
        assert_eq!(c.observe("c", "t", b"{}"), 1);
        assert_eq!(c.sizes().2, 2);
    }

    #[test]
    fn retry_policy() {
        let p = RetryPolicy::default();
        assert!(p.should_retry(FailureKind::Transient, true, 1));
        assert!(p.should_retry(FailureKind::Transient, true, 2));
        assert!(!p.should_retry(FailureKind::Transient, true, 3));
        assert!(!p.should_retry(FailureKind::Transient, false, 1));
        assert!(!p.should_retry(FailureKind::Deadline, true, 1));
        assert!(!p.should_retry(FailureKind::Permanent, true, 1));
        assert_eq!(
            [1, 2, 3, 7, 8, 5000].map(|a| p.ceiling_s(a)),
            [0.5, 1.0, 2.0, 30.0, 30.0, 30.0]
        );
        let mut rng = fastrand::Rng::with_seed(1);
        for attempt in 1..10 {
            let d = p.delay_s(attempt, &mut rng);
            assert!((0.0..p.ceiling_s(attempt)).contains(&d), "{d}");
        }
    }

    #[test]
    fn retry_decision_draws_a_delay_only_for_a_retry() {
        let p = RetryPolicy::default();
        let (mut rng, mut same) = (fastrand::Rng::with_seed(7), fastrand::Rng::with_seed(7));
        assert_eq!(
            p.decide(FailureKind::Transient, true, 2, &mut rng),
            Some(p.delay_s(2, &mut same))
        );
        // No retry: nothing drawn (the next draw is the same as a fresh generator's).
        assert_eq!(p.decide(FailureKind::Transient, true, 3, &mut rng), None);
        assert_eq!(p.decide(FailureKind::Transient, false, 1, &mut rng), None);
        assert_eq!(p.decide(FailureKind::Deadline, true, 1, &mut rng), None);
        assert_eq!(p.decide(FailureKind::Permanent, true, 1, &mut rng), None);
        assert_eq!(rng.u64(..), same.u64(..));
        let zero = RetryPolicy::new(2, 0.0, 0.0).unwrap();
        assert_eq!(zero.decide(FailureKind::Transient, true, 1, &mut rng), Some(0.0));
    }

    #[test]
    fn breaker_opens_half_opens_and_closes() {
        let mut b = CircuitBreaker::new(2, 10.0);
        assert_eq!(b.admit(0.0), Ok(()));
        assert!(!b.record_failure(0.0));
        assert!(b.record_failure(1.0));
        assert_eq!(b.admit(4.0), Err(7.0));
        assert_eq!(b.admit(11.0), Ok(())); // the trial
        assert_eq!(b.admit(11.5), Err(0.0)); // one trial at a time
        assert!(b.record_failure(12.0)); // trial failed: open again
        assert_eq!(b.admit(13.0), Err(9.0));
        assert_eq!(b.admit(22.0), Ok(()));
        b.record_success();
        assert_eq!((b.is_open(), b.consecutive_failures()), (false, 0));
        assert_eq!(b.admit(22.0), Ok(()));
    }

    #[test]
    fn hosts_of_urls() {
        let cases = [
            ("https://API.Example.com/v1?q=1", Some("api.example.com")),
            ("HTTPS://example.com:8080/x", Some("example.com")),
            ("http://good.example#@evil.example", Some("good.example")),
            ("http://good.example?@evil.example", Some("good.example")),
            ("http://good.example/\\@evil.example", Some("good.example")), // after the path starts: no effect
            ("https://example.com./x", Some("example.com")),
            ("https://example.com:/", Some("example.com")),
            ("https://[::1]:443/", Some("::1")),
            ("https://[::FFFF:127.0.0.1]/", Some("::ffff:127.0.0.1")),
            ("http://my_host.example/", Some("my_host.example")),
            // refused: userinfo, backslashes, escapes, whitespace, other schemes, odd forms
            ("http://user:pw@example.com:8080/x", None),
            ("http://a@b@evil.example/", None),
            ("https://example.com\\@127.0.0.1/", None),
            ("http://evil.example\\@good.example/", None),
            ("http:\\\\example.com/", None),
            ("  https://example.com.  ", None),
            ("ht\ttps://exa\nmple.com", None),
            ("https://exa\tmple.com", None),
            ("https://example.com\r\n/", None),
            ("https://example.com\u{a0}/", None),
            ("https://%65xample.com", None),
            ("https://example%2ecom/", None),
            ("https://exämple.com", None),
            ("https://example.com:99999/", None),
            ("https://example.com:8080:80/", None),
            ("https://example.com:+80/", None),
            ("https://[::1]x/", None),
            ("https://[zz::1]/", None),
            ("https://[::1/", None),
            ("https://[fe80::1%25eth0]/", None),
            ("example.com/path", None),
            ("mailto:a@example.com", None),
            ("ftp://example.com/", None),
            ("file:///etc/passwd", None),
            ("javascript://example.com/%0aalert(1)", None),
            ("http:example.com", None),
            ("http:/example.com", None),
            ("https:///path", None),
            ("https://:443/", None),
            ("http://0x7f.1/", None),
            ("http://2130706433/", None),
            ("http://127.0.0.01/", None),
            ("http://127.1/", None),
            ("http://example.1/", None),
            ("http://10.0.0.1/", Some("10.0.0.1")),
            ("1http://example.com", None),
            ("", None),
        ];
        for (url, want) in cases {
            assert_eq!(url_host(url).as_deref(), want, "{url:?}");
        }
    }

    #[test]
    fn egress_refusals_say_why() {
        let allow = HostAllowList::new(["example.com"]);
        let why = |url: &str| match check_egress(url, &allow) {
            Err(EgressDenial::Refused(why)) => why,
            other => panic!("{url:?}: {other:?}"),
        };
        assert_eq!(
            why("https://example.com\\@127.0.0.1/"),
            "the URL has a backslash before its path, which some \
            parsers read as '/' and others do not, so its host is ambiguous"
        );
        assert_eq!(
            why("https://me@example.com/"),
            "the URL carries a user name or password ('user@host'), which \
            is not allowed"
        );
        assert_eq!(
            why("https://example%2ecom/"),
            "the host contains a percent-escape, which some parsers decode \
            and others do not"
        );
        assert_eq!(
            why("https://exa\tmple.com/"),
            "the URL contains a space, tab, line break or other control \
            character, which URL parsers strip or keep differently"
        );
        assert_eq!(
            why("FTP://example.com/"),
            "only http and https URLs may be fetched, not 'ftp:' URLs"
        );
        assert_eq!(
            why("https://example.com:70000/"),
            "the port '70000' is not a number from 0 to 65535"
        );
        assert_eq!(why("https://[1::2::3]/"), "'[1::2::3]' is not an IPv6 address");
        assert_eq!(
            why("https://bücher.example/"),
            "the host 'bücher.example' has characters a host name cannot \
            have (write a non-ASCII name in its ASCII xn-- form)"
        );
        assert_eq!(
            why("http://0x7f.1/"),
            "the host '0x7f.1' is an IPv4 address in a form URL parsers read \
            differently; write it as four decimal numbers a.b.c.d"
        );
        assert_eq!(check_egress("http:example.com", &allow), Err(EgressDenial::NoHost));
        assert_eq!(
            check_egress("HTTP://Example.COM:8080/p", &allow),
            Ok("example.com".into())
        );
        assert_eq!(
            crate::errors::egress_denied_message(
                "fetch",
                "url",
                &EgressDenial::Refused(why("https://me@example.com/")),
                &["example.com".into()]
            ),
            "fetch refused the URL in 'url': the URL carries a user name or password ('user@host'), which is not \
             allowed. Call it again with a plain http or https URL such as https://host/path (allowed hosts: \
             example.com)."
        );
    }

    #[test]
    fn allow_list() {
        let allow = HostAllowList::new(["API.example.com", "*.docs.example.org", "[::1]", " "]);
        assert_eq!(allow.entries(), ["api.example.com", "::1", "*.docs.example.org"]);
        assert!(allow.allows("api.example.com"));
        assert!(allow.allows("v2.docs.example.org"));
        assert!(allow.allows("::1"));
        assert!(!allow.allows("docs.example.org"));
        assert!(!allow.allows("evildocs.example.org"));
        assert!(!allow.allows("example.com"));
        assert!(allow.allows("v1.api.example.com")); // an entry covers its subdomains
        assert!(!allow.allows("api.example.com.evil.test"));
        assert!(!allow.allows("badapi.example.com"));
        let open = HostAllowList::new(["example.com", "10.0.0.7", "localhost"]);
        assert!(open.allows("example.com") && open.allows("a.b.example.com") && open.allows("10.0.0.7"));
        assert!(open.allows("localhost") && !open.allows("10.0.0.8") && !open.allows("1.example.com.evil.test"));
        for internal in [
            "169.254.169.254",
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "::1",
            "fe80::1",
            "fc00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "2130706433",
            "0x7f.1",
            "app.localhost",
            "100.64.0.1",
        ] {
            assert!(is_internal_host(internal), "{internal}");
            let url = if internal.contains(':') {
                format!("http://[{internal}]/")
            } else {
                format!("http://{internal}/")
            };
            match check_egress(&url, &open).unwrap_err() {
                // numeric forms other than a.b.c.d are refused before the host is judged
                EgressDenial::Refused(_) => assert!(["2130706433", "0x7f.1"].contains(&internal), "{internal}"),
                other => assert_eq!(other, EgressDenial::Internal(internal.into())),
            }
        }
        assert!(!is_internal_host("8.8.8.8") && !is_internal_host("example.com") && !is_internal_host("2001:db8::1"));
        assert_eq!(
            check_egress("https://api.example.com/x", &allow),
            Ok("api.example.com".into())
        );
        assert_eq!(
            check_egress("https://evil.com", &allow),
            Err(EgressDenial::HostNotAllowed("evil.com".into()))
        );
        assert_eq!(check_egress("nope", &allow), Err(EgressDenial::NoHost));
    }

    #[test]
    fn failure_kinds_by_name() {
        assert_eq!(
            [FailureKind::Transient, FailureKind::Deadline, FailureKind::Permanent].map(FailureKind::as_str),
            ["transient", "deadline", "permanent"]
        );
    }
}
