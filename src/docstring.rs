//! Docstring parsing: Google, NumPy and Sphinx styles.
//!
//! [`parse`] turns a raw Python `__doc__` string into what the model sees as the tool description,
//! the per-parameter descriptions and the returns text. Google (`Args:`), NumPy (`Parameters` +
//! dashes) and Sphinx/reST (`:param x:`) sections are recognised by one line scanner, so each
//! docstring is read in whatever style it uses.
//!
//! Order of work:
//! 1. CR/CRLF → LF, tabs expanded to 8-column stops.
//! 2. The first line that is exactly `---` (after stripping) and everything below it are dropped.
//!    A `---` directly under a NumPy section name (`Returns` / `---`) is that section's underline,
//!    not the cut.
//! 3. Dedent like `inspect.cleandoc` (trailing whitespace of every line is dropped too).
//! 4. The summary is every line before the first section; sections are parsed; lines outside any
//!    section after the summary are ignored.
//! 5. A TODO/FIXME/XXX/HACK line anywhere in what is left (or a parameter/returns text that starts
//!    with one) is an error.

use std::borrow::Cow;
use std::fmt;

/// The result of [`parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedDocstring {
    /// What the model sees as the tool description (summary paragraphs + optional "Returns: ..." paragraph), stripped.
    pub description: String,
    /// Documented parameters in order of appearance: (name, description). Stars stripped from *args/**kwargs.
    pub params: Vec<(String, String)>,
    /// The returns section's text (None when absent or empty).
    pub returns: Option<String>,
}

/// Why a docstring cannot be used as a tool description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocstringError {
    /// A model-visible line starts with a note-for-humans marker.
    Marker {
        /// `TODO`, `FIXME`, `XXX` or `HACK`.
        marker: String,
        /// The offending line, stripped (for a parameter or returns text: the text itself).
        line: String,
    },
}

impl fmt::Display for DocstringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DocstringError::Marker { marker, line } => write!(
                f,
                "docstring line \"{line}\" starts with {marker}, which the model would read as part \
                 of the tool description; delete it or move notes for humans below a line \
                 containing only '---'"
            ),
        }
    }
}

impl std::error::Error for DocstringError {}

/// Parse a raw `__doc__` string. See the module documentation for the rules.
pub fn parse(doc: &str) -> Result<ParsedDocstring, DocstringError> {
    parse_with(doc, true)
}

/// [`parse`], with the marker check of the summary switched off when `summary_visible` is false:
/// a tool given an explicit `description=` shows the model its parameter texts, not the
/// docstring's summary.
pub fn parse_with(doc: &str, summary_visible: bool) -> Result<ParsedDocstring, DocstringError> {
    let text = normalize(doc);
    let mut lines: Vec<&str> = Vec::with_capacity(text.bytes().filter(|&b| b == b'\n').count() + 1);
    lines.extend(text.split('\n'));
    if let Some(cut) = cut_index(&lines) {
        lines.truncate(cut);
    }
    cleandoc(&mut lines);
    let first = lines.iter().position(|l| !l.is_empty()).unwrap_or(lines.len());
    let last = lines.iter().rposition(|l| !l.is_empty()).map_or(first, |i| i + 1);
    let lines = &lines[first..last];
    let n = lines.len();

    let summary_end = (0..n).find(|&i| section_start(lines, i).is_some()).unwrap_or(n);
    let mut p = Parser {
        lines,
        params: Vec::new(),
        returns: None,
        head_hit: None,
    };
    let mut i = summary_end;
    while i < n {
        match section_start(lines, i) {
            Some(start) => i = p.section(i, start),
            None => i += 1,
        }
    }

    // Refuse markers, reporting the first offending line in document order.
    let scan_from = if summary_visible { 0 } else { summary_end };
    let scan_to = p.head_hit.as_ref().map_or(n, |h| h.0 + 1);
    for line in lines.get(scan_from..scan_to).unwrap_or_default() {
        if let Some(marker) = marker_word(line) {
            return Err(DocstringError::Marker {
                marker: marker.to_owned(),
                line: line.trim().to_owned(),
            });
        }
    }
    if let Some((_, marker, line)) = p.head_hit {
        return Err(DocstringError::Marker {
            marker: marker.to_owned(),
            line,
        });
    }

    let mut description = String::new();
    push_lines(&mut description, &lines[..summary_end], false);
    if let Some(returns) = &p.returns {
        if !description.is_empty() {
            description.push_str("\n\n");
        }
        description.push_str("Returns: ");
        description.push_str(returns);
    }
    let trimmed = description.trim();
    if trimmed.len() != description.len() {
        description = trimmed.to_owned();
    }
    Ok(ParsedDocstring {
        description,
        params: p.params,
        returns: p.returns,
    })
}

