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
