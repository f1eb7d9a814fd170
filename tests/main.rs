//! Integration tests: the whole fleet against the real RabbitMQ and
//! PostgreSQL. Each test has its own database and queue prefix.

mod bridge;
mod chain;
mod claims;
mod delegation;
mod errors;
mod process;
mod protocol;
mod providers;
mod relay;
