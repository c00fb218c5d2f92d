//! previewd: one preview environment per GitHub pull request, delivered through Argo CD.
//!
//! Intake (`server` → `webhook` → `intent` → `intake` → `db`) verifies and records what each
//! PR should have; later stages render, apply and report it.
#![forbid(unsafe_code)]

pub mod app;
pub mod argocd;
pub mod ca;
pub mod cli;
pub mod clock;
pub mod clusters;
pub mod command;
pub mod comment;
pub mod config;
pub mod dashboard;
pub mod db;
pub mod duration;
pub mod feedback;
pub mod github;
pub mod intake;
pub mod intent;
pub mod ledger;
pub mod metrics;
pub mod naming;
pub mod openapi;
pub mod operate;
pub mod plan;
pub mod preview;
pub mod projects;
pub mod reconcile;
pub mod render;
pub mod requirements;
pub mod resync;
pub mod seal;
pub mod secrets;
pub mod seeds;
pub mod serve;
pub mod server;
pub mod sink;
pub mod sweep;
pub mod view;
pub mod webhook;
pub mod work;
pub mod yaml;