// ---------------------------------------------------------------------------------------------
// Preparation: newlines, tabs, the `---` cut, cleandoc.

/// CR/CRLF → LF and tab expansion (8-column stops, like `str.expandtabs()`).
fn normalize(doc: &str) -> Cow<'_, str> {
    if !doc.contains('\r') && !doc.contains('\t') {
        return Cow::Borrowed(doc);
    }
    let mut out = String::with_capacity(doc.len() + 16);
    let mut col = 0usize;
    let mut chars = doc.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' | '\n' => {
                if c == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push('\n');
                col = 0;
            }
            '\t' => {
                let width = 8 - col % 8;
                out.extend(std::iter::repeat_n(' ', width));
                col += width;
            }
            _ => {
                out.push(c);
                col += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// True when `doc` has a `---` line with text below it (what the model does not see).
pub fn has_cut_text(doc: &str) -> bool {
    let text = normalize(doc);
    let lines: Vec<&str> = text.split('\n').collect();
    cut_index(&lines).is_some_and(|cut| lines[cut + 1..].iter().any(|l| !l.trim().is_empty()))
}

/// Index of the first line that is exactly `---`, unless it underlines a NumPy section name.
fn cut_index(lines: &[&str]) -> Option<usize> {
    (0..lines.len()).find(|&i| {
        lines[i].trim_start().starts_with("---")
            && lines[i].trim() == "---"
            && (i == 0 || section_kind(lines[i - 1].trim()).is_none())
    })
}

/// `inspect.cleandoc` on the lines in place (leading/trailing blank lines are removed by the
/// caller); every line also loses its trailing whitespace, so blank lines are empty.
fn cleandoc(lines: &mut [&str]) {
    let mut margin = usize::MAX;
    for (i, line) in lines.iter_mut().enumerate() {
        *line = line.trim_end();
        if i > 0 && !line.is_empty() {
            margin = margin.min(indent(line));
        }
    }
    if let Some(first) = lines.first_mut() {
        *first = first.trim_start();
    }
    for line in lines.iter_mut().skip(1) {
        *line = &line[indent(line).min(margin)..];
    }
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

// ---------------------------------------------------------------------------------------------
// Section recognition.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Params,
    Returns,
    Other,
}

#[derive(Debug, Clone, Copy)]
enum Start {
    /// `Args:` alone on a line.
    Google(Kind),
    /// `Parameters` followed by a line of dashes.
    Numpy(Kind),
    /// `:param x: ...` and friends.
    Field,
}

/// Section names shared by the Google (`Name:`) and NumPy (`Name` + dashes) styles.
const SECTIONS: &[(&str, Kind)] = &[
    ("args", Kind::Params),
    ("arguments", Kind::Params),
    ("parameters", Kind::Params),
    ("params", Kind::Params),
    ("keyword args", Kind::Params),
    ("keyword arguments", Kind::Params),
    ("other parameters", Kind::Params),
    ("returns", Kind::Returns),
    ("return", Kind::Returns),
    ("yields", Kind::Returns),
    ("yield", Kind::Returns),
    ("raises", Kind::Other),
    ("raise", Kind::Other),
    ("warns", Kind::Other),
    ("warn", Kind::Other),
    ("receives", Kind::Other),
    ("receive", Kind::Other),
    ("examples", Kind::Other),
    ("example", Kind::Other),
    ("notes", Kind::Other),
    ("note", Kind::Other),
    ("see also", Kind::Other),
    ("warnings", Kind::Other),
    ("warning", Kind::Other),
    ("attributes", Kind::Other),
    ("methods", Kind::Other),
    ("references", Kind::Other),
    ("todo", Kind::Other),
    ("attention", Kind::Other),
    ("caution", Kind::Other),
    ("danger", Kind::Other),
    ("error", Kind::Other),
    ("hint", Kind::Other),
    ("important", Kind::Other),
    ("tip", Kind::Other),
];

fn section_kind(name: &str) -> Option<Kind> {
    // Every name is 3..=17 bytes long: skip the table for ordinary prose lines.
    if !(3..=17).contains(&name.len()) {
        return None;
    }
    SECTIONS
        .iter()
        .find(|(s, _)| s.eq_ignore_ascii_case(name))
        .map(|&(_, k)| k)
}

fn section_start(lines: &[&str], i: usize) -> Option<Start> {
    let t = lines[i].trim_start();
    if let Some(name) = t.strip_suffix(':') {
        if let Some(kind) = section_kind(name) {
            return Some(Start::Google(kind));
        }
    }
    if t.starts_with(':') {
        return sphinx_field(t).map(|_| Start::Field);
    }
    if let Some(next) = lines.get(i + 1) {
        let u = next.trim_start_matches(' ');
        if u.starts_with("---") && u.bytes().all(|b| b == b'-') {
            return section_kind(t).map(Start::Numpy);
        }
    }
    None
}

/// `:field args: text` → (kind, args, text) for the known Sphinx fields.
fn sphinx_field(t: &str) -> Option<(Kind, &str, &str)> {
    let rest = t.strip_prefix(':')?;
    let close = rest.find(':')?;
    let field = &rest[..close];
    let kw_end = field.find(char::is_whitespace).unwrap_or(field.len());
    let kind = match &field[..kw_end] {
        "param" | "parameter" | "arg" | "argument" | "key" | "keyword" | "kwarg" | "kwparam" => Kind::Params,
        "returns" | "return" | "yields" | "yield" => Kind::Returns,
        "type" | "rtype" | "ytype" | "raises" | "raise" | "except" | "exception" | "var" | "ivar" | "cvar"
        | "vartype" | "meta" => Kind::Other,
        _ => return None,
    };
    Some((kind, &field[kw_end..], rest[close + 1..].trim()))
}

// ---------------------------------------------------------------------------------------------
// Section parsing.

struct Parser<'a> {
    lines: &'a [&'a str],
    params: Vec<(String, String)>,
    returns: Option<String>,
    /// First parameter/returns text (on an entry line) that starts with a marker:
    /// (line index, marker, text).
    head_hit: Option<(usize, &'static str, String)>,
}

