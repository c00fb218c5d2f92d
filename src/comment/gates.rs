//! What the sticky comment says of a PR's gates: how a PR without a preview gets one, and
//! where CI stands while the image waits for it. Check names and links come from whoever
//! writes the workflow (the PR's author among them): escaped, and linked only as https.

use super::{escape, stamp};
use crate::checks::Wait;
use crate::intent::OptOut;

/// Why this PR has no preview, and how to get one (`label`: the repository's trigger label).
pub fn opted_out(why: OptOut, label: &str) -> String {
    match why {
        OptOut::Label => format!(
            "Previews of this repository are opt-in: add the label **{}** to this PR to get one \
             (removing it tears the preview down). A writer's `/preview deploy` works too.",
            escape(label)
        ),
        OptOut::Comment => "Previews of this repository are opt-in: a writer comments \
                            `/preview deploy` on this PR to get one."
            .into(),
        OptOut::Author => "previewd does not deploy this author's PRs on its own \
                           (`ignore_authors`). A writer's `/preview deploy` deploys this one."
            .into(),
        OptOut::Paths => "This PR changes no file the repository's previews watch (`paths`), \
                          so it gets none. A push that touches one starts it; a writer's \
                          `/preview deploy` deploys it anyway."
            .into(),
    }
}

/// The CI lines of the status comment, for the head `short`.
pub(super) fn ci(wait: &Wait, since: i64, short: &str) -> String {
    match wait {
        Wait::Passed => String::new(),
        Wait::Waiting { pending } => format!(
            "\n**Waiting for** {} on `{short}` since {}. The database, DNS, TLS and secrets are \
             provisioned meanwhile; migrations and the app run once CI has built the image.\n",
            pending
                .iter()
                .map(|name| format!("**{}**", escape(name)))
                .collect::<Vec<_>>()
                .join(", "),
            stamp(since),
        ),
        Wait::Failed {
            name,
            conclusion,
            url,
        } => {
            let link = url
                .as_deref()
                .filter(|u| u.starts_with("https://") && !u.contains(char::is_whitespace))
                .map(|u| format!(" ([details]({}))", u.replace(')', "%29")))
                .unwrap_or_default();
            format!(
                "\n**CI:** **{}** ended {} on `{short}`{link}. A re-run that succeeds deploys \
                 it; a writer's `/preview deploy` deploys this commit anyway.\n",
                escape(name),
                escape(conclusion),
            )
        }
    }
}
