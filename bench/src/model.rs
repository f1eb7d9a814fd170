//! A tiny OpenAI-compatible model server on 127.0.0.1, started by the bench
//! for the model-over-HTTP path: each bench stage (named in its system
//! prompt) is answered at once with the tool calls a scripted stage makes.

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// The server's base URL (`http://127.0.0.1:PORT/v1`) and its task.
pub struct ModelServer {
    pub base_url: String,
    task: tokio::task::JoinHandle<()>,
}

impl ModelServer {
    pub async fn start() -> anyhow::Result<Self> {
        let app = Router::new().route("/v1/chat/completions", post(complete));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { base_url, task })
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// "You are bench stage K of N." somewhere in the conversation.
fn stage_of(body: &Value) -> Option<(u32, u32)> {
    let messages = body["messages"].as_array()?;
    messages.iter().filter_map(|m| m["content"].as_str()).find_map(|text| {
        let rest = &text[text.find("bench stage ")? + "bench stage ".len()..];
        let (k, rest) = rest.split_once(" of ")?;
        let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Some((k.parse().ok()?, n.parse().ok()?))
    })
}

fn call(name: &str, args: Value) -> Value {
    json!({"id": format!("call_{}", uuid::Uuid::now_v7().simple()), "type": "function",
           "function": {"name": name, "arguments": args.to_string()}})
}

async fn complete(Json(body): Json<Value>) -> Json<Value> {
    let calls = match stage_of(&body) {
        Some((k, n)) if k < n => vec![call(
            "agent_handoff",
            json!({"agentId": format!("h{}", k + 1), "handoff": {"objective": format!("Stage {}.", k + 1)}}),
        )],
        Some(_) => vec![
            call("workspace_write", json!({"path": "output/main.md", "content": "done"})),
            call("workspace_commit", json!({})),
            call("workspace_finish", json!({})),
        ],
        None => vec![],
    };
    let message = if calls.is_empty() {
        json!({"role": "assistant", "content": "(not a bench stage)"})
    } else {
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    };
    Json(json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50}
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stage_is_read_from_the_system_prompt() {
        let body = json!({"messages": [{"role": "system", "content": "Skills.\nYou are bench stage 7 of 32.\nMore."}]});
        assert_eq!(stage_of(&body), Some((7, 32)));
        assert_eq!(stage_of(&json!({"messages": []})), None);
    }
}
