//! The model-facing failure ladder of a tool call (SPEC §7): every message names the problem
//! and prescribes the next action. The binding layer turns these into envelopes.

use crate::validate::Rejection;

/// The most invalid values spelled out in an `invalid_arguments` message.
pub const MAX_SPELLED_OUT: usize = 5;

/// The registered name closest to `name`, when one is close enough to be a likely typo:
/// a case-insensitive match, or an optimal-string-alignment distance of at most a third of the
/// name's length (at least 1). Ties go to the alphabetically first name.
///
/// Linear in the length of `name` whatever it is: a candidate whose length differs from the
/// name's by more than the budget cannot be within it and is skipped before any distance is
/// computed (so a megabyte-long name costs one pass, not one distance per tool).
pub fn closest<'a>(name: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = name.chars().count();
    let budget = (len / 3).max(1);
    let lower = name.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in names {
        if candidate.chars().count().abs_diff(len) > budget {
            continue;
        }
        let d = if candidate.to_lowercase() == lower {
            0
        } else {
            strsim::osa_distance(&lower, &candidate.to_lowercase())
        };
        if d <= budget && best.is_none_or(|(bd, bn)| d < bd || (d == bd && candidate < bn)) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, n)| n)
}

/// The most characters of a model-sent name echoed back in a message.
pub const MAX_ECHOED_NAME_CHARS: usize = 64;

/// `name` as quoted back to the model: at most [`MAX_ECHOED_NAME_CHARS`] characters, then
/// `...` and the full length.
pub fn echoed_name(name: &str) -> std::borrow::Cow<'_, str> {
    match name.char_indices().nth(MAX_ECHOED_NAME_CHARS) {
        None => name.into(),
        Some((cut, _)) => format!("{}... ({} characters)", &name[..cut], name.chars().count()).into(),
    }
}

/// `unknown_tool`: names the closest match and lists every available tool (sorted). The name
/// is echoed at most [`MAX_ECHOED_NAME_CHARS`] characters long.
pub fn unknown_tool_message(name: &str, available: &[&str], did_you_mean: Option<&str>) -> String {
    let name = echoed_name(name);
    let hint = did_you_mean.map(|n| format!(" Did you mean '{n}'?")).unwrap_or_default();
    if available.is_empty() {
        return format!("No tool named '{name}', and no tools are available. Answer without calling a tool.");
    }
    format!(
        "No tool named '{name}'.{hint} Available tools: {}. Call one of those instead.",
        available.join(", ")
    )
}

/// `invalid_arguments`: every problem (at most [`MAX_SPELLED_OUT`] values spelled out), the
/// accepted names, and what to do.
pub fn invalid_arguments_message(tool: &str, rejection: &Rejection, accepted: &[String]) -> String {
    let mut accepted_repr = String::new();
    crate::validate::push_capped_names(&mut accepted_repr, accepted);
    rejection_message(tool, rejection, &accepted_repr)
}

/// [`invalid_arguments_message`] with the accepted names already written as a Python list
/// (`ArgumentValidator::accepted_repr`), built in one buffer.
pub fn rejection_message(tool: &str, rejection: &Rejection, accepted_repr: &str) -> String {
    let mut out = String::with_capacity(160 + 2 * tool.len() + accepted_repr.len());
    out.push_str("tool '");
    out.push_str(tool);
    out.push_str("' call rejected: ");
    rejection.write_summary(&mut out, MAX_SPELLED_OUT);
    out.push_str(". Accepted arguments: ");
    out.push_str(accepted_repr);
    out.push_str(". Re-read the input schema and call '");
    out.push_str(tool);
    out.push_str("' again with corrected arguments.");
    out
}

/// `timeout`: our own deadline expired.
pub fn timeout_message(tool: &str, timeout_s: f64) -> String {
    format!(
        "{tool} did not finish within {}s. Do not retry immediately; tell the user the backend is slow.",
        format_seconds(timeout_s)
    )
}

