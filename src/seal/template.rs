//! The part of the sealed-secrets controller's `spec.template.data` previewd writes: Go
//! `text/template` text whose only actions are `{{ .KEY }}` of a sealed value. The
//! controller executes each entry over the unsealed strings (`sealedsecret_expansion.go`
//! `Unseal`); previewd uses it for literal public values and for a value built around a
//! sealed one (a connection URL around its password), which then needs no RSA operation.

use std::collections::BTreeMap;

/// Whether `text` renders as itself: every action starts with the default left delimiter.
pub fn is_literal(text: &str) -> bool {
    !text.contains("{{")
}

/// `text` executed over `values` as the controller would, for the subset above; `None` for
/// any other action or a key not in `values` (Go would fail or print `<no value>`).
pub fn render(text: &str, values: &BTreeMap<String, Vec<u8>>) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.extend_from_slice(&rest.as_bytes()[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}")?;
        let key = after[..end].strip_prefix(" .")?.strip_suffix(' ')?;
        // A Go field name: `.0` or `.5` would be a number to Go's lexer, not a key.
        let field = key
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !field {
            return None;
        }
        out.extend_from_slice(values.get(key)?);
        rest = &after[end + 2..];
    }
    out.extend_from_slice(rest.as_bytes());
    Some(out)
}

/// `{{ .KEY }}`, for a template around the sealed value `key`.
pub fn action(key: &str) -> String {
    format!("{{{{ .{key} }}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> BTreeMap<String, Vec<u8>> {
        [("PGPASSWORD".to_string(), b"s3cret".to_vec())].into()
    }

    #[test]
    fn a_template_around_a_sealed_value_renders_it_in_place() {
        let url = format!("postgres://u:{}@db:5432/u", action("PGPASSWORD"));
        assert_eq!(
            render(&url, &values()).as_deref(),
            Some(&b"postgres://u:s3cret@db:5432/u"[..])
        );
        assert_eq!(
            render("a } b }} c", &values()).as_deref(),
            Some(&b"a } b }} c"[..])
        );
    }

    /// Anything Go would do otherwise (functions, pipelines, trimming, an unknown key,
    /// an unclosed action) is refused, not guessed at.
    #[test]
    fn any_other_action_is_refused() {
        for text in [
            "{{ .MISSING }}",
            "{{ .PGPASSWORD | b64enc }}",
            "{{- .PGPASSWORD }}",
            "{{.PGPASSWORD}}",
            "{{ index . \"PGPASSWORD\" }}",
            "{{ .PGPASSWORD ",
            "{{{ .PGPASSWORD }}",
            "{{ . }}",
            "{{ .0 }}",
            "{{ .1a }}",
        ] {
            assert_eq!(render(text, &values()), None, "{text}");
        }
    }
}
