//! The four wire APIs of the scripted model server: where a request's
//! prompt and tool results are, and how a step is answered (streamed as the
//! real APIs stream, usage included: 100 tokens in, 10 out, per call).

use axum::body::Body;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::{Script, Step};

/// Tokens every answer reports.
pub const INPUT_TOKENS: i64 = 100;
pub const OUTPUT_TOKENS: i64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    AnthropicMessages,
    OpenAiResponses,
    ChatCompletions,
    Gemini,
}

/// The answer, whether it was a model call, and the earlier exchange's tool results.
pub(super) fn respond(api: Api, method: &Method, path: &str, body: &Value, script: &Script) -> (Response, bool, usize) {
    let is_call = method == Method::POST
        && match api {
            Api::AnthropicMessages => path.ends_with("/messages"),
            Api::OpenAiResponses => path.ends_with("/responses"),
            Api::ChatCompletions => path.ends_with("/chat/completions"),
            Api::Gemini => path.contains(":streamGenerateContent") || path.contains(":generateContent"),
        };
    if !is_call {
        return (side_answer(api, path), false, 0);
    }
    let exchange = Exchange::read(api, body);
    let step = if exchange.auxiliary { Step::Say { text: aux_text(api, body) } } else { exchange.next(script) };
    let workdir = workdir_of(body);
    let streamed = match api {
        Api::Gemini => path.contains(":streamGenerateContent"),
        _ => body["stream"] == Value::Bool(true),
    };
    let response = match api {
        Api::AnthropicMessages => anthropic(&step, &workdir, streamed),
        Api::OpenAiResponses => responses(&step, &exchange.tools),
        Api::ChatCompletions => chat(&step, &workdir, &exchange.tools, streamed),
        Api::Gemini => gemini(&step, streamed),
    };
    (response, true, exchange.earlier)
}

/// Where a request stands in its conversation.
struct Exchange {
    /// Tool results after the current prompt.
    after: usize,
    /// Tool results before it (an earlier session's), when there were model turns before it.
    earlier: usize,
    resumed: bool,
    /// No tool to edit files with: a title, summary or routing call.
    auxiliary: bool,
    tools: Vec<String>,
}

impl Exchange {
    fn read(api: Api, body: &Value) -> Exchange {
        let tools = tool_names(api, body);
        let items: Vec<Item> = items(api, body);
        let prompt = items.iter().rposition(|i| *i == Item::Prompt).unwrap_or(0);
        let after = items[prompt.min(items.len())..].iter().filter(|i| **i == Item::Result).count();
        let before = &items[..prompt.min(items.len())];
        let earlier = before.iter().filter(|i| **i == Item::Result).count();
        let resumed = before.contains(&Item::ModelTurn);
        let auxiliary = !tools.iter().any(|t| is_edit_tool(t) || is_shell_tool(t));
        Exchange { after, earlier, resumed, auxiliary, tools }
    }

