//! Integration tests: the whole fleet against the real RabbitMQ and
//! PostgreSQL. Each test has its own database and queue prefix.

mod bridge;
mod bridge_edges;
mod budgets;
mod callbacks;
mod chain;
mod claims;
mod cluster;
mod console_browser;
mod console_http;
mod console_waiting;
mod contract;
mod contract_files;
mod contract_live;
mod conversations_ask;
mod conversations_chat;
mod corrupt_rows;
mod database;
mod delegation;
mod errors;
mod hardening_claims;
mod hop_costs;
mod intake_lanes;
mod limits;
mod metrics;
mod operator_console_cli;
mod outages;
mod priority;
mod process;
mod protocol;
mod providers;
mod hot_path;
mod relay;
mod sandbox;
mod shape;
mod traces;
