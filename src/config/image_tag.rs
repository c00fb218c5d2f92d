//! `[[repos]] image_tag`: the tag a preview's image runs, from a template of `{sha}` (the
//! PR's head SHA, the default), `{sha7}` (its first seven characters) and `{number}` (the
//! PR's number), for registries CI tags otherwise. Checked once when the configuration
//! loads, so every tag it renders is one a registry accepts: `[\w][\w.-]{0,127}` (Go's `\w`
//! is ASCII `[0-9A-Za-z_]`), the `tag` rule of distribution/reference (`regexp.go`, `tag`;
//! the grammar in `reference.go`) that the OCI distribution spec repeats.

use std::fmt;

use crate::preview::Sha;

/// A checked template; `render` cannot make a tag a registry refuses.
#[derive(Clone, PartialEq, Eq)]
pub struct ImageTag {
    parts: Vec<Part>,
    source: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Sha,
    Sha7,
    Number,
}

/// Docker's limit on a tag's length.
const MAX_TAG: usize = 128;

impl Part {
    /// The most characters this part can render to (a PR number is a `u32`).
    fn max_len(&self) -> usize {
        match self {
            Part::Literal(text) => text.len(),
            Part::Sha => 40,
            Part::Sha7 => 7,
            Part::Number => 10,
        }
    }
}

impl ImageTag {
    /// `template`, checked: only the three placeholders, literal characters a tag may hold,
    /// not starting with `.` or `-`, at most 128 characters when rendered, and naming the PR
    /// (a constant tag would run one image for every PR, previewing none of them).
    pub fn parse(template: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('{') {
                let Some(end) = after.find('}') else {
                    return Err(format!("{template:?} has a `{{` that is never closed"));
                };
                parts.push(match &after[..end] {
                    "sha" => Part::Sha,
                    "sha7" => Part::Sha7,
                    "number" => Part::Number,
                    other => {
                        return Err(format!(
                            "{template:?} names {{{other}}}, which is not {{sha}}, {{sha7}} or {{number}}"
                        ));
                    }
                });
                rest = &after[end + 1..];
            } else {
                let end = rest.find('{').unwrap_or(rest.len());
                let literal = &rest[..end];
                if let Some(bad) = literal
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
                {
                    return Err(format!(
                        "{template:?} holds {bad:?}; a tag holds only letters, digits, `_`, `.` and `-`"
                    ));
                }
                parts.push(Part::Literal(literal.to_owned()));
                rest = &rest[end..];
            }
        }
        if !parts.iter().any(|p| !matches!(p, Part::Literal(_))) {
            return Err(format!(
                "{template:?} names no {{sha}}, {{sha7}} or {{number}}: every PR would run the same image"
            ));
        }
        if let Some(Part::Literal(first)) = parts.first()
            && (first.starts_with('.') || first.starts_with('-'))
        {
            return Err(format!(
                "{template:?} starts with {:?}; a tag cannot",
                &first[..1]
            ));
        }
        let longest: usize = parts.iter().map(Part::max_len).sum();
        if longest > MAX_TAG {
            return Err(format!(
                "{template:?} can render to {longest} characters; a tag holds at most {MAX_TAG}"
            ));
        }
        Ok(Self {
            parts,
            source: template.to_owned(),
        })
    }

    /// Whether the tag names the PR's number: the default branch's builds (a template's
    /// migrations and seed, #16) have none.
    pub fn names_number(&self) -> bool {
        self.parts.iter().any(|part| matches!(part, Part::Number))
    }

    /// The tag of the PR `number` at `sha`.
    pub fn render(&self, sha: &Sha, number: u32) -> String {
        let mut tag = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => tag.push_str(text),
                Part::Sha => tag.push_str(sha.as_str()),
                Part::Sha7 => tag.push_str(&sha.as_str()[..7.min(sha.as_str().len())]),
                Part::Number => tag.push_str(&number.to_string()),
            }
        }
        tag
    }
}

impl Default for ImageTag {
    /// `{sha}`: the PR's head SHA, as most CI pipelines tag what they build.
    fn default() -> Self {
        Self::parse("{sha}").expect("the default template is valid")
    }
}

impl fmt::Debug for ImageTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ImageTag({:?})", self.source)
    }
}

impl fmt::Display for ImageTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha() -> Sha {
        "ec26c3e57ca3a959ca5aad62de7213c562f8c821".parse().unwrap()
    }

    #[test]
    fn the_default_tag_is_the_head_sha() {
        assert_eq!(ImageTag::default().render(&sha(), 42), sha().as_str());
    }

    #[test]
    fn placeholders_and_literals_render_in_order() {
        let tag = ImageTag::parse("pr-{number}-{sha7}").unwrap();
        assert_eq!(tag.render(&sha(), 42), "pr-42-ec26c3e");
        let tag = ImageTag::parse("sha-{sha}_v1.0").unwrap();
        assert_eq!(
            tag.render(&sha(), 7),
            format!("sha-{}_v1.0", sha().as_str())
        );
    }

    #[test]
    fn templates_a_registry_would_refuse_are_refused_saying_why() {
        for (template, says) in [
            ("{branch}", "{branch}, which is not"),
            ("{sha", "never closed"),
            ("pr/{number}", "holds '/'"),
            ("pr {number}", "holds ' '"),
            ("{sha}:{number}", "holds ':'"),
            ("latest", "names no {sha}"),
            ("", "names no {sha}"),
            ("-{sha}", "starts with \"-\""),
            (".{sha}", "starts with \".\""),
            ("{sha}{sha}{sha}{sha}", "160 characters"),
            ("{SHA}", "{SHA}, which is not"),
        ] {
            let error = ImageTag::parse(template).unwrap_err();
            assert!(error.contains(says), "{template:?}: {error}");
        }
    }

    #[test]
    fn the_longest_tag_a_template_allows_fits_a_registry() {
        let template = format!("{}{{sha}}{{number}}", "v".repeat(MAX_TAG - 50));
        let tag = ImageTag::parse(&template).unwrap();
        assert_eq!(tag.render(&sha(), u32::MAX).len(), MAX_TAG);
        assert!(ImageTag::parse(&format!("v{template}")).is_err());
    }
}
