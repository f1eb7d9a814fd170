//! Run budgets: limits for a whole run, across every agent and delegated
//! child (model tokens, model calls, tool calls, wall-clock time).
//!
//! Operators set them in the profiles file, per route or as a default:
//!
//! ```toml
//! [budgets.default]             # every limit optional; unset ones keep the built-in default
//! max_model_calls = 100
//!
//! [budgets.routes.docs_agent]   # a HandoffRequest.targetAgent from [routes]
//! max_tokens = 500000
//! max_wall_clock_secs = 600
//! ```
//!
//! A run's budget is resolved once, at intake, and copied onto the run, so a
//! later `baton profiles apply` never changes a run already under way. The
//! per-task budgets of `agent_delegate` (`maxRounds` …) are separate and
//! narrower: they end one child, while a run budget ends the whole run.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::Language;

/// The error code a run stopped by its budget fails with.
pub const BUDGET_EXHAUSTED: &str = crate::protocol::contract::ErrorCode::BudgetExhausted.as_str();

/// The limits of one run. Every field has a safe default, so a confused
/// model looping on a tool stops even when the profiles file sets nothing.
/// Only ever read back from a run's row (operators write [`BudgetOverrides`],
/// which refuse unknown keys), so a limit added by a newer version is
/// ignored by an older worker during a rolling upgrade instead of failing
/// every run that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunBudget {
    pub max_tokens: u64,
    pub max_model_calls: u64,
    pub max_tool_calls: u64,
    pub max_wall_clock_secs: u64,
}

impl Default for RunBudget {
    /// Generous for real work (a handoff chain of 8 stages at 25 turns each,
    /// with children) and small enough that a runaway loop costs minutes and
    /// a few dollars, not a night and a bill.
    fn default() -> Self {
        Self { max_tokens: 2_000_000, max_model_calls: 200, max_tool_calls: 1_000, max_wall_clock_secs: 3_600 }
    }
}

/// One section of `[budgets]`: the limits it sets; the others are inherited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_model_calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wall_clock_secs: Option<u64>,
}

impl BudgetOverrides {
    fn over(&self, base: RunBudget) -> RunBudget {
        RunBudget {
            max_tokens: self.max_tokens.unwrap_or(base.max_tokens),
            max_model_calls: self.max_model_calls.unwrap_or(base.max_model_calls),
            max_tool_calls: self.max_tool_calls.unwrap_or(base.max_tool_calls),
            max_wall_clock_secs: self.max_wall_clock_secs.unwrap_or(base.max_wall_clock_secs),
        }
    }

    fn zeros(&self) -> Vec<&'static str> {
        let fields = [
            ("max_tokens", self.max_tokens),
            ("max_model_calls", self.max_model_calls),
            ("max_tool_calls", self.max_tool_calls),
            ("max_wall_clock_secs", self.max_wall_clock_secs),
        ];
        fields.into_iter().filter(|(_, v)| *v == Some(0)).map(|(name, _)| name).collect()
    }
}

/// The `[budgets]` section of the profiles file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetsConfig {
    pub default: BudgetOverrides,
    /// Per `targetAgent` (a key of `[routes]`), over the default.
    pub routes: BTreeMap<String, BudgetOverrides>,
}

impl BudgetsConfig {
    /// The budget a run started for `target` gets: the route's limits, then
    /// the file's default, then the built-in default.
    pub fn for_target(&self, target: &str) -> RunBudget {
        let base = self.default.over(RunBudget::default());
        self.routes.get(target).map_or(base, |route| route.over(base))
    }

    /// What is wrong with the section, given the file's routes.
    pub fn problems(&self, routes: &BTreeMap<String, String>) -> Vec<String> {
        let mut problems = vec![];
        let sections = std::iter::once(("default".to_string(), &self.default))
            .chain(self.routes.iter().map(|(target, o)| (format!("routes.{target}"), o)));
        for (name, overrides) in sections {
            for field in overrides.zeros() {
                problems.push(format!("budget `{name}` sets `{field}` to 0, which would stop every run at once"));
            }
        }
        for target in self.routes.keys().filter(|t| !routes.contains_key(*t)) {
            problems.push(format!("budget `routes.{target}` names a target that [routes] does not have"));
        }
        problems
    }
}

/// What a run has spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    pub tokens: u64,
    pub model_calls: u64,
    pub tool_calls: u64,
    pub elapsed: Duration,
}

crate::wire_enum! {
    /// Which limit a run reached.
    pub enum Limit { Tokens => "tokens", ModelCalls => "model_calls", ToolCalls => "tool_calls", WallClock => "wall_clock" }
}

/// A limit the run reached: `spent` of `max` (seconds for the wall clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub limit: Limit,
    pub spent: u64,
    pub max: u64,
}

