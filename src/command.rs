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
    /// Builds the repository's next template generation now (`database_template`).
    RefreshTemplate,
    /// Fork PRs: approves the named commit, which must be the head (none named: refused).
    Approve(Option<ShaPrefix>),
    /// A share link to the preview for this long (`SHARE_DEFAULT` when none is named),
    /// within `share_until`'s bounds.
    Share(Duration),
    /// Revokes every share link of the preview.
    Unshare,
    /// Puts the preview to sleep now (its app at zero replicas), and wakes it.
    Sleep,
    Wake,
}

/// A share link lasts this long when the command names no duration.
pub const SHARE_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// No share link lasts longer: a pass anyone holding it uses should not outlive a review.
pub const SHARE_MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// What shortened a share link's life below what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareCap {
    /// `SHARE_MAX`.
    Longest,
    /// The preview's own expiry: a link never outlives what it opens.
    PreviewExpiry,
}

/// Until when a share asked at `now` for `asked` lasts, for a preview expiring at
/// `preview_expires_at`: the shortest of the three (and what capped it, if anything did).
/// At or before `now` when the preview is already due to end: no link is made then.
pub fn share_until(now: i64, asked: Duration, preview_expires_at: i64) -> (i64, Option<ShareCap>) {
    let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    let wanted = now.saturating_add(secs(asked));
    let longest = now.saturating_add(secs(SHARE_MAX));
    let mut until = (wanted, None);
    if longest < until.0 {
        until = (longest, Some(ShareCap::Longest));
    }
    if preview_expires_at < until.0 {
        until = (preview_expires_at, Some(ShareCap::PreviewExpiry));
    }
    until
}

/// A commit named in a command: 7 to 40 hex digits, lower-cased. `Copy`, as `Command` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShaPrefix {
    digits: [u8; 40],
    len: u8,
}

impl ShaPrefix {
    /// Fewest hex digits accepted (what GitHub shows as a short SHA).
    pub const MIN: usize = 7;

    pub fn parse(text: &str) -> Option<Self> {
        let len = text.len();
        if !(Self::MIN..=40).contains(&len) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut digits = [0; 40];
        for (digit, b) in digits.iter_mut().zip(text.bytes()) {
            *digit = b.to_ascii_lowercase();
        }
        Some(Self {
            digits,
            len: u8::try_from(len).ok()?,
        })
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.digits[..usize::from(self.len)]).unwrap_or_default()
    }

    /// Whether this names `sha`, a full commit SHA: a prefix of it (in any case).
    pub fn names(&self, sha: &str) -> bool {
        sha.len() == 40
            && sha
                .get(..usize::from(self.len))
                .is_some_and(|head| head.eq_ignore_ascii_case(self.as_str()))
    }
}

pub const VERBS: &[&str] = &[
    "help",
    "status",
    "deploy",
    "redeploy",
    "destroy",
    "extend",
    "keep",
    "unkeep",
    "reseed",
    "approve",
    "refresh-template",
    "share",
    "unshare",
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
    #[error(
        "`{0}` is not a commit; name the commit you reviewed, like `/preview approve 1a2b3c4` (at least 7 hex digits of its SHA)"
    )]
    BadSha(String),
}

/// A commenter's words quoted back in a reply: bounded, and unable to close the code span
/// they are quoted in (a backtick would let the rest render as Markdown, mentions included).
fn quoted(text: &str) -> String {
    text.chars()
        .filter(|c| *c != '`' && !c.is_control())
        .take(40)
        .collect()
}

/// Longest comment searched for a command (bytes). GitHub refuses comments over 65,536
/// characters, so nothing longer is a person's command; and a body cut short could end an
/// HTML comment or a fence early and show what it hid. Bounds the parser's work too.
pub const MAX_BODY: usize = 4 * 65_536;