    fn next(&self, script: &Script) -> Step {
        let steps = if self.resumed { &script.resumed } else { &script.first };
        match steps.get(self.after) {
            Some(Step::Say { .. }) | None if script.endless => Step::Shell { command: "echo again".into() },
            Some(step) => step.clone(),
            None => steps.last().cloned().unwrap_or(Step::Say { text: "Done.".into() }),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Item {
    Prompt,
    ModelTurn,
    Result,
}

/// A request's conversation, as prompts, model turns and tool results.
fn items(api: Api, body: &Value) -> Vec<Item> {
    let list = |key: &str| body[key].as_array().cloned().unwrap_or_default();
    let mut items = vec![];
    match api {
        Api::AnthropicMessages => {
            for m in list("messages") {
                let parts = m["content"].as_array().cloned().unwrap_or_default();
                let results = parts.iter().filter(|p| p["type"] == "tool_result").count();
                match m["role"].as_str() {
                    Some("assistant") => items.push(Item::ModelTurn),
                    Some("user") if results == 0 => items.push(Item::Prompt),
                    _ => items.extend((0..results).map(|_| Item::Result)),
                }
            }
        }
        Api::OpenAiResponses => {
            for i in list("input") {
                match (i["type"].as_str().unwrap_or("message"), i["role"].as_str()) {
                    ("message", Some("user")) if is_real_prompt(&i) => items.push(Item::Prompt),
                    ("message", Some("assistant")) | ("function_call" | "custom_tool_call", _) => {
                        items.push(Item::ModelTurn);
                    }
                    ("function_call_output" | "custom_tool_call_output" | "local_shell_call_output", _) => {
                        items.push(Item::Result);
                    }
                    _ => {}
                }
            }
        }
        Api::ChatCompletions => {
            for m in list("messages") {
                match m["role"].as_str() {
                    Some("user") => items.push(Item::Prompt),
                    Some("assistant") => items.push(Item::ModelTurn),
                    Some("tool") => items.push(Item::Result),
                    _ => {}
                }
            }
        }
        Api::Gemini => {
            for c in list("contents") {
                let parts = c["parts"].as_array().cloned().unwrap_or_default();
                let results = parts.iter().filter(|p| p.get("functionResponse").is_some()).count();
                match c["role"].as_str() {
                    Some("model") => items.push(Item::ModelTurn),
                    _ if results > 0 => items.extend((0..results).map(|_| Item::Result)),
                    _ => items.push(Item::Prompt),
                }
            }
        }
    }
    items
}

/// Codex puts its environment and instructions in user messages of their own.
fn is_real_prompt(item: &Value) -> bool {
    let text: String = item["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("");
    let text = text.trim_start();
    ![
        "<environment_context",
        "<user_instructions",
        "# AGENTS.md",
        "<INSTRUCTIONS>",
        "<permissions",
        "<skill",
        "<turn_aborted",
    ]
    .iter()
    .any(|tag| text.starts_with(tag))
}

fn tool_names(api: Api, body: &Value) -> Vec<String> {
    let mut names = vec![];
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    for t in tools {
        match api {
            Api::Gemini => {
                for d in t["functionDeclarations"].as_array().into_iter().flatten() {
                    names.extend(d["name"].as_str().map(str::to_string));
                }
            }
            _ => names.extend(t["name"].as_str().or(t["function"]["name"].as_str()).map(str::to_string)),
        }
    }
    names
}

fn is_edit_tool(name: &str) -> bool {
    ["Write", "write_file", "apply_patch", "edit", "replace"].contains(&name)
}

fn is_shell_tool(name: &str) -> bool {
    ["Bash", "run_shell_command", "shell", "shell_command", "exec_command"].contains(&name)
}

/// The agent's checkout, as Baton names it (`…/agents/<id>/work`), found in
/// the request: in its system prompt first (written for this run; a resumed
/// session's earlier turns name the checkout of an earlier run), else last.
fn workdir_of(body: &Value) -> String {
    let re = regex::Regex::new(r"(/[A-Za-z0-9._/+-]*/agents/[0-9a-f]{32}/work)").expect("a valid pattern");
    let system = [&body["system"], &body["systemInstruction"], &body["instructions"]];
    let chat_system = body["messages"].as_array().and_then(|m| m.iter().find(|m| m["role"] == "system")).cloned();
    for place in system.into_iter().chain(chat_system.as_ref()) {
        if let Some(found) = re.captures_iter(&place.to_string()).last() {
            return found[1].to_string();
        }
    }
    let text = body.to_string();
    re.captures_iter(&text).last().map(|c| c[1].to_string()).unwrap_or_else(|| ".".into())
}

fn absolute(workdir: &str, path: &str) -> String {
    format!("{}/{path}", workdir.trim_end_matches('/'))
}

/// An auxiliary call's answer: JSON where one is asked for (Gemini's routing and next-speaker checks).
fn aux_text(api: Api, body: &Value) -> String {
    let config = &body["generationConfig"];
    if api == Api::Gemini
        && (config["responseMimeType"] == "application/json" || config.get("responseJsonSchema").is_some())
    {
        return json!({"reasoning": "scripted", "next_speaker": "user", "complexity_reasoning": "scripted", "complexity_score": 10})
            .to_string();
    }
    "A scripted summary.".into()
}

/// Model lists, token counts and anything else a CLI asks on the side.
fn side_answer(api: Api, path: &str) -> Response {
    let body = match api {
        _ if path.ends_with("/count_tokens") => json!({"input_tokens": INPUT_TOKENS}),
        Api::Gemini if path.contains(":countTokens") => json!({"totalTokens": INPUT_TOKENS}),
        _ if path.ends_with("/models") => json!({"object": "list", "data": [], "models": []}),
        _ => {
            return (StatusCode::NOT_FOUND, axum::Json(json!({"error": {"message": format!("no route {path}")}})))
                .into_response()
        }
    };
    axum::Json(body).into_response()
}

fn sse(events: Vec<String>) -> Response {
    let text: String = events.concat();
    let mut response = Response::new(Body::from(text));
    response.headers_mut().insert("content-type", "text/event-stream".parse().expect("a header value"));
    response.headers_mut().insert("cache-control", "no-cache".parse().expect("a header value"));
    response
}

fn event(name: Option<&str>, data: &Value) -> String {
    match name {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

fn call_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn anthropic(step: &Step, workdir: &str, streamed: bool) -> Response {
    let (block, stop) = match step {
        Step::Say { text } => (json!({"type": "text", "text": text}), "end_turn"),
        Step::Write { path, content } => (
            json!({"type": "tool_use", "id": call_id("toolu"), "name": "Write",
                   "input": {"file_path": absolute(workdir, path), "content": content}}),
            "tool_use",
        ),
        Step::Shell { command } => (
            json!({"type": "tool_use", "id": call_id("toolu"), "name": "Bash",
                   "input": {"command": command, "description": "Run a command"}}),
            "tool_use",
        ),
    };
    let usage = json!({"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let id = call_id("msg");
    if !streamed {
        return axum::Json(json!({"id": id, "type": "message", "role": "assistant", "model": "scripted",
                                 "content": [block], "stop_reason": stop, "usage": usage}))
        .into_response();
    }
    let start_usage = json!({"input_tokens": INPUT_TOKENS, "output_tokens": 1});
    let mut events = vec![event(
        Some("message_start"),
        &json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": "scripted",
                 "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    )];
    let (start, delta) = if block["type"] == "text" {
        (json!({"type": "text", "text": ""}), json!({"type": "text_delta", "text": block["text"]}))
    } else {
        (
            json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
            json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
        )
    };
    events.push(event(
        Some("content_block_start"),
        &json!({"type": "content_block_start", "index": 0, "content_block": start}),
    ));
    events
        .push(event(Some("content_block_delta"), &json!({"type": "content_block_delta", "index": 0, "delta": delta})));
    events.push(event(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": 0})));
    events.push(event(
        Some("message_delta"),
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": usage}),
    ));
    events.push(event(Some("message_stop"), &json!({"type": "message_stop"})));
    sse(events)
}

fn responses(step: &Step, tools: &[String]) -> Response {
    let has = |name: &str| tools.iter().any(|t| t == name);
    // Without its patch tool (some models' metadata leave it out), a file is written by the shell.
    let written;
    let step = match step {
        Step::Write { path, content } if !has("apply_patch") => {
            let quoted = content.replace('\'', "'\\''");
            written = Step::Shell { command: format!("printf '%s' '{quoted}' > '{path}'") };
            &written
        }
        other => other,
    };
    let item = match step {
        Step::Say { text } => {
            json!({"type": "message", "id": call_id("msg"), "role": "assistant", "status": "completed",
                                     "content": [{"type": "output_text", "text": text, "annotations": []}]})
        }
        Step::Write { path, content } => {
            let added: String = content.lines().map(|l| format!("+{l}\n")).collect();
            let patch = format!("*** Begin Patch\n*** Add File: {path}\n{added}*** End Patch\n");
            json!({"type": "custom_tool_call", "id": call_id("ctc"), "call_id": call_id("call"), "name": "apply_patch",
                   "input": patch, "status": "completed"})
        }
        Step::Shell { command } => {
            let (name, args) = if has("exec_command") {
                ("exec_command", json!({"cmd": command, "yield_time_ms": 10000}))
            } else if has("shell_command") {
                ("shell_command", json!({"command": command}))
            } else {
                ("shell", json!({"command": ["bash", "-lc", command]}))
            };
            json!({"type": "function_call", "id": call_id("fc"), "call_id": call_id("call"), "name": name,
                   "arguments": args.to_string(), "status": "completed"})
        }
    };
    let id = call_id("resp");
    let usage = json!({"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    sse(vec![
        event(Some("response.created"), &json!({"type": "response.created", "response": {"id": id}})),
        event(
            Some("response.output_item.added"),
            &json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        ),
        event(
            Some("response.output_item.done"),
            &json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        event(
            Some("response.completed"),
            &json!({"type": "response.completed", "response": {"id": id, "usage": usage}}),
        ),
    ])
}

fn chat(step: &Step, workdir: &str, tools: &[String], streamed: bool) -> Response {
    let pick = |options: &[&str]| options.iter().find(|o| tools.iter().any(|t| t == *o)).map(ToString::to_string);
    let call = match step {
        Step::Say { .. } => None,
        Step::Write { path, content } => Some((
            pick(&["write_file", "edit"]).unwrap_or_else(|| "write_file".into()),
            json!({"file_path": absolute(workdir, path), "content": content}),
        )),
        Step::Shell { command } => Some((
            pick(&["run_shell_command", "shell"]).unwrap_or_else(|| "run_shell_command".into()),
            json!({"command": command, "description": "Run a command"}),
        )),
    };
    let usage = json!({"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS, "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    let id = call_id("chatcmpl");
    let (delta, finish) = match (&call, step) {
        (Some((name, args)), _) => (
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": call_id("call"), "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}}]}),
            "tool_calls",
        ),
        (None, Step::Say { text }) => (json!({"role": "assistant", "content": text}), "stop"),
        (None, _) => (json!({"role": "assistant", "content": ""}), "stop"),
    };
    if !streamed {
        let mut message = delta.clone();
        if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for c in calls {
                c.as_object_mut().map(|o| o.remove("index"));
            }
        }
        return axum::Json(json!({"id": id, "object": "chat.completion", "model": "scripted",
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}))
        .into_response();
    }
    sse(vec![
        event(
            None,
            &json!({"id": id, "object": "chat.completion.chunk", "model": "scripted",
                             "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}),
        ),
        event(
            None,
            &json!({"id": id, "object": "chat.completion.chunk", "model": "scripted",
                             "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
        ),
        event(
            None,
            &json!({"id": id, "object": "chat.completion.chunk", "model": "scripted", "choices": [], "usage": usage}),
        ),
        "data: [DONE]\n\n".to_string(),
    ])
}

fn gemini(step: &Step, streamed: bool) -> Response {
    let part = match step {
        Step::Say { text } => json!({"text": text}),
        Step::Write { path, content } => {
            json!({"functionCall": {"name": "write_file", "args": {"file_path": path, "content": content}}})
        }
        Step::Shell { command } => json!({"functionCall": {"name": "run_shell_command", "args": {"command": command}}}),
    };
    let answer = json!({
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": INPUT_TOKENS, "candidatesTokenCount": OUTPUT_TOKENS,
                          "totalTokenCount": INPUT_TOKENS + OUTPUT_TOKENS},
        "modelVersion": "scripted",
    });
    if !streamed {
        return axum::Json(answer).into_response();
    }
    let mut response = sse(vec![format!("data: {answer}\r\n\r\n")]);
    response.headers_mut().insert("content-type", "text/event-stream".parse().expect("a header value"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_step_follows_the_tool_results_after_the_prompt() {
        let script = Script::edit("hello.txt", "hi\n");
        let first = json!({"tools": [{"name": "Write"}, {"name": "Bash"}], "messages": [
            {"role": "user", "content": [{"type": "text", "text": "do it"}]},
            {"role": "assistant", "content": [{"type": "tool_use"}]},
            {"role": "user", "content": [{"type": "tool_result"}]},
        ]});
        let exchange = Exchange::read(Api::AnthropicMessages, &first);
        assert_eq!(exchange.next(&script), Step::Shell { command: "echo hi".into() });
        let resumed = json!({"tools": [{"name": "Write"}], "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [{"type": "tool_use"}]},
            {"role": "user", "content": [{"type": "tool_result"}]},
            {"role": "assistant", "content": [{"type": "text"}]},
            {"role": "user", "content": [{"type": "text", "text": "now also"}]},
        ]});
        let exchange = Exchange::read(Api::AnthropicMessages, &resumed);
        assert!(exchange.resumed && exchange.earlier == 1);
        assert!(matches!(exchange.next(&script), Step::Write { path, .. } if path == "FOLLOWUP.md"));
        assert!(Exchange::read(Api::AnthropicMessages, &json!({"messages": []})).auxiliary);
    }

    #[test]
    fn the_checkout_is_found_in_the_request() {
        let body =
            json!({"system": "Primary working directory: /tmp/b/agents/0123456789abcdef0123456789abcdef/work\n"});
        assert_eq!(workdir_of(&body), "/tmp/b/agents/0123456789abcdef0123456789abcdef/work");
    }
}
