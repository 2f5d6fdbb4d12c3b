//! Rendering tool results for the model: a hard character limit with an actionable
//! truncation notice.

/// The default limit of a rendered result, in characters (Unicode scalar values).
pub const DEFAULT_MAX_CHARS: usize = 2000;

fn notice(cut: usize) -> String {
    format!("\n...[truncated {cut} chars]. Narrow your arguments (add filters or a smaller limit) and call again.")
}

/// Cut `text` to at most `max_chars` characters, the notice included, never inside a
/// character. Text within the limit is returned unchanged.
pub fn truncate(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    // The notice reports how many characters were cut, so its own length depends on that
    // number's digit count: take the longest kept prefix whose notice is consistent.
    let base = notice(0).chars().count() - 1; // the notice without its number
    let keep = (1..=20)
        .filter_map(|digits| {
            let keep = max_chars.checked_sub(base + digits)?;
            let cut = total.checked_sub(keep)?;
            (cut.to_string().len() == digits).then_some(keep)
        })
        .max()
        .unwrap_or(0);
    let byte_end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    let mut out = String::with_capacity(byte_end + 100);
    out.push_str(&text[..byte_end]);
    out.push_str(&notice(total - keep));
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
    fn a_limit_below_the_notice_keeps_nothing_of_the_text() {
        let out = truncate("abcdef", 3);
        assert_eq!(out, notice(6));
    }
}