impl<'a> Parser<'a> {
    /// Parse the section starting at line `i`; returns the index of the first line after it.
    fn section(&mut self, i: usize, start: Start) -> usize {
        let lines = self.lines;
        let n = lines.len();
        match start {
            Start::Google(kind) => {
                let h = indent(lines[i]);
                let body_start = i + 1;
                let end = match (body_start..n).find(|&k| !lines[k].is_empty()) {
                    None => n,
                    Some(j) if indent(lines[j]) > h => (j..n)
                        .find(|&k| !lines[k].is_empty() && indent(lines[k]) <= h)
                        .unwrap_or(n),
                    Some(j) if section_start(lines, j).is_some() => j,
                    // Body not indented below its header: it runs to a blank line or a section.
                    Some(j) => (j..n)
                        .find(|&k| lines[k].is_empty() || section_start(lines, k).is_some())
                        .unwrap_or(n),
                };
                match kind {
                    Kind::Params => self.entries(body_start, end, google_entry),
                    Kind::Returns => self.set_returns(&lines[body_start..end], ""),
                    Kind::Other => {}
                }
                end
            }
            Start::Numpy(kind) => {
                let body_start = i + 2;
                let end = (body_start..n)
                    .find(|&k| section_start(lines, k).is_some())
                    .unwrap_or(n);
                match kind {
                    Kind::Params => self.entries(body_start, end, numpy_entry),
                    Kind::Returns => self.set_numpy_returns(&lines[body_start..end]),
                    Kind::Other => {}
                }
                end
            }
            Start::Field => {
                let fi = indent(lines[i]);
                let end = (i + 1..n)
                    .find(|&k| !lines[k].is_empty() && indent(lines[k]) <= fi)
                    .unwrap_or(n);
                let Some((kind, args, text)) = sphinx_field(lines[i].trim_start()) else {
                    return end;
                };
                let cont = &lines[i + 1..end];
                match kind {
                    Kind::Params => {
                        let name = args.split_whitespace().next_back().map_or("", strip_stars);
                        if is_identifier(name) {
                            self.check_head(i, text);
                            let mut desc = text.to_owned();
                            for line in cont.iter().filter(|l| !l.is_empty()) {
                                join_word(&mut desc, line.trim_start());
                            }
                            self.add_param(name, desc);
                        }
                    }
                    Kind::Returns => {
                        self.check_head(i, text);
                        self.set_returns(cont, text);
                    }
                    Kind::Other => {}
                }
                end
            }
        }
    }

