//! The `did_you_mean` of an `unknown_tool` envelope: the registered name closest to a
//! model-sent one.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cheap() {
        let huge = "x".repeat(1_000_000);
        let names: Vec<String> = (0..500).map(|i| format!("tool_{i}")).collect();
        let started = std::time::Instant::now();
        assert_eq!(closest(&huge, names.iter().map(String::as_str)), None);
        // generous bound on a hang: the quadratic version took seconds
        assert!(started.elapsed().as_secs_f64() < 1.0);
    }

    #[test]
    fn closest_names() {
        let names = ["check_stock", "find_sku", "slow_report"];
        assert_eq!(closest("chekc_stock", names), Some("check_stock"));
        assert_eq!(closest("Find_SKU", names), Some("find_sku"));
        assert_eq!(closest("weather", names), None);
        assert_eq!(closest("", names), None);
    }
}