impl RunBudget {
    /// The first limit `spent` has reached, if any. A run that reached one
    /// takes no further step: reaching a limit exactly is enough, so a budget
    /// of 10 model calls allows 10 and refuses the 11th.
    pub fn check(&self, spent: &Spent) -> Option<Exhausted> {
        let elapsed = spent.elapsed.as_secs();
        [
            (Limit::Tokens, spent.tokens, self.max_tokens),
            (Limit::ModelCalls, spent.model_calls, self.max_model_calls),
            (Limit::ToolCalls, spent.tool_calls, self.max_tool_calls),
            (Limit::WallClock, elapsed, self.max_wall_clock_secs),
        ]
        .into_iter()
        .find(|(limit, used, max)| match limit {
            // Whole seconds would let a 2 s limit run until 2.999 s.
            Limit::WallClock => spent.elapsed >= self.wall_clock(),
            _ => used >= max,
        })
        .map(|(limit, spent, max)| Exhausted { limit, spent, max })
    }

    pub fn wall_clock(&self) -> Duration {
        Duration::from_secs(self.max_wall_clock_secs)
    }

    /// The budget and what was spent, for the journal.
    pub fn figures(&self, spent: &Spent) -> Value {
        json!({
            "spent": {"tokens": spent.tokens, "modelCalls": spent.model_calls, "toolCalls": spent.tool_calls,
                      "wallClockMs": spent.elapsed.as_millis() as u64},
            "budget": {"tokens": self.max_tokens, "modelCalls": self.max_model_calls, "toolCalls": self.max_tool_calls,
                       "wallClockSecs": self.max_wall_clock_secs},
        })
    }
}

impl Exhausted {
    /// Why a run stopped on its budget, in words for the chat (the reply's
    /// `error.message` and, after the apology, its text).
    pub fn message(&self, language: Language) -> String {
        let max = self.max;
        let n = thousands(max);
        match (self.limit, language) {
            (Limit::Tokens, Language::En) => format!("the agents reached this request's limit of {n} model tokens"),
            (Limit::ModelCalls, Language::En) => format!("the agents reached this request's limit of {n} model calls"),
            (Limit::ToolCalls, Language::En) => format!("the agents reached this request's limit of {n} tool calls"),
            (Limit::WallClock, Language::En) => {
                format!("the agents reached this request's time limit of {}", duration_en(max))
            }
            (Limit::Tokens, Language::ZhCn) => format!("智能体已用完本次请求的模型用量上限（{n} 个 token）"),
            (Limit::ModelCalls, Language::ZhCn) => format!("智能体已达到本次请求的模型调用次数上限（{n} 次）"),
            (Limit::ToolCalls, Language::ZhCn) => format!("智能体已达到本次请求的工具调用次数上限（{n} 次）"),
            (Limit::WallClock, Language::ZhCn) => format!("智能体已达到本次请求的运行时间上限（{}）", duration_zh(max)),
        }
    }

    /// The run's error: the code, a plain English message for the journal
    /// and operators, and the figures the reply is worded from (in the
    /// request's language, by [`Exhausted::message`]).
    pub fn error(&self) -> Value {
        let message = self.message(Language::En);
        json!({"code": BUDGET_EXHAUSTED, "message": message, "limit": self.limit.as_str(), "spent": self.spent, "max": self.max})
    }

    /// Reads back what [`Exhausted::error`] stored, if the error is one.
    pub fn from_error(error: &Value) -> Option<Self> {
        if error["code"] != BUDGET_EXHAUSTED {
            return None;
        }
        let limit = Limit::parse(error["limit"].as_str()?)?;
        Some(Self { limit, spent: error["spent"].as_u64()?, max: error["max"].as_u64()? })
    }
}

/// `1234567` → `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Whole hours or minutes when the limit is one, else seconds.
fn duration_parts(secs: u64) -> (u64, usize) {
    match secs {
        s if s >= 3600 && s.is_multiple_of(3600) => (s / 3600, 0),
        s if s >= 60 && s.is_multiple_of(60) => (s / 60, 1),
        s => (s, 2),
    }
}

fn duration_en(secs: u64) -> String {
    let (n, unit) = duration_parts(secs);
    let name = ["hour", "minute", "second"][unit];
    if n == 1 {
        format!("1 {name}")
    } else {
        format!("{} {name}s", thousands(n))
    }
}

