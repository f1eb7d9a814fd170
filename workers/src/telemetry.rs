//! One tracing subscriber: pretty logs for people, JSON for machines
//! (`BATON_LOG_FORMAT=json`), filtered by `RUST_LOG`.

use tracing_subscriber::EnvFilter;

pub fn init(default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let _ = if std::env::var("BATON_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
