//! The operator's console, as pure decisions the `admin` role applies to
//! each request.
//!
//! - [`origin`]: which `Host` names the console answers to (against DNS
//!   rebinding), where a POST may come from, and `BATON_ADMIN_URL`.
//! - [`session`]: session cookies (their attributes, when they are
//!   `Secure`), how long a session lasts, and the login rate limit.

pub mod origin;
pub mod session;