    /// Parameter entries in `lines[start..end]`. A line at or above the first entry's indent that
    /// `entry` accepts starts an entry; every other line continues the current one (joined with a
    /// single space, blank lines skipped).
    fn entries(&mut self, start: usize, end: usize, entry: fn(&str) -> Option<(&str, &str)>) {
        let lines = self.lines;
        let Some(base) = lines[start..end].iter().find(|l| !l.is_empty()).map(|l| indent(l)) else {
            return;
        };
        let mut current: Option<(&str, String)> = None;
        for (k, line) in lines.iter().enumerate().take(end).skip(start) {
            if line.is_empty() {
                continue;
            }
            let t = line.trim_start();
            if indent(line) <= base {
                if let Some((names, text)) = entry(t) {
                    if let Some((names, desc)) = current.take() {
                        self.add_params(names, desc);
                    }
                    self.check_head(k, text);
                    current = Some((names, text.to_owned()));
                    continue;
                }
            }
            if let Some((_, desc)) = current.as_mut() {
                join_word(desc, t);
            }
        }
        if let Some((names, desc)) = current {
            self.add_params(names, desc);
        }
    }

    /// `names` is a comma-separated list of already validated names (stars allowed).
    fn add_params(&mut self, names: &str, desc: String) {
        let mut names = names.split(',').map(|n| strip_stars(n.trim())).peekable();
        while let Some(name) = names.next() {
            if names.peek().is_some() {
                self.add_param(name, desc.clone());
            } else {
                self.add_param(name, desc);
                break;
            }
        }
    }

    fn add_param(&mut self, name: &str, desc: String) {
        if !self.params.iter().any(|(n, _)| n == name) {
            self.params.push((name.to_owned(), desc));
        }
    }

    /// `inline` (the text on a `:returns:` line) followed by `block` dedented; the first
    /// non-empty returns section wins.
    fn set_returns(&mut self, block: &[&str], inline: &str) {
        if self.returns.is_some() {
            return;
        }
        let mut text = inline.to_owned();
        if block.iter().any(|l| !l.is_empty()) {
            if !text.is_empty() {
                text.push('\n');
            }
            push_lines(&mut text, block, true);
        }
        if !text.is_empty() {
            self.returns = Some(text);
        }
    }

    /// A NumPy `Returns` section: entries of a type line (`dict`, or `name : type`) with the
    /// description indented below it read as the description alone (`name: description` when
    /// the entry names the value), the same text a Google or Sphinx docstring gives. A section
    /// without indented descriptions is plain text.
    fn set_numpy_returns(&mut self, block: &[&str]) {
        let Some(base) = block.iter().filter(|l| !l.is_empty()).map(|l| indent(l)).min() else {
            return;
        };
        if !block.iter().any(|l| !l.is_empty() && indent(l) > base) {
            return self.set_returns(block, "");
        }
        let mut entries: Vec<String> = Vec::new();
        let mut k = 0;
        while k < block.len() {
            let line = block[k];
            if line.is_empty() {
                k += 1;
                continue;
            }
            let head = line.trim();
            let body_end = (k + 1..block.len())
                .find(|&j| !block[j].is_empty() && indent(block[j]) <= base)
                .unwrap_or(block.len());
            let mut text = String::new();
            push_lines(&mut text, &block[k + 1..body_end], true);
            let entry = match head.split_once(" :").or_else(|| head.split_once(':')) {
                // `name : type` names the value.
                Some((name, _)) if is_identifier(name.trim()) && !text.is_empty() => format!("{}: {text}", name.trim()),
                // A type line alone, or a plain sentence with nothing below it.
                _ if !text.is_empty() => text,
                _ => head.to_owned(),
            };
            entries.push(entry);
            k = body_end;
        }
        let joined = entries.join("\n");
        if self.returns.is_none() && !joined.is_empty() {
            self.returns = Some(joined);
        }
    }

