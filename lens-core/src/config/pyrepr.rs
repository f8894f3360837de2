//! Values written the way the Python original writes them in its messages
//! (`repr` of a float or a list of strings), so that messages match it.
//! A leaf: the configuration errors and the strategy registries both use it.

/// A float as Python's `repr` writes it (`1.0`, `1.5`, `-0.1`, `nan`, `inf`).
pub(crate) fn py_float(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf".to_string() } else { "-inf".to_string() }
    } else if x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// A list as Python's `repr` of a list of strings writes it: `['a', 'b']`.
pub(crate) fn py_list<S: AsRef<str>>(items: &[S]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push('\'');
        out.push_str(item.as_ref());
        out.push('\'');
    }
    out.push(']');
    out
}

pub(crate) fn did_you_mean(suggestion: Option<&str>) -> String {
    suggestion.map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default()
}

/// Python's `float()` on a string: surrounding whitespace ignored, and
/// single underscores between digits (`1_000.5`), as PEP 515 allows;
/// otherwise Rust's reading of a float (which takes `inf` and `nan` as
/// Python does).
pub(crate) fn parse_py_float(value: &str) -> Option<f64> {
    parse_py_number(value.trim())
}

/// `value` read as a number of type `T` once its underscores are taken
/// out, each of which must stand between two digits (PEP 515, the rule of
/// Python's `int()` and `float()`).
pub(crate) fn parse_py_number<T: std::str::FromStr>(value: &str) -> Option<T> {
    if !value.contains('_') {
        return value.parse().ok();
    }
    let bytes = value.as_bytes();
    let between_digits =
        |at: usize| at > 0 && bytes[at - 1].is_ascii_digit() && bytes.get(at + 1).is_some_and(u8::is_ascii_digit);
    if !bytes.iter().enumerate().filter(|(_, b)| **b == b'_').all(|(at, _)| between_digits(at)) {
        return None;
    }
    value.replace('_', "").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::parse_py_float;

    #[test]
    fn floats_read_as_python_reads_them() {
        assert_eq!(parse_py_float(" 1_000.5 "), Some(1000.5));
        assert_eq!(parse_py_float("1_0"), Some(10.0));
        assert_eq!(parse_py_float("2"), Some(2.0));
        for bad in ["_1", "1_", "1__0", "1._5", "1_.5", "soon", ""] {
            assert_eq!(parse_py_float(bad), None, "{bad}");
        }
    }
}
