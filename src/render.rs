//! Rendering tool results for the model: a hard character limit with an actionable
//! truncation notice.

/// The default limit of a rendered result, in characters (Unicode scalar values).
pub const DEFAULT_MAX_CHARS: usize = 2000;

fn notice(cut: usize) -> String {
    format!("\n...[truncated {cut} chars]. Narrow your arguments (add filters or a smaller limit) and call again.")
}

fn message_cut(cut: usize) -> String {
    format!(" ...[{cut} chars of this message cut]... ")
}

/// How many of `total` characters fit in `max_chars` beside a notice of `base` characters plus
/// the digits of the number of characters cut (the notice's length depends on that number).
fn kept(total: usize, max_chars: usize, base: usize) -> usize {
    (1..=20)
        .filter_map(|digits| {
            let keep = max_chars.checked_sub(base + digits)?;
            let cut = total.checked_sub(keep)?;
            (cut.to_string().len() == digits).then_some(keep)
        })
        .max()
        .unwrap_or(0)
}

/// The byte offset of character `n` of `text` (its length when it has fewer).
fn byte_at(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

/// Cut `text` to at most `max_chars` characters, the notice included, never inside a
/// character. Text within the limit is returned unchanged.
pub fn truncate(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    let keep = kept(total, max_chars, notice(0).chars().count() - 1);
    let byte_end = byte_at(text, keep);
    let mut out = String::with_capacity(byte_end + 100);
    out.push_str(&text[..byte_end]);
    out.push_str(&notice(total - keep));
    out
}

/// An error message the model reads, cut to at most `max_chars` characters (the marker
/// included, never inside a character): its start and its end are kept, two thirds and one
/// third of what fits, around a marker saying how much was cut, because a tool's message
/// usually ends with what to do next while what it echoes (a huge argument) sits in the middle.
/// A message within the limit is returned unchanged.
pub fn cut_message(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    let keep = kept(total, max_chars, message_cut(0).chars().count() - 1);
    let tail = keep / 3;
    let head = keep - tail;
    let mut out = String::with_capacity(4 * keep + 64);
    out.push_str(&text[..byte_at(text, head)]);
    out.push_str(&message_cut(total - keep));
    out.push_str(&text[byte_at(text, total - tail)..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged() {
        assert_eq!(truncate("héllo", 5), "héllo");
    }

    #[test]
    fn long_text_is_cut_with_the_notice_inside_the_limit() {
        let text = "é".repeat(3000);
        let out = truncate(&text, 2000);
        let expected_notice =
            "\n...[truncated 1098 chars]. Narrow your arguments (add filters or a smaller limit) and call again.";
        assert_eq!(expected_notice.chars().count(), 98);
        assert_eq!(out, format!("{}{}", "é".repeat(1902), expected_notice));
        assert_eq!(out.chars().count(), 2000);
    }

    #[test]
    fn a_long_message_keeps_its_start_and_its_end() {
        let msg = format!("nothing matches '{}'; try another query", "x".repeat(1_000_000));
        let out = cut_message(&msg, 2000);
        let marker = " ...[998079 chars of this message cut]... ";
        assert_eq!(marker.chars().count(), 42);
        assert_eq!(
            out,
            format!(
                "nothing matches '{}{marker}{}'; try another query",
                "x".repeat(1306 - 17),
                "x".repeat(652 - 20)
            )
        );
        assert_eq!(out.chars().count(), 2000);
        assert_eq!(cut_message("short", 5), "short");
        // Multi-byte characters are never split; a limit below the marker keeps only the marker.
        let e = cut_message(&"é".repeat(100), 60);
        assert_eq!(
            e,
            format!(
                "{} ...[78 chars of this message cut]... {}",
                "é".repeat(15),
                "é".repeat(7)
            )
        );
        assert_eq!(e.chars().count(), 60);
        assert_eq!(cut_message("abcdef", 3), message_cut(6));
    }

    #[test]
    fn a_limit_below_the_notice_keeps_nothing_of_the_text() {
        let out = truncate("abcdef", 3);
        assert_eq!(out, notice(6));
    }
}
