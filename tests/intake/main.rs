//! Webhook intake through the real router: recorded GitHub payloads in, rows out.

#[path = "../common/mod.rs"]
mod common;

mod deliveries;
mod ordering;
mod previews;
mod state;

pub(crate) const HELLO: &str = "codertocat/hello-world";