    fn check_head(&mut self, line: usize, text: &str) {
        if self.head_hit.is_none() {
            if let Some(marker) = marker_word(text) {
                self.head_hit = Some((line, marker, text.to_owned()));
            }
        }
    }
}

/// `name: text`, `name (type): text`, `name (type, optional): text`, `*args: text`.
fn google_entry(t: &str) -> Option<(&str, &str)> {
    let stars = t.len() - t.trim_start_matches('*').len();
    if stars > 2 {
        return None;
    }
    let len = identifier_len(&t[stars..]);
    if len == 0 {
        return None;
    }
    let names = &t[..stars + len];
    let mut rest = t[stars + len..].trim_start();
    if let Some(inner) = rest.strip_prefix('(') {
        let mut depth = 1usize;
        let close = inner.char_indices().find_map(|(i, c)| {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            }
            None
        })?;
        rest = inner[close + 1..].trim_start();
    }
    Some((names, rest.strip_prefix(':')?.trim()))
}

/// `name`, `name : type`, `name : type, optional`, `x, y : int`; the text is on later lines.
fn numpy_entry(t: &str) -> Option<(&str, &str)> {
    let names = t.find(':').map_or(t, |c| t[..c].trim_end());
    let valid = names.split(',').all(|n| {
        let n = n.trim();
        n.len() - n.trim_start_matches('*').len() <= 2 && is_identifier(strip_stars(n))
    });
    valid.then_some((names, ""))
}

fn strip_stars(name: &str) -> &str {
    name.trim_start_matches('*')
}

/// Length in bytes of the Python identifier at the start of `s` (0 when there is none).
fn identifier_len(s: &str) -> usize {
    let mut chars = s.char_indices();
    match chars.next() {
        Some((_, c)) if c == '_' || c.is_alphabetic() => {}
        _ => return 0,
    }
    chars
        .find(|&(_, c)| !(c == '_' || c.is_alphanumeric()))
        .map_or(s.len(), |(i, _)| i)
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty() && identifier_len(s) == s.len()
}

fn join_word(desc: &mut String, text: &str) {
    if !desc.is_empty() {
        desc.push(' ');
    }
    desc.push_str(text);
}

/// Append `lines` (leading/trailing blank lines dropped, runs of blank lines collapsed to one,
/// optionally dedented by their common indentation) to `out`.
fn push_lines(out: &mut String, lines: &[&str], dedent: bool) {
    let margin = if dedent {
        lines
            .iter()
            .filter(|l| !l.is_empty())
            .map(|l| indent(l))
            .min()
            .unwrap_or(0)
    } else {
        0
    };
    let mut started = false;
    let mut blank = false;
    for line in lines {
        if line.is_empty() {
            blank = true;
            continue;
        }
        if started {
            out.push_str(if blank { "\n\n" } else { "\n" });
        }
        out.push_str(&line[margin..]);
        started = true;
        blank = false;
    }
}

// ---------------------------------------------------------------------------------------------
// Markers.

const MARKERS: [&str; 4] = ["TODO", "FIXME", "XXX", "HACK"];