/// `internal_error`: any exception that is not a `ToolError`.
pub fn internal_error_message(tool: &str, exc_type: &str, exc_text: &str) -> String {
    let text = exc_text.trim_end().trim_end_matches('.');
    let sep = if text.is_empty() { "" } else { ": " };
    format!(
        "{tool} failed: {exc_type}{sep}{text}. This is a bug in the tool, not in your \
         arguments; do not retry."
    )
}

/// `output_mismatch`: the tool returned a value its output schema forbids.
pub fn output_mismatch_message(tool: &str, expected: &str, problems: &str) -> String {
    let problems = problems.trim_end().trim_end_matches('.');
    let detail = if problems.is_empty() { String::new() } else { format!(" ({problems})") };
    format!(
        "{tool} returned a value that does not match its declared output schema '{expected}'{detail}. \
         This is a fault in the tool, not in your arguments: try different arguments once, or tell \
         the user the tool is returning malformed data."
    )
}

/// Seconds as Python's `{:g}` would print them for the usual values (`2`, `0.5`, `1.25`).
pub fn format_seconds(s: f64) -> String {
    let text = format!("{s}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::ArgumentProblems;

    #[test]
    fn long_names_are_cheap_and_echoed_short() {
        let huge = "x".repeat(1_000_000);
        let names: Vec<String> = (0..500).map(|i| format!("tool_{i}")).collect();
        let started = std::time::Instant::now();
        assert_eq!(closest(&huge, names.iter().map(String::as_str)), None);
        let msg = unknown_tool_message(&huge, &["a"], None);
        // generous bound on a hang: the quadratic version took seconds
        assert!(started.elapsed().as_secs_f64() < 1.0);
        assert_eq!(msg, format!("No tool named '{}... (1000000 characters)'. Available tools: a. Call one of those instead.", "x".repeat(64)));
        assert_eq!(echoed_name("short"), "short");
        assert_eq!(echoed_name(&"é".repeat(64)), "é".repeat(64));
    }

    #[test]
    fn closest_names() {
        let names = ["check_stock", "find_sku", "slow_report"];
        assert_eq!(closest("chekc_stock", names), Some("check_stock"));
        assert_eq!(closest("Find_SKU", names), Some("find_sku"));
        assert_eq!(closest("weather", names), None);
        assert_eq!(closest("", names), None);
    }

    #[test]
    fn messages() {
        assert_eq!(
            unknown_tool_message("chekc_stock", &["check_stock", "find_sku"], Some("check_stock")),
            "No tool named 'chekc_stock'. Did you mean 'check_stock'? Available tools: check_stock, find_sku. Call one of those instead."
        );
        assert_eq!(
            timeout_message("slow_report", 0.5),
            "slow_report did not finish within 0.5s. Do not retry immediately; tell the user the backend is slow."
        );
        assert_eq!(format_seconds(10.0), "10");
        let r = Rejection::Problems(ArgumentProblems { missing: vec!["sku".into()], ..Default::default() });
        assert_eq!(
            invalid_arguments_message("check_stock", &r, &["sku".into(), "warehouse".into()]),
            "tool 'check_stock' call rejected: missing required argument(s) ['sku']. Accepted arguments: \
             ['sku', 'warehouse']. Re-read the input schema and call 'check_stock' \
             again with corrected arguments."
        );
        assert_eq!(
            rejection_message("check_stock", &r, "['sku', 'warehouse']"),
            invalid_arguments_message("check_stock", &r, &["sku".into(), "warehouse".into()])
        );
        assert_eq!(
            rejection_message("t", &Rejection::NotAnObject("array"), "[]"),
            "tool 't' call rejected: the arguments must be a JSON object of named arguments, got an array. \
             Accepted arguments: []. Re-read the input schema and call 't' again with corrected arguments."
        );
        assert_eq!(
            internal_error_message("t", "KeyError", "'x'"),
            "t failed: KeyError: 'x'. This is a bug in the tool, not in your arguments; do not retry."
        );
        assert_eq!(
            internal_error_message("t", "ValueError", "boom."),
            "t failed: ValueError: boom. This is a bug in the tool, not in your arguments; do not retry."
        );
    }
}
