//! Rendering tool results for the model (SPEC §8): a hard character limit with an actionable
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
    // The notice's length depends on how many characters it reports cut; settle it.
    let mut keep = max_chars.saturating_sub(notice(total).chars().count());
    loop {
        let n = notice(total - keep);
        let fits = max_chars.saturating_sub(n.chars().count());
        if fits >= keep {
            break;
        }
        keep = fits;
    }
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
