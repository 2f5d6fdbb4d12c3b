//! How the body's keyword arguments are made from a checked call, decided from what checking
//! found (no Python here: the binding holds the objects and performs the copy it is told).

/// What checking a call's arguments found besides their validated value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The validated value is not the caller's as sent: injected keys were dropped, integral
    /// floats became integers, or the caller's mapping held containers other than `dict`/`list`.
    pub rebuild: bool,
    /// The arguments hold integers beyond 64 bits (validated as floats of the same magnitude):
    /// the body's values come from the caller's own objects, never from the validated value.
    pub exact: bool,
    /// An integral float at or beyond 2^63 sits where the schema wants an integer: it becomes an
    /// exact integer in the body's arguments.
    pub conform: bool,
    /// The caller's mapping is a plain dict of at most 64 entries: bit `i` set where the entry
    /// at position `i` of its order holds a container (None: not known).
    pub containers_at: Option<u64>,
}

/// Where the body's arguments come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A copy of the caller's dict, the containers at these positions frozen (no other entry
    /// looked at again).
    CallersAt(u64),
    /// A copy of the caller's dict, every container in it frozen.
    Callers,
    /// The keyword arguments the binding builds with Python's help (exact big integers, floats
    /// made integers), then frozen.
    Python,
    /// The validated value, converted.
    Validated,
}

impl Found {
    /// What checking found, from what it did: injected keys `dropped`, integral floats
    /// `floats_fixed` to integers (and `beyond_64_bits` of them left floats), containers other
    /// than `dict`/`list` met (`other_containers`), integers beyond 64 bits (`big_ints`).
    pub fn of(
        dropped: bool,
        floats_fixed: bool,
        beyond_64_bits: bool,
        other_containers: bool,
        big_ints: bool,
        containers_at: Option<u64>,
    ) -> Found {
        Found {
            rebuild: dropped || floats_fixed || other_containers,
            exact: big_ints,
            conform: beyond_64_bits,
            containers_at,
        }
    }

    /// The body may get a copy of the caller's own dict.
    #[inline]
    pub fn same_as_caller(&self) -> bool {
        !self.rebuild && !self.exact && !self.conform
    }

    /// The body's arguments need Python's help (exact big integers, floats beyond 2^63 made ints).
    #[inline]
    pub fn needs_python(&self) -> bool {
        self.exact || self.conform
    }

    /// Where the body's arguments come from, for a caller who sent a dict (`callers_dict`) or
    /// not, and a body that gets them `sealed` (a frozen mapping at the top) or in a plain new
    /// dict.
    #[inline]
    pub fn source(&self, callers_dict: bool, sealed: bool) -> Source {
        match self.containers_at {
            Some(at) if callers_dict && self.same_as_caller() && !sealed => Source::CallersAt(at),
            _ if callers_dict && self.same_as_caller() => Source::Callers,
            _ if self.needs_python() => Source::Python,
            _ => Source::Validated,
        }
    }
}

/// How deep the host's copies of argument values (freezing them, copying a rendering) go: past
/// this many levels of nesting the copy refuses, as Python's default recursion limit would (and
/// a native stack is never exhausted).
pub const MAX_COPY_DEPTH: usize = 1000;

/// The refusal of a freeze past [`MAX_COPY_DEPTH`].
pub const FREEZE_TOO_DEEP: &str = "maximum recursion depth exceeded while freezing a value";
/// The refusal of a copy past [`MAX_COPY_DEPTH`].
pub const COPY_TOO_DEEP: &str = "maximum recursion depth exceeded while copying a value";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_stop_at_python_s_default_recursion_limit() {
        assert_eq!(MAX_COPY_DEPTH, 1000);
        assert_eq!(
            FREEZE_TOO_DEEP,
            "maximum recursion depth exceeded while freezing a value"
        );
        assert_eq!(COPY_TOO_DEEP, "maximum recursion depth exceeded while copying a value");
    }

    #[test]
    fn found_of_what_checking_did() {
        let plain = Found::of(false, false, false, false, false, Some(0b10));
        assert!(plain.same_as_caller() && !plain.needs_python());
        assert_eq!(plain.containers_at, Some(0b10));
        for f in [
            Found::of(true, false, false, false, false, None),
            Found::of(false, true, false, false, false, None),
            Found::of(false, false, false, true, false, None),
        ] {
            assert!(f.rebuild && !f.same_as_caller() && !f.needs_python());
        }
        let big = Found::of(false, false, false, false, true, None);
        assert!(big.exact && big.needs_python() && !big.same_as_caller());
        let beyond = Found::of(false, true, true, false, false, None);
        assert!(beyond.conform && beyond.needs_python());
    }

    #[test]
    fn where_the_body_arguments_come_from() {
        let plain = Found::of(false, false, false, false, false, Some(0b101));
        assert_eq!(plain.source(true, false), Source::CallersAt(0b101));
        assert_eq!(plain.source(true, true), Source::Callers);
        assert_eq!(plain.source(false, false), Source::Validated);
        let unknown = Found {
            containers_at: None,
            ..plain
        };
        assert_eq!(unknown.source(true, false), Source::Callers);
        let big = Found::of(false, false, false, false, true, Some(1));
        assert_eq!(big.source(true, false), Source::Python);
        assert_eq!(big.source(false, true), Source::Python);
        let dropped = Found::of(true, false, false, false, false, Some(1));
        assert_eq!(dropped.source(true, false), Source::Validated);
        assert_eq!(dropped.source(true, true), Source::Validated);
    }
}
