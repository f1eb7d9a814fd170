//! The contract as files (`contract/`): the committed JSON Schemas and
//! TypeScript types are exactly what `baton contract` generates from the
//! Rust types; Baton's parser and the JSON Schema give the same verdict on
//! every body of the corpus, and the parser names the bad field by its full
//! path; every message Baton builds for a bridge is valid against its schema.
//! Pure: no service is touched. (ajv and the AsyncAPI parser check the same
//! files in `scripts/contract-check`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use baton_domain::protocol::bridge::{self, ReplyInput};
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::protocol::conversation::{answer, cancel, question};
use baton_domain::protocol::reply::Outcome;
use baton_domain::protocol::request::{parse_request, HandoffStatus};
use baton_domain::Language;
use serde_json::{json, Value};

const AT: &str = "2026-11-30T10:00:00.000Z";

fn contract_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").join("contract")
}

fn validator(name: &str) -> jsonschema::Validator {
    let path = contract_dir().join(format!("schema/{name}.schema.json"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn schema_errors(validator: &jsonschema::Validator, body: &Value) -> Vec<String> {
    validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

/// The corpus files of one kind (`good` or `bad`): name and raw body.
fn corpus(kind: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(contract_dir().join("corpus").join(kind))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

#[test]
fn contract_files_are_what_the_code_generates() {
    let files = baton::contract::generate().unwrap();
    assert!(files.contains_key("ts/index.ts") && files.contains_key("schema/HandoffRequest.schema.json"));
    let differ = baton::contract::differences(&contract_dir(), &files).unwrap();
    assert!(
        differ.is_empty(),
        "contract/ is not what the code generates; run `cargo run -p baton -- contract`:\n{}",
        differ.join("\n")
    );
}

/// Every queue the fleet declares is a channel of the AsyncAPI document, so
/// a queue added in the code cannot be missing from the contract.
#[test]
fn every_fleet_queue_is_a_channel_of_the_asyncapi_document() {
    let doc = std::fs::read_to_string(contract_dir().join("asyncapi.yaml")).unwrap();
    let missing: Vec<_> = baton_domain::fleet::Queue::ALL
        .iter()
        .map(|q| q.as_str())
        .filter(|name| !doc.lines().any(|line| line.trim() == format!("address: {name}")))
        .collect();
    assert!(missing.is_empty(), "queues missing from contract/asyncapi.yaml: {missing:?}");
}

#[test]
fn the_corpus_gets_the_same_verdict_from_the_parser_and_the_schema() {
    let schema = validator("HandoffRequest");
    let (good, bad) = (corpus("good"), corpus("bad"));
    assert!(good.len() + bad.len() >= 30, "a corpus of at least 30 bodies");
    let mut disagree = vec![];
    for (name, body) in &good {
        let value: Value = serde_json::from_slice(body).unwrap();
        if let Err(e) = parse_request(body) {
            disagree.push(format!("good/{name}: the parser refuses it: {}", e.reason));
        }
        let errors = schema_errors(&schema, &value);
        if !errors.is_empty() {
            disagree.push(format!("good/{name}: the schema refuses it: {errors:?}"));
        }
    }
    for (name, body) in &bad {
        let value: Value = serde_json::from_slice(body).unwrap();
        if parse_request(body).is_ok() {
            disagree.push(format!("bad/{name}: the parser accepts it"));
        }
        if schema.is_valid(&value) {
            disagree.push(format!("bad/{name}: the schema accepts it"));
        }
    }
    assert!(disagree.is_empty(), "\n{}", disagree.join("\n"));
}

#[test]
fn each_bad_body_is_refused_naming_the_field_by_its_full_path() {
    let path = contract_dir().join("corpus/reasons.json");
    let reasons: BTreeMap<String, String> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let bad = corpus("bad");
    assert_eq!(
        reasons.keys().collect::<Vec<_>>(),
        bad.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        "one reason per bad body"
    );
    let wrong: Vec<String> = bad
        .iter()
        .filter_map(|(name, body)| {
            let reason = parse_request(body).err()?.reason;
            (!reason.starts_with(&reasons[name])).then(|| format!("{name}: {reason:?}, expected {:?}", reasons[name]))
        })
        .collect();
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

fn reply_input(outcome: Outcome, chat: Option<&'static str>, run: Option<&str>) -> ReplyInput<'static> {
    ReplyInput {
        handoff_id: "h-1",
        chat_id: chat,
        source: "weixin",
        language: Language::ZhCn,
        outcome,
        run_id: run.map(str::to_string),
        agents: vec!["writer".into(), "editor".into()],
        changes: None,
        at: AT.to_string(),
    }
}

#[test]
fn every_message_baton_builds_for_a_bridge_is_valid_against_its_schema() {
    let at = AT.to_string();
    let mut messages = vec![];
    for status in HandoffStatus::ALL {
        messages.push(("BridgeStatus", bridge::status("h-1", status, 3, Some("wx"), at.clone())));
        messages.push(("StatusCallback", bridge::status("h-1", status, 1, None, at.clone())));
    }
    let outcomes = [
        Outcome::Completed { final_text: "Done.".into() },
        Outcome::Blocked { message: "waiting".into() },
        Outcome::Cancelled { reason: None },
    ];
    for outcome in
        outcomes.into_iter().chain(ErrorCode::ALL.map(|code| Outcome::Failed { code, message: "why".into() }))
    {
        messages.push(("BridgeReply", bridge::reply(&reply_input(outcome.clone(), Some("wx"), Some("r-1")))));
        messages.push(("BridgeReply", bridge::reply(&reply_input(outcome, None, None))));
    }
    // A coding agent's reply says what it changed (docs/bridge-protocol.md#coding-agent-results), pushed or not.
    for (branch, commit) in [(Some("baton/h-1"), Some("0123abcd")), (None, None)] {
        let mut input = reply_input(Outcome::Completed { final_text: "Done.".into() }, Some("wx"), Some("r-1"));
        input.changes = Some(bridge::ReplyChanges {
            project: "acme-web".into(),
            files: vec!["src/a.rs".into()],
            insertions: 3,
            deletions: 1,
            branch: branch.map(str::to_string),
            commit: commit.map(str::to_string),
        });
        let reply = bridge::reply(&input);
        assert_eq!(reply["result"]["changes"]["files"][0], "src/a.rs");
        messages.push(("BridgeReply", reply));
    }
    let options = ["yes".to_string(), "no".to_string()];
    for options in [&options[..], &[]] {
        let input = question::QuestionInput {
            handoff_id: "h-1",
            question_id: "q-1",
            chat_id: Some("wx"),
            source: "weixin",
            language: Language::En,
            question: "Publish now?",
            options,
            expires_at: at.clone(),
            at: at.clone(),
        };
        messages.push(("BridgeQuestion", question::message(&input)));
    }
    let invalid: Vec<String> = messages
        .iter()
        .filter_map(|(name, body)| {
            let errors = schema_errors(&validator(name), body);
            (!errors.is_empty()).then(|| format!("{name} {body}: {errors:?}"))
        })
        .collect();
    assert!(invalid.is_empty(), "\n{}", invalid.join("\n"));
}

#[test]
fn answers_and_cancels_get_the_same_verdict_from_the_parser_and_the_schema() {
    let an_answer = json!({"type": "answer", "id": "a-1", "handoffId": "h-1", "questionId": "q-1", "text": "yes", "at": "2026-11-30T10:00:00Z"});
    let a_cancel = json!({"type": "cancel", "id": "c-1", "handoffId": "h-1", "reason": "changed my mind", "at": "2026-11-30T10:00:00Z"});
    let edits: [(&str, Value); 9] = [
        ("type", json!("request")),
        ("id", json!("")),
        ("handoffId", json!(7)),
        ("at", json!("yesterday")),
        ("at", Value::Null),
        ("at", json!("2026-11-30T10:00:00+0100")),
        ("at", json!("2026-11-30 10:00:00+01:00")),
        ("at", json!("2026-11-30t10:00:00.5+01:00")),
        ("extra", json!([1])),
    ];
    let (answers, cancels) = (validator("BridgeAnswer"), validator("BridgeCancel"));
    let mut disagree = vec![];
    for (field, to) in std::iter::once(("extra", json!(null))).chain(edits) {
        for (body, schema, kind) in [(&an_answer, &answers, "answer"), (&a_cancel, &cancels, "cancel")] {
            let mut body = body.clone();
            body[field] = to.clone();
            let bytes = serde_json::to_vec(&body).unwrap();
            let parsed =
                if kind == "answer" { answer::parse(&bytes).is_ok() } else { cancel::parse_cancel(&bytes).is_ok() };
            if parsed != schema.is_valid(&body) {
                disagree.push(format!("{kind} with {field} = {to}: parser {parsed}, schema {}", !parsed));
            }
        }
    }
    assert!(disagree.is_empty(), "\n{}", disagree.join("\n"));
}

#[test]
fn baton_contract_check_names_the_files_that_differ_and_writing_mends_them() {
    let dir = std::env::temp_dir().join(format!("baton-contract-{}", uuid::Uuid::new_v4().simple()));
    let files = baton::contract::generate().unwrap();
    baton::contract::write(&dir, &files).unwrap();
    std::fs::write(dir.join("ts/BridgeReply.ts"), "export type BridgeReply = unknown;\n").unwrap();
    std::fs::write(dir.join("schema/Gone.schema.json"), "{}\n").unwrap();
    let baton = |args: &[&str]| {
        std::process::Command::new(baton_tests::baton_binary())
            .arg("contract")
            .args(args)
            .arg("--dir")
            .arg(&dir)
            .output()
            .unwrap()
    };

    let check = baton(&["--check"]);
    let said = String::from_utf8_lossy(&check.stderr).into_owned();
    assert_eq!(check.status.code(), Some(1), "{said}");
    assert!(said.contains("ts/BridgeReply.ts") && said.contains("schema/Gone.schema.json"), "{said}");
    assert!(!said.contains("HandoffRequest"), "only the files that differ: {said}");

    assert!(baton(&[]).status.success());
    assert!(!dir.join("schema/Gone.schema.json").exists());
    assert_eq!(baton(&["--check"]).status.code(), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}
