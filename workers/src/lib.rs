//! The Baton fleet: configuration, telemetry, and one module per role.
//!
//! # Layout
//! - [`config`]: `Settings` from the environment.
//! - [`roles`]: intake (requests, with answers and cancels), invocation workers (claims, priority slots),
//!   the relay (with status callbacks), the collector, their supervisor, and publishing after commit.
//! - [`answering`]: an answer to an agent's question applied, from a bridge or an operator.
//! - [`fleet`]: start roles in this process and stop them on a signal.
//! - [`registry`]: this process's row in the fleet's registry, heartbeated (the console's workers page).
//! - [`metrics`]: every metric name the fleet exports, and the exporter.
//! - [`health`]: the metrics listener (`/metrics`, `/healthz`, `/readyz`) and `baton health`.
//! - [`startup`]: the schema check `baton up` makes before any role starts.
//! - [`operator`]: operator actions such as cancelling a run.
//! - [`profiles_check`]: `baton profiles check`: what each profile still needs here.
//! - [`timeline`]: a run's journal as a readable table.
//! - [`console`]: the operator's web console (the `admin` role).
//! - [`contract`]: `baton contract`, the bridge's JSON Schemas and TypeScript types generated from the domain's.
//! - [`demo`]: the end-to-end demo (`--ask`: an agent asks, the demo answers; `--target codex` …: a real coding CLI).
//! - [`model_server`]: a scripted model server speaking each coding CLI's wire API (the demo's and the tests').

pub mod answering;
pub mod config;
pub mod console;
pub mod contract;
pub mod demo;
pub mod fleet;
pub mod health;
pub mod metrics;
pub mod model_server;
pub mod operator;
pub mod profiles_check;
pub mod registry;
pub mod roles;
pub mod startup;
pub mod telemetry;
pub mod timeline;
