//! A realistic sample request (public: integration tests and the demo use it).

use serde_json::{json, Value};

use crate::protocol::language::Language;

// ---------------------------------------------------------------------------
// Test support (public: integration tests and the demo use it).
// ---------------------------------------------------------------------------

/// A realistic, valid `WeChat` handoff asking for a short announcement.
///
/// `target` and `language` are copied verbatim, so callers can also build
/// deliberately invalid requests; any language other than `zh-CN` gets
/// English text.
#[must_use]
pub fn sample_request_json(id: &str, target: &str, language: &str) -> Value {
    let chinese = language == Language::ZhCn.as_str();
    let (intent, ask, answer) = if chinese {
        (
            "帮我写一段简短的公告：本周五晚上 10 点到 12 点系统维护。",
            "周五晚上要停机维护，能帮我写个公告吗？",
            "好的，我请文档助手来写，稍后发给你。",
        )
    } else {
        (
            "Write a short announcement: the system is down for maintenance Friday 10pm to midnight.",
            "We have maintenance on Friday night, can you draft a notice?",
            "Sure, I'll ask the docs agent and send it to you shortly.",
        )
    };
    json!({
        "id": id,
        "source": "weixin",
        "targetAgent": target,
        "status": "requested",
        "userIntent": intent,
        "taskType": "docs_task",
        "priority": "normal",
        "context": {
            "id": format!("ctx_{id}"),
            "userId": "user_demo",
            "recentConversation": [
                { "role": "user", "content": ask, "createdAt": "2025-06-06T09:28:00+08:00" },
                { "role": "assistant", "content": answer, "createdAt": "2025-06-06T09:28:30+08:00" }
            ],
            "userMemories": [{
                "id": "mem_user_tone",
                "scope": "user",
                "type": "preference",
                "content": "Prefers short, friendly announcements without emoji.",
                "sensitivity": "low",
                "source": "weixin"
            }],
            "projectMemories": [],
            "redactions": []
        },
        "constraints": {
            "language": language,
            "allowedActions": ["draft_text", "read_context"],
            "forbiddenActions": ["send_messages", "modify_files"],
            "requireConfirmationFor": ["publish"],
            "expectedOutput": "announcement text under 150 words"
        },
        "callback": { "replyToChatId": "wxid_demo_chat" },
        "createdAt": "2025-06-06T09:30:00+08:00",
        "updatedAt": "2025-06-06T09:30:00+08:00"
    })
}