fn duration_zh(secs: u64) -> String {
    let (n, unit) = duration_parts(secs);
    format!("{n} {}", ["小时", "分钟", "秒"][unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(tokens: u64, model_calls: u64, tool_calls: u64, secs: f64) -> Spent {
        Spent { tokens, model_calls, tool_calls, elapsed: Duration::from_secs_f64(secs) }
    }

    #[test]
    fn the_defaults_stop_a_runaway_loop() {
        let b = RunBudget::default();
        assert_eq!(b.check(&spent(1_999_999, 199, 999, 3599.0)), None);
        assert_eq!(b.check(&spent(0, 200, 0, 0.0)).unwrap().limit, Limit::ModelCalls);
        assert_eq!(b.check(&spent(0, 0, 1_000, 0.0)).unwrap().limit, Limit::ToolCalls);
        assert_eq!(b.check(&spent(2_000_000, 0, 0, 0.0)).unwrap().limit, Limit::Tokens);
        assert_eq!(b.check(&spent(0, 0, 0, 3600.0)).unwrap().limit, Limit::WallClock);
    }

    #[test]
    fn reaching_a_limit_exactly_stops_the_run_and_reports_the_figures() {
        let b = RunBudget { max_model_calls: 4, ..Default::default() };
        assert_eq!(b.check(&spent(0, 3, 0, 0.0)), None);
        assert_eq!(b.check(&spent(0, 4, 0, 0.0)), Some(Exhausted { limit: Limit::ModelCalls, spent: 4, max: 4 }));
        assert_eq!(b.check(&spent(0, 9, 0, 0.0)), Some(Exhausted { limit: Limit::ModelCalls, spent: 9, max: 4 }));
    }

    #[test]
    fn the_wall_clock_counts_fractions_of_a_second() {
        let b = RunBudget { max_wall_clock_secs: 2, ..Default::default() };
        assert_eq!(b.check(&spent(0, 0, 0, 1.999)), None);
        let over = b.check(&spent(0, 0, 0, 2.0)).unwrap();
        assert_eq!((over.limit, over.spent, over.max), (Limit::WallClock, 2, 2));
    }

    #[test]
    fn tokens_are_checked_first_when_several_limits_are_reached() {
        let b = RunBudget { max_tokens: 10, max_model_calls: 1, ..Default::default() };
        assert_eq!(b.check(&spent(10, 1, 0, 0.0)).unwrap().limit, Limit::Tokens);
    }

    #[test]
    fn a_route_overrides_the_default_which_overrides_the_built_in_limits() {
        let config: BudgetsConfig = toml::from_str(
            "[default]\nmax_model_calls = 50\n[routes.codex]\nmax_tokens = 1000\nmax_wall_clock_secs = 60\n",
        )
        .unwrap();
        let codex = config.for_target("codex");
        assert_eq!(
            codex,
            RunBudget { max_tokens: 1000, max_model_calls: 50, max_tool_calls: 1000, max_wall_clock_secs: 60 }
        );
        let other = config.for_target("docs_agent");
        assert_eq!(other, RunBudget { max_model_calls: 50, ..Default::default() });
        assert_eq!(BudgetsConfig::default().for_target("x"), RunBudget::default());
    }

    #[test]
    fn zero_limits_unknown_routes_and_unknown_keys_are_refused() {
        let config: BudgetsConfig =
            toml::from_str("[default]\nmax_tool_calls = 0\n[routes.ghost]\nmax_tokens = 5\n").unwrap();
        let routes = BTreeMap::from([("docs_agent".to_string(), "writer".to_string())]);
        let problems = config.problems(&routes).join("; ");
        assert!(problems.contains("`default` sets `max_tool_calls` to 0"), "{problems}");
        assert!(problems.contains("`routes.ghost` names a target"), "{problems}");
        assert!(toml::from_str::<BudgetsConfig>("[default]\nmax_calls = 3\n").is_err());
    }

    #[test]
    fn the_error_round_trips_through_the_stored_json() {
        let ex = Exhausted { limit: Limit::ToolCalls, spent: 6, max: 5 };
        let error = ex.error();
        assert_eq!(error["code"], BUDGET_EXHAUSTED);
        assert!(error["message"].as_str().unwrap().contains("5 tool calls"), "{error}");
        assert_eq!(Exhausted::from_error(&error), Some(ex));
        assert_eq!(Exhausted::from_error(&json!({"code": "host_error", "message": "x"})), None);
    }

    #[test]
    fn a_stored_budget_missing_fields_reads_with_the_defaults() {
        let b: RunBudget = serde_json::from_value(json!({"max_model_calls": 7})).unwrap();
        assert_eq!(b, RunBudget { max_model_calls: 7, ..Default::default() });
    }

    #[test]
    fn a_stored_budget_with_a_newer_versions_limit_reads_without_it() {
        let b: RunBudget = serde_json::from_value(json!({"max_model_calls": 7, "max_cost_cents": 300})).unwrap();
        assert_eq!(b, RunBudget { max_model_calls: 7, ..Default::default() });
    }
}
