//! The words the state stores for a preview's life: why it ended, what its history rows
//! record, where each ledger item stands, how a command ended. Each is an enum whose
//! variants read and write the exact text the state has always held (`stored_text!`), so
//! nothing outside these types compares a state, a reason or a kind as a string.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Text the state holds that no variant of `kind` names.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{kind} {text:?} is none previewd knows")]
pub struct UnknownText {
    pub kind: &'static str,
    pub text: String,
}

/// An enum stored as text: each variant with the text it is stored as, `as_str`, `ALL`,
/// `Display`, `FromStr`, serde and sqlx (rusqlite's traits are `db::connection`'s).
macro_rules! stored_text {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type)]
        #[sqlx(type_name = "TEXT")]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] #[sqlx(rename = $text)] $variant,)*
        }

        impl $name {
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                }
            }
        }

        impl fmt::Display for $name {
            // `pad`, not `write_str`: a table's `{:<9}` lines its columns up.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownText;

            fn from_str(text: &str) -> Result<Self, UnknownText> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == text)
                    .ok_or_else(|| UnknownText {
                        kind: stringify!($name),
                        text: text.to_owned(),
                    })
            }
        }
    };
}

stored_text! {
    /// Why a preview went away (the `end_reason` column, and a thread's).
    pub enum EndReason {
        /// The PR was closed unmerged.
        Closed = "closed",
        Merged = "merged",
        /// A writer's `/preview destroy`, or an operator's: the only end a `/preview deploy`
        /// undoes.
        Destroyed = "destroyed",
        /// Its time ran out (`ttl`, `max_lifetime`).
        Expired = "expired",
        /// Removed to make room (`at_cap = "evict"`).
        Evicted = "evicted",
        /// Its trigger label was taken off (`trigger = "label"`).
        Unlabeled = "unlabeled",
    }
}

stored_text! {
    /// What one history row records (the `what` column). History is read back as text, so
    /// rows of kinds no longer written (`withdrawn`, in older states) still show.
    pub enum HistoryKind {
        Opened = "opened",
        Reopened = "reopened",
        Pushed = "pushed",
        ReadyForReview = "ready_for_review",
        ConvertedToDraft = "converted_to_draft",
        Closed = "closed",
        Labeled = "labeled",
        Unlabeled = "unlabeled",
        Edited = "edited",
        /// A delivery previewd would not act on (a repository off the allow-list).
        Refused = "refused",
        /// A `/preview` command, accepted or answered.
        Command = "command",
        CommandRefused = "command_refused",
        CommandInvalid = "command_invalid",
        Placed = "placed",
        Queued = "queued",
        Evicted = "evicted",
        Applied = "applied",
        Failed = "failed",
        CiFailed = "ci_failed",
        Error = "error",
        Conflict = "conflict",
        TeardownStarted = "teardown_started",
        TeardownStuck = "teardown_stuck",
        Destroyed = "destroyed",
        DestroyRequested = "destroy_requested",
        Expired = "expired",
        ExpiryWarning = "expiry_warning",
        Resealed = "resealed",
        PathsMatched = "paths_matched",
        Template = "template",
        /// A share link made through the API (a command's is a `command` row).
        Shared = "shared",
        /// Share links revoked through the API.
        Unshared = "unshared",
        /// Put to sleep (idle, or `/preview sleep`), and woken (a request, `/preview wake`).
        Slept = "slept",
        Woke = "woke",
    }
}

stored_text! {
    /// Where one ledger item stands (the `ledger.state` column).
    pub enum LedgerState {
        /// About to be written: recorded before the apply, so a crash leaves nothing unknown.
        Applying = "applying",
        /// Written to the sink.
        Applied = "applied",
        /// Seen present where it was applied.
        Confirmed = "confirmed",
        /// Its deletion was asked for; not confirmed gone yet.
        Deleting = "deleting",
        Gone = "gone",
        /// Left in place on purpose (`database.drop_on_delete = false`).
        Kept = "kept",
    }
}

impl LedgerState {
    /// Nothing more to do for the item: gone, or kept on purpose.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Gone | Self::Kept)
    }
}

stored_text! {
    /// Where a template database generation stands (the `templates.state` column, #16).
    pub enum GenState {
        Building = "building",
        Ready = "ready",
        Failed = "failed",
        Retiring = "retiring",
    }
}

stored_text! {
    /// How a `/preview` command ended (the `commands.status` column).
    pub enum CommandStatus {
        Pending = "pending",
        Done = "done",
        Refused = "refused",
        Failed = "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_reads_back_as_itself_and_unknown_text_is_named() {
        for kind in HistoryKind::ALL {
            assert_eq!(kind.as_str().parse::<HistoryKind>(), Ok(*kind));
        }
        for reason in EndReason::ALL {
            assert_eq!(reason.to_string().parse::<EndReason>(), Ok(*reason));
        }
        assert_eq!(
            "vanished".parse::<EndReason>(),
            Err(UnknownText {
                kind: "EndReason",
                text: "vanished".into()
            })
        );
    }

    #[test]
    fn a_word_fills_its_column_in_a_table() {
        assert_eq!(format!("{:<9}|", GenState::Ready), "ready    |");
        assert_eq!(format!("{:>7}", EndReason::Merged), " merged");
    }

    #[test]
    fn serde_writes_the_stored_text() {
        assert_eq!(
            serde_json::to_string(&HistoryKind::CiFailed).unwrap(),
            "\"ci_failed\""
        );
        assert_eq!(
            serde_json::from_str::<LedgerState>("\"kept\"").unwrap(),
            LedgerState::Kept
        );
    }
}
