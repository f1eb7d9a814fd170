//! What `baton runs list`, `baton runs show` and `baton handoff list
//! --waiting` print: readable tables for people, JSON for machines (the
//! same fields the store reads).

use std::fmt::Write;

use anyhow::Context;
use baton_store::overview::{self, RunFilter, RunRow, Waiting};
use baton_store::runs::Run;
use baton_store::{journal, GenericClient, Pool};
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::{reason, show, table};

/// A duration such as `90s`, `15m`, `1h` or `7d`.
pub fn parse_age(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: i64 = n.parse().with_context(|| format!("`{text}` is not a duration such as 30m, 1h or 7d"))?;
    Ok(match unit {
        "s" => Duration::seconds(n),
        "m" => Duration::minutes(n),
        "h" | "" => Duration::hours(n),
        "d" => Duration::days(n),
        _ => anyhow::bail!("`{text}`: the unit is s, m, h or d"),
    })
}

/// A run as `runs list` shows it: the stored row, why it ended so (a
/// failed or cancelled run's reason) and how long it took.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    #[serde(flatten)]
    pub row: RunRow,
    pub reason: Option<String>,
    /// From its creation to its end (`None` while it runs).
    pub duration_ms: Option<i64>,
}

/// The runs as a table, newest first: every id whole, the columns aligned
/// whatever the status, the reason last.
pub fn runs_table(rows: &[Listed], now: DateTime<Utc>) -> String {
    if rows.is_empty() {
        return "(no runs)\n".into();
    }
    let header = ["run", "status", "attempt", "handoff", "chat", "tokens", "duration", "age", "agents", "reason"];
    let mut t = table::new(&header, &[2, 5, 6, 7]);
    for Listed { row: r, reason, duration_ms } in rows {
        t.add_row([
            r.run_id.to_string(),
            r.status.to_string(),
            r.attempt.to_string(),
            r.handoff_id.clone().unwrap_or_else(|| "-".into()),
            r.chat.clone().unwrap_or_else(|| "-".into()),
            r.tokens.to_string(),
            duration_ms.map_or_else(|| "-".into(), |ms| table::duration(Duration::milliseconds(ms))),
            table::duration(now - r.created_at),
            if r.agents.is_empty() { "-".into() } else { r.agents.join(" → ") },
            reason.clone().unwrap_or_default(),
        ]);
    }
    table::render(&t)
}

/// At most `n` characters, `…` marking a cut.
fn cut(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        return text.to_string();
    }
    text.chars().take(n - 1).chain(['…']).collect()
}

/// Runs matching `filter`, each with its reason (from its stored error:
/// only a failed or cancelled run has one) and its duration.
pub async fn runs(pool: &Pool, filter: &RunFilter) -> anyhow::Result<Vec<Listed>> {
    let c = pool.get().await?;
    let listed = overview::runs(&c, filter).await?.into_iter().map(|row| {
        let reason = row.status.is_terminal().then(|| reason::of(row.error.as_ref())).flatten();
        let duration_ms = row.finished_at.map(|end| (end - row.created_at).num_milliseconds());
        Listed { row, reason, duration_ms }
    });
    Ok(listed.collect())
}

/// The waiting handoffs as a table.
pub fn waiting_table(rows: &[Waiting], now: DateTime<Utc>) -> String {
    if rows.is_empty() {
        return "(nothing waits for a person)\n".into();
    }
    let mut out = format!("{:<40}  {:<8}  {:<8}  {:<16}  {:>8}\n", "handoff", "waits", "source", "chat", "age");
    for w in rows {
        let waits =
            serde_json::to_value(w.waiting_for).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        let chat = w.chat.as_deref().unwrap_or("-");
        let _ = writeln!(
            out,
            "{:<40}  {:<8}  {:<8}  {:<16}  {:>8}",
            w.handoff_id,
            waits,
            w.source,
            cut(chat, 16),
            table::duration(now - w.since())
        );
        if let Some(q) = &w.question {
            let options = if q.options.is_empty() { String::new() } else { format!(" [{}]", q.options.join(" | ")) };
            let _ = writeln!(
                out,
                "    {} asks: {}{options} (expires {})",
                q.agent,
                cut(&q.text.replace('\n', " "), 100),
                q.expires_at.format("%Y-%m-%d %H:%M:%S")
            );
        }
    }
    out.push_str(
        "\n`baton handoff prompt ID` prints its prompt; `baton handoff paste-result ID FILE` answers a manual one;\n",
    );
    out.push_str("a question is answered by the bridge, or in the console (`/handoffs/ID`).\n");
    out
}

