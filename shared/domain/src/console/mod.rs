//! The operator's console, as pure decisions the `admin` role applies to
//! each request.
//!
//! - [`origin`]: which `Host` names the console answers to (against DNS
//!   rebinding), where a POST may come from, and `BATON_ADMIN_URL`.
//! - [`session`]: session cookies (their attributes, when they are
//!   `Secure`), how long a session lasts, and the login rate limit.
//! - [`overview`]: runs by status in a window, the failure rate, the navigation's badges.
//! - [`workers`]: whether a process of the fleet is live, stopped or gone.
//! - [`dead`]: which dead letters a Replay can help.

pub mod dead;
pub mod origin;
pub mod overview;
pub mod session;
pub mod workers;
