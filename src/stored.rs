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
}
