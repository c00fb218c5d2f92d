//! The seed sets previewd ships (from `seeds/`), compiled in so the binary needs no files.

/// `(set name, [(file name, SQL)])`, files in the order they apply.
pub const SHIPPED: &[(&str, &[(&str, &str)])] = &[(
    "example",
    &[
        (
            "001-schema.sql",
            include_str!("../seeds/example/001-schema.sql"),
        ),
        (
            "002-users.sql",
            include_str!("../seeds/example/002-users.sql"),
        ),
    ],
)];

pub fn find(set: &str) -> Option<&'static [(&'static str, &'static str)]> {
    SHIPPED
        .iter()
        .find(|(name, _)| *name == set)
        .map(|(_, files)| *files)
}

pub fn names() -> Vec<&'static str> {
    SHIPPED.iter().map(|(name, _)| *name).collect()
}
