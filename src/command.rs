//! The `/preview` command language, pure: finding the command in a comment, parsing it,
//! and deciding who may run it. Executing it is `obey`'s.

use std::time::Duration;

/// Longest command line kept (characters); the rest of a comment is never stored.
pub const MAX_LINE: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Help,
    Status,
    Deploy,
    Redeploy,
    Destroy,
    Extend(Duration),
    Keep,
    Unkeep,
    Reseed,
    Approve,
}

pub const VERBS: &[&str] = &[
    "help", "status", "deploy", "redeploy", "destroy", "extend", "keep", "unkeep", "reseed",
    "approve",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("`/preview` needs a verb")]
    NoVerb,
    #[error("`{verb}` is not a command{}", suggestion.map(|s| format!(" — did you mean `{s}`?")).unwrap_or_default())]
    UnknownVerb {
        verb: String,
        suggestion: Option<&'static str>,
    },
    #[error("`extend` needs a duration, like `/preview extend 2d`")]
    MissingDuration,
    #[error("`{0}` is not a duration; write it like `36h`, `2d` or `1w`")]
    BadDuration(String),
    #[error("`{verb}` takes no arguments (got `{extra}`)")]
    Unexpected { verb: &'static str, extra: String },
}

/// The first line of `body` that is a command: starts with `/preview` as a word, outside
/// fenced code blocks and block quotes (quoting someone's command must not re-run it).
/// Bounded to `MAX_LINE` characters.
pub fn find_line(body: &str) -> Option<String> {
    let mut fence: Option<&str> = None;
    for raw in body.lines() {
        let line = raw.trim();
        if let Some(open) = fence {
            if line.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if line.starts_with("```") || line.starts_with("~~~") {
            fence = Some(&line[..3]);
            continue;
        }
        // Indented code (four spaces or a tab) is code, not a command.
        if raw.starts_with("    ") || raw.starts_with('\t') {
            continue;
        }
        let is_command = line
            .strip_prefix("/preview")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace));
        if is_command {
            let end = line
                .char_indices()
                .nth(MAX_LINE)
                .map_or(line.len(), |(i, _)| i);
            return Some(line[..end].to_owned());
        }
    }
    None
}

/// Parses a line `find_line` returned.
pub fn parse(line: &str) -> Result<Command, ParseError> {
    let mut words = line.split_whitespace();
    words.next(); // `/preview`
    let Some(verb) = words.next() else {
        return Err(ParseError::NoVerb);
    };
    let verb_lower = verb.to_lowercase();
    let rest: Vec<&str> = words.collect();
    let command = match verb_lower.as_str() {
        "help" => Command::Help,
        "status" => Command::Status,
        "deploy" => Command::Deploy,
        "redeploy" => Command::Redeploy,
        "destroy" => Command::Destroy,
        "keep" => Command::Keep,
        "unkeep" => Command::Unkeep,
        "reseed" => Command::Reseed,
        "approve" => Command::Approve,
        "extend" => {
            return match rest.as_slice() {
                [] => Err(ParseError::MissingDuration),
                [text] => crate::duration::parse(text)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .map(Command::Extend)
                    .ok_or_else(|| ParseError::BadDuration((*text).into())),
                _ => Err(ParseError::BadDuration(
                    rest.join(" ").chars().take(40).collect(),
                )),
            };
        }
        _ => {
            return Err(ParseError::UnknownVerb {
                verb: verb.chars().take(40).collect(),
                suggestion: suggest(&verb_lower),
            });
        }
    };
    match rest.first() {
        None => Ok(command),
        Some(_) => Err(ParseError::Unexpected {
            verb: VERBS
                .iter()
                .find(|v| **v == verb_lower)
                .copied()
                .unwrap_or("command"),
            extra: rest.join(" ").chars().take(40).collect(),
        }),
    }
}

/// The closest verb, if the typo is small (edit distance ≤ 2).
fn suggest(verb: &str) -> Option<&'static str> {
    VERBS
        .iter()
        .map(|v| (distance(verb, v), *v))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, v)| v)
}

fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// Who is asking, as far as the webhook told us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asker<'a> {
    pub login: &'a str,
    /// `author_association` of the comment: OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, ...
    pub association: &'a str,
}

/// The first step of authorization, without any API call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Allowed,
    /// Write access decides: the caller asks GitHub (or, without credentials, trusts only
    /// an OWNER association).
    NeedsWrite,
}

/// Anyone may ask for `help` and `status` (they only say what the sticky comment shows);
/// the PR author may `extend` and `destroy` their own (non-fork) preview; everything else,
/// and anything on a fork PR, needs write access. `author_association` is no pre-filter: a
/// member whose organisation membership is private arrives as CONTRIBUTOR (GitHub reports
/// the association as the public sees it), so only the permission endpoint can tell.
pub fn gate(command: Command, asker: &Asker, pr_author: &str, fork: bool) -> Gate {
    let own = asker.login.eq_ignore_ascii_case(pr_author);
    let authors_may = matches!(command, Command::Extend(_) | Command::Destroy);
    if matches!(command, Command::Help | Command::Status) || (own && authors_may && !fork) {
        return Gate::Allowed;
    }
    Gate::NeedsWrite
}

#[cfg(test)]
mod tests;