/// The first line of `body` that is a command, as GitHub renders the comment (CommonMark
/// with GFM's tables, strikethrough, task lists and footnotes): a line of a top-level
/// paragraph whose plain text starts with `/preview` as a word. Nothing a reader does not
/// see as such a line is a command: code blocks (any fence length, `~~~`, indented), inline
/// code, HTML blocks and comments (also inline ones, across lines), block quotes (quoting
/// someone's command must not re-run it), list items, tables, headings, footnotes, link
/// and image text, emphasis. A line ends at a soft or hard break; its leading and trailing
/// whitespace is the parser's. Bounded to `MAX_LINE` characters.
pub fn find_line(body: &str) -> Option<String> {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    if body.len() > MAX_BODY {
        return None;
    }
    // GitHub's renderer (cmark-gfm) with its extensions; `tagfilter` and autolinks change no
    // block structure. Math is left off: `$…$` text never starts with `/preview` anyway.
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_GFM;
    // Open tags: a top-level paragraph is the only one at depth 1; its plain text at depth 1.
    let mut depth = 0usize;
    let mut in_paragraph = false;
    let mut line = Line::default();
    for event in Parser::new_ext(body, options) {
        match event {
            Event::Start(tag) => {
                in_paragraph |= depth == 0 && matches!(tag, Tag::Paragraph);
                depth += 1;
                // Link, image, emphasis: what they hold is not plain text at a line's start.
                if in_paragraph && depth > 1 {
                    line.push_other(" ");
                }
            }
            Event::End(tag) => {
                depth = depth.saturating_sub(1);
                if in_paragraph && depth == 0 && matches!(tag, TagEnd::Paragraph) {
                    in_paragraph = false;
                    if let Some(command) = line.take_command() {
                        return Some(command);
                    }
                }
            }
            _ if !in_paragraph => {}
            Event::Text(text) if depth == 1 => line.push_text(&text),
            Event::Text(text) | Event::Code(text) => line.push_other(&text),
            Event::SoftBreak | Event::HardBreak => {
                if let Some(command) = line.take_command() {
                    return Some(command);
                }
            }
            // Inline HTML (a comment, across lines or not, a tag): not text a reader sees.
            _ => line.push_other(" "),
        }
    }
    None
}

/// One line of a paragraph as it is read: whether it starts with plain text, and its text.
#[derive(Default)]
struct Line {
    text: String,
    /// Set once anything but plain text (code, HTML, a link) came first on this line.
    hidden_start: bool,
}

impl Line {
    fn push_text(&mut self, text: &str) {
        // The line is only ever read up to `MAX_LINE` characters (at most 4 bytes each).
        let room = (4 * MAX_LINE).saturating_sub(self.text.len());
        let mut end = room.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&text[..end]);
    }

    fn push_other(&mut self, text: &str) {
        if self.text.trim_start().is_empty() {
            self.hidden_start = true;
        }
        self.push_text(text);
    }

    /// Ends the line: its text, if it is a command.
    fn take_command(&mut self) -> Option<String> {
        let Line { text, hidden_start } = std::mem::take(self);
        let line = text.trim();
        let is_command = !hidden_start
            && line
                .strip_prefix("/preview")
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace));
        if !is_command {
            return None;
        }
        let end = line
            .char_indices()
            .nth(MAX_LINE)
            .map_or(line.len(), |(i, _)| i);
        Some(line[..end].to_owned())
    }
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
        "refresh-template" => Command::RefreshTemplate,
        "unshare" => Command::Unshare,
        "sleep" => Command::Sleep,
        "wake" => Command::Wake,
        "approve" => {
            return match rest.as_slice() {
                [] => Ok(Command::Approve(None)),
                [text] => ShaPrefix::parse(text)
                    .map(|sha| Command::Approve(Some(sha)))
                    .ok_or_else(|| ParseError::BadSha(quoted(text))),
                _ => Err(ParseError::Unexpected {
                    verb: "approve",
                    extra: quoted(&rest.join(" ")),
                }),
            };
        }
        "share" => {
            return match rest.as_slice() {
                [] => Ok(Command::Share(SHARE_DEFAULT)),
                [text] => positive_duration(text).map(Command::Share),
                _ => Err(ParseError::BadDuration(quoted(&rest.join(" ")))),
            };
        }
        "extend" => {
            return match rest.as_slice() {
                [] => Err(ParseError::MissingDuration),
                [text] => positive_duration(text).map(Command::Extend),
                _ => Err(ParseError::BadDuration(quoted(&rest.join(" ")))),
            };
        }
        _ => {
            return Err(ParseError::UnknownVerb {
                verb: quoted(verb),
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
            extra: quoted(&rest.join(" ")),
        }),
    }
}

/// A duration written like the config's (`36h`, `2d`, `1w`), more than zero.
fn positive_duration(text: &str) -> Result<Duration, ParseError> {
    crate::duration::parse(text)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| ParseError::BadDuration(quoted(text)))
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
/// the PR author may `extend`, `destroy`, `sleep` and `wake` their own (non-fork) preview; everything else
/// (`share` and `unshare` included: a share link lets anyone in), and anything on a fork
/// PR, needs write access. `author_association` is no pre-filter: a
/// member whose organisation membership is private arrives as CONTRIBUTOR (GitHub reports
/// the association as the public sees it), so only the permission endpoint can tell.
pub fn gate(command: Command, asker: &Asker, pr_author: &str, fork: bool) -> Gate {
    let own = asker.login.eq_ignore_ascii_case(pr_author);
    let authors_may = matches!(
        command,
        Command::Extend(_) | Command::Destroy | Command::Sleep | Command::Wake
    );
    if matches!(command, Command::Help | Command::Status) || (own && authors_may && !fork) {
        return Gate::Allowed;
    }
    Gate::NeedsWrite
}

#[cfg(test)]
mod tests;
