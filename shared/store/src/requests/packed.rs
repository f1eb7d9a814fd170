//! A request's body as `handoff_requests.body` keeps it (V49): its JSON,
//! compressed.
//!
//! Postgres compresses a value only in a row over about 2 KB, and a
//! request's row is smaller: its body was three quarters of every request's
//! row and of its WAL. The body is written once and read by Baton only
//! (a root's brief, the reply, the console), so Baton compresses it:
//! zstd (the `zstd` crate, bindings to the reference library) with a
//! dictionary of the protocol's field names and common values, which is
//! what makes a body of a kilobyte or two compress well (the bench's
//! 1.3 KB request: about 0.5 KB).
//!
//! A stored body is one of:
//! - `0x01`, then a zstd frame made with [`DICTIONARY_1`];
//! - JSON text, as V49 converted the bodies stored before it (it starts
//!   with `{`).
//!
//! A dictionary is never edited: a better one is a new first byte, and
//! both stay readable.

use std::cell::RefCell;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Error, Result};

/// The first byte of a body compressed with [`DICTIONARY_1`].
const FORMAT_1: u8 = 1;

/// The level zstd compresses at: its default, fast for a kilobyte.
const LEVEL: i32 = 3;

/// What a decompressed body may not exceed: a bridge's request is far
/// smaller (the broker's message size bounds it), so more is a bad row.
const MAX_BODY: usize = 64 << 20;

/// Format 1's dictionary: the request's fields as a bridge writes them
/// (docs/bridge-protocol.md#requests), with the values most requests share.
/// Never edited (see the module's documentation).
pub const DICTIONARY_1: &str = concat!(
    r#"{"id":"","source":"weixin","targetAgent":"docs_agent","status":"requested","userIntent":"","taskType":"code_task","#,
    r#""projectId":"","priority":"normal","context":{"id":"ctx_","userId":"","projectId":"","recentConversation":["#,
    r#"{"role":"user","content":"","createdAt":"2025-01-01T00:00:00+08:00"},{"role":"assistant","content":"","createdAt":""}],"#,
    r#""userMemories":[{"id":"mem_","type":"preference","scope":"user","source":"weixin","content":"","sensitivity":"low"}],"#,
    r#""projectMemories":[{"id":"","type":"fact","scope":"project","content":"","sensitivity":"medium"}],"#,
    r#""sessionSummary":"","agentRuntimeSummary":"","redactions":[{"field":"","reason":""}]},"#,
    r#""constraints":{"language":"zh-CN","allowedActions":["read_context","draft_text"],"forbiddenActions":["send_messages","modify_files"],"#,
    r#""requireConfirmationFor":["publish"],"expectedOutput":""},"callback":{"statusUrl":"https://","replyToChatId":"wxid_"},"#,
    r#""conversationKey":"","createdAt":"2025-01-01T00:00:00.000Z","updatedAt":"2025-01-01T00:00:00.000Z"}"#,
    r#"{"id":"","source":"admin","targetAgent":"codex","status":"draft","taskType":"docs_task","priority":"high","#,
    r#""targetAgent":"claude_code","targetAgent":"qwen_code","taskType":"research_task","taskType":"debug_task","#,
    r#""taskType":"planning_task","role":"system","scope":"session","scope":"agent_runtime","sensitivity":"high","language":"en"}"#,
);

/// The body as stored: compressed JSON.
pub fn pack(body: &Value) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(body)?;
    let compressed = COMPRESSOR
        .with_borrow_mut(|slot| match slot {
            Some(c) => c.compress(&json),
            None => zstd::bulk::Compressor::with_dictionary(LEVEL, DICTIONARY_1.as_bytes())
                .and_then(|c| slot.insert(c).compress(&json)),
        })
        .map_err(|e| Error::Corrupt(format!("a request's body does not compress: {e}")))?;
    Ok([&[FORMAT_1][..], &compressed].concat())
}

/// A stored body, parsed as `T` (a [`Value`], or a `HandoffRequest` for a
/// reader that wants only that). `id` names the request in the error.
pub fn unpack<T: DeserializeOwned>(id: &str, stored: &[u8]) -> Result<T> {
    let corrupt = |why: String| Error::Corrupt(format!("handoff_requests {id}: its body does not read: {why}"));
    match stored.split_first() {
        Some((&FORMAT_1, frame)) => {
            let json = DECOMPRESSOR
                .with_borrow_mut(|slot| match slot {
                    Some(d) => d.decompress(frame, MAX_BODY),
                    None => zstd::bulk::Decompressor::with_dictionary(DICTIONARY_1.as_bytes())
                        .and_then(|d| slot.insert(d).decompress(frame, MAX_BODY)),
                })
                .map_err(|e| corrupt(format!("a compressed body that does not decompress: {e}")))?;
            serde_json::from_slice(&json).map_err(|e| corrupt(e.to_string()))
        }
        Some((b'{', _)) => serde_json::from_slice(stored).map_err(|e| corrupt(e.to_string())),
        Some((other, _)) => Err(corrupt(format!("an unknown format (first byte {other:#04x})"))),
        None => Err(corrupt("it is empty".into())),
    }
}

// A context per thread, with the dictionary loaded once: loading it costs
// more than compressing a kilobyte.
thread_local! {
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        baton_domain::protocol::request::sample_request_json(
            "bench-01a24705057d704cab7b7f343db26949",
            "docs_agent",
            "en",
        )
    }

    #[test]
    fn a_body_reads_back_as_it_was_written_and_smaller() {
        let body = sample();
        let packed = pack(&body).unwrap();
        assert_eq!(packed[0], FORMAT_1);
        assert_eq!(unpack::<Value>("r", &packed).unwrap(), body);
        let json = serde_json::to_vec(&body).unwrap().len();
        assert!(packed.len() * 2 < json, "{} bytes packed from {json}", packed.len());
    }

    #[test]
    fn a_body_stored_as_json_text_before_v49_still_reads() {
        let body = json!({"id": "h1", "userIntent": "你好"});
        assert_eq!(unpack::<Value>("h1", body.to_string().as_bytes()).unwrap(), body);
    }

    #[test]
    fn a_body_that_does_not_read_names_its_request_and_why() {
        for (stored, why) in [(&b""[..], "empty"), (&b"\x07abc"[..], "unknown format"), (&b"\x01abc"[..], "decompress")]
        {
            let e = unpack::<Value>("h9", stored).unwrap_err().to_string();
            assert!(e.contains("handoff_requests h9") && e.contains(why), "{e}");
        }
    }
}