/// `baton runs show ID --json`: the run (with its reason, duration, chain
/// and per-agent rows), its journal, its invocations (with their
/// transcripts when `transcript`).
pub async fn run_json(c: &impl GenericClient, run: &Run, transcript: bool) -> anyhow::Result<Value> {
    let header = show::header(c, run).await?;
    let events: Vec<Value> = journal::timeline(c, run.id)
        .await?
        .into_iter()
        .map(|e| json!({"seq": e.seq, "invocationId": e.invocation_id, "agent": e.profile_id, "kind": e.kind, "payload": e.payload, "at": e.at}))
        .collect();
    let mut invocations = vec![];
    for inv in baton_store::invocations::for_run(c, run.id).await? {
        let mut v = json!({
            "id": inv.id, "parentInvocationId": inv.parent_invocation_id, "agent": inv.profile_id, "kind": inv.kind,
            "status": inv.status, "epoch": inv.claim_epoch, "takeovers": inv.takeovers, "tokens": inv.tokens_used,
        });
        if transcript {
            let steps = baton_store::invocations::steps::load(c, inv.id).await?;
            v["steps"] =
                steps.into_iter().map(|s| json!({"seq": s.seq, "kind": s.kind, "payload": s.payload})).collect();
        }
        invocations.push(v);
    }
    let run_value = json!({
        "id": run.id, "handoffId": run.handoff_id, "status": run.status, "rootProfileId": run.root_profile_id,
        "attempt": header.attempt, "finalText": run.final_text, "error": run.error.as_ref().map(baton_domain::run::state::Failure::to_value),
        "reason": header.reason, "durationMs": header.duration_ms, "chain": header.chain,
        "createdAt": run.created_at, "finishedAt": run.finished_at, "tokens": header.tokens,
    });
    Ok(json!({"run": run_value, "agents": header.agents, "events": events, "invocations": invocations}))
}

/// Each invocation's transcript for people: the prompt, each model turn
/// (its text and tool calls) and each tool result, one block per agent.
pub fn transcript_text(shown: &Value) -> String {
    let mut out = String::new();
    for inv in shown["invocations"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "\n== {} ({}, {}) ==", text(&inv["agent"]), text(&inv["kind"]), text(&inv["status"]));
        for step in inv["steps"].as_array().into_iter().flatten() {
            let p = &step["payload"];
            let line = match step["kind"].as_str().unwrap_or("") {
                "prompt" => format!("prompt: {}", one_line(&p["messages"][1]["content"], 160)),
                "model_turn" => {
                    let calls: Vec<String> = p["toolCalls"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| format!("{}({})", text(&c["name"]), one_line(&c["arguments"], 80)))
                        .collect();
                    format!("model: {} {}", one_line(&p["content"], 120), calls.join(" "))
                }
                "tool_result" => format!(
                    "{} {}: {}",
                    if p["isError"] == true { "tool error" } else { "tool" },
                    text(&p["name"]),
                    one_line(&p["content"], 120)
                ),
                other => format!("{other}: {}", one_line(p, 120)),
            };
            let _ = writeln!(out, "{:>4}  {}", step["seq"], line.trim_end());
        }
    }
    out
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

fn one_line(v: &Value, n: usize) -> String {
    if v.is_null() {
        return String::new();
    }
    cut(&text(v).replace('\n', " "), n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_with_their_unit() {
        assert_eq!(parse_age("90s").unwrap(), Duration::seconds(90));
        assert_eq!(parse_age("1h").unwrap(), Duration::hours(1));
        assert_eq!(parse_age("7d").unwrap(), Duration::days(7));
        assert!(parse_age("soon").is_err() && parse_age("3w").is_err());
    }

    #[test]
    fn cuts_are_marked() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }
}
