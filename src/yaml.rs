//! A small YAML writer for JSON values: block style, and every string that could be read
//! back as anything else (a number, a boolean, a null, or with special characters) written
//! as a JSON string, which YAML reads identically. Written here rather than by serde_yaml_ng
//! (which previewd uses to read YAML): that follows YAML 1.2 and writes `on`/`yes`/`off`
//! bare, which Kubernetes' YAML 1.1 reader turns into booleans.

use serde_json::Value;

pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => write_list(&mut out, items, 0),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

fn write_map(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    for (key, value) in map {
        out.push_str(&" ".repeat(indent));
        out.push_str(&string_text(key));
        out.push(':');
        write_child(out, value, indent);
    }
}

fn write_list(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        match item {
            // `- key: value` with the rest of the map aligned under the first key.
            Value::Object(map) if !map.is_empty() => {
                let mut nested = String::new();
                write_map(&mut nested, map, indent + 2);
                out.push(' ');
                out.push_str(&nested[indent + 2..]);
            }
            other => write_child(out, other, indent),
        }
    }
}

fn write_child(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_map(out, map, indent + 2);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_list(out, items, indent + 2);
        }
        scalar => {
            out.push(' ');
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => string_text(s),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        other => other.to_string(),
    }
}

fn string_text(s: &str) -> String {
    let reserved = [
        "y", "yes", "n", "no", "true", "false", "on", "off", "null", "~",
    ];
    let plain = s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-' | '_'))
        && !reserved.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        return s.to_owned();
    }
    // JSON escapes the C0 controls; YAML also refuses DEL, the C1 controls and U+FFFE/FFFF,
    // and reads NEL and U+2028/2029 as line breaks: JSON leaves all of them as they are.
    let mut quoted = String::with_capacity(s.len() + 2);
    for c in Value::String(s.to_owned()).to_string().chars() {
        if matches!(
            c,
            '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{fffe}' | '\u{ffff}'
        ) {
            quoted.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            quoted.push(c);
        }
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_nested_maps_lists_and_scalars() {
        let value = json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "metadata": {"name": "app", "labels": {"previewd.dev/pr": "7"}, "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
            "spec": {"list": [{"a": 1, "b": [true, null]}, "x"], "empty": {}, "none": []}
        });
        let expected = "\
apiVersion: argoproj.io/v1alpha1
metadata:
  name: app
  labels:
    previewd.dev/pr: \"7\"
  finalizers:
    - resources-finalizer.argocd.argoproj.io
spec:
  list:
    - a: 1
      b:
        - true
        - null
    - x
  empty: {}
  none: []
";
        assert_eq!(to_string(&value), expected);
    }

    #[test]
    fn characters_yaml_cannot_hold_are_escaped_and_read_back() {
        let title = "bad \u{7f}\u{81}\u{85}\u{9f}\u{2028}\u{fffe} title\u{1}";
        let text = to_string(&json!({ "title": title }));
        assert!(
            !text.contains('\u{7f}') && !text.contains('\u{81}'),
            "{text:?}"
        );
        let back: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back["title"], title);
    }

    #[test]
    fn strings_that_would_change_meaning_are_quoted() {
        for s in [
            "on",
            "Off",
            "yes",
            "null",
            "~",
            "123",
            "1e3",
            "a: b",
            "- x",
            "#c",
            "",
            " lead",
            "é",
            "multi\nline",
            "<script>",
        ] {
            let text = to_string(&json!({ "k": s }));
            assert!(text.starts_with("k: \""), "{s:?} was written as {text:?}");
        }
    }

    /// Why previewd writes YAML itself: serde_yaml_ng follows YAML 1.2, where `on`, `yes` and
    /// `off` are plain strings, and writes them bare; Kubernetes reads YAML 1.1 (go-yaml v2
    /// behind sigs.k8s.io/yaml), where they are booleans.
    #[test]
    fn serde_yaml_writes_yaml_1_1_booleans_bare_and_this_writer_does_not() {
        for s in ["on", "yes", "off"] {
            let theirs = serde_yaml_ng::to_string(&json!({ "k": s })).unwrap();
            assert_eq!(
                theirs,
                format!("k: {s}\n"),
                "serde_yaml_ng quotes {s:?} now"
            );
            assert_eq!(to_string(&json!({ "k": s })), format!("k: \"{s}\"\n"));
        }
    }
}
