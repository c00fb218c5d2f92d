//! `[[repos]] paths`: whether a PR changes a file a monorepo team wants a preview for.
//! Pure: the globs, compiled once at start, against the file list GitHub gives.
//!
//! Globs follow `globset` (ripgrep's): `*` and `?` stay inside one path segment
//! (`literal_separator`), `**` crosses segments, `{a,b}` alternates, `[ab]` is a class; a
//! path is matched whole, from the repository's root, case-sensitively.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// GitHub's list-files endpoint returns at most this many files of a PR
/// (REST "List pull requests files": "Responses include a maximum of 3000 files").
pub const GITHUB_FILE_CAP: usize = 3000;

#[derive(Clone, Debug)]
pub struct Paths {
    globs: Vec<String>,
    set: GlobSet,
}

impl PartialEq for Paths {
    fn eq(&self, other: &Self) -> bool {
        self.globs == other.globs
    }
}

impl Eq for Paths {}

impl Paths {
    /// Compiles `globs`; the error names the glob and why.
    pub fn new(globs: &[String]) -> Result<Self, String> {
        let mut set = GlobSetBuilder::new();
        for glob in globs {
            set.add(compile(glob)?);
        }
        Ok(Self {
            globs: globs.to_vec(),
            set: set.build().map_err(|e| e.to_string())?,
        })
    }

    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    /// The first of `files` a glob matches, if any.
    pub fn first_match<'a>(&self, files: &'a [String]) -> Option<&'a str> {
        files
            .iter()
            .find(|f| self.set.is_match(f.as_str()))
            .map(String::as_str)
    }
}

fn compile(glob: &str) -> Result<Glob, String> {
    if glob.trim().is_empty() {
        return Err("an empty glob matches nothing".into());
    }
    if glob.starts_with('/') {
        return Err(format!(
            "{glob:?} starts with '/': paths are matched from the repository's root without one"
        ));
    }
    GlobBuilder::new(glob)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("{glob:?}: {}", e.kind()))
}

/// What the paths decided for a PR at a head: the file that matched, or that none did
/// (`truncated`: GitHub listed only its first 3,000 files, and none of those matched).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathsVerdict {
    Matched(String),
    NoMatch { files: usize, truncated: bool },
}

impl Paths {
    pub fn verdict(&self, files: &[String]) -> PathsVerdict {
        match self.first_match(files) {
            Some(file) => PathsVerdict::Matched(file.to_owned()),
            None => PathsVerdict::NoMatch {
                files: files.len(),
                truncated: files.len() >= GITHUB_FILE_CAP,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(globs: &[&str]) -> Paths {
        Paths::new(&globs.iter().map(|g| g.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_file_under_a_double_star_glob_matches() {
        let p = paths(&["services/api/**", "charts/api/**"]);
        assert_eq!(
            p.verdict(&files(&["README.md", "services/api/src/main.rs"])),
            PathsVerdict::Matched("services/api/src/main.rs".into())
        );
    }

    #[test]
    fn a_pr_touching_only_other_services_does_not_match() {
        let p = paths(&["services/api/**"]);
        assert_eq!(
            p.verdict(&files(&["services/web/index.ts", "services/apix/a.rs"])),
            PathsVerdict::NoMatch {
                files: 2,
                truncated: false
            }
        );
    }

    #[test]
    fn a_single_star_stays_in_one_directory() {
        let p = paths(&["docs/*.md"]);
        assert!(p.first_match(&files(&["docs/a.md"])).is_some());
        assert!(p.first_match(&files(&["docs/deep/a.md"])).is_none());
    }

    #[test]
    fn alternatives_and_classes_follow_globset() {
        let p = paths(&["{api,worker}/**/*.[ch]"]);
        assert!(p.first_match(&files(&["worker/x/y.c"])).is_some());
        assert!(p.first_match(&files(&["worker/x/y.rs"])).is_none());
    }

    #[test]
    fn a_listing_at_githubs_cap_says_it_may_be_truncated() {
        let p = paths(&["services/api/**"]);
        let many: Vec<String> = (0..GITHUB_FILE_CAP)
            .map(|i| format!("web/{i}.ts"))
            .collect();
        assert_eq!(
            p.verdict(&many),
            PathsVerdict::NoMatch {
                files: GITHUB_FILE_CAP,
                truncated: true
            }
        );
    }

    #[test]
    fn bad_globs_are_refused_saying_why() {
        for bad in ["", "  ", "/services/**", "services/[api"] {
            let err = Paths::new(&[bad.to_string()]).unwrap_err();
            assert!(!err.is_empty(), "{bad:?}");
        }
    }
}
