//! A result's stored text: the JSON text a shared idempotency store keeps of a successful
//! result, which another worker reads back. The binding encodes the value (Python's own JSON
//! encoder) and asks here what becomes of a value it cannot encode, and how a value JSON does
//! not know is turned into JSON data.

/// What the idempotency rule logs (at WARNING, with the result's type name) of a result that
/// cannot be stored as JSON in a shared store.
pub const UNSTORABLE_RESULT: &str = "a result of type %s cannot be stored as JSON; not shared for deduplication";

/// Whether a result whose text could not be made is left unshared (logged with
/// [`UNSTORABLE_RESULT`]; the call goes on) rather than failing with what making it raised: an
/// `Exception` (`exception`; the value is not JSON, a conversion of it raised, it holds a lone
/// surrogate) that does not propagate (`propagates`, asked only for an `Exception`); anything else
/// is raised.
#[inline]
pub fn unstorable(exception: bool, propagates: impl FnOnce() -> bool) -> bool {
    exception && !propagates()
}

/// The record a shared store keeps of a call that succeeded, its result's JSON text `text` as
/// its value (what [`reads_back`] checks).
pub fn done_record(text: &str) -> String {
    format!("{{\"s\":\"done\",\"value\":{text}}}")
}

/// Whether another worker reads the result whose JSON text is `text` back as the same value from
/// its [`done_record`]: the record is JSON the reader parses (no `NaN` or `Infinity`, which
/// Python's encoder writes; not nested deeper than the reader's limit) and every integer in it
/// is within 64 bits (a larger one would be read back as a float, another value). A result that
/// does not is not shared, as one that has no JSON text: a record the reader cannot parse counts
/// as no record, and the call would run again.
pub fn reads_back(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(&done_record(text)).is_ok() && integers_within_64_bits(text)
}

/// Whether every integer literal of the JSON text `text` (a number without a fraction or an
/// exponent, outside strings) is within `i64` or `u64`.
fn integers_within_64_bits(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    i += 1;
                }
                let number = &text[start..i];
                if !number.contains(['.', 'e', 'E']) && number.parse::<i64>().is_err() && number.parse::<u64>().is_err()
                {
                    return false;
                }
            }
            _ => i += 1,
        }
    }
    true
}

/// How a value JSON does not know (a dataclass, a pydantic model, a datetime) becomes JSON data,
/// the rungs of the ladder in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonDefault {
    /// pydantic's conversion of any value (`pydantic_core.to_jsonable_python`, what it does not
    /// know as its text), when pydantic is installed: every value goes there.
    Jsonable,
    /// A dataclass instance (not a dataclass itself, a class): its fields (`dataclasses.asdict`).
    Fields,
    /// A value with a callable `isoformat` (a date, a time, a datetime): what it answers.
    IsoFormat,
    /// Anything else: its text (`str`).
    Text,
}

/// The rung of [`JsonDefault`]'s ladder a value takes, each question asked only when the rungs
/// before did not take it: `jsonable` pydantic is installed; `dataclass` the value is a dataclass
/// or an instance of one, `is_class` it is a class; `isoformat` it has a callable `isoformat`.
/// What asking raises propagates.
pub fn json_default<E>(
    jsonable: bool,
    dataclass: impl FnOnce() -> Result<bool, E>,
    is_class: impl FnOnce() -> bool,
    isoformat: impl FnOnce() -> Result<bool, E>,
) -> Result<JsonDefault, E> {
    if jsonable {
        return Ok(JsonDefault::Jsonable);
    }
    if dataclass()? && !is_class() {
        return Ok(JsonDefault::Fields);
    }
    Ok(if isoformat()? {
        JsonDefault::IsoFormat
    } else {
        JsonDefault::Text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_exception_that_does_not_propagate_leaves_a_result_unshared() {
        assert!(unstorable(true, || false));
        assert!(!unstorable(true, || true));
        // Not an `Exception` (a `KeyboardInterrupt`): raised, and nobody asks whether it propagates.
        assert!(!unstorable(false, || panic!("asked")));
    }

    #[test]
    fn pydantic_takes_every_value_without_a_question() {
        let never = || -> Result<bool, ()> { panic!("asked") };
        assert_eq!(
            json_default(true, never, || panic!("asked"), never),
            Ok(JsonDefault::Jsonable)
        );
    }

    #[test]
    fn without_pydantic_a_dataclass_instance_gives_its_fields_then_isoformat_then_text() {
        let yes = || Ok::<_, ()>(true);
        let no = || Ok::<_, ()>(false);
        assert_eq!(
            json_default(false, yes, || false, || -> Result<bool, ()> { panic!("asked") }),
            Ok(JsonDefault::Fields)
        );
        // A dataclass itself (a class) is no instance: the next rungs.
        assert_eq!(json_default(false, yes, || true, yes), Ok(JsonDefault::IsoFormat));
        assert_eq!(json_default(false, yes, || true, no), Ok(JsonDefault::Text));
        assert_eq!(
            json_default(false, no, || panic!("asked"), yes),
            Ok(JsonDefault::IsoFormat)
        );
        assert_eq!(json_default(false, no, || panic!("asked"), no), Ok(JsonDefault::Text));
    }

    #[test]
    fn what_a_question_raises_propagates() {
        assert_eq!(
            json_default(false, || Err("is_dataclass"), || false, || Ok(true)),
            Err("is_dataclass")
        );
        assert_eq!(
            json_default(false, || Ok(false), || false, || Err("isoformat")),
            Err("isoformat")
        );
    }

    #[test]
    fn a_result_is_shared_only_when_another_worker_reads_it_back_as_the_same_value() {
        assert_eq!(done_record("[1]"), r#"{"s":"done","value":[1]}"#);
        for text in [
            "1",
            "9223372036854775807",
            "-9223372036854775808",
            "18446744073709551615",
            "[1.5,-0.0,1e300,5e-324,1E+300,12.5e-3]",
            r#"{"k\"[99999999999999999999]":"NaN 1e999 -99999999999999999999"}"#,
            r#""\\""#,
        ] {
            assert!(reads_back(text), "{text}");
        }
        for text in [
            "NaN",
            "[Infinity]",
            "-Infinity",
            "18446744073709551616",
            r#"{"id":-9223372036854775809}"#,
            r#"["\\",99999999999999999999]"#,
            "{",
        ] {
            assert!(!reads_back(text), "{text}");
        }
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        // The record holds the value one level down; the reader's limit is 128 levels.
        assert!(reads_back(&nested(126)));
        assert!(!reads_back(&nested(127)));
        assert!(!reads_back(&nested(100_000)));
    }
}
