//! Refusals anyone can cause — unverified deliveries, connections over the bound — in the
//! log: the first of a minute as its own line, the rest of that minute as one summary line
//! when it ends. A flood writes two lines a minute, not one per request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long refusals after a logged one are summed up before the summary is written.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The log's memory of the current minute. Pure: the caller writes the lines and keeps
/// the timer.
#[derive(Debug, Default)]
pub struct Window {
    /// When the refusal that opened the window was logged.
    opened: Option<Instant>,
    /// Refusals held back since, by status code.
    held: BTreeMap<u16, u64>,
}

/// What to do with one refusal.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write it as its own line.
    Log,
    /// Count it; when `summary_at` is set, the summary is due then (the first held back
    /// in this window), and the caller arranges to write it.
    Hold { summary_at: Option<Instant> },
}

impl Window {
    pub fn refused(&mut self, status: u16, now: Instant) -> Decision {
        match self.opened {
            Some(opened) if now.saturating_duration_since(opened) < WINDOW => {
                let first = self.held.is_empty();
                *self.held.entry(status).or_default() += 1;
                Decision::Hold {
                    summary_at: first.then_some(opened + WINDOW),
                }
            }
            _ => {
                self.opened = Some(now);
                Decision::Log
            }
        }
    }

    /// The summary of what was held back, and the window closed: `401 ×41, 413 ×2` (a
    /// code of 0 is shown as the count alone).
    pub fn summary(&mut self) -> Option<(u64, String)> {
        self.opened = None;
        let held = std::mem::take(&mut self.held);
        let total = held.values().sum();
        let text = held
            .iter()
            .map(|(code, n)| match code {
                0 => n.to_string(),
                code => format!("{code} ×{n}"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        (total > 0).then_some((total, text))
    }
}

/// One kind of refusal's window, shared by whoever refuses (`what` names it in the log).
#[derive(Debug)]
pub struct Refusals {
    what: &'static str,
    window: Arc<Mutex<Window>>,
}

impl Default for Refusals {
    fn default() -> Self {
        Self::new("delivery rejected")
    }
}

impl Refusals {
    pub fn new(what: &'static str) -> Self {
        Self {
            what,
            window: Arc::default(),
        }
    }

    /// Logs one refusal (`code`: its status, or 0), or counts it towards the minute's
    /// summary; `detail` is the logged one's (`delivery=… reason=…`).
    pub fn refused(&self, code: u16, detail: &dyn std::fmt::Display) {
        let decision = self
            .window
            .lock()
            .expect("refusal window")
            .refused(code, Instant::now());
        match decision {
            Decision::Log => tracing::warn!(
                "{} (more within a minute are summed up in one line) {detail}",
                self.what
            ),
            Decision::Hold { summary_at: None } => {}
            Decision::Hold {
                summary_at: Some(at),
            } => {
                let (what, window) = (self.what, self.window.clone());
                tokio::spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    log_summary(what, &window);
                });
            }
        }
    }
}

/// A server stopping within the minute still writes what it held back.
impl Drop for Refusals {
    fn drop(&mut self) {
        log_summary(self.what, &self.window);
    }
}

fn log_summary(what: &str, window: &Mutex<Window>) {
    let summary = window.lock().map(|mut w| w.summary()).ok().flatten();
    if let Some((total, by_code)) = summary {
        tracing::warn!(
            refused = total, by_code = %by_code,
            "{what}: {total} more in the minute after the last logged one"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_one_line_then_one_summary_a_minute() {
        let start = Instant::now();
        let mut window = Window::default();
        assert_eq!(window.refused(401, start), Decision::Log);
        let due = start + WINDOW;
        assert_eq!(
            window.refused(401, start + Duration::from_millis(1)),
            Decision::Hold {
                summary_at: Some(due)
            }
        );
        for i in 2..1000 {
            let status = if i % 100 == 0 { 413 } else { 401 };
            let at = start + Duration::from_millis(i);
            assert_eq!(
                window.refused(status, at),
                Decision::Hold { summary_at: None }
            );
        }
        assert_eq!(window.summary(), Some((999, "401 ×990, 413 ×9".into())));
        // The next refusal, after the summary, is a line of its own again.
        assert_eq!(window.refused(401, due), Decision::Log);
        assert_eq!(window.summary(), None);
    }

    #[test]
    fn a_refusal_a_minute_after_the_last_logged_one_is_logged() {
        let start = Instant::now();
        let mut window = Window::default();
        assert_eq!(window.refused(400, start), Decision::Log);
        assert_eq!(window.refused(401, start + WINDOW), Decision::Log);
    }
}