/// The marker `line` starts with (after indentation and an optional bullet), if any.
fn marker_word(line: &str) -> Option<&'static str> {
    let mut t = line.trim_start();
    if let Some(rest) = t.strip_prefix(['-', '*', '+', '•']) {
        t = rest.trim_start();
    }
    MARKERS.into_iter().find(|m| {
        t.strip_prefix(m).is_some_and(|rest| match rest.chars().next() {
            None | Some(':' | '(' | '-') => true,
            Some(c) => c.is_whitespace(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(doc: &str) -> ParsedDocstring {
        parse(doc).unwrap_or_else(|e| panic!("unexpected error: {e}"))
    }

    fn parsed(description: &str, params: &[(&str, &str)], returns: Option<&str>) -> ParsedDocstring {
        ParsedDocstring {
            description: description.to_owned(),
            params: params.iter().map(|&(n, d)| (n.to_owned(), d.to_owned())).collect(),
            returns: returns.map(str::to_owned),
        }
    }

    fn marker_err(marker: &str, line: &str) -> Result<ParsedDocstring, DocstringError> {
        Err(DocstringError::Marker {
            marker: marker.to_owned(),
            line: line.to_owned(),
        })
    }

    #[test]
    fn seed_example() {
        let doc = "Find product SKUs whose name matches a shopper's words.\n\n    Use this first when you only have a product name and need a SKU.\n\n    Args:\n        query: Words from the product name, e.g. \"rain shell\".\n        limit: Maximum number of matches to return. Defaults to 3.\n\n    Returns:\n        A list of {sku, name} objects, most relevant first. Empty if nothing matched.\n    ";
        assert_eq!(
            ok(doc),
            parsed(
                "Find product SKUs whose name matches a shopper's words.\n\nUse this first when you only have a product name and need a SKU.\n\nReturns: A list of {sku, name} objects, most relevant first. Empty if nothing matched.",
                &[
                    ("query", "Words from the product name, e.g. \"rain shell\"."),
                    ("limit", "Maximum number of matches to return. Defaults to 3."),
                ],
                Some("A list of {sku, name} objects, most relevant first. Empty if nothing matched."),
            )
        );
    }

    #[test]
    fn google_types_optional_and_continuations() {
        let doc = "Search the catalogue by free text.

        Args:
            query (str): Words to look for.
            limit (int, optional): How many results
                to return at most.

                Defaults to 10.
            sort (Optional[Tuple[str, int]], optional): Sort key
                and direction.
            *args: Extra positional words.
            **kwargs (dict(str, str)): Extra filters.
            flag (bool):
                Text only on the next line.
            query: Documented twice; the first text wins.

        Raises:
            ValueError: If the query is empty.
        ";
        assert_eq!(
            ok(doc),
            parsed(
                "Search the catalogue by free text.",
                &[
                    ("query", "Words to look for."),
                    ("limit", "How many results to return at most. Defaults to 10."),
                    ("sort", "Sort key and direction."),
                    ("args", "Extra positional words."),
                    ("kwargs", "Extra filters."),
                    ("flag", "Text only on the next line."),
                ],
                None,
            )
        );
    }

    #[test]
    fn multi_paragraph_summary_and_multiline_returns() {
        let doc = "Summarise an order for the shopper.
        It reads the order and its lines.


        Only orders the shopper owns are visible.
            Indented lines inside a paragraph stay as written.

        Arguments:
            order_id: The order number, e.g. \"A-1001\".
                Must exist.

        Returns:
            A dict with the order's status,
            its total and its lines.

            Never None.

        Examples:
            >>> summarise(\"A-1001\")
        ";
        assert_eq!(
            ok(doc),
            parsed(
                "Summarise an order for the shopper.\nIt reads the order and its lines.\n\nOnly orders the shopper owns are visible.\n    Indented lines inside a paragraph stay as written.\n\nReturns: A dict with the order's status,\nits total and its lines.\n\nNever None.",
                &[("order_id", "The order number, e.g. \"A-1001\". Must exist.")],
                Some("A dict with the order's status,\nits total and its lines.\n\nNever None."),
            )
        );
    }

    #[test]
    fn keyword_args_and_other_sections() {
        let doc = "Send a message to a customer by email.

        Parameters:
            to: The address.

        Keyword Args:
            subject (str): The subject line.
            cc (list[str], optional): Copies.

        Other Parameters:
            retries: How often to retry.

        Note:
            The note: is not a parameter.

        Yields:
            Delivery receipts.
        ";
        assert_eq!(
            ok(doc),
            parsed(
                "Send a message to a customer by email.\n\nReturns: Delivery receipts.",
                &[
                    ("to", "The address."),
                    ("subject", "The subject line."),
                    ("cc", "Copies."),
                    ("retries", "How often to retry."),
                ],
                Some("Delivery receipts."),
            )
        );
    }

    #[test]
    fn google_body_not_indented_below_header() {
        let doc = "Look up a shipment by its tracking code.\n\nArgs:\ncode: The tracking code.\n    Case-insensitive.\nzone (str): The zone.\n\nStray text after the section is ignored.\n";
        assert_eq!(
            ok(doc),
            parsed(
                "Look up a shipment by its tracking code.",
                &[("code", "The tracking code. Case-insensitive."), ("zone", "The zone.")],
                None,
            )
        );
    }

    #[test]
    fn numpy_style() {
        let doc = "Compute the distance between two points.

        Parameters
        ----------
        x, y : int
            Coordinates of the first point,
            in metres.
        scale : float, optional
            Scale factor.

            Defaults to 1.
        *points
            More points.
        unit

        Returns
        -------
        float
            The distance in metres.

        Notes
        -----
        The formula is Euclidean.
        ";
        assert_eq!(
            ok(doc),
            parsed(
                "Compute the distance between two points.\n\nReturns: The distance in metres.",
                &[
                    ("x", "Coordinates of the first point, in metres."),
                    ("y", "Coordinates of the first point, in metres."),
                    ("scale", "Scale factor. Defaults to 1."),
                    ("points", "More points."),
                    ("unit", ""),
                ],
                Some("The distance in metres."),
            )
        );
    }

    #[test]
    fn text_below_the_cut_is_seen() {
        assert!(has_cut_text("\n---\nFor humans."));
        assert!(!has_cut_text("Summary.\n---\n   \n"));
        assert!(!has_cut_text("Summary.\n\nReturns\n---\nA number."));
    }

    #[test]
    fn numpy_three_dash_underline_is_not_the_cut() {
        let doc = "Count the open tickets of a team.\n\nParameters\n---\nteam : str\n    The team's slug.\n\nReturns\n---\nThe number of open tickets.\n";
        assert_eq!(
            ok(doc),
            parsed(
                "Count the open tickets of a team.\n\nReturns: The number of open tickets.",
                &[("team", "The team's slug.")],
                Some("The number of open tickets."),
            )
        );
    }

    #[test]
    fn sphinx_style() {
        let doc = "Add two numbers and report the sum.
        :param int x: The first
            number.
        :type x: int
        :param y: The second number.
        :param **extra: Ignored extras.
        :raises ValueError: When the numbers overflow.
        :returns: The sum
            of both numbers.
        :rtype: int
        ";
        assert_eq!(
            ok(doc),
            parsed(
                "Add two numbers and report the sum.\n\nReturns: The sum\nof both numbers.",
                &[
                    ("x", "The first number."),
                    ("y", "The second number."),
                    ("extra", "Ignored extras."),
                ],
                Some("The sum\nof both numbers."),
            )
        );
    }

    #[test]
    fn crlf_and_cr_input() {
        let doc = "Cancel an order that has not shipped.\r\n\r\n    Refunds go to the original card.\r    Args:\r\n        order_id: The order\r\n            to cancel.\r\n    ";
        assert_eq!(
            ok(doc),
            parsed(
                "Cancel an order that has not shipped.\n\nRefunds go to the original card.",
                &[("order_id", "The order to cancel.")],
                None,
            )
        );
    }

    #[test]
    fn tabs_expand_to_eight_columns() {
        let doc = "Reserve stock for a cart.\n\n\tHolds items for 15 minutes.\n\n\tArgs:\n\t\tsku: The item.\n\t\t    Exact SKU.\n\tReturns:\n\t\tThe reservation id.\n";
        assert_eq!(
            ok(doc),
            parsed(
                "Reserve stock for a cart.\n\nHolds items for 15 minutes.\n\nReturns: The reservation id.",
                &[("sku", "The item. Exact SKU.")],
                Some("The reservation id."),
            )
        );
    }

    #[test]
    fn cut_line_drops_everything_below() {
        let doc = "Refund a payment to the customer's card.

        Args:
            payment_id: The payment.
            ---
            TODO: handle partial refunds
            amount: Not seen by the model.

        Returns:
            Not seen either.
        ";
        assert_eq!(
            ok(doc),
            parsed(
                "Refund a payment to the customer's card.",
                &[("payment_id", "The payment.")],
                None
            )
        );
        assert_eq!(
            ok("Ping the service.\n  ---  \nFIXME: HACK XXX"),
            parsed("Ping the service.", &[], None)
        );
        assert_eq!(ok("---\nTODO: write this"), parsed("", &[], None));
    }

    #[test]
    fn markers_are_refused() {
        assert_eq!(
            parse("List open invoices.\n\n    TODO: handle pagination\n    "),
            marker_err("TODO", "TODO: handle pagination")
        );
        assert_eq!(
            parse("List open invoices.\n\n    Details:\n      - FIXME the date filter\n"),
            marker_err("FIXME", "- FIXME the date filter")
        );
        assert_eq!(parse("XXX"), marker_err("XXX", "XXX"));
        assert_eq!(
            parse("Do it.\n  • HACK(bob) remove"),
            marker_err("HACK", "• HACK(bob) remove")
        );
        assert_eq!(parse("Do it.\n* TODO-later"), marker_err("TODO", "* TODO-later"));
        // Inside a parameter description: on a continuation line, or as the entry's text.
        assert_eq!(
            parse("List open invoices.\n\n    Args:\n        status: The status.\n            XXX: not validated\n"),
            marker_err("XXX", "XXX: not validated")
        );
        assert_eq!(
            parse("List open invoices.\n\n    Args:\n        status (str): FIXME describe\n        page: HACK\n"),
            marker_err("FIXME", "FIXME describe")
        );
        assert_eq!(
            parse("List open invoices.\n:param status: TODO\n"),
            marker_err("TODO", "TODO")
        );
        assert_eq!(
            parse("List open invoices.\n:returns: HACK: always empty\n"),
            marker_err("HACK", "HACK: always empty")
        );
        // The first offending line in document order is reported.
        assert_eq!(
            parse("Sum.\n\nArgs:\n    a: TODO one\n\nFIXME two\n"),
            marker_err("TODO", "TODO one")
        );
        assert_eq!(
            parse("Sum.\n\nFIXME two\nArgs:\n    a: TODO one\n"),
            marker_err("FIXME", "FIXME two")
        );
        let err = parse("Fetch a page.\n\nTODO: handle pagination").unwrap_err();
        assert_eq!(
            err.to_string(),
            "docstring line \"TODO: handle pagination\" starts with TODO, which the model would read \
             as part of the tool description; delete it or move notes for humans below a line \
             containing only '---'"
        );
    }

    #[test]
    fn marker_lookalikes_are_fine() {
        let doc = "TODOS are tracked per user; Hackathon entries too.\n\nHackathon results, XXXL sizes, FIXMEs and todo: lists.\n\nArgs:\n    todo: A TODO item.\n    hack: HACKS.\n";
        assert_eq!(
            ok(doc),
            parsed(
                "TODOS are tracked per user; Hackathon entries too.\n\nHackathon results, XXXL sizes, FIXMEs and todo: lists.",
                &[("todo", "A TODO item."), ("hack", "HACKS.")],
                None,
            )
        );
    }

    #[test]
    fn empty_and_blank_docstrings() {
        assert_eq!(ok(""), parsed("", &[], None));
        assert_eq!(ok("   \n\t\n  "), parsed("", &[], None));
    }

    #[test]
    fn only_sections() {
        assert_eq!(ok("Args:\n    x: The x.\n"), parsed("", &[("x", "The x.")], None));
        assert_eq!(
            ok("\n    Args:\n        x: The x.\n    Returns:\n        The y.\n    "),
            parsed("Returns: The y.", &[("x", "The x.")], Some("The y."))
        );
        assert_eq!(
            ok("Summary only.\n\nReturns:\n\nRaises:\n    E: e"),
            parsed("Summary only.", &[], None)
        );
    }

    #[test]
    fn first_line_on_its_own_line() {
        let doc = "\n    Archive a project.\n\n    Archived projects are read-only.\n    ";
        assert_eq!(
            ok(doc),
            parsed("Archive a project.\n\nArchived projects are read-only.", &[], None)
        );
    }
}
